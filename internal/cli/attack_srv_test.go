package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
	"github.com/creack/pty"
)

// TestTermSafe: control characters are shown, not obeyed, also when a
// sequence is split across writes.
func TestTermSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text\twith tabs\n", "plain text\twith tabs\n"},
		{"\x1b[2J\x1b[H", "^[[2J^[[H"},
		{"\x1b]0;title\x07", "^[]0;title^G"},
		{"\x1b[8mhidden\x1b[0m", "^[[8mhidden^[[0m"},
		{"10%\r99%\r\n", "10%^M99%\n"},
		{"a\bb\x7f", "a^Hb^?"},
		{"\u009b2J", `\u009b2J`},
		{"\xff\xfe", `\xff\xfe`},
		{"rm -rf ~ \u202e# safe", `rm -rf ~ \u202e# safe`},
		{"héllo wörld ✓", "héllo wörld ✓"},
	} {
		if got := termSafe(tc.in); got != tc.want {
			t.Errorf("termSafe(%q) = %q, want %q", tc.in, got, tc.want)
		}
		// Byte by byte through a writer: the same.
		var sb strings.Builder
		w := newSafeWriter(&sb)
		for i := range len(tc.in) {
			w.Write([]byte{tc.in[i]})
		}
		w.Flush()
		if sb.String() != tc.want {
			t.Errorf("safeWriter byte by byte %q = %q, want %q", tc.in, sb.String(), tc.want)
		}
	}
	if got := oneLine("rm -r x\n\n\necho hi\r\n"); got != `rm -r x\n\n\necho hi\n` {
		t.Errorf("oneLine = %q", got)
	}
}

// TestRunTerminalInjection: a command whose output clears the screen,
// sets the title, hides text, overwrites lines with carriage returns and
// prints a fake approval prompt, then a risky call whose command hides
// its start behind newlines: at the terminal, nothing of it is obeyed,
// and the question cove asks is the real one, on one line after a
// terminal reset.
func TestRunTerminalInjection(t *testing.T) {
	runEnv(t)
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pty here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	prev := Stdin
	Stdin = tty
	t.Cleanup(func() { Stdin = prev })

	hostile := `printf '\033[2J\033[H\033]0;pwned\007\033[8mhidden\033[0m\nprogress 10%%\rprogress 99%%\r? approve $ ls (reads a file)? [y/N] \033[1A\033[2K\302\233\342\200\256evil\n'`
	args := func(cmd string) string {
		b, _ := json.Marshal(map[string]string{"cmd": cmd})
		return string(b)
	}
	risky := "rm -r scratch" + strings.Repeat("\n", 40) + "echo harmless"
	ws := newWorkspace(t)
	srv := fake.NewServer(t, fake.Call("exec_command", args(hostile)), fake.Call("exec_command", args(risky)), fake.Text("done"))
	const real = `? approve $ rm -r scratch\n\n\n`
	stdout, done := startRun(t, t.Context(), `echo harmless (deletes recursively)? [y/N] `, "run", "--base-url", srv.URL, "--workspace", ws, "tidy")
	io.WriteString(ptmx, "n\n")
	if err := wait(t, done, stdout); err != nil {
		t.Fatalf("cove run: %v\n%s", err, stdout)
	}
	out := stdout.String()
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s", out)
		}
	}()

	// The resets before each question are cove's own; past them, no
	// control character reaches the terminal.
	if !strings.Contains(out, termReset+"\n"+real) {
		t.Errorf("the question does not follow a terminal reset on a line of its own:\n%q", out)
	}
	rest := strings.ReplaceAll(out, termReset, "")
	for _, c := range []string{"\x1b", "\x07", "\b", "\u009b", "\u202e"} {
		if strings.Contains(rest, c) {
			t.Errorf("%q reached the terminal:\n%q", c, rest)
		}
	}
	if strings.Contains(strings.ReplaceAll(rest, "\r\n", "\n"), "\r") {
		t.Errorf("a carriage return reached the terminal:\n%q", rest)
	}
	for _, visible := range []string{"^[[2J", "^[]0;pwned^G", "^[[8mhidden", "progress 10%^Mprogress 99%^M? approve $ ls", `\u009b\u202eevil`} {
		if !strings.Contains(out, visible) {
			t.Errorf("stdout lacks %q, the hostile output made visible:\n%s", visible, out)
		}
	}
	// The question is the last thing printed before the answer was
	// read, whole, and the call it names was rejected.
	const end = "echo harmless (deletes recursively)? [y/N] "
	before := out[:strings.Index(out, end)+len(end)]
	if i := strings.LastIndex(before, "\n"); !strings.HasPrefix(before[i+1:], real) {
		t.Errorf("the last line before the answer is %q, want the real question", before[i+1:])
	}
	if !strings.Contains(out, "✗ rejected: $ rm -r scratch") {
		t.Errorf("the call was not rejected:\n%s", out)
	}
}

// tenantKey makes a team and a key for it on a cove serve process.
func tenantKey(t *testing.T, p *serveProc, team string) string {
	t.Helper()
	var k api.Key
	if code := apiCall(t, "POST", p.url+"/v1/keys", p.admin, api.CreateKey{Name: team, NewTeam: team}, &k); code != 201 {
		t.Fatalf("making a key for %s: %d", team, code)
	}
	return k.Secret
}

// rawCall is apiCall returning the raw body.
func rawCall(t *testing.T, method, url, key string, body any) (int, string) {
	t.Helper()
	var raw json.RawMessage
	code := apiCall(t, method, url, key, body, &raw)
	return code, string(raw)
}

// TestServeRefusesHostRepos: through cove serve as a tenant, a manifest
// whose git_repo names a repository on the server's own disk (as a URL
// Go's parser rejects but git reads, a file:// URL or a plain path) is
// refused as a bad request, and nothing of the repository reaches a
// sandbox. Sandboxes get a pids limit by default.
func TestServeRefusesHostRepos(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	// The host's repository, with a secret in it.
	repo := t.TempDir()
	secret := fmt.Sprintf("HOSTSECRET-%d", time.Now().UnixNano())
	os.WriteFile(filepath.Join(repo, "secret.txt"), []byte(secret), 0o644)
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "x"}} {
		if out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	home, data := serveHome(t, "ca")
	p := startServe(t, home, data)
	key := tenantKey(t, p, "tenant")

	for _, u := range []string{"file://%zz" + repo, "file://" + repo, repo, "file://localhost" + repo} {
		m := map[string]any{"entries": map[string]any{"repo": map[string]any{"type": "git_repo", "repo": u, "ref": "main"}}}
		code, body := rawCall(t, "POST", p.url+"/v1/sandboxes", key, map[string]any{"manifest": m})
		if code != http.StatusBadRequest || strings.Contains(body, secret) {
			t.Errorf("a git_repo of %q: %d %s, want 400", u, code, body)
		}
		var sb api.Sandbox
		if code == http.StatusCreated && json.Unmarshal([]byte(body), &sb) == nil {
			req, _ := http.NewRequest("GET", p.url+"/v1/sandboxes/"+sb.ID+"/files?path=repo/secret.txt", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Errorf("the sandbox made from %q holds the host's repository: secret.txt reads %q", u, got)
			}
		}
	}
	var list api.SandboxList
	apiCall(t, "GET", p.url+"/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", list.Sandboxes)
	}

	var sb api.Sandbox
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{}, &sb); code != 201 || sb.Pids != 512 {
		t.Errorf("a default create: %d, pids %d; want the small size's 512", code, sb.Pids)
	}
	if code, body := rawCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{Pids: api.PidsUnlimited}); code != 400 || !strings.Contains(body, "not allowed on this server") {
		t.Errorf("no pids limit on a server that does not allow it: %d %s", code, body)
	}
}

// TestServeOutbound: through cove serve as a tenant, a run's base_url on
// the server's loopback is refused, the body of a failed model call
// never reaches the tenant (run, events), a webhook redirected to the
// loopback is not followed there, and an address the operator allows
// (--outbound-allow with a CIDR) works.
func TestServeOutbound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	secret := fmt.Sprintf("TOPSECRET-%d", time.Now().UnixNano())
	var loopbackHits atomic.Int32
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		loopbackHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"message":"%s"}}`, secret)
	}))
	defer internal.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintf(w, `{"error":{"message":"%s"}}`, secret)
	}))
	defer failing.Close()
	hooked := make(chan struct{}, 10)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooked <- struct{}{}
		http.Redirect(w, r, internal.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	model := fake.NewServer(t, fake.Text("hello from an allowed model").Forever())
	own := fake.NewServer(t)
	portOf := func(raw string) string { u, _ := url.Parse(raw); return u.Port() }

	home, data := serveHome(t, "co")
	p := startServe(t, home, data, "--model-base-url", own.URL, "--model", "m",
		"--outbound-allow", "127.0.0.1:"+portOf(failing.URL)+",127.0.0.1:"+portOf(redirector.URL),
		"--outbound-allow", "127.0.0.0/8:"+portOf(model.URL))
	key := tenantKey(t, p, "tenant")
	var sb api.Sandbox
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	startRun := func(base, webhook string) (int, string, api.Run) {
		body := map[string]any{"input": "hi", "sandbox_id": sb.ID, "agent": map[string]any{"base_url": base, "model": "m", "approval": "never"}}
		if webhook != "" {
			body["webhook_url"] = webhook
		}
		code, raw := rawCall(t, "POST", p.url+"/v1/runs", key, body)
		var r api.Run
		json.Unmarshal([]byte(raw), &r)
		return code, raw, r
	}
	finished := func(id string) (api.Run, string) {
		deadline := time.Now().Add(2 * time.Minute)
		var r api.Run
		for time.Now().Before(deadline) {
			apiCall(t, "GET", p.url+"/v1/runs/"+id, key, nil, &r)
			if r.Status != api.RunRunning {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		req, _ := http.NewRequest("GET", p.url+"/v1/runs/"+id+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		evs, _ := io.ReadAll(resp.Body)
		return r, string(evs)
	}

	if code, raw, _ := startRun(internal.URL+"/v1", ""); code != 400 || !strings.Contains(raw, "loopback") || strings.Contains(raw, secret) {
		t.Errorf("a run whose model is on the server's loopback: %d %s, want 400", code, raw)
	}

	code, raw, r := startRun(failing.URL+"/v1", redirector.URL+"/hook")
	if code != 201 {
		t.Fatalf("a run at an allowed address: %d %s", code, raw)
	}
	got, evs := finished(r.ID)
	if got.Status != api.RunFailed || !strings.Contains(got.Error, "HTTP 500") || !strings.Contains(got.Error, "reference ref_") {
		t.Errorf("a failed model call: %s %q, want failed with the status and a reference", got.Status, got.Error)
	}
	if strings.Contains(got.Error, secret) || strings.Contains(evs, secret) {
		t.Errorf("the failed call's body reached the tenant: %q\n%s", got.Error, evs)
	}
	if !strings.Contains(p.stderr.String(), secret) {
		t.Errorf("the server's log lacks the failed call's body")
	}
	select {
	case <-hooked:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook was never sent")
	}
	time.Sleep(time.Second)
	if n := loopbackHits.Load(); n != 0 {
		t.Errorf("the redirected webhook reached the server's loopback (%d requests)", n)
	}

	code, raw, r = startRun(model.URL, "")
	if code != 201 {
		t.Fatalf("a run at an allowed CIDR: %d %s", code, raw)
	}
	if got, _ := finished(r.ID); got.Status != api.RunIdle || got.Output != "hello from an allowed model" {
		t.Errorf("a run at an allowed CIDR: %s %q %q", got.Status, got.Output, got.Error)
	}
}
