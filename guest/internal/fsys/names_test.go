package fsys

import (
	"math/rand/v2"
	"testing"
	"unicode/utf8"
)

func TestNameEncoding(t *testing.T) {
	for _, tt := range []struct{ raw, enc string }{
		{"plain", "plain"},
		{"caf\u00e9", "caf\u00e9"},
		{"caf\xe9", "caf\u201bE9"},
		{"\xff\xfe", "\u201bFF\u201bFE"},
		{"a\u201bb", "a\u201b\u201bb"},
		{"\u201bFF", "\u201b\u201bFF"},
		{"/dir\xc3/f\xc3\xa9", "/dir\u201bC3/f\u00e9"},
	} {
		if got := encodePath(tt.raw); got != tt.enc {
			t.Errorf("encodePath(%q) = %q, want %q", tt.raw, got, tt.enc)
		}
		if got := decodePath(tt.enc); got != tt.raw {
			t.Errorf("decodePath(%q) = %q, want %q", tt.enc, got, tt.raw)
		}
	}
	// Escapes of bytes below 0x80 are not escapes.
	for _, s := range []string{"\u201b2F", "\u201b00", "\u201b2E\u201b2E", "\u201bZZ", "\u201b", "a\u201b"} {
		if got := decodePath(s); got != s {
			t.Errorf("decodePath(%q) = %q, want it unchanged", s, got)
		}
	}
	// Any name round-trips and encodes to UTF-8.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, r.IntN(12))
		for i := range b {
			switch r.IntN(4) {
			case 0:
				b[i] = byte(0x80 + r.IntN(0x80))
			case 1:
				b[i] = "\u201b"[r.IntN(3)]
			default:
				b[i] = byte(0x20 + r.IntN(0x5f))
			}
		}
		raw := string(b)
		enc := encodePath(raw)
		if !utf8.ValidString(enc) {
			t.Fatalf("encodePath(%q) = %q, not UTF-8", raw, enc)
		}
		if got := decodePath(enc); got != raw {
			t.Fatalf("decodePath(encodePath(%q)) = %q", raw, got)
		}
	}
}
