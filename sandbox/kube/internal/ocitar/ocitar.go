// Package ocitar writes a single-layer container image as a tar stream
// that `ctr images import`, docker load and podman load read, so images
// can be made on a machine that reaches no registry: Cove's templates and
// server as images (kubeimage), and the test cluster's images.
package ocitar

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"runtime"
	"strings"
	"time"
)

// File is one entry of the image's only layer. Path is relative to the
// image's root ("bin/busybox"). Exactly one of Data (a regular file),
// Link (a symbolic link to Link) or Dir (a directory) describes it.
type File struct {
	Path string
	Mode int64 // permission bits; 0 means 0o755 for files and directories
	Data []byte
	Link string
	Dir  bool
}

// Image is what the image runs and carries.
type Image struct {
	// Ref names the image, a full reference ("cove.local/busybox:1");
	// ctr imports it under this name.
	Ref        string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Files      []File
}

// epoch dates every entry, so the same image always has the same digest
// and a second import is a no-op.
var epoch = time.Unix(0, 0).UTC()

// Write writes img as an OCI image layout tar (oci-layout, index.json,
// blobs/sha256/...) to w, the index naming it by img.Ref. It returns an
// error for a bad reference or file, or a failed write.
func Write(w io.Writer, img Image) error {
	if _, err := refTag(img.Ref); err != nil {
		return err
	}
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(layer)
	cfg := Config{Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: img.Env, WorkingDir: img.WorkingDir}
	return WriteArchive(w, img.Ref, cfg, bytes.NewReader(layer), int64(len(layer)), hex.EncodeToString(sum[:]))
}

// Config is what an image's config says of how it runs.
type Config struct {
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	CreatedBy  string // the history's one entry
}

// WriteArchive writes an image of one layer as a tar stream holding both
// an OCI image layout (oci-layout, index.json, blobs/sha256/...) and a
// docker save manifest (manifest.json), so `ctr images import`, `docker
// load` and `podman load` all read it and `skopeo copy oci-archive:` can
// push it. layer is the uncompressed layer tar, size bytes long, whose
// SHA-256 is layerDigest (hex). Every entry is dated at the epoch, so the
// same image always has the same digest and a second import is a no-op.
func WriteArchive(w io.Writer, ref string, cfg Config, layer io.Reader, size int64, layerDigest string) error {
	layerDesc := desc{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: "sha256:" + layerDigest, Size: size}
	run := map[string]any{"Entrypoint": cfg.Entrypoint, "Env": cfg.Env, "WorkingDir": cfg.WorkingDir}
	if cfg.User != "" {
		run["User"] = cfg.User
	}
	if cfg.Cmd != nil {
		run["Cmd"] = cfg.Cmd
	}
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch,
		"config":       run,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
		"history":      []map[string]any{{"created": epoch, "created_by": cfg.CreatedBy}},
	})
	if err != nil {
		return err
	}
	configDesc := descriptor("application/vnd.oci.image.config.v1+json", config)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []desc{layerDesc},
	})
	if err != nil {
		return err
	}
	manifestDesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDesc.Annotations = map[string]string{
		// ctr reads the full name from containerd's annotation; the OCI
		// one holds only the tag.
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tagOf(ref),
	}
	manifestDesc.Platform = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []desc{manifestDesc},
	})
	if err != nil {
		return err
	}
	docker, err := json.Marshal([]map[string]any{{
		"Config": blobPath(configDesc), "RepoTags": []string{ref}, "Layers": []string{blobPath(layerDesc)},
	}})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{"manifest.json", docker},
		{blobPath(manifestDesc), manifest},
		{blobPath(configDesc), config},
	} {
		if err := WriteFile(tw, e.name, 0o644, e.data); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: blobPath(layerDesc), Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: epoch}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return err
	}
	return tw.Close()
}

type desc struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func descriptor(mediaType string, data []byte) desc {
	sum := sha256.Sum256(data)
	return desc{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d desc) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}

// tagOf is ref's tag, "latest" when it names none.
func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return "latest"
}

// refTag checks that ref is a full reference with a tag and returns the
// tag: a bare name would be imported under a name nobody asked for.
func refTag(ref string) (string, error) {
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if slash <= 0 || colon < slash || colon == len(ref)-1 || strings.ContainsAny(ref, " @\t\n") {
		return "", fmt.Errorf("image reference %q: want a full name with a tag, such as cove.local/busybox:1", ref)
	}
	return ref[colon+1:], nil
}

// layerTar makes the layer: the files, with the directories above them
// that were not listed.
func layerTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	for _, f := range files {
		name := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if name == "." || strings.HasPrefix(name, "../") || name == ".." {
			return nil, fmt.Errorf("image file %q: want a path inside the image", f.Path)
		}
		if err := parents(tw, made, path.Dir(name)); err != nil {
			return nil, err
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		var err error
		switch {
		case f.Dir:
			made[name] = true
			err = tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode, ModTime: epoch})
		case f.Link != "":
			err = tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: f.Link, Mode: 0o777, ModTime: epoch})
		default:
			err = WriteFile(tw, name, mode, f.Data)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parents writes dir and the directories above it not yet written.
func parents(tw *tar.Writer, made map[string]bool, dir string) error {
	if dir == "." || made[dir] {
		return nil
	}
	if err := parents(tw, made, path.Dir(dir)); err != nil {
		return err
	}
	made[dir] = true
	return tw.WriteHeader(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch})
}

// WriteFile writes a regular file of data to tw, dated at the epoch.
func WriteFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
