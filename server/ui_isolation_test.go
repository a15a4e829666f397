package server

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// TestUIBrowserIsolation: the create form offers the gvisor tier; the
// list and the sandbox's page show it; Pause on a gvisor sandbox's page
// keeps its memory, and the page says so; a native sandbox offers no
// Pause (Stop is what it can do).
func TestUIBrowserIsolation(t *testing.T) {
	ts := newTestServer(t, Config{})
	needGVisor(t, ts)
	key := ts.teamKey(t, "uiiso")
	b := newBrowser(t, ts.URL)
	b.open("#/sandboxes")
	b.signIn(key)
	b.waitText("main", "No sandboxes yet")

	b.setValue("#new-isolation", "gvisor")
	b.click("#create")
	b.wait("the new sandbox's page", `location.hash.startsWith('#/sandboxes/sb') && !!document.querySelector('#cmd')`)
	id := strings.TrimPrefix(b.eval(`location.hash`), "#/sandboxes/")
	var sb api.Sandbox
	ts.must(t, 200, "GET", "/v1/sandboxes/"+id, key, nil, &sb)
	if sb.Isolation != "gvisor" {
		t.Fatalf("the sandbox made through the UI with gvisor: isolation %q", sb.Isolation)
	}
	b.waitText("main", "gvisor")

	b.click(`button[aria-label="Pause ` + id + `"]`)
	b.waitText("#sandbox-stopped", "paused with its processes and memory")
	b.waitText("h1", "paused")
	ts.must(t, 200, "GET", "/v1/sandboxes/"+id, key, nil, &sb)
	if !sb.Paused {
		t.Errorf("after Pause in the UI: %+v, want paused", sb)
	}

	nat := ts.create(t, key, api.CreateSandbox{})
	b.open("#/sandboxes")
	b.waitText(`#sandboxes tr[data-id="`+id+`"] .tier`, "gvisor")
	b.waitText(`#sandboxes tr[data-id="`+id+`"]`, "paused")
	b.waitText(`#sandboxes tr[data-id="`+nat.ID+`"] .tier`, "native")
	if n := b.eval(`String(document.querySelectorAll('button[aria-label="Pause ` + nat.ID + `"]').length)`); n != "0" {
		t.Errorf("a native sandbox offers %s Pause buttons, want none", n)
	}
	b.screenshot("isolation-list")
	for _, x := range []string{id, nat.ID} {
		ts.must(t, 204, "DELETE", "/v1/sandboxes/"+x, key, nil, nil)
	}
}
