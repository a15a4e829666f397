package sandboxtool

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func lines(n int) string {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "line %03d\n", i)
	}
	return sb.String()
}

// TestTruncateAsSDK: the wanted strings are what the SDK's
// formatted_truncate_text_with_token_count (token_truncation.py) returns
// for the same input, so a model sees the same cut.
func TestTruncateAsSDK(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		maxTokens int
		want      string
		wantCount int
	}{
		{"short", "hello\n", 10, "hello\n", 0},
		{"lines", lines(100), 50, "Total output lines: 100\n\nline 000\nline 001\nline 002\nline 003\nline 004\nline 005\nline 006\nline 007\nli…188 tokens truncated…91\nline 092\nline 093\nline 094\nline 095\nline 096\nline 097\nline 098\nline 099\n", 225},
		{"unicode", strings.Repeat("héllo wörld ✓\n", 40), 30, "Total output lines: 40\n\nhéllo wörld ✓\nhéllo wörld ✓…163 tokens truncated…éllo wörld ✓\nhéllo wörld ✓\n", 180},
		{"tiny", strings.Repeat("x", 100), 2, "…25 to", 25},
		{"one line", strings.Repeat("x", 1000), 10, "xxxxxxx…247 tokens truncated…xxxxxxx", 250},
		{"crlf", strings.Repeat("a\r\nb\rc\n", 100), 20, "Total output lines: 300\n\na\r\nb\rc\na\r\nb\rc\n…168 tokens truncated…\na\r\nb\rc\na\r\nb\rc\n", 175},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newOutBuf(1 << 20)
			b.write([]byte(tc.in))
			got, count := truncate(b.take(true), tc.maxTokens)
			if got != tc.want || count != tc.wantCount {
				t.Errorf("truncate(%d tokens):\ngot  %q (count %d)\nwant %q (count %d)", tc.maxTokens, got, count, tc.want, tc.wantCount)
			}
		})
	}
}

// TestOutBufBounded: a buffer smaller than the output keeps its head and
// tail, and truncating what it kept gives what truncating the whole
// output gives, for any size of writes.
func TestOutBufBounded(t *testing.T) {
	in := strings.Repeat("ünïcode line with some text ✓\n", 5000) // ~165 kB
	whole := newOutBuf(1 << 20)
	whole.write([]byte(in))
	want, wantCount := truncate(whole.take(true), 1000)
	for _, size := range []int{1, 7, 4096, 10000, len(in)} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			b := newOutBuf(8 << 10) // holds 2048 tokens: more than the 1000 shown
			for i := 0; i < len(in); i += size {
				b.write([]byte(in[i:min(i+size, len(in))]))
			}
			if n := len(b.head) + len(b.tail); n > 8<<10 {
				t.Fatalf("buffer holds %d bytes, want at most %d", n, 8<<10)
			}
			got, count := truncate(b.take(true), 1000)
			if got != want || count != wantCount {
				t.Errorf("from the bounded buffer:\ngot  %q (count %d)\nwant %q (count %d)", got, count, want, wantCount)
			}
		})
	}
}

// TestOutBufSplitRune: a character split between two reads arrives whole
// in the second, not as replacement characters.
func TestOutBufSplitRune(t *testing.T) {
	b := newOutBuf(1 << 10)
	b.write([]byte("ab\xe2\x9c")) // the first two bytes of ✓
	first := b.take(false)
	b.write([]byte("\x93c"))
	second := b.take(false)
	if got := first.head + first.tail; got != "ab" {
		t.Errorf("first read: got %q, want %q", got, "ab")
	}
	if got := second.head + second.tail; got != "✓c" {
		t.Errorf("second read: got %q, want %q", got, "✓c")
	}
	b.write([]byte("x\xff\xe2"))
	if got := b.take(true); got.head != "x\uFFFD\uFFFD" {
		t.Errorf("final read of invalid bytes: got %q, want %q", got.head, "x\uFFFD\uFFFD")
	}
}

func TestResponseFormat(t *testing.T) {
	code := 0
	for _, tc := range []struct {
		r    response
		want string
	}{
		{response{output: "hi\n", wall: 1500 * time.Millisecond, exitCode: &code},
			"Chunk ID: X\nWall time: 1.5000 seconds\nProcess exited with code 0\nOutput:\nhi\n"},
		{response{output: "", wall: 250 * time.Millisecond, session: 4242, original: 99},
			"Chunk ID: X\nWall time: 0.2500 seconds\nProcess running with session ID 4242\nOriginal token count: 99\nOutput:\n"},
	} {
		got := tc.r.String()
		if !regexp.MustCompile(`^Chunk ID: [0-9a-f]{6}\n`).MatchString(got) {
			t.Errorf("chunk id line of %q is not six hex digits", got)
		}
		got = regexp.MustCompile(`^Chunk ID: \w+`).ReplaceAllString(got, "Chunk ID: X")
		if got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
