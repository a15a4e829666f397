package sandboxtool

import "github.com/cove-sandbox/cove/agent"

// The specs are the SDK's, word for word: the descriptions and the JSON
// schemas its pydantic argument models produce (titles, defaults, the
// anyOf of optional fields), so a model sees the same tools through Cove.
// Each call builds a fresh map, as callers may change what they get.

func execCommandSpec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "exec_command",
		Description: "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
		Parameters: object("ExecCommandArgs", []string{"cmd"}, map[string]any{
			"cmd": map[string]any{
				"description": "Shell command to execute.",
				"minLength":   1,
				"title":       "Cmd",
				"type":        "string",
			},
			"workdir": optional("Workdir", "Optional working directory to run the command in; defaults to the turn cwd.",
				map[string]any{"type": "string"}),
			"shell": optional("Shell", "Shell binary to launch. Defaults to the user's default shell.",
				map[string]any{"type": "string"}),
			"login": map[string]any{
				"default":     true,
				"description": "Whether to run the shell with -l/-i semantics. Defaults to true.",
				"title":       "Login",
				"type":        "boolean",
			},
			"tty": map[string]any{
				"default":     false,
				"description": "Whether to allocate a TTY for the command. Defaults to false (plain pipes); set to true to open a PTY and access TTY process.",
				"title":       "Tty",
				"type":        "boolean",
			},
			"yield_time_ms":     yieldSchema(10_000),
			"max_output_tokens": maxTokensSchema(),
		}),
	}
}

func writeStdinSpec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "write_stdin",
		Description: "Writes characters to an existing unified exec session and returns recent output.",
		Parameters: object("WriteStdinArgs", []string{"session_id"}, map[string]any{
			"session_id": map[string]any{
				"description": "Identifier of the running unified exec session.",
				"title":       "Session Id",
				"type":        "integer",
			},
			"chars": map[string]any{
				"default":     "",
				"description": "Bytes to write to stdin (may be empty to poll).",
				"title":       "Chars",
				"type":        "string",
			},
			"yield_time_ms":     yieldSchema(250),
			"max_output_tokens": maxTokensSchema(),
		}),
	}
}

func viewImageSpec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "view_image",
		Description: "Loads an image from the sandbox workspace or an explicitly granted sandbox path and returns it as a structured image output.",
		Parameters: object("ViewImageArgs", []string{"path"}, map[string]any{
			"path": map[string]any{
				"description": "Path to the image file. Workspace paths and explicitly granted sandbox paths are supported.",
				"minLength":   1,
				"title":       "Path",
				"type":        "string",
			},
		}),
	}
}

func object(title string, required []string, props map[string]any) map[string]any {
	return map[string]any{
		"properties": props,
		"required":   required,
		"title":      title,
		"type":       "object",
	}
}

// optional is pydantic's schema of a "T | None = None" field.
func optional(title, description string, schema map[string]any) map[string]any {
	return map[string]any{
		"anyOf":       []any{schema, map[string]any{"type": "null"}},
		"default":     nil,
		"description": description,
		"title":       title,
	}
}

func yieldSchema(def int) map[string]any {
	return map[string]any{
		"default":     def,
		"description": "How long to wait (in milliseconds) for output before yielding.",
		"minimum":     0,
		"title":       "Yield Time Ms",
		"type":        "integer",
	}
}

func maxTokensSchema() map[string]any {
	return optional("Max Output Tokens", "Maximum number of tokens to return. Excess output will be truncated.",
		map[string]any{"minimum": 1, "type": "integer"})
}
