package workspace

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/tool/applypatch"
	"github.com/cove-sandbox/cove/sandbox"
)

// ApplyPatch returns the apply_patch tool: a freeform (custom) tool whose
// input is a V4A patch, constrained by applypatch.Grammar, applied all or
// nothing to the session's workspace by package applypatch.
//
// Paths in a patch are relative to the workspace root, as applypatch's
// description and errors tell the model, also when the agent works in a
// subdirectory (the Agents SDK resolves them from the run's cwd instead;
// Instructions says which applies). The session confines every path too,
// so a symlink cannot carry a write out of the workspace.
//
// Call takes the patch text as is; a JSON object with an "input" (the
// Chat Completions fallback for custom tools) or "patch" string is
// unwrapped too. It emits one agent.EventFileChanged per file changed,
// with the action ("created", "updated", "deleted", "moved") and a unified
// diff; for a move, Path is the new path and the diff names both. A file
// rewritten by an update keeps its permission bits, and a moved file takes
// its source's. The output is the summary the SDK returns ("Created a",
// "Updated b", ...). A bad patch, a hunk that does not match or a path out
// of the workspace is an error whose text tells the model what to fix, and
// nothing is written.
func ApplyPatch(sess sandbox.Session) agent.Tool {
	return &applyPatchTool{sess: sess}
}

type applyPatchTool struct {
	sess sandbox.Session
}

var (
	_ agent.RiskAssessor = (*applyPatchTool)(nil)
	_ agent.Describer    = (*applyPatchTool)(nil)
)

// Risk implements agent.RiskAssessor: a patch is never risky, since every
// path it names is confined to the workspace and it is applied all or
// nothing.
func (t *applyPatchTool) Risk(arguments, root string) (string, bool) { return "", false }

// Describe implements agent.Describer: a patch is an edit, whose changes
// are shown file by file as they are made (agent.EventFileChanged).
func (t *applyPatchTool) Describe(string) agent.CallView {
	return agent.CallView{Kind: agent.CallEdit}
}

func (t *applyPatchTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        applypatch.Name,
		Description: applypatch.Description,
		Grammar:     applypatch.Grammar,
	}
}

func (t *applyPatchTool) Call(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	text, err := patchText(call.Arguments)
	if err != nil {
		return agent.ToolResult{}, err
	}
	// Parsed here as well as in Apply to learn the moves before any file
	// is written, so a moved file can keep its mode.
	p, err := applypatch.Parse(text)
	if err != nil {
		return agent.ToolResult{}, err
	}
	fsys := &sessionFS{sess: t.sess, modes: map[string]uint32{}, movedFrom: map[string]string{}}
	for _, op := range p.Ops {
		if op.MoveTo == "" {
			continue
		}
		src, err1 := applypatch.CleanPath(op.Path)
		dst, err2 := applypatch.CleanPath(op.MoveTo)
		if err1 == nil && err2 == nil {
			fsys.movedFrom[dst] = src
		}
	}
	summary, changes, err := applypatch.Apply(ctx, fsys, text)
	if err != nil {
		return agent.ToolResult{}, err
	}
	if call.Emit != nil {
		for _, c := range changes {
			ev := agent.Event{Type: agent.EventFileChanged, Time: time.Now(), Path: c.Path, Action: string(c.Action), Diff: c.Diff}
			if c.Action == applypatch.ActionMoved {
				ev.Path = c.NewPath
			}
			call.Emit(ev)
		}
	}
	return agent.TextResult(summary), nil
}

// patchText returns the patch in a call's arguments: the raw text a custom
// tool call carries, or the "input" or "patch" string of a JSON object for
// a provider or model that wrapped it.
func patchText(args string) (string, error) {
	if !strings.HasPrefix(strings.TrimSpace(args), "{") {
		return args, nil
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(args), &obj); err != nil {
		return args, nil // not JSON after all: let the parser say what is wrong
	}
	for _, k := range []string{"input", "patch"} {
		if s, ok := obj[k].(string); ok {
			return s, nil
		}
	}
	return "", errors.New(`apply_patch takes the patch text itself, starting with "*** Begin Patch" (not JSON); a JSON object must hold it as a string in "input"`)
}

// sessionFS is applypatch.FS over a sandbox session. The paths applypatch
// gives it are clean and relative, which the session resolves against the
// workspace root. It is used by one Apply call, which calls it from one
// goroutine, so its maps need no lock.
type sessionFS struct {
	sess sandbox.Session
	// modes are the permission bits of the files read, so a rewrite keeps
	// them (Session.WriteFile sets the mode it is given).
	modes map[string]uint32
	// movedFrom maps a *** Move to: path to the file it comes from.
	movedFrom map[string]string
}

var _ applypatch.FS = (*sessionFS)(nil)

func (f *sessionFS) ReadFile(ctx context.Context, p string) ([]byte, error) {
	fi, err := f.sess.Stat(ctx, p)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	case err != nil:
		return nil, err
	}
	switch fi.Type {
	case sandbox.TypeFile:
		f.modes[p] = fi.Mode
	case sandbox.TypeDir:
		return nil, fmt.Errorf("%s is a directory; apply_patch adds, updates and deletes files: %w", p, sandbox.ErrInvalid)
	}
	rc, err := f.sess.ReadFile(ctx, p)
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		// A symlink to nowhere: writing would create its target.
		return nil, fmt.Errorf("%s: %w", p, fs.ErrNotExist)
	case err != nil:
		return nil, err
	}
	defer rc.Close()
	// One byte over applypatch's limit is enough for it to refuse the
	// file; reading a larger one whole would only cost memory. A file cut
	// short must not come back, though: Apply may write it back when it
	// undoes a failed patch.
	data, err := io.ReadAll(io.LimitReader(rc, applypatch.MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if len(data) > applypatch.MaxFileSize {
		return nil, fmt.Errorf("%s is over the %d-byte limit apply_patch edits; change it with a command instead: %w", p, applypatch.MaxFileSize, sandbox.ErrLimit)
	}
	return data, nil
}

func (f *sessionFS) WriteFile(ctx context.Context, p string, data []byte) error {
	mode, ok := f.modes[p]
	if !ok {
		mode, ok = f.modes[f.movedFrom[p]]
	}
	if !ok {
		mode = 0o644
	}
	return f.sess.WriteFile(ctx, p, bytes.NewReader(data), mode)
}

func (f *sessionFS) Remove(ctx context.Context, p string) error {
	return f.sess.Remove(ctx, p)
}
