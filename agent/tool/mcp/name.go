package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxNameLen is the longest tool name OpenAI accepts (^[a-zA-Z0-9_-]{1,64}$);
// Anthropic's limit is the same.
const maxNameLen = 64

// ToolName is the name the model sees for tool on server:
// "mcp__" + server + "__" + tool, with every character outside
// [a-zA-Z0-9_-] replaced by "_". A name longer than 64 characters is cut
// to 55 and ends with "_" and 8 hex digits of a SHA-256 of the server and
// tool names, so it stays unique and is the same in every run (a resumed
// RunState refers to tools by name). The prefix tells the model, and
// whoever reads a trace, that the tool is an MCP server's.
func ToolName(server, tool string) string {
	n := "mcp__" + sanitize(server) + "__" + sanitize(tool)
	if len(n) > maxNameLen {
		n = hashed(n, server, tool)
	}
	return n
}

// hashed cuts n to make room for a hash of server and tool.
func hashed(n, server, tool string) string {
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	h := hex.EncodeToString(sum[:4])
	return n[:min(len(n), maxNameLen-1-len(h))] + "_" + h
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, s)
}

// namer hands out the names of one Set's tools. Sanitising can make two
// names equal ("a.b" and "a_b"); the second one gets the hash suffix.
// Which one is second depends only on the servers' order and their tool
// lists, so it is stable across runs with the same servers.
type namer struct {
	used map[string]bool
}

func (m *namer) name(server, tool string) string {
	if m.used == nil {
		m.used = map[string]bool{}
	}
	n := ToolName(server, tool)
	if m.used[n] {
		n = hashed(n, server, tool)
	}
	m.used[n] = true
	return n
}
