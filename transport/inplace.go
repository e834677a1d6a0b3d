package transport

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// In-place frames: the part of the contract that lets a caller keep a
// received frame past the next Recv (Hold, Release) and send from memory it
// registered without a copy (Register, Frame.Region). The package
// documentation explains the rules; this file holds the types every
// transport shares, and Lends, the bookkeeping most of them use.

// HoldInfo says how [Transport.Hold] kept a frame.
type HoldInfo struct {
	// Copied is true when the transport copied the frame's Data into a
	// fresh buffer (and pointed the frame's Data at it) instead of lending
	// its receive buffer: its buffers ran short, or it never lends them.
	Copied bool
	// DMA is the long-lived DMA-able memory the held Data lies in (a NIC's
	// hugepage packet pool, an AF_XDP UMEM), or nil when Data is ordinary
	// memory. It stays mapped for the transport's lifetime, so a copy
	// engine can register it once and read every frame held from it without
	// pinning again.
	DMA []byte
}

// Errors of the in-place calls; implementations wrap them with detail.
var (
	// ErrNotHoldable is returned by Hold for a frame that the latest Recv
	// did not return (its Ref is unknown, stale or already held).
	ErrNotHoldable = errors.New("transport: frame is not one the latest Recv returned, or is already held")
	// ErrForeignRegion is returned by Send for a frame whose Region is not
	// registered with this transport, was closed, or does not contain the
	// frame's Data.
	ErrForeignRegion = errors.New("transport: frame's Data does not lie in an open region of this transport")
	// ErrRegionBusy is returned by Region.Close while in-place sends from
	// the region have not completed.
	ErrRegionBusy = errors.New("transport: region has in-place sends in flight")
)

// Region is memory the caller registered with one transport
// ([Transport.Register]) to send frames from in place. The caller keeps the
// memory alive and does not free it before Close. A frame whose Region is set
// and whose Data lies in the region's memory is sent without a copy when
// InPlace reports true; until Pending drops back to zero, the transport may
// still be reading such frames, and the caller must not change their bytes.
// Transports that cannot avoid the copy (kernel sockets) copy during Send,
// report InPlace false, and count the copies (CopiedSends).
type Region struct {
	mem     []byte
	inPlace bool
	heads   bool
	owner   any
	release func() error
	poll    func()

	closed                    atomic.Bool
	pending                   atomic.Int64
	inPlaceSends, copiedSends atomic.Uint64
}

// NewRegion is for transport implementations: it describes mem registered
// with owner (the transport), which sends in place when inPlace is set.
// release, if not nil, undoes the registration when the region is closed.
func NewRegion(owner any, mem []byte, inPlace bool, release func() error) *Region {
	return &Region{mem: mem, inPlace: inPlace, owner: owner, release: release}
}

// Owner returns the transport the region was registered with: the value
// its Register gave NewRegion, which Check compares. A transport that
// forwards Register to another (a wrapper, or a type embedding a
// transport) hands out regions owned by that other one, and checks their
// frames against it.
func (r *Region) Owner() any { return r.owner }

// SetTakesHead is for transport implementations, before the region is
// handed out: frames of the region may carry a Frame.Head, which the
// transport copies in front of Data, whether it then sends Data in place
// or copies it too.
func (r *Region) SetTakesHead() { r.heads = true }

// TakesHead reports whether frames of the region may carry a Frame.Head
// (see the package documentation): the transport copies the head and
// sends Data in place behind it. A frame whose region does not take heads
// must carry its whole frame in Data.
func (r *Region) TakesHead() bool { return r.heads }

// Bytes returns the registered memory.
func (r *Region) Bytes() []byte { return r.mem }

// InPlace reports whether the transport sends from this region without
// copying.
func (r *Region) InPlace() bool { return r.inPlace }

// Frame returns a frame to peer whose Data is bytes [off, off+n) of the
// region.
func (r *Region) Frame(peer NICID, off, n int) Frame {
	return Frame{Peer: peer, Data: r.mem[off : off+n : off+n], Region: r}
}

// SetPoll is for transport implementations, before the region is handed
// out: Pending calls poll first while sends are pending, so that a caller
// waiting for completion sees it without another call into the transport
// (the transport reaps its NIC's or kernel's completions there). poll may
// run on any goroutine, concurrently with Send and Recv, and must not
// block.
func (r *Region) SetPoll(poll func()) { r.poll = poll }

// Pending returns the number of in-place sends from the region that have
// not completed: while it is not zero, the memory of those frames must stay
// unchanged. While it is not zero it first lets the transport look for
// completions.
func (r *Region) Pending() int {
	if r.poll != nil && r.pending.Load() > 0 {
		r.poll()
	}
	return int(r.pending.Load())
}

// InPlaceSends and CopiedSends count the frames sent from the region
// without and with a copy.
func (r *Region) InPlaceSends() uint64 { return r.inPlaceSends.Load() }

// CopiedSends counts the frames sent from the region by copying them.
func (r *Region) CopiedSends() uint64 { return r.copiedSends.Load() }

// Close unregisters the region. It fails with [ErrRegionBusy] while sends
// are pending (wait for Pending to reach zero, or close the transport,
// which completes them). Closing again returns nil.
func (r *Region) Close() error {
	if p := r.Pending(); p > 0 {
		return fmt.Errorf("transport: close region: %d sends pending: %w", p, ErrRegionBusy)
	}
	if r.closed.Swap(true) {
		return nil
	}
	if r.release != nil {
		return r.release()
	}
	return nil
}

// Check is for transport implementations: it reports whether f may be sent
// from its Region by owner, with an error wrapping [ErrForeignRegion] naming
// the problem when it may not.
func (r *Region) Check(owner any, f *Frame) error {
	if r.owner != owner || r.closed.Load() {
		return fmt.Errorf("%w: register the memory with this transport (Register) and keep the region open while sending", ErrForeignRegion)
	}
	if !within(r.mem, f.Data) {
		return fmt.Errorf("%w: %d bytes outside the %d-byte region", ErrForeignRegion, len(f.Data), len(r.mem))
	}
	if len(f.Head) > 0 && !r.heads {
		return fmt.Errorf("%w: the frame has a %d-byte Head and its region does not take one (Region.TakesHead): put the whole frame in Data", ErrForeignRegion, len(f.Head))
	}
	return nil
}

// Copied is for transport implementations: it counts a frame of the region
// that Send copied.
func (r *Region) Copied() { r.copiedSends.Add(1) }

// Begin is for transport implementations: an in-place send of a frame of
// the region started; call Done when the transport no longer reads it.
func (r *Region) Begin() {
	r.pending.Add(1)
	r.inPlaceSends.Add(1)
}

// Done is for transport implementations: an in-place send Begin counted has
// completed.
func (r *Region) Done() { r.pending.Add(-1) }

// Lends is the bookkeeping of held frames that transports share. A
// transport calls Recv and Got around each of its Recvs and numbers the
// frames with RecvRef, and its Hold asks
// Index which frame a Ref names, then either Lend (it gives its receive
// buffer B to the caller and takes a fresh one for its ring) or CopyOut. Its
// Release calls Return. Lends bounds the buffers lent at once: past the
// limit Lend refuses, and the transport copies instead, so a caller holding
// many frames never starves the receive ring, loses frames or blocks.
//
// Hold runs on the receiving goroutine; Return and the counters may be
// called from any goroutine.
type Lends[B any] struct {
	limit int

	gen   uint64 // the receiving goroutine's: generation of the latest Recv
	count int    // frames the latest Recv returned

	mu     sync.Mutex
	next   uint64
	held   map[uint64]lent[B]
	nlent  int
	closed bool

	lentTotal, copiedTotal atomic.Uint64
}

type lent[B any] struct {
	buf  B
	lent bool
}

// heldBit marks the Ref of a held frame, apart from the Refs Recv hands out.
const heldBit = 1 << 63

// NewLends returns a book that lends at most limit buffers at once.
func NewLends[B any](limit int) *Lends[B] {
	return &Lends[B]{limit: limit, held: make(map[uint64]lent[B])}
}

// Recv starts a new Recv: frames of earlier Recvs can no longer be held.
// Call Got once the frames it returns are numbered.
func (l *Lends[B]) Recv() {
	l.gen++
	l.count = 0
}

// Got says the latest Recv numbered n frames (RecvRef 0..n-1).
func (l *Lends[B]) Got(n int) { l.count = n }

// Count is the number of frames the latest Recv returned.
func (l *Lends[B]) Count() int { return l.count }

// RecvRef is the Ref of frame i of the latest Recv.
func (l *Lends[B]) RecvRef(i int) uint64 { return (l.gen&0x7fffffff)<<32 | uint64(i+1) }

// Index returns which frame of the latest Recv ref names, or an error
// wrapping [ErrNotHoldable].
func (l *Lends[B]) Index(ref uint64) (int, error) {
	i := int(ref&0xffffffff) - 1
	if ref&heldBit != 0 || ref>>32 != l.gen&0x7fffffff || i < 0 || i >= l.count {
		return 0, fmt.Errorf("%w (Ref %#x)", ErrNotHoldable, ref)
	}
	return i, nil
}

// Lend records that f's receive buffer buf is lent to the caller, and marks
// f held. It returns false, changing nothing, when the limit of lent buffers
// is reached.
func (l *Lends[B]) Lend(f *Frame, buf B) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nlent >= l.limit || l.closed {
		return false
	}
	l.nlent++
	l.lentTotal.Add(1)
	f.Ref = l.keep(lent[B]{buf: buf, lent: true})
	return true
}

// CopyOut points f's Data at a fresh copy and marks f held.
func (l *Lends[B]) CopyOut(f *Frame) {
	f.Data = append(make([]byte, 0, len(f.Data)), f.Data...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.copiedTotal.Add(1)
	f.Ref = l.keep(lent[B]{})
}

func (l *Lends[B]) keep(x lent[B]) uint64 {
	l.next++
	ref := heldBit | l.next
	l.held[ref] = x
	return ref
}

// Return ends the hold of f and clears its Ref and Data. It returns the
// buffer to give back to the ring when f's buffer was lent (ok true), and
// ok false when f was copied, not held, or the book was closed (Close
// returned its buffer).
func (l *Lends[B]) Return(f *Frame) (buf B, ok bool) {
	l.mu.Lock()
	x, found := l.held[f.Ref]
	if found {
		delete(l.held, f.Ref)
		if x.lent {
			l.nlent--
		}
	}
	l.mu.Unlock()
	f.Ref, f.Data = 0, nil
	return x.buf, found && x.lent
}

// Held returns how many frames are held now, and how many of them are
// lent buffers.
func (l *Lends[B]) Held() (held, lentNow int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held), l.nlent
}

// Close ends every hold and returns the lent buffers, for the transport's
// Close to give back. Later Lends refuse and later Returns find nothing.
func (l *Lends[B]) Close() []B {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var bufs []B
	for _, x := range l.held {
		if x.lent {
			bufs = append(bufs, x.buf)
		}
	}
	clear(l.held)
	l.nlent = 0
	return bufs
}

// Counters returns the book's counters, named with prefix: frames held by
// lending the receive buffer (held_lent), by copying (held_copied), and
// held now (held_now).
func (l *Lends[B]) Counters(prefix string) []Counter {
	held, _ := l.Held()
	return []Counter{
		{Name: prefix + "held_lent", Value: l.lentTotal.Load()},
		{Name: prefix + "held_copied", Value: l.copiedTotal.Load()},
		{Name: prefix + "held_now", Value: uint64(held)},
	}
}

// CopyRegions is for transports that copy every frame they send: it checks
// the frames of a batch that name a Region and counts their copies. It
// returns how many frames precede the first one that fails the check, and
// that frame's error (nil when all pass).
func CopyRegions(owner any, frames []Frame) (int, error) {
	for i := range frames {
		f := &frames[i]
		if f.Region == nil {
			continue
		}
		if err := f.Region.Check(owner, f); err != nil {
			return i, fmt.Errorf("frame %d: %w", i, err)
		}
		f.Region.Copied()
	}
	return len(frames), nil
}
