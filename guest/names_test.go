package guest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	fspb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/sandbox"
)

// Names that are not UTF-8 (a Latin-1 "é" is the byte 0xE9) are listed,
// stated, read, written, moved and removed through their encoded form
// (encodePath), by the Session and through envd's protocol alike; listing
// a directory that holds one used to fail the whole call with an
// internal error, since protobuf strings must be UTF-8.
func TestNonUTF8Names(t *testing.T) {
	srv, c := startTestServer(t, Config{})
	ws := filepath.Join(srv.cfg.Root, "workspace")
	for name, content := range map[string]string{
		"caf\xe9.txt":         "latin-1",
		"dir\xff/inner\xfe":   "inner",
		"quote\u201bname":     "has the escape character",
		"plain.txt":           "plain",
		"esc\u201b41-ish\xe9": "escape-like",
	} {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("caf\xe9.txt", filepath.Join(ws, "link\xe9")); err != nil {
		t.Fatal(err)
	}
	s := NewSession(c, SessionOptions{ID: "names"})
	ctx := context.Background()

	fis, err := s.List(ctx, "/workspace", 2)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	got := map[string]string{}
	for _, fi := range fis {
		got[fi.Path] = fi.SymlinkTarget
	}
	want := map[string]string{
		"/workspace/caf\u201bE9.txt":               "",
		"/workspace/dir\u201bFF":                   "",
		"/workspace/dir\u201bFF/inner\u201bFE":     "",
		"/workspace/quote\u201b\u201bname":         "",
		"/workspace/plain.txt":                     "",
		"/workspace/esc\u201b\u201b41-ish\u201bE9": "",
		"/workspace/link\u201bE9":                  "caf\u201bE9.txt",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("List paths (-want +got):\n%s", diff)
	}

	// Every listed path leads back to its file.
	for _, tt := range []struct{ path, content string }{
		{"/workspace/caf\u201bE9.txt", "latin-1"},
		{"dir\u201bFF/inner\u201bFE", "inner"},
		{"/workspace/quote\u201b\u201bname", "has the escape character"},
		{"/workspace/esc\u201b\u201b41-ish\u201bE9", "escape-like"},
		{"/workspace/link\u201bE9", "latin-1"},
		// A lone escape character that escapes nothing is taken as is.
		{"/workspace/quote\u201bname", "has the escape character"},
	} {
		fi, err := s.Stat(ctx, tt.path)
		if err != nil {
			t.Errorf("Stat(%q): %v", tt.path, err)
			continue
		}
		if !utf8.ValidString(fi.Name) || !utf8.ValidString(fi.Path) {
			t.Errorf("Stat(%q) = %q, %q: not UTF-8", tt.path, fi.Name, fi.Path)
		}
		rc, err := s.ReadFile(ctx, tt.path)
		if err != nil {
			t.Errorf("ReadFile(%q): %v", tt.path, err)
			continue
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if string(data) != tt.content {
			t.Errorf("ReadFile(%q) = %q, want %q", tt.path, data, tt.content)
		}
	}

	// Writes, moves and removes reach the raw names on disk.
	if err := s.WriteFile(ctx, "new\u201bFF.txt", strings.NewReader("written"), 0o600); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(ws, "new\xff.txt")); err != nil || string(data) != "written" {
		t.Errorf("the file written as new\u201bFF.txt: %q, %v", data, err)
	}
	if err := s.Move(ctx, "new\u201bFF.txt", "moved\u201bFE.txt"); err != nil {
		t.Fatalf("Move: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "moved\xfe.txt")); err != nil {
		t.Errorf("the file moved to moved\u201bFE.txt: %v", err)
	}
	if err := s.Remove(ctx, "dir\u201bFF"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "dir\xff")); !os.IsNotExist(err) {
		t.Errorf("dir\u201bFF after Remove: %v", err)
	}
	// An escape never makes a separator, a NUL or a dot.
	if _, err := s.Stat(ctx, "..\u201b2Fetc"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Stat(..\u201b2Fetc) = %v, want not found", err)
	}

	// envd's protocol, as an E2B SDK speaks it: no confinement, the
	// Connect listing and the HTTP file endpoints.
	res, err := c.FS.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: "/workspace"}))
	if err != nil {
		t.Fatalf("envd ListDir: %v", err)
	}
	var names []string
	for _, e := range res.Msg.GetEntries() {
		names = append(names, e.GetName())
	}
	if !strings.Contains(strings.Join(names, "|"), "caf\u201bE9.txt") {
		t.Errorf("envd ListDir names = %q, want caf\u201bE9.txt among them", names)
	}
	get, err := c.do(ctx, http.MethodGet, "/files", url.Values{"path": {"/workspace/caf\u201bE9.txt"}}, nil, nil)
	if err != nil {
		t.Fatalf("GET /files caf\u201bE9.txt: %v", err)
	}
	data, _ := io.ReadAll(get.Body)
	get.Body.Close()
	if string(data) != "latin-1" {
		t.Errorf("GET /files caf\u201bE9.txt = %q", data)
	}
	post, err := c.do(ctx, http.MethodPost, "/files", url.Values{"path": {"/workspace/up\u201bE9"}}, bytes.NewReader([]byte("up")),
		http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		t.Fatalf("POST /files up\u201bE9: %v", err)
	}
	var entries []uploadEntry
	json.NewDecoder(post.Body).Decode(&entries)
	post.Body.Close()
	if len(entries) != 1 || entries[0].Path != "/workspace/up\u201bE9" || entries[0].Name != "up\u201bE9" {
		t.Errorf("POST /files reply = %+v, want the encoded path", entries)
	}
	if _, err := os.Stat(filepath.Join(ws, "up\xe9")); err != nil {
		t.Errorf("the uploaded file: %v", err)
	}

	// A watch names such a file encoded.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stream, err := c.FS.WatchDir(wctx, connect.NewRequest(&fspb.WatchDirRequest{Path: "/workspace"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("WatchDir did not start: %v", stream.Err())
	}
	if err := os.WriteFile(filepath.Join(ws, "watched\xe9"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if fe := stream.Msg().GetFilesystem(); fe != nil {
			if fe.GetName() != "watched\u201bE9" {
				t.Errorf("watch event name = %q, want watched\u201bE9", fe.GetName())
			}
			break
		}
	}
	if err := stream.Err(); err != nil {
		t.Errorf("WatchDir: %v", err)
	}
}
