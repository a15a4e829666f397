package server

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/runs"
)

// sseEvent is one event of a run's log as a client reads it.
type sseEvent struct {
	ID   int64
	Type string
	Data map[string]any
}

func (e sseEvent) str(k string) string { s, _ := e.Data[k].(string); return s }

// readEvents reads GET /v1/runs/{id}/events from after lastID until the
// stream ends (the run stopped working) or ctx ends.
func (ts *testServer) readEvents(t *testing.T, key, runID string, lastID int64, query string) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/v1/runs/"+runID+"/events"+query, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("events: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Type != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.ID, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			cur.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &cur.Data); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() != nil {
		t.Fatalf("events stream did not end: %v", err)
	}
	return out
}

func ofType(evs []sseEvent, typ string) []sseEvent {
	var out []sseEvent
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func lastStatus(evs []sseEvent) string {
	st := ofType(evs, "run_status")
	if len(st) == 0 {
		return ""
	}
	return st[len(st)-1].str("status")
}

// webhookSink records webhook deliveries.
type webhookSink struct {
	*httptest.Server
	mu   sync.Mutex
	got  []webhookDelivery
	note chan struct{}
}

type webhookDelivery struct {
	sig  string
	body []byte
}

func newWebhookSink(t *testing.T) *webhookSink {
	ws := &webhookSink{note: make(chan struct{}, 100)}
	ws.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ws.mu.Lock()
		ws.got = append(ws.got, webhookDelivery{sig: r.Header.Get("Cove-Signature"), body: b})
		ws.mu.Unlock()
		ws.note <- struct{}{}
	}))
	t.Cleanup(ws.Close)
	return ws
}

// wait returns the delivery of the run's event (run.idle, ...).
func (ws *webhookSink) wait(t *testing.T, event string) webhookDelivery {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ws.mu.Lock()
		for _, d := range ws.got {
			var wh api.RunWebhook
			if json.Unmarshal(d.body, &wh) == nil && wh.Event == event {
				ws.mu.Unlock()
				return d
			}
		}
		ws.mu.Unlock()
		select {
		case <-ws.note:
		case <-deadline:
			t.Fatalf("no %s webhook", event)
		}
	}
}

// runServer is a server whose model is model; the tests' other models
// and webhook receivers listen on loopback, which the operator allows.
func runServer(t *testing.T, model *fake.Server) *testServer {
	return newTestServer(t, Config{Model: ModelConfig{BaseURL: model.URL, APIKey: "sk-server", DefaultModel: "test-model"}, OutboundAllow: []string{"127.0.0.1"}})
}

const runPatch = `*** Begin Patch
*** Update File: notes.txt
@@
 one
-two
+three
*** End Patch`

// TestRunAPI: a run with a command, a patch and an approval, followed by
// SSE from the start and from a given event id, a signed webhook, a
// follow-up in the same sandbox.
func TestRunAPI(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"cat notes.txt"}`),
		fake.Custom("apply_patch", runPatch),
		fake.Call("exec_command", `{"cmd":"rm -rf old.txt"}`),
		fake.Text("Changed two to three and removed old.txt."),
	)
	ts := runServer(t, model)
	key := ts.teamKey(t, "alpha")
	hook := newWebhookSink(t)

	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, map[string]any{
		"agent":       map[string]any{"instructions": "Be brief."},
		"input":       "Fix the notes and remove old.txt",
		"manifest":    map[string]any{"entries": map[string]any{"notes.txt": map[string]any{"type": "file", "content": "one\ntwo\n"}, "old.txt": map[string]any{"type": "file", "content": "x"}}},
		"webhook_url": hook.URL,
	}, &run)
	if run.Status != api.RunRunning || run.SandboxID == "" || run.WebhookSecret == "" || run.Messages != 1 {
		t.Fatalf("created run = %+v", run)
	}

	evs := ts.readEvents(t, key, run.ID, 0, "")
	for i, e := range evs {
		if e.ID != int64(i+1) {
			t.Fatalf("event %d has id %d: ids must count from 1 without gaps", i, e.ID)
		}
	}
	if evs[0].Type != "user_message" || evs[0].str("text") != "Fix the notes and remove old.txt" {
		t.Errorf("first event = %+v, want the input", evs[0])
	}
	if got := lastStatus(evs); got != api.RunWaiting {
		t.Fatalf("status after the first segment = %q, want waiting; events %v", got, evs)
	}
	started := ofType(evs, "tool_call_started")
	if len(started) < 1 || started[0].str("command") != "cat notes.txt" {
		t.Errorf("tool_call_started = %+v, want the command", started)
	}
	var out strings.Builder
	for _, e := range ofType(evs, "output") {
		out.WriteString(e.str("data"))
	}
	if !strings.Contains(out.String(), "two") {
		t.Errorf("streamed output = %q, want the file's content", out.String())
	}
	changed := ofType(evs, "file_changed")
	if len(changed) != 1 || !strings.Contains(changed[0].str("path"), "notes.txt") || !strings.Contains(changed[0].str("diff"), "+three") {
		t.Errorf("file_changed = %+v, want notes.txt with its diff", changed)
	}
	appr := ofType(evs, "approval_requested")
	if len(appr) != 1 {
		t.Fatalf("approval_requested = %+v", appr)
	}
	callID := appr[0].str("call_id")

	ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Status != api.RunWaiting || len(run.Approvals) != 1 || run.Approvals[0].Command != "rm -rf old.txt" || run.Approvals[0].Reason == "" {
		t.Fatalf("waiting run = %+v", run)
	}
	if run.Usage.Requests != 3 || run.LastEventID != evs[len(evs)-1].ID {
		t.Errorf("usage %+v, last event %d; want 3 requests and the log's last id %d", run.Usage, run.LastEventID, evs[len(evs)-1].ID)
	}

	// The webhook heard that it waits, signed with the run's secret.
	d := hook.wait(t, "run.waiting")
	if err := runs.VerifyWebhook(run.WebhookSecret, d.sig, d.body, time.Now(), 5*time.Minute); err != nil {
		t.Errorf("webhook signature: %v", err)
	}
	if runs.VerifyWebhook("another secret", d.sig, d.body, time.Now(), 5*time.Minute) == nil {
		t.Error("the signature verifies under another secret")
	}

	// Bad decisions change nothing.
	for _, body := range []string{
		`{"decisions":[{"call_id":"nope","decision":"approve"}]}`,
		`{"decisions":[{"call_id":"` + callID + `","decision":"maybe"}]}`,
		`{"all":"sure"}`,
		`{"decisions":[{"call_id":"` + callID + `","decision":"approve"}],"extra":1}`,
	} {
		if code, b := ts.call(t, "POST", "/v1/runs/"+run.ID+"/approvals", key, body); code != 400 {
			t.Errorf("approvals %s: %d %s, want 400", body, code, b)
		}
	}
	if code, _ := ts.call(t, "POST", "/v1/runs/"+run.ID+"/messages", key, `{"input":"hurry"}`); code != 409 {
		t.Errorf("a message while approvals wait: %d, want 409", code)
	}

	last := evs[len(evs)-1].ID
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/approvals", key, api.RunDecisions{Decisions: []api.RunDecision{{CallID: callID, Decision: "approve"}}}, &run)
	if run.Status != api.RunRunning {
		t.Errorf("after approval: %s", run.Status)
	}
	// Reconnecting from the last id seen gets what came after, nothing
	// twice.
	more := ts.readEvents(t, key, run.ID, last, "")
	if len(more) == 0 || more[0].ID != last+1 {
		t.Fatalf("events after %d start at %+v", last, more)
	}
	if got := lastStatus(more); got != api.RunIdle {
		t.Fatalf("status after approval = %q", got)
	}
	fin := ofType(more, "tool_call_finished")
	if len(fin) != 1 || fin[0].Data["exit_code"] != float64(0) {
		t.Errorf("approved command finished = %+v", fin)
	}
	ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Output != "Changed two to three and removed old.txt." || run.FinishedAt == nil || run.CostUSD != nil && *run.CostUSD < 0 {
		t.Errorf("finished run = %+v", run)
	}
	// The work is in the sandbox.
	if code, b := ts.call(t, "GET", "/v1/sandboxes/"+run.SandboxID+"/files?path=/workspace/notes.txt", key, nil); code != 200 || string(b) != "one\nthree\n" {
		t.Errorf("notes.txt = %d %q", code, b)
	}
	if code, _ := ts.call(t, "GET", "/v1/sandboxes/"+run.SandboxID+"/files?path=/workspace/old.txt", key, nil); code != 404 {
		t.Errorf("old.txt after the approved rm: %d", code)
	}
	d = hook.wait(t, "run.idle")
	var wh api.RunWebhook
	json.Unmarshal(d.body, &wh)
	if wh.Run.Output != run.Output {
		t.Errorf("webhook run = %+v", wh.Run)
	}

	// A follow-up goes on in the same sandbox with the conversation.
	model.Add(fake.Func(func(r *fake.Request) fake.Turn {
		if out, ok := r.ToolOutput(callID); !ok || strings.Contains(out, "rejected") {
			return fake.Text("lost the conversation")
		}
		return fake.Text("Nothing else to do.")
	}))
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/messages", key, api.RunMessage{Input: "Anything else?"}, &run)
	third := ts.readEvents(t, key, run.ID, more[len(more)-1].ID, "")
	if len(third) == 0 || third[0].Type != "user_message" || lastStatus(third) != api.RunIdle {
		t.Fatalf("follow-up events = %+v", third)
	}
	ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Output != "Nothing else to do." || run.Messages != 2 || run.Usage.Requests != 5 {
		t.Errorf("after the follow-up: %+v", run)
	}

	// The whole log replays from the start, continuous.
	all := ts.readEvents(t, key, run.ID, 0, "")
	if int64(len(all)) != run.LastEventID || all[len(all)-1].ID != run.LastEventID {
		t.Errorf("replay has %d events, last %d; run says %d", len(all), all[len(all)-1].ID, run.LastEventID)
	}
	for _, r := range model.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer sk-server" {
			t.Errorf("the server's model got Authorization %q", got)
		}
	}

	// Other teams see nothing of it; listing shows it.
	other := ts.teamKey(t, "beta")
	for _, p := range []string{"/v1/runs/" + run.ID, "/v1/runs/" + run.ID + "/events"} {
		if code, _ := ts.call(t, "GET", p, other, nil); code != 404 {
			t.Errorf("GET %s by another team: %d", p, code)
		}
	}
	for _, p := range []string{"/approvals", "/messages", "/cancel"} {
		if code, _ := ts.call(t, "POST", "/v1/runs/"+run.ID+p, other, `{"input":"x","all":"approve"}`); code != 404 && code != 400 {
			t.Errorf("POST %s by another team: %d", p, code)
		}
	}
	var list api.RunList
	ts.must(t, 200, "GET", "/v1/runs", other, nil, &list)
	if len(list.Runs) != 0 {
		t.Errorf("another team lists %d runs", len(list.Runs))
	}
	ts.must(t, 200, "GET", "/v1/runs", key, nil, &list)
	if len(list.Runs) != 1 || list.Runs[0].ID != run.ID || list.Runs[0].Status != api.RunIdle {
		t.Errorf("list = %+v", list)
	}

	// Deleted: the run and its log are gone, its sandbox stays.
	if code, _ := ts.call(t, "DELETE", "/v1/runs/"+run.ID, other, nil); code != 404 {
		t.Errorf("another team deleting the run: %d", code)
	}
	ts.must(t, 204, "DELETE", "/v1/runs/"+run.ID, key, nil, nil)
	for _, p := range []string{"/v1/runs/" + run.ID, "/v1/runs/" + run.ID + "/events"} {
		if code, _ := ts.call(t, "GET", p, key, nil); code != 404 {
			t.Errorf("GET %s after delete: %d", p, code)
		}
	}
	if st := ts.state(t, key, run.SandboxID); st != "running" {
		t.Errorf("the run's sandbox after the run was deleted: %s", st)
	}
}

// TestRunBadInput: every malformed create is a 400 that says what to fix,
// and makes nothing.
func TestRunBadInput(t *testing.T) {
	model := fake.NewServer(t)
	ts := runServer(t, model)
	key := ts.teamKey(t, "alpha")
	other := ts.teamKey(t, "beta")
	sb := ts.create(t, other, api.CreateSandbox{})
	for _, tc := range []struct {
		name, body, want string
		code             int
	}{
		{"empty input", `{"input":"  "}`, "input is empty", 400},
		{"malformed", `{"input":`, "malformed JSON", 400},
		{"unknown field", `{"input":"x","agnet":{}}`, "unknown field", 400},
		{"wrong type", `{"input":3}`, "must be string", 400},
		{"approval", `{"input":"x","agent":{"approval":"sometimes"}}`, "never, risky or all", 400},
		{"capability", `{"input":"x","agent":{"capabilities":["browser"]}}`, "not one", 400},
		{"max turns", `{"input":"x","agent":{"max_turns":-1}}`, "max_turns", 400},
		{"missing secret", `{"input":"x","agent":{"api_key_secret":"MY_KEY"}}`, "set it with PUT /v1/secrets/MY_KEY", 400},
		{"base url", `{"input":"x","agent":{"base_url":"ftp://x"}}`, "not an http(s) URL", 400},
		{"webhook", `{"input":"x","webhook_url":"file:///etc/passwd"}`, "webhook_url", 400},
		{"two workspaces", `{"input":"x","sandbox_id":"sb","manifest":{"entries":{}}}`, "leave out", 400},
		{"another team's sandbox", `{"input":"x","sandbox_id":"` + sb.ID + `"}`, "not found", 404},
		{"bad manifest", `{"input":"x","manifest":{"entries":{"../x":{"type":"file","content":"x"}}}}`, "manifest", 400},
	} {
		code, b := ts.call(t, "POST", "/v1/runs", key, tc.body)
		if code != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, code, b, tc.code, tc.want)
		}
	}
	// The "run" part of a multipart create is read as strictly as a JSON
	// body, and says what is wrong the same way.
	for _, tc := range []struct{ name, part, want string }{
		{"multipart unknown field", `{"input":"x","agnet":{}}`, "see /openapi.json"},
		{"multipart trailing data", `{"input":"x"} {"input":"y"}`, "data after the JSON object"},
		{"multipart wrong type", `{"input":3}`, "must be string"},
	} {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		fw, _ := mw.CreateFormField("run")
		fw.Write([]byte(tc.part))
		mw.Close()
		req, _ := http.NewRequest("POST", ts.URL+"/v1/runs", &body)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, resp.StatusCode, b, tc.want)
		}
	}
	var list api.RunList
	ts.must(t, 200, "GET", "/v1/runs", key, nil, &list)
	var sbs api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &sbs)
	if len(list.Runs) != 0 || len(sbs.Sandboxes) != 0 || len(model.Requests()) != 0 {
		t.Errorf("bad creates left %d runs, %d sandboxes, %d model calls", len(list.Runs), len(sbs.Sandboxes), len(model.Requests()))
	}
	for _, q := range []string{"?after=x", "?after=-1"} {
		if code, _ := ts.call(t, "GET", "/v1/runs/run_nope/events"+q, key, nil); code != 400 && code != 404 {
			t.Errorf("events%s: %d", q, code)
		}
	}
	if code, _ := ts.call(t, "GET", "/v1/runs?status=done", key, nil); code != 400 {
		t.Errorf("listing by an unknown status: %d", code)
	}
	if code, _ := ts.call(t, "GET", "/v1/runs/run_nope", key, nil); code != 404 {
		t.Errorf("unknown run: %d", code)
	}
}

// TestRunKeysAndWorkspaceTar: the server's model key goes only to its own
// endpoint; a team's secret goes to the team's; a workspace comes as a
// tar in a multipart create; a flood of output is bounded in the log.
func TestRunKeysAndWorkspaceTar(t *testing.T) {
	own := fake.NewServer(t)
	ts := runServer(t, own)
	key := ts.teamKey(t, "alpha")
	theirs := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"cat data.csv; head -c 3000000 /dev/zero | tr '\\0' x"}`),
		fake.Text("read it"),
		fake.Text("second"),
	)

	var tarBuf bytes.Buffer
	tw := tar.NewWriter(&tarBuf)
	content := "a,b\n1,2\n"
	tw.WriteHeader(&tar.Header{Name: "data.csv", Mode: 0o644, Size: int64(len(content))})
	tw.Write([]byte(content))
	tw.Close()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormField("run")
	json.NewEncoder(fw).Encode(api.CreateRun{Agent: api.RunAgent{BaseURL: theirs.URL, Model: "their-model", Approval: "never"}, Input: "read data.csv"})
	pw, _ := mw.CreateFormFile("workspace", "ws.tar")
	pw.Write(tarBuf.Bytes())
	mw.Close()
	req, _ := http.NewRequest("POST", ts.URL+"/v1/runs", &body)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var run api.Run
	json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("multipart create: %d %+v", resp.StatusCode, run)
	}
	evs := ts.readEvents(t, key, run.ID, 0, "")
	if lastStatus(evs) != api.RunIdle {
		t.Fatalf("status %q: %+v", lastStatus(evs), ofType(evs, "run_status"))
	}
	var out strings.Builder
	for _, e := range ofType(evs, "output") {
		out.WriteString(e.str("data"))
	}
	if !strings.Contains(out.String(), "a,b\n1,2") {
		t.Errorf("output does not show the tar's file: %.200q", out.String())
	}
	// The harness shows a flood's head and tail; the log keeps at most
	// runs.OutputCap of a call's output whatever a tool emits.
	if n := out.Len(); n > runs.OutputCap+1024 || !strings.Contains(out.String(), "not shown") {
		t.Errorf("logged output is %d bytes; want at most about %d with a note", n, runs.OutputCap)
	}
	if got := theirs.Requests()[0].Header.Get("Authorization"); strings.Contains(got, "sk-server") {
		t.Fatalf("the server's key went to a tenant's endpoint: %q", got)
	}

	// With a team secret, the team's key goes to the team's endpoint.
	ts.must(t, 200, "PUT", "/v1/secrets/OPENAI_API_KEY", key, api.SetSecret{Value: "sk-team"}, nil)
	var secs api.SecretList
	ts.must(t, 200, "GET", "/v1/secrets", key, nil, &secs)
	if len(secs.Secrets) != 1 || secs.Secrets[0].Name != "OPENAI_API_KEY" {
		t.Errorf("secrets = %+v", secs)
	}
	if code, b := ts.call(t, "GET", "/v1/secrets", key, nil); bytes.Contains(b, []byte("sk-team")) {
		t.Errorf("the secret's value is listed: %d %s", code, b)
	}
	if code, _ := ts.call(t, "PUT", "/v1/secrets/bad-name", key, `{"value":"x"}`); code != 400 {
		t.Errorf("bad secret name: %d", code)
	}
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/messages", key, api.RunMessage{Input: "again"}, nil)
	if evs := ts.readEvents(t, key, run.ID, run.LastEventID, ""); lastStatus(evs) != api.RunIdle {
		t.Fatalf("follow-up: %+v", ofType(evs, "run_status"))
	}
	reqs := theirs.Requests()
	if got := reqs[len(reqs)-1].Header.Get("Authorization"); got != "Bearer sk-team" {
		t.Errorf("with a team secret, the team's endpoint got %q", got)
	}
	// The secret is the team's alone.
	if code, _ := ts.call(t, "DELETE", "/v1/secrets/OPENAI_API_KEY", ts.teamKey(t, "beta"), nil); code != 404 {
		t.Errorf("another team deleting the secret: %d", code)
	}
	if len(own.Requests()) != 0 {
		t.Errorf("the server's own endpoint was called %d times", len(own.Requests()))
	}
}

// TestRunCancelAndContinue: cancelling a working run stops its command;
// a message afterwards goes on in the same sandbox.
func TestRunCancelAndContinue(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"echo started; sleep 60","yield_time_ms":60000}`),
		fake.Text("picked up"),
	)
	ts := runServer(t, model)
	key := ts.teamKey(t, "alpha")
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "wait a minute", Agent: api.RunAgent{Approval: "never"}}, &run)
	// Wait for the command's output, then cancel.
	deadline := time.Now().Add(time.Minute)
	for {
		if hasOutput(t, ts, run.ID, "started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, b := ts.call(t, "DELETE", "/v1/runs/"+run.ID, key, nil); code != 409 || !strings.Contains(string(b), "cancel it first") {
		t.Errorf("deleting a working run: %d %s", code, b)
	}
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/cancel", key, nil, &run)
	if run.Status != api.RunCancelled || !strings.Contains(run.Error, "cancelled") {
		t.Fatalf("after cancel: %+v", run)
	}
	if code, _ := ts.call(t, "POST", "/v1/runs/"+run.ID+"/cancel", key, nil); code != 409 {
		t.Errorf("cancelling a cancelled run: %d", code)
	}
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/messages", key, api.RunMessage{Input: "go on"}, nil)
	evs := ts.readEvents(t, key, run.ID, 0, "")
	if lastStatus(evs) != api.RunIdle {
		t.Fatalf("after the follow-up: %+v", ofType(evs, "run_status"))
	}
	ts.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Output != "picked up" {
		t.Errorf("output = %q", run.Output)
	}
	// The cancelled call was answered for the model, so the conversation
	// stays valid.
	reqs := model.Requests()
	callID := ofType(evs, "tool_call_started")[0].str("call_id")
	if out, ok := reqs[len(reqs)-1].ToolOutput(callID); !ok || !strings.Contains(out, "not run") && !strings.Contains(out, "started") {
		t.Errorf("the cancelled call's output for the model = %q, %v", out, ok)
	}
}

// hasOutput reports whether the run's log has output containing want
// yet (a stream would not end while the run works).
func hasOutput(t *testing.T, ts *testServer, runID, want string) bool {
	feed, err := ts.runs.Events(context.Background(), "", runID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	for {
		b, err := feed.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(b.Events) == 0 {
			return false
		}
		for _, e := range b.Events {
			if e.Type == "output" && bytes.Contains(e.Data, []byte(want)) {
				return true
			}
		}
	}
}

// TestRunSurvivesRestart: a server stopped while its run waits on the
// model goes on with the run when it starts again, from the last turn.
func TestRunSurvivesRestart(t *testing.T) {
	model := fake.NewServer(t,
		fake.Call("exec_command", `{"cmd":"echo one > one.txt"}`),
		fake.Text("too late").WithDelay(30*time.Second),
		fake.Text("finished after the restart"),
	)
	ts := runServer(t, model)
	key := ts.teamKey(t, "alpha")
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "write one", Agent: api.RunAgent{Approval: "never"}}, &run)
	deadline := time.Now().Add(time.Minute)
	for len(model.Requests()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the second model call never came")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts2 := ts.restart(t)
	evs := ts2.readEvents(t, key, run.ID, 0, "")
	if lastStatus(evs) != api.RunIdle {
		t.Fatalf("after the restart: %+v", ofType(evs, "run_status"))
	}
	var restarted bool
	for _, e := range ofType(evs, "run_status") {
		if strings.Contains(e.str("text"), "server restarted") {
			restarted = true
		}
	}
	if !restarted {
		t.Error("the log does not say the run went on after a restart")
	}
	for i, e := range evs {
		if e.ID != int64(i+1) {
			t.Fatalf("event %d has id %d after the restart", i, e.ID)
		}
	}
	ts2.must(t, 200, "GET", "/v1/runs/"+run.ID, key, nil, &run)
	if run.Output != "finished after the restart" {
		t.Errorf("output = %q", run.Output)
	}
	if code, b := ts2.call(t, "GET", "/v1/sandboxes/"+run.SandboxID+"/files?path=/workspace/one.txt", key, nil); code != 200 || string(b) != "one\n" {
		t.Errorf("one.txt = %d %q", code, b)
	}
	if n := len(model.Requests()); n != 3 {
		t.Errorf("%d model calls, want 3 (the interrupted one asked again)", n)
	}
}

// TestRunEventsAfterLostOnes: a crash can lose the events emitted after
// the last flush while the run's record already counts them. A stream
// sends what the store has and ends; the run's next events follow the
// lost ones.
func TestRunEventsAfterLostOnes(t *testing.T) {
	model := fake.NewServer(t, fake.Text("first"), fake.Text("second"))
	ts := runServer(t, model)
	key := ts.teamKey(t, "alpha")
	var run api.Run
	ts.must(t, 201, "POST", "/v1/runs", key, api.CreateRun{Input: "go", Agent: api.RunAgent{Approval: "never"}}, &run)
	evs := ts.readEvents(t, key, run.ID, 0, "")
	if lastStatus(evs) != api.RunIdle {
		t.Fatalf("first segment: %+v", ofType(evs, "run_status"))
	}
	last := evs[len(evs)-1].ID
	ts = ts.restart(t)
	rec, err := ts.cfg.Store.GetRun(context.Background(), "", run.ID)
	if err != nil {
		t.Fatal(err)
	}
	rec.LastEventID += 2 // two events the crash lost
	if err := ts.cfg.Store.PutRun(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	if got := ts.readEvents(t, key, run.ID, 0, ""); len(got) != len(evs) {
		t.Fatalf("replay after the lost events: %d events, want the %d stored", len(got), len(evs))
	}
	ts.must(t, 200, "POST", "/v1/runs/"+run.ID+"/messages", key, api.RunMessage{Input: "again"}, &run)
	more := ts.readEvents(t, key, run.ID, last, "")
	if len(more) == 0 || more[0].ID != last+3 || lastStatus(more) != api.RunIdle {
		t.Fatalf("events after the lost ones: %+v, want ids from %d to an idle run", more, last+3)
	}
}
