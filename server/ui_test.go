package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// The web UI's tests drive Debian's chromium, headless, through the
// DevTools protocol (chromedp) against a real server on the local
// runtime. They assert what a user relies on: text that appears,
// controls that work. Screenshots of each step go to $COVE_TEST_ARTIFACTS
// (default a temporary directory), never into the repository.

const chromiumPath = "/usr/bin/chromium"

// browser is one headless chromium tab on a test server.
type browser struct {
	t    testing.TB
	ctx  context.Context
	base string
	dir  string // screenshots
	shot int

	mu         sync.Mutex
	exceptions []string
}

// newBrowser starts chromium for t, or skips t when it is not installed.
func newBrowser(t testing.TB, base string) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("the browser tests need Debian's chromium at %s (apt-get install chromium; scripts/deps.sh installs it)", chromiumPath)
	}
	dir := os.Getenv("COVE_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	dir = filepath.Join(dir, regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	b := &browser{t: t, ctx: ctx, base: base, dir: dir}
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, e := range b.exceptions {
			t.Errorf("uncaught exception in the page: %s", e)
		}
		t.Logf("screenshots in %s", dir)
	})
	// The first Run starts the browser; a page's uncaught exceptions fail
	// the test (they are bugs even when the page copes).
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			b.mu.Lock()
			b.exceptions = append(b.exceptions, msg)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

// do runs actions, failing the test (with a screenshot) on an error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Steps(actions...)); err != nil {
		b.fail(what, err)
	}
}

func (b *browser) fail(what string, err error) {
	b.t.Helper()
	b.screenshot("failed")
	banner, _ := b.evalErr(`document.getElementById('banner')?.textContent || ''`)
	body, _ := b.evalErr(`document.getElementById('main')?.innerText.slice(0, 2000) || ''`)
	b.t.Fatalf("%s: %v\nerror banner: %q\npage: %s", what, err, banner, body)
}

func (b *browser) evalErr(expr string) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[string](`String(`+expr+`)`))
}

// eval is a JavaScript expression's value as a string.
func (b *browser) eval(expr string) string {
	b.t.Helper()
	v, err := b.evalErr(expr)
	if err != nil {
		b.fail("evaluating "+expr, err)
	}
	return v
}

// wait polls a JavaScript condition until it holds (a time limit, not a
// sleep, bounds it).
func (b *browser) wait(what, cond string) {
	b.t.Helper()
	b.waitFor(what, cond, 45*time.Second)
}

func (b *browser) waitFor(what, cond string, limit time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, limit+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(limit), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		b.fail("waiting for "+what, err)
	}
}

// js quotes s as a JavaScript string.
func js(s string) string {
	data, _ := json.Marshal(s)
	return string(data)
}

// textOf is the expression of the text of the first element sel matches.
func textOf(sel string) string {
	return `(document.querySelector(` + js(sel) + `)?.textContent ?? '')`
}

// waitText waits until sel's text contains want.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	b.wait(fmt.Sprintf("%q in %s", want, sel), textOf(sel)+`.includes(`+js(want)+`)`)
}

func (b *browser) open(hash string) {
	b.t.Helper()
	b.do("opening "+hash, chromedp.Navigate(b.base+"/"+hash))
}

func (b *browser) click(sel string) {
	b.t.Helper()
	b.do("clicking "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// fill replaces the value of a text field by typing.
func (b *browser) fill(sel, text string) {
	b.t.Helper()
	b.setValue(sel, "")
	b.do("typing into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text))
}

// setValue sets a field's value as a script would (selects, clearing).
func (b *browser) setValue(sel, v string) {
	b.t.Helper()
	b.eval(`(() => { const e = document.querySelector(` + js(sel) + `); e.value = ` + js(v) + `; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return e.value; })()`)
}

// screenshot saves the page as NN-name.png in the artifacts directory.
func (b *browser) screenshot(name string) {
	b.shot++
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return
	}
	os.WriteFile(filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.shot, name)), png, 0o644)
}

// signIn signs in through the form and waits for the sandboxes page.
func (b *browser) signIn(key string) {
	b.t.Helper()
	b.open("#/signin")
	b.do("the sign-in form", chromedp.WaitVisible(chromedp.CSS("#key")))
	b.fill("#key", key)
	b.click("#signin button[type=submit]")
	b.wait("the sandboxes page", `location.hash === '#/sandboxes' && !!document.querySelector('#create-form')`)
}

// bannerShows is the condition that the error banner is visible with msg.
func bannerShows(msg string) string {
	return `(() => { const b = document.getElementById('banner'); return !!b && !b.hidden && b.textContent.includes(` + js(msg) + `); })()`
}

// TestUIAssets: the page and its assets are served with their types, a
// strict content security policy and ETags; other paths are not the page.
func TestUIAssets(t *testing.T) {
	ts := newTestServer(t, Config{})
	get := func(path, etag string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		path, ctype string
	}{{"/", "text/html"}, {"/ui/", "text/html"}, {"/ui/app.js", "text/javascript"}, {"/ui/app.css", "text/css"}} {
		resp := get(tc.path, "")
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) || resp.Header.Get("ETag") == "" ||
			!strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: %d %v", tc.path, resp.StatusCode, resp.Header)
			continue
		}
		if again := get(tc.path, resp.Header.Get("ETag")); again.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", tc.path, again.StatusCode)
		}
	}
	for _, p := range []string{"/ui/nope.js", "/ui/../server.go", "/nope", "/v1/nope"} {
		if resp := get(p, ""); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", p, resp.StatusCode)
		}
	}
	if code, data := ts.call(t, "GET", "/v1/sandboxes", "", nil); code != 401 || apiError(t, data).Code != api.CodeUnauthorized {
		t.Errorf("the API behind the UI: %d %s", code, data)
	}
}

// TestUIBrowser walks the UI as a user: a wrong key, then sign in,
// create a sandbox, run commands in the console, a terminal, upload,
// view and delete files, the list and the usage page, and a stopped and
// a deleted sandbox opened by URL.
func TestUIBrowser(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "ui")
	b := newBrowser(t, ts.URL)

	// The page is served, offline-safe: no resource from elsewhere.
	resp, err := http.Get(ts.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") ||
		bytes.Contains(page, []byte("http://")) || bytes.Contains(page, []byte("https://")) {
		t.Fatalf("GET /: %d %v\n%s", resp.StatusCode, resp.Header, page)
	}

	// Signed out, any page leads to the sign-in form.
	b.open("#/sandboxes")
	b.wait("the sign-in form", `location.hash === '#/signin' && !!document.querySelector('#key')`)

	// A wrong key: the server's message, in the form and the banner.
	b.fill("#key", "cove_0123456789abcdef")
	b.click("#signin button[type=submit]")
	b.waitText("#signin-error", "unknown or revoked API key")
	b.wait("the banner", bannerShows("unknown or revoked API key"))
	b.screenshot("wrong-key")
	b.fill("#key", "not-a-key")
	b.click("#signin button[type=submit]")
	b.waitText("#signin-error", "not a Cove API key")

	b.signIn(key)
	b.waitText("main", "No sandboxes yet")
	b.screenshot("signed-in")

	// Create a sandbox: its page opens.
	b.setValue("#new-size", "small")
	b.click("#create")
	b.wait("the new sandbox's page", `location.hash.startsWith('#/sandboxes/sb') && !!document.querySelector('#cmd')`)
	id := strings.TrimPrefix(b.eval(`location.hash`), "#/sandboxes/")
	var sb api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+id, key, nil, &sb)
	if sb.State != "running" || sb.CPUs != 1 {
		t.Fatalf("the sandbox made through the UI: %+v", sb)
	}
	b.waitText("h1", id)

	// The console: output streams in, colours are spans, and the exit
	// code shows.
	b.fill("#cmd", `echo hello; printf '\033[31mred\033[0m plain\n'; echo oops >&2`)
	b.click("#run")
	b.waitText("#console-log .entry:last-child .status", "exit 0")
	b.waitText("#console-log .entry:last-child .out", "hello")
	if got := b.eval(textOf("#console-log .out .ansi-fg-1")); got != "red" {
		t.Errorf("red text in a span of colour 1: got %q", got)
	}
	if got := b.eval(`getComputedStyle(document.querySelector('#console-log .out .ansi-fg-1')).color`); got != "rgb(255, 123, 114)" {
		t.Errorf("the red span's colour is %s", got)
	}
	if got := b.eval(textOf("#console-log .out .stderr")); !strings.Contains(got, "oops") {
		t.Errorf("stderr is marked: got %q", got)
	}
	// Markup in output is text, not HTML.
	b.fill("#cmd", `echo '<img src=x onerror=alert(1)><b>bold</b>'; exit 3`)
	b.click("#run")
	b.waitText("#console-log .entry:last-child .status", "exit 3")
	if n := b.eval(`document.querySelectorAll('#console-log img, #console-log b').length`); n != "0" {
		t.Errorf("output became markup: %s elements", n)
	}
	b.waitText("#console-log .entry:last-child .out", "<b>bold</b>")
	b.screenshot("console")

	// The terminal: a shell over the PTY WebSocket.
	b.click("#tab-terminal")
	b.click("#term-connect")
	b.waitText(".term-panel [role=status]", "Connected")
	b.do("typing in the terminal", chromedp.SendKeys(chromedp.CSS("#terminal"), "echo $((6*7))z\r"))
	b.waitText("#terminal", "42z")
	b.screenshot("terminal")

	// Files: upload a text file and an image, view both, delete one.
	b.click("#tab-files")
	b.wait("the file list", `!!document.querySelector('#files tbody')`)
	up := t.TempDir()
	textFile, imgFile := filepath.Join(up, "notes.txt"), filepath.Join(up, "dot.png")
	os.WriteFile(textFile, []byte("hello from the browser\n"), 0o644)
	img := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for i := range img.Pix {
		img.Pix[i] = 200
	}
	img.Set(4, 4, color.RGBA{255, 0, 0, 255})
	var imgBuf bytes.Buffer
	png.Encode(&imgBuf, img)
	os.WriteFile(imgFile, imgBuf.Bytes(), 0o644)
	b.do("choosing files to upload", chromedp.SetUploadFiles(chromedp.CSS("#upload"), []string{textFile, imgFile}))
	b.wait("the uploaded files listed", `!!document.querySelector('#files tr[data-name="notes.txt"]') && !!document.querySelector('#files tr[data-name="dot.png"]')`)
	code, data := ts.call(t, "GET", "/v1/sandboxes/"+id+"/files?path=notes.txt", key, nil)
	if code != 200 || string(data) != "hello from the browser\n" {
		t.Fatalf("the uploaded file in the sandbox: %d %q", code, data)
	}
	b.click(`#files tr[data-name="notes.txt"] td:first-child button`)
	b.waitText("#viewer .preview-text", "hello from the browser")
	b.click(`#files tr[data-name="dot.png"] td:first-child button`)
	b.wait("the image shown", `(() => { const i = document.querySelector('#viewer img.preview-image'); return !!i && i.complete && i.naturalWidth === 8; })()`)
	b.screenshot("files")
	b.click(`#files tr[data-name="notes.txt"] button[aria-label="Delete notes.txt"]`)
	b.waitText(`#files tr[data-name="notes.txt"] button[aria-label="Delete notes.txt"]`, "Confirm")
	b.click(`#files tr[data-name="notes.txt"] button[aria-label="Delete notes.txt"]`)
	b.wait("the file gone from the list", `!document.querySelector('#files tr[data-name="notes.txt"]')`)
	if code, _ := ts.call(t, "GET", "/v1/sandboxes/"+id+"/files?path=notes.txt", key, nil); code != 404 {
		t.Errorf("the deleted file: status %d, want 404", code)
	}

	// The list shows the sandbox with its state, size and TTL.
	b.open("#/sandboxes")
	row := `#sandboxes tr[data-id="` + id + `"]`
	b.waitText(row, "running")
	b.waitText(row, "1 CPU · 512 MiB · 2 GiB disk")
	if ttl := b.eval(textOf(row + " .ttl")); !regexp.MustCompile(`\d+ (min|h)`).MatchString(ttl) {
		t.Errorf("TTL left: %q", ttl)
	}
	b.screenshot("list")

	// The usage page draws its charts.
	b.open("#/usage")
	b.wait("the charts", `document.querySelectorAll('#chart-cost svg rect.bar').length === 14 && !!document.querySelector('#chart-cpu svg')`)
	b.waitText("#usage-totals", "CPU-seconds")
	b.screenshot("usage")

	// Stop it from its page: the page says it is stopped and offers a
	// resume; deleted, its URL says it is gone. No blank page.
	b.open("#/sandboxes/" + id)
	b.click(`button[aria-label="Stop ` + id + `"]`)
	b.waitText("#sandbox-stopped", "stopped")
	b.screenshot("stopped")
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+id, key, nil, nil)
	b.open("#/sandboxes/" + id + "?x=1")
	b.waitText("#sandbox-missing", "expired")
	b.wait("the banner", bannerShows("not found"))
	b.screenshot("deleted")

	// A revoked key signs the user out, saying why.
	var keys struct {
		Keys []api.Key `json:"keys"`
	}
	ts.must(t, 200, "GET", "/v1/keys", key, nil, &keys)
	ts.must(t, 204, "DELETE", "/v1/keys/"+keys.Keys[0].ID, ts.Admin, nil, nil)
	b.open("#/sandboxes")
	b.wait("the sign-in page", `location.hash === '#/signin'`)
	b.wait("the banner", bannerShows("sign in again"))

	// Sign-out forgets the key.
	b.signIn(ts.teamKey(t, "ui"))
	b.click("#signout")
	b.wait("the sign-in page", `location.hash === '#/signin' && !sessionStorage.getItem('cove.session') && !localStorage.getItem('cove.session')`)
}

// TestUIBrowserChat runs an agent from the chat page against the fake
// model: the timeline fills in (a command and its output, a diff), an
// approval card is approved, the final answer and tokens show, a
// follow-up goes on in the same sandbox, and the run is in the list.
func TestUIBrowserChat(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"printf 'hello from the agent\\n'; printf '\\033[32mgreen\\033[0m\\n'; mkdir -p scratch"}`),
		fake.Custom("apply_patch", "*** Begin Patch\n*** Add File: notes.txt\n+one\n+two\n"+
			"*** Add File: chart.svg\n+"+`<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20"><rect width="40" height="20" fill="teal"/></svg>`+"\n"+
			"*** Add File: data.csv\n+city,people\n+\"Paris, FR\",2100000\n*** End Patch"),
		fake.Call("exec_command", `{"cmd":"rm -rf scratch"}`),
		fake.Text("All done: notes.txt has two lines.").WithUsage(fake.Usage{InputTokens: 1200, OutputTokens: 34}),
		fake.Text("Second answer, same workspace."),
	)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}})
	key := ts.teamKey(t, "chat")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)

	b.open("#/chat?sandbox=" + sb.ID)
	b.wait("the workspace picked", `document.querySelector('#workspace').value === `+js(sb.ID))
	b.fill("#task", "Write notes.txt with two lines and clean up scratch.")
	b.click("#start-run")
	b.wait("the run's page", `location.hash.startsWith('#/runs/') && !!document.querySelector('#timeline')`)
	runID := strings.TrimPrefix(b.eval(`location.hash`), "#/runs/")

	// The timeline: the task, the command with its output and exit code,
	// the patch as a diff, then the risky command waits for approval.
	b.waitText("#timeline .msg.user", "Write notes.txt")
	b.waitText("#timeline .event.call .out", "hello from the agent")
	b.waitText("#timeline .event.call .out .ansi-fg-2", "green")
	b.waitText("#timeline .event.call .status", "exit 0")
	b.waitText(`#timeline .event.change[data-path$="notes.txt"] .diff .add`, "+one")
	b.waitText("#timeline .event.approval", "rm -rf scratch")
	b.waitText("#run-status", "waiting")
	b.screenshot("approval")
	if b.eval(`document.querySelector('#send-followup').disabled`) != "true" {
		t.Error("the follow-up box is open while the run waits")
	}
	b.click("#timeline .event.approval button.approve")

	// Approved: the command runs, the answer comes, tokens and cost show.
	b.waitText("#timeline .event.final .answer", "All done: notes.txt has two lines.")
	b.waitText("#run-status", "idle")
	b.waitText("#timeline .event.approval", "Approved")
	b.wait("the decided card's buttons gone", `document.querySelector('#timeline .event.approval button.approve').offsetParent === null`)
	var run api.Run
	ts.must(t, 200, "GET", "/v1/runs/"+runID, key, nil, &run)
	if run.Status != api.RunIdle || run.SandboxID != sb.ID || run.Usage.InputTokens == 0 || run.CostUSD == nil {
		t.Fatalf("the run: %+v", run)
	}
	tokens := thousands(run.Usage.InputTokens)
	b.waitText("#timeline .event.final .tokens", tokens+" tokens in")
	b.wait("the tokens in the header", textOf("#run-tokens")+`.includes(`+js(tokens+" in")+`)`)
	b.wait("the cost", `/\$0\.\d/.test(`+textOf("#run-cost")+`)`)
	if n := b.eval(`document.querySelectorAll('#timeline .event.call').length`); n != "3" {
		t.Errorf("%s command cards, want 3 (2 commands and the patch)", n)
	}

	// The artifacts: the SVG shown inline, the CSV as a table.
	b.wait("the image artifact", `(() => { const i = document.querySelector('#artifacts img'); return !!i && i.complete && i.naturalWidth === 40; })()`)
	b.waitText("#artifacts table.csv", "Paris, FR")
	b.screenshot("answer")

	// A follow-up in the same sandbox.
	b.fill("#followup", "Anything else?")
	b.click("#send-followup")
	b.waitText("#timeline", "Second answer, same workspace.")
	b.wait("a second final answer", `document.querySelectorAll('#timeline .event.final').length === 2`)
	b.waitText("#run-status", "idle")

	// Reopened, the page replays the whole run once: nothing twice.
	b.open("#/chat")
	b.waitText("#runs", runID)
	b.click(`#runs a[href="#/runs/` + runID + `"]`)
	b.wait("the replayed run", `document.querySelectorAll('#timeline .event.final').length === 2`)
	if n := b.eval(`document.querySelectorAll('#timeline .msg.user').length`); n != "2" {
		t.Errorf("%s user messages after a replay, want 2", n)
	}
	b.screenshot("replayed")

	// An unknown run by URL: a clear message.
	b.open("#/runs/run_nosuch")
	b.waitText("#run-missing", "no run run_nosuch")
}

// TestUIBrowserServerRestart: the server restarts while a run works; the
// page says it lost the connection, reconnects by itself and shows the
// rest of the run without repeating what it showed.
func TestUIBrowserServerRestart(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"echo before; sleep 5; echo after"}`),
		fake.Text("finished after the restart").Forever(),
	)
	ts := newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-test", DefaultModel: "gpt-5.1"}})
	key := ts.teamKey(t, "restart")
	sb := ts.create(t, key, api.CreateSandbox{})
	b := newBrowser(t, ts.URL)
	b.signIn(key)
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "sleep a while", SandboxID: sb.ID, Agent: api.RunAgent{Approval: "never"}}, &run)
	b.open("#/runs/" + run.ID)
	b.waitText("#timeline .event.call .out", "before")

	// Down: the page says so and keeps trying.
	addr := strings.TrimPrefix(ts.URL, "http://")
	ts.stop()
	b.wait("the lost connection shown", bannerShows("lost the connection to the server"))
	b.screenshot("server-down")

	// Back on the same address: the page reconnects and the run ends
	// (resumed from its last turn, or failed with the reason).
	ts.startAgain(t, addr)
	b.waitText("#notice", "Reconnected")
	b.wait("the banner cleared", `document.getElementById('banner').hidden`)
	b.waitFor("the run to end after the restart", `['idle', 'failed'].includes(`+textOf("#run-status")+`)`, 60*time.Second)
	b.waitText("#timeline", "restarted")
	if n := b.eval(`document.querySelectorAll('#timeline .msg.user').length`); n != "1" {
		t.Errorf("%s user messages after reconnecting, want 1 (nothing shown twice)", n)
	}
	b.screenshot("after-restart")
}

// thousands writes n as the page does in English: 12,345.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestUIBrowserSettings: a team sets its model key from the browser; the
// page lists it by name and never shows the value again; it can be
// deleted.
func TestUIBrowserSettings(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "settings")
	b := newBrowser(t, ts.URL)
	b.signIn(key)
	b.open("#/settings")
	b.waitText("h1", "Settings")
	b.wait("the empty list", `!document.querySelector('#secrets-empty').hidden`)
	b.fill("#secret-value", "sk-from-the-browser")
	b.click("#secret-save")
	b.waitText("#secrets", "OPENAI_API_KEY")
	if v, err := ts.runs.Secret(context.Background(), "settings", "OPENAI_API_KEY"); err != nil || v != "sk-from-the-browser" {
		t.Fatalf("the secret on the server: %q %v", v, err)
	}
	if got := b.eval(`String(document.body.innerText.includes('sk-from-the-browser') || document.querySelector('#secret-value').value !== '')`); got != "false" {
		t.Error("the page still shows the secret's value after saving")
	}
	b.screenshot("secret-set")
	b.click(`button[aria-label="Delete OPENAI_API_KEY"]`)
	b.click(`button[aria-label="Delete OPENAI_API_KEY"]`) // confirm
	b.wait("the secret gone", `!document.querySelector('#secrets-empty').hidden && !document.querySelector('#secrets').textContent.includes('OPENAI_API_KEY')`)
	if _, err := ts.runs.Secret(context.Background(), "settings", "OPENAI_API_KEY"); err == nil {
		t.Error("the secret is still on the server after delete")
	}
}
