package mcp

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/agent"
)

// memoryServer is where scripts/deps.sh installs the npm package
// @modelcontextprotocol/server-memory, relative to this package.
const memoryServer = "../../../.cache/npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js"

// TestMemoryServer runs a real MCP server from npm, written with the
// TypeScript SDK, to check the adapter against an implementation other
// than the Go SDK it is built on.
func TestMemoryServer(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (scripts/deps.sh installs it)")
	}
	script, err := filepath.Abs(memoryServer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(script); err != nil {
		t.Skipf("@modelcontextprotocol/server-memory is not installed (scripts/deps.sh installs it): %v", err)
	}

	set := connect(t, Server{
		Name:    "memory",
		Command: node,
		Args:    []string{script},
		// Its default store is a file next to its script.
		Env: map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")},
	})
	create := find(t, set, "mcp__memory__create_entities").Spec()
	if create.Description == "" || create.Parameters["type"] != "object" {
		t.Errorf("create_entities spec = %+v, want a description and an object schema", create)
	}

	if _, err := call(t, set, "mcp__memory__create_entities",
		`{"entities":[{"name":"Cove","entityType":"project","observations":["runs agents in sandboxes"]}]}`); err != nil {
		t.Fatalf("create_entities: %v", err)
	}
	res, err := call(t, set, "mcp__memory__read_graph", `{}`)
	if err != nil {
		t.Fatalf("read_graph: %v", err)
	}
	got := agent.Text(res.Output)
	for _, want := range []string{`"Cove"`, `"project"`, "runs agents in sandboxes"} {
		if !strings.Contains(got, want) {
			t.Errorf("read_graph = %s, want it to contain %s", got, want)
		}
	}

	// A call the server rejects comes back as a tool error, not a broken
	// session.
	_, err = call(t, set, "mcp__memory__create_entities", `{"entities":"not a list"}`)
	if te := (*ToolError)(nil); !errors.As(err, &te) {
		t.Errorf("create_entities with bad arguments: err = %v, want a *ToolError", err)
	}
	if _, err := call(t, set, "mcp__memory__read_graph", `{}`); err != nil {
		t.Errorf("read_graph after a rejected call: %v", err)
	}
}
