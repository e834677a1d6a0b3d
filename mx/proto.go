package mx

import (
	"errors"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// partial is a medium message being received fragment by fragment.
type partial struct {
	seq    uint16
	msgLen uint32
	nfrags int
	got    uint32
	ngot   int
	r      *Request // the receive it matched, or
	u      *unexp   // the unexpected entry collecting it
}

// deliver handles the packet whose seq is the next to match. It returns
// false when the packet was not taken for lack of resources: the sender
// will resend it, or, lean (see recvSequenced), the caller holds it. msg
// is the header of a tiny or small f when it was decoded already.
func (p *partner) deliver(f []byte, lean bool, msg *wire.Msg) bool {
	e := p.ep
	h := f[wire.HeadLen:]
	switch wire.Type(h[0]) {
	case wire.TypeTiny, wire.TypeSmall:
		if msg != nil {
			return p.deliverEager(msg.Match, uint32(msg.Length), h[wire.MsgLen:wire.MsgLen+int(msg.Length)], lean)
		}
		m, payload, _ := wire.DecodeMsg(h, e.b.ord)
		return p.deliverEager(m.Match, uint32(len(payload)), payload, lean)
	case wire.TypeMedium:
		m, payload, _ := wire.DecodeMedium(h, e.b.ord)
		if m.Frags(p.stride) == 1 {
			return p.deliverEager(m.Match, m.MsgLength, payload, lean)
		}
		return p.deliverMedium(&m, f)
	case wire.TypeRndv:
		m, _ := wire.DecodeRndv(h, e.b.ord)
		return p.deliverRndv(&m)
	case wire.TypeNotify:
		m, _ := wire.DecodeNotify(h, e.b.ord, p.notifyExt()) // largefail.go
		e.gotNotify(p, &m)
		return true
	}
	return true
}

// matchOrHandle finds a posted receive for match, or offers the message to
// the unexpected handler. consumed reports that the handler finished it;
// held that the handler should see it but progression is disabled, so the
// message must not be taken now.
func (p *partner) matchOrHandle(match uint64, length uint32, data []byte) (r *Request, consumed, held bool) {
	e := p.ep
	if r = e.matchPosted(match); r != nil || e.handler == nil {
		return r, false, false
	}
	if e.progOff > 0 {
		e.cnt[HeldProgressionOff]++
		return nil, false, true
	}
	b := e.b
	h := e.handler
	p.inHandler = true
	e.handlerBusy++
	// The batch's ack deadlines are noted now, and the acks owed at its
	// end (ackLarge) sent: the handler runs without b.mu, for as long as
	// it likes, and the deadlines other goroutines start meanwhile are
	// theirs to note (ack.go's noteAckArms, sendBatchAcks).
	depth := b.batchDepth
	b.batchDepth = 0
	if len(b.ackEnds) > 0 {
		b.sendBatchAcks()
	}
	if len(b.ackArms) > 0 {
		b.noteAckArms()
	}
	b.unlockKick()
	res := h(UnexpectedMessage{Source: p.addr(), Match: match, Length: length, Data: data})
	b.mu.Lock()
	b.batchDepth = depth
	e.handlerBusy--
	p.inHandler = false
	if res == Finished || e.closed {
		e.cnt[UnexpectedHandled]++
		return nil, true, false
	}
	return e.matchPosted(match), false, false
}

func (p *partner) deliverEager(match uint64, length uint32, payload []byte, lean bool) bool {
	e := p.ep
	r, consumed, held := p.matchOrHandle(match, length, payload)
	if held {
		return false
	}
	if consumed {
		return true
	}
	if r != nil {
		n := scatterAt(r.segs, 0, payload)
		e.copies.locked.scatter += uint64(n)
		e.copies.locked.recv += uint64(n)
		e.finishRecv(r, p, match, length, uint32(n))
		return true
	}
	if !e.unexpRoom(len(payload)) {
		if !lean {
			e.cnt[DropUnexpectedFull]++ // held instead when lean
		}
		return false
	}
	u := e.b.getUnexp()
	*u = unexp{p: p, match: match, length: length, complete: true, bytes: len(payload)}
	u.buf = e.b.getPayload(len(payload))
	copy(u.buf, payload)
	e.copies.scatter.Add(uint64(len(payload)))
	e.queueUnexp(u)
	return true
}

func (p *partner) deliverMedium(m *wire.Medium, f []byte) bool {
	e := p.ep
	r, consumed, held := p.matchOrHandle(m.Match, m.MsgLength, nil)
	if held {
		return false
	}
	if consumed {
		// The handler finished it: swallow the remaining fragments.
		pt := e.b.getPartial()
		*pt = partial{seq: m.Seq, msgLen: m.MsgLength, nfrags: m.Frags(p.stride)}
		p.partials = append(p.partials, pt)
		p.addFrag(pt, f)
		return true
	}
	pt := e.b.getPartial()
	*pt = partial{seq: m.Seq, msgLen: m.MsgLength, nfrags: m.Frags(p.stride), r: r}
	if r == nil {
		if !e.unexpRoom(int(m.MsgLength)) {
			e.cnt[DropUnexpectedFull]++
			return false
		}
		u := e.b.getUnexp()
		*u = unexp{p: p, match: m.Match, length: m.MsgLength, bytes: int(m.MsgLength)}
		u.buf = e.b.getPayload(int(m.MsgLength))
		u.pt = pt
		pt.u = u
		e.queueUnexp(u)
	} else {
		r.status.Source = p.addr()
		r.status.Match = m.Match
		r.status.MsgLength = m.MsgLength
	}
	p.partials = append(p.partials, pt)
	p.addFrag(pt, f)
	return true
}

// addFrag stores one medium fragment into its partial message.
func (p *partner) addFrag(pt *partial, f []byte) {
	e := p.ep
	m, payload, _ := wire.DecodeMedium(f[wire.HeadLen:], e.b.ord)
	if m.MsgLength != pt.msgLen {
		e.cnt[DropBadHeader]++
		return
	}
	bit := uint32(1) << m.FragIndex
	if pt.got&bit != 0 {
		e.cnt[DupFrags]++
		e.cnt[DupReceived]++
		return
	}
	pt.got |= bit
	pt.ngot++
	if pt.got&(bit-1) != bit-1 {
		p.outOfOrder() // an earlier fragment of the message is missing
	}
	off := m.Offset(p.stride)
	switch {
	case pt.r != nil:
		e.copies.scatter.Add(uint64(scatterAt(pt.r.segs, off, payload)))
	case pt.u != nil:
		e.copies.scatter.Add(uint64(copy(pt.u.buf[off:], payload)))
	}
	if pt.ngot < pt.nfrags {
		return
	}
	for i, x := range p.partials {
		if x == pt {
			p.partials = append(p.partials[:i], p.partials[i+1:]...)
			break
		}
	}
	switch {
	case pt.r != nil:
		r := pt.r
		xfer := uint32(min(int(pt.msgLen), totalLen(r.segs)))
		e.copies.recv.Add(uint64(xfer))
		e.finishRecv(r, p, r.status.Match, pt.msgLen, xfer)
	case pt.u != nil:
		u := pt.u
		u.pt = nil
		u.complete = true
		if u.recv != nil {
			e.finishUnexpRecv(u)
		}
	}
	e.b.putPartial(pt)
	p.updateFull(ackSeq)
}

func (p *partner) deliverRndv(m *wire.Rndv) bool {
	e := p.ep
	r, consumed, held := p.matchOrHandle(m.Match, m.MsgLength, nil)
	if held {
		return false
	}
	if consumed {
		p.sendNotify(0, m.RegionID, m.RegionSeq)
		return true
	}
	ref := rndvRef{id: m.RegionID, seq: m.RegionSeq, off: m.RegionOffset}
	if r != nil {
		e.startPull(r, p, m.Match, m.MsgLength, ref)
		return true
	}
	if !e.unexpRoom(0) {
		e.cnt[DropUnexpectedFull]++
		return false
	}
	u := e.b.getUnexp()
	*u = unexp{p: p, match: m.Match, length: m.MsgLength, rndv: true, rref: ref, complete: true}
	e.queueUnexp(u)
	return true
}

// sendNotify tells the region owner a pull is over, reliably.
func (p *partner) sendNotify(pulled uint32, regionID, regionSeq uint8) {
	p.notify(pulled, regionID, regionSeq, 0)
}

// notify sends a NOTIFY; failed is wire.NotifyPullFailed for a pull that
// failed (largefail.go), else 0.
func (p *partner) notify(pulled uint32, regionID, regionSeq, failed uint8) {
	e := p.ep
	r := e.b.getReq(e, kindNotify)
	r.class = classNotify
	r.p = p
	r.pulled = pulled
	r.nRegionID, r.nRegionSq = regionID, regionSeq
	r.nFailed = failed
	r.protoHeld = true
	p.enqueue(r)
}

// finishRecv completes a receive that got its data.
func (e *Endpoint) finishRecv(r *Request, p *partner, match uint64, msgLen, xfer uint32) {
	e.complete(r, r.status.setRecv(p, match, msgLen, xfer))
}

// setRecv fills in the status of a receive of xfer bytes of a message of
// msgLen with match from p, all but Code and Context, and returns its
// Code: ErrTruncated when the receive took less than the message.
func (st *Status) setRecv(p *partner, match uint64, msgLen, xfer uint32) error {
	st.Source = p.addr()
	st.Match = match
	st.MsgLength = msgLen
	st.XferLength = xfer
	if xfer < msgLen {
		return ErrTruncated
	}
	return nil
}

// ---- frame dispatch ----

// handleFrame validates one received frame and dispatches it. Called with
// b.mu held; data is only valid during the call. The trailer is checked
// when the sending board and this one agreed on it at connect (see
// package wire); a CONNECT says so itself.
func (b *Board) handleFrame(nic transport.NICID, data []byte) {
	if isLaneFrame(data) {
		b.recvLane(nic, data) // lane.go
		return
	}
	if b.recvShort(nic, data) { // short.go
		return
	}
	n, err := wire.FrameLen(data, b.ord)
	if err != nil {
		if errors.Is(err, wire.ErrUnknownType) {
			b.cnt[DropUnknownType]++
		} else {
			b.cnt[DropBadHeader]++
		}
		return
	}
	f := data[:n]
	h := f[wire.HeadLen:]
	typ := wire.Type(h[0])
	var crc bool
	switch typ {
	case wire.TypeRaw:
	case wire.TypeConnect:
		m, err := wire.DecodeConnect(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		crc = b.crc && m.HasExt && m.Ext.Flags&wire.ExtChecksum != 0
	default:
		if b.rxRings {
			break // rings carry no trailer (see sendFrame)
		}
		if pi := b.peer(nic, u16(data, b.ord)); pi != nil {
			crc = pi.crc
		}
	}
	if crc && !b.rxRings { // rings carry no trailer (see sendFrame)
		if _, err := wire.VerifyLen(data, n); err != nil {
			b.cnt[DropBadChecksum]++
			return
		}
	}
	switch typ {
	case wire.TypeTiny, wire.TypeSmall:
		var m wire.Msg
		_, err := m.Decode(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		c := RecvTiny
		if typ == wire.TypeSmall {
			c = RecvSmall
		}
		b.sequenced(nic, f, m.DstEP, m.SrcEP, m.Session, m.Seq, c, nil, &m)
	case wire.TypeMedium:
		m, _, err := wire.DecodeMedium(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.sequenced(nic, f, m.DstEP, m.SrcEP, m.Session, m.Seq, RecvMediumFrag, &m, nil)
	case wire.TypeRndv:
		m, err := wire.DecodeRndv(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.sequenced(nic, f, m.DstEP, m.SrcEP, m.Session, m.Seq, RecvRndv, nil, nil)
	case wire.TypeNotify:
		m, err := wire.DecodeNotify(h, b.ord, 0) // its routing fields only
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.sequenced(nic, f, m.DstEP, m.SrcEP, m.Session, m.Seq, RecvNotify, nil, nil)
	case wire.TypeConnect:
		m, _ := wire.DecodeConnect(h, b.ord)
		b.handleConnect(nic, &m)
	case wire.TypeTruc:
		m, err := wire.DecodeTruc(h, b.ord, 0) // the probe flags: handleTruc, from a peer that announced them
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.handleTruc(nic, &m, h)
	case wire.TypeNackLib:
		m, err := wire.DecodeNackLib(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.handleNackLib(nic, &m)
	case wire.TypePull:
		// Bytes 17-19 as negotiated: what both boards announced.
		var ext, more uint8
		if pi := b.peer(nic, u16(data, b.ord)); pi != nil {
			if pi.replyPad {
				ext = wire.ExtReplyPad
			}
			if pi.replyLane {
				more = wire.ExtPlaceLane
			}
			if pi.pullAlign {
				more |= wire.ExtPullAlign
			}
		}
		m, err := wire.DecodePull(h, b.ord, ext, more)
		if err != nil {
			b.cnt[DropBadPull]++
			return
		}
		b.handlePull(nic, &m)
	case wire.TypePullReply:
		m, _, err := wire.DecodePullReply(h, b.ord)
		if err != nil {
			b.cnt[DropBadPullReply]++
			return
		}
		b.handlePullReply(nic, &m, data[wire.HeadLen:])
	case wire.TypeNackMCP:
		m, err := wire.DecodeNackMCP(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.handleNackMCP(nic, &m)
	case wire.TypeHostQuery:
		m, err := wire.DecodeHostQuery(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.handleHostQuery(nic, &m)
	case wire.TypeHostReply:
		m, err := wire.DecodeHostReply(h, b.ord)
		if err != nil {
			b.cnt[DropBadHeader]++
			return
		}
		b.handleHostReply(nic, &m)
	case wire.TypeRaw:
		b.handleRaw(nic, f)
	default:
		b.cnt[DropUnknownType]++
	}
}

// endpointFor finds the open endpoint a packet is for, answering with a
// NACK_LIB when there is none or the session is wrong (nack true).
func (b *Board) endpointFor(nic transport.NICID, dst, src uint8, session uint32, seq uint16, nack bool) *Endpoint {
	e := b.eps[dst]
	if e == nil {
		kind := uint8(wire.NackBadEndpoint)
		if b.wasOpen[dst] {
			kind = wire.NackEndpointClosed
			b.cnt[DropEndpointClosed]++
		} else {
			b.cnt[DropBadEndpoint]++
		}
		if nack {
			b.sendNackLib(nic, dst, src, kind, seq, nil)
		}
		return nil
	}
	if session != e.session {
		e.cnt[DropBadSession]++
		if nack {
			b.sendNackLib(nic, dst, src, wire.NackBadSession, seq, &e.cnt)
		}
		return nil
	}
	return e
}

// sequenced hands a TINY or SMALL (msg, its decoded header), MEDIUM (m),
// RNDV or NOTIFY to its partner.
func (b *Board) sequenced(nic transport.NICID, f []byte, dst, src uint8, session uint32, seq uint16, c Counter, m *wire.Medium, msg *wire.Msg) {
	e := b.endpointFor(nic, dst, src, session, seq, true)
	if e == nil {
		return
	}
	e.cnt[c]++
	p := e.partnerAt(nic, src)
	if p == nil || !p.rknown {
		e.cnt[DropNoPartner]++
		return
	}
	if m != nil && m.Check(p.stride) != nil {
		e.cnt[DropBadHeader]++
		return
	}
	// Only eager messages of one frame take the lean path (lean.go).
	lean := p.lean && b.rxRings && (msg != nil || m != nil && m.Frags(p.stride) == 1)
	p.recvSequenced(f, lean, msg)
}
