package applypatch

import (
	"context"
	"fmt"
	"strings"
	"unicode"
)

// Matching a hunk against a file is done at four levels of strictness, each
// tried over the whole search range before the next, as Codex's
// seek_sequence does: models copy context faithfully but often lose
// trailing spaces, re-indent, or type ASCII for typographic punctuation.
// The first level that finds the lines wins, so a loose level is used only
// when no stricter match exists anywhere in range.
const (
	fuzzExact       = iota // byte for byte
	fuzzTrimEnd            // ignoring trailing white space
	fuzzTrim               // ignoring leading and trailing white space
	fuzzPunctuation        // also taking typographic dashes, quotes and spaces for ASCII
	fuzzLevels
)

// normalize returns s as compared at level.
func normalize(s string, level int) string {
	switch level {
	case fuzzTrimEnd:
		return strings.TrimRightFunc(s, unicode.IsSpace)
	case fuzzTrim:
		return strings.TrimSpace(s)
	case fuzzPunctuation:
		return strings.Map(asciiPunctuation, strings.TrimSpace(s))
	}
	return s
}

// asciiPunctuation maps the typographic characters Codex folds to their
// ASCII look-alikes.
func asciiPunctuation(r rune) rune {
	switch r {
	case '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212':
		return '-'
	case '\u2018', '\u2019', '\u201A', '\u201B':
		return '\''
	case '\u201C', '\u201D', '\u201E', '\u201F':
		return '"'
	case '\u00A0', '\u2002', '\u2003', '\u2004', '\u2005', '\u2006', '\u2007',
		'\u2008', '\u2009', '\u200A', '\u202F', '\u205F', '\u3000':
		return ' '
	}
	return r
}

// matcher finds sequences of lines in a file, caching the file's lines as
// normalized at each level so that a patch with many hunks normalizes the
// file once per level, not once per hunk.
type matcher struct {
	ctx   context.Context
	lines []string
	norm  [fuzzLevels][]string
}

func (m *matcher) at(level int) []string {
	if level == fuzzExact {
		return m.lines
	}
	if m.norm[level] == nil {
		n := make([]string, len(m.lines))
		for i, l := range m.lines {
			n[i] = normalize(l, level)
		}
		m.norm[level] = n
	}
	return m.norm[level]
}

// seek returns the first index i >= start at which pat matches the file,
// trying each level in turn, or -1. With eof, pat must end at the file's
// last line. An empty pat matches at start. It gives up, returning -1, once
// ctx is done, which the caller checks.
func (m *matcher) seek(pat []string, start int, eof bool) int {
	n := len(m.lines)
	if len(pat) == 0 {
		return start
	}
	if len(pat) > n-start {
		return -1
	}
	from, to := start, n-len(pat)
	if eof {
		from = to
	}
	for level := range fuzzLevels {
		lines := m.at(level)
		p := make([]string, len(pat))
		for i, l := range pat {
			p[i] = normalize(l, level)
		}
		for i := from; i <= to; i++ {
			// Bound the time a huge file can take after the request is
			// gone: matching is O(file × hunk) at worst.
			if i&0xfff == 0 && m.ctx.Err() != nil {
				return -1
			}
			if equalAt(lines, p, i) {
				return i
			}
		}
	}
	return -1
}

func equalAt(lines, pat []string, i int) bool {
	for j, p := range pat {
		if lines[i+j] != p {
			return false
		}
	}
	return true
}

// hunkError is a hunk that does not apply; check turns it into an *Error.
type hunkError struct {
	line int
	msg  string
}

func (e *hunkError) Error() string { return e.msg }

// edit is one line of the edit script from the old file to the new, from
// which the unified diff is written.
type edit struct {
	kind byte // '=' kept, '-' removed, '+' added
	text string
}

// applyHunks applies hunks to lines in order, each searched for after the
// end of the previous one, and returns the new lines and the edit script.
//
// A context line keeps the file's own text, not the patch's, so matching
// loosely (ignoring white space) never rewrites lines the model only meant
// to point at.
func applyHunks(ctx context.Context, lines []string, hunks []Hunk) ([]string, []edit, error) {
	m := &matcher{ctx: ctx, lines: lines}
	type placed struct {
		at    int
		lines []HunkLine
	}
	var places []placed
	cursor := 0
	for _, h := range hunks {
		for i, a := range h.Anchors {
			idx := m.seek([]string{a}, cursor, false)
			if idx >= 0 {
				cursor = idx + 1
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			// A hunk that repeats the previous hunk's anchor (two edits in
			// one function) finds it behind the cursor; the SDK accepts
			// that and searches on from the cursor, and so do we. A
			// stacked anchor after the first must lie ahead.
			if i == 0 && m.seek([]string{a}, 0, false) >= 0 {
				continue
			}
			return nil, nil, &hunkError{line: h.Line, msg: fmt.Sprintf("could not find the line %q of the \"@@ %s\" header%s; an @@ header must be a line of the file, copied exactly", clip(a), clip(a), after(cursor))}
		}

		hl := h.Lines
		at := m.place(hl, h, cursor)
		// Models end a hunk with blank lines (a separator before the next
		// operation, or the file's final newline taken for an empty line);
		// if the hunk does not match with them, retry without, as Codex
		// does.
		for at < 0 && len(hl) > 0 && hl[len(hl)-1] == (HunkLine{Kind: ' '}) {
			hl = hl[:len(hl)-1]
			at = m.place(hl, h, cursor)
		}
		if at < 0 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			return nil, nil, &hunkError{line: h.Line, msg: notFound(m, h, cursor)}
		}
		old := oldLines(hl)
		places = append(places, placed{at, hl})
		cursor = at + len(old)
	}

	out := make([]string, 0, len(lines))
	var script []edit
	keep := func(l string) {
		out = append(out, l)
		script = append(script, edit{'=', l})
	}
	prev := 0
	for _, pl := range places {
		for _, l := range lines[prev:pl.at] {
			keep(l)
		}
		j := pl.at
		for _, l := range pl.lines {
			switch l.Kind {
			case ' ':
				keep(lines[j])
				j++
			case '-':
				script = append(script, edit{'-', lines[j]})
				j++
			case '+':
				out = append(out, l.Text)
				script = append(script, edit{'+', l.Text})
			}
		}
		prev = j
	}
	for _, l := range lines[prev:] {
		keep(l)
	}
	return out, script, nil
}

// place returns where the hunk lines hl (of hunk h) go, searching from
// cursor, or -1.
func (m *matcher) place(hl []HunkLine, h Hunk, cursor int) int {
	old := oldLines(hl)
	switch {
	case len(old) > 0:
		return m.seek(old, cursor, h.EOF)
	case h.EOF || len(h.Anchors) == 0:
		// Pure additions with nothing to point at go to the end, as in
		// Codex: appending is what such a hunk is for.
		return len(m.lines)
	default:
		// Under an anchor they go right after it, as in the SDK.
		return cursor
	}
}

// oldLines are the lines a hunk expects in the file: context and removed.
func oldLines(hl []HunkLine) []string {
	var old []string
	for _, l := range hl {
		if l.Kind != '+' {
			old = append(old, l.Text)
		}
	}
	return old
}

func after(cursor int) string {
	if cursor == 0 {
		return ""
	}
	return fmt.Sprintf(" after line %d", cursor)
}

// notFound explains a hunk that did not match, with what the model needs to
// fix it: the lines it expected, and where they are if they are in the file
// but not where the patch put them.
func notFound(m *matcher, h Hunk, cursor int) string {
	old := oldLines(h.Lines)
	var b strings.Builder
	if h.EOF {
		fmt.Fprintf(&b, "the hunk's context and removed lines are not the last lines of the file, as %q says", endOfFile)
	} else {
		fmt.Fprintf(&b, "could not find the hunk's context and removed lines%s, even ignoring white space", after(cursor))
	}
	if at := m.seek(old, 0, false); at >= 0 {
		if at < cursor {
			fmt.Fprintf(&b, "; they are at line %d, before the previous hunk or @@ header: hunks must be in file order", at+1)
		} else {
			fmt.Fprintf(&b, "; they are at line %d", at+1)
		}
	} else {
		b.WriteString("; re-read the file and copy the lines exactly")
	}
	b.WriteString(". Expected:\n")
	const maxShown = 40
	for i, l := range old {
		if i == maxShown {
			fmt.Fprintf(&b, "... (%d more lines)\n", len(old)-maxShown)
			break
		}
		b.WriteString(clip(l))
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}
