package mx

import "github.com/gomx-dev/gomx/mx/wire"

// Asking a late peer what it holds (a gomx extension: wire.ExtAsk, the
// TRUC's probe flags).
//
// In a ping-pong nothing reveals a lost ping or pong: no later frame comes
// to open a hole, so only a timer can tell. The tail-loss probe (resend.go)
// waits, past the round trip, for as long as the machine may keep the peer
// descheduled (descheduled.go): on a loaded machine that is milliseconds,
// and it is what every real loss would cost if the probe were the first
// thing to act. A question costs less to ask early than a resend: between
// two boards that both announce ExtAsk, a sender whose newest unacked
// message has waited askWait (twice the round trip, or srtt + 4·rttvar,
// plus RTOMin/8; no allowance for descheduling) sends a TRUC with
// TrucAsk: its own ack, and a question. The receiver answers at once with
// a TRUC flagged TrucAnswer: its ack and, with SACK, what it holds past it.
// Every transport delivers one sender's frames in order, so an answer
// reflects every frame the asker sent before the ask: a message sent
// before it that the answer neither acks nor lists as held was lost, and
// it is resent at once (counter AskRetransmits). A loss so costs askWait
// and a round trip. A peer that is only late answers when it runs, with
// whatever it had (or with the reply itself): the ask resent nothing, and
// the tail-loss probe and the RTO keep their allowance for the case where
// neither the answer nor anything else comes.
//
// A receiver that holds everything the asker says it sent (the ask's
// SendSeq is its ack point), has acked all of it, and has a message of its
// own unacked toward the asker (which carried that ack, and which its own
// timers recover if it was lost) does not answer: the ack is on its way.
// A sender asks at most askMax times while its ack point does not move,
// each ask after askWait doubled, and never a peer reached through the
// rings (they lose nothing while the peer lives, host.go).

//
// A pull asks the same way. A responder (the region's owner) answers the
// PULLs in the order they come and sends each one's replies before it
// handles the next frame, and every transport delivers one sender's
// frames in order; so a question that follows a puller's PULLs is
// answered after every reply to them has been sent, and when the answer
// arrives, a frame asked for by one of those PULLs that has not arrived
// was lost. A pull (large.go) whose oldest unfinished block has been
// silent for pullAskWait sends a TRUC flagged TrucAsk and TrucPulls, with
// a tag (wire.TrucTagMask) from its partner's count, and notes the number
// of the last PULL sent before it. The owner answers every such question
// at once, whatever its ack state, with TrucAnswer, TrucPulls and the
// tag; the answer whose tag is the pull's outstanding question's
// re-requests exactly the missing frames asked for up to that PULL
// (counter AskRetransmits; the frames in PullFramesRerequested), and
// nothing else. A wire that is only slow delivers the replies before the
// answer, so it never makes a pull ask again for anything; a peer that is
// descheduled answers late, and the pull, which sent nothing but
// questions meanwhile, re-requests nothing. An unanswered question (it or
// its answer lost, the peer late) is asked again after pullAskWait
// doubled, up to RTOMax; an answer with another tag (an earlier question,
// asked again since) is not this one's and is ignored. A pull whose
// replies the NIC places (placerecv.go) does not ask: those are reaped
// apart from the frames handled on receive, so their order against an
// answer is not the wire's. Between boards that
// both announce ExtAsk a pull's timer so never re-requests blindly; toward
// an Open-MX peer, or through the rings, it re-requests on its RTO.

// askMax bounds the asks a partner sends while its ack point does not move.
const askMax = 3

// askable reports whether p may be asked: a gomx peer that announced
// ExtAsk, a measured round trip, and a network path (not the rings).
func (p *partner) askable() bool {
	return p.ask && p.rtt.ok && p.rtoMin() <= int64(p.ep.b.opts.RTOMin)
}

// askWait is how long the newest unacked message waits before an ask,
// after backoff doublings: max(2·srtt, srtt + 4·rttvar) plus half the
// receiver's delay of a tail's ack (tailAckDelay/2: 31 µs by
// default) for the clock reads of a polling waiter and the peer's
// handling. A sleeping board's fine timer fires at the deadline of every
// message sent (finetimer.go), most of them answered already: the margin
// also keeps those wake-ups from coming every few round trips.
func (p *partner) askWait(backoff int) int64 {
	t := max(2*p.rtt.srtt, p.rtt.srtt+4*p.rtt.rttvar) + p.ep.b.tailAckDelay()/2
	for range backoff {
		t *= 2
	}
	return t
}

// tailDue is the deadline to note for the fine timer when r goes out: the
// ask's when one may be sent, else the tail-loss probe's.
func (p *partner) tailDue(r *Request) int64 {
	if p.askAt == 0 && p.asks < askMax && p.askable() {
		return r.lastSend + p.askWait(int(p.asks))
	}
	return r.lastSend + p.pto(0)
}

// askDue sends the ask when t, the probe's target, has waited askWait
// since its last send, and notes the deadline for the fine timer before
// then. One ask is outstanding at a time: an answer, or the ack point
// moving, allows the next.
func (p *partner) askDue(now int64, t *Request) {
	if p.askAt != 0 || p.asks >= askMax || !p.askable() {
		return
	}
	if due := t.lastSend + p.askWait(int(p.asks)); now < due {
		p.ep.b.noteDue(due)
		return
	}
	p.askAt = now
	p.asks++
	p.ep.cnt[TailAsks]++
	p.sendTruc(wire.TrucAsk)
}

// onProbe handles the probe flags of a TRUC from p, after its ack and SACK
// were applied: an answer reveals what was lost, an ask is answered.
func (p *partner) onProbe(h *wire.Truc) {
	pulls := h.Probe&wire.TrucPulls != 0
	if h.Probe&wire.TrucAnswer != 0 {
		if pulls {
			p.onPullAnswer(h.Probe & wire.TrucTagMask >> wire.TrucTagShift)
		} else {
			p.onAnswer()
		}
	}
	if h.Probe&wire.TrucAsk != 0 {
		if !pulls && p.fullSeq == h.SendSeq && p.notAcked == 0 && !p.ackStale && p.unacked.Len() > 0 {
			return // everything is acked, on a message of ours our timers watch
		}
		p.ep.cnt[AsksAnswered]++
		p.sendTruc(wire.TrucAnswer | h.Probe&(wire.TrucPulls|wire.TrucTagMask))
	}
}

// onAnswer resends what the answer to the outstanding ask shows lost:
// every unacked message last sent before the ask that the peer does not
// hold whole (only the oldest without SACK, which cannot say what the
// peer holds past its ack point).
func (p *partner) onAnswer() {
	at := p.askAt
	if at == 0 {
		return // an answer to an ask the ack point has moved past
	}
	p.askAt = 0
	k := 0
	for r := p.unacked.Front(); r != nil && k < resendBurst; r = r.q.Next() {
		if r.lastSend >= at || p.sackedWhole(r) {
			continue
		}
		p.resendMissing(r, AskRetransmits)
		k++
		if !p.sack {
			break
		}
	}
}

// pullAskable reports whether p's pulls ask instead of re-requesting on a
// timer: a gomx peer that announced ExtAsk, reached over a network path.
func (p *partner) pullAskable() bool {
	return p.ask && p.rtoMin() <= int64(p.ep.b.opts.RTOMin)
}

// pullAskWait is how long a pull block's silence lasts before a question
// to p, after backoff doublings: as askWait, from the pull path's round
// trip (a PULL to its first reply), or the pull RTO before one was
// measured; at most RTOMax.
func (p *partner) pullAskWait(backoff int) int64 {
	b := p.ep.b
	t := p.pullRTO(0)
	if p.prtt.ok {
		t = max(2*p.prtt.srtt, p.prtt.srtt+4*p.prtt.rttvar) + b.tailAckDelay()/2
	}
	for i := 0; i < backoff && t < int64(b.opts.RTOMax); i++ {
		t *= 2
	}
	return min(t, int64(b.opts.RTOMax))
}

// askDue sends the pull's question when bl, its oldest unfinished block,
// has been silent for pullAskWait since it was last asked for, the pull
// last progressed and the last question went out.
func (pl *pull) askDue(now int64, bl *pblock) {
	p := pl.p
	if now < max(bl.lastReq, pl.lastProgress, pl.askAt)+p.pullAskWait(pl.asks) {
		return
	}
	p.pullTag++
	pl.asking = true
	pl.askTag = p.pullTag & (wire.TrucTagMask >> wire.TrucTagShift)
	pl.askReq = pl.reqs
	pl.askAt = now
	pl.asks++
	pl.e.cnt[PullAsks]++
	p.sendTruc(wire.TrucAsk | wire.TrucPulls | pl.askTag<<wire.TrucTagShift)
}

// onPullAnswer takes the answer tagged tag to a question about pulls from
// p: the pull whose outstanding question it answers re-requests the
// missing frames asked for by the PULLs sent before that question.
func (p *partner) onPullAnswer(tag uint8) {
	e := p.ep
	now := e.b.now()
	for _, pl := range e.pulls {
		if pl == nil || pl.p != p || !pl.asking || pl.askTag != tag {
			continue
		}
		pl.asking = false
		pl.asks = 0
		n := e.cnt[PullRerequests]
		pl.lostBefore(pl.askReq+1, 0, AskRetransmits)
		if e.cnt[PullRerequests] != n && len(pl.blocks) > 0 {
			pl.blocks[0].lastReq = now // the next question waits from the re-request
		}
	}
}
