package mx

import "time"

// When a sequenced frame is sent again: the retransmission timeout (RTO)
// built from the round-trip estimate (rtt.go), the tail-loss probe and its
// timeout (pto), the timer resends of requests still unacked, and the
// endpoint's periodic duties (timers), which also resend pending connects
// (connect.go), send delayed acks (ack.go) and time pulls out (large.go).
// A SACK's fast retransmit is in sack.go; the fine timer that fires the
// probe to the microsecond in finetimer.go; the verdict that gives a
// partner up when its resends go unanswered in giveup.go, verdict.go and
// liveness.go.

// pullRTO is the re-request timeout of a pull block from the peer.
func (p *partner) pullRTO(backoff int) int64 {
	lo, hi := p.rtoBounds()
	return p.prtt.timeout(unmeasured(p.ep.b.opts.PullTimeout), p.ep.b.rtoGran(), lo, hi, backoff)
}

// unmeasured is a timeout before the first round-trip sample: the
// configured fallback plus the descheduling allowance (descheduled.go).
// A measured timeout has the allowance as its granularity term; the
// fallback is a guess at the round trip only, and mxbench's lossy runs
// (and any caller) may set it to milliseconds, which a peer descheduled
// on a loaded machine overran: the first messages of a stream, sent
// before a round trip was measured, were probed and resent to on a
// lossless wire.
func unmeasured(fallback time.Duration) int64 {
	return int64(fallback) + min(descheduling.slack(), int64(fallback))
}

// rtoBounds are the bounds of p's retransmission timeouts (b.mu held):
// RTOMin..RTOMax on a network path, where the descheduling allowance
// (descheduled.go) is the granularity term of srtt + max(G, 4*rttvar).
// Through the rings a timeout is their floor (rtoMin: FullWait, a second
// by default) plus that allowance (at most RTOMax), whatever the round trip or the
// doublings: the rings lose a frame only when its receiver took nothing
// for FullWait while the sender waited for room, and a receiver the
// machine keeps off its CPU takes nothing, so without the allowance a
// peer descheduled past FullWait on a loaded machine was probed and
// resent to with every frame in its ring. The floor is the rings' own
// term and the allowance the machine's: neither comes from the measured
// round trips (whose samples give no allowance for a descheduled peer).
func (p *partner) rtoBounds() (lo, hi int64) {
	b := p.ep.b
	lo = p.rtoMin()
	if lo > int64(b.opts.RTOMin) {
		// The allowance is capped at RTOMax, so one huge gap seen once
		// (a SIGSTOP, a paused VM) does not stretch every later ring
		// timeout by three times it.
		lo += min(descheduling.slack(), int64(b.opts.RTOMax))
		return lo, lo
	}
	return lo, int64(b.opts.RTOMax)
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
// fallback plus the descheduling allowance (unmeasured) until a round
// trip has been measured (rtt.go).
func (p *partner) rto(fallback time.Duration, backoff int) int64 {
	lo, hi := p.rtoBounds()
	return p.rtt.timeout(unmeasured(fallback), p.ep.b.rtoGran(), lo, hi, backoff)
}

// rtoGran is the granularity term of the retransmission timeouts (the G
// of RFC 6298's srtt + max(G, 4*rttvar)): the busy tick, or the time the
// machine may keep the peer descheduled (descheduled.go) if longer.
func (b *Board) rtoGran() int64 {
	return max(int64(b.tickBusy), descheduling.slack())
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
// Toward a peer that answers questions (ask.go) neither the probe nor the
// RTO acts: a question goes out instead, and only its answer resends.
func (p *partner) resendDue(now int64) {
	b := p.ep.b
	if p.unreachable(now) {
		return
	}
	if p.askable() {
		// A peer that answers questions is asked (ask.go) instead of
		// probed and resent to on timers: only an answer resends, and
		// an ask resends nothing, so a late run's grace does not hold
		// it. A SACK's holes are still resent on their window.
		p.askDue(now, p.probeTarget())
		if p.sack && !b.held(now) {
			p.sackResend(now)
		}
		return
	}
	if b.held(now) {
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
	for r := p.unacked.Front(); r != nil && k < resendBurst; r = r.q.Next() {
		if r != p.unacked.Front() && p.sackedWhole(r) {
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
		r.sackLost, r.sackHeld = 0, 0 // in full: what a SACK said may be stale
		p.ep.cnt[Resends]++
		p.ep.cnt[TimerRetransmits]++
		p.transmit(r)
		k++
	}
}

// probeTarget is the request the tail-loss probe resends the last frame
// of: the newest unacked one the receiver does not hold whole.
func (p *partner) probeTarget() *Request {
	t := p.unacked.Back()
	for t.q.Prev() != nil && p.sackedWhole(t) {
		t = t.q.Prev()
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
// receiver's delay of a tail's ack (tailAckDelay, RTOMin/4) plus the time
// the machine may keep the peer descheduled (descheduled.go); at most the
// RTO. Before the first measurement, and through the rings, it is the
// RTO. Between gomx boards a
// lost frame that no later frame reveals (a ping-pong's ping or pong) is
// found by asking the peer (ask.go), and no probe goes out; toward an
// Open-MX peer such a loss costs this timeout: on a machine that keeps the
// peer running, about srtt + RTOMin/4.
func (p *partner) pto(backoff int) int64 {
	b := p.ep.b
	rto := p.rto(b.opts.ResendDelay, backoff)
	if !p.rtt.ok || p.rtoMin() > int64(b.opts.RTOMin) { // the rings: their floor and the allowance (rtoBounds)
		return rto
	}
	t := max(2*p.rtt.srtt, p.rtt.srtt+4*p.rtt.rttvar, p.rtt.srtt+b.tailAckDelay()+descheduling.slack())
	for i := 0; i < backoff && t < rto; i++ {
		t *= 2
	}
	return min(t, rto)
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
		if p.unacked.Len() > 0 {
			p.resendDue(now)
			busy = busy || p.unacked.Len() > 0 && p.finerThanTick()
		}
		if p.held != nil {
			busy = true // retried after the timer pass (Board.retryHeld)
		}
		for r := p.connecting.Front(); r != nil; {
			next := r.q.Next()
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
	if e.resq.Len() > 0 {
		e.kickSends()
	}
	return busy
}
