package kube

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
)

type netConn = net.Conn

// startPod creates the pod of rec's generation and waits until its
// daemon answers.
func (r *Runtime) startPod(ctx context.Context, rec *record, class string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StartTimeout)
	defer cancel()
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Create(ctx, r.pod(rec, class), metav1.CreateOptions{})
	if err != nil {
		return r.apiErr("starting its pod", err)
	}
	p, err = r.waitRunning(ctx, p)
	if err != nil {
		return err
	}
	r.conns.setAddr(rec.ID, p.Name, p.Status.PodIP)
	c, err := guest.NewClient(fmt.Sprintf("http://%s:%d", p.Name, r.cfg.GuestPort), guest.ClientOptions{
		AccessToken: rec.Token,
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(r.cfg.GuestPort)))
		},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		hctx, hcancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("its daemon did not answer within %s (%v): %w", r.cfg.StartTimeout, err, sandbox.ErrUnavailable)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRunning watches pod p until it runs with an address, and returns
// it; a pod that cannot start (an image that is not there, a container
// that ended) is an error at once.
func (r *Runtime) waitRunning(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	for {
		if err := podProblem(p); err != nil {
			return nil, err
		}
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			return p, nil
		}
		w, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Watch(ctx, metav1.ListOptions{
			FieldSelector: "metadata.name=" + p.Name, ResourceVersion: p.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				return nil, r.startTimeout(p)
			}
			return nil, r.apiErr("watching its pod", err)
		}
		p, err = r.watchUntil(ctx, w, p)
		w.Stop()
		if err != nil {
			return nil, err
		}
	}
}

// watchUntil follows w until p runs or fails, or the watch ends (then
// the caller watches again from the last version seen).
func (r *Runtime) watchUntil(ctx context.Context, w watch.Interface, p *corev1.Pod) (*corev1.Pod, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, r.startTimeout(p)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return p, nil
			}
			if ev.Type == watch.Error {
				return p, nil
			}
			np, ok := ev.Object.(*corev1.Pod)
			if !ok || np.Name != p.Name {
				continue
			}
			if ev.Type == watch.Deleted {
				return nil, fmt.Errorf("its pod was deleted while starting: %w", sandbox.ErrUnavailable)
			}
			p = np
			if err := podProblem(p); err != nil {
				return nil, err
			}
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				return p, nil
			}
		}
	}
}

// startTimeout says why pod p did not start in time.
func (r *Runtime) startTimeout(p *corev1.Pod) error {
	why := string(p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			why = c.Message
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = w.Reason + ": " + w.Message
		}
	}
	err := sandbox.ErrUnavailable
	if strings.Contains(why, "Insufficient") || strings.Contains(why, "Too many pods") {
		err = sandbox.ErrLimit
	}
	return fmt.Errorf("its pod did not start within %s (%s): %w", r.cfg.StartTimeout, why, err)
}

// podProblem is why pod p cannot start, nil while it may.
func podProblem(p *corev1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName":
				return fmt.Errorf("template image %s is not in the cluster (cove template push, then import or push it to a registry the nodes pull from): %w", cs.Image, sandbox.ErrNotFound)
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return fmt.Errorf("its pod cannot start: %s: %s: %w", w.Reason, w.Message, sandbox.ErrUnavailable)
			}
		}
		if t := cs.State.Terminated; t != nil {
			return fmt.Errorf("its daemon ended while starting (exit %d, %s): %s: %w", t.ExitCode, t.Reason, lastLine(t.Message), sandbox.ErrUnavailable)
		}
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return fmt.Errorf("its pod ended while starting (%s: %s): %w", p.Status.Reason, p.Status.Message, sandbox.ErrUnavailable)
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// dial connects to sandbox id's daemon at its pod's address, recording
// the connection so that it is cut when the pod goes.
func (r *Runtime) dial(ctx context.Context, id string) (net.Conn, error) {
	pod, addr := r.conns.addr(id)
	if addr == "" {
		_, p, err := r.load(ctx, id)
		if err != nil {
			return nil, err
		}
		if p == nil || p.Status.PodIP == "" {
			return nil, fmt.Errorf("sandbox %s is not running: %w", id, sandbox.ErrState)
		}
		pod, addr = p.Name, p.Status.PodIP
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr, strconv.Itoa(r.cfg.GuestPort)))
	if err != nil {
		return nil, err
	}
	return r.conns.add(id, pod, c), nil
}

// conns keeps every runtime connection to a daemon by sandbox and pod,
// with each sandbox's pod address: when the pod goes (stop, delete, TTL,
// another replica's stop seen by watchPods) its connections are closed,
// so nothing waits on an address that no longer answers.
type conns struct {
	mu    sync.Mutex
	by    map[string]map[*trackedConn]bool // sandbox id ->
	addrs map[string][2]string             // sandbox id -> pod name, IP
}

func newConns() *conns {
	return &conns{by: map[string]map[*trackedConn]bool{}, addrs: map[string][2]string{}}
}

type trackedConn struct {
	net.Conn
	pod  string
	once sync.Once
	drop func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.drop)
	return c.Conn.Close()
}

func (cs *conns) setAddr(id, pod, ip string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if old, ok := cs.addrs[id]; ok && old[0] != pod {
		cs.cutLocked(id, old[0])
	}
	cs.addrs[id] = [2]string{pod, ip}
}

func (cs *conns) addr(id string) (pod, ip string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	a := cs.addrs[id]
	return a[0], a[1]
}

func (cs *conns) add(id, pod string, c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, pod: pod}
	tc.drop = func() {
		cs.mu.Lock()
		delete(cs.by[id], tc)
		if len(cs.by[id]) == 0 {
			delete(cs.by, id)
		}
		cs.mu.Unlock()
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.by[id] == nil {
		cs.by[id] = map[*trackedConn]bool{}
	}
	cs.by[id][tc] = true
	return tc
}

// cut closes sandbox id's connections to pod ("": to any of its pods)
// and forgets its address.
func (cs *conns) cut(id, pod string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.cutLocked(id, pod)
}

func (cs *conns) cutLocked(id, pod string) {
	if a, ok := cs.addrs[id]; ok && (pod == "" || a[0] == pod) {
		delete(cs.addrs, id)
	}
	for c := range cs.by[id] {
		if pod == "" || c.pod == pod {
			delete(cs.by[id], c)
			c.Conn.Close()
		}
	}
	if len(cs.by[id]) == 0 {
		delete(cs.by, id)
	}
}

func (cs *conns) cutAll() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for id := range cs.by {
		cs.cutLocked(id, "")
	}
}

// count is how many connections sandbox id has open (tests).
func (cs *conns) count(id string) int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.by[id])
}

// watchPods follows the sandboxes' pods and cuts the connections to one
// that is deleted or has ended, whoever ended it (another replica's
// stop, a TTL, an eviction).
func (r *Runtime) watchPods(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		stop := context.AfterFunc(ctx, w.Stop)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ev.Type == watch.Deleted || p.DeletionTimestamp != nil || !live(p) {
				r.conns.cut(p.Labels[LabelSandbox], p.Name)
			}
		}
		stop()
		w.Stop()
	}
}
