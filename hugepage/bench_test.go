package hugepage

import (
	"errors"
	"testing"
)

// BenchmarkPool is one Get and one Put: the fast path of every driver that
// takes DMA buffers from a pool. It must not allocate.
func BenchmarkPool(b *testing.B) {
	p, err := NewPool(2048, 1024, Options{PageSize: Size4K})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf, err := p.Get()
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Put(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				buf, err := p.Get()
				if errors.Is(err, ErrExhausted) {
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				if err := p.Put(buf); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkAlloc maps, prefaults and unmaps 2 MiB: one hugepage, and the
// same as 512 locked base pages for comparison.
func BenchmarkAlloc(b *testing.B) {
	for _, bc := range []struct {
		name string
		o    Options
	}{
		{"2MiB-hugepage", Options{PageSize: Size2M, NoFallback: true}},
		{"2MiB-locked4KiB", Options{PageSize: Size4K}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.o.PageSize == Size2M {
				needHugepages(b, Size2M, 1)
			}
			b.ReportAllocs()
			b.SetBytes(2 << 20)
			for b.Loop() {
				r, err := Alloc(2<<20, bc.o)
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
