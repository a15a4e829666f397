package applypatch

import (
	"fmt"
	"strings"
)

// The kinds of an Op.
const (
	OpAdd    = "add"
	OpDelete = "delete"
	OpUpdate = "update"
)

// The envelope's marker lines.
const (
	beginPatch = "*** Begin Patch"
	endPatch   = "*** End Patch"
	addFile    = "*** Add File:"
	deleteFile = "*** Delete File:"
	updateFile = "*** Update File:"
	moveTo     = "*** Move to:"
	endOfFile  = "*** End of File"
)

// Patch is a parsed V4A patch: its file operations in order.
type Patch struct {
	Ops []Op
}

// Op is one file operation of a patch.
type Op struct {
	Kind   string // OpAdd, OpDelete or OpUpdate
	Path   string // as written in the patch, surrounding spaces trimmed; not yet checked
	MoveTo string // for an update with "*** Move to:", the new path; else ""
	// Lines is an added file's content, one element per line, without the
	// "+" and without line endings. Each line is written with a "\n".
	Lines []string
	// Hunks are an update's edits, in file order.
	Hunks []Hunk
	// Line is the 1-based line of the op's header in the patch text.
	Line int
}

// Hunk is one "@@" section of an Update File.
type Hunk struct {
	// Anchors are the texts of the hunk's "@@ <line>" headers. Each is a
	// line of the file (usually a class or function header) that is
	// searched for, in order, before Lines are; a hunk under a bare "@@"
	// has none.
	Anchors []string
	// Lines are the hunk's context, removed and added lines.
	Lines []HunkLine
	// EOF is set by "*** End of File": the hunk's context and removed lines
	// must be the last lines of the file.
	EOF bool
	// Line is the 1-based line of the hunk's first line in the patch text.
	Line int
}

// HunkLine is one line of a hunk.
type HunkLine struct {
	Kind byte   // ' ' context, '-' removed, '+' added
	Text string // the line without its prefix
}

// Parse parses a V4A patch ("*** Begin Patch" ... "*** End Patch").
//
// It accepts exactly what the Grammar describes, and is lenient where the
// Agents SDK or Codex are and a model is known to slip: "\r\n" line endings,
// blank lines around the envelope and between operations, spaces around
// marker lines, a first hunk without "@@", a blank line in a hunk taken as
// an empty context line, and a unified-diff range ("@@ -3,7 +3,8 @@ f()")
// taken for the text after it. It does not unwrap a shell heredoc
// ("<<'EOF'"), which the Agents SDK refuses too: a tool call carries the
// patch itself.
//
// Errors are *Error values naming the line that is wrong and what was
// expected there. Paths are not checked here; Apply checks them, and
// CleanPath is the check.
func Parse(text string) (*Patch, error) {
	if len(text) > MaxPatchSize {
		return nil, &Error{Msg: fmt.Sprintf("the patch is %d bytes, over the %d-byte limit; split it into several smaller patches", len(text), MaxPatchSize)}
	}
	text = strings.TrimPrefix(text, "\ufeff")
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		// All trailing "\r"s, not one, so that a line keeps its meaning
		// when String writes it back with a plain "\n".
		lines[i] = strings.TrimRight(l, "\r")
	}
	first, last := 0, len(lines)-1
	for first <= last && isBlank(lines[first]) {
		first++
	}
	for last >= first && isBlank(lines[last]) {
		last--
	}
	if first > last {
		return nil, &Error{Msg: "the patch is empty; it must start with the line \"*** Begin Patch\""}
	}
	if got := strings.TrimSpace(lines[first]); got != beginPatch {
		msg := fmt.Sprintf("the patch must start with the line %q, got %q", beginPatch, clip(got))
		if strings.HasPrefix(got, "<<") || strings.HasPrefix(got, "apply_patch") {
			msg += "; send the patch text itself, not a shell command or heredoc"
		}
		return nil, &Error{Line: first + 1, Msg: msg}
	}
	if got := strings.TrimSpace(lines[last]); last == first || got != endPatch {
		return nil, &Error{Line: last + 1, Msg: fmt.Sprintf("the patch must end with the line %q, got %q", endPatch, clip(got))}
	}
	p := &parser{lines: lines, i: first + 1, end: last}
	patch, err := p.parse()
	if err != nil {
		return nil, err
	}
	return patch, nil
}

// parser walks lines[i:end], the lines between the envelope's markers.
type parser struct {
	lines []string
	i     int
	end   int
	prev  string // the kind of the operation parsed last, for hints
}

func (p *parser) errorf(line int, format string, args ...any) error {
	return &Error{Line: line + 1, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) parse() (*Patch, error) {
	patch := &Patch{}
	for {
		for p.i < p.end && isBlank(p.lines[p.i]) {
			p.i++
		}
		if p.i >= p.end {
			break
		}
		op, err := p.op()
		if err != nil {
			return nil, err
		}
		patch.Ops = append(patch.Ops, op)
		p.prev = op.Kind
	}
	if len(patch.Ops) == 0 {
		return nil, p.errorf(p.end, "the patch has no file operations; expected %q, %q or %q before %q",
			addFile+" <path>", deleteFile+" <path>", updateFile+" <path>", endPatch)
	}
	return patch, nil
}

// op parses one operation, starting at its header line.
func (p *parser) op() (Op, error) {
	at := p.i
	raw := p.lines[at]
	line := strings.TrimSpace(raw)
	kind, path, ok := header(line)
	if !ok {
		return Op{}, p.errorf(at, "%s", p.notHeader(at, raw))
	}
	if path == "" {
		return Op{}, p.errorf(at, "%q has no path after it", strings.TrimSpace(headerMarker(kind)))
	}
	p.i++
	op := Op{Kind: kind, Path: path, Line: at + 1}
	switch kind {
	case OpAdd:
		for p.i < p.end && strings.HasPrefix(p.lines[p.i], "+") {
			op.Lines = append(op.Lines, p.lines[p.i][1:])
			p.i++
		}
	case OpUpdate:
		if p.i < p.end {
			if rest, ok := strings.CutPrefix(p.lines[p.i], moveTo); ok {
				op.MoveTo = strings.TrimSpace(rest)
				if op.MoveTo == "" {
					return Op{}, p.errorf(p.i, "%q has no path after it", moveTo)
				}
				p.i++
			}
		}
		if err := p.hunks(&op); err != nil {
			return Op{}, err
		}
		if len(op.Hunks) == 0 && op.MoveTo == "" {
			return Op{}, p.errorf(at, "%s %s has no hunks; expected \"@@\" and then lines starting with ' ', '-' or '+'", updateFile, path)
		}
	}
	return op, nil
}

// hunks parses an update's hunks, up to the next operation or the end.
func (p *parser) hunks(op *Op) error {
	for p.i < p.end {
		// Blank lines before a hunk separate, as in Codex; within a hunk
		// they are empty context lines.
		if isBlank(p.lines[p.i]) {
			p.i++
			continue
		}
		at := p.i
		line := p.lines[at]
		h := Hunk{Line: at + 1}
		switch {
		case strings.HasPrefix(line, "@@"):
			// Stacked headers narrow the search step by step:
			// "@@ class A" then "@@ def f():".
			for p.i < p.end && strings.HasPrefix(p.lines[p.i], "@@") {
				anchor, ok := anchorText(p.lines[p.i])
				if !ok {
					return p.errorf(p.i, "expected \"@@\" or \"@@ <a line of the file>\", got %q", clip(p.lines[p.i]))
				}
				if anchor != "" {
					h.Anchors = append(h.Anchors, anchor)
				}
				p.i++
			}
		case len(op.Hunks) == 0 && isHunkLine(line):
			// The first hunk may leave out its "@@", as Codex and the
			// SDK allow.
		case strings.HasPrefix(line, "*"):
			// The next operation, or a marker out of place; op reports it.
			return nil
		default:
			if len(op.Hunks) > 0 && op.Hunks[len(op.Hunks)-1].EOF && isHunkLine(line) {
				return p.errorf(at, "%q ends a hunk; start the next hunk with \"@@\", got %q", endOfFile, clip(line))
			}
			return p.errorf(at, "unexpected line %q in %s; every hunk line starts with ' ' (unchanged), '-' (removed) or '+' (added)", clip(line), updateFile+" "+op.Path)
		}
		for p.i < p.end && isHunkLine(p.lines[p.i]) {
			h.Lines = append(h.Lines, hunkLine(p.lines[p.i]))
			p.i++
		}
		if p.i < p.end && strings.TrimSpace(p.lines[p.i]) == endOfFile {
			if len(h.Lines) == 0 {
				return p.errorf(p.i, "%q must follow a hunk's lines", endOfFile)
			}
			h.EOF = true
			p.i++
		}
		if len(h.Lines) == 0 {
			next := "the end of the patch"
			if p.i < p.end {
				next = fmt.Sprintf("%q", clip(p.lines[p.i]))
			}
			return p.errorf(at, "the hunk has no lines; expected lines starting with ' ', '-' or '+' after the \"@@\" header, got %s", next)
		}
		op.Hunks = append(op.Hunks, h)
	}
	return nil
}

// notHeader explains why the line at i, where an operation must start, is
// not one, with a hint for the usual slips.
func (p *parser) notHeader(i int, raw string) string {
	line := strings.TrimSpace(raw)
	want := fmt.Sprintf("expected %q, %q or %q", addFile+" <path>", deleteFile+" <path>", updateFile+" <path>")
	switch {
	case line == endPatch:
		return fmt.Sprintf("%q before the end of the patch; nothing may follow it", endPatch)
	case line == beginPatch:
		return fmt.Sprintf("a second %q; send one patch at a time", beginPatch)
	case line == endOfFile:
		return fmt.Sprintf("%q may only end a hunk of an Update File", endOfFile)
	case strings.HasPrefix(line, moveTo):
		return fmt.Sprintf("%q must come right after the %q line", moveTo, updateFile)
	case strings.HasPrefix(raw, "+") || strings.HasPrefix(raw, "-") || strings.HasPrefix(raw, " ") || strings.HasPrefix(raw, "@@"):
		hint := ""
		if p.prev == OpAdd && strings.HasPrefix(raw, "+") && isBlank(p.lines[i-1]) {
			hint = " (an empty line in an Add File must be written as a lone '+')"
		} else if strings.HasPrefix(raw, "-") || strings.HasPrefix(raw, " ") || strings.HasPrefix(raw, "@@") {
			hint = " (an Add File has only '+' lines and a Delete File has none; use Update File to edit)"
		}
		return fmt.Sprintf("%s, got %q%s", want, clip(raw), hint)
	case strings.HasPrefix(line, "***"):
		return fmt.Sprintf("%s, got %q; the markers are case-sensitive and need the colon", want, clip(line))
	}
	return fmt.Sprintf("%s, got %q", want, clip(raw))
}

// header recognises an operation's header line (already trimmed).
func header(line string) (kind, path string, ok bool) {
	for _, h := range []struct{ marker, kind string }{
		{addFile, OpAdd}, {deleteFile, OpDelete}, {updateFile, OpUpdate},
	} {
		if rest, found := strings.CutPrefix(line, h.marker); found {
			return h.kind, strings.TrimSpace(rest), true
		}
	}
	return "", "", false
}

func headerMarker(kind string) string {
	switch kind {
	case OpAdd:
		return addFile
	case OpDelete:
		return deleteFile
	}
	return updateFile
}

// isHunkLine reports whether line belongs to a hunk's body. A blank line
// does: models drop the space of an empty context line, and both the SDK
// and Codex take it back as one.
func isHunkLine(line string) bool {
	if isBlank(line) {
		return true
	}
	switch line[0] {
	case ' ', '-', '+':
		return true
	}
	return false
}

func hunkLine(line string) HunkLine {
	if isBlank(line) && (line == "" || line[0] != ' ') {
		return HunkLine{Kind: ' '}
	}
	return HunkLine{Kind: line[0], Text: line[1:]}
}

// anchorText returns the anchor of an "@@" header line: "" for a bare "@@"
// or one followed by spaces only, and for a unified-diff range the text after
// it (the function git prints there is the anchor the model meant).
func anchorText(line string) (string, bool) {
	if line == "@@" {
		return "", true
	}
	rest, ok := strings.CutPrefix(line, "@@ ")
	if !ok {
		return "", false
	}
	if isBlank(rest) {
		return "", true
	}
	cut := false
	for {
		after, ok := cutDiffRange(rest)
		if !ok {
			break
		}
		rest, cut = strings.TrimSpace(after), true
	}
	if cut && rest == "" {
		return "", true
	}
	return rest, true
}

// cutDiffRange cuts a unified-diff range "-a[,b] +c[,d] @@" off the start of
// s, returning what follows it.
func cutDiffRange(s string) (string, bool) {
	num := func(s string) (string, bool) {
		n := 0
		for n < len(s) && s[n] >= '0' && s[n] <= '9' {
			n++
		}
		if n == 0 {
			return s, false
		}
		s = s[n:]
		if r, ok := strings.CutPrefix(s, ","); ok {
			m := 0
			for m < len(r) && r[m] >= '0' && r[m] <= '9' {
				m++
			}
			if m == 0 {
				return s, false
			}
			s = r[m:]
		}
		return s, true
	}
	s, ok := strings.CutPrefix(s, "-")
	if !ok {
		return "", false
	}
	if s, ok = num(s); !ok {
		return "", false
	}
	if s, ok = strings.CutPrefix(s, " +"); !ok {
		return "", false
	}
	if s, ok = num(s); !ok {
		return "", false
	}
	if s, ok = strings.CutPrefix(s, " @@"); !ok {
		return "", false
	}
	return s, true
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// clip shortens a line quoted in an error, so a huge line does not flood
// the model's context.
func clip(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// String writes the patch back as V4A text that Parse reads as the same
// patch (Line fields aside).
func (p *Patch) String() string {
	var b strings.Builder
	b.WriteString(beginPatch + "\n")
	for _, op := range p.Ops {
		b.WriteString(headerMarker(op.Kind) + " " + op.Path + "\n")
		switch op.Kind {
		case OpAdd:
			for _, l := range op.Lines {
				b.WriteString("+" + l + "\n")
			}
		case OpUpdate:
			if op.MoveTo != "" {
				b.WriteString(moveTo + " " + op.MoveTo + "\n")
			}
			for _, h := range op.Hunks {
				if len(h.Anchors) == 0 {
					b.WriteString("@@\n")
				}
				for _, a := range h.Anchors {
					b.WriteString("@@ " + a + "\n")
				}
				for _, l := range h.Lines {
					b.WriteByte(l.Kind)
					b.WriteString(l.Text + "\n")
				}
				if h.EOF {
					b.WriteString(endOfFile + "\n")
				}
			}
		}
	}
	b.WriteString(endPatch + "\n")
	return b.String()
}
