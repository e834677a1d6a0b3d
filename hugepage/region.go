package hugepage

import (
	"fmt"
	"sync"
)

// Region is one mapping of DMA-able memory made by Alloc. Its methods are
// safe for concurrent use, but Close must not race with users of Bytes:
// after Close the memory is gone.
type Region struct {
	// Fixed by Alloc.
	pageSize PageSize
	source   Source
	degraded string
	fd       int
	n        int

	mu  sync.RWMutex
	mem []byte // nil once closed
}

// Bytes returns the whole mapping. The slice must not be used after Close
// (Bytes returns nil then).
func (r *Region) Bytes() []byte {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mem
}

// Len is the size of the mapping in bytes: the size asked of Alloc rounded
// up to the page size. It stays valid after Close.
func (r *Region) Len() int { return r.n }

// PageSize is the size of the pages actually backing the region: Size4K
// when degraded.
func (r *Region) PageSize() PageSize { return r.pageSize }

// Source is where the memory actually came from. A degraded HugetlbFS
// allocation is Anonymous; a degraded Memfd one stays Memfd.
func (r *Region) Source() Source { return r.source }

// Degraded is "" when the region is backed by the pages asked for. When
// Alloc had to fall back to locked 4 KiB pages, or to pageable ones
// (Options.AllowPageable), it says why and what to do about it, for the
// user to read.
func (r *Region) Degraded() string { return r.degraded }

// FD is the memfd or hugetlbfs file descriptor behind the region, to pass to
// another process (over a Unix socket) that maps the same memory; -1 for
// anonymous memory. The descriptor is closed by Close and is close-on-exec.
func (r *Region) FD() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mem == nil {
		return -1
	}
	return r.fd
}

// Phys returns the physical address of byte off of the region, from
// /proc/self/pagemap. It fails with an error wrapping ErrNoPhys when the
// process may not see physical addresses (it needs CAP_SYS_ADMIN), and with
// ErrClosed after Close.
//
// A physical address is what a device needs only without an IOMMU (VFIO
// no-IOMMU mode); with an IOMMU, map the memory through package vfio.
func (r *Region) Phys(off int) (uint64, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mem == nil {
		return 0, fmt.Errorf("hugepage: phys: region %w", ErrClosed)
	}
	if off < 0 || off >= len(r.mem) {
		return 0, fmt.Errorf("hugepage: phys: offset %d outside region of %d bytes", off, len(r.mem))
	}
	segs, err := translate(addrOf(r.mem)+uintptr(off), 1)
	if err != nil {
		return 0, err
	}
	return segs[0].Phys, nil
}

// PhysSegments returns the physically contiguous runs that cover the region,
// in order (see Translate). A hugepage region has at most one run per page,
// fewer where the kernel happened to hand out adjacent pages.
func (r *Region) PhysSegments() ([]PhysRange, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.mem == nil {
		return nil, fmt.Errorf("hugepage: phys segments: region %w", ErrClosed)
	}
	return translate(addrOf(r.mem), len(r.mem))
}

// Close unmaps the memory and closes the file descriptor. Closing a closed
// region does nothing and returns nil.
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := mapping{mem: r.mem, fd: r.fd}.release()
	r.mem = nil
	unregister(r)
	if err != nil {
		return fmt.Errorf("hugepage: close region: %w", err)
	}
	return nil
}

// String describes the region for logs: size, page size, source and whether
// it is degraded.
func (r *Region) String() string {
	r.mu.RLock()
	closed := r.mem == nil
	r.mu.RUnlock()
	s := describe(r.n, r.pageSize, r.source, r.degraded != "")
	if closed {
		s += " (closed)"
	}
	return s
}

// describe formats a region's vital statistics.
func describe(n int, ps PageSize, src Source, degraded bool) string {
	s := fmt.Sprintf("%d bytes of %v %v pages", n, src, ps)
	if degraded {
		s += " (degraded)"
	}
	return s
}
