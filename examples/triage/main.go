// Command triage is the basic flow of a Cove sandbox agent, as the OpenAI
// Agents SDK's tutorials show it in Python: a manifest with the three
// files of a small support-ticket triage service, a sandbox agent told to
// inspect the workspace before answering, one run, the final output.
//
//	export OPENAI_API_KEY=sk-...
//	sudo go run ./examples/triage "Which tickets would go to billing?"
//
// As root it uses the local runtime (namespaces, overlay root, seccomp);
// COVE_HOME sets where sandboxes live.
package main

import (
	"context"
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
)

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	question := "Review this service against docs/release-checks.md. What is missing?"
	if len(os.Args) > 1 {
		question = strings.Join(os.Args[1:], " ")
	}
	if err := run(ctx, question); err != nil {
		fmt.Fprintln(os.Stderr, "triage:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, question string) error {
	model, err := openai.New(openai.Config{Model: "gpt-5.1"})
	if err != nil {
		return err
	}
	home := os.Getenv("COVE_HOME")
	if home == "" {
		home = filepath.Join(os.TempDir(), "cove-triage")
	}
	rt, err := local.New(local.Config{Dir: filepath.Join(home, "sandboxes")})
	if err != nil {
		return err
	}
	a := &agent.Agent{
		Name:         "triage",
		Instructions: "You maintain a support-ticket triage service. Inspect the workspace (README, code, docs) before answering, and cite the files you used.",
		Model:        model,
		Sandbox:      &agent.SandboxAgent{DefaultManifest: Workspace(), Capabilities: capabilities.Default()},
	}
	res, err := (&agent.Runner{}).Run(ctx, a, question, agent.RunConfig{
		Sandbox: &agent.SandboxRunConfig{Runtime: rt, Spec: sandbox.Spec{Template: "host"}},
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
