package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cove-sandbox/cove/server/api"
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
