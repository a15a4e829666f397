package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/guest/gen/process/processconnect"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/remote"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// TestAttackGuestFS attacks the sandbox daemon as a tenant of `cove
// serve` would, through the real binary and its APIs (issue 13: point 10
// and the low items on file names, vsock and command deadlines):
//
//   - code in the sandbox, as the unprivileged user, swaps /workspace/d
//     with a symlink to a root-only directory while the harness reads,
//     writes, lists, removes and moves through /workspace/d with Cove's
//     API: the daemon (root) never reads or changes that directory;
//   - a file whose name is not UTF-8 leaves listings working, and the
//     encoded name it is listed under reads it back;
//   - vsock sockets are refused in the sandbox;
//   - a command run through envd's protocol (as E2B's SDK does) with a
//     timeout is killed at the timeout, its children too.
func TestAttackGuestFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "ca")
	p := startServe(t, home, data)
	key := tenantKey(t, p, "attackers")
	rt, err := remote.New(remote.Config{URL: p.url, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	a := sandboxtest.NewAttacker(t, s)
	role := func(user string, args ...string) string { t.Helper(); return a.Run(t, user, args...) }

	t.Run("symlink swap", func(t *testing.T) {
		role("root", "attack-setup")
		before := role("root", "attack-snapshot")
		var flips, flipErr strings.Builder
		// The user makes the tree and the link first: the calls below must
		// not make /workspace/d (as root) before it does.
		a.Run(t, "", "attack-prepare")
		proc, err := s.Start(ctx, sandbox.ExecRequest{Cmd: a.Path, Args: []string{"attack-flip", "8"}, Stdout: &flips, Stderr: &flipErr})
		if err != nil {
			t.Fatal(err)
		}
		flipping := make(chan struct{})
		go func() { proc.Wait(context.Background()); close(flipping) }()
		var escapes []string
		calls, reads := 0, 0
		for done := false; !done; {
			select {
			case <-flipping:
				done = true
			default:
			}
			if rc, err := s.ReadFile(ctx, "d/secret.txt"); err == nil {
				data, _ := io.ReadAll(rc)
				rc.Close()
				reads++
				if bytes.Contains(data, []byte(sandboxtest.AttackCanary)) {
					escapes = append(escapes, "ReadFile returned the root-only canary")
				}
			}
			if fis, err := s.List(ctx, "d", 1); err == nil {
				for _, fi := range fis {
					if fi.Mode == 0o600 {
						escapes = append(escapes, "List listed the root-only directory")
					}
				}
			}
			s.WriteFile(ctx, "d/secret.txt", strings.NewReader("written"), 0o666)
			s.WriteFile(ctx, fmt.Sprintf("d/new-%d", calls), strings.NewReader("new"), 0)
			s.Mkdir(ctx, fmt.Sprintf("d/dir-%d", calls))
			s.Remove(ctx, "d/victim")
			s.WriteFile(ctx, "d/victim", strings.NewReader("inside"), 0o644)
			calls += 7
			if len(escapes) > 10 {
				break
			}
		}
		<-flipping
		after := role("root", "attack-snapshot")
		n, err := strconv.Atoi(strings.TrimSpace(flips.String()))
		if err != nil {
			t.Fatalf("the flipper printed %q: %s", flips.String(), flipErr.String())
		}
		t.Logf("%d calls, %d swaps, %d reads", calls, n, reads)
		if n == 0 || reads == 0 {
			t.Fatalf("%d swaps, %d successful reads: the attack did not run", n, reads)
		}
		if len(escapes) > 0 {
			t.Errorf("the file API followed the swapped symlink: %v", escapes[0])
		}
		if before != after {
			t.Errorf("/etc/cove-attack changed:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("file name not UTF-8", func(t *testing.T) {
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", `printf latin-1 > "$(printf 'caf\351.txt')"`}}); err != nil {
			t.Fatal(err)
		}
		fis, err := s.List(ctx, "/workspace", 1)
		if err != nil {
			t.Fatalf("List of a directory with a name that is not UTF-8: %v", err)
		}
		var found string
		for _, fi := range fis {
			if strings.HasPrefix(fi.Name, "caf") {
				found = fi.Path
			}
		}
		if found != "/workspace/caf\u201bE9.txt" {
			t.Fatalf("listed as %q, want /workspace/caf\u201bE9.txt", found)
		}
		rc, err := s.ReadFile(ctx, found)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if string(data) != "latin-1" {
			t.Errorf("ReadFile(%q) = %q", found, data)
		}
	})

	t.Run("vsock", func(t *testing.T) {
		for _, user := range []string{"", "root"} {
			for _, got := range strings.Fields(role(user, "attack-vsock")) {
				if got != "EPERM" {
					t.Errorf("user %q: socket(AF_VSOCK): %s, want EPERM", user, got)
				}
			}
		}
	})

	t.Run("command deadline through envd", func(t *testing.T) {
		body := strings.NewReader(`{"templateID": "base"}`)
		req, _ := http.NewRequest("POST", p.url+"/v2/sandboxes", body)
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var sb struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil {
			t.Fatalf("E2B create: %d %s", resp.StatusCode, data)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), sb.SandboxID) })
		hc := &http.Client{Transport: headerTransport{
			"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken,
		}}
		pc := processconnect.NewProcessClient(hc, p.url)

		// As E2B's SDK runs commands.run(cmd, {timeoutMs: 2000}).
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		stream, err := pc.Start(dctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{
			Cmd: "/bin/sh", Args: []string{"-c", "sleep 60 & echo $!; wait"}}}))
		if err != nil {
			t.Fatal(err)
		}
		var pid uint32
		var stdout strings.Builder
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if st := ev.GetStart(); st != nil {
				pid = st.GetPid()
			}
			stdout.Write(ev.GetData().GetStdout())
		}
		if code := connect.CodeOf(stream.Err()); code != connect.CodeDeadlineExceeded || pid == 0 {
			t.Fatalf("stream ended with %v (%v), pid %d; want deadline_exceeded", code, stream.Err(), pid)
		}
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		cs, err := pc.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}))
		if err != nil {
			t.Fatal(err)
		}
		var end *pb.ProcessEvent_EndEvent
		for cs.Receive() {
			if e := cs.Msg().GetEvent().GetEnd(); e != nil {
				end = e
			}
		}
		if end == nil {
			t.Fatalf("no end 20 s after the deadline (%v): the command outlived its timeout", cs.Err())
		}
		if end.GetStatus() != "signal: killed" {
			t.Errorf("end status %q, want signal: killed", end.GetStatus())
		}
		// Its child went with it.
		child := strings.TrimSpace(stdout.String())
		kctx, kcancel := context.WithTimeout(ctx, 20*time.Second)
		defer kcancel()
		ks, err := pc.Start(kctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{
			Cmd: "/bin/sh", Args: []string{"-c", "for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 " + child + " 2>/dev/null || exit 0; sleep 0.2; done; exit 1"}}}))
		if err != nil {
			t.Fatal(err)
		}
		var code int32 = -2
		for ks.Receive() {
			if e := ks.Msg().GetEvent().GetEnd(); e != nil {
				code = e.GetExitCode()
			}
		}
		if code != 0 {
			t.Errorf("the command's child %s still runs after the deadline (check exit %d, %v)", child, code, ks.Err())
		}
	})
}

// headerTransport adds fixed headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}
