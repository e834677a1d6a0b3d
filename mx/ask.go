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
	if h.Probe&wire.TrucAnswer != 0 {
		p.onAnswer()
	}
	if h.Probe&wire.TrucAsk != 0 {
		if p.fullSeq == h.SendSeq && p.notAcked == 0 && !p.ackStale && p.unacked.Len() > 0 {
			return // everything is acked, on a message of ours our timers watch
		}
		p.ep.cnt[AsksAnswered]++
		p.sendTruc(wire.TrucAnswer)
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
