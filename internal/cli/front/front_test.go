package front

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLight: the front runs cove sandbox and cove version itself; the
// rest, help and the hidden roles included, goes to the full cove.
func TestLight(t *testing.T) {
	for args, want := range map[string]bool{
		"sandbox exec sb-1 -- true": true, "sandbox ls": true, "sandbox --help": true, "version": true,
		"": false, "serve": false, "run task": false, "key ls": false, "template ls": false,
		"guest": false, "local-shim": false, "local-init": false, "help": false, "--help": false, "bench": false,
	} {
		if got := Light(strings.Fields(args)); got != want {
			t.Errorf("Light(%q) = %v, want %v", args, got, want)
		}
	}
}

// TestRunLight: the light commands give the same answers as in the full
// cove: the sandbox usage on --help (exit 0), the version.
func TestRunLight(t *testing.T) {
	var out, errb bytes.Buffer
	if err := Run(context.Background(), []string{"sandbox", "--help"}, &out, &errb); err != nil {
		t.Fatalf("sandbox --help: %v (%s)", err, errb.String())
	}
	if !strings.Contains(out.String(), "Usage: cove sandbox") {
		t.Errorf("sandbox --help printed %q", out.String())
	}
	out.Reset()
	if err := Run(context.Background(), []string{"version"}, &out, &errb); err != nil || !strings.HasPrefix(out.String(), "cove ") {
		t.Errorf("version: %q, %v", out.String(), err)
	}
}

// fullScript stands for the full cove: it prints what it was asked and
// the front's path it was given.
const fullScript = "#!/bin/sh\necho \"full $* front=${COVE_FRONT:+set}\"\n"

func carry(t *testing.T, prog string) Full {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(prog))
	zw.Close()
	sum := sha256.Sum256([]byte(prog))
	return Full{Gzip: b.Bytes(), Sum: hex.EncodeToString(sum[:])}
}

// TestHelperFront is the front in a child process (TestExecHandsOff):
// Exec replaces it with the carried program.
func TestHelperFront(t *testing.T) {
	if os.Getenv("COVE_FRONT_TEST") == "" {
		t.Skip("run by TestExecHandsOff in a child process")
	}
	prog := fullScript
	if os.Getenv("COVE_FRONT_TEST") == "badsum" {
		f := carry(t, prog)
		f.Sum = strings.Repeat("0", 64)
		t.Fatal(f.Exec([]string{"serve"}))
	}
	t.Fatal(carry(t, prog).Exec([]string{"serve", "--addr", "127.0.0.1:1"}))
}

// TestExecHandsOff: a command the front does not run is handed to the
// full cove, installed in COVE_HOME/bin and checked: its arguments and
// output are the full cove's, a copy swapped on disk is replaced, and a
// carried program that does not match its checksum is never run.
func TestExecHandsOff(t *testing.T) {
	home := t.TempDir()
	os.Chmod(home, 0o700)
	front := func(mode string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFront$")
		cmd.Env = append(os.Environ(), "COVE_FRONT_TEST="+mode, "COVE_HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := front("ok")
	if err != nil || !strings.Contains(out, "full serve --addr 127.0.0.1:1 front=set") {
		t.Fatalf("the hand-off: %v\n%s", err, out)
	}
	all, _ := filepath.Glob(filepath.Join(home, "bin", "cove-full-*"))
	var copies []string
	for _, p := range all {
		if !strings.HasSuffix(p, ".verified") {
			copies = append(copies, p)
		}
	}
	if len(copies) != 1 {
		t.Fatalf("installed copies: %v", copies)
	}
	// Swapped for another program: replaced before it runs.
	os.Remove(copies[0])
	os.WriteFile(copies[0], []byte("#!/bin/sh\necho swapped\n"), 0o755)
	if out, err := front("ok"); err != nil || strings.Contains(out, "swapped") || !strings.Contains(out, "full serve") {
		t.Fatalf("after a swap: %v\n%s", err, out)
	}
	// Another build's copy is removed once this one is installed.
	stale := filepath.Join(home, "bin", "cove-full-0123456789abcdef")
	os.WriteFile(stale, []byte("old"), 0o755)
	if _, err := front("ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("another build's copy is still there: %v", err)
	}
	// A carried program that is not what its checksum says: refused.
	os.RemoveAll(filepath.Join(home, "bin"))
	out, err = front("badsum")
	if err == nil || strings.Contains(out, "full serve") || !strings.Contains(out, "does not match its build-time checksum") {
		t.Fatalf("a bad checksum: %v\n%s", err, out)
	}
}

// TestExecNothingCarried: a front built without the full cove says how to
// build it.
func TestExecNothingCarried(t *testing.T) {
	err := Full{}.Exec([]string{"serve"})
	if err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("Exec without a full cove: %v", err)
	}
}
