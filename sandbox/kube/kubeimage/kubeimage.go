// Package kubeimage turns a Cove template's root filesystem into a
// container image for the kube runtime: one layer (the root as it is,
// plus the sandbox program at SandboxPath), its entrypoint the daemon
// (`cove-sandbox guest`, the template's environment as --env flags),
// written as a tar stream holding both an OCI image layout (index.json)
// and a docker save manifest (manifest.json), so `ctr images import`,
// `docker load` and `podman load` all read it, and a registry client
// (skopeo copy oci-archive:...) can push it.
package kubeimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox/kube/internal/ocitar"
)

// SandboxPath is where the image holds the sandbox program.
const SandboxPath = "/usr/local/bin/cove-sandbox"

// Options says what goes in the image.
type Options struct {
	// Ref names the image ("cove/python:latest").
	Ref string
	// Root is the directory that becomes the image's root filesystem.
	Root string
	// Sandbox is the host path of a statically linked cove-sandbox.
	Sandbox string
	// Env is the template's environment, given to every process.
	Env map[string]string
}

// Write writes the image as a tar stream to w. tmp is a directory for
// the layer while its digest is computed ("" means the system's).
func Write(w io.Writer, tmp string, o Options) error {
	if o.Ref == "" || o.Root == "" || o.Sandbox == "" {
		return fmt.Errorf("kubeimage: a reference, a root directory and the sandbox program are all needed")
	}
	cfg := ocitar.Config{User: "1000:1000", Entrypoint: entrypoint(o.Env), Env: []string{path}, WorkingDir: "/", CreatedBy: "cove template push"}
	return writeImage(w, tmp, o.Ref, cfg, func(lw io.Writer) error {
		if err := writeLayer(lw, o); err != nil {
			return fmt.Errorf("writing the image's layer from the template's root: %w", err)
		}
		return nil
	})
}

// writeImage writes an image of one layer, written by layer to a
// temporary file in tmp while its digest is computed, as a tar stream.
func writeImage(w io.Writer, tmp, ref string, cfg ocitar.Config, layer func(io.Writer) error) error {
	f, err := os.CreateTemp(tmp, "cove-layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	lh := sha256.New()
	if err := layer(io.MultiWriter(f, lh)); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return ocitar.WriteArchive(w, ref, cfg, f, size, hex.EncodeToString(lh.Sum(nil)))
}

// path is every image's PATH.
const path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// entrypoint is the daemon with the template's environment.
func entrypoint(env map[string]string) []string {
	ep := []string{SandboxPath, "guest"}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ep = append(ep, "--env", k+"="+env[k])
	}
	return ep
}

// writeLayer writes the root's tree, then the sandbox program and the
// directories every sandbox needs, as an uncompressed layer.
func writeLayer(w io.Writer, o Options) error {
	tw := tar.NewWriter(w)
	seen := map[string]bool{}
	err := filepath.WalkDir(o.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(o.Root, p)
		if err != nil || rel == "." {
			return err
		}
		if rel == strings.TrimPrefix(SandboxPath, "/") {
			return nil // ours goes in below
		}
		return addEntry(tw, p, rel, seen)
	})
	if err != nil {
		return err
	}
	for _, dir := range []string{"usr", "usr/local", "usr/local/bin", "tmp"} {
		if !seen[dir] {
			mode := int64(0o755)
			if dir == "tmp" {
				mode = 0o1777
			}
			if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: mode, Typeflag: tar.TypeDir, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
		}
	}
	f, err := os.Open(o.Sandbox)
	if err != nil {
		return fmt.Errorf("the sandbox program: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(SandboxPath, "/"), Mode: 0o755, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return err
	}
	return tw.Close()
}

// addEntry writes one entry of the root: directories, regular files
// and symbolic links with their owners and modes; sockets, fifos and
// devices are left out (a container runtime makes /dev).
func addEntry(tw *tar.Writer, p, rel string, seen map[string]bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	link := ""
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case fi.IsDir(), fi.Mode().IsRegular():
	default:
		return nil
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return err
	}
	h.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		h.Name += "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	h.Uname, h.Gname = "", ""
	h.ModTime = fi.ModTime().Truncate(time.Second)
	h.AccessTime, h.ChangeTime = time.Time{}, time.Time{}
	h.Format = tar.FormatPAX
	seen[filepath.ToSlash(rel)] = true
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		return fmt.Errorf("%s: %w", h.Name, err)
	}
	return nil
}
