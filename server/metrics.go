package server

import (
	"bytes"
	"net/http"
)

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
