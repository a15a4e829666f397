package server

import (
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/api"
)

func (s *Server) usageRoutes() {
	s.handle("GET /v1/usage", s.usage)
}

// usage reports the caller's team's metered use over [from, to) (RFC 3339
// query parameters; by default the current calendar month, UTC), per
// sandbox (deleted ones too) and in total (fleet's Usage). An admin key
// may ask for another team's with team=. With by=day the report also has
// the team's use per UTC day, for charts. Models is the model use of the
// team's agent runs made in the period (runs' ModelUsage).
func (s *Server) usage(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	now := s.fleet.Now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"from", &from}, {"to", &to}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				s.fail(w, r, invalid("%s: %q is not an RFC 3339 time such as 2026-01-02T15:04:05Z", p.name, v))
				return
			}
			*p.t = t
		}
	}
	byDay := false
	switch q.Get("by") {
	case "":
	case "day":
		byDay = true
	default:
		s.fail(w, r, invalid("by: %q is not known; use by=day (or leave it out)", q.Get("by")))
		return
	}
	team := c.team
	if t := q.Get("team"); t != "" && t != team {
		if !c.key.Admin {
			writeError(w, r, http.StatusForbidden, api.CodeForbidden, "only an admin key may see another team's usage")
			return
		}
		team = t
	}
	rep, err := s.fleet.Usage(r.Context(), team, from, to, byDay)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	models, days, err := s.runs.ModelUsage(r.Context(), team, from, to)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rep.Models = &models
	for i := range rep.Days {
		rep.Days[i].Models = days[rep.Days[i].Date]
		if rep.Days[i].Models == nil {
			rep.Days[i].Models = &api.ModelUsage{}
		}
	}
	writeJSON(w, http.StatusOK, rep)
}
