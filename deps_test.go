package cove_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/cove-sandbox/cove"

// The concrete implementations: only the wiring (cmd/, internal/app,
// internal/cli, examples/) and test support may depend on them, even
// through another package, and no implementation on a sibling.
var (
	runtimes = []string{"sandbox/hostproc", "sandbox/local", "sandbox/gvisor", "sandbox/kube", "sandbox/remote"}
	stores   = []string{"store/sqlite", "store/postgres"}
	models   = []string{"agent/model/openai", "agent/model/fake"}
)

// graph is the module's packages and their non-test imports.
type graph map[string][]string

// loadGraph lists the module's packages (paths relative to the module,
// "" for its root) with their direct imports, ours relative and others
// as they are.
func loadGraph(t *testing.T) graph {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := graph{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
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
		var imps []string
		for _, imp := range p.Imports {
			if local, ok := strings.CutPrefix(imp, module+"/"); ok {
				imp = local
			}
			imps = append(imps, imp)
		}
		g[rel(p.ImportPath)] = imps
	}
	if len(g) < 5 {
		t.Fatalf("go list found only %d packages", len(g))
	}
	return g
}

func rel(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }

// ours says whether an import (as loadGraph wrote it) is of this module.
func (g graph) ours(imp string) bool { _, ok := g[imp]; return ok }

// path returns a chain of imports from pkg to a package that bad matches
// (pkg first), or nil when there is none: the transitive check, with the
// chain to show how the dependency comes in.
func (g graph) path(pkg string, bad func(string) bool) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := prev[imp]; seen {
				continue
			}
			prev[imp] = p
			if bad(imp) {
				chain := []string{imp}
				for q := p; q != ""; q = prev[q] {
					chain = append([]string{q}, chain...)
					if q == pkg {
						break
					}
				}
				return chain
			}
			if g.ours(imp) {
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// under says whether p is pkg or below it.
func under(p string, pkgs ...string) bool {
	for _, pkg := range pkgs {
		if p == pkg || strings.HasPrefix(p, pkg+"/") {
			return true
		}
	}
	return false
}

// wiring: the packages that may pick concrete implementations.
func wiring(p string) bool {
	return p == "" || under(p, "cmd", "examples", "internal/app", "internal/cli")
}

// testSupport: packages that exist for tests (a conformance suite, a
// fake, a real runtime in a temp dir: a path segment ending in "test");
// they may run a real implementation underneath, and only tests may
// import them.
func testSupport(p string) bool {
	return strings.Contains(p+"/", "test/") || under(p, "agent/model/fake")
}

func show(chain []string) string {
	for i, p := range chain {
		if p == "" {
			chain[i] = "(root)"
		}
	}
	return strings.Join(chain, " -> ")
}

// TestDependencyDirection keeps the layering of ARCHITECTURE.md true,
// transitively: a rule broken through a third package is still broken.
func TestDependencyDirection(t *testing.T) {
	g := loadGraph(t)
	concrete := func(p string) bool { return under(p, runtimes...) || under(p, stores...) || under(p, models...) }
	// implOf is the implementation family a package belongs to ("" when
	// none): sandbox/local/cgroup belongs to sandbox/local.
	implOf := func(p string) string {
		for _, r := range slices.Concat(runtimes, stores, models) {
			if under(p, r) {
				return r
			}
		}
		return ""
	}
	rules := []struct {
		name string
		// applies to the importing package; bad is what it must not
		// reach, directly or not.
		applies func(pkg string) bool
		bad     func(pkg, imp string) bool
		why     string
	}{
		{"contract", func(p string) bool { return p == "sandbox" },
			func(_, imp string) bool { return strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") || g.ours(imp) },
			"the sandbox contract imports only the standard library"},
		{"concrete", func(p string) bool { return !wiring(p) && !testSupport(p) && implOf(p) == "" },
			func(_, imp string) bool { return concrete(imp) },
			"only the wiring (cmd, internal/app, internal/cli, examples) picks a concrete runtime, store or model"},
		{"siblings", func(p string) bool { return implOf(p) != "" && !testSupport(p) },
			func(pkg, imp string) bool { return concrete(imp) && implOf(imp) != implOf(pkg) },
			"an implementation never imports a sibling"},
		{"test support", func(p string) bool { return !testSupport(p) },
			func(_, imp string) bool { return testSupport(imp) },
			"test helpers are for tests only"},
		{"internal", func(p string) bool { return !wiring(p) },
			func(_, imp string) bool { return under(imp, "internal") },
			"internal packages are the wiring's"},
		{"compute plane", func(p string) bool { return under(p, "sandbox", "guest", "manifest", "template", "egress", "api") },
			func(_, imp string) bool { return under(imp, "agent", "server", "fleet", "runs", "store") },
			"the compute plane (sandbox/..., guest, manifest, template) and the wire types depend on no harness, service or server"},
		{"harness", func(p string) bool { return under(p, "agent") && !testSupport(p) },
			func(_, imp string) bool {
				return under(imp, "guest", "server", "fleet", "runs", "store", "internal") || concrete(imp)
			},
			"the harness sees sandboxes only through the sandbox contract"},
		{"services", func(p string) bool { return under(p, "fleet", "runs") },
			func(_, imp string) bool { return under(imp, "server") },
			"fleet and runs know no front door"},
		{"fleet", func(p string) bool { return under(p, "fleet") },
			func(_, imp string) bool { return under(imp, "runs", "agent") },
			"the sandbox service knows nothing of agent runs"},
	}
	for pkg := range g {
		for _, r := range rules {
			if !r.applies(pkg) {
				continue
			}
			if chain := g.path(pkg, func(imp string) bool { return r.bad(pkg, imp) }); chain != nil {
				t.Errorf("%s: %s (%s rule)", show(chain), r.why, r.name)
			}
		}
	}
}

// toolNames are the model-visible names the tools under agent/tool give
// themselves (Name: "..." in a tool's schema, or a Name constant).
func toolNames(t *testing.T) []string {
	t.Helper()
	// A tool's name has an underscore (exec_command, load_skill); that
	// keeps out other names, such as the MCP client's own ("cove").
	re := regexp.MustCompile(`(?m)(?:Name:\s*|const Name\s*=\s*)"([a-z][a-z0-9]*_[a-z0-9_]+)"`)
	seen := map[string]bool{}
	err := filepath.WalkDir("agent/tool", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			seen[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// stringsIn returns the string literals of a directory's non-test Go
// files, each with where it is.
func stringsIn(t *testing.T, dir string) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string][]string{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out[s] = append(out[s], fset.Position(lit.Pos()).String())
				}
			}
			return true
		})
	}
	return out
}

// TestToolsOwnTheirNames: the harness, the services, the front doors and
// the CLI know no tool by name; each tool says what it is (its risk, how
// to show a call), so a new tool needs no change anywhere else.
func TestToolsOwnTheirNames(t *testing.T) {
	names := toolNames(t)
	if len(names) < 5 {
		t.Fatalf("found only the tool names %v under agent/tool", names)
	}
	var dirs []string
	for _, d := range []string{"agent", "agent/capabilities", "runs", "fleet", "internal/cli", "internal/app"} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			dirs = append(dirs, d)
		}
	}
	filepath.WalkDir("server", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && !strings.Contains(p, "testdata") {
			dirs = append(dirs, p)
		}
		return nil
	})
	for _, dir := range dirs {
		lits := stringsIn(t, dir)
		for _, n := range names {
			for _, at := range lits[n] {
				t.Errorf("%s names the tool %q; let the tool describe itself instead", at, n)
			}
		}
	}
}

// TestServicesKnowNoHTTP: fleet and runs hold the domain; serving HTTP is
// the front doors' job (they may make HTTP requests: webhooks, models).
func TestServicesKnowNoHTTP(t *testing.T) {
	for _, dir := range []string{"fleet", "runs"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range []string{"http.ResponseWriter", "http.Handler", "http.ServeMux", "httptest."} {
				if strings.Contains(string(b), h) {
					t.Errorf("%s uses %s; a service serves no HTTP", f, h)
				}
			}
		}
	}
}
