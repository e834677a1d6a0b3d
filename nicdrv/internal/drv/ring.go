package drv

import (
	"errors"
	"sync/atomic"

	"github.com/gomx-dev/gomx/nicdrv"
)

// RxFill is the refill half of an RX ring, the same for every descriptor
// format: each slot holds one buffer per array of Bufs (a packet buffer;
// with header split also a header buffer, from its own pool or the same),
// and Fill gives the NIC's share of the ring fresh buffers, one Alloc per
// array and call, whatever number of slots it fills. The driver then
// writes the read descriptors of the slots Fill completed, in a loop of
// its own (a call per slot through a function value would cost the fast
// path more than the writes).
type RxFill struct {
	// Size is the number of slots.
	Size uint32
	// Bufs are the slots' buffers, one array per buffer a descriptor
	// takes; Pools the pool each array fills from.
	Bufs  [][]*nicdrv.Buffer
	Pools []*nicdrv.Pool
	// NoBuf counts buffers the pools could not give.
	NoBuf *atomic.Uint64

	scratch []*nicdrv.Buffer
}

// NewRxFill makes an RxFill of size slots, one array per pool.
func NewRxFill(size uint32, pools []*nicdrv.Pool, noBuf *atomic.Uint64) *RxFill {
	f := &RxFill{Size: size, Pools: pools, NoBuf: noBuf, scratch: make([]*nicdrv.Buffer, int(size)*len(pools))}
	for range pools {
		f.Bufs = append(f.Bufs, make([]*nicdrv.Buffer, size))
	}
	return f
}

// Fill fills the slots from tail up to (not including) stop, in ring
// order, and returns the new tail: the first slot it could not complete
// (the pools ran short: the buffers it did get wait in their slots) or
// stop. Every slot in [tail, the new tail) holds its buffers: the driver
// writes their read descriptors. Slots that still hold a buffer (a refill
// cut short, a descriptor the driver dropped) keep it. It writes no
// register and no descriptor.
func (f *RxFill) Fill(tail, stop uint32) uint32 {
	want := (stop + f.Size - tail) % f.Size
	if want == 0 {
		return tail
	}
	if len(f.Bufs) == 1 {
		return f.fill1(tail, want)
	}
	// Count what each array needs, take it from its pool in one Alloc.
	var got [2][]*nicdrv.Buffer
	off := 0
	for a, bufs := range f.Bufs {
		need := 0
		for i, s := uint32(0), tail; i < want; i++ {
			if bufs[s] == nil {
				need++
			}
			if s++; s == f.Size {
				s = 0
			}
		}
		sc := f.scratch[off : off+need]
		off += need
		k, _ := f.Pools[a].Alloc(sc)
		if k < need {
			f.NoBuf.Add(uint64(need - k))
		}
		got[a] = sc[:k]
	}
	var used [2]int
	s := tail
fill:
	for i := uint32(0); i < want; i++ {
		for a, bufs := range f.Bufs {
			if bufs[s] != nil {
				continue
			}
			if used[a] == len(got[a]) {
				break fill
			}
			bufs[s], got[a][used[a]] = got[a][used[a]], nil
			used[a]++
		}
		if s++; s == f.Size {
			s = 0
		}
	}
	for a := range f.Bufs {
		if rest := got[a][used[a]:]; len(rest) > 0 {
			_ = f.Pools[a].Free(rest...)
			clear(rest)
		}
	}
	return s
}

// fill1 is Fill for one buffer per slot. The slots are empty but after a
// refill cut short or a dropped descriptor: when all want of them are, the
// pool's Alloc writes the buffers into the slots themselves; otherwise, in
// one pass, it takes a buffer for each of the want slots from the pool at
// once, fills the empty slots in ring order and gives back what is left
// over.
func (f *RxFill) fill1(tail, want uint32) uint32 {
	bufs := f.Bufs[0]
	// Every slot of the run empty: Alloc into them (in two runs when the
	// ring wraps). A pool that runs short leaves the first slots filled
	// and the rest empty, as the general loop below would.
	first, second := bufs[tail:min(tail+want, f.Size)], bufs[:0]
	if tail+want > f.Size {
		second = bufs[:tail+want-f.Size]
	}
	if allNil(first) && allNil(second) {
		k, _ := f.Pools[0].Alloc(first)
		if k == len(first) && len(second) > 0 {
			k2, _ := f.Pools[0].Alloc(second)
			k += k2
		}
		if short := want - uint32(k); short > 0 {
			f.NoBuf.Add(uint64(short))
		}
		return (tail + uint32(k)) % f.Size
	}
	got := f.scratch[:want]
	k, _ := f.Pools[0].Alloc(got)
	got = got[:k]
	used := 0
	s := tail
	for i := uint32(0); i < want; i++ {
		if bufs[s] == nil {
			if used == len(got) {
				// The pool ran short: count what the rest of the
				// slots lack.
				short := uint64(0)
				for j, c := i, s; j < want; j++ {
					if bufs[c] == nil {
						short++
					}
					if c++; c == f.Size {
						c = 0
					}
				}
				f.NoBuf.Add(short)
				break
			}
			bufs[s] = got[used]
			used++
		}
		if s++; s == f.Size {
			s = 0
		}
	}
	if rest := got[used:]; len(rest) > 0 {
		_ = f.Pools[0].Free(rest...)
	}
	// got is left as it is: it points only into the pool's own Buffers,
	// which live as long as the pool, and clearing it would cost a
	// write-barriered store per slot.
	return s
}

// allNil reports whether every slot of bufs is empty.
func allNil(bufs []*nicdrv.Buffer) bool {
	for _, b := range bufs {
		if b != nil {
			return false
		}
	}
	return true
}

// Release gives back every buffer in the slots (Close, once the NIC is
// quiet).
func (f *RxFill) Release() error {
	var errs []error
	for a, bufs := range f.Bufs {
		errs = append(errs, f.Pools[a].Free(bufs...))
		clear(bufs)
	}
	return errors.Join(errs...)
}

// TxSlots is the driver's side of a TX ring whose NIC reports a descriptor
// done by writing a DD bit back into it, and only into a descriptor that
// asks with RS (the 82574's legacy and the 82599's advanced descriptors
// alike). Asking on every frame costs the NIC a DMA write per frame; so, as
// DPDK's drivers do with tx_rs_thresh, one descriptor in RSEvery asks, and
// a DD there means every descriptor before it is done too (the NIC
// completes them in order). marks holds the slots that asked, oldest first.
// At most RSEvery-1 descriptors at the tail wait for a later reclaim;
// RSEvery is at most a quarter of the ring, so a full ring always holds a
// mark. Slots [Clean, Tail) are with the NIC; one slot stays empty so that
// a full ring is not mistaken for an empty one.
type TxSlots struct {
	// Size is the number of slots.
	Size uint32
	// Slot is the Buffer each slot frees when done: set on the last
	// descriptor of a frame, nil on the others.
	Slot []*nicdrv.Buffer
	// Clean is the oldest slot with the NIC, Tail the next to fill.
	Clean, Tail uint32
	// RSEvery is how many descriptors share one write-back.
	RSEvery uint32
	// Done reports whether the NIC wrote DD back into slot s's
	// descriptor (and orders the loads after it, dmasync.Observe).
	Done func(s uint32) bool
	// Pool is the pool Reclaim frees through (each buffer goes back to
	// its own).
	Pool *nicdrv.Pool

	// SinceRS counts the descriptors put since the last that asked for
	// a write-back. A driver that fills a run of slots in its own loop
	// (Slot, Tail, SinceRS in locals, Mark where a descriptor asks) stores
	// them back after it, as Put would have left them.
	SinceRS uint32

	marks    []uint32
	markHead int
	markN    int
}

// NewTxSlots makes the bookkeeping of a ring of size slots; RS every 32
// descriptors, or a quarter of a smaller ring.
func NewTxSlots(size uint32, pool *nicdrv.Pool, done func(s uint32) bool) *TxSlots {
	return &TxSlots{Size: size, Slot: make([]*nicdrv.Buffer, size), RSEvery: max(1, min(32, size/4)),
		Done: done, Pool: pool, marks: make([]uint32, size)}
}

// Free is the number of slots free for new descriptors.
func (t *TxSlots) Free() uint32 { return (t.Clean + t.Size - t.Tail - 1) % t.Size }

// Put takes slot Tail for a descriptor whose frame frees b once done (nil
// on a frame's other descriptors) and returns the slot and whether the
// descriptor must ask for a write-back (RS): every RSEvery-th does, and
// one put with rs (the last descriptor of a frame whose attachment should
// complete at the next reclaim).
func (t *TxSlots) Put(b *nicdrv.Buffer, rs bool) (slot uint32, askRS bool) {
	slot = t.Tail
	t.SinceRS++
	if t.SinceRS >= t.RSEvery || rs {
		t.SinceRS = 0
		t.Mark(slot)
		askRS = true
	}
	t.Slot[slot] = b
	if t.Tail++; t.Tail == t.Size {
		t.Tail = 0
	}
	return slot, askRS
}

// Mark records that slot's descriptor asks for a write-back (RS): Reclaim
// looks at it, in the order the marks were made.
func (t *TxSlots) Mark(slot uint32) {
	m := t.markHead + t.markN
	if m >= len(t.marks) {
		m -= len(t.marks)
	}
	t.marks[m] = slot
	t.markN++
}

// Reclaim frees the buffers of every descriptor the NIC has finished: those
// up to and including each marked slot Done reports, oldest first, with one
// Free per run of slots (two when the run wraps).
func (t *TxSlots) Reclaim() {
	from := t.Clean
	for t.markN > 0 {
		m := t.marks[t.markHead]
		if !t.Done(m) {
			break
		}
		if t.Clean = m + 1; t.Clean == t.Size {
			t.Clean = 0
		}
		if t.markHead++; t.markHead == len(t.marks) {
			t.markHead = 0
		}
		t.markN--
	}
	to := t.Clean
	if from == to {
		return
	}
	if from > to {
		t.free(t.Slot[from:])
		from = 0
	}
	t.free(t.Slot[from:to])
}

// free gives back the buffers of a run of slots (nil entries are the
// frames' other descriptors) and empties the run.
func (t *TxSlots) free(run []*nicdrv.Buffer) {
	_ = t.Pool.Free(run...)
	clear(run)
}

// Release gives back every buffer still in a slot (Close, once the NIC is
// quiet).
func (t *TxSlots) Release() error {
	err := t.Pool.Free(t.Slot...)
	clear(t.Slot)
	return err
}
