package mx

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/owned"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// The wait path: who calls Recv, and how a waiting goroutine learns that
// its request completed.
//
// A board receives from one or two sources: its transport, and the
// shared-memory rings of the host path (host.go). Each source has one owner
// at a time (rxSource.mu): normally its receive loop (the progress
// goroutine, or the host path's loop), which blocks in Recv and completes
// requests; a blocked Wait then sleeps on the request's channel. That costs
// two wake-ups per message on a quiet receiver: the doorbell that wakes the
// loop, then the goroutine hand-off to the waiter, each tens of
// microseconds on a virtual machine whose idle CPUs halt.
//
// The adaptive poll removes both while a reply is expected soon, as Open
// MPI's vader BTL and DPDK's poll-mode drivers do: Wait, before sleeping,
// polls the sources that cost no system call to look at (shared-memory
// rings) from the waiting goroutine itself, for at most
// BoardOptions.Spin. A message found there is handled and its request
// completed on the waiter's goroutine, which then returns at once. While
// any waiter polls a source, its receive loop steps aside (a loop inside
// Recv is asked to return with the transport's Wake, which makes no system
// call unless the loop sleeps; on a process with one P, where the loop
// asleep in the runtime's poller can wake only once the waiter sleeps, a
// waiter that had to ask sleeps at once instead of polling) and keeps
// only the timers; it takes Recv
// back when the last poller gives up (it is told at once) or spinGrace
// (Spin, at most 100µs) after it first sees that the last poller
// succeeded (a waiter completed by polling reads no clock; the loop,
// which looks that often, times it): the application usually waits again
// soon, and a frame that arrives meanwhile waits at most twice that long.
// A waiter whose
// budget runs out sleeps as before, and so does the receive loop in Recv
// after the transport's own short spin, so an idle endpoint costs no CPU.
//
// A waiter's look at the rings is cheap when they are empty: under the
// source's lock it looks at the next frame in place (shm.Transport.Peek,
// which also says whether a Recv would find anything, as Pending does:
// one look at each hot ring's record word and at the summary of the cold
// ones, found or not: transport/shm's notify.go), takes a lane
// record it can deliver at once (lane.go), and takes no Recv when the
// rings are empty; a batch it
// handles reads the clock only if a frame needs the time (Board.now). A
// frame that lands during a look waits for the next, so a shorter look is
// a shorter wait.
//
// A polling waiter makes no system call while its reply is on time: it
// spins on the rings for yieldAfter, and only a reply later than that
// makes it give its CPU away with sched_yield between polls (on a node
// where processes outnumber cores, the peer that must answer may be
// waiting for this very CPU). Open MPI spins in opal_progress the same
// way, and yields only when told the node is oversubscribed.
//
// # The poll window
//
// How long a blocking waiter polls before it sleeps is not a constant but
// the endpoint's poll window, tuned by the waits themselves as Linux's
// cpuidle haltpoll governor tunes a CPU's poll before it halts
// (drivers/cpuidle/governors/haltpoll.c): a wait that slept but whose
// message came within BoardOptions.SpinMax of its start doubles the
// window (at least BoardOptions.Spin, at most SpinMax): had it polled
// that long it would not have paid the wake-up. A wait whose message came
// only after SpinMax halves it: polling would not have caught it, so the
// polling was wasted. Waits completed while polling leave it as it is.
// So a ping-pong whose peer answers within SpinMax settles on a window
// that catches the reply and never sleeps, even when a loaded machine
// deschedules the peer now and then, while an idle endpoint's window
// shrinks towards zero and it costs no CPU.
//
// BoardOptions.BusyPoll is the same poll without a budget, on every source
// (the transport too, at the price of a system call per look; beside the
// host path's rings, only every syscallEvery looks, so the rings' messages
// do not wait behind the socket).
//
// # Waiting on a copy engine
//
// While the board's copy engine (LocalOptions.Engine) copies a message —
// a shared-memory receive (offload.go) or pull replies out of held frames
// (pulloffload.go) — the message waits for the engine, not for the rings,
// and a waiter of that request (or, waiting for any request of its
// endpoint, a waiter of that endpoint) steps aside at once, as a driver
// sleeps on its device's completion instead of spinning on it: an adaptive
// waiter sleeps on its request (the goroutine that waits for the engine
// completes it, or, for a copy handed to the application's Tests, the
// board's reaper, which the waiter tells not to wait for Tests:
// enginereap.go), and a busy-polling one hands its processor to the Go
// scheduler between looks (it still reaps the pull-reply copies itself).
// Each request counts the engine copies that fill it (Request.engine, and
// Endpoint.engCopies for the endpoint's), so a waiter on any other request
// keeps polling while the engine works: the rings may bring its message
// meanwhile. Nothing is lost
// where the engine is silicon; where it is a model whose channels are
// goroutines of this process (emulated.CBDMA), a waiter spinning on a rank
// bound to one CPU would take that CPU, and the one Go processor the
// runtime then has, from the very copy it waits for. These sleeps leave
// the poll window alone (WaitStats.Engine counts them): they say nothing
// about how soon the rings answer.

// DefaultSpin is the default BoardOptions.Spin: about two one-way futex
// wake-ups on this kind of machine, so a reply that comes as fast as a
// wake-up would is caught without one, while a waiter whose peer is slower
// gives the CPU back after a bounded cost.
const DefaultSpin = 50 * time.Microsecond

// DefaultSpinMax is the default BoardOptions.SpinMax: a few scheduler
// time slices of a loaded machine short, so a reply from a peer that was
// descheduled briefly is still caught by polling, and an endpoint whose
// messages come later gives the CPU back after at most this long.
const DefaultSpinMax = time.Millisecond

// yieldAfter is how long a waiter polls without a system call before it
// starts yielding the CPU between polls: a few round trips of the rings,
// so an on-time reply costs no syscall, while a waiter whose peer needs
// this CPU lets it run soon.
const yieldAfter = 20 * time.Microsecond

// spinGovernor is an endpoint's poll window (see "The poll window"): an
// atomic, as every waiter of the endpoint reads it and the last to observe
// a wait sets it.
type spinGovernor struct {
	window atomic.Int64 // ns
}

// next returns the window after a wait that slept and whose message came
// blocked ns after it started, for a window that starts at start and is
// capped at limit (haltpoll's adjust_poll_limit: grow by 2 from start,
// shrink by 2). grew and shrank say which happened.
func (g *spinGovernor) next(window, blocked, start, limit int64) (w int64, grew, shrank bool) {
	switch {
	case blocked < limit:
		// Late, but polling longer would have caught it.
		w = min(max(window*2, start), limit)
		return w, w != window, false
	default:
		// Past the cap: the poll was wasted.
		w = window / 2
		return w, false, w != window
	}
}

// observe tunes the window after a wait that polled its window, slept,
// and completed blocked ns after it started.
func (g *spinGovernor) observe(b *Board, blocked int64) {
	w, grew, shrank := g.next(g.window.Load(), blocked, int64(max(b.opts.Spin, 0)), int64(b.opts.SpinMax))
	g.window.Store(w)
	switch {
	case grew:
		b.spinGrew.Add(1)
	case shrank:
		b.spinShrank.Add(1)
	}
}

// waitBudget is how long a wait on e polls before sleeping: -1 (no limit)
// in busy-poll mode, else the endpoint's poll window.
func (b *Board) waitBudget(e *Endpoint) time.Duration {
	if b.opts.BusyPoll {
		return -1
	}
	return time.Duration(e.spin.window.Load())
}

// SpinWindow returns how long a blocking wait on e polls before it sleeps
// right now (see BoardOptions.SpinMax); 0 when the board never polls.
func (e *Endpoint) SpinWindow() time.Duration {
	if len(e.b.waitSources()) == 0 {
		return 0
	}
	return time.Duration(e.spin.window.Load())
}

// rxSource is one thing a board receives frames from, with its owner lock.
type rxSource struct {
	tr transport.Transport
	// mu is held by whoever is inside tr.Recv or still handling the frames
	// it returned (they point into the transport's buffers).
	mu sync.Mutex
	rx []transport.Frame
	// spin: adaptive waiters poll it (it costs no system call to look at).
	spin bool
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
}

func newRxSource(tr transport.Transport) *rxSource {
	s := &rxSource{tr: tr, rx: make([]transport.Frame, rxBatch), wake: make(chan struct{}, 1)}
	s.idle.Store(idleNever)
	s.sleeper, _ = tr.(transport.Sleeper)
	if st, ok := tr.(*shm.Transport); ok {
		s.spin, s.kick, s.pending, s.lane = true, st.Wake, st.Pending, st
		// Every send of the board holds b.mu, and none (SendParts:
		// the lane's, from isend) follows its endpoints' close, which
		// comes before the transport's: the lane's record goes into
		// the ring without a lock of the ring's.
		st.SerialSends()
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
			// itself (s.wake): look again for the timers only.
			return true, b.tick
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
	if t := s.tests.Load(); t-s.loopTests.Swap(t) >= testsToStay {
		return true, testAway
	}
	return false, 0
}

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
	if b.lookSource(s, 0, nil) {
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
// waiter's request (see waiterReq). It runs the timers when a
// tick is due by the batch's clock or, when no frame of it needed the
// time, by seen, the waiter's own latest reading (0: none): a waiter that
// polls a while reads the clock anyway (pollWait), and the receive loop,
// which stays away meanwhile, may not get a CPU soon (with GOMAXPROCS 1
// not before the waiter is preempted).
func (b *Board) pollSource(s *rxSource, seen int64, w *waiterReq) bool {
	ok := b.lookSource(s, seen, w)
	b.runCopies() // cma.go: without the source's lock
	return ok
}

// lookSource is pollSource without running the single copies its frames
// queued (cma.go).
func (b *Board) lookSource(s *rxSource, seen int64, w *waiterReq) bool {
	if !s.mu.TryLock() {
		return false
	}
	b.lookLocked(s, seen, w)
	s.mu.Unlock()
	return true
}

// lookLocked is lookSource's look, by the owner of s.mu. It reports
// whether it found anything (a lane record, or frames).
func (b *Board) lookLocked(s *rxSource, seen int64, w *waiterReq) bool {
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
		b.handleBatchLocked(s, s.rx[:n]) // reads the clock only if a frame needs it
		b.polledLocked(s, seen)
	}
	if n < len(s.rx) {
		s.drained() // verdict.go
	}
	return n > 0
}

// polledLocked ends a waiter's handling of what it took from s: it runs
// the timers when their deadline (finetimer.go) has passed by the clock
// the handling read or, when it read none, by seen (see pollSource), and
// releases b.mu (held).
func (b *Board) polledLocked(s *rxSource, seen int64) {
	if b.nowOK {
		seen = b.nowv
	}
	if seen != 0 && seen >= b.deadline() { // finetimer.go
		b.rxOwned = s // verdict.go
		b.timersLocked(false)
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
// when it reports true.
func (b *Board) firstLook(w *waiterReq, srcs []*rxSource, mixed bool) bool {
	for _, s := range srcs {
		if !mixed || s.spin {
			b.pollSource(s, 0, w)
		}
	}
	if !w.ok && !w.r.done.Load() {
		return false
	}
	for _, s := range srcs {
		if s.idle.Load() != idleFresh {
			s.idle.Store(idleFresh)
		}
	}
	if !w.ok {
		b.waitPolled.Add(1) // else counted by takeLane
	}
	return true
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

// pollOutcome says how a pollWait that returned no error ended.
type pollOutcome int

const (
	// pollHeld: the condition holds.
	pollHeld pollOutcome = iota
	// pollSpent: the poll budget ran out; the waiter sleeps, and when its
	// message comes tunes the poll window.
	pollSpent
	// pollEngine: engine copies run; the waiter sleeps and leaves the
	// window alone ("Waiting on a copy engine").
	pollEngine
	// pollHandOver: a receive loop holds the waiter's rings inside Recv
	// and the process has one P, which the loop needs to step aside: the
	// waiter sleeps at once and leaves the window alone.
	pollHandOver
)

// engineBusy reports whether what a waiter waits for waits for the copy
// engine (see "Waiting on a copy engine"): its request r has an engine
// copy in flight, or, for a wait on any request of e (r nil), one of
// those has.
func engineBusy(r *Request, e *Endpoint) bool {
	if r != nil {
		return r.engine.Load() > 0
	}
	return e != nil && e.engCopies.Load() > 0
}

// syscallEvery is, for a waiter that polls shared-memory rings beside a
// source that costs a system call to look at (busy-poll mode on a board
// with the host path: the UDP socket beside the rings), how many looks at
// the rings it makes per look at that source. A receive system call costs
// about a microsecond here, as much as dozens of looks at the rings and
// several times a whole message through them: looking at the socket every
// time made a message through the rings wait behind it most of the time,
// while a frame on the socket now waits at most a few microseconds more,
// little beside the kernel's own path.
const syscallEvery = 64

// waiterReq is a waiter's request r, and what its own polls did with it: a
// look that completed it under b.mu (takeLane) consumes it there too, its
// final status in st (ok), so the waiter takes no lock again to finish.
type waiterReq struct {
	r  *Request
	st Status
	ok bool
	// polling: the waiter counts among its sources' pollers (pollWait);
	// doneAt is the source whose look consumed its request and counted
	// it as gone from that source's pollers (lookSource).
	polling bool
	doneAt  *rxSource
	// asleep: the waiter sleeps on the sources (sleep.go), and its wait
	// counts as such, not as polled.
	asleep bool
}

// pollWait polls the waiter's sources until w's request is done (or, when
// w is nil, cond) holds, the budget runs out (budget < 0: never), engine copies run
// (an adaptive waiter, budget >= 0), ctx is done, or the endpoint is woken
// up (its wake generation moves past gen). It says which of the first
// three happened and, when the condition did not hold, the board's clock
// when it started counting its budget (after its first few looks: a wait
// that ends sooner reads no clock for it; -1 when it read none). stay: a
// waiter that does not get its condition goes on to sleep on the sources
// itself (sleep.go) once its budget is spent, so it does not hand them
// back to their loops then.
func (b *Board) pollWait(ctx context.Context, w *waiterReq, cond func() bool, budget time.Duration, e *Endpoint, gen uint64, stay bool) (pollOutcome, int64, error) {
	var r *Request
	if w != nil {
		r = w.r
	}
	srcs := b.waitSources()
	holds := func() bool {
		if r != nil {
			// A request consumed by this waiter's poll is recycled
			// already: its done flag is cleared.
			return w.ok || r.done.Load()
		}
		return cond()
	}
	start := int64(-1)
	if holds() {
		return pollHeld, start, nil
	}
	if budget >= 0 && engineBusy(r, e) {
		b.waitEngine.Add(1)
		b.nudge() // enginereap.go: no Test will finish its copy
		return pollEngine, start, nil
	}
	// Sources that cost a system call are looked at only every
	// syscallEvery looks when rings are polled beside them.
	mixed := len(b.spinSrcs) > 0 && len(b.spinSrcs) < len(srcs)
	if r != nil && b.firstLook(w, srcs, mixed) {
		return pollHeld, start, nil
	}
	for _, s := range srcs {
		s.pollIn.Add(1)
	}
	if w != nil {
		w.polling = true
	}
	ok, spent := false, false
	defer func() {
		for _, s := range srcs {
			if w != nil && w.doneAt == s {
				continue // gone from its pollers already (lookSource)
			}
			if ok && s.idle.Load() != idleFresh {
				s.idle.Store(idleFresh) // the loop times it (stayAway)
			}
			s.pollLeft.Add(1)
			if !ok && !(stay && spent) && s.polling() == 0 {
				// Hand Recv back at once: this waiter is going to
				// sleep and its message must find an owner.
				s.idle.Store(idleNever)
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
		}
		if ok {
			if w == nil || !w.ok {
				b.waitPolled.Add(1) // else counted by takeLane
			}
		} else if spent {
			b.waitSlept.Add(1)
		}
	}()
	kicked, yield := false, false
	var seen int64 // the clock as this waiter last read it (every 16 looks), 0: not yet
	for i := 0; ; i++ {
		for _, s := range srcs {
			if mixed && !s.spin && i%syscallEvery != syscallEvery-1 {
				continue
			}
			looked := b.pollSource(s, seen, w)
			if w != nil && w.ok {
				// This look consumed the waiter's own request: done,
				// without the other sources or the checks below.
				ok = true
				return pollHeld, start, nil
			}
			if !looked && !kicked && s.kick != nil {
				// Its loop is inside Recv: ask it to step aside.
				s.kick()
				kicked = true
				if budget >= 0 && runtime.GOMAXPROCS(0) == 1 {
					// The loop sleeps in the runtime's poller, which
					// the only P looks at when it has nothing else to
					// run: it wakes, and hands the rings back, only
					// once this waiter sleeps. Polling on, the waiter
					// held it off for its whole budget (a rank bound
					// to one CPU, blocking waits: 440 µs a message).
					if holds() {
						ok = true
						return pollHeld, start, nil
					}
					b.waitHandOver.Add(1)
					return pollHandOver, start, nil
				}
			}
		}
		if holds() {
			ok = true
			return pollHeld, start, nil
		}
		if engineBusy(r, e) {
			// The message waits for the engine: leave it the CPU.
			b.nudge() // enginereap.go: no Test will finish its copy
			if budget >= 0 {
				b.waitEngine.Add(1)
				return pollEngine, start, nil
			}
			runtime.Gosched()
		}
		if i&15 == 15 {
			now := b.clock()
			if seen != 0 {
				descheduling.observe(now - seen) // descheduled.go
			}
			seen = now
			// Retransmission deadlines: no timer wakes a board whose
			// waiters hold every P (finetimer.go).
			b.runDue(now)
			if start < 0 {
				start = now - 1 // the first 16 looks: well under a microsecond
			}
			el := time.Duration(now - start)
			if budget >= 0 && el >= budget {
				spent = true
				return pollSpent, start, nil
			}
			yield = el >= yieldAfter
			if err := ctx.Err(); err != nil {
				if holds() {
					ok = true
					return pollHeld, start, nil
				}
				return pollSpent, start, fmt.Errorf("%w: %w", ErrTimeout, err)
			}
			if e != nil && e.wakeGen.Load() != gen {
				return pollSpent, start, ErrWokenUp
			}
		}
		if yield {
			// The reply is late: let another process (the peer,
			// perhaps) have this CPU. Not runtime.Gosched: that wakes
			// another thread to run this goroutine, a futex call per
			// look.
			b.waitYields.Add(1)
			osYield()
		}
	}
}

// WaitStats describe how a board's waits completed (see
// BoardOptions.Spin).
type WaitStats struct {
	// Polled counts waits whose request completed while the waiting
	// goroutine polled: no futex, no goroutine hand-off.
	Polled uint64
	// Slept counts waits that polled their whole budget and then slept.
	Slept uint64
	// Spinning is the number of goroutines polling right now.
	Spinning int
	// Yields counts the sched_yield calls of polling waiters: only
	// waits whose message was later than a few round trips make any.
	Yields uint64
	// Engine counts the waits that stopped polling, or never started,
	// because the copy engine was copying into a request they waited for,
	// and slept until the engine's work completed it (see
	// LocalOptions.Engine).
	Engine uint64
	// Grew and Shrank count the changes of the endpoints' poll windows
	// (Endpoint.SpinWindow): grown after a wait that slept but would have
	// caught its message by polling up to BoardOptions.SpinMax, shrunk
	// after one whose message came later than that.
	Grew, Shrank uint64
	// LoopRecvs counts the progress goroutine's receives from the board's
	// transport: it stays out of them while waiters poll (and a moment
	// after), so in a steady ping-pong between polling waiters it stays
	// put.
	LoopRecvs uint64
	// HandOvers counts the waits on a process with one P that found a
	// receive loop holding their rings inside Recv, asked it out and
	// slept at once instead of polling (the loop needs the only P to step
	// aside). A loop that yields to the waiters it wakes leaves the rings
	// free for their next waits, so a ping-pong makes few.
	HandOvers uint64
	// LoopYields counts the times a receive loop handed its processor to
	// the goroutines its frames had just woken (a waiter whose request
	// completed) before it looked for more: the woken waiter runs at
	// once, instead of after the loop's spin in Recv.
	LoopYields uint64
	// Kernel counts the waits that, their poll window spent, slept in
	// the kernel on the board's sources and received their message on
	// their own thread (sleep.go) instead of sleeping until the receive
	// loop completed them.
	Kernel uint64
	// Sleeping is the number of waiters asleep in the kernel on the
	// board's sources right now: 0 or 1 (one owns them at a time).
	Sleeping int
}

// WaitStats returns the board's wait statistics.
func (b *Board) WaitStats() WaitStats {
	// Every waiter polls the same sources (waitSources) and counts
	// itself in each: the most pollers of one is the number of waiters
	// polling (a count of its own cost two locked instructions a wait).
	spinning, sleeping := 0, 0
	for _, s := range b.allSrcs {
		n := int(s.polling())
		if s.asleep.Load() {
			n-- // asleep on it in the kernel (sleep.go), not polling
			sleeping = 1
		}
		spinning = max(spinning, n)
	}
	return WaitStats{Polled: b.waitPolled.Load() + b.waitPolledLocked.Load(), Slept: b.waitSlept.Load(), Spinning: spinning,
		Yields: b.waitYields.Load(), Engine: b.waitEngine.Load(), Grew: b.spinGrew.Load(), Shrank: b.spinShrank.Load(), LoopRecvs: b.loopRecvs.Load(),
		LoopYields: b.loopYields.Load(), HandOvers: b.waitHandOver.Load(), Kernel: b.sleep.waits.Load(), Sleeping: sleeping}
}

// spinFromEnv reads GOMX_SPIN (a Go duration; 0 or negative: never spin)
// into o.Spin and GOMX_SPIN_MAX into o.SpinMax when the options are left
// at zero, and checks that the window fits under its cap.
func (o *BoardOptions) spinFromEnv() error {
	if o.Spin == 0 {
		o.Spin = DefaultSpin
		if v := os.Getenv("GOMX_SPIN"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%w: GOMX_SPIN=%q is not a duration (write 50us, or 0 to never spin): %v", ErrBadOptions, v, err)
			}
			o.Spin = d
			if d == 0 {
				o.Spin = -1
			}
		}
	}
	if o.SpinMax == 0 {
		o.SpinMax = max(DefaultSpinMax, o.Spin)
		if v := os.Getenv("GOMX_SPIN_MAX"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("%w: GOMX_SPIN_MAX=%q is not a positive duration (write 1ms; GOMX_SPIN=0 turns polling off)", ErrBadOptions, v)
			}
			o.SpinMax = d
		}
	}
	if o.SpinMax < 0 || (o.Spin > 0 && o.SpinMax < o.Spin) {
		return fmt.Errorf("%w: SpinMax %v is below Spin %v: the poll window starts at Spin and grows up to SpinMax (raise SpinMax or GOMX_SPIN_MAX)", ErrBadOptions, o.SpinMax, o.Spin)
	}
	return nil
}

// osYield gives the CPU to another runnable thread, if there is one
// (sched_yield(2)).
func osYield() { _, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// A receive loop that woke a waiter hands its processor over before it
// looks again. The frames it handled completed a request a goroutine
// sleeps on (or an arrival an event waiter waits for): that goroutine is
// runnable now, next in line on the loop's P, but the loop went straight
// back into Recv, which polls the rings for the transport's spin before it
// sleeps, without a call into the Go scheduler. On a process with one P
// (a rank bound to one CPU, or GOMAXPROCS 1) the woken goroutine waited
// for that whole spin, 20 µs a message; and the loop then held the rings
// in Recv when the application, after its answer, waited again, so that
// waiter could not poll them and slept at once (pollHandOver), and every
// message paid a doorbell and a thread wake-up besides. With more Ps,
// another P takes the woken goroutine from the loop's only after a
// delay. Yielding runs it at once on the loop's P (the loop queues
// behind it): the application answers, and its next wait finds the rings
// free and polls them itself in its window, while the loop, when it runs
// again, stays away from a polling waiter (stayAway).

// wokeOne counts a goroutine woken by a completion or an arrival (b.mu
// held).
func (b *Board) wokeOne() { b.woke.Inc() }

// yieldToWoken hands the receive loop's processor to the goroutines its
// batch woke, if it woke any since the count was woke (see above).
func (b *Board) yieldToWoken(woke uint64) {
	if b.woke.Load() != woke {
		b.loopYields.Add(1)
		runtime.Gosched()
	}
}
