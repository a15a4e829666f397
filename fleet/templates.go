package fleet

import (
	"context"
	"fmt"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// Templates lists the templates a sandbox can be made from, the default
// first. They are the server's, the same for every team. A runtime that
// cannot list its templates gives none (a create still takes any name
// it knows); ErrUnavailable, naming nothing of the host, when the list
// could not be read (the detail goes to the log).
func (f *Fleet) Templates(ctx context.Context) (api.TemplateList, error) {
	out := api.TemplateList{Templates: []api.Template{}}
	if il, ok := f.cfg.Runtime.(sandbox.IsolationLister); ok {
		out.Isolations = il.Isolations()
	}
	tl, ok := f.cfg.Runtime.(sandbox.TemplateLister)
	if !ok {
		return out, nil
	}
	list, err := tl.Templates(ctx)
	if err != nil {
		f.log.Error("listing templates", "err", err)
		return out, fmt.Errorf("the templates could not be listed right now; retry: %w", sandbox.ErrUnavailable)
	}
	for _, t := range list {
		v := api.Template{Name: t.Name}
		if !t.Created.IsZero() && t.Name != "host" {
			c := t.Created.UTC()
			v.CreatedAt = &c
		}
		out.Templates = append(out.Templates, v)
	}
	return out, nil
}
