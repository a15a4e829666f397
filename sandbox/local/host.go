package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/template"
)

// StoreTemplates resolves templates from a template store, "host"
// included.
type StoreTemplates struct {
	Store *template.Store
}

// Resolve implements Templates.
func (t StoreTemplates) Resolve(ctx context.Context, name string) (Rootfs, error) {
	var tm *template.Template
	var err error
	if name == template.HostName {
		tm, err = t.Store.Host()
	} else {
		tm, err = t.Store.Get(name)
	}
	if err != nil {
		return Rootfs{}, err
	}
	return Rootfs{
		Digest: tm.Digest, Lower: tm.RootFS, Binds: tm.Binds,
		Env: tm.Config.Env, Workdir: tm.Config.Workdir, User: tm.Config.User,
	}, nil
}

// TemplatesInUse reads the sandboxes under dir (running or stopped) and
// returns the digests of the templates they use, so a template store can
// refuse to remove one.
func TemplatesInUse(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || !validID(e.Name()) {
			continue
		}
		if st, err := sbdir.Read(filepath.Join(dir, e.Name())); err == nil && st.Template != "" {
			out[st.Template] = true
		}
	}
	return out, nil
}
