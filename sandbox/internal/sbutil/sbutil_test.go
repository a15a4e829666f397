package sbutil

import (
	"os"
	"testing"
)

func TestValidID(t *testing.T) {
	for _, tt := range []struct {
		id   string
		want bool
	}{
		{NewID(), true}, {"sb-0a1b", true}, {"", false}, {"..", false}, {"a/b", false},
		{"Sb-1", false}, {".hidden", false}, {string(make([]byte, 65)), false},
	} {
		if got := ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestAlive(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if Alive(0) || Alive(-1) || Alive(1<<22+12345) {
		t.Error("a pid that cannot exist is alive")
	}
}

func TestLastLines(t *testing.T) {
	if got, want := LastLines("a\nb\nc\nd\n", 2), "c | d"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
