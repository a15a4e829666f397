package web

import (
	"log/slog"
	"testing"
)

// TestHostDetail: paths into the server's directory and into a local
// sandbox's state directory, wherever it is, are host detail; a
// sandbox's own paths are not.
func TestHostDetail(t *testing.T) {
	e := &Errors{Log: slog.New(slog.DiscardHandler), DataDir: "/srv/cove"}
	for msg, want := range map[string]bool{
		"opening disk in /data/x/sb-0123456789ab/disk: no disk there": true,
		"reading /opt/c/sb-0123456789ab/state.json: EOF":              true,
		"writing /srv/cove/snapshots/t/snap.tar: EIO":                 true,
		"loop device /dev/loop7 busy":                                 true,
		`writing "/workspace/more": the sandbox's disk is full`:       false,
		"/workspace/sb-0123456789ab/notes.txt: not found":             false,
	} {
		if got := e.HostDetail(msg); got != want {
			t.Errorf("HostDetail(%q) = %v, want %v", msg, got, want)
		}
	}
}
