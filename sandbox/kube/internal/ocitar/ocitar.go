// Package ocitar writes a single-layer container image as an OCI image
// layout in a tar stream, the form `ctr images import` (and docker load)
// reads, so images can be made on a machine that reaches no registry.
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
	tag, err := refTag(img.Ref)
	if err != nil {
		return err
	}
	layer, err := layerTar(img.Files)
	if err != nil {
		return err
	}
	layerDesc := descriptor("application/vnd.oci.image.layer.v1.tar", layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"Env":        img.Env,
			"Entrypoint": img.Entrypoint,
			"Cmd":        img.Cmd,
			"WorkingDir": img.WorkingDir,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
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
		"io.containerd.image.name":          img.Ref,
		"org.opencontainers.image.ref.name": tag,
	}
	manifestDesc.Platform = map[string]string{"architecture": "amd64", "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []desc{manifestDesc},
	})
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	entries := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(manifestDesc), manifest},
		{blobPath(configDesc), config},
		{blobPath(layerDesc), layer},
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if err := writeFile(tw, e.name, 0o644, e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

type desc struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int               `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    map[string]string `json:"platform,omitempty"`
}

func descriptor(mediaType string, data []byte) desc {
	sum := sha256.Sum256(data)
	return desc{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(data)}
}

func blobPath(d desc) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
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
			err = writeFile(tw, name, mode, f.Data)
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

func writeFile(tw *tar.Writer, name string, mode int64, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}
