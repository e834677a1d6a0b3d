package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// The short path: the common case of a message-passing program, a tiny or
// small message (one TINY or SMALL frame, at most 128 bytes) to a connected
// peer, taken in two functions instead of the general paths' chains of
// eight and twelve (docs/message-cost.md, "The short path").
//
// sendShort sends such a message when nothing waits to be sent ahead of it:
// no send of the endpoint queued for a region, no send of the partner
// waiting for the window, the window open (fewer than MaxUnacked in
// flight), the peer reached through the transport (not through the rings,
// whose lean path, lean.go, is shorter still, nor an endpoint of this
// process, local.go) and not declared dead. It keeps everything the
// general path keeps for reliability: the next sequence number, the
// request on the unacked list with its copy of the payload for a resend,
// the piggybacked ack, the tail-loss probe's deadline, the counters and the
// zombie completion (BoardOptions.ZombieSends). The frame is byte for byte
// the one the general path sends (TestShortPathFramesMatch). Over a
// transport that kicks after the lock (AF_XDP), the clock reading that
// stamps the request, the tail-loss deadline and the zombie completion
// come after the kick (stampAfterKick, below), off the round trip's
// critical path.
//
// recvShort takes a TINY or SMALL frame, from a transport or a lean one
// from the rings (lean.go), whose sequence number is the next its partner
// expects, when the first posted receive of its endpoint
// matches it and holds it whole in its one segment: it copies the payload,
// completes the receive (or, when it is the request of the polling waiter
// whose look took the frame, hands it to that waiter, which consumes it at
// once: Board.rxWaiter), applies the piggybacked ack and moves the ack
// point, as recvSequenced and deliverEager do. Anything else takes the
// general path (handleFrame): a frame that fails to decode or whose
// checksum is wrong (counted there), an unknown endpoint or session, a
// partner not connected, a frame out of order, a duplicate, a partner with
// early frames stored, medium messages in progress, a lean frame held or a
// message in its unexpected handler, an endpoint with an unexpected handler,
// no posted receive or a first one that does not match (the message may
// match a later one, or go to the unexpected queue, where probes find it),
// a receive of several segments, and a receive too short (truncation).
//
// BoardOptions has no switch for it: both paths have the same effect, and
// the tests that compare them turn it off on a board (Board.shortOff).

// shortSend reports whether a send of class to p, which is not on the
// rings (isend asked p.rings()), may take sendShort (b.mu held); d is the
// endpoint of this process that p is, wait whether sends of e wait for a
// region.
func (e *Endpoint) shortSend(p *partner, class msgClass, d *Endpoint, wait bool) bool {
	b := e.b
	return class <= classSmall && !wait && d == nil && !p.dead && !b.shortOff &&
		p.waitq.Len() == 0 && p.unacked.Len() < b.opts.MaxUnacked
}

// sendShort sends a tiny or small message (class) of n bytes from segs to
// p with match and returns its request (b.mu held; shortSend said yes).
func (e *Endpoint) sendShort(p *partner, class msgClass, match uint64, segs [][]byte, n int, ctx any) *Request {
	b := e.b
	// The request freed last (freeLater: most likely the receive this
	// message answers) is cleared for the pool once the frame is out,
	// not before it, where getReq would clear it.
	var late *Request
	if len(b.freeReqs) > 0 {
		late, b.late = b.late, nil
	}
	r := b.getReq(e, kindSend)
	r.userHeld, r.protoHeld = true, true
	r.p = p
	r.match = match
	r.length = uint32(n)
	r.class = class
	// Field by field into the zeroed status, as newSend does.
	r.status.Source = p.addr()
	r.status.Match = match
	r.status.MsgLength = uint32(n)
	r.status.XferLength = uint32(n)
	if ctx != nil {
		r.status.Context = ctx
	}
	r.buf = gather(r.buf[:0], segs) // kept for a resend
	e.copies.locked.sent += uint64(n)
	e.copies.locked.gather += uint64(n)

	// Sequenced and on the unacked list, as transmitNew does. The clock
	// is read once the frame is out, so the frame never waits for a
	// reading (a system call where the clock is a virtual machine's
	// HPET): over a transport that kicks after the lock, after the kick
	// (stampAfterKick), marked sendUnstamped until then; else
	// right after sendFrame, below.
	if b.kicker != nil {
		r.firstSend, r.lastSend = sendUnstamped, sendUnstamped
		r.kickHeld = true // not recycled before stampAfterKick, whoever consumes it
	}
	r.seq = p.sendSeq
	p.sendSeq = seqNext(p.sendSeq)
	p.unacked.push(r)
	b.wakeTicks() // progress.go

	// The frame, as transmit builds it.
	typ, c := wire.TypeTiny, SendTiny
	if class == classSmall {
		typ, c = wire.TypeSmall, SendSmall
	}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	h := wire.Msg{Type: typ, DstEP: p.epID, SrcEP: e.id, Length: uint16(n), Seq: r.seq, Ack: p.piggyback(),
		Match: match, Session: p.rsession}
	h.Put(buf[wire.HeadLen:], b.ord)
	copy(buf[wire.HeadLen+wire.MsgLen:], r.buf)
	e.copies.framedLocked(n)
	e.cnt[c]++
	e.cnt[ShortSends]++
	b.sendFrame(p.nic, buf, wire.HeadLen+wire.MsgLen+n, p.crc)
	if late != nil {
		if b.kicker != nil && b.late == nil {
			b.late = late // after the kick (stampAfterKick)
		} else {
			b.recycle(late)
		}
	}
	if b.kicker != nil {
		return r // stamped, noted and completed by stampAfterKick
	}
	now := b.setNow()
	r.firstSend, r.lastSend = now, now
	p.noteTail(r) // ask.go
	e.zombieDone(r)
	return r
}

// zombieDone completes r, a short send not acked yet, before its ack when
// the endpoint may have that many zombies (BoardOptions.ZombieSends).
// b.mu held.
func (e *Endpoint) zombieDone(r *Request) {
	if !r.done.Load() && e.zombies < e.b.opts.ZombieSends {
		r.zombie = true
		e.zombies++
		e.complete(r, nil)
	}
}

// recvShort takes data, a received frame, on the short path and reports
// whether it did; when it did not, nothing has changed and the frame
// takes the general path. b.mu held.
func (b *Board) recvShort(nic transport.NICID, data []byte) bool {
	if len(data) < wire.HeadLen+wire.MsgLen || b.shortOff {
		return false
	}
	if t := wire.Type(data[wire.HeadLen]); t != wire.TypeTiny && t != wire.TypeSmall {
		return false // before Decode, whose error would be an allocation
	}
	var m wire.Msg
	payload, err := m.Decode(data[wire.HeadLen:], b.ord)
	if err != nil {
		return false
	}
	e := b.eps[m.DstEP]
	if e == nil || m.Session != e.session || e.handler != nil {
		return false
	}
	p := e.partnerAt(nic, m.SrcEP)
	if p == nil || !p.rknown || m.Seq != p.recvSeq || p.inHandler || p.held != nil ||
		len(p.early) > 0 || len(p.partials) > 0 {
		return false
	}
	r := e.posted.Front()
	if r == nil || m.Match&r.mask != r.match || len(r.segs) != 1 || len(r.segs[0]) < len(payload) {
		return false
	}
	if !b.rxRings { // rings carry no trailer (see sendFrame)
		if pi := b.peer(nic, u16(data, b.ord)); pi != nil && pi.crc {
			if _, err := wire.VerifyLen(data, wire.HeadLen+wire.MsgLen+len(payload)); err != nil {
				return false // dropped and counted there
			}
		}
	}
	c := RecvTiny
	if m.Type == wire.TypeSmall {
		c = RecvSmall
	}
	e.cnt[c]++
	e.cnt[ShortRecvs]++
	e.posted.remove(r) // first, as laneFast does: applyAck need not leave posted alone
	p.applyAck(m.Ack)  // completes sends, may send waiting ones
	k := copy(r.segs[0], payload)
	e.copies.locked.scatter += uint64(k)
	e.copies.locked.recv += uint64(k)
	st := &r.status
	st.Source = p.addr()
	st.Match = m.Match
	st.MsgLength = uint32(len(payload))
	st.XferLength = uint32(k)
	p.recvSeq = seqNext(p.recvSeq)
	// Posted by IRecv and filled here: nothing of reqCold was set (a
	// complete that times a woken waiter says otherwise), as laneFast's.
	r.narrow = true
	if r == b.rxWaiter && b.rxTook == nil && r.userHeld && !r.forgotten && r.waiters == 0 {
		// The polling waiter's own (lookLocked): handed to it, which
		// consumes it right after, as consumeLocked would, without the
		// completion's done list and events (takeLane does the same).
		r.userHeld = false
		b.rxTook = r
		if p.holdAck() { // ack.go
			return true
		}
	} else {
		e.complete(r, nil)
	}
	p.updateFull(ackSmall)
	return true
}

// sendUnstamped is the send time (Request.lastSend, firstSend) of a short
// send whose clock reading comes after its kick (stampAfterKick). It lies
// so far in the future that every deadline counted from it (resends, the
// tail-loss probe and questions, reordering, the unreachable verdict) is
// not due, a question's answer does not resend it (onAnswer), and its ack
// gives no round-trip sample (applyAck).
const sendUnstamped = int64(1) << 61

// The send's clock reading after its kick.
//
// A short send stamps its request with the clock (the resend and
// tail-loss deadlines count from it, its ack's round-trip sample too),
// and its reading also takes the round-trip samples of the acks the
// waiter's batch brought (sampleRTT, foldRTT). Over AF_XDP the frame
// leaves in the kick that follows the lock (unlockKick): read before the
// frame, the clock sat between the message that came and the reply, on
// the round trip's critical path, and a reading costs 130-450 ns on this
// project's virtual machines (docs/message-cost.md). So over a transport
// that kicks after the lock, sendShort leaves the request unstamped and
// isend reads the clock after the kick, while the peer handles the frame,
// and stamps it under a second hold of the lock. Until then no timer
// counts from it (sendUnstamped); an ack or a resend that came meanwhile
// (another goroutine's look) leaves nothing to stamp. The round-trip
// samples the reading takes now include the sendto (a few microseconds,
// far inside RTOMin).

// stampAfterKick gives r, a short send that went out unstamped, the
// clock read now (b.mu not held; the kick is made), notes its tail-loss
// deadline and completes it as a zombie (ZombieSends), all of which
// sendShort leaves to it; it also clears the receive its waiter consumed
// (freeLater). isend calls it before it returns r, so a zombie is done
// when ISend returns, as on every path.
// Until then r is kickHeld: an ack handled meanwhile by another goroutine
// may complete it and that goroutine's WaitAny consume it, and it is freed
// here, not under that goroutine.
func (b *Board) stampAfterKick(r *Request) {
	now := b.clock()
	b.mu.Lock()
	b.useReading(max(now, b.nowv)) // never behind a reading the protocol stored meanwhile
	now = b.nowv
	r.kickHeld = false
	// Each field on its own: a resend meanwhile (a probe, a NACK) stamped
	// lastSend and not firstSend, from which the unreachable verdict counts.
	if r.firstSend == sendUnstamped {
		r.firstSend = now
	}
	if r.lastSend == sendUnstamped {
		r.lastSend = now
		if p := r.p; p != nil && p.unacked.has(r) {
			p.noteTail(r) // ask.go
		}
	}
	r.ep.zombieDone(r) // unless its ack came meanwhile (and completed it)
	b.maybeFree(r)     // consumed meanwhile (another goroutine's WaitAny): freed now
	if b.late != nil {
		b.recycle(b.late) // freeLater: the reply is out
		b.late = nil
	}
	b.unlock()
}
