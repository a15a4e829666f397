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
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
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
	cfg := imageConfig{User: "1000:1000", Entrypoint: entrypoint(o.Env), CreatedBy: "cove template push"}
	return writeImage(w, tmp, o.Ref, cfg, func(lw io.Writer) error {
		if err := writeLayer(lw, o); err != nil {
			return fmt.Errorf("writing the image's layer from the template's root: %w", err)
		}
		return nil
	})
}

// writeImage writes an image of one layer, written by layer to a
// temporary file in tmp while its digest is computed, as a tar stream.
func writeImage(w io.Writer, tmp, ref string, cfg imageConfig, layer func(io.Writer) error) error {
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
	return writeArchive(w, ref, cfg, f, size, hex.EncodeToString(lh.Sum(nil)))
}

// imageConfig is what an image's config says of how it runs.
type imageConfig struct {
	User       string
	Entrypoint []string
	CreatedBy  string
}

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

func writeArchive(w io.Writer, ref string, ic imageConfig, layer io.Reader, size int64, layerDigest string) error {
	created := time.Unix(0, 0).UTC()
	config := map[string]any{
		"created":      created,
		"architecture": goarch(),
		"os":           "linux",
		"config": map[string]any{
			"User":       ic.User,
			"Entrypoint": ic.Entrypoint,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			"WorkingDir": "/",
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerDigest}},
		"history": []map[string]any{{"created": created, "created_by": ic.CreatedBy}},
	}
	configJSON, _ := json.Marshal(config)
	configDigest := digest(configJSON)
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + configDigest, "size": len(configJSON)},
		"layers":        []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": "sha256:" + layerDigest, "size": size}},
	}
	manifestJSON, _ := json.Marshal(manifest)
	manifestDigest := digest(manifestJSON)
	tag := ref
	if i := strings.LastIndex(tag, ":"); i >= 0 && !strings.Contains(tag[i:], "/") {
		tag = tag[i+1:]
	}
	index := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []map[string]any{{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": "sha256:" + manifestDigest, "size": len(manifestJSON),
			"annotations": map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
		}},
	}
	indexJSON, _ := json.Marshal(index)
	docker, _ := json.Marshal([]map[string]any{{
		"Config": "blobs/sha256/" + configDigest, "RepoTags": []string{ref}, "Layers": []string{"blobs/sha256/" + layerDigest},
	}})
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"blobs/sha256/" + configDigest, configJSON},
		{"blobs/sha256/" + manifestDigest, manifestJSON},
		{"index.json", indexJSON},
		{"manifest.json", docker},
	} {
		if err := writeFile(tw, f.name, f.data); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/sha256/" + layerDigest, Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: created}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return err
	}
	return tw.Close()
}

func writeFile(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func goarch() string { return runtime.GOARCH }

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
