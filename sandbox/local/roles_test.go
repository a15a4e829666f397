package local

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The supervisor hands pid 1 its token under sbdir.TokenEnv, which it
// spells out so as not to link the daemon; the daemon reads guest.TokenEnv.
func TestTokenEnv(t *testing.T) {
	if sbdir.TokenEnv != guest.TokenEnv {
		t.Errorf("sbdir.TokenEnv = %q, want guest.TokenEnv %q", sbdir.TokenEnv, guest.TokenEnv)
	}
}

// TestRoleDeps keeps the programs a sandbox start runs small: the
// supervisor links no daemon and no templates, pid 1 nothing of the host
// side. Each package linked costs every sandbox start its init and page
// faults.
func TestRoleDeps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command:", err)
	}
	const mod = "github.com/cove-sandbox/cove/"
	tests := []struct {
		pkg       string
		forbidden []string
	}{
		{mod + "cmd/cove-shim", []string{mod + "guest", "connectrpc.com/", mod + "template", "github.com/klauspost/", mod + "sandbox/local/pid1"}},
		{mod + "cmd/cove-sandbox", []string{"github.com/containerd/cgroups", "github.com/cilium/ebpf", "github.com/godbus/", "github.com/google/nftables",
			mod + "template", "github.com/klauspost/", mod + "sandbox/local/cgroup", mod + "sandbox/local/shim", mod + "sandbox/local/internal/host"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", tt.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tt.pkg, err)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, f := range tt.forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") || strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
						t.Errorf("%s links %s", tt.pkg, dep)
					}
				}
			}
		})
	}
}
