package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
)

// TestImageServer: cove image server writes the image where --output
// says, whole (no temporary file left), and says what it wrote; bad
// usage says how to call it.
func TestImageServer(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "server.tar")
	stdout, stderr, err := run(t, "image", "server", "--output", out, "--tag", "registry.example/cove/server:1")
	if err != nil {
		t.Fatalf("cove image server: %v\n%s", err, stderr)
	}
	if stdout != "registry.example/cove/server:1\t"+out+"\n" {
		t.Errorf("stdout %q", stdout)
	}
	if fi, err := os.Stat(out); err != nil || fi.Size() < 1<<20 {
		t.Errorf("the image: %v, %v (want this program inside)", fi, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the output directory holds %v, want only the image", ents)
	}
	for _, args := range [][]string{{"image"}, {"image", "client", "--output", out}, {"image", "server"}, {"image", "server", "--output", out, "extra"}} {
		if _, stderr, err := run(t, args...); !errors.Is(err, clibase.ErrUsage) || !strings.Contains(stderr, "cove image server") {
			t.Errorf("cove %s: %v, %q; want a usage error", strings.Join(args, " "), err, stderr)
		}
	}
	if _, _, err := run(t, "image", "server", "--output", filepath.Join(dir, "no", "such", "dir", "x.tar")); err == nil {
		t.Errorf("an output in a missing directory: no error")
	}
}
