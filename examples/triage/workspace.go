package main

import "github.com/cove-sandbox/cove/manifest"

// The three files of the support-ticket triage service the agent works
// on. They are inline manifest entries, as the OpenAI Agents SDK's
// tutorials build their workspaces.
const readme = `# Ticket triage

A small service that sorts incoming support tickets: it gives each one a
priority (P1 most urgent .. P3) and routes it to a team.

- ` + "`src/app.py`" + ` holds ` + "`triage(ticket)`" + `.
- Before a release, follow docs/release-checks.md.
`

const appPy = `"""Support-ticket triage: priority and team for each ticket."""

PRIORITY_WORDS = {
    "outage": "P1",
    "down": "P1",
    "security": "P1",
    "refund": "P2",
    "bug": "P2",
}

BILLING_WORDS = ("refund", "invoice", "charge")


def triage(ticket):
    """Return {"id", "priority", "team"} for a ticket dict with subject and body."""
    text = (ticket.get("subject", "") + " " + ticket.get("body", "")).lower()
    priority = "P3"
    for word, p in PRIORITY_WORDS.items():
        if word in text and p < priority:
            priority = p
    team = "billing" if any(w in text for w in BILLING_WORDS) else "support"
    return {"id": ticket["id"], "priority": priority, "team": team}
`

const releaseChecks = `# Release checks

1. Every rule in PRIORITY_WORDS has a test in tests/.
2. ` + "`python3 -m pytest -q`" + ` passes.
3. Billing tickets are routed to the billing team.
`

// Workspace is the triage service as a manifest.
func Workspace() *manifest.Manifest {
	return &manifest.Manifest{Entries: map[string]manifest.Entry{
		"README.md":              manifest.File{Content: []byte(readme)},
		"src/app.py":             manifest.File{Content: []byte(appPy)},
		"docs/release-checks.md": manifest.File{Content: []byte(releaseChecks)},
	}}
}
