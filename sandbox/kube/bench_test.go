package kube

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/cove-sandbox/cove/sandbox"
)

// BenchmarkCreateFirstOutput times create → first output of a command
// (the sandbox's pod scheduled, its claim bound, the daemon answering,
// echo run) against a bare pod of the same image started to Running
// (what `kubectl run` waits for), alternating, in the same run; it
// reports each one's p50.
func BenchmarkCreateFirstOutput(b *testing.B) {
	benchCreateFirstOutput(b, newTestRuntime(b), "", "")
}

// BenchmarkCreateFirstOutputGVisor is the same on gVisor pods: a gvisor
// sandbox against a bare pod of the gVisor RuntimeClass.
func BenchmarkCreateFirstOutputGVisor(b *testing.B) {
	r := newGVisorRuntime(b)
	class, _ := setup(b).c.GVisor()
	benchCreateFirstOutput(b, r.Runtime, sandbox.IsolationGVisor, class)
}

func benchCreateFirstOutput(b *testing.B, r *Runtime, tier, class string) {
	ctx := context.Background()
	var sbx, bare []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		s, err := r.Create(ctx, sandbox.Spec{Isolation: tier})
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"first"}, Stdout: &out}); err != nil || out.String() != "first\n" {
			b.Fatalf("echo: %q %v", out.String(), err)
		}
		sbx = append(sbx, time.Since(start))
		b.StopTimer()
		r.Delete(ctx, s.ID())
		d, err := barePod(ctx, r, fmt.Sprintf("cove-bare-%d-%d", os.Getpid(), i), class)
		if err != nil {
			b.Fatal(err)
		}
		bare = append(bare, d)
		b.StartTimer()
	}
	b.ReportMetric(p50(sbx).Seconds()*1000, "sandbox-p50-ms")
	b.ReportMetric(p50(bare).Seconds()*1000, "bare-pod-p50-ms")
	b.Logf("create → first output p50 %s; bare pod → Running p50 %s (%d each)", p50(sbx), p50(bare), len(sbx))
}

func p50(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// barePod starts a pod of the test image that only sleeps, with the
// RuntimeClass class if not "", times it to Running, and deletes it.
func barePod(ctx context.Context, r *Runtime, name, class string) (time.Duration, error) {
	uid := int64(UID)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.cfg.Namespace},
		Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: &uid},
			Containers: []corev1.Container{{Name: "bare", Image: r.image(""), ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sleep", "3600"}}},
		},
	}
	if class != "" {
		p.Spec.RuntimeClassName = &class
	}
	pods := r.cs.CoreV1().Pods(r.cfg.Namespace)
	start := time.Now()
	created, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return 0, err
	}
	defer pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: created.ResourceVersion})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && p.Status.Phase == corev1.PodRunning {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("bare pod %s: the watch ended before it ran", name)
}

// TestHundredAtOnce creates 100 sandboxes at once and checks each
// answers; it reports the time. Set COVE_KUBE_SCALE=1 to run it (the
// node must take 100 more pods).
func TestHundredAtOnce(t *testing.T) {
	if os.Getenv("COVE_KUBE_SCALE") == "" {
		t.Skip("set COVE_KUBE_SCALE=1 to create 100 sandboxes at once")
	}
	e := setup(t)
	cfg := e.cfg
	// 100 pods fit a small node only with small requests.
	cfg.RequestCPU, cfg.RequestMemory = resource.MustParse("1m"), resource.MustParse("16Mi")
	cfg.StartTimeout = 10 * time.Minute
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const n = 100
	ctx := t.Context()
	ids := make([]string, n)
	var ok atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			s, err := r.Create(ctx, sandbox.Spec{})
			if err != nil {
				t.Errorf("Create #%d: %v", i, err)
				return
			}
			ids[i] = s.ID()
			var out bytes.Buffer
			if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"up"}, Stdout: &out}); err != nil || out.String() != "up\n" {
				t.Errorf("sandbox #%d: echo: %q %v", i, out.String(), err)
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d of %d sandboxes created and answering in %s", ok.Load(), n, took)
	var dwg sync.WaitGroup
	for _, id := range ids {
		if id != "" {
			dwg.Go(func() { r.Delete(context.Background(), id) })
		}
	}
	dwg.Wait()
}
