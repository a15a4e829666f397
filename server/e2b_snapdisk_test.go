package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/server/e2b"
)

// An E2B snapshot is the whole sandbox (a frozen copy of its disk):
// what was written as root outside the home, /home/user, its
// environment; it is no sandbox to list, reach, expire or reconcile
// away, and it is the team's alone. The SDK's view is in
// TestE2BSnapshotDiskSDK.

// execAs runs a shell command in a sandbox as user ("" for its own)
// through /v1 and returns its stdout and stderr together.
func (ts *testServer) execAs(t *testing.T, key, id, user, script string) string {
	t.Helper()
	code, data := ts.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, api.Exec{Cmd: script, Shell: true, User: user, TimeoutSeconds: 60})
	if code != 200 {
		t.Fatalf("exec %q as %q: %d %s", script, user, code, data)
	}
	var out strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		var ev api.ExecEvent
		if json.Unmarshal([]byte(line), &ev) == nil && (ev.Type == "stdout" || ev.Type == "stderr") {
			out.Write(ev.Data)
		}
	}
	return out.String()
}

// e2bSnapshot snapshots a sandbox through the E2B API; the snapshot is
// deleted at the end.
func (ts *testServer) e2bSnapshot(t *testing.T, key, id string) string {
	t.Helper()
	var sn e2b.SnapshotInfo
	resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+id+"/snapshots", key, map[string]any{}, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sn) != nil || !strings.HasPrefix(sn.SnapshotID, "snap-") {
		t.Fatalf("snapshot of %s: %d %s", id, resp.StatusCode, data)
	}
	t.Cleanup(func() { ts.e2bCall(t, "DELETE", "/templates/"+sn.SnapshotID, key, nil, nil) })
	return sn.SnapshotID
}

// runtimeIDs is every sandbox the runtime has, frozen copies too.
func (ts *testServer) runtimeIDs(t *testing.T) []string {
	t.Helper()
	infos, err := ts.Runtime.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, in := range infos {
		ids = append(ids, in.ID)
	}
	return ids
}

// e2bSnapshotIDs lists the team's snapshots through the E2B API.
func (ts *testServer) e2bSnapshotIDs(t *testing.T, key string) []string {
	t.Helper()
	var out []e2b.SnapshotInfo
	resp, data := ts.e2bCall(t, "GET", "/snapshots", key, nil, nil)
	if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil {
		t.Fatalf("list snapshots: %d %s", resp.StatusCode, data)
	}
	var ids []string
	for _, sn := range out {
		ids = append(ids, sn.SnapshotID)
	}
	return ids
}

func TestE2BSnapshotDisk(t *testing.T) {
	ts := newTestServer(t, Config{})
	key, other := ts.e2bKey(t, "diska"), ts.e2bKey(t, "diskb")
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base", "timeout": 600, "envVars": map[string]string{"FROM_ORIGINAL": "o"}})
	ts.execAs(t, key, sb.SandboxID, "", "echo notes > /home/user/notes.txt")
	ts.execAs(t, key, sb.SandboxID, "root", "echo marker > /etc/cove-marker")
	sid := ts.e2bSnapshot(t, key, sb.SandboxID)

	// The frozen copy is the one sandbox of the runtime's that is not sb.
	var frozen string
	for _, id := range ts.runtimeIDs(t) {
		if id != sb.SandboxID {
			frozen = id
		}
	}
	if frozen == "" || ts.runtimeState(t, frozen) != "stopped" {
		t.Fatalf("the runtime's sandboxes %v: want sb and a stopped copy", ts.runtimeIDs(t))
	}
	ts.wantNoSandbox(t, key, frozen)
	var v1snaps struct{ Snapshots []api.Snapshot }
	ts.must(t, 200, "GET", "/v1/snapshots", key, nil, &v1snaps)
	if len(v1snaps.Snapshots) != 0 {
		t.Errorf("/v1/snapshots lists %+v: E2B snapshots are not workspace snapshots", v1snaps)
	}
	// The sandbox runs on, as it was.
	if got := ts.execAs(t, key, sb.SandboxID, "", "cat /home/user/notes.txt"); got != "notes\n" || ts.state(t, key, sb.SandboxID) != "running" {
		t.Errorf("the sandbox after its snapshot: %q, %s", got, ts.state(t, key, sb.SandboxID))
	}

	// Another team, on every route.
	for _, c := range []struct{ method, path string }{
		{"POST", "/sandboxes/" + sb.SandboxID + "/snapshots"},
		{"DELETE", "/templates/" + sid},
		{"POST", "/sandboxes/" + sb.SandboxID + "/fork"},
	} {
		resp, data := ts.e2bCall(t, c.method, c.path, other, map[string]any{}, nil)
		wantE2BError(t, "another team: "+c.method+" "+c.path, resp, data, 404)
	}
	resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", other, map[string]any{"templateID": sid}, nil)
	wantE2BError(t, "another team creates from the snapshot", resp, data, 404)
	// The snapshot has the internet (the E2B default); a create from it
	// that asks for none is refused, not given the internet.
	resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": sid, "allow_internet_access": false}, nil)
	wantE2BError(t, "a create from the snapshot without the internet", resp, data, 400)
	if got := ts.e2bSnapshotIDs(t, other); len(got) != 0 {
		t.Errorf("another team lists snapshots %v", got)
	}
	ts.wantNoSandbox(t, other, frozen)

	// The original goes; sandboxes made from the snapshot have its disk
	// and environment, and the create's own envs, metadata and timeout.
	ts.e2bCall(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil)
	a := ts.e2bCreate(t, key, map[string]any{"templateID": sid, "timeout": 300, "envVars": map[string]string{"FROM_CREATE": "c"},
		"metadata": map[string]string{"which": "a"}})
	b := ts.e2bCreate(t, key, map[string]any{"templateID": sid})
	for _, s := range []e2bSandbox{a, b} {
		if got := ts.execAs(t, key, s.SandboxID, "", "cat /home/user/notes.txt /etc/cove-marker; whoami"); got != "notes\nmarker\nuser\n" {
			t.Errorf("sandbox %s from the snapshot: %q, want its files and user", s.SandboxID, got)
		}
		if s.TemplateID != sid || s.EnvdAccessToken == "" || s.EnvdAccessToken == sb.EnvdAccessToken {
			t.Errorf("sandbox from the snapshot: %+v: want the snapshot as template and a token of its own", s)
		}
	}
	if got := ts.execAs(t, key, a.SandboxID, "", `echo "$FROM_ORIGINAL $FROM_CREATE"`); got != "o c\n" {
		t.Errorf("environment of a sandbox from the snapshot: %q, want the original's and the create's", got)
	}
	// Paused and resumed, it keeps them.
	if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+a.SandboxID+"/pause", key, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: %d %s", resp.StatusCode, data)
	}
	if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+a.SandboxID+"/connect", key, map[string]any{"timeout": 300}, nil); resp.StatusCode != 201 {
		t.Fatalf("resume: %d %s", resp.StatusCode, data)
	}
	if got := ts.execAs(t, key, a.SandboxID, "", `echo "$FROM_ORIGINAL $FROM_CREATE"`); got != "o c\n" {
		t.Errorf("environment of a sandbox from the snapshot, resumed: %q, want the original's and the create's", got)
	}
	var d e2bDetail
	resp, data = ts.e2bCall(t, "GET", "/sandboxes/"+a.SandboxID, key, nil, nil)
	if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.Metadata["which"] != "a" || d.State != "running" ||
		d.EndAt.Before(time.Now().Add(200*time.Second)) || d.EndAt.After(time.Now().Add(301*time.Second)) {
		t.Errorf("a sandbox from the snapshot: %d %s: want running, its metadata, ending in 300 s", resp.StatusCode, data)
	}

	// The two are independent of each other and of the snapshot.
	ts.execAs(t, key, a.SandboxID, "root", "echo changed > /etc/cove-marker; echo a > /home/user/a.txt")
	if got := ts.execAs(t, key, b.SandboxID, "", "cat /etc/cove-marker; ls /home/user"); got != "marker\nnotes.txt\n" {
		t.Errorf("b after a wrote: %q", got)
	}
	c := ts.e2bCreate(t, key, map[string]any{"templateID": sid})
	if got := ts.execAs(t, key, c.SandboxID, "", "cat /etc/cove-marker"); got != "marker\n" {
		t.Errorf("a third sandbox from the snapshot: %q", got)
	}

	// Deleted: its disk goes; the sandboxes made from it stay.
	resp, data = ts.e2bCall(t, "DELETE", "/templates/"+sid, key, nil, nil)
	if resp.StatusCode != 204 {
		t.Fatalf("delete the snapshot: %d %s", resp.StatusCode, data)
	}
	if got := ts.runtimeState(t, frozen); got != "gone" {
		t.Errorf("the deleted snapshot's copy in the runtime: %s, want gone", got)
	}
	resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": sid}, nil)
	wantE2BError(t, "create from the deleted snapshot", resp, data, 404)
	if got := ts.execAs(t, key, b.SandboxID, "", "cat /etc/cove-marker"); got != "marker\n" {
		t.Errorf("a sandbox made from the deleted snapshot: %q", got)
	}
}

// wantNoSandbox checks that id is no sandbox of key's team to any route
// or list, /v1's or E2B's.
func (ts *testServer) wantNoSandbox(t *testing.T, key, id string) {
	t.Helper()
	for _, path := range []string{"/v1/sandboxes/" + id, "/v1/sandboxes/" + id + "/resume"} {
		method := "GET"
		if strings.HasSuffix(path, "/resume") {
			method = "POST"
		}
		if code, data := ts.call(t, method, path, key, nil); code != http.StatusNotFound {
			t.Errorf("%s %s: %d %s, want 404", method, path, code, data)
		}
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + id}, {"DELETE", "/sandboxes/" + id}, {"POST", "/sandboxes/" + id + "/connect"},
		{"POST", "/sandboxes/" + id + "/snapshots"}, {"POST", "/sandboxes/" + id + "/fork"},
	} {
		resp, data := ts.e2bCall(t, c.method, c.path, key, map[string]any{"timeout": 60}, nil)
		wantE2BError(t, c.method+" "+c.path+" of a frozen copy", resp, data, 404)
	}
	var listed []e2bListed
	resp, data := ts.e2bCall(t, "GET", "/v2/sandboxes", key, nil, nil)
	if resp.StatusCode != 200 || json.Unmarshal(data, &listed) != nil {
		t.Fatalf("E2B list: %d %s", resp.StatusCode, data)
	}
	for _, l := range listed {
		if l.SandboxID == id {
			t.Errorf("the E2B list has the frozen copy %s", id)
		}
	}
	// /v1's list, a page of one at a time: a short page is fine, the
	// copy is not.
	cursor := ""
	for range 10 {
		var page api.SandboxList
		ts.must(t, 200, "GET", "/v1/sandboxes?limit=1&cursor="+cursor, key, nil, &page)
		if slices.ContainsFunc(page.Sandboxes, func(s api.Sandbox) bool { return s.ID == id }) {
			t.Errorf("/v1 lists the frozen copy %s", id)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
}

// TestE2BSnapshotKept: the lifecycle's TTL and retention and a restart's
// reconcile leave a snapshot alone.
func TestE2BSnapshotKept(t *testing.T) {
	clock := newFakeClock()
	ts := newTestServer(t, Config{Now: clock.Now, Retention: time.Hour})
	key := ts.e2bKey(t, "kept")
	// No cleanups on this server: it is restarted; the runtime's
	// sandboxes are deleted at the end all the same.
	var sb e2bSandbox
	resp, data := ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": "base", "timeout": 60}, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sb) != nil {
		t.Fatalf("create: %d %s", resp.StatusCode, data)
	}
	ts.execAs(t, key, sb.SandboxID, "root", "echo kept > /etc/cove-kept")
	var sn e2b.SnapshotInfo
	resp, data = ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/snapshots", key, nil, nil)
	if resp.StatusCode != 201 || json.Unmarshal(data, &sn) != nil {
		t.Fatalf("snapshot: %d %s", resp.StatusCode, data)
	}
	sid := sn.SnapshotID
	stopped := ts.create(t, key, api.CreateSandbox{TTLSeconds: 86400})
	ts.must(t, 200, "POST", "/v1/sandboxes/"+stopped.ID+"/stop", key, nil, nil)

	clock.Add(2 * time.Hour) // past sb's timeout and the retention
	eventually(t, "the sandbox past its timeout to go", func() bool { return ts.state(t, key, sb.SandboxID) == "gone" })
	eventually(t, "the sandbox stopped 2 hours ago to go", func() bool { return ts.state(t, key, stopped.ID) == "gone" })
	if got := ts.e2bSnapshotIDs(t, key); !slices.Equal(got, []string{sid}) {
		t.Fatalf("snapshots after the lifecycle ran: %v, want %s", got, sid)
	}
	if ids := ts.runtimeIDs(t); len(ids) != 1 {
		t.Fatalf("the runtime's sandboxes: %v, want the snapshot's copy", ids)
	}

	ts = ts.restart(t)
	if got := ts.e2bSnapshotIDs(t, key); !slices.Equal(got, []string{sid}) {
		t.Fatalf("snapshots after a restart: %v, want %s", got, sid)
	}
	from := ts.e2bCreate(t, key, map[string]any{"templateID": sid, "timeout": 300})
	if got := ts.execAs(t, key, from.SandboxID, "", "cat /etc/cove-kept"); got != "kept\n" {
		t.Errorf("a sandbox from the snapshot after a restart: %q", got)
	}
}

// TestE2BSnapshotDiskSDK runs testdata/e2b/snapdisk.test.mjs with the
// pinned E2B JS SDK, envd reached by host name and by headers.
func TestE2BSnapshotDiskSDK(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	for _, mode := range []string{"domain", "header"} {
		t.Run(mode, func(t *testing.T) {
			key := es.e2bKey(t, "snapdisk-"+mode)
			out, err := es.node(t, sdk, es.modeEnv(key, mode), "--test-reporter=spec", "snapdisk.test.mjs")
			if err != nil {
				t.Fatalf("node snapdisk.test.mjs (%s routing): %v\n%s", mode, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// TestE2BSnapshotQuota: a snapshot is not a sandbox of the team's quota,
// a paused sandbox can be snapshotted and stays paused, and a sandbox
// made from a snapshot is within the quota.
func TestE2BSnapshotQuota(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "snapquota")
	ts.must(t, 200, "PUT", "/v1/teams/snapquota/quota", ts.Admin, api.Quota{Sandboxes: 1}, nil)
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base", "timeout": 300})
	ts.execAs(t, key, sb.SandboxID, "", "echo paused > /home/user/p.txt")
	if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/pause", key, nil, nil); resp.StatusCode != 204 {
		t.Fatalf("pause: %d %s", resp.StatusCode, data)
	}
	sid := ts.e2bSnapshot(t, key, sb.SandboxID)
	ts.e2bSnapshot(t, key, sb.SandboxID) // two: neither counts
	var d e2bDetail
	resp, data := ts.e2bCall(t, "GET", "/sandboxes/"+sb.SandboxID, key, nil, nil)
	if resp.StatusCode != 200 || json.Unmarshal(data, &d) != nil || d.State != "paused" {
		t.Errorf("the paused sandbox after its snapshot: %d %s", resp.StatusCode, data)
	}
	// The team's one sandbox runs again, with two snapshots kept.
	if resp, data := ts.e2bCall(t, "POST", "/sandboxes/"+sb.SandboxID+"/connect", key, map[string]any{"timeout": 300}, nil); resp.StatusCode != 201 {
		t.Fatalf("resume at a quota of one: %d %s", resp.StatusCode, data)
	}
	resp, data = ts.e2bCall(t, "POST", "/v2/sandboxes", key, map[string]any{"templateID": sid}, nil)
	wantE2BError(t, "a second running sandbox, from the snapshot, at a quota of one", resp, data, http.StatusTooManyRequests)
	ts.e2bCall(t, "DELETE", "/sandboxes/"+sb.SandboxID, key, nil, nil)
	from := ts.e2bCreate(t, key, map[string]any{"templateID": sid})
	if got := ts.execAs(t, key, from.SandboxID, "", "cat /home/user/p.txt"); got != "paused\n" {
		t.Errorf("a sandbox from the paused sandbox's snapshot: %q", got)
	}
}
