package sandboxbin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// installed installs bin in dir and returns its path.
func installed(t *testing.T, dir string, bin []byte) string {
	t.Helper()
	got, err := install(dir, "cove-x", bin, sumOf(bin))
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

// wantBin checks that install, run again, returns path holding bin as a
// regular file only its owner can write.
func wantBin(t *testing.T, dir, path string, bin []byte) {
	t.Helper()
	got, err := install(dir, "cove-x", bin, sumOf(bin))
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != path {
		t.Fatalf("install: got %s, want %s", got[0], path)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: mode %v (%v), want a regular file 0755", path, fi.Mode(), err)
	}
	if data, err := os.ReadFile(path); err != nil || !bytes.Equal(data, bin) {
		t.Errorf("%s holds %q (%v), want the embedded program %q", path, data, err, bin)
	}
}

// TestInstallReplacesTamperedCopy: the installed programs run as every
// sandbox's supervisor and pid 1, so a copy changed on disk must never be
// used, whatever was done to hide the change.
func TestInstallReplacesTamperedCopy(t *testing.T) {
	bin := []byte("#!/bin/sh\necho the real one\n")
	evil := []byte("#!/bin/sh\necho the evil one\n") // same size
	tests := []struct {
		name   string
		tamper func(t *testing.T, path string)
	}{
		{"rewritten in place, same size, mtime put back", func(t *testing.T, path string) {
			fi, _ := os.Stat(path)
			if err := os.WriteFile(path, evil, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}},
		{"swapped for another file by rename", func(t *testing.T, path string) {
			other := filepath.Join(filepath.Dir(path), "other")
			if err := os.WriteFile(other, evil, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by a symlink", func(t *testing.T, path string) {
			other := filepath.Join(t.TempDir(), "evil")
			if err := os.WriteFile(other, evil, 0o755); err != nil {
				t.Fatal(err)
			}
			os.Remove(path)
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"made writable by others", func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o777); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, 3); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := installed(t, dir, bin)
			wantBin(t, dir, path, bin) // the stamp's path
			tt.tamper(t, path)
			wantBin(t, dir, path, bin)
			wantBin(t, dir, path, bin) // and the stamp written again holds
		})
	}
}

// TestInstallTrustsOnlyItsStamp: a copy found without a stamp, or with a
// stamp of another file, is hashed before use.
func TestInstallTrustsOnlyItsStamp(t *testing.T) {
	bin := []byte("#!/bin/sh\necho the real one\n")
	evil := []byte("#!/bin/sh\necho the evil one\n")
	dir := t.TempDir()
	path := installed(t, dir, bin)
	stamp := path + ".verified"
	id, _, err := identity(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := readStamp(stamp); got != id {
		t.Fatalf("stamp holds %q, want the copy's identity %q", got, id)
	}
	// A stale copy from another build, stamp and all, under the name this
	// build's checksum gives.
	if err := os.WriteFile(path, evil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(stamp); err != nil {
		t.Fatal(err)
	}
	wantBin(t, dir, path, bin)
	// A stamp copied from another file.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, evil, 0o755); err != nil {
		t.Fatal(err)
	}
	forged, _, _ := identity(other)
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stamp, []byte(forged+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// rename changes the file's ctime on most filesystems; where it does
	// not, the forged stamp would match: this test then proves nothing.
	if now, _, _ := identity(path); now != forged {
		wantBin(t, dir, path, bin)
	}
}

// TestInstallRefuses: a directory others can write, where they could swap
// a program and its stamp together, and a build whose checksum is not its
// program's.
func TestInstallRefuses(t *testing.T) {
	bin := []byte("#!/bin/sh\necho one\n")
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if got, err := install(dir, "cove-x", bin, sumOf(bin)); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("install in a directory others can write: got %q, %v; want an error saying to chmod go-w", got, err)
	}
	dir = t.TempDir()
	stale := sumOf([]byte("an older build"))
	if got, err := install(dir, "cove-x", bin, stale); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("install with a stale checksum: got %q, %v; want an error saying to rebuild", got, err)
	}
	if got, err := install(dir, "cove-x", bin, "ab12"); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("install without a checksum: got %q, %v; want an error saying to rebuild", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("refused installs left %d files in %s", len(entries), dir)
	}
}

// TestInstallTamperRightAfterStamp: file times come from a coarse clock,
// so a change in the same tick as the install would keep the ctime the
// stamp holds; the stamp is written only after that tick.
func TestInstallTamperRightAfterStamp(t *testing.T) {
	bin := []byte("#!/bin/sh\necho the real one\n")
	evil := []byte("#!/bin/sh\necho the evil one\n")
	for i := 0; i < 20; i++ {
		dir := t.TempDir()
		path := installed(t, dir, bin)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteAt(evil, 0)
		f.Close()
		wantBin(t, dir, path, bin)
	}
}

// TestEmbeddedSums: a build with the programs embedded carries their
// checksums, as make build writes them.
func TestEmbeddedSums(t *testing.T) {
	if len(Binary) == 0 {
		t.Skip("built without -tags embedsandbox: nothing embedded")
	}
	for _, p := range []struct {
		name string
		bin  []byte
		sum  string
	}{{"cove-sandbox", Binary, BinarySum}, {"cove-shim", Shim, ShimSum}} {
		if got := sumOf(p.bin); got != strings.TrimSpace(p.sum) {
			t.Errorf("%s: embedded checksum %q, the program's is %s: make build writes both", p.name, p.sum, got)
		}
	}
}

// BenchmarkInstall times install of a 25 MB program already in place, as
// every start of the local runtime does: verified by its stamp, and, for
// comparison, by hashing it as cove did before stamps.
func BenchmarkInstall(b *testing.B) {
	bin := bytes.Repeat([]byte("cove"), 25<<20/4)
	sum := sumOf(bin)
	dir := b.TempDir()
	if _, err := install(dir, "cove-x", bin, sum); err != nil {
		b.Fatal(err)
	}
	b.Run("stamp", func(b *testing.B) {
		for b.Loop() {
			if _, err := install(dir, "cove-x", bin, sum); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hash", func(b *testing.B) {
		for b.Loop() {
			s := sha256.Sum256(bin)
			_ = filepath.Join(dir, "cove-x-"+hex.EncodeToString(s[:8]))
		}
	})
}
