// Package fault is gomx's one model of a hostile wire: seeded frame loss,
// corruption, duplication, reordering and delay. The in-process loopback
// wire (transport/loopback) applies it to every frame it carries, and [Wrap]
// applies it to any other transport (kernel UDP, AF_XDP, the user-space NIC
// driver), so a run over a real wire can be made exactly as lossy as a run
// over the in-process one, with the same knobs and the same seeds.
//
// # The model
//
// [Options] give the fractions of frames lost, corrupted (one random bit of
// one random byte flipped), duplicated (delivered twice), reordered (held
// back and released right after the next frame to or from the same peer, or
// after [HoldMax] if none comes) and the delay added to every frame. An
// [Injector] draws the decisions for one stream of frames from a PCG
// generator (math/rand/v2) seeded with the words Options.Seed and
// 0x6d786c6f6f70 ("mxloop"), in a fixed order per frame:
//
//  1. loss: one draw when Loss > 0; a lost frame draws nothing more;
//  2. corruption: one draw when Corrupt > 0; a corrupted frame then draws
//     the byte (IntN of its length) and the bit (IntN(8)) to flip;
//  3. duplication: one draw when Duplicate > 0;
//  4. reordering: one draw when Reorder > 0; it takes effect only when no
//     frame for that peer is already held.
//
// A fraction of zero draws nothing, so the pattern of one fault does not
// depend on whether another, disabled, fault exists. The same seed and the
// same sequence of frames therefore give the same pattern, run after run:
// which frames are lost, which bit of which frame is flipped, and so on.
//
// # Three layers
//
// [Injector] is the pure model: it decides and keeps held and delayed frames
// in a queue ordered by due time, but it owns no goroutine and no lock, and
// it is told the time. [Line] is an Injector shared by concurrent senders:
// a lock, and one goroutine that delivers held and delayed frames when they
// are due (the loopback wire has one Line per network). [Transport] is the
// wrapper: it puts a Line on the frames a transport sends and an Injector on
// the frames it receives, the latter driven by the receiving goroutine
// itself (a held frame comes out of a later Recv, which waits no longer than
// its due time).
//
// # Buffers
//
// The model never keeps a reference to a frame it was handed: a frame it
// holds, delays or corrupts is copied first. The wrapper's receive side
// relies on this: frames the wrapped transport returned point into its
// buffers (an AF_XDP UMEM, a loopback ring) that it reuses at its next Recv,
// so the wrapper hands them out unchanged only within the same Recv and
// copies everything it keeps longer.
package fault

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// HoldMax bounds how long a frame held back for reordering waits for a
// following frame to the same peer before it is delivered anyway (on top of
// Options.Delay).
const HoldMax = 500 * time.Microsecond

// pcgStream is the second PCG word of every Injector ("mxloop"): the loopback
// wire used it before the model moved here, so its seeds keep their patterns.
const pcgStream = 0x6d78_6c6f_6f70

// Options say how hostile the wire is. The zero value is a perfect wire.
type Options struct {
	// Loss, Duplicate, Reorder and Corrupt are the fractions of frames
	// lost, delivered twice, swapped with the next frame to (or from) the
	// same peer, and delivered with one bit flipped. A frame held back for
	// reordering goes out right after the next frame to its peer, or after
	// HoldMax (plus Delay) if none comes. A zero-length frame has no bit to
	// flip and is never corrupted; both copies of a duplicated frame carry
	// the same bytes.
	Loss, Duplicate, Reorder, Corrupt float64
	// Delay is added to every frame's delivery (0 = none).
	Delay time.Duration
	// Seed seeds the fault PRNG: the same seed gives the same fault
	// pattern for the same sequence of frames.
	Seed int64
}

// Active reports whether any fault is enabled.
func (o Options) Active() bool {
	return o.Loss > 0 || o.Duplicate > 0 || o.Reorder > 0 || o.Corrupt > 0 || o.Delay > 0
}

// needsTimer reports whether the faults hold frames for later delivery.
func (o Options) needsTimer() bool { return o.Reorder > 0 || o.Delay > 0 }

// Clamped returns o with every fraction clamped to [0, 1] (NaN counts as 0)
// and a negative Delay raised to 0.
func (o Options) Clamped() Options {
	o.Loss = clamp01(o.Loss)
	o.Duplicate = clamp01(o.Duplicate)
	o.Reorder = clamp01(o.Reorder)
	o.Corrupt = clamp01(o.Corrupt)
	o.Delay = max(o.Delay, 0)
	return o
}

func clamp01(x float64) float64 {
	if !(x > 0) { // also catches NaN
		return 0
	}
	return min(x, 1)
}

// ErrOptions is wrapped by the error Validate returns.
var ErrOptions = errors.New("fault: invalid options")

// Validate reports the first option out of range: a fraction outside [0, 1]
// (or NaN), or a negative Delay.
func (o Options) Validate() error {
	for _, f := range []struct {
		name string
		x    float64
	}{{"Loss", o.Loss}, {"Duplicate", o.Duplicate}, {"Reorder", o.Reorder}, {"Corrupt", o.Corrupt}} {
		if math.IsNaN(f.x) || f.x < 0 || f.x > 1 {
			return fmt.Errorf("%w: %s %g: want a fraction of frames in [0, 1], such as 0.01 for 1%%", ErrOptions, f.name, f.x)
		}
	}
	if o.Delay < 0 {
		return fmt.Errorf("%w: Delay %v: want 0 (none) or a positive duration", ErrOptions, o.Delay)
	}
	return nil
}

// String describes the enabled faults, as mxbench prints them: "loss 0.01,
// dup 0.05, seed 1", or "none".
func (o Options) String() string {
	if !o.Active() {
		return "none"
	}
	s := ""
	add := func(name string, x float64) {
		if x > 0 {
			s += fmt.Sprintf("%s %g, ", name, x)
		}
	}
	add("loss", o.Loss)
	add("reorder", o.Reorder)
	add("dup", o.Duplicate)
	add("corrupt", o.Corrupt)
	if o.Delay > 0 {
		s += fmt.Sprintf("delay %v, ", o.Delay)
	}
	return s + fmt.Sprintf("seed %d", o.Seed)
}

// Counts are what an Injector did to the frames it saw.
type Counts struct {
	Frames     uint64 // frames offered to the model
	Dropped    uint64 // frames lost
	Duplicated uint64 // frames delivered twice
	Reordered  uint64 // frames held back to be swapped with the next one
	Corrupted  uint64 // frames delivered with a bit flipped
	Delayed    uint64 // deliveries postponed by Delay
}

// Add returns the sum of c and d.
func (c Counts) Add(d Counts) Counts {
	return Counts{
		Frames: c.Frames + d.Frames, Dropped: c.Dropped + d.Dropped, Duplicated: c.Duplicated + d.Duplicated,
		Reordered: c.Reordered + d.Reordered, Corrupted: c.Corrupted + d.Corrupted, Delayed: c.Delayed + d.Delayed,
	}
}

// Item is one frame the model lets through. Tag is what the caller passed
// with the frame (the loopback wire passes the sending port); Peer is the
// frame's peer (the destination of a sent frame, the source of a received
// one); Copies is 2 for a duplicated frame, else 1.
//
// Data is either the caller's own Data (for a frame delivered at once,
// during the call that offered it) or a copy the model made and no longer
// uses: whoever keeps Data past that call must copy it.
type Item[T any] struct {
	Tag    T
	Peer   transport.NICID
	Data   []byte
	Copies int
}

// pending is a frame the model holds for later delivery: delayed, or held
// back to be reordered.
type pending[T any] struct {
	Item[T]
	due  time.Time
	seq  uint64 // tie-break: equal due times leave in the order they came
	held bool   // held back by Reorder (see Injector.held)
	done bool   // already delivered (a held frame released early)
}

// pendingHeap orders pending frames by due time.
type pendingHeap[T any] []*pending[T]

func (h pendingHeap[T]) Len() int { return len(h) }
func (h pendingHeap[T]) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h pendingHeap[T]) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap[T]) Push(x any)   { *h = append(*h, x.(*pending[T])) }
func (h *pendingHeap[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// Injector applies Options to one stream of frames. It is not safe for
// concurrent use (a [Line] adds the lock), except Counts, which may be
// called from any goroutine. The zero value is not usable: call
// [NewInjector].
type Injector[T any] struct {
	o       Options
	rng     *rand.Rand
	held    map[transport.NICID]*pending[T] // frame held back per peer
	q       pendingHeap[T]
	seq     uint64
	stopped bool

	frames, dropped, duplicated, reordered, corrupted, delayed atomic.Uint64
}

// NewInjector returns an injector applying o (clamped, see
// [Options.Clamped]).
func NewInjector[T any](o Options) *Injector[T] {
	in := &Injector[T]{held: make(map[transport.NICID]*pending[T])}
	in.Reset(o)
	return in
}

// Reset applies o (clamped) to the frames offered from now on and reseeds
// the PRNG with o.Seed. Frames already held or delayed are still delivered.
func (in *Injector[T]) Reset(o Options) {
	in.o = o.Clamped()
	in.rng = rand.New(rand.NewPCG(uint64(o.Seed), pcgStream))
}

// Options returns the options in force (clamped).
func (in *Injector[T]) Options() Options { return in.o }

// Counts returns what the injector did so far.
func (in *Injector[T]) Counts() Counts {
	return Counts{
		Frames: in.frames.Load(), Dropped: in.dropped.Load(), Duplicated: in.duplicated.Load(),
		Reordered: in.reordered.Load(), Corrupted: in.corrupted.Load(), Delayed: in.delayed.Load(),
	}
}

// chance draws one decision with probability p. It draws only when p > 0,
// so the sequence of draws depends only on the options and the frames.
func (in *Injector[T]) chance(p float64) bool {
	return p > 0 && in.rng.Float64() < p
}

// Frame offers one frame at time now. The model calls emit, before Frame
// returns, for each frame to deliver now: this one (unless it is lost, held
// or delayed), then the frame held back for the same peer, if this one
// overtook it. Frames held or delayed come out of a later Due.
func (in *Injector[T]) Frame(now time.Time, tag T, peer transport.NICID, data []byte, emit func(Item[T])) {
	in.frames.Add(1)
	o := &in.o
	if in.chance(o.Loss) {
		in.dropped.Add(1)
		return
	}
	owned := false
	if in.chance(o.Corrupt) && len(data) > 0 {
		data = clone(data)
		owned = true
		data[in.rng.IntN(len(data))] ^= 1 << in.rng.IntN(8)
		in.corrupted.Add(1)
	}
	it := Item[T]{Tag: tag, Peer: peer, Data: data, Copies: 1}
	if in.chance(o.Duplicate) {
		it.Copies = 2
		in.duplicated.Add(1)
	}
	if in.chance(o.Reorder) && in.held[peer] == nil && !in.stopped {
		if !owned {
			it.Data = clone(data)
		}
		h := &pending[T]{Item: it, due: now.Add(o.Delay + HoldMax), held: true}
		in.held[peer] = h
		in.push(h)
		in.reordered.Add(1)
		return
	}
	in.emit(it, owned, now, emit)
	if h := in.held[peer]; h != nil {
		// The held frame goes out right after the one that overtook it.
		delete(in.held, peer)
		h.done = true
		in.emit(h.Item, true, now, emit)
	}
}

// emit delivers it now, or queues it for after the delay.
func (in *Injector[T]) emit(it Item[T], owned bool, now time.Time, emit func(Item[T])) {
	if in.o.Delay > 0 && !in.stopped {
		if !owned {
			it.Data = clone(it.Data)
		}
		in.push(&pending[T]{Item: it, due: now.Add(in.o.Delay)})
		in.delayed.Add(1)
		return
	}
	emit(it)
}

func (in *Injector[T]) push(x *pending[T]) {
	in.seq++
	x.seq = in.seq
	heap.Push(&in.q, x)
}

// Next returns the due time of the earliest frame held or delayed, and
// false when there is none.
func (in *Injector[T]) Next() (time.Time, bool) {
	for len(in.q) > 0 && in.q[0].done {
		heap.Pop(&in.q)
	}
	if len(in.q) == 0 {
		return time.Time{}, false
	}
	return in.q[0].due, true
}

// Due calls emit for every held or delayed frame due at or before now, in
// due order.
func (in *Injector[T]) Due(now time.Time, emit func(Item[T])) {
	for len(in.q) > 0 && !in.q[0].due.After(now) {
		x := heap.Pop(&in.q).(*pending[T])
		if x.done {
			continue
		}
		if x.held {
			delete(in.held, x.Peer)
		}
		emit(x.Item)
	}
}

// Stop drops every frame held or delayed; frames offered afterwards are
// never held or delayed (only lost, corrupted or duplicated).
func (in *Injector[T]) Stop() {
	in.stopped = true
	in.q = nil
	clear(in.held)
}

func clone(b []byte) []byte {
	return append(make([]byte, 0, len(b)), b...)
}
