package mcp

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/agent"
)

func connect(t *testing.T, servers ...Server) *Set {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	set, err := Connect(ctx, servers...)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { set.Close() })
	return set
}

func find(t *testing.T, set *Set, name string) agent.Tool {
	t.Helper()
	for _, tool := range set.Tools() {
		if tool.Spec().Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

func call(t *testing.T, set *Set, name, args string) (agent.ToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return find(t, set, name).Call(ctx, agent.ToolCall{ID: "call_1", Name: name, Arguments: args, Emit: func(agent.Event) {}})
}

func text(s string) []agent.Content { return []agent.Content{{Type: agent.ContentText, Text: s}} }

var testToolNames = []string{
	"mcp__test__echo", "mcp__test__image", "mcp__test__fail", "mcp__test__stats",
	"mcp__test__resource", "mcp__test__env", "mcp__test__pid", "mcp__test__spawn",
	"mcp__test__sleep", "mcp__test__dotted_name", ToolName("test", longToolName),
}

// testCalls checks the calls that both transports must serve alike.
func testCalls(t *testing.T, set *Set) {
	var names []string
	for _, tool := range set.Tools() {
		names = append(names, tool.Spec().Name)
	}
	// The test server pages its list three at a time: all of them
	// means every page was read.
	if diff := cmp.Diff(testToolNames, names, cmp.Transformer("sort", func(s []string) []string {
		return slices.Sorted(slices.Values(s))
	})); diff != "" {
		t.Errorf("tool names (-want +got):\n%s", diff)
	}

	echo := find(t, set, "mcp__test__echo").Spec()
	if echo.Description != "Echoes its text." {
		t.Errorf("echo description = %q", echo.Description)
	}
	props, _ := echo.Parameters["properties"].(map[string]any)
	if _, ok := props["text"]; !ok || echo.Parameters["type"] != "object" {
		t.Errorf("echo parameters = %v, want an object schema with a text property", echo.Parameters)
	}
	if got := find(t, set, "mcp__test__dotted_name").Spec().Description; got != "A tool with a dot" {
		t.Errorf("description of a tool with only a title = %q, want the title", got)
	}

	tests := []struct {
		tool, args string
		want       []agent.Content
	}{
		{"mcp__test__echo", `{"text":"hi"}`, text("echo: hi")},
		{"mcp__test__image", ``, []agent.Content{
			{Type: agent.ContentText, Text: "a picture:"},
			{Type: agent.ContentImage, ImageURL: "data:image/png;base64," + base64.StdEncoding.EncodeToString(pngBytes)},
		}},
		{"mcp__test__stats", `{}`, text(`{"files":3,"ok":true}`)},
		{"mcp__test__resource", `{}`, text("the notes")},
		{"mcp__test__dotted_name", `{}`, text("dotted")},
		{ToolName("test", longToolName), `{}`, text("long")},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			res, err := call(t, set, tt.tool, tt.args)
			if err != nil {
				t.Fatalf("Call: %v", err)
			}
			if diff := cmp.Diff(tt.want, res.Output); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("isError", func(t *testing.T) {
		_, err := call(t, set, "mcp__test__fail", `{}`)
		var te *ToolError
		if !errors.As(err, &te) {
			t.Fatalf("err = %v, want a *ToolError", err)
		}
		if want := "MCP tool error (test/fail): boom: the disk is full"; err.Error() != want {
			t.Errorf("err = %q, want %q", err, want)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		if _, err := call(t, set, "mcp__test__echo", `["hi"]`); err == nil || !strings.Contains(err.Error(), "JSON object") {
			t.Errorf("err = %v, want one saying the arguments must be a JSON object", err)
		}
	})
}

func TestStdio(t *testing.T) {
	t.Setenv("COVE_TEST_SECRET", "sk-not-for-servers")
	srv := stdioServer("test")
	srv.Env["GIVEN"] = "given"
	set := connect(t, srv)
	testCalls(t, set)

	t.Run("environment", func(t *testing.T) {
		for name, want := range map[string]string{"COVE_TEST_SECRET": "", "GIVEN": "given", "PATH": os.Getenv("PATH")} {
			res, err := call(t, set, "mcp__test__env", `{"name":"`+name+`"}`)
			if err != nil {
				t.Fatal(err)
			}
			if got := agent.Text(res.Output); got != want {
				t.Errorf("server's $%s = %q, want %q", name, got, want)
			}
		}
	})
}

func TestHTTP(t *testing.T) {
	handler := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return newTestServer() }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0ken" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	defer ts.Close()

	if _, err := Connect(context.Background(), Server{Name: "test", URL: ts.URL}); err == nil || !strings.Contains(err.Error(), `"test"`) {
		t.Errorf("Connect without the header: err = %v, want an error naming the server", err)
	}

	set := connect(t, Server{Name: "test", URL: ts.URL, Headers: map[string]string{"Authorization": "Bearer t0ken"}})
	testCalls(t, set)

	ts.Close()
	_, err := call(t, set, "mcp__test__echo", `{"text":"hi"}`)
	if err == nil || !strings.Contains(err.Error(), `mcp server "test"`) {
		t.Errorf("call after the server went away: err = %v, want an error naming the server", err)
	}
}

// running reports whether pid is still a live process a second from now;
// a killed process takes a moment to die. A zombie that is not ours to
// reap (a killed grandchild, reparented) counts as gone.
func running(pid int) bool {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// The state follows the parenthesised command name.
		s := string(stat)
		if strings.HasPrefix(s[strings.LastIndexByte(s, ')')+1:], " Z") {
			return false
		}
	}
	return true
}

func pidOf(t *testing.T, set *Set, tool string) int {
	t.Helper()
	res, err := call(t, set, tool, `{}`)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(agent.Text(res.Output))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestCloseStopsServerAndChildren(t *testing.T) {
	set := connect(t, stdioServer("test"), stdioServer("other"))
	server := pidOf(t, set, "mcp__test__pid")
	child := pidOf(t, set, "mcp__test__spawn")
	other := pidOf(t, set, "mcp__other__pid")

	start := time.Now()
	if err := set.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	// The servers exit on EOF; Close must not sit out its grace periods.
	if d := time.Since(start); d > stopGrace {
		t.Errorf("Close took %v", d)
	}
	for _, pid := range []int{server, child, other} {
		if running(pid) {
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("process %d still runs after Close: %s", pid, stat)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if err := set.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := call(t, set, "mcp__test__echo", `{"text":"hi"}`); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: err = %v, want ErrClosed", err)
	}
}

// shortGrace makes Close give up on a stuck server quickly.
func shortGrace(t *testing.T) {
	stop, term := stopGrace, termGrace
	stopGrace, termGrace = 100*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { stopGrace, termGrace = stop, term })
}

func TestCloseKillsStuckServer(t *testing.T) {
	shortGrace(t)
	srv := stdioServer("test")
	srv.Env[serverEnv] = "stubborn"
	set := connect(t, srv)
	pid := pidOf(t, set, "mcp__test__pid")
	if err := set.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if running(pid) {
		t.Errorf("a server that ignores EOF and SIGTERM still runs after Close")
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestStartTimeout(t *testing.T) {
	shortGrace(t)
	start := time.Now()
	// sleep never answers the handshake (and ignores its stdin ending).
	_, err := Connect(context.Background(), Server{Name: "mute", Command: "sleep", Args: []string{"60"}, StartTimeout: 200 * time.Millisecond})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `mcp server "mute"`) {
		t.Errorf("err = %v, want a deadline error naming the server", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Connect took %v", d)
	}
}

func TestServerCrash(t *testing.T) {
	set := connect(t, stdioServer("test"))
	pid := pidOf(t, set, "mcp__test__pid")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 2 { // and it stays failed
		_, err := call(t, set, "mcp__test__echo", `{"text":"hi"}`)
		if !errors.Is(err, ErrDisconnected) {
			t.Fatalf("call after the server died: err = %v, want ErrDisconnected", err)
		}
		for _, want := range []string{`mcp server "test"`, "signal: killed"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %q, want it to mention %q", err, want)
			}
		}
	}
	if err := set.Close(); err != nil {
		t.Errorf("Close after a crash: %v", err)
	}
}

func TestCallTimeout(t *testing.T) {
	srv := stdioServer("test")
	srv.Timeout = 300 * time.Millisecond
	set := connect(t, srv)
	_, err := call(t, set, "mcp__test__sleep", `{}`)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"test"`) {
		t.Errorf("err = %v, want a deadline error naming the server", err)
	}
	// The call was cancelled, not the server.
	if res, err := call(t, set, "mcp__test__echo", `{"text":"still here"}`); err != nil || agent.Text(res.Output) != "echo: still here" {
		t.Errorf("call after a timeout = %v, %v", res.Output, err)
	}
}

func TestFilters(t *testing.T) {
	allow := stdioServer("a")
	allow.AllowTools = []string{"echo", "pid", "missing"}
	allow.DenyTools = []string{"pid"}
	deny := stdioServer("d")
	deny.DenyTools = []string{"echo", "image", "fail", "stats", "resource", "env", "pid", "spawn", "sleep", longToolName}
	set := connect(t, allow, deny)
	var got []string
	for _, tool := range set.Tools() {
		got = append(got, tool.Spec().Name)
	}
	if diff := cmp.Diff([]string{"mcp__a__echo", "mcp__d__dotted_name"}, got); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	tool := set.Tools()[0].(*Tool)
	if tool.Server() != "a" || tool.Name() != "echo" {
		t.Errorf("Server(), Name() = %q, %q", tool.Server(), tool.Name())
	}
}

func TestConnectErrors(t *testing.T) {
	broken := Server{Name: "broken", Command: os.Args[0], Env: map[string]string{serverEnv: "broken"}}
	tests := []struct {
		name    string
		servers []Server
		want    []string
		is      error
	}{
		{"no name", []Server{{Command: "x"}}, []string{"no name"}, ErrInvalid},
		{"no transport", []Server{{Name: "s"}}, []string{`"s"`, "neither"}, ErrInvalid},
		{"two transports", []Server{{Name: "s", Command: "x", URL: "http://x"}}, []string{`"s"`, "both"}, ErrInvalid},
		{"duplicate", []Server{stdioServer("s"), stdioServer("s")}, []string{`"s"`}, ErrInvalid},
		{"no such command", []Server{{Name: "s", Command: "/nonexistent/server"}}, []string{`starting mcp server "s"`}, nil},
		{"exits at start", []Server{stdioServer("ok"), broken}, []string{`mcp server "broken"`, "exit status 3", "broken: no config file"}, ErrDisconnected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Connect(context.Background(), tt.servers...)
			if err == nil {
				set.Close()
				t.Fatal("Connect succeeded")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %q, want it to mention %q", err, want)
				}
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
		})
	}
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestToolName(t *testing.T) {
	long := strings.Repeat("x", 80)
	tests := []struct{ server, tool, want string }{
		{"fs", "read_file", "mcp__fs__read_file"},
		{"my.server", "get-thing", "mcp__my_server__get-thing"},
		{"git hub", "créer/issue", "mcp__git_hub__cr_er_issue"},
		{"s", long, ("mcp__s__" + long)[:55] + "_" + hashed("", "s", long)[1:]},
	}
	for _, tt := range tests {
		got := ToolName(tt.server, tt.tool)
		if got != tt.want {
			t.Errorf("ToolName(%q, %q) = %q, want %q", tt.server, tt.tool, got, tt.want)
		}
		if !validName.MatchString(got) {
			t.Errorf("ToolName(%q, %q) = %q, not a valid tool name", tt.server, tt.tool, got)
		}
	}
	if a, b := ToolName("s", long), ToolName("s", long+"y"); a == b || len(a) != 64 || len(b) != 64 {
		t.Errorf("long names %q and %q: want distinct, 64 characters", a, b)
	}

	var n namer
	first, second := n.name("s", "a.b"), n.name("s", "a_b")
	if first != "mcp__s__a_b" || second == first || !validName.MatchString(second) {
		t.Errorf("names of a.b and a_b = %q, %q; want the first plain and the second distinct", first, second)
	}
}

func TestConvert(t *testing.T) {
	tests := []struct {
		name string
		res  *sdk.CallToolResult
		want []agent.Content
	}{
		{"texts joined", &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "a"}, &sdk.TextContent{Text: "b"}}}, text("a\nb")},
		{"structured ignored beside text", &sdk.CallToolResult{
			Content:           []sdk.Content{&sdk.TextContent{Text: `{"n":1}`}},
			StructuredContent: map[string]any{"n": 1},
		}, text(`{"n":1}`)},
		{"empty", &sdk.CallToolResult{}, text("")},
		{"audio", &sdk.CallToolResult{Content: []sdk.Content{&sdk.AudioContent{MIMEType: "audio/wav", Data: []byte("RIFF")}}}, text("[audio (audio/wav, 4 bytes) not shown]")},
		{"image resource", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.gif", MIMEType: "image/gif", Blob: []byte("GIF")}}}},
			[]agent.Content{{Type: agent.ContentImage, ImageURL: "data:image/gif;base64,R0lG"}}},
		{"binary resource", &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "file:///a.bin", Blob: []byte{0, 1}}}}},
			text("[resource file:///a.bin (application/octet-stream, 2 bytes) not shown]")},
		{"link", &sdk.CallToolResult{Content: []sdk.Content{&sdk.ResourceLink{Name: "readme", URI: "file:///README.md"}}}, text("[resource link readme: file:///README.md]")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, convert(tt.res)); diff != "" {
				t.Errorf("convert (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParameters(t *testing.T) {
	schema := map[string]any{"type": "object"}
	got := parameters(schema)
	if diff := cmp.Diff(map[string]any{"type": "object", "properties": map[string]any{}}, got); diff != "" {
		t.Errorf("parameters (-want +got):\n%s", diff)
	}
	if _, ok := schema["properties"]; ok {
		t.Error("parameters modified the server's schema")
	}
}
