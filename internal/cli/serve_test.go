package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"

	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox/local"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"

	"github.com/cove-sandbox/cove/api"
)

// serveProc is `cove serve` running as its own process.
type serveProc struct {
	cmd    *exec.Cmd
	url    string
	admin  string // set on the first start only
	stderr *sandboxtest.SyncBuffer
}

// startServe starts cove serve over data and waits until it listens.
func startServe(t *testing.T, home, data string, extra ...string) *serveProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data, "--state-dir", home, "--pool", "0"}, extra...)...)
	cmd.Env = append(os.Environ(), "COVE_TEST_CLI=1", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, stderr: &sandboxtest.SyncBuffer{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ch := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	lines := ch
	deadline := time.After(30 * time.Second)
	for p.url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			if strings.Contains(l, "COVE_API_KEY=") {
				for _, f := range strings.Fields(l) {
					if v, ok := strings.CutPrefix(f, "COVE_API_KEY="); ok {
						p.admin = v
					}
				}
			}
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("cove serve did not start:\n%s", p.stderr.String())
		}
		if i := strings.Index(p.stderr.String(), "url="); i >= 0 {
			p.url = strings.Fields(p.stderr.String()[i+4:])[0]
		}
	}
	// The admin key is printed before the server listens, but its line
	// may still be in the pipe.
	for p.admin == "" && lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			if _, v, ok := strings.Cut(l, "COVE_API_KEY="); ok {
				p.admin = strings.Fields(v)[0]
			}
		case <-time.After(300 * time.Millisecond):
			lines = nil
		}
	}
	return p
}

func apiCall(t *testing.T, method, url, key string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

// serveHome makes a temp state dir (short: unix socket paths are
// limited) and the server's data dir in it; at the end the sandboxes the
// servers left are deleted (their supervisors outlive the servers).
func serveHome(t *testing.T, prefix string) (home, data string) {
	t.Helper()
	home, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	data = filepath.Join(home, "srv")
	t.Cleanup(func() {
		rt, err := local.New(local.Config{Dir: filepath.Join(data, "sandboxes")})
		if err != nil {
			return
		}
		rt.DrainPool(context.Background())
		infos, _ := rt.List(context.Background())
		for _, in := range infos {
			rt.Delete(context.Background(), in.ID)
		}
	})
	return home, data
}

// TestServe: cove serve prints an admin key once, cove key manages keys
// against it, a SIGKILLed server restarts with its sandboxes still there
// and running, a create cut short by SIGKILL leaves no orphan, and
// SIGTERM stops it cleanly.
func TestServe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "cs")
	p := startServe(t, home, data)
	if !strings.HasPrefix(p.admin, "cove_") {
		t.Fatalf("no admin key printed; stderr:\n%s", p.stderr.String())
	}

	t.Setenv("COVE_SERVER", p.url)
	t.Setenv("COVE_API_KEY", p.admin)
	out, errOut, err := run(t, "key", "create", "ci", "--new-team", "acme")
	if err != nil {
		t.Fatalf("key create: %v %s", err, errOut)
	}
	teamKey := strings.TrimSpace(out)
	if !strings.HasPrefix(teamKey, "cove_") || !strings.Contains(errOut, "team acme") {
		t.Fatalf("key create printed %q / %q", out, errOut)
	}
	out, _, err = run(t, "key", "ls", "--all")
	if err != nil || !strings.Contains(out, "acme") || strings.Contains(out, teamKey) {
		t.Errorf("key ls: %v\n%s", err, out)
	}

	// Every cove sandbox command works against the server.
	t.Setenv("COVE_API_KEY", teamKey)
	out, errOut, err = run(t, "sandbox", "--server", p.url, "create", "--env", "GREETING=hi")
	if err != nil {
		t.Fatalf("sandbox create --server: %v %s", err, errOut)
	}
	rid := strings.TrimSpace(out)
	out, errOut, err = run(t, "sandbox", "--server", p.url, "exec", rid, "--", "sh", "-c", "echo $GREETING from $(pwd); exit 3")
	if clibase.ExitCode(err) != 3 || out != "hi from /workspace\n" {
		t.Errorf("sandbox exec --server: %q %q %v", out, errOut, err)
	}
	src := filepath.Join(home, "up.txt")
	os.WriteFile(src, []byte("uploaded"), 0o644)
	if _, errOut, err := run(t, "sandbox", "--server", p.url, "cp", src, rid+":up.txt"); err != nil {
		t.Errorf("sandbox cp --server: %v %s", err, errOut)
	}
	if out, _, _ := run(t, "sandbox", "--server", p.url, "exec", rid, "--", "cat", "up.txt"); out != "uploaded" {
		t.Errorf("the copied file reads %q", out)
	}
	if out, _, _ := run(t, "sandbox", "--server", p.url, "ls"); !strings.Contains(out, rid) {
		t.Errorf("sandbox ls --server lacks %s:\n%s", rid, out)
	}
	if _, errOut, err := run(t, "sandbox", "--server", p.url, "rm", "-f", rid); err != nil {
		t.Errorf("sandbox rm --server: %v %s", err, errOut)
	}
	t.Setenv("COVE_API_KEY", p.admin)

	var sb api.Sandbox
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes", teamKey, api.CreateSandbox{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}

	// SIGKILL, restart: the sandbox is still there and running; no new
	// admin key.
	p.cmd.Process.Kill()
	p.cmd.Wait()
	p2 := startServe(t, home, data)
	if p2.admin != "" {
		t.Error("a restarted server printed a new admin key")
	}
	var got api.Sandbox
	if code := apiCall(t, "GET", p2.url+"/v1/sandboxes/"+sb.ID, teamKey, nil, &got); code != 200 || got.State != "running" {
		t.Fatalf("after a SIGKILL and restart: %d %+v", code, got)
	}

	// Creates cut short by SIGKILL: afterwards every sandbox on disk is
	// one the API lists (the rest were cleaned up).
	for _, delay := range []time.Duration{5 * time.Millisecond, 30 * time.Millisecond, 80 * time.Millisecond} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			apiCall(t, "POST", p2.url+"/v1/sandboxes", teamKey, api.CreateSandbox{}, nil)
		}()
		time.Sleep(delay)
		p2.cmd.Process.Kill()
		p2.cmd.Wait()
		<-done
		p2 = startServe(t, home, data)
		var list api.SandboxList
		apiCall(t, "GET", p2.url+"/v1/sandboxes", teamKey, nil, &list)
		listed := map[string]bool{}
		for _, s := range list.Sandboxes {
			listed[s.ID] = true
		}
		entries, _ := os.ReadDir(filepath.Join(data, "sandboxes"))
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "sb-") && !listed[e.Name()] && !pooled(filepath.Join(data, "sandboxes", e.Name())) {
				ents, _ := os.ReadDir(filepath.Join(data, "sandboxes", e.Name()))
				var names []string
				for _, x := range ents {
					names = append(names, x.Name())
				}
				st, _ := os.ReadFile(filepath.Join(data, "sandboxes", e.Name(), "state.json"))
				t.Errorf("kill after %v: sandbox %s is on disk but not listed (an orphan); it holds %v; state %.300s", delay, e.Name(), names, st)
			}
		}
	}

	// SIGKILL during an exec stream and during an upload: the client sees
	// an error (never an exit or a 204), no partial file appears at the
	// path, and after a restart the sandbox works.
	var live api.Sandbox
	if code := apiCall(t, "POST", p2.url+"/v1/sandboxes", teamKey, api.CreateSandbox{}, &live); code != 201 {
		t.Fatalf("create: %d", code)
	}
	streamErr := make(chan string, 1)
	go func() {
		body, _ := json.Marshal(api.Exec{Cmd: "sh", Args: []string{"-c", "echo started; sleep 5; echo done"}})
		req, _ := http.NewRequest("POST", p2.url+"/v1/sandboxes/"+live.ID+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+teamKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			streamErr <- "request: " + err.Error()
			return
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		switch {
		case err == nil && strings.Contains(string(data), `"exit"`):
			streamErr <- "the stream ended with an exit event"
		case err == nil:
			streamErr <- "" // cut off: no exit event
		default:
			streamErr <- ""
		}
	}()
	pr, pw := io.Pipe()
	uploadDone := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("PUT", p2.url+"/v1/sandboxes/"+live.ID+"/files?path=big.bin", pr)
		req.Header.Set("Authorization", "Bearer "+teamKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			uploadDone <- -1
			return
		}
		resp.Body.Close()
		uploadDone <- resp.StatusCode
	}()
	go func() {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < 1000; i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		pw.Close()
	}()
	time.Sleep(300 * time.Millisecond)
	p2.cmd.Process.Kill()
	p2.cmd.Wait()
	pw.CloseWithError(io.ErrClosedPipe)
	if msg := <-streamErr; msg != "" {
		t.Errorf("exec stream through a killed server: %s", msg)
	}
	if code := <-uploadDone; code == 204 || code == 200 {
		t.Errorf("an upload cut by a killed server was reported written (%d)", code)
	}
	p2 = startServe(t, home, data)
	if code := apiCall(t, "GET", p2.url+"/v1/sandboxes/"+live.ID+"/files/stat?path=big.bin", teamKey, nil, nil); code != 404 {
		t.Errorf("a cut upload left big.bin in the workspace (stat: %d)", code)
	}
	var evs strings.Builder
	func() {
		body, _ := json.Marshal(api.Exec{Cmd: "echo", Args: []string{"alive"}})
		req, _ := http.NewRequest("POST", p2.url+"/v1/sandboxes/"+live.ID+"/exec", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+teamKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(&evs, resp.Body)
	}()
	if !strings.Contains(evs.String(), `"exit_code":0`) {
		t.Errorf("exec after the restart: %s", evs.String())
	}

	// Revoke, then SIGTERM: a clean exit.
	var keys struct{ Keys []api.Key }
	apiCall(t, "GET", p2.url+"/v1/keys", teamKey, nil, &keys)
	t.Setenv("COVE_SERVER", p2.url)
	if _, _, err := run(t, "key", "revoke", keys.Keys[0].ID); err != nil {
		t.Fatal(err)
	}
	if code := apiCall(t, "GET", p2.url+"/v1/sandboxes", teamKey, nil, nil); code != 401 {
		t.Errorf("revoked key: %d, want 401", code)
	}
	p2.cmd.Process.Signal(syscall.SIGTERM)
	errc := make(chan error, 1)
	go func() { errc <- p2.cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("cove serve after SIGTERM: %v\n%s", err, p2.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Errorf("cove serve did not stop within 15s of SIGTERM")
	}
	fmt.Fprint(io.Discard, p2.stderr.String())
}

// pooled reports whether a sandbox directory holds one of the server's
// warm pool (not a team's, so not listed).
func pooled(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return false
	}
	var st struct {
		Pooled bool `json:"pooled"`
	}
	return json.Unmarshal(b, &st) == nil && st.Pooled
}

// TestServeTLS: with --tls-cert and --tls-key the API is served over
// HTTPS, and the URLs it prints say so.
func TestServeTLS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, err := os.MkdirTemp("", "ct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(home, "cert.pem"), filepath.Join(home, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)

	p := startServe(t, home, filepath.Join(home, "srv"), "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(p.url, "https://") {
		t.Fatalf("URL %q, want https", p.url)
	}
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", p.url+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+p.admin)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("HTTPS request: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET /v1/sandboxes over TLS: %d", resp.StatusCode)
	}
	if resp, err := http.Get(strings.Replace(p.url, "https://", "http://", 1) + "/health"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was answered on the TLS port")
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
