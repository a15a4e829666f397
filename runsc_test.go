package cove_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runscPin is the gVisor version tools/runsc pins (its go.mod), which
// scripts/deps.sh builds and installs.
func runscPin(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "-C", "tools/runsc", "list", "-m", "-f", "{{.Version}}", "gvisor.dev/gvisor")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m gvisor.dev/gvisor in tools/runsc: %v", err)
	}
	v := strings.TrimSpace(string(out))
	if !strings.HasPrefix(v, "v") {
		t.Fatalf("tools/runsc pins gvisor.dev/gvisor at %q, want a module version", v)
	}
	return v
}

// TestRunscModuleApart: gVisor's runsc is pinned in a module of its own,
// so building, vetting and testing Cove (go mod download, ./...) neither
// fetch gVisor's hundred megabytes of modules nor compile runsc.
func TestRunscModuleApart(t *testing.T) {
	runscPin(t)
	out, err := exec.Command("go", "list", "-m", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "gvisor.dev/gvisor ") {
			t.Errorf("the main module requires %s; gVisor belongs in tools/runsc only", line)
		}
	}
	pkgs, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	if strings.Contains(string(pkgs), "/tools/runsc") {
		t.Errorf("go list ./... includes tools/runsc; it must stay a module of its own (its own go.mod)")
	}
}

// TestRunscInstalledIsPinned: the runsc that local sandboxes with
// isolation gvisor use by default is the pinned one (scripts/deps.sh
// installs it). It matters beyond features: runsc restores only
// checkpoints its own version wrote, so a memory pause taken by one
// runsc cannot be resumed by another.
func TestRunscInstalledIsPinned(t *testing.T) {
	const installed = "/usr/local/bin/runsc"
	if _, err := os.Stat(installed); err != nil {
		t.Skipf("runsc is not installed at %s (scripts/deps.sh builds and installs it)", installed)
	}
	want := runscPin(t)
	out, err := exec.Command(installed, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", installed, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	got := strings.TrimPrefix(first, "runsc version ")
	if got == "VERSION_MISSING" {
		t.Skipf("%s is a build without a version stamp, not scripts/deps.sh's; run scripts/deps.sh to install the pinned %s", installed, want)
	}
	if got != want {
		t.Errorf("%s --version = %q, want the pinned %q (run scripts/deps.sh)", installed, got, want)
	}
}
