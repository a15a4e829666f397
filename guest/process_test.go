package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/sandbox"
)

// startTestServer runs a daemon in the test process on a unix socket and
// returns a client for it. Root is a fresh directory with a workspace.
func startTestServer(t testing.TB, cfg Config) (*Server, *Client) {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	os.MkdirAll(filepath.Join(cfg.Root, cfg.Workdir), 0o755)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Unix socket paths are limited to 108 bytes: keep it short.
	sockDir, err := os.MkdirTemp("", "g")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, l); close(done) }()
	c, err := NewClient("unix://"+sock, ClientOptions{AccessToken: cfg.AccessToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		srv.Close()
		cancel()
		<-done
		os.RemoveAll(sockDir)
	})
	return srv, c
}

func startReq(cmd string, args ...string) *connect.Request[pb.StartRequest] {
	return connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: args}})
}

// collected is what a process stream delivered.
type collected struct {
	pid        uint32
	stdout     bytes.Buffer
	stderr     bytes.Buffer
	pty        bytes.Buffer
	keepalives int
	end        *pb.ProcessEvent_EndEvent
}

func (c *collected) add(ev *pb.ProcessEvent) {
	switch e := ev.Event.(type) {
	case *pb.ProcessEvent_Start:
		c.pid = e.Start.Pid
	case *pb.ProcessEvent_Data:
		c.stdout.Write(e.Data.GetStdout())
		c.stderr.Write(e.Data.GetStderr())
		c.pty.Write(e.Data.GetPty())
	case *pb.ProcessEvent_Keepalive:
		c.keepalives++
	case *pb.ProcessEvent_End:
		c.end = e.End
	}
}

func runToEnd(t *testing.T, c *Client, req *connect.Request[pb.StartRequest]) *collected {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := c.Process.Start(ctx, req)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var got collected
	for stream.Receive() {
		got.add(stream.Msg().Event)
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if got.end == nil {
		t.Fatal("stream ended without an end event")
	}
	return &got
}

func TestProcessExitCodesAndStreams(t *testing.T) {
	_, c := startTestServer(t, Config{})
	tests := []struct {
		name       string
		cmd        string
		args       []string
		wantOut    string
		wantErr    string
		wantCode   int32
		wantExited bool
		wantStatus string
	}{
		{"stdout", "echo", []string{"hello"}, "hello\n", "", 0, true, "exit status 0"},
		{"stderr split", "sh", []string{"-c", "echo out; echo err >&2"}, "out\n", "err\n", 0, true, "exit status 0"},
		{"exit code", "sh", []string{"-c", "exit 7"}, "", "", 7, true, "exit status 7"},
		{"killed by signal", "sh", []string{"-c", "kill -9 $$"}, "", "", -1, false, "signal: killed"},
		{"cwd is the workdir", "pwd", nil, "", "", 0, true, "exit status 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runToEnd(t, c, startReq(tt.cmd, tt.args...))
			if tt.name == "cwd is the workdir" {
				if !strings.HasSuffix(strings.TrimSpace(got.stdout.String()), "/workspace") {
					t.Errorf("pwd = %q, want the workspace", got.stdout.String())
				}
			} else if got.stdout.String() != tt.wantOut {
				t.Errorf("stdout = %q, want %q", got.stdout.String(), tt.wantOut)
			}
			if got.stderr.String() != tt.wantErr {
				t.Errorf("stderr = %q, want %q", got.stderr.String(), tt.wantErr)
			}
			if got.end.ExitCode != tt.wantCode || got.end.Exited != tt.wantExited || got.end.Status != tt.wantStatus {
				t.Errorf("end = {code %d exited %v status %q}, want {%d %v %q}", got.end.ExitCode, got.end.Exited, got.end.Status, tt.wantCode, tt.wantExited, tt.wantStatus)
			}
			if got.pid == 0 {
				t.Error("no start event with a pid")
			}
		})
	}
}

func TestProcessStartErrors(t *testing.T) {
	_, c := startTestServer(t, Config{})
	tests := []struct {
		name string
		req  *pb.StartRequest
		want connect.Code
	}{
		{"missing program", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-program-xyz"}}, connect.CodeNotFound},
		{"empty command", &pb.StartRequest{Process: &pb.ProcessConfig{}}, connect.CodeInvalidArgument},
		{"no process", &pb.StartRequest{}, connect.CodeInvalidArgument},
		{"cwd escapes", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("../../..")}}, connect.CodeInvalidArgument},
		{"cwd missing", &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Cwd: ptr("/nope")}}, connect.CodeInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, err := c.Process.Start(context.Background(), connect.NewRequest(tt.req))
			if err == nil {
				for stream.Receive() {
				}
				err = stream.Err()
			}
			if got := connect.CodeOf(err); got != tt.want {
				t.Errorf("code = %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestProcessLargeOutputInOrder checks that 10 MB of output arrives whole
// and in order through a live stream.
func TestProcessLargeOutputInOrder(t *testing.T) {
	_, c := startTestServer(t, Config{OutputBuffer: 256 << 10})
	const n = 1500000 // seq 1..n is over 10 MiB
	got := runToEnd(t, c, startReq("seq", "1", strconv.Itoa(n)))
	if got.end.ExitCode != 0 {
		t.Fatalf("exit code %d", got.end.ExitCode)
	}
	var want bytes.Buffer
	for i := 1; i <= n; i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	if want.Len() < 10<<20 {
		t.Fatalf("test bug: only %d bytes expected", want.Len())
	}
	if !bytes.Equal(got.stdout.Bytes(), want.Bytes()) {
		t.Fatalf("got %d bytes, want %d; first difference at %d", got.stdout.Len(), want.Len(), firstDiff(got.stdout.Bytes(), want.Bytes()))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestProcessFloodStaysBounded lets a process write 1 GB with nobody
// attached: the daemon keeps only its bounded buffer, stays responsive, and
// a client attaching afterwards gets the tail and the end.
func TestProcessFloodStaysBounded(t *testing.T) {
	const limit = 1 << 20
	_, c := startTestServer(t, Config{OutputBuffer: limit})
	ctx, cancel := context.WithCancel(context.Background())
	req := startReq("head", "-c", strconv.Itoa(1<<30), "/dev/zero")
	req.Msg.Tag = ptr("flood")
	stream, err := c.Process.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	// Leave: the flood goes on with nobody attached.
	cancel()
	stream.Close()

	var peakHeap uint64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// The daemon answers while the flood runs.
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := c.Process.List(rctx, connect.NewRequest(&pb.ListRequest{}))
		rcancel()
		if err != nil {
			t.Fatalf("List during the flood: %v", err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapInuse)
		running := slices.ContainsFunc(list.Msg.Processes, func(p *pb.ProcessInfo) bool { return p.GetTag() == "flood" })
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flood did not finish in 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if peakHeap > 200<<20 {
		t.Errorf("heap in use peaked at %d MiB during a 1 GiB flood; want it bounded (< 200 MiB)", peakHeap>>20)
	}
	cstream, err := c.Process.Connect(context.Background(), connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "flood"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var got collected
	for cstream.Receive() {
		got.add(cstream.Msg().Event)
	}
	if got.end == nil || got.end.ExitCode != 0 {
		t.Fatalf("end = %v, want exit 0 (stream err %v)", got.end, cstream.Err())
	}
	if n := got.stdout.Len(); n == 0 || n > limit {
		t.Errorf("reattached client got %d bytes, want the retained tail: 0 < n <= %d", n, limit)
	}
}

// TestProcessReattachByTag: a client leaves mid-stream, output goes on,
// a new client attaches by tag and gets the rest. A client that detaches
// explicitly (X-Cove-Stream + /cove/detach, as guest.Session does) gets
// every byte exactly once; one that only cancels its stream, as envd's
// clients do, gets every byte at least once (the chunk in flight when it
// left may come again).
func TestProcessReattachByTag(t *testing.T) {
	for _, explicit := range []bool{true, false} {
		t.Run(fmt.Sprintf("explicit detach %v", explicit), func(t *testing.T) {
			_, c := startTestServer(t, Config{})
			ctx, cancel := context.WithCancel(context.Background())
			req := startReq("cat")
			req.Msg.Tag = ptr("job")
			req.Header().Set(StreamHeader, "stream-1")
			stream, err := c.Process.Start(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			stream.Receive() // start
			pid := stream.Msg().Event.GetStart().GetPid()
			sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "job"}}
			send := func(s string) {
				t.Helper()
				if _, err := c.Process.SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(s)}}})); err != nil {
					t.Fatal(err)
				}
			}
			send("first\n")
			var first collected
			for first.stdout.String() != "first\n" && stream.Receive() {
				first.add(stream.Msg().Event)
			}
			if explicit {
				resp, err := c.do(context.Background(), "POST", "/cove/detach", url.Values{"stream": {"stream-1"}}, nil, nil)
				if err != nil {
					t.Fatalf("detach: %v", err)
				}
				resp.Body.Close()
			}
			cancel()
			stream.Close()

			send("second\n")
			send("third\n")
			cstream, err := c.Process.Connect(context.Background(), connect.NewRequest(&pb.ConnectRequest{Process: sel}))
			if err != nil {
				t.Fatal(err)
			}
			var rest collected
			if !cstream.Receive() {
				t.Fatal(cstream.Err())
			}
			rest.add(cstream.Msg().Event)
			if rest.pid != pid {
				t.Errorf("Connect start pid = %d, want %d", rest.pid, pid)
			}
			if _, err := c.Process.CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
				t.Fatal(err)
			}
			for cstream.Receive() {
				rest.add(cstream.Msg().Event)
			}
			got := rest.stdout.String()
			if explicit && got != "second\nthird\n" {
				t.Errorf("after reattach got %q, want %q", got, "second\nthird\n")
			}
			if !explicit && got != "second\nthird\n" && got != "first\nsecond\nthird\n" {
				t.Errorf("after reattach got %q, want the rest (%q), possibly after the chunk in flight", got, "second\nthird\n")
			}
			if rest.end == nil || rest.end.ExitCode != 0 {
				t.Errorf("end = %v, want exit 0", rest.end)
			}
			// Input after the end is refused.
			_, err = c.Process.SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("x")}}}))
			if connect.CodeOf(err) != connect.CodeFailedPrecondition {
				t.Errorf("SendInput after exit: %v, want failed_precondition", err)
			}
		})
	}
}

func TestProcessStreamInputOrdered(t *testing.T) {
	_, c := startTestServer(t, Config{})
	req := startReq("cat")
	req.Msg.Tag = ptr("cat")
	stream, err := c.Process.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	in := c.Process.StreamInput(context.Background())
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "cat"}}
	in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}})
	var want strings.Builder
	for i := range 200 {
		line := fmt.Sprintf("line %d\n", i)
		want.WriteString(line)
		in.Send(&pb.StreamInputRequest{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(line)}}}}})
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	c.Process.CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	var got collected
	for stream.Receive() {
		got.add(stream.Msg().Event)
	}
	if got.stdout.String() != want.String() {
		t.Errorf("echoed input differs: got %d bytes, want %d", got.stdout.Len(), want.Len())
	}
}

func TestProcessPTY(t *testing.T) {
	_, c := startTestServer(t, Config{})
	req := startReq("sh")
	req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}
	req.Msg.Tag = ptr("tty")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Process.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "tty"}}
	if _, err := c.Process.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 40}}})); err != nil {
		t.Fatalf("resize: %v", err)
	}
	input := "stty size; tty -s && echo IS-A-TTY; exit 3\n"
	if _, err := c.Process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(input)}}})); err != nil {
		t.Fatal(err)
	}
	var got collected
	for stream.Receive() {
		got.add(stream.Msg().Event)
	}
	out := got.pty.String()
	for _, want := range []string{"stty size", "40 100", "IS-A-TTY"} {
		if !strings.Contains(out, want) {
			t.Errorf("PTY output %q lacks %q (echo, resize or tty)", out, want)
		}
	}
	if got.stdout.Len() != 0 {
		t.Errorf("PTY output arrived as stdout: %q", got.stdout.String())
	}
	if got.end == nil || got.end.ExitCode != 3 {
		t.Errorf("end = %v, want exit 3", got.end)
	}
	// CloseStdin is refused on a PTY with a hint.
	req2 := startReq("sleep", "5")
	req2.Msg.Pty = &pb.PTY{}
	req2.Msg.Tag = ptr("tty2")
	s2, _ := c.Process.Start(ctx, req2)
	s2.Receive()
	_, err = c.Process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "tty2"}}}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "0x04") {
		t.Errorf("CloseStdin on a PTY: %v, want failed_precondition mentioning 0x04", err)
	}
}

func TestProcessSignals(t *testing.T) {
	_, c := startTestServer(t, Config{})
	for _, tt := range []struct {
		sig    pb.Signal
		status string
	}{
		{pb.Signal_SIGNAL_SIGTERM, "signal: terminated"},
		{pb.Signal_SIGNAL_SIGKILL, "signal: killed"},
	} {
		t.Run(tt.sig.String(), func(t *testing.T) {
			// The shell's child must die too: the signal goes to the group.
			stream, err := c.Process.Start(context.Background(), startReq("sh", "-c", "sleep 60; echo survived"))
			if err != nil {
				t.Fatal(err)
			}
			stream.Receive()
			pid := stream.Msg().Event.GetStart().GetPid()
			if _, err := c.Process.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
				Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: tt.sig,
			})); err != nil {
				t.Fatal(err)
			}
			var got collected
			for stream.Receive() {
				got.add(stream.Msg().Event)
			}
			if got.end == nil || got.end.Exited || got.end.Status != tt.status {
				t.Errorf("end = %v, want status %q", got.end, tt.status)
			}
			if strings.Contains(got.stdout.String(), "survived") {
				t.Error("the shell's child outlived the signal")
			}
		})
	}
	_, err := c.Process.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "nobody"}}, Signal: pb.Signal_SIGNAL_SIGTERM,
	}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("signal to unknown tag: %v, want not_found", err)
	}
}

func TestProcessListAndTags(t *testing.T) {
	_, c := startTestServer(t, Config{})
	req := startReq("sleep", "30")
	req.Msg.Tag = ptr("sleeper")
	req.Msg.Process.Envs = map[string]string{"A": "1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := c.Process.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	resp, err := c.Process.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	var found *pb.ProcessInfo
	for _, p := range resp.Msg.Processes {
		if p.GetTag() == "sleeper" {
			found = p
		}
	}
	if found == nil || found.Config.Cmd != "sleep" || found.Config.Envs["A"] != "1" {
		t.Fatalf("List = %v, want the tagged sleep with its config", resp.Msg.Processes)
	}
	// A second process may not take a running process's tag.
	s2, err := c.Process.Start(ctx, req)
	if err == nil {
		s2.Receive()
		err = s2.Err()
	}
	if connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("duplicate tag: %v, want already_exists", err)
	}
	c.Process.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "sleeper"}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	for stream.Receive() {
	}
	resp, _ = c.Process.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	for _, p := range resp.Msg.Processes {
		if p.GetTag() == "sleeper" {
			t.Error("an ended process is still listed")
		}
	}
}

func TestProcessKeepAlive(t *testing.T) {
	_, c := startTestServer(t, Config{KeepAlive: 20 * time.Millisecond})
	got := runToEnd(t, c, startReq("sleep", "0.3"))
	if got.keepalives == 0 {
		t.Error("no keepalive event on a quiet 300ms stream with a 20ms keepalive")
	}
}

func TestProcessConcurrent(t *testing.T) {
	_, c := startTestServer(t, Config{})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, err := c.Process.Start(context.Background(), startReq("sh", "-c", fmt.Sprintf("sleep 0.2; echo %d", i)))
			if err != nil {
				errs <- err
				return
			}
			var got collected
			for stream.Receive() {
				got.add(stream.Msg().Event)
			}
			if got.stdout.String() != fmt.Sprintf("%d\n", i) || got.end == nil || got.end.ExitCode != 0 {
				errs <- fmt.Errorf("process %d: stdout %q end %v err %v", i, got.stdout.String(), got.end, stream.Err())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestAccessToken(t *testing.T) {
	_, good := startTestServer(t, Config{AccessToken: "s3cret"})
	if got := runToEnd(t, good, startReq("true")); got.end.ExitCode != 0 {
		t.Fatal("authorised start failed")
	}
	for _, token := range []string{"", "wrong"} {
		bad, err := NewClient(good.addr, ClientOptions{AccessToken: token})
		if err != nil {
			t.Fatal(err)
		}
		_, err = bad.Process.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("token %q: %v, want unauthenticated", token, err)
		}
		if !errors.Is(wireError(err), sandbox.ErrPermission) {
			t.Errorf("wire error %v does not map to ErrPermission", err)
		}
		if err := bad.Health(context.Background()); err != nil {
			t.Errorf("health must not need the token: %v", err)
		}
	}
}

// TestInitEnv: envd's POST /init adds environment variables to every later
// process; GET /envs lists them; bad input is refused.
func TestInitEnv(t *testing.T) {
	_, c := startTestServer(t, Config{Env: map[string]string{"BASE": "1"}})
	ctx := context.Background()
	if err := c.SetEnv(ctx, map[string]string{"ADDED": "2"}); err != nil {
		t.Fatal(err)
	}
	got := runToEnd(t, c, startReq("sh", "-c", "echo $BASE $ADDED"))
	if got.stdout.String() != "1 2\n" {
		t.Errorf("env after /init: %q, want %q", got.stdout.String(), "1 2\n")
	}
	resp, err := c.do(ctx, "GET", "/envs", nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var envs map[string]string
	json.NewDecoder(resp.Body).Decode(&envs)
	resp.Body.Close()
	if envs["BASE"] != "1" || envs["ADDED"] != "2" {
		t.Errorf("GET /envs = %v", envs)
	}
	for _, body := range []string{"{not json", `{"envVars": {"A=B": "x"}}`} {
		_, err := c.do(ctx, "POST", "/init", nil, strings.NewReader(body), http.Header{"Content-Type": {"application/json"}})
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("POST /init %s: %v, want ErrInvalid", body, err)
		}
	}
}

// TestExecTimeoutBounds: a Timeout the daemon would refuse (or one whose
// milliseconds overflow) is refused before it is sent, with the bound in
// the message rather than the daemon's header name.
func TestExecTimeoutBounds(t *testing.T) {
	s := &Session{}
	for _, d := range []time.Duration{-time.Second, 366 * 24 * time.Hour, time.Duration(math.MaxInt64)} {
		_, err := s.startRequest(sandbox.ExecRequest{Cmd: "true", Timeout: d})
		if !errors.Is(err, sandbox.ErrInvalid) || strings.Contains(err.Error(), KillAfterHeader) {
			t.Errorf("Timeout %v: %v, want ErrInvalid saying the bound", d, err)
		}
	}
	if _, err := s.startRequest(sandbox.ExecRequest{Cmd: "true", Timeout: 365 * 24 * time.Hour}); err != nil {
		t.Errorf("a year: %v", err)
	}
}
