package cli

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/cove-sandbox/cove/internal/cli/sandboxbin"
	"github.com/cove-sandbox/cove/sandbox/kube/kubeimage"
	"github.com/cove-sandbox/cove/template"
)

type pushOptions struct {
	output, tag, sandboxBin string
}

// templatePush writes template name of st as a container image for the
// kube runtime (package kubeimage) to o.output. dir is Cove's state
// directory, where the embedded cove-sandbox is installed.
func templatePush(st *template.Store, dir, name string, o pushOptions, stdout, stderr io.Writer) error {
	t, err := st.Get(name)
	if err != nil {
		return err
	}
	if len(t.Binds) > 0 {
		return fmt.Errorf("template %q binds this host's directories (%v), which an image cannot carry: push a built or imported template", name, t.Binds)
	}
	bin := o.sandboxBin
	if bin == "" {
		cmd, err := sandboxbin.Command(filepath.Join(dir, "bin"))
		if err != nil {
			return err
		}
		if cmd == nil {
			return fmt.Errorf("this cove was built without the embedded cove-sandbox (make build): give --sandbox-bin, a cove-sandbox built with CGO_ENABLED=0")
		}
		bin = cmd[0]
	}
	ref := o.tag
	if ref == "" {
		ref = "cove/" + name + ":latest"
	}
	fmt.Fprintf(stderr, "→ writing template %s as image %s\n", name, ref)
	return writeImage(o.output, ref, stdout, func(w io.Writer, tmp string) error {
		if err := kubeimage.Write(w, tmp, kubeimage.Options{Ref: ref, Root: t.RootFS, Sandbox: bin, Env: t.Config.Env}); err != nil {
			return fmt.Errorf("pushing template %q: %w", name, err)
		}
		return nil
	})
}
