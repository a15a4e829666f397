package guest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
)

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command, which is in parentheses.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func listed(t *testing.T, c *Client, pid uint32) bool {
	t.Helper()
	res, err := c.Process.List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Msg.GetProcesses() {
		if p.GetPid() == pid {
			return true
		}
	}
	return false
}

// TestStartDeadline: a command started with a deadline (E2B's timeoutMs,
// sent as Connect-Timeout-Ms) is killed at the deadline, its children
// with it, and the caller's stream ends with deadline_exceeded, as
// envd's does; a client that reattaches gets the end. A command started
// without one outlives its stream and a reattaching client's deadline.
func TestStartDeadline(t *testing.T) {
	_, c := startTestServer(t, Config{})

	t.Run("killed at the deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		stream, err := c.Process.Start(ctx, startReq("/bin/sh", "-c", "sleep 60 & echo $!; wait"))
		if err != nil {
			t.Fatal(err)
		}
		var got collected
		for stream.Receive() {
			got.add(stream.Msg().Event)
		}
		if code := connect.CodeOf(stream.Err()); code != connect.CodeDeadlineExceeded {
			t.Fatalf("stream ended with %v (%v), want deadline_exceeded", code, stream.Err())
		}
		if got.pid == 0 {
			t.Fatal("no start event")
		}
		child, err := strconv.Atoi(strings.TrimSpace(got.stdout.String()))
		if err != nil {
			t.Fatalf("child pid %q: %v", got.stdout.String(), err)
		}

		// The end, for a client that reattaches without a deadline.
		cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer ccancel()
		cs, err := c.Process.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: got.pid}}}))
		if err != nil {
			t.Fatal(err)
		}
		var after collected
		for cs.Receive() {
			after.add(cs.Msg().Event)
		}
		if after.end == nil {
			t.Fatalf("no end event after the deadline (stream: %v): the command outlived it", cs.Err())
		}
		if after.end.GetStatus() != "signal: killed" {
			t.Errorf("end status = %q, want signal: killed", after.end.GetStatus())
		}
		for wait := time.Now().Add(10 * time.Second); running(child); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(wait) {
				t.Fatalf("the command's child %d still runs after the deadline", child)
			}
		}
	})

	t.Run("no deadline: outlives its stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := c.Process.Start(ctx, startReq("sleep", "60"))
		if err != nil {
			t.Fatal(err)
		}
		if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
			t.Fatalf("no start event: %v", stream.Err())
		}
		pid := stream.Msg().GetEvent().GetStart().GetPid()
		defer c.Process.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
		cancel()
		stream.Close()

		// A client that reattaches with a deadline ends its own stream
		// only.
		cctx, ccancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer ccancel()
		cs, err := c.Process.Connect(cctx, connect.NewRequest(&pb.ConnectRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}}))
		if err == nil {
			for cs.Receive() {
			}
			err = cs.Err()
		}
		if code := connect.CodeOf(err); code != connect.CodeDeadlineExceeded {
			t.Errorf("Connect with a deadline ended with %v (%v), want deadline_exceeded", code, err)
		}
		time.Sleep(time.Second)
		if !listed(t, c, pid) || !running(int(pid)) {
			t.Error("a command started without a deadline ended with its stream or a reattached client's deadline")
		}
	})
}
