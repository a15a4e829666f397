package cli

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
)

// imageTar makes a one-layer image tarball in docker save's form.
func imageTar(t *testing.T) []byte {
	t.Helper()
	tarOf := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, name := range []string{"manifest.json", "config.json", "layer.tar", "etc/passwd", "hello"} {
			body, ok := files[name]
			if !ok {
				continue
			}
			tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
			tw.Write([]byte(body))
		}
		tw.Close()
		return buf.Bytes()
	}
	layer := tarOf(map[string]string{"etc/passwd": "root:x:0:0::/root:/bin/sh\n", "hello": "hi\n"})
	cfg, _ := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux", "config": map[string]any{"Env": []string{"A=1"}}})
	manifest := `[{"Config":"config.json","RepoTags":["hello:1"],"Layers":["layer.tar"]}]`
	return tarOf(map[string]string{"manifest.json": manifest, "config.json": string(cfg), "layer.tar": string(layer)})
}

func runTemplate(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = templateCmd(t.Context(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestTemplateCmd(t *testing.T) {
	state := t.TempDir()
	image := filepath.Join(t.TempDir(), "hello.tar")
	if err := os.WriteFile(image, imageTar(t), 0o600); err != nil {
		t.Fatal(err)
	}

	// ls on a new store: the built-in host template only.
	out, _, err := runTemplate(t, "ls", "--state-dir", state)
	if err != nil {
		t.Fatalf("ls: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], "host ") {
		t.Errorf("ls on a new store:\n%s", out)
	}

	// import, with the flag after the positional arguments.
	out, errOut, err := runTemplate(t, "import", "hello", image, "--state-dir", state)
	if err != nil {
		t.Fatalf("import: %v\n%s", err, errOut)
	}
	if !strings.HasPrefix(out, "hello\tsha256:") {
		t.Errorf("import printed %q, want the name and digest", out)
	}
	for _, want := range []string{"importing template hello", "layer 1/1 (", "added the sandbox user"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("import's progress lacks %q:\n%s", want, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "templates", "index.json")); err != nil {
		t.Errorf("templates are not under --state-dir/templates: %v", err)
	}

	// import from standard input, which is not seekable: a pipe.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { pw.Write(imageTar(t)); pw.Close() }()
	stdin := os.Stdin
	os.Stdin = pr
	out, errOut, err = runTemplate(t, "import", "--state-dir", state, "piped", "-")
	os.Stdin = stdin
	pr.Close()
	if err != nil {
		t.Fatalf("import from stdin: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "reading the image tarball") {
		t.Errorf("stdin import's progress:\n%s", errOut)
	}

	out, _, err = runTemplate(t, "ls", "--state-dir", state)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hello ", "piped ", "image hello:1"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls lacks %q:\n%s", want, out)
		}
	}

	// rm is refused while a sandbox uses the template.
	saved := templateInUse
	t.Cleanup(func() { templateInUse = saved })
	var gotState string
	templateInUse = func(ctx context.Context, stateDir string) (func(string) bool, error) {
		gotState = stateDir
		return func(string) bool { return true }, nil
	}
	_, _, err = runTemplate(t, "rm", "--state-dir", state, "hello")
	if !errors.Is(err, sandbox.ErrState) || clibase.ExitCode(err) != 1 {
		t.Errorf("rm of a template in use: %v (exit %d), want ErrState, exit 1", err, clibase.ExitCode(err))
	}
	if gotState != state {
		t.Errorf("in-use check asked about %q, want %q", gotState, state)
	}
	templateInUse = saved

	_, errOut, err = runTemplate(t, "rm", "--state-dir", state, "hello", "piped")
	if err != nil {
		t.Fatalf("rm: %v", err)
	}
	if !strings.Contains(errOut, "removed template hello") {
		t.Errorf("rm said %q", errOut)
	}
	out, _, _ = runTemplate(t, "ls", "--state-dir", state)
	if strings.Contains(out, "hello") || strings.Contains(out, "piped") {
		t.Errorf("ls after rm:\n%s", out)
	}

	tests := []struct {
		args []string
		want error
		msg  string
	}{
		{[]string{"rm", "--state-dir", state, "hello"}, sandbox.ErrNotFound, "cove template ls"},
		{[]string{"rm", "--state-dir", state, "host"}, sandbox.ErrInvalid, "built in"},
		{[]string{"import", "--state-dir", state, "x", filepath.Join(state, "missing.tar")}, os.ErrNotExist, "missing.tar"},
		{[]string{"import", "--state-dir", state, "bad/name", image}, sandbox.ErrInvalid, "template name"},
		{[]string{"build", "--state-dir", state, "x", "--packages", "ok,Bad_Name"}, sandbox.ErrInvalid, "Bad_Name"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:1], " ")+" "+tt.msg, func(t *testing.T) {
			_, _, err := runTemplate(t, tt.args...)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("%v: got %v, want %v mentioning %q", tt.args, err, tt.want, tt.msg)
			}
		})
	}
}

// Without --state-dir, templates live under $COVE_HOME/templates.
func TestTemplateCmdHome(t *testing.T) {
	h := t.TempDir()
	t.Setenv("COVE_HOME", h)
	if _, _, err := runTemplate(t, "ls"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h, "templates", "blobs")); err != nil {
		t.Errorf("no store under $COVE_HOME/templates: %v", err)
	}
}

func TestTemplateUsage(t *testing.T) {
	state := t.TempDir()
	// A wrong command line touches no state.
	h := t.TempDir()
	t.Setenv("COVE_HOME", h)
	defer func() {
		if entries, _ := os.ReadDir(h); len(entries) != 0 {
			t.Errorf("usage errors created %d entries in $COVE_HOME", len(entries))
		}
	}()
	tests := []struct {
		args    []string
		wantErr error
	}{
		{nil, clibase.ErrUsage},
		{[]string{"frobnicate"}, clibase.ErrUsage},
		{[]string{"ls", "--state-dir", state, "extra"}, clibase.ErrUsage},
		{[]string{"build", "--state-dir", state}, clibase.ErrUsage},
		{[]string{"build", "--state-dir", state, "a", "b"}, clibase.ErrUsage},
		{[]string{"import", "--state-dir", state, "only-name"}, clibase.ErrUsage},
		{[]string{"rm", "--state-dir", state}, clibase.ErrUsage},
		{[]string{"ls", "--no-such-flag"}, clibase.ErrUsage},
		{[]string{"import"}, clibase.ErrUsage},
		{[]string{"build"}, clibase.ErrUsage},
		{[]string{"rm"}, clibase.ErrUsage},
		{[]string{"ls", "x"}, clibase.ErrUsage},
		{[]string{"help"}, nil},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, errOut, err := runTemplate(t, tt.args...)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("got %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil && !strings.Contains(errOut, "cove template") {
				t.Errorf("no usage printed: %q", errOut)
			}
		})
	}
}
