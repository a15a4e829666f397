package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/server/internal/idempotency"
	"github.com/cove-sandbox/cove/store"
)

// createKeyed is POST /v1/sandboxes with an Idempotency-Key.
func (ts *testServer) createKeyed(t *testing.T, key, idemKey string, body any) (*http.Response, []byte) {
	t.Helper()
	return ts.do(t, "POST", "/v1/sandboxes", body, map[string]string{"Authorization": "Bearer " + key, api.IdempotencyKeyHeader: idemKey})
}

// listIDs is the ids of the team's sandboxes.
func (ts *testServer) listIDs(t *testing.T, key string) []string {
	t.Helper()
	var l api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &l)
	var ids []string
	for _, sb := range l.Sandboxes {
		ids = append(ids, sb.ID)
	}
	return ids
}

// TestIdempotencyKeyV1: a create retried with its key gets the first
// one's sandbox again, marked replayed, and makes no second one; the
// same key with another body is a 422; another team's same key is its
// own; bad keys are 400s; the key shows in no label.
func TestIdempotencyKeyV1(t *testing.T) {
	ts := newTestServer(t, Config{})
	keyA, keyB := ts.teamKey(t, "team-a"), ts.teamKey(t, "team-b")
	body := api.CreateSandbox{Labels: map[string]string{"app": "x"}}

	resp, data := ts.createKeyed(t, keyA, "k-1", body)
	if resp.StatusCode != 201 || resp.Header.Get(api.IdempotentReplayedHeader) != "" {
		t.Fatalf("first create: %d replayed=%q %s", resp.StatusCode, resp.Header.Get(api.IdempotentReplayedHeader), data)
	}
	var first api.Sandbox
	json.Unmarshal(data, &first)
	for range 2 {
		resp, data = ts.createKeyed(t, keyA, "k-1", body)
		var again api.Sandbox
		json.Unmarshal(data, &again)
		if resp.StatusCode != 201 || again.ID != first.ID || resp.Header.Get(api.IdempotentReplayedHeader) != "true" {
			t.Fatalf("retry: %d replayed=%q id %s, want 201, true, %s: %s", resp.StatusCode, resp.Header.Get(api.IdempotentReplayedHeader), again.ID, first.ID, data)
		}
		if len(again.Labels) != 1 || again.Labels["app"] != "x" {
			t.Errorf("labels shown: %v, want only app=x", again.Labels)
		}
	}
	if ids := ts.listIDs(t, keyA); len(ids) != 1 {
		t.Errorf("team A has %v after three creates with one key, want one sandbox", ids)
	}

	resp, data = ts.createKeyed(t, keyA, "k-1", api.CreateSandbox{Labels: map[string]string{"app": "y"}})
	if resp.StatusCode != http.StatusUnprocessableEntity || apiError(t, data).Code != api.CodeIdempotencyMismatch || !strings.Contains(string(data), "different request") {
		t.Errorf("same key, another body: %d %s, want 422 %s", resp.StatusCode, data, api.CodeIdempotencyMismatch)
	}

	// Team B's same key is B's own: a sandbox of B's, not A's.
	resp, data = ts.createKeyed(t, keyB, "k-1", body)
	var b api.Sandbox
	json.Unmarshal(data, &b)
	if resp.StatusCode != 201 || b.ID == first.ID || resp.Header.Get(api.IdempotentReplayedHeader) != "" {
		t.Errorf("team B's create with A's key: %d %s, want a new sandbox of B's", resp.StatusCode, data)
	}
	if ids := ts.listIDs(t, keyB); len(ids) != 1 || ids[0] != b.ID {
		t.Errorf("team B has %v, want [%s]", ids, b.ID)
	}

	for name, k := range map[string]string{
		"too long":  strings.Repeat("k", api.MaxIdempotencyKeyLen+1),
		"space":     "a b",
		"non-ascii": "ключ",
		"control":   "a\tb",
	} {
		resp, data := ts.createKeyed(t, keyA, k, body)
		if resp.StatusCode != 400 || !strings.Contains(string(data), api.IdempotencyKeyHeader) {
			t.Errorf("%s key: %d %s, want 400 naming the header", name, resp.StatusCode, data)
		}
	}
	if ids := ts.listIDs(t, keyA); len(ids) != 1 {
		t.Errorf("refused keys made sandboxes: %v", ids)
	}

	// Deleted since: the key says so rather than making another.
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+first.ID, keyA, nil, nil)
	resp, data = ts.createKeyed(t, keyA, "k-1", body)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(data), "deleted") {
		t.Errorf("key of a deleted sandbox: %d %s, want 409 saying it was deleted", resp.StatusCode, data)
	}
}

// TestIdempotencyKeyConcurrent: eight creates with one key at once make
// one sandbox; every one answered 201 names it.
func TestIdempotencyKeyConcurrent(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "team-a")
	var mu sync.Mutex
	ids := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			resp, data := ts.createKeyed(t, key, "same", api.CreateSandbox{})
			var sb api.Sandbox
			json.Unmarshal(data, &sb)
			mu.Lock()
			defer mu.Unlock()
			switch resp.StatusCode {
			case 201:
				ids[sb.ID]++
			case 409: // still in flight after the wait: the client retries
			default:
				t.Errorf("create: %d %s", resp.StatusCode, data)
			}
		})
	}
	wg.Wait()
	if len(ids) != 1 {
		t.Errorf("creates with one key answered sandboxes %v, want one", ids)
	}
	if got := ts.listIDs(t, key); len(got) != 1 {
		t.Errorf("team has %v, want one sandbox", got)
	}
}

// TestIdempotencyKeyDeadReplica: a replica that claimed a key and died
// (its claim no longer renewed) after recording the sandbox: the retry,
// once the claim lapses, answers that sandbox; one that died before
// recording it: the retry makes the sandbox. A claim still held answers
// 409 saying to retry.
func TestIdempotencyKeyDeadReplica(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "team-a")
	idem := ts.cfg.Store.(store.Idempotency)
	ctx := t.Context()
	body := api.CreateSandbox{}
	hash, err := idempotency.Hash("v1", body)
	if err != nil {
		t.Fatal(err)
	}

	// Died after the store write.
	if _, err := idem.ClaimIdempotencyKey(ctx, "team-a", "died-late", hash, "dead", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	made, _, err := ts.fleet.CreateLabeled(ctx, "team-a", body, idempotency.Label("team-a", "died-late"))
	if err != nil {
		t.Fatal(err)
	}
	resp, data := ts.createKeyed(t, key, "died-late", body)
	var sb api.Sandbox
	json.Unmarshal(data, &sb)
	if resp.StatusCode != 201 || sb.ID != made.ID || resp.Header.Get(api.IdempotentReplayedHeader) != "true" {
		t.Fatalf("retry after the replica died with the sandbox recorded: %d %s, want %s replayed", resp.StatusCode, data, made.ID)
	}

	// Died before it.
	if _, err := idem.ClaimIdempotencyKey(ctx, "team-a", "died-early", hash, "dead", 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	resp, data = ts.createKeyed(t, key, "died-early", body)
	json.Unmarshal(data, &sb)
	if resp.StatusCode != 201 || sb.ID == made.ID || resp.Header.Get(api.IdempotentReplayedHeader) != "" {
		t.Fatalf("retry after the replica died with nothing recorded: %d %s, want a new sandbox", resp.StatusCode, data)
	}
	if ids := ts.listIDs(t, key); len(ids) != 2 {
		t.Errorf("team has %v, want the two sandboxes", ids)
	}

	// Still held by a live request elsewhere.
	if _, err := idem.ClaimIdempotencyKey(ctx, "team-a", "busy", hash, "alive", time.Hour); err != nil {
		t.Fatal(err)
	}
	resp, data = ts.createKeyed(t, key, "busy", body)
	if resp.StatusCode != http.StatusConflict || apiError(t, data).Code != api.CodeIdempotencyInFlight || !strings.Contains(string(data), "retry") {
		t.Errorf("key in flight: %d %s, want 409 %s saying to retry", resp.StatusCode, data, api.CodeIdempotencyInFlight)
	}
}

// TestIdempotencyKeyE2B: E2B's create honours the key as /v1's does:
// the same sandbox (and envd token) again, marked replayed; another
// body is a 422 in E2B's error body.
func TestIdempotencyKeyE2B(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "team-e")
	hdr := map[string]string{api.IdempotencyKeyHeader: "e-1"}
	body := map[string]any{"templateID": "base", "timeout": 60}
	type created struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	resp, data := ts.e2bCall(t, "POST", "/sandboxes", key, body, hdr)
	var first, again created
	json.Unmarshal(data, &first)
	if resp.StatusCode != 201 || first.SandboxID == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, data)
	}
	resp, data = ts.e2bCall(t, "POST", "/sandboxes", key, body, hdr)
	json.Unmarshal(data, &again)
	if resp.StatusCode != 201 || again != first || resp.Header.Get(api.IdempotentReplayedHeader) != "true" {
		t.Errorf("E2B retry: %d %s, want %+v replayed", resp.StatusCode, data, first)
	}
	resp, data = ts.e2bCall(t, "POST", "/sandboxes", key, map[string]any{"templateID": "base", "timeout": 120}, hdr)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(e2bErrorBody(t, resp, data), "different request") {
		t.Errorf("E2B same key, another body: %d %s, want 422", resp.StatusCode, data)
	}
	resp, data = ts.e2bCall(t, "GET", "/sandboxes", key, nil, nil)
	if n := strings.Count(string(data), `"sandboxID"`); resp.StatusCode != 200 || n != 1 {
		t.Errorf("E2B list after a create and its retries: %d, %d sandboxes, want 1: %s", resp.StatusCode, n, data)
	}
	if strings.Contains(string(data), idempotency.LabelKey) {
		t.Errorf("the key's label shows in E2B's metadata: %s", data)
	}
}
