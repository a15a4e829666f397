package template

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
)

// TestBuild bootstraps a real Debian minbase tree with one small extra
// package from the mirror. It needs root, mmdebstrap or debootstrap, and
// the mirror; CI has all three.
func TestBuild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("building a Debian template needs root (debootstrap and mmdebstrap's root mode)")
	}
	tool, err := findTool(os.Getenv("COVE_TEST_BOOTSTRAPPER"))
	if err != nil {
		t.Skipf("no bootstrapper: %v (scripts/deps.sh installs mmdebstrap)", err)
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Head(DefaultMirror + "/dists/" + DefaultSuite + "/Release")
	if err != nil {
		t.Skipf("the Debian mirror is unreachable: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Skipf("the Debian mirror answers %s", resp.Status)
	}

	st, err := Open(tempDir(t))
	if err != nil {
		t.Fatal(err)
	}

	// Cancelled halfway: the bootstrapper's processes are killed and its
	// tree, mounts included, is gone.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	_, err = st.Build(ctx, "cancelled", BuildOptions{Tool: filepath.Base(tool)})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Build past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(st.Dir(), "tmp")); len(entries) != 0 {
		t.Errorf("tmp holds %d entries after a cancelled Build", len(entries))
	}
	if ms, _ := mountinfo.Under(st.Dir()); len(ms) != 0 {
		t.Errorf("mounts left after a cancelled Build: %v", ms)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); strings.Contains(string(b), st.Dir()) {
			t.Errorf("process %s still runs: %q", p, b)
		}
	}

	// A package the mirror does not have is named in the error.
	// Generous: mmdebstrap fetches the mirror's index first, which took
	// over a minute on a loaded machine.
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Minute)
	_, err = st.Build(ctx, "unknown", BuildOptions{Tool: filepath.Base(tool), Packages: []string{"cove-no-such-package"}})
	cancel()
	if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "cove-no-such-package") {
		t.Errorf("Build with an unknown package: %v, want ErrNotFound naming it", err)
	} else {
		t.Logf("unknown package: %v", err)
	}

	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	var lines []string
	start := time.Now()
	tmpl, err := st.Build(ctx, "hello", BuildOptions{
		Packages: []string{"hello"},
		Tool:     filepath.Base(tool),
		Progress: func(l string) { lines = append(lines, l) },
	})
	if err != nil {
		t.Fatalf("Build with %s: %v\n%s", tool, err, strings.Join(lines, "\n"))
	}
	t.Logf("built with %s in %s: %s, %d bytes", filepath.Base(tool), time.Since(start).Round(time.Second), tmpl.Digest, tmpl.Size)

	fi, err := os.Stat(filepath.Join(tmpl.RootFS, "usr/bin/hello"))
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("the extra package's /usr/bin/hello: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(tmpl.RootFS, "etc/passwd"))
	if !strings.Contains(string(b), "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("/etc/passwd lacks the sandbox user:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(tmpl.RootFS, "etc/hostname")); string(b) != "sandbox\n" {
		t.Errorf("/etc/hostname = %q, want the build host's name replaced", b)
	}
	for dir, allowed := range map[string]string{"dev": "", "var/lib/apt/lists": "partial lock", "var/cache/apt/archives": "partial lock"} {
		entries, err := os.ReadDir(filepath.Join(tmpl.RootFS, dir))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		for _, e := range entries {
			if !strings.Contains(" "+allowed+" ", " "+e.Name()+" ") {
				t.Errorf("%s still has %s", dir, e.Name())
			}
		}
	}
	if tmpl.Config.Env["PATH"] != DefaultPath || !strings.Contains(tmpl.Source, "bookworm") || !strings.Contains(tmpl.Source, "hello") {
		t.Errorf("config %+v, source %q", tmpl.Config, tmpl.Source)
	}
	out := strings.Join(lines, "\n")
	if len(lines) < 5 || !strings.Contains(out, "I: ") {
		t.Errorf("progress did not carry the bootstrapper's output:\n%s", out)
	}
	if got, err := st.Get("hello"); err != nil || got.Digest != tmpl.Digest {
		t.Errorf("Get after Build: %v, %v", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(st.Dir(), "tmp")); len(entries) != 0 {
		t.Errorf("tmp holds %d entries after Build", len(entries))
	}
}
