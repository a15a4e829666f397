package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIsolationFlag: cove sandbox create and cove run refuse an unknown
// --isolation with the tiers there are, before anything is made.
func TestIsolationFlag(t *testing.T) {
	home := t.TempDir()
	t.Setenv("COVE_HOME", home)
	t.Setenv("COVE_SERVER", "")
	_, _, err := run(t, "sandbox", "create", "--isolation", "firecracker")
	if err == nil || !strings.Contains(err.Error(), `isolation "firecracker"`) || !strings.Contains(err.Error(), "gvisor") {
		t.Errorf("sandbox create --isolation firecracker: %v, want the tiers named", err)
	}
	t.Setenv("OPENAI_API_KEY", "test-key")
	_, _, err = run(t, "run", "--isolation", "firecracker", "--workspace", t.TempDir(), "task")
	if err == nil || !strings.Contains(err.Error(), `--isolation "firecracker"`) || !strings.Contains(err.Error(), "gvisor") {
		t.Errorf("run --isolation firecracker: %v, want the tiers named", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(home, "sandboxes")); len(entries) != 0 {
		t.Errorf("a refused --isolation made %d sandboxes", len(entries))
	}
}
