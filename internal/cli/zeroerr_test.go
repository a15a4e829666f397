package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/remote"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// loadLog is what the clients of TestReplicasZeroErrors were told: the
// sandboxes made (and those deleted since), the files written, and
// every error any call returned.
type loadLog struct {
	// mu guards everything but the counters.
	mu      sync.Mutex
	made    map[string]bool // sandbox id -> still there (not deleted)
	files   map[string]string
	errs    []string
	acked   atomic.Int64
	cycles  atomic.Int64
	numErrs atomic.Int64
}

func (l *loadLog) fail(format string, args ...any) {
	l.numErrs.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 20 {
		l.errs = append(l.errs, fmt.Sprintf(format, args...))
	}
}

// zeroErrClient runs cycles until stop: create a sandbox with the Go
// client, write three files through the REST API and read one back,
// and delete every other sandbox (the rest are checked at the end).
func (l *loadLog) client(ctx context.Context, rt *remote.Runtime, hc *http.Client, base, key string, n int, stop <-chan struct{}) {
	for c := 0; ; c++ {
		select {
		case <-stop:
			return
		default:
		}
		s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 64 << 20}})
		if err != nil {
			l.fail("client %d create: %v", n, err)
			continue
		}
		l.mu.Lock()
		l.made[s.ID()] = true
		l.mu.Unlock()
		for i := range 3 {
			path, content := fmt.Sprintf("f%d.txt", i), fmt.Sprintf("client %d cycle %d file %d", n, c, i)
			code, body := restCall(ctx, hc, "PUT", base+"/v1/sandboxes/"+s.ID()+"/files?path="+path, key, content)
			if code != http.StatusNoContent {
				l.fail("client %d write %s/%s: %d %s", n, s.ID(), path, code, body)
				continue
			}
			l.mu.Lock()
			l.files[s.ID()+"/"+path] = content
			l.mu.Unlock()
			l.acked.Add(1)
		}
		code, body := restCall(ctx, hc, "GET", base+"/v1/sandboxes/"+s.ID()+"/files?path=f0.txt", key, "")
		if want := fmt.Sprintf("client %d cycle %d file 0", n, c); code != 200 || body != want {
			l.fail("client %d read %s/f0.txt: %d %q, want %q", n, s.ID(), code, body, want)
		}
		if c%2 == 0 {
			if err := rt.Delete(ctx, s.ID()); err != nil {
				l.fail("client %d delete %s: %v", n, s.ID(), err)
			} else {
				l.mu.Lock()
				l.made[s.ID()] = false
				l.mu.Unlock()
			}
		}
		l.cycles.Add(1)
	}
}

// restCall makes a REST request with hc (a retrying client) and returns
// the status and body; -1 and the error when no answer came.
func restCall(ctx context.Context, hc *http.Client, method, url, key, body string) (int, string) {
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// TestReplicasZeroErrors: two `cove serve --replicas` on one SQLite
// store behind the balancer (health-checked, retrying what is safe),
// eight clients with the Go client (retrying what is safe, creates with
// their own Idempotency-Keys) creating, writing, reading and deleting;
// the replica running the lifecycle loop is SIGKILLed mid-run and
// restarted. No client sees an error, every acknowledged write reads
// back, and no create made two sandboxes (the team has exactly the
// sandboxes the clients were told of).
func TestReplicasZeroErrors(t *testing.T) {
	replicasZeroErrors(t, "--replicas")
}

// TestReplicasZeroErrorsPostgres: the same on one PostgreSQL store.
func TestReplicasZeroErrorsPostgres(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	replicasZeroErrors(t, "--store", pgtest.NewDatabase(t))
}

func replicasZeroErrors(t *testing.T, flags ...string) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "cz")
	reps := []*serveProc{startServe(t, home, data, flags...)}
	admin := reps[0].admin
	reps = append(reps, startServe(t, home, data, flags...))
	rr := &roundRobin{}
	rr.set(reps[0].url, reps[1].url)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go rr.checkHealth(ctx, 200*time.Millisecond)
	front := httptest.NewServer(rr)
	defer front.Close()

	var k api.Key
	if code := lbCall(front.URL, "POST", "/v1/keys", admin, strings.NewReader(`{"name":"load","new_team":"zero"}`), &k); code != http.StatusCreated {
		t.Fatalf("making a team key: %d", code)
	}
	rt, err := remote.New(remote.Config{URL: front.URL, APIKey: k.Secret})
	if err != nil {
		t.Fatal(err)
	}
	hc := remote.RetryingClient(&http.Client{}, 0)
	holder := func(p *serveProc) bool { return strings.Contains(p.stderr.String(), "lease taken") }
	waitFor(t, "a replica runs the lifecycle loop", func() bool { return holder(reps[0]) || holder(reps[1]) })
	victim := 0
	if holder(reps[1]) {
		victim = 1
	}
	survivor := reps[1-victim]

	l := &loadLog{made: map[string]bool{}, files: map[string]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for n := range 8 {
		wg.Go(func() { l.client(ctx, rt, hc, front.URL, k.Secret, n, stop) })
	}
	t.Cleanup(func() { // the sandboxes go before the servers
		for id := range l.made {
			lbCall(front.URL, "DELETE", "/v1/sandboxes/"+id, admin, nil, nil)
		}
	})
	waitFor(t, "30 writes acknowledged", func() bool { return l.acked.Load() >= 30 })
	reps[victim].cmd.Process.Kill() // SIGKILL, mid-load
	reps[victim].cmd.Wait()
	killedAt := l.acked.Load()
	waitFor(t, "the survivor takes the lifecycle loop over", func() bool { return holder(survivor) })
	waitFor(t, "30 more writes after the kill", func() bool { return l.acked.Load() >= killedAt+30 })
	restarted := startServe(t, home, data, flags...)
	rr.set(survivor.url, restarted.url)
	restartedAt := l.acked.Load()
	waitFor(t, "30 more writes after the restart", func() bool { return l.acked.Load() >= restartedAt+30 })
	close(stop)
	wg.Wait()
	t.Logf("%d cycles, %d writes acknowledged, %d errors; the balancer sent %d requests to the other replica and cut %d",
		l.cycles.Load(), l.acked.Load(), l.numErrs.Load(), rr.retried.Load(), rr.cut.Load())
	for _, e := range l.errs {
		t.Errorf("a client saw: %s", e)
	}
	l.checkKept(t, rt, hc, front.URL, k.Secret)
}

// checkKept checks that every acknowledged write of a sandbox not
// deleted reads back, and that the team has exactly the sandboxes the
// clients were told of (a create done twice would leave one more).
func (l *loadLog) checkKept(t *testing.T, rt *remote.Runtime, hc *http.Client, base, key string) {
	ctx := t.Context()
	for file, want := range l.files {
		id, path, _ := strings.Cut(file, "/")
		if !l.made[id] {
			continue
		}
		if code, got := restCall(ctx, hc, "GET", base+"/v1/sandboxes/"+id+"/files?path="+path, key, ""); code != 200 || got != want {
			t.Errorf("acknowledged write %s: %d %q, want %q", file, code, got, want)
		}
	}
	infos, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, there := range l.made {
		if there {
			want++
		}
	}
	for _, in := range infos {
		if !l.made[in.ID] {
			t.Errorf("sandbox %s exists that no client was told of (a create done twice?)", in.ID)
		}
	}
	if len(infos) != want {
		t.Errorf("the team has %d sandboxes, the clients kept %d", len(infos), want)
	}
}
