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

func TestJSONFiles(t *testing.T) {
	type doc struct{ N int }
	path := t.TempDir() + "/s.json"
	var f JSONFiles[doc]
	if _, err := f.Cached(path); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v, want not exist", err)
	}
	for n := 1; n <= 20; n++ {
		// Same size every time and written faster than the clock ticks:
		// the inode still tells the versions apart.
		if err := WriteJSON(path, doc{N: n % 10}); err != nil {
			t.Fatal(err)
		}
		got, err := f.Cached(path)
		if err != nil || got.N != n%10 {
			t.Fatalf("after write %d: Cached = %+v, %v; want N=%d", n, got, err, n%10)
		}
	}
}
