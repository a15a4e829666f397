package hostproc

import (
	"context"

	"github.com/cove-sandbox/cove/sandbox"
)

var _ sandbox.TemplateLister = (*Runtime)(nil)

// Templates implements sandbox.TemplateLister: hostproc runs everything
// on the host, so "host" is its only template.
func (r *Runtime) Templates(ctx context.Context) ([]sandbox.TemplateInfo, error) {
	return []sandbox.TemplateInfo{{Name: "host"}}, nil
}
