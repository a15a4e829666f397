package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox/kube/kubeimage"
)

const imageUsage = `Usage: cove image server --output FILE.tar [--tag REF]

Writes the Cove server as a container image (an OCI layout and a docker
save manifest in one tar): this cove program alone, run as uid 65532,
with the host's CA certificates. Load it where the cluster pulls from:
  ctr -n k8s.io images import FILE.tar      (each node's containerd)
  docker load -i FILE.tar && docker push REF
and deploy it with kubectl apply -k deploy/kubernetes (see the README).

Flags:
`

// caBundle is the host's CA certificates, put in the server's image.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

func imageCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), imageUsage); fs.PrintDefaults() }
	output := fs.String("output", "", `the image tar to write ("-": standard output)`)
	tag := fs.String("tag", "cove/server:latest", "the image's reference")
	if len(args) == 0 || args[0] != "server" {
		fs.Usage()
		return clibase.ErrUsage
	}
	if err := clibase.ParseFlags(fs, args[1:], stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 || *output == "" {
		fmt.Fprintln(stderr, "cove image server takes --output FILE.tar and no arguments")
		return clibase.ErrUsage
	}
	prog, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this cove program: %w", err)
	}
	o := kubeimage.ServerOptions{Ref: *tag, Program: prog}
	if _, err := os.Stat(caBundle); err == nil {
		o.CACerts = caBundle
	}
	fmt.Fprintf(stderr, "→ writing the Cove server (%s) as image %s\n", clibase.Version, *tag)
	return writeImage(*output, *tag, stdout, func(w io.Writer, tmp string) error {
		return kubeimage.WriteServer(w, tmp, o)
	})
}

// writeImage runs write to output ("-": stdout), through a temporary
// file beside it renamed at the end, so a failed write leaves no half
// image; then prints the image's reference and where it went.
func writeImage(output, ref string, stdout io.Writer, write func(w io.Writer, tmp string) error) error {
	if output == "-" {
		return write(stdout, "")
	}
	dir := filepath.Dir(output)
	f, err := os.CreateTemp(dir, ".cove-image-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", output, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := write(f, dir); err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("writing %s: %w", output, err)
	}
	if err := os.Rename(f.Name(), output); err != nil {
		return fmt.Errorf("writing %s: %w", output, err)
	}
	fmt.Fprintf(stdout, "%s\t%s\n", ref, output)
	return nil
}
