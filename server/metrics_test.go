package server

import (
	"bufio"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
)

// sampleLine is one sample of the text format: a name, labels with
// quoted (escaped) values, and a number.
var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*)?\})? (\S+)$`)

// scrape fetches /metrics and returns its samples by "name{labels}",
// failing on any line that is not a comment or a well-formed sample.
func scrape(t *testing.T, ts *testServer) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	samples := map[string]float64{}
	var all strings.Builder
	typed := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		all.WriteString(line + "\n")
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			typed[f[2]] = f[3]
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a sample line: %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil && m[3] != "+Inf" {
			t.Fatalf("bad value in %q", line)
		}
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_sum"), "_count")
		if typed[m[1]] == "" && typed[family] != "histogram" {
			t.Errorf("sample %q comes before its # TYPE", line)
		}
		samples[m[1]+m[2]] = v
	}
	return samples, all.String()
}

func TestMetrics(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "metrics")
	sb := ts.create(t, key, api.CreateSandbox{})
	stopped := ts.create(t, key, api.CreateSandbox{})
	ts.must(t, 200, "POST", "/v1/sandboxes/"+stopped.ID+"/stop", key, nil, nil)
	ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID, key, nil, nil)
	ts.call(t, "GET", "/v1/sandboxes/sb-nosuch", key, nil)
	ts.call(t, "GET", "/nothing/here", "", nil)
	ts.call(t, "GET", "/v1/sandboxes", "", nil)
	ts.metrics.Exec(1500*time.Millisecond, false)
	ts.metrics.Exec(20*time.Millisecond, true)

	got, text := scrape(t, ts)
	for _, want := range []struct {
		sample string
		min    float64
	}{
		{`cove_sandboxes{state="running"}`, 1},
		{`cove_sandboxes{state="stopped"}`, 1},
		{`cove_sandbox_create_seconds_count`, 2},
		{`cove_sandbox_create_seconds_bucket{le="+Inf"}`, 2},
		{`cove_http_requests_total{method="POST",route="/v1/sandboxes",code="201"}`, 2},
		{`cove_http_requests_total{method="GET",route="/v1/sandboxes/{id}",code="200"}`, 1},
		{`cove_http_requests_total{method="GET",route="/v1/sandboxes/{id}",code="404"}`, 1},
		{`cove_http_requests_total{method="GET",route="unmatched",code="404"}`, 1},
		{`cove_http_request_seconds_count{route="/v1/sandboxes/{id}"}`, 2},
		{`cove_exec_total{result="ok"}`, 1},
		{`cove_exec_total{result="error"}`, 1},
		{`cove_exec_seconds_count`, 2},
		{`cove_exec_seconds_bucket{le="0.05"}`, 1},
		{`cove_exec_seconds_bucket{le="2.5"}`, 2},
		{`cove_errors_total{code="not_found"}`, 2},
		{`cove_errors_total{code="unauthorized"}`, 1},
	} {
		if v, ok := got[want.sample]; !ok || v < want.min {
			t.Errorf("%s = %v (present %v), want >= %v", want.sample, v, ok, want.min)
		}
	}
	if got[`cove_exec_seconds_bucket{le="1"}`] != 1 || !near(got[`cove_exec_seconds_sum`], 1.52) {
		t.Errorf("exec histogram: le=1 %v, sum %v", got[`cove_exec_seconds_bucket{le="1"}`], got[`cove_exec_seconds_sum`])
	}
	// Routes are patterns: no sandbox id becomes a label.
	if strings.Contains(text, sb.ID) || strings.Contains(text, "sb-nosuch") || strings.Contains(text, "/nothing/here") {
		t.Errorf("a raw path became a label:\n%s", text)
	}
	for _, fam := range []string{"cove_sandboxes", "cove_sandbox_create_seconds", "cove_http_requests_total",
		"cove_http_request_seconds", "cove_exec_total", "cove_exec_seconds", "cove_errors_total"} {
		if !strings.Contains(text, "# TYPE "+fam+" ") {
			t.Errorf("no family %s", fam)
		}
	}
}
