// Command sales is a Cove sandbox agent doing an analyst's chore: given a
// month of order exports (data/sales.csv), flag the orders that look
// wrong, chart daily revenue by region with them marked, and write a PDF
// report. The agent writes and runs its own pandas and matplotlib code in
// a sandbox made from a Debian template with those packages; the program
// copies the results out at the end.
//
//	export OPENAI_API_KEY=sk-...
//	go build -o sales ./examples/sales && sudo -E ./sales [-out DIR] [TASK]
//
// The first run builds the "sales" template (a minute or two; see
// README.md). State lives where the cove CLI keeps its own as root,
// $COVE_HOME or /var/lib/cove, so `cove template ls` shows the template
// and `cove template rm sales` removes it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/capabilities"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local"
	"github.com/cove-sandbox/cove/template"
)

// templateName is the template the sandbox is made from.
const templateName = "sales"

// instructions hold the business's definition of an anomaly, so that
// every run flags by the same rules whatever the task's wording.
const instructions = `You are a sales analyst. The order export is data/sales.csv
(order_id,date,region,product,units,unit_price,revenue). Look at the data
before writing code. Python 3 with pandas and matplotlib is installed;
there is no network, so install nothing.

An order is an anomaly when any of these holds:
- units <= 0;
- |revenue - units*unit_price| > 1% of |units*unit_price|;
- revenue > 3 times the median revenue of its region.

Write a script, run it, and leave in the workspace root:
- flagged.csv: order_id and a reason for each anomalous order;
- chart.png: daily revenue by region, with the flagged orders marked;
- report.pdf: a summary table and the chart (matplotlib's PdfPages).
Use matplotlib's Agg backend. Answer with the flagged orders and why.`

const defaultTask = "Check this month's orders for anomalies and prepare the report."

func main() {
	// The local runtime re-executes this program as the sandbox's
	// supervisor and pid 1.
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "local-") {
		if err := local.Main(context.Background(), os.Args[1:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	out := flag.String("out", "sales-out", "directory to copy the agent's flagged.csv, chart.png and report.pdf into")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: sales [-out DIR] [TASK...]\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	task := defaultTask
	if flag.NArg() > 0 {
		task = strings.Join(flag.Args(), " ")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, task, *out); err != nil {
		fmt.Fprintln(os.Stderr, "sales:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, task, outDir string) error {
	if os.Geteuid() != 0 {
		// Say so before the template build, which would fail later and
		// less clearly.
		return errors.New("the local sandbox runtime needs root; run with sudo -E (to keep OPENAI_API_KEY)")
	}
	model, err := openai.New(openai.Config{Model: "gpt-5.1"})
	if err != nil {
		return err
	}
	home := os.Getenv("COVE_HOME")
	if home == "" {
		home = "/var/lib/cove" // the cove CLI's own, as root
	}
	st, err := template.Open(filepath.Join(home, "templates"))
	if err != nil {
		return err
	}
	tmpl, err := ensureTemplate(ctx, st, templateName, func(line string) { fmt.Fprintln(os.Stderr, "  "+line) })
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "→ template %s (%s)\n", tmpl.Name, template.HumanSize(tmpl.Size))
	rt, err := local.New(local.Config{Dir: filepath.Join(home, "sandboxes"), Templates: local.StoreTemplates{Store: st}})
	if err != nil {
		return err
	}

	a := &agent.Agent{
		Name:         "sales",
		Instructions: instructions,
		Model:        model,
		Sandbox:      &agent.SandboxAgent{DefaultManifest: Workspace(), Capabilities: capabilities.Default()},
	}
	res, err := (&agent.Runner{}).Run(ctx, a, task, agent.RunConfig{
		Sandbox: &agent.SandboxRunConfig{Runtime: rt, Spec: Spec(templateName),
			// The sandbox is deleted when the run ends: copy the results
			// out while it still exists.
			OnFinish: func(ctx context.Context, s sandbox.Session) error {
				saved, missing, err := saveArtifacts(ctx, s, outDir)
				for _, p := range saved {
					fmt.Fprintln(os.Stderr, "→ wrote", p)
				}
				if len(missing) > 0 {
					fmt.Fprintln(os.Stderr, "→ the agent did not produce", strings.Join(missing, ", "))
				}
				return err
			}},
		OnEvent: func(e agent.Event) {
			if e.Type == agent.EventToolCallStarted && e.Command != "" {
				fmt.Fprintln(os.Stderr, "$", e.Command)
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Println(res.Output)
	fmt.Fprintf(os.Stderr, "%d turns, %d tokens in, %d out\n", res.Turns, res.Usage.InputTokens, res.Usage.OutputTokens)
	return nil
}
