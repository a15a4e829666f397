package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
	"github.com/cove-sandbox/cove/api"
)

// agentsJSClientDir is the native client's package, its dependencies
// installed (npm ci, as scripts/deps.sh does) and its TypeScript built;
// "" with the reason when node is missing.
func agentsJSClientDir(t testing.TB) (string, string) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", "node is not installed (scripts/deps.sh installs it)"
	}
	dir, err := filepath.Abs(filepath.Join("..", "clients", "openai-agents-js"))
	if err != nil {
		t.Fatal(err)
	}
	agentsJSBuild.Do(func() { agentsJSBuildErr = buildAgentsJSClient(dir) })
	if agentsJSBuildErr != nil {
		t.Fatal(agentsJSBuildErr)
	}
	return dir, ""
}

var (
	agentsJSBuild    sync.Once
	agentsJSBuildErr error
)

// buildAgentsJSClient installs the pinned dependencies when they are
// missing or not those of the lock file (as scripts/deps.sh does, with
// the same stamp), then compiles the TypeScript.
func buildAgentsJSClient(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return err
	}
	stamp := filepath.Join(dir, "node_modules", ".cove-lock.json")
	if got, err := os.ReadFile(stamp); err != nil || !bytes.Equal(got, lock) {
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return &buildError{"npm ci in " + dir, err, out}
		}
		if err := os.WriteFile(stamp, lock, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.CommandContext(ctx, "npm", "run", "--silent", "build")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return &buildError{"building the TypeScript of " + dir, err, out}
	}
	return nil
}

type buildError struct {
	what string
	err  error
	out  []byte
}

func (e *buildError) Error() string { return e.what + ": " + e.err.Error() + "\n" + string(e.out) }

// agentsJSModel is the scripted model of the client's tests: exec_command,
// then apply_patch, then "done", by how many tool results the
// conversation holds, so every run in the suite gets the same script;
// asked "whoami", it runs id -un, then says "done".
func agentsJSModel(t testing.TB) *fake.Server {
	return fake.NewServer(t, fake.Func(func(r *fake.Request) fake.Turn {
		msgs, _ := r.Body["messages"].([]any)
		results, whoami := 0, false
		for _, m := range msgs {
			mm, _ := m.(map[string]any)
			switch {
			case mm["role"] == "tool":
				results++
			case mm["role"] == "user" && mm["content"] == "whoami":
				whoami = true
			}
		}
		if whoami {
			if results == 0 {
				return fake.Call("exec_command", `{"cmd":"id -un"}`)
			}
			return fake.Text("done")
		}
		switch results {
		case 0:
			return fake.Call("exec_command", `{"cmd":"echo from-shell > shell.txt && cat README.md"}`)
		case 1:
			patch := "*** Begin Patch\n*** Add File: notes/hello.txt\n+hello from apply_patch\n*** End Patch\n"
			args, _ := json.Marshal(map[string]string{"patch": patch})
			return fake.Call("apply_patch", string(args))
		default:
			return fake.Text("done")
		}
	}).Forever())
}

// TestAgentsJSClient runs the native Cove client for the JS Agents SDK
// (clients/openai-agents-js) with the real @openai/agents pinned in its
// lock file against the server: agent runs with exec_command and
// apply_patch, resumed session state, tar and snapshot persistence, PTY,
// stop-on-exit. Ports are answered by path, and by host name when the
// server has a domain.
func TestAgentsJSClient(t *testing.T) {
	dir, why := agentsJSClientDir(t)
	if dir == "" {
		t.Skip(why)
	}
	for _, mode := range []string{"path", "domain"} {
		t.Run(mode, func(t *testing.T) {
			var ts *testServer
			if mode == "domain" {
				ts = newE2BServer(t, Config{}).testServer
			} else {
				ts = newTestServer(t, Config{})
			}
			var k api.Key
			ts.must(t, http.StatusCreated, "POST", "/v1/keys", ts.Admin, api.CreateKey{Name: "agents-js", NewTeam: "agentsjs-" + mode}, &k)
			model := agentsJSModel(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			tests, _ := filepath.Glob(filepath.Join(dir, "test", "*.test.mjs"))
			cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-reporter=spec"}, tests...)...)
			cmd.Dir = dir
			cmd.Env = append(slices.Clone(os.Environ()), "COVE_SERVER="+ts.URL, "COVE_API_KEY="+k.Secret,
				"OPENAI_BASE_URL="+model.URL, "OPENAI_API_KEY=sk-test", "OPENAI_AGENTS_DISABLE_TRACING=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("node --test (%s): %v\n%s", mode, err, out)
			}
			t.Logf("%s", out)
			var tools []string
			for _, r := range model.Requests() {
				tools = append(tools, r.ToolNames()...)
			}
			for _, want := range []string{"exec_command", "apply_patch"} {
				if !slices.Contains(tools, want) {
					t.Errorf("the model was never offered %s; it saw %s", want, strings.Join(tools, ", "))
				}
			}
			var list api.SandboxList
			ts.must(t, http.StatusOK, "GET", "/v1/sandboxes", k.Secret, nil, &list)
			if len(list.Sandboxes) != 0 {
				t.Errorf("the suite left %d sandboxes behind", len(list.Sandboxes))
			}
			var snaps api.SnapshotList
			ts.must(t, http.StatusOK, "GET", "/v1/snapshots", k.Secret, nil, &snaps)
			if len(snaps.Snapshots) != 0 {
				t.Errorf("the suite left %d snapshots behind", len(snaps.Snapshots))
			}
		})
	}
}
