package sbutil

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCapWriter: whole lines up to the limit, one note, then nothing.
func TestCapWriter(t *testing.T) {
	var buf bytes.Buffer
	w := CapWriter(&buf, 10)
	for range 100 {
		if n, err := w.Write([]byte("line\n")); n != 5 || err != nil {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	if got := buf.String(); got != "line\nline\nlog limit reached: further lines of this run are dropped\n" {
		t.Errorf("capped log %q", got)
	}
}

// TestTrimLog: a file over max keeps its last keep bytes; a small or
// missing one is left as it is.
func TestTrimLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sandbox.log")
	if err := TrimLog(path, 10, 5); err != nil {
		t.Fatalf("missing file: %v", err)
	}
	os.WriteFile(path, []byte(strings.Repeat("a", 100)+"tail!"), 0o600)
	if err := TrimLog(path, 200, 5); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); len(b) != 105 {
		t.Errorf("a file under max was changed to %q", b)
	}
	if err := TrimLog(path, 50, 5); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "(earlier lines trimmed)\ntail!" {
		t.Errorf("trimmed to %q", b)
	}
}
