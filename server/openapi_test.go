package server

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
)

// TestOpenAPIMatchesRoutes keeps /openapi.json in sync with the server:
// every registered route is documented and every documented route exists.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	s, err := New(Config{Runtime: fake.New(), Store: nilStore{}})
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, d := range routeDocs {
		documented = append(documented, d.Pattern)
	}
	for _, p := range s.patterns {
		if !slices.Contains(documented, p) {
			t.Errorf("route %q is served but not in the OpenAPI document (routeDocs in openapi.go)", p)
		}
	}
	for _, p := range documented {
		if !slices.Contains(s.patterns, p) {
			t.Errorf("route %q is documented but not served", p)
		}
	}
	doc := buildOpenAPI()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		OpenAPI    string                    `json:"openapi"`
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.OpenAPI != "3.0.3" || back.Paths["/v1/sandboxes/{id}/exec"]["post"] == nil {
		t.Errorf("document lacks the exec operation: %v", back.Paths["/v1/sandboxes/{id}/exec"])
	}
	for _, name := range []string{"CreateSandbox", "Sandbox", "Exec", "ExecEvent", "Error", "Port", "UsageReport", "Snapshot"} {
		if back.Components.Schemas[name] == nil {
			t.Errorf("schema %s missing", name)
		}
	}
}

// nilStore satisfies store.Store for tests that never touch it.
type nilStore struct{ store.Store }
