package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/fleet/lease"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// KeyPrefix starts every API key, so a leaked one is easy to find.
const KeyPrefix = "cove_"

// E2BKeyPrefix starts keys issued in E2B's form (server/e2b), for E2B SDKs
// and tools that expect it; they are team keys like any other.
const E2BKeyPrefix = "e2b_"

// AdminTeam is the team of the first admin key.
const AdminTeam = "admin"

// caller is who made a request: a key and its team.
type caller struct {
	key  store.APIKey
	team string
}

// NewKeySecret returns a new API key secret and the hash stored for it.
func NewKeySecret() (secret, hash string) { return newKeySecret(KeyPrefix, 24) }

// NewE2BKeySecret is NewKeySecret in E2B's form: e2b_ and 40 hex digits.
func NewE2BKeySecret() (secret, hash string) { return newKeySecret(E2BKeyPrefix, 20) }

// newKeySecret is prefix and n random bytes in hex.
func newKeySecret(prefix string, n int) (secret, hash string) {
	b := make([]byte, n)
	rand.Read(b)
	secret = prefix + hex.EncodeToString(b)
	return secret, HashKey(secret)
}

// keyPrefixOf is the prefix of a key's secret, or "" when it has neither
// form.
func keyPrefixOf(secret string) string {
	for _, p := range []string{KeyPrefix, E2BKeyPrefix} {
		if strings.HasPrefix(secret, p) {
			return p
		}
	}
	return ""
}

// HashKey is what the store keeps of a secret.
func HashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// keyFrom reads the key of a request (web.KeyFrom).
func keyFrom(r *http.Request) string { return web.KeyFrom(r) }

// authed wraps a /v1 handler with authentication: the request's key, or
// else the web UI's session cookie (session.go).
func (s *Server) authed(h func(w http.ResponseWriter, r *http.Request, c *caller)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusUnauthorized
		code := api.CodeUnauthorized
		c, msg, err := s.authenticate(r)
		if c == nil && err == nil && keyFrom(r) == "" {
			var st int
			var m string
			var ok bool
			if c, st, m, ok, err = s.sessionCaller(r); ok && c == nil {
				status, msg = st, m
				if st == http.StatusForbidden {
					code = api.CodeForbidden
				}
			}
		}
		switch {
		case err != nil:
			s.fail(w, r, err)
		case c == nil:
			writeError(w, r, status, code, msg)
		default:
			h(w, r, c)
		}
	})
}

// authenticate finds the caller of a request by its key. A request
// without a valid key gets a nil caller and a message that says why; err
// is for a store that failed.
func (s *Server) authenticate(r *http.Request) (c *caller, msg string, err error) {
	return s.callerOf(r, keyFrom(r))
}

// callerOf is authenticate for a key's secret.
func (s *Server) callerOf(r *http.Request, secret string) (c *caller, msg string, err error) {
	if secret == "" {
		return nil, "no API key: send Authorization: Bearer cove_... (cove key create makes one)", nil
	}
	if keyPrefixOf(secret) == "" || len(secret) > 128 {
		return nil, "that is not a Cove API key (they start with cove_, or e2b_ for E2B clients)", nil
	}
	k, err := s.keyByHash(r.Context(), HashKey(secret))
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, "unknown or revoked API key", nil
	}
	if err != nil {
		return nil, "", err
	}
	return &caller{key: k, team: k.TeamID}, "", nil
}

// EnsureAdmin makes the admin team and its first key when the store has
// no key at all, and returns the secret to show once ("" otherwise).
func (s *Server) EnsureAdmin(ctx context.Context) (string, error) {
	// Replicas starting at once on an empty store: one makes the key.
	unlock, err := lease.Lock(ctx, s.cfg.Lease, "cove/admin", s.cfg.Holder, 0, s.log)
	if err != nil {
		return "", err
	}
	defer unlock()
	keys, err := s.cfg.Store.ListKeys(ctx, "")
	if err != nil {
		return "", err
	}
	if len(keys) > 0 {
		return "", nil
	}
	secret, _, err := MintAdminKey(ctx, s.cfg.Store, "admin", s.cfg.Now())
	return secret, err
}

// MintAdminKey makes a new admin key named name in st, and the admin team
// when it is missing, and returns its secret (to show once) and its
// record. It is the first start's key and `cove key create --admin
// --data DIR`'s way back in when every admin key is lost: whoever can
// write the store can do this.
func MintAdminKey(ctx context.Context, st store.Store, name string, now time.Time) (string, store.APIKey, error) {
	if _, err := st.GetTeam(ctx, AdminTeam); errors.Is(err, sandbox.ErrNotFound) {
		if err := st.CreateTeam(ctx, store.Team{ID: AdminTeam, Name: "admin", CreatedAt: now}); err != nil {
			return "", store.APIKey{}, err
		}
	} else if err != nil {
		return "", store.APIKey{}, err
	}
	secret, hash := NewKeySecret()
	k := store.APIKey{ID: newID("key-"), TeamID: AdminTeam, Name: name, Prefix: secret[:len(KeyPrefix)+6], Hash: hash, Admin: true, CreatedAt: now}
	if err := st.CreateKey(ctx, k); err != nil {
		return "", store.APIKey{}, err
	}
	return secret, k, nil
}

func (s *Server) keyRoutes() {
	s.handle("POST /v1/keys", s.createKey)
	s.handle("GET /v1/keys", s.listKeys)
	s.handle("DELETE /v1/keys/{id}", s.revokeKey)
	s.handle("PUT /v1/teams/{team}/quota", s.setQuota)
	s.handle("GET /v1/teams/{team}/quota", s.getQuota)
}

// setQuota sets a team's quota (admin only): running sandboxes, total
// CPUs and memory; zero fields mean unlimited.
func (s *Server) setQuota(w http.ResponseWriter, r *http.Request, c *caller) {
	if !c.key.Admin {
		writeError(w, r, http.StatusForbidden, api.CodeForbidden, "only an admin key may set quotas")
		return
	}
	var q api.Quota
	if !s.decode(w, r, &q) {
		return
	}
	if q.Sandboxes < 0 || q.CPUs < 0 || q.MemoryBytes < 0 {
		writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "quota fields must not be negative (0 means unlimited)")
		return
	}
	team := r.PathValue("team")
	if err := s.cfg.Store.SetQuota(r.Context(), team, store.Quota{Sandboxes: q.Sandboxes, CPUs: q.CPUs, MemoryBytes: q.MemoryBytes}); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, q)
}

// getQuota shows a team's quota: an admin any team's, others their own.
func (s *Server) getQuota(w http.ResponseWriter, r *http.Request, c *caller) {
	team := r.PathValue("team")
	if team != c.team && !c.key.Admin {
		writeError(w, r, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("team %q not found", team))
		return
	}
	t, err := s.cfg.Store.GetTeam(r.Context(), team)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, api.Quota{Sandboxes: t.Quota.Sandboxes, CPUs: t.Quota.CPUs, MemoryBytes: t.Quota.MemoryBytes})
}

func keyView(k store.APIKey) api.Key {
	return api.Key{ID: k.ID, Name: k.Name, Team: k.TeamID, Prefix: k.Prefix, Admin: k.Admin, CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

// createKey makes a key for the caller's team; an admin may make one for
// another or a new team, or an admin key.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.CreateKey
	if !s.decode(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Name) == "" || len(req.Name) > 100 {
		writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "name: give the key a name of 1 to 100 characters")
		return
	}
	team := c.team
	if req.Team != "" || req.NewTeam != "" || req.Admin {
		if !c.key.Admin {
			writeError(w, r, http.StatusForbidden, api.CodeForbidden, "only an admin key may make keys for other teams, new teams or admin keys")
			return
		}
	}
	switch {
	case req.NewTeam != "":
		if !validName(req.NewTeam) {
			writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "new_team: use 1 to 63 lower-case letters, digits and '-'")
			return
		}
		if err := s.cfg.Store.CreateTeam(r.Context(), store.Team{ID: req.NewTeam, Name: req.NewTeam, CreatedAt: s.cfg.Now()}); err != nil {
			s.fail(w, r, fmt.Errorf("creating team %q: %w", req.NewTeam, err))
			return
		}
		team = req.NewTeam
	case req.Team != "":
		if _, err := s.cfg.Store.GetTeam(r.Context(), req.Team); err != nil {
			s.fail(w, r, fmt.Errorf("team %q: %w", req.Team, err))
			return
		}
		team = req.Team
	}
	secret, hash := NewKeySecret()
	switch req.Format {
	case "", "cove":
	case "e2b":
		secret, hash = NewE2BKeySecret()
	default:
		writeError(w, r, http.StatusBadRequest, api.CodeInvalid, fmt.Sprintf("format %q: use cove (the default) or e2b (an e2b_... key for E2B SDKs)", req.Format))
		return
	}
	k := store.APIKey{ID: newID("key-"), TeamID: team, Name: req.Name, Prefix: secret[:len(keyPrefixOf(secret))+6], Hash: hash, Admin: req.Admin, CreatedAt: s.cfg.Now()}
	if err := s.cfg.Store.CreateKey(r.Context(), k); err != nil {
		s.fail(w, r, err)
		return
	}
	v := keyView(k)
	v.Secret = secret
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request, c *caller) {
	team := c.team
	if c.key.Admin && r.URL.Query().Get("all") == "true" {
		team = ""
	}
	keys, err := s.cfg.Store.ListKeys(r.Context(), team)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]api.Key, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyView(k))
	}
	writeJSON(w, http.StatusOK, map[string]any{"keys": out})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, c *caller) {
	team := c.team
	if c.key.Admin {
		team = ""
	}
	if err := s.cfg.Store.RevokeKey(r.Context(), team, r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.forgetKeys()
	w.WriteHeader(http.StatusNoContent)
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// keyCacheTTL is how long a looked-up key is trusted without asking the
// store again. A key revoked through this server is dropped at once; one
// revoked by another process sharing the store works this long at most.
const keyCacheTTL = 5 * time.Second

type cachedKey struct {
	key     store.APIKey
	expires time.Time
}

// keyByHash is the store's KeyByHash with a short cache in front: every
// request authenticates, and the lookup was a good part of an exec's
// time through the API.
//
// With replicas (Config.Lease) nothing is cached: a peer's revocation
// must end the key here at once, and only the store hears of it.
func (s *Server) keyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	if s.cfg.Lease != nil {
		return s.cfg.Store.KeyByHash(ctx, hash)
	}
	now := time.Now()
	s.keyMu.Lock()
	c, ok := s.keys[hash]
	s.keyMu.Unlock()
	if ok && now.Before(c.expires) {
		return c.key, nil
	}
	k, err := s.cfg.Store.KeyByHash(ctx, hash)
	if err != nil {
		return k, err
	}
	s.keyMu.Lock()
	if len(s.keys) > 10000 {
		clear(s.keys)
	}
	s.keys[hash] = cachedKey{key: k, expires: now.Add(keyCacheTTL)}
	s.keyMu.Unlock()
	return k, nil
}

// forgetKeys empties the key cache (after a revocation).
func (s *Server) forgetKeys() {
	s.keyMu.Lock()
	clear(s.keys)
	s.keyMu.Unlock()
}
