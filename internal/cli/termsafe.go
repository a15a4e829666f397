package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// What a sandbox produces (command output, file names, diffs) and what a
// model says is not the operator's to trust, yet cove run shows it on the
// operator's terminal. Raw, an escape sequence in it could clear the
// screen, move the cursor over what cove printed, hide text, set the
// window title or redraw an approval prompt, so the user answers a
// question other than the one asked. Control characters are shown
// visibly instead, as cat -v shows them: ESC as ^[ (so "ESC[2J" reads
// "^[[2J"), a carriage return not before a newline as ^M, C1 controls
// and bytes that are not UTF-8 as \u009b and \x9b, and the bidirectional
// overrides that reorder text as \u202e. Newlines and tabs stay. No
// colour is let through: an SGR sequence can hide text too (ESC[8m).

// termReset puts a terminal back in a state where a prompt reads as
// printed, whatever wrote to it before (a process that shares the
// terminal, such as an MCP server's stderr): attributes off, the ASCII
// character set, the cursor shown, the normal screen. It does not move
// the cursor.
const termReset = "\x1b[0m\x1b(B\x1b[?25h\x1b[?1047l"

// safeWriter writes to w what is written to it, with control characters
// made visible. A write may end inside a UTF-8 sequence or right after a
// carriage return (whose meaning depends on the next byte): that much is
// held until the next write or Flush.
type safeWriter struct {
	// mu guards pending and w's writes.
	mu      sync.Mutex
	w       io.Writer
	pending []byte
}

func newSafeWriter(w io.Writer) *safeWriter { return &safeWriter{w: w} }

func (s *safeWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	buf := append(s.pending, p...)
	out, rest := render(buf, false)
	s.pending = append(s.pending[:0:0], rest...)
	if _, err := io.WriteString(s.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what a write left pending, as it stands.
func (s *safeWriter) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, _ := render(s.pending, true)
	s.pending = s.pending[:0]
	_, err := io.WriteString(s.w, out)
	return err
}

// termSafe is s with its control characters made visible.
func termSafe(s string) string {
	out, _ := render([]byte(s), true)
	return out
}

// oneLine is termSafe that also shows newlines as \n, for text that
// must stay on one line (an approval prompt: a command with many
// newlines could push its start off the screen).
func oneLine(s string) string {
	return termSafe(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", `\n`))
}

// render makes b safe for a terminal. Unless final, an incomplete UTF-8
// sequence or a carriage return at the end is returned as rest, to be
// rendered with what follows.
func render(b []byte, final bool) (out string, rest []byte) {
	var sb strings.Builder
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c == '\n' || c == '\t':
			sb.WriteByte(c)
			i++
			continue
		case c == '\r':
			switch {
			case i+1 < len(b) && b[i+1] == '\n':
				// CRLF ends a line like LF (a PTY's output has it).
			case i+1 == len(b) && !final:
				return sb.String(), b[i:]
			default:
				sb.WriteString("^M")
			}
			i++
			continue
		case c < 0x20:
			sb.WriteByte('^')
			sb.WriteByte(c + 0x40)
			i++
			continue
		case c == 0x7f:
			sb.WriteString("^?")
			i++
			continue
		case c < utf8.RuneSelf:
			sb.WriteByte(c)
			i++
			continue
		}
		if !final && !utf8.FullRune(b[i:]) {
			return sb.String(), b[i:]
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&sb, `\x%02x`, c)
		case r >= 0x80 && r <= 0x9f, reorders(r):
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.Write(b[i : i+n])
		}
		i += n
	}
	return sb.String(), nil
}

// reorders reports whether r changes the order text is shown in (the
// bidirectional embeddings, overrides, isolates and marks), which can
// make a command read as another.
func reorders(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c
}
