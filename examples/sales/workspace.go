package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/template"
)

// salesCSV is embedded rather than read from the example's directory at
// run time, so the program (and its test) work from any working
// directory and from a binary copied elsewhere.
//
//go:embed sales.csv
var salesCSV []byte

// Workspace is what the agent starts with: the order export at
// data/sales.csv.
func Workspace() *manifest.Manifest {
	return &manifest.Manifest{Entries: map[string]manifest.Entry{
		"data/sales.csv": manifest.File{Content: salesCSV},
	}}
}

// Packages are what the analysis needs on top of Debian's minbase:
// the agent has no network in the sandbox, so it cannot pip install.
var Packages = []string{"python3-pandas", "python3-matplotlib"}

// Spec is the sandbox the agent works in: one made from the named
// template (built from Packages).
func Spec(templateName string) sandbox.Spec {
	return sandbox.Spec{
		Template: templateName,
		// matplotlib wants a writable config directory (for its font
		// cache) and, with no display, the Agg backend: set both so that
		// whatever script the model writes can render.
		Env: map[string]string{"MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib"},
	}
}

// Artifacts are the files the agent is asked to leave in the workspace
// root, in the order they are copied out.
var Artifacts = []string{"flagged.csv", "chart.png", "report.pdf"}

// ensureTemplate returns the named template from st, building it from
// Packages first when the store has none by that name. Building takes a
// while (downloading from the mirror, then unpacking 1.2 GB), so progress
// gets the bootstrapper's lines as they come.
func ensureTemplate(ctx context.Context, st *template.Store, name string, progress func(string)) (*template.Template, error) {
	t, err := st.Get(name)
	if err == nil || !errors.Is(err, sandbox.ErrNotFound) {
		return t, err
	}
	progress(fmt.Sprintf("building template %s: Debian %s minbase + %s; this takes a while, once", name, template.DefaultSuite, strings.Join(Packages, ", ")))
	t, err = st.Build(ctx, name, template.BuildOptions{Packages: Packages, Progress: progress})
	if errors.Is(err, sandbox.ErrExist) {
		// Another process built it while this one did too; the store
		// keeps the first, which is as good.
		return st.Get(name)
	}
	return t, err
}

// saveArtifacts copies Artifacts out of the sandbox into dir and returns
// the host paths it wrote and the names the agent did not produce. A
// missing file is not an error: the agent's answer says what went wrong,
// and the rest is still worth keeping.
func saveArtifacts(ctx context.Context, s sandbox.Session, dir string) (saved, missing []string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("saving artifacts: %w", err)
	}
	for _, name := range Artifacts {
		b, err := readFile(ctx, s, name)
		if errors.Is(err, sandbox.ErrNotFound) {
			missing = append(missing, name)
			continue
		}
		if err != nil {
			return saved, missing, fmt.Errorf("saving %s: %w", name, err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return saved, missing, fmt.Errorf("saving %s: %w", name, err)
		}
		saved = append(saved, p)
	}
	return saved, missing, nil
}

// readFile reads a whole file from the sandbox's workspace.
func readFile(ctx context.Context, s sandbox.Session, name string) ([]byte, error) {
	rc, err := s.ReadFile(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}
