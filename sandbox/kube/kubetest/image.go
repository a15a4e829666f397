package kubetest

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox/kube/internal/ocitar"
)

// ImportImage imports an image tarball (an OCI image layout or a docker
// save archive) into the node's containerd, in the namespace the kubelet
// uses (k8s.io), unpacked, and makes sure it is known as ref. Pods must
// use it with imagePullPolicy IfNotPresent or Never: nothing can be
// pulled here. It fails t if ctr fails.
func (c *Cluster) ImportImage(t testing.TB, ref string, tarball io.Reader) {
	t.Helper()
	if err := c.importImage(ref, tarball); err != nil {
		t.Fatalf("importing image %s: %v", ref, err)
	}
}

func (c *Cluster) importImage(ref string, tarball io.Reader) error {
	want := normalizeRef(ref)
	out, err := c.ctr(tarball, "images", "import", "-")
	if err != nil {
		return err
	}
	// ctr prints "unpacking NAME (sha256:...)...done" for each image.
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "unpacking "); ok {
			if name, _, ok := strings.Cut(rest, " "); ok {
				names = append(names, name)
			}
		}
	}
	switch {
	case slices.Contains(names, want):
		return nil
	case len(names) == 1:
		_, err := c.ctr(nil, "images", "tag", "--force", names[0], want)
		return err
	default:
		return fmt.Errorf("the tarball held %d images (%s), none of them %s", len(names), strings.Join(names, ", "), want)
	}
}

// ctr runs ctr against the cluster's containerd in namespace k8s.io.
func (c *Cluster) ctr(stdin io.Reader, args ...string) (string, error) {
	cmd := exec.Command(c.Bin("ctr"), append([]string{"--address", c.ctrAddress, "--namespace", "k8s.io"}, args...)...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// normalizeRef spells ref as containerd stores it: a name without a
// registry is Docker Hub's, a name without a tag is :latest.
func normalizeRef(ref string) string {
	name := ref
	first, _, hasSlash := strings.Cut(ref, "/")
	if !hasSlash || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		if !hasSlash {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	last := name[strings.LastIndex(name, "/")+1:]
	if !strings.ContainsAny(last, ":@") {
		name += ":latest"
	}
	return name
}

// pauseTar is the pods' sandbox image: busybox sleeping for ever. Pods
// are stopped with SIGKILL, so it needs no signal handling.
func pauseTar() (io.Reader, error) {
	files, err := ocitar.BusyboxFiles()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	err = ocitar.Write(&buf, ocitar.Image{
		Ref:        pauseImage,
		Entrypoint: []string{"/bin/busybox", "sleep", "2147483647"},
		Files:      files,
	})
	return &buf, err
}
