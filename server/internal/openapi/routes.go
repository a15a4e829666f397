package openapi

import "github.com/cove-sandbox/cove/api"

// Routes is the API's route table: the one list of its routes (a
// server test holds it to the routes the server registers).
var Routes = []Route{
	{Pattern: "GET /health", Summary: "Liveness: {\"status\":\"ok\"}", Response: map[string]string{}, Public: true},
	{Pattern: "GET /ready", Summary: "Readiness: 200 {\"status\":\"ready\"} when this server can serve (its store answers within a second), else 503 {\"status\":\"unavailable\",\"reason\":...}", Response: map[string]string{}, Public: true},
	{Pattern: "GET /openapi.json", Summary: "This document", Response: map[string]any{}, Public: true},
	{Pattern: "GET /metrics", Summary: "Prometheus metrics (text exposition format)", Response: "text/plain", Public: true},

	{Pattern: "POST /v1/keys", Summary: "Make an API key (its secret is in this response only); admin keys may name another or a new team", Request: api.CreateKey{}, Response: api.Key{}, Status: 201},
	{Pattern: "GET /v1/keys", Summary: "List the team's keys (admin: ?all=true for every team)", Query: []string{"all: true for every team's keys (admin)"}, Response: struct {
		Keys []api.Key `json:"keys"`
	}{}},
	{Pattern: "DELETE /v1/keys/{id}", Summary: "Revoke a key"},
	{Pattern: "PUT /v1/teams/{team}/quota", Summary: "Set a team's quota (admin): running sandboxes, total CPUs and memory; 0 is unlimited", Request: api.Quota{}, Response: api.Quota{}},
	{Pattern: "GET /v1/teams/{team}/quota", Summary: "A team's quota (your own; admin: any)", Response: api.Quota{}},

	{Pattern: "POST /v1/sandboxes", Summary: "Create a sandbox. With an Idempotency-Key header (1 to 255 of letters, digits and -_.:+/=~), a retry with the same key and body answers the same sandbox (Idempotent-Replayed: true); another body is a 422, a key still in flight a 409 to retry", Request: api.CreateSandbox{}, Response: api.Sandbox{}, Status: 201},
	{Pattern: "GET /v1/sandboxes", Summary: "List the team's sandboxes, a page at a time", Query: []string{"state: running or stopped", "label: key=value (repeatable; all must match)", "limit: 1 to 1000 (default 100)", "cursor: next_cursor of the previous page"}, Response: api.SandboxList{}},
	{Pattern: "GET /v1/sandboxes/{id}", Summary: "Describe a sandbox (does not count as activity)", Response: api.Sandbox{}},
	{Pattern: "DELETE /v1/sandboxes/{id}", Summary: "Delete a sandbox and its disk"},
	{Pattern: "POST /v1/sandboxes/{id}/stop", Summary: "Stop a sandbox, keeping its disk", Response: api.Sandbox{}},
	{Pattern: "POST /v1/sandboxes/{id}/resume", Summary: "Resume a stopped sandbox with its disk; its TTL starts again", Response: api.Sandbox{}},
	{Pattern: "POST /v1/sandboxes/{id}/pause", Summary: "Pause a running sandbox without its TTL: a gvisor sandbox keeps its processes and memory (keep_memory false: the disk only), a native one its disk (keep_memory true is refused there); resume brings it back", Request: api.Pause{}, Response: api.Sandbox{}},
	{Pattern: "POST /v1/sandboxes/{id}/fork", Summary: "Copy a sandbox into a new running sandbox: its disk, and a running gvisor sandbox's processes and memory too", Response: api.Sandbox{}, Status: 201},
	{Pattern: "POST /v1/sandboxes/{id}/forks", Summary: "Make count copies of a sandbox at once (a running gvisor sandbox is checkpointed once); answers with the copies", Request: api.Fork{}, Response: api.SandboxList{}, Status: 201},
	{Pattern: "POST /v1/sandboxes/{id}/ttl", Summary: "Set the TTL: the sandbox expires ttl_seconds from now", Request: api.SetTTL{}, Response: api.Sandbox{}},

	{Pattern: "POST /v1/sandboxes/{id}/exec", Summary: "Run a command; the response streams api.ExecEvent lines (start, stdout, stderr, exit)", Request: api.Exec{}, Response: NDJSON},
	{Pattern: "GET /v1/sandboxes/{id}/pty", Summary: "Interactive terminal over WebSocket: binary frames are terminal bytes, text frames api.PTYMessage (resize in, exit out)", Query: []string{"cmd: command line (default: bash or sh)", "cols: terminal width", "rows: terminal height", "access_token: the API key, for browsers (WebSocket handshakes only)"}, Response: WebSocket, Status: 101},
	{Pattern: "GET /v1/sandboxes/{id}/processes", Summary: "List the running background processes", Response: api.ProcessList{}},
	{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/attach", Summary: "Stream a background process's output from where the last reader left (NDJSON, as exec)", Response: NDJSON},
	{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/signal", Summary: "Signal a process (TERM, KILL, INT, HUP, QUIT, USR1, USR2 or a number)", Request: api.Signal{}},
	{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/stdin", Summary: "Write the body to the process's standard input", Request: Octets},
	{Pattern: "POST /v1/sandboxes/{id}/processes/{pid}/stdin/close", Summary: "Close the process's standard input"},
	{Pattern: "POST /v1/sandboxes/{id}/processes/tag/{tag}/attach", Summary: "Attach, naming the process by its tag", Response: NDJSON},
	{Pattern: "POST /v1/sandboxes/{id}/processes/tag/{tag}/signal", Summary: "Signal, naming the process by its tag", Request: api.Signal{}},
	{Pattern: "POST /v1/sandboxes/{id}/processes/tag/{tag}/stdin", Summary: "Write to standard input, naming the process by its tag", Request: Octets},
	{Pattern: "POST /v1/sandboxes/{id}/processes/tag/{tag}/stdin/close", Summary: "Close standard input, naming the process by its tag"},

	{Pattern: "GET /v1/sandboxes/{id}/files", Summary: "Read a file", Query: []string{"path: in the workspace (relative, or absolute inside it)"}, Response: Octets},
	{Pattern: "PUT /v1/sandboxes/{id}/files", Summary: "Write a file from the body, making its parents", Query: []string{"path: in the workspace", "mode: permission bits in octal (default 644)"}, Request: Octets},
	{Pattern: "DELETE /v1/sandboxes/{id}/files", Summary: "Delete a file or a directory tree", Query: []string{"path: in the workspace"}},
	{Pattern: "GET /v1/sandboxes/{id}/files/stat", Summary: "Describe a file", Query: []string{"path: in the workspace"}, Response: api.FileInfo{}},
	{Pattern: "GET /v1/sandboxes/{id}/files/list", Summary: "List a directory", Query: []string{"path: in the workspace", "depth: levels, 1 to 64 (default 1)"}, Response: api.FileList{}},
	{Pattern: "POST /v1/sandboxes/{id}/files/mkdir", Summary: "Make a directory and its parents", Query: []string{"path: in the workspace"}},
	{Pattern: "POST /v1/sandboxes/{id}/files/move", Summary: "Rename a file or directory", Request: api.Move{}},
	{Pattern: "GET /v1/sandboxes/{id}/tar", Summary: "Download a directory as a tar stream", Query: []string{"path: a directory in the workspace (default the workspace)"}, Response: Tar},
	{Pattern: "PUT /v1/sandboxes/{id}/tar", Summary: "Upload a tar into a directory (members with .., absolute names, devices or links out are refused, naming the member)", Query: []string{"path: a directory in the workspace (default the workspace)"}, Request: Tar},

	{Pattern: "POST /v1/sandboxes/{id}/snapshots", Summary: "Save the workspace as a snapshot", Response: api.Snapshot{}, Status: 201},
	{Pattern: "GET /v1/snapshots", Summary: "List the team's snapshots", Response: api.SnapshotList{}},
	{Pattern: "GET /v1/snapshots/{sid}", Summary: "Describe a snapshot", Response: api.Snapshot{}},
	{Pattern: "GET /v1/snapshots/{sid}/download", Summary: "Download a snapshot's tar", Response: Tar},
	{Pattern: "POST /v1/snapshots/{sid}/restore", Summary: "Create a new sandbox (optional body as for create, without a manifest) with the snapshot's workspace", Request: api.CreateSandbox{}, Response: api.Sandbox{}, Status: 201},
	{Pattern: "DELETE /v1/snapshots/{sid}", Summary: "Delete a snapshot"},

	{Pattern: "POST /v1/sandboxes/{id}/ports/{port}", Summary: "Expose a port of the sandbox through the server (private with a token unless public)", Request: api.ExposePort{}, Response: api.Port{}, Status: 201},
	{Pattern: "GET /v1/sandboxes/{id}/ports", Summary: "List the exposed ports", Response: struct {
		Ports []api.Port `json:"ports"`
	}{}},
	{Pattern: "DELETE /v1/sandboxes/{id}/ports/{port}", Summary: "Stop exposing a port"},
	{Pattern: "/p/{id}/{port}/{rest...}", Summary: "Proxy (HTTP and WebSocket) to an exposed port; a private port wants its token in X-Cove-Port-Token or ?cove_token= (then a cookie). Also served by host name {port}-{id}.{domain}", Request: Any, Response: Any, Public: true},

	{Pattern: "GET /v1/templates", Summary: "List the templates a sandbox can be made from (the server's, \"host\" first)", Response: api.TemplateList{}},
	{Pattern: "GET /v1/usage", Summary: "Metered use and cost of the team's sandboxes", Query: []string{"from: RFC 3339 (default the start of this month)", "to: RFC 3339 (default now)", "team: another team (admin)", "by: day for the use per UTC day as well (days; at most 400)"}, Response: api.UsageReport{}},

	{Pattern: "POST /v1/runs", Summary: "Start an agent run in a new sandbox (from sandbox/manifest, or a tar as the \"workspace\" part of a multipart/form-data body whose \"run\" part is this JSON) or in sandbox_id; webhook_secret is in this response only", Request: api.CreateRun{}, Response: api.Run{}, Status: 201},
	{Pattern: "GET /v1/runs", Summary: "List the team's runs, newest first", Query: []string{"status: running, waiting, idle, failed or cancelled", "limit: 1 to 1000 (default 100)", "cursor: next of the previous page"}, Response: api.RunList{}},
	{Pattern: "GET /v1/runs/{id}", Summary: "Describe a run: status, answer, approvals waiting, usage and cost", Response: api.Run{}},
	{Pattern: "GET /v1/runs/{id}/events", Summary: "The run's events as Server-Sent Events (id, event type, JSON data: the events of cove run --json plus user_message and run_status), from after Last-Event-ID (or ?after=); ends when the run stops working unless follow=true", Query: []string{"after: the last event id seen (instead of the Last-Event-ID header)", "follow: true to stay open across follow-ups"}, Response: "text/event-stream"},
	{Pattern: "POST /v1/runs/{id}/approvals", Summary: "Approve or reject the calls a waiting run asks about; once all are decided the run goes on", Request: api.RunDecisions{}, Response: api.Run{}},
	{Pattern: "POST /v1/runs/{id}/messages", Summary: "Send a follow-up: the run goes on in the same sandbox with the conversation so far", Request: api.RunMessage{}, Response: api.Run{}},
	{Pattern: "DELETE /v1/runs/{id}", Summary: "Delete a run that is not working, with its log (its sandbox stays)"},
	{Pattern: "POST /v1/runs/{id}/cancel", Summary: "Cancel a working or waiting run (its running command is killed); a message goes on from there", Response: api.Run{}},
	{Pattern: "GET /v1/model", Summary: "The model the team's runs use when they name no endpoint, and whether one is configured (with the ways to fix it when not); no key or address is shown", Response: api.ModelInfo{}},
	{Pattern: "PUT /v1/secrets/{name}", Summary: "Set a team secret (a model API key, e.g. OPENAI_API_KEY), sealed by the server and never returned", Request: api.SetSecret{}, Response: api.Secret{}},
	{Pattern: "GET /v1/secrets", Summary: "List the team's secrets (names only)", Response: api.SecretList{}},
	{Pattern: "DELETE /v1/secrets/{name}", Summary: "Delete a team secret"},

	{Pattern: "/v1/sandboxes/{id}/guest/", Summary: "The sandbox daemon's own API (envd-compatible Connect RPC, /files, /cove/tar, /cove/port tunnels), for Cove's Go client and E2B-style SDKs", Request: Any, Response: Any},
}

// FieldDocs add a description and a range to fields of the api types'
// schemas, keyed "Type.json_name": what a client needs to send a value
// the server accepts.
var FieldDocs = map[string]map[string]any{
	"CreateSandbox.size": {"description": "a preset: small (1 CPU, 512 MiB, 2 GiB disk, 512 pids; the default), medium (2, 2 GiB, 10 GiB, 1024) or large (4, 8 GiB, 40 GiB, 2048); the fields below override its parts"},
	"CreateSandbox.cpus": {"description": "CPU quota in cores, at most the server machine's CPU count; 0 or absent is the size's (capped the same way)", "minimum": api.MinCPUs, "maximum": api.MaxCPUs},
	"CreateSandbox.memory_bytes": {"description": "memory limit; 0 or absent is the size's (64 MiB to 1 TiB)",
		"minimum": api.MinMemoryBytes, "maximum": int64(api.MaxMemoryBytes)},
	"CreateSandbox.disk_bytes": {"description": "disk limit; 0 or absent is the size's (16 MiB to 1 TiB)",
		"minimum": api.MinDiskBytes, "maximum": int64(api.MaxDiskBytes)},
	"CreateSandbox.pids": {"description": "the most processes and threads at once; 0 or absent is the size's; 32 up to the server's maximum (8192 unless its operator sets cove serve --max-pids), or -1 for no limit where the operator allows it (--allow-unlimited-pids)",
		"minimum": api.PidsUnlimited},
	"CreateSandbox.labels": {"description": "keys 1 to 63 bytes, not starting with cove., without \"=\"; values at most 256 bytes; neither with control characters or invalid UTF-8"},
	"Sandbox.pids":         {"description": "the pids limit; -1 for none"},
	"CreateSandbox.isolation": {"description": "the wall between the sandbox and the host: native (the default; the host's kernel behind namespaces, seccomp and Landlock) or gvisor (gVisor's user-space kernel; its pause and fork keep processes and memory; 503 unavailable where the server has no runsc)",
		"enum": []string{"native", "gvisor"}},
	"Sandbox.isolation":     {"description": "native or gvisor"},
	"Sandbox.paused":        {"description": "a stopped sandbox that kept its processes and memory: resume brings them back"},
	"Fork.count":            {"description": "how many copies", "minimum": 1, "maximum": api.MaxForks},
	"RunAgent.base_url":     {"description": "an OpenAI-compatible endpoint; one other than the server's own is reached only at a public address unless the server's operator allows others (cove serve --outbound-allow)"},
	"CreateRun.webhook_url": {"description": "receives a signed POST each time the run stops; reached only at a public address unless the server's operator allows others (cove serve --outbound-allow)"},
}
