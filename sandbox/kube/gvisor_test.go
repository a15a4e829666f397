package kube

import (
	"context"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// gvisorRuntime is a kube runtime whose sandboxes default to the gvisor
// tier: its pods run with the cluster's gVisor RuntimeClass.
type gvisorRuntime struct{ *Runtime }

func (g gvisorRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	if spec.Isolation == "" {
		spec.Isolation = sandbox.IsolationGVisor
	}
	return g.Runtime.Create(ctx, spec)
}

// newGVisorRuntime is a runtime on the test namespace with the gvisor
// tier mapped to the test cluster's gVisor RuntimeClass (gVisor's
// containerd shim and runsc, scripts/deps.sh test builds both).
func newGVisorRuntime(t testing.TB) gvisorRuntime {
	t.Helper()
	class, err := setup(t).c.GVisor()
	if err != nil {
		t.Fatalf("the test cluster runs no gVisor pods: %v", err)
	}
	return gvisorRuntime{newRuntimeWith(t, func(cfg *Config) {
		cfg.RuntimeClasses = map[string]string{sandbox.IsolationGVisor: class}
	})}
}

// TestGVisorConformance: the whole conformance suite on gVisor pods.
func TestGVisorConformance(t *testing.T) {
	r := newGVisorRuntime(t)
	sandboxtest.Run(t, func(t *testing.T) sandbox.Runtime { return r })
}

// TestGVisorTier: a gvisor sandbox's programs run on gVisor's kernel, a
// native one's on the node's, and the pod's walls hold under gVisor too.
func TestGVisorTier(t *testing.T) {
	t.Parallel()
	r := newGVisorRuntime(t)
	if got := r.Isolations(); len(got) != 2 || got[1] != sandbox.IsolationGVisor {
		t.Errorf("Isolations() = %v, want native and gvisor", got)
	}
	g := create(t, r.Runtime, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
	n := create(t, r.Runtime, sandbox.Spec{})
	if out, _ := run(t, g, "dmesg"); !strings.Contains(out, "Starting gVisor") {
		t.Errorf("dmesg in a gvisor sandbox: %q, want gVisor's boot log", out)
	}
	if out, _ := run(t, n, "dmesg"); strings.Contains(out, "gVisor") {
		t.Errorf("dmesg in a native sandbox: %q, want no gVisor", out)
	}
	_, p, err := r.load(t.Context(), g.ID())
	if err != nil || p == nil || p.Spec.RuntimeClassName == nil {
		t.Fatalf("load: %v, pod %v", err, p)
	}
	if got, _ := setup(t).c.GVisor(); *p.Spec.RuntimeClassName != got {
		t.Errorf("pod runtime class %q, want %q", *p.Spec.RuntimeClassName, got)
	}
	if out, _ := run(t, g, "id -u; id -g"); out != "1000\n1000\n" {
		t.Errorf("id -u; id -g: got %q, want 1000 twice", out)
	}
	out, _ := run(t, g, "grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1"} {
		if !strings.Contains(out, want) {
			t.Errorf("/proc/self/status under gVisor: got %q, want %q in it", out, want)
		}
	}
	if out, st := run(t, g, "cat /var/run/secrets/kubernetes.io/serviceaccount/token"); st.Success() {
		t.Errorf("a command under gVisor read a service account token: %q", out)
	}
}
