package kubeimage

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServerImage: the server's image holds cove as its entrypoint, run
// as uid 65532 (no root), with the CA bundle and /etc/passwd naming that
// user, and nothing else of the host.
func TestServerImage(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "cove")
	os.WriteFile(prog, []byte("the cove program"), 0o700)
	ca := filepath.Join(dir, "ca.crt")
	os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	var buf bytes.Buffer
	if err := WriteServer(&buf, dir, ServerOptions{Ref: "cove/server:latest", Program: prog, CACerts: ca}); err != nil {
		t.Fatal(err)
	}
	blobs := readTar(t, &buf)
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	json.Unmarshal(blobs["index.json"], &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["io.containerd.image.name"] != "cove/server:latest" {
		t.Fatalf("index.json: %s", blobs["index.json"])
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	json.Unmarshal(blobs[blobPath(index.Manifests[0].Digest)], &manifest)
	var config struct {
		Config struct {
			User       string
			Entrypoint []string
		}
	}
	json.Unmarshal(blobs[blobPath(manifest.Config.Digest)], &config)
	if config.Config.User != "65532:65532" || strings.Join(config.Config.Entrypoint, " ") != ServerPath {
		t.Errorf("the image runs %q as %q, want %s as 65532:65532", config.Config.Entrypoint, config.Config.User, ServerPath)
	}
	if len(manifest.Layers) != 1 {
		t.Fatalf("layers: %+v", manifest.Layers)
	}
	files := readTar(t, bytes.NewReader(blobs[blobPath(manifest.Layers[0].Digest)]))
	if string(files["usr/local/bin/cove"]) != "the cove program" || !bytes.HasPrefix(files["etc/ssl/certs/ca-certificates.crt"], []byte("-----BEGIN")) ||
		!strings.Contains(string(files["etc/passwd"]), ":65532:65532:") {
		t.Errorf("the layer's files: %v", keys(files))
	}
	if err := WriteServer(&bytes.Buffer{}, dir, ServerOptions{Ref: "x", Program: dir}); err == nil {
		t.Errorf("a directory as the program: no error")
	}
}

func blobPath(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }

// readTar returns the regular files of a tar by name.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			out[h.Name], _ = io.ReadAll(tr)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
