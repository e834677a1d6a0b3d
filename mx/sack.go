package mx

import (
	"math/bits"

	"github.com/gomx-dev/gomx/mx/wire"
)

// Selective acknowledgement of the sequenced stream (a gomx extension, see
// package wire: ExtSack in the connect extension, the SACK block of TRUC).
//
// Receive side. A frame that arrives past a hole (an early packet stored
// beyond a missing sequence number, a fragment of a medium message past a
// missing fragment, a message delivered while an earlier medium is still
// incomplete, or a duplicate of something already held) is evidence of a
// loss or a reordering. The first such frame since the ack point last
// moved, and every sackEvery-th after it, makes the receiver send a TRUC
// at once whose SACK lists what it holds past its cumulative ack: each
// message it holds whole, and the fragments it holds of incomplete
// mediums. When the ack point moves while a hole was reported, the
// receiver acks at once, so the sender learns of the repair without
// waiting AckDelay. Every explicit TRUC to such a partner carries the SACK
// while holes remain.
//
// Send side. A SACK marks every unacked request up to the highest one it
// lists: held whole, or a hole (nothing or only some fragments held). Only
// what was sent before the farthest frame the receiver holds is shown
// lost: of the highest request listed, the fragments past its highest one
// held are not a hole, for the receiver may not have read them yet (every
// TRUC carries the SACK, and one that goes out between two receive
// batches of a medium's fragments lists only the first ones; a sender
// that handles it after the reordering window, descheduled meanwhile,
// would resend the rest while the wire still carries them). A hole is
// resent, only its missing fragments, as a fast retransmit once it has
// been out for srtt plus a quarter of srtt (RACK's reordering window, so a
// frame that was only overtaken is not sent twice); until then the fine
// timer holds its deadline. Requests held whole are neither resent by
// the timer nor used as the tail-loss probe, except the oldest unacked
// one. A receiver may still drop what it reported: an early packet it
// cannot deliver when its turn comes (the unexpected queue is full) is
// dropped then, as Open-MX drops it. So no request is ever completed on a
// SACK alone (only the cumulative ack completes sends, or a PULL or NOTIFY
// that shows the messages before it delivered: pulledAck), every TRUC's SACK
// (or its absence) replaces what the last one said (onSack), the oldest
// unacked request is always under the retransmission timer or, toward a
// peer that answers questions, resent on an answer that neither acks nor
// lists it (ask.go), and a timer resend sends the whole request and
// forgets what SACKs said of it.

// sackEvery is how many frames past a hole make the receiver repeat its SACK.
const sackEvery = 4

// ---- receive side ----

// outOfOrder records a frame that arrived past a hole and sends a SACK
// when due.
func (p *partner) outOfOrder() {
	if !p.sack {
		return
	}
	p.oooFrames++
	if p.oooFrames == 1 || p.oooFrames%sackEvery == 0 {
		p.sackOpen = true
		p.sendAck()
	}
}

// buildSack fills s with what the partner holds past fullSeq: the messages
// from fullSeq to recvSeq (whole, or a partial medium's fragments) and the
// early packets beyond, in sequence order, at most SackMaxBlocks.
func (p *partner) buildSack(s *wire.Sack) {
	s.N = 0
	for seq := p.fullSeq; seq != p.recvSeq && s.N < wire.SackMaxBlocks; seq = seqNext(seq) {
		held := uint32(wire.SackWhole)
		for _, pt := range p.partials {
			if pt.seq == seq {
				held = pt.got
			}
		}
		if held != 0 {
			s.Blocks[s.N] = wire.SackBlock{Seq: seq, Held: held}
			s.N++
		}
	}
	o := p.ep.b.ord
	for _, x := range p.early {
		if !sameSess(x.seq, p.recvSeq) {
			continue
		}
		held := uint32(wire.SackWhole)
		if h := x.data[wire.HeadLen:]; wire.Type(h[0]) == wire.TypeMedium {
			m, _, _ := wire.DecodeMedium(h, o)
			held = 1 << (m.FragIndex & 31)
		}
		sackInsert(s, x.seq, held, p.fullSeq)
	}
}

// sackInsert adds held to the block of seq in s, kept sorted by distance
// from base; a new block past the last of a full s is left out.
func sackInsert(s *wire.Sack, seq uint16, held uint32, base uint16) {
	d := seqDiff(seq, base)
	i := 0
	for i < s.N && seqDiff(s.Blocks[i].Seq, base) < d {
		i++
	}
	if i < s.N && s.Blocks[i].Seq == seq {
		s.Blocks[i].Held |= held
		return
	}
	if s.N == wire.SackMaxBlocks {
		if i == s.N {
			return
		}
		s.N-- // the farthest block makes room
	}
	copy(s.Blocks[i+1:s.N+1], s.Blocks[i:s.N])
	s.Blocks[i] = wire.SackBlock{Seq: seq, Held: held}
	s.N++
}

// ---- send side ----

// fragMask is the Held bits that mean r is held whole.
func (p *partner) fragMask(r *Request) uint32 {
	if r.class != classMedium || len(r.buf) <= p.stride {
		return 1
	}
	n := (len(r.buf) + p.stride - 1) / p.stride
	if n >= 32 {
		return wire.SackWhole
	}
	return 1<<n - 1
}

// sackedWhole reports whether the receiver's latest SACK says it holds r.
func (p *partner) sackedWhole(r *Request) bool {
	m := p.fragMask(r)
	return p.sack && r.sackHeld&m == m
}

// belowTop returns the bits below the highest set bit of x (0 for 0).
func belowTop(x uint32) uint32 {
	if x == 0 {
		return 0
	}
	return 1<<(bits.Len32(x)-1) - 1
}

// noSack is the empty SACK of a TRUC that carries none (read only).
var noSack wire.Sack

// onSack takes what a TRUC from the receiver says it holds past its
// cumulative ack (after the ack was applied): s, empty for a TRUC that
// carries no SACK, and resends the holes that are due. Every TRUC says
// all the receiver holds, as of when it was sent: a SACK lists every
// message and fragment past the ack point unless it is full
// (wire.SackMaxBlocks, the farthest left out), and a TRUC without one
// says nothing is held. So what an earlier SACK said of a request is
// forgotten unless this one says it again: a receiver that dropped a
// message it had reported (an early packet it could not deliver when its
// turn came) must have it resent, and an answer to a question (ask.go)
// resends only what its own TRUC does not list.
func (p *partner) onSack(s *wire.Sack) {
	if s.N > 0 {
		p.ep.cnt[SacksReceived]++
	} else if !p.sackKnown {
		return // nothing to forget: a plain ack costs no walk
	}
	known := false
	j := 0
	for r := p.unacked.Front(); r != nil; r = r.q.Next() {
		for j < s.N && seqBefore(s.Blocks[j].Seq, r.seq) {
			j++
		}
		if j >= s.N {
			if s.N == wire.SackMaxBlocks {
				known = true // past a full SACK: what the last one said stands
				break
			}
			r.sackHeld = 0 // not held; a hole only if something past it is
			continue
		}
		held := uint32(0)
		if s.Blocks[j].Seq == r.seq {
			held = s.Blocks[j].Held
		}
		r.sackHeld = held
		known = known || held != 0
		m := p.fragMask(r)
		lost := m &^ held
		if j == s.N-1 && s.Blocks[j].Seq == r.seq {
			// The farthest frame the receiver holds is one of r's:
			// only r's fragments sent before it are shown lost. Those
			// after it may not have been read yet (the TRUC went out
			// between two receive batches of r's fragments).
			lost &= belowTop(held & m)
		}
		r.sackLost = lost
	}
	p.sackKnown = known
	p.sackResend(p.ep.b.now())
}

// reorderWait is how long after its last send a request a SACK reports
// missing is taken as lost: srtt and a quarter (RACK), plus the time the
// machine may keep a goroutine descheduled (descheduled.go), the RTO
// before any measurement. The allowance is the probe's: a frame the SACK
// calls missing may be one a descheduled sender had not yet put on the
// wire, or one the machine kept the receiving side from reading in order
// (a UDP socket's frames handled by two goroutines), and on a lossless
// wire those resends are spurious. On a machine that keeps its goroutines
// running it is zero and costs a real loss nothing.
func (p *partner) reorderWait() int64 {
	if !p.rtt.ok {
		return p.rto(p.ep.b.opts.ResendDelay, 0)
	}
	return p.rtt.srtt + p.rtt.srtt/4 + descheduling.slack()
}

// sackResend resends the SACK holes that are due (fast retransmits) and
// arms the fine timer for the others.
func (p *partner) sackResend(now int64) {
	b := p.ep.b
	k := 0
	for r := p.unacked.Front(); r != nil && k < resendBurst; r = r.q.Next() {
		if r.sackLost == 0 {
			continue
		}
		if due := r.lastSend + p.reorderWait(); now < due {
			b.noteDue(due)
			continue
		}
		p.resendMissing(r, FastRetransmits, ^r.sackLost)
		k++
	}
}

// resendMissing resends the frames of r but those in skip (the
// fragments the peer holds, or those not shown lost), counted as a resend
// and under why (a fast retransmit, or one on an ask's answer).
func (p *partner) resendMissing(r *Request, why Counter, skip uint32) {
	r.sackLost = 0
	r.resends++ // Karn
	p.ep.cnt[Resends]++
	p.ep.cnt[why]++
	p.transmitMissing(r, skip)
}
