package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/server"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// benchServer measures the server through its API on loopback: create ->
// first output, exec round trips, exec throughput with concurrent
// clients, and a create/exec/delete load. With url empty it starts its
// own server (local runtime, SQLite) in a temp dir.
func benchServer(ctx context.Context, url, key string, runs, clients int, load time.Duration, stdout, stderr io.Writer) error {
	if url == "" {
		if os.Geteuid() != 0 {
			return fmt.Errorf("bench --server without a URL starts a server on the local runtime, which needs root")
		}
		dir, err := os.MkdirTemp("", "cove-bench-srv-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		rt, err := serverRuntime("", dir, 2, "")
		if err != nil {
			return err
		}
		st, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
		if err != nil {
			return err
		}
		defer st.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		url = "http://" + l.Addr().String()
		srv, err := server.New(server.Config{Runtime: rt, Store: st, DataDir: dir, BaseURL: url})
		if err != nil {
			return err
		}
		if key, err = srv.EnsureAdmin(ctx); err != nil {
			return err
		}
		srv.Start()
		defer srv.Close()
		rt.FillPool()
		rt.WaitPool()
		defer rt.DrainPool(context.Background())
		hs := &http.Server{Handler: srv.Handler()}
		go hs.Serve(l)
		defer hs.Close()
		defer func() {
			infos, _ := rt.List(context.Background())
			for _, in := range infos {
				rt.Delete(context.Background(), in.ID)
			}
		}()
	}
	c := &benchClient{&apiClient{url: strings.TrimSuffix(url, "/"), key: key, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients * 2}}}}
	var rows [][]string
	add := func(cols ...string) { rows = append(rows, cols) }

	fmt.Fprintf(stderr, "→ create -> first output through the API, %d runs\n", runs)
	var ids []string
	createT, err := timeN(runs, func() error {
		id, err := c.create(ctx, api.CreateSandbox{})
		if err != nil {
			return err
		}
		ids = append(ids, id)
		out, _, err := c.exec(ctx, id, "echo", "hi")
		if err == nil && out != "hi\n" {
			err = fmt.Errorf("first output %q", out)
		}
		return err
	}, func() {
		for _, id := range ids {
			c.delete(ctx, id)
		}
		ids = ids[:0]
	})
	if err != nil {
		return err
	}
	add("create→first output (API)", ms(createT.p50), ms(createT.p99), "p50 < 25ms")

	id, err := c.create(ctx, api.CreateSandbox{})
	if err != nil {
		return err
	}
	defer c.delete(context.WithoutCancel(ctx), id)
	fmt.Fprintf(stderr, "→ exec round trips through the API, %d runs\n", runs*5)
	execT, err := timeN(runs*5, func() error { _, _, err := c.exec(ctx, id, "true"); return err }, nil)
	if err != nil {
		return err
	}
	add("exec `true` round trip (API)", ms(execT.p50), ms(execT.p99), "p50 < 3ms")

	fmt.Fprintf(stderr, "→ exec throughput, %d concurrent clients for 5s\n", clients)
	rate, failed := perSecond(clients, 5*time.Second, func() error { _, _, err := c.exec(ctx, id, "true"); return err })
	add(fmt.Sprintf("exec/s, %d clients", clients), fmt.Sprintf("%.0f/s", rate), fmt.Sprintf("%d failed", failed), ">= 1000/s")

	// The floor: this machine's own rate of starting `true`, with no
	// sandbox, daemon or API in the way. The server cannot beat it.
	fmt.Fprintf(stderr, "→ host floor: fork/exec of true from %d goroutines for 5s\n", clients)
	truePath, err := exec.LookPath("true")
	if err != nil {
		return err
	}
	floor, _ := perSecond(clients, 5*time.Second, func() error { return exec.Command(truePath).Run() })
	add("exec/s floor: host fork/exec of `true`", fmt.Sprintf("%.0f/s", floor), fmt.Sprintf("API at %.0f%% of it", 100*rate/floor), "")

	if load > 0 {
		fmt.Fprintf(stderr, "→ load: %d clients doing create/exec/delete for %s\n", clients, load)
		var mu sync.Mutex
		var lat []time.Duration
		var cycles, errs atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		deadline := time.Now().Add(load)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					t := time.Now()
					err := func() error {
						id, err := c.create(ctx, loadSandbox)
						if err != nil {
							return err
						}
						defer c.delete(ctx, id)
						_, _, err = c.exec(ctx, id, "true")
						return err
					}()
					if err != nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					cycles.Add(1)
					mu.Lock()
					lat = append(lat, time.Since(t))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		note := fmt.Sprintf("%d errors", errs.Load())
		if e := firstErr.Load(); e != nil {
			note += fmt.Sprintf(" (first: %v)", e)
		}
		add(fmt.Sprintf("load: create/exec/delete cycles, %d clients, %s, 256 MiB disks", clients, load), fmt.Sprintf("%d cycles, p50 %s", cycles.Load(), ms(pct(lat, 50))), fmt.Sprintf("p99 %s; %s", ms(pct(lat, 99)), note), "0 errors")
	}

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure (through the API on loopback)\tp50 / value\tp99 / note\ttarget")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// loadSandbox is what the load's clients create: the default size but
// for its disk. A sandbox's disk reserves its whole limit on the host, so
// 50 clients with the default 2 GiB would need 100 GiB free at once; with
// 256 MiB they need 12.5 GiB, which a small machine has.
var loadSandbox = api.CreateSandbox{DiskBytes: 256 << 20}

// benchClient makes the raw API calls the bench times.
type benchClient struct{ *apiClient }

func (c *benchClient) create(ctx context.Context, req api.CreateSandbox) (string, error) {
	resp, err := c.send(ctx, "POST", "/v1/sandboxes", req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb api.Sandbox
	err = json.NewDecoder(resp.Body).Decode(&sb)
	return sb.ID, err
}

func (c *benchClient) delete(ctx context.Context, id string) {
	if resp, err := c.send(ctx, "DELETE", "/v1/sandboxes/"+id, nil); err == nil {
		resp.Body.Close()
	}
}

// exec runs a command through the NDJSON exec endpoint and returns its
// stdout and exit code.
func (c *benchClient) exec(ctx context.Context, id, cmd string, args ...string) (string, int, error) {
	resp, err := c.send(ctx, "POST", "/v1/sandboxes/"+id+"/exec", api.Exec{Cmd: cmd, Args: args})
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4<<10), 1<<20) // grows for long lines only
	for sc.Scan() {
		var ev api.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return "", 0, err
		}
		switch ev.Type {
		case "stdout":
			out.Write(ev.Data)
		case "exit":
			return out.String(), *ev.ExitCode, nil
		case "error":
			return "", 0, fmt.Errorf("exec: %s", ev.Error)
		}
	}
	return "", 0, fmt.Errorf("exec stream ended without an exit event: %v", sc.Err())
}

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
