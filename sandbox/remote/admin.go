package remote

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// The team's side of the API that is not sandboxes: API keys, quotas and
// usage. A Runtime is the one Go client of a Cove server; these calls
// go with the same key, and fail with the same *Error and sentinels
// (sandbox.ErrPermission for a call the key may not make).

// CreateKey makes an API key. An admin key may make one for another team
// (req.Team), a new team (req.NewTeam) or an admin key; others make keys
// of their own team. The key's secret is in this answer only.
func (r *Runtime) CreateKey(ctx context.Context, req api.CreateKey) (api.Key, error) {
	var k api.Key
	if err := r.call(ctx, http.MethodPost, "/v1/keys", req, &k); err != nil {
		return api.Key{}, fmt.Errorf("creating key %q: %w", req.Name, err)
	}
	return k, nil
}

// Keys lists the team's keys, revoked ones too; with all, an admin key
// lists every team's.
func (r *Runtime) Keys(ctx context.Context, all bool) ([]api.Key, error) {
	p := "/v1/keys"
	if all {
		p += "?all=true"
	}
	var out struct {
		Keys []api.Key `json:"keys"`
	}
	if err := r.call(ctx, http.MethodGet, p, nil, &out); err != nil {
		return nil, fmt.Errorf("listing keys: %w", err)
	}
	return out.Keys, nil
}

// RevokeKey revokes key id (an admin key: any team's).
func (r *Runtime) RevokeKey(ctx context.Context, id string) error {
	p, err := segmentPath("/v1/keys/", id, "key")
	if err == nil {
		err = r.call(ctx, http.MethodDelete, p, nil, nil)
	}
	if err != nil {
		return fmt.Errorf("revoking key %q: %w", id, err)
	}
	return nil
}

// Quota returns a team's quota: the key's own team's, or (an admin key)
// any team's.
func (r *Runtime) Quota(ctx context.Context, team string) (api.Quota, error) {
	var q api.Quota
	p, err := segmentPath("/v1/teams/", team, "team")
	if err == nil {
		err = r.call(ctx, http.MethodGet, p+"/quota", nil, &q)
	}
	if err != nil {
		return api.Quota{}, fmt.Errorf("getting the quota of team %q: %w", team, err)
	}
	return q, nil
}

// SetQuota sets a team's quota (an admin key only); zero fields are
// unlimited.
func (r *Runtime) SetQuota(ctx context.Context, team string, q api.Quota) (api.Quota, error) {
	var out api.Quota
	p, err := segmentPath("/v1/teams/", team, "team")
	if err == nil {
		err = r.call(ctx, http.MethodPut, p+"/quota", q, &out)
	}
	if err != nil {
		return api.Quota{}, fmt.Errorf("setting the quota of team %q: %w", team, err)
	}
	return out, nil
}

// UsageQuery selects a usage report. Zero times are the server's default
// (the current calendar month, UTC).
type UsageQuery struct {
	From, To time.Time
	// Team is another team (an admin key only); "" is the key's.
	Team string
	// ByDay adds the use per UTC day (at most 400 days).
	ByDay bool
}

// Usage returns the metered use and cost of the team's sandboxes, deleted
// ones too, over [q.From, q.To).
func (r *Runtime) Usage(ctx context.Context, q UsageQuery) (api.UsageReport, error) {
	v := url.Values{}
	if !q.From.IsZero() {
		v.Set("from", q.From.Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.Format(time.RFC3339))
	}
	if q.Team != "" {
		v.Set("team", q.Team)
	}
	if q.ByDay {
		v.Set("by", "day")
	}
	p := "/v1/usage"
	if len(v) > 0 {
		p += "?" + v.Encode()
	}
	var rep api.UsageReport
	if err := r.call(ctx, http.MethodGet, p, nil, &rep); err != nil {
		return api.UsageReport{}, fmt.Errorf("getting usage: %w", err)
	}
	return rep, nil
}

// segmentPath is prefix + id as one path segment; an id that cannot be
// one names nothing (ErrNotFound).
func segmentPath(prefix, id, what string) (string, error) {
	if _, err := sandboxPath(id, ""); err != nil {
		return "", fmt.Errorf("no %s has that id: %w", what, sandbox.ErrNotFound)
	}
	return prefix + url.PathEscape(id), nil
}
