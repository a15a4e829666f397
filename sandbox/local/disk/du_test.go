package disk

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDuBytesSwappedLink: the tenant flips a directory of its uncapped
// disk to a symlink to a big host directory and back while the disk is
// measured; the measure never walks through the link.
func TestDuBytesSwappedLink(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "big"), make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	a := filepath.Join(mnt, "a")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Mkdir(a, 0o755)
			os.Mkdir(filepath.Join(a, "b"), 0o755)
			os.Remove(filepath.Join(a, "b"))
			os.Remove(a)
			os.Symlink(host, a)
			os.Remove(a)
		}
	}()
	defer func() {
		close(stop)
		<-done
	}()
	deadline := time.Now().Add(2 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		used, err := duBytes(mnt)
		if err != nil {
			t.Fatalf("duBytes: %v", err)
		}
		if used >= 8<<20 {
			t.Fatalf("walk %d counted %d bytes: it went through the link to the host directory", n, used)
		}
	}
}
