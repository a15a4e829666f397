// Package applypatch parses and applies the V4A patch envelope ("*** Begin
// Patch" ... "*** End Patch") that OpenAI's Codex and the OpenAI Agents SDK
// use for their apply_patch tool, so that models trained on that tool can
// edit files in a Cove sandbox with the same text they would send there.
//
// It does one thing: turn patch text into file changes, all or nothing. It
// knows nothing of sandboxes; the file system is the small FS interface, which
// the sandbox bridge implements over a session and tests implement over a
// map.
//
// The semantics follow the Agents SDK (src/agents/apply_diff.py and
// sandbox/apply_patch.py) and Codex (codex-rs/apply-patch). Where they
// differ, or where both are looser than a sandbox should be:
//
//   - Stacked "@@" headers narrow the search one after the other (SDK;
//     Codex has one per hunk). An "@@" line not found in the file is an
//     error (Codex; the SDK ignores a lone one), since applying the hunk
//     elsewhere is worse than asking again.
//   - Context is matched exactly, then ignoring trailing white space, then
//     leading and trailing, then typographic punctuation (Codex's four
//     levels; the SDK has the first three). Matched context lines keep the
//     file's text (SDK; Codex rewrites them with the patch's).
//   - "*** End of File" hunks must match at the end (Codex; the SDK falls
//     back to anywhere). A hunk of only additions goes after its "@@" line
//     if it has one (SDK), else at the end of the file (Codex).
//   - An added file's last line ends with a newline (Codex; the SDK drops
//     it). An update keeps the file's line endings and its lack of a final
//     newline (SDK).
//   - Adding a file that exists, or moving onto one, is refused; both
//     overwrite. An Update with only a Move to renames.
//   - The summary is worded as the SDK's.
package applypatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"unicode/utf8"
)

// Limits. A patch is model output, so it is bounded before it is split into
// lines; a file to update is bounded because matching hunks against it costs
// time in proportion to its length.
const (
	// MaxPatchSize is the largest patch text Parse accepts, in bytes.
	MaxPatchSize = 10 << 20
	// MaxFileSize is the largest file an Update File may edit, in bytes.
	MaxFileSize = 16 << 20
)

// FS is the file system a patch is applied to. Paths are slash-separated,
// relative to the workspace root, already checked by Apply to be relative
// and free of "..". The sandbox bridge implements it over a sandbox.Session;
// tests use an in-memory map.
type FS interface {
	// ReadFile returns a file's content; an error satisfying
	// errors.Is(err, fs.ErrNotExist) when missing.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile creates or replaces a file, creating parent directories.
	WriteFile(ctx context.Context, path string, data []byte) error
	// Remove deletes a file.
	Remove(ctx context.Context, path string) error
}

// Action says what a patch did to one file.
type Action string

// The actions of a Change.
const (
	ActionCreated Action = "created"
	ActionUpdated Action = "updated"
	ActionDeleted Action = "deleted"
	ActionMoved   Action = "moved"
)

// Change is one file the patch changed.
type Change struct {
	Action  Action
	Path    string // the file's path (for a move, the old path)
	NewPath string // for moves: the new path
	// Diff is a unified diff (---/+++/@@ lines) of the change, for showing
	// to a human. It is empty for an update that changed nothing.
	Diff string
}

// ErrPatch marks an error the model caused: a malformed patch, a path that
// is absolute or leaves the workspace, a file that is missing (or present)
// against the patch's word, or hunks that do not match the file. Its message
// says what was wrong and is meant to go back to the model so it can fix the
// patch. An error from Apply that does not match ErrPatch came from the FS or
// from ctx.
var ErrPatch = errors.New("invalid patch")

// Error is the error Apply and Parse return for a bad patch. It matches
// ErrPatch under errors.Is, and also Err when set (fs.ErrNotExist for an
// update of a missing file, fs.ErrExist for an add of an existing one).
type Error struct {
	Line int    // 1-based line of the patch text at fault; 0 if none
	Path string // the file concerned, as written in the patch; "" if none
	Msg  string // what was wrong and what was expected
	Err  error  // an underlying cause, or nil
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("invalid patch: line %d: %s", e.Line, e.Msg)
	}
	return "invalid patch: " + e.Msg
}

// Is makes every *Error match ErrPatch.
func (e *Error) Is(target error) bool { return target == ErrPatch }

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Apply parses text and applies it to fsys.
//
// Every path is validated (see CleanPath) and every operation is checked
// against the current files, in patch order, before anything is written: an
// Add File of an existing file, an Update File or Delete File of a missing
// one, or a hunk that does not match is rejected, and a rejected patch
// changes nothing. Later operations see the effect of earlier ones, so a
// patch may add a file and then update it, or delete one and add it anew.
// The writes then happen (all writes first, then all removals, so a failure
// midway loses no content); if the FS fails midway, the files already
// written are restored as far as the FS allows.
//
// It returns the changes made, one per operation, and the summary the model
// sees, exactly as the Agents SDK writes it: one line per operation,
// "Created p", "Updated p", "Deleted p", and for an update with *** Move to:
// the two lines "Updated a" and "Moved a to b".
//
// Errors matching ErrPatch are the model's to fix; others are the FS's or
// ctx's. Apply does not lock the files: a concurrent writer between the
// check and the write wins or loses as it would against any editor.
func Apply(ctx context.Context, fsys FS, text string) (summary string, changes []Change, err error) {
	plan, err := prepare(ctx, fsys, text)
	if err != nil {
		return "", nil, err
	}
	if err := plan.commit(ctx); err != nil {
		return "", nil, err
	}
	return plan.summary(), plan.changes, nil
}

// Preview parses text and checks it against fsys exactly as Apply does, but
// writes nothing: it returns the changes Apply would make, so an approval
// prompt can show their diffs before the files change.
func Preview(ctx context.Context, fsys FS, text string) ([]Change, error) {
	plan, err := prepare(ctx, fsys, text)
	if err != nil {
		return nil, err
	}
	return plan.changes, nil
}

// fileState is a file's content, or its absence.
type fileState struct {
	data   []byte
	exists bool
}

// plan is a checked patch: the files as they were, as they will be, and the
// changes between. Nothing is written until commit.
type plan struct {
	fsys    FS
	orig    map[string]fileState // as read from fsys, before the patch
	cur     map[string]fileState // after the operations checked so far
	order   []string             // paths in the order the patch first touches them
	changes []Change
}

func prepare(ctx context.Context, fsys FS, text string) (*plan, error) {
	p, err := Parse(text)
	if err != nil {
		return nil, err
	}
	// Every path is checked before any is read, so a patch naming
	// /etc/passwd does not even reach the FS.
	type cleaned struct{ path, moveTo string }
	paths := make([]cleaned, len(p.Ops))
	for i, op := range p.Ops {
		c, err := CleanPath(op.Path)
		if err != nil {
			return nil, &Error{Line: op.Line, Path: op.Path, Msg: err.Error()}
		}
		paths[i].path = c
		if op.MoveTo != "" {
			m, err := CleanPath(op.MoveTo)
			if err != nil {
				return nil, &Error{Line: op.Line, Path: op.MoveTo, Msg: "*** Move to: " + err.Error()}
			}
			paths[i].moveTo = m
		}
	}
	pl := &plan{fsys: fsys, orig: map[string]fileState{}, cur: map[string]fileState{}}
	for i, op := range p.Ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := pl.check(ctx, op, paths[i].path, paths[i].moveTo); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// get returns path's state as the operations checked so far leave it,
// reading it from the FS the first time.
func (pl *plan) get(ctx context.Context, path string) (fileState, error) {
	if st, ok := pl.cur[path]; ok {
		return st, nil
	}
	data, err := pl.fsys.ReadFile(ctx, path)
	var st fileState
	switch {
	case err == nil:
		st = fileState{data: data, exists: true}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return fileState{}, fmt.Errorf("reading %q: %w", path, err)
	}
	pl.orig[path] = st
	pl.cur[path] = st
	pl.order = append(pl.order, path)
	return st, nil
}

func (pl *plan) set(path string, st fileState) { pl.cur[path] = st }

// check matches one operation against the current state and records its
// effect and its Change.
func (pl *plan) check(ctx context.Context, op Op, path, moveTo string) error {
	st, err := pl.get(ctx, path)
	if err != nil {
		return err
	}
	bad := func(err error, format string, args ...any) error {
		return &Error{Line: op.Line, Path: op.Path, Msg: fmt.Sprintf(format, args...), Err: err}
	}
	switch op.Kind {
	case OpAdd:
		if st.exists {
			return bad(fs.ErrExist, "*** Add File: %s: the file already exists; use *** Update File: to change it, or *** Delete File: it first", path)
		}
		// Every line ends with a newline, the last too, as in Codex: the
		// SDK leaves the last one off, which makes every file a model
		// creates lack the newline POSIX text files end with.
		var b strings.Builder
		for _, l := range op.Lines {
			b.WriteString(l)
			b.WriteByte('\n')
		}
		data := []byte(b.String())
		pl.set(path, fileState{data: data, exists: true})
		pl.changes = append(pl.changes, Change{
			Action: ActionCreated,
			Path:   path,
			Diff:   unifiedDiff("/dev/null", "b/"+path, nil, true, op.Lines, true, addScript(op.Lines)),
		})
		return nil

	case OpDelete:
		if !st.exists {
			return bad(fs.ErrNotExist, "*** Delete File: %s: no such file", path)
		}
		old := splitText(st.data)
		pl.set(path, fileState{})
		pl.changes = append(pl.changes, Change{
			Action: ActionDeleted,
			Path:   path,
			Diff:   unifiedDiff("a/"+path, "/dev/null", old.lines, old.finalNL, nil, true, deleteScript(old.lines)),
		})
		return nil

	case OpUpdate:
		if !st.exists {
			return bad(fs.ErrNotExist, "*** Update File: %s: no such file; use *** Add File: to create it", path)
		}
		if len(st.data) > MaxFileSize {
			return bad(nil, "*** Update File: %s: the file is %d bytes, over the %d-byte limit apply_patch edits", path, len(st.data), MaxFileSize)
		}
		if !utf8.Valid(st.data) {
			return bad(nil, "*** Update File: %s: the file is not UTF-8 text; apply_patch edits only text files", path)
		}
		old := splitText(st.data)
		newLines, script, err := applyHunks(ctx, old.lines, op.Hunks)
		if err != nil {
			var he *hunkError
			if errors.As(err, &he) {
				return &Error{Line: he.line, Path: op.Path, Msg: fmt.Sprintf("*** Update File: %s: %s", path, he.msg)}
			}
			return err
		}
		finalNL := old.finalNL || len(old.lines) == 0
		data := joinText(newLines, finalNL, old.crlf)

		dest := path
		if moveTo != "" && moveTo != path {
			dest = moveTo
			dst, err := pl.get(ctx, moveTo)
			if err != nil {
				return err
			}
			if dst.exists {
				return bad(fs.ErrExist, "*** Move to: %s: the file already exists; *** Delete File: it first to replace it", moveTo)
			}
			pl.set(path, fileState{})
		}
		pl.set(dest, fileState{data: data, exists: true})

		ch := Change{Action: ActionUpdated, Path: path}
		if dest != path {
			ch.Action, ch.NewPath = ActionMoved, dest
		}
		if dest != path || !bytes.Equal(data, st.data) {
			ch.Diff = unifiedDiff("a/"+path, "b/"+dest, old.lines, old.finalNL, newLines, finalNL, script)
		}
		pl.changes = append(pl.changes, ch)
		return nil
	}
	return bad(nil, "unknown operation %q", op.Kind)
}

// commit writes the planned states. Writes go first and removals last, so a
// move whose removal fails leaves two copies rather than none. On failure
// the steps already taken are undone, under a context that ctx's
// cancellation does not end, since a cancelled request must still not leave
// half a patch behind.
func (pl *plan) commit(ctx context.Context) error {
	type step struct {
		path  string
		write bool
	}
	var done []step
	undo := func(cause error) error {
		uctx := context.WithoutCancel(ctx)
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			s := done[i]
			o := pl.orig[s.path]
			var err error
			if o.exists {
				err = pl.fsys.WriteFile(uctx, s.path, o.data)
			} else {
				err = pl.fsys.Remove(uctx, s.path)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("restoring %q: %w", s.path, err))
			}
		}
		if len(errs) > 0 {
			return errors.Join(cause, fmt.Errorf("undoing the partial patch failed, files may be left half-patched: %w", errors.Join(errs...)))
		}
		return cause
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, p := range pl.order {
		o, c := pl.orig[p], pl.cur[p]
		if !c.exists || (o.exists && bytes.Equal(o.data, c.data)) {
			continue
		}
		if err := pl.fsys.WriteFile(ctx, p, c.data); err != nil {
			return undo(fmt.Errorf("writing %q: %w", p, err))
		}
		done = append(done, step{p, true})
	}
	for _, p := range pl.order {
		o, c := pl.orig[p], pl.cur[p]
		if c.exists || !o.exists {
			continue
		}
		if err := pl.fsys.Remove(ctx, p); err != nil {
			return undo(fmt.Errorf("removing %q: %w", p, err))
		}
		done = append(done, step{p, false})
	}
	return nil
}

// summary is the tool output the model sees, worded as the Agents SDK's
// WorkspaceEditor words it.
func (pl *plan) summary() string {
	var b strings.Builder
	for i, c := range pl.changes {
		if i > 0 {
			b.WriteByte('\n')
		}
		switch c.Action {
		case ActionCreated:
			fmt.Fprintf(&b, "Created %s", c.Path)
		case ActionDeleted:
			fmt.Fprintf(&b, "Deleted %s", c.Path)
		case ActionUpdated:
			fmt.Fprintf(&b, "Updated %s", c.Path)
		case ActionMoved:
			fmt.Fprintf(&b, "Updated %s\nMoved %s to %s", c.Path, c.Path, c.NewPath)
		}
	}
	return b.String()
}

// fileLines is a file split into lines for matching.
type fileLines struct {
	lines   []string // without line endings
	finalNL bool     // the last line ended with a newline
	crlf    bool     // the file uses "\r\n"; lines are written back with it
}

// splitText splits data into lines. A file containing "\r\n" anywhere is
// taken as a CRLF file, matched without the "\r"s and written back with
// "\r\n" throughout, as the Agents SDK does, so a patch written with "\n"
// applies to it and keeps its line endings.
func splitText(data []byte) fileLines {
	s := string(data)
	t := fileLines{crlf: strings.Contains(s, "\r\n")}
	if s == "" {
		return t
	}
	t.finalNL = strings.HasSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\n")
	t.lines = strings.Split(s, "\n")
	if t.crlf {
		for i, l := range t.lines {
			t.lines[i] = strings.TrimSuffix(l, "\r")
		}
	}
	return t
}

// joinText is the inverse of splitText. A file with no lines left is empty.
func joinText(lines []string, finalNL, crlf bool) []byte {
	if len(lines) == 0 {
		return []byte{}
	}
	nl := "\n"
	if crlf {
		nl = "\r\n"
	}
	s := strings.Join(lines, nl)
	if finalNL {
		s += nl
	}
	return []byte(s)
}
