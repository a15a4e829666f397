package guest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
)

// TestStartDeadlinePTY: a command on a PTY leads a session in which a
// shell with job control gives each job a process group of its own, and
// a job that ignores SIGHUP outlives the terminal; the command's
// deadline ends the whole session, so no job is left (issue 15).
func TestStartDeadlinePTY(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("needs bash for job control")
	}
	_, c := startTestServer(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := startReq("/bin/bash", "-c", `set -m; trap "" HUP; sleep 600 & echo "job $!"; wait`)
	req.Msg.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}
	stream, err := c.Process.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var got collected
	job := 0
	for job == 0 && stream.Receive() {
		got.add(stream.Msg().Event)
		if f := strings.Fields(got.pty.String()); len(f) >= 2 && f[0] == "job" && strings.Contains(got.pty.String(), "\n") {
			job, _ = strconv.Atoi(f[1])
		}
	}
	if job == 0 || got.pid == 0 {
		t.Fatalf("no job pid on the PTY (%q, stream: %v)", got.pty.String(), stream.Err())
	}
	t.Cleanup(func() {
		if pgrpOf(job) == job { // still the job: leave nothing behind
			syscall.Kill(job, syscall.SIGKILL)
		}
	})
	if pg := pgrpOf(job); pg == int(got.pid) {
		t.Fatalf("the job is in the command's process group (%d): the test would not test the session", pg)
	}
	for stream.Receive() {
	}
	if code := connect.CodeOf(stream.Err()); code != connect.CodeDeadlineExceeded {
		t.Fatalf("stream ended with %v (%v), want deadline_exceeded", code, stream.Err())
	}
	for wait := time.Now().Add(10 * time.Second); running(job); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("the job %d (its own process group, ignoring SIGHUP) still runs after the deadline", job)
		}
	}
}

// pgrpOf reads a process's group from /proc; 0 when it cannot.
func pgrpOf(pid int) int {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 {
		return 0
	}
	n, _ := strconv.Atoi(f[2])
	return n
}
