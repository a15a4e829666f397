// Package metrics keeps the server's Prometheus figures (requests, creates,
// execs, errors) and writes them in the text exposition format.
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// metrics are the server's figures, served at /metrics in the Prometheus
// text format (version 0.0.4), written by hand: the format is small and
// a client library would be the module's largest dependency.
//
// Every label takes values from a bounded set, so no request can grow the
// series without end: route is the mux pattern that matched (never the
// raw path), method is one of the standard methods or "other", code is an
// HTTP status or an API error code.
// Metrics are the server's figures; safe for concurrent use.
type Metrics struct {
	// mu guards everything below.
	mu       sync.Mutex
	requests map[reqKey]uint64
	reqTime  map[string]*histogram // by route
	create   *histogram
	execs    map[string]uint64 // by result: ok, error
	execTime *histogram
	errors   map[string]uint64 // by API error code
}

type reqKey struct {
	method, route, code string
}

// Bucket bounds, in seconds.
var (
	requestBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	createBuckets  = []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	execBuckets    = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
)

// New returns empty figures.
func New() *Metrics {
	return &Metrics{
		requests: map[reqKey]uint64{}, reqTime: map[string]*histogram{},
		create: newHistogram(createBuckets), execs: map[string]uint64{}, execTime: newHistogram(execBuckets),
		errors: map[string]uint64{},
	}
}

// request counts a finished request by method, route and status, and its
// time by route; a 4xx or 5xx also counts as an error of its code.
func (m *Metrics) Request(r *http.Request, status int, d time.Duration) {
	route := r.Pattern
	if _, p, ok := strings.Cut(route, " "); ok {
		route = p // the method is its own label
	}
	if route == "" {
		route = "unmatched"
	}
	method := r.Method
	switch method {
	case "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE":
	default:
		method = "other"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[reqKey{method, route, strconv.Itoa(status)}]++
	h := m.reqTime[route]
	if h == nil {
		h = newHistogram(requestBuckets)
		m.reqTime[route] = h
	}
	h.observe(d)
	if status >= 400 {
		m.errors[errorCode(status)]++
	}
}

// errorCode is the API error code a status is sent with. 409 is the one
// status with two codes (exists, state); it is counted as conflict.
func errorCode(status int) string {
	switch status {
	case 400:
		return "invalid"
	case 401:
		return "unauthorized"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 409:
		return "conflict"
	case 413:
		return "too_large"
	case 429:
		return "limit"
	case 500:
		return "internal"
	case 502:
		return "upstream"
	case 503:
		return "unavailable"
	}
	return strconv.Itoa(status)
}

// created records how long a sandbox took to create (and be recorded,
// and have its manifest applied).
func (m *Metrics) Created(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.create.observe(d)
}

// exec records a finished exec: how long it ran, and whether it failed
// (could not start, or its stream broke) as opposed to running to an
// exit, whatever the exit code.
func (m *Metrics) Exec(d time.Duration, failed bool) {
	result := "ok"
	if failed {
		result = "error"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.execs[result]++
	m.execTime.observe(d)
}

// Write writes every family; counts are the sandboxes by state.
func (m *Metrics) Write(w io.Writer, counts map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()

	family(w, "cove_sandboxes", "gauge", "Sandboxes by state, as recorded in the store.")
	for _, st := range sortedKeys(counts) {
		sample(w, "cove_sandboxes", labels("state", st), float64(counts[st]))
	}

	family(w, "cove_sandbox_create_seconds", "histogram", "Time to create a sandbox, manifest applied.")
	m.create.write(w, "cove_sandbox_create_seconds", "")

	family(w, "cove_http_requests_total", "counter", "HTTP requests by method, route pattern and status.")
	keys := make([]reqKey, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b reqKey) int {
		return strings.Compare(a.route+"\x00"+a.method+"\x00"+a.code, b.route+"\x00"+b.method+"\x00"+b.code)
	})
	for _, k := range keys {
		sample(w, "cove_http_requests_total", labels("method", k.method, "route", k.route, "code", k.code), float64(m.requests[k]))
	}

	family(w, "cove_http_request_seconds", "histogram", "HTTP request time by route pattern (streams and proxied connections last as long as they are open).")
	for _, route := range sortedKeys(m.reqTime) {
		m.reqTime[route].write(w, "cove_http_request_seconds", labels("route", route))
	}

	family(w, "cove_exec_total", "counter", "Commands run by exec, by result (error: could not start or the stream broke).")
	for _, res := range []string{"ok", "error"} {
		sample(w, "cove_exec_total", labels("result", res), float64(m.execs[res]))
	}
	family(w, "cove_exec_seconds", "histogram", "Time an exec ran.")
	m.execTime.write(w, "cove_exec_seconds", "")

	family(w, "cove_errors_total", "counter", "Error responses by API error code.")
	for _, code := range sortedKeys(m.errors) {
		sample(w, "cove_errors_total", labels("code", code), float64(m.errors[code]))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func family(w io.Writer, name, typ, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// labels formats name/value pairs as {a="x",b="y"}, values escaped.
func labels(kv ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(kv[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(kv[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func sample(w io.Writer, name, labels string, v float64) {
	fmt.Fprintf(w, "%s%s %s\n", name, labels, formatFloat(v))
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// histogram is a Prometheus histogram of seconds: counts per upper bound
// (not cumulative here; written cumulative). Guarded by metrics.mu.
type histogram struct {
	bounds []float64
	counts []uint64 // len(bounds)+1: the last is +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(d time.Duration) {
	v := max(d.Seconds(), 0) // a clock moved back is no time
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

// write writes the _bucket, _sum and _count lines; lbls is "" or
// "{...}" without le.
func (h *histogram) write(w io.Writer, name, lbls string) {
	inner := strings.TrimSuffix(strings.TrimPrefix(lbls, "{"), "}")
	if inner != "" {
		inner += ","
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		le := "+Inf"
		if i < len(h.bounds) {
			le = formatFloat(h.bounds[i])
		}
		fmt.Fprintf(w, "%s_bucket{%sle=\"%s\"} %d\n", name, inner, le, cum)
	}
	fmt.Fprintf(w, "%s_sum%s %s\n", name, lbls, formatFloat(h.sum))
	fmt.Fprintf(w, "%s_count%s %d\n", name, lbls, h.n)
}
