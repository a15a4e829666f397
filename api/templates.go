package api

import "time"

// Template is one template a sandbox can be made from: CreateSandbox's
// template names it.
type Template struct {
	Name string `json:"name"`
	// CreatedAt is when the template got its current content; absent
	// for "host" and when unknown.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// TemplateList is GET /v1/templates: the server's templates, the
// default ("host") first.
type TemplateList struct {
	Templates []Template `json:"templates"`
	// Isolations are the tiers a create may ask for here ("native",
	// "gvisor"); absent when the server's runtime does not say.
	Isolations []string `json:"isolations,omitempty"`
}
