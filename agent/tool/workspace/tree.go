package workspace

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// treeLimits bound the rendered tree.
type treeLimits struct {
	depth      int // levels below the root
	entries    int // entries in the whole tree
	dirEntries int // entries in one directory
}

type treeNode struct {
	name     string
	typ      sandbox.FileType
	target   string // symlink target
	children map[string]*treeNode

	// Set by selectShown.
	shown  []*treeNode // children to render, by name
	hidden int         // children left out for the bounds
}

// renderTree draws the workspace as `tree` does, from one List call. Its
// size is bounded by lim however large the workspace is: the entries
// shown are chosen breadth first, so every top-level entry is seen before
// anything deep, and what is left out is counted per directory.
func renderTree(ctx context.Context, sess sandbox.Session, root string, lim treeLimits) (string, error) {
	infos, err := sess.List(ctx, root, lim.depth)
	if err != nil {
		return "", fmt.Errorf("listing the workspace %s: %w", root, err)
	}
	top := &treeNode{typ: sandbox.TypeDir}
	for _, fi := range infos {
		rel, ok := relTo(root, fi.Path)
		if !ok {
			continue
		}
		parts := strings.Split(rel, "/")
		if len(parts) > lim.depth || insideGit(parts) {
			continue
		}
		insert(top, parts, fi)
	}
	selectShown(top, lim)
	var b strings.Builder
	b.WriteString(root)
	b.WriteString("\n")
	if len(top.children) == 0 {
		b.WriteString("(empty)\n")
	}
	draw(&b, top, "")
	return b.String(), nil
}

// relTo returns p relative to root, false when p is root itself or
// outside it (a listing should never hold those; they are dropped).
func relTo(root, p string) (string, bool) {
	if root == "/" {
		rel := strings.TrimPrefix(p, "/")
		return rel, rel != ""
	}
	rel, ok := strings.CutPrefix(p, root+"/")
	return rel, ok && rel != ""
}

// insideGit reports whether a path lies inside a .git directory: the
// directory is shown, its contents are noise to the model.
func insideGit(parts []string) bool {
	for _, p := range parts[:len(parts)-1] {
		if p == ".git" {
			return true
		}
	}
	return false
}

// insert adds an entry, creating missing parents as directories so a
// listing that leaves them out still draws a tree.
func insert(n *treeNode, parts []string, fi sandbox.FileInfo) {
	for i, name := range parts {
		if n.children == nil {
			n.children = map[string]*treeNode{}
		}
		c := n.children[name]
		if c == nil {
			c = &treeNode{name: name, typ: sandbox.TypeDir}
			n.children[name] = c
		}
		if i == len(parts)-1 {
			c.typ, c.target = fi.Type, fi.SymlinkTarget
		}
		n = c
	}
}

// selectShown picks the entries to draw, level by level, until the
// budget is spent.
func selectShown(top *treeNode, lim treeLimits) {
	budget := lim.entries
	level := []*treeNode{top}
	for len(level) > 0 {
		var next []*treeNode
		for _, n := range level {
			names := make([]string, 0, len(n.children))
			for name := range n.children {
				names = append(names, name)
			}
			sort.Strings(names)
			k := min(len(names), lim.dirEntries, budget)
			for _, name := range names[:k] {
				c := n.children[name]
				n.shown = append(n.shown, c)
				next = append(next, c)
			}
			n.hidden = len(names) - k
			budget -= k
		}
		level = next
	}
}

// draw writes n's shown children with tree connectors, then a count of
// the hidden ones.
func draw(b *strings.Builder, n *treeNode, prefix string) {
	for i, c := range n.shown {
		last := i == len(n.shown)-1 && n.hidden == 0
		conn, ext := "├── ", "│   "
		if last {
			conn, ext = "└── ", "    "
		}
		b.WriteString(prefix + conn + label(c) + "\n")
		draw(b, c, prefix+ext)
	}
	if n.hidden > 0 {
		fmt.Fprintf(b, "%s└── ... (%d more)\n", prefix, n.hidden)
	}
}

func label(n *treeNode) string {
	switch n.typ {
	case sandbox.TypeDir:
		return n.name + "/"
	case sandbox.TypeSymlink:
		return n.name + " -> " + n.target
	}
	return n.name
}
