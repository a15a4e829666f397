package server

import (
	"context"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Readiness. GET /ready tells a load balancer (or a Kubernetes
// readinessProbe) whether to send this replica requests: 200 when it can
// serve them, 503 with a short reason when it cannot. GET /health stays
// liveness: a replica whose database is away is alive and comes back by
// itself when the database does, so restarting it would not help.
//
// Like /health it needs no key, so what it says is for anyone: a fixed
// reason naming the part that failed, never the error (a driver's error
// names the database's host, and may quote its URL). The error goes to
// the log, once when readiness is lost and once when it is back.

// readyTimeout bounds how long the store (and a runtime with a service
// behind it, such as the kube runtime's API server) may take to answer a
// readiness check: a probe's own timeout is often 1 s, and a store that
// takes longer is as good as down to the requests behind it.
const readyTimeout = 900 * time.Millisecond

// readiness is the body of GET /ready.
type readiness struct {
	Status string `json:"status"` // "ready" or "unavailable"
	Reason string `json:"reason,omitempty"`
}

// ready answers GET /ready.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	reason, err := s.unready(r.Context())
	was := !s.unreadyNow.Swap(reason != "")
	switch {
	case reason != "" && was:
		s.log.Warn("not ready", "reason", reason, "err", err)
	case reason == "" && !was:
		s.log.Info("ready again")
	}
	if reason != "" {
		writeJSON(w, http.StatusServiceUnavailable, readiness{Status: "unavailable", Reason: reason})
		return
	}
	writeJSON(w, http.StatusOK, readiness{Status: "ready"})
}

// unready says why this replica cannot serve now ("" when it can), and
// the error behind it for the log.
func (s *Server) unready(ctx context.Context) (string, error) {
	if s.closing() {
		return "shutting down", nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := s.cfg.Store.Ping(ctx); err != nil {
		return "the store does not answer", err
	}
	if p, ok := s.cfg.Runtime.(sandbox.Pinger); ok {
		if err := p.Ping(ctx); err != nil {
			return "the sandbox runtime does not answer", err
		}
	}
	// Sign-ins and team secrets are sealed with it: a replica that
	// cannot read its key would refuse every session of its peers.
	if _, err := s.runs.Sealer(); err != nil {
		return "the secret key cannot be read", err
	}
	return "", nil
}
