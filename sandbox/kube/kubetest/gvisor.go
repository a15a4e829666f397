package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// GVisorRuntimeClass is the RuntimeClass whose pods run on gVisor, as a
// cluster with gVisor installed names it; its handler is runsc.
const GVisorRuntimeClass = "gvisor"

// runscHandler is the containerd runtime behind GVisorRuntimeClass.
const runscHandler = "runsc"

// gvisor is what the node needs to run pods on gVisor: gVisor's
// containerd shim and runsc, both built by scripts/deps.sh test.
type gvisor struct {
	shimDir string // holds containerd-shim-runsc-v1, put first on containerd's PATH
	config  string // the shim's configuration, runsc's path and flags
}

// setupGVisor finds the shim and runsc and writes the shim's
// configuration under the cluster's directory. The shim is gVisor's own
// (io.containerd.runsc.v1), as on any node that runs gVisor pods.
func (s *starter) setupGVisor() (*gvisor, error) {
	shim, err := runscShimBin()
	if err != nil {
		return nil, err
	}
	runsc, err := lookPath("runsc")
	if err != nil {
		return nil, fmt.Errorf("%w: scripts/deps.sh installs gVisor's runsc as /usr/local/bin/runsc", err)
	}
	dir := filepath.Join(s.dir, "runsc")
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return nil, err
	}
	// containerd finds a runtime's shim by its name on the PATH. Debian's
	// containerd 1.6 reads a shim's start answer as a bare address, and
	// gVisor's shim answers as containerd 1.7 and later read it, in JSON:
	// the wrapper gives 1.6 the address.
	wrapper := fmt.Sprintf(`#!/bin/sh
for a; do last=$a; done
[ "$last" = start ] || exec %[1]q "$@"
out=$(%[1]q "$@") || exit
addr=$(printf '%%s' "$out" | sed -n 's/^{.*"address":"\([^"]*\)".*}$/\1/p')
printf '%%s' "${addr:-$out}"
`, shim)
	if err := os.WriteFile(filepath.Join(dir, "bin", "containerd-shim-runsc-v1"), []byte(wrapper), 0o755); err != nil {
		return nil, err
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	text := strings.Join([]string{
		`binary_name = ` + q(runsc),
		`root = ` + q(filepath.Join(dir, "root")),
		`log_level = "info"`,
		`log_path = ` + q(filepath.Join(dir, "logs", "shim-%ID%.log")),
		`[runsc_config]`,
		// systrap: the platform that works here (KVM hangs, MACHINE-NOTES.md).
		`  platform = "systrap"`,
		`  debug-log = ` + q(filepath.Join(dir, "logs")+"/"),
		``,
	}, "\n")
	g := &gvisor{shimDir: filepath.Join(dir, "bin"), config: filepath.Join(dir, "config.toml")}
	return g, os.WriteFile(g.config, []byte(text), 0o644)
}

// runtime is containerd's configuration of the runsc handler, if any.
func (g *gvisor) runtime() string {
	if g == nil {
		return ""
	}
	return strings.Join([]string{
		`    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + runscHandler + `]`,
		`      runtime_type = "io.containerd.runsc.v1"`,
		`      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.` + runscHandler + `.options]`,
		`        TypeUrl = "io.containerd.runsc.v1.options"`,
		fmt.Sprintf(`        ConfigPath = %q`, g.config),
	}, "\n")
}

// env is containerd's environment: the shim's directory first on the PATH.
func (g *gvisor) env() []string {
	env := []string{"PATH=" + g.shimDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return env
}

// createRuntimeClass makes GVisorRuntimeClass.
func createRuntimeClass(ctx context.Context, cs kubernetes.Interface) error {
	_, err := cs.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: GVisorRuntimeClass}, Handler: runscHandler,
	}, metav1.CreateOptions{})
	return err
}

// runscShimBin returns gVisor's containerd shim that scripts/deps.sh
// built: $COVE_RUNSC_SHIM, or .cache/runsc/containerd-shim-runsc-v1-VERSION
// in the checkout, VERSION being tools/runsc's gVisor pin.
func runscShimBin() (string, error) {
	return builtTool("COVE_RUNSC_SHIM", "runsc", "gvisor.dev/gvisor", "runsc/containerd-shim-runsc-v1-")
}

// GVisor returns the RuntimeClass whose pods run on gVisor, or why the
// node has none.
func (c *Cluster) GVisor() (string, error) {
	if c.gvisorErr != nil {
		return "", c.gvisorErr
	}
	return GVisorRuntimeClass, nil
}
