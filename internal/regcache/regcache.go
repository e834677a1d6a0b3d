// Package regcache is the pin-down (registration) cache that DMA users of
// gomx share: the copy engine (package ioat) maps arbitrary []byte for its
// channels through it, and mx registers the application's send buffers
// with its transport through it, so a NIC reads a large message's payload
// in place.
//
// # Design
//
// Mapping memory for a device (pinning its pages, programming the IOMMU,
// registering it with a transport) costs far more than a small copy, so a
// buffer is mapped on its first use and the mapping is kept for later
// requests on the same memory: a request reuses any entry that contains
// its bytes (Get), and takes a reference that Put gives back. Entries are
// kept sorted by address. An entry in use is never unmapped; idle entries
// are evicted least recently used first while the cached bytes exceed the
// cache's limit. Register maps memory for good (until Unregister), outside
// the limit.
//
// The cache is generic in what a mapping is (a *pci.Mapping for the copy
// engine, a *transport.Region for mx): its user gives the functions that
// map and unmap.
//
// # Staleness
//
// A cached mapping must never outlive the memory it maps: a later mapping
// at the same address would send the device to the old pages. Go's garbage
// collector does not move heap objects, and each entry keeps a reference
// to the buffer it maps, so memory of the Go heap that is cached is never
// freed and reused behind the cache's back (the hazard that makes C
// pin-down caches hook free()). Memory the program maps itself (mmap,
// hugepage regions, shared-memory segments) can be unmapped under it,
// which the cache cannot see: whoever unmaps such memory calls Invalidate
// first. An invalidated entry is never found again, and is unmapped at
// once, or by the Put of the last request still using it.
package regcache

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// ErrClosed is returned by Get and Register after Close.
var ErrClosed = errors.New("regcache: cache closed")

// ErrBusy is returned by Unregister for an entry that requests still use.
var ErrBusy = errors.New("regcache: mapping still in use")

// Cache is a registration cache of mappings of type M. It is safe for
// concurrent use.
type Cache[M any] struct {
	mapFn   func([]byte) (M, error)
	unmapFn func(M) error
	limit   int64

	mu      sync.Mutex
	entries []*Entry[M] // sorted by start
	bytes   int64
	clock   uint64
	stats   Stats
	closed  bool // no new mappings: a request racing Close must not leak one
}

// Entry is one mapping of the cache.
type Entry[M any] struct {
	start, end uintptr
	mem        []byte // keeps Go memory alive while it is mapped
	m          M
	refs       int
	permanent  bool // registered: never evicted
	used       uint64
	stale      bool // invalidated while in use: unmapped by the last Put
}

// Mapping returns the entry's mapping.
func (e *Entry[M]) Mapping() M { return e.m }

// Bytes returns the memory the entry maps.
func (e *Entry[M]) Bytes() []byte { return e.mem }

// Stats is what a cache did.
type Stats struct {
	// Hits and Misses count Gets that found a mapping and that made one.
	Hits, Misses uint64
	// Evictions counts idle entries unmapped to stay within the limit.
	Evictions uint64
	// Invalidations counts entries dropped by Invalidate.
	Invalidations uint64
	// Entries and Bytes are the mappings in the cache now (Register's
	// included) and the bytes of the cached ones (Register's excluded).
	Entries int
	Bytes   int64
}

// New returns a cache that maps memory with mapFn, unmaps it with
// unmapFn, and keeps at most limit bytes of idle cached mappings.
func New[M any](mapFn func([]byte) (M, error), unmapFn func(M) error, limit int64) *Cache[M] {
	return &Cache[M]{mapFn: mapFn, unmapFn: unmapFn, limit: limit}
}

// find returns the index of the entry containing [p, p+n), or -1.
func (c *Cache[M]) find(p uintptr, n int) int {
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].start > p }) - 1
	if i >= 0 && p+uintptr(n) <= c.entries[i].end {
		return i
	}
	return -1
}

// Get returns a mapping covering b, mapping b on a miss, and the offset of
// b in the entry's memory. The entry stays mapped until Put.
func (c *Cache[M]) Get(b []byte) (*Entry[M], int, error) {
	p := addrOf(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, 0, ErrClosed
	}
	c.clock++
	if i := c.find(p, len(b)); i >= 0 {
		e := c.entries[i]
		e.refs++
		e.used = c.clock
		c.stats.Hits++
		return e, int(p - e.start), nil
	}
	c.stats.Misses++
	m, err := c.mapFn(b)
	if err != nil {
		return nil, 0, err
	}
	e := &Entry[M]{start: p, end: p + uintptr(len(b)), mem: b, m: m, refs: 1, used: c.clock}
	c.insert(e)
	c.bytes += int64(len(b))
	c.evict()
	return e, 0, nil
}

// Register maps b until Unregister: the entry is never evicted or
// invalidated.
func (c *Cache[M]) Register(b []byte) (*Entry[M], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	m, err := c.mapFn(b)
	if err != nil {
		return nil, err
	}
	p := addrOf(b)
	e := &Entry[M]{start: p, end: p + uintptr(len(b)), mem: b, m: m, permanent: true}
	c.insert(e)
	return e, nil
}

// Unregister unmaps an entry Register made. It fails with ErrBusy while
// requests use it, and does nothing after Close (which unmapped it).
func (c *Cache[M]) Unregister(e *Entry[M]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	if e.refs > 0 {
		return fmt.Errorf("regcache: unregister a buffer with %d requests outstanding: wait for them first: %w", e.refs, ErrBusy)
	}
	c.remove(e)
	return c.unmapFn(e.m)
}

// Put gives back a reference Get took.
func (c *Cache[M]) Put(e *Entry[M]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.stale && e.refs == 0 {
		e.stale = false
		_ = c.unmapFn(e.m)
		e.mem = nil
	}
	if !e.permanent && c.bytes > c.limit {
		c.evict()
	}
}

func (c *Cache[M]) insert(e *Entry[M]) {
	i := sort.Search(len(c.entries), func(i int) bool { return c.entries[i].start > e.start })
	c.entries = append(c.entries, nil)
	copy(c.entries[i+1:], c.entries[i:])
	c.entries[i] = e
}

func (c *Cache[M]) remove(e *Entry[M]) {
	for i, x := range c.entries {
		if x == e {
			c.entries = append(c.entries[:i], c.entries[i+1:]...)
			return
		}
	}
}

// evict unmaps least recently used idle entries while over the limit.
func (c *Cache[M]) evict() {
	for c.bytes > c.limit {
		var victim *Entry[M]
		for _, e := range c.entries {
			if !e.permanent && e.refs == 0 && (victim == nil || e.used < victim.used) {
				victim = e
			}
		}
		if victim == nil {
			return
		}
		c.remove(victim)
		c.bytes -= int64(victim.end - victim.start)
		c.stats.Evictions++
		_ = c.unmapFn(victim.m)
		victim.mem = nil
	}
}

// Invalidate drops every cached (not registered) entry that overlaps mem:
// no later Get finds it, and it is unmapped now, or by the Put of the last
// request still using it. Call it before mem is unmapped or handed to
// something else. It returns how many entries it dropped.
func (c *Cache[M]) Invalidate(mem []byte) int {
	if len(mem) == 0 {
		return 0
	}
	p := addrOf(mem)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	end := p + uintptr(len(mem))
	kept := c.entries[:0]
	dropped := 0
	for _, e := range c.entries {
		if e.permanent || e.end <= p || e.start >= end {
			kept = append(kept, e)
			continue
		}
		dropped++
		c.bytes -= int64(e.end - e.start)
		c.stats.Invalidations++
		if e.refs > 0 {
			e.stale = true
			continue
		}
		_ = c.unmapFn(e.m)
		e.mem = nil
	}
	for i := len(kept); i < len(c.entries); i++ {
		c.entries[i] = nil
	}
	c.entries = kept
	return dropped
}

// Close unmaps every entry and refuses later mappings. It reports entries
// still referenced, and the first unmap error.
func (c *Cache[M]) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	busy := 0
	var err error
	for _, e := range c.entries {
		if e.refs > 0 {
			busy++
		}
		if uerr := c.unmapFn(e.m); uerr != nil && err == nil {
			err = uerr
		}
		e.mem = nil
	}
	c.entries = nil
	c.bytes = 0
	c.closed = true
	if busy > 0 {
		return errors.Join(err, fmt.Errorf("regcache: %d cached mappings still had requests outstanding at close", busy))
	}
	return err
}

// Stats reports what the cache did and holds.
func (c *Cache[M]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = len(c.entries)
	s.Bytes = c.bytes
	return s
}
