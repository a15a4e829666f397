package imagetest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cove-sandbox/cove/sandbox/kube/kubeimage"
)

// sandboxUID is the user the kube runtime runs sandboxes as (kube.UID;
// this package cannot import kube, whose own tests use it).
const sandboxUID = 1000

// Template writes a Cove template image for the kube runtime, as `cove
// template push` would, named ref: a busybox root (its applets in /bin,
// a printenv, user uid 1000 with its home, /workspace) with a static
// cove-sandbox built from this module as its daemon. dir is scratch
// space. Import it with (*kubetest.Cluster).ImportImage.
func Template(dir, ref string) ([]byte, error) {
	bin := filepath.Join(dir, "cove-sandbox")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/cove-sandbox/cove/cmd/cove-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building cove-sandbox: %v: %s", err, out)
	}
	root := filepath.Join(dir, "root")
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("the test template needs busybox-static (./scripts/deps.sh test): %w", err)
	}
	for _, d := range []string{"bin", "etc", "home/user", "tmp", "workspace", "proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	os.Chmod(filepath.Join(root, "tmp"), 0o1777)
	os.Chown(filepath.Join(root, "home/user"), sandboxUID, sandboxUID)
	data, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		return nil, err
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			os.Symlink("busybox", filepath.Join(root, "bin", applet))
		}
	}
	// Debian's busybox has no printenv applet; the suite uses it.
	os.WriteFile(filepath.Join(root, "bin/printenv"), []byte(printenv), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nuser:x:1000:\n"), 0o644)
	var buf bytes.Buffer
	err = kubeimage.Write(&buf, dir, kubeimage.Options{Ref: ref, Root: root, Sandbox: bin,
		Env: map[string]string{"PATH": "/bin:/usr/local/bin", "HOME": "/home/user"}})
	return buf.Bytes(), err
}

// printenv prints the named variables' values (all of the environment
// without names); 1 if one is unset.
const printenv = `#!/bin/sh
[ $# -eq 0 ] && exec env
st=0
for n in "$@"; do
	eval "set_=\${$n+x}"
	if [ "$set_" = x ]; then eval "printf '%s\\n' \"\$$n\""; else st=1; fi
done
exit $st
`
