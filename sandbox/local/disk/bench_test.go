package disk

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkCreate measures making a 2 GiB disk (its blocks reserved),
// formatted each time and copied from a cached image.
func BenchmarkCreate(b *testing.B) {
	needDisks(b)
	const limit = 2 << 30
	for _, bc := range []struct {
		name string
		opts func(b *testing.B) []Option
	}{
		{"mkfs", func(*testing.B) []Option { return nil }},
		{"cached", func(b *testing.B) []Option { return []Option{WithImageCache(b.TempDir())} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := bc.opts(b)
			dir := b.TempDir()
			ctx := context.Background()
			if d, err := Create(ctx, filepath.Join(dir, "warm"), limit, opts...); err == nil {
				d.Remove()
			}
			b.ResetTimer()
			for i := range b.N {
				d, err := Create(ctx, filepath.Join(dir, strconv.Itoa(i)), limit, opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := d.Remove(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkMount measures mounting an existing 2 GiB disk (a resume) and
// unmounting it (a stop), separately.
func BenchmarkMount(b *testing.B) {
	needDisks(b)
	d := create(b, 2<<30)
	if err := d.Unmount(); err != nil {
		b.Fatal(err)
	}
	b.Run("mount", func(b *testing.B) {
		for range b.N {
			if err := d.Mount(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := d.Unmount(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("unmount", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			if err := d.Mount(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := d.Unmount(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRemove measures freeing a mounted 2 GiB disk.
func BenchmarkRemove(b *testing.B) {
	needDisks(b)
	dir := b.TempDir()
	opts := []Option{WithImageCache(b.TempDir())}
	for i := range b.N {
		b.StopTimer()
		d, err := Create(context.Background(), filepath.Join(dir, strconv.Itoa(i)), 2<<30, opts...)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Mount(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := d.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}
