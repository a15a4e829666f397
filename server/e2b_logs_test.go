package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox/local"
)

// e2bLogEntry and e2bMetric are E2B's SandboxLogEntry and SandboxMetric
// as the SDK reads them.
type e2bLogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

type e2bMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// e2bGet makes a GET on the E2B API, checks the status, the absence of
// host detail, and decodes a 200's body into out (which should be
// fresh: decoding merges into the maps it holds).
func (ts *testServer) e2bGet(t *testing.T, path, key string, want int, out any) []byte {
	t.Helper()
	resp, data := ts.e2bCall(t, "GET", path, key, nil, nil)
	if resp.StatusCode != want {
		t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, data, want)
	}
	noHostDetail(t, "GET "+path, data)
	if want != http.StatusOK {
		e2bErrorBody(t, resp, data)
	} else if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("GET %s: %v in %s", path, err, data)
		}
	}
	return data
}

// findEntry returns the first entry with message msg and the fields
// given, if any.
func findEntry(entries []e2bLogEntry, msg string, fields map[string]string) (e2bLogEntry, bool) {
	for _, e := range entries {
		if e.Message != msg {
			continue
		}
		ok := true
		for k, v := range fields {
			ok = ok && e.Fields[k] == v
		}
		if ok {
			return e, true
		}
	}
	return e2bLogEntry{}, false
}

// TestE2BLogs: a sandbox's logs through E2B's API (v2 and the deprecated
// v1) show its life and each process the daemon started and how it
// ended, filtered and paged as E2B's API does; another team's key gets
// 404; bad parameters get a 400 that says what is allowed.
func TestE2BLogs(t *testing.T) {
	ts := newTestServer(t, Config{})
	key, other := ts.e2bKey(t, "logs"), ts.e2bKey(t, "logs-other")
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base"})
	ts.exec(t, key, sb.SandboxID, "echo marker-42; exit 3")

	var logs struct{ Logs []e2bLogEntry }
	v2 := "/v2/sandboxes/" + sb.SandboxID + "/logs"
	eventually(t, "the command's end in the log", func() bool {
		ts.e2bGet(t, v2+"?direction=forward", key, 200, &logs)
		_, ok := findEntry(logs.Logs, "process ended", map[string]string{"exit_code": "3"})
		return ok
	})
	for _, want := range []string{"sandbox created", "sandbox daemon started", "process started", "process ended"} {
		if _, ok := findEntry(logs.Logs, want, nil); !ok {
			t.Errorf("no %q line in %+v", want, logs.Logs)
		}
	}
	started, _ := findEntry(logs.Logs, "process started", nil)
	if !strings.Contains(started.Fields["cmd"], "echo marker-42; exit 3") || started.Fields["pid"] == "" || started.Level != "info" {
		t.Errorf("process started: %+v, want the command line and its pid", started)
	}
	ended, _ := findEntry(logs.Logs, "process ended", map[string]string{"exit_code": "3"})
	if ended.Level != "warn" || ended.Fields["pid"] != started.Fields["pid"] || ended.Timestamp.Before(started.Timestamp) {
		t.Errorf("process ended: %+v after %+v", ended, started)
	}
	for i := 1; i < len(logs.Logs); i++ {
		if logs.Logs[i].Timestamp.Before(logs.Logs[i-1].Timestamp) {
			t.Errorf("forward logs out of order at %d: %+v", i, logs.Logs)
		}
	}

	t.Run("filters", func(t *testing.T) {
		type page struct{ Logs []e2bLogEntry }
		var back page
		ts.e2bGet(t, v2, key, 200, &back) // backward from now: newest first
		if len(back.Logs) != len(logs.Logs) || back.Logs[0].Timestamp.Before(back.Logs[len(back.Logs)-1].Timestamp) {
			t.Errorf("backward: %+v, want the same lines newest first", back.Logs)
		}
		back = page{}
		ts.e2bGet(t, v2+"?level=warn", key, 200, &back)
		if _, ok := findEntry(back.Logs, "process started", nil); ok || len(back.Logs) == 0 {
			t.Errorf("level=warn: %+v, want only warnings (the failed command's end)", back.Logs)
		}
		back = page{}
		ts.e2bGet(t, v2+"?search=process+ended", key, 200, &back)
		if len(back.Logs) == 0 || back.Logs[0].Message != "process ended" {
			t.Errorf("search: %+v", back.Logs)
		}
		back = page{}
		ts.e2bGet(t, v2+"?direction=forward&limit=1", key, 200, &back)
		if len(back.Logs) != 1 || back.Logs[0].Message != logs.Logs[0].Message {
			t.Errorf("forward limit=1: %+v, want the first line", back.Logs)
		}
		after := ended.Timestamp.Add(time.Millisecond).UnixMilli()
		back = page{}
		ts.e2bGet(t, fmt.Sprintf("%s?direction=forward&cursor=%d", v2, after), key, 200, &back)
		if _, ok := findEntry(back.Logs, "process started", map[string]string{"pid": started.Fields["pid"]}); ok {
			t.Errorf("forward from after the command: %+v still has its start", back.Logs)
		}
	})

	t.Run("v1", func(t *testing.T) {
		var v1 struct {
			Logs []struct {
				Timestamp time.Time `json:"timestamp"`
				Line      string    `json:"line"`
			} `json:"logs"`
			LogEntries []e2bLogEntry `json:"logEntries"`
		}
		ts.e2bGet(t, "/sandboxes/"+sb.SandboxID+"/logs", key, 200, &v1)
		if len(v1.Logs) != len(v1.LogEntries) || len(v1.Logs) < 4 {
			t.Fatalf("v1 logs: %+v", v1)
		}
		var line map[string]string
		if err := json.Unmarshal([]byte(v1.Logs[0].Line), &line); err != nil || line["message"] != v1.LogEntries[0].Message {
			t.Errorf("v1 line %q: want the entry as JSON", v1.Logs[0].Line)
		}
		var later struct{ Logs []any }
		ts.e2bGet(t, fmt.Sprintf("/sandboxes/%s/logs?start=%d&limit=1", sb.SandboxID, time.Now().Add(time.Hour).UnixMilli()), key, 200, &later)
		if len(later.Logs) != 0 {
			t.Errorf("v1 logs from an hour ahead: %+v", v1.Logs)
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		for _, q := range []string{"cursor=soon", "limit=1001", "limit=-1", "direction=up", "level=loud", "search=" + strings.Repeat("x", 257)} {
			ts.e2bGet(t, v2+"?"+q, key, 400, nil)
		}
		ts.e2bGet(t, "/sandboxes/"+sb.SandboxID+"/logs?start=yesterday", key, 400, nil)
	})

	t.Run("another team", func(t *testing.T) {
		for _, p := range []string{v2, "/sandboxes/" + sb.SandboxID + "/logs", "/v2/sandboxes/sb-nosuch/logs"} {
			ts.e2bGet(t, p, other, 404, nil)
		}
		ts.e2bGet(t, v2, "", 401, nil)
	})

	t.Run("paused", func(t *testing.T) {
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil, nil); resp.StatusCode != 204 {
			t.Fatalf("pause: %d %s", resp.StatusCode, data)
		}
		var paused struct{ Logs []e2bLogEntry }
		ts.e2bGet(t, v2+"?direction=forward", key, 200, &paused)
		if _, ok := findEntry(paused.Logs, "sandbox stopped", nil); !ok {
			t.Errorf("a paused sandbox's logs: %+v, want its stop", paused.Logs)
		}
	})
}

// TestE2BMetrics: getMetrics' route answers real figures from the
// sandbox's cgroup and disk (CPU used by a busy command, memory, a file
// written), kept as a history between start and end; /sandboxes/metrics
// gives the newest of each running sandbox of the caller's team only.
func TestE2BMetrics(t *testing.T) {
	ts := newTestServer(t, Config{})
	key, other := ts.e2bKey(t, "metrics"), ts.e2bKey(t, "metrics-other")
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base"})
	path := "/sandboxes/" + sb.SandboxID + "/metrics"
	latest := func() e2bMetric {
		var ms []e2bMetric
		ts.e2bGet(t, path, key, 200, &ms)
		if len(ms) == 0 {
			t.Fatalf("no metrics")
		}
		return ms[len(ms)-1]
	}
	first := latest()
	if first.CPUCount < 1 || first.MemTotal <= 0 || first.MemUsed <= 0 || first.DiskTotal <= 0 || first.DiskUsed <= 0 ||
		first.TimestampUnix != first.Timestamp.Unix() {
		t.Errorf("first sample: %+v, want CPUs, memory and disk", first)
	}
	// Burn CPU in the background, and write 8 MiB.
	ts.exec(t, key, sb.SandboxID, "(timeout 120 sh -c 'while :; do :; done' >/dev/null 2>&1 &) ; head -c 8388608 /dev/urandom > big; sync")
	var busy e2bMetric
	eventually(t, "CPU use and the file in the metrics", func() bool {
		busy = latest()
		return busy.CPUUsedPct > 0 && busy.DiskUsed >= first.DiskUsed+8<<20
	})
	if busy.CPUUsedPct > 100 {
		t.Errorf("cpuUsedPct %v over 100", busy.CPUUsedPct)
	}
	ts.exec(t, key, sb.SandboxID, "pkill -f 'while :' || true")

	t.Run("history", func(t *testing.T) {
		var all []e2bMetric
		ts.e2bGet(t, path, key, 200, &all)
		if len(all) < 2 {
			t.Fatalf("history: %+v, want the samples taken so far", all)
		}
		var none []e2bMetric
		ts.e2bGet(t, fmt.Sprintf("%s?start=%d&end=%d", path, first.TimestampUnix-100, first.TimestampUnix-50), key, 200, &none)
		if len(none) != 0 {
			t.Errorf("metrics from before the sandbox: %+v", none)
		}
		ts.e2bGet(t, fmt.Sprintf("%s?start=%d", path, busy.TimestampUnix), key, 200, &none)
		if len(none) == 0 || none[0].TimestampUnix < busy.TimestampUnix {
			t.Errorf("metrics from the busy sample on: %+v", none)
		}
	})

	t.Run("several", func(t *testing.T) {
		var otherSb e2bSandbox
		resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", other, map[string]any{"templateID": "base"}, nil)
		if resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &otherSb) != nil {
			t.Fatalf("create: %d %s", resp.StatusCode, data)
		}
		defer ts.e2bCall(t, "DELETE", "/sandboxes/"+otherSb.SandboxID, other, nil, nil)
		var got struct{ Sandboxes map[string]e2bMetric }
		ts.e2bGet(t, "/sandboxes/metrics?sandbox_ids="+sb.SandboxID+","+otherSb.SandboxID+",sb-nosuch", key, 200, &got)
		if len(got.Sandboxes) != 1 || got.Sandboxes[sb.SandboxID].MemTotal != first.MemTotal {
			t.Errorf("metrics of mine, another team's and an unknown: %+v, want mine only", got.Sandboxes)
		}
		var theirs struct{ Sandboxes map[string]e2bMetric }
		ts.e2bGet(t, "/sandboxes/metrics?sandbox_ids="+sb.SandboxID, other, 200, &theirs)
		if len(theirs.Sandboxes) != 0 {
			t.Errorf("another team's metrics: %+v", got.Sandboxes)
		}
		ts.e2bGet(t, "/sandboxes/metrics", key, 400, nil)
		many := make([]string, 101)
		for i := range many {
			many[i] = fmt.Sprintf("sb-%d", i)
		}
		ts.e2bGet(t, "/sandboxes/metrics?sandbox_ids="+strings.Join(many, ","), key, 400, nil)
		// A URL of 80,000 distinct ids is refused too (the handler stops
		// reading past the limit rather than checking each for repeats:
		// that was a minute of the server's CPU).
		many = make([]string, 80000)
		for i := range many {
			many[i] = strconv.FormatInt(int64(i), 36)
		}
		ts.e2bGet(t, "/sandboxes/metrics?sandbox_ids="+strings.Join(many, ","), key, 400, nil)
	})

	t.Run("bad parameters and another team", func(t *testing.T) {
		ts.e2bGet(t, path+"?start=soon", key, 400, nil)
		ts.e2bGet(t, path+"?start=200&end=100", key, 400, nil)
		ts.e2bGet(t, path, other, 404, nil)
		ts.e2bGet(t, "/sandboxes/sb-nosuch/metrics", key, 404, nil)
	})

	t.Run("paused", func(t *testing.T) {
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil, nil); resp.StatusCode != 204 {
			t.Fatalf("pause: %d %s", resp.StatusCode, data)
		}
		m := latest()
		if m.DiskUsed < first.DiskUsed+8<<20 || m.CPUUsedPct != 0 || m.MemUsed != 0 {
			t.Errorf("a paused sandbox's metrics: %+v, want its disk kept and nothing running", m)
		}
		var got struct{ Sandboxes map[string]e2bMetric }
		ts.e2bGet(t, "/sandboxes/metrics?sandbox_ids="+sb.SandboxID, key, 200, &got)
		if len(got.Sandboxes) != 0 {
			t.Errorf("/sandboxes/metrics gives a paused sandbox: %+v", got.Sandboxes)
		}
	})
}

// tenantLeaks are what no body a tenant gets may hold: hostLeaks and the
// test server's own directory (its data, the runtime's sandboxes).
func (ts *testServer) tenantLeaks(t *testing.T, what string, data []byte) {
	t.Helper()
	noHostDetail(t, what, data)
	if strings.Contains(string(data), ts.dir) {
		t.Errorf("%s shows the tenant the server's directory %s: %s", what, ts.dir, data)
	}
}

// TestE2BErrorsHideHost is an attacker's try at host paths through
// errors: bad templates, a full disk, a stopped sandbox whose disk the
// host holds or lost, and a create that cannot start, through E2B's API
// (control plane and envd), /v1, and the logs and metrics. Every answer
// may say what failed, never where on the host.
func TestE2BErrorsHideHost(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "leaks")
	check := func(what string, resp *http.Response, data []byte) {
		t.Helper()
		t.Logf("%s: %d %s", what, resp.StatusCode, data)
		ts.tenantLeaks(t, what, data)
	}
	call := func(method, path string, body any, hdr map[string]string) (int, string) {
		t.Helper()
		resp, data := ts.e2bCall(t, method, path, key, body, hdr)
		check(method+" "+path, resp, data)
		return resp.StatusCode, string(data)
	}
	want := func(what string, code int, body string, status int, text string) {
		t.Helper()
		if code != status || !strings.Contains(body, text) {
			t.Errorf("%s: %d %s, want %d saying %q", what, code, body, status, text)
		}
	}

	t.Run("bad templates", func(t *testing.T) {
		for _, tmpl := range []string{"no-such", "../../../../etc", "/etc/passwd", "a/b", strings.Repeat("x", 300), "host\x00x", "."} {
			call("POST", "/v2/sandboxes", map[string]any{"templateID": tmpl}, nil)
			call("POST", "/v1/sandboxes", map[string]any{"template": tmpl}, nil)
		}
	})

	t.Run("full disk", func(t *testing.T) {
		var sb struct{ ID string }
		ts.must(t, 201, "POST", "/v1/sandboxes", key, map[string]any{"disk_bytes": 16 << 20}, &sb)
		defer ts.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil)
		ts.exec(t, key, sb.ID, "head -c 67108864 /dev/zero > fill; echo done")
		big := strings.Repeat("x", 4<<20)
		code, body := call("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=more", big, nil)
		want("a write to a full disk", code, body, 429, "disk is full")
		code, body = call("POST", "/v1/sandboxes/"+sb.ID+"/files/mkdir?path=d/e/f", nil, nil)
		want("a mkdir on a full disk", code, body, 429, "disk is full")
		call("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", nil, nil)
		call("POST", "/v1/sandboxes/"+sb.ID+"/fork", nil, nil)
		var e2b e2bSandbox
		resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.ID+"/connect", key, map[string]any{"timeout": 300}, nil)
		if json.Unmarshal(data, &e2b) != nil {
			t.Fatalf("connect: %d %s", resp.StatusCode, data)
		}
		envd := map[string]string{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49983", "X-Access-Token": e2b.EnvdAccessToken, "Content-Type": "application/octet-stream"}
		code, body = call("POST", "/files?path=/workspace/up", big, envd)
		want("an envd upload to a full disk", code, body, 507, "")
		code, body = call("GET", "/sandboxes/"+sb.ID+"/metrics", nil, nil)
		want("the metrics of a full disk", code, body, 200, `"diskUsed"`)
		code, body = call("GET", "/v2/sandboxes/"+sb.ID+"/logs", nil, nil)
		want("the logs of a full disk", code, body, 200, "process ended")
		call("POST", "/v1/sandboxes/"+sb.ID+"/stop", nil, nil)
		call("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, nil)
	})

	t.Run("stopped disk held or lost", func(t *testing.T) {
		var sb struct{ ID string }
		ts.must(t, 201, "POST", "/v1/sandboxes", key, map[string]any{}, &sb)
		defer ts.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil)
		call("POST", "/sandboxes/"+sb.ID+"/pause", nil, nil)
		image := filepath.Join(ts.dir, "sb", sb.ID, "disk", "disk.img")
		if _, err := os.Stat(image); err != nil {
			t.Skipf("no disk image to hold: %v", err)
		}
		// The host holds the image on a loop device of its own.
		out, err := exec.Command("losetup", "-f", "--show", image).CombinedOutput()
		if err != nil {
			t.Skipf("losetup: %v %s", err, out)
		}
		dev := strings.TrimSpace(string(out))
		defer exec.Command("losetup", "-d", dev).Run()
		call("GET", "/sandboxes/"+sb.ID+"/metrics", nil, nil)
		code, body := call("POST", "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 60}, nil) // waits for the disk, then gives up
		want("a resume of a disk the host holds", code, body, 503, "request id")
		exec.Command("losetup", "-d", dev).Run()
		// The image is gone.
		if err := os.Rename(image, image+".gone"); err != nil {
			t.Fatal(err)
		}
		defer os.Rename(image+".gone", image)
		code, body = call("GET", "/sandboxes/"+sb.ID+"/metrics", nil, nil)
		want("the metrics of a lost disk", code, body, 503, "request id")
		call("GET", "/sandboxes/metrics?sandbox_ids="+sb.ID, nil, nil)
		code, body = call("GET", "/v2/sandboxes/"+sb.ID+"/logs", nil, nil)
		want("the logs of a sandbox with a lost disk", code, body, 200, "sandbox stopped")
		call("POST", "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 60}, nil)
		call("POST", "/v1/sandboxes/"+sb.ID+"/resume", nil, nil)
		code, body = call("POST", "/v1/sandboxes/"+sb.ID+"/fork", nil, nil)
		want("a fork of a lost disk", code, body, 500, "request id")
	})

	t.Run("broken create", func(t *testing.T) {
		dir := t.TempDir()
		rt, err := local.New(local.Config{Dir: filepath.Join(dir, "sb"), InitCommand: []string{filepath.Join(dir, "no-such-init")},
			Env: []string{"GORACE=atexit_sleep_ms=0"}})
		if err != nil {
			t.Skip(err)
		}
		broken := newTestServer(t, Config{Runtime: rt})
		bkey := broken.e2bKey(t, "broken")
		for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/v1/sandboxes"} {
			resp, data := broken.e2bCall(t, "POST", path, bkey, map[string]any{}, nil)
			t.Logf("POST %s: %d %s", path, resp.StatusCode, data)
			broken.tenantLeaks(t, "POST "+path, data)
			if strings.Contains(string(data), dir) {
				t.Errorf("POST %s names the runtime's directory: %s", path, data)
			}
		}
	})
}

// TestE2BLogsSDK runs testdata/e2b/logs.test.mjs: getMetrics and the
// logs through the unmodified E2B JS SDK, in both routing modes.
func TestE2BLogsSDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "logs-sdk")
	es.runSuite(t, sdk, key, "logs.test.mjs")
}
