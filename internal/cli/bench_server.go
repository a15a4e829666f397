package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/internal/app"
	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/sandbox"
)

// benchServer measures the server through its API on loopback: create ->
// first output, exec round trips, exec throughput with concurrent
// clients, and a create/exec/delete load. With url empty it starts its
// own server (local runtime, SQLite) in a temp dir; with replicas > 1,
// that many behind a balancer, one SIGKILLed and restarted mid-load.
func benchServer(ctx context.Context, url, key string, runs, clients, replicas int, load time.Duration, stdout, stderr io.Writer) error {
	var rs *replicaSet
	if url == "" && replicas > 1 {
		dir, err := os.MkdirTemp("", "cove-bench-rep-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(stderr, "→ starting %d cove serve --replicas behind a round-robin balancer\n", replicas)
		if rs, err = startReplicas(ctx, dir, replicas, stderr); err != nil {
			return err
		}
		defer rs.stop()
		url, key = rs.url, rs.admin
	}
	if url == "" {
		dir, err := os.MkdirTemp("", "cove-bench-srv-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		var stop func()
		if url, key, stop, err = app.BenchServer(ctx, dir); err != nil {
			return err
		}
		defer stop()
	}
	rt, err := runtimes.BenchClient(url, key, clients*2)
	if err != nil {
		return err
	}
	b := &serverBench{c: rt}

	fmt.Fprintf(stderr, "→ create -> first output through the API, %d runs\n", runs)
	if err := b.createFirstOutput(ctx, runs); err != nil {
		return err
	}
	s, err := b.c.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	id := s.ID()
	defer b.c.Delete(context.WithoutCancel(ctx), id)
	fmt.Fprintf(stderr, "→ exec round trips through the API, %d runs\n", runs*5)
	execT, err := timeN(runs*5, func() error { return b.exec(ctx, id, nil, "true") }, nil)
	if err != nil {
		return err
	}
	b.add("exec `true` round trip (API)", ms(execT.p50), ms(execT.p99), "p50 < 3ms")

	fmt.Fprintf(stderr, "→ exec throughput, %d concurrent clients for 5s\n", clients)
	rate, failed := perSecond(clients, 5*time.Second, func() error { return b.exec(ctx, id, nil, "true") })
	b.add(fmt.Sprintf("exec/s, %d clients", clients), fmt.Sprintf("%.0f/s", rate), fmt.Sprintf("%d failed", failed), ">= 1000/s")

	// The floor: this machine's own rate of starting `true`, with no
	// sandbox, daemon or API in the way. The server cannot beat it.
	fmt.Fprintf(stderr, "→ host floor: fork/exec of true from %d goroutines for 5s\n", clients)
	truePath, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	floor, _ := perSecond(clients, 5*time.Second, func() error { return exec.Command(truePath).Run() })
	b.add("exec/s floor: host fork/exec of `true`", fmt.Sprintf("%.0f/s", floor), fmt.Sprintf("API at %.0f%% of it", 100*rate/floor), "")

	if load > 0 {
		fmt.Fprintf(stderr, "→ load: %d clients doing create/exec/delete for %s\n", clients, load)
		notes := make(chan string, 1)
		if rs != nil {
			go rs.chaos(ctx, load, func(s string) { notes <- s })
		}
		b.load(ctx, clients, load)
		if rs != nil {
			select {
			case s := <-notes:
				b.add("replicas: "+s, fmt.Sprintf("%d requests cut (502)", rs.lb.cut.Load()), fmt.Sprintf("%d sent on to the other replica", rs.lb.retried.Load()), "")
			case <-time.After(2 * time.Minute):
			}
		}
	}

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure (through the API on loopback)\tp50 / value\tp99 / note\ttarget")
	for _, r := range b.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// benchAPI is what the bench calls on the server: the Go client's
// create and delete, and the API's own exec endpoint.
type benchAPI interface {
	Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error)
	Delete(ctx context.Context, id string) error
	APIExec(ctx context.Context, id string, req api.Exec, stdout, stderr io.Writer) (api.ExecEvent, error)
}

// serverBench is a run of the server bench: the client and the table's
// rows so far.
type serverBench struct {
	c    benchAPI
	rows [][]string
}

func (b *serverBench) add(cols ...string) { b.rows = append(b.rows, cols) }

// exec runs cmd in sandbox id through the API's exec endpoint, its
// stdout to out (when not nil).
func (b *serverBench) exec(ctx context.Context, id string, out io.Writer, cmd string, args ...string) error {
	_, err := b.c.APIExec(ctx, id, api.Exec{Cmd: cmd, Args: args}, out, nil)
	return err
}

// createFirstOutput times create -> the first output of `echo hi`.
func (b *serverBench) createFirstOutput(ctx context.Context, runs int) error {
	var ids []string
	createT, err := timeN(runs, func() error {
		s, err := b.c.Create(ctx, sandbox.Spec{})
		if err != nil {
			return err
		}
		ids = append(ids, s.ID())
		var out strings.Builder
		err = b.exec(ctx, s.ID(), &out, "echo", "hi")
		if err == nil && out.String() != "hi\n" {
			err = fmt.Errorf("first output %q", out.String())
		}
		return err
	}, func() {
		for _, id := range ids {
			b.c.Delete(ctx, id)
		}
		ids = ids[:0]
	})
	if err != nil {
		return err
	}
	b.add("create→first output (API)", ms(createT.p50), ms(createT.p99), "p50 < 25ms")
	return nil
}

// load runs create/exec/delete cycles from clients goroutines for d,
// and adds its row and a row of its errors by call.
func (b *serverBench) load(ctx context.Context, clients int, d time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	var cycles, createErrs, execErrs, deleteErrs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	failed := func(n *atomic.Int64, err error) bool {
		if err == nil {
			return false
		}
		n.Add(1)
		firstErr.CompareAndSwap(nil, err)
		return true
	}
	deadline := time.Now().Add(d)
	for range clients {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t := time.Now()
				s, err := b.c.Create(ctx, loadSandbox)
				if failed(&createErrs, err) {
					continue
				}
				execErr := b.exec(ctx, s.ID(), nil, "true")
				deleteErr := b.c.Delete(ctx, s.ID())
				if failed(&execErrs, execErr) || failed(&deleteErrs, deleteErr) {
					continue
				}
				cycles.Add(1)
				mu.Lock()
				lat = append(lat, time.Since(t))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	errs := createErrs.Load() + execErrs.Load() + deleteErrs.Load()
	b.add(fmt.Sprintf("load: create/exec/delete cycles, %d clients, %s, 256 MiB disks", clients, d), fmt.Sprintf("%d cycles, p50 %s", cycles.Load(), ms(pct(lat, 50))), fmt.Sprintf("p99 %s", ms(pct(lat, 99))), "")
	note := fmt.Sprintf("create %d, exec %d, delete %d", createErrs.Load(), execErrs.Load(), deleteErrs.Load())
	if e := firstErr.Load(); e != nil {
		note += fmt.Sprintf("; first: %v", e)
	}
	b.add("load: ERRORS seen by clients", fmt.Sprintf("%d errors", errs), note, "0 errors")
}

// loadSandbox is what the load's clients create: the default size but
// for its disk. A sandbox's disk reserves its whole limit on the host, so
// 50 clients with the default 2 GiB would need 100 GiB free at once; with
// 256 MiB they need 12.5 GiB, which a small machine has.
var loadSandbox = sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 256 << 20}}

// perSecond runs fn from n goroutines for d and returns how many calls
// per second succeeded, and how many failed.
func perSecond(n int, d time.Duration, fn func() error) (rate float64, failed int64) {
	var done, bad atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if fn() != nil {
					bad.Add(1)
				} else {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds(), bad.Load()
}
