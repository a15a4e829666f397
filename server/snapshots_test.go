package server

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

func TestSnapshots(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	ts.must(t, 204, "PUT", fileURL(sb.ID, "", "src/main.txt"), key, "hello", nil)
	if r := ts.run(t, key, sb.ID, api.Exec{Cmd: "ln -s src/main.txt link && chmod 755 src", Shell: true}); exitCode(r.exit) != 0 {
		t.Fatalf("setup: %+v %s", r.exit, r.stderr)
	}

	var snap api.Snapshot
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", key, nil, &snap)
	if !strings.HasPrefix(snap.ID, "snap-") || snap.SandboxID != sb.ID || snap.Size <= 0 || snap.CreatedAt.IsZero() {
		t.Errorf("created %+v", snap)
	}
	var list api.SnapshotList
	ts.must(t, 200, "GET", "/v1/snapshots", key, nil, &list)
	if len(list.Snapshots) != 1 || list.Snapshots[0] != snap {
		t.Errorf("list %+v, want just %+v", list.Snapshots, snap)
	}
	var got api.Snapshot
	ts.must(t, 200, "GET", "/v1/snapshots/"+snap.ID, key, nil, &got)
	if got != snap {
		t.Errorf("get %+v, want %+v", got, snap)
	}
	code, data := ts.call(t, "GET", "/v1/snapshots/"+snap.ID+"/download", key, nil)
	members := readTarMembers(t, data)
	if code != 200 || int64(len(data)) != snap.Size || members["src/main.txt"] != "hello" || members["link"] != "-> src/main.txt" {
		t.Errorf("download: %d, %d bytes (size %d), members %v", code, len(data), snap.Size, members)
	}
	// Only whole files are left in the team's directory.
	dir := filepath.Join(ts.cfg.DataDir, "snapshots", "alpha")
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != snap.ID+".tar" {
		t.Errorf("snapshot dir holds %v, want only %s.tar", ents, snap.ID)
	}

	// The source changes and goes; the snapshot keeps its workspace.
	ts.must(t, 204, "PUT", fileURL(sb.ID, "", "src/main.txt"), key, "changed", nil)
	ts.must(t, 204, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil, nil)

	var restored api.Sandbox
	ts.must(t, 201, "POST", "/v1/snapshots/"+snap.ID+"/restore", key, nil, &restored)
	if restored.ID == sb.ID || restored.State != "running" {
		t.Errorf("restored %+v", restored)
	}
	r := ts.run(t, key, restored.ID, api.Exec{Cmd: "cat link; stat -c %a src", Shell: true})
	if r.stdout != "hello755\n" {
		t.Errorf("restored workspace: %q %q, want the snapshot's file through its link and the dir's mode", r.stdout, r.stderr)
	}
	// A create request's fields apply.
	var labelled api.Sandbox
	ts.must(t, 201, "POST", "/v1/snapshots/"+snap.ID+"/restore", key, api.CreateSandbox{Labels: map[string]string{"from": "snap"}, Root: "/work"}, &labelled)
	if labelled.Labels["from"] != "snap" || labelled.Root != "/work" {
		t.Errorf("restored with a body: %+v", labelled)
	}
	if code, data := ts.call(t, "GET", fileURL(labelled.ID, "", "/work/src/main.txt"), key, nil); code != 200 || string(data) != "hello" {
		t.Errorf("restored under another root: %d %q", code, data)
	}
	for _, body := range []any{
		api.CreateSandbox{Size: "huge"},
		`{"manifest":{"entries":{}}}`,
		`{"nope":1}`,
	} {
		if code, data := ts.call(t, "POST", "/v1/snapshots/"+snap.ID+"/restore", key, body); code != 400 {
			t.Errorf("restore with %v: %d %s, want 400", body, code, data)
		}
	}

	ts.must(t, 204, "DELETE", "/v1/snapshots/"+snap.ID, key, nil, nil)
	for _, p := range []string{"/v1/snapshots/" + snap.ID, "/v1/snapshots/" + snap.ID + "/download"} {
		if code, _ := ts.call(t, "GET", p, key, nil); code != 404 {
			t.Errorf("GET %s after delete: %d, want 404", p, code)
		}
	}
	if code, _ := ts.call(t, "POST", "/v1/snapshots/"+snap.ID+"/restore", key, nil); code != 404 {
		t.Errorf("restore after delete: %d, want 404", code)
	}
	if _, err := os.Stat(filepath.Join(dir, snap.ID+".tar")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted snapshot's file: %v, want it gone", err)
	}
	ts.must(t, 200, "GET", "/v1/snapshots", key, nil, &list)
	if len(list.Snapshots) != 0 {
		t.Errorf("list after delete: %+v", list.Snapshots)
	}
}

// Another team's snapshots are not found, whatever the call, and it
// cannot snapshot a sandbox not its own.
func TestSnapshotIsolation(t *testing.T) {
	ts := newTestServer(t, Config{})
	alpha, beta := ts.teamKey(t, "alpha"), ts.teamKey(t, "beta")
	sb := ts.create(t, alpha, api.CreateSandbox{})
	ts.must(t, 204, "PUT", fileURL(sb.ID, "", "f"), alpha, "x", nil)
	var snap api.Snapshot
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", alpha, nil, &snap)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/sandboxes/" + sb.ID + "/snapshots", nil},
		{"GET", "/v1/snapshots/" + snap.ID, nil},
		{"GET", "/v1/snapshots/" + snap.ID + "/download", nil},
		{"POST", "/v1/snapshots/" + snap.ID + "/restore", nil},
		{"POST", "/v1/snapshots/" + snap.ID + "/restore", api.CreateSandbox{Size: "small"}},
		{"DELETE", "/v1/snapshots/" + snap.ID, nil},
	} {
		code, data := ts.call(t, c.method, c.path, beta, c.body)
		if code != 404 || apiError(t, data).Code != api.CodeNotFound {
			t.Errorf("%s %s with another team's key: %d %s, want 404", c.method, c.path, code, data)
		}
	}
	var list api.SnapshotList
	ts.must(t, 200, "GET", "/v1/snapshots", beta, nil, &list)
	if len(list.Snapshots) != 0 {
		t.Errorf("another team lists %+v", list.Snapshots)
	}
	var sbs api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", beta, nil, &sbs)
	if len(sbs.Sandboxes) != 0 {
		t.Errorf("another team's restore made %+v", sbs.Sandboxes)
	}
	ts.must(t, 200, "GET", "/v1/snapshots", alpha, nil, &list)
	if len(list.Snapshots) != 1 || list.Snapshots[0] != snap {
		t.Errorf("alpha's snapshots after beta's calls: %+v", list.Snapshots)
	}
	ts.must(t, 200, "GET", "/v1/snapshots/"+snap.ID+"/download", alpha, nil, nil)
}
