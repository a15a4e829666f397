package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// The E2B control plane's handlers (see e2b.go).

// newSandbox is the body of POST /sandboxes and /v2/sandboxes
// (NewSandbox, NewSandboxV2).
type newSandbox struct {
	TemplateID      string            `json:"templateID"`
	Timeout         *int64            `json:"timeout"`
	AutoPause       *bool             `json:"autoPause"`
	AutoPauseMemory *bool             `json:"autoPauseMemory"`
	Secure          *bool             `json:"secure"`
	AllowInternet   *bool             `json:"allow_internet_access"`
	Metadata        map[string]string `json:"metadata"`
	EnvVars         map[string]string `json:"envVars"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Lifecycle    *newLifecycle              `json:"lifecycle"`
	Network      map[string]json.RawMessage `json:"network"`
	MCP          json.RawMessage            `json:"mcp"`
	IAM          json.RawMessage            `json:"iam"`
	VolumeMounts []json.RawMessage          `json:"volumeMounts"`
	// Isolation is Cove's own: the sandbox's tier (native or gvisor),
	// which the SDKs can also ask for as metadata cove.isolation.
	Isolation string `json:"isolation"`
}

// isolationKey is the metadata key that names a create's isolation
// tier, for SDKs that send no field of Cove's own; it is not kept as
// metadata.
const isolationKey = "cove.isolation"

// isolation is the tier a create asks for, taken out of its metadata
// when named there; msg says what is wrong when the two disagree.
func (b *newSandbox) isolation() (tier, msg string) {
	tier = b.Isolation
	if v, ok := b.Metadata[isolationKey]; ok {
		if tier != "" && v != tier {
			return "", fmt.Sprintf("isolation %q and metadata %s %q disagree; give one", tier, isolationKey, v)
		}
		tier = v
		b.Metadata = maps.Clone(b.Metadata)
		delete(b.Metadata, isolationKey)
	}
	return tier, ""
}

// unsupported names the first field of a create that asks for something
// Cove does not do yet, with what to do instead; "" when none does.
func (b *newSandbox) unsupported() string {
	isSet := func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }
	switch {
	case isSet(b.MCP):
		return "mcp: Cove has no MCP gateway in its sandboxes yet; leave it unset"
	case isSet(b.IAM):
		return "iam: Cove does not issue workload identity tokens yet; leave it unset"
	case len(b.VolumeMounts) > 0:
		return "volumeMounts: Cove has no volumes yet; leave it unset"
	}
	for k, v := range b.Network {
		if k != "allowPublicTraffic" && k != "allowOut" && isSet(v) {
			return fmt.Sprintf("network.%s is not supported by Cove yet; use network.allowOut (the only addresses a sandbox may reach) or allow_internet_access", k)
		}
	}
	return ""
}

// network is the Cove network policy a create asks for: only
// network.allowOut's addresses and host names, internet, or none
// (loopback only); def ("internet" or "none", the server's setting) when
// allow_internet_access is not given.
func (b *newSandbox) network(def string) (*api.Network, string) {
	var allow []string
	if raw, ok := b.Network["allowOut"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &allow); err != nil {
			return nil, "network.allowOut must be a list of addresses, CIDRs or host names"
		}
	}
	switch {
	case len(allow) > 0:
		return &api.Network{Mode: "allow", Allow: allow}, ""
	case b.AllowInternet != nil && *b.AllowInternet, b.AllowInternet == nil && def != NetworkNone:
		return &api.Network{Mode: NetworkInternet}, ""
	}
	return &api.Network{Mode: NetworkNone}, ""
}

func (s *API) create(w http.ResponseWriter, r *http.Request, c *caller) {
	var body newSandbox
	if !s.decode(w, r, &body) {
		return
	}
	if msg := body.unsupported(); msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	pause, resume, msg := body.timeoutPolicy()
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	isolation, msg := body.isolation()
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	network, msg := body.network(s.cfg.Network)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	// The v1 route's default timeout is 15 seconds, v2's 300, as E2B's.
	timeout := int64(15)
	if strings.HasPrefix(r.URL.Path, "/v2/") {
		timeout = 300
	}
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	if timeout < 1 || timeout > int64(s.fleet.MaxTTL()/time.Second) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout: %d seconds is out of range; give 1 to %d", timeout, int64(s.fleet.MaxTTL()/time.Second)))
		return
	}
	for k, v := range body.Metadata {
		if err := fleet.CheckLabel("metadata", k, v); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	public := true
	if raw, ok := body.Network["allowPublicTraffic"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &public); err != nil {
			writeError(w, http.StatusBadRequest, "network.allowPublicTraffic must be true or false")
			return
		}
	}
	template := body.TemplateID
	if template == "base" {
		template = "" // the server's default template
	}
	if isSnapshot(template) && body.AllowInternet == nil && network.Mode != "allow" {
		// A snapshot keeps its network unless the create names one
		// (fleet.Thaw refuses one that differs).
		network = nil
	}
	onExpire := store.ExpireDelete
	if pause {
		onExpire = store.ExpireStop
	}
	// The client leaving must not leave a sandbox half made.
	ctx := context.WithoutCancel(r.Context())
	start := time.Now()
	own := map[string]string{madeLabel: "1", envdTokenLabel: newToken()}
	if !public {
		own[trafficTokenLabel] = newToken()
	}
	if resume {
		own[autoResumeLabel] = "1"
	}
	if pause && (body.AutoPauseMemory == nil || *body.AutoPauseMemory) {
		own[fleet.ExpireMemoryLabel] = "1" // where the tier keeps memory
	}
	op, replay, err := s.cfg.Idempotency.Begin(ctx, r, c.team, "e2b", body)
	if err != nil || replay != "" {
		s.answerIdempotent(w, r, c, replay, err)
		return
	}
	maps.Copy(own, op.Labels())
	rec, err := s.createFrom(ctx, c.team, api.CreateSandbox{
		Template: template, Env: body.EnvVars, TTLSeconds: timeout, OnExpire: onExpire, Labels: body.Metadata, Network: network,
		Isolation: isolation,
	}, own)
	err = op.End(ctx, rec.ID, err, func() { s.fleet.Delete(ctx, c.team, rec.ID) })
	if err != nil {
		s.failIdempotent(w, r, err)
		return
	}
	s.cfg.Created(time.Since(start))
	web.WriteJSON(w, http.StatusCreated, s.sandboxView(r, rec, rec.Spec.Labels[envdTokenLabel], rec.Spec.Labels[trafficTokenLabel]))
}

func (s *API) get(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	envd, _, err := s.tokens(r.Context(), &rec)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	onTimeout := "kill"
	if rec.OnExpire == store.ExpireStop {
		onTimeout = "pause"
	}
	web.WriteJSON(w, http.StatusOK, Detail{Listed: s.listedView(rec), EnvdAccessToken: envd, Domain: s.domain(r),
		AllowInternetAccess: rec.Spec.Network.Mode == "internet", Lifecycle: lifecycle{OnTimeout: onTimeout, AutoResume: autoResumes(rec)}})
}

func (s *API) kill(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if err := s.fleet.Delete(context.WithoutCancel(r.Context()), c.team, rec.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// seconds reads a JSON body of one integer field of seconds (timeout,
// duration); def applies when it is absent, and absent is an error when
// def is negative.
func (s *API) seconds(w http.ResponseWriter, r *http.Request, field string, def, max int64) (time.Duration, bool) {
	var body map[string]json.RawMessage
	if !s.decode(w, r, &body) {
		return 0, false
	}
	n := def
	if raw, ok := body[field]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &n); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s must be a whole number of seconds", field))
			return 0, false
		}
	} else if def < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s is required: give a number of seconds", field))
		return 0, false
	}
	if n < 0 {
		n = 0
	}
	if n > max {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: %d seconds is over the limit of %d", field, n, max))
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// setTimeout serves POST /sandboxes/{id}/timeout: the sandbox ends
// timeout seconds from now, sooner or later than it would have.
func (s *API) setTimeout(w http.ResponseWriter, r *http.Request, c *caller) {
	ttl, ok := s.seconds(w, r, "timeout", -1, int64(s.fleet.MaxTTL()/time.Second))
	if !ok {
		return
	}
	s.extend(w, r, c, ttl, true)
}

// refresh serves POST /sandboxes/{id}/refreshes: the sandbox lives at
// least duration seconds (default 15, at most an hour) more.
func (s *API) refresh(w http.ResponseWriter, r *http.Request, c *caller) {
	ttl, ok := s.seconds(w, r, "duration", 15, 3600)
	if !ok {
		return
	}
	s.extend(w, r, c, ttl, false)
}

func (s *API) extend(w http.ResponseWriter, r *http.Request, c *caller, ttl time.Duration, shorter bool) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if s.paused(rec) {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is paused; resume it with Sandbox.connect first", rec.ID))
		return
	}
	if _, err := s.fleet.Extend(context.WithoutCancel(r.Context()), c.team, rec.ID, ttl, shorter); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pause serves POST /sandboxes/{id}/pause: a gvisor sandbox is paused
// with its memory (its processes come back at connect) unless the body
// says memory false; a native one keeps its disk only (running
// processes end), whatever memory says, as memory true is E2B's
// default. A paused sandbox has no timeout, as in E2B; it is kept for
// the server's retention.
func (s *API) pause(w http.ResponseWriter, r *http.Request, c *caller) {
	var body struct {
		Memory *bool `json:"memory"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if s.paused(rec) {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %s is already paused", rec.ID))
		return
	}
	mem := fleet.MemoryIfKept
	if body.Memory != nil && !*body.Memory {
		mem = fleet.MemoryDropped
	}
	if _, err := s.fleet.Pause(context.WithoutCancel(r.Context()), c.team, rec.ID, mem); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect serves POST /sandboxes/{id}/connect and its v2: a running
// sandbox's timeout is extended (never shortened) to timeout seconds from
// now, 200; a paused one is resumed with that timeout, 201.
func (s *API) connect(w http.ResponseWriter, r *http.Request, c *caller) {
	def := int64(-1) // v1 requires the timeout
	if strings.HasPrefix(r.URL.Path, "/v2/") {
		def = 300
	}
	ttl, ok := s.seconds(w, r, "timeout", def, int64(s.fleet.MaxTTL()/time.Second))
	if !ok {
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	rec, resumed, err := s.fleet.Keep(ctx, c.team, rec.ID, ttl)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	envd, traffic, err := s.tokens(ctx, &rec)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	web.WriteJSON(w, status, s.sandboxView(r, rec, envd, traffic))
}

// listQuery is what GET /v2/sandboxes filters by.
type listQuery struct {
	filter       store.SandboxFilter
	template     string
	startedAfter time.Time
	desc         bool
	// state is E2B's state asked for, running or paused; "" for both.
	state string
}

// parseList reads the list's query; a message says what is wrong.
func parseList(q url.Values, team string) (listQuery, string) {
	lq := listQuery{filter: store.SandboxFilter{TeamID: team, After: q.Get("nextToken"), Limit: 100}, template: q.Get("template"), desc: true}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return lq, "limit: give 1 to 100"
		}
		lq.filter.Limit = n
	}
	var states []string
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			switch st {
			case "running", "paused":
				states = append(states, st)
			default:
				return lq, fmt.Sprintf("state %q: use running or paused", st)
			}
		}
	}
	if len(states) > 0 && !(slices.Contains(states, "running") && slices.Contains(states, "paused")) {
		// A record still running past a timeout that pauses it is
		// paused to E2B (API.paused): the store's running records are
		// read too and keep filters them, which may leave a page short.
		lq.state = states[0]
		lq.filter.State = store.StateRunning
		if lq.state == "paused" {
			lq.filter.State = ""
		}
	}
	if m := q.Get("metadata"); m != "" {
		// The SDK encodes each key and value, then the whole query: two
		// unescapes, as E2B's API does.
		pairs, err := url.ParseQuery(m)
		if err != nil {
			return lq, "metadata: want key=value pairs joined by &, each URL-encoded"
		}
		lq.filter.Labels = map[string]string{}
		for k, vs := range pairs {
			key, err1 := url.QueryUnescape(k)
			val, err2 := url.QueryUnescape(vs[0])
			if err1 != nil || err2 != nil {
				return lq, fmt.Sprintf("metadata %q: malformed URL encoding", k)
			}
			lq.filter.Labels[key] = val
		}
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return lq, "startedAfter: want an RFC 3339 time such as 2006-01-02T15:04:05Z"
		}
		lq.startedAfter = t
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		lq.desc = false
	default:
		return lq, "order: use asc or desc"
	}
	return lq, ""
}

// keep reports whether a listed record passes the filters the store does
// not apply.
func (s *API) keep(lq listQuery, rec store.Sandbox) bool {
	return !s.gone(rec) && (lq.state == "" || (lq.state == "paused") == s.paused(rec)) &&
		(lq.template == "" || lq.template == templateOf(rec)) &&
		(lq.startedAfter.IsZero() || !rec.StartedAt.Before(lq.startedAfter))
}

// list serves GET /v2/sandboxes: a page of the team's sandboxes,
// running and paused, the next page's token in X-Next-Token. Pages follow
// creation; order sorts a page by start time.
func (s *API) list(w http.ResponseWriter, r *http.Request, c *caller) {
	lq, msg := parseList(r.URL.Query(), c.team)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	recs, next, err := s.fleet.List(r.Context(), c.team, lq.filter)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]Listed, 0, len(recs))
	for _, rec := range recs {
		if s.keep(lq, rec) {
			out = append(out, s.listedView(rec))
		}
	}
	slices.SortStableFunc(out, func(a, b Listed) int {
		if lq.desc {
			return b.StartedAt.Compare(a.StartedAt)
		}
		return a.StartedAt.Compare(b.StartedAt)
	})
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	web.WriteJSON(w, http.StatusOK, out)
}

// listV1 serves the deprecated GET /sandboxes: every running sandbox
// of the team, filtered by metadata.
func (s *API) listV1(w http.ResponseWriter, r *http.Request, c *caller) {
	q := url.Values{"metadata": r.URL.Query()["metadata"], "state": {"running"}}
	lq, msg := parseList(q, c.team)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	out := []Listed{}
	lq.filter.Limit = 1000
	for {
		recs, next, err := s.fleet.List(r.Context(), c.team, lq.filter)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		for _, rec := range recs {
			if s.keep(lq, rec) {
				out = append(out, s.listedView(rec))
			}
		}
		if next == "" {
			break
		}
		lq.filter.After = next
	}
	web.WriteJSON(w, http.StatusOK, out)
}
