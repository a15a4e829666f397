package e2b

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// Sandbox metrics (GET /sandboxes/{id}/metrics, GET /sandboxes/metrics):
// CPU, memory and disk as the runtime measures them from outside the
// sandbox (fleet.Metrics: each request takes a sample; a sandbox keeps
// its recent ones).

// metric is E2B's SandboxMetric.
type metric struct {
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

// maxMetricIDs is the most sandboxes GET /sandboxes/metrics names.
const maxMetricIDs = 100

func toMetric(s fleet.Sample) metric {
	return metric{
		Timestamp: s.At.UTC(), TimestampUnix: s.At.Unix(), CPUCount: s.CPUCount,
		CPUUsedPct: math.Round(s.CPUPercent*100) / 100,
		MemUsed:    s.MemUsed, MemTotal: s.MemTotal, MemCache: s.MemCache, DiskUsed: s.DiskUsed, DiskTotal: s.DiskTotal,
	}
}

// sandboxMetrics serves GET /sandboxes/{id}/metrics: the sandbox's
// samples between start and end (Unix seconds, both optional), oldest
// first, the newest taken now.
func (s *API) sandboxMetrics(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	start, msg := intParam(q, "start", 0, math.MaxInt32)
	var end int64
	if msg == "" {
		end, msg = intParam(q, "end", 0, math.MaxInt32)
	}
	if msg == "" && end > 0 && start > end {
		msg = fmt.Sprintf("start (%d) is after end (%d)", start, end)
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	var from, to time.Time
	if start > 0 {
		from = time.Unix(start, 0)
	}
	if end > 0 {
		to = time.Unix(end, 0).Add(time.Second - 1) // the whole second
	}
	samples, err := s.fleet.Metrics(r.Context(), c.team, rec.ID, from, to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]metric, 0, len(samples))
	for _, sm := range samples {
		out = append(out, toMetric(sm))
	}
	web.WriteJSON(w, http.StatusOK, out)
}

// metricsOf serves GET /sandboxes/metrics?sandbox_ids=a,b: the newest
// sample of each of the caller's running sandboxes named; the others
// (unknown, another team's, paused) are left out, as E2B does.
func (s *API) metricsOf(w http.ResponseWriter, r *http.Request, c *caller) {
	// Collecting stops past the limit: the check for repeats is
	// quadratic, and a URL may hold a hundred thousand ids.
	var ids []string
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if len(ids) > maxMetricIDs {
				break
			}
			if id = strings.TrimSpace(id); id != "" && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	switch {
	case len(ids) == 0:
		writeError(w, http.StatusBadRequest, "sandbox_ids is required: give a comma-separated list of sandbox IDs")
		return
	case len(ids) > maxMetricIDs:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("sandbox_ids: more than %d IDs, the limit", maxMetricIDs))
		return
	}
	latest, err := s.fleet.LatestMetrics(r.Context(), c.team, ids)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make(map[string]metric, len(latest))
	for id, sm := range latest {
		out[id] = toMetric(sm)
	}
	web.WriteJSON(w, http.StatusOK, struct {
		Sandboxes map[string]metric `json:"sandboxes"`
	}{out})
}
