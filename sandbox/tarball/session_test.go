package tarball_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

func TestMain(m *testing.M) { hostproctest.Main(m) }

// hostprocSession is a sandbox of real processes and files (no root
// needed); its session is a sandbox.Archiver.
func hostprocSession(t *testing.T) sandbox.Session {
	t.Helper()
	s, err := hostproctest.New(t).Create(t.Context(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// plainSession hides every optional interface of the session it wraps,
// Archiver above all.
type plainSession struct{ sandbox.Session }

func sessions(t *testing.T) map[string]func(t *testing.T) sandbox.Session {
	return map[string]func(t *testing.T) sandbox.Session{
		"hostproc": hostprocSession,
		"hostproc-without-archiver": func(t *testing.T) sandbox.Session {
			return plainSession{hostprocSession(t)}
		},
		"fake": func(t *testing.T) sandbox.Session {
			s, err := fake.New().Create(t.Context(), sandbox.Spec{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// tarOf builds a tar: name -> content; a name ending in / is a
// directory, content "-> target" a symlink.
func tarOf(t *testing.T, members ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i < len(members); i += 2 {
		name, content := members[i], members[i+1]
		hdr := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(content)), ModTime: time.Unix(1e9, 0)}
		switch {
		case strings.HasSuffix(name, "/"):
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(content, "-> "):
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, content[3:], 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content[:hdr.Size]))
	}
	tw.Close()
	return buf.Bytes()
}

// members lists a tar: name -> content ("/" for directories, "-> target"
// for symlinks).
func members(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading the tar: %v", err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			out[hdr.Name] = "/"
		case tar.TypeSymlink:
			out[hdr.Name] = "-> " + hdr.Linkname
		default:
			b, _ := io.ReadAll(tr)
			out[hdr.Name] = string(b)
		}
	}
}

// TestDirRoundTrip: a tree written with WriteDir reads back the same with
// ReadDir, whether the session archives (hostproc) or not (the fake, and
// hostproc with Archiver hidden: the per-file path on real files).
func TestDirRoundTrip(t *testing.T) {
	for name, newSession := range sessions(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := newSession(t)
			in := tarOf(t, "dir/", "", "dir/a.txt", "alpha", "dir/sub/", "", "dir/sub/b.txt", "beta", "top.txt", "top")
			if err := tarball.WriteDir(ctx, s, "up/load", bytes.NewReader(in)); err != nil {
				t.Fatalf("WriteDir: %v", err)
			}
			rc, err := s.ReadFile(ctx, "up/load/dir/sub/b.txt")
			if err != nil {
				t.Fatalf("reading an extracted file: %v", err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if string(b) != "beta" {
				t.Errorf("extracted file holds %q, want beta", b)
			}
			var out bytes.Buffer
			if err := tarball.ReadDir(ctx, s, "/workspace/up/load", &out); err != nil {
				t.Fatalf("ReadDir: %v", err)
			}
			want := map[string]string{"dir/": "/", "dir/a.txt": "alpha", "dir/sub/": "/", "dir/sub/b.txt": "beta", "top.txt": "top"}
			if diff := cmp.Diff(want, members(t, out.Bytes())); diff != "" {
				t.Errorf("ReadDir's tar (-want +got):\n%s", diff)
			}
			if err := tarball.ReadDir(ctx, s, "/workspace/nope", io.Discard); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("ReadDir of a missing directory: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestWriteDirRefusals: a hostile member is refused with ErrInvalid on
// every path, and a session that cannot make links says so.
func TestWriteDirRefusals(t *testing.T) {
	for name, newSession := range sessions(t) {
		t.Run(name, func(t *testing.T) {
			s := newSession(t)
			for _, tc := range []struct {
				name string
				tar  []byte
				says string
			}{
				{"dotdot", tarOf(t, "../evil.txt", "x"), `"../evil.txt"`},
				{"absolute", tarOf(t, "/etc/evil", "x"), `"/etc/evil"`},
				{"link out", tarOf(t, "l", "-> /etc"), `"l"`},
				{"not a tar", []byte(strings.Repeat("garbage!", 100)), "tar"},
			} {
				err := tarball.WriteDir(t.Context(), s, "d", bytes.NewReader(tc.tar))
				if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("%s: %v, want ErrInvalid naming %s", tc.name, err, tc.says)
				}
			}
			// A link inside: an Archiver makes it; the per-file path cannot.
			err := tarball.WriteDir(t.Context(), s, "d", bytes.NewReader(tarOf(t, "f", "x", "l", "-> f")))
			if _, archiver := s.(sandbox.Archiver); archiver {
				if err != nil {
					t.Errorf("a link inside, through an Archiver: %v", err)
				}
			} else if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "makes links only") {
				t.Errorf("a link inside, through the file calls: %v, want ErrInvalid saying links need a restore", err)
			}
		})
	}
}

// TestWriteDirPlantedLink: a symlink the sandbox planted in the way, to a
// directory out of the workspace, is never written through, whichever way WriteDir
// goes: the extraction refuses it, or the file calls keep to the
// workspace.
func TestWriteDirPlantedLink(t *testing.T) {
	for _, name := range []string{"hostproc", "hostproc-without-archiver"} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := sessions(t)[name](t)
			st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "mkdir -p d ../planted && ln -s ../../planted d/x", Shell: true})
			if err != nil || st.Code != 0 {
				t.Fatalf("planting the link: %v, %+v", err, st)
			}
			err = tarball.WriteDir(ctx, s, "d", bytes.NewReader(tarOf(t, "x/evil", "x")))
			if err == nil {
				t.Fatal("WriteDir wrote through a planted symlink out of the workspace")
			}
			if st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "test", Args: []string{"!", "-e", "../planted/evil"}}); err != nil || st.Code != 0 {
				t.Errorf("the link's target was written: %v, %+v", err, st)
			}
		})
	}
}
