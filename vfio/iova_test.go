package vfio

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gomx-dev/gomx/pci"
)

// op is one step of an allocator script: alloc (size, align) expecting an
// address or an error, or release (addr, size).
type op struct {
	release     bool
	addr        uint64 // release: start; alloc: expected result
	size, align uint64
	err         error // expected sentinel, nil for success
}

func TestIOVAAllocator(t *testing.T) {
	const K, M = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name        string
		base, limit uint64
		ops         []op
		free        []iovaRange // free list after the script
	}{
		{
			name: "first fit in order", base: 0x1000, limit: 0x10000,
			ops: []op{
				{addr: 0x1000, size: 0x1000, align: 0x1000},
				{addr: 0x2000, size: 0x2000, align: 0x1000},
				{addr: 0x4000, size: 0x1000, align: 0x1000},
			},
			free: []iovaRange{{0x5000, 0x10000}},
		},
		{
			name: "alignment leaves a hole that a later small alloc fills", base: 4 * K, limit: 8 * M,
			ops: []op{
				{addr: 2 * M, size: 2 * M, align: 2 * M},
				{addr: 4 * K, size: 4 * K, align: 4 * K},
			},
			free: []iovaRange{{8 * K, 2 * M}, {4 * M, 8 * M}},
		},
		{
			name: "release coalesces with both neighbours", base: 0, limit: 0x4000,
			ops: []op{
				{addr: 0, size: 0x1000, align: 0x1000},
				{addr: 0x1000, size: 0x1000, align: 0x1000},
				{addr: 0x2000, size: 0x1000, align: 0x1000},
				{release: true, addr: 0, size: 0x1000},
				{release: true, addr: 0x2000, size: 0x1000},
				{release: true, addr: 0x1000, size: 0x1000},
			},
			free: []iovaRange{{0, 0x4000}},
		},
		{
			name: "release coalesces with the previous range only", base: 0, limit: 0x4000,
			ops: []op{
				{addr: 0, size: 0x1000, align: 0x1000},
				{addr: 0x1000, size: 0x1000, align: 0x1000},
				{addr: 0x2000, size: 0x2000, align: 0x1000},
				{release: true, addr: 0, size: 0x1000},
				{release: true, addr: 0x1000, size: 0x1000},
			},
			free: []iovaRange{{0, 0x2000}},
		},
		{
			name: "freed space is reused first fit", base: 0x10000, limit: 0x20000,
			ops: []op{
				{addr: 0x10000, size: 0x4000, align: 0x1000},
				{addr: 0x14000, size: 0x4000, align: 0x1000},
				{release: true, addr: 0x10000, size: 0x4000},
				{addr: 0x10000, size: 0x1000, align: 0x1000},
				{addr: 0x11000, size: 0x3000, align: 0x1000},
			},
			free: []iovaRange{{0x18000, 0x20000}},
		},
		{
			name: "exhaustion", base: 0x1000, limit: 0x3000,
			ops: []op{
				{addr: 0x1000, size: 0x2000, align: 0x1000},
				{size: 0x1000, align: 0x1000, err: pci.ErrNoSpace},
			},
			free: nil,
		},
		{
			name: "fragmented space does not fit a large request", base: 0, limit: 0x3000,
			ops: []op{
				{addr: 0, size: 0x1000, align: 0x1000},
				{addr: 0x1000, size: 0x1000, align: 0x1000},
				{addr: 0x2000, size: 0x1000, align: 0x1000},
				{release: true, addr: 0, size: 0x1000},
				{release: true, addr: 0x2000, size: 0x1000},
				{size: 0x2000, align: 0x1000, err: pci.ErrNoSpace},
			},
			free: []iovaRange{{0, 0x1000}, {0x2000, 0x3000}},
		},
		{
			name: "alignment that does not fit is exhaustion", base: 0x1000, limit: 3 * M,
			ops: []op{
				{size: 2 * M, align: 2 * M, err: pci.ErrNoSpace},
				{addr: 0x1000, size: 2 * M, align: 0x1000},
			},
			free: []iovaRange{{0x1000 + 2*M, 3 * M}},
		},
		{
			name: "double free is refused", base: 0, limit: 0x2000,
			ops: []op{
				{addr: 0, size: 0x1000, align: 0x1000},
				{release: true, addr: 0, size: 0x1000},
				{release: true, addr: 0, size: 0x1000, err: pci.ErrNotMapped},
			},
			free: []iovaRange{{0, 0x2000}},
		},
		{
			name: "bad requests", base: 0, limit: 0x2000,
			ops: []op{
				{size: 0, align: 0x1000, err: pci.ErrBadRange},
				{size: 0x1000, align: 0x1800, err: pci.ErrBadRange},
				{size: 0x1000, align: 0, err: pci.ErrBadRange},
				{release: true, addr: 0x1000, size: 0, err: pci.ErrBadRange},
				{release: true, addr: ^uint64(0), size: 2, err: pci.ErrBadRange},
			},
			free: []iovaRange{{0, 0x2000}},
		},
		{
			name: "top of the address space", base: ^uint64(0) - 0x2fff, limit: ^uint64(0),
			ops: []op{
				{size: 0x1000, align: 1 << 63, err: pci.ErrNoSpace},
				{addr: ^uint64(0) - 0x2fff, size: 0x1000, align: 0x1000},
			},
			free: []iovaRange{{^uint64(0) - 0x1fff, ^uint64(0)}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newIOVAAllocator(tc.base, tc.limit)
			for i, o := range tc.ops {
				if o.release {
					err := a.release(o.addr, o.size)
					if !errors.Is(err, o.err) || (o.err == nil) != (err == nil) {
						t.Fatalf("step %d: release(%#x, %#x) = %v, want %v", i, o.addr, o.size, err, o.err)
					}
					continue
				}
				got, err := a.alloc(o.size, o.align)
				if o.err != nil {
					if !errors.Is(err, o.err) {
						t.Fatalf("step %d: alloc(%#x, %#x) = %#x, %v; want error %v", i, o.size, o.align, got, err, o.err)
					}
					continue
				}
				if err != nil || got != o.addr {
					t.Fatalf("step %d: alloc(%#x, %#x) = %#x, %v; want %#x", i, o.size, o.align, got, err, o.addr)
				}
			}
			if !reflect.DeepEqual(a.free, tc.free) && !(len(a.free) == 0 && len(tc.free) == 0) {
				t.Errorf("free list = %#v, want %#v", a.free, tc.free)
			}
		})
	}
}

func TestIOVARestrict(t *testing.T) {
	a := newIOVAAllocator(0x1000, 0x100000000)
	// The x86 MSI window splits the IOMMU's usable space in two.
	a.restrict([]iovaRange{{0, 0xfee00000}, {0xfef00000, 1 << 39}})
	want := []iovaRange{{0x1000, 0xfee00000}, {0xfef00000, 0x100000000}}
	if !reflect.DeepEqual(a.free, want) {
		t.Fatalf("free = %#v, want %#v", a.free, want)
	}
	a = newIOVAAllocator(1<<32, 1<<39)
	a.restrict([]iovaRange{{0, 1 << 31}})
	if a.available() != 0 {
		t.Errorf("window outside every valid range: %#x bytes available, want 0", a.available())
	}
	if _, err := a.alloc(0x1000, 0x1000); !errors.Is(err, pci.ErrNoSpace) {
		t.Errorf("alloc from empty allocator = %v, want ErrNoSpace", err)
	}
}

func TestSpan(t *testing.T) {
	const page = 4096
	for _, tc := range []struct {
		addr            uintptr
		n               int
		start, size, of uint64
	}{
		{0x10000, 4096, 0x10000, 4096, 0},
		{0x10000, 1, 0x10000, 4096, 0},
		{0x10010, 100, 0x10000, 4096, 0x10},
		{0x10ff0, 0x20, 0x10000, 2 * 4096, 0xff0},
		{0x200000, 2 << 20, 0x200000, 2 << 20, 0},
	} {
		s, z, o := span(tc.addr, tc.n, page)
		if s != tc.start || z != tc.size || o != tc.of {
			t.Errorf("span(%#x, %d) = %#x, %#x, %#x; want %#x, %#x, %#x", tc.addr, tc.n, s, z, o, tc.start, tc.size, tc.of)
		}
	}
	if got := iovaAlign(2<<20, page); got != 2<<20 {
		t.Errorf("iovaAlign(2MiB) = %#x, want 2MiB", got)
	}
	if got := iovaAlign(64<<10, page); got != page {
		t.Errorf("iovaAlign(64KiB) = %#x, want %#x", got, page)
	}
}
