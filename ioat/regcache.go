package ioat

import (
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/internal/regcache"
	"github.com/gomx-dev/gomx/pci"
)

// regCache is the engine's pin-down (registration) cache of paper §3.5,
// the one gomx's DMA users share (package internal/regcache explains its
// design): arbitrary []byte buffers are mapped for DMA on first use and
// the mapping is kept for later requests on the same memory, because
// mapping (pinning pages, programming the IOMMU) costs far more than a
// small copy. This file gives it the engine's errors.
type regCache struct {
	c *regcache.Cache[*pci.Mapping]
}

// regEntry is one cached or registered mapping.
type regEntry = regcache.Entry[*pci.Mapping]

func newRegCache(dma pci.DMA, limit int64) *regCache {
	return &regCache{c: regcache.New(dma.Map, dma.Unmap, limit)}
}

// cacheErr gives a cache error the engine's sentinels.
func cacheErr(what string, err error) error {
	switch {
	case errors.Is(err, regcache.ErrClosed):
		return fmt.Errorf("ioat: engine: %w", ErrClosed)
	case errors.Is(err, regcache.ErrBusy):
		return fmt.Errorf("ioat: %w: %w", err, ErrBadRequest)
	}
	return fmt.Errorf("ioat: %s for DMA: %w", what, err)
}

// get returns a mapping covering b and the offset of b in it, taking a
// reference that put releases.
func (r *regCache) get(b []byte) (*regEntry, int, error) {
	e, off, err := r.c.Get(b)
	if err != nil {
		return nil, 0, cacheErr(fmt.Sprintf("map %d-byte buffer", len(b)), err)
	}
	return e, off, nil
}

// register maps b permanently (until unregister).
func (r *regCache) register(b []byte) (*regEntry, error) {
	e, err := r.c.Register(b)
	if err != nil {
		return nil, cacheErr(fmt.Sprintf("register %d-byte buffer", len(b)), err)
	}
	return e, nil
}

func (r *regCache) unregister(e *regEntry) error {
	if err := r.c.Unregister(e); err != nil {
		return cacheErr("unregister", err)
	}
	return nil
}

func (r *regCache) put(e *regEntry) { r.c.Put(e) }

// invalidate drops every cached (not user-registered) entry that overlaps
// mem; see regcache.Cache.Invalidate.
func (r *regCache) invalidate(mem []byte) int { return r.c.Invalidate(mem) }

// close unmaps every entry; it reports entries still referenced.
func (r *regCache) close() error {
	if err := r.c.Close(); err != nil {
		return fmt.Errorf("ioat: %w", err)
	}
	return nil
}

// CacheStats reports the registration cache's behaviour.
type CacheStats struct {
	Hits, Misses, Evictions uint64
	// Invalidations counts entries dropped by Engine.Invalidate.
	Invalidations uint64
	Entries       int   // mappings held now
	Bytes         int64 // bytes those mappings cover
}

func (r *regCache) stats() CacheStats {
	s := r.c.Stats()
	return CacheStats{Hits: s.Hits, Misses: s.Misses, Evictions: s.Evictions, Invalidations: s.Invalidations, Entries: s.Entries, Bytes: s.Bytes}
}
