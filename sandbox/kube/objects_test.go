package kube

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
)

// offline is a runtime for the tests that build objects and check specs:
// its loops are not started (it reaches no cluster).
func offline(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	if err := defaults(&cfg); err != nil {
		t.Fatal(err)
	}
	return &Runtime{cfg: cfg, log: cfg.Logger, conns: newConns()}
}

func TestPodWalls(t *testing.T) {
	r := offline(t, Config{RuntimeClasses: map[string]string{sandbox.IsolationGVisor: "runsc"}})
	rec := &record{ID: "sb-0123456789ab", Gen: 3, uid: "u-1", Spec: sandbox.Spec{Root: "/work", Template: "python",
		Limits: sandbox.Limits{CPUs: 0.5, MemoryBytes: 256 << 20, DiskBytes: 2 << 30}}}
	p := r.pod(rec, "runsc")
	if p.Name != "cove-sb-0123456789ab-3" || p.Labels[LabelSandbox] != rec.ID {
		t.Errorf("pod name %q labels %v", p.Name, p.Labels)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Secret" || p.OwnerReferences[0].UID != "u-1" {
		t.Errorf("owner references: %+v, want the sandbox's Secret", p.OwnerReferences)
	}
	s := p.Spec
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken is not false")
	}
	if s.RuntimeClassName == nil || *s.RuntimeClassName != "runsc" {
		t.Errorf("runtimeClassName %v, want runsc", s.RuntimeClassName)
	}
	if s.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %q", s.RestartPolicy)
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container security context")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot, sc.RunAsUser == nil || *sc.RunAsUser != UID:
		t.Errorf("runAsNonRoot %v runAsUser %v, want true and %d", sc.RunAsNonRoot, sc.RunAsUser, UID)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities %+v, want drop ALL", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccomp %+v, want RuntimeDefault", sc.SeccompProfile)
	}
	if c.Image != "cove/python:latest" {
		t.Errorf("image %q", c.Image)
	}
	if got := c.VolumeMounts[0].MountPath; got != "/work" {
		t.Errorf("workspace mounted at %q, want /work", got)
	}
	for _, e := range c.Env {
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("env %s is not from the Secret: %+v", e.Name, e)
		}
	}
	if got := c.Resources.Limits.Cpu().MilliValue(); got != 500 {
		t.Errorf("cpu limit %dm, want 500m", got)
	}
	if got := c.Resources.Limits.Memory().Value(); got != 256<<20 {
		t.Errorf("memory limit %d", got)
	}
	if got := c.Resources.Requests.Cpu().MilliValue(); got != 50 {
		t.Errorf("cpu request %dm, want the default 50m", got)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "tcp://0.0.0.0:49983") {
		t.Errorf("daemon args %q do not listen on the guest port", c.Args)
	}
}

func TestImage(t *testing.T) {
	r := offline(t, Config{ImagePrefix: "reg.example:5000/cove/"})
	for name, want := range map[string]string{"": "reg.example:5000/cove/base:latest", "py": "reg.example:5000/cove/py:latest", "py:3": "reg.example:5000/cove/py:3"} {
		if got := r.image(name); got != want {
			t.Errorf("image(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := offline(t, Config{})
	now := time.Now().UTC()
	rec := &record{ID: "sb-00000000000a", Token: "tok", CreatedAt: now, State: sandbox.StateRunning, Gen: 2,
		Deadline: now.Add(time.Hour), Spec: sandbox.Spec{Root: "/workspace", Env: map[string]string{"A": "1"}, Labels: map[string]string{"l": "v"}}}
	s, err := r.secret(rec)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Data[keyEnv]) != `{"A":"1"}` {
		t.Errorf("env for the daemon: %s", s.Data[keyEnv])
	}
	got, err := parseRecord(s)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != rec.ID || got.Token != "tok" || !got.CreatedAt.Equal(now) || !got.Deadline.Equal(rec.Deadline) || got.Gen != 2 ||
		got.State != sandbox.StateRunning || got.Spec.Env["A"] != "1" || got.Spec.Labels["l"] != "v" {
		t.Errorf("round trip: got %+v, want %+v", got, rec)
	}
}

func TestCheckRefuses(t *testing.T) {
	r := offline(t, Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}})
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		want error
	}{
		{"gvisor without a runtime class", sandbox.Spec{Isolation: sandbox.IsolationGVisor}, sandbox.ErrUnavailable},
		{"root user", sandbox.Spec{User: "root"}, sandbox.ErrInvalid},
		{"no pids limit", sandbox.Spec{Limits: sandbox.Limits{Pids: sandbox.NoPidsLimit}}, sandbox.ErrInvalid},
		{"template with a slash", sandbox.Spec{Template: "../etc"}, sandbox.ErrInvalid},
		{"template upper case", sandbox.Spec{Template: "Python"}, sandbox.ErrInvalid},
		{"unknown network mode", sandbox.Spec{Network: sandbox.Network{Mode: "bridge"}}, sandbox.ErrInvalid},
		{"allow metadata", sandbox.Spec{Network: sandbox.Network{Mode: "allow", Allow: []string{"169.254.169.254"}}}, sandbox.ErrInvalid},
		{"allow a private range", sandbox.Spec{Network: sandbox.Network{Mode: "allow", Allow: []string{"192.168.1.0/24:443"}}}, sandbox.ErrInvalid},
		{"allow the pod network", sandbox.Spec{Network: sandbox.Network{Mode: "allow", Allow: []string{"10.244.3.4"}}}, sandbox.ErrInvalid},
		{"allow a bad port", sandbox.Spec{Network: sandbox.Network{Mode: "allow", Allow: []string{"203.0.113.7:99999"}}}, sandbox.ErrInvalid},
		{"allow with mode none", sandbox.Spec{Network: sandbox.Network{Allow: []string{"203.0.113.7"}}}, sandbox.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			_, _, err := r.check(context.Background(), &spec)
			if !errors.Is(err, tc.want) {
				t.Errorf("check(%+v): got %v, want %v", tc.spec, err, tc.want)
			}
		})
	}
}

func TestNetworkPolicy(t *testing.T) {
	r := offline(t, Config{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")}})
	rec := &record{ID: "sb-00000000000b", uid: "u"}
	none := r.networkPolicy(rec, nil)
	if len(none.Spec.Egress) != 0 || len(none.Spec.PolicyTypes) != 2 {
		t.Errorf("mode none: egress %+v types %v, want no egress rule and both policy types", none.Spec.Egress, none.Spec.PolicyTypes)
	}
	if p := none.Spec.Ingress[0].Ports; len(p) != 1 || p[0].Port.IntValue() != guest.DefaultTCPPort {
		t.Errorf("ingress ports %+v, want only the daemon's", p)
	}
	rec.Spec.Network.Mode = NetworkInternet
	inet := r.networkPolicy(rec, nil)
	var except []string
	for _, e := range inet.Spec.Egress {
		for _, to := range e.To {
			if to.IPBlock != nil && to.IPBlock.CIDR == "0.0.0.0/0" {
				except = to.IPBlock.Except
			}
		}
	}
	for _, want := range []string{"169.254.0.0/16", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "10.244.0.0/16", "10.96.0.0/12"} {
		if !slices.Contains(except, want) {
			t.Errorf("mode internet: 0.0.0.0/0 does not leave out %s (except %v)", want, except)
		}
	}
	rec.Spec.Network.Mode = NetworkAllow
	allow := r.networkPolicy(rec, []rule{{net: netip.MustParsePrefix("203.0.113.7/32"), port: 443}})
	last := allow.Spec.Egress[len(allow.Spec.Egress)-1]
	if last.To[0].IPBlock.CIDR != "203.0.113.7/32" || last.Ports[0].Port.IntValue() != 443 {
		t.Errorf("mode allow: last rule %+v, want 203.0.113.7/32 port 443", last)
	}
}

func TestNewRefuses(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("New without a cluster: got %v, want ErrInvalid", err)
	}
	if _, err := New(Config{REST: &rest.Config{Host: "https://127.0.0.1:1"}, RuntimeClasses: map[string]string{"kata": "kata"}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("New with an unknown tier: got %v, want ErrInvalid", err)
	}
}

func TestConnsCut(t *testing.T) {
	cs := newConns()
	cs.setAddr("sb-1", "pod-1", "10.0.0.1")
	a, b := pipe(t)
	c := cs.add("sb-1", "pod-1", a)
	if cs.count("sb-1") != 1 {
		t.Fatalf("count %d, want 1", cs.count("sb-1"))
	}
	// A new pod: the old pod's connections are cut.
	cs.setAddr("sb-1", "pod-2", "10.0.0.2")
	if cs.count("sb-1") != 0 {
		t.Errorf("count after the pod changed: %d, want 0", cs.count("sb-1"))
	}
	if _, err := b.Read(make([]byte, 1)); err == nil {
		t.Error("the peer of a cut connection can still read")
	}
	c.Close() // closing again is harmless
	if pod, ip := cs.addr("sb-1"); pod != "pod-2" || ip != "10.0.0.2" {
		t.Errorf("addr: %s %s", pod, ip)
	}
	cs.cut("sb-1", "")
	if _, ip := cs.addr("sb-1"); ip != "" {
		t.Errorf("addr after cut: %s, want none", ip)
	}
}

func pipe(t *testing.T) (net.Conn, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}
