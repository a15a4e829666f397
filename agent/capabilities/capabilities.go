// Package capabilities are the sandbox agent's standard capabilities: the
// workspace context (base prompt, tree, AGENTS.md, skills index), a shell
// (exec_command, write_stdin), the filesystem (apply_patch, view_image)
// and skills (load_skill). A sandbox agent names the ones it gets in
// agent.SandboxAgent.Capabilities; Default is the usual choice.
package capabilities

import (
	"context"
	"strings"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/tool/sandboxtool"
	"github.com/cove-sandbox/cove/agent/tool/workspace"
)

// Default is the capabilities most sandbox agents want: the workspace
// context, a shell and the filesystem tools.
func Default() []agent.Capability {
	return []agent.Capability{Workspace(), Shell(sandboxtool.Options{}), Filesystem()}
}

// All is Default plus skills.
func All() []agent.Capability { return append(Default(), Skills()) }

type capability struct {
	name string
	bind func(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error)
}

func (c capability) Name() string { return c.name }
func (c capability) Bind(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
	return c.bind(ctx, env)
}

// Workspace adds the sandbox part of the system prompt: how to work in
// the sandbox, notes on the other bound capabilities' tools, the
// workspace tree to depth 3, the AGENTS.md files from the root down to the
// working directory, and the skills index.
func Workspace() agent.Capability {
	return capability{name: "workspace", bind: func(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
		caps := []workspace.Capability{}
		for _, n := range env.Capabilities {
			caps = append(caps, workspace.Capability(n))
		}
		text, err := workspace.Instructions(ctx, env.Session, workspace.Options{Root: env.Root, Workdir: env.Workdir, Capabilities: caps})
		if err != nil {
			return agent.Binding{}, err
		}
		return agent.Binding{Instructions: text}, nil
	}}
}

// Shell gives exec_command and write_stdin; the processes they leave are
// killed when the run ends. The files their commands create, change or
// delete in the workspace are reported (agent.EventFileChanged), except
// those apply_patch reported already.
func Shell(opts sandboxtool.Options) agent.Capability {
	return capability{name: string(workspace.CapabilityShell), bind: func(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
		o := opts
		if o.User == "" {
			o.User = env.User
		}
		if o.Workdir == "" {
			o.Workdir = env.Workdir
		}
		if o.Root == "" {
			o.Root = env.Root
		}
		if o.Edits == nil {
			o.Edits = env.Edits
		}
		t := sandboxtool.New(env.Session, o)
		return agent.Binding{Tools: []agent.Tool{t.ExecCommand(), t.WriteStdin()}, Close: t.Close}, nil
	}}
}

// Filesystem gives apply_patch and view_image.
func Filesystem() agent.Capability {
	return capability{name: string(workspace.CapabilityFilesystem), bind: func(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
		t := sandboxtool.New(env.Session, sandboxtool.Options{User: env.User, Workdir: env.Workdir})
		patch := recordEdits{workspace.ApplyPatch(env.Session), env.Edits}
		return agent.Binding{Tools: []agent.Tool{patch, t.ViewImage()}, Close: t.Close}, nil
	}}
}

// Skills gives load_skill over the skills found in the workspace
// (.agents/<name>/SKILL.md and .agents/skills/<name>/SKILL.md).
func Skills() agent.Capability {
	return capability{name: string(workspace.CapabilitySkills), bind: func(ctx context.Context, env agent.SandboxEnv) (agent.Binding, error) {
		skills, _, err := workspace.Skills(ctx, env.Session)
		if err != nil {
			return agent.Binding{}, err
		}
		return agent.Binding{Tools: []agent.Tool{workspace.LoadSkill(env.Session, skills)}}, nil
	}}
}

// recordEdits is a tool whose file_changed events are recorded in a run's
// Edits, so the shell does not report the same changes again.
type recordEdits struct {
	agent.Tool
	edits *agent.Edits
}

var (
	_ agent.RiskAssessor = recordEdits{}
	_ agent.Describer    = recordEdits{}
)

// Risk implements agent.RiskAssessor as the wrapped tool does.
func (r recordEdits) Risk(arguments, root string) (string, bool) {
	if ra, ok := r.Tool.(agent.RiskAssessor); ok {
		return ra.Risk(arguments, root)
	}
	return "", false
}

// Describe implements agent.Describer as the wrapped tool does.
func (r recordEdits) Describe(arguments string) agent.CallView {
	if d, ok := r.Tool.(agent.Describer); ok {
		return d.Describe(arguments)
	}
	return agent.CallView{}
}

func (r recordEdits) Call(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	emit := call.Emit
	call.Emit = func(ev agent.Event) {
		if ev.Type == agent.EventFileChanged && ev.Path != "" {
			r.edits.Add(ev.Path)
			if from := movedFrom(ev.Diff); from != "" {
				r.edits.Add(from)
			}
		}
		if emit != nil {
			emit(ev)
		}
	}
	return r.Tool.Call(ctx, call)
}

// movedFrom returns the source of a move from its diff's "--- a/old" line,
// or "".
func movedFrom(diff string) string {
	for _, line := range strings.SplitN(diff, "\n", 3) {
		if p, ok := strings.CutPrefix(line, "--- a/"); ok {
			return p
		}
	}
	return ""
}
