package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The floor `cove bench` compares the gVisor tier's create with is a
// bare runsc run of the host template's root that prints hi, and it
// leaves no mount behind (runsc --network none binds a namespace in its
// state directory).
func TestBenchGVisorFloor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runsc runs as root here (CI runs as root)")
	}
	path := findRunsc()
	if path == "" {
		t.Skip("runsc is not installed (scripts/deps.sh installs it)")
	}
	dir := t.TempDir()
	b := &gvisorBench{runsc: path, dir: dir}
	run, cleanup, err := b.floorRunner(filepath.Join(dir, "sb"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := run(i); err != nil {
			cleanup()
			t.Fatalf("run %d: %v", i, err)
		}
	}
	cleanup()
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), dir) {
		t.Fatalf("a mount under the bench's directory is left:\n%s", mounts)
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "floor-state")); len(entries) > 1 {
		t.Errorf("runsc's state directory holds %d entries after the runs, want its empty namespace file at most", len(entries))
	}
}
