package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/agent"
)

var (
	_ agent.Tool         = (*Tool)(nil)
	_ agent.RiskAssessor = (*Tool)(nil)
)

// Tool is one tool of a connected MCP server.
type Tool struct {
	conn *conn
	name string // the server's name for the tool
	spec agent.ToolSpec
}

// Spec implements agent.Tool: the namespaced name, the server's
// description and the tool's input schema.
func (t *Tool) Spec() agent.ToolSpec { return t.spec }

// Server is the name of the server the tool belongs to.
func (t *Tool) Server() string { return t.conn.server.Name }

// Name is the tool's name on its server (Spec().Name is the namespaced one).
func (t *Tool) Name() string { return t.name }

// Risk implements agent.RiskAssessor: every call is risky, since the
// server acts outside the sandbox. The tool's annotations (readOnlyHint,
// destructiveHint) are not trusted to say otherwise: the MCP specification
// tells clients not to decide on the hints of a server they do not trust,
// and Cove cannot know which servers those are.
func (t *Tool) Risk(arguments, root string) (string, bool) {
	return fmt.Sprintf("the tool %s of the MCP server %s acts outside the sandbox", t.spec.Name, t.conn.server.Name), true
}

// ToolError is the error Call returns when the server ran the tool and
// reported that it failed (an isError result). Its message is what the
// model sees: a marker and the tool's own error text.
type ToolError struct {
	Server, Tool string
	// Text is the result's text content (or its structured content as
	// JSON when it had no text).
	Text string
}

func (e *ToolError) Error() string {
	return fmt.Sprintf("MCP tool error (%s/%s): %s", e.Server, e.Tool, e.Text)
}

// Call implements agent.Tool: it sends call.Arguments (a JSON object) to
// the server and converts the result. A result the server marks as an
// error is returned as a *ToolError; a server that is gone gives an error
// wrapping ErrDisconnected that names it; a call that outlives the server's
// Timeout gives context.DeadlineExceeded.
func (t *Tool) Call(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	c := t.conn
	if c.isClosed() {
		return agent.ToolResult{}, fmt.Errorf("calling tool %q on mcp server %q: %w", t.name, c.server.Name, ErrClosed)
	}
	args := json.RawMessage(strings.TrimSpace(call.Arguments))
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) || args[0] != '{' {
		return agent.ToolResult{}, fmt.Errorf("calling tool %q: the arguments must be a JSON object, got %.200q", t.spec.Name, call.Arguments)
	}

	callCtx, cancel := withTimeout(ctx, c.server.timeout())
	defer cancel()
	res, err := c.session.CallTool(callCtx, &sdk.CallToolParams{Name: t.name, Arguments: args})
	if err != nil {
		switch {
		case ctx.Err() != nil:
			// The run's context ended: that, not the server, is the news.
			err = ctx.Err()
		case callCtx.Err() != nil:
			err = fmt.Errorf("no result after %v: %w", c.server.timeout(), callCtx.Err())
		case c.isClosed():
			err = ErrClosed
		default:
			err = c.explain(err)
		}
		return agent.ToolResult{}, fmt.Errorf("calling tool %q on mcp server %q: %w", t.name, c.server.Name, err)
	}
	out := convert(res)
	if res.IsError {
		return agent.ToolResult{}, &ToolError{Server: c.server.Name, Tool: t.name, Text: agent.Text(out)}
	}
	return agent.ToolResult{Output: out}, nil
}

// convert turns an MCP tool result into the model's content. Text (and
// text resources) stay text, consecutive pieces joined by newlines; images
// become data URLs; what a model can't take (audio, binary resources) is
// named in a short note so the model knows something was there. Structured
// content is used, as JSON text, only when there is no text: servers are
// asked to mirror it in a text block, and sending both would double it.
func convert(res *sdk.CallToolResult) []agent.Content {
	var out []agent.Content
	text := func(s string) {
		if n := len(out); n > 0 && out[n-1].Type == agent.ContentText {
			out[n-1].Text += "\n" + s
			return
		}
		out = append(out, agent.Content{Type: agent.ContentText, Text: s})
	}
	hasText := false
	for _, c := range res.Content {
		switch c := c.(type) {
		case *sdk.TextContent:
			text(c.Text)
			hasText = true
		case *sdk.ImageContent:
			out = append(out, agent.Content{Type: agent.ContentImage, ImageURL: dataURL(c.MIMEType, c.Data)})
		case *sdk.AudioContent:
			text(fmt.Sprintf("[audio (%s, %d bytes) not shown]", c.MIMEType, len(c.Data)))
		case *sdk.EmbeddedResource:
			r := c.Resource
			switch {
			case r == nil:
			case r.Blob == nil:
				text(r.Text)
				hasText = true
			case strings.HasPrefix(r.MIMEType, "image/"):
				out = append(out, agent.Content{Type: agent.ContentImage, ImageURL: dataURL(r.MIMEType, r.Blob)})
			default:
				text(fmt.Sprintf("[resource %s (%s, %d bytes) not shown]", r.URI, orBinary(r.MIMEType), len(r.Blob)))
			}
		case *sdk.ResourceLink:
			text(fmt.Sprintf("[resource link %s: %s]", c.Name, c.URI))
		default:
			// A content type newer than this code: its JSON is better
			// than silence.
			if b, err := json.Marshal(c); err == nil {
				text(string(b))
			}
		}
	}
	if !hasText && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			text(string(b))
		}
	}
	if len(out) == 0 {
		// Providers want some output for every call.
		out = append(out, agent.Content{Type: agent.ContentText, Text: ""})
	}
	return out
}

func dataURL(mime string, data []byte) string {
	return "data:" + orBinary(mime) + ";base64," + base64.StdEncoding.EncodeToString(data)
}

func orBinary(mime string) string {
	if mime == "" {
		return "application/octet-stream"
	}
	return mime
}

// description is the tool's description, or its title when it has none:
// the model needs something to go on.
func description(t *sdk.Tool) string {
	switch {
	case t.Description != "":
		return t.Description
	case t.Title != "":
		return t.Title
	case t.Annotations != nil && t.Annotations.Title != "":
		return t.Annotations.Title
	}
	return ""
}

// parameters is the tool's input schema as the model is given it. It is
// the server's schema, except that an object schema without "properties"
// gets an empty one: OpenAI rejects function parameters that lack it, and
// MCP servers commonly send {"type":"object"} for tools without arguments.
func parameters(schema any) map[string]any {
	m, ok := schema.(map[string]any)
	if !ok || len(m) == 0 {
		return map[string]any{"type": "object", "properties": map[string]any{}}
	}
	if _, ok := m["properties"]; !ok && m["type"] == "object" {
		m = maps.Clone(m) // the SDK's caches may share the map
		m["properties"] = map[string]any{}
	}
	return m
}
