package disk

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestZZTiming(t *testing.T) {
	cache := t.TempDir()
	dir := t.TempDir()
	ctx := context.Background()
	d, _ := Create(ctx, filepath.Join(dir, "w"), 2<<30, WithImageCache(cache))
	d.Remove()
	var tc, tm, tw time.Duration
	for i := 0; i < 50; i++ {
		p := filepath.Join(dir, "x")
		os.MkdirAll(filepath.Join(p, "mnt"), 0o700)
		s := time.Now()
		copyFromCache(ctx, cache, filepath.Join(p, imageName), 2<<30)
		tc += time.Since(s)
		s = time.Now()
		waitDetached(filepath.Join(p, imageName), 0)
		tw += time.Since(s)
		d := &Disk{dir: p, limit: 2 << 30}
		s = time.Now()
		if err := d.Mount(); err != nil {
			t.Fatal(err)
		}
		tm += time.Since(s)
		d.Remove()
	}
	t.Logf("copy %v, waitDetached %v, mount %v", tc/50, tw/50, tm/50)
}
