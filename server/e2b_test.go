package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/local"
)

// e2bKey makes a team and an e2b_ key for it.
func (ts *testServer) e2bKey(t testing.TB, team string) string {
	t.Helper()
	var k api.Key
	ts.must(t, http.StatusCreated, "POST", "/v1/keys", ts.Admin, api.CreateKey{Name: team + "-e2b", NewTeam: team, Format: "e2b"}, &k)
	return k.Secret
}

// e2bCall makes a request to the E2B API with an X-API-Key (none when
// key is "") and extra headers, and returns the response with its body
// read.
func (ts *testServer) e2bCall(t testing.TB, method, path, key string, body any, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	all := map[string]string{}
	if key != "" {
		all["X-API-Key"] = key
	}
	for k, v := range hdr {
		all[k] = v
	}
	return ts.do(t, method, path, body, all)
}

// e2bErrorBody decodes E2B's error body and checks its code is the
// status.
func e2bErrorBody(t *testing.T, resp *http.Response, data []byte) string {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Message == "" || e.Code != resp.StatusCode {
		t.Fatalf("not an E2B error body for status %d: %s", resp.StatusCode, data)
	}
	return e.Message
}

// TestE2BAPI holds the E2B API's answers to what the SDK relies on (the
// SDK itself drives the server in TestE2BSDK): statuses, error bodies,
// tokens, and the routing of envd and ports.
func TestE2BAPI(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "e2bapi")
	if !strings.HasPrefix(key, "e2b_") || len(key) != 44 {
		t.Fatalf("e2b key %q: want e2b_ and 40 hex digits", key)
	}

	t.Run("auth", func(t *testing.T) {
		resp, data := ts.e2bCall(t, "GET", "/v2/sandboxes", "", nil, nil)
		if resp.StatusCode != 401 || !strings.Contains(e2bErrorBody(t, resp, data), "E2B_API_KEY") {
			t.Errorf("no key: %d %s", resp.StatusCode, data)
		}
		resp, data = ts.e2bCall(t, "GET", "/v2/sandboxes", "e2b_"+strings.Repeat("0", 40), nil, nil)
		if resp.StatusCode != 401 {
			t.Errorf("unknown key: %d %s", resp.StatusCode, data)
		}
		e2bErrorBody(t, resp, data)
		// An e2b_ key is a team key: /v1 takes it, and a cove_ key works
		// on the E2B API.
		if code, data := ts.call(t, "GET", "/v1/sandboxes", key, nil); code != 200 {
			t.Errorf("e2b key on /v1: %d %s", code, data)
		}
		if resp, data := ts.e2bCall(t, "GET", "/v2/sandboxes", ts.teamKey(t, "e2bapi"), nil, nil); resp.StatusCode != 200 {
			t.Errorf("cove key on the E2B API: %d %s", resp.StatusCode, data)
		}
		code, data := ts.call(t, "POST", "/v1/keys", ts.Admin, api.CreateKey{Name: "x", Format: "aws"})
		if code != 400 || !strings.Contains(apiError(t, data).Message, "format") {
			t.Errorf("bad key format: %d %s", code, data)
		}
	})

	t.Run("bad creates", func(t *testing.T) {
		for _, tc := range []struct {
			body any
			want string
		}{
			{`{"templateID": `, "parsing"},
			{`{"templateID": "base", "timeout": "soon"}`, "timeout"},
			{map[string]any{"templateID": "base", "timeout": 0}, "timeout"},
			{map[string]any{"templateID": "base", "mcp": map[string]any{"x": 1}}, "mcp"},
			{map[string]any{"templateID": "base", "network": map[string]any{"denyOut": []string{"1.1.1.1"}}}, "network.denyOut"},
			{map[string]any{"templateID": "base", "network": map[string]any{"allowOut": "1.1.1.1"}}, "network.allowOut"},
			{map[string]any{"templateID": "base", "metadata": map[string]string{"cove.x": "1"}}, "metadata"},
			{map[string]any{"templateID": "base", "envVars": map[string]string{"A=B": "1"}}, "A=B"},
		} {
			resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, tc.body, nil)
			if resp.StatusCode != 400 || !strings.Contains(e2bErrorBody(t, resp, data), tc.want) {
				t.Errorf("create %v: %d %s, want 400 naming %s", tc.body, resp.StatusCode, data, tc.want)
			}
		}
		resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "no-such-template"}, nil)
		if resp.StatusCode != 404 {
			t.Errorf("unknown template: %d %s", resp.StatusCode, data)
		}
		e2bErrorBody(t, resp, data)
	})

	var sb e2bSandbox
	resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "base", "metadata": map[string]string{"owner": "t"}}, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	if sb.EnvdAccessToken == "" || sb.EnvdVersion != e2bEnvdVersion || sb.TemplateID != "base" || sb.TrafficAccessToken != nil {
		t.Errorf("created: %s", data)
	}
	envd := func(method, path, token string, hdr map[string]string) (*http.Response, []byte) {
		h := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983"}
		if token != "" {
			h["X-Access-Token"] = token
		}
		for k, v := range hdr {
			h[k] = v
		}
		body := any(nil)
		if method == "POST" {
			body = "{}"
		}
		return ts.e2bCall(t, method, path, "", body, h)
	}

	t.Run("records", func(t *testing.T) {
		// The /v1 view shows the metadata but none of the E2B state.
		var v api.Sandbox
		ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.SandboxID, key, nil, &v)
		if len(v.Labels) != 1 || v.Labels["owner"] != "t" {
			t.Errorf("/v1 labels: %v", v.Labels)
		}
		resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+sb.SandboxID, key, nil, nil)
		var d e2bDetail
		if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.EnvdAccessToken != sb.EnvdAccessToken || d.State != "running" || d.Metadata["owner"] != "t" {
			t.Errorf("get: %d %s", resp.StatusCode, data)
		}
		resp, data = ts.e2bCall(t, "GET", "/sandboxes/nosuch", key, nil, nil)
		if resp.StatusCode != 404 {
			t.Errorf("get unknown: %d %s", resp.StatusCode, data)
		}
		e2bErrorBody(t, resp, data)
		// Another team's sandbox is unknown too.
		other := ts.e2bKey(t, "e2bother")
		if resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+sb.SandboxID, other, nil, nil); resp.StatusCode != 404 {
			t.Errorf("another team's: %d %s", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/connect", key, "{}", nil); resp.StatusCode != 400 || !strings.Contains(e2bErrorBody(t, resp, data), "timeout") {
			t.Errorf("v1 connect without timeout: %d %s", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", key, nil, nil); resp.StatusCode != 200 {
			t.Errorf("connect to a running sandbox: %d %s, want 200", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/refreshes", key, map[string]any{"duration": 60}, nil); resp.StatusCode != 204 {
			t.Errorf("refresh: %d %s", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", key, nil, nil); resp.StatusCode != 200 || !strings.Contains(string(data), `"memTotal"`) {
			t.Errorf("metrics: %d %s", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "GET", "/v2/sandboxes?state=sleeping", key, nil, nil); resp.StatusCode != 400 {
			t.Errorf("bad state: %d %s", resp.StatusCode, data)
		}
		ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "base"}, nil)
		resp, data = ts.e2bCall(t, "GET", "/v2/sandboxes?limit=1", key, nil, nil)
		var page []e2bListed
		if resp.StatusCode != 200 || json.Unmarshal(data, &page) != nil || len(page) != 1 || resp.Header.Get("X-Next-Token") == "" {
			t.Errorf("first page of one: %d %v %s", resp.StatusCode, resp.Header, data)
		}
	})

	t.Run("envd", func(t *testing.T) {
		if resp, data := envd("GET", "/health", "", nil); resp.StatusCode/100 != 2 {
			t.Errorf("health, no token: %d %s", resp.StatusCode, data)
		}
		resp, data := envd("POST", "/process.Process/List", sb.EnvdAccessToken, map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != 200 {
			t.Errorf("list processes: %d %s", resp.StatusCode, data)
		}
		for _, tok := range []string{"", "wrong"} {
			resp, data := envd("POST", "/process.Process/List", tok, map[string]string{"Content-Type": "application/json"})
			if resp.StatusCode != 401 || !strings.Contains(string(data), `"code":"unauthenticated"`) {
				t.Errorf("RPC with token %q: %d %s, want a Connect unauthenticated error", tok, resp.StatusCode, data)
			}
			resp, data = envd("GET", "/files?path=/etc/hostname", tok, nil)
			if resp.StatusCode != 401 {
				t.Errorf("files with token %q: %d %s", tok, resp.StatusCode, data)
			}
			e2bErrorBody(t, resp, data)
		}
		if resp, data := envd("POST", "/init", sb.EnvdAccessToken, nil); resp.StatusCode != 403 {
			t.Errorf("/init: %d %s", resp.StatusCode, data)
		}
		resp, data = ts.e2bCall(t, "GET", "/health", "", nil, map[string]string{"E2b-Sandbox-Id": sb.SandboxID})
		if resp.StatusCode != 400 || !strings.Contains(string(data), "E2b-Sandbox-Port") {
			t.Errorf("missing port header: %d %s", resp.StatusCode, data)
		}
		resp, data = ts.e2bCall(t, "GET", "/health", "", nil, map[string]string{"E2b-Sandbox-Id": "nosuch", "E2b-Sandbox-Port": "49983"})
		if resp.StatusCode != 502 {
			t.Errorf("unknown sandbox's envd: %d %s", resp.StatusCode, data)
		}
	})

	t.Run("ports", func(t *testing.T) {
		// A /v1 sandbox's ports keep Cove's rules when reached by header.
		cove := ts.create(t, key, api.CreateSandbox{})
		resp, data := ts.e2bCall(t, "GET", "/", "", nil, map[string]string{"E2b-Sandbox-Id": cove.ID, "E2b-Sandbox-Port": "8080"})
		if resp.StatusCode != 404 || !strings.Contains(string(data), "not exposed") {
			t.Errorf("/v1 sandbox's unexposed port by header: %d %s", resp.StatusCode, data)
		}
		// A private E2B sandbox's ports want the traffic token.
		var priv e2bSandbox
		resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}}, nil)
		if resp.StatusCode != 201 || json.Unmarshal(data, &priv) != nil || priv.TrafficAccessToken == nil {
			t.Fatalf("private create: %d %s", resp.StatusCode, data)
		}
		hdr := map[string]string{"E2b-Sandbox-Id": priv.SandboxID, "E2b-Sandbox-Port": "8080"}
		resp, data = ts.e2bCall(t, "GET", "/", "", nil, hdr)
		if resp.StatusCode != 403 || !strings.Contains(string(data), "missing") {
			t.Errorf("no traffic token: %d %s", resp.StatusCode, data)
		}
		hdr["E2b-Traffic-Access-Token"] = *priv.TrafficAccessToken
		resp, data = ts.e2bCall(t, "GET", "/", "", nil, hdr)
		if resp.StatusCode != 502 || !strings.Contains(string(data), "port is not open") {
			t.Errorf("traffic token, nothing listening: %d %s", resp.StatusCode, data)
		}
	})

	t.Run("pause", func(t *testing.T) {
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil, nil); resp.StatusCode != 204 {
			t.Fatalf("pause: %d %s", resp.StatusCode, data)
		}
		resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil, nil)
		if resp.StatusCode != 409 {
			t.Errorf("pause again: %d %s", resp.StatusCode, data)
		}
		e2bErrorBody(t, resp, data)
		resp, data = envd("POST", "/process.Process/List", sb.EnvdAccessToken, map[string]string{"Content-Type": "application/json"})
		if resp.StatusCode != 502 || !strings.Contains(string(data), `"code":"unavailable"`) {
			t.Errorf("paused envd: %d %s", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", key, map[string]any{"timeout": 60}, nil); resp.StatusCode != 409 {
			t.Errorf("timeout of a paused sandbox: %d %s", resp.StatusCode, data)
		}
		resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", key, map[string]any{"timeout": 60}, nil)
		var back e2bSandbox
		if resp.StatusCode != 201 || json.Unmarshal(data, &back) != nil || back.EnvdAccessToken != sb.EnvdAccessToken {
			t.Errorf("connect to a paused sandbox: %d %s, want 201 with the same token", resp.StatusCode, data)
		}
		if resp, data := envd("POST", "/process.Process/List", sb.EnvdAccessToken, map[string]string{"Content-Type": "application/json"}); resp.StatusCode != 200 {
			t.Errorf("envd after connect: %d %s", resp.StatusCode, data)
		}
	})

	t.Run("kill", func(t *testing.T) {
		if resp, data := ts.e2bCall(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil); resp.StatusCode != 204 {
			t.Fatalf("kill: %d %s", resp.StatusCode, data)
		}
		if resp, data := ts.e2bCall(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil); resp.StatusCode != 404 {
			t.Errorf("kill again: %d %s", resp.StatusCode, data)
		}
	})
}

// e2bSDKDir is where scripts/deps.sh installs the pinned e2b package
// (COVE_E2B_SDK overrides it); "" with the reason when it is missing.
func e2bSDKDir(t testing.TB) (string, string) {
	node, err := exec.LookPath("node")
	if err != nil {
		return "", "node is not installed (scripts/deps.sh installs it)"
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		return "", "node --version: " + err.Error()
	}
	if m := regexp.MustCompile(`^v(\d+)\.(\d+)`).FindStringSubmatch(string(out)); m == nil || !nodeFits(m[1], m[2]) {
		return "", fmt.Sprintf("node %s is too old for the e2b SDK (it needs 20.18.1 or later)", strings.TrimSpace(string(out)))
	}
	dir := os.Getenv("COVE_E2B_SDK")
	if dir == "" {
		abs, _ := filepath.Abs(filepath.Join("..", ".cache", "npm", "e2b"))
		dir = abs
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		return "", "the e2b npm package is not installed in " + dir + " (scripts/deps.sh installs it)"
	}
	return dir, ""
}

func nodeFits(major, minor string) bool {
	ma, _ := strconv.Atoi(major)
	mi, _ := strconv.Atoi(minor)
	return ma > 20 || ma == 20 && mi >= 18
}

// testTLS makes a CA and a certificate for domain and *.domain signed by
// it; it returns the server's TLS config and the CA's PEM file.
func testTLS(t testing.TB, domain string) (*tls.Config, string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Cove test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: domain},
		DNSNames: []string{domain, "*." + domain}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12}
	return cfg, caFile
}

// e2bServer is a test server that also serves HTTPS for *.cove.test, as
// `cove serve --domain cove.test:PORT --tls-cert ... ` would.
type e2bServer struct {
	*testServer
	domain string // cove.test:PORT
	caFile string
}

func newE2BServer(t testing.TB, cfg Config) *e2bServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	cfg.Domain = "cove.test:" + port
	ts := newTestServer(t, cfg)
	tlsCfg, caFile := testTLS(t, "cove.test")
	hs := &http.Server{Handler: ts.Handler(), TLSConfig: tlsCfg}
	go hs.Serve(ts.Server.ListenTLS(hs, l, tlsCfg))
	t.Cleanup(func() { hs.Close() })
	return &e2bServer{testServer: ts, domain: cfg.Domain, caFile: caFile}
}

// node runs a script of testdata/e2b with the E2B SDK in sdk and env
// added to the test's own.
func (es *e2bServer) node(t testing.TB, sdk string, env []string, args ...string) ([]byte, error) {
	return es.nodeIn(t, "e2b", append([]string{"COVE_E2B_SDK=" + sdk}, env...), args...)
}

// nodeIn runs node in testdata/dir against the server (its API URL and
// test CA) with env added to the test's own.
func (es *e2bServer) nodeIn(t testing.TB, dir string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = filepath.Join("testdata", dir)
	cmd.Env = append(slices.Clone(os.Environ()), "NODE_EXTRA_CA_CERTS="+es.caFile, "E2B_API_URL="+es.URL)
	cmd.Env = append(cmd.Env, env...)
	return cmd.CombinedOutput()
}

// modeEnv is the SDK scripts' environment for team key in a routing
// mode: "domain" (envd and ports by host name, TLS with the test CA) or
// "header" (E2B_SANDBOX_URL's headers).
func (es *e2bServer) modeEnv(key, mode string) []string {
	env := []string{"E2B_API_KEY=" + key, "COVE_E2B_MODE=" + mode, "COVE_E2B_DOMAIN=" + es.domain, "E2B_DOMAIN=" + es.domain}
	if mode == "header" {
		env = append(env, "E2B_SANDBOX_URL="+es.URL)
	}
	return env
}

// runSuite runs the node test file suite of testdata/e2b with the E2B SDK
// in sdk against the server as team key, in both routing modes: envd and
// ports by host name (TLS, the test CA) and through E2B_SANDBOX_URL's
// headers. extra is added to the environment.
func (es *e2bServer) runSuite(t *testing.T, sdk, key, suite string, extra ...string) {
	for _, mode := range []string{"domain", "header"} {
		t.Run(mode, func(t *testing.T) {
			out, err := es.node(t, sdk, append(es.modeEnv(key, mode), extra...), "--test-reporter=spec", suite)
			if err != nil {
				t.Fatalf("node %s (%s routing): %v\n%s", suite, mode, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// TestE2BSDK runs the unmodified E2B JS SDK (the version pinned in
// testdata/e2b/package-lock.json) against the server, with envd and
// ports reached by host name (TLS, a test CA) and by E2B_SANDBOX_URL's
// headers.
func TestE2BSDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "sdk")
	es.runSuite(t, sdk, key, "sdk.test.mjs")
}

// BenchmarkE2BCreateToFirstRun times what E2B publishes as its headline
// figure, Sandbox.create to the first commands.run result, through the
// unmodified SDK (both routing modes), next to the same flow over Cove's
// own API (POST /v1/sandboxes, then POST /v1/sandboxes/{id}/exec to the
// exit event). The server has a warm pool of two, as `cove serve` does
// by default. Each reports its median and 90th percentile; the kill after
// each sandbox is not timed.
func BenchmarkE2BCreateToFirstRun(b *testing.B) {
	cfg := Config{}
	if os.Geteuid() == 0 {
		dir := b.TempDir()
		rt, err := local.New(local.Config{Dir: filepath.Join(dir, "sb"), Pool: 2, PoolDiskBytes: api.Sizes["small"].DiskBytes,
			Env: []string{"GORACE=atexit_sleep_ms=0"}})
		if err != nil {
			b.Fatal(err)
		}
		rt.FillPool()
		b.Cleanup(func() { rt.DrainPool(context.Background()) })
		cfg.Runtime = rt
	}
	es := newE2BServer(b, cfg)
	key := es.e2bKey(b, "bench")
	report := func(b *testing.B, ms []float64) {
		slices.Sort(ms)
		mean := 0.0
		for _, m := range ms {
			mean += m
		}
		mean /= float64(len(ms))
		b.ReportMetric(mean*1e6, "ns/op")
		b.ReportMetric(ms[len(ms)/2], "p50-ms")
		b.ReportMetric(ms[len(ms)*9/10], "p90-ms")
	}
	for _, mode := range []string{"domain", "header"} {
		b.Run("e2b-sdk-"+mode, func(b *testing.B) {
			sdk, why := e2bSDKDir(b)
			if sdk == "" {
				b.Skip(why)
			}
			env := []string{"E2B_API_KEY=" + key, "COVE_E2B_DOMAIN=" + es.domain, "E2B_DOMAIN=" + es.domain, "COVE_E2B_N=" + strconv.Itoa(b.N)}
			if mode == "header" {
				env = append(env, "E2B_SANDBOX_URL="+es.URL)
			}
			out, err := es.node(b, sdk, env, "bench.mjs")
			if err != nil {
				b.Fatalf("node bench.mjs: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			var ms []float64
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &ms); err != nil || len(ms) == 0 {
				b.Fatalf("bench.mjs printed %s", out)
			}
			report(b, ms)
		})
	}
	b.Run("cove-api", func(b *testing.B) {
		exec, _ := json.Marshal(api.Exec{Cmd: "echo", Args: []string{"hi"}})
		var ms []float64
		for range b.N {
			start := time.Now()
			sb := es.create(b, key, api.CreateSandbox{})
			req, _ := http.NewRequest("POST", es.URL+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(exec))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ms = append(ms, float64(time.Since(start))/1e6)
			if !bytes.Contains(body, []byte(`"exit"`)) {
				b.Fatalf("exec: %s", body)
			}
			es.must(b, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)
		}
		report(b, ms)
	})
}

// TestE2BForkTokens: a fork (through /v1) of a sandbox made through the
// E2B API does not inherit its envd access token, so the parent's token
// does not open the child's envd; the child gets a token of its own.
func TestE2BForkTokens(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "forktokens")
	var parent e2bSandbox
	resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "base", "network": map[string]any{"allowPublicTraffic": false}}, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &parent) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	var child api.Sandbox
	code, data := ts.call(t, "POST", "/v1/sandboxes/"+parent.SandboxID+"/fork", key, nil)
	if code == http.StatusNotImplemented {
		t.Skipf("this runtime cannot fork: %s", data)
	}
	if code != 201 || json.Unmarshal(data, &child) != nil {
		t.Fatalf("fork: %d %s", code, data)
	}
	resp, data = ts.e2bCall(t, "GET", "/files?path=/etc/hostname", "", nil, map[string]string{
		"E2b-Sandbox-Id": child.ID, "E2b-Sandbox-Port": "49983", "X-Access-Token": parent.EnvdAccessToken})
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the parent's envd token on the fork: %d %s, want 401", resp.StatusCode, data)
	}
	var d e2bDetail
	resp, data = ts.e2bCall(t, "GET", "/sandboxes/"+child.ID, key, nil, nil)
	if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.EnvdAccessToken == "" || d.EnvdAccessToken == parent.EnvdAccessToken {
		t.Errorf("the fork's envd token: %d %s, want one of its own", resp.StatusCode, data)
	}
}
