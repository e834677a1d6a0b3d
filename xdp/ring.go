package xdp

import (
	"sync/atomic"
)

// ringMap is one of a socket's four rings as the kernel shares it: a
// mapping holding a producer index, a consumer index, a flags word and a
// power-of-two array of entries. The indices are free-running uint32
// counters; an entry's slot is its index masked by size-1.
type ringMap struct {
	mem      []byte // the mapping, released by unmapRing
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	size     uint32
	mask     uint32
}

// needWakeup reports whether the kernel asked, through the ring's flags
// word, to be kicked by a syscall before it will process the ring again
// (XDP_USE_NEED_WAKEUP). A plain atomic load: the flag is a hint the kernel
// re-checks after our kick, so a stale value costs at most one extra or one
// late syscall, never a lost frame.
func (r *ringMap) needWakeup() bool {
	return r.flags.Load()&ringNeedWakeup != 0
}

// prodRing is a ring this process produces into and the kernel consumes
// from: the fill ring (frame addresses) and the TX ring (descriptors).
//
// cachedProd is our producer index, ahead of the shared one by the entries
// written but not yet committed. cachedCons is the kernel's consumer index
// plus the ring size as last read: the first index we may not write. Both
// caches save a load of a cache line the kernel writes on every batch.
type prodRing[T uint64 | xdpDesc] struct {
	ringMap
	desc       []T
	cachedProd uint32
	cachedCons uint32
}

// init reads the shared indices into the caches.
func (r *prodRing[T]) init() {
	r.cachedProd = r.producer.Load()
	r.cachedCons = r.consumer.Load() + r.size
}

// free returns how many entries may be written now, at least want if that
// many are free. It re-reads the kernel's consumer index only when the
// cached one promises fewer than want. The load is an acquire (Go atomics
// are sequentially consistent): the kernel publishes its consumer index
// with a release store after it has read the entries, so once we see the
// new index we may overwrite those slots.
func (r *prodRing[T]) free(want uint32) uint32 {
	if n := r.cachedCons - r.cachedProd; n >= want {
		return n
	}
	r.cachedCons = r.consumer.Load() + r.size
	return r.cachedCons - r.cachedProd
}

// slot is the i-th entry after the last one produced; the caller checked
// free first.
func (r *prodRing[T]) slot(i uint32) *T {
	return &r.desc[(r.cachedProd+i)&r.mask]
}

// produce counts n written entries as produced, not yet visible.
func (r *prodRing[T]) produce(n uint32) { r.cachedProd += n }

// commit publishes every produced entry to the kernel. The store is a
// release: the entries written before it are visible to the kernel, which
// reads the producer index with an acquire, before the new index is.
func (r *prodRing[T]) commit() { r.producer.Store(r.cachedProd) }

// pending is how many committed entries the kernel has not consumed yet, as
// of a fresh load of its consumer index.
func (r *prodRing[T]) pending() uint32 {
	return r.producer.Load() - r.consumer.Load()
}

// consRing is a ring the kernel produces into and this process consumes
// from: the RX ring (descriptors) and the completion ring (addresses).
//
// cachedCons is our consumer index, ahead of the shared one by entries read
// but not yet released; cachedProd is the kernel's producer index as last
// read.
type consRing[T uint64 | xdpDesc] struct {
	ringMap
	desc       []T
	cachedProd uint32
	cachedCons uint32
}

// init reads the shared indices into the caches.
func (r *consRing[T]) init() {
	r.cachedCons = r.consumer.Load()
	r.cachedProd = r.producer.Load()
}

// avail returns how many entries are ready to read, re-reading the
// kernel's producer index only when the cache promises fewer than want. The
// load is an acquire: the kernel writes the entries, then publishes the
// producer index with a release store, so the entries below the index we
// see are complete.
func (r *consRing[T]) avail(want uint32) uint32 {
	if n := r.cachedProd - r.cachedCons; n >= want {
		return n
	}
	r.cachedProd = r.producer.Load()
	return r.cachedProd - r.cachedCons
}

// at is the i-th entry not yet consumed; the caller checked avail first.
func (r *consRing[T]) at(i uint32) T {
	return r.desc[(r.cachedCons+i)&r.mask]
}

// release hands n read entries back to the kernel. The store is a release:
// our reads of those entries happen before the kernel, which loads the
// consumer index with an acquire, may overwrite them.
func (r *consRing[T]) release(n uint32) {
	r.cachedCons += n
	r.consumer.Store(r.cachedCons)
}
