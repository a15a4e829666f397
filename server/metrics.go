package server

import (
	"bytes"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/server/internal/metrics"
)

// serverMetrics are the server's figures (server/internal/metrics), by the
// names its handlers use.
type serverMetrics struct{ *metrics.Metrics }

func newMetrics() *serverMetrics { return &serverMetrics{metrics.New()} }

func (m *serverMetrics) request(r *http.Request, status int, d time.Duration) {
	m.Request(r, status, d)
}
func (m *serverMetrics) created(d time.Duration)           { m.Created(d) }
func (m *serverMetrics) exec(d time.Duration, failed bool) { m.Exec(d, failed) }

// serveMetrics writes every family. The sandbox counts are read from the
// store on each scrape, so they are right whichever server changed them.
// It needs no API key: the figures name no team or sandbox.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	counts, err := s.fleet.Counts(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Rendered first, so a slow scraper does not hold up the requests
	// that update the figures.
	var b bytes.Buffer
	s.metrics.Write(&b, counts)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write(b.Bytes())
}
