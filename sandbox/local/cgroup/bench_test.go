package cgroup

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// BenchmarkNew measures making a group with every limit set, and
// deleting an empty one.
func BenchmarkNew(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("managing cgroups needs root")
	}
	r, err := DefaultRoot()
	if err != nil {
		b.Skip(err)
	}
	l := Limits{MemoryBytes: 512 << 20, CPUs: 1, Pids: 256}
	ctx := context.Background()
	b.Run("new", func(b *testing.B) {
		for i := range b.N {
			g, err := r.New(fmt.Sprintf("bench-%d-%d", os.Getpid(), i), l)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := g.Delete(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("delete", func(b *testing.B) {
		for i := range b.N {
			b.StopTimer()
			g, err := r.New(fmt.Sprintf("bench-%d-%d", os.Getpid(), i), l)
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := g.Delete(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
