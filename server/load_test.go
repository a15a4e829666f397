package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// TestConcurrentClients: many clients creating, running a command in and
// deleting sandboxes at once all succeed, and nothing is left. (The 30 s,
// 50-client version with its latency table is `cove bench --server
// --load 30s`; this one is bounded for CI.)
func TestConcurrentClients(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "load")
	const clients, cycles = 20, 2
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	errs := make(chan error, clients*cycles)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cycles {
				if err := cycle(client, ts, key, fmt.Sprintf("%d-%d", c, i)); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("%d sandboxes left after every client deleted its own", len(list.Sandboxes))
	}
}

// cycle creates a sandbox, runs echo in it through the NDJSON exec, checks
// the output, and deletes it.
func cycle(client *http.Client, ts *testServer, key, tag string) error {
	do := func(method, path string, body any) (*http.Response, error) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, ts.URL+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		return client.Do(req)
	}
	resp, err := do("POST", "/v1/sandboxes", api.CreateSandbox{Labels: map[string]string{"cycle": tag}})
	if err != nil {
		return err
	}
	var sb api.Sandbox
	json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return fmt.Errorf("create %s: %d", tag, resp.StatusCode)
	}
	resp, err = do("POST", "/v1/sandboxes/"+sb.ID+"/exec", api.Exec{Cmd: "echo", Args: []string{tag}})
	if err != nil {
		return err
	}
	var out string
	var exit *int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev api.ExecEvent
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == "stdout" {
			out += string(ev.Data)
		}
		if ev.Type == "exit" {
			exit = ev.ExitCode
		}
	}
	resp.Body.Close()
	if exit == nil || *exit != 0 || out != tag+"\n" {
		return fmt.Errorf("exec in %s (%s): output %q, exit %v", sb.ID, tag, out, exit)
	}
	resp, err = do("DELETE", "/v1/sandboxes/"+sb.ID, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		return fmt.Errorf("delete %s: %d", sb.ID, resp.StatusCode)
	}
	return nil
}
