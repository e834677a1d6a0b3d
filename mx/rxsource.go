package mx

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/internal/owned"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// A board's receive sources (its transport, and the host path's rings) and
// who may call Recv on one: the receive loop, or a waiter polling it in its
// window. stayAway keeps the loop out while waiters poll, testSource is
// Request.Test's look, and pollSource and lookSource are a waiter's. The
// wait itself, pollWait, is in poll.go.

// rxSource is one thing a board receives frames from, with its owner lock.
type rxSource struct {
	tr transport.Transport
	// mu is held by whoever is inside tr.Recv or still handling the frames
	// it returned (they point into the transport's buffers).
	mu sync.Mutex
	rx []transport.Frame
	// spin: adaptive waiters poll it (it costs no system call to look at:
	// shared-memory rings, an AF_XDP socket's or a NIC queue's RX ring;
	// transport.Spinner).
	spin bool
	// rings: it is shared-memory rings (frames there carry no trailer).
	rings bool
	// kick makes a Recv in progress return soon (nil: wait for its timeout).
	kick func()
	// The waiters polling it now (polling) are those that came (pollIn)
	// minus those that left: pollDone counts the waiters whose own look
	// consumed their request, under mu (lookSource), as an owned count
	// (a plain load and store: an atomic add there would cost a locked
	// instruction between the message and the application), and
	// pollLeft every other leaving.
	pollIn   atomic.Uint64
	pollDone owned.Count
	pollLeft atomic.Uint64
	// idle is when the last poller stopped with success: idleFresh until
	// the receive loop reads the clock for it (stayAway), so a waiter
	// completed by polling reads no clock.
	idle atomic.Int64
	wake chan struct{}
	// tests counts Request.Test's looks at the source (testSource), and
	// loopTests is the count when its receive loop last looked at it
	// (stayAway): an application testing that often polls for the loop.
	tests, loopTests atomic.Uint64
	// emptied counts the Recvs that found the transport drained (fewer
	// frames than asked for), once their frames were handled, while
	// wantEmptied is set: a verdict waits for it (verdict.go). (Counting
	// always cost a locked instruction per look of every polling waiter.)
	emptied     atomic.Uint64
	wantEmptied atomic.Bool
	// pending, when not nil, says whether a Recv would find anything to
	// do (shm.Transport.Pending). The look of lookSource gets that verdict
	// from takeLane's Peek, and takes no Recv when the rings are empty.
	pending func() bool
	// lane, for rings, lets a waiter take a lane record without a Recv
	// (lane.go's takeLane).
	lane *shm.Transport
	// sleeper, when not nil, lets a waiter sleep on the source in the
	// kernel (sleep.go); asleep is set while one owns it for that.
	sleeper transport.Sleeper
	asleep  atomic.Bool
	// waker, when not nil, ends the receive loop's wait in Recv at once
	// (a Sleeper is one), so the loop may wait there as long as the
	// board's next tick, however stretched, and Close need not wait for it.
	waker transport.Waker
	// served, when not nil, tells the transport that frames were taken
	// by others' looks while the receive loop stayed away, so its next
	// Recv wait sleeps at its first empty look (transport.Served).
	served func()
}

func newRxSource(tr transport.Transport) *rxSource {
	s := &rxSource{tr: tr, rx: make([]transport.Frame, rxBatch), wake: make(chan struct{}, 1)}
	s.idle.Store(idleNever)
	s.sleeper, _ = tr.(transport.Sleeper)
	s.waker, _ = tr.(transport.Waker)
	if sv, ok := tr.(transport.Served); ok {
		s.served = sv.Served
	}
	if rw, ok := tr.(interface{ RecvWaker() transport.Waker }); ok && s.waker == nil {
		s.waker = rw.RecvWaker() // a fault wrapper whose Recv passes through
	}
	if st, ok := tr.(*shm.Transport); ok {
		s.spin, s.rings, s.kick, s.pending, s.lane = true, true, st.Wake, st.Pending, st
		// Every send of the board holds b.mu, and none (SendParts:
		// the lane's, from isend) follows its endpoints' close, which
		// comes before the transport's: the lane's record goes into
		// the ring without a lock of the ring's.
		st.SerialSends()
	} else if sp, ok := tr.(transport.Spinner); ok && sp.SpinCheap() && s.waker != nil {
		// An AF_XDP socket: the kernel writes the frame into the RX
		// ring in the sender's system call, so a waiter polling the
		// ring takes it with no wake-up (poll.go). A NIC queue of a
		// queued board likewise: the NIC writes the frame and its
		// descriptor, and the waiter serves its own endpoint's queue
		// to completion under that queue's lock alone. Its loop, inside
		// Recv, is asked out with Wake; a transport that cannot be
		// asked out (a fault wrapper around one, say) is not polled
		// by waiters, who would spin against the loop's lock.
		s.spin = true
		s.kick = s.waker.Wake
	}
	return s
}

// polling returns the number of waiters polling s now, or more: the
// leavings are loaded before the comings, so a waiter that comes and
// leaves meanwhile is counted at most as still polling, and a pollDone
// stored a moment ago may be missed (it is seen at the next look).
func (s *rxSource) polling() uint64 {
	left := s.pollDone.Load() + s.pollLeft.Load()
	return s.pollIn.Load() - left
}

// drained records that a Recv of s's owner found its transport drained
// and its frames are handled, when a verdict waits for that (verdict.go).
// Called with s.mu held.
func (s *rxSource) drained() {
	if s.wantEmptied.Load() {
		s.emptied.Add(1)
	}
}

// idleFresh is rxSource.idle after a poller's success that the receive
// loop has not timed yet; idleNever, after the last poller gave up.
const (
	idleFresh = math.MaxInt64
	idleNever = -1 << 62
)

// stayAway reports whether the receive loop of s should leave Recv to
// waiters, and for how long at most before it looks again. A poller's
// success counts from the loop's first look after it: at most one
// spinGrace later than the success, as the loop looks that often while
// waiters poll.
func (b *Board) stayAway(s *rxSource) (bool, time.Duration) {
	grace := b.spinGrace()
	if s.polling() > 0 {
		if s.asleep.Load() {
			// A waiter sleeps on it (sleep.go) and hands it back
			// itself (s.wake): look again for the timers only (at
			// the next tick, progress.go).
			return true, idleTickMax
		}
		return true, grace
	}
	now := b.clock()
	idle := s.idle.Load()
	if idle == idleFresh && !s.idle.CompareAndSwap(idleFresh, now) {
		idle = s.idle.Load() // a poller gave up meanwhile: idleNever
	}
	if idle == idleFresh {
		idle = now
	}
	if left := time.Duration(idle + int64(grace) - now); left > 0 {
		return true, left
	}
	if grace > 0 && s == b.src && s.spin && b.serveSends.Load() && !b.opts.BusyPoll &&
		!b.handlers.Load() && b.sleep.chanSleepers.Load() == 0 {
		// The queue its sends serve (serveSource's conditions; not the
		// host path, whose loop does not drain while away), served
		// lately, no waiter asleep (servedLinger): look again a grace
		// later, not in Recv. The Tests counted meanwhile were the
		// application's looks, not a reason to stay away longer.
		if left := time.Duration(idle + int64(servedLinger) - now); left > 0 {
			s.loopTests.Store(s.tests.Load())
			return true, min(left, grace)
		}
	}
	if t := s.tests.Load(); t-s.loopTests.Swap(t) >= testsToStay {
		return true, testAway
	}
	return false, 0
}

// servedLinger is how long after its application last served it (a
// send's look, a waiter's success) a queue's receive loop stays out of
// Recv while no waiter of its board sleeps on its channel (see
// serveSource).
const servedLinger = time.Millisecond

// An application that tests its requests often (Request.Test between
// slices of a computation, as RMPP's and netperf's availability loops do)
// polls the rings itself: each Test looks at them (lookSource) and handles
// what it finds on its own thread. A receive loop asleep in Recv holds the
// rings, so those looks found them taken, and every frame woke the loop on
// the application's CPU instead: a doorbell, a thread switch and the Go
// scheduler's search for work, per frame, to handle what the next Test
// would have handled a few microseconds later. So a loop that finds the
// rings tested testsToStay times since it last looked stays away for
// testAway, as it does for a polling waiter, and looks again then: while
// the Tests keep coming it wakes once per testAway, not once per frame.
// Only an application testing that often (every 60 µs or so) keeps it
// away, so a frame waits for the next Test no longer than that. A Test
// that finds the loop inside Recv after testsToKick Tests since the loop
// last looked asks it to step aside (the transport's Wake). When the Tests
// stop, a frame waits at most testAway for the loop.
const (
	testsToStay = 16
	testsToKick = 64
	testAway    = time.Millisecond
)

// testSource is Request.Test's look at s: it handles what s has if its
// receive loop is not inside Recv, and counts the look for the loop
// (stayAway); after testsToKick looks while the loop keeps s, it asks the
// loop to step aside. The single copies its frames queued (cma.go) it
// leaves to the loop, which it wakes: a Test returns at once, as an
// application testing between slices of its work expects, and the copy
// runs where mx's progress runs (a CPU of its own, if the application
// gave it one), not in the application's thread.
func (b *Board) testSource(s *rxSource) {
	n := s.tests.Add(1)
	if looked, _ := b.lookSource(s, 0, 0, nil); looked {
		if b.cmaQueued.Load() > 0 {
			// Away (stayAway) or about to enter Recv: either way
			// it comes back to run them.
			select {
			case s.wake <- struct{}{}:
			default:
			}
			if s.kick != nil {
				s.kick()
			}
		}
		return
	}
	if s.kick != nil && n-s.loopTests.Load() >= testsToKick {
		s.kick()
	}
}

// maxSpinGrace bounds spinGrace: a long Spin keeps waiters polling, not
// the receive loop away from frames nobody waits for.
const maxSpinGrace = 100 * time.Microsecond

// spinGrace is how long a receive loop stays away from Recv after a
// waiter polled it successfully.
func (b *Board) spinGrace() time.Duration {
	if b.opts.BusyPoll {
		return pollGrace
	}
	return min(max(b.opts.Spin, 0), maxSpinGrace)
}

// pollSource receives and handles one batch from s if nobody else owns
// its Recv, and reports whether it could look. w, when not nil, is the
// waiter's request (see waiterReq). Unless the batch completed w's
// request, it runs the timers when a
// tick is due by the batch's clock or, when no frame of it needed the
// time, by seen, the waiter's own latest reading (0: none): a waiter that
// polls a while reads the clock anyway (pollWait), and the receive loop,
// which stays away meanwhile, may not get a CPU soon (with GOMAXPROCS 1
// not before the waiter is preempted). ack is the reading the batch's
// ack bookkeeping may take as now (ackClock), 0 for none: seen when the
// waiter has not given its CPU away since it read it. A late seen only
// runs the timers later; a late ack would date deadlines in the past.
func (b *Board) pollSource(s *rxSource, seen, ack int64, w *waiterReq) (looked, found bool) {
	looked, found = b.lookSource(s, seen, ack, w)
	b.runCopies() // cma.go: without the source's lock
	return looked, found
}

// lookSource is pollSource without running the single copies its frames
// queued (cma.go).
func (b *Board) lookSource(s *rxSource, seen, ack int64, w *waiterReq) (looked, found bool) {
	if !s.mu.TryLock() {
		return false, false
	}
	found = b.lookLocked(s, seen, ack, w)
	s.mu.Unlock()
	return true, found
}

// lookLocked is lookSource's look, by the owner of s.mu. It reports
// whether it found anything (a lane record, or frames).
func (b *Board) lookLocked(s *rxSource, seen, ack int64, w *waiterReq) bool {
	if s.lane != nil {
		// One look at the rings: a lane record taken, or nothing
		// there (Pending's verdict), or a Recv for the rest.
		switch b.takeLane(s, seen, w) { // lane.go
		case laneTaken:
			if w != nil && w.ok && w.polling {
				// Its waiter leaves s's pollers: the loop times
				// its success (stayAway), and sees it fresh when
				// it sees the waiter gone.
				if s.idle.Load() != idleFresh {
					s.idle.Store(idleFresh)
				}
				s.pollDone.Inc()
				w.doneAt = s
			}
			return true
		case laneEmpty:
			s.drained()
			return false
		}
	}
	n, _ := s.tr.Recv(s.rx, 0)
	if n > 0 {
		b.mu.Lock()
		was := w != nil && w.ok
		b.seen = ack // the ack bookkeeping's clock (ackClock)
		if w != nil && !w.ok {
			b.rxWaiter = w.r
		}
		b.handleBatchLocked(s, s.rx[:n]) // reads the clock only if a frame needs it
		if b.ackHeld != nil && w != nil && w.asleep {
			// A waiter asleep on the sources reads no clock until it
			// sleeps again, and the loop stays away meanwhile: the ack
			// holdAck left takes its deadline now, as noteReceived's.
			if now := b.now(); b.ackHeld != nil {
				b.releaseHeldAck(now)
			}
		}
		b.rxWaiter = nil
		b.seen = 0
		if r := b.rxTook; r != nil && w != nil && r == w.r {
			// recvShort delivered the waiter's own receive and left
			// it to the waiter: consumed now, without its completion.
			b.rxTook = nil
			r.status.copyTo(&w.st)
			w.ok = true
			b.freeLater(r) // cleared for the pool once the reply is out
		}
		if w != nil && !w.ok && w.r.done.Load() && w.r.waiters == 0 {
			// The batch completed the waiter's request (or it was done
			// already): consumed here, under the lock its Wait would
			// take again, as takeLane does. (recvShort consumes the
			// waiter's own receive as it delivers it.)
			w.ok = w.r.consumeLocked(&w.st)
		}
		if w != nil && w.ok && !was && !w.asleep {
			b.waitPolledLocked.Inc() // its wait ends polled (firstLook, pollWait)
		}
		if w != nil && w.ok {
			// Its waiter returns to the application, which likely
			// sends at once (a reply, the next message): the timers
			// wait for the waiter's next look, or whoever runs next,
			// rather than delay that send by a run.
			b.release(false)
		} else {
			b.polledLocked(s, seen, w)
		}
	}
	if n < len(s.rx) {
		s.drained() // verdict.go
	}
	if w != nil && w.ok && w.polling && n > 0 {
		// As for a lane record (above): the waiter leaves s's pollers.
		if s.idle.Load() != idleFresh {
			s.idle.Store(idleFresh)
		}
		s.pollDone.Inc()
		w.doneAt = s
	}
	return n > 0
}

// polledLocked ends a waiter's handling of what it took from s: it runs
// the timers when their deadline (finetimer.go) has passed by the clock
// the handling read or, when it read none, by seen (see pollSource), and
// releases b.mu (held). w is the waiter's request (nil: none); a
// waiter for its own send's completion spins on no reply, and its run
// keeps the questions' estimate (Board.uncapped), as runDue's does.
func (b *Board) polledLocked(s *rxSource, seen int64, w *waiterReq) {
	read := int64(0) // the handling's reading, a moment old (timersAt)
	if b.nowOK {
		seen, read = b.nowv, b.nowv
	}
	if seen != 0 && seen >= b.deadline() { // finetimer.go
		b.rxOwned = s // verdict.go
		b.uncapped = w != nil && w.r.kind == kindSend
		b.timersAt(false, read)
		b.uncapped = false
		b.rxOwned = nil
	}
	b.release(false)
}

// firstLook is a request waiter's first look at its sources (those that
// cost no system call when mixed), as Test's, before it counts itself
// among their pollers: when its message is there already (a reply that
// came while it sent, or anything the waiter found ready) the wait ends
// with one look, and without registering as a poller (a locked
// instruction per source) and the deferred accounting of pollWait's loop.
// A success is accounted as the loop's: the wait counts as Polled, and
// the receive loop times the success (stayAway). w's request is done
// when it reports true; idle reports that it was not, and that the look
// found every source it looked at empty and owned by nobody else (none
// inside its receive loop's Recv), so that a look at once after it
// would most likely find nothing either.
func (b *Board) firstLook(w *waiterReq, srcs []*rxSource, mixed bool) (done, idle bool) {
	idle = true
	for _, s := range srcs {
		if !mixed || s.spin {
			looked, found := b.lookSource(s, 0, 0, w)
			b.runCopies() // as pollSource does
			idle = idle && looked && !found
		}
	}
	if !w.ok && !w.r.done.Load() {
		return false, idle
	}
	for _, s := range srcs {
		if s.idle.Load() != idleFresh {
			s.idle.Store(idleFresh)
		}
	}
	if !w.ok {
		b.waitPolled.Add(1) // else counted by takeLane
	}
	return true, false
}

// waitSources returns the sources a waiter polls: in busy-poll mode all of
// them, else those that cost no system call, and only if Spin allows.
func (b *Board) waitSources() []*rxSource {
	if b.opts.BusyPoll {
		return b.allSrcs
	}
	if b.opts.Spin <= 0 {
		return nil
	}
	return b.spinSrcs
}

// A queue's board serves its queue on the sending goroutine too.
//
// A waiter serves its own queue while it polls (poll.go). The frames that
// come for no waiter are mostly acks: a board that streams sends receives
// an ack for every few of them, and nobody waits on the sending side (a
// send completes as its frame leaves). On such a queue its locked
// progress thread alone looked for them, in the driver's polling WaitRx,
// whose every runtime.Gosched on a locked thread is a hand-off of the Go
// processor to another thread and back (four futex calls, two context
// switches); with a thread per queue and side, those hand-offs grow with
// the queues, not with the frames, and on two cores shared with the
// application's goroutines and the NIC models they took the CPU that
// steering was meant to win (docs/nics.md, "Two pairs, one CPU"). So a
// send on a queue's board ends with one look at its queue
// (serveSource), as Open-MX's isend calls its progression and a DPDK
// lcore reaps its own receive queue, and a look that could take the
// queue counts as a poller's success does: the loop stays away spinGrace
// after it (stayAway), its timers running, and longer (below). A look that finds the loop inside Recv asks it out (the
// transport's Wake), so the next send's look finds the queue free.
// A waiter that gives up polling hands the queue back at once, as before
// (pollWait); a send on the same board a moment later keeps the loop away
// again, and its look completes that waiter's request if its frame came.
// Past spinGrace the loop still stays out of Recv, for servedLinger after
// the last service, while no waiter of the board sleeps on its channel:
// it looks every spinGrace from a timer (drainServed), so a queue whose
// application serves it costs its thread a timer wake-up per grace, where
// it polled in the driver's WaitRx between the application's looks, a
// hand-off per look (or a wake-up on the vector per frame). A waiter that
// goes to sleep hands the queue back first (pollWait), so its message
// still finds an owner within a grace (at once, unless another waiter
// still polls or a send marks the queue served again meanwhile). The host
// path's loop, boards with handlers and queues whose look costs a system
// call do not linger. A board without a poll window
// (Spin <= 0) has no grace: its sends do not look, and its loop never
// stays away. Nor do the sends of a busy-polling board (BusyPoll), whose
// waiters poll without a budget and keep the loop away themselves: its
// ping-pong's median round trip came out slower with the looks (8 B over
// two emulated 82599s, mxbench --wait spin, docs/nics.md).

// serveSource is a send's look at s, its board's queue: it handles what
// s has if nobody else owns its Recv, and then keeps the receive loop
// away for spinGrace. It looks only at a queue that costs no system call
// to look at (transport.Spinner, as waiters poll), and not on a board one
// of whose endpoints had an UnexpectedHandler: a handler runs where the
// progress engine runs, never inside ISend.
func (b *Board) serveSource(s *rxSource) {
	if !s.spin || b.opts.BusyPoll || b.handlers.Load() || b.spinGrace() <= 0 {
		// A look that costs a system call, waiters that poll without a
		// budget (they keep the loop away themselves), a handler to
		// keep out of ISend, or no grace to keep the loop away with
		// (Spin <= 0): the queue is taken as before.
		return
	}
	looked, found := b.lookSource(s, 0, 0, nil)
	if found {
		b.waitServed.Add(1)
	}
	if s.idle.Load() != idleFresh {
		s.idle.Store(idleFresh) // the loop times it (stayAway)
	}
	if !looked {
		// The loop is inside Recv, or handling what it took: ask it
		// out (a no-op past the first ask of its wait), so that it
		// stays away and the next send's look takes the queue. A
		// frame there now is the loop's as it returns.
		if s.kick != nil {
			s.kick()
		}
		return
	}
	b.runCopies() // cma.go: without the source's lock
}

// drainServed is the look of a queue's receive loop, staying away from a
// queue its sends serve, before it runs the timers: what came since the
// last send's look (the acks of a burst's last sends, frames of nobody's
// waiting) is handled first, all of it, batch after batch while each
// look takes frames (at most a ring's worth), so a timer does not take an
// ack that waits in the ring for a loss, and a queue does not fill behind
// a loop that takes one batch a tick.
func (b *Board) drainServed(s *rxSource) {
	for range maxServedBatches {
		if looked, found := b.lookSource(s, 0, 0, nil); !looked || !found {
			break
		}
	}
	b.runCopies() // cma.go: without the source's lock
}

// maxServedBatches bounds drainServed: 64 batches of rxBatch frames, more
// than an RX ring holds.
const maxServedBatches = 64
