package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/klauspost/compress/zstd"

	"github.com/cove-sandbox/cove/sandbox"
)

// entry is one member of a test layer.
type entry struct {
	name string
	typ  byte // tar.Type*; 0 means a regular file
	body string
	link string
	mode int64 // 0 means 0644 (0755 for directories), -1 means 0
	uid  int
}

func layerTar(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.uid, ModTime: mtime, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		switch h.Mode {
		case 0:
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		case -1:
			h.Mode = 0
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Typeflag == tar.TypeChar {
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func zstded(t *testing.T, b []byte) []byte {
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	return zw.EncodeAll(b, nil)
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// outer writes the members of an image tarball, in the given order.
func outer(t *testing.T, files [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f[1]))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f[1]))
	}
	tw.Close()
	return buf.Bytes()
}

func imageConfigJSON(env []string, workdir, user string) string {
	b, _ := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Env": env, "WorkingDir": workdir, "User": user, "Cmd": []string{"sh"}},
		"rootfs":       map[string]any{"type": "layers"},
	})
	return string(b)
}

// ociTarball makes an OCI image layout tarball whose index.json points to
// an image index with an arm64 and a native manifest, blobs first (as
// docker save writes them).
func ociTarball(t *testing.T, config string, layers ...[]byte) []byte {
	t.Helper()
	var files [][2]string
	var descs []map[string]any
	for _, l := range layers {
		mt := "application/vnd.oci.image.layer.v1.tar"
		if bytes.HasPrefix(l, []byte{0x1f, 0x8b}) {
			mt += "+gzip"
		}
		files = append(files, [2]string{"blobs/sha256/" + sha(l), string(l)})
		descs = append(descs, map[string]any{"mediaType": mt, "digest": "sha256:" + sha(l), "size": len(l)})
	}
	files = append(files, [2]string{"blobs/sha256/" + sha([]byte(config)), config})
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + sha([]byte(config)), "size": len(config)},
		"layers":        descs,
	})
	files = append(files, [2]string{"blobs/sha256/" + sha(manifest), string(manifest)})
	other := fmt.Sprintf("sha256:%064d", 0) // the arm64 variant's blob is not there: it must not be read
	if runtime.GOARCH == "arm64" {
		t.Skip("the test image's foreign variant is arm64")
	}
	imgIndex, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{
			{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": other, "size": 10, "platform": map[string]string{"os": "linux", "architecture": "arm64"}},
			{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + sha(manifest), "size": len(manifest), "platform": map[string]string{"os": "linux", "architecture": runtime.GOARCH}},
		},
	})
	files = append(files, [2]string{"blobs/sha256/" + sha(imgIndex), string(imgIndex)})
	index, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []map[string]any{{
			"mediaType": "application/vnd.oci.image.index.v1+json", "digest": "sha256:" + sha(imgIndex), "size": len(imgIndex),
			"annotations": map[string]string{"org.opencontainers.image.ref.name": "example:1"},
		}},
	})
	files = append(files, [2]string{"oci-layout", `{"imageLayoutVersion":"1.0.0"}`}, [2]string{"index.json", string(index)})
	return outer(t, files)
}

// dockerSaveTarball makes a tarball in docker save's classic form:
// manifest.json first, layers as <id>/layer.tar, the config as <hex>.json.
func dockerSaveTarball(t *testing.T, config string, layers ...[]byte) []byte {
	t.Helper()
	var paths []string
	var files [][2]string
	for i, l := range layers {
		p := fmt.Sprintf("%064x/layer.tar", i+1)
		paths = append(paths, p)
		files = append(files, [2]string{p, string(l)})
	}
	cfgName := sha([]byte(config)) + ".json"
	m, _ := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{"example:2"}, "Layers": paths}})
	files = append([][2]string{{"manifest.json", string(m)}, {cfgName, config}}, files...)
	return outer(t, files)
}

// The two layers of the import tests: the first makes a small tree, the
// second deletes a file (whiteout), empties a directory of what the first
// put there (opaque) and replaces a file.
func testLayers(t *testing.T) (lower, upper []byte) {
	lower = layerTar(t,
		entry{name: "etc/", typ: tar.TypeDir},
		entry{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\n"},
		entry{name: "etc/group", body: "root:x:0:\n"},
		entry{name: "usr/", typ: tar.TypeDir},
		entry{name: "usr/bin/", typ: tar.TypeDir},
		entry{name: "usr/bin/tool", body: "v1", mode: 0o755},
		entry{name: "usr/bin/su", body: "su", mode: 0o4755},
		entry{name: "usr/bin/tool-link", typ: tar.TypeLink, link: "usr/bin/tool"},
		entry{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		entry{name: "etc/abs", typ: tar.TypeSymlink, link: "/usr/bin/tool"},
		entry{name: "opt/old/a", body: "a"},
		entry{name: "opt/old/sub/b", body: "b"},
		entry{name: "del/me", body: "bye"},
		entry{name: "del/keep", body: "stay"},
		entry{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		entry{name: "ro/", typ: tar.TypeDir, mode: 0o555},
		entry{name: "ro/f", body: "in a read-only dir"},
	)
	upper = layerTar(t,
		entry{name: "del/.wh.me"},
		entry{name: "opt/old/", typ: tar.TypeDir},
		entry{name: "opt/old/.wh..wh..opq"},
		entry{name: "opt/old/new", body: "new"},
		entry{name: "usr/bin/tool", body: "v2", mode: 0o755},
		entry{name: "ro/g", body: "later layer"},
		entry{name: "etc/motd", body: "hi"},
	)
	return lower, upper
}

// tree lists a root filesystem: path -> "d 0755", "f 0644 content",
// "l target".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, _ := os.Lstat(p)
		mode := fi.Sys().(*syscall.Stat_t).Mode & 0o7777
		switch {
		case fi.IsDir():
			out[rel] = fmt.Sprintf("d %04o", mode)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "l " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("f %04o %s", mode, b)
		default:
			out[rel] = "other " + fi.Mode().String()
		}
		return nil
	})
	return out
}

func TestImport(t *testing.T) {
	lower, upper := testLayers(t)
	cfg := imageConfigJSON([]string{"PATH=/usr/bin:/bin", "GREETING=a=b"}, "/srv", "")
	tests := []struct {
		name    string
		tarball []byte
		source  string
	}{
		{"oci-gzip-plain", ociTarball(t, cfg, gzipped(t, lower), upper), "image example:1"},
		{"oci-zstd-gzip", ociTarball(t, cfg, zstded(t, lower), gzipped(t, upper)), "image example:1"},
		{"docker-save", dockerSaveTarball(t, cfg, lower, gzipped(t, upper)), "image example:2"},
	}
	wantTree := map[string]string{
		"etc":               "d 0755",
		"etc/passwd":        "f 0644 root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
		"etc/group":         "f 0644 root:x:0:\nuser:x:1000:\n",
		"etc/abs":           "l /usr/bin/tool",
		"etc/motd":          "f 0644 hi",
		"usr":               "d 0755",
		"usr/bin":           "d 0755",
		"usr/bin/tool":      "f 0755 v2",
		"usr/bin/tool-link": "f 0755 v1", // linked to the lower layer's file, which the upper replaced
		"usr/bin/su":        "f 4755 su",
		"bin":               "l usr/bin",
		"opt":               "d 0755",
		"opt/old":           "d 0755",
		"opt/old/new":       "f 0644 new",
		"del":               "d 0755",
		"del/keep":          "f 0644 stay",
		"dev":               "d 0755",
		"tmp":               "d 1777",
		"proc":              "d 0555",
		"sys":               "d 0555",
		"ro":                "d 0555",
		"ro/f":              "f 0644 in a read-only dir",
		"ro/g":              "f 0644 later layer",
		"home":              "d 0755",
		"home/user":         "d 0755",
	}
	var digests []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Open(tempDir(t))
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			tmpl, err := st.Import(t.Context(), "img", bytes.NewReader(tt.tarball), func(l string) { lines = append(lines, l) })
			if err != nil {
				t.Fatalf("Import: %v", err)
			}
			if diff := cmp.Diff(wantTree, tree(t, tmpl.RootFS)); diff != "" {
				t.Errorf("tree (-want +got):\n%s", diff)
			}
			wantCfg := Config{Env: map[string]string{"PATH": "/usr/bin:/bin", "GREETING": "a=b"}, Workdir: "/srv"}
			if diff := cmp.Diff(wantCfg, tmpl.Config); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
			if tmpl.Source != tt.source {
				t.Errorf("source: got %q, want %q", tmpl.Source, tt.source)
			}
			if os.Geteuid() == 0 {
				fi, _ := os.Lstat(filepath.Join(tmpl.RootFS, "home/user"))
				if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
					t.Errorf("home/user owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
				}
			}
			joined := strings.Join(lines, "\n")
			for _, want := range []string{"layer 1/2 (", "layer 2/2 (", "skipping character device /dev/null", "added the sandbox user"} {
				if !strings.Contains(joined, want) {
					t.Errorf("progress lacks %q:\n%s", want, joined)
				}
			}
			got, err := st.Get("img")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tmpl, got); diff != "" {
				t.Errorf("Get after Import (-import +get):\n%s", diff)
			}
			digests = append(digests, tmpl.Digest)
		})
	}
	// The same content gives the same digest, however it was packed.
	for _, d := range digests[1:] {
		if d != digests[0] {
			t.Errorf("digests differ for the same content: %v", digests)
		}
	}
}

// An image that names its own user gets no uid 1000 added.
func TestImportImageUser(t *testing.T) {
	l := layerTar(t, entry{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\napp:x:2000:2000::/app:/bin/sh\n"})
	st, err := Open(tempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := st.Import(t.Context(), "app", bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", "app"), l)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(tmpl.RootFS, "etc/passwd"))
	if strings.Contains(string(b), ":1000:") {
		t.Errorf("passwd got uid 1000 although the image runs as app:\n%s", b)
	}
	if tmpl.Config.User != "app" {
		t.Errorf("user: got %q, want app", tmpl.Config.User)
	}

	// uid 1000 under another name is the sandbox user; no second entry.
	l = layerTar(t, entry{name: "etc/passwd", body: "node:x:1000:1000::/home/node:/bin/sh\n"})
	tmpl, err = st.Import(t.Context(), "node", bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", ""), l)), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(filepath.Join(tmpl.RootFS, "etc/passwd"))
	if got := strings.Count(string(b), ":1000:"); got != 1 {
		t.Errorf("passwd has %d uid 1000 entries, want 1:\n%s", got, b)
	}
}

func TestImportHostile(t *testing.T) {
	tests := []struct {
		name   string
		layers [][]byte
		member string
	}{
		{"dotdot", [][]byte{layerTar(t, entry{name: "../escape", body: "x"})}, "../escape"},
		{"dotdot-inside", [][]byte{layerTar(t, entry{name: "a/../../escape", body: "x"})}, "a/../../escape"},
		{"absolute", [][]byte{layerTar(t, entry{name: "/etc/passwd", body: "x"})}, "/etc/passwd"},
		{"write-through-symlink", [][]byte{layerTar(t,
			entry{name: "etc", typ: tar.TypeSymlink, link: "/etc"},
			entry{name: "etc/cove-escape", body: "x"},
		)}, "etc/cove-escape"},
		{"write-through-relative-symlink", [][]byte{layerTar(t,
			entry{name: "up", typ: tar.TypeSymlink, link: "../../../../../../.."},
			entry{name: "up/tmp/cove-escape", body: "x"},
		)}, "up/tmp/cove-escape"},
		{"symlink-in-lower-layer", [][]byte{
			layerTar(t, entry{name: "var", typ: tar.TypeSymlink, link: "/var"}),
			layerTar(t, entry{name: "var/cove-escape", body: "x"}),
		}, "var/cove-escape"},
		{"hardlink-out", [][]byte{layerTar(t, entry{name: "shadow", typ: tar.TypeLink, link: "../../../../etc/shadow"})}, "shadow"},
		{"hardlink-absolute", [][]byte{layerTar(t, entry{name: "shadow", typ: tar.TypeLink, link: "/etc/shadow"})}, "shadow"},
		{"whiteout-through-symlink", [][]byte{
			layerTar(t, entry{name: "d", typ: tar.TypeSymlink, link: "/"}),
			layerTar(t, entry{name: "d/.wh.etc"}),
		}, "d/.wh.etc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tempDir(t)
			st, err := Open(filepath.Join(dir, "store"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Import(t.Context(), "bad", bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", ""), tt.layers...)), nil)
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("Import: got %v, want an error wrapping ErrInvalid", err)
			}
			if testing.Verbose() {
				t.Log(err)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.member)) {
				t.Errorf("error %q does not name the member %q", err, tt.member)
			}
			for _, p := range []string{"/etc/cove-escape", "/tmp/cove-escape", "/var/cove-escape", filepath.Join(dir, "escape")} {
				if _, err := os.Lstat(p); err == nil {
					os.Remove(p)
					t.Errorf("%s was written outside the root", p)
				}
			}
			if _, err := os.Stat("/etc/passwd"); err != nil {
				t.Errorf("/etc/passwd: %v", err)
			}
			// Nothing is left: no template, no temporary tree.
			if _, err := st.Get("bad"); !errors.Is(err, sandbox.ErrNotFound) {
				t.Errorf("Get after a failed import: %v", err)
			}
			if entries, _ := os.ReadDir(filepath.Join(dir, "store", "tmp")); len(entries) != 0 {
				t.Errorf("tmp holds %d entries after a failed import", len(entries))
			}
		})
	}
}

func TestImportDamaged(t *testing.T) {
	lower, _ := testLayers(t)
	good := ociTarball(t, imageConfigJSON(nil, "", ""), lower)
	// Flip a byte inside the layer blob: the digest check catches it.
	bad := bytes.Clone(good)
	i := bytes.Index(bad, []byte("root:x:0:0"))
	bad[i] = 'R'
	tests := []struct {
		name    string
		tarball []byte
		want    string
	}{
		{"not-a-tar", []byte("hello"), "image tarball"},
		{"no-manifest", outer(t, [][2]string{{"hello.txt", "hi"}}), "neither manifest.json"},
		{"digest-mismatch", bad, "damaged"},
		{"foreign-arch", dockerSaveTarball(t, `{"architecture":"s390x","os":"linux","config":{}}`, lower), "s390x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Open(tempDir(t))
			if err != nil {
				t.Fatal(err)
			}
			_, err = st.Import(t.Context(), "x", bytes.NewReader(tt.tarball), nil)
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Import: got %v, want ErrInvalid mentioning %q", err, tt.want)
			}
		})
	}
}

// The import reads a regular file in place rather than copying it.
func TestImportFromFile(t *testing.T) {
	lower, upper := testLayers(t)
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(p, dockerSaveTarball(t, imageConfigJSON(nil, "", ""), lower, upper), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := Open(tempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	tmpl, err := st.Import(t.Context(), "f", f, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(lines, "\n"), "reading the image tarball") {
		t.Errorf("a regular file was copied before the import: %q", lines)
	}
	names := make([]string, 0)
	for n := range tree(t, tmpl.RootFS) {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) < 10 {
		t.Errorf("imported tree has only %v", names)
	}
}

// Files and directories without owner permission are kept as they are,
// also when the import does not run as root (and so cannot bypass them).
func TestImportUnreadable(t *testing.T) {
	l := layerTar(t,
		entry{name: "etc/shadow", body: "root:*:1::::::\n", mode: -1},
		entry{name: "locked/", typ: tar.TypeDir, mode: -1},
		entry{name: "locked/inner", body: "x"},
	)
	st, err := Open(tempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := st.Import(t.Context(), "locked", bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", ""), l)), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"etc/shadow": 0, "locked": fs.ModeDir} {
		fi, err := os.Lstat(filepath.Join(tmpl.RootFS, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", name, fi.Mode(), err, want)
		}
	}
	again, err := st.Import(t.Context(), "again", bytes.NewReader(ociTarball(t, imageConfigJSON(nil, "", ""), l)), nil)
	if err != nil || again.Digest != tmpl.Digest {
		t.Errorf("second import: %v, digest %s, want %s", err, again.Digest, tmpl.Digest)
	}
}
