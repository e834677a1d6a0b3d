package vfio

import (
	"fmt"
	"math/bits"
	"sort"

	"github.com/gomx-dev/gomx/pci"
)

// iovaRange is the half-open IOVA interval [start, end).
type iovaRange struct {
	start, end uint64
}

func (r iovaRange) len() uint64 { return r.end - r.start }

// iovaAllocator hands out ranges of an I/O virtual address space. It is a
// sorted, coalesced free list searched first fit: the number of live DMA
// mappings of one container is small (a few pools, a few rings), so a linear
// scan on the control path is cheaper to reason about than a tree.
//
// It is a pure data structure, not safe for concurrent use; the Container
// serialises calls under its lock.
type iovaAllocator struct {
	free []iovaRange // sorted by start, disjoint, no two adjacent
}

// newIOVAAllocator returns an allocator for [base, limit).
func newIOVAAllocator(base, limit uint64) *iovaAllocator {
	a := &iovaAllocator{}
	if limit > base {
		a.free = []iovaRange{{base, limit}}
	}
	return a
}

// restrict removes from the free space everything outside valid (the ranges
// the IOMMU can translate, as the kernel reports them). It is meant to be
// called once, before the first allocation.
func (a *iovaAllocator) restrict(valid []iovaRange) {
	var out []iovaRange
	for _, f := range a.free {
		for _, v := range valid {
			s, e := max(f.start, v.start), min(f.end, v.end)
			if s < e {
				out = append(out, iovaRange{s, e})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	a.free = a.free[:0]
	for _, r := range out {
		_ = a.insert(r) // the kernel reports disjoint ranges; an overlapping one is dropped
	}
}

// alloc returns the lowest address of a free, align-aligned range of size
// bytes and removes that range from the free space. align must be a power of
// two. It fails with an error wrapping pci.ErrNoSpace when no free range
// fits.
func (a *iovaAllocator) alloc(size, align uint64) (uint64, error) {
	if size == 0 {
		return 0, fmt.Errorf("vfio: IOVA allocation of 0 bytes: %w", pci.ErrBadRange)
	}
	if align == 0 || bits.OnesCount64(align) != 1 {
		return 0, fmt.Errorf("vfio: IOVA alignment %#x is not a power of two: %w", align, pci.ErrBadRange)
	}
	for i, r := range a.free {
		start := (r.start + align - 1) &^ (align - 1)
		if start < r.start { // overflow while aligning
			continue
		}
		if start >= r.end || r.end-start < size {
			continue
		}
		end := start + size
		// Carve [start, end) out of r, leaving up to two pieces.
		var pieces []iovaRange
		if r.start < start {
			pieces = append(pieces, iovaRange{r.start, start})
		}
		if end < r.end {
			pieces = append(pieces, iovaRange{end, r.end})
		}
		a.free = append(a.free[:i], append(pieces, a.free[i+1:]...)...)
		return start, nil
	}
	return 0, fmt.Errorf("vfio: no free IOVA range of %#x bytes aligned to %#x (%#x bytes free in %d pieces): %w",
		size, align, a.available(), len(a.free), pci.ErrNoSpace)
}

// release returns [start, start+size) to the free space, merging it with its
// neighbours. Releasing a range that is partly free already (a double free)
// fails with an error wrapping pci.ErrNotMapped and changes nothing.
func (a *iovaAllocator) release(start, size uint64) error {
	end := start + size
	if size == 0 || end < start {
		return fmt.Errorf("vfio: release of IOVA range [%#x, +%#x): %w", start, size, pci.ErrBadRange)
	}
	return a.insert(iovaRange{start, end})
}

func (a *iovaAllocator) insert(r iovaRange) error {
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].start >= r.start })
	if i > 0 && a.free[i-1].end > r.start || i < len(a.free) && a.free[i].start < r.end {
		return fmt.Errorf("vfio: IOVA range [%#x, %#x) is already free: %w", r.start, r.end, pci.ErrNotMapped)
	}
	mergePrev := i > 0 && a.free[i-1].end == r.start
	mergeNext := i < len(a.free) && a.free[i].start == r.end
	switch {
	case mergePrev && mergeNext:
		a.free[i-1].end = a.free[i].end
		a.free = append(a.free[:i], a.free[i+1:]...)
	case mergePrev:
		a.free[i-1].end = r.end
	case mergeNext:
		a.free[i].start = r.start
	default:
		a.free = append(a.free, iovaRange{})
		copy(a.free[i+1:], a.free[i:])
		a.free[i] = r
	}
	return nil
}

// available is the number of free bytes.
func (a *iovaAllocator) available() uint64 {
	var n uint64
	for _, r := range a.free {
		n += r.len()
	}
	return n
}

// hugeAlign is the IOVA alignment used for mappings of at least this size:
// an IOVA co-aligned with a 2 MiB hugepage lets the IOMMU map it with one
// large page table entry instead of 512 small ones.
const hugeAlign = 2 << 20

// span is the page-granular range that a type1 DMA mapping of n bytes at
// process address addr must cover: VFIO maps whole pages, so the mapping
// starts at the page holding the first byte and ends at the end of the page
// holding the last one. off is where the buffer starts within the first
// page. page must be a power of two.
func span(addr uintptr, n int, page uint64) (start uint64, size uint64, off uint64) {
	a := uint64(addr)
	start = a &^ (page - 1)
	end := (a + uint64(n) + page - 1) &^ (page - 1)
	return start, end - start, a - start
}

// iovaAlign is the alignment to ask of the allocator for a mapping of size
// bytes at page granularity page.
func iovaAlign(size, page uint64) uint64 {
	if size >= hugeAlign && page < hugeAlign {
		return hugeAlign
	}
	return page
}
