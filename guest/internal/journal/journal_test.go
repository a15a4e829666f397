package journal

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/sandbox"
)

// TestBounded: a flood of lines with huge, invalid fields keeps the
// newest MaxEntries lines, each field cut to MaxField bytes of valid
// UTF-8.
func TestBounded(t *testing.T) {
	j := New()
	huge := strings.Repeat("é", 1<<20) + "\xff"
	for i := range 3 * MaxEntries {
		j.Add("info", "process started", "pid", fmt.Sprint(i), "cmd", huge, "x")
	}
	got := j.Entries()
	if len(got) != MaxEntries {
		t.Fatalf("%d lines kept, want %d", len(got), MaxEntries)
	}
	if first, last := got[0].Fields["pid"], got[len(got)-1].Fields["pid"]; first != fmt.Sprint(2*MaxEntries) || last != fmt.Sprint(3*MaxEntries-1) {
		t.Errorf("kept pids %s to %s, want the newest", first, last)
	}
	cmd := got[0].Fields["cmd"]
	if len(cmd) > MaxField || !utf8.ValidString(cmd) || !strings.HasSuffix(cmd, "…") {
		t.Errorf("cmd field of %d bytes (valid %v), want at most %d, valid, cut with …", len(cmd), utf8.ValidString(cmd), MaxField)
	}
	if len(got[0].Fields) != 2 {
		t.Errorf("fields %v: the odd key is dropped", got[0].Fields)
	}
}

// TestClean: a line from the wire is held to the journal's bounds.
func TestClean(t *testing.T) {
	fields := map[string]string{}
	for i := range 50 {
		fields[fmt.Sprint(i)] = strings.Repeat("x", 10000)
	}
	e := Clean(sandbox.LogEntry{Level: "panic", Message: strings.Repeat("m", 10000), Fields: fields})
	if e.Level != "info" || len(e.Message) > MaxField || len(e.Fields) != maxFields {
		t.Errorf("cleaned: level %q, message %d bytes, %d fields", e.Level, len(e.Message), len(e.Fields))
	}
	for _, v := range e.Fields {
		if len(v) > MaxField {
			t.Errorf("field of %d bytes", len(v))
		}
	}
}
