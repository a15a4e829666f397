package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

// Import makes a template from a container image tarball: the output of
// `docker save` (manifest.json, in its old or its OCI form) or an OCI
// image layout in a tar (oci-layout, index.json, blobs/). r need not be
// seekable: a stream that is not a regular *os.File is first copied into
// the store's tmp directory.
//
// The image's layers are applied in order, gzip-, zstd-, bzip2-compressed
// or plain (recognised by their first bytes), with the OCI whiteout rules:
// ".wh.NAME" deletes NAME from lower layers, ".wh..wh..opq" empties its
// directory of what lower layers put there. From an index, the manifest
// for linux and this machine's architecture is chosen. OCI blobs are
// checked against their digests.
//
// A member with an absolute name, a ".." component, or a parent directory
// that is a symlink (written by an earlier member or layer: a write
// through it could land anywhere) is refused with an error wrapping
// sandbox.ErrInvalid that names the layer and the member. Absolute symlink
// targets are allowed: they resolve inside the sandbox. Device nodes and
// fifos are skipped with a note (the runtime provides /dev); extended
// attributes (file capabilities) are not kept, as sandbox processes run
// with no_new_privs and no capabilities. Owners are kept when running as
// root; otherwise every file belongs to the calling user.
//
// The template's Config takes Env, WorkingDir and User from the image
// config (Entrypoint and Cmd do not apply: sandboxes run the daemon). The
// sandbox user, uid 1000, is added to /etc/passwd unless the image has
// uid 1000 or names a non-root User of its own (see ensureUser), and the
// mount points /dev, /proc, /sys and /tmp are created when missing.
//
// progress (may be nil) receives a line per layer ("layer 2/5 (12.3 MB)")
// and notes as the import goes. An existing name is sandbox.ErrExist; a
// tarball that is not an image, or is damaged, sandbox.ErrInvalid.
func (s *Store) Import(ctx context.Context, name string, r io.Reader, progress func(string)) (*Template, error) {
	if progress == nil {
		progress = func(string) {}
	}
	if err := s.checkNew(name); err != nil {
		return nil, err
	}
	tmp, err := s.tempDir("import")
	if err != nil {
		return nil, fmt.Errorf("importing template %q: %w", name, err)
	}
	committed := false
	defer func() {
		if !committed {
			removeTree(tmp)
		}
	}()
	wrap := func(err error) error {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("importing template %q: %w", name, err)
	}

	ra, size, closeRA, err := s.seekable(ctx, r, tmp, progress)
	if err != nil {
		return nil, wrap(err)
	}
	defer closeRA()
	arch, err := indexArchive(ra, size)
	if err != nil {
		return nil, wrap(err)
	}
	img, err := arch.image()
	if err != nil {
		return nil, wrap(err)
	}
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, wrap(err)
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, wrap(err)
	}
	defer root.Close()
	chown := os.Geteuid() == 0
	layers := tarball.NewLayers(root, tarball.LayerOptions{Chown: chown, Note: progress})
	for i, l := range img.layers {
		start := time.Now()
		progress(fmt.Sprintf("layer %d/%d (%s)...", i+1, len(img.layers), HumanSize(l.size)))
		if err := arch.applyLayer(ctx, layers, l); err != nil {
			label := l.name
			if l.digest != "" {
				label = "sha256:" + shortDigest(l.digest)
			}
			return nil, wrap(fmt.Errorf("layer %d/%d (%s): %w", i+1, len(img.layers), label, err))
		}
		progress(fmt.Sprintf("layer %d/%d done in %s", i+1, len(img.layers), time.Since(start).Round(time.Millisecond)))
	}
	if err := layers.Finish(); err != nil {
		return nil, wrap(err)
	}
	if err := ensureMountPoints(root); err != nil {
		return nil, wrap(err)
	}
	note, err := ensureUser(root, img.config.User, chown)
	if err != nil {
		return nil, wrap(err)
	}
	if note != "" {
		progress(note)
	}
	progress("hashing the root filesystem...")
	committed = true // commit removes tmp
	t, err := s.commit(ctx, name, tmp, meta{Config: img.config, Source: img.source})
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("template %s: %s, %s", name, shortDigest(t.Digest), HumanSize(t.Size)))
	return t, nil
}

// seekable returns r as an io.ReaderAt: a regular file as it is, anything
// else copied into dir first.
func (s *Store) seekable(ctx context.Context, r io.Reader, dir string, progress func(string)) (io.ReaderAt, int64, func(), error) {
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			off, err := f.Seek(0, io.SeekCurrent)
			if err == nil {
				return io.NewSectionReader(f, off, fi.Size()-off), fi.Size() - off, func() {}, nil
			}
		}
	}
	progress("reading the image tarball...")
	f, err := os.Create(filepath.Join(dir, "image.tar"))
	if err != nil {
		return nil, 0, nil, err
	}
	n, err := io.Copy(f, tarball.ContextReader(ctx, r))
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("reading the image tarball: %w", err)
	}
	progress(fmt.Sprintf("read %s", HumanSize(n)))
	// The copy stays open for the import; it is deleted with dir.
	return f, n, func() { f.Close() }, nil
}

// archive indexes the members of an image tarball without extracting
// them: names are only looked up, never used as paths, so a hostile outer
// tar cannot write anything.
type archive struct {
	ra      io.ReaderAt
	members map[string]archiveMember
}

type archiveMember struct {
	off, size int64
	link      string // symlink or hard link target, a member name
}

func indexArchive(ra io.ReaderAt, size int64) (*archive, error) {
	sr := io.NewSectionReader(ra, 0, size)
	tr := tar.NewReader(sr) // skips member data with Seek
	a := &archive{ra: ra, members: map[string]archiveMember{}}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the image tarball: %v; is it a `docker save` or OCI image tarball?: %w", err, sandbox.ErrInvalid)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		switch hdr.Typeflag {
		case tar.TypeReg:
			// tar.Reader reads exactly the header blocks, so the data
			// starts where the reader stands now.
			off, _ := sr.Seek(0, io.SeekCurrent)
			a.members[name] = archiveMember{off: off, size: hdr.Size}
		case tar.TypeSymlink:
			a.members[name] = archiveMember{link: path.Join(path.Dir(name), hdr.Linkname)}
		case tar.TypeLink:
			a.members[name] = archiveMember{link: path.Clean(hdr.Linkname)}
		}
	}
	return a, nil
}

// open returns the content of a member, following links between members.
func (a *archive) open(name string) (*io.SectionReader, error) {
	name = path.Clean(name)
	for range 8 {
		m, ok := a.members[name]
		if !ok {
			return nil, fmt.Errorf("the image tarball has no file %q: %w", name, sandbox.ErrInvalid)
		}
		if m.link == "" {
			return io.NewSectionReader(a.ra, m.off, m.size), nil
		}
		name = path.Clean(m.link)
	}
	return nil, fmt.Errorf("the image tarball's %q is a loop of links: %w", name, sandbox.ErrInvalid)
}

// readJSON decodes a member (at most 16 MiB: manifests and configs are
// small).
func (a *archive) readJSON(name string, v any) error {
	sr, err := a.open(name)
	if err != nil {
		return err
	}
	if sr.Size() > 16<<20 {
		return fmt.Errorf("%s is %d bytes, too large for an image manifest or config: %w", name, sr.Size(), sandbox.ErrInvalid)
	}
	b, err := io.ReadAll(sr)
	if err != nil {
		return fmt.Errorf("reading %s from the image tarball: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s in the image tarball: %v: %w", name, err, sandbox.ErrInvalid)
	}
	return nil
}

// image is what Import needs from an image: its layers in order and its
// config.
type image struct {
	layers []layerRef
	config Config
	source string
}

type layerRef struct {
	name   string // member name in the tarball
	size   int64
	digest string // expected sha256 of the blob; "" to skip the check
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Platform  *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant,omitempty"`
	} `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type ociIndex struct {
	MediaType string       `json:"mediaType"`
	Manifests []descriptor `json:"manifests"`
}

type ociManifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
	Manifests []descriptor `json:"manifests"` // set when this is an index
}

type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Env        []string `json:"Env"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
	} `json:"config"`
}

// image finds the image's layers and config: from docker save's
// manifest.json when there is one, else from the OCI layout's index.json.
func (a *archive) image() (*image, error) {
	if _, ok := a.members["manifest.json"]; ok {
		return a.dockerImage()
	}
	if _, ok := a.members["index.json"]; ok {
		return a.ociImage()
	}
	return nil, fmt.Errorf("the tarball has neither manifest.json (docker save) nor index.json (OCI image layout); make it with `docker save IMAGE -o FILE.tar` or `skopeo copy ... oci-archive:FILE.tar`: %w", sandbox.ErrInvalid)
}

func (a *archive) dockerImage() (*image, error) {
	var ms []dockerManifest
	if err := a.readJSON("manifest.json", &ms); err != nil {
		return nil, err
	}
	if len(ms) == 0 {
		return nil, fmt.Errorf("manifest.json lists no image: %w", sandbox.ErrInvalid)
	}
	m := ms[0] // docker save of several images: the first
	img := &image{source: "image"}
	if len(m.RepoTags) > 0 {
		img.source = "image " + m.RepoTags[0]
	}
	for _, l := range m.Layers {
		sr, err := a.open(l)
		if err != nil {
			return nil, err
		}
		ref := layerRef{name: l, size: sr.Size()}
		// In docker save's OCI form, layers are blobs named by digest.
		if hexd, ok := strings.CutPrefix(path.Clean(l), "blobs/sha256/"); ok && sha256RE().MatchString(hexd) {
			ref.digest = "sha256:" + hexd
		}
		img.layers = append(img.layers, ref)
	}
	if err := a.applyConfig(img, m.Config); err != nil {
		return nil, err
	}
	return img, nil
}

func (a *archive) ociImage() (*image, error) {
	var idx ociIndex
	if err := a.readJSON("index.json", &idx); err != nil {
		return nil, err
	}
	img := &image{source: "image"}
	m, err := a.pickManifest(idx.Manifests, 0)
	if err != nil {
		return nil, err
	}
	for _, d := range idx.Manifests {
		if n := d.Annotations["org.opencontainers.image.ref.name"]; n != "" {
			img.source = "image " + n
			break
		}
	}
	for _, l := range m.Layers {
		p, err := blobPath(l.Digest)
		if err != nil {
			return nil, err
		}
		if strings.Contains(l.MediaType, "nondistributable") || strings.Contains(l.MediaType, "foreign") {
			if _, ok := a.members[p]; !ok {
				return nil, fmt.Errorf("layer %s (%s) is not in the tarball; it must be fetched from elsewhere, which cove does not do: %w", l.Digest, l.MediaType, sandbox.ErrInvalid)
			}
		}
		img.layers = append(img.layers, layerRef{name: p, size: l.Size, digest: l.Digest})
	}
	cfg, err := blobPath(m.Config.Digest)
	if err != nil {
		return nil, err
	}
	if err := a.applyConfig(img, cfg); err != nil {
		return nil, err
	}
	return img, nil
}

// pickManifest follows index entries down to an image manifest for
// linux/GOARCH (an entry without a platform matches too; attestation
// entries, "unknown/unknown", never do).
func (a *archive) pickManifest(ds []descriptor, depth int) (*ociManifest, error) {
	if depth > 4 {
		return nil, fmt.Errorf("image indexes nest too deep: %w", sandbox.ErrInvalid)
	}
	var seen []string
	for _, d := range ds {
		if p := d.Platform; p != nil {
			seen = append(seen, p.OS+"/"+p.Architecture)
			if p.OS != "linux" || p.Architecture != runtime.GOARCH {
				continue
			}
		}
		p, err := blobPath(d.Digest)
		if err != nil {
			return nil, err
		}
		var m ociManifest
		if err := a.readJSON(p, &m); err != nil {
			return nil, err
		}
		if len(m.Manifests) > 0 || strings.Contains(m.MediaType, "index") || strings.Contains(m.MediaType, "manifest.list") {
			return a.pickManifest(m.Manifests, depth+1)
		}
		return &m, nil
	}
	if len(seen) > 0 {
		return nil, fmt.Errorf("the image has no linux/%s variant (it has %s): %w", runtime.GOARCH, strings.Join(seen, ", "), sandbox.ErrInvalid)
	}
	return nil, fmt.Errorf("index.json lists no image manifest: %w", sandbox.ErrInvalid)
}

func (a *archive) applyConfig(img *image, name string) error {
	var c imageConfig
	if err := a.readJSON(name, &c); err != nil {
		return err
	}
	if c.OS != "" && c.OS != "linux" {
		return fmt.Errorf("the image is for %s; sandboxes run Linux images: %w", c.OS, sandbox.ErrInvalid)
	}
	if c.Architecture != "" && c.Architecture != runtime.GOARCH {
		return fmt.Errorf("the image is for %s; this machine runs %s: %w", c.Architecture, runtime.GOARCH, sandbox.ErrInvalid)
	}
	if err := checkImageUser(c.Config.User); err != nil {
		return err
	}
	cfg := Config{Workdir: c.Config.WorkingDir, User: c.Config.User}
	for _, kv := range c.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" {
			continue
		}
		if cfg.Env == nil {
			cfg.Env = map[string]string{}
		}
		cfg.Env[k] = v
	}
	img.config = cfg
	return nil
}

// checkImageUser vets an image config's User ("name", "uid", or either
// with ":group"): each part is a user or group name (sandbox's rules for
// user names), since a runtime may build a path from it (the user's home).
func checkImageUser(u string) error {
	if u == "" {
		return nil
	}
	name, group, hasGroup := strings.Cut(u, ":")
	err := sandbox.ValidUserName(name)
	if err == nil && hasGroup {
		err = sandbox.ValidUserName(group)
	}
	if err != nil {
		return fmt.Errorf("the image's config names the user %q: a user and group must each be a %w", u, err)
	}
	return nil
}

var sha256RE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

// blobPath is where an OCI layout keeps the blob with this digest.
func blobPath(digest string) (string, error) {
	alg, hexd, ok := strings.Cut(digest, ":")
	if !ok || alg != "sha256" || !sha256RE().MatchString(hexd) {
		return "", fmt.Errorf("unsupported or malformed digest %q (want sha256:<64 hex digits>): %w", digest, sandbox.ErrInvalid)
	}
	return "blobs/sha256/" + hexd, nil
}

// applyLayer decompresses one layer blob and unpacks it, checking the
// blob's digest when it is known.
func (a *archive) applyLayer(ctx context.Context, layers *tarball.Layers, l layerRef) error {
	sr, err := a.open(l.name)
	if err != nil {
		return err
	}
	var h hash.Hash
	var src io.Reader = sr
	if l.digest != "" {
		h = sha256.New()
		src = io.TeeReader(sr, h)
	}
	br := bufio.NewReaderSize(src, 1<<20)
	dec, closeDec, err := decompress(br)
	if err != nil {
		return err
	}
	defer closeDec()
	if err := layers.Apply(ctx, dec); err != nil {
		return err
	}
	if h != nil {
		// The tar may end before its blob does (padding): hash it all.
		if _, err := io.Copy(io.Discard, br); err != nil {
			return err
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != l.digest {
			return fmt.Errorf("the blob's digest is %s, not %s: the tarball is damaged: %w", got, l.digest, sandbox.ErrInvalid)
		}
	}
	return nil
}

// decompress recognises the layer's compression by its first bytes.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %v: %w", err, sandbox.ErrInvalid)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %v: %w", err, sandbox.ErrInvalid)
		}
		return zr, zr.Close, nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		return bzip2.NewReader(br), func() {}, nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return nil, nil, fmt.Errorf("xz-compressed layers are not supported; re-save the image with gzip or uncompressed layers: %w", sandbox.ErrInvalid)
	}
	return br, func() {}, nil
}

// HumanSize formats bytes as "12.3 MB".
func HumanSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %cB", f, " kMGT"[i])
}

// shortDigest is the first 12 hex digits of a digest.
func shortDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}
