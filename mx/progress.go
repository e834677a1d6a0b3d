package mx

import (
	"errors"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// How a board makes progress: its clock (read once for the work in hand),
// the periodic tick that runs every endpoint's timers, the progress goroutine
// that receives batches of frames and hands them to the protocol, and
// unlock, which runs the copies queued while the board's lock was held.
// Waiting for a request is in poll.go.

func (b *Board) clock() int64 { return int64(time.Since(b.base)) }

// The board's clock for the work in hand. A batch of received frames used
// to read the clock once before its first frame, but most batches never
// look at it: a message to a posted receive through the rings needs no
// time at all, and the read (tens of nanoseconds on a virtual machine's
// clock source) was a tenth of such a message's cost. So a batch only
// forgets the reading (handleBatchLocked), and the first frame that needs
// the time reads it through now; the batch's later frames share that
// reading, as they shared the one made up front. Everything else reads
// the clock when it starts its work (setNow) and then uses now. A ring
// peer's ack deadline, which a message handled by a waiter would set, waits
// for the next reading instead (stampAcks).

// setNow reads the clock for the work in hand and returns it (b.mu held).
func (b *Board) setNow() int64 {
	b.useReading(b.clock())
	return b.nowv
}

// useReading makes now, a reading of the clock, the time of the work in
// hand, and folds in the round-trip samples that waited for it
// (sampleRTT). b.mu held.
func (b *Board) useReading(now int64) {
	b.nowv, b.nowOK = now, true
	if b.readWants {
		b.readWants = false
		if len(b.rttPend) > 0 {
			b.foldRTT()
		}
		b.stampAcks(now) // ack.go
	}
}

// now returns the clock as read for the work in hand, reading it first
// if nothing did since the batch began (b.mu held).
func (b *Board) now() int64 {
	if !b.nowOK {
		return b.setNow()
	}
	return b.nowv
}

// The clock and a polled message.
//
// Every small message of a ping-pong does ack bookkeeping on arrival: the
// ack it carries gives a round-trip sample, and the message starts a
// delayed-ack deadline. Nothing else in its handling needs the time, and
// a clock reading costs tens to hundreds of nanoseconds on a virtual
// machine's clock source (more where the hypervisor traps the TSC), a
// reading that sat between the message and the application's reply.
// A batch a polling waiter took has a reading at hand instead: the
// waiter's own latest (b.seen), made at most a few looks
// (busyClockEvery) before the look that found the frames, and not before
// a yield: a waiter that gave its CPU away since its reading passes none
// (pollSource's ack). A waiter asleep on its sources passes the reading
// it made as it woke, or after the burst that followed (sleep.go).
//
// The deadline takes it (ackClock): it is early by the waiter's gap
// between readings, so the ack may go that much sooner, well inside
// tailAckDelay, unless the machine took the waiter's CPU between its
// reading and its look; then the deadline may be in the past, and the
// next timer run sends the ack at once and counts itself late
// (finetimer.go's lateRun), as it would after that descheduling anyway.
// A round-trip sample does not take the waiter's reading: one taken on it
// would leave out the time the waiter took to find the frame,
// which on a loaded machine (a waiter descheduled between its reading
// and its look) is most of what the estimate's variance is there to
// cover. So the sample waits for the board's next reading (sampleRTT),
// the reply's send in a ping-pong, which reads the clock anyway, and is
// taken then if that reading came within rttFoldGap of the waiter's: it
// counts the receiver's time to find and handle the frame, as a reading
// at the handling did, and at most rttFoldGap of the application's. A
// later reading (an application that computed before it called mx
// again) would count the application's time: the sample is dropped, as
// Karn's rule drops an ambiguous one.

// A waiter's batch with no reading of the waiter's at hand (a reply
// found at its first look, before its first reading; a waiter that gave
// its CPU away) reads none either: the message's ack deadline waits for
// the board's next reading (the reply's send, whose piggyback clears it
// anyway, else the waiter's next look, which reads the clock at its first
// pass, else the receive loop's next look: noteReceived, stampAcks), as a
// ring peer's does, and a round-trip sample it is to give (one ack in
// rttEvery, counted apart from how the time is read: sampleRTT) reads the
// clock at once. The receive loop reads the clock once per batch,
// as its Recv returns, for the batch and the timer run after it
// (Board.rxRead). A reading costs 40-450 ns through the vDSO on this
// project's virtual machines, and a system call where the vDSO cannot
// read the clock source (a TCG guest's HPET, 4-7 µs): it was most of
// what a ping-pong's receive did beside the protocol. The sender stamps
// its request after the frame left (sendShort).

// rttFoldGap bounds the time between a polling waiter's reading and the
// board's next one within which the acks of the waiter's batch still
// give round-trip samples (sampleRTT): a sample may count up to that much
// of the receiver's own time, about the default tail-ack delay
// (tailAckDelay: RTOMin/4), which the peer's probe allows for anyway. A
// shorter bound kept only the samples of undisturbed exchanges on a
// loaded machine, and the questions to a late peer (ask.go) came a third
// more often.
const rttFoldGap = int64(64 * time.Microsecond)

// rttPending is a round-trip sample waiting for the next reading: the
// partner and when the acked request was sent.
type rttPending struct {
	p    *partner
	sent int64
}

// maxRTTPend bounds the samples one batch leaves pending; past it they
// are taken on a reading made at once.
const maxRTTPend = 64

// sampleRTT folds in the round-trip sample of an ack of a request sent
// at sent, for the partner's first ack and then one ack in rttEvery (the
// others are dropped, as Karn's rule drops an ambiguous one): at once
// when the batch has a reading, else at the board's next reading when a
// polling waiter's batch brought it (see above), else on a reading made
// now. b.mu held.
//
// Which acks give a sample is counted before, and apart from, how the
// time is read: a reply found at the waiter's first look has no reading
// at hand and a later one has the waiter's, so a choice that depended on
// the reading would depend on how late the reply came, and the estimate
// (and the ask's and the probe's timeouts) would lean toward the slow
// round trips (TestRoundTripSamplesUnbiased). The estimate gives no
// allowance for a descheduled peer: the timeouts add the machine's own
// (descheduled.go).
func (p *partner) sampleRTT(sent int64) {
	if p.rtt.ok {
		if p.rttSkip++; p.rttSkip < rttEvery {
			return
		}
		p.rttSkip = 0
	}
	b := p.ep.b
	switch {
	case b.nowOK:
		p.rtt.sampleSince(b.nowv, sent)
	case b.seen != 0 && len(b.rttPend) < maxRTTPend:
		if len(b.rttPend) == 0 {
			b.rttSeen = b.seen
		}
		b.rttPend = append(b.rttPend, rttPending{p: p, sent: sent})
		b.readWants = true
	default:
		p.rtt.sampleSince(b.now(), sent)
	}
}

// rttEvery is how many acks give one round-trip sample: a sample with no
// reading at hand reads the clock on the path from the message to the
// application's reply, and the estimate needs far fewer samples than a
// ping-pong gives.
const rttEvery = 8

// foldRTT takes the pending round-trip samples on the reading just made
// (b.nowv), or drops them when it came more than rttFoldGap after the
// waiter's (see above), or before it: another goroutine's reading from
// before the acks came (it was descheduled between its reading and its
// timer run) would make each sample nearly nothing. b.mu held.
func (b *Board) foldRTT() {
	if gap := b.nowv - b.rttSeen; gap >= 0 && gap <= rttFoldGap {
		for _, x := range b.rttPend {
			x.p.rtt.sampleSince(b.nowv, x.sent)
		}
	}
	clear(b.rttPend)
	b.rttPend = b.rttPend[:0]
}

// ackClock is now for a message's delayed-ack deadline: the batch's
// reading, else a polling waiter's (or a later one of the board's), else
// a reading made now (see above). The waiter's and the board's readings
// are never before a timestamp the protocol stored, so a deadline from
// their maximum is not in the past of any of them.
func (b *Board) ackClock() int64 {
	if b.nowOK {
		return b.nowv
	}
	if b.seen != 0 {
		return max(b.seen, b.nowv)
	}
	return b.now()
}

// busyLinger is how long after its last pending timer a board keeps
// ticking at tickBusy.
const busyLinger = 100 * time.Millisecond

// An idle board sleeps.
//
// A board ticks to time what is in flight: unacked sends, owed acks,
// connects, pulls, a large send's NOTIFY, held lean frames, queued sends,
// the copy engine's and zero-copy sends' completions, peers the transport
// saw go. A board with none of these has nothing to time, and on a node
// running a rank per core (or more) its ticks, each a wake-up of the
// progress goroutine, of a sleeping waiter and of the Go runtime's
// sysmon, came out of the CPUs the busy ranks need. So once two ticks
// in a row found nothing to time (quietLocked) and no message came
// between them (each calls wakeTicks), the board waits idleTickMax for
// its next tick (idleTick): an idle rank of a job makes two timer runs
// after its last message, where doubling the period from the fifth quiet
// tick made a dozen over the next second. A board that writes lanes
// (shm.Transport.LanesOut) waits their LaneIdle instead, at most
// idleTickMax: a lane retires at the first timer run (RetireIdle) LaneIdle
// after the one that found it idle, so it still retires within about
// two LaneIdle of its last frame. A busy board never stretches: its
// messages come between its ticks, a lean send among them (lean.go),
// which times nothing but keeps a board that only sends so (a stream's
// sender) answering its lanes' retire requests and counting its peers
// at every tick. Whatever starts timed work calls wakeTicks, which
// brings the next tick back to tickBusy from now and, since the progress
// goroutine or a sleeping waiter may be waiting for the stretched tick,
// sets the fine timer
// (finetimer.go) to fire it; the fine timer keeps the ticks until the
// progress goroutine has looked again, which then waits for them
// itself. Frames and application calls wake the board as before: a
// stretched tick only delays the periodic duties of a board that has
// none. The oversubscription count (oversub.go) and the machine's
// descheduling window (descheduled.go) move at every timer run, so an
// idle board counts again when it wakes, not on a schedule of its own.
// The liveness clock (liveness.go) does not take a stretched tick for a
// stall of the board. Without a fine timer the ticks never stretch.
const (
	idleAfter   = 1
	idleTickMax = time.Second
)

// timersLocked runs every periodic duty when a tick is due (or force),
// and the retransmission timers alone when only a noted deadline is
// (finetimer.go).
func (b *Board) timersLocked(force bool) { b.timersAt(force, 0) }

// timersAt is timersLocked by a caller that read the clock a moment ago
// (read, by b.clock; 0: none), as a polling waiter does to see that a
// deadline passed (runDue, polledLocked): the run takes that reading (or a
// later one of the board's) as its time instead of reading the clock
// again at once, a reading as dear as the rest of a tick's check (see
// ackClock). A run that reaps a pull's copies first, which may wait,
// reads the clock after them.
func (b *Board) timersAt(force bool, read int64) {
	if len(b.pcopies) > 0 {
		b.reapPullCopies(true) // pulloffload.go
		read = 0
	}
	var now int64
	if read != 0 {
		b.useReading(max(read, b.nowv))
		now = b.nowv
	} else {
		now = b.setNow()
	}
	b.stampAcks(now) // ack.go
	if !force && now < b.nextTick.Load() {
		if d := b.due.Load(); d != 0 && now >= d {
			b.runTimersAt(now)
		}
		return
	}
	b.runTimersAt(now)
	b.tickRuns++
	now = b.now()
	next := now + int64(b.tick)
	if now-b.lastBusy < int64(busyLinger) {
		next = now + int64(b.tickBusy)
	}
	if b.fine != nil && now-b.lastBusy >= int64(busyLinger) && b.quietLocked() {
		b.quietRuns++
	} else {
		b.quietRuns, b.idleTick = 0, 0
	}
	if b.quietRuns > idleAfter {
		b.idleTick = idleTickMax
		if tr := b.shmTransport(); tr != nil && tr.LanesOut() > 0 && tr.LaneIdle() > 0 {
			b.idleTick = min(max(tr.LaneIdle(), 2*b.tick), idleTickMax)
		}
		next = now + int64(b.idleTick)
		b.live.planned = int64(b.idleTick - b.tick) // liveness.go
	}
	b.nextTick.Store(next)
}

// quietLocked reports whether the board has nothing to time: nothing in
// flight, owed or waiting that a timer run would act on (b.mu held).
func (b *Board) quietLocked() bool {
	if b.due.Load() != 0 || len(b.pcopies) > 0 || len(b.toStamp) > 0 || len(b.ackOwed) > 0 ||
		len(b.lost) > 0 || b.anyHeld || b.ackHeld != nil || (b.zc != nil && len(b.zc.drain) > 0) {
		return false
	}
	for _, e := range b.epl {
		if e.resq.Len() > 0 {
			return false
		}
		for _, p := range e.plist {
			if (p.notAcked > 0 || p.ackStale) && p.ackDeadline != 0 || p.unacked.Len() > 0 ||
				p.waitq.Len() > 0 || p.connecting.Len() > 0 || p.held != nil {
				return false
			}
		}
		for _, pl := range e.pulls {
			if pl != nil {
				return false
			}
		}
		for i := range e.regions {
			if e.regionsUsed == 0 { // nothing to scan (largefail.go)
				break
			}
			if reg := &e.regions[i]; reg.used && reg.lastPull != 0 {
				return false
			}
		}
	}
	return true
}

// wakeTicks is called by whatever starts work the ticks time: on an idle
// board it brings the next tick back to tickBusy from now (b.mu held; see
// above).
func (b *Board) wakeTicks() {
	b.quietRuns = 0
	if b.idleTick != 0 {
		b.unidle()
	}
}

// unidle ends an idle board's stretched ticks (wakeTicks).
func (b *Board) unidle() {
	b.idleTick = 0
	t := b.clock() + int64(b.tickBusy)
	if t < b.nextTick.Load() {
		b.nextTick.Store(t)
	}
	b.fineTicks, b.fineMark = true, b.looks.Load()
	b.armFine(t)
}

// runTimersLocked runs every endpoint's periodic duties now. It leaves
// nextTick alone, so the periodic tick keeps its schedule when the fine
// goroutine (finetimer.go), which holds mu alone, calls this.
func (b *Board) runTimersLocked() { b.runTimersAt(b.setNow()) }

// runTimersAt is runTimersLocked by a caller that has just read the clock
// (now, by setNow). The clock is read again only after a late run drained
// the sources (lateRun), which takes time: a timer run otherwise costs one
// reading, the one its caller made to see that the run was due.
func (b *Board) runTimersAt(now int64) {
	if d := b.due.Load(); d != 0 && now >= d {
		b.lateRun(now) // finetimer.go
		now = b.setNow()
	}
	b.stampAcks(now)               // ack.go
	b.noteTimerRun(b.now())        // liveness.go
	descheduling.rotate()          // descheduled.go
	b.countOversub(b.now())        // oversub.go
	b.due.Store(0)                 // the timers below note it again
	busy := b.timersWithVerdicts() // verdict.go
	if busy {
		b.lastBusy = b.now()
	}
	// Lanes idle for LaneIdle go back to the queue (shm.RetireIdle looks
	// at them once per eighth of it), on the host path and on a board
	// whose own transport is the rings.
	if b.host != nil {
		b.host.tr.RetireIdle(b.base.Add(time.Duration(now)))
	}
	if b.rings != nil {
		b.rings.RetireIdle(b.base.Add(time.Duration(now)))
	}
	b.retryHeld()          // lean.go
	if b.zcDrainLocked() { // zerocopy.go
		b.lastBusy = b.now()
	}
	if b.placeDrainLocked() { // placerecv.go
		b.lastBusy = b.now()
	}
	b.placeTick() // placerecv.go
}

func (b *Board) progress() {
	defer close(b.exited)
	timer := time.NewTimer(b.tick)
	defer timer.Stop()
	s := b.src
	wasAway := false
	for {
		select {
		case <-b.quit:
			return
		default:
		}
		if away, d := b.stayAway(s); away {
			wasAway = true
			// Waiters poll the transport, or did a moment ago and
			// probably will again (poll.go): keep only the timers
			// running, so that the next waiter finds Recv free. While
			// waiters poll they run the timers themselves (runDue at
			// their clock readings), so the loop sleeps until the last
			// of them leaves (s.wake) or d passes, not until the next
			// tick: on a machine whose every P a poller holds, a loop
			// woken for each tick waits for the runtime to preempt a
			// poller (every 10 ms, a signal) and then takes its P.
			if s.polling() == 0 || s.asleep.Load() {
				d = min(d, time.Duration(b.nextTick.Load()-b.clock()))
			}
			timer.Reset(max(d, time.Microsecond))
			select {
			case <-b.quit:
				return
			case <-s.wake:
			case <-timer.C:
				b.sleepsEmpty.Add(1)
			}
			b.looks.Add(1)
			if b.serveSends.Load() && !b.opts.BusyPoll && s.polling() == 0 {
				b.drainServed(s) // rxsource.go
			}
			b.mu.Lock()
			b.uncapped = s.polling() == 0
			b.timersLocked(false)
			b.uncapped = false
			b.unlock()
			continue
		}
		if b.fineLapsed.Load() {
			// Back from staying away: nobody watches the deadlines
			// now (finetimer.go).
			b.mu.Lock()
			b.armLapsed()
			b.unlock()
		}
		if wasAway && s.served != nil {
			// Waiters or sends took the frames while the loop stayed
			// away: its wait sleeps at its first empty look.
			s.served()
		}
		wasAway = false
		s.mu.Lock()
		t0 := b.clock()
		wait := time.Duration(b.nextTick.Load() - t0)
		if wait < 0 {
			wait = 0
		}
		wait = min(wait+time.Microsecond, idleTickMax)
		if s.waker == nil && s.kick == nil {
			wait = min(wait, b.tick) // Close cannot end its Recv sooner
		}
		if b.opts.BusyPoll && s.kick == nil {
			wait = min(wait, pollHandover) // a poller may be waiting for Recv
		}
		if b.pcopyN.Load() > 0 {
			wait = 0 // look again at once: the engine's copies are reaped next (pulloffload.go)
		}
		b.loopRecvs.Add(1)
		if wait != 0 {
			b.loopWaits.Add(1)
		}
		n, err := b.tr.Recv(s.rx, wait)
		if n == 0 && err == nil && wait > 0 && b.clock()-t0 >= int64(wait) {
			b.sleepsEmpty.Add(1) // a timeout, not a Wake
		}
		woke := b.woke.Load() // what this batch and the timers wake
		b.loopOut.Add(1)
		b.looks.Add(1)
		// One reading for the batch and the timer run after it, made
		// before the lock: the run reads the clock anyway, and a
		// message's round-trip sample (one ack in rttEvery gives one:
		// sampleRTT) and ack deadline want the time it came.
		var read int64
		if n > 0 {
			read = b.clock()
		}
		b.mu.Lock()
		b.rxRead = read
		b.handleBatchLocked(s, s.rx[:n])
		b.rxRead = 0
		b.rxOwned = s // its verdicts may drain s (verdict.go)
		b.uncapped = s.polling() == 0
		b.timersAt(false, read)
		b.uncapped = false
		b.rxOwned = nil
		b.release(false)
		if n < len(s.rx) {
			s.drained() // verdict.go
		}
		s.mu.Unlock()
		b.runCopies() // cma.go
		b.yieldToWoken(woke)
		if err != nil {
			if errors.Is(err, transport.ErrClosed) {
				return
			}
			select {
			case <-b.quit:
				return
			case <-time.After(time.Millisecond): // a transient transport error
			}
		}
	}
}

// handleBatchLocked handles the frames s returned (b.mu held).
func (b *Board) handleBatchLocked(s *rxSource, rx []transport.Frame) {
	if len(b.pcopies) > 0 {
		// Started while an earlier batch was handled (pulloffload.go);
		// with nothing received, there is nothing better to do than wait.
		b.reapPullCopies(len(rx) == 0)
	}
	if len(rx) == 0 {
		return
	}
	if t := b.rxRead; t != 0 {
		// The receive loop's reading as the frames came: the batch's
		// round-trip samples and ack deadlines take it, and so does the
		// timer run after it (progress).
		b.rxRead = 0
		b.useReading(max(t, b.nowv))
	} else {
		b.nowOK = false // read when a frame needs it (now)
	}
	tr := b.batchFrom(rx)
	b.batchDepth++     // ack deadlines wait for its end (ack.go's noteAckArms)
	outer := b.rxRings // a verdict's drain may nest one batch in another
	b.rxRings = s.rings
	outerLeft := b.rxLeft
	// The counts by lane (placerecv.go), saved and restored only where
	// the transport places by lane: a copy of the array each way was a
	// tenth of this function's instructions.
	var outerLane [transport.MaxLanes + 1]int
	lanes := b.plc != nil && b.plc.lanes > 0
	if lanes {
		outerLane = b.rxLeftLane
		for i := range rx {
			if l := rx[i].Lane; l > 0 && int(l) <= transport.MaxLanes {
				b.rxLeftLane[l]++
			}
		}
	}
	for i := range rx {
		f := &rx[i]
		b.rxLeft = outerLeft + len(rx) - 1 - i
		if l := f.Lane; lanes && l > 0 && int(l) <= transport.MaxLanes {
			b.rxLeftLane[l]--
		}
		if tr != nil {
			b.curFrame = f
		}
		if f.Placed != nil {
			b.curFrame = nil                         // not one the engine may hold
			b.handlePlaced(f.Peer, f.Data, f.Placed) // placerecv.go
		} else {
			b.handleFrame(f.Peer, f.Data)
		}
		b.curFrame = nil
		f.Data, f.Placed = nil, nil
	}
	b.rxLeft = outerLeft
	if lanes {
		b.rxLeftLane = outerLane
	}
	b.rxRings = outer
	if len(rx) < len(s.rx) {
		b.ackDrained() // ack.go: its acks go before their deadlines are noted
	}
	if b.batchDepth--; b.batchDepth == 0 {
		if len(b.ackEnds) > 0 {
			b.sendBatchAcks() // ack.go: before the deadlines they clear are noted
		}
		if len(b.ackArms) > 0 {
			b.noteAckArms() // ack.go
		}
	}
	if n := int32(len(b.pcopies)); b.pcopyN.Load() != n {
		// Stored only when it moved: an atomic store is a locked
		// instruction, and nearly every batch leaves it at 0.
		b.pcopyN.Store(n)
	}
}

// unlock drains frames the board sent to itself, releases mu, then
// completes the local sends of other boards it finished (see local.go).
func (b *Board) unlock() { b.release(true) }

// release is unlock; with copies false it leaves queued single copies
// (cma.go) for runCopies, for a caller that still holds a receive
// source's lock: a copy must not keep other goroutines from the rings.
func (b *Board) release(copies bool) {
	if len(b.selfq) == 0 && len(b.lout) == 0 && (!copies || len(b.cmaq) == 0) {
		// Nothing queued (the common case): a plain unlock.
		b.unlockKick()
		return
	}
	for {
		if !b.draining {
			b.draining = true
			for i := 0; i < len(b.selfq); i++ {
				f := b.selfq[i]
				b.selfq[i] = nil
				b.handleFrame(b.nic, f)
				b.putBuf(f)
			}
			b.selfq = b.selfq[:0]
			b.draining = false
		}
		out := b.takeLocalOut()
		var c *cmaCopy
		if copies {
			c = b.takeCopy()
		}
		b.unlockKick()
		if out != nil {
			runLocalOut(out) // completions of local sends from other boards
		}
		if c == nil {
			return
		}
		// A single copy queued while the lock was held: run it here,
		// without the lock, then complete it (cma.go).
		c.copyData()
		b.mu.Lock()
		c.finish()
	}
}
