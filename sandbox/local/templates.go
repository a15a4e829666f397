package local

import (
	"context"

	"github.com/cove-sandbox/cove/sandbox"
)

var _ sandbox.TemplateLister = (*Runtime)(nil)

// templateLister is a Templates that can list what it resolves.
type templateLister interface {
	List(ctx context.Context) ([]sandbox.TemplateInfo, error)
}

// Templates implements sandbox.TemplateLister: the template store's
// templates, or only "host" when Config.Templates cannot list.
func (r *Runtime) Templates(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	if l, ok := r.cfg.Templates.(templateLister); ok {
		return l.List(ctx)
	}
	return []sandbox.TemplateInfo{{Name: "host"}}, nil
}

// List lists the store's templates, "host" first, by name and age only
// (a template's source and files name host paths).
func (t StoreTemplates) List(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	list, err := t.Store.List()
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.TemplateInfo, 0, len(list))
	for _, tm := range list {
		out = append(out, sandbox.TemplateInfo{Name: tm.Name, Created: tm.Created})
	}
	return out, nil
}
