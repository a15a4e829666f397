package sandboxtool

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// bytesPerToken is the SDK's token estimate (APPROX_BYTES_PER_TOKEN): the
// model is told counts in tokens, and 4 bytes a token is what its prompts
// were tuned against.
const bytesPerToken = 4

// outBuf holds what a process wrote since its output was last read. It is
// bounded: once full it keeps the first half of its capacity and the last
// half and only counts the bytes in between, which is all that head+tail
// truncation shows anyway. A flood (`yes`) therefore costs a fixed amount
// of memory however long it runs.
type outBuf struct {
	half      int    // bytes kept at each end
	head      []byte // the first bytes, up to half
	tail      []byte // after head filled: a ring of the last bytes, up to half
	tailStart int    // the oldest byte in tail once the ring is full
	dropped   int64  // bytes overwritten in the ring
	lines     lineCounter
}

func newOutBuf(capacity int) outBuf {
	return outBuf{half: max(capacity/2, 1)}
}

func (b *outBuf) write(p []byte) {
	b.lines.count(p)
	if n := min(b.half-len(b.head), len(p)); n > 0 {
		b.head = append(b.head, p[:n]...)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	if len(p) >= b.half {
		b.dropped += int64(len(b.tail) + len(p) - b.half)
		b.tail = append(b.tail[:0], p[len(p)-b.half:]...)
		b.tailStart = 0
		return
	}
	if room := b.half - len(b.tail); room > 0 {
		n := min(room, len(p))
		b.tail = append(b.tail, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 { // the ring is full: overwrite the oldest bytes
		n := copy(b.tail[b.tailStart:], p)
		b.dropped += int64(n)
		p = p[n:]
		b.tailStart = (b.tailStart + n) % b.half
	}
}

// take returns the buffered output and empties the buffer. Unless final,
// an incomplete UTF-8 sequence at the end is kept back for the next take,
// so a character split across two reads is not shown as two replacement
// characters.
func (b *outBuf) take(final bool) text {
	head := b.head
	tail := append(b.tail[b.tailStart:len(b.tail):len(b.tail)], b.tail[:b.tailStart]...)
	var hold []byte
	if !final {
		last := &tail
		if len(tail) == 0 {
			last = &head
		}
		if k := incompleteSuffix(*last); k > 0 {
			hold = append(hold, (*last)[len(*last)-k:]...)
			*last = (*last)[:len(*last)-k]
		}
	}
	t := text{gap: b.dropped, lines: b.lines.total()}
	t.head = validUTF8(head)
	if b.dropped > 0 {
		// The ring may begin in the middle of a character.
		skip := 0
		for skip < len(tail) && skip < utf8.UTFMax-1 && !utf8.RuneStart(tail[skip]) {
			skip++
		}
		t.gap += int64(skip)
		tail = tail[skip:]
	}
	t.tail = validUTF8(tail)
	*b = newOutBuf(2 * b.half)
	if len(hold) > 0 {
		b.write(hold)
	}
	return t
}

// incompleteSuffix returns the length of an unfinished UTF-8 sequence at
// the end of p, 0 if p ends on a character boundary.
func incompleteSuffix(p []byte) int {
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				return len(p) - i
			}
			return 0
		}
	}
	return 0
}

// validUTF8 decodes output as the SDK does (errors="replace"): each byte
// that is not part of a valid sequence becomes U+FFFD.
func validUTF8(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	var sb strings.Builder
	sb.Grow(len(p) + 16)
	for len(p) > 0 {
		r, n := utf8.DecodeRune(p)
		if r == utf8.RuneError && n == 1 {
			sb.WriteString("\uFFFD")
		} else {
			sb.Write(p[:n])
		}
		p = p[n:]
	}
	return sb.String()
}

// lineCounter counts lines as Python's str.splitlines does for the ASCII
// line boundaries, across writes, so the "Total output lines" the SDK
// prints stays right for output whose middle was dropped.
type lineCounter struct {
	breaks  int
	afterCR bool // the last byte was '\r' ("\r\n" is one boundary)
	partial bool // bytes after the last boundary
}

func (c *lineCounter) count(p []byte) {
	for _, ch := range p {
		switch ch {
		case '\n':
			if !c.afterCR {
				c.breaks++
			}
			c.afterCR, c.partial = false, false
		case '\r':
			c.breaks++
			c.afterCR, c.partial = true, false
		case '\v', '\f', 0x1c, 0x1d, 0x1e:
			c.breaks++
			c.afterCR, c.partial = false, false
		default:
			c.afterCR, c.partial = false, true
		}
	}
}

func (c *lineCounter) total() int {
	if c.partial {
		return c.breaks + 1
	}
	return c.breaks
}

// text is output to show the model: all of it (gap 0, everything in head
// and tail), or its head and tail with gap bytes between them dropped.
type text struct {
	head, tail string
	gap        int64
	lines      int
}

func (t text) size() int64 { return int64(len(t.head)) + t.gap + int64(len(t.tail)) }

// truncate cuts t to maxTokens the way the SDK's
// formatted_truncate_text_with_token_count does: when it is too long, a
// "Total output lines" line, the head and the tail around a
// "…N tokens truncated…" marker, the whole within maxTokens*4 bytes. It
// returns the estimated token count of the whole output when it cut, 0
// when it did not.
func truncate(t text, maxTokens int) (string, int) {
	if t.gap == 0 {
		t.head, t.tail = t.head+t.tail, ""
	}
	size := t.size()
	maxBytes := int64(maxTokens) * bytesPerToken
	if size <= maxBytes {
		return t.head + t.tail, 0
	}
	original := tokensFor(size)
	prefix := fmt.Sprintf("Total output lines: %d\n\n", t.lines)
	marker := truncationMarker(original)
	if int64(len(prefix)+len(marker)) > maxBytes {
		prefix = ""
	}
	budget := maxBytes - int64(len(prefix)+len(marker))
	if budget < 0 {
		return cutUTF8(marker, int(maxBytes)), original
	}
	// The buffer keeps half its capacity at each end and maxTokens is
	// capped to its capacity, so each side's budget fits in what was kept.
	leftBudget := budget / 2
	rightBudget := budget - leftBudget
	left := cutUTF8(t.head, int(min(leftBudget, int64(len(t.head)))))
	src := t.tail
	if t.gap == 0 {
		src = t.head
	}
	right := suffixUTF8(src, int(min(rightBudget, int64(len(src)))))
	removed := size - int64(len(left)+len(right))
	return prefix + left + truncationMarker(tokensFor(removed)) + right, original
}

func truncationMarker(tokens int) string {
	return fmt.Sprintf("…%d tokens truncated…", tokens)
}

// tokensFor is the SDK's approx_token_count: bytes/4 rounded up.
func tokensFor(bytes int64) int {
	return int((bytes + bytesPerToken - 1) / bytesPerToken)
}

// cutUTF8 returns the longest prefix of s of at most n bytes that ends on
// a character boundary.
func cutUTF8(s string, n int) string {
	if n >= len(s) {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// suffixUTF8 returns the longest suffix of s of at most n bytes that
// starts on a character boundary.
func suffixUTF8(s string, n int) string {
	start := len(s) - n
	for start < len(s) && !utf8.RuneStart(s[start]) {
		start++
	}
	return s[start:]
}

// response is one exec_command or write_stdin answer before formatting.
type response struct {
	output   string
	wall     time.Duration
	exitCode *int // set when the process ended
	session  int  // set (non-zero) while it runs
	original int  // the whole output's token count when it was truncated
}

// String formats r exactly as the SDK's _format_response does, so prompts
// written for it parse ours.
func (r response) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Chunk ID: %s\nWall time: %.4f seconds\n", chunkID(), r.wall.Seconds())
	if r.exitCode != nil {
		fmt.Fprintf(&sb, "Process exited with code %d\n", *r.exitCode)
	}
	if r.session != 0 {
		fmt.Fprintf(&sb, "Process running with session ID %d\n", r.session)
	}
	if r.original != 0 {
		fmt.Fprintf(&sb, "Original token count: %d\n", r.original)
	}
	sb.WriteString("Output:\n")
	sb.WriteString(r.output)
	return sb.String()
}

// chunkID is six random hex digits, as the SDK's uuid4().hex[:6].
func chunkID() string {
	var b [3]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// prependNotice puts a line for the model before the output, as the SDK's
// _prepend_notice.
func prependNotice(output, notice string) string {
	if output == "" {
		return notice
	}
	return notice + "\n" + output
}
