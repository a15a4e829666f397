package cove_test

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/cove-sandbox/cove"

// runtimes are the concrete sandbox runtimes: only the wiring (cmd,
// internal/cli, internal/app) may import them, and never each other.
var runtimes = []string{"sandbox/hostproc", "sandbox/local", "sandbox/kube", "sandbox/remote"}

// TestDependencyDirection keeps the layering of ARCHITECTURE.md true: the
// domain packages import nothing heavy, implementations do not import
// their siblings, and only the wiring picks concrete implementations.
func TestDependencyDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	imports := map[string][]string{}
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		imports[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p.Imports
	}
	if len(imports) < 5 {
		t.Fatalf("go list found only %d packages", len(imports))
	}
	isRuntime := func(p string) bool {
		for _, r := range runtimes {
			if p == r {
				return true
			}
		}
		return false
	}
	wiring := func(p string) bool {
		return p == "" || strings.HasPrefix(p, "cmd/") || strings.HasPrefix(p, "examples/") || strings.HasPrefix(p, "internal/cli") || strings.HasPrefix(p, "internal/app")
	}
	// A test helper (sandboxtest and below, hostproctest) may make a real
	// runtime for tests; only tests may import it.
	testHelper := func(p string) bool { return strings.Contains(p+"/", "test/") }
	for pkg, imps := range imports {
		for _, imp := range imps {
			local, ours := strings.CutPrefix(imp, module+"/")
			switch {
			case pkg == "sandbox" && strings.Contains(imp, "."):
				t.Errorf("sandbox (the contract) imports %s; it may import only the standard library", imp)
			case pkg == "sandbox" && ours:
				t.Errorf("sandbox (the contract) imports %s", imp)
			case ours && isRuntime(local) && !wiring(pkg) && !testHelper(pkg):
				t.Errorf("%s imports the runtime %s; only the wiring (cmd, internal/cli, internal/app) may", pkg, local)
			case ours && testHelper(local) && !testHelper(pkg):
				t.Errorf("%s imports the test helper %s; only tests may", pkg, local)
			case ours && strings.HasPrefix(local, "internal/") && !wiring(pkg):
				t.Errorf("%s imports %s; internal packages are the wiring's", pkg, local)
			case (strings.HasPrefix(pkg, "sandbox") || pkg == "guest" || pkg == "manifest") && ours && strings.HasPrefix(local, "agent"):
				t.Errorf("%s imports %s; the compute plane must not depend on the harness", pkg, local)
			case strings.HasPrefix(pkg, "agent") && ours && (isRuntime(local) || local == "guest"):
				t.Errorf("%s imports %s; the harness sees sandboxes only through the sandbox contract", pkg, local)
			}
		}
	}
}
