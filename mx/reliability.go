package mx

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Per-partner reliability: sequence numbers, acks (piggybacked and TRUC),
// resends, the early-packet window, NACK_LIB handling and connect. Everything
// about how a lost or duplicated frame is detected and comes back lives here;
// proto.go delivers the packets this file has put in order.

// Sequence numbers: 14 bits of sequence and, on top, 2 session bits that are
// bumped whenever a partner is reset, so packets of an older incarnation are
// rejected.
const (
	seqMask     = 0x3FFF
	seqSessMask = 0xC000
	seqHalf     = 8192 // half the sequence space: "ahead" vs "behind"
	earlyWindow = 255  // how far ahead packets are kept
	earlyMax    = 1024 // stored early frames per partner
	resendBurst = 16   // resends per partner per tick
)

func seqNext(s uint16) uint16          { return s&seqSessMask | (s+1)&seqMask }
func seqDiff(a, b uint16) int          { return int((a - b) & seqMask) } // how far a is past b
func sameSess(a, b uint16) bool        { return a&seqSessMask == b&seqSessMask }
func bumpSess(s uint16) uint16         { return (s&seqSessMask+0x4000)&seqSessMask | s&seqMask }
func seqBefore(a, b uint16) bool       { d := seqDiff(b, a); return d != 0 && d < seqHalf }
func isBehindOrEqual(a, b uint16) bool { return !seqBefore(b, a) }

// partner is an endpoint's record of one remote endpoint: both directions of
// the sequenced stream between them.
type partner struct {
	ep      *Endpoint
	nic     transport.NICID
	epID    uint8
	peerIdx uint16 // what to put in the head of frames to this peer
	myIdx   uint16 // our board's index of the peer (sent in CONNECT)

	rsession uint32 // the remote endpoint's session
	rknown   bool
	dead     bool // reset after unreachable: sends fail until a new connect
	// The lost peers (Board.lost) of generation lostGen that were known
	// when this session began: the first lostSkip (peerloss.go).
	lostSkip int
	lostGen  uint64
	// What the connect exchange said about the peer's board: whether
	// frames carry the trailer, the medium fragment stride and the pull
	// reply length both sides use (Open-MX's build-time sizes for an
	// Open-MX peer).
	crc      bool
	sack     bool // selective acks both ways (sack.go)
	lean     bool // eager messages of one frame through the rings take the lean path (lean.go)
	lane     bool // and tiny and small ones go as lane records (lane.go)
	laneMed  bool // and mediums of one fragment too
	stride   int
	replyLen int
	context  any       // Endpoint.SetAddrContext
	local    localPeer // which endpoint of this process it is (local.go)
	// The rings frames to the peer take, as of the host path's generation
	// ringsGen-1 (rings).
	ringsTr  *shm.Transport
	ringsGen uint64

	// send side
	sendSeq    uint16
	ackPoint   uint16 // the peer acked everything below (lean.go's window)
	unacked    reqList
	waitq      reqList
	ackNumRecv uint32

	// receive side
	recvSeq     uint16 // next to match
	fullSeq     uint16 // everything below is fully received: the ack value
	early       []earlyPkt
	partials    []*partial
	notAcked    int
	ackStale    bool // an obsolete duplicate asked for a (delayed) ack
	owed        bool // in Board.ackOwed: acked when the rings run dry
	stampQ      bool // in Board.toStamp: its ack deadline waits for a time
	ackDeadline int64
	ackNumSent  uint32
	inHandler   bool
	draining    bool
	held        []byte // a lean frame that could not be taken yet (lean.go)

	connecting  reqList
	connAttempt uint8

	probeAt int64 // when the tail-loss probe went out; 0: none since the ack last moved

	// selective acks (sack.go), receive side: frames that arrived past
	// a hole since the last ack or SACK went out, and whether a SACK
	// reported a hole that the ack point has not passed yet.
	oooFrames int
	sackOpen  bool

	rtt  rtt // round-trip estimate of the sequenced stream (rtt.go)
	prtt rtt // and of pulls to the peer: PULL to first PULL_REPLY
}

// pullRTO is the re-request timeout of a pull block from the peer.
func (p *partner) pullRTO(backoff int) int64 {
	b := p.ep.b
	return p.prtt.timeout(int64(b.opts.PullTimeout), b.rtoGran(), p.rtoMin(), int64(b.opts.RTOMax), backoff)
}

// finerThanTick reports whether p's retransmission timeouts can be shorter
// than the board's tick, so that its pending resends and pull re-requests
// need the busy tick (Board.tickBusy) to fire on time (b.mu held). A peer
// on the rings cannot: its floor is the rings' FullWait, a second by
// default (rtoMin), and the tick (at most 10 ms) fires that within 1 %.
// Ticking every tickBusy for it woke the progress goroutine some 16 000
// times a second while a ring peer's messages were in flight, each wake-up
// taken from the application's CPU, to find nothing due.
func (p *partner) finerThanTick() bool {
	return p.rtoMin() < int64(p.ep.b.tick)
}

// rto is the partner's retransmission timeout after backoff doublings,
// fallback until a round trip has been measured (rtt.go).
func (p *partner) rto(fallback time.Duration, backoff int) int64 {
	b := p.ep.b
	return p.rtt.timeout(int64(fallback), b.rtoGran(), p.rtoMin(), int64(b.opts.RTOMax), backoff)
}

// rtoGran is the granularity term of the retransmission timeouts (the G
// of RFC 6298's srtt + max(G, 4*rttvar)): the busy tick, or the time the
// machine may keep the peer descheduled (descheduled.go) if longer.
func (b *Board) rtoGran() int64 {
	return max(int64(b.tickBusy), descheduling.slack())
}

type earlyPkt struct {
	seq  uint16
	data []byte
	lean bool // see recvSequenced
}

func (e *Endpoint) partner(nic transport.NICID, epID uint8, create bool) *partner {
	k := partnerKey{nic, epID}
	if p := e.partners[k]; p != nil || !create {
		return p
	}
	s := uint16(rand.Uint32())
	p := &partner{
		ep: e, nic: nic, epID: epID,
		peerIdx: wire.NoPeerIndex,
		myIdx:   e.b.peerIndex(nic),
		recvSeq: s,
		fullSeq: s,
	}
	p.sizes()
	e.partners[k] = p
	e.plist = append(e.plist, p)
	return p
}

// partnerAt returns the partner for endpoint epID of nic, or nil. It
// remembers the last one found: frames come in runs from one peer, and a
// map lookup hashes the key for every frame. (Partners are never removed,
// so the one remembered stays valid.)
func (e *Endpoint) partnerAt(nic transport.NICID, epID uint8) *partner {
	if p := e.lastP; p != nil && p.nic == nic && p.epID == epID {
		return p
	}
	p := e.partners[partnerKey{nic, epID}]
	if p != nil {
		e.lastP = p
	}
	return p
}

func (p *partner) addr() Addr {
	return Addr{NIC: p.nic, Endpoint: p.epID, Session: p.rsession, p: p}
}

// sizes sets the partner's frame sizes from what its board knows about the
// peer: a gomx peer's frames are cut for the smaller of the two MTUs, with
// room for the trailer when it is on; an Open-MX peer's by Open-MX's rules
// for BoardOptions.OpenMXMTU.
func (p *partner) sizes() {
	b := p.ep.b
	pi := b.peer(p.nic, wire.NoPeerIndex)
	if pi == nil || !pi.gomx {
		p.crc, p.sack, p.lean, p.lane, p.laneMed = false, false, false, false, false
		p.stride, p.replyLen = fragStride(b.omx, false), replyLen(b.omx, false)
		return
	}
	p.crc, p.sack, p.lean, p.lane, p.laneMed = pi.crc, pi.sack, pi.lean, pi.lane, pi.laneMed
	p.stride, p.replyLen = fragStride(pi.maxFrame, p.crc), replyLen(pi.maxFrame, p.crc)
}

// learn takes what a CONNECT request or reply from the peer says.
func (p *partner) learn(h *wire.Connect) {
	p.peerIdx = h.YourIndex
	p.sizes()
}

// ---- send side ----

func (p *partner) enqueue(r *Request) {
	if p.waitq.n > 0 || p.unacked.n >= p.ep.b.opts.MaxUnacked {
		p.waitq.push(r)
		return
	}
	p.transmitNew(r)
}

func (p *partner) transmitNew(r *Request) {
	r.seq = p.sendSeq
	r.firstSend = p.ep.b.now()
	p.sendSeq = seqNext(p.sendSeq)
	p.unacked.push(r)
	p.transmit(r)
	p.ep.b.noteDue(r.lastSend + p.pto(0))
}

func (p *partner) flushWait() {
	for p.waitq.n > 0 && p.unacked.n < p.ep.b.opts.MaxUnacked {
		p.transmitNew(p.waitq.pop())
	}
}

// piggyback returns the ack to carry on an outgoing sequenced packet.
func (p *partner) piggyback() uint16 {
	if p.notAcked > 0 {
		p.ep.cnt[AcksPiggybacked]++
	}
	p.notAcked = 0
	p.ackStale = false
	p.ackDeadline = 0
	return p.fullSeq
}

// transmit sends (or resends) every frame of a sequenced request.
func (p *partner) transmit(r *Request) {
	e := p.ep
	b := e.b
	r.lastSend = b.now()
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	hb := buf[wire.HeadLen:]
	switch r.class {
	case classTiny, classSmall:
		h := wire.Msg{Type: wire.TypeTiny, DstEP: p.epID, SrcEP: e.id, Length: uint16(len(r.buf)),
			Seq: r.seq, Ack: p.piggyback(), Match: r.match, Session: p.rsession}
		c := SendTiny
		if r.class == classSmall {
			h.Type, c = wire.TypeSmall, SendSmall
		}
		h.Put(hb, b.ord)
		copy(hb[wire.MsgLen:], r.buf)
		e.cnt[c]++
		b.sendFrame(p.nic, buf, wire.HeadLen+wire.MsgLen+len(r.buf), p.crc)
	case classMedium:
		p.transmitFrags(r, 0)
	case classLarge:
		reg := &e.regions[r.region]
		h := wire.Rndv{DstEP: p.epID, SrcEP: e.id, Seq: r.seq, Ack: p.piggyback(), Match: r.match,
			Session: p.rsession, MsgLength: r.length, RegionID: uint8(r.region), RegionSeq: reg.seq}
		h.Put(hb, b.ord)
		e.cnt[SendRndv]++
		b.sendFrame(p.nic, buf, wire.HeadLen+wire.RndvLen, p.crc)
	case classNotify:
		h := wire.Notify{DstEP: p.epID, SrcEP: e.id, Session: p.rsession, PulledLength: r.pulled,
			RegionID: r.nRegionID, RegionSeq: r.nRegionSq, Failed: r.nFailed, Seq: r.seq, Ack: p.piggyback()}
		h.Put(hb, b.ord)
		e.cnt[SendNotify]++
		b.sendFrame(p.nic, buf, wire.HeadLen+wire.NotifyLen, p.crc)
	}
}

// applyAck releases every unacked request below ack.
func (p *partner) applyAck(ack uint16) {
	if !sameSess(ack, p.sendSeq) {
		return
	}
	if d := seqDiff(ack, p.sendSeq); d != 0 && d < seqHalf {
		return // acks something never sent
	}
	if seqBefore(p.ackPoint, ack) || !sameSess(p.ackPoint, ack) {
		p.ackPoint = ack
	}
	for r := p.unacked.head; r != nil && seqBefore(r.seq, ack); r = p.unacked.head {
		p.probeAt = 0
		if r.resends == 0 && !r.nacked && r.class != classLarge {
			// Karn: only a request sent once times the round trip. (A
			// RNDV's ack may wait for the receive to be posted.)
			p.rtt.sample(p.ep.b.now() - r.lastSend)
		}
		p.unacked.remove(r)
		p.acked(r)
	}
	p.flushWait()
}

func (p *partner) acked(r *Request) {
	e := p.ep
	r.acked = true
	switch r.class {
	case classLarge:
		return // waits for the NOTIFY
	case classNotify:
		r.protoHeld = false
	default:
		r.protoHeld = false
		if r.zombie {
			e.zombies--
		} else {
			e.complete(r, nil)
		}
	}
	e.b.maybeFree(r)
}

// resendDue handles the unacked requests whose timeout expired. The first
// expiry since the ack last moved sends a tail-loss probe only: the last
// frame of the newest unacked request, which the receiver answers with an
// immediate ack if it has everything (the usual case when its ack was only
// delayed) and which completes a message whose last frame was lost. The
// probe goes out a probe timeout (pto) after the newest request was sent,
// or when any request reaches its RTO, whichever is first. A round trip
// (RTO) after the probe, what is still overdue is resent in full, each
// request after the partner's RTO doubled for every earlier resend of it.
// A request unacked for ResendDelay*(its resend limit+1) since its first
// send makes the partner unreachable, however the backoff went. Only the
// probe's deadline (and SACK holes', sack.go) is noted for the fine timer
// (finetimer.go): a spurious probe costs one frame, but a full resend
// fired by a precise timer whenever a loaded machine stalls the peer past
// RTOMin costs the whole message, so those keep the board's ticks.
func (p *partner) resendDue(now int64) {
	b := p.ep.b
	if p.unreachable(now) {
		return
	}
	if p.sack {
		p.sackResend(now)
	}
	if p.probeAt == 0 {
		t := p.probeTarget()
		// The fine timer (finetimer.go) keeps this deadline.
		if due := t.lastSend + p.pto(t.resends); now < due {
			b.noteDue(due)
		} else {
			p.probe(now)
			return
		}
	}
	k := 0
	for r := p.unacked.head; r != nil && k < resendBurst; r = r.qnext {
		if r != p.unacked.head && p.sackedWhole(r) {
			// The receiver has it: only the cumulative ack is missing.
			// (Never the oldest: the receiver holds what it reported
			// until it delivers it, but a receive that cannot take a
			// message (unexpected queue full) drops it then, and the
			// oldest is where the ack point stops.)
			continue
		}
		if now-r.lastSend < p.rto(b.opts.ResendDelay, r.resends) {
			continue
		}
		if p.probeAt == 0 {
			p.probe(now)
			return
		}
		if now-p.probeAt < p.rto(b.opts.ResendDelay, 0) {
			return
		}
		r.resends++
		r.sackHole, r.sackHeld = false, 0 // in full: what a SACK said may be stale
		p.ep.cnt[Resends]++
		p.ep.cnt[TimerRetransmits]++
		p.transmit(r)
		k++
	}
}

// unreachable resets the partner, failing its requests with
// ErrUnreachable, if an unacked request has waited ResendDelay*(its
// resend limit+1) since its first send. It also reports true, leaving
// everything as it is, when that verdict waits for a drain of the
// sources (verdict.go).
func (p *partner) unreachable(now int64) bool {
	b := p.ep.b
	for r := p.unacked.head; r != nil; r = r.qnext {
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

// probeTarget is the request the tail-loss probe resends the last frame
// of: the newest unacked one the receiver does not hold whole.
func (p *partner) probeTarget() *Request {
	t := p.unacked.tail
	for t.qprev != nil && p.sackedWhole(t) {
		t = t.qprev
	}
	return t
}

// probe sends the tail-loss probe (see resendDue).
func (p *partner) probe(now int64) {
	t := p.probeTarget()
	p.probeAt = now
	t.resends++ // its ack no longer times a round trip (Karn)
	p.ep.cnt[TailProbes]++
	p.transmitLast(t)
}

// pto is the tail-loss probe timeout after backoff doublings: twice the
// smoothed round trip (RACK-TLP's choice) or srtt + 4*rttvar, whichever is
// longer, so a wire whose round trips vary (a loaded machine stalling
// the peer) does not probe every slow message, and at least srtt plus the
// receiver's delay of a tail's ack (tailAckDelay) plus the time the
// machine may keep the peer descheduled (descheduled.go); at least half
// of RTOMin and at most the RTO. Before the first measurement it is the
// RTO.
func (p *partner) pto(backoff int) int64 {
	b := p.ep.b
	rto := p.rto(b.opts.ResendDelay, backoff)
	if !p.rtt.ok || p.rtoMin() > int64(b.opts.RTOMin) { // no probes through shared memory (host.go)
		return rto
	}
	t := max(2*p.rtt.srtt, p.rtt.srtt+4*p.rtt.rttvar, p.rtt.srtt+b.tailAckDelay()+descheduling.slack(), int64(b.opts.RTOMin)/2)
	for i := 0; i < backoff && t < rto; i++ {
		t *= 2
	}
	return min(t, rto)
}

// transmitFrags sends the fragments of a medium request whose bit in
// skip is clear (all of them for skip 0), in one batch.
func (p *partner) transmitFrags(r *Request, skip uint32) {
	e := p.ep
	b := e.b
	r.lastSend = b.now()
	stride := p.stride
	h := wire.Medium{DstEP: p.epID, SrcEP: e.id, MsgLength: r.length, Seq: r.seq, Ack: p.piggyback(),
		Match: r.match, Session: p.rsession}
	lens := b.lens[:0]
	for i, off := 0, 0; off < len(r.buf); i, off = i+1, off+stride {
		if i < 32 && skip&(1<<i) != 0 {
			continue
		}
		n := min(stride, len(r.buf)-off)
		fb := b.batchBuf(len(lens))
		wire.PutPeerIndex(fb, p.peerIdx, b.ord)
		h.FragIndex, h.FragLength = uint8(i), uint16(n)
		h.Put(fb[wire.HeadLen:], b.ord)
		copy(fb[wire.HeadLen+wire.MediumLen:], r.buf[off:off+n])
		lens = append(lens, wire.HeadLen+wire.MediumLen+n)
	}
	e.cnt[SendMediumFrag] += uint64(len(lens))
	b.sendBatch(p.nic, lens, p.crc)
	b.lens = lens[:0]
}

// transmitMissing resends what the receiver's latest SACK says it lacks
// of r: the missing fragments of a medium, the whole of anything else.
func (p *partner) transmitMissing(r *Request) {
	if r.class == classMedium && p.sack && r.sackHeld != 0 {
		p.transmitFrags(r, r.sackHeld)
		return
	}
	p.transmit(r)
}

// transmitLast sends the last frame of a sequenced request again: the
// last fragment of a medium, the only frame of the others.
func (p *partner) transmitLast(r *Request) {
	if r.class != classMedium || len(r.buf) <= p.stride {
		p.transmit(r)
		return
	}
	e := p.ep
	b := e.b
	r.lastSend = b.now()
	i := (len(r.buf) - 1) / p.stride
	off := i * p.stride
	n := len(r.buf) - off
	h := wire.Medium{DstEP: p.epID, SrcEP: e.id, MsgLength: r.length, Seq: r.seq, Ack: p.piggyback(),
		Match: r.match, Session: p.rsession, FragIndex: uint8(i), FragLength: uint16(n)}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	h.Put(buf[wire.HeadLen:], b.ord)
	copy(buf[wire.HeadLen+wire.MediumLen:], r.buf[off:])
	e.cnt[SendMediumFrag]++
	b.sendFrame(p.nic, buf, wire.HeadLen+wire.MediumLen+n, p.crc)
}

// failSend completes a send-side request with code and drops it.
func (p *partner) failSend(r *Request, code error) {
	e := p.ep
	if r.region >= 0 {
		e.freeRegion(r.region)
		r.region = -1
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
	for r := e.pullq.head; r != nil; {
		next := r.qnext
		if r.p == p {
			e.pullq.remove(r)
			e.complete(r, code)
		}
		r = next
	}
	for r := e.resq.head; r != nil; {
		next := r.qnext
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
	p.setSendSeq(bumpSess(p.sendSeq))
	p.recvSeq = bumpSess(p.recvSeq)
	p.fullSeq = p.recvSeq
	// A pending connect announces the new session from its next resend
	// on, as a new attempt: the peer resets its side for us when it sees
	// the announcement change, so a reply to an earlier announcement
	// (which may come first) carries numbers the peer no longer uses, and
	// a connect completed by it would send into a session the peer left.
	for r := p.connecting.head; r != nil; r = r.qnext {
		p.connAttempt++
		r.attempt = p.connAttempt
	}
	p.notAcked = 0
	p.ackDeadline = 0
	p.oooFrames, p.sackOpen = 0, false
	p.dead = true
}

// ---- acks ----

func (p *partner) sendAck() {
	e := p.ep
	b := e.b
	p.ackNumSent++
	h := wire.Truc{DstEP: p.epID, SrcEP: e.id, Session: p.rsession, AckUpTo: p.fullSeq,
		AckNum: p.ackNumSent, SendSeq: p.sendSeq}
	if p.sack {
		p.buildSack(&h.Sack)
		if h.HasSack = h.Sack.N > 0; h.HasSack {
			e.cnt[SacksSent]++
		}
	}
	buf := b.frameBuf()
	wire.PutPeerIndex(buf, p.peerIdx, b.ord)
	h.Put(buf[wire.HeadLen:], b.ord)
	e.cnt[SendTruc]++
	b.sendFrame(p.nic, buf, wire.HeadLen+h.Len(), p.crc)
	p.notAcked = 0
	p.ackStale = false
	p.ackDeadline = 0
}

// noteReceived records that the full-receive point moved: ack now after
// NotAckedMax messages, else after tailAckDelay; for a tiny or small
// message, or one that came by the lean path (lean), from a peer reached
// through the rings, after ringAcks messages, else after ringAckDelay.
func (p *partner) noteReceived(lean bool) {
	b := p.ep.b
	p.notAcked++
	every, delay := b.opts.NotAckedMax, b.tailAckDelay()
	rings := lean && p.rings() != nil
	if rings {
		every, delay = b.ringAcks(), min(int64(b.opts.AckDelay), int64(ringAckDelay))
	}
	if p.notAcked >= every {
		p.ep.cnt[AcksImmediate]++
		p.sendAck()
		return
	}
	if rings && p.notAcked >= b.opts.NotAckedMax && !p.owed {
		p.owed = true
		b.ackOwed = append(b.ackOwed, p)
	}
	if p.ackDeadline == 0 {
		if rings && !b.nowOK {
			// No clock read for this batch yet: the deadline waits for
			// the next one (stampAcks). In a ping-pong every message
			// starts a deadline that the reply's piggyback clears, and
			// the reading was a tenth of such a message's cost.
			p.ackDeadline = ackUnstamped
			if !p.stampQ {
				p.stampQ = true
				b.toStamp = append(b.toStamp, p)
			}
			return
		}
		p.ackDeadline = b.now() + delay
		b.noteDue(p.ackDeadline) // the fine timer keeps it (finetimer.go)
	}
}

// tailAckDelay is how long a receiver on a wire waits for a reply to carry
// its ack before it sends one (the sender's tail-loss probe waits at least
// that long past the round trip, pto): a quarter of RTOMin, at most
// AckDelay. Open-MX waits its AckDelay, milliseconds, for the next
// messages to ack together; but a sender whose stream paused then probed
// the tail of every burst, a frame and a duplicate each, where one ack a
// few tens of microseconds later does. A reply sent sooner still carries
// the ack, and a stream is acked every NotAckedMax messages.
func (b *Board) tailAckDelay() int64 {
	return min(int64(b.opts.AckDelay), int64(b.opts.RTOMin)/4)
}

// ackUnstamped is the ack deadline of a ring peer whose messages a waiter
// handled without reading the clock (noteReceived): never due until
// stampAcks gives it a time.
const ackUnstamped = math.MaxInt64

// stampAcks gives the unstamped ack deadlines of ring peers (noteReceived)
// their time, counted from now: the clock of the next timer check
// (timersLocked), which the receive loop makes at least every spinGrace
// while waiters poll the rings (BoardOptions.BusyPoll: pollGrace), and a
// polling waiter when a tick is due (pollSource). So a ring peer's delayed
// ack goes out at most that much later than ringAckDelay after the
// message. Called with b.mu held.
func (b *Board) stampAcks(now int64) {
	for i, p := range b.toStamp {
		b.toStamp[i], p.stampQ = nil, false
		if p.ackDeadline == ackUnstamped {
			p.ackDeadline = now + min(int64(b.opts.AckDelay), int64(ringAckDelay))
			b.noteDue(p.ackDeadline) // the fine timer keeps it (finetimer.go)
		}
	}
	b.toStamp = b.toStamp[:0]
}

// Acks between peers of one host. The rings are reliable and keep order:
// they lose a frame only when its receiver made no progress for their
// FullWait, and then the sender's timeouts (rtoMin, at least that long)
// and the transport take over. An ack to such a peer never saves a
// resend; it only lets the sender release its requests and complete the
// sends that wait for it (beyond ZombieSends, or with a full MaxUnacked
// window). A receiver that falls behind a stream finds many messages of a
// peer in each batch it takes from the rings, and acking each NotAckedMax
// of them spends a frame on both sides for nothing: the sender is still
// sending. So, when nothing carried the ack back sooner (a reply
// piggybacks it, as everywhere), a receiver acks tiny and small messages
// of a peer on the rings after ringAcks messages, or, once it has NotAckedMax unacked ones, when
// a receive finds the rings drained (ackDrained): the sender has nothing
// more in flight, and may be waiting for this very ack (a busy sender
// handles acks only when it waits, so its ZombieSends run out). Fewer
// than NotAckedMax are acked ringAckDelay (or AckDelay if shorter) after
// the first: a sender that waits for its ack waits at most about a poll
// window's cap, not AckDelay's 16ms. Medium messages that keep the
// sequenced path (several fragments) keep NotAckedMax: the sender keeps
// each one's payload copy until its ack, and 64 of them would crowd its
// cache for one frame saved per 4 messages of several frames each;
// measured, the difference was lost in noise. One that took the lean path
// (lean.go) left no copy behind, and is acked as a tiny one.
const (
	ringAcksMax  = 64
	ringAckDelay = DefaultSpinMax
)

// ackDrained acks the partners on the rings that reached NotAckedMax
// unacked messages (noteReceived), now that a receive found its source
// drained. Called with b.mu held.
func (b *Board) ackDrained() {
	for i, p := range b.ackOwed {
		b.ackOwed[i], p.owed = nil, false
		if p.notAcked >= b.opts.NotAckedMax && !p.ep.closed {
			p.ep.cnt[AcksImmediate]++
			p.sendAck()
		}
	}
	b.ackOwed = b.ackOwed[:0]
}

// ringAcks is how many messages from a peer on the rings make the
// receiver ack at once: ringAcksMax, less when the board's own windows
// (MaxUnacked, ZombieSends; a peer's are mostly the same) are smaller, so
// a sender never waits for a full window's ack; at least NotAckedMax.
func (b *Board) ringAcks() int {
	n := min(ringAcksMax, b.opts.MaxUnacked/2)
	if b.opts.ZombieSends > 0 {
		n = min(n, b.opts.ZombieSends/2)
	}
	return max(n, b.opts.NotAckedMax)
}

// updateFull moves the full-receive point past what arrived whole; lean:
// the message that moved it was tiny or small, or came by the lean path
// (see noteReceived).
func (p *partner) updateFull(lean bool) {
	old := p.fullSeq
	if len(p.partials) > 0 {
		p.fullSeq = p.partials[0].seq
	} else {
		p.fullSeq = p.recvSeq
	}
	if p.fullSeq != old && !p.fullMoved() {
		p.noteReceived(lean)
	}
}

// ---- receive side ----

// seqFields reads seq and piggybacked ack of a verified sequenced packet.
func seqFields(h []byte, o wire.Order) (seq, ack uint16) {
	off := 8
	if wire.Type(h[0]) == wire.TypeNotify {
		off = 18
	}
	return u16(h[off:], o), u16(h[off+2:], o)
}

func u16(b []byte, o wire.Order) uint16 {
	if o == wire.LittleEndian {
		return uint16(b[1])<<8 | uint16(b[0])
	}
	return uint16(b[0])<<8 | uint16(b[1])
}

// recvSequenced handles a verified TINY, SMALL, MEDIUM, RNDV or NOTIFY frame
// (peer index included) from this partner. lean: it is an eager message
// of one frame (tiny, small, a one-fragment medium) that came through the
// rings from a partner on the lean path,
// which never resends it: it is held, never dropped, when it cannot be
// taken yet (lean.go). msg is f's header when it was decoded already (a
// tiny or small message), else nil.
func (p *partner) recvSequenced(f []byte, lean bool, msg *wire.Msg) {
	e := p.ep
	h := f[wire.HeadLen:]
	typ := wire.Type(h[0])
	seq, ack := seqFields(h, e.b.ord)
	p.applyAck(ack)
	if !sameSess(seq, p.recvSeq) {
		e.cnt[DropBadSeq]++
		return
	}
	d := seqDiff(seq, p.recvSeq)
	switch {
	case d == 0:
		if p.inHandler || p.held != nil {
			// The message being handled, or the one held (lean.go),
			// again.
			e.cnt[DupMessages]++
			e.cnt[DupReceived]++
			return
		}
		if !p.deliver(f, lean, msg) {
			if lean {
				p.hold(f)
			}
			return
		}
		p.recvSeq = seqNext(p.recvSeq)
		p.updateFull(lean || typ == wire.TypeTiny || typ == wire.TypeSmall)
		if len(p.partials) > 0 && p.partials[0].seq != seq {
			p.outOfOrder() // an earlier medium is still missing fragments
		}
		p.drainEarly()
	case d < seqHalf:
		// A lean frame is never past the window (its sender keeps
		// fewer in flight) and is kept whatever the count: it is never
		// resent.
		if d > earlyWindow || (len(p.early) >= earlyMax && !lean) {
			e.cnt[DropEarlyFull]++
			return
		}
		for _, x := range p.early {
			if x.seq == seq && sameFrag(x.data, f) {
				e.cnt[DupFrags]++
				e.cnt[DupReceived]++
				p.outOfOrder()
				return
			}
		}
		e.cnt[EarlyStored]++
		p.early = append(p.early, earlyPkt{seq: seq, data: append(e.b.getBuf(), f...), lean: lean})
		p.outOfOrder()
	default:
		if typ == wire.TypeMedium {
			for _, pt := range p.partials {
				if pt.seq == seq {
					p.addFrag(pt, f)
					return
				}
			}
		}
		e.cnt[DupMessages]++
		e.cnt[DupReceived]++
		e.cnt[ObsoleteDropped]++
		if seqDiff(p.fullSeq, seq) == 1 {
			// The previous packet again: our ack was probably lost (Open-MX
			// acks at once only then).
			e.cnt[AcksImmediate]++
			p.sendAck()
		} else if p.ackDeadline == 0 {
			// An older one: ack after AckDelay, once however many come, so
			// a flood of stale frames cannot make us flood acks.
			p.ackStale = true
			p.ackDeadline = e.b.now() + int64(e.b.opts.AckDelay)
		}
	}
}

// sameFrag reports whether two stored frames are the same packet (for
// mediums: the same fragment).
func sameFrag(a, b []byte) bool {
	ha, hb := a[wire.HeadLen:], b[wire.HeadLen:]
	if ha[0] != hb[0] {
		return false
	}
	if wire.Type(ha[0]) == wire.TypeMedium {
		return ha[26] == hb[26]
	}
	return true
}

// drainEarly processes stored packets that became deliverable.
func (p *partner) drainEarly() {
	if p.draining {
		return
	}
	p.draining = true
	for {
		i := -1
		for j, x := range p.early {
			if isBehindOrEqual(x.seq, p.recvSeq) || !sameSess(x.seq, p.recvSeq) {
				i = j
				break
			}
		}
		if i < 0 {
			break
		}
		x := p.early[i]
		p.early = append(p.early[:i], p.early[i+1:]...)
		if sameSess(x.seq, p.recvSeq) {
			p.recvSequenced(x.data, x.lean, nil)
		}
		p.ep.b.putBuf(x.data)
	}
	p.draining = false
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

func (b *Board) handleTruc(nic transport.NICID, h *wire.Truc) {
	e := b.endpointFor(nic, h.DstEP, h.SrcEP, h.Session, 0, false)
	if e == nil {
		return
	}
	e.cnt[RecvTruc]++
	p := e.partnerAt(nic, h.SrcEP)
	if p == nil {
		e.cnt[DropNoPartner]++
		return
	}
	if !sameSess(h.AckUpTo, p.sendSeq) {
		e.cnt[DropStaleAck]++
		return
	}
	if h.AckNum <= p.ackNumRecv {
		e.cnt[DropStaleAck]++
		return
	}
	p.ackNumRecv = h.AckNum
	p.applyAck(h.AckUpTo)
	if h.HasSack && p.sack {
		p.onSack(&h.Sack)
	}
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
		for r := p.unacked.head; r != nil; r = r.qnext {
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
	if r := p.connecting.head; r != nil && h.Kind != wire.NackBadSession {
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

// ---- connect ----

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
	x.Flags |= wire.ExtRingLean   // lean.go
	if !b.opts.Local.NoLane {
		x.Flags |= wire.ExtRingLane | wire.ExtRingLaneMedium // lane.go
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
	for r = p.connecting.head; r != nil && r.attempt != h.Attempt; r = r.qnext {
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

// timers runs the endpoint's periodic duties: delayed acks, resends,
// connect resends and pull timeouts. It reports whether any of them is
// still pending (so the board keeps its fine timer period).
func (e *Endpoint) timers() bool {
	b := e.b
	now := b.now()
	busy := false
	for _, p := range e.plist {
		if (p.notAcked > 0 || p.ackStale) && p.ackDeadline != 0 {
			switch {
			case now >= p.ackDeadline:
				e.cnt[AcksDelayed]++
				p.sendAck()
			case p.notAcked > 0:
				b.noteDue(p.ackDeadline) // a short delay (noteReceived)
			}
		}
		if p.unacked.n > 0 {
			p.resendDue(now)
			busy = busy || p.unacked.n > 0 && p.finerThanTick()
		}
		if p.held != nil {
			busy = true // retried after the timer pass (Board.retryHeld)
		}
		for r := p.connecting.head; r != nil; {
			next := r.qnext
			if now-r.lastSend >= int64(b.opts.ResendDelay) {
				switch {
				case r.resends < e.resendLimit(r):
					r.resends++
					e.cnt[ConnectResends]++
					p.sendConnect(r)
				case b.mayDeclare(): // verdict.go
					p.connecting.remove(r)
					e.cnt[Unreachable]++
					e.complete(r, ErrUnreachable)
				}
			}
			r = next
		}
	}
	for _, pl := range e.pulls {
		if pl != nil {
			pl.timer(now)
			busy = busy || pl.p.finerThanTick()
		}
	}
	e.notifyTimeouts(now) // largefail.go
	if e.resq.n > 0 {
		e.kickSends()
	}
	return busy
}
