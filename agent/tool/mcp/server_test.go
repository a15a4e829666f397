package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// serverEnv makes the test binary an MCP server instead of running tests:
// "stdio" serves the test tools on stdin/stdout; "stubborn" does too but
// ignores SIGTERM and stays after its stdin ends, as a stuck server does;
// "broken" complains on stderr and exits, as a misconfigured server does.
const serverEnv = "COVE_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	switch mode := os.Getenv(serverEnv); mode {
	case "":
		os.Exit(m.Run())
	case "stdio", "stubborn":
		if mode == "stubborn" {
			signal.Ignore(syscall.SIGTERM)
		}
		if err := newTestServer().Run(context.Background(), &sdk.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if mode == "stubborn" {
			time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock and exit
		}
		os.Exit(0)
	case "broken":
		fmt.Fprintln(os.Stderr, "broken: no config file")
		os.Exit(3)
	}
}

// stdioServer is the config of the test binary as a stdio server. A race
// build sleeps a second at exit to catch late reports; the server need not.
func stdioServer(name string) Server {
	return Server{Name: name, Command: os.Args[0], Env: map[string]string{serverEnv: "stdio", "GORACE": "atexit_sleep_ms=0"}}
}

// pngBytes stand for an image; nothing decodes them.
var pngBytes = []byte("\x89PNG\r\n\x1a\nnot really")

// longToolName is longer than a model's tool name may be.
const longToolName = "a_tool_whose_name_is_far_too_long_to_fit_in_sixty_four_characters_with_a_prefix"

type echoArgs struct {
	Text string `json:"text" jsonschema:"what to echo"`
}

type envArgs struct {
	Name string `json:"name"`
}

// newTestServer is an MCP server with one tool for each kind of result the
// adapter converts, built with the SDK's server API. It pages its tool
// list three at a time so that listing takes several requests.
func newTestServer() *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: "cove-test", Version: "1"}, &sdk.ServerOptions{PageSize: 3})
	text := func(s string) *sdk.CallToolResult {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: s}}}
	}
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echoes its text."},
		func(_ context.Context, _ *sdk.CallToolRequest, in echoArgs) (*sdk.CallToolResult, any, error) {
			return text("echo: " + in.Text), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "image", Description: "Returns an image."},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{
				&sdk.TextContent{Text: "a picture:"},
				&sdk.ImageContent{MIMEType: "image/png", Data: pngBytes},
			}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			return nil, nil, errors.New("boom: the disk is full")
		})
	// Structured content without text needs the low-level API: AddTool
	// would add the JSON as text itself.
	s.AddTool(&sdk.Tool{Name: "stats", Description: "Returns structured content only.", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{}, StructuredContent: map[string]any{"files": 3, "ok": true}}, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "resource", Description: "Returns an embedded text resource."},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.EmbeddedResource{
				Resource: &sdk.ResourceContents{URI: "file:///notes.txt", MIMEType: "text/plain", Text: "the notes"},
			}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "env", Description: "Returns an environment variable."},
		func(_ context.Context, _ *sdk.CallToolRequest, in envArgs) (*sdk.CallToolResult, any, error) {
			return text(os.Getenv(in.Name)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "pid", Description: "Returns the server's pid."},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "spawn", Description: "Starts a child that outlives the call and returns its pid."},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			cmd := exec.Command("sleep", "60")
			if err := cmd.Start(); err != nil {
				return nil, nil, err
			}
			go cmd.Wait()
			return text(strconv.Itoa(cmd.Process.Pid)), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "sleep", Description: "Returns when the call is cancelled."},
		func(ctx context.Context, _ *sdk.CallToolRequest, _ any) (*sdk.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	sdk.AddTool(s, &sdk.Tool{Name: "dotted.name", Title: "A tool with a dot"},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			return text("dotted"), nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: longToolName, Description: "Has a long name."},
		func(context.Context, *sdk.CallToolRequest, any) (*sdk.CallToolResult, any, error) {
			return text("long"), nil, nil
		})
	return s
}
