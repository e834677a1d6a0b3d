package mx

import (
	"math"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// Acks of the sequenced stream: the explicit ack (a TRUC frame) and when a
// receiver sends one (at once, after NotAckedMax messages, after a short
// delay, or, between peers of one host, by the rings' own rules), and the
// TRUC a sender receives. Acks piggybacked on sequenced frames are set and
// applied where those frames are sent and received (reliability.go); the
// SACK a TRUC may carry is in sack.go.

func (p *partner) sendAck() {
	p.sendTruc(0)
}

// sendTruc sends an explicit ack with the probe flags given (ask.go; 0
// for a plain ack).
func (p *partner) sendTruc(probe uint8) {
	e := p.ep
	b := e.b
	p.ackNumSent++
	h := wire.Truc{DstEP: p.epID, SrcEP: e.id, Session: p.rsession, AckUpTo: p.fullSeq,
		AckNum: p.ackNumSent, SendSeq: p.sendSeq, Probe: probe}
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
	p.ackLazy = false
}

// ackClass is what a received message asks of its receiver's acks
// (noteReceived).
type ackClass uint8

const (
	// ackSeq: a message whose sender keeps it for a resend until its
	// ack (a medium of several fragments, a rendezvous, a notify):
	// acked after NotAckedMax messages, else after tailAckDelay.
	ackSeq ackClass = iota
	// ackSmall: a tiny or small message, or an eager one of one frame
	// that came by the lean path. From a peer on the rings: acked after
	// ringAcks messages, after NotAckedMax once a receive finds the rings
	// drained (its sender may wait for it: a sequenced tiny message
	// completes on its ack once ZombieSends run out), else after
	// ringAckDelay. From any other peer: as ackSeq.
	ackSmall
	// ackLane: a lane record (lane.go). Only a lean send writes one, and
	// its sender completed it as it wrote it and keeps nothing for it
	// (lean.go): the ack only moves the sender's lean window, which
	// ringAcks keeps far from full. Acked after ringAcks messages, else
	// AckDelay after the first: a pair that talks one way (an alltoall's
	// Bruck steps, a stream to a sink) pays an ack frame per ringAcks
	// messages or per AckDelay, not per NotAckedMax messages each time its
	// receiver's rings run dry. Once the messages waiting for an ack
	// include one of another class, they are acked as that one asks.
	ackLane
	// ackPull: a rendezvous whose pull started as it was delivered, its
	// first PULLs sent to its sender: acked at once, beside them (see
	// below).
	ackPull
	// ackLarge: a large message's frame that starts no PULL: a
	// rendezvous delivered with no pull started (no receive matched it
	// yet, or its pull waits for room), or the NOTIFY that ends a pull,
	// from a peer on a network path: acked as the batch that delivered
	// it ends (see below). From a peer on the rings: as ackLane.
	ackLarge
)

// The ack of a rendezvous delivered unpulled, and of a NOTIFY.
//
// A RNDV that no receive takes yet, or whose pull waits for room
// (PullsQueued), sends no PULL, and a NOTIFY ends a pull: neither is
// followed by a frame of its receiver's that would carry the ack soon
// (a reply comes, if at all, once the application has run). Acked as
// ackSeq, after tailAckDelay, each would stay its sender's newest
// unacked message meanwhile (the RNDV's sender keeps nothing else of the
// message and waits for the NOTIFY anyway; the NOTIFY's sender, the
// puller, is done): on a busy-polling board the first question waits at
// most askSpread of the fastest round trips (askWait), less than
// tailAckDelay on a fast wire, so many of them would draw a question and
// its answer, two frames and a wake-up on each side, to learn what the
// ack says some tens of microseconds later (on the emulated 82599 pair,
// acked after the delay, the RNDVs of a 200 × 1 MiB stream draw 15-23
// questions and its NOTIFYs 15-35, and 100 exchanges of 4 MiB 16-266).
// So the receiver acks
// such a frame as the batch that delivered it ends (Board.sendBatchAcks):
// one TRUC for every one of them in the batch and whatever else it holds
// unacked, at once outside a batch. A frame sent in the batch (a PULL's
// reply carries no ack; a sequenced one does) leaves nothing to ack
// then. Between peers of one host (the rings) no question goes that way
// (askable), and the ack only releases a frame, which the rings do not
// lose: they are acked as lane records are (ackLane), after ringAcks of
// them or AckDelay, unless a frame carries the ack sooner. Acked after
// tailAckDelay, a NOTIFY cost a frame of its own, a timer armed for it and
// often the sender's wake-up whenever the next frame to that peer came
// later than that: 1.6 ack frames a round a rank in a 16-rank 64 KiB
// alltoall on 2 CPUs, against 0.03 acked lazily (docs/alltoall.md).

// sendBatchAcks sends the acks ackLarge left for the batch's end, unless a
// frame carried them meanwhile. Called with b.mu held, as the outermost
// batch ends (or a handler runs without b.mu mid-batch: proto.go).
func (b *Board) sendBatchAcks() {
	for i, p := range b.ackEnds {
		b.ackEnds[i], p.endAck = nil, false
		if p.notAcked > 0 && !p.ep.closed {
			p.ep.cnt[AcksImmediate]++
			p.sendAck()
		}
	}
	b.ackEnds = b.ackEnds[:0]
}

// The ack of a rendezvous that starts a pull.
//
// A PULL carries no ack, and a pull of a few megabytes lasts far longer
// than tailAckDelay: the rendezvous that started it was acked on a frame
// of its own from the fine timer's goroutine, in the middle of the pull
// (a timerfd_settime to note the deadline, the timer's firing and a TRUC
// with a doorbell of its own), and its sender took that ack as a wake-up
// of its own between the PULLs. So the receiver acks it at once, after
// the PULLs its delivery sent (ackPull): the TRUC goes out in the same
// handling as they do, no deadline is noted, and it reaches the sender
// with the first PULL, which wakes it anyway. A rendezvous that waits for
// its receive, or whose pull waits for room (PullsQueued), sends no PULL
// yet and is acked as any other message. The sender takes the PULL itself as
// the RNDV's ack (reliability.go, pulledAck); the TRUC still moves its
// cumulative ack point, which a PULL cannot (a medium sent before the
// RNDV may be held only in part).

// noteReceived records that the full-receive point moved by a message of
// class c: ack now, or when the rings run dry, or after a delay, as c asks
// (ackClass).
func (p *partner) noteReceived(c ackClass) {
	b := p.ep.b
	b.wakeTicks() // progress.go
	p.notAcked++
	if c == ackLane && (p.ackLazy || p.ackDeadline == 0) && p.rings() != nil {
		// Only lane records wait for this ack: what the general case
		// below does for them, without working out what the other
		// classes ask. Most of a collective's records come so, each
		// the first since the sender's last piggyback or behind one
		// that set the lazy deadline.
		if p.notAcked >= b.ringAcks() {
			p.ep.cnt[AcksImmediate]++
			p.sendAck()
			return
		}
		p.ackLazy = true
		if p.ackDeadline == 0 {
			p.armAck(int64(b.opts.AckDelay), true)
		}
		return
	}
	if c == ackPull || c == ackLarge && b.batchDepth == 0 && p.rings() == nil {
		p.ep.cnt[AcksImmediate]++
		p.sendAck()
		return
	}
	if c == ackLarge {
		if p.rings() == nil {
			if !p.endAck {
				p.endAck = true
				b.ackEnds = append(b.ackEnds, p) // sendBatchAcks
			}
			return
		}
		c = ackLane // its ack only releases a frame (see above)
	}
	every, delay := b.opts.NotAckedMax, b.tailAckDelay()
	rings := c != ackSeq && p.rings() != nil
	lazy := rings && c == ackLane
	if rings {
		every, delay = b.ringAcks(), min(int64(b.opts.AckDelay), int64(ringAckDelay))
	}
	if p.notAcked >= every {
		p.ep.cnt[AcksImmediate]++
		p.sendAck()
		return
	}
	if lazy && (p.ackDeadline == 0 || p.ackLazy) {
		// Only lane records wait for this ack. The shortcut above
		// takes this case whenever rings() answers; this branch is
		// kept as its safety net, and the two must decide alike.
		p.ackLazy = true
		delay = int64(b.opts.AckDelay)
	} else if p.ackLazy {
		// A message that asks for a sooner ack joins lane records
		// that waited: its deadline replaces theirs.
		p.ackLazy = false
		if p.ackDeadline != ackUnstamped {
			p.ackDeadline = 0
		}
	}
	if rings && !p.ackLazy && p.notAcked >= b.opts.NotAckedMax && !p.owed {
		p.owed = true
		b.ackOwed = append(b.ackOwed, p)
	}
	if p.ackDeadline == 0 {
		p.armAck(delay, rings)
	}
}

// armAck gives p, which has no ack deadline, one delay from now, or from
// the board's next clock reading when it has none at hand; rings: p is a
// peer on the rings (noteReceived).
func (p *partner) armAck(delay int64, rings bool) {
	b := p.ep.b
	if !b.nowOK && (rings || b.seen == 0) {
		// No clock read for this batch yet, and no waiter's reading
		// to take (ackClock): the deadline waits for the next one
		// (stampAcks). In a ping-pong every message starts a
		// deadline that the reply's piggyback clears, and the
		// reading stood between the message and the reply: a tenth
		// of such a message's cost on the rings, a system call
		// where the vDSO cannot read the clock.
		// Stamped at the board's next reading (useReading): the
		// reply's send, else the waiter's next look (pollWait),
		// else a timer check. A ring peer's waits for no early
		// reading (unstamped), but takes the next one made: a
		// busy-polling board on a loaded machine may check its
		// timers seconds apart, and a ring peer whose ack waited
		// for that was probed (the rings' FullWait).
		p.stampLater()
		if !rings && !b.unstamped.Load() {
			b.unstamped.Store(true)
		}
		return
	}
	p.ackDeadline = b.ackClock() + delay
	if b.batchDepth > 0 {
		b.ackArms = append(b.ackArms, p) // noted as the batch ends (noteAckArms)
		return
	}
	b.noteDue(p.ackDeadline) // the fine timer keeps it (finetimer.go)
}

// An ack deadline started in a batch is noted as the batch ends.
//
// A frame later in the same batch often sends the ack the deadline was
// for: the rendezvous that follows a notify (ackPull: a large message's
// reply to a large message, whose notify and rendezvous come together),
// or NotAckedMax messages. The deadline noted for the fine timer at once
// set the timerfd (a timerfd_settime, 11 µs on a VM) for a firing that
// then found nothing due. So a deadline armAck starts while a batch is
// handled waits for the batch's end (noteAckArms), and is noted only if
// its ack is still owed then: a few frames' handling later, well inside
// tailAckDelay.

// noteAckArms notes for the fine timer the ack deadlines the batch just
// handled started and left owed (b.mu held).
func (b *Board) noteAckArms() {
	for i, p := range b.ackArms {
		b.ackArms[i] = nil
		if d := p.ackDeadline; d != 0 && d != ackUnstamped {
			b.noteDue(d) // the fine timer keeps it (finetimer.go)
		}
	}
	b.ackArms = b.ackArms[:0]
}

// The ack of a message a polling waiter took.
//
// In a ping-pong the waiter whose look took a message replies to it, and
// the reply carries the ack (piggyback): the delayed-ack deadline the
// message starts (noteReceived) is cleared by the next send, unused. So
// a short message from a peer on a wire that recvShort hands to its
// polling waiter moves the full-receive point and counts as not acked,
// as noteReceived would, but leaves its deadline to the board's next
// clock reading (holdAck): the reply's send, whose piggyback has cleared
// it by then, else the next reading a polling waiter makes as it polls
// (pollWait), else the receive loop's next timer check, which give it the
// deadline noteReceived would have (from that reading, as an unstamped
// one: stampAcks). A waiter asleep on the sources makes no reading soon,
// nor does the loop while it sleeps: its look reads the clock at once
// (lookLocked). One partner at a time
// (Board.ackHeld); a message that would be acked at once (NotAckedMax),
// one whose partner has a deadline already or a SACK to send, and one
// from the rings take noteReceived.

// holdAck moves p's full-receive point past the message recvShort just
// handed to its polling waiter and leaves its ack to the reply or the
// board's next reading, when it may (see above); false: it did nothing,
// and the caller takes updateFull. b.mu held.
func (p *partner) holdAck() bool {
	b := p.ep.b
	if b.ackHeld != nil || p.ackDeadline != 0 || p.notAcked+1 >= b.opts.NotAckedMax ||
		p.sackOpen || p.rings() != nil {
		return false
	}
	b.wakeTicks()         // progress.go
	p.fullSeq = p.recvSeq // recvShort: no partial message
	p.oooFrames = 0       // as updateFull
	p.notAcked++
	b.ackHeld = p
	b.readWants = true
	return true
}

// releaseHeldAck gives the ack holdAck left, unless a frame carried it
// meanwhile, the deadline noteReceived would have, counted from now. b.mu
// held.
func (b *Board) releaseHeldAck(now int64) {
	p := b.ackHeld
	b.ackHeld = nil
	if p.notAcked == 0 || p.ackDeadline != 0 || p.ep.closed {
		return
	}
	p.ackDeadline = now + b.tailAckDelay()
	b.noteDue(p.ackDeadline) // the fine timer keeps it (finetimer.go)
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

// ackUnstamped is the ack deadline of a peer whose messages were handled
// without a clock reading at hand (noteReceived): never due until
// stampAcks gives it a time.
const ackUnstamped = math.MaxInt64

// stampAcks gives the unstamped ack deadlines (noteReceived) their time,
// counted from now: the board's next reading (useReading: a send's, a
// polling waiter's, which reads at its first pass while one waits:
// pollWait's early), else the clock of the next timer check
// (timersLocked), which the receive loop makes after each batch and at
// least every spinGrace while waiters poll the rings (BoardOptions.BusyPoll:
// pollGrace). So a delayed ack goes out at most that much later than its
// delay (ringAckDelay, tailAckDelay) after the message. Called with b.mu
// held.
func (b *Board) stampAcks(now int64) {
	if b.ackHeld != nil {
		b.releaseHeldAck(now)
	}
	if len(b.toStamp) == 0 {
		return
	}
	if b.unstamped.Load() {
		b.unstamped.Store(false) // a locked instruction: only when it moves
	}
	for i, p := range b.toStamp {
		b.toStamp[i], p.stampQ = nil, false
		if p.ackDeadline == ackUnstamped {
			delay := min(int64(b.opts.AckDelay), int64(ringAckDelay))
			if p.ackLazy {
				delay = int64(b.opts.AckDelay) // only lane records wait (ackLane)
			} else if p.rings() == nil {
				delay = b.tailAckDelay() // a wire peer's
			}
			p.ackDeadline = now + delay
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
// (lean.go) left no copy behind, and is acked as a tiny one. A lane
// record is acked more lazily still (ackLane): only a lean send writes
// one, so no sender waits for its ack, and the drained rule and the short
// delay, which are for senders that may, do not apply to lane records
// alone.
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
func (b *Board) ringAcks() int { return b.ringEvery }

// workRingAcks works out ringAcks from the options (NewBoard).
func (b *Board) workRingAcks() int {
	n := min(ringAcksMax, b.opts.MaxUnacked/2)
	if b.opts.ZombieSends > 0 {
		n = min(n, b.opts.ZombieSends/2)
	}
	return max(n, b.opts.NotAckedMax)
}

// updateFull moves the full-receive point past what arrived whole; c: the
// class of the message that moved it (noteReceived).
func (p *partner) updateFull(c ackClass) {
	old := p.fullSeq
	if len(p.partials) > 0 {
		p.fullSeq = p.partials[0].seq
	} else {
		p.fullSeq = p.recvSeq
	}
	if p.fullSeq == old {
		return
	}
	// The ack point moved: the hole a SACK reported is (at least partly)
	// repaired, so ack at once. (Written here, not in a function of
	// its own: one call less on the path of every message in sequence.)
	p.oooFrames = 0
	if p.sackOpen {
		p.sackOpen = false
		p.ep.cnt[AcksImmediate]++
		p.sendAck()
		return
	}
	p.noteReceived(c)
}

// laneReceived is updateFull(ackLane) for the lane record laneFast just
// delivered or queued (p.recvSeq moved past it, nothing of p partial), in
// the case a ping-pong and a collective take on every record: the point
// moves, no SACK is open, only lane records wait for the ack, it is not
// due yet, and no clock reading is at hand. It does what updateFull,
// noteReceived's lane shortcut and armAck do then, without their three
// calls; any other case takes updateFull. TestLaneReceivedAsUpdateFull
// keeps the two alike.
func (p *partner) laneReceived() {
	b := p.ep.b
	if p.fullSeq == p.recvSeq || len(p.partials) != 0 || p.sackOpen || b.nowOK || !(p.ackLazy || p.ackDeadline == 0) ||
		p.notAcked+1 >= b.ringEvery || p.rings() == nil {
		p.updateFull(ackLane)
		return
	}
	p.fullSeq = p.recvSeq
	p.oooFrames = 0
	b.wakeTicks() // progress.go
	p.notAcked++
	p.ackLazy = true
	if p.ackDeadline == 0 {
		p.stampLater() // armAck without a reading
	}
}

// stampLater leaves p's ack deadline to the board's next clock reading
// (stampAcks), which it asks for (b.mu held).
func (p *partner) stampLater() {
	b := p.ep.b
	p.ackDeadline = ackUnstamped
	if !p.stampQ {
		p.stampQ = true
		b.toStamp = append(b.toStamp, p)
	}
	b.readWants = true
}

func (b *Board) handleTruc(nic transport.NICID, h *wire.Truc, raw []byte) {
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
	if p.sack {
		if h.HasSack {
			p.onSack(&h.Sack)
		} else {
			p.onSack(&noSack) // holds nothing past the ack: forget what SACKs said
		}
	}
	if p.ask {
		if a, err := wire.DecodeTruc(raw, b.ord, wire.ExtAsk); err == nil && a.Probe != 0 {
			p.onProbe(&a) // ask.go
		}
	}
}
