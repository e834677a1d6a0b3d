package emulated

import (
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/pci"
)

// IOMMU is the emulated platform's DMA domain: it hands out IOVAs for
// buffers (pci.DMA) and translates the model's DMA accesses. An access to an
// IOVA that is not mapped is a fault, recorded and reported to the model, as
// a real IOMMU reports a DMAR fault and the device sees a failed read or
// write.
//
// IOVAs are never reused: each Map takes fresh addresses above the previous
// ones, with an unmapped guard page between mappings, so a driver that keeps
// using an IOVA after Unmap, or runs past the end of a buffer, faults instead
// of silently touching someone else's memory.
type IOMMU struct {
	mu      queueLock // one shard, or the queues' for an 82599 platform's (NewIXGBE)
	entries []entry   // sorted by iova, non-overlapping
	next    uint64
	scatter bool
	live    int

	// sva makes the domain the process's own address space, as a
	// device with PASID and shared virtual memory sees it: a mapping's
	// IOVA is its virtual address. absent holds the pages (by address)
	// a test marked not present: an access to them faults until Touch.
	sva    bool
	absent map[uint64]struct{}

	faults    atomic.Uint64
	lastFault atomic.Uint64
	mapCost   atomic.Int64 // ns per 4 KiB page: see SetMapCost
}

type entry struct {
	iova uint64
	buf  []byte
	m    *pci.Mapping
}

// Fault describes a DMA access the IOMMU refused.
type Fault struct {
	IOVA  uint64
	Write bool
}

const pageSize = 4096

func newIOMMU(base uint64, scatter bool) *IOMMU {
	if base == 0 {
		base = 1 << 32
	}
	return &IOMMU{next: base, scatter: scatter, mu: newQueueLock(1)}
}

// Map implements pci.DMA. In scatter mode every 4 KiB page of buf gets its
// own IOVA segment (what a driver sees in no-IOMMU mode without hugepages),
// which exercises the driver's splitting at IOVA discontinuities.
func (u *IOMMU) Map(buf []byte) (*pci.Mapping, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("emulated iommu: map of an empty buffer: %w", pci.ErrBadRange)
	}
	if c := u.mapCost.Load(); c > 0 {
		pages := (addrOff(buf)%pageSize + len(buf) + pageSize - 1) / pageSize
		spinFor(time.Duration(c * int64(pages)))
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	m := &pci.Mapping{Buf: buf}
	if u.sva {
		// The device reaches the buffer where the process has it.
		iova := uint64(addrOff(buf))
		m.Segments = []pci.Segment{{IOVA: iova, Len: len(buf)}}
		u.insert(entry{iova: iova, buf: buf, m: m})
		m.Handle = u
		u.live++
		return m, nil
	}
	align := uint64(pageSize)
	if len(buf) >= 2<<20 {
		align = 2 << 20
	}
	if !u.scatter {
		iova := alignUp(u.next, align) + uint64(addrOff(buf)%pageSize)
		m.Segments = []pci.Segment{{IOVA: iova, Len: len(buf)}}
		u.insert(entry{iova: iova, buf: buf, m: m})
		u.next = alignUp(iova+uint64(len(buf)), pageSize) + pageSize
	} else {
		off := 0
		for off < len(buf) {
			in := (addrOff(buf) + off) % pageSize
			n := pageSize - in
			if n > len(buf)-off {
				n = len(buf) - off
			}
			// Leave a guard page between pages, so segments are never
			// adjacent and cannot be merged by mistake.
			iova := alignUp(u.next, pageSize) + uint64(in)
			m.Segments = append(m.Segments, pci.Segment{IOVA: iova, Len: n})
			u.insert(entry{iova: iova, buf: buf[off : off+n : off+n], m: m})
			u.next = alignUp(iova+uint64(n), pageSize) + pageSize
			off += n
		}
	}
	m.Handle = u
	u.live++
	return m, nil
}

func (u *IOMMU) insert(e entry) {
	i := sort.Search(len(u.entries), func(i int) bool { return u.entries[i].iova > e.iova })
	u.entries = append(u.entries, entry{})
	copy(u.entries[i+1:], u.entries[i:])
	u.entries[i] = e
}

// Unmap implements pci.DMA. It waits for DMA accesses in progress, so when
// it returns no emulated device can touch the memory.
func (u *IOMMU) Unmap(m *pci.Mapping) error {
	if m == nil || m.Handle != u {
		return fmt.Errorf("emulated iommu: unmap of a mapping made elsewhere: %w", pci.ErrNotMapped)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	kept := u.entries[:0]
	for _, e := range u.entries {
		if e.m == m {
			n++
			continue
		}
		kept = append(kept, e)
	}
	for i := len(kept); i < len(u.entries); i++ {
		u.entries[i] = entry{}
	}
	u.entries = kept
	if n == 0 {
		return fmt.Errorf("emulated iommu: mapping at IOVA %#x already unmapped: %w", m.Segments[0].IOVA, pci.ErrNotMapped)
	}
	u.live--
	return nil
}

// SetMapCost makes every Map take perPage of CPU time for each 4 KiB page
// it maps (0, the default: free), a model of what pinning pages and
// programming a real IOMMU cost (VFIO_IOMMU_MAP_DMA pins each page). It
// lets benchmarks show what overlapped pinning and a registration cache
// save; the time is spent busy, as the kernel spends it.
func (u *IOMMU) SetMapCost(perPage time.Duration) { u.mapCost.Store(int64(perPage)) }

// spinFor keeps the CPU busy for d.
func spinFor(d time.Duration) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// Live reports how many mappings are in place (a test's leak check).
func (u *IOMMU) Live() int {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return u.live
}

// Faults reports how many DMA accesses were refused, and the last one.
func (u *IOMMU) Faults() (n uint64, last Fault) {
	v := u.lastFault.Load()
	return u.faults.Load(), Fault{IOVA: v &^ 1, Write: v&1 == 1}
}

// rlock holds off Unmap while the caller accesses translated memory; a
// queue's DMA reads mu.queue(q) instead (queueLock).
func (u *IOMMU) rlock()   { u.mu.RLock() }
func (u *IOMMU) runlock() { u.mu.RUnlock() }

// translate returns the memory behind [iova, iova+n), which must lie in one
// mapping segment. The caller holds rlock. On a miss it records a fault.
func (u *IOMMU) translate(iova uint64, n int, write bool, hint *int) ([]byte, bool) {
	if len(u.absent) > 0 && u.isAbsent(iova, n) {
		u.fault(iova, write)
		return nil, false
	}
	es := u.entries
	if h := *hint; h < len(es) {
		e := &es[h]
		if iova >= e.iova && iova-e.iova+uint64(n) <= uint64(len(e.buf)) && iova+uint64(n) >= iova {
			o := iova - e.iova
			return e.buf[o : o+uint64(n)], true
		}
	}
	i := sort.Search(len(es), func(i int) bool { return es[i].iova > iova }) - 1
	if i >= 0 {
		e := &es[i]
		if iova-e.iova+uint64(n) <= uint64(len(e.buf)) && iova+uint64(n) >= iova {
			*hint = i
			o := iova - e.iova
			return e.buf[o : o+uint64(n)], true
		}
	}
	if u.sva {
		// Mappings of one address space may overlap (a buffer and a
		// part of it): look at every one.
		for j := range es {
			e := &es[j]
			if iova >= e.iova && iova-e.iova+uint64(n) <= uint64(len(e.buf)) && iova+uint64(n) >= iova {
				*hint = j
				o := iova - e.iova
				return e.buf[o : o+uint64(n)], true
			}
		}
	}
	u.fault(iova, write)
	return nil, false
}

// fault records a refused access.
func (u *IOMMU) fault(iova uint64, write bool) {
	u.faults.Add(1)
	v := iova &^ 1
	if write {
		v |= 1
	}
	u.lastFault.Store(v)
}

// isAbsent reports whether [iova, iova+n) touches a page marked not
// present. The caller holds rlock.
func (u *IOMMU) isAbsent(iova uint64, n int) bool {
	for p := iova &^ (pageSize - 1); p < iova+uint64(n); p += pageSize {
		if _, ok := u.absent[p]; ok {
			return true
		}
	}
	return false
}

// MarkNotPresent makes the pages under b (of a platform built with
// DSAOptions.SVA) not present, as pages of the process the kernel has
// not faulted in yet or has reclaimed: a descriptor that reaches one gets
// a page fault with partial completion, until Touch brings the page in.
// The memory itself is untouched.
func (u *IOMMU) MarkNotPresent(b []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.absent == nil {
		u.absent = map[uint64]struct{}{}
	}
	start := uint64(addrOff(b)) &^ (pageSize - 1)
	for p := start; p < uint64(addrOff(b)+len(b)); p += pageSize {
		u.absent[p] = struct{}{}
	}
}

// Touch brings in the page at addr, for writing when write is set: the
// model of a process touching a page the device faulted on (in the
// process's own address space this is a read or write of the page). It
// fails on a domain that is not an address space (built without SVA).
func (u *IOMMU) Touch(addr uint64, write bool) error {
	if !u.sva {
		return fmt.Errorf("emulated iommu: touch %#x: the domain is an IOMMU, not a process address space (DSAOptions.SVA): %w", addr, pci.ErrNotSupported)
	}
	u.mu.Lock()
	delete(u.absent, addr&^(pageSize-1))
	u.mu.Unlock()
	return nil
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }
