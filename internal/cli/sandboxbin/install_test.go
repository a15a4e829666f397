package sandboxbin

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestInstall(t *testing.T) {
	dir := t.TempDir()
	bin := []byte("#!/bin/sh\necho one\n")
	got, err := install(dir, "cove-x", bin, sumOf(bin))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || filepath.Dir(got[0]) != dir {
		t.Fatalf("install: got %q, want one path in %s", got, dir)
	}
	if data, err := os.ReadFile(got[0]); err != nil || !bytes.Equal(data, bin) {
		t.Errorf("installed file: got %q (%v), want %q", data, err, bin)
	}
	if fi, err := os.Stat(got[0]); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed file: mode %v (%v), want 0755", fi.Mode(), err)
	}
	again, err := install(dir, "cove-x", bin, sumOf(bin))
	if err != nil || again[0] != got[0] {
		t.Errorf("installing again: got %q (%v), want %q", again, err, got)
	}
	two := []byte("#!/bin/sh\necho two\n")
	other, err := install(dir, "cove-x", two, sumOf(two))
	if err != nil || other[0] == got[0] {
		t.Errorf("installing other content: got %q (%v), want a path other than %q", other, err, got[0])
	}
	if none, err := install(dir, "cove-y", nil, ""); none != nil || err != nil {
		t.Errorf("installing nothing: got %q, %v; want nil, nil", none, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		t.Errorf("%s holds %d files, want the 2 installed and their stamps (no temporaries left)", dir, len(entries))
	}
}
