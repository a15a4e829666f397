package tarball

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
)

// applyLayers applies each layer in turn to a fresh root and finishes.
func applyLayers(t *testing.T, root string, layers ...[]byte) ([]string, error) {
	t.Helper()
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var notes []string
	l := NewLayers(r, LayerOptions{Note: func(s string) { notes = append(notes, s) }})
	for i, b := range layers {
		if err := l.Apply(context.Background(), bytes.NewReader(b)); err != nil {
			return notes, fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return notes, l.Finish()
}

// layerTree lists a root: path -> "d 0755", "f 0644 content", "l target".
func layerTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, _ := os.Lstat(p)
		mode := fi.Sys().(*syscall.Stat_t).Mode & 0o7777
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "l " + target
		case fi.IsDir():
			out[rel] = fmt.Sprintf("d %04o", mode)
		default:
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("f %04o %s", mode, b)
		}
		return nil
	})
	return out
}

// TestLayers: a layer's rules (setuid bits, absolute links, hard links to
// a lower layer, devices skipped, not even their directory made) and the
// whiteouts, which hide lower
// layers only.
func TestLayers(t *testing.T) {
	_, root := sandboxDirs(t)
	su := file("bin/su", "su")
	su.hdr.Mode = 0o4755
	tmp := dir("tmp/")
	tmp.hdr.Mode = 0o1777
	ro := dir("ro/")
	ro.hdr.Mode = 0o555
	lower := buildTar(t, dir("bin/"), su, file("bin/tool", "v1"), hardlink("bin/tool-link", "bin/tool"),
		symlink("etc/abs", "/bin/tool"), file("opt/old/a", "a"), file("del/me", "bye"), file("del/keep", "stay"),
		special("dev/null", tar.TypeChar), tmp, ro, file("ro/f", "x"))
	upper := buildTar(t, file("del/.wh.me", ""), file("del/new", "n"), file("del/.wh.new", ""),
		dir("opt/old/"), file("opt/old/.wh..wh..opq", ""), file("opt/old/b", "b"),
		file("bin/tool", "v2"), file("ro/g", "later"), file(".wh..wh.plnk", ""))
	notes, err := applyLayers(t, root, lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"bin": "d 0755", "bin/su": "f 4755 su", "bin/tool": "f 0644 v2", "bin/tool-link": "f 0644 v1",
		"etc": "d 0755", "etc/abs": "l /bin/tool",
		"opt": "d 0755", "opt/old": "d 0755", "opt/old/b": "f 0644 b",
		"del": "d 0755", "del/keep": "f 0644 stay", "del/new": "f 0644 n", // the whiteout of new hides lower layers only
		"tmp": "d 1777", "ro": "d 0555", "ro/f": "f 0644 x", "ro/g": "f 0644 later",
	}
	if diff := cmp.Diff(want, layerTree(t, root)); diff != "" {
		t.Errorf("tree (-want +got):\n%s", diff)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "skipping character device /dev/null") {
		t.Errorf("notes: %q", notes)
	}
}

func TestLayersHostile(t *testing.T) {
	tests := []struct {
		name   string
		layers [][]byte
		member string
	}{
		{"dotdot", [][]byte{buildTar(t, file("../outside/x", "x"))}, "../outside/x"},
		{"absolute", [][]byte{buildTar(t, file("/tmp/x", "x"))}, "/tmp/x"},
		{"write through symlink", [][]byte{buildTar(t, symlink("up", "../outside"), file("up/x", "x"))}, "up/x"},
		{"symlink in lower layer", [][]byte{buildTar(t, symlink("up", "../outside")), buildTar(t, file("up/x", "x"))}, "up/x"},
		{"whiteout through symlink", [][]byte{buildTar(t, symlink("up", "../outside")), buildTar(t, file("up/.wh.sentinel", ""))}, "up/.wh.sentinel"},
		{"opaque through symlink", [][]byte{buildTar(t, symlink("up", "../outside")), buildTar(t, file("up/.wh..wh..opq", ""))}, "up/.wh..wh..opq"},
		{"hardlink out", [][]byte{buildTar(t, hardlink("h", "../outside/sentinel"))}, "h"},
		{"hardlink absolute", [][]byte{buildTar(t, hardlink("h", "/etc/shadow"))}, "h"},
		{"hardlink to a directory", [][]byte{buildTar(t, dir("d/"), hardlink("h", "d"))}, "h"},
		{"unknown type", [][]byte{buildTar(t, special("x", 'Z'))}, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp, root := sandboxDirs(t)
			_, err := applyLayers(t, root, tt.layers...)
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.member)) {
				t.Fatalf("got %v, want ErrInvalid naming %q", err, tt.member)
			}
			checkOutside(t, tmp, "up")
		})
	}
}

// TestLayersHostileReplace: a layer that names what a lower one (or it
// itself) made a symlink out of the root replaces the link and never
// writes, links, chmods or removes through it.
func TestLayersHostileReplace(t *testing.T) {
	tests := []struct {
		name   string
		layers func(tmp string) [][]byte
		want   map[string]string // the tree afterwards; nil when Apply must fail
		member string            // the refused member, when want is nil
	}{
		{"file over a symlink", func(string) [][]byte {
			return [][]byte{buildTar(t, symlink("s", "../outside/sentinel")), buildTar(t, file("s", "new"))}
		}, map[string]string{"s": "f 0644 new"}, ""},
		{"directory over a symlink", func(string) [][]byte {
			return [][]byte{buildTar(t, symlink("d", "../outside")), buildTar(t, dir("d/"), file("d/sentinel", "new"))}
		}, map[string]string{"d": "d 0755", "d/sentinel": "f 0644 new"}, ""},
		{"hard link to a symlink, then a file over it", func(string) [][]byte {
			return [][]byte{buildTar(t, symlink("s", "../outside/sentinel"), hardlink("h", "s")), buildTar(t, file("h", "new"))}
		}, map[string]string{"s": "l ../outside/sentinel", "h": "f 0644 new"}, ""},
		{"directory made a symlink before Finish", func(string) [][]byte {
			return [][]byte{buildTar(t, member{tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o700}, ""}), buildTar(t, symlink("d", "../outside"))}
		}, map[string]string{"d": "l ../outside"}, ""},
		{"absolute symlink as a parent", func(tmp string) [][]byte {
			return [][]byte{buildTar(t, symlink("abs", filepath.Join(tmp, "outside"))), buildTar(t, file("abs/sentinel", "new"))}
		}, nil, "abs/sentinel"},
		{"whiteout through an absolute symlink", func(tmp string) [][]byte {
			return [][]byte{buildTar(t, symlink("abs", filepath.Join(tmp, "outside"))), buildTar(t, file("abs/.wh.sentinel", ""))}
		}, nil, "abs/.wh.sentinel"},
		{"hard link through a symlinked parent", func(string) [][]byte {
			return [][]byte{buildTar(t, symlink("up", "../outside")), buildTar(t, hardlink("h", "up/sentinel"))}
		}, nil, "h"},
		{"whiteout of dot", func(string) [][]byte {
			return [][]byte{buildTar(t, dir("a/"), file("a/x", "x")), buildTar(t, file("a/.wh..", ""))}
		}, nil, "a/.wh.."},
		{"whiteout of dot-dot", func(string) [][]byte {
			return [][]byte{buildTar(t, dir("a/"), dir("a/b/"), file("a/x", "x")), buildTar(t, file("a/b/.wh...", ""))}
		}, nil, "a/b/.wh..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp, root := sandboxDirs(t)
			_, err := applyLayers(t, root, tt.layers(tmp)...)
			if tt.want == nil {
				if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.member)) {
					t.Fatalf("got %v, want ErrInvalid naming %q", err, tt.member)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tt.want, layerTree(t, root)); diff != "" {
					t.Errorf("tree (-want +got):\n%s", diff)
				}
			}
			fi, err := os.Stat(filepath.Join(tmp, "outside"))
			if err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("outside: %v, %v; want its mode 0755 untouched", fi.Mode(), err)
			}
			checkOutside(t, tmp, "s", "d", "abs", "up")
		})
	}
}
