package server

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// stream is an open NDJSON response of exec or attach.
type stream struct {
	resp *http.Response
	dec  *json.Decoder
}

// openStream POSTs body (nil for none) to path and checks for a 200
// NDJSON response.
func (ts *testServer) openStream(t *testing.T, ctx context.Context, path, key string, body any) *stream {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: status %d: %s", path, resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("POST %s: Content-Type %q, want application/x-ndjson", path, ct)
	}
	return &stream{resp: resp, dec: json.NewDecoder(resp.Body)}
}

// next returns the next event, or false at the end of the stream.
func (s *stream) next(t *testing.T) (api.ExecEvent, bool) {
	t.Helper()
	var ev api.ExecEvent
	if err := s.dec.Decode(&ev); err != nil {
		if err != io.EOF {
			t.Fatalf("reading the stream: %v", err)
		}
		return ev, false
	}
	return ev, true
}

// result is a whole exec or attach stream.
type result struct {
	pid            int
	stdout, stderr string
	exit           api.ExecEvent
	types          []string
}

// rest reads the stream to its end.
func (s *stream) rest(t *testing.T) result {
	t.Helper()
	var r result
	var out, errb strings.Builder
	for {
		ev, ok := s.next(t)
		if !ok {
			break
		}
		r.types = append(r.types, ev.Type)
		switch ev.Type {
		case "start":
			r.pid = ev.PID
		case "stdout":
			out.Write(ev.Data)
		case "stderr":
			errb.Write(ev.Data)
		case "exit", "error":
			r.exit = ev
		}
	}
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

// run execs req to the end.
func (ts *testServer) run(t *testing.T, key, id string, req api.Exec) result {
	t.Helper()
	return ts.openStream(t, context.Background(), "/v1/sandboxes/"+id+"/exec", key, req).rest(t)
}

func exitCode(ev api.ExecEvent) int {
	if ev.ExitCode == nil {
		return -1000
	}
	return *ev.ExitCode
}

func TestExec(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})

	t.Run("output and exit code", func(t *testing.T) {
		r := ts.run(t, key, sb.ID, api.Exec{Cmd: "printf out; printf err >&2; exit 3", Shell: true})
		if r.types[0] != "start" || r.pid <= 0 || r.types[len(r.types)-1] != "exit" {
			t.Errorf("events %v (pid %d): want start with a pid first and exit last", r.types, r.pid)
		}
		if r.stdout != "out" || r.stderr != "err" || exitCode(r.exit) != 3 {
			t.Errorf("got stdout %q stderr %q exit %+v, want out, err, 3", r.stdout, r.stderr, r.exit)
		}
	})
	t.Run("args dir env and stdin", func(t *testing.T) {
		r := ts.run(t, key, sb.ID, api.Exec{Cmd: "sh", Args: []string{"-c", `cat; echo " $X $(pwd)"`}, Env: map[string]string{"X": "y"}, Dir: "/workspace", Stdin: []byte("hello")})
		if r.stdout != "hello y /workspace\n" || exitCode(r.exit) != 0 {
			t.Errorf("got %q exit %+v, want %q", r.stdout, r.exit, "hello y /workspace\n")
		}
	})
	t.Run("no stdin reads EOF", func(t *testing.T) {
		r := ts.run(t, key, sb.ID, api.Exec{Cmd: "cat"})
		if r.stdout != "" || exitCode(r.exit) != 0 {
			t.Errorf("got %q exit %+v", r.stdout, r.exit)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		r := ts.run(t, key, sb.ID, api.Exec{Cmd: "sleep 30", Shell: true, TimeoutSeconds: 1})
		if !r.exit.TimedOut || r.exit.Signal == "" || time.Since(start) > 10*time.Second {
			t.Errorf("exit %+v after %v: want a kill with timed_out after about 1s", r.exit, time.Since(start))
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		for _, tc := range []struct {
			body any
			want int
		}{
			{api.Exec{}, 400},
			{api.Exec{Cmd: "no-such-program-here"}, 404},
			{api.Exec{Cmd: "true", TimeoutSeconds: -1}, 400},
			{api.Exec{Cmd: "true", Dir: "../.."}, 400},
			{`{"cmd":"true","bogus":1}`, 400},
		} {
			code, data := ts.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/exec", key, tc.body)
			if code != tc.want {
				t.Errorf("%+v: status %d, want %d: %s", tc.body, code, tc.want, data)
			}
		}
	})
}

func TestBackgroundProcesses(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	base := "/v1/sandboxes/" + sb.ID

	// The first line comes at once, before the client could attach: it
	// must wait for the attach, not go to the start stream.
	r := ts.run(t, key, sb.ID, api.Exec{Cmd: `echo ready; read line; echo "got $line"; sleep 60`, Shell: true, Tag: "svc", Background: true})
	if !slices.Equal(r.types, []string{"start"}) || r.pid <= 0 {
		t.Fatalf("background exec: events %v, want only start with a pid", r.types)
	}
	var list api.ProcessList
	ts.must(t, 200, "GET", base+"/processes", key, nil, &list)
	if !slices.ContainsFunc(list.Processes, func(p api.Process) bool { return p.PID == r.pid && p.Tag == "svc" }) {
		t.Errorf("processes %+v: want pid %d tagged svc", list.Processes, r.pid)
	}
	ts.must(t, 204, "POST", fmt.Sprintf("%s/processes/%d/stdin", base, r.pid), key, "x\n", nil)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := ts.openStream(t, ctx, base+"/processes/tag/svc/attach", key, nil)
	var out strings.Builder
	for !strings.Contains(out.String(), "got x\n") {
		ev, ok := st.next(t)
		if !ok {
			t.Fatalf("stream ended before the output; got %q", out.String())
		}
		if ev.Type == "start" && ev.PID != r.pid {
			t.Errorf("attach start pid %d, want %d", ev.PID, r.pid)
		}
		out.Write(ev.Data)
	}
	if out.String() != "ready\ngot x\n" {
		t.Errorf("attached output %q, want %q", out.String(), "ready\ngot x\n")
	}
	ts.must(t, 204, "POST", base+"/processes/tag/svc/signal", key, api.Signal{Signal: "TERM"}, nil)
	end := st.rest(t)
	if end.exit.Type != "exit" || end.exit.Signal == "" {
		t.Errorf("after TERM: last event %+v, want an exit by signal", end.exit)
	}

	// stdin, then EOF, to a process nobody is attached to.
	r = ts.run(t, key, sb.ID, api.Exec{Cmd: "cat", Background: true})
	pidPath := fmt.Sprintf("%s/processes/%d", base, r.pid)
	ts.must(t, 204, "POST", pidPath+"/stdin", key, "abc", nil)
	ts.must(t, 204, "POST", pidPath+"/stdin/close", key, nil, nil)
	res := ts.openStream(t, context.Background(), pidPath+"/attach", key, nil).rest(t)
	if res.stdout != "abc" || exitCode(res.exit) != 0 {
		t.Errorf("cat: got %q exit %+v, want abc and 0", res.stdout, res.exit)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"POST", base + "/processes/999999/signal", api.Signal{Signal: "KILL"}, 404},
		{"POST", base + "/processes/tag/nope/attach", nil, 404},
		{"POST", base + "/processes/abc/signal", api.Signal{Signal: "KILL"}, 400},
		{"POST", base + "/processes/1/signal", api.Signal{Signal: "BOGUS"}, 400},
	} {
		if code, data := ts.call(t, tc.method, tc.path, key, tc.body); code != tc.want {
			t.Errorf("%s %s: status %d, want %d: %s", tc.method, tc.path, code, tc.want, data)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"TERM": 15, "sigkill": 9, " INT ": 2, "HUP": 1, "QUIT": 3, "USR1": 10, "usr2": 12, "9": 9} {
		got, err := parseSignal(in)
		if err != nil || int(got) != want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "STOPP", "0", "65", "-1"} {
		if _, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q): no error", in)
		}
	}
}

// A flood of output arrives whole, streamed through rather than gathered
// in the server's memory.
func TestExecFlood(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	const total = 50_000_000
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
		}
	}()
	st := ts.openStream(t, context.Background(), "/v1/sandboxes/"+sb.ID+"/exec", key, api.Exec{Cmd: fmt.Sprintf("yes | head -c %d", total), Shell: true})
	// Lines are read raw and only measured: decoding 67 MB of base64
	// under the race detector would take most of the test's time.
	br := bufio.NewReaderSize(st.resp.Body, 1<<20)
	n, lines := 0, 0
	var last string
	for {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			t.Fatalf("a line over 1 MiB")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		lines++
		data, ok := bytes.CutPrefix(line, []byte(`{"type":"stdout","data":"`))
		if !ok {
			last = string(line)
			continue
		}
		data = data[:bytes.IndexByte(data, '"')]
		if lines == 2 {
			b, err := base64.StdEncoding.DecodeString(string(data))
			if err != nil || !bytes.HasPrefix(b, []byte("y\ny\n")) {
				t.Errorf("first output %.20q %v", b, err)
			}
		}
		n += len(data) / 4 * 3
		n -= bytes.Count(data[max(0, len(data)-2):], []byte("="))
	}
	close(stop)
	<-sampled
	if n != total || last != `{"type":"exit","exit_code":0}`+"\n" {
		t.Errorf("got %d bytes in %d lines, last %q; want %d and exit 0", n, lines, last, total)
	}
	// Gathering the output would hold 50 MB at least.
	if p := peak.Load(); p > 40<<20 {
		t.Errorf("the heap reached %d MiB while streaming", p>>20)
	}
	t.Logf("%d lines, peak heap %d MiB", lines, peak.Load()>>20)
}

// A client that hangs up on a foreground exec kills its process.
func TestExecDisconnectKills(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	ctx, cancel := context.WithCancel(context.Background())
	st := ts.openStream(t, ctx, "/v1/sandboxes/"+sb.ID+"/exec", key, api.Exec{Cmd: "sleep", Args: []string{"300"}})
	ev, _ := st.next(t)
	if ev.Type != "start" || ev.PID <= 0 {
		t.Fatalf("first event %+v", ev)
	}
	running := func() bool {
		var list api.ProcessList
		ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID+"/processes", key, nil, &list)
		return slices.ContainsFunc(list.Processes, func(p api.Process) bool { return p.PID == ev.PID })
	}
	if !running() {
		t.Fatalf("pid %d is not listed while it runs", ev.PID)
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for running() {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still runs 10s after its client left", ev.PID)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPTY(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty?cmd=" + url.QueryEscape("/bin/sh") + "&cols=90&rows=30"

	if _, resp, err := websocket.Dial(ctx, u, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("dial without a key: %v %v, want a 401", resp, err)
	}
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()

	var screen strings.Builder
	// readUntil reads output until it holds want; it returns the exit
	// message if one comes first.
	readUntil := func(want string) {
		t.Helper()
		for !strings.Contains(screen.String(), want) {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %q: %v; screen so far %q", want, err, screen.String())
			}
			if typ != websocket.MessageBinary {
				t.Fatalf("waiting for %q: text message %s", want, data)
			}
			screen.Write(data)
		}
	}
	send := func(typ websocket.MessageType, s string) {
		t.Helper()
		if err := conn.Write(ctx, typ, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	send(websocket.MessageBinary, "stty size; echo h''i\n")
	readUntil("30 90")
	readUntil("hi\r\n")
	send(websocket.MessageText, `{"type":"resize","cols":100,"rows":40}`)
	send(websocket.MessageBinary, "stty size\n")
	readUntil("40 100")
	send(websocket.MessageBinary, "exit 7\n")
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("no exit message: %v", err)
		}
		if typ == websocket.MessageText {
			var m api.PTYMessage
			if err := json.Unmarshal(data, &m); err != nil || m.Type != "exit" || m.ExitCode == nil || *m.ExitCode != 7 {
				t.Errorf("exit message %s, want type exit with exit_code 7", data)
			}
			break
		}
	}
	_, _, err = conn.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after exit: %v, want a normal close", err)
	}
}

// A terminal's process ends when its client hangs up.
func TestPTYDisconnectKills(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty?cmd=" + url.QueryEscape("exec sleep 300")
	conn, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var list api.ProcessList
		ts.must(t, 200, "GET", "/v1/sandboxes/"+sb.ID+"/processes", key, nil, &list)
		return len(list.Processes)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d processes while the terminal is open, want 1", n)
	}
	conn.CloseNow()
	for count() != 0 {
		if ctx.Err() != nil {
			t.Fatal("the terminal's process outlived its client")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fileURL is the path of a files call on path.
func fileURL(id, op, p string) string {
	u := "/v1/sandboxes/" + id + "/files"
	if op != "" {
		u += "/" + op
	}
	return u + "?path=" + url.QueryEscape(p)
}

func TestFiles(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	id := sb.ID

	ts.must(t, 204, "PUT", fileURL(id, "", "a/b.txt")+"&mode=600", key, "data\x00bin", nil)
	if code, data := ts.call(t, "GET", fileURL(id, "", "a/b.txt"), key, nil); code != 200 || string(data) != "data\x00bin" {
		t.Errorf("read back: %d %q", code, data)
	}
	var fi api.FileInfo
	ts.must(t, 200, "GET", fileURL(id, "stat", "/workspace/a/b.txt"), key, nil, &fi)
	if fi.Type != "file" || fi.Size != 8 || fi.Mode != 0o600 || fi.Path != "/workspace/a/b.txt" || fi.Name != "b.txt" {
		t.Errorf("stat: %+v", fi)
	}
	ts.must(t, 204, "POST", fileURL(id, "mkdir", "d/e"), key, nil, nil)
	ts.must(t, 204, "POST", fileURL(id, "mkdir", "d/e"), key, nil, nil) // an existing directory is fine
	ts.must(t, 204, "POST", "/v1/sandboxes/"+id+"/files/move", key, api.Move{From: "a/b.txt", To: "d/e/c.txt"}, nil)
	var list api.FileList
	ts.must(t, 200, "GET", fileURL(id, "list", "d")+"&depth=2", key, nil, &list)
	var got []string
	for _, f := range list.Files {
		got = append(got, f.Path+":"+f.Type)
	}
	slices.Sort(got)
	if diff := cmp.Diff([]string{"/workspace/d/e/c.txt:file", "/workspace/d/e:dir"}, got); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	ts.must(t, 200, "GET", fileURL(id, "list", ""), key, nil, &list)
	if len(list.Files) != 2 {
		t.Errorf("list of the root: %+v, want a and d", list.Files)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		want         int
		says         string
	}{
		{"GET", fileURL(id, "", "a/b.txt"), nil, 404, ""},
		{"GET", fileURL(id, "", "d"), nil, 400, "files/list"},
		{"GET", fileURL(id, "", ""), nil, 400, "path"},
		{"GET", fileURL(id, "stat", "nope"), nil, 404, ""},
		{"PUT", fileURL(id, "", "x") + "&mode=999", "x", 400, "mode"},
		{"POST", fileURL(id, "mkdir", "d/e/c.txt"), nil, 409, ""},
		{"POST", "/v1/sandboxes/" + id + "/files/move", api.Move{From: "nope", To: "x"}, 404, ""},
		{"POST", "/v1/sandboxes/" + id + "/files/move", api.Move{From: "d"}, 400, ""},
		{"GET", fileURL(id, "list", "d") + "&depth=0", nil, 400, "depth"},
		{"DELETE", fileURL(id, "", "/workspace"), nil, 400, ""},
		{"DELETE", fileURL(id, "", "nope"), nil, 404, ""},
	} {
		code, data := ts.call(t, tc.method, tc.path, key, tc.body)
		if code != tc.want || !strings.Contains(string(data), tc.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.path, code, data, tc.want, tc.says)
		}
	}
	ts.must(t, 204, "DELETE", fileURL(id, "", "d"), key, nil, nil)
	if code, _ := ts.call(t, "GET", fileURL(id, "stat", "d/e/c.txt"), key, nil); code != 404 {
		t.Errorf("stat after delete: %d, want 404", code)
	}
}

// No files call reaches outside the workspace, and a refused call changes
// nothing.
func TestFilePathEscapes(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	id := sb.ID
	if r := ts.run(t, key, id, api.Exec{Cmd: "ln -s /etc out && ln -s .. up && mkdir -p /tmp/t && echo keep > /tmp/t/f", Shell: true}); exitCode(r.exit) != 0 {
		t.Fatalf("setup: %+v %s", r.exit, r.stderr)
	}
	escapes := []string{"../etc/passwd", "/etc/passwd", "/etc/shadow", "out/passwd", "up/etc/passwd", "/workspace/../tmp/t/f", "/tmp/t/f", "a\x00b"}
	type call struct{ method, op, path string }
	var calls []call
	for _, p := range escapes {
		for _, c := range []call{{"GET", "", p}, {"PUT", "", p}, {"DELETE", "", p}, {"GET", "stat", p}, {"GET", "list", p}, {"POST", "mkdir", p}} {
			calls = append(calls, c)
		}
	}
	// The link itself is inside the workspace; what is behind it is not.
	calls = append(calls, call{"GET", "", "out"}, call{"GET", "list", "out"}, call{"PUT", "", "out/pwned"}, call{"POST", "mkdir", "out/pwned"})
	for _, c := range calls {
		var body any
		if c.method == "PUT" {
			body = "pwned"
		}
		code, data := ts.call(t, c.method, fileURL(id, c.op, c.path), key, body)
		if code != 400 {
			t.Errorf("%s files/%s %q: %d %s, want 400", c.method, c.op, c.path, code, data)
		}
	}
	for _, m := range []api.Move{{From: "/tmp/t/f", To: "f"}, {From: "out/passwd", To: "p"}, {From: "up", To: "../x"}} {
		if code, data := ts.call(t, "POST", "/v1/sandboxes/"+id+"/files/move", key, m); code != 400 {
			t.Errorf("move %+v: %d %s, want 400", m, code, data)
		}
	}
	for _, p := range []string{"../x", "out", "up/x"} {
		if code, data := ts.call(t, "GET", "/v1/sandboxes/"+id+"/tar?path="+url.QueryEscape(p), key, nil); code != 400 {
			t.Errorf("tar of %q: %d %s, want 400", p, code, data)
		}
	}
	r := ts.run(t, key, id, api.Exec{Cmd: "cat /tmp/t/f && test -s /etc/passwd && ! test -e /etc/pwned && ! test -e /pwned && ls /workspace /tmp/t", Shell: true})
	if exitCode(r.exit) != 0 || r.stdout != "keep\n/tmp/t:\nf\n\n/workspace:\nout\nup\n" {
		t.Errorf("after the refusals: exit %+v, stdout %q stderr %q", r.exit, r.stdout, r.stderr)
	}
}

// makeTar builds a tar of members: name -> content; a name ending in /
// is a directory, "name -> target" a symlink.
func makeTar(t *testing.T, members ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i < len(members); i += 2 {
		name, content := members[i], members[i+1]
		hdr := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(content)), ModTime: time.Unix(1e9, 0)}
		switch {
		case strings.HasSuffix(name, "/"):
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(content, "-> "):
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, content[3:], 0
		case content == "<dev>":
			hdr.Typeflag, hdr.Size = tar.TypeChar, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			tw.Write([]byte(content))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// readTar lists a tar: name -> content ("-> target" for symlinks, "/"
// for directories).
func readTarMembers(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading the tar: %v", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			out[strings.TrimSuffix(hdr.Name, "/")+"/"] = "/"
		case tar.TypeSymlink:
			out[hdr.Name] = "-> " + hdr.Linkname
		default:
			b, _ := io.ReadAll(tr)
			out[hdr.Name] = string(b)
		}
	}
}

// testTar is the tar round trip, on a runtime whose sessions move tars
// themselves (the local runtime) or not (the fake).
func testTar(t *testing.T, ts *testServer) {
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	base := "/v1/sandboxes/" + sb.ID
	in := makeTar(t, "dir/", "", "dir/a.txt", "alpha", "dir/sub/b.txt", "beta")
	ts.must(t, 204, "PUT", base+"/tar?path=up", key, in, nil)
	if code, data := ts.call(t, "GET", fileURL(sb.ID, "", "up/dir/sub/b.txt"), key, nil); code != 200 || string(data) != "beta" {
		t.Errorf("extracted file: %d %q", code, data)
	}
	code, data := ts.call(t, "GET", base+"/tar?path=up", key, nil)
	if code != 200 {
		t.Fatalf("tar download: %d %s", code, data)
	}
	want := map[string]string{"dir/": "/", "dir/a.txt": "alpha", "dir/sub/": "/", "dir/sub/b.txt": "beta"}
	if diff := cmp.Diff(want, readTarMembers(t, data)); diff != "" {
		t.Errorf("downloaded tar (-want +got):\n%s", diff)
	}

	// The workspace root is a restore: links inside are fine.
	ts.must(t, 204, "PUT", base+"/tar", key, makeTar(t, "top.txt", "top", "link", "-> top.txt"), nil)
	code, data = ts.call(t, "GET", base+"/tar", key, nil)
	got := readTarMembers(t, data)
	if code != 200 || got["top.txt"] != "top" || got["link"] != "-> top.txt" || got["up/dir/a.txt"] != "alpha" {
		t.Errorf("workspace tar: %d %v", code, got)
	}

	for _, tc := range []struct {
		name, path string
		tar        []byte
		says       string
	}{
		{"dotdot", "", makeTar(t, "ok.txt", "fine", "../evil.txt", "x"), "../evil.txt"},
		{"dotdot in a dir", "up", makeTar(t, "ok.txt", "fine", "a/../../evil.txt", "x"), "a/../../evil.txt"},
		{"absolute", "", makeTar(t, "ok.txt", "fine", "/etc/evil", "x"), "/etc/evil"},
		{"link out", "", makeTar(t, "ok.txt", "fine", "l", "-> /etc"), `"l"`},
		{"relative link out", "up", makeTar(t, "ok.txt", "fine", "l", "-> ../../.."), `"l"`},
		{"device", "", makeTar(t, "ok.txt", "fine", "dev", "<dev>"), `"dev"`},
		{"not a tar", "", []byte(strings.Repeat("garbage!", 100)), "tar"},
	} {
		code, data := ts.call(t, "PUT", base+"/tar?path="+tc.path, key, tc.tar)
		if code != 400 || !strings.Contains(apiError(t, data).Message, tc.says) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, code, data, tc.says)
		}
	}
	for _, p := range []string{"ok.txt", "up/ok.txt"} {
		if code, _ := ts.call(t, "GET", fileURL(sb.ID, "stat", p), key, nil); code != 404 {
			t.Errorf("%s: %d: a refused tar wrote its good members", p, code)
		}
	}
	if code, data := ts.call(t, "GET", base+"/tar?path=top.txt", key, nil); code != 400 {
		t.Errorf("tar of a file: %d %s, want 400", code, data)
	}
	if code, data := ts.call(t, "GET", base+"/tar?path=nope", key, nil); code != 404 {
		t.Errorf("tar of a missing dir: %d %s, want 404", code, data)
	}
}

func TestTar(t *testing.T) { testTar(t, newTestServer(t, Config{})) }

// The fake's sessions are not Archivers: tars go through the file calls.
func TestTarWithoutArchiver(t *testing.T) {
	testTar(t, newTestServer(t, Config{Runtime: fake.New()}))
}

func TestUploadCap(t *testing.T) {
	ts := newTestServer(t, Config{MaxUploadBytes: 4096})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	big := strings.Repeat("x", 5000)
	for _, p := range []string{fileURL(sb.ID, "", "big"), "/v1/sandboxes/" + sb.ID + "/tar?path=t"} {
		code, data := ts.call(t, "PUT", p, key, big)
		if code != 413 || apiError(t, data).Code != api.CodeTooLarge {
			t.Errorf("PUT %s of 5000 bytes: %d %s, want 413", p, code, data)
		}
	}
	// Without a Content-Length the cap is found while reading.
	pr, pw := io.Pipe()
	go func() {
		for range 10 {
			pw.Write([]byte(big[:1000]))
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", ts.URL+fileURL(sb.ID, "", "big"), pr)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Errorf("chunked upload over the cap: %d, want 413", resp.StatusCode)
	}
	if code, _ := ts.call(t, "GET", fileURL(sb.ID, "stat", "big"), key, nil); code != 404 {
		t.Errorf("stat after refused uploads: %d, want 404 (nothing written)", code)
	}
	ts.must(t, 204, "PUT", fileURL(sb.ID, "", "small"), key, big[:4096], nil)
}

// Another team's sandbox and processes are not found, whatever the call;
// a stopped sandbox is a 409.
func TestIOIsolation(t *testing.T) {
	ts := newTestServer(t, Config{})
	alpha, beta := ts.teamKey(t, "alpha"), ts.teamKey(t, "beta")
	sb := ts.create(t, alpha, api.CreateSandbox{})
	r := ts.run(t, alpha, sb.ID, api.Exec{Cmd: "sleep 60", Shell: true, Background: true, Tag: "t"})
	ts.must(t, 204, "PUT", fileURL(sb.ID, "", "f"), alpha, "x", nil)

	base := "/v1/sandboxes/" + sb.ID
	pid := fmt.Sprintf("%s/processes/%d", base, r.pid)
	calls := []struct {
		method, path string
		body         any
	}{
		{"POST", base + "/exec", api.Exec{Cmd: "true"}},
		{"GET", base + "/pty", nil},
		{"GET", base + "/processes", nil},
		{"POST", pid + "/attach", nil},
		{"POST", pid + "/signal", api.Signal{Signal: "KILL"}},
		{"POST", pid + "/stdin", "x"},
		{"POST", pid + "/stdin/close", nil},
		{"POST", base + "/processes/tag/t/attach", nil},
		{"POST", base + "/processes/tag/t/signal", api.Signal{Signal: "KILL"}},
		{"POST", base + "/processes/tag/t/stdin", "x"},
		{"POST", base + "/processes/tag/t/stdin/close", nil},
		{"GET", fileURL(sb.ID, "", "f"), nil},
		{"PUT", fileURL(sb.ID, "", "f"), "y"},
		{"DELETE", fileURL(sb.ID, "", "f"), nil},
		{"GET", fileURL(sb.ID, "stat", "f"), nil},
		{"GET", fileURL(sb.ID, "list", ""), nil},
		{"POST", fileURL(sb.ID, "mkdir", "d"), nil},
		{"POST", base + "/files/move", api.Move{From: "f", To: "g"}},
		{"GET", base + "/tar", nil},
		{"PUT", base + "/tar", makeTar(t, "g", "x")},
	}
	for _, c := range calls {
		code, data := ts.call(t, c.method, c.path, beta, c.body)
		if code != 404 || apiError(t, data).Code != api.CodeNotFound {
			t.Errorf("%s %s with another team's key: %d %s, want 404", c.method, c.path, code, data)
		}
	}
	// Nothing happened to alpha's sandbox.
	res := ts.run(t, alpha, sb.ID, api.Exec{Cmd: "cat f; ls", Shell: true})
	if res.stdout != "xf\n" {
		t.Errorf("alpha's workspace after beta's calls: %q", res.stdout)
	}
	var procs api.ProcessList
	ts.must(t, 200, "GET", base+"/processes", alpha, nil, &procs)
	if len(procs.Processes) != 1 {
		t.Errorf("alpha's processes after beta's calls: %+v", procs.Processes)
	}

	ts.must(t, 200, "POST", base+"/stop", alpha, nil, nil)
	for _, c := range calls {
		if c.path == base+"/pty" {
			continue
		}
		code, data := ts.call(t, c.method, c.path, alpha, c.body)
		if code != http.StatusConflict {
			t.Errorf("%s %s on a stopped sandbox: %d %s, want 409", c.method, c.path, code, data)
		}
	}
}

// TestPTYBrowserToken: a browser, which cannot set headers on a
// WebSocket, authenticates the handshake with ?access_token=; the same
// parameter on a plain request is not accepted.
func TestPTYBrowserToken(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "browser")
	sb := ts.create(t, key, api.CreateSandbox{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(ts.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty?cmd=" + url.QueryEscape("echo from-browser") + "&access_token=" + key
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatalf("dial with ?access_token=: %v", err)
	}
	defer conn.CloseNow()
	var out strings.Builder
	for !strings.Contains(out.String(), "from-browser") {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("reading: %v (so far %q)", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(data)
		}
	}
	if code, _ := ts.call(t, "GET", "/v1/sandboxes/"+sb.ID+"?access_token="+key, "", nil); code != http.StatusUnauthorized {
		t.Errorf("?access_token= on a plain request: %d, want 401", code)
	}
}

// TestStreamOnShutdown: a server that closes ends an open exec stream
// with an error event that says so, not with a cut connection.
func TestStreamOnShutdown(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "shut")
	sb := ts.create(t, key, api.CreateSandbox{})
	body, _ := json.Marshal(api.Exec{Cmd: "sh", Args: []string{"-c", "echo started; sleep 30"}})
	req, _ := http.NewRequest("POST", ts.URL+"/v1/sandboxes/"+sb.ID+"/exec", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var last api.ExecEvent
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
		if last.Type == "stdout" {
			go ts.Server.Close()
		}
	}
	if last.Type != "error" || last.Code != api.CodeUnavailable || !strings.Contains(last.Error, "shutting down") {
		t.Errorf("last event %+v, want an unavailable error saying the server is shutting down", last)
	}
}
