package mx

import "github.com/gomx-dev/gomx/mx/wire"

// How a large message ends when its pull cannot complete.
//
// A large send holds its region until the receiver's NOTIFY, and its RNDV
// is acked long before that, so without more the sender would wait for a
// NOTIFY that never comes whenever the receiver's pull fails, with nothing
// to end the wait but the application's context. Open-MX bounds it in two
// ways, and gomx does the same:
//
//   - The receiver notifies even a failed pull (Open-MX's
//     omx__process_pull_done submits the NOTIFY whatever the pull's status,
//     with length 0): when its pull times out (no progress for
//     ResendDelay*ResendMax) or the region owner refuses it (NACK_MCP), the
//     receive completes with that error and a sequenced, reliable NOTIFY
//     goes out anyway, so the region is released. Between gomx boards that
//     both announce wire.ExtPullStatus at connect, the NOTIFY also says the
//     pull failed (wire.Notify.Failed, in Open-MX's padding), and the send
//     completes with ErrPullFailed; from an Open-MX peer, which cannot say
//     so, it completes as Open-MX's would, with length 0.
//   - The peer's liveness bounds the rest: a receiver that stops answering
//     altogether fails every request to it once the partner is declared
//     unreachable (giveup.go), and a large send waiting for its
//     NOTIFY is failed with it (failAll releases its region). A large send
//     whose receiver started pulling and then went silent, neither pulling
//     again nor notifying, for the notify timeout, fails with
//     ErrUnreachable. The timeout is what a live receiver can take at most:
//     ResendDelay*ResendMax before it gives its pull up, then
//     ResendDelay*(ResendMax+1) for its NOTIFY to be acked before it
//     declares this board unreachable; notifyTimeoutSlack resends more. A
//     send whose receive was never posted is never pulled and waits, as in
//     MX.

// notifyTimeoutSlack is the notify timeout's margin past what a live
// receiver can take, in resend periods.
const notifyTimeoutSlack = 1

// abandon ends a pull that failed with code: the receive completes with
// code, and the region owner is told by a NOTIFY (see above).
func (pl *pull) abandon(code error) {
	e, p := pl.e, pl.p
	e.cnt[PullsAbandoned]++
	if !p.dead {
		var failed uint8
		if p.pullStatusPeer() {
			failed = wire.NotifyPullFailed
		}
		p.notify(0, pl.ref.id, pl.ref.seq, failed)
	}
	e.endPull(pl, code)
}

// pullStatusPeer reports whether the partner's board announced
// wire.ExtPullStatus: whether NOTIFYs to and from it say a failed pull.
func (p *partner) pullStatusPeer() bool {
	pi := p.ep.b.peer(p.nic, wire.NoPeerIndex)
	return pi != nil && pi.pullStat
}

// notifyExt is the extension flags to decode the partner's NOTIFYs with:
// wire.ExtPullStatus when both boards announced it, so byte 14 is its
// pull status, else 0, so it is Open-MX's pad whatever it holds.
func (p *partner) notifyExt() uint8 {
	if p.pullStatusPeer() {
		return wire.ExtPullStatus
	}
	return 0
}

// pullOutcome is the completion code of a large send whose NOTIFY h
// arrived (decoded with notifyExt): ErrPullFailed when a gomx receiver
// says its pull failed.
func (e *Endpoint) pullOutcome(h *wire.Notify) error {
	if h.Failed != 0 {
		e.cnt[SendsPullFailed]++
		return ErrPullFailed
	}
	return nil
}

// notifyTimeouts fails the large sends whose receiver started pulling and
// then neither pulled again nor notified for the notify timeout (see
// above). An endpoint with no large send in a region has nothing to scan:
// every timer run of a board that carries small messages came here.
func (e *Endpoint) notifyTimeouts(now int64) {
	if e.regionsUsed == 0 {
		return
	}
	o := &e.b.opts
	limit := int64(o.ResendDelay) * int64(2*o.ResendMax+1+notifyTimeoutSlack)
	for i := range e.regions {
		reg := &e.regions[i]
		if !reg.used || reg.lastPull == 0 || !e.b.overdue(now, reg.lastPull, limit) { // liveness.go
			continue
		}
		if !e.b.mayDeclare() { // verdict.go
			return
		}
		r := reg.r
		p := r.p
		if p.unacked.has(r) {
			p.unacked.remove(r)
		}
		e.cnt[NotifyTimeouts]++
		e.cnt[Unreachable]++
		p.failSend(r, ErrUnreachable)
		p.flushWait()
	}
}
