package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/capabilities"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local"
	"github.com/cove-sandbox/cove/template"
)

// The local runtime re-executes the test binary as a sandbox's
// supervisor and pid 1.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "local-") {
		if err := local.Main(context.Background(), os.Args[1:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// templateCache keeps the built template between runs: building it
// downloads and unpacks a few hundred MB from the mirror and takes
// minutes, using it takes none. The store is content-addressed and
// names a template only once its tree is complete, so a build killed
// halfway leaves nothing that a later run would use (template.Open
// deletes its leftovers).
const templateCache = "/var/cache/cove-test/templates"

// cachedName names the cached template after what it is built from,
// so a change to Packages or the suite builds a new one rather than
// reusing a stale one.
func cachedName() string {
	h := sha256.Sum256([]byte(template.DefaultSuite + "\n" + strings.Join(Packages, "\n")))
	return "sales-" + hex.EncodeToString(h[:6])
}

// salesTemplate returns the template store in templateCache with a whole
// template named cachedName(), building it when it is missing or
// damaged. It skips the test without root, or when the template has to
// be built and cannot be (no bootstrapper, no mirror).
//
// Test processes coordinate through a flock on a file beside the store:
// shared while a test uses the template, exclusive to build or repair
// it, so a concurrent run waits for the build rather than doing its own
// or deleting a template in use.
func salesTemplate(t *testing.T) *template.Store {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the local runtime and template builds need root (CI runs as root)")
	}
	name := cachedName()
	if err := os.MkdirAll(filepath.Dir(templateCache), 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(templateCache+".lock", os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // releases the flock
	flock(t, lock, syscall.LOCK_SH)
	start := time.Now()
	st, tm, err := cachedTemplate(name)
	if err == nil {
		t.Logf("template %s from %s (%s), in %s", name, templateCache, template.HumanSize(tm.Size), time.Since(start).Round(time.Millisecond))
		return st
	}

	flock(t, lock, syscall.LOCK_EX)
	defer flock(t, lock, syscall.LOCK_SH)
	// Another run may have built it while this one waited for the lock.
	if st, tm, err = cachedTemplate(name); err == nil {
		t.Logf("template %s built by another run (%s)", name, template.HumanSize(tm.Size))
		return st
	}
	if st != nil && errors.Is(err, sandbox.ErrNotFound) {
		// Never built, or its files are damaged: drop the name, if it is
		// there, so Build can give it again.
		st.Remove(name, nil)
	} else {
		// The store itself cannot be read (a corrupt index): it is only
		// a cache, start a new one.
		t.Logf("template cache %s is unusable (%v); starting afresh", templateCache, err)
		if err := os.RemoveAll(templateCache); err != nil {
			t.Fatal(err)
		}
		if st, err = template.Open(templateCache); err != nil {
			t.Fatal(err)
		}
	}
	checkMirror(t)
	var lines []string
	start = time.Now()
	tm, err = ensureTemplate(t.Context(), st, name, func(l string) { lines = append(lines, l) })
	switch {
	case errors.Is(err, sandbox.ErrUnavailable):
		t.Skipf("cannot build the template here (scripts/deps.sh installs mmdebstrap): %v", err)
	case err != nil:
		t.Fatalf("building template %s: %v\n%s", name, err, strings.Join(lines, "\n"))
	}
	t.Logf("built template %s in %s: %s, cached in %s", name, time.Since(start).Round(time.Second), template.HumanSize(tm.Size), templateCache)
	return st
}

// cachedTemplate opens the cache and returns the named template if it
// is there and whole. A missing or damaged template is an error wrapping
// sandbox.ErrNotFound; st is nil when the store cannot be opened.
func cachedTemplate(name string) (st *template.Store, tm *template.Template, err error) {
	if st, err = template.Open(templateCache); err != nil {
		return nil, nil, err
	}
	if tm, err = st.Get(name); err != nil {
		return st, nil, err
	}
	// Files were deleted under the store (a cleaner of /var/cache, say):
	// the index still names the template, but sandboxes would fail.
	for _, p := range []string{"usr/bin/python3", "usr/lib/python3/dist-packages/pandas/__init__.py", "usr/lib/python3/dist-packages/matplotlib/__init__.py"} {
		if _, err := os.Lstat(filepath.Join(tm.RootFS, p)); err != nil {
			return st, nil, fmt.Errorf("template %s lacks /%s: %w", name, p, sandbox.ErrNotFound)
		}
	}
	return st, tm, nil
}

func flock(t *testing.T, f *os.File, how int) {
	t.Helper()
	if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err == nil {
		return
	}
	if how == syscall.LOCK_EX {
		t.Logf("waiting for other test runs that use %s", templateCache)
	} else {
		t.Logf("waiting for another test run to build the template in %s", templateCache)
	}
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if err == nil {
			return
		}
		if err != syscall.EINTR {
			t.Fatalf("locking %s: %v", f.Name(), err)
		}
	}
}

// checkMirror skips the test when the Debian mirror cannot be reached,
// before a build that would fail after minutes.
func checkMirror(t *testing.T) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Head(template.DefaultMirror + "/dists/" + template.DefaultSuite + "/Release")
	if err != nil {
		t.Skipf("the template must be built and the Debian mirror is unreachable: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Skipf("the template must be built and the Debian mirror answers %s", resp.Status)
	}
}

func localRuntime(t *testing.T, st *template.Store) *local.Runtime {
	t.Helper()
	dir, err := os.MkdirTemp("", "sal") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := local.New(local.Config{Dir: dir, Templates: local.StoreTemplates{Store: st}})
	if err != nil {
		t.Skipf("local runtime unavailable here: %v", err)
	}
	return rt
}

// wantFlagged applies the anomaly rules to sales.csv in Go, apart from
// the Python under test, and returns the flagged order ids in file order
// and the number of orders. It fails when a rule flags nothing: the data would no longer test it.
func wantFlagged(t *testing.T) (ids []string, orders int) {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(salesCSV)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	type order struct {
		id, region            string
		units, price, revenue float64
	}
	num := func(row []string, name string) float64 {
		v, err := strconv.ParseFloat(row[col[name]], 64)
		if err != nil {
			t.Fatalf("sales.csv: %s %q: %v", name, row[col[name]], err)
		}
		return v
	}
	var all []order
	byRegion := map[string][]float64{}
	for _, row := range rows[1:] {
		o := order{id: row[col["order_id"]], region: row[col["region"]], units: num(row, "units"), price: num(row, "unit_price"), revenue: num(row, "revenue")}
		all = append(all, o)
		byRegion[o.region] = append(byRegion[o.region], o.revenue)
	}
	median := map[string]float64{}
	for r, v := range byRegion {
		slices.Sort(v)
		n := len(v)
		median[r] = (v[(n-1)/2] + v[n/2]) / 2 // pandas' median: the mean of the middle two when n is even
	}
	hits := make([]int, 3)
	for _, o := range all {
		expected := o.units * o.price
		rules := []bool{
			o.units <= 0,
			math.Abs(o.revenue-expected) > 0.01*math.Abs(expected),
			o.revenue > 3*median[o.region],
		}
		if slices.Contains(rules, true) {
			ids = append(ids, o.id)
		}
		for i, hit := range rules {
			if hit {
				hits[i]++
			}
		}
	}
	if slices.Contains(hits, 0) {
		t.Fatalf("orders flagged by each rule (units, revenue mismatch, region outlier) = %v: sales.csv no longer exercises every rule", hits)
	}
	return ids, len(all)
}

// analyzePy is the script the scripted model writes: what a model asked
// for the report would write, checked here against the Go rules.
const analyzePy = `"""Flag anomalous orders in data/sales.csv and report them.

Writes flagged.csv (order_id, reason), chart.png (daily revenue by region
with the flagged orders marked) and report.pdf (summary tables and the chart).
"""
import os
import tempfile

# matplotlib writes a font cache into its config directory, which must be
# writable; set before matplotlib is imported.
os.environ.setdefault("MPLCONFIGDIR", tempfile.mkdtemp(prefix="mpl-"))

import matplotlib

matplotlib.use("Agg")  # no display in the sandbox
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages

df = pd.read_csv("data/sales.csv", parse_dates=["date"])
expected = df["units"] * df["unit_price"]
region_median = df.groupby("region")["revenue"].transform("median")
rules = {
    "units <= 0": df["units"] <= 0,
    "revenue differs from units x unit_price by more than 1%": (df["revenue"] - expected).abs() > 0.01 * expected.abs(),
    "revenue above 3x the region's median": df["revenue"] > 3 * region_median,
}
df["reason"] = ["; ".join(name for name, hit in rules.items() if hit[i]) for i in df.index]
flagged = df[df["reason"] != ""]
flagged[["order_id", "reason"]].to_csv("flagged.csv", index=False)

daily = df.pivot_table(index="date", columns="region", values="revenue", aggfunc="sum")
fig, ax = plt.subplots(figsize=(10, 5))
for region in daily.columns:
    ax.plot(daily.index, daily[region], marker=".", label=region)
marks = [daily.at[d, r] for d, r in zip(flagged["date"], flagged["region"])]
ax.scatter(flagged["date"], marks, color="red", marker="x", s=80, zorder=3, label="flagged")
for d, y, oid in zip(flagged["date"], marks, flagged["order_id"]):
    ax.annotate(str(oid), (d, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
ax.set_title("Daily revenue by region")
ax.set_ylabel("revenue")
ax.legend()
fig.autofmt_xdate()
fig.tight_layout()
fig.savefig("chart.png", dpi=100)

summary = df.groupby("region").agg(orders=("order_id", "count"), revenue=("revenue", "sum"))
summary.loc["total"] = [len(df), df["revenue"].sum()]
rows = flagged.assign(date=flagged["date"].dt.strftime("%Y-%m-%d"))
with PdfPages("report.pdf") as pdf:
    page, (top, bottom) = plt.subplots(2, 1, figsize=(8.27, 11.69))
    page.suptitle(f"Sales anomalies: {len(flagged)} of {len(df)} orders flagged")
    top.axis("off")
    top.set_title("Revenue by region")
    top.table(
        cellText=[[r, int(n), f"{v:,.2f}"] for r, (n, v) in summary.iterrows()],
        colLabels=["region", "orders", "revenue"],
        loc="center",
    )
    bottom.axis("off")
    bottom.set_title("Flagged orders")
    table = bottom.table(
        cellText=rows[["order_id", "date", "region", "revenue", "reason"]].astype(str).values.tolist(),
        colLabels=["order", "date", "region", "revenue", "reason"],
        colWidths=[0.1, 0.15, 0.1, 0.12, 0.53],
        loc="upper center",
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    pdf.savefig(page)
    pdf.savefig(fig)

print(f"flagged {len(flagged)} of {len(df)} orders")
print(flagged[["order_id", "region", "revenue", "reason"]].to_string(index=False))
`

// addFilePatch is an apply_patch input that creates name with content.
func addFilePatch(name, content string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*** Begin Patch\n*** Add File: %s\n", name)
	for _, line := range strings.Split(strings.TrimSuffix(content, "\n"), "\n") {
		b.WriteString("+" + line + "\n")
	}
	b.WriteString("*** End Patch")
	return b.String()
}

var (
	runningRE = regexp.MustCompile(`Process running with session ID (\d+)`)
	flaggedRE = regexp.MustCompile(`flagged (\d+) of (\d+) orders`)
)

// TestSalesEndToEnd: a scripted model, over the real Responses wire
// format, looks at the CSV in a real local sandbox made from a Debian
// template with pandas and matplotlib, writes an analysis script with
// apply_patch and runs it; the test checks what the script really left
// in the sandbox against the rules computed here in Go.
func TestSalesEndToEnd(t *testing.T) {
	st := salesTemplate(t)
	rt := localRuntime(t, st)
	want, orders := wantFlagged(t)
	ctx := t.Context()

	// The script's turns run on the fake server's goroutines.
	var mu sync.Mutex
	var sawHead, sawRun string
	polls := 0
	srv := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"head -5 data/sales.csv"}`),
		fake.Func(func(r *fake.Request) fake.Turn {
			mu.Lock()
			defer mu.Unlock()
			sawHead, _ = r.ToolOutput("call_1")
			return fake.Custom("apply_patch", addFilePatch("analyze.py", analyzePy))
		}),
		fake.Call("exec_command", `{"cmd":"python3 analyze.py","yield_time_ms":30000}`),
		// Importing pandas and matplotlib's first font scan are slow: while
		// the command still runs, poll it (call_4, call_5, ...) as a model
		// would, then answer from what the script printed.
		fake.Func(func(r *fake.Request) fake.Turn {
			mu.Lock()
			defer mu.Unlock()
			out, _ := r.ToolOutput(fmt.Sprintf("call_%d", 3+polls))
			sawRun += out
			if m := runningRE.FindStringSubmatch(out); m != nil && polls < 10 {
				polls++
				return fake.Call("write_stdin", fmt.Sprintf(`{"session_id":%s,"chars":"","yield_time_ms":30000}`, m[1]))
			}
			m := flaggedRE.FindString(sawRun)
			if m == "" {
				return fake.Text("The script printed no summary.")
			}
			return fake.Text(strings.ToUpper(m[:1]) + m[1:] + "; details in flagged.csv, chart in chart.png, both in report.pdf.")
		}).Forever(),
	)
	model, err := openai.New(openai.Config{Model: "gpt-5.1", BaseURL: srv.URL, APIKey: "test-key", API: openai.Responses})
	if err != nil {
		t.Fatal(err)
	}
	a := &agent.Agent{Name: "sales", Instructions: instructions, Model: model,
		Sandbox: &agent.SandboxAgent{DefaultManifest: Workspace(), Capabilities: capabilities.Default()}}

	out := t.TempDir()
	var saved, missing []string
	var exits []int
	var changed []string
	cfg := agent.RunConfig{
		Sandbox: &agent.SandboxRunConfig{Runtime: rt, Spec: Spec(cachedName()),
			// The program's own copy-out, reading through the Session.
			OnFinish: func(ctx context.Context, s sandbox.Session) error {
				var err error
				saved, missing, err = saveArtifacts(ctx, s, out)
				return err
			}},
		OnEvent: func(e agent.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case e.Type == agent.EventToolCallFinished && e.ExitCode != nil:
				exits = append(exits, *e.ExitCode)
			case e.Type == agent.EventFileChanged:
				changed = append(changed, e.Action+" "+e.Path)
			}
		},
	}
	start := time.Now()
	res, err := (&agent.Runner{}).Run(ctx, a, defaultTask, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent run in %s (%d turns, %d polls)", time.Since(start).Round(time.Millisecond), res.Turns, polls)
	mu.Lock()
	defer mu.Unlock()

	if !strings.Contains(sawHead, "order_id,date,region,product,units,unit_price,revenue") || !strings.Contains(sawHead, "Process exited with code 0") {
		t.Errorf("the model did not get the CSV's head from the sandbox:\n%s", sawHead)
	}
	if !strings.Contains(sawRun, "Process exited with code 0") || !flaggedRE.MatchString(sawRun) {
		t.Errorf("python3 analyze.py output the model got:\n%s", sawRun)
	}
	if fmt.Sprint(exits) != "[0 0]" {
		t.Errorf("exit codes = %v, want [0 0] (head, python3)", exits)
	}
	// The patch's file, then what the script wrote (found by comparing
	// the workspace after the command and its polls).
	slices.Sort(changed)
	if fmt.Sprint(changed) != "[created analyze.py created chart.png created flagged.csv created report.pdf]" {
		t.Errorf("file changes = %v", changed)
	}
	if len(missing) != 0 || len(saved) != len(Artifacts) {
		t.Fatalf("artifacts saved %v, missing %v", saved, missing)
	}

	// flagged.csv: the same orders as the rules computed in Go.
	b, _ := os.ReadFile(filepath.Join(out, "flagged.csv"))
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(rows) == 0 || !slices.Equal(rows[0], []string{"order_id", "reason"}) {
		t.Fatalf("flagged.csv (%v):\n%s", err, b)
	}
	var got []string
	for _, row := range rows[1:] {
		got = append(got, row[0])
		if row[1] == "" {
			t.Errorf("flagged.csv: order %s has no reason", row[0])
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flagged order ids (-want +got):\n%s", diff)
	}

	// chart.png: a real PNG of a sensible size.
	b, _ = os.ReadFile(filepath.Join(out, "chart.png"))
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("chart.png does not start with the PNG signature: % x", b[:min(len(b), 8)])
	}
	if img, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Errorf("chart.png: %v", err)
	} else if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w < 400 || h < 300 || w > 4000 || h > 4000 {
		t.Errorf("chart.png is %dx%d pixels, want a chart between 400x300 and 4000x4000", w, h)
	}

	// report.pdf: a whole PDF (header to end-of-file marker).
	b, _ = os.ReadFile(filepath.Join(out, "report.pdf"))
	if !bytes.HasPrefix(b, []byte("%PDF-")) || !bytes.HasSuffix(bytes.TrimRight(b, "\r\n"), []byte("%%EOF")) {
		t.Errorf("report.pdf (%d bytes) lacks the %%PDF- header or the %%%%EOF trailer", len(b))
	}

	wantOutput := fmt.Sprintf("Flagged %d of %d orders; details in flagged.csv, chart in chart.png, both in report.pdf.", len(want), orders)
	if res.Output != wantOutput {
		t.Errorf("output %q, want %q", res.Output, wantOutput)
	}
	// The runner created the sandbox, so it deleted it.
	if infos, _ := rt.List(ctx); len(infos) != 0 {
		t.Errorf("sandboxes left after the run: %v", infos)
	}
}
