package shm

import (
	"math/bits"
	"sync/atomic"

	"github.com/gomx-dev/gomx/transport"
)

// Hot and cold rings: a poll that does not scan every peer.
//
// A consumer polls at most hotMax rings directly, its hot rings: a load
// of the record word at each one's cursor, and a producer of a hot ring
// pays nothing above its record.
// Every other ring is cold: its producer, after publishing, also sets the
// ring's bit in the consumer's summary word (bellSumOff in the doorbell,
// 64 bits; ring i of the consumer has bit i mod 64), unless the bit is
// set already, and the consumer looks at a cold ring only when its bit
// came up (it swaps the summary to 0 and keeps the bits in t.pend until
// the rings behind them are found empty). An empty poll thus costs
// hotMax loads and one load of the summary, however many peers there
// are; a poll that finds work scans the rings of the bits it found (one
// ring per bit up to 64 peers, two at 128). The notify word in each
// ring's header (ringNotifyOff, written by the consumer, read by the
// producer at every publish from its own ring's header, a line that stays
// in its cache) says which kind the ring is, and the bit it sets.
//
// This is Open MPI vader's arrangement in a notification's form: vader
// polls a bounded number of per-peer fast boxes, and every other peer
// enqueues into one FIFO per receiver. Here the frames stay in the
// per-pair rings (so a pair's frames stay in order and a ring's space
// goes back to its one producer); only the news that a ring has a record
// goes through the one shared word.
//
// Ordering. A producer stores its record's word, then loads the notify
// word, then (cold) loads the summary and, if its bit is clear, sets it
// with an atomic OR, then loads the sleeping flag, all sequentially
// consistent; the consumer going to sleep stores its sleeping flag, then
// swaps the summary (or finds it 0) and looks at the rings of its bits.
// Either the consumer's look comes after the producer's OR (or after the
// load that found the bit set, since the consumer's swap that clears it
// is then later), and it finds the record, or the producer's load of the
// sleeping flag comes after the consumer's store, and it rings the
// doorbell. When the consumer makes a hot ring cold (it stores 1 to the
// notify word) it marks the ring's bit pending itself: a producer that
// loaded the old 0 published before that store, so the look the pending
// bit causes finds its record. A cold ring made hot is polled directly
// from then on; an OR its producer still makes is a spurious bit, which
// costs one look. A ring whose producer goes away is found by a look at
// every ring, which the watcher of its connection asks for (fullScan).
//
// Which rings are hot. A ring starts cold. A cold ring that delivers a
// frame while fewer than hotMax rings are hot becomes hot; with the hot
// set full, a cold ring becomes hot after promoteAfter frames, in place of
// the hot ring that delivered fewest frames since the last such change.
// A hot ring that delivered nothing in idleLooks looks at the hot set
// goes cold again, so idle peers (the other ranks of a job, once
// connected) cost no look. A two-process pair, or a process that talks
// with a few peers, thus has its peers hot after their first frame and
// polls only those, and a process that hears from every peer in turn (an
// alltoall) changes its hot set once per promoteAfter frames of a cold
// ring, not per frame.
const (
	// ringNotifyOff is the notify word in a ring's header: 0 hot, else
	// cold, bit+1 (the summary bit the producer sets, plus one).
	ringNotifyOff = 256
	// bellSumOff is the summary word in the consumer's doorbell, on a
	// line of its own.
	bellSumOff = 128
	// hotMax is how many rings a consumer polls directly.
	hotMax = 8
	// promoteAfter is how many frames a cold ring delivers before it
	// takes the place of a hot ring.
	promoteAfter = 256
	// idleLooks is how many looks at the hot set a hot ring may go
	// without a frame before it goes cold: a millisecond or so of a
	// spinning receiver, many more of a sleeping one.
	idleLooks = 1 << 15
)

// ringGroups lists the rings of each summary bit.
type ringGroups [64][]*inRing

// setIn replaces the table of producers writing to us (inMu held) and
// the lanes of each summary bit (a producer without a lane writes into
// the receive queue only).
func (t *Transport) setIn(rings []*inRing) {
	var g ringGroups
	n := 0
	for _, r := range rings {
		if r.data != nil {
			g[r.bit] = append(g[r.bit], r)
			n++
		}
	}
	t.in.Store(&rings)
	t.groups.Store(&g)
	t.nLanes.Store(int32(n))
}

// notifyCold makes r cold: its producer sets r's summary bit from its next
// record on (see above). The consumer side (or welcome, before the
// producer hears back) calls it.
func (r *inRing) notifyCold() { r.notify.Store(uint32(r.bit) + 1) }

// hotRing is a ring the consumer polls directly, with the frames it
// delivered since the hot set last changed or was last cooled (coolIdle).
type hotRing struct {
	r    *inRing
	hits uint32
}

// promote makes a cold ring that delivered frames hot, when there is room
// or it has waited promoteAfter frames (see above). Consumer side.
func (t *Transport) promote(r *inRing) {
	if r.hot || r.gone {
		return
	}
	if len(t.hot) < hotMax {
		t.hot = append(t.hot, hotRing{r: r, hits: 1})
		r.hot = true
		r.notify.Store(0)
		t.cnt.promotions.Add(1)
		return
	}
	if r.coldHits++; r.coldHits < promoteAfter {
		return
	}
	v := 0
	for i := range t.hot {
		if t.hot[i].hits < t.hot[v].hits {
			v = i
		}
	}
	t.demote(t.hot[v].r)
	for i := range t.hot {
		t.hot[i].hits = 0
	}
	t.hot[v] = hotRing{r: r, hits: 1}
	r.hot, r.coldHits = true, 0
	r.notify.Store(0)
	t.cnt.promotions.Add(1)
}

// demote makes hot ring r cold; the caller takes it out of t.hot.
func (t *Transport) demote(r *inRing) {
	r.hot, r.coldHits = false, 0
	r.notifyCold()
	// A producer that loaded the old 0 published before that store: the
	// look this bit causes finds its record.
	t.pend |= 1 << r.bit
}

// coolIdle, every idleLooks looks at the hot set, makes the hot rings
// that delivered nothing since the last time cold, and starts the others'
// counts again. Consumer side.
func (t *Transport) coolIdle() {
	k := 0
	for _, h := range t.hot {
		if h.hits == 0 && !h.r.gone {
			t.demote(h.r)
			continue
		}
		h.hits = 0
		t.hot[k] = h
		k++
	}
	clear(t.hot[k:])
	t.hot = t.hot[:k]
}

// dropHot takes the rings that are gone out of the hot set. Consumer side.
func (t *Transport) dropHot() {
	k := 0
	for _, h := range t.hot {
		if !h.r.gone {
			t.hot[k] = h
			k++
		}
	}
	clear(t.hot[k:])
	t.hot = t.hot[:k]
}

// takeSummary moves the summary's bits, and every bit after a fullScan
// request, into t.pend. Consumer side.
func (t *Transport) takeSummary() {
	if t.fullScan.Load() && t.fullScan.Swap(false) {
		t.pend = ^uint64(0)
		// A producer without a lane is dropped by commitDead too.
		t.anyGone, t.toCommit = true, true
	}
	if t.sum.Load() != 0 {
		t.pend |= t.sum.Swap(0)
	}
}

// pollHot reads records of the hot rings into frames[n:], round robin.
func (t *Transport) pollHot(frames []transport.Frame, n int) int {
	if t.looks++; t.looks&(idleLooks-1) == 0 {
		t.coolIdle()
	}
	hot := t.hot
	first := t.rr
	if first >= len(hot) {
		first = 0
	}
	for k := 0; k < len(hot) && n < len(frames); k++ {
		i := first + k
		if i >= len(hot) {
			i -= len(hot)
		}
		h := &hot[i]
		r := h.r
		if r.gone {
			continue
		}
		// A look at the record word at the cursor, without a call: most
		// looks of a spinning receiver find 0 there.
		if r.wordAt.Load() != 0 {
			m := t.pollRing(r, frames, n)
			h.hits += uint32(m - n)
			n = m
		} else if r.dead.Load() && r.wordAt.Load() == 0 {
			// Its producer went away, and what it published before
			// its connection closed (which is before dead) was read:
			// the word is loaded again after dead, so a record it
			// published just before it went is not missed.
			r.gone = true
			t.anyGone, t.toCommit = true, true
		}
	}
	t.rr = first + 1
	return n
}

// anyCold reports whether some ring is cold, or a ring's producer went
// away: otherwise the hot rings are all there is to look at.
func (t *Transport) anyCold() bool {
	return int(t.nLanes.Load()) > len(t.hot) || t.fullScan.Load()
}

// pollCold reads records of the cold rings whose bits are pending into
// frames[n:], bit by bit from where the last poll stopped, and clears the
// bits whose rings it found empty.
func (t *Transport) pollCold(frames []transport.Frame, n int) int {
	if !t.anyCold() {
		return n
	}
	t.takeSummary()
	if t.pend == 0 {
		return n
	}
	g := t.groups.Load()
	start := t.rrBit & 63
	rot := bits.RotateLeft64(t.pend, -start)
	for rot != 0 && n < len(frames) {
		b := (start + bits.TrailingZeros64(rot)) & 63
		rot &= rot - 1
		more := false
		for _, r := range g[b] {
			if r.gone || r.hot {
				continue
			}
			if r.gate != 0 && r.wordAt.Load() != 0 && !t.gateOpen(r) {
				more = true // its queue frames come first (lane.go)
				continue
			}
			if r.wordAt.Load() != 0 {
				m := t.pollRing(r, frames, n)
				if m > n {
					t.promote(r)
				}
				n = m
				if !r.hot && !r.gone && r.wordAt.Load() != 0 {
					more = true // frames was full
				}
			} else if r.dead.Load() {
				if r.wordAt.Load() == 0 {
					r.gone = true
					t.anyGone, t.toCommit = true, true
				} else {
					more = true
				}
			}
		}
		if !more {
			t.pend &^= 1 << b
		}
		t.rrBit = b + 1
	}
	return n
}

// peekCold is Peek over the cold rings whose bits are pending: the first
// with a record at its cursor, or empty when none has one nor lost its
// producer.
func (t *Transport) peekCold() (r *inRing, empty bool) {
	if !t.anyCold() {
		return nil, true
	}
	t.takeSummary()
	if t.pend == 0 {
		return nil, true
	}
	g := t.groups.Load()
	start := t.rrBit & 63
	rot := bits.RotateLeft64(t.pend, -start)
	empty = true
	for rot != 0 {
		b := (start + bits.TrailingZeros64(rot)) & 63
		rot &= rot - 1
		more := false
		for _, r := range g[b] {
			if r.gone || r.hot {
				continue
			}
			if r.gate != 0 && r.wordAt.Load() != 0 && !t.gateOpen(r) {
				more, empty = true, false
				continue
			}
			if r.wordAt.Load() != 0 {
				t.rrBit = b
				return r, false
			}
			if r.dead.Load() {
				more, empty = true, false
			}
		}
		if !more {
			t.pend &^= 1 << b
		}
	}
	return nil, empty
}

// notifyWords are a producer's view of its consumer's notification: the
// notify word in its ring's header and the consumer's summary word.
type notifyWords struct {
	notify *atomic.Uint32
	sum    *atomic.Uint64
}

// note sets the ring's summary bit if the consumer polls the ring only
// when it is set (see above), and it is not set already. Called after the
// records are published, before the load of the sleeping flag.
func (w *notifyWords) note() {
	if v := w.notify.Load(); v != 0 {
		bit := uint64(1) << ((v - 1) & 63)
		if w.sum.Load()&bit == 0 {
			w.sum.Or(bit)
		}
	}
}
