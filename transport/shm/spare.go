package shm

import (
	"encoding/binary"
	"time"

	"golang.org/x/sys/unix"
)

// Spare lanes: a lane's segment made when the transport connects to a
// peer, before any pair asks for a lane, so that the ask does not wait
// for it.
//
// Making a lane's segment populates every page of it: on a hugepage the
// kernel clears 2 MiB, some 250 µs on this project's VM, up to a
// millisecond when loaded. Made when a pair asks (askLane's goroutine),
// that came in the middle of the traffic that made the pair ask. With
// more ranks than CPUs, where each rank has one Go processor and its
// waiters yield with a raw system call that keeps it, the goroutine ran
// only when the runtime's monitor preempted the waiter, some 10 ms later,
// and then made all the lanes the rank's pairs had asked for meanwhile
// one after the other: the rank stopped for about a millisecond while the
// others waited for its messages, long enough for their waits to sleep.
// Four ranks of an 8 B alltoall stopped so 2 to 7 ms in their first
// thousand rounds, which took 20 ms (docs/intranode-scale.md, "The first
// thousand rounds").
//
// So when a transport dials a peer (outFor), it makes a spare segment of
// a lane's size (ringSize then), while the lanes it writes and its spares
// together are fewer than Options.Lanes and than the peers it dialed: a
// process that connects to its job's ranks at its start (an MPI job,
// mxbench) makes them then, as Open MPI's vader maps the segment its fast
// boxes come from at start-up. The dial costs that much more (a handshake
// over the pair's socket costs more already), at most Options.Lanes
// dials, and again only once a spare has been taken or given back. A pair that asks for
// a lane takes a spare of the current size (a spare of another size, made
// before more boards were listed, is given back) and passes it to the
// consumer at once, under the ring's lock, as a frame in place does with
// the lane it makes; without a spare the goroutine makes the lane as
// before. A spare holds its place among the lanes written (lanesOut), so
// spares and lanes together keep every bound of Options.Lanes and
// Options.RingBudget; a spare no pair took within eight LaneIdles
// (spareIdles, by RetireIdle's clock) is unmapped, so an idle process
// gives its memory back, later than it gives back an idle lane. Footprint counts spares among the
// bytes mapped and owned, not among the rings. Options.NoSpareLanes makes
// none.

// spareLane is a lane's segment made ahead of an ask.
type spareLane struct {
	seg  segment
	fd   int
	size int // the ring's data bytes, as its header says
	// seen is RetireIdle's clock at its first look after the spare was
	// made (zero until then): its age is counted from there, in the
	// caller's clock, however seldom the caller looks.
	seen time.Time
}

// spareIdles is how many LaneIdles a spare waits for a pair (from
// RetireIdle's first look at it) before it is unmapped: 0.8 s by default,
// since a job's ranks connect one after the other, and the last of a few
// dozen may connect that much later than the first; the traffic that
// makes its pairs ask follows.
const spareIdles = 8

// makeSpare makes a spare when another fits: the lanes written (spares
// among them) are fewer than Options.Lanes and than peers, the rings in
// the table. The spare takes its place among the lanes written (a CAS on
// lanesOut, which askLane's takes too) only once made, so the bound holds
// however the two interleave; one that no longer fits is given back.
// outFor calls it after it dialed a peer, with the peers then in its
// table, once outMu is released: making the segment clears its pages,
// which the other users of outMu (in-place sends, Reaches, Footprint,
// other dials) should not wait for. Close sets closed before it drops
// the spares, and the spare is kept only if closed is still clear under
// spareMu, so a spare made as the transport closes is unmapped here.
func (t *Transport) makeSpare(peers int) {
	// Without LaneIdle (negative) RetireIdle never looks, and a spare no
	// pair takes would stay until Close: make none.
	if t.opts.NoSpareLanes || t.opts.LaneIdle < 0 || int(t.lanesOut.Load()) >= min(t.opts.Lanes, peers) {
		return
	}
	seg, fd, err := t.newLane()
	if err != nil {
		return // the pair that asks makes its lane (askLane)
	}
	s := spareLane{seg: seg, fd: fd, size: int(binary.LittleEndian.Uint32(seg.mem[sizeOff:]))}
	t.spareSize.Store(int64(s.size))
	t.spareMu.Lock()
	defer t.spareMu.Unlock()
	for !t.closed.Load() {
		n := t.lanesOut.Load()
		if int(n) >= min(t.opts.Lanes, peers) {
			break
		}
		if t.lanesOut.CompareAndSwap(n, n+1) {
			t.spares = append(t.spares, s)
			t.cnt.spares.Add(1)
			return
		}
	}
	s.seg.unmap()
	unix.Close(s.fd)
}

// takeSpare takes a spare of the size a lane made now would have
// (spareSize: ringSize reads the socket directory, which the ask, on a
// pair's send path, does not wait for), with its place among the lanes
// written, and gives back those of another size. It reports false when
// there is none.
func (t *Transport) takeSpare() (segment, int, bool) {
	t.spareMu.Lock()
	defer t.spareMu.Unlock()
	if len(t.spares) == 0 {
		return segment{}, -1, false
	}
	size := int(t.spareSize.Load())
	for len(t.spares) > 0 {
		s := t.spares[len(t.spares)-1]
		t.spares = t.spares[:len(t.spares)-1]
		if s.size == size && !t.closed.Load() {
			t.cnt.sparesTaken.Add(1)
			return s.seg, s.fd, true
		}
		t.dropSpare(s)
	}
	return segment{}, -1, false
}

// dropSpare unmaps spare s and gives its place among the lanes written
// back. spareMu held.
func (t *Transport) dropSpare(s spareLane) {
	s.seg.unmap()
	unix.Close(s.fd)
	t.lanesOut.Add(-1)
}

// dropOldSpares unmaps the spares no pair took within spareIdles
// LaneIdles of RetireIdle's clock, now, and while there are spares
// refreshes spareSize, as boards listed since change it (idleMu held).
func (t *Transport) dropOldSpares(now time.Time) {
	t.spareMu.Lock()
	n := len(t.spares)
	t.spareMu.Unlock()
	if n == 0 {
		return
	}
	t.spareSize.Store(int64(t.ringSize()))
	t.spareMu.Lock()
	defer t.spareMu.Unlock()
	k := 0
	for _, s := range t.spares {
		if s.seen.IsZero() {
			s.seen = now
		} else if now.Sub(s.seen) >= spareIdles*t.opts.LaneIdle {
			t.dropSpare(s)
			continue
		}
		t.spares[k] = s
		k++
	}
	clear(t.spares[k:])
	t.spares = t.spares[:k]
}

// dropSpares unmaps every spare (Close, once nothing dials).
func (t *Transport) dropSpares() {
	t.spareMu.Lock()
	defer t.spareMu.Unlock()
	for _, s := range t.spares {
		t.dropSpare(s)
	}
	t.spares = nil
}

// spareBytes is the bytes the spares map.
func (t *Transport) spareBytes() int64 {
	t.spareMu.Lock()
	defer t.spareMu.Unlock()
	var n int64
	for _, s := range t.spares {
		n += int64(len(s.seg.mem))
	}
	return n
}
