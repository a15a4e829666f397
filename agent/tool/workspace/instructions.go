package workspace

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"path"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// defaultPrompt is the base of every sandbox agent's system prompt, in the
// spirit of the Agents SDK's sandbox prompt.md but in our own words. It
// lives in a file so it can be read and reviewed as prose.
//
//go:embed prompt.md
var defaultPrompt string

// Capability is a group of sandbox tools an agent is given. Each enabled
// capability adds its notes to the prompt; the caller registers the
// matching tools.
type Capability string

const (
	// CapabilityShell: exec_command and write_stdin.
	CapabilityShell Capability = "shell"
	// CapabilityFilesystem: apply_patch (ApplyPatch) and view_image.
	CapabilityFilesystem Capability = "filesystem"
	// CapabilitySkills: the skills index in the prompt and load_skill
	// (LoadSkill).
	CapabilitySkills Capability = "skills"
)

// DefaultCapabilities are the capabilities an agent has when
// Options.Capabilities is nil: all three, as a sandbox agent is expected
// to run commands, edit files and use the workspace's skills.
func DefaultCapabilities() []Capability {
	return []Capability{CapabilityShell, CapabilityFilesystem, CapabilitySkills}
}

// Defaults for the bounds in Options. They keep the prompt a few thousand
// tokens at most however large the workspace is: the model can always
// list or read more itself.
const (
	DefaultTreeDepth        = 3
	DefaultTreeEntries      = 200
	DefaultTreeDirEntries   = 30
	DefaultAgentsFileBytes  = 16 << 10
	DefaultAgentsTotalBytes = 32 << 10 // Codex's project_doc_max_bytes
)

// Options shape the sandbox prompt and the tools. The zero value is the
// default: the session's workspace root, working there, all capabilities,
// the default bounds.
type Options struct {
	// Root is the workspace root inside the sandbox. "" asks the session
	// (Info().Spec.Root), falling back to sandbox.DefaultRoot.
	Root string
	// Workdir is the directory the agent works in (where its commands
	// start), relative to Root or absolute inside it; "" is Root.
	// AGENTS.md files are loaded from Root down to it.
	Workdir string

	// BasePrompt replaces the default base prompt (the SDK's
	// base_instructions); "" keeps the default.
	BasePrompt string
	// AgentInstructions are the agent's own instructions. They go right
	// after the base prompt, under their own heading, so the general rules
	// come first and the agent's more specific ones override them.
	AgentInstructions string

	// Capabilities are the enabled tool groups; nil means
	// DefaultCapabilities, an empty non-nil slice means none. Names other
	// than the three here are ignored, so the names of every bound
	// agent.Capability can be passed as they are.
	Capabilities []Capability
	// SkillsDirs are where skills are looked for, relative to Root; nil
	// means DefaultSkillsDirs.
	SkillsDirs []string

	// TreeDepth is how deep the workspace tree goes (default 3).
	TreeDepth int
	// TreeEntries caps the entries shown in the whole tree, and
	// TreeDirEntries those shown in one directory; the rest are counted
	// in "... (k more)" lines.
	TreeEntries    int
	TreeDirEntries int
	// AgentsFileBytes caps one AGENTS.md and AgentsTotalBytes all of them;
	// the root's file is served first.
	AgentsFileBytes  int
	AgentsTotalBytes int

	// Logger gets what is left out of the prompt and why (skipped skills,
	// unreadable AGENTS.md). nil discards.
	Logger *slog.Logger
}

func (o Options) capabilities() []Capability {
	if o.Capabilities == nil {
		return DefaultCapabilities()
	}
	return o.Capabilities
}

func (o Options) has(c Capability) bool {
	for _, x := range o.capabilities() {
		if x == c {
			return true
		}
	}
	return false
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Instructions assembles the sandbox agent's system prompt, in this order:
//
//  1. the base prompt (Options.BasePrompt or ours),
//  2. the agent's own instructions (Options.AgentInstructions), if any,
//  3. notes for each enabled capability,
//  4. the workspace root, working directory and tree,
//  5. the AGENTS.md files from the root down to the working directory,
//  6. the skills index, when the skills capability is on.
//
// This is the Agents SDK's order (base, agent, capabilities, filesystem)
// with AGENTS.md and skills after the tree, where they can name paths the
// model has just seen. The Runner passes the agent's instructions in
// Options rather than prepending them, so the result is the whole system
// prompt.
//
// The prompt reflects the workspace when it is called; a skill or AGENTS.md
// that cannot be used is left out and logged, not an error. Errors are the
// session's (unreachable, stopped) or a bad Options field.
func Instructions(ctx context.Context, sess sandbox.Session, opts Options) (string, error) {
	root, err := workspaceRoot(ctx, sess, opts.Root)
	if err != nil {
		return "", err
	}
	workdir, err := resolveWorkdir(root, opts.Workdir)
	if err != nil {
		return "", err
	}
	var sections []string

	base := opts.BasePrompt
	if base == "" {
		base = strings.ReplaceAll(defaultPrompt, "{{root}}", root)
	}
	sections = append(sections, strings.TrimSpace(base))

	if s := strings.TrimSpace(opts.AgentInstructions); s != "" {
		sections = append(sections, "# Agent instructions\n\n"+s)
	}

	if notes := capabilityNotes(opts.capabilities()); notes != "" {
		sections = append(sections, notes)
	}

	tree, err := renderTree(ctx, sess, root, treeLimits{
		depth:      orDefault(opts.TreeDepth, DefaultTreeDepth),
		entries:    orDefault(opts.TreeEntries, DefaultTreeEntries),
		dirEntries: orDefault(opts.TreeDirEntries, DefaultTreeDirEntries),
	})
	if err != nil {
		return "", err
	}
	sections = append(sections, workspaceSection(root, workdir, orDefault(opts.TreeDepth, DefaultTreeDepth), tree))

	docs, err := loadAgentsFiles(ctx, sess, root, workdir,
		orDefault(opts.AgentsFileBytes, DefaultAgentsFileBytes),
		orDefault(opts.AgentsTotalBytes, DefaultAgentsTotalBytes),
		opts.logger())
	if err != nil {
		return "", err
	}
	if s := agentsSection(docs); s != "" {
		sections = append(sections, s)
	}

	if opts.has(CapabilitySkills) {
		skills, skipped, err := Skills(ctx, sess, opts.SkillsDirs...)
		if err != nil {
			return "", err
		}
		for _, s := range skipped {
			opts.logger().Warn("skill left out of the prompt", "path", s.Path, "reason", s.Reason)
		}
		if s := skillsSection(skills); s != "" {
			sections = append(sections, s)
		}
	}
	return strings.Join(sections, "\n\n") + "\n", nil
}

// workspaceRoot is the root the prompt and tools use: the one given, else
// the session's, else the default.
func workspaceRoot(ctx context.Context, sess sandbox.Session, root string) (string, error) {
	if root == "" {
		info, err := sess.Info(ctx)
		if err != nil {
			return "", fmt.Errorf("finding the workspace root of sandbox %q: %w", sess.ID(), err)
		}
		root = info.Spec.Root
	}
	if root == "" {
		root = sandbox.DefaultRoot
	}
	if !path.IsAbs(root) {
		return "", fmt.Errorf("workspace root %q: want an absolute path such as %s: %w", root, sandbox.DefaultRoot, sandbox.ErrInvalid)
	}
	return path.Clean(root), nil
}

// resolveWorkdir makes the working directory absolute and checks it lies
// in the workspace.
func resolveWorkdir(root, workdir string) (string, error) {
	if workdir == "" {
		return root, nil
	}
	abs, err := sandbox.ResolvePath(root, workdir)
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	return abs, nil
}

// The capability notes tell the model how to use each tool group well;
// the tools' own descriptions say what they do.
const (
	shellNotes = `## Shell

- Run commands with ` + "`exec_command`" + `. A command still running when the call returns keeps a session; use ` + "`write_stdin`" + ` to send it input or to poll it for more output.
- To be able to interrupt a long-running command, start it with ` + "`tty: true`" + `, then send Ctrl-C (` + "`\\u0003`" + `) through ` + "`write_stdin`" + `.
- Find files and text with ` + "`rg --files`" + ` and ` + "`rg`" + ` when they are installed; they are much faster than ` + "`find`" + ` and ` + "`grep -r`" + `.
- Read large files in ranges (` + "`sed -n 1,200p`" + `, ` + "`head`" + `) instead of printing them whole, and don't write scripts just to print files.`

	filesystemNotes = `## Files

- Edit files with ` + "`apply_patch`" + `. It is a freeform tool: send the patch text itself, not JSON. Paths in a patch are relative to the workspace root, never absolute, and the whole patch applies or none of it does.
- Look at an image file in the workspace with ` + "`view_image`" + `.`
)

// capabilityNotes renders the notes of the enabled capabilities in a
// fixed order, whatever order they were given in, so the prompt (and a
// provider's prompt cache) does not change with it. Other capabilities
// (an agent.Capability of the caller's own) bring their own instructions
// and are passed over.
func capabilityNotes(caps []Capability) string {
	enabled := map[Capability]bool{}
	for _, c := range caps {
		enabled[c] = true
	}
	var notes []string
	if enabled[CapabilityShell] {
		notes = append(notes, shellNotes)
	}
	if enabled[CapabilityFilesystem] {
		notes = append(notes, filesystemNotes)
	}
	// Skills have their own section after the tree: it names paths.
	if len(notes) == 0 {
		return ""
	}
	return "# Sandbox tools\n\n" + strings.Join(notes, "\n\n")
}

func workspaceSection(root, workdir string, depth int, tree string) string {
	var b strings.Builder
	b.WriteString("# Workspace\n\n")
	fmt.Fprintf(&b, "The workspace root is `%s`.", root)
	if workdir != root {
		fmt.Fprintf(&b, " Your working directory is `%s`: commands start there. Paths in `apply_patch` stay relative to the workspace root.", workdir)
	}
	fmt.Fprintf(&b, " Its layout, %d levels deep (directories end in /, .git contents are not shown; list a directory to see more):\n\n", depth)
	b.WriteString("```\n")
	b.WriteString(tree)
	b.WriteString("```")
	return b.String()
}
