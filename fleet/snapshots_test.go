package fleet

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A write cut short leaves neither the file nor its temp behind.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "team", "snap.tar")
	boom := errors.New("boom")
	if _, err := writeAtomic(name, func(w io.Writer) error {
		w.Write([]byte("half a tar"))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(name)); len(ents) != 0 {
		t.Errorf("after a failed write the directory holds %v", ents)
	}
	n, err := writeAtomic(name, func(w io.Writer) error {
		_, err := io.WriteString(w, "whole")
		return err
	})
	if data, _ := os.ReadFile(name); err != nil || n != 5 || string(data) != "whole" {
		t.Errorf("write: %d %v %q", n, err, data)
	}
	if ents, _ := os.ReadDir(filepath.Dir(name)); len(ents) != 1 {
		t.Errorf("after a write the directory holds %v, want only the file", ents)
	}
}
