package ioat

import (
	"fmt"
	"sort"
	"sync"

	"github.com/gomx-dev/gomx/pci"
)

// regCache is the pin-down (registration) cache of paper §3.5: arbitrary
// []byte buffers are mapped for DMA on first use and the mapping is kept for
// later requests on the same memory, because mapping (pinning pages,
// programming the IOMMU) costs far more than a small copy.
//
// Entries are kept sorted by address; a request reuses any entry that
// contains its bytes. An entry in use by an outstanding request is never
// evicted. Go's garbage collector does not move heap objects, and the cache
// holds a reference to each mapped buffer, so a cached mapping can never
// point at memory that was freed and reused, the hazard that makes C
// pin-down caches hook free().
type regCache struct {
	dma   pci.DMA
	limit int64

	mu      sync.Mutex
	entries []*regEntry // sorted by start
	bytes   int64
	clock   uint64
	hits    uint64
	misses  uint64
	evicts  uint64
	invals  uint64
	closed  bool // no new mappings: a request racing Engine.Close must not leak one
}

type regEntry struct {
	start, end uintptr
	m          *pci.Mapping
	refs       int
	permanent  bool // registered by the user: never evicted
	used       uint64
	stale      bool // invalidated while in use: unmapped by the last put
}

func newRegCache(dma pci.DMA, limit int64) *regCache {
	return &regCache{dma: dma, limit: limit}
}

// find returns the index of the entry containing [p, p+n), or -1.
func (r *regCache) find(p uintptr, n int) int {
	i := sort.Search(len(r.entries), func(i int) bool { return r.entries[i].start > p }) - 1
	if i >= 0 && p+uintptr(n) <= r.entries[i].end {
		return i
	}
	return -1
}

// get returns a mapping covering b and the offset of b in it, taking a
// reference that put releases.
func (r *regCache) get(b []byte) (*regEntry, int, error) {
	p := addrOf(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, 0, fmt.Errorf("ioat: engine: %w", ErrClosed)
	}
	r.clock++
	if i := r.find(p, len(b)); i >= 0 {
		e := r.entries[i]
		e.refs++
		e.used = r.clock
		r.hits++
		return e, int(p - e.start), nil
	}
	r.misses++
	m, err := r.dma.Map(b)
	if err != nil {
		return nil, 0, fmt.Errorf("ioat: map %d-byte buffer for DMA: %w", len(b), err)
	}
	e := &regEntry{start: p, end: p + uintptr(len(b)), m: m, refs: 1, used: r.clock}
	r.insert(e)
	r.bytes += int64(len(b))
	r.evict()
	return e, 0, nil
}

// register maps b permanently (until unregister).
func (r *regCache) register(b []byte) (*regEntry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("ioat: engine: %w", ErrClosed)
	}
	m, err := r.dma.Map(b)
	if err != nil {
		return nil, fmt.Errorf("ioat: register %d-byte buffer for DMA: %w", len(b), err)
	}
	p := addrOf(b)
	e := &regEntry{start: p, end: p + uintptr(len(b)), m: m, permanent: true}
	r.insert(e)
	return e, nil
}

func (r *regCache) insert(e *regEntry) {
	i := sort.Search(len(r.entries), func(i int) bool { return r.entries[i].start > e.start })
	r.entries = append(r.entries, nil)
	copy(r.entries[i+1:], r.entries[i:])
	r.entries[i] = e
}

func (r *regCache) remove(e *regEntry) {
	for i, x := range r.entries {
		if x == e {
			r.entries = append(r.entries[:i], r.entries[i+1:]...)
			return
		}
	}
}

func (r *regCache) unregister(e *regEntry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil // the engine's Close unmapped it already
	}
	if e.refs > 0 {
		return fmt.Errorf("ioat: unregister a buffer with %d requests outstanding: wait for them first: %w", e.refs, ErrBadRequest)
	}
	r.remove(e)
	return r.dma.Unmap(e.m)
}

func (r *regCache) put(e *regEntry) {
	r.mu.Lock()
	e.refs--
	if e.stale && e.refs == 0 {
		e.stale = false
		_ = r.dma.Unmap(e.m)
	}
	if !e.permanent && r.bytes > r.limit {
		r.evict()
	}
	r.mu.Unlock()
}

// evict unmaps least recently used idle entries while over the limit.
func (r *regCache) evict() {
	for r.bytes > r.limit {
		var victim *regEntry
		for _, e := range r.entries {
			if !e.permanent && e.refs == 0 && (victim == nil || e.used < victim.used) {
				victim = e
			}
		}
		if victim == nil {
			return
		}
		r.remove(victim)
		r.bytes -= int64(victim.end - victim.start)
		r.evicts++
		_ = r.dma.Unmap(victim.m)
	}
}

// invalidate drops every cached (not user-registered) entry that overlaps
// [p, p+n): no later request finds it, and it is unmapped now, or by the
// last request still using it. It returns how many entries it dropped.
func (r *regCache) invalidate(p uintptr, n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || n <= 0 {
		return 0
	}
	end := p + uintptr(n)
	kept := r.entries[:0]
	dropped := 0
	for _, e := range r.entries {
		if e.permanent || e.end <= p || e.start >= end {
			kept = append(kept, e)
			continue
		}
		dropped++
		r.bytes -= int64(e.end - e.start)
		r.invals++
		if e.refs > 0 {
			e.stale = true
			continue
		}
		_ = r.dma.Unmap(e.m)
	}
	for i := len(kept); i < len(r.entries); i++ {
		r.entries[i] = nil
	}
	r.entries = kept
	return dropped
}

// close unmaps every entry; it reports entries still referenced.
func (r *regCache) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	busy := 0
	for _, e := range r.entries {
		if e.refs > 0 {
			busy++
		}
		_ = r.dma.Unmap(e.m)
	}
	r.entries = nil
	r.bytes = 0
	r.closed = true
	if busy > 0 {
		return fmt.Errorf("ioat: %d cached mappings still had requests outstanding at close", busy)
	}
	return nil
}

// CacheStats reports the registration cache's behaviour.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	// Invalidations counts entries dropped by Engine.Invalidate.
	Invalidations uint64
	Entries       int
	Bytes         int64
}

func (r *regCache) stats() CacheStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return CacheStats{Hits: r.hits, Misses: r.misses, Evictions: r.evicts, Invalidations: r.invals, Entries: len(r.entries), Bytes: r.bytes}
}
