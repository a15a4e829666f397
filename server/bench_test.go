package server

import (
	"io"
	"time"

	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"

	"github.com/cove-sandbox/cove/api"
)

// BenchmarkExecAPI times an exec round trip (`true`) through the API on
// loopback: auth, the record, the runtime, the NDJSON stream.
func BenchmarkExecAPI(b *testing.B) {
	ts := newTestServer(b, Config{})
	key := ts.teamKey(b, "bench")
	sb := ts.create(b, key, api.CreateSandbox{})
	body, _ := json.Marshal(api.Exec{Cmd: "true"})
	for b.Loop() {
		req, _ := http.NewRequest("POST", ts.URL+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		exited := false
		for sc.Scan() {
			var ev api.ExecEvent
			json.Unmarshal(sc.Bytes(), &ev)
			exited = exited || ev.Type == "exit"
		}
		resp.Body.Close()
		if !exited {
			b.Fatal("no exit event")
		}
	}
}

// BenchmarkCreateAPI times POST /v1/sandboxes (and the delete, untimed).
func BenchmarkCreateAPI(b *testing.B) {
	ts := newTestServer(b, Config{})
	key := ts.teamKey(b, "bench")
	for b.Loop() {
		sb := ts.create(b, key, api.CreateSandbox{})
		b.StopTimer()
		ts.must(b, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)
		b.StartTimer()
	}
}

// BenchmarkCreateRuntime times the runtime's own create, for comparison.
func BenchmarkCreateRuntime(b *testing.B) {
	ts := newTestServer(b, Config{})
	for b.Loop() {
		s, err := ts.Runtime.Create(b.Context(), sandboxSpecSmall())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ts.Runtime.Delete(b.Context(), s.ID())
		b.StartTimer()
	}
}

func sandboxSpecSmall() sandbox.Spec {
	sz := api.Sizes["small"]
	return sandbox.Spec{TTL: 30 * time.Minute, Limits: sandbox.Limits{CPUs: sz.CPUs, MemoryBytes: sz.MemoryBytes, DiskBytes: sz.DiskBytes}}
}

// BenchmarkCreateRuntimeNoDisk: the same without a disk limit.
func BenchmarkCreateRuntimeNoDisk(b *testing.B) {
	ts := newTestServer(b, Config{})
	spec := sandboxSpecSmall()
	spec.Limits.DiskBytes = 0
	for b.Loop() {
		s, err := ts.Runtime.Create(b.Context(), spec)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		ts.Runtime.Delete(b.Context(), s.ID())
		b.StartTimer()
	}
}

// BenchmarkExecAPIParallel: exec round trips from 50 concurrent clients.
func BenchmarkExecAPIParallel(b *testing.B) {
	ts := newTestServer(b, Config{})
	key := ts.teamKey(b, "bench")
	sb := ts.create(b, key, api.CreateSandbox{})
	body, _ := json.Marshal(api.Exec{Cmd: "true"})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	b.SetParallelism(25)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", ts.URL+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}
