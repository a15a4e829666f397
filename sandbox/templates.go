package sandbox

import (
	"context"
	"time"
)

// TemplateInfo describes a template a runtime makes sandboxes from, in
// terms a tenant may see: its name and when it was made, never where
// its files are on the host.
type TemplateInfo struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created_at,omitzero"`
}

// TemplateLister is a Runtime that can list the templates its Create
// accepts (Spec.Template).
type TemplateLister interface {
	// Templates lists the templates, the default one ("host") first.
	// Its errors are for the operator (they may name host paths).
	Templates(ctx context.Context) ([]TemplateInfo, error)
}
