package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/agent/model/fake"
)

// agentsSDKDir is where scripts/deps.sh installs the pinned OpenAI Agents
// SDK with its E2B client (COVE_AGENTS_SDK overrides it); "" with the
// reason when it is missing.
func agentsSDKDir() (string, string) {
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		return "", "node is not installed (scripts/deps.sh installs it)"
	}
	if m := regexp.MustCompile(`^v(\d+)\.(\d+)`).FindStringSubmatch(string(out)); m == nil || !nodeFits(m[1], m[2]) {
		return "", fmt.Sprintf("node %s is too old for the e2b SDK (it needs 20.18.1 or later)", strings.TrimSpace(string(out)))
	}
	dir := os.Getenv("COVE_AGENTS_SDK")
	if dir == "" {
		dir, _ = filepath.Abs(filepath.Join("..", ".cache", "npm", "agents"))
	}
	for _, pkg := range []string{"@openai/agents", "@openai/agents-extensions", "e2b"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			return "", "the " + pkg + " npm package is not installed in " + dir + " (scripts/deps.sh installs it)"
		}
	}
	return dir, ""
}

// tagRE finds the scenario tag, "[name]", in a user message.
var tagRE = regexp.MustCompile(`\[([a-z0-9-]+)\]`)

// agentModel is the fake model the Agents SDK talks to. Each prompt of
// the scripts names a scenario ("[cmd] ..."); the answer to a request is
// the scenario's turn at the number of tool outputs since that prompt, so
// scripts and their runs need no shared order. A turn built by echo
// answers with the last tool output, so a script can check what the tool
// really did.
func agentModel(t *testing.T, scenarios map[string][]step) *fake.Server {
	return fake.NewServer(t, fake.Func(func(r *fake.Request) fake.Turn {
		tag, step, last := conversation(r)
		turns, ok := scenarios[tag]
		if !ok || step >= len(turns) {
			return fake.Error(500, fmt.Sprintf("fake model: no turn %d for scenario %q", step, tag))
		}
		return turns[step](last, r.Stream())
	}).Forever())
}

// step is one answer of a scenario, given the last tool output and
// whether the request asked for a stream.
type step func(last string, stream bool) fake.Turn

// say answers with turn whatever the tool said.
func say(turn fake.Turn) step { return func(string, bool) fake.Turn { return turn } }

// echo answers with the last tool output as text.
func echo(last string, _ bool) fake.Turn { return fake.Text("TOOL OUTPUT:\n" + last) }

// conversation reads a Responses or Chat Completions request: the tag of
// the last user message, how many tool outputs follow it and the last
// one's text.
func conversation(r *fake.Request) (tag string, step int, last string) {
	var items []map[string]any
	key := "input"
	if r.API == "chat" {
		key = "messages"
	}
	switch v := r.Body[key].(type) {
	case string:
		items = []map[string]any{{"role": "user", "content": v}}
	case []any:
		for _, it := range v {
			if m, ok := it.(map[string]any); ok {
				items = append(items, m)
			}
		}
	}
	for _, m := range items {
		typ, _ := m["type"].(string)
		switch {
		case m["role"] == "user":
			if sub := tagRE.FindStringSubmatch(text(m["content"])); sub != nil {
				tag, step, last = sub[1], 0, ""
			}
		case m["role"] == "tool" || strings.HasSuffix(typ, "_call_output"):
			step++
			last = text(m["output"]) + text(m["content"])
			if last == "" && m["output"] != nil { // an image
				b, _ := json.Marshal(m["output"])
				last = string(b)
			} else if last == "" { // apply_patch_call_output has a status only
				last = fmt.Sprint("status: ", m["status"])
			}
		}
	}
	return tag, step, last
}

// text is a message's or tool output's text: a string or text parts.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				s, _ := m["text"].(string)
				b.WriteString(s)
			}
		}
		return b.String()
	case map[string]any:
		b, _ := json.Marshal(v)
		return string(b)
	}
	return ""
}

// agentScenarios is what the fake model answers in each scenario the
// scripts run, keyed by the tag in their prompts.
var agentScenarios = map[string][]step{
	"cmd":    {say(fake.Call("exec_command", `{"cmd":"cat README.md; echo user=$(id -un) cwd=$(pwd) region=$INVOICE_REGION"}`)), echo},
	"whoami": {say(fake.Call("exec_command", `{"cmd":"echo whoami=$(id -un) home=$HOME; touch mine && ls -l mine"}`)), echo},
	"write":  {say(fake.Call("exec_command", `{"cmd":"mkdir -p out && echo from-the-agent > out/result.txt && ls out"}`)), echo},
	"read":   {say(fake.Call("exec_command", `{"cmd":"cat out/result.txt notes/todo.md"}`)), echo},
	"patch":  {patchCall("notes/todo.md", "@@\n first line\n-second line\n+second line, patched\n"), echo},
	"pty": {
		say(fake.Call("exec_command", `{"cmd":"read x; echo got-$x","tty":true,"yield_time_ms":500}`)),
		ptyInput(`hello\n`),
		echo,
	},
	// The shell capability's advice: interrupt a long command started
	// with tty=true by sending Ctrl-C through write_stdin.
	"interrupt": {
		say(fake.Call("exec_command", `{"cmd":"sleep 600; echo not-interrupted","tty":true,"yield_time_ms":500}`)),
		ptyInput(`\u0003`),
		ptyInput(`echo alive-$((40+2))\n`),
		echo,
	},
	// The docs' first tutorial: read the task, patch, run the test.
	"fix": {
		say(fake.Call("exec_command", `{"cmd":"cat repo/task.md"}`)),
		patchCall("repo/total.sh", "@@\n # total.sh SUBTOTAL TAX_PERCENT prints the invoice total in cents.\n-echo $(( $1 + $2 ))\n+echo $(( $1 + $1 * $2 / 100 ))\n"),
		say(fake.Call("exec_command", `{"cmd":"sh test.sh","workdir":"repo"}`)),
		echo,
	},
	"image": {
		say(fake.Call("exec_command", `{"cmd":"printf %s `+onePixelPNG+` | base64 -d > pixel.png && echo ok"}`)),
		say(fake.Call("view_image", `{"path":"pixel.png"}`)),
		echo,
	},
	"serve": {say(fake.Call("exec_command", `{"cmd":"mkdir -p site && echo served-by-cove > site/index.html && cd site && (setsid python3 -m http.server 8080 >/dev/null 2>&1 &) && echo started"}`)), echo},
}

// ptyInput writes chars (JSON string content) to the PTY session the
// last exec_command output named.
func ptyInput(chars string) step {
	return func(last string, _ bool) fake.Turn {
		m := regexp.MustCompile(`session ID (\d+)`).FindStringSubmatch(last)
		if m == nil {
			return fake.Text("NO PTY SESSION:\n" + last)
		}
		return fake.Call("write_stdin", fmt.Sprintf(`{"session_id":%s,"chars":"%s","yield_time_ms":3000}`, m[1], chars))
	}
}

// onePixelPNG is a 1x1 PNG, base64.
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

// patchCall answers with the Responses API's apply_patch_call (the tool
// the SDK declares as {"type":"apply_patch"}), which the fake has no
// output item for: as the JSON response or, when streamed, as the events
// api.openai.com sends for an output item.
func patchCall(path, diff string) step {
	return func(_ string, stream bool) fake.Turn {
		call := map[string]any{"type": "apply_patch_call", "id": "apc_1", "call_id": "call_patch_1", "status": "completed",
			"operation": map[string]any{"type": "update_file", "path": path, "diff": diff}}
		resp := func(status string, output []any) map[string]any {
			r := map[string]any{"id": "resp_patch", "object": "response", "created_at": time.Now().Unix(), "status": status,
				"model": "gpt-fake", "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}}
			if status == "completed" {
				r["usage"] = map[string]any{"input_tokens": 10, "output_tokens": 10, "total_tokens": 20,
					"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
			}
			return r
		}
		if !stream {
			body, _ := json.Marshal(resp("completed", []any{call}))
			return fake.Raw(200, "application/json", string(body))
		}
		var b strings.Builder
		events := []map[string]any{
			{"type": "response.created", "response": resp("in_progress", []any{})},
			{"type": "response.output_item.added", "output_index": 0, "item": call},
			{"type": "response.output_item.done", "output_index": 0, "item": call},
			{"type": "response.completed", "response": resp("completed", []any{call})},
		}
		for i, e := range events {
			e["sequence_number"] = i
			data, _ := json.Marshal(e)
			fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", e["type"], data)
		}
		return fake.Raw(200, "text/event-stream", b.String())
	}
}

// TestAgentsSDK runs the OpenAI Agents SDK (pinned in testdata/agents) as
// its sandbox tutorial does, with the E2B sandbox client of
// @openai/agents-extensions and nothing but E2B's and OpenAI's
// environment variables pointing it at Cove and at a fake model, in both
// routing modes.
func TestAgentsSDK(t *testing.T) {
	sdk, why := agentsSDKDir()
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "agents")
	model := agentModel(t, agentScenarios)
	for _, mode := range []string{"domain", "header"} {
		t.Run(mode, func(t *testing.T) {
			env := append(es.modeEnv(key, mode), "COVE_AGENTS_SDK="+sdk,
				"OPENAI_BASE_URL="+model.URL, "OPENAI_API_KEY=sk-fake", "OPENAI_AGENTS_DISABLE_TRACING=1")
			out, err := es.nodeIn(t, "agents", env, "--test-reporter=spec", "--test-concurrency=1", "agents.test.mjs")
			if err != nil {
				t.Fatalf("node agents.test.mjs (%s routing): %v\n%s", mode, err, out)
			}
			t.Logf("%s", out)
		})
	}
}
