package cli

import (
	"bytes"
	"encoding/json"
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
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// writes are what clients were told succeeded: a sandbox made, then
// files written into it.
type writes struct {
	mu        sync.Mutex
	sandboxes []string
	files     map[string]string // "sandbox/path" -> content
	acked     atomic.Int64
	failed    atomic.Int64
}

// client makes a sandbox through lb and writes numbered files into it
// until stop is closed, recording each write acknowledged.
func (w *writes) client(lb, key string, n int, stop <-chan struct{}) {
	var sb api.Sandbox
	for {
		select {
		case <-stop:
			return
		default:
		}
		if code := lbCall(lb, "POST", "/v1/sandboxes", key, strings.NewReader("{}"), &sb); code == http.StatusCreated {
			break
		}
		w.failed.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	w.sandboxes = append(w.sandboxes, sb.ID)
	w.mu.Unlock()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		path := fmt.Sprintf("f%d.txt", i)
		content := fmt.Sprintf("client %d write %d", n, i)
		if lbCall(lb, "PUT", "/v1/sandboxes/"+sb.ID+"/files?path="+path, key, strings.NewReader(content), nil) != http.StatusNoContent {
			w.failed.Add(1)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		w.mu.Lock()
		w.files[sb.ID+"/"+path] = content
		w.mu.Unlock()
		w.acked.Add(1)
	}
}

// lbCall makes a request and decodes a JSON answer into out (when set);
// -1 when no answer came.
func lbCall(base, method, path, key string, body io.Reader, out any) int {
	req, _ := http.NewRequest(method, base+path, body)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

// waitFor waits until cond holds; after two minutes the test fails.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("two minutes passed and still not: %s", what)
}

// TestReplicasSurviveKill: two `cove serve --replicas` processes on one
// data directory (its SQLite store and its sandboxes) behind a
// round-robin balancer, under clients making sandboxes and writing
// files: the one running the lifecycle loop is SIGKILLed mid-load, the
// other takes the loop over, the killed one is restarted, and every
// write a client was told succeeded is there at the end.
func TestReplicasSurviveKill(t *testing.T) {
	replicasSurviveKill(t, "--replicas")
}

// TestReplicasSurviveKillPostgres: the same on one PostgreSQL store,
// with no flag but --store: a shared store is enough for the replicas
// to elect one loop.
func TestReplicasSurviveKillPostgres(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	replicasSurviveKill(t, "--store", pgtest.NewDatabase(t))
}

// replicasSurviveKill runs the kill test with servers started with
// flags.
func replicasSurviveKill(t *testing.T, flags ...string) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "cr")
	reps := []*serveProc{startServe(t, home, data, flags...)}
	admin := reps[0].admin
	reps = append(reps, startServe(t, home, data, flags...))
	rr := &roundRobin{}
	rr.set(reps[0].url, reps[1].url)
	front := httptest.NewServer(rr)
	defer front.Close()

	var k api.Key
	if code := lbCall(front.URL, "POST", "/v1/keys", admin, strings.NewReader(`{"name":"load","new_team":"load"}`), &k); code != http.StatusCreated {
		t.Fatalf("making a team key: %d", code)
	}
	holder := func(p *serveProc) bool { return strings.Contains(p.stderr.String(), "lease taken") }
	waitFor(t, "a replica runs the lifecycle loop", func() bool { return holder(reps[0]) || holder(reps[1]) })
	victim := 0
	if holder(reps[1]) {
		victim = 1
	}
	survivor := reps[1-victim]

	w := &writes{files: map[string]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for n := range 6 {
		wg.Go(func() { w.client(front.URL, k.Secret, n, stop) })
	}
	t.Cleanup(func() { // the sandboxes go before the servers
		for _, id := range w.sandboxes {
			lbCall(front.URL, "DELETE", "/v1/sandboxes/"+id, admin, nil, nil)
		}
	})
	waitFor(t, "30 writes acknowledged", func() bool { return w.acked.Load() >= 30 })
	reps[victim].cmd.Process.Kill() // SIGKILL, mid-load
	reps[victim].cmd.Wait()
	killedAt := w.acked.Load()
	waitFor(t, "the survivor takes the lifecycle loop over", func() bool { return holder(survivor) })
	waitFor(t, "30 more writes after the kill", func() bool { return w.acked.Load() >= killedAt+30 })
	restarted := startServe(t, home, data, flags...)
	rr.set(survivor.url, restarted.url)
	restartedAt := w.acked.Load()
	waitFor(t, "30 more writes after the restart", func() bool { return w.acked.Load() >= restartedAt+30 })
	close(stop)
	wg.Wait()
	// Only requests the kill cut mid-way may fail: a replica that is
	// up answers every one.
	t.Logf("%d writes acknowledged; %d failed, %d of them cut mid-request by the kill", w.acked.Load(), w.failed.Load(), rr.cut.Load())
	if w.failed.Load() > rr.cut.Load() {
		t.Errorf("%d requests failed that no kill cut", w.failed.Load()-rr.cut.Load())
	}

	for _, id := range w.sandboxes {
		if code := lbCall(front.URL, "GET", "/v1/sandboxes/"+id, k.Secret, nil, nil); code != http.StatusOK {
			t.Errorf("sandbox %s, acknowledged as made: %d", id, code)
		}
	}
	for key, want := range w.files {
		id, path, _ := strings.Cut(key, "/")
		req, _ := http.NewRequest("GET", front.URL+"/v1/sandboxes/"+id+"/files?path="+path, nil)
		req.Header.Set("Authorization", "Bearer "+k.Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(got, []byte(want)) {
			t.Errorf("acknowledged write %s: %d %q, want %q", key, resp.StatusCode, got, want)
		}
	}
}
