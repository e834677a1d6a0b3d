package mx

import (
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// The CONNECT handshake: what a board announces about itself (the gomx
// extension), the request an Endpoint.Connect sends, and the answer to a
// request or a reply, which sets up or renews the session with a peer
// endpoint and its first sequence numbers. A pending connect is resent, and
// given up, by the endpoint's timers (resend.go); a NACK_LIB to it is
// handled with the other nacks (giveup.go). The sequenced stream the
// handshake opens is in reliability.go.

// learn takes what a CONNECT request or reply from the peer says.
func (p *partner) learn(h *wire.Connect) {
	p.peerIdx = h.YourIndex
	p.sizes()
}

// connectExt is the gomx extension this board puts in its CONNECTs to nic:
// its largest frame on the path to nic (host.go).
func (b *Board) connectExt(nic transport.NICID) wire.ConnectExt {
	x := wire.ConnectExt{Version: wire.ConnectExtVersion, MaxFrame: uint16(b.pathMTU(nic))}
	if b.crc {
		x.Flags |= wire.ExtChecksum
	}
	if !b.opts.NoSack {
		x.Flags |= wire.ExtSack
	}
	x.Flags |= wire.ExtPullStatus // largefail.go
	x.Flags |= wire.ExtAsk        // ask.go
	x.Flags |= wire.ExtRingLean   // lean.go
	x.Flags |= wire.ExtReplyPad   // large.go: PULLs may ask for padded replies
	if !b.opts.Local.NoLane {
		x.Flags |= wire.ExtRingLane | wire.ExtRingLaneMedium // lane.go
	}
	if p, ok := b.tr.(transport.Placer); ok && p.PlaceInfo().SendsLanes {
		// large.go: pull replies go to the lane a PULL names, cut from
		// the pull's end when it asks (placerecv.go)
		x.More |= wire.ExtPlaceLane | wire.ExtPullAlign
	}
	return x
}

func (p *partner) sendConnect(r *Request) {
	e := p.ep
	b := e.b
	r.lastSend = b.now()
	r.toldRecv = p.recvSeq
	h := wire.Connect{DstEP: p.epID, SrcEP: e.id, YourIndex: p.myIdx, Attempt: r.attempt,
		SrcSession: e.session, Key: r.key, NextRecvSeq: p.recvSeq, HasExt: true, Ext: b.connectExt(p.nic)}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	h.Put(buf[wire.HeadLen:], b.ord)
	e.cnt[SendConnectRequest]++
	// A request is sealed whenever this board wants the trailer: the peer
	// checks it only if it wants it too, and Open-MX ignores the bytes.
	b.sendFrame(p.nic, buf, wire.HeadLen+h.Len(), b.crc)
}

// handleConnect handles a CONNECT request or reply. A request presenting
// the right key and a session other than the one known for that peer
// endpoint is a new incarnation of it (Open-MX's rule): the old partner
// state is reset. The key is what authenticates a connect; no other frame
// resets a partner.
//
// What a CONNECT says about the sending board (gomx or not, trailer, MTU)
// is learnt only from a request that presents the right key or a reply to
// a pending connect, so a forged CONNECT cannot turn the trailer off.
func (b *Board) handleConnect(nic transport.NICID, h *wire.Connect) {
	if !h.IsReply {
		e := b.eps[h.DstEP]
		if e == nil {
			kind := uint8(wire.NackBadEndpoint)
			if b.wasOpen[h.DstEP] {
				kind = wire.NackEndpointClosed
			}
			b.cnt[DropBadEndpoint]++
			b.sendNackLib(nic, h.DstEP, h.SrcEP, kind, 0, nil)
			return
		}
		e.cnt[RecvConnectRequest]++
		status := uint8(wire.ConnectOK)
		var next uint16
		if h.Key != e.key {
			e.cnt[DropBadKey]++
			status = wire.ConnectBadKey
		} else {
			b.learnPeer(nic, h)
			p := e.partner(nic, h.SrcEP, true)
			p.learn(h)
			switch {
			case !p.rknown || p.rsession != h.SrcSession:
				if p.rknown { // a new incarnation of the peer endpoint
					p.reset(ErrBadSession)
				}
				p.newSession() // peerloss.go
				p.rknown, p.rsession, p.ackNumRecv = true, h.SrcSession, 0
				p.setSendSeq(h.NextRecvSeq)
			case !sameSess(p.sendSeq, h.NextRecvSeq):
				// The peer reset its state for us: start a new session.
				p.reset(ErrUnreachable)
				p.setSendSeq(h.NextRecvSeq)
			}
			p.dead = false
			next = p.recvSeq
		}
		r := wire.Connect{IsReply: true, DstEP: h.SrcEP, SrcEP: e.id, YourIndex: b.peerIndex(nic),
			Attempt: h.Attempt, SrcSession: h.SrcSession, DstSession: e.session,
			NextRecvSeq: next, Status: status, HasExt: true, Ext: b.connectExt(nic)}
		buf := b.frameBuf()
		wire.PutPeerIndex(buf, h.YourIndex, b.ord)
		r.Put(buf[wire.HeadLen:], b.ord)
		e.cnt[SendConnectReply]++
		// Sealed when the requester asked for the trailer, whether or not
		// the key was right.
		b.sendFrame(nic, buf, wire.HeadLen+r.Len(), b.crc && h.HasExt && h.Ext.Flags&wire.ExtChecksum != 0)
		return
	}
	e := b.eps[h.DstEP]
	if e == nil {
		b.cnt[DropBadEndpoint]++
		return
	}
	e.cnt[RecvConnectReply]++
	if h.SrcSession != e.session {
		e.cnt[DropBadSession]++
		return
	}
	p := e.partners[partnerKey{nic, h.SrcEP}]
	if p == nil {
		e.cnt[DropNoPartner]++
		return
	}
	var r *Request
	for r = p.connecting.Front(); r != nil && r.attempt != h.Attempt; r = r.q.Next() {
	}
	if r == nil {
		e.cnt[DupMessages]++
		return
	}
	p.connecting.remove(r)
	if h.Status != wire.ConnectOK {
		e.complete(r, ErrBadKey)
		return
	}
	b.learnPeer(nic, h)
	p.learn(h)
	switch {
	case !p.rknown || p.rsession != h.DstSession:
		if p.rknown {
			p.reset(ErrBadSession)
		}
		p.newSession() // peerloss.go
		p.rknown, p.rsession, p.ackNumRecv = true, h.DstSession, 0
		p.setSendSeq(h.NextRecvSeq)
	case p.dead || !sameSess(p.sendSeq, h.NextRecvSeq):
		if !p.dead {
			p.reset(ErrUnreachable)
		}
		p.setSendSeq(h.NextRecvSeq)
	}
	// The peer numbers its sends from what the request announced; a reset
	// (above, or one since the request) moved recvSeq to a new session
	// after that, and every frame of the peer's would then be dropped as
	// out of sequence. Within the request's session recvSeq stays: when
	// both ends connect at once, the peer may know us from its own connect
	// and send before it answers ours, and the frames it sent since were
	// delivered here. Moving recvSeq back to the announced number would
	// wait for those again, which the peer never resends (they were acked,
	// or a NOTIFY completed them), so every later frame of it would wait
	// as early, for ever.
	if !sameSess(p.recvSeq, r.toldRecv) {
		p.recvSeq, p.fullSeq = r.toldRecv, r.toldRecv
	}
	p.dead = false
	r.status.Source = p.addr()
	e.complete(r, nil)
}
