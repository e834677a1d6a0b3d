package mx

import (
	"math/rand/v2"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Per-partner reliability: the sequenced stream between two endpoints. This
// file holds the sequence numbers, the partner record, sending a sequenced
// request and applying the acks that come back, and receiving in order:
// duplicates dropped, frames ahead of a hole kept in the early-packet window
// until it fills. proto.go delivers the packets this file has put in order.
//
// How a lost or duplicated frame is detected and comes back is spread by
// subject over its neighbours:
//   - connect.go: the CONNECT handshake that opens a session;
//   - ack.go: explicit acks (TRUC) and when a receiver sends one;
//   - sack.go: selective acks and the fast retransmit of holes;
//   - resend.go: the RTO, the tail-loss probe, timer resends, and the
//     endpoint's periodic duties;
//   - rtt.go: the round-trip estimate the timeouts are built on;
//   - descheduled.go: the allowance for a peer the scheduler keeps waiting;
//   - finetimer.go: the timer that fires probes to the microsecond;
//   - giveup.go: the verdicts on a peer (unreachable, NACK_LIB) and
//     failing its requests;
//   - verdict.go, liveness.go, peerloss.go: when a verdict may be given,
//     how silence is timed, a peer the transport saw go;
//   - large.go, largefail.go: pulls of large messages and how they end.

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
	// The fields an 8-byte message through a lane or the lean path
	// touches, send side and receive side, come first, on four cache
	// lines (TestHotLines); spread over the struct, as a reader
	// would group them, they took seven.
	ep       *Endpoint
	nic      transport.NICID
	rsession uint32 // the remote endpoint's session
	epID     uint8
	rknown   bool
	dead     bool // reset after unreachable: sends fail until a new connect
	// What the connect exchange said about the peer's board (the rest
	// below, with crc).
	lean    bool // eager messages of one frame through the rings take the lean path (lean.go)
	lane    bool // and tiny and small ones go as lane records (lane.go)
	laneMed bool // and mediums of one fragment too
	// receive side's flags
	inHandler bool
	ackStale  bool   // an obsolete duplicate asked for a (delayed) ack
	owed      bool   // in Board.ackOwed: acked when the rings run dry
	endAck    bool   // in Board.ackEnds: acked as the batch ends (ackLarge)
	ackLazy   bool   // only lane records wait for the ack: its deadline is AckDelay's (ackLane)
	stampQ    bool   // in Board.toStamp: its ack deadline waits for a time
	sackOpen  bool   // selective acks: see oooFrames
	pulled    bool   // a PULL went to it while a message of its was delivered (ackPull, for a RNDV's)
	peerIdx   uint16 // what to put in the head of frames to this peer
	// send side
	sendSeq  uint16
	ackPoint uint16 // the peer acked everything below (lean.go's window)
	// receive side
	recvSeq     uint16 // next to match
	fullSeq     uint16 // everything below is fully received: the ack value
	notAcked    int
	ackDeadline int64
	// selective acks (sack.go), receive side: frames that arrived past
	// a hole since the last ack or SACK went out, and (sackOpen) whether
	// a SACK reported a hole that the ack point has not passed yet.
	oooFrames int
	// The rings frames to the peer take, as of the board's reachGen
	// ringsGen (rings).
	ringsTr  *shm.Transport
	ringsGen uint64
	local    localPeer // which endpoint of this process it is (local.go)
	unacked  reqList
	waitq    reqList
	early    []earlyPkt
	partials []*partial
	held     []byte // a lean frame that could not be taken yet (lean.go)
	rttSkip  int    // acks since the last one that gave a round-trip sample (sampleRTT)
	probeAt  int64  // when the tail-loss probe went out; 0: none since the ack last moved
	stride   int    // the medium fragment stride, from the connect exchange

	myIdx uint16 // our board's index of the peer (sent in CONNECT)
	// The lost peers (Board.lost) of generation lostGen that were known
	// when this session began: the first lostSkip (peerloss.go).
	lostSkip int
	lostGen  uint64
	// What the connect exchange said about the peer's board: whether
	// frames carry the trailer, the medium fragment stride (above) and
	// the pull reply length both sides use (Open-MX's build-time sizes
	// for an Open-MX peer).
	crc       bool
	sack      bool // selective acks both ways (sack.go)
	replyPad  bool // the peer pads the pull replies a PULL asks it to (placerecv.go)
	replyLane bool // the peer sends the pull replies a PULL asks for to a lane (placerecv.go)
	pullAlign bool // the peer cuts a pull from its end when a PULL asks (placerecv.go)
	replyLen  int
	context   any // Endpoint.SetAddrContext

	ackNumRecv  uint32 // send side
	ackNumSent  uint32
	draining    bool
	connecting  reqList
	connAttempt uint8

	// asking a late peer (ask.go): whether it announced ExtAsk, when the
	// newest question went out while its answer has not come (0: none),
	// and how many questions went out since the ack point last moved.
	// askAgain: the outstanding question's number was asked before
	// (askNumber gave no fresh one), so askAt is its first copy's time.
	ask      bool
	askAt    int64
	asks     uint8
	askAgain bool
	// asked numbers the questions to the peer (ask.go), its pulls' too:
	// the last one's; a question's tag is its number's low four bits.
	// answered is the number of the last question known answered (or
	// skipped: askNumber), and askNum the outstanding question's about
	// the stream. The peer answers each at once, in order, so
	// asked-answered answers are on their way (less any lost), each a
	// frame no pull asked for (placerecv.go).
	asked, answered uint64
	askNum          uint64
	// copies are the questions asked again, by tag (askCopy), while
	// their copies' answers may still come.
	copies [askWindow]askCopies
	// refused counts askNumber's refusals in a row (every tag retired).
	refused int
	// lastAsk is when the last question about the stream went out.
	lastAsk int64
	// lastPulled is when the peer last pulled a region of a send of
	// ours (a PULL served; 0: never): no question about the stream goes
	// out sooner than the stream's RTO, or askWait if longer, after it
	// (ask.go's askDue).
	lastPulled int64

	// Send side of selective acks: whether a request in unacked may have
	// a sackHeld that the next TRUC must confirm or forget (onSack).
	sackKnown bool

	rtt  rtt // round-trip estimate of the sequenced stream (rtt.go)
	prtt rtt // and of pulls to the peer: PULL to first PULL_REPLY
	// plate is how late the peer's pull replies have come lately
	// (ask.go, askDue): the longest silences of its pulls that a reply
	// asked for once ended, which lost nothing (one asked for again
	// ends a silence a loss made, and is not counted, so the waits it
	// sets do not feed on themselves).
	plate schedDelay
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
// looks in a small direct-mapped cache of the partners found before
// (pcache) first: frames come in runs from one peer, or, in a
// collective, from each of a few peers in turn, and a map lookup hashes
// the struct key for every frame (an 8-rank alltoall's receiver, whose
// peers take turns, missed a cache of one at nearly every frame).
// Partners are never removed, so the ones remembered stay valid.
func (e *Endpoint) partnerAt(nic transport.NICID, epID uint8) *partner {
	i := pcacheSlot(nic, epID)
	if p := e.pcache[i]; p != nil && p.nic == nic && p.epID == epID {
		return p
	}
	p := e.partners[partnerKey{nic, epID}]
	if p != nil {
		e.pcache[i] = p
	}
	return p
}

// pcacheLen is the number of slots of an endpoint's partner cache
// (partnerAt): a power of two.
const pcacheLen = 32

// pcacheSlot is the partner cache's slot for endpoint epID of nic: a
// multiplicative hash of the two, so that NICs that differ in a few bits
// (the ports of a node's processes) spread.
func pcacheSlot(nic transport.NICID, epID uint8) uint {
	return uint((uint64(nic)<<8|uint64(epID))*0x9E3779B97F4A7C15>>59) & (pcacheLen - 1)
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
		p.crc, p.sack, p.lean, p.lane, p.laneMed, p.replyPad, p.ask, p.replyLane = false, false, false, false, false, false, false, false
		p.pullAlign = false
		p.stride, p.replyLen = fragStride(b.omx, false), replyLen(b.omx, false)
		return
	}
	p.crc, p.sack, p.lean, p.lane, p.laneMed, p.replyPad, p.ask = pi.crc, pi.sack, pi.lean, pi.lane, pi.laneMed, pi.replyPad, pi.ask
	p.replyLane, p.pullAlign = pi.replyLane, pi.pullAlign
	p.stride, p.replyLen = fragStride(pi.maxFrame, p.crc), replyLen(pi.maxFrame, p.crc)
}

// ---- send side ----

func (p *partner) enqueue(r *Request) {
	if p.waitq.Len() > 0 || p.unacked.Len() >= p.ep.b.opts.MaxUnacked {
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
	p.ep.b.wakeTicks() // progress.go
	p.transmit(r)
	p.noteTail(r) // ask.go
}

// flushWait transmits the sends waiting for room in p's window while
// there is room. Inlined where an ack is applied, with the loop out of line
// (flushWaiting): there is mostly nothing waiting.
func (p *partner) flushWait() {
	if p.waitq.Len() > 0 {
		p.flushWaiting()
	}
}

// flushWaiting is flushWait once sends wait.
func (p *partner) flushWaiting() {
	for p.waitq.Len() > 0 && p.unacked.Len() < p.ep.b.opts.MaxUnacked {
		p.transmitNew(p.waitq.pop())
	}
}

// piggyback returns the ack to carry on an outgoing sequenced packet.
func (p *partner) piggyback() uint16 {
	if p.notAcked > 0 {
		p.ep.lanes.piggybacked++
	}
	p.notAcked = 0
	p.ackStale = false
	p.ackDeadline = 0
	p.ackLazy = false
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
		e.copies.framedLocked(len(r.buf))
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
	for r := p.unacked.Front(); r != nil && seqBefore(r.seq, ack); r = p.unacked.Front() {
		p.probeAt, p.asks = 0, 0 // an outstanding question's answer still counts (ask.go)
		if r.resends == 0 && !r.nacked && r.class != classLarge && r.lastSend > p.lastAsk && r.lastSend != sendUnstamped {
			// Karn: only a request sent once times the round trip, and
			// not one sent before a question (ask.go), whose ack may
			// have waited for an earlier one's recovery. (A RNDV's ack
			// may wait for the receive to be posted.)
			p.sampleRTT(r.lastSend) // progress.go
		}
		p.unacked.remove(r)
		p.acked(r)
	}
	p.flushWait()
}

// The ack a PULL gives a rendezvous.
//
// A receiver pulls a region only once it delivered the RNDV that named
// it, and it delivers one sender's messages in sequence order: a message
// is delivered when its turn comes (recvSeq reaches it) or not at all
// (dropped, and resent later), and once delivered it is never dropped.
// So a PULL for a region of r, a large send of p's whose RNDV is still
// unacked, proves the receiver holds that RNDV, and every message sent
// before it, for good: each of one frame whole, a medium of several
// fragments at least in part (its first fragment delivered it; the rest
// may still be missing). The cumulative ack point cannot move on that:
// it would release a medium the receiver holds in part, whose missing
// fragments then never come. What a PULL gives is less: r, and the
// messages of one frame sent before it, leave the unacked list as an ack
// would release them (pulledAck), so no question, tail-loss probe or
// timer resends them; a medium of several fragments sent before r stays
// until the cumulative ack passes it. The ack the receiver owes still
// comes, on a TRUC or on the NOTIFY that ends the pull (every sequenced
// frame carries it), and releases the rest. This is the sender's own
// bookkeeping, whatever the peer (an Open-MX one too): no frame it sends
// changes; only the questions, probes and resends it would have sent for
// these messages are not sent. A NOTIFY proves the same (gotNotify).
//
// Where it counts: a PULL can come ahead of the RNDV's ack (the TRUC
// that acked it beside the first PULLs, ackPull, was lost; or the RNDV's
// pull waited for room, and its ack is the delayed one, due after the
// first PULLs went out). The sender would otherwise ask about the RNDV,
// its newest unacked message, once askWait passed, and again at each
// doubled wait until an answer came; on a receiver that places on lane 0
// (placerecv.go) each question takes a descriptor ahead of the spans
// posted, and a window of replies lands a span late. A question that went
// out before the first PULL came is not saved: nothing had shown the RNDV
// held yet.

// pulledAck releases r, a large send whose region p's receiver pulled
// (or notified), and the unacked requests of one frame sent before it
// (see above); nothing when r is not unacked (acked already, or a
// duplicate PULL). Counted as PulledAcks, one per request released.
func (p *partner) pulledAck(r *Request) {
	if !p.unacked.has(r) {
		return
	}
	for q := p.unacked.Front(); q != nil; {
		next := q.q.Next()
		if q == r || p.fragMask(q) == 1 { // one frame: delivered whole
			p.probeAt, p.asks = 0, 0 // as applyAck: the peer progressed
			p.unacked.remove(q)
			p.ep.cnt[PulledAcks]++
			p.acked(q)
		}
		if q == r {
			break
		}
		q = next
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
		e.copies.framedLocked(n)
		lens = append(lens, wire.HeadLen+wire.MediumLen+n)
	}
	e.cnt[SendMediumFrag] += uint64(len(lens))
	b.sendBatch(p.nic, lens, p.crc)
	b.lens = lens[:0]
}

// transmitMissing resends r but the fragments in skip: a medium's other
// fragments, the whole of anything else.
func (p *partner) transmitMissing(r *Request, skip uint32) {
	if r.class == classMedium && p.sack && skip != 0 {
		p.transmitFrags(r, skip)
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
	e.copies.framedLocked(n)
	e.cnt[SendMediumFrag]++
	b.sendFrame(p.nic, buf, wire.HeadLen+wire.MediumLen+n, p.crc)
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
	// A lane record's (recvLane) for this frame only: not for the early
	// frames it lets through (drainEarly).
	laneRec := e.b.laneRec
	e.b.laneRec = false
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
		p.pulled = false
		if !p.deliver(f, lean, msg) {
			if lean {
				p.hold(f)
			}
			return
		}
		p.recvSeq = seqNext(p.recvSeq)
		c := ackSeq
		switch {
		case p.pulled && typ == wire.TypeRndv:
			c = ackPull // a RNDV whose pull started: acked beside its PULLs
		case typ == wire.TypeRndv || typ == wire.TypeNotify:
			c = ackLarge // a RNDV delivered unpulled, a NOTIFY: acked as the batch ends
		case laneRec:
			c = ackLane // recvLane: a lane record, rebuilt as its frame
		case lean || typ == wire.TypeTiny || typ == wire.TypeSmall:
			c = ackSmall
		}
		p.updateFull(c)
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
			e.b.wakeTicks() // progress.go
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
