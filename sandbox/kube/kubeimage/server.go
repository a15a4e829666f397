package kubeimage

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox/kube/internal/ocitar"
)

// ServerUID is the user the server's image runs as (not root, and no
// user of the host's: the deployment's runAsUser says the same).
const ServerUID = 65532

// ServerPath is where the server's image holds the cove program.
const ServerPath = "/usr/local/bin/cove"

// ServerOptions says what goes in the server's image.
type ServerOptions struct {
	// Ref names the image ("cove/server:latest").
	Ref string
	// Program is the host path of a statically linked cove (the full
	// program, not the front: the image's root is read-only).
	Program string
	// CACerts is the host path of a PEM bundle of CA certificates, for
	// the model endpoint and git clones over HTTPS ("" leaves them out).
	CACerts string
}

// WriteServer writes the image of the Cove server as a tar stream to w:
// cove alone (no shell, no package manager), CA certificates, the user
// ServerUID, and /tmp; its entrypoint is cove, so the pod's args are
// cove's ("serve", flags). tmp is as for Write.
func WriteServer(w io.Writer, tmp string, o ServerOptions) error {
	if o.Ref == "" || o.Program == "" {
		return fmt.Errorf("kubeimage: a reference and the cove program are both needed")
	}
	uid := fmt.Sprint(ServerUID)
	cfg := ocitar.Config{User: uid + ":" + uid, Entrypoint: []string{ServerPath}, Env: []string{path}, WorkingDir: "/", CreatedBy: "cove image server"}
	return writeImage(w, tmp, o.Ref, cfg, func(lw io.Writer) error {
		if err := writeServerLayer(lw, o); err != nil {
			return fmt.Errorf("writing the server image's layer: %w", err)
		}
		return nil
	})
}

func writeServerLayer(w io.Writer, o ServerOptions) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	for _, d := range []struct {
		name string
		mode int64
	}{{"etc", 0o755}, {"etc/ssl", 0o755}, {"etc/ssl/certs", 0o755}, {"tmp", 0o1777}, {"usr", 0o755}, {"usr/local", 0o755}, {"usr/local/bin", 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Name: d.name + "/", Mode: d.mode, Typeflag: tar.TypeDir, ModTime: epoch}); err != nil {
			return err
		}
	}
	uid := fmt.Sprint(ServerUID)
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\ncove:x:" + uid + ":" + uid + ":cove:/var/lib/cove:/sbin/nologin\n",
		"etc/group":  "root:x:0:\ncove:x:" + uid + ":\n",
	}
	for _, name := range []string{"etc/passwd", "etc/group"} {
		if err := ocitar.WriteFile(tw, name, 0o644, []byte(files[name])); err != nil {
			return err
		}
	}
	if o.CACerts != "" {
		if err := copyInto(tw, o.CACerts, "etc/ssl/certs/ca-certificates.crt", 0o644); err != nil {
			return fmt.Errorf("the CA certificates: %w", err)
		}
	}
	if err := copyInto(tw, o.Program, strings.TrimPrefix(ServerPath, "/"), 0o755); err != nil {
		return fmt.Errorf("the cove program: %w", err)
	}
	return tw.Close()
}

// copyInto writes the host file src into the layer as name.
func copyInto(tw *tar.Writer, src, name string, mode int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, st.Size())
	return err
}
