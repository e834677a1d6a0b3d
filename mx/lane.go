package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// The lane: tiny and small messages (up to wire.LaneMax, 128 bytes) on the
// lean path, between two gomx boards that both announce it
// (wire.ExtRingLane, unless LocalOptions.NoLane), go as lane records
// instead of Open-MX TINY and SMALL frames, and so do mediums of one
// fragment (up to the partner's stride, at most wire.LaneMediumMax, 8 KiB)
// between boards that both also announce wire.ExtRingLaneMedium: a board
// of an older gomx reads lane records of LaneMax bytes at most, and gets
// MEDIUM frames on the lean path as before.
//
// Between two processes of one host the Open-MX header buys nothing: the
// rings are gomx's own and both ends are the same code. A lane record
// (wire.Lane) is a 24-byte little-endian header, then the payload, and
// the sender writes it straight into the peer's ring from the
// application's segments (shm.Transport.SendParts): no frame is built in
// the board's scratch buffer first and copied again, no transport.Frame,
// no Open-MX encoding; an 8-byte message is one cache line of the ring,
// its record word included, and a 4 KiB one is copied once by each side,
// from the sender's segments into the ring and from the ring into the
// posted receive (mxbench pingpong --procs 2, 4 KiB one-way: 0.61 us as a
// MEDIUM frame, whose receiver takes it through a Recv batch and the
// general path, 0.44 us as a lane record). Everything else about the
// message is the lean path's (lean.go): the same conditions to take it (a
// ring peer on the lean path, nothing waiting before it, the window), the
// same sequence number from the partner's stream, so the peer's messages
// keep one order whatever path each took, and the same piggybacked ack and
// window, so acks stay bounded. Lane sends count as sends of their class and as
// LeanSends, and as LaneSends.
//
// The receiver takes a lane record in the common case without the general
// frame path: when the record is the next in its partner's sequence (no
// early frame, no held one, no medium being assembled, no unexpected
// handler running for the partner) and a posted receive matches it (the
// first in post order, as for any message: matchPosted), it copies the
// payload straight into that receive's segments and completes it
// (counted as LaneRecvs, and as a receive of its class). That is exactly
// what the general path does with such a frame, minus decoding an Open-MX
// header and dispatching it. A record with no posted receive to match,
// for an endpoint without an unexpected handler whose unexpected queue
// has room, goes straight into that queue the same way (laneUnexp), as
// the general path would put it there. Every other case (an unexpected
// handler to call, or a full queue; a record out of sequence; a partner
// with frames held, early or partial; an unknown endpoint or session) is
// handed to the general path as the TINY, SMALL or MEDIUM frame the record
// stands for, rebuilt in a board buffer, and behaves as such a frame does:
// handled, held, stored early, nacked or dropped. A record that fails its checks
// (it comes from another process's memory) is dropped and counted as
// DropBadHeader, and one that did not come through the rings as
// DropUnknownType.
//
// A waiter polling the rings for its receive (rxsource.go's pollSource) does
// not even take a Recv for such a record: it looks at the next frame in
// place (shm.Transport.Peek, which also says when the rings hold nothing
// for a Recv, so an empty look is one look at each ring) and,
// when it is a lane record that goes straight into a posted receive (or
// into the unexpected queue), delivers it under b.mu and consumes it
// (Take), and so the records behind it until the waiter's own request is
// done, at most laneBatch, up to the first that must take the general
// path: no batch, no frame lending, no generic dispatch, one lock of the
// board for them all. The looks made for no waiter's request
// (Request.Test's testSource, ISend's serveSource, the receive loop's
// drainServed, a wait for a condition) have no request to stop at: each
// delivers up to laneBatch records under one hold of b.mu. When the record
// fills the waiter's own receive, that receive is consumed there and then,
// its status written straight for the waiter: it is never marked done nor
// listed as completed, as no one else could have seen it before its Wait
// returns, and it is cleared for the request pool only at the board's
// next request (Board.freeLater), once the reply is on its way. Anything else is
// left in the ring for the Recv that follows, which hands it to the
// general path (recvLane included) as before. The progress goroutine's
// Recv batches meet lane records too, and deliver them the same way
// (handleFrame, recvLane).

// sendLane writes a tiny or small message with match and n bytes in segs
// to p through tr as a lane record (sendLean decided that it takes the
// lean path). Called with b.mu held.
func (e *Endpoint) sendLane(p *partner, tr *shm.Transport, match uint64, segs [][]byte, n int) error {
	b := e.b
	wire.PutLaneHeader(b.laneHdr[:], p.epID, e.id, p.sendSeq, p.fullSeq, uint16(n), p.rsession, match)
	return tr.SendParts(p.nic, b.laneHdr[:], segs)
}

// recvLane handles lane record data from nic (b.mu held): straight into
// a matching posted receive when nothing of its partner comes first
// (laneFast), else as the TINY or SMALL frame it stands for.
func (b *Board) recvLane(nic transport.NICID, data []byte) {
	if !b.rxRings {
		b.cnt[DropUnknownType]++ // lane records come only through the rings
		return
	}
	if b.laneFast(nic, data, nil) {
		return
	}
	var h wire.Lane
	payload, err := wire.DecodeLane(data, &h)
	if err != nil {
		b.cnt[DropBadHeader]++
		return
	}
	if h.Length > wire.SmallMax {
		b.recvLaneMedium(nic, &h, payload)
		return
	}
	m := wire.Msg{Type: wire.TypeTiny, DstEP: h.DstEP, SrcEP: h.SrcEP, Length: h.Length, Seq: h.Seq, Ack: h.Ack,
		Match: h.Match, Session: h.Session}
	if h.Length > wire.TinyMax {
		m.Type = wire.TypeSmall
	}
	f := b.getBuf()[:wire.HeadLen+wire.MsgLen+len(payload)]
	wire.PutPeerIndex(f, wire.NoPeerIndex, b.ord)
	m.Put(f[wire.HeadLen:], b.ord)
	copy(f[wire.HeadLen+wire.MsgLen:], payload)
	b.laneRec = true // its ack is a lane record's (ackLane)
	b.sequenced(nic, f, h.DstEP, h.SrcEP, h.Session, h.Seq, laneClass(h.Length), nil, &m)
	b.laneRec = false
	b.putBuf(f)
}

// recvLaneMedium is recvLane for a lane record h of a medium of one
// fragment, payload its bytes: it takes the general path as the MEDIUM
// frame the record stands for. The frame is built in a board buffer when
// one holds it (a board whose own frames are smaller than the ring's, on
// the host path, gets a buffer of its own).
func (b *Board) recvLaneMedium(nic transport.NICID, h *wire.Lane, payload []byte) {
	m := wire.Medium{DstEP: h.DstEP, SrcEP: h.SrcEP, MsgLength: uint32(h.Length), Seq: h.Seq, Ack: h.Ack,
		Match: h.Match, Session: h.Session, FragLength: h.Length}
	n := wire.HeadLen + wire.MediumLen + len(payload)
	f := b.getBuf()
	if cap(f) < n {
		f = make([]byte, n)
	}
	f = f[:n]
	wire.PutPeerIndex(f, wire.NoPeerIndex, b.ord)
	m.Put(f[wire.HeadLen:], b.ord)
	copy(f[wire.HeadLen+wire.MediumLen:], payload)
	b.laneRec = true // its ack is a lane record's (ackLane)
	b.sequenced(nic, f, h.DstEP, h.SrcEP, h.Session, h.Seq, RecvMediumFrag, &m, nil)
	b.laneRec = false
	b.putBuf(f)
}

// laneClass is the receive counter of a lane record of n payload bytes:
// the class of the TINY, SMALL or MEDIUM frame it stands for.
func laneClass(n uint16) Counter {
	switch {
	case n <= wire.TinyMax:
		return RecvTiny
	case n <= wire.SmallMax:
		return RecvSmall
	}
	return RecvMediumFrag
}

// laneFast delivers lane record data from nic, which came through the
// rings, straight into the first posted receive that matches it, when
// the record is the next of its partner's sequence and nothing of the
// partner waits before it; it reports false, having changed nothing,
// otherwise (the general path takes the record then). w, when not nil, is
// the request of the polling waiter that took the record (takeLane): when
// the record fills that very request, it is consumed at once (waiterReq):
// its status goes straight to the waiter, and the request never enters
// the endpoint's completed list nor is marked done, which a consumption
// right after would have undone under this same hold of the lock: no
// TestAny, WaitAny or Peek could have seen it in between. Called with
// b.mu held.
func (b *Board) laneFast(nic transport.NICID, data []byte, w *waiterReq) bool {
	var h wire.Lane
	payload, err := wire.DecodeLane(data, &h)
	if err != nil {
		return false
	}
	e := b.eps[h.DstEP]
	if e == nil || e.session != h.Session {
		return false
	}
	p := e.partnerAt(nic, h.SrcEP)
	if p == nil || !p.rknown || !p.lane || h.Seq != p.recvSeq || p.held != nil || p.inHandler ||
		len(p.early) != 0 || len(p.partials) != 0 {
		return false
	}
	r := e.matchPosted(h.Match)
	if r == nil {
		return b.laneUnexp(e, p, &h, payload)
	}
	e.lanes.recv[laneClass(h.Length)-RecvTiny]++ // and LaneRecvs: see laneTally
	p.applyAck(h.Ack)
	n := scatterAt(r.segs, 0, payload)
	// Posted by IRecv and filled here: nothing of reqCold was set (a
	// complete that times a woken waiter says otherwise).
	r.narrow = true
	if w != nil && r == w.r && r.userHeld && !r.forgotten && r.waiters == 0 {
		// Its waiter's only: consumed as consumeLocked would, right after.
		w.st.Code = w.st.setRecv(p, h.Match, uint32(h.Length), uint32(n))
		w.st.Context = r.status.Context
		w.ok = true
		r.userHeld = false
		b.freeLater(r) // not now: the reply comes first
	} else {
		e.finishRecv(r, p, h.Match, uint32(h.Length), uint32(n))
	}
	p.recvSeq = seqNext(p.recvSeq)
	p.laneReceived() // updateFull(ackLane)
	return true
}

// laneUnexp queues lane record h of partner p of e, payload its bytes,
// which laneFast found next in p's sequence with nothing of p before it
// but no posted receive to match, as an unexpected message, as the
// general path would (deliverEager): when e has no unexpected handler
// and its unexpected queue has room. It reports false, having changed
// nothing, otherwise: the general path then offers it to the handler, or
// holds it. In a collective whose ranks run at different paces (an
// alltoall oversubscribed) half the messages come before their receive,
// and each took the general path's Recv batch, a rebuilt Open-MX frame
// and its dispatch. Called with b.mu held.
func (b *Board) laneUnexp(e *Endpoint, p *partner, h *wire.Lane, payload []byte) bool {
	if e.handler != nil || !e.unexpRoom(len(payload)) {
		return false
	}
	e.lanes.unexp[laneClass(h.Length)-RecvTiny]++ // laneTally
	p.applyAck(h.Ack)
	u := b.getUnexp()
	u.p, u.match, u.length, u.complete, u.bytes = p, h.Match, uint32(h.Length), true, len(payload)
	u.buf = b.getPayload(len(payload))
	copy(u.buf, payload)
	e.copies.locked.scatter += uint64(len(payload))
	e.queueUnexp(u)
	p.recvSeq = seqNext(p.recvSeq)
	p.laneReceived() // updateFull(ackLane)
	return true
}

// takeLane is a look at ring source s (s.mu held), a polling waiter's or
// one for no request, for lane records that laneFast delivers: the
// transport's next frame, seen with Peek, taken with Take, without a
// Recv, its batch and the general frame path, then the records behind it
// under the same hold of b.mu, until one must take the general path, the
// waiter's request is done, or laneBatch were taken. With w nil
// (Request.Test's testSource, ISend's serveSource, drainServed, a wait
// for a condition) there is no request to stop at: the look delivers up
// to laneBatch records. It reports laneTaken when it took one or more,
// laneEmpty, having taken nothing, when a Recv would find nothing to do
// (as s.pending reporting false: this one look at the rings serves both),
// and laneOther, having taken nothing, when the next frame is anything
// else or must take the general path: the waiter's Recv then takes it.
// seen is the waiter's latest clock reading, for the timers (as
// pollSource), which a look that completes the waiter's request leaves to
// the next; w, when not nil, is the waiter's request, which it consumes
// once done (see waiterReq).
func (b *Board) takeLane(s *rxSource, seen int64, w *waiterReq) laneLook {
	nic, data, ok, empty := s.lane.Peek()
	if w != nil {
		// A polling waiter's look watches the empty rings a while
		// (lookPeeks) before it lets go of the source. Of every
		// peekEvery looks one is a whole peek, the last among them,
		// the others check the hot rings' record words alone
		// (HotStill), where a lane's record lands: a peek also looks
		// at the queue and at the cold rings' summary, some four
		// times as long, and a record that lands meanwhile waits for
		// the next look at its word.
		for k := w.peeks / 2; k > 0 && !ok && empty; k-- {
			for i := 1; i < peekEvery && s.lane.HotStill(); i++ {
			}
			nic, data, ok, empty = s.lane.Peek()
		}
	}
	if !ok {
		if empty {
			return laneEmpty
		}
		return laneOther
	}
	if !isLaneFrame(data) {
		return laneOther
	}
	b.mu.Lock()
	b.nowOK = false // read when the frame needs it (now), as for a batch
	if len(b.pcopies) > 0 || !b.laneFast(nic, data, w) {
		b.unlockKick()
		return laneOther
	}
	s.lane.Take()
	// The records behind it, under the same hold of the lock, until the
	// waiter's own request is done: a rank that gave its CPU away finds
	// the records its peers left meanwhile (up to one from each in an
	// oversubscribed alltoall), and a look of its own for each would
	// lock the source and the board again for every one.
	for range laneBatch - 1 {
		// (No pull copy can have come since the first record's check:
		// b.mu is held, and laneFast starts none.)
		if w != nil && (w.ok || w.r.done.Load()) {
			break
		}
		nic, data, ok, _ = s.lane.Peek()
		if !ok || !isLaneFrame(data) || !b.laneFast(nic, data, w) {
			break // left for the next look
		}
		s.lane.Take()
	}
	if len(b.ackOwed) > 0 && !s.pending() {
		b.ackDrained() // the rings ran dry, as a Recv that drains them
	}
	if w != nil && !w.ok && w.r.done.Load() && w.r.waiters == 0 {
		// The waiter's request (completed now or before): it is
		// consumed here, under the lock its Wait would take again.
		w.ok = w.r.consumeLocked(&w.st)
	}
	if w != nil && w.ok {
		if !w.asleep {
			// Its wait ends polled (firstLook, pollWait): counted here.
			b.waitPolledLocked.Inc()
		}
		// Its waiter returns to the application, which likely sends at
		// once: the timers wait for its next look, or whoever runs
		// next, as after a batch that completed it (lookLocked).
		b.release(false)
		return laneTaken
	}
	b.polledLocked(s, seen, w) // rxsource.go
	return laneTaken
}

// isLaneFrame reports whether data, a received frame, is a lane record
// (its type byte, after the frame header, is wire.TypeLane).
func isLaneFrame(data []byte) bool {
	return len(data) > wire.HeadLen && wire.Type(data[wire.HeadLen]) == wire.TypeLane
}

// peekEvery is how many of a polling waiter's looks at the empty rings
// (takeLane) make one whole peek: the others check only the hot rings'
// record words (shm.Transport.HotStill), a quarter of a peek's
// instructions. So a waiter's look of lookPeeks peeks' time makes twice
// as many looks at a lane's record word.
const peekEvery = 4

// laneBatch bounds the lane records one look delivers under one hold of
// the board's lock (takeLane), so that a waiter of another goroutine
// waits for the lock no longer than that many deliveries. A waiter's look
// stops sooner, at its own request; a look for no request (w nil:
// Request.Test, ISend's serveSource, drainServed, a condition wait) takes
// this many when they are there.
const laneBatch = 16

// laneLook is what takeLane found.
type laneLook uint8

const (
	// laneOther: a frame for the general path (Recv), or the transport
	// closed; nothing taken.
	laneOther laneLook = iota
	// laneEmpty: nothing for a Recv to do.
	laneEmpty
	// laneTaken: a lane record taken and delivered.
	laneTaken
)
