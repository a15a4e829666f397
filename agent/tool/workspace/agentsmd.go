package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/sandbox"
)

// AgentsFileName is the file people leave instructions for agents in.
const AgentsFileName = "AGENTS.md"

// agentsFile is one AGENTS.md as it goes into the prompt.
type agentsFile struct {
	path string // absolute inside the sandbox
	text string
	// omitted is how the text was cut short: "" when whole.
	omitted string
}

// loadAgentsFiles reads the AGENTS.md of root and of every directory down
// to workdir, root first, as Codex does: each applies to its tree, and the
// model reads them outermost to innermost so the deeper ones, which win,
// come last. Each is capped at perFile bytes and all of them at total;
// when the budget runs out, the remaining files are still named so the
// model knows to read them.
//
// A missing file is skipped silently; one that cannot be read (a
// directory, a symlink out of the workspace, no permission) is skipped and
// logged. Other errors mean the session is unusable and are returned,
// rather than letting the run go on without instructions it must follow.
func loadAgentsFiles(ctx context.Context, sess sandbox.Session, root, workdir string, perFile, total int, log *slog.Logger) ([]agentsFile, error) {
	dirs := []string{root}
	if rel, ok := relTo(root, workdir); ok {
		dir := root
		for _, name := range strings.Split(rel, "/") {
			dir = path.Join(dir, name)
			dirs = append(dirs, dir)
		}
	}
	var out []agentsFile
	left := total
	for _, dir := range dirs {
		p := path.Join(dir, AgentsFileName)
		f, err := readAgentsFile(ctx, sess, p, min(perFile, left))
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			continue
		case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrPermission):
			log.Warn("AGENTS.md left out of the prompt", "path", p, "err", err)
			continue
		case err != nil:
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		if f.omitted != "" && left < perFile {
			f.omitted += fmt.Sprintf(" (the %d-byte budget for all AGENTS.md files is used up)", total)
		}
		left -= len(f.text)
		out = append(out, f)
	}
	return out, nil
}

// readAgentsFile reads at most limit bytes of p, cut back to a whole
// UTF-8 character.
func readAgentsFile(ctx context.Context, sess sandbox.Session, p string, limit int) (agentsFile, error) {
	rc, err := sess.ReadFile(ctx, p)
	if err != nil {
		return agentsFile{}, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return agentsFile{}, err
	}
	f := agentsFile{path: p}
	if len(data) > limit {
		data = data[:limit]
		// Drop the bytes of a character the limit cut through.
		for i := 0; i < utf8.UTFMax-1 && len(data) > 0; i++ {
			if r, size := utf8.DecodeLastRune(data); r != utf8.RuneError || size > 1 {
				break
			}
			data = data[:len(data)-1]
		}
		if len(data) == 0 {
			f.omitted = fmt.Sprintf("%s is not included", p)
		} else {
			f.omitted = fmt.Sprintf("%s is truncated after %d bytes; read the file for the rest", p, len(data))
		}
	}
	f.text = string(data)
	return f, nil
}

func agentsSection(files []agentsFile) string {
	if len(files) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("# AGENTS.md contents\n\nThe AGENTS.md files that apply to your working directory, outermost first:")
	for _, f := range files {
		fmt.Fprintf(&b, "\n\n## %s\n\n", f.path)
		b.WriteString(strings.TrimSpace(f.text))
		if f.omitted != "" {
			if strings.TrimSpace(f.text) != "" {
				b.WriteString("\n\n")
			}
			fmt.Fprintf(&b, "[%s]", f.omitted)
		}
	}
	return b.String()
}
