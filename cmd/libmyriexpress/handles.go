//go:build cabi && cgo

package main

import (
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/cmd/internal/mxenv"
	"github.com/gomx-dev/gomx/mx"
)

// Endpoints and requests cross into C as handles: integers the C side
// stores in its mx_endpoint_t and mx_request_t, never Go pointers. A
// handle is an index into one of the tables below plus a generation, so a
// handle kept after its endpoint closed or its request completed is
// refused (MX_BAD_ENDPOINT, MX_BAD_REQUEST) instead of reaching whatever
// took its place. Lookups take no lock: table entries are published with
// atomic stores, and an entry's own fields are owned by the one thread
// that uses its handle, as MX asks of a request.

// maxEndpoints bounds the endpoints open at once in the process (every
// endpoint of mxenv.MaxBoards boards); an endpoint's index fits the 16 bits
// an address keeps for it.
const maxEndpoints = mxenv.MaxBoards * mx.MaxEndpoints

// endpoint is the C library's record of an open endpoint.
type endpoint struct {
	ep     *mx.Endpoint
	idx    int     // in eps.tab
	handle uintptr // what mx_endpoint_t holds: generation<<16 | idx+1
	// ctxMask covers the match bits MX_PARAM_CONTEXT_ID reserved: receives
	// and probes must not wildcard them.
	ctxMask uint64
	key     uint32 // the endpoint's key, for connecting to itself
	// selfOnce connects the endpoint to itself the first time the
	// application sends to its own address: MX lets a program send to
	// what mx_get_endpoint_addr returned without mx_connect.
	selfOnce sync.Once
	selfErr  error
	peers    peers // the addresses mx_connect returned (peers.go)
}

var eps struct {
	mu   sync.Mutex // serializes open and close
	tab  [maxEndpoints]atomic.Pointer[endpoint]
	gens [maxEndpoints]uint32
}

// addEndpoint records ep and returns its record.
func addEndpoint(ep *mx.Endpoint, key uint32, ctxMask uint64) (*endpoint, bool) {
	eps.mu.Lock()
	defer eps.mu.Unlock()
	for i := range eps.tab {
		if eps.tab[i].Load() == nil {
			eps.gens[i]++
			e := &endpoint{ep: ep, idx: i, handle: uintptr(eps.gens[i]&0xffff)<<16 | uintptr(i+1), ctxMask: ctxMask, key: key}
			eps.tab[i].Store(e)
			return e, true
		}
	}
	return nil, false
}

// dropEndpoint forgets e: its handle is refused from then on.
func dropEndpoint(e *endpoint) {
	eps.mu.Lock()
	eps.tab[e.idx].CompareAndSwap(e, nil)
	eps.mu.Unlock()
}

// endpointOf returns the endpoint handle h names, or nil.
func endpointOf(h uintptr) *endpoint {
	i := int(h&0xffff) - 1
	if i < 0 || i >= maxEndpoints {
		return nil
	}
	e := eps.tab[i].Load()
	if e == nil || e.handle != h {
		return nil
	}
	return e
}

// endpointAt returns the endpoint at table index i (from an address).
func endpointAt(i int) *endpoint {
	if i < 0 || i >= maxEndpoints {
		return nil
	}
	return eps.tab[i].Load()
}

// allEndpoints lists the open endpoints (for mx_finalize).
func allEndpoints() []*endpoint {
	var out []*endpoint
	for i := range eps.tab {
		if e := eps.tab[i].Load(); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// slot is the C library's record of a request the application holds.
// The mx.Request's context is the slot itself, so completions reported
// without the request (test_any, wait_any, peek) find it again.
type slot struct {
	r    *mx.Request
	e    *endpoint
	uctx uintptr // the application's context pointer
	// handle is what mx_request_t holds: generation<<32 | index+1.
	handle uintptr
	// segs holds the request's segments as Go slices over the
	// application's C memory, reused by the slot's next request once this
	// one completed (never while mx may still read or write through it).
	segs [][]byte
	gen  uint32
	idx  uint32
	next atomic.Uint32 // on the free stack: the slot below's index+1, 0 at the bottom
	// state orders the poster's publication of r against a completion
	// reported on another thread (test_any, wait_any) before the post
	// call even returned, as an eager send can be: posting, live, or
	// completed while posting (the poster then frees the slot).
	state atomic.Uint32
}

// Slot states.
const (
	slotPosting = iota + 1
	slotLive
	slotDoneEarly
)

// publish records the posted request and makes the slot live, or frees it
// when another thread already reported its completion.
func (s *slot) publish(r *mx.Request) {
	s.r = r
	if !s.state.CompareAndSwap(slotPosting, slotLive) {
		freeSlot(s, true)
	}
}

// release frees the slot of a request whose completion was reported,
// unless its poster has not published it yet: publish frees it then.
// Only the poster moves a slot from posting to live and nothing moves it
// back while the request is held, so a slot seen live (always so when the
// completion came through the request's handle, which the application
// only has once the post returned) needs no compare-and-swap: a plain
// load keeps a locked instruction off a wait's return.
func (s *slot) release() {
	if s.state.Load() == slotPosting && s.state.CompareAndSwap(slotPosting, slotDoneEarly) {
		return
	}
	freeSlot(s, true)
}

const (
	slotChunk  = 1024
	slotChunks = 4096 // 4 Mi requests held at once
)

// The slots live in chunks that, once made, stay for the process's life.
// Free slots form a lock-free stack (a Treiber stack): every post takes
// one and every completion gives one back, two locked instructions where
// a mutex cost four. head holds the top slot's index+1 (0: empty) in its
// low 32 bits and a count of the stack's changes in its high 32 bits, so
// a compare-and-swap made from a stale look fails even when the same slot
// is back on top (the ABA case). The stack's atomics also order the
// fields a slot's last owner wrote before the next owner's writes.
var slots struct {
	mu     sync.Mutex // serializes making new slots
	chunks [slotChunks]atomic.Pointer[[slotChunk]slot]
	n      uint32 // slots ever made, under mu
	head   atomic.Uint64
}

// slotAt returns the slot at index i, which has been made.
func slotAt(i uint32) *slot {
	return &slots.chunks[i/slotChunk].Load()[i%slotChunk]
}

// popFree takes the slot on top of the free stack, or nil when it is empty.
func popFree() *slot {
	for {
		h := slots.head.Load()
		top := uint32(h)
		if top == 0 {
			return nil
		}
		s := slotAt(top - 1)
		// s.next may be stale if another thread took s meanwhile:
		// then head changed, and the swap below fails.
		next := s.next.Load()
		if slots.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(next)) {
			return s
		}
	}
}

// pushFree puts s on top of the free stack.
func pushFree(s *slot) {
	for {
		h := slots.head.Load()
		s.next.Store(uint32(h))
		if slots.head.CompareAndSwap(h, (h>>32+1)<<32|uint64(s.idx+1)) {
			return
		}
	}
}

// makeSlot makes a new slot, or returns nil when 4 Mi exist already.
func makeSlot() *slot {
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if slots.n == slotChunk*slotChunks {
		return nil
	}
	i := slots.n
	if i%slotChunk == 0 {
		slots.chunks[i/slotChunk].Store(new([slotChunk]slot))
	}
	slots.n++
	s := slotAt(i)
	s.idx = i
	return s
}

// newSlot takes a free slot for a request of e, or nil when 4 Mi requests
// are held already.
func newSlot(e *endpoint, uctx uintptr) *slot {
	s := popFree()
	if s == nil {
		if s = makeSlot(); s == nil {
			return nil
		}
	}
	s.gen++
	s.e, s.uctx = e, uctx
	s.handle = uintptr(s.gen)<<32 | uintptr(s.idx+1)
	s.state.Store(slotPosting)
	return s
}

// freeSlot returns s to the free list once its request is done with.
// keepSegs is false when mx may still use the segments (a forgotten
// request still in flight): the slot then gets a fresh slice.
func freeSlot(s *slot, keepSegs bool) {
	s.r, s.e, s.handle = nil, nil, 0
	// The state stays as it was: nothing looks at a free slot's state,
	// and newSlot sets it before the slot's next request is visible.
	// The kept slices point into C memory, which the collector does not
	// follow, and the next post overwrites them before reading any.
	if keepSegs {
		s.segs = s.segs[:0]
	} else {
		s.segs = nil
	}
	pushFree(s)
}

// freeSlotsOf releases the slots of e's requests once e is closed (its
// requests completed with MX_STATUS_ENDPOINT_CLOSED and its handle is
// refused, so nobody can report them any more).
func freeSlotsOf(e *endpoint) {
	slots.mu.Lock()
	n := slots.n
	slots.mu.Unlock()
	for i := uint32(0); i < n; i++ {
		c := slots.chunks[i/slotChunk].Load()
		if c == nil {
			continue
		}
		if s := &c[i%slotChunk]; s.e == e && s.handle != 0 {
			freeSlot(s, false)
		}
	}
}

// slotOf returns the slot of the posted request handle h names, or nil.
func slotOf(h uintptr) *slot {
	if s := slotNamed(h); s != nil && s.r != nil {
		return s
	}
	return nil
}

// slotNamed returns the slot handle h names, whether or not its request
// is posted yet, or nil.
func slotNamed(h uintptr) *slot {
	i := uint32(h) - 1
	if uint32(h) == 0 || i >= slotChunk*slotChunks {
		return nil
	}
	c := slots.chunks[i/slotChunk].Load()
	if c == nil {
		return nil
	}
	if s := &c[i%slotChunk]; s.handle == h {
		return s
	}
	return nil
}

// slotOfStatus returns the slot of a completed request's status, or nil
// when the status is not a completion (a wait that ended first).
func slotOfStatus(st *mx.Status) *slot {
	s, _ := st.Context.(*slot)
	return s
}
