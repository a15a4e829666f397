package kube

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/kube/imagetest"
	"github.com/cove-sandbox/cove/sandbox/kube/kubetest"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// testEnv is the test binary's cluster with the test template's image
// imported and a namespace of its own.
type testEnv struct {
	c   *kubetest.Cluster
	cs  kubernetes.Interface
	cfg Config
}

var shared struct {
	once sync.Once
	env  *testEnv
	err  error
}

// The test template: busybox-static and cove-sandbox, built once per
// test binary and imported as cove-test/base:latest.
const testImagePrefix = "cove-test/"

func setup(t testing.TB) *testEnv {
	t.Helper()
	c := kubetest.Shared(t)
	shared.once.Do(func() { shared.env, shared.err = makeEnv(t, c) })
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env
}

func makeEnv(t testing.TB, c *kubetest.Cluster) (*testEnv, error) {
	// As on a production cluster, whose CNI enforces NetworkPolicy: every
	// test here runs with the sandboxes' policies in force.
	if err := c.EnforceNetworkPolicy(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cove-kube-test-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	img, err := imagetest.Template(dir, testImagePrefix+"base:latest")
	if err != nil {
		return nil, err
	}
	c.ImportImage(t, testImagePrefix+"base:latest", bytes.NewReader(img))
	cs, err := kubernetes.NewForConfig(c.Config())
	if err != nil {
		return nil, err
	}
	var b [4]byte
	rand.Read(b[:])
	ns := "cove-kube-test-" + hex.EncodeToString(b[:])
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	cidrs := []netip.Prefix{netip.MustParsePrefix(c.PodCIDR()), netip.MustParsePrefix(c.ServiceCIDR())}
	return &testEnv{c: c, cs: cs, cfg: Config{
		REST: c.Config(), Namespace: ns, StorageClass: c.StorageClass(), ImagePrefix: testImagePrefix,
		PullPolicy: corev1.PullNever, ClusterCIDRs: cidrs, StartTimeout: 4 * time.Minute,
	}}, nil
}

// newTestRuntime is a Runtime on the test namespace, closed with t.
func newTestRuntime(t testing.TB) *Runtime {
	t.Helper()
	return newRuntimeWith(t, nil)
}

// newRuntimeWith is newTestRuntime with its configuration changed by mod
// (if not nil).
func newRuntimeWith(t testing.TB, mod func(*Config)) *Runtime {
	t.Helper()
	cfg := setup(t).cfg
	if mod != nil {
		mod(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func create(t *testing.T, r *Runtime, spec sandbox.Spec) sandbox.Session {
	t.Helper()
	s, err := r.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Delete(context.Background(), s.ID()); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("Delete: %v", err)
		}
	})
	return s
}

func run(t *testing.T, s sandbox.Session, cmd string) (string, sandbox.ExitStatus) {
	t.Helper()
	var out bytes.Buffer
	st, err := s.Exec(t.Context(), sandbox.ExecRequest{Cmd: cmd, Shell: true, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("Exec(%q): %v", cmd, err)
	}
	return out.String(), st
}

func TestConformance(t *testing.T) {
	r := newTestRuntime(t)
	sandboxtest.Run(t, func(t *testing.T) sandbox.Runtime { return r })
}

// TestWalls: the pod's spec holds every wall, and inside, a command runs
// as uid 1000 with no capabilities, no new privileges, seccomp, and no
// service account token to read.
func TestWalls(t *testing.T) {
	t.Parallel()
	r := newTestRuntime(t)
	s := create(t, r, sandbox.Spec{})
	rec, p, err := r.load(t.Context(), s.ID())
	if err != nil || p == nil {
		t.Fatalf("load: %v, pod %v", err, p)
	}
	if rec.Gen != 1 {
		t.Errorf("generation %d, want 1", rec.Gen)
	}
	sc := p.Spec.Containers[0].SecurityContext
	if *p.Spec.AutomountServiceAccountToken || !*sc.RunAsNonRoot || *sc.RunAsUser != UID || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities.Drop[0] != "ALL" || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod %s as the cluster has it lacks a wall: %+v, %+v", p.Name, p.Spec, sc)
	}
	for _, v := range p.Spec.Volumes {
		if v.Projected != nil || v.Secret != nil {
			t.Errorf("pod %s mounts %s (%+v), want only the workspace", p.Name, v.Name, v.VolumeSource)
		}
	}
	if out, _ := run(t, s, "id -u; id -g"); out != "1000\n1000\n" {
		t.Errorf("id -u; id -g: got %q, want 1000 twice", out)
	}
	out, st := run(t, s, "cat /var/run/secrets/kubernetes.io/serviceaccount/token /run/secrets/kubernetes.io/serviceaccount/token")
	if st.Success() {
		t.Errorf("a command read a service account token: %q", out)
	}
	out, _ = run(t, s, "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status")
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("/proc/self/status: got %q, want %q in it", out, want)
		}
	}
	np, err := r.cs.NetworkingV1().NetworkPolicies(r.cfg.Namespace).Get(t.Context(), objName(s.ID()), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sandbox's NetworkPolicy: %v", err)
	}
	if len(np.Spec.Egress) != 0 || np.Spec.PodSelector.MatchLabels[LabelSandbox] != s.ID() {
		t.Errorf("network mode none: policy %+v, want no egress for this sandbox's pod", np.Spec)
	}
}

// TestStopResumeKeepsWorkspace: stop deletes the pod (its connections
// cut) and keeps the claim; resume runs a new pod on it.
func TestStopResumeKeepsWorkspace(t *testing.T) {
	t.Parallel()
	r := newTestRuntime(t)
	ctx := t.Context()
	s := create(t, r, sandbox.Spec{})
	if err := s.WriteFile(ctx, "dir/kept.txt", strings.NewReader("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx, s.ID()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if n := r.conns.count(s.ID()); n != 0 {
		t.Errorf("%d connections to the stopped sandbox's pod left open", n)
	}
	pods, err := r.cs.CoreV1().Pods(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelSandbox + "=" + s.ID()})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods after Stop: %d (%v), want none", len(pods.Items), err)
	}
	if _, err := r.cs.CoreV1().PersistentVolumeClaims(r.cfg.Namespace).Get(ctx, objName(s.ID()), metav1.GetOptions{}); err != nil {
		t.Errorf("the workspace claim after Stop: %v", err)
	}
	s2, err := r.Resume(ctx, s.ID())
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if out, _ := run(t, s2, "cat dir/kept.txt"); out != "kept\n" {
		t.Errorf("cat after Resume: %q", out)
	}
	// The session from before the stop reaches the new pod.
	if out, _ := run(t, s, "cat dir/kept.txt"); out != "kept\n" {
		t.Errorf("cat through the first session after Resume: %q", out)
	}
	if rec, _, _ := r.load(ctx, s.ID()); rec.Gen != 2 {
		t.Errorf("generation after Resume: %d, want 2", rec.Gen)
	}
}

func TestFork(t *testing.T) {
	t.Parallel()
	r := newTestRuntime(t)
	ctx := t.Context()
	s := create(t, r, sandbox.Spec{Env: map[string]string{"FORKED": "yes"}})
	if err := s.WriteFile(ctx, "a.txt", strings.NewReader("from the source\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := r.Fork(ctx, s.ID())
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	t.Cleanup(func() { r.Delete(context.Background(), f.ID()) })
	if out, _ := run(t, f, "cat a.txt; echo $FORKED; echo changed > a.txt"); out != "from the source\nyes\n" {
		t.Errorf("in the fork: %q", out)
	}
	if out, _ := run(t, s, "cat a.txt"); out != "from the source\n" {
		t.Errorf("the source after the fork wrote: %q", out)
	}
}

// TestAdopt: a second Runtime (a replica, a restarted server) lists,
// drives, stops and resumes what the first made; the first sees it.
func TestAdopt(t *testing.T) {
	t.Parallel()
	r1 := newTestRuntime(t)
	r2 := newTestRuntime(t)
	ctx := t.Context()
	s := create(t, r1, sandbox.Spec{Labels: map[string]string{"made-by": "r1"}})
	if err := s.WriteFile(ctx, "note.txt", strings.NewReader("r1 wrote this\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	infos, err := r2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, in := range infos {
		if in.ID == s.ID() {
			found = in.State == sandbox.StateRunning && in.Spec.Labels["made-by"] == "r1"
		}
	}
	if !found {
		t.Errorf("the second runtime's List: %+v, want %s running with its labels", infos, s.ID())
	}
	g, err := r2.Get(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, g, "cat note.txt"); out != "r1 wrote this\n" {
		t.Errorf("through the second runtime: %q", out)
	}
	if err := r2.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	in, err := s.Info(ctx)
	if err != nil || in.State != sandbox.StateStopped {
		t.Errorf("the first runtime's session after the second stopped it: %+v %v", in, err)
	}
	if _, err := r2.Resume(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, s, "cat note.txt"); out != "r1 wrote this\n" {
		t.Errorf("through the first runtime after the second resumed it: %q", out)
	}
}

// TestDeleteRemovesAll: nothing of a deleted sandbox is left.
func TestDeleteRemovesAll(t *testing.T) {
	t.Parallel()
	r := newTestRuntime(t)
	ctx := t.Context()
	s, err := r.Create(ctx, sandbox.Spec{Network: sandbox.Network{Mode: NetworkInternet}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	name := objName(s.ID())
	ns := r.cfg.Namespace
	for what, get := range map[string]func() error{
		"secret": func() error { _, err := r.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); return err },
		"claim": func() error {
			_, err := r.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
		"network policy": func() error {
			_, err := r.cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, name, metav1.GetOptions{})
			return err
		},
		"pod": func() error {
			_, err := r.cs.CoreV1().Pods(ns).Get(ctx, podName(s.ID(), 1), metav1.GetOptions{})
			return err
		},
	} {
		// A claim in use is deleted once its pod is gone (its finalizer).
		deadline := time.Now().Add(time.Minute)
		for err := get(); !apierrors.IsNotFound(err); err = get() {
			if time.Now().After(deadline) {
				t.Errorf("the %s of a deleted sandbox is still there (%v)", what, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func TestCreateRefused(t *testing.T) {
	t.Parallel()
	r := newTestRuntime(t)
	for _, tc := range []struct {
		name string
		spec sandbox.Spec
		want error
	}{
		{"unknown template", sandbox.Spec{Template: "no-such-template"}, sandbox.ErrNotFound},
		{"gvisor without a runtime class", sandbox.Spec{Isolation: sandbox.IsolationGVisor}, sandbox.ErrUnavailable},
		{"metadata in the allow list", sandbox.Spec{Network: sandbox.Network{Mode: NetworkAllow, Allow: []string{"169.254.169.254:80"}}}, sandbox.ErrInvalid},
		{"the pod network in the allow list", sandbox.Spec{Network: sandbox.Network{Mode: NetworkAllow, Allow: []string{setup(t).c.PodCIDR()}}}, sandbox.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := r.Create(t.Context(), tc.spec)
			if err == nil {
				r.Delete(context.Background(), s.ID())
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Create(%+v): got %v, want %v", tc.spec, err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), os.TempDir()) {
				t.Errorf("error shows a host path: %v", err)
			}
		})
	}
	// Nothing of a refused create is left.
	infos, _ := r.List(t.Context())
	for _, in := range infos {
		if in.Spec.Template == "no-such-template" {
			t.Errorf("a refused create left sandbox %s", in.ID)
		}
	}
}
