package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// secretServer is a service on the server's own loopback, as an admin
// panel or a cloud metadata endpoint would be: it answers every request
// with a secret, with status (200 or an error).
func secretServer(t *testing.T, status int) (*httptest.Server, string, *atomic.Int32) {
	t.Helper()
	secret := newID("TOPSECRET-")
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"%s"},"choices":[{"message":{"role":"assistant","content":"%s"}}]}`, secret, secret)
	}))
	t.Cleanup(srv.Close)
	return srv, secret, &hits
}

func port(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		t.Fatalf("no port in %q", raw)
	}
	return u.Port()
}

// TestRunModelEgress: a run's agent.base_url (and its webhook) may not
// make the server call its own loopback, private ranges or cloud
// metadata, whether the URL names the address, a name resolves to it,
// the name changes its answer after the check (rebinding), or an allowed
// endpoint redirects there; and no reply body of a refused or failed
// call reaches the tenant. An address the operator allows works.
func TestRunModelEgress(t *testing.T) {
	own := fake.NewServer(t)
	secret200, secretA, loopbackHits := secretServer(t, 200)
	secret500, secretB, _ := secretServer(t, 500)
	redirectedHook := make(chan struct{}, 10)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hook" {
			redirectedHook <- struct{}{}
		}
		http.Redirect(w, r, secret200.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	allowed := fake.NewServer(t, fake.Text("hello from the allowed model").Forever())
	hook := newWebhookSink(t)

	var rebinds atomic.Int32
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "model.example.com":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "rebind.example.com":
			// Public when checked at create, loopback when dialled.
			if rebinds.Add(1) == 1 {
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	ts := newTestServer(t, Config{
		Model: ModelConfig{BaseURL: own.URL, APIKey: "sk-server", DefaultModel: "m"},
		OutboundAllow: []string{
			"127.0.0.1:" + port(t, redirector.URL),
			"127.0.0.1:" + port(t, secret500.URL),
			"127.0.0.1:" + port(t, hook.URL),
			"127.0.0.0/8:" + port(t, allowed.URL),
		},
		LookupHost: lookup,
	})
	key := ts.teamKey(t, "tenant")
	sb := ts.create(t, key, api.CreateSandbox{})

	noSecret := func(t *testing.T, where string, data []byte) {
		t.Helper()
		for _, s := range []string{secretA, secretB} {
			if strings.Contains(string(data), s) {
				t.Errorf("the secret reached the tenant in %s: %s", where, data)
			}
		}
	}
	run := func(t *testing.T, base, webhook string) (int, []byte, api.Run) {
		t.Helper()
		body := map[string]any{"agent": map[string]any{"base_url": base, "model": "m", "approval": "never"}, "input": "hi", "sandbox_id": sb.ID}
		if webhook != "" {
			body["webhook_url"] = webhook
		}
		code, data := ts.call(t, "POST", "/v1/runs", key, body)
		var r api.Run
		json.Unmarshal(data, &r)
		return code, data, r
	}

	refusedAtCreate := []struct{ name, base, want string }{
		{"loopback", secret200.URL + "/v1", "127.0.0.1 is a loopback address"},
		{"IPv6 loopback", "http://[::1]:" + port(t, secret200.URL) + "/v1", "::1 is a loopback address"},
		{"cloud metadata", "http://169.254.169.254/v1", "cloud metadata endpoint"},
		{"unspecified", "http://0.0.0.0:" + port(t, secret200.URL) + "/v1", "unspecified"},
		{"private", "http://10.20.30.40/v1", "a private address"},
		{"multicast", "http://224.0.0.1/v1", "multicast"},
		{"name resolving to loopback", "http://model.example.com:" + port(t, secret200.URL) + "/v1", "model.example.com (127.0.0.1) is a loopback address"},
		{"localhost", "http://localhost:" + port(t, secret200.URL) + "/v1", "is a loopback address"},
	}
	for _, tc := range refusedAtCreate {
		t.Run(tc.name, func(t *testing.T) {
			code, data, _ := run(t, tc.base, "")
			if code != 400 || !strings.Contains(apiError(t, data).Message, tc.want) || !strings.Contains(string(data), "--outbound-allow") {
				t.Errorf("create: %d %s, want 400 saying %q and how the operator allows it", code, data, tc.want)
			}
			noSecret(t, "the create response", data)
		})
	}

	// These pass the check at create and fail when dialled (or after):
	// the run fails, saying what and a reference, and the secret is
	// nowhere: not in the events, the run, or its webhook.
	failAtDial := []struct{ name, base, want string }{
		{"DNS rebinding", "http://rebind.example.com:" + port(t, secret200.URL) + "/v1", "rebind.example.com (127.0.0.1) is a loopback address"},
		// OpenAI's client follows no redirect to another origin; the
		// webhook below is the redirect the dialer must refuse.
		{"redirect to loopback", redirector.URL + "/v1", "the call failed"},
		{"failed call's body", secret500.URL + "/v1", "HTTP 500 Internal Server Error"},
	}
	for _, tc := range failAtDial {
		t.Run(tc.name, func(t *testing.T) {
			code, data, r := run(t, tc.base, hook.URL)
			if code != 201 {
				t.Fatalf("create: %d %s", code, data)
			}
			evs := ts.readEvents(t, key, r.ID, 0, "")
			if lastStatus(evs) != api.RunFailed {
				t.Fatalf("status %q, want failed: %+v", lastStatus(evs), evs)
			}
			raw, _ := json.Marshal(evs)
			noSecret(t, "the events", raw)
			var got api.Run
			ts.must(t, 200, "GET", "/v1/runs/"+r.ID, key, nil, &got)
			if !strings.Contains(got.Error, tc.want) || !strings.Contains(got.Error, "reference ref_") {
				t.Errorf("run error %q, want it to say %q and give a reference", got.Error, tc.want)
			}
			rawRun, _ := json.Marshal(got)
			noSecret(t, "the run", rawRun)
			wh := hook.wait(t, "run.failed")
			noSecret(t, "the webhook", wh.body)
			hook.mu.Lock()
			hook.got = nil
			hook.mu.Unlock()
		})
	}

	t.Run("webhook redirected to loopback", func(t *testing.T) {
		code, data, r := run(t, allowed.URL, redirector.URL+"/hook")
		if code != 201 {
			t.Fatalf("create: %d %s", code, data)
		}
		ts.readEvents(t, key, r.ID, 0, "")
		select {
		case <-redirectedHook:
		case <-time.After(30 * time.Second):
			t.Fatal("the webhook was never sent")
		}
		time.Sleep(time.Second) // the redirect is followed at once, if at all
	})
	if n := loopbackHits.Load(); n != 0 {
		t.Errorf("the service on loopback was called %d times", n)
	}

	t.Run("webhook to loopback", func(t *testing.T) {
		code, data, _ := run(t, allowed.URL, secret200.URL+"/hook")
		if code != 400 || !strings.Contains(apiError(t, data).Message, "webhook_url: 127.0.0.1 is a loopback address") {
			t.Errorf("create: %d %s, want the webhook refused", code, data)
		}
	})

	t.Run("allowed address", func(t *testing.T) {
		code, data, r := run(t, allowed.URL, "")
		if code != 201 {
			t.Fatalf("create: %d %s", code, data)
		}
		evs := ts.readEvents(t, key, r.ID, 0, "")
		var got api.Run
		ts.must(t, 200, "GET", "/v1/runs/"+r.ID, key, nil, &got)
		if lastStatus(evs) != api.RunIdle || got.Output != "hello from the allowed model" {
			t.Errorf("run through an allowed address: %s %q %q", lastStatus(evs), got.Output, got.Error)
		}
	})
}

// TestWebhookEgressAtDial: a webhook whose name resolves to loopback only
// when it is delivered is not delivered.
func TestWebhookEgressAtDial(t *testing.T) {
	own := fake.NewServer(t, fake.Text("done"))
	hits := make(chan struct{}, 10)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits <- struct{}{} }))
	t.Cleanup(target.Close)
	var n atomic.Int32
	ts := newTestServer(t, Config{
		Model: ModelConfig{BaseURL: own.URL, APIKey: "sk-server", DefaultModel: "m"},
		LookupHost: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if n.Add(1) == 1 {
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
	})
	key := ts.teamKey(t, "tenant")
	var r api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, map[string]any{"input": "hi", "agent": map[string]any{"approval": "never"},
		"webhook_url": "http://hooks.example.com:" + port(t, target.URL) + "/x"}, &r)
	if evs := ts.readEvents(t, key, r.ID, 0, ""); lastStatus(evs) != api.RunIdle {
		t.Fatalf("run status %q", lastStatus(evs))
	}
	select {
	case <-hits:
		t.Fatal("the webhook reached the server's loopback")
	case <-time.After(3 * time.Second):
	}
}

// TestManifestGitEgress: a tenant's git_repo is cloned only over https
// from a public address: the server's loopback, cloud metadata, a name
// that resolves to loopback, other transports and the server's own disk
// are a 400, and the sandbox made for the manifest is gone.
func TestManifestGitEgress(t *testing.T) {
	ts := newTestServer(t, Config{LookupHost: func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host == "git.example.com" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}})
	key := ts.teamKey(t, "tenant")
	for _, tc := range []struct{ repo, want string }{
		{"https://127.0.0.1/o/r.git", "127.0.0.1 is a loopback address"},
		{"https://[::1]:8443/o/r.git", "::1 is a loopback address"},
		{"https://169.254.169.254/o/r.git", "cloud metadata endpoint"},
		{"https://git.example.com/o/r.git", "git.example.com (127.0.0.1) is a loopback address"},
		{"http://git.example.com/o/r.git", "http:// is not allowed here; clone from https://"},
		{"ssh://git@git.example.com/o/r.git", "ssh:// is not allowed here"},
		{"git://git.example.com/o/r.git", "git:// is not allowed here"},
		{"file:///etc", "a path on the host is not allowed here"},
		{"file://%zz/etc", "not a valid URL"},
	} {
		m := map[string]any{"entries": map[string]any{"repo": map[string]any{"type": "git_repo", "repo": tc.repo, "ref": "main"}}}
		code, data := ts.call(t, "POST", "/v1/sandboxes", key, map[string]any{"manifest": m})
		if code != 400 || !strings.Contains(apiError(t, data).Message, tc.want) {
			t.Errorf("git_repo %s: %d %s, want 400 saying %q", tc.repo, code, data, tc.want)
		}
	}
	if infos, _ := ts.Runtime.List(t.Context()); len(infos) != 0 {
		t.Errorf("refused manifests left %d sandboxes", len(infos))
	}
}
