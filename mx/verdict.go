package mx

// Verdicts wait for the frames already received.
//
// A timer that declares a peer or a pull dead (the resend limit, a connect
// out of attempts, a pull silent for its whole budget, a large send whose
// NOTIFY never came, a peer process the transport saw go) judges by what the
// board has handled, not by what has arrived: frames can sit in the
// transport's queue because the goroutine that owns Recv was descheduled,
// or because a long stall left more frames than one Recv batch. Declaring
// the peer dead then kills a healthy connection whose answer was already
// here.
//
// So a verdict is given only after a drain. A timer run goes through the
// endpoints' duties once; a duty that finds a verdict due asks for a drain
// (mayDeclare) and does nothing more this time. The run then takes, for
// every receive source, what the transport already holds, without waiting
// and at most drainBatches batches of it, handles it, and runs the duties
// again, this time with verdicts allowed: a verdict that the drained frames
// answered is gone, the others are given. A source whose Recv another
// goroutine owns at that moment (the progress goroutine inside Recv, the
// host path's loop, a polling waiter) cannot be drained from here: the run
// notes how many times that owner had found its transport drained
// (rxSource.emptied, counted once the frames of such a Recv were handled),
// asks it to return from Recv (the shared-memory transport's Wake), and
// puts the verdict off. A later run (the owner's own, which may drain the
// source it holds, or the next tick) counts the source as drained once its
// owner has since found it drained and handled what it got. A verdict is
// thus given a tick or so later than before, and never while frames that
// could answer it wait unread in a queue.
//
// A pull's timer re-request (large.go, pull.timer) waits for the
// same drain: it is no verdict, but it asks for a whole block again, and
// the replies it would ask for may be in the transport's rings (a lane's,
// placed by the NIC), not yet reaped. So does acting on the answer to a
// question about a pull that places on a lane (ask.go): the answer comes
// on another queue than the replies it follows.

// An answer to a placed pull's question needs more than any drain: one
// that started after the answer was handled. The answer comes on queue
// 0; a drain that handles it after it drained the lane, or a busy source
// whose owner found it drained after a mark taken before the answer came,
// leaves replies ahead of the answer unread in the lane's ring. So every
// drain has a number (drainGen, bumped as it starts), each mark the
// number of the drain that took it, and a completed drain is as old as
// its oldest evidence (vFrom); the answer notes the number current when
// it was handled and is acted on only after a drain numbered later
// (mayActSince).

// drainBatches bounds a verdict's drain: a peer flooding the board cannot
// keep a timer run going.
const drainBatches = 8

// mayDeclare is asked by a duty about to declare a peer or a pull dead: it
// reports whether the sources were drained in this timer run. When they
// were not, it asks for a drain, and the duty leaves everything as it is
// (b.mu held).
func (b *Board) mayDeclare() bool {
	if b.vDrained {
		return true
	}
	b.vWanted = true
	return false
}

// mayActSince is mayDeclare for a duty that must wait for a drain that
// started after drain number gen (b.drainGen when the duty's evidence was
// handled). A drain that completed but is not that recent asks for
// another timer run at once (b.mu held).
func (b *Board) mayActSince(gen uint64) bool {
	if b.vDrained && b.vFrom > gen {
		return true
	}
	b.vWanted = true
	if b.vDrained {
		b.noteDue(b.now()) // this run's drain is too old: the next one drains again
	}
	return false
}

// vMark is what a drain noted of a source another goroutine owned: how
// many times its owner had found it drained, and the drain's number.
type vMark struct{ emptied, gen uint64 }

// drainForVerdict receives and handles what every source already holds
// (see above). It reports whether it could look at every source (b.mu
// held).
func (b *Board) drainForVerdict() bool {
	b.drainGen++
	b.vFrom = b.drainGen
	all := true
	for _, s := range b.allSrcs {
		owned := s == b.rxOwned
		if !owned && !s.mu.TryLock() {
			s.wantEmptied.Store(true) // before the count is read: see rxSource.drained
			e := s.emptied.Load()
			mark, marked := b.vMarks[s]
			if marked && e != mark.emptied {
				b.vFrom = min(b.vFrom, mark.gen)
				continue // its owner found it drained since the verdict came due
			}
			if !marked {
				if b.vMarks == nil {
					b.vMarks = make(map[*rxSource]vMark)
				}
				b.vMarks[s] = vMark{e, b.drainGen}
			}
			if s.kick != nil {
				s.kick() // out of Recv, so that it finds the transport drained
			} else if s.waker != nil {
				s.waker.Wake() // a NIC loop may wait there until its stretched tick
			}
			all = false
			continue
		}
		for range drainBatches {
			n, _ := s.tr.Recv(s.rx, 0)
			if n == 0 {
				break
			}
			b.cnt[VerdictDrainFrames] += uint64(n)
			b.handleBatchLocked(s, s.rx[:n])
		}
		if !owned {
			s.mu.Unlock()
		}
	}
	return all
}

// timersWithVerdicts runs every endpoint's duties, draining the sources
// and running them again when one found a verdict due (b.mu held).
func (b *Board) timersWithVerdicts() bool {
	b.vWanted, b.vDrained = false, false
	busy := b.timerPass()
	if !b.vWanted {
		b.clearMarks() // no verdict waits: a later one starts afresh
		return busy
	}
	if !b.drainForVerdict() {
		b.cnt[VerdictsDeferred]++
		return true
	}
	b.clearMarks()
	b.vDrained = true
	b.stampAcks(b.setNow()) // the drained frames' acks too (ack.go)
	busy = b.timerPass() || busy
	b.vDrained, b.vWanted = false, false
	return busy
}

// clearMarks forgets the counts noted for a verdict, and tells the
// sources' owners they need not count any more (rxSource.drained).
func (b *Board) clearMarks() {
	clear(b.vMarks)
	for _, s := range b.allSrcs {
		if s.wantEmptied.Load() {
			s.wantEmptied.Store(false)
		}
	}
}

// timerPass runs the lost-peer check and every endpoint's duties once.
func (b *Board) timerPass() bool {
	b.checkLostPeers() // peerloss.go
	b.failFDLimited()  // fdlimit.go
	busy := false
	for _, e := range b.epl {
		if e.timers() {
			busy = true
		}
	}
	return busy
}
