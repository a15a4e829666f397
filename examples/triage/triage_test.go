package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/capabilities"
	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local"
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

func localRuntime(t *testing.T) *local.Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
	dir, err := os.MkdirTemp("", "tri") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt, err := local.New(local.Config{Dir: dir})
	if err != nil {
		t.Skipf("local runtime unavailable here: %v", err)
	}
	return rt
}

const testFile = `*** Begin Patch
*** Add File: tests/test_app.py
+import pathlib
+import sys
+
+sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "src"))
+
+from app import triage
+
+
+def test_outage_is_p1():
+    assert triage({"id": 1, "subject": "Site down", "body": "total outage"})["priority"] == "P1"
+
+
+def test_refund_goes_to_billing():
+    got = triage({"id": 2, "subject": "Refund please", "body": "charged twice"})
+    assert got == {"id": 2, "priority": "P2", "team": "billing"}
*** End Patch`

// TestTriageEndToEnd: a scripted model, over the real Responses wire
// format, reads the workspace in a real local sandbox, adds a test with
// apply_patch and runs pytest; the test checks what really came out of
// the sandbox.
func TestTriageEndToEnd(t *testing.T) {
	rt := localRuntime(t)
	ctx := context.Background()
	var sawRead, sawPytest string
	srv := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"cat README.md docs/release-checks.md src/app.py"}`),
		fake.Func(func(r *fake.Request) fake.Turn {
			sawRead, _ = r.ToolOutput("call_1")
			return fake.Custom("apply_patch", testFile)
		}),
		fake.Call("exec_command", `{"cmd":"python3 -m pytest -q","yield_time_ms":30000}`),
		fake.Func(func(r *fake.Request) fake.Turn {
			sawPytest, _ = r.ToolOutput("call_3")
			return fake.Text("Added tests/test_app.py; pytest passes (2 tests).")
		}),
	)
	model, err := openai.New(openai.Config{Model: "gpt-5.1", BaseURL: srv.URL, APIKey: "test-key", API: openai.Responses})
	if err != nil {
		t.Fatal(err)
	}
	a := &agent.Agent{Name: "triage", Instructions: "Inspect the workspace before answering.", Model: model,
		Sandbox: &agent.SandboxAgent{DefaultManifest: Workspace(), Capabilities: capabilities.Default()}}

	var mu sync.Mutex
	var exits []int
	var changed []string
	var final string
	cfg := agent.RunConfig{
		Sandbox: &agent.SandboxRunConfig{Runtime: rt, OnFinish: func(ctx context.Context, s sandbox.Session) error {
			rc, err := s.ReadFile(ctx, "tests/test_app.py")
			if err != nil {
				return err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			final = string(b)
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
	res, err := (&agent.Runner{}).Run(ctx, a, "Add tests for the triage rules and run them.", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sawRead, "PRIORITY_WORDS") || !strings.Contains(sawRead, "Release checks") || !strings.Contains(sawRead, "Process exited with code 0") {
		t.Errorf("the model did not get the workspace files from the sandbox:\n%s", sawRead)
	}
	if !strings.Contains(sawPytest, "2 passed") || !strings.Contains(sawPytest, "Process exited with code 0") {
		t.Errorf("pytest output the model got:\n%s", sawPytest)
	}
	if fmt.Sprint(exits) != "[0 0]" {
		t.Errorf("exit codes = %v, want [0 0]", exits)
	}
	if fmt.Sprint(changed) != "[created tests/test_app.py]" {
		t.Errorf("file changes = %v", changed)
	}
	if !strings.Contains(final, "def test_refund_goes_to_billing") {
		t.Errorf("tests/test_app.py in the sandbox = %q", final)
	}
	if res.Output != "Added tests/test_app.py; pytest passes (2 tests)." || res.Turns != 4 {
		t.Errorf("output %q after %d turns", res.Output, res.Turns)
	}
	// The instructions the model got carry the workspace tree.
	if reqs := srv.Requests(); len(reqs) == 0 || !strings.Contains(fmt.Sprint(reqs[0].Body["instructions"]), "release-checks.md") {
		t.Errorf("first request's instructions lack the workspace tree")
	}
	// The runner created the sandbox, so it deleted it.
	if infos, _ := rt.List(ctx); len(infos) != 0 {
		t.Errorf("sandboxes left after the run: %v", infos)
	}
}
