package sandboxtool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
)

// Bounds of the change detection, so a large workspace does not make every
// command slow.
const (
	// DefaultMaxTrackedFiles is the largest workspace compared (files,
	// noise directories left out) when Options.MaxTrackedFiles is 0. A
	// workspace that grows past it is no longer compared for the rest of
	// the run: its listing would cost every command more than the changes
	// are worth.
	DefaultMaxTrackedFiles = 10_000
	// maxTrackDepth is how deep the workspace is listed.
	maxTrackDepth = 16
	// maxReported bounds the file_changed events of one call; the rest
	// are summed up in one last event.
	maxReported = 200
)

// noiseDirs are directories whose contents are caches, dependencies or
// version control, not what the agent makes: they are not listed (at the
// workspace's top level) nor reported (anywhere).
var noiseDirs = map[string]bool{
	".git": true, ".hg": true, ".svn": true,
	"node_modules": true, "__pycache__": true, ".venv": true, "venv": true,
	".tox": true, ".mypy_cache": true, ".pytest_cache": true, ".ruff_cache": true,
	".cache": true, ".npm": true, ".cargo": true, ".gradle": true,
}

// entry is what the comparison looks at for one path.
type entry struct {
	typ    sandbox.FileType
	size   int64
	mtime  time.Time
	target string // a symlink's
}

// changes finds the files that commands create, change or delete, by
// comparing listings of the workspace after each call with the last one.
// Changes a background process makes between two calls show at the next
// call that lists. Paths a tool reported itself (Options.Edits) are
// re-read before the comparison so they are not reported twice.
type changes struct {
	sess  sandbox.Session
	root  string
	edits *agent.Edits
	max   int // files
	log   func(msg string, args ...any)

	mu sync.Mutex // guards the fields below; held across a listing so listings apply in order
	// known is the last listing by path relative to root; nil before
	// the first.
	known map[string]entry
	// off is set once the workspace was too large, or could not be
	// listed: no more comparisons this run.
	off bool
	// untold says why the detection was turned off until a call's
	// events have said it.
	untold string
	// plainTop is set when the last listing found no noise directory at
	// the top: the next one is a single request.
	plainTop bool
}

// begin takes the first listing (the baseline) before a call, or brings
// the paths tools edited themselves up to date.
func (c *changes) begin(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.off {
		return
	}
	if c.root == "" {
		info, err := c.sess.Info(ctx)
		if err != nil {
			return // the command will say what is wrong
		}
		c.root = cmp.Or(info.Spec.Root, sandbox.DefaultRoot)
	}
	if c.known == nil {
		c.known = c.list(ctx)
		c.edits.Take() // already in the baseline
		return
	}
	for _, p := range c.edits.Take() {
		if noisy(p) {
			continue // not in the listings either
		}
		fi, err := c.sess.Stat(ctx, path.Join(c.root, p))
		switch {
		case err == nil:
			c.known[p] = entryOf(fi)
		case errors.Is(err, sandbox.ErrNotFound):
			delete(c.known, p)
		}
	}
}

// end lists the workspace after a call and emits one file_changed event
// per file created, updated or deleted since the last listing.
func (c *changes) end(ctx context.Context, emit func(agent.Event)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known != nil && !c.off {
		c.compare(ctx, emit)
	}
	if c.untold != "" && emit != nil {
		emit(agent.Event{Type: agent.EventFileChanged, Time: time.Now(), Action: "updated", Text: c.untold})
		c.untold = ""
	}
}

// compare lists the workspace, emits what changed and keeps the listing.
// c.mu is held.
func (c *changes) compare(ctx context.Context, emit func(agent.Event)) {
	now := c.list(ctx)
	if now == nil {
		return
	}
	evs := diffListings(c.known, now)
	c.known = now
	if emit == nil {
		return
	}
	for i, ev := range evs {
		if i == maxReported {
			emit(agent.Event{Type: agent.EventFileChanged, Time: time.Now(), Action: "updated",
				Text: fmt.Sprintf("and %d more files changed", len(evs)-maxReported)})
			break
		}
		emit(ev)
	}
}

// list returns the workspace's files by path relative to root, noise left
// out, or nil (and the detection turned off) when it cannot or should not.
func (c *changes) list(ctx context.Context) map[string]entry {
	fis, err := c.listTree(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log("listing the workspace to find changed files failed; not looking again this run", "err", err)
			c.off = true
		}
		return nil
	}
	out := make(map[string]entry, len(fis))
	for _, fi := range fis {
		rel, ok := strings.CutPrefix(fi.Path, strings.TrimSuffix(c.root, "/")+"/")
		if !ok || fi.Type == sandbox.TypeDir || noisy(rel) {
			continue
		}
		out[rel] = entryOf(fi)
	}
	if len(out) > c.max {
		c.log("the workspace is too large to find changed files; not looking again this run", "files", len(out), "max", c.max)
		c.off = true
		c.untold = fmt.Sprintf("the workspace has over %d files: the files commands change are not listed for the rest of this run", c.max)
		return nil
	}
	return out
}

// listTree lists the workspace in one request, or, when noise directories
// sit at its top (where node_modules, .git and .venv usually are), one
// request per other directory so the noise is never walked. Whether they
// do is learnt from the last listing: a noise directory that appears at
// the top between two listings is walked once.
func (c *changes) listTree(ctx context.Context) ([]sandbox.FileInfo, error) {
	if c.plainTop {
		fis, err := c.sess.List(ctx, c.root, maxTrackDepth)
		if err != nil {
			return nil, err
		}
		c.plainTop = !slices.ContainsFunc(fis, c.noiseAtTop)
		return fis, nil
	}
	top, err := c.sess.List(ctx, c.root, 1)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(top, c.noiseAtTop) {
		c.plainTop = true
		return c.sess.List(ctx, c.root, maxTrackDepth)
	}
	out := top
	for _, fi := range top {
		if fi.Type != sandbox.TypeDir || noiseDirs[fi.Name] {
			continue
		}
		sub, err := c.sess.List(ctx, fi.Path, maxTrackDepth-1)
		if errors.Is(err, sandbox.ErrNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
		if len(out) > 2*c.max {
			break // too large anyway; list says so
		}
	}
	return out, nil
}

// noiseAtTop reports whether fi is a noise directory right under the root.
func (c *changes) noiseAtTop(fi sandbox.FileInfo) bool {
	return fi.Type == sandbox.TypeDir && noiseDirs[fi.Name] && path.Dir(fi.Path) == path.Clean(c.root)
}

// noisy reports whether a relative path lies in a noise directory.
func noisy(rel string) bool {
	for _, name := range strings.Split(path.Dir(rel), "/") {
		if noiseDirs[name] {
			return true
		}
	}
	return false
}

// same reports whether two listings of a path show the same file.
func (e entry) same(o entry) bool {
	return e.typ == o.typ && e.size == o.size && e.mtime.Equal(o.mtime) && e.target == o.target
}

func entryOf(fi sandbox.FileInfo) entry {
	return entry{typ: fi.Type, size: fi.Size, mtime: fi.ModTime, target: fi.SymlinkTarget}
}

// diffListings returns the file_changed events that lead from before to
// after, sorted by path.
func diffListings(before, after map[string]entry) []agent.Event {
	var evs []agent.Event
	now := time.Now()
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok:
			evs = append(evs, agent.Event{Type: agent.EventFileChanged, Time: now, Path: p, Action: "created", Size: a.size})
		case !b.same(a):
			evs = append(evs, agent.Event{Type: agent.EventFileChanged, Time: now, Path: p, Action: "updated", Size: a.size})
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			evs = append(evs, agent.Event{Type: agent.EventFileChanged, Time: now, Path: p, Action: "deleted"})
		}
	}
	slices.SortFunc(evs, func(a, b agent.Event) int { return strings.Compare(a.Path, b.Path) })
	return evs
}
