package guest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// httpClient never asks for gzip on its own, so tests choose the
// encoding.
func (e *fsEnv) httpClient() *http.Client {
	tr := e.hs.Client().Transport.(*http.Transport).Clone()
	tr.DisableCompression = true
	return &http.Client{Transport: tr}
}

func (e *fsEnv) url(endpoint string, params ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(params); i += 2 {
		q.Set(params[i], params[i+1])
	}
	return e.hs.URL + endpoint + "?" + q.Encode()
}

func (e *fsEnv) do(t *testing.T, method, u string, body io.Reader, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := e.httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// wantStatus checks a response's status and, for an error, envd's JSON
// error shape without host paths; it returns the error message.
func (e *fsEnv) wantStatus(t *testing.T, res *http.Response, want int) string {
	t.Helper()
	if res.StatusCode == want && want < 300 {
		return ""
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("status = %d (%s), want %d", res.StatusCode, body, want)
	}
	var jerr struct {
		Message string `json:"message"`
		Code    int    `json:"code"`
	}
	if err := json.Unmarshal(body, &jerr); err != nil {
		t.Fatalf("error body %q is not envd's JSON error: %v", body, err)
	}
	if jerr.Code != want || jerr.Message == "" {
		t.Errorf("error body = %+v, want code %d and a message", jerr, want)
	}
	e.noHostPath(t, jerr.Message)
	return jerr.Message
}

// content is a deterministic stream of n bytes: a pseudo-random block of
// a prime length, repeated, so any misplaced or dropped chunk shows in a
// checksum. It is cheap to generate, even under the race detector.
func content(seed byte, n int64) io.Reader {
	block := make([]byte, 1<<20+7)
	rand.NewChaCha8([32]byte{seed}).Read(block)
	return io.LimitReader(&cycle{block: block}, n)
}

type cycle struct {
	block []byte
	off   int
}

func (c *cycle) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		k := copy(p[n:], c.block[c.off:])
		n += k
		c.off = (c.off + k) % len(c.block)
	}
	return n, nil
}

func sha(t *testing.T, r io.Reader) [32]byte {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func TestFilesHostilePaths(t *testing.T) {
	e := newFSEnv(t, Config{})
	if err := os.Symlink("/etc", e.host("/workspace/evil")); err != nil {
		t.Fatal(err)
	}
	hostile := map[string]string{
		"dotdot":      "../../etc/passwd",
		"abs-dotdot":  "/../etc",
		"symlink-out": "evil/passwd",
		"symlink-new": "evil/cove-test-new",
		"nul":         "a\x00b",
		"long":        strings.Repeat("a", 10000),
	}
	for name, p := range hostile {
		t.Run(name, func(t *testing.T) {
			e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", p), nil), 400)
			e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", p), strings.NewReader("x"),
				"Content-Type", "application/octet-stream"), 400)
			body, ctype := multipartBody(t, map[string]string{p: "x"})
			e.wantStatus(t, e.do(t, "POST", e.url("/files"), body, "Content-Type", ctype), 400)
			e.wantStatus(t, e.do(t, "GET", e.url("/cove/tar", "path", p), nil), 400)
			e.wantStatus(t, e.do(t, "POST", e.url("/cove/tar", "path", p), tarOf(t, tarFile("f", "x"))), 400)
		})
	}
	if _, err := os.Lstat("/etc/cove-test-new"); err == nil {
		t.Errorf("/etc/cove-test-new was created on the host")
	}
}

// multipartBody builds a form with one "file" part per filename, in a
// stable order.
func multipartBody(t *testing.T, files map[string]string) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		h := textproto.MIMEHeader{}
		// Not CreateFormFile: it escapes the name differently from
		// envd's clients, which send it raw, directories included.
		h.Set("Content-Disposition", `form-data; name="file"; filename="`+n+`"`)
		h.Set("Content-Type", "application/octet-stream")
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, files[n])
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

// uploadEntry is envd's description of an uploaded file.
type uploadEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

func decodeEntries(t *testing.T, res *http.Response) []uploadEntry {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var got []uploadEntry
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestFilesLargeRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 100 MB")
	}
	e := newFSEnv(t, Config{})
	const size = 100 << 20
	want := sha(t, content(1, size))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := e.do(t, "POST", e.url("/files", "path", "big/data.bin"), content(1, size), "Content-Type", "application/octet-stream")
	e.wantStatus(t, res, 200)
	got := decodeEntries(t, res)
	runtime.ReadMemStats(&after)
	if diff := cmp.Diff([]uploadEntry{{Path: "/workspace/big/data.bin", Name: "data.bin", Type: "file"}}, got); diff != "" {
		t.Errorf("upload reply mismatch (-want +got):\n%s", diff)
	}
	// Client and server share this process; together they must stream,
	// not hold the file.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/2 {
		t.Errorf("uploading %d bytes allocated %d bytes; the upload is buffered, not streamed", size, alloc)
	}
	fh, err := os.Open(e.host("/workspace/big/data.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if sha(t, fh) != want {
		t.Fatalf("stored file differs from the upload")
	}

	res = e.do(t, "GET", e.url("/files", "path", "/workspace/big/data.bin"), nil)
	e.wantStatus(t, res, 200)
	if res.Header.Get("Content-Encoding") != "" {
		t.Errorf("Content-Encoding = %q without Accept-Encoding", res.Header.Get("Content-Encoding"))
	}
	if cd := res.Header.Get("Content-Disposition"); !strings.Contains(cd, `filename=data.bin`) {
		t.Errorf("Content-Disposition = %q, want the file name", cd)
	}
	if sha(t, res.Body) != want {
		t.Fatalf("downloaded file differs from the upload")
	}

	// A multipart upload, gzip-encoded on the way in (smaller: gzip is
	// slow under the race detector).
	const zsize = 2 << 20
	want = sha(t, content(1, zsize))
	pr, pw := io.Pipe()
	go func() {
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		mw := multipart.NewWriter(zw)
		mw.SetBoundary(mwBoundary)
		part, err := mw.CreateFormFile("file", "ignored.bin")
		if err == nil {
			_, err = io.Copy(part, content(1, zsize))
		}
		if err == nil {
			err = mw.Close()
		}
		if err == nil {
			err = zw.Close()
		}
		pw.CloseWithError(err)
	}()
	res = e.do(t, "POST", e.url("/files", "path", "/workspace/big/copy.bin"), pr,
		"Content-Type", "multipart/form-data; boundary="+mwBoundary, "Content-Encoding", "gzip")
	e.wantStatus(t, res, 200)
	fh2, err := os.Open(e.host("/workspace/big/copy.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh2.Close()
	if sha(t, fh2) != want {
		t.Fatalf("stored multipart gzip upload differs")
	}
}

const mwBoundary = "cove-test-boundary-0123456789"

func TestFilesGzipDownload(t *testing.T) {
	e := newFSEnv(t, Config{})
	const size = 256 << 10
	var buf bytes.Buffer
	io.Copy(&buf, content(2, size))
	if err := os.WriteFile(e.host("/workspace/g.bin"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(buf.Bytes())
	tests := []struct {
		accept   string
		wantGzip bool
	}{
		{"", false},
		{"gzip", true},
		{"gzip, deflate, br", true},
		{"identity", false},
		{"gzip;q=0.5, identity", false},
		{"gzip;q=0", false},
		{"*", false},
		{"identity;q=0, *", true},
	}
	for _, tt := range tests {
		t.Run(tt.accept, func(t *testing.T) {
			var hdr []string
			if tt.accept != "" {
				hdr = []string{"Accept-Encoding", tt.accept}
			}
			res := e.do(t, "GET", e.url("/files", "path", "g.bin"), nil, hdr...)
			e.wantStatus(t, res, 200)
			body := io.Reader(res.Body)
			if got := res.Header.Get("Content-Encoding") == "gzip"; got != tt.wantGzip {
				t.Fatalf("gzip = %v, want %v", got, tt.wantGzip)
			}
			if tt.wantGzip {
				zr, err := gzip.NewReader(res.Body)
				if err != nil {
					t.Fatal(err)
				}
				body = zr
			}
			if sha(t, body) != want {
				t.Errorf("downloaded content differs")
			}
		})
	}
	e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "g.bin"), nil, "Accept-Encoding", "identity;q=0, gzip;q=0"), 406)

	// Range requests are served uncompressed.
	res := e.do(t, "GET", e.url("/files", "path", "g.bin"), nil, "Accept-Encoding", "gzip", "Range", "bytes=10-19")
	e.wantStatus(t, res, 206)
	got, _ := io.ReadAll(res.Body)
	if !bytes.Equal(got, buf.Bytes()[10:20]) {
		t.Errorf("range body = %x, want %x", got, buf.Bytes()[10:20])
	}
}

func TestFilesUpload(t *testing.T) {
	e := newFSEnv(t, Config{})

	t.Run("multipart filenames", func(t *testing.T) {
		body, ctype := multipartBody(t, map[string]string{
			"multi/a.txt":              "A",
			"/workspace/multi/b/c.txt": "C",
			"/elsewhere/d.txt":         "D",
		})
		res := e.do(t, "POST", e.url("/files"), body, "Content-Type", ctype)
		e.wantStatus(t, res, 200)
		want := []uploadEntry{
			{Path: "/elsewhere/d.txt", Name: "d.txt", Type: "file"},
			{Path: "/workspace/multi/b/c.txt", Name: "c.txt", Type: "file"},
			{Path: "/workspace/multi/a.txt", Name: "a.txt", Type: "file"},
		}
		if diff := cmp.Diff(want, decodeEntries(t, res)); diff != "" {
			t.Errorf("reply mismatch (-want +got):\n%s", diff)
		}
		for p, c := range map[string]string{"/workspace/multi/a.txt": "A", "/workspace/multi/b/c.txt": "C", "/elsewhere/d.txt": "D"} {
			if b, err := os.ReadFile(e.host(p)); err != nil || string(b) != c {
				t.Errorf("%s = %q, %v; want %q", p, b, err, c)
			}
		}
	})

	t.Run("multipart path wins", func(t *testing.T) {
		body, ctype := multipartBody(t, map[string]string{"whatever.txt": "P"})
		res := e.do(t, "POST", e.url("/files", "path", "/workspace/named.txt"), body, "Content-Type", ctype)
		e.wantStatus(t, res, 200)
		if b, _ := os.ReadFile(e.host("/workspace/named.txt")); string(b) != "P" {
			t.Errorf("named.txt = %q", b)
		}
		if _, err := os.Stat(e.host("/workspace/whatever.txt")); err == nil {
			t.Errorf("the part's filename was used although ?path= was given")
		}
	})

	t.Run("multipart two parts one path", func(t *testing.T) {
		body, ctype := multipartBody(t, map[string]string{"x1": "1", "x2": "2"})
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "/workspace/dup.txt"), body, "Content-Type", ctype), 400)
	})

	t.Run("multipart gzip", func(t *testing.T) {
		body, ctype := multipartBody(t, map[string]string{"gz/m.txt": "zipped"})
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		io.Copy(zw, body)
		zw.Close()
		e.wantStatus(t, e.do(t, "POST", e.url("/files"), &zbuf, "Content-Type", ctype, "Content-Encoding", "gzip"), 200)
		if b, _ := os.ReadFile(e.host("/workspace/gz/m.txt")); string(b) != "zipped" {
			t.Errorf("gz/m.txt = %q", b)
		}
	})

	t.Run("octet-stream gzip", func(t *testing.T) {
		var zbuf bytes.Buffer
		zw := gzip.NewWriter(&zbuf)
		io.WriteString(zw, "raw zipped")
		zw.Close()
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "raw.txt"), &zbuf,
			"Content-Type", "application/octet-stream", "Content-Encoding", "gzip"), 200)
		if b, _ := os.ReadFile(e.host("/workspace/raw.txt")); string(b) != "raw zipped" {
			t.Errorf("raw.txt = %q", b)
		}
	})

	t.Run("overwrite keeps mode", func(t *testing.T) {
		e.write(t, "/workspace/run.sh", "old")
		if err := os.Chmod(e.host("/workspace/run.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "run.sh"), strings.NewReader("new"),
			"Content-Type", "application/octet-stream"), 200)
		fi, err := os.Stat(e.host("/workspace/run.sh"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o755 {
			t.Errorf("mode = %v, want 0755", fi.Mode().Perm())
		}
		if b, _ := os.ReadFile(e.host("/workspace/run.sh")); string(b) != "new" {
			t.Errorf("run.sh = %q", b)
		}
		des, _ := os.ReadDir(e.host("/workspace"))
		for _, de := range des {
			if strings.HasPrefix(de.Name(), ".cove-upload-") {
				t.Errorf("temporary file %s left behind", de.Name())
			}
		}
	})

	t.Run("mode", func(t *testing.T) {
		for _, tt := range []struct {
			mode string
			want os.FileMode
		}{
			{"0600", 0o600},
			{"755", 0o755},
			{"04755", 0o755 | os.ModeSetuid},
		} {
			e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "moded", "mode", tt.mode), strings.NewReader("m"),
				"Content-Type", "application/octet-stream"), 200)
			fi, err := os.Stat(e.host("/workspace/moded"))
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() &^ os.ModeType; got != tt.want {
				t.Errorf("mode=%s: file mode = %v, want %v", tt.mode, got, tt.want)
			}
		}
		for _, bad := range []string{"rw-", "0999", "017777"} {
			e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "moded", "mode", bad), strings.NewReader("m"),
				"Content-Type", "application/octet-stream"), 400)
		}
	})

	t.Run("errors", func(t *testing.T) {
		e.write(t, "/workspace/plain", "")
		octet := []string{"Content-Type", "application/octet-stream"}
		e.wantStatus(t, e.do(t, "POST", e.url("/files"), strings.NewReader("x"), octet...), 400)
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "/workspace"), strings.NewReader("x"), octet...), 400)
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "/workspace/plain/sub"), strings.NewReader("x"), octet...), 400)
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "x"), strings.NewReader("x"), "Content-Type", "text/plain"), 400)
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "x"), strings.NewReader("not gzip"),
			"Content-Type", "application/octet-stream", "Content-Encoding", "gzip"), 400)
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "x"), strings.NewReader("x"),
			"Content-Type", "application/octet-stream", "Content-Encoding", "br"), 400)
		e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "/workspace"), nil), 400)
		msg := e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "/workspace/none"), nil), 404)
		if !strings.Contains(msg, "/workspace/none") {
			t.Errorf("404 message %q does not name the sandbox path", msg)
		}
	})
}

func TestFilesUsername(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	e := newFSEnv(t, Config{})
	e.write(t, "/etc/passwd", "root:x:0:0::/root:/bin/sh\nalice:x:1234:2345::/home/alice:/bin/sh\n")
	e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "owned/by/alice.txt", "username", "alice"), strings.NewReader("a"),
		"Content-Type", "application/octet-stream"), 200)
	for _, p := range []string{"/workspace/owned", "/workspace/owned/by", "/workspace/owned/by/alice.txt"} {
		fi, err := os.Stat(e.host(p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1234 || st.Gid != 2345 {
			t.Errorf("%s owned by %d:%d, want 1234:2345", p, st.Uid, st.Gid)
		}
	}
	e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "x.txt", "username", "mallory"), strings.NewReader("a"),
		"Content-Type", "application/octet-stream"), 401)
	e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "x.txt", "username", "mallory"), nil), 401)
}

func TestFilesDiskFull(t *testing.T) {
	e := newFSEnv(t, Config{})
	dir := e.host("/workspace/small")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	msg := e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "/workspace/small/big"), content(3, 1<<20),
		"Content-Type", "application/octet-stream"), 507)
	if !strings.Contains(msg, "disk is full") {
		t.Errorf("message %q does not say the disk is full", msg)
	}
}

func TestFilesConfine(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/workspace/sub/in.txt", "in")
	e.write(t, "/other/out.txt", "out")
	if err := os.Symlink("../../other", e.host("/workspace/sub/escape")); err != nil {
		t.Fatal(err)
	}
	confine := []string{ConfineHeader, "/workspace/sub"}
	res := e.do(t, "GET", e.url("/files", "path", "in.txt"), nil, confine...)
	e.wantStatus(t, res, 200)
	if b, _ := io.ReadAll(res.Body); string(b) != "in" {
		t.Errorf("relative path under the confined directory read %q", b)
	}
	for _, p := range []string{"/other/out.txt", "escape/out.txt", "../in.txt"} {
		e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", p), nil, confine...), 400)
		e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", p), strings.NewReader("x"),
			append([]string{"Content-Type", "application/octet-stream"}, confine...)...), 400)
	}
	if b, _ := os.ReadFile(e.host("/other/out.txt")); string(b) != "out" {
		t.Errorf("a confined upload changed /other/out.txt to %q", b)
	}
}

func TestFilesAccessToken(t *testing.T) {
	e := newFSEnv(t, Config{AccessToken: "s3cret"})
	e.write(t, "/workspace/f", "x")
	e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "f"), nil), 401)
	e.wantStatus(t, e.do(t, "POST", e.url("/files", "path", "f"), strings.NewReader("y"), "Content-Type", "application/octet-stream"), 401)
	e.wantStatus(t, e.do(t, "GET", e.url("/cove/tar", "path", "/workspace"), nil), 401)
	e.wantStatus(t, e.do(t, "GET", e.url("/files", "path", "f"), nil, AccessTokenHeader, "s3cret"), 200)
}

type tarEntry struct {
	hdr  tar.Header
	body string
}

func tarFile(name, body string) tarEntry {
	return tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body}
}

func tarOf(t *testing.T, entries ...tarEntry) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, en := range entries {
		if err := tw.WriteHeader(&en.hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, en.body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func TestTarRoundTrip(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/workspace/src/a.txt", "A")
	e.write(t, "/workspace/src/sub/b.txt", "B")
	if err := os.Symlink("sub/b.txt", e.host("/workspace/src/link")); err != nil {
		t.Fatal(err)
	}
	res := e.do(t, "GET", e.url("/cove/tar", "path", "src"), nil)
	e.wantStatus(t, res, 200)
	if ct := res.Header.Get("Content-Type"); ct != "application/x-tar" {
		t.Errorf("Content-Type = %q", ct)
	}
	archive, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	e.wantStatus(t, e.do(t, "POST", e.url("/cove/tar", "path", "/workspace/dst/nested"), bytes.NewReader(archive)), 204)
	for p, want := range map[string]string{"a.txt": "A", "sub/b.txt": "B", "link": "B"} {
		b, err := os.ReadFile(e.host("/workspace/dst/nested/" + p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if target, err := os.Readlink(e.host("/workspace/dst/nested/link")); err != nil || target != "sub/b.txt" {
		t.Errorf("link = %q, %v", target, err)
	}

	// gzip-encoded upload.
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(archive)
	zw.Close()
	e.wantStatus(t, e.do(t, "POST", e.url("/cove/tar", "path", "/workspace/dst2"), &zbuf, "Content-Encoding", "gzip"), 204)
	if b, _ := os.ReadFile(e.host("/workspace/dst2/sub/b.txt")); string(b) != "B" {
		t.Errorf("dst2/sub/b.txt = %q", b)
	}

	e.wantStatus(t, e.do(t, "GET", e.url("/cove/tar", "path", "src/a.txt"), nil), 400)
	e.wantStatus(t, e.do(t, "GET", e.url("/cove/tar", "path", "nowhere"), nil), 404)
}

func TestTarHostile(t *testing.T) {
	e := newFSEnv(t, Config{})
	tests := map[string][]tarEntry{
		"dotdot":   {tarFile("../escaped.txt", "x")},
		"absolute": {tarFile("/escaped.txt", "x")},
		"symlink then write through it": {
			{tar.Header{Typeflag: tar.TypeSymlink, Name: "out", Linkname: "../../..", Mode: 0o777}, ""},
			tarFile("out/escaped.txt", "x"),
		},
		"absolute symlink": {
			{tar.Header{Typeflag: tar.TypeSymlink, Name: "etc", Linkname: "/etc", Mode: 0o777}, ""},
		},
		"device": {
			{tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3, Mode: 0o666}, ""},
		},
	}
	for name, entries := range tests {
		t.Run(name, func(t *testing.T) {
			msg := e.wantStatus(t, e.do(t, "POST", e.url("/cove/tar", "path", "/workspace/in"), tarOf(t, entries...)), 400)
			member := entries[len(entries)-1].hdr.Name
			if name == "symlink then write through it" {
				member = "out"
			}
			if !strings.Contains(msg, member) {
				t.Errorf("message %q does not name member %q", msg, member)
			}
		})
	}
	for _, p := range []string{"/escaped.txt", "/workspace/escaped.txt"} {
		if _, err := os.Lstat(e.host(p)); err == nil {
			t.Errorf("%s was written outside the target", p)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(e.root), "escaped.txt")); err == nil {
		t.Errorf("a file escaped the sandbox root")
	}
	e.wantStatus(t, e.do(t, "POST", e.url("/cove/tar", "path", "/workspace/in"), strings.NewReader("this is not a tar archive, not even close.......")), 400)
}
