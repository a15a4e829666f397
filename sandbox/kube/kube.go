// Package kube is a sandbox.Runtime on Kubernetes. A sandbox is:
//
//   - a Secret, cove-ID: the sandbox's record (its spec, the daemon's
//     access token, and in annotations its state, creation time,
//     deadline and start generation). It owns everything below, so
//     deleting it removes the sandbox; it is the only state, so another
//     Runtime (a replica, a restarted server) lists and adopts what this
//     one made;
//   - a PersistentVolumeClaim, cove-ID: the workspace, mounted at the
//     spec's root. Stop keeps it, Resume mounts it in a new pod, Fork
//     copies it (a claim whose dataSource is the source's claim);
//   - a Pod, cove-ID-GEN, one per start: its first process is Cove's
//     daemon (cove-sandbox guest from the template's image, see package
//     kubeimage), serving on a TCP port of the pod (guest.DefaultTCPPort)
//     with the token from the Secret. The runtime reaches it at the pod's
//     IP, so exec, files, PTYs and ports work as in every runtime
//     (guest.Session). Stop deletes the pod;
//   - a NetworkPolicy, cove-ID: ingress only to the daemon's port and
//     only from outside the sandboxes; egress denied but for what the
//     spec's network mode allows (none, internet: public addresses, allow:
//     the list), never private ranges, link-local (cloud metadata) or the
//     cluster's own networks (Config.ClusterCIDRs). A CNI that enforces
//     NetworkPolicy is needed for it to hold.
//
// The walls of every pod: no service account token, uid and gid 1000
// (runAsNonRoot), no privilege escalation, every capability dropped,
// seccomp RuntimeDefault, and the RuntimeClass that Config.RuntimeClasses
// gives the spec's isolation tier (gvisor: runsc, or Kata). Limits become
// the container's limits (requests: the smaller of those and the
// runtime's defaults). The TTL is enforced by the lifecycle loop of every
// Runtime (a second's tick), so it holds while any replica runs.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// Config configures a Runtime.
type Config struct {
	// REST reaches the cluster's API server.
	REST *rest.Config
	// Namespace holds the sandboxes; "" means "default".
	Namespace string
	// StorageClass of workspaces; "" means the cluster's default.
	StorageClass string
	// ImagePrefix is put before a template's name to make its image:
	// "registry.example.com/cove/" makes template python
	// registry.example.com/cove/python:latest (a name with a tag keeps
	// it). "" means "cove/", what `cove template push` tags.
	ImagePrefix string
	// DefaultTemplate is the template of a spec that names none; "" means
	// "base".
	DefaultTemplate string
	// PullPolicy of the images; "" means IfNotPresent.
	PullPolicy corev1.PullPolicy
	// RuntimeClasses maps an isolation tier (sandbox.IsolationNative,
	// sandbox.IsolationGVisor) to the RuntimeClass its pods run with; a
	// tier missing here is refused (native is always there: the node's
	// default runtime unless mapped).
	RuntimeClasses map[string]string
	// ClusterCIDRs are the cluster's pod and service networks: no
	// sandbox egress reaches them, and the daemon's port takes nothing
	// from the pod network but non-sandbox pods.
	ClusterCIDRs []netip.Prefix
	// AllowPrivate lists private ranges a network allow list may name.
	AllowPrivate []netip.Prefix
	// DiskBytes is the workspace size of a spec with no disk limit; 0
	// means 1 GiB.
	DiskBytes int64
	// RequestCPU and RequestMemory are each pod's requests (at most its
	// limits); zero means 50m and 64Mi.
	RequestCPU, RequestMemory resource.Quantity
	// GuestPort is where the daemon listens in the pod; 0 means
	// guest.DefaultTCPPort.
	GuestPort int
	// StartTimeout bounds a pod's start (scheduling, the claim, the
	// image, the daemon answering); 0 means 3 minutes.
	StartTimeout time.Duration
	// Logger receives the runtime's logs; nil discards them.
	Logger *slog.Logger
}

// Runtime is a sandbox.Runtime of pods. Safe for concurrent use; several
// Runtimes (replicas) may share a namespace.
type Runtime struct {
	cfg Config
	cs  kubernetes.Interface
	log *slog.Logger

	locks sync.Map // id -> *sync.Mutex: one lifecycle change at a time per sandbox here
	conns *conns

	cancel context.CancelFunc
	done   sync.WaitGroup
}

var (
	_ sandbox.Runtime         = (*Runtime)(nil)
	_ sandbox.Forker          = (*Runtime)(nil)
	_ sandbox.Deadliner       = (*Runtime)(nil)
	_ sandbox.IsolationLister = (*Runtime)(nil)
)

// New returns a Runtime over the cluster cfg.REST reaches and starts its
// lifecycle loop (the TTLs) and its watch of pods (cutting connections
// to pods that are gone); Close ends them.
func New(cfg Config) (*Runtime, error) {
	if cfg.REST == nil {
		return nil, fmt.Errorf("kube runtime: no cluster configuration (a kubeconfig): %w", sandbox.ErrInvalid)
	}
	if err := defaults(&cfg); err != nil {
		return nil, err
	}
	rc := rest.CopyConfig(cfg.REST)
	if rc.QPS == 0 {
		// Hundreds of sandboxes start at once: client-go's default of 5
		// requests a second would queue them.
		rc.QPS, rc.Burst = 200, 400
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube runtime: %w", err)
	}
	return newRuntime(cfg, cs), nil
}

func newRuntime(cfg Config, cs kubernetes.Interface) *Runtime {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runtime{cfg: cfg, cs: cs, log: cfg.Logger, conns: newConns(), cancel: cancel}
	r.done.Add(2)
	go func() { defer r.done.Done(); r.lifecycle(ctx) }()
	go func() { defer r.done.Done(); r.watchPods(ctx) }()
	return r
}

func defaults(cfg *Config) error {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.ImagePrefix == "" {
		cfg.ImagePrefix = "cove/"
	}
	if cfg.DefaultTemplate == "" {
		cfg.DefaultTemplate = "base"
	}
	if cfg.PullPolicy == "" {
		cfg.PullPolicy = corev1.PullIfNotPresent
	}
	if cfg.DiskBytes == 0 {
		cfg.DiskBytes = 1 << 30
	}
	if cfg.RequestCPU.IsZero() {
		cfg.RequestCPU = resource.MustParse("50m")
	}
	if cfg.RequestMemory.IsZero() {
		cfg.RequestMemory = resource.MustParse("64Mi")
	}
	if cfg.GuestPort == 0 {
		cfg.GuestPort = guest.DefaultTCPPort
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for tier := range cfg.RuntimeClasses {
		if tier != sandbox.IsolationNative && tier != sandbox.IsolationGVisor {
			return fmt.Errorf("kube runtime: runtime class for isolation %q: want %q or %q: %w", tier, sandbox.IsolationNative, sandbox.IsolationGVisor, sandbox.ErrInvalid)
		}
	}
	return nil
}

// Ping lists at most one sandbox record: the API server answers, and
// the runtime's credentials still read its namespace.
func (r *Runtime) Ping(ctx context.Context) error {
	_, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelSandbox, Limit: 1})
	return err
}

// Close ends the runtime's loops and its connections to daemons; the
// sandboxes keep running.
func (r *Runtime) Close() error {
	r.cancel()
	r.done.Wait()
	r.conns.cutAll()
	return nil
}

// Isolations lists the tiers with a runtime class, native first.
func (r *Runtime) Isolations() []string {
	out := []string{sandbox.IsolationNative}
	if _, ok := r.cfg.RuntimeClasses[sandbox.IsolationGVisor]; ok {
		out = append(out, sandbox.IsolationGVisor)
	}
	return out
}

// image is the image of template name.
func (r *Runtime) image(name string) string {
	if name == "" {
		name = r.cfg.DefaultTemplate
	}
	ref := r.cfg.ImagePrefix + name
	if i := strings.LastIndex(ref, ":"); i < 0 || strings.Contains(ref[i:], "/") {
		ref += ":latest"
	}
	return ref
}

func (r *Runtime) lock(id string) func() {
	m, _ := r.locks.LoadOrStore(id, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// validTemplate: a name an image reference can hold (lower case).
func validTemplate(name string) error {
	ok := name != "" && len(name) <= 128
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || (i > 0 && (c == '.' || c == '_' || c == '-'))
	}
	if !ok {
		return fmt.Errorf("template %q: the kube runtime's templates are images: use 1 to 128 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, sandbox.ErrInvalid)
	}
	return nil
}

// check vets a spec for this runtime and returns its runtime class.
func (r *Runtime) check(ctx context.Context, spec *sandbox.Spec) (class string, rules []rule, err error) {
	if err := spec.Normalize(); err != nil {
		return "", nil, err
	}
	if spec.Template != "" {
		if err := validTemplate(spec.Template); err != nil {
			return "", nil, err
		}
	}
	switch spec.User {
	case "", "user", "1000":
	default:
		return "", nil, fmt.Errorf("user %q: the kube runtime runs every sandbox as its template's user, uid %d (pods run as non-root): %w", spec.User, UID, sandbox.ErrInvalid)
	}
	if spec.Limits.Pids == sandbox.NoPidsLimit {
		return "", nil, fmt.Errorf("pids -1 (no limit): the kube runtime's pods have the node's pids limit: %w", sandbox.ErrInvalid)
	}
	tier := spec.Isolation
	if tier == "" {
		tier = sandbox.IsolationNative
	}
	class, ok := r.cfg.RuntimeClasses[tier]
	if !ok && tier != sandbox.IsolationNative {
		return "", nil, fmt.Errorf("isolation %q: this cluster's Cove has no runtime class for it (cove serve --kube-runtime-classes): %w", tier, sandbox.ErrUnavailable)
	}
	rules, err = r.checkNetwork(ctx, spec.Network)
	return class, rules, err
}

// Create makes the sandbox's Secret, claim and NetworkPolicy, then
// starts its pod.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	return r.create(ctx, spec, "")
}

func (r *Runtime) create(ctx context.Context, spec sandbox.Spec, from string) (sandbox.Session, error) {
	class, rules, err := r.check(ctx, &spec)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := &record{ID: sbutil.NewID(), Spec: spec, Token: sbutil.NewToken(), CreatedAt: now, State: sandbox.StateRunning, Gen: 1}
	if spec.TTL > 0 {
		rec.Deadline = now.Add(spec.TTL)
	}
	sec, err := r.secret(rec)
	if err != nil {
		return nil, err
	}
	sec, err = r.cs.CoreV1().Secrets(r.cfg.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if err != nil {
		return nil, r.apiErr(fmt.Sprintf("creating sandbox %s", rec.ID), err)
	}
	rec.uid, rec.resourceVersion = sec.UID, sec.ResourceVersion
	fail := func(err error) (sandbox.Session, error) {
		r.remove(context.WithoutCancel(ctx), rec.ID)
		return nil, sandbox.WrapIDf(rec.ID, err, "creating sandbox %s", rec.ID)
	}
	if _, err := r.cs.CoreV1().PersistentVolumeClaims(r.cfg.Namespace).Create(ctx, r.claim(rec, from), metav1.CreateOptions{}); err != nil {
		return fail(r.apiErr("its workspace", err))
	}
	if _, err := r.cs.NetworkingV1().NetworkPolicies(r.cfg.Namespace).Create(ctx, r.networkPolicy(rec, rules), metav1.CreateOptions{}); err != nil {
		return fail(r.apiErr("its network policy", err))
	}
	if err := r.startPod(ctx, rec, class); err != nil {
		return fail(err)
	}
	return r.session(rec), nil
}

// apiErr maps an API server error to the sandbox sentinels.
func (r *Runtime) apiErr(what string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %w: %w", what, sandbox.ErrNotFound, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s: %w: %w", what, sandbox.ErrExist, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return fmt.Errorf("%s: %w: %w", what, sandbox.ErrInvalid, err)
	case apierrors.IsForbidden(err):
		// A quota (exceeded quota is Forbidden) or RBAC.
		if strings.Contains(err.Error(), "exceeded quota") {
			return fmt.Errorf("%s: %w: %w", what, sandbox.ErrLimit, err)
		}
		return fmt.Errorf("%s: %w: %w", what, sandbox.ErrPermission, err)
	}
	return fmt.Errorf("%s: %w: %w", what, sandbox.ErrUnavailable, err)
}

// getRecord reads sandbox id's record.
func (r *Runtime) getRecord(ctx context.Context, id string) (*record, error) {
	if !sbutil.ValidID(id) || validTemplate(id) != nil {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	s, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, objName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, r.apiErr(fmt.Sprintf("reading sandbox %s", id), err)
	}
	if s.Labels[LabelManagedBy] != ManagedBy || s.Labels[LabelSandbox] != id {
		return nil, fmt.Errorf("sandbox %q: %w", id, sandbox.ErrNotFound)
	}
	return parseRecord(s)
}

// info is rec's description given its live pod (nil if none).
func info(rec *record, pod *corev1.Pod) sandbox.Info {
	st := sandbox.StateStopped
	if rec.State == sandbox.StateRunning && pod != nil {
		st = sandbox.StateRunning
	}
	return sandbox.Info{ID: rec.ID, State: st, Spec: rec.Spec, CreatedAt: rec.CreatedAt, Deadline: rec.Deadline}
}

// load reads sandbox id's record and its live pod.
func (r *Runtime) load(ctx context.Context, id string) (*record, *corev1.Pod, error) {
	rec, err := r.getRecord(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if rec.State != sandbox.StateRunning {
		r.conns.cut(id, "")
		return rec, nil, nil
	}
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Get(ctx, podName(id, rec.Gen), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		r.conns.cut(id, "")
		return rec, nil, nil
	}
	if err != nil {
		return nil, nil, r.apiErr(fmt.Sprintf("reading sandbox %s's pod", id), err)
	}
	if !live(p) {
		r.conns.cut(id, "")
		return rec, nil, nil
	}
	r.conns.setAddr(id, p.Name, p.Status.PodIP)
	return rec, p, nil
}

// live: a pod that runs, or is starting, and is not being deleted.
func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && (p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending)
}

func (r *Runtime) session(rec *record) *guest.Session {
	id := rec.ID
	c, _ := guest.NewClient(fmt.Sprintf("http://%s:%d", objName(id), r.cfg.GuestPort), guest.ClientOptions{
		AccessToken: rec.Token,
		Dial:        func(ctx context.Context) (netConn, error) { return r.dial(ctx, id) },
		DialRetry:   10 * time.Second,
	})
	return guest.NewSession(c, guest.RuntimeSessionOptions(id, rec.Spec.Root, func(ctx context.Context) (sandbox.Info, error) {
		rec, p, err := r.load(ctx, id)
		if err != nil {
			return sandbox.Info{}, err
		}
		return info(rec, p), nil
	}, ""))
}

// Get returns a session of sandbox id.
func (r *Runtime) Get(ctx context.Context, id string) (sandbox.Session, error) {
	rec, _, err := r.load(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.session(rec), nil
}

// List returns every sandbox in the namespace, in creation order.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Info, error) {
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy + "," + LabelSandbox}
	secs, err := r.cs.CoreV1().Secrets(r.cfg.Namespace).List(ctx, sel)
	if err != nil {
		return nil, r.apiErr("listing sandboxes", err)
	}
	pods, err := r.cs.CoreV1().Pods(r.cfg.Namespace).List(ctx, sel)
	if err != nil {
		return nil, r.apiErr("listing sandboxes' pods", err)
	}
	livePods := map[string]*corev1.Pod{}
	for i := range pods.Items {
		if p := &pods.Items[i]; live(p) {
			livePods[p.Name] = p
		}
	}
	var out []sandbox.Info
	for i := range secs.Items {
		rec, err := parseRecord(&secs.Items[i])
		if err != nil {
			r.log.Warn("skipping a sandbox record", "err", err)
			continue
		}
		out = append(out, info(rec, livePods[podName(rec.ID, rec.Gen)]))
	}
	slices.SortStableFunc(out, func(a, b sandbox.Info) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}
