package fsys

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

// uploadEntry is one written file in the reply to POST /files, envd's
// EntryInfo schema.
type uploadEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"` // always "file"
}

// download serves GET /files?path=...: the file's bytes, gzip-compressed
// when the client's Accept-Encoding prefers it (as envd), with Range and
// conditional requests served uncompressed by http.ServeContent.
func (f *Service) Download(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if _, err := f.ownerFor(r.Header, q.Get("username")); err != nil {
		f.httpError(w, err)
		return
	}
	n, err := f.lookup(r.Context(), q.Get("path"), lookupOpts{follow: true})
	if err != nil {
		f.httpError(w, pathError("downloading", q.Get("path"), err))
		return
	}
	sp := n.sp
	fh, err := f.openRegular(n, "downloading")
	n.close()
	if err != nil {
		f.httpError(w, err)
		return
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		f.httpError(w, pathError("downloading", sp, err))
		return
	}

	encoding := "identity"
	if r.Header.Get("Range") == "" && r.Header.Get("If-Range") == "" &&
		r.Header.Get("If-Modified-Since") == "" && r.Header.Get("If-None-Match") == "" {
		encoding = chooseEncoding(r.Header.Get("Accept-Encoding"))
	} else if !identityAcceptable(r.Header.Get("Accept-Encoding")) {
		encoding = ""
	}
	if encoding == "" {
		wire.WriteError(w, http.StatusNotAcceptable, "no acceptable content encoding: this endpoint sends gzip or identity (identity only for Range and conditional requests)")
		return
	}

	name := encodePath(path.Base(sp))
	h := w.Header()
	h.Set("Vary", "Accept-Encoding")
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h.Set("Content-Type", ctype)
	if encoding == "identity" {
		http.ServeContent(w, r, name, fi.ModTime(), fh)
		return
	}
	h.Set("Content-Encoding", "gzip")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	gz := gzip.NewWriter(w)
	if _, err := io.Copy(gz, fh); err != nil {
		f.log.Warn("gzip download failed", "path", sp, "error", f.scrub(err))
		panic(http.ErrAbortHandler) // make the client see a broken stream, not a short file
	}
	if err := gz.Close(); err != nil {
		f.log.Warn("gzip download failed", "path", sp, "error", f.scrub(err))
	}
}

// openRegular opens the regular file n for reading, by descriptor: one
// that is a directory, a device, a fifo or a socket (or was swapped for
// one since lookup) is refused without blocking on it.
func (f *Service) openRegular(n *node, op string) (*os.File, error) {
	switch {
	case !n.exists:
		return nil, pathError(op, n.sp, unix.ENOENT)
	case n.isDir():
		return nil, fmt.Errorf("%s %q: it is a directory; download the files in it one by one, or all of it as a tar with GET /cove/tar?path=...: %w", op, encodePath(n.sp), sandbox.ErrInvalid)
	case !n.isRegular():
		return nil, fmt.Errorf("%s %q: it is not a regular file (%s): %w", op, encodePath(n.sp), fileMode(n.st.Mode).Type(), sandbox.ErrInvalid)
	}
	// O_NONBLOCK: a file swapped for a fifo does not hang the open.
	fd, err := n.open(unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY)
	if err != nil {
		return nil, pathError(op, n.sp, err)
	}
	fh := os.NewFile(uintptr(fd), n.sp)
	fi, err := fh.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s %q: it is not a regular file (%s): %w", op, encodePath(n.sp), fi.Mode().Type(), sandbox.ErrInvalid)
	}
	if err != nil {
		fh.Close()
		return nil, pathError(op, n.sp, err)
	}
	return fh, nil
}

// upload serves POST /files. The body is either application/octet-stream
// (then ?path= names the file) or multipart/form-data whose "file" parts
// are written to ?path= or, without it, to the part's filename (which may
// hold directories; relative names are under the workdir). A request
// body with Content-Encoding: gzip is decompressed. Cove's ?mode= (octal,
// such as 0600) sets the files' mode. Each file is streamed
// to a temporary file in its directory and renamed into place; missing
// parents are created. The reply is a JSON array of the written entries.
func (f *Service) Upload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o, err := f.ownerFor(r.Header, q.Get("username"))
	if err != nil {
		f.httpError(w, err)
		return
	}
	opts := writeOptions{owner: o}
	if m := q.Get("mode"); m != "" {
		bits, err := strconv.ParseUint(m, 8, 32)
		if err != nil || bits > 0o7777 {
			f.httpError(w, fmt.Errorf("mode %q is not an octal file mode such as 0644: %w", m, sandbox.ErrInvalid))
			return
		}
		opts.mode = unixMode(uint32(bits))
		opts.setMode = true
	}
	body, err := requestBody(r)
	if err != nil {
		f.httpError(w, err)
		return
	}
	defer body.Close()

	ctx := r.Context()
	ctype := r.Header.Get("Content-Type")
	mediaType, params, _ := mime.ParseMediaType(ctype)
	var entries []uploadEntry
	switch {
	case mediaType == "application/octet-stream":
		if !q.Has("path") {
			f.httpError(w, fmt.Errorf("the path query parameter is required for an application/octet-stream upload: %w", sandbox.ErrInvalid))
			return
		}
		e, err := f.writeFile(ctx, q.Get("path"), body, opts)
		if err != nil {
			f.failUpload(w, body, err)
			return
		}
		entries = append(entries, e)
	case strings.HasPrefix(mediaType, "multipart/"):
		if params["boundary"] == "" {
			f.httpError(w, fmt.Errorf("the multipart Content-Type has no boundary: %w", sandbox.ErrInvalid))
			return
		}
		entries, err = f.uploadParts(ctx, multipart.NewReader(body, params["boundary"]), q, opts)
		if err != nil {
			f.failUpload(w, body, err)
			return
		}
	default:
		f.httpError(w, fmt.Errorf("unsupported Content-Type %q: send multipart/form-data or application/octet-stream: %w", ctype, sandbox.ErrInvalid))
		return
	}
	if entries == nil {
		entries = []uploadEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(entries)
}

// uploadDrain bounds what a failed upload reads of the rest of its body.
const uploadDrain = 1 << 30

// failUpload answers an upload that failed part-way (a full disk, a bad
// path in a later part) with its error, after reading what is left of the
// body (up to uploadDrain): a server that answers and closes while the
// client is still sending resets the connection, and the client (or the
// server's proxy in front) loses the answer and sees only a broken
// connection instead of, say, E2B's 507 for a full disk.
func (f *Service) failUpload(w http.ResponseWriter, body io.Reader, err error) {
	io.Copy(io.Discard, io.LimitReader(body, uploadDrain))
	f.httpError(w, err)
}

// uploadParts writes every "file" part of a multipart body; other fields
// are skipped. As in envd, two parts may not name the same path.
func (f *Service) uploadParts(ctx context.Context, mr *multipart.Reader, q map[string][]string, opts writeOptions) ([]uploadEntry, error) {
	var entries []uploadEntry
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return entries, nil
		}
		if err != nil {
			return nil, bodyError(err)
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		target, ok := "", false
		if p := q["path"]; len(p) > 0 {
			target, ok = p[0], true
		} else {
			// The raw filename, not part.FileName(): envd keeps the
			// directories in it.
			_, dp, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			if err == nil {
				target, ok = dp["filename"]
			}
		}
		if !ok || target == "" {
			part.Close()
			return nil, fmt.Errorf("a \"file\" part has no filename; name the file in the part's filename or pass ?path=: %w", sandbox.ErrInvalid)
		}
		n, err := f.lookup(ctx, target, lookupOpts{follow: true})
		if err == nil {
			n.close()
			for _, e := range entries {
				if e.Path == encodePath(n.sp) {
					part.Close()
					return nil, fmt.Errorf("two parts of one upload name %q; only the first was written; upload one file per path: %w", e.Path, sandbox.ErrInvalid)
				}
			}
		} else if wire.HasSentinel(err) {
			part.Close()
			return nil, err
		}
		e, err := f.writeFile(ctx, target, part, opts)
		part.Close()
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
}

// writeOptions says how uploaded files are written.
type writeOptions struct {
	// owner, when set, owns the files and the directories created for
	// them.
	owner *owner
	// mode, when setMode, is the files' mode (Cove's ?mode= extension).
	mode    fs.FileMode
	setMode bool
}

// unixMode converts permission, setuid, setgid and sticky bits as chmod(2)
// takes them to an fs.FileMode.
func unixMode(bits uint32) fs.FileMode {
	m := fs.FileMode(bits & 0o777)
	if bits&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// writeFile streams r into the file p (following a final symlink, as an
// open would), replacing it atomically. A replaced file keeps its mode
// and, when the daemon can, its owner; a new one gets 0644; opts can set
// both. The temporary file is made, written, chowned, chmodded and renamed
// into place by descriptor in the directory lookup opened; watches report
// envd's events on p, not the temporary file's (see uploadNotes).
func (f *Service) writeFile(ctx context.Context, p string, r io.Reader, opts writeOptions) (uploadEntry, error) {
	o := opts.owner
	n, err := f.lookup(ctx, p, lookupOpts{follow: true, mkdir: true, owner: o})
	if err != nil {
		return uploadEntry{}, pathError("writing", p, err)
	}
	defer n.close()
	sp := n.sp
	perm := fs.FileMode(0o644)
	var keep *owner
	switch {
	case n.isDir():
		return uploadEntry{}, fmt.Errorf("writing %q: it is a directory; name a file path inside it: %w", encodePath(sp), sandbox.ErrInvalid)
	case n.exists && !n.isRegular():
		return uploadEntry{}, fmt.Errorf("writing %q: it exists and is not a regular file (%s); remove it first: %w", encodePath(sp), fileMode(n.st.Mode).Type(), sandbox.ErrInvalid)
	case n.exists:
		perm = fileMode(n.st.Mode) & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		keep = &owner{int(n.st.Uid), int(n.st.Gid)}
	}
	if opts.setMode {
		perm = opts.mode
	}
	tmpName := uploadPrefix + newID()
	f.uploads.add(tmpName, n.exists)
	fd, err := openat(n.dir, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return uploadEntry{}, pathError("writing", sp, err)
	}
	tmp := os.NewFile(uintptr(fd), tmpName)
	done := false
	defer func() {
		if !done {
			tmp.Close()
			unix.Unlinkat(n.dir, tmpName, 0)
		}
	}()
	if _, err := io.Copy(tmp, readTagger{r}); err != nil {
		var re readError
		if errors.As(err, &re) {
			return uploadEntry{}, fmt.Errorf("writing %q: %w", encodePath(sp), bodyError(re.err))
		}
		return uploadEntry{}, pathError("writing", sp, err)
	}
	switch {
	case o != nil:
		err = tmp.Chown(o.uid, o.gid)
	case keep != nil && os.Geteuid() == 0:
		err = tmp.Chown(keep.uid, keep.gid)
	}
	if err != nil {
		return uploadEntry{}, pathError("setting the owner of", sp, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return uploadEntry{}, pathError("setting the mode of", sp, err)
	}
	if err := tmp.Close(); err != nil {
		unix.Unlinkat(n.dir, tmpName, 0)
		done = true
		return uploadEntry{}, pathError("writing", sp, err)
	}
	done = true
	if err := unix.Renameat(n.dir, tmpName, n.dir, n.name); err != nil {
		unix.Unlinkat(n.dir, tmpName, 0)
		return uploadEntry{}, pathError("writing", sp, err)
	}
	return uploadEntry{Path: encodePath(sp), Name: encodePath(path.Base(sp)), Type: "file"}, nil
}

// tarDownload serves GET /cove/tar?path=DIR: the tree under DIR as a tar
// stream (members relative to DIR). The tree is walked from a descriptor
// of DIR and never leaves it.
func (f *Service) TarDownload(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	n, err := f.lookup(r.Context(), p, lookupOpts{follow: true})
	if err != nil {
		f.httpError(w, pathError("archiving", p, err))
		return
	}
	sp := n.sp
	if !n.isDir() {
		n.close()
		if !n.exists {
			f.httpError(w, pathError("archiving", sp, unix.ENOENT))
			return
		}
		f.httpError(w, fmt.Errorf("archiving %q: it is not a directory; download a single file with GET /files: %w", encodePath(sp), sandbox.ErrInvalid))
		return
	}
	root, err := n.openRoot()
	n.close()
	if err != nil {
		f.httpError(w, pathError("archiving", sp, err))
		return
	}
	defer root.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": tarName(sp)}))
	cw := &countWriter{w: w}
	// Tar writes a 512-byte header per member: batch them into large
	// chunks, or a tree of small files goes out in tiny HTTP chunks.
	bw := bufio.NewWriterSize(cw, 256<<10)
	err = tarball.WriteRoot(r.Context(), bw, root)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		if cw.n == 0 && r.Context().Err() == nil {
			f.httpError(w, pathError("archiving", sp, err))
			return
		}
		f.log.Warn("tar download failed", "path", sp, "error", f.scrub(err))
		// The status is sent; break the stream so the client cannot take
		// a truncated archive for a whole one.
		panic(http.ErrAbortHandler)
	}
}

// tarUpload serves POST /cove/tar?path=DIR: extracts the tar stream in the
// body (optionally gzip-encoded) into DIR, creating it. A member that
// would escape DIR is refused with 400 naming it; members before it may
// have been written. The extraction works from a descriptor of DIR and
// never leaves it.
func (f *Service) TarUpload(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o, err := f.ownerFor(r.Header, q.Get("username"))
	if err != nil {
		f.httpError(w, err)
		return
	}
	n, err := f.lookup(r.Context(), q.Get("path"), lookupOpts{follow: true, mkdir: true, owner: o})
	if err != nil {
		f.httpError(w, pathError("extracting into", q.Get("path"), err))
		return
	}
	defer n.close()
	sp := n.sp
	if n.exists && !n.isDir() {
		f.httpError(w, fmt.Errorf("extracting into %q: it is not a directory: %w", encodePath(sp), sandbox.ErrInvalid))
		return
	}
	if !n.exists {
		if err := mkdirOwned(n.dir, n.name, o); err != nil && !errors.Is(err, unix.EEXIST) {
			f.httpError(w, pathError("creating directory", sp, err))
			return
		}
	}
	root, err := n.openRoot()
	if err != nil {
		f.httpError(w, pathError("extracting into", sp, err))
		return
	}
	defer root.Close()
	body, err := requestBody(r)
	if err != nil {
		f.httpError(w, err)
		return
	}
	defer body.Close()
	var opts tarball.ExtractOptions
	if os.Geteuid() == 0 {
		// As root, everything goes to the request's user (the sandbox's
		// user by default); with no user, the archive's owners are kept.
		opts.Chown = func(root *os.Root, name string, hdr *tar.Header) error {
			if o != nil {
				return root.Lchown(name, o.uid, o.gid)
			}
			return root.Lchown(name, hdr.Uid, hdr.Gid)
		}
	}
	if err := tarball.ExtractRoot(r.Context(), readTagger{body}, root, opts); err != nil {
		var re readError
		if errors.As(err, &re) {
			err = fmt.Errorf("extracting into %q: %w", encodePath(sp), bodyError(re.err))
		}
		f.httpError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func tarName(sp string) string {
	if sp == "/" {
		return "root.tar"
	}
	return encodePath(path.Base(sp)) + ".tar"
}

// ownerFor is who files created for a request belong to: the user it
// names (envd's ?username=, else its Basic authorization user), else the
// daemon's default user, so that what the API writes the sandbox's user
// can change. nil when the daemon is not root (an unprivileged daemon
// cannot give files away, so the name is accepted and ignored) or no user
// applies. An unknown user is ErrPermission (401, envd's answer).
func (f *Service) ownerFor(h http.Header, username string) (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	if username != "" {
		// ?username= wins over the authorization header.
		h = http.Header{"Authorization": {"Basic " + wire.BasicUser(username)}}
	}
	u, err := f.RequestUser(h)
	if err != nil || u == nil {
		return nil, err
	}
	return &owner{u.UID, u.GID}, nil
}

// httpError writes err in envd's JSON error shape with the status its
// sentinel calls for; an error with no sentinel is logged and gets an id.
func (f *Service) httpError(w http.ResponseWriter, err error) {
	if !wire.HasSentinel(err) {
		err = mapOSError(err)
	}
	err = f.scrub(err)
	status := wire.HTTPStatus(err)
	if status == http.StatusInternalServerError {
		err = f.internal(err)
	}
	wire.WriteError(w, status, err.Error())
}

// requestBody returns the request body, decompressed when its
// Content-Encoding is gzip.
func requestBody(r *http.Request) (io.ReadCloser, error) {
	enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding")))
	switch enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, fmt.Errorf("the request body is not valid gzip (Content-Encoding: %s): %v: %w", enc, err, sandbox.ErrInvalid)
		}
		return zr, nil
	}
	return nil, fmt.Errorf("unsupported Content-Encoding %q: send gzip or an unencoded body: %w", enc, sandbox.ErrInvalid)
}

// readTagger marks errors that come from reading the request, so they are
// told apart from errors writing the disk.
type readTagger struct{ r io.Reader }

type readError struct{ err error }

func (e readError) Error() string { return e.err.Error() }
func (e readError) Unwrap() error { return e.err }

func (t readTagger) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		err = readError{err}
	}
	return n, err
}

// bodyError explains a failure to read the request body: the client's
// fault, not the sandbox's.
func bodyError(err error) error {
	return fmt.Errorf("reading the request body: %v; resend the request: %w", err, sandbox.ErrInvalid)
}

// chooseEncoding picks the response encoding for an Accept-Encoding
// header as envd does: gzip when the client lists it with a quality at
// least identity's, else identity unless refused ("identity;q=0", or
// "*;q=0" without identity), else gzip if "*" allows it; "" when nothing
// is acceptable.
func chooseEncoding(header string) string {
	if strings.TrimSpace(header) == "" {
		return "identity"
	}
	gzipQ, identityQ, starQ := parseAcceptEncoding(header)
	if gzipQ > 0 && (identityQ < 0 || gzipQ >= identityQ) {
		return "gzip"
	}
	if identityAcceptable(header) {
		return "identity"
	}
	if starQ > 0 {
		return "gzip"
	}
	return ""
}

// identityAcceptable reports whether an Accept-Encoding header allows an
// unencoded response (RFC 9110 12.5.3).
func identityAcceptable(header string) bool {
	_, identityQ, starQ := parseAcceptEncoding(header)
	if identityQ >= 0 {
		return identityQ > 0
	}
	return starQ != 0
}

// parseAcceptEncoding returns the qualities of gzip, identity and "*" in
// an Accept-Encoding header, -1 for those not listed.
func parseAcceptEncoding(header string) (gzipQ, identityQ, starQ float64) {
	gzipQ, identityQ, starQ = -1, -1, -1
	for item := range strings.SplitSeq(header, ",") {
		name, params, _ := strings.Cut(item, ";")
		q := 1.0
		for param := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
			if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = x
				}
			}
		}
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "gzip", "x-gzip":
			gzipQ = q
		case "identity":
			identityQ = q
		case "*":
			starQ = q
		}
	}
	return gzipQ, identityQ, starQ
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
