package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport/shm"
)

// The lean path: eager messages of one frame (tiny, small, and medium ones
// no longer than the partner's fragment stride, 8 KiB between ring peers)
// to a peer reached through shared-memory rings. (Between two boards that
// both announce it, the tiny and small ones, and the mediums of one
// fragment, go as lane records instead of Open-MX frames, and a receiver
// takes them straight into a posted receive: see lane.go. Everything below
// holds for them too.)
//
// Rings are memory: a frame written into a peer's ring is in the peer's
// memory, and the peer takes the frames of a ring in the order they were
// written, unless it dies (then it is gone, with everything it held). So a
// sequenced message that went into the ring needs no copy kept for a
// resend, no resend timer and no ack to complete: between two boards that
// both announce it (wire.ExtRingLean), such a send to a peer on
// the rings builds its frame from the application's segments (the request
// keeps no copy), writes it into the ring and completes at once (counted
// as LeanSends). It reads no clock and takes no place in the partner's
// unacked list. (The frame's header is built in the board's scratch buffer
// and the transport writes it and the application's segments straight into
// the ring (shm.Transport.SendParts): one copy of the payload, where the
// sequenced path copies it into the request first and into a frame then.)
// A board whose eager sends complete only on their ack (ZombieSends
// negative: the application wants to know the peer took the message)
// keeps the sequenced path.
//
// What stays: the sequence number. It keeps the matching order of a peer
// whose frames come by two paths (before the host path was found, through
// the transport; medium and large messages of the same peer, which keep
// their resend state), lets the receiver tell a resent frame from a new
// one, and a partner's session bits keep rejecting an older incarnation.
// Acks still flow as for any ring peer (noteReceived): a send takes the
// lean path only while fewer than leanWindow sequence numbers are un-acked,
// so a receiver that stops taking messages holds a bounded number of lean
// ones, and its sender's later sends take the sequenced path, whose
// resends and MaxUnacked bound the rest, and whose eager sends complete as
// before (ZombieSends, then on their ack).
//
// The receiver must then never drop such a frame, since nothing resends
// it. Where the sequenced path drops a message for its sender to resend —
// the unexpected queue is full, or the unexpected handler would see it
// while progression is disabled — a lean frame is held instead (one per
// partner, counted as LeanHeld), the peer's later frames wait as early
// frames behind it (the window keeps them under earlyWindow), and the
// endpoint's timers offer it again each tick until it is taken. The ring
// can still refuse a frame: a dead ring (the peer is gone) fails the Send,
// and a ring whose consumer made no progress for FullWait drops it
// (SendStrict fails with shm.ErrRingFull); either way the message takes the
// sequenced path instead, resend state included, and goes out again (by
// the transport, when the host path gave up on the peer).
//
// A message to a peer that turns out to be an endpoint of this process
// goes there directly (local.go) only once the peer acked every lean
// frame, so it cannot overtake one still in a ring.
//
// Peer death needs nothing new: a lean send that completed before the peer
// died was in the peer's memory, as an eager send that completed before
// its ack (ZombieSends) is on the wire; the peer's loss (peerloss.go,
// liveness.go) fails what is still pending with ErrUnreachable, and later
// sends fail at once.

// leanWindow bounds the sequence numbers un-acked when a send takes the
// lean path: no more than the receiver keeps early, so a lean frame
// behind a held one (or behind a sequenced frame still to come) is always
// kept.
const leanWindow = earlyWindow

// setSendSeq starts the send side at s (connect, reset): nothing is in
// flight.
func (p *partner) setSendSeq(s uint16) {
	p.sendSeq = s
	p.ackPoint = s
}

// sendLean sends an eager message of class (tiny, small, or a medium of
// one fragment) with match, segs and n bytes to p on the lean path, through
// tr, p's rings (isend asked p.rings()), when p is on the lean path and
// nothing waits before it; the caller then completes its
// request, made only after the frame went (isend), so that the peer, which
// may be waiting for this very frame, gets it sooner.
// It reports false when the message must take the sequenced path: p is
// not on the lean path, or the ring refused the frame (then, as for any
// frame, the send error is counted and a host-path peer is sent to through
// the transport for a while). Called with b.mu held.
func (e *Endpoint) sendLean(p *partner, tr *shm.Transport, class msgClass, match uint64, segs [][]byte, n int) bool {
	b := e.b
	if !p.lean || b.opts.ZombieSends == 0 || p.waitq.Len() > 0 || p.nic == b.nic || seqDiff(p.sendSeq, p.ackPoint) >= leanWindow ||
		class > classMedium || (class == classMedium && n > p.stride) {
		return false
	}
	var err error
	lane := p.lane && (class != classMedium || p.laneMed)
	if lane {
		err = e.sendLane(p, tr, match, segs, n) // lane.go
	} else {
		err = e.leanFrame(p, tr, class, match, segs, n)
	}
	if err != nil {
		// Not in the ring (a dead one, or shm.ErrRingFull): the
		// sequenced path sends it again.
		b.sendFailed(tr, p.nic, err)
		return false
	}
	p.piggyback() // the frame carried the ack
	p.sendSeq = seqNext(p.sendSeq)
	e.lanes.lean[class]++ // tiny, small or medium: see laneTally's order check
	if lane {
		e.lanes.lanes++
	}
	if b.quietRuns != 0 {
		// A lean send times nothing and its acks call nothing: a board
		// that only sends so (a stream's sender) would otherwise stay
		// on its stretched tick, and answer its lanes' retire requests
		// and count its peers once a second (progress.go).
		b.wakeTicks()
	}
	return true
}

// leanFrame writes the lean path's Open-MX frame of class (tiny, small
// or a medium of one fragment) into p's ring through tr. Only the header is built, in the board's scratch
// buffer: the payload goes from the application's segments straight into
// the record (shm.Transport.SendParts), as a lane record's does, so a
// medium of a few KiB is copied once on the sending side, not twice.
func (e *Endpoint) leanFrame(p *partner, tr *shm.Transport, class msgClass, match uint64, segs [][]byte, n int) error {
	b := e.b
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	hb := buf[wire.HeadLen:]
	hl := wire.MsgLen
	if class == classMedium {
		hl = wire.MediumLen
	}
	switch class {
	case classMedium:
		h := wire.Medium{DstEP: p.epID, SrcEP: e.id, MsgLength: uint32(n), Seq: p.sendSeq, Ack: p.fullSeq,
			Match: match, Session: p.rsession, FragLength: uint16(n)}
		h.Put(hb, b.ord)
	default:
		h := wire.Msg{Type: wire.TypeTiny, DstEP: p.epID, SrcEP: e.id, Length: uint16(n),
			Seq: p.sendSeq, Ack: p.fullSeq, Match: match, Session: p.rsession}
		if class == classSmall {
			h.Type = wire.TypeSmall
		}
		h.Put(hb, b.ord)
	}
	return tr.SendParts(p.nic, buf[:wire.HeadLen+hl], segs)
}

// hold keeps lean frame f, which p could not take now (recvSequenced).
func (p *partner) hold(f []byte) {
	p.held = append(p.ep.b.getBuf(), f...)
	p.ep.cnt[LeanHeld]++
	p.ep.b.anyHeld = true
	p.ep.b.wakeTicks() // progress.go
}

// retryHeld offers the held lean frames again, and then the early frames
// that waited behind them, once per timer run (runTimersLocked, b.mu
// held). Taking one may call the unexpected handler, which runs without
// b.mu, so other goroutines may run the timers meanwhile: it runs after
// the timer pass, whose verdict state must not interleave with another's,
// and with no receive source marked as owned by this goroutine (verdict.go
// drains an owned source itself), as when frames are handled.
func (b *Board) retryHeld() {
	if !b.anyHeld {
		return
	}
	b.anyHeld = false
	owned := b.rxOwned
	b.rxOwned = nil
	for _, e := range b.eps {
		if e == nil {
			continue
		}
		for _, p := range e.plist {
			if p.held == nil || e.closed {
				continue
			}
			if !e.mayTake(p.held) {
				b.anyHeld = true // it would be held again
				continue
			}
			f := p.held
			p.held = nil
			p.recvSequenced(f, true, nil) // holds a copy again if it still cannot
			b.putBuf(f)
		}
	}
	b.rxOwned = owned
}

// mayTake reports whether held lean frame f could be taken now: a posted
// receive matches it, or it fits in the unexpected queue (or goes to the
// handler), and the handler is not held off.
func (e *Endpoint) mayTake(f []byte) bool {
	if e.progOff > 0 && e.handler != nil {
		return false
	}
	h := f[wire.HeadLen:]
	var match uint64
	var n int
	if wire.Type(h[0]) == wire.TypeMedium {
		m, payload, _ := wire.DecodeMedium(h, e.b.ord)
		match, n = m.Match, len(payload)
	} else {
		m, payload, _ := wire.DecodeMsg(h, e.b.ord)
		match, n = m.Match, len(payload)
	}
	if e.handler != nil || e.unexpRoom(n) {
		return true
	}
	for r := e.posted.Front(); r != nil; r = r.q.Next() {
		if match&r.mask == r.match {
			return true
		}
	}
	return false
}
