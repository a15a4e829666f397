package guest

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"

	fspb "github.com/cove-sandbox/cove/guest/gen/filesystem"
)

// TestWorkdirHeader: a request's WorkdirHeader (E2B's default workdir,
// /home/user) bases its relative paths and the cwd of a process started
// without one, in place of the daemon's workdir; requests without it keep
// the daemon's; a confinement still wins; a bad value is refused.
func TestWorkdirHeader(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/home/user/in-home.txt", "home")
	e.write(t, "/workspace/in-ws.txt", "ws")
	home := []string{WorkdirHeader, "/home/user"}

	res := e.do(t, "GET", e.url("/files", "path", "in-home.txt"), nil, home...)
	e.wantStatus(t, res, 200)
	if b, _ := io.ReadAll(res.Body); string(b) != "home" {
		t.Errorf("relative read under the workdir header: %q", b)
	}
	e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "sub/rel.txt"), strings.NewReader("up"),
		append([]string{"Content-Type", "application/octet-stream"}, home...)...), 200)
	if b, err := os.ReadFile(e.host("/home/user/sub/rel.txt")); err != nil || string(b) != "up" {
		t.Errorf("relative upload under the workdir header: %q, %v", b, err)
	}
	// No header: the daemon's workdir.
	res = e.do(t, "GET", e.url("/files", "path", "in-ws.txt"), nil)
	e.wantStatus(t, res, 200)
	// ".." cannot climb out of the root from the workdir.
	e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "../../../etc/passwd"), nil, home...), 400)
	// A confinement bases relative paths, whatever the workdir.
	res = e.do(t, "GET", e.url("/files", "path", "in-ws.txt"), nil, append([]string{ConfineHeader, "/workspace"}, home...)...)
	e.wantStatus(t, res, 200)
	// The value must be an absolute sandbox path.
	for _, bad := range []string{"home/user", "/../.."} {
		e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "in-home.txt"), nil, WorkdirHeader, bad), 400)
	}

	// The filesystem RPCs.
	req := connect.NewRequest(&fspb.StatRequest{Path: "in-home.txt"})
	req.Header().Set(WorkdirHeader, "/home/user")
	st, err := e.fs.Stat(context.Background(), req)
	if err != nil || st.Msg.GetEntry().GetPath() != "/home/user/in-home.txt" {
		t.Errorf("Stat(in-home.txt) under the workdir header: %v, %v", st, err)
	}
}

// TestWorkdirHeaderProcess: a process started without a cwd starts in
// the request's workdir; a relative cwd is under it.
func TestWorkdirHeaderProcess(t *testing.T) {
	srv, c := startTestServer(t, Config{})
	for _, d := range []string{"/home/user/sub"} {
		if err := os.MkdirAll(srv.cfg.Root+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		cwd  *string
		want string
	}{{nil, "/home/user"}, {ptr("sub"), "/home/user/sub"}, {ptr("/workspace"), "/workspace"}} {
		req := startReq("pwd")
		req.Msg.Process.Cwd = tc.cwd
		req.Header().Set(WorkdirHeader, "/home/user")
		got := runToEnd(t, c, req)
		if out := strings.TrimSpace(got.stdout.String()); !strings.HasSuffix(out, tc.want) {
			t.Errorf("pwd with cwd %v under the workdir header: %q, want %s", tc.cwd, out, tc.want)
		}
	}
	got := runToEnd(t, c, startReq("pwd"))
	if out := strings.TrimSpace(got.stdout.String()); !strings.HasSuffix(out, "/workspace") {
		t.Errorf("pwd without the header: %q, want the daemon's workdir", out)
	}
}
