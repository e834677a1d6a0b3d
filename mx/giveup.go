package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// The verdicts on a peer and what they end: a partner declared unreachable
// when a request stays unacked past its budget, the NACK_LIB a board sends
// for a frame it cannot deliver and the one it believes from a peer, and
// how a request, or everything that involves a partner, is failed and the
// partner reset to a new session. When a verdict may be given (after a
// drain of what has arrived) is in verdict.go; how silence is timed in
// liveness.go; a peer the transport saw go in peerloss.go; a large
// message whose pull cannot complete in largefail.go.

// unreachable resets the partner, failing its requests with
// ErrUnreachable, if an unacked request has waited ResendDelay*(its
// resend limit+1) since its first send. It also reports true, leaving
// everything as it is, when that verdict waits for a drain of the
// sources (verdict.go).
func (p *partner) unreachable(now int64) bool {
	b := p.ep.b
	for r := p.unacked.Front(); r != nil; r = r.q.Next() {
		if b.overdue(now, r.firstSend, int64(b.opts.ResendDelay)*int64(p.ep.resendLimit(r)+1)) { // liveness.go
			if !b.mayDeclare() {
				return true
			}
			p.ep.cnt[Unreachable]++
			p.reset(ErrUnreachable)
			return true
		}
	}
	return false
}

// failSend completes a send-side request with code and drops it.
func (p *partner) failSend(r *Request, code error) {
	e := p.ep
	if r.region >= 0 {
		zs, st := e.freeRegion(r.region)
		r.region = -1
		// stage.go: it completes once its copiers left the staging
		// buffer; zerocopy.go: once the NIC is done with its memory.
		if e.b.stageHold(st, r, zs, code) || e.b.zcHold(e, r, zs, code) {
			return
		}
	}
	r.protoHeld = false
	if r.zombie {
		e.zombies--
	} else {
		e.complete(r, code)
	}
	e.b.maybeFree(r)
}

// failAll fails every pending request that involves the partner.
func (p *partner) failAll(code error) {
	e := p.ep
	for r := p.unacked.pop(); r != nil; r = p.unacked.pop() {
		p.failSend(r, code)
	}
	for r := p.waitq.pop(); r != nil; r = p.waitq.pop() {
		p.failSend(r, code)
	}
	for i := range e.regions {
		if reg := &e.regions[i]; reg.used && reg.r.p == p {
			p.failSend(reg.r, code)
		}
	}
	for r := e.pullq.Front(); r != nil; {
		next := r.q.Next()
		if r.p == p {
			e.pullq.remove(r)
			e.complete(r, code)
		}
		r = next
	}
	for r := e.resq.Front(); r != nil; {
		next := r.q.Next()
		if r.p == p {
			e.resq.remove(r)
			p.failSend(r, code)
		}
		r = next
	}
	for _, pl := range e.pulls {
		if pl != nil && pl.p == p {
			e.endPull(pl, code)
		}
	}
	for _, pt := range p.partials {
		if pt.r != nil {
			e.complete(pt.r, code)
		} else if pt.u != nil {
			e.dropUnexp(pt.u)
		}
		e.b.putPartial(pt)
	}
	p.partials = p.partials[:0]
	for _, x := range p.early {
		e.b.putBuf(x.data)
	}
	p.early = p.early[:0]
	if p.held != nil {
		e.b.putBuf(p.held)
		p.held = nil
	}
}

// reset drops all state with the partner after an unreachable peer or a
// nack: pending requests fail with code, sequence numbers move to a new
// session, and sends fail until the application connects again.
func (p *partner) reset(code error) {
	p.failAll(code)
	p.lastPulled = 0 // the PULLs were of the old session's sends
	p.setSendSeq(bumpSess(p.sendSeq))
	p.recvSeq = bumpSess(p.recvSeq)
	p.fullSeq = p.recvSeq
	// A pending connect announces the new session from its next resend
	// on, as a new attempt: the peer resets its side for us when it sees
	// the announcement change, so a reply to an earlier announcement
	// (which may come first) carries numbers the peer no longer uses, and
	// a connect completed by it would send into a session the peer left.
	for r := p.connecting.Front(); r != nil; r = r.q.Next() {
		p.connAttempt++
		r.attempt = p.connAttempt
	}
	p.notAcked = 0
	p.ackDeadline = 0
	p.ackLazy = false
	p.oooFrames, p.sackOpen = 0, false
	p.dead = true
}

// sendNackLib answers a packet for endpoint from that cannot be delivered
// (kind) to endpoint to of nic. cnt, when not nil, is the endpoint's
// counters (else the board's).
func (b *Board) sendNackLib(nic transport.NICID, from, to, kind uint8, seq uint16, cnt *Counters) {
	idx := b.headTo(nic)
	h := wire.NackLib{SrcEP: from, Kind: kind, DstEP: to, PeerIndex: idx, Seq: seq}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, idx, b.ord)
	h.Put(buf[wire.HeadLen:], b.ord)
	if cnt == nil {
		cnt = &b.cnt
	}
	cnt[SendNackLib]++
	b.sendFrame(nic, buf, wire.HeadLen+wire.NackLibLen, b.sealControl(nic))
}

func nackErr(kind uint8) error {
	switch kind {
	case wire.NackEndpointClosed:
		return ErrEndpointClosed
	case wire.NackBadSession:
		return ErrBadSession
	case wire.NackBadRDMAWindow:
		return ErrBadRDMAWindow
	}
	return ErrBadEndpoint
}

// handleNackLib fails the one request a NACK_LIB names, as Open-MX does: the
// unacked send with that sequence number, else (a connect's nack carries
// sequence number 0 and no attempt number) the oldest pending connect to
// that peer endpoint. A NACK_LIB carries no session, so it never resets the
// partner, and it is believed only when it nacks a retransmission: the
// first one for a request makes the board resend it at once, and only a
// NACK_LIB arriving after that resend fails it. A genuine nack comes back
// within a round trip (the peer's board nacks every copy); a blind forger
// sweeping sequence numbers fails nothing, and an ack in between completes
// the request normally.
func (b *Board) handleNackLib(nic transport.NICID, h *wire.NackLib) {
	e := b.eps[h.DstEP]
	if e == nil {
		b.cnt[DropBadNack]++
		return
	}
	e.cnt[RecvNackLib]++
	p := e.partners[partnerKey{nic, h.SrcEP}]
	if p == nil {
		e.cnt[DropBadNack]++
		return
	}
	code := nackErr(h.Kind)
	if sameSess(h.Seq, p.sendSeq) {
		for r := p.unacked.Front(); r != nil; r = r.q.Next() {
			if r.seq != h.Seq {
				continue
			}
			if !r.nacked {
				r.nacked = true
				e.cnt[NacksUnconfirmed]++
				p.transmit(r)
				return
			}
			p.unacked.remove(r)
			p.failSend(r, code)
			p.flushWait()
			return
		}
	}
	// A connect is only ever nacked for a missing or closed endpoint
	// (handleConnect): a bad-session NACK is about a message of the old
	// session (a late or duplicate answer to a stale send) and must not
	// fail the connect that is setting up the new one.
	if r := p.connecting.Front(); r != nil && h.Kind != wire.NackBadSession {
		if !r.nacked {
			r.nacked = true
			e.cnt[NacksUnconfirmed]++
			p.sendConnect(r)
			return
		}
		p.connecting.remove(r)
		e.complete(r, code)
		return
	}
	e.cnt[DropBadNack]++
}
