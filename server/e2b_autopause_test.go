package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// E2B's auto-pause and auto-resume through the API (the SDK's view is in
// TestE2BAutoPauseSDK): the create options E2B's SDKs send, a pause at
// the timeout that keeps the disk, traffic that resumes the sandbox once
// however many requests come at once, and traffic that must not.

// e2bInfo is GET /sandboxes/{id} as key's team sees it; the status when
// it is not 200.
func (ts *testServer) e2bInfo(t *testing.T, key, id string) (e2bDetail, int) {
	t.Helper()
	resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+id, key, nil, nil)
	var d e2bDetail
	if resp.StatusCode == 200 && json.Unmarshal(data, &d) != nil {
		t.Fatalf("get %s: %s", id, data)
	}
	return d, resp.StatusCode
}

// envdFiles reads (body nil) or writes a file of sandbox id through envd's
// /files, routed by E2B_SANDBOX_URL's headers, with the envd token given.
func (ts *testServer) envdFiles(t *testing.T, id, token, path string, body []byte) (*http.Response, []byte) {
	hdr := map[string]string{e2bSandboxIDHeader: id, e2bSandboxPortHeader: "49983", "X-Access-Token": token}
	if body == nil {
		return ts.e2bCall(t, "GET", "/files?path="+path, "", nil, hdr)
	}
	hdr["Content-Type"] = "application/octet-stream"
	return ts.e2bCall(t, "POST", "/files?path="+path, "", body, hdr)
}

func TestE2BAutoPauseOptions(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "apoptions")
	for _, tc := range []struct {
		name       string
		body       map[string]any
		onTimeout  string
		autoResume bool
	}{
		// What the e2b SDK sends by default: none of the fields.
		{"SDK defaults", map[string]any{}, "kill", false},
		// @openai/agents-extensions' E2B client asks for pause and
		// resume; its Python client and the SDK's onTimeout object add
		// autoPauseMemory.
		{"agents defaults", map[string]any{"autoPause": true, "autoResume": map[string]any{"enabled": true}}, "pause", true},
		{"with memory", map[string]any{"autoPause": true, "autoPauseMemory": true, "autoResume": map[string]any{"enabled": true}}, "pause", true},
		{"disk only, no resume", map[string]any{"autoPause": true, "autoPauseMemory": false}, "pause", false},
		{"resume off", map[string]any{"autoPause": true, "autoResume": map[string]any{"enabled": false}}, "pause", false},
		{"lifecycle object", map[string]any{"lifecycle": map[string]any{"onTimeout": "pause", "autoResume": true}}, "pause", true},
		{"lifecycle kill", map[string]any{"lifecycle": map[string]any{"onTimeout": "kill"}}, "kill", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := ts.e2bCreate(t, key, tc.body)
			d, code := ts.e2bInfo(t, key, sb.SandboxID)
			if code != 200 || d.Lifecycle.OnTimeout != tc.onTimeout || d.Lifecycle.AutoResume != tc.autoResume {
				t.Errorf("lifecycle: %d %+v, want onTimeout %s autoResume %v", code, d.Lifecycle, tc.onTimeout, tc.autoResume)
			}
			ts.e2bCall(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil)
		})
	}
	for _, tc := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{"autoPauseMemory": false}, "autoPauseMemory=false only applies when autoPause is true"},
		{map[string]any{"autoPause": true, "autoPauseMemory": false, "autoResume": map[string]any{"enabled": true}}, "cannot be combined with autoResume"},
		{map[string]any{"lifecycle": map[string]any{"onTimeout": "sleep"}}, "use pause or kill"},
		{map[string]any{"autoPause": true, "lifecycle": map[string]any{"onTimeout": "pause"}}, "cannot both be set"},
		{map[string]any{"autoResume": map[string]any{"enabled": true}, "lifecycle": map[string]any{"autoResume": true}}, "cannot both be set"},
		{map[string]any{"lifecycle": map[string]any{"keepalive": map[string]any{"traffic": map[string]any{"enabled": true}}}}, "lifecycle.keepalive"},
	} {
		tc.body["templateID"] = "base"
		resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, tc.body, nil)
		if resp.StatusCode != 400 || !strings.Contains(e2bErrorBody(t, resp, data), tc.want) {
			t.Errorf("create %v: %d %s, want 400 saying %q", tc.body, resp.StatusCode, data, tc.want)
		}
	}
}

// TestE2BAutoResume: a sandbox made with autoPause and autoResume (the
// settings kept across a server restart) is paused at its timeout with
// its disk, and a request to one of its ports or its envd resumes it;
// its timeout starts afresh. Traffic that is not let in, and
// traffic to a sandbox without autoResume, resume nothing; one with
// onTimeout kill is gone at its timeout.
func TestE2BAutoResume(t *testing.T) {
	clock := newFakeClock()
	logs := &sandboxtest.SyncBuffer{}
	ts := newTestServer(t, Config{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	key := ts.e2bKey(t, "autoresume")
	auto := ts.e2bCreate(t, key, map[string]any{"timeout": 60, "autoPause": true, "autoResume": map[string]any{"enabled": true},
		"network": map[string]any{"allowPublicTraffic": false}})
	manual := ts.e2bCreate(t, key, map[string]any{"timeout": 60, "autoPause": true})
	killed := ts.e2bCreate(t, key, map[string]any{"timeout": 60})
	for _, sb := range []e2bSandbox{auto, manual} {
		if resp, data := ts.envdFiles(t, sb.SandboxID, sb.EnvdAccessToken, "kept.txt", []byte("kept across the pause")); resp.StatusCode != 200 {
			t.Fatalf("write: %d %s", resp.StatusCode, data)
		}
	}
	ts = ts.restart(t) // the settings are the store's, not the process's

	clock.Add(61 * time.Second)
	for _, sb := range []e2bSandbox{auto, manual} {
		eventually(t, "the pause at the timeout", func() bool { return ts.runtimeState(t, sb.SandboxID) == "stopped" })
		if d, code := ts.e2bInfo(t, key, sb.SandboxID); code != 200 || d.State != "paused" {
			t.Fatalf("after the timeout: %d %+v", code, d)
		}
	}
	eventually(t, "the kill at the timeout", func() bool {
		_, code := ts.e2bInfo(t, key, killed.SandboxID)
		return code == 404 && ts.runtimeState(t, killed.SandboxID) == "gone"
	})

	t.Run("no autoResume", func(t *testing.T) {
		resp, data := ts.envdFiles(t, manual.SandboxID, manual.EnvdAccessToken, "kept.txt", nil)
		if resp.StatusCode != 502 || !strings.Contains(string(data), "paused") {
			t.Errorf("envd of a paused sandbox without autoResume: %d %s", resp.StatusCode, data)
		}
		if d, _ := ts.e2bInfo(t, key, manual.SandboxID); d.State != "paused" {
			t.Errorf("resumed by traffic without autoResume: %+v", d)
		}
	})

	t.Run("traffic not let in", func(t *testing.T) {
		other := ts.e2bKey(t, "autoresume-other")
		mine := ts.e2bCreate(t, other, map[string]any{})
		portHdr := map[string]string{e2bSandboxIDHeader: auto.SandboxID, e2bSandboxPortHeader: "8080"}
		for what, try := range map[string]func() *http.Response{
			"envd with another sandbox's token": func() *http.Response {
				resp, _ := ts.envdFiles(t, auto.SandboxID, mine.EnvdAccessToken, "kept.txt", nil)
				return resp
			},
			"envd with another team's API key": func() *http.Response {
				resp, _ := ts.e2bCall(t, "GET", "/files?path=kept.txt", other, nil, map[string]string{e2bSandboxIDHeader: auto.SandboxID, e2bSandboxPortHeader: "49983"})
				return resp
			},
			"health without a token": func() *http.Response {
				resp, _ := ts.e2bCall(t, "GET", "/health", "", nil, map[string]string{e2bSandboxIDHeader: auto.SandboxID, e2bSandboxPortHeader: "49983"})
				return resp
			},
			"a private port without its traffic token": func() *http.Response {
				resp, _ := ts.e2bCall(t, "GET", "/", other, nil, portHdr)
				return resp
			},
			"connect by another team": func() *http.Response {
				resp, _ := ts.e2bCall(t, "POST", "/v2/sandboxes/"+auto.SandboxID+"/connect", other, map[string]any{"timeout": 60}, nil)
				return resp
			},
		} {
			if resp := try(); resp.StatusCode/100 == 2 {
				t.Errorf("%s: %d", what, resp.StatusCode)
			}
			if d, _ := ts.e2bInfo(t, key, auto.SandboxID); d.State != "paused" || ts.runtimeState(t, auto.SandboxID) != "stopped" {
				t.Fatalf("%s resumed the sandbox", what)
			}
		}
	})

	t.Run("resumed by a port request with its traffic token", func(t *testing.T) {
		resp, data := ts.e2bCall(t, "GET", "/", "", nil, map[string]string{e2bSandboxIDHeader: auto.SandboxID,
			e2bSandboxPortHeader: "8080", "E2b-Traffic-Access-Token": *auto.TrafficAccessToken})
		// Running again, with nothing listening: processes end at a pause.
		if resp.StatusCode != 502 || !strings.Contains(string(data), "port is not open") {
			t.Errorf("port of the paused sandbox: %d %s", resp.StatusCode, data)
		}
		if d, _ := ts.e2bInfo(t, key, auto.SandboxID); d.State != "running" || ts.runtimeState(t, auto.SandboxID) != "running" {
			t.Fatalf("not resumed by its port: %+v", d)
		}
		// Paused again at a timeout of one second.
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+auto.SandboxID+"/timeout", key, map[string]any{"timeout": 1}, nil); resp.StatusCode != 204 {
			t.Fatalf("timeout: %d %s", resp.StatusCode, data)
		}
		clock.Add(2 * time.Second)
		eventually(t, "the pause at the timeout", func() bool { return ts.runtimeState(t, auto.SandboxID) == "stopped" })
	})

	t.Run("resumed by envd", func(t *testing.T) {
		resp, data := ts.envdFiles(t, auto.SandboxID, auto.EnvdAccessToken, "kept.txt", nil)
		if resp.StatusCode != 200 || string(data) != "kept across the pause" {
			t.Errorf("read from the paused sandbox: %d %s", resp.StatusCode, data)
		}
		d, _ := ts.e2bInfo(t, key, auto.SandboxID)
		// E2B's timeout after a resume by traffic: the create's, at
		// least five minutes.
		if want := clock.Now().Add(5 * time.Minute); d.State != "running" || !d.EndAt.Equal(want) {
			t.Errorf("after the resume: %s until %v, want running until %v", d.State, d.EndAt, want)
		}
	})
}

// TestE2BAutoResumeConcurrent: two requests at once to a paused sandbox
// with autoResume, by host name and by E2B_SANDBOX_URL's headers, are
// both answered, and the sandbox is resumed once.
func TestE2BAutoResumeConcurrent(t *testing.T) {
	clock := newFakeClock()
	logs := &sandboxtest.SyncBuffer{}
	es := newE2BServer(t, Config{Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	key := es.e2bKey(t, "concurrent")
	byHost := es.hostClient(t)
	for _, mode := range []string{"domain", "header"} {
		t.Run(mode, func(t *testing.T) {
			sb := es.e2bCreate(t, key, map[string]any{"timeout": 60, "autoPause": true, "autoResume": map[string]any{"enabled": true}})
			if resp, data := es.envdFiles(t, sb.SandboxID, sb.EnvdAccessToken, "kept.txt", []byte("kept")); resp.StatusCode != 200 {
				t.Fatalf("write: %d %s", resp.StatusCode, data)
			}
			clock.Add(61 * time.Second)
			eventually(t, "the pause at the timeout", func() bool { return es.runtimeState(t, sb.SandboxID) == "stopped" })
			read := func() (int, string) {
				if mode == "header" {
					resp, data := es.envdFiles(t, sb.SandboxID, sb.EnvdAccessToken, "kept.txt", nil)
					return resp.StatusCode, string(data)
				}
				req, _ := http.NewRequest("GET", "https://49983-"+sb.SandboxID+"."+es.domain+"/files?path=kept.txt", nil)
				req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
				resp, err := byHost.Do(req)
				if err != nil {
					return 0, err.Error()
				}
				defer resp.Body.Close()
				data, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(data)
			}
			var wg sync.WaitGroup
			codes, bodies := make([]int, 2), make([]string, 2)
			for i := range 2 {
				wg.Go(func() { codes[i], bodies[i] = read() })
			}
			wg.Wait()
			for i := range 2 {
				if codes[i] != 200 || bodies[i] != "kept" {
					t.Errorf("request %d to the paused sandbox: %d %s", i, codes[i], bodies[i])
				}
			}
			if n := strings.Count(logs.String(), `msg="resumed a paused sandbox on traffic" sandbox=`+sb.SandboxID); n != 1 {
				t.Errorf("resumed %d times, want once", n)
			}
		})
	}
}

// hostClient is an HTTPS client for es's host names ({port}-{id}.domain):
// it trusts es's test CA and dials es whatever the name.
func (es *e2bServer) hostClient(t *testing.T) *http.Client {
	t.Helper()
	pemData, err := os.ReadFile(es.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemData)
	_, port, _ := net.SplitHostPort(es.domain)
	dialer := &net.Dialer{}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestE2BAutoPauseSDK runs testdata/e2b/autopause.test.mjs: auto-pause
// and auto-resume through the unmodified E2B JS SDK, envd and ports
// reached by host name and by E2B_SANDBOX_URL's headers.
func TestE2BAutoPauseSDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "autopausesdk")
	es.runSuite(t, sdk, key, "autopause.test.mjs")
}
