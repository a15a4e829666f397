// Package imagetest makes small container images for tests on the test
// cluster (kubetest), which reaches no registry: images are written as
// tarballs in Go and imported into the node's containerd.
package imagetest

import (
	"bytes"
	"sync"
	"testing"

	"github.com/cove-sandbox/cove/sandbox/kube/internal/ocitar"
	"github.com/cove-sandbox/cove/sandbox/kube/kubetest"
)

// BusyboxRef is the reference Busybox imports its image as.
const BusyboxRef = "cove.local/kubetest-busybox:1"

// Busybox imports a tiny image into the binary's shared cluster
// (kubetest.Shared) and returns its reference: the host's static busybox
// with its applets in /bin (sh, sleep, cat, ...), no entrypoint, and
// "sh" as its command. Pods must use it with imagePullPolicy
// IfNotPresent or Never. Importing it again is cheap and changes
// nothing.
func Busybox(t testing.TB) string {
	t.Helper()
	return BusyboxIn(t, kubetest.Shared(t))
}

// imported holds the clusters Busybox imported into, so each imports
// once (a failed import fails its test and is tried again by the next).
var imported struct {
	mu       sync.Mutex // held across an import
	clusters map[*kubetest.Cluster]bool
}

// BusyboxIn is Busybox for a given cluster.
func BusyboxIn(t testing.TB, c *kubetest.Cluster) string {
	t.Helper()
	imported.mu.Lock()
	defer imported.mu.Unlock()
	if !imported.clusters[c] {
		importBusybox(t, c)
		if imported.clusters == nil {
			imported.clusters = map[*kubetest.Cluster]bool{}
		}
		imported.clusters[c] = true
	}
	return BusyboxRef
}

func importBusybox(t testing.TB, c *kubetest.Cluster) {
	t.Helper()
	files, err := ocitar.BusyboxFiles()
	if err != nil {
		t.Fatalf("making the busybox image: %v", err)
	}
	var buf bytes.Buffer
	err = ocitar.Write(&buf, ocitar.Image{
		Ref:   BusyboxRef,
		Cmd:   []string{"sh"},
		Env:   []string{"PATH=/bin"},
		Files: files,
	})
	if err != nil {
		t.Fatalf("making the busybox image: %v", err)
	}
	c.ImportImage(t, BusyboxRef, &buf)
}
