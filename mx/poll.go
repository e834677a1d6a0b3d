package mx

import (
	"context"
	"fmt"
	"runtime"
	"time"
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
// rings, an AF_XDP socket's RX ring: transport.Spinner) from the waiting
// goroutine itself, for its poll window (below). Over AF_XDP the kernel
// writes the frame into the RX ring inside the sender's sendto, so the
// waiter takes it with no wake-up at all, where sleeping on its request
// cost the receive loop's ppoll wake-up and a goroutine hand-off, and
// the fine timer's arming per message (finetimer.go: a waiter in its
// window watches the deadlines). A message found there is handled and its request
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
// a shorter wait. The look that finds the rings empty costs three times
// its Peek in the source's lock and unlock (15 ns against 3 here), and a
// record that lands during them waits for the next Peek: so a waiter's
// look in its polling loop, finding them empty, looks again under the
// same hold of the lock, for as long as lookPeeks Peeks, most of those
// looks at the hot rings' record words alone (peekEvery), so a record on
// a lane is seen within a few loads of its landing most of the time.
//
// A polling waiter makes no system call while its reply is on time: it
// spins on the rings for yieldAfter, and only a reply later than that
// makes it give its CPU away with sched_yield between polls (on a node
// where processes outnumber cores, the peer that must answer may be
// waiting for this very CPU). Open MPI spins in opal_progress the same
// way, and yields only when told the node is oversubscribed. A board that
// finds its node oversubscribed (oversub.go) yields after every empty
// look from the first, and polls so for at least SpinMax (its window,
// which may grow up to SpinMax times the processes each CPU has:
// stretchSpin, oversub.go) before it sleeps, or, when its endpoint's messages come late (a window halved
// below Spin), looks once and sleeps (waitBudget).
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
// do not wait behind the socket, and from that first look on it counts
// among the socket's pollers, whose receive loop steps aside for it).
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
// while a frame on the socket now waits at most some 7 µs more (64 looks
// of up to lookPeeks peeks each), little beside the kernel's own path.
const syscallEvery = 64

// lookPeeks is how many more Peeks' time a polling waiter's look at the
// rings lasts while they stay empty (see "A waiter's look" above, and
// peekEvery), under the one hold of the source's lock: some 140 ns,
// during which another goroutine's look finds the rings taken (as it
// finds them during any look) and the waiter's other sources, its
// request and the clock wait.
// A waiter that yields between looks peeks once.
const lookPeeks = 32

// yieldClockEvery is how many looks a waiter that yields after every
// empty look (an oversubscribed node) makes per clock reading: a power
// of two. Each look is a sched_yield, some microseconds at least, so the
// budget (SpinMax, 1 ms) and the deadlines are still looked at every few
// microseconds, and the reading, which followed every yield (2% of an
// oversubscribed 8-rank alltoall's CPU, the clock's page cold after the
// switch), is made a quarter as often; a wait whose message comes within
// that many looks reads no clock.
const yieldClockEvery = 4

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
	// looked: the caller made the first look (firstLook, in
	// Request.Wait), which did not find the request done; idle is what
	// that look said of the sources.
	looked, idle bool
	// peeks: how many more Peeks' time a look of its may spend at the
	// rings while they stay empty, under the one hold of the source's
	// lock (lookPeeks; takeLane makes peeks/2 whole Peeks, each after up
	// to peekEvery-1 looks at the hot rings' words; 0 for firstLook and
	// for a waiter that yields).
	peeks int
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
	// firstIdle: the first look found every source empty a moment ago,
	// so the loop's first pass does not look again: on a node whose
	// waiters yield after every empty look (yieldAll), it yields at once.
	// A look costs the loads of lines other CPUs write (the queue's
	// word, the hot lanes'), and the first looks were 5% of an
	// oversubscribed 8-rank 8 B alltoall's CPU, the look right after each
	// about as much (docs/intranode-scale.md).
	firstIdle := false
	if r != nil && w.looked {
		firstIdle = w.idle
	} else if r != nil {
		done, idle := b.firstLook(w, srcs, mixed)
		if done {
			return pollHeld, start, nil
		}
		firstIdle = idle
	}
	// slowIn: the waiter counts among the pollers of the sources it looks
	// at only every syscallEvery looks (mixed), which it joins at its
	// first look at them: most waits of a ping-pong end sooner, and
	// joining and leaving were two locked instructions, the leaving one
	// between the message and the application's reply.
	slowIn := !mixed
	for _, s := range srcs {
		if slowIn || s.spin {
			s.pollIn.Add(1)
		}
	}
	if w != nil {
		w.polling = true
	}
	ok, spent := false, false
	var readings uint64 // clock readings of the loop below (Board.waitReadings)
	defer func() {
		if readings != 0 { // most waits of a ping-pong read none: no atomic add
			b.waitReadings.Add(readings)
		}
		for _, s := range srcs {
			if w != nil && w.doneAt == s {
				continue // gone from its pollers already (lookSource)
			}
			if ok && s.idle.Load() != idleFresh {
				s.idle.Store(idleFresh) // the loop times it (stayAway)
			}
			if slowIn || s.spin {
				s.pollLeft.Add(1)
			}
		}
		if !ok && !(stay && spent) {
			// Its message must find an owner: Recv goes back to the
			// loops (a test once, so that a waiter whose look took its
			// message saves no registers around a call).
			b.handBack(srcs)
		}
		if ok {
			if w == nil || !w.ok {
				b.waitPolled.Add(1) // else counted by takeLane
			}
		} else if spent {
			b.waitSlept.Add(1)
		}
	}()
	// deferred: the last clock reading left the timers to this one (below).
	deferred := false
	// yieldAll: the node is oversubscribed (oversub.go): give the CPU
	// away after every empty look from the first, and read the clock
	// every yieldClockEvery looks (see there).
	yieldAll := b.oversub.yield.Load()
	// sleepFirst: a yielding waiter whose budget is its window, below SpinMax
	// (waitBudget: its messages came late), sleeps after its first empty
	// pass without a yield: on a CPU the job's other ranks share, the
	// yield puts it behind all of them, holding its P, for as long as
	// sysmon then wakes every 20 µs. (Looked at where the waiter would
	// yield, off the path of a reply on time.) SpinMax itself, not the
	// stretched cap (spinCap): a waiter whose messages came soon has
	// SpinMax at least, and yields for it.
	sleepFirst := yieldAll && budget >= 0 && budget < b.opts.SpinMax
	kicked, yield := false, yieldAll
	var seen int64  // the clock as this waiter last read it (every every+1 looks), 0: not yet
	var fresh int64 // seen, or 0 once the waiter yielded after reading it (pollSource's ack)
	// worked: a look since that reading handled frames or ran the timers
	worked := false
	// every+1: how many looks pass between clock readings (every is a mask).
	every := 15
	if budget < 0 {
		every = busyClockEvery() - 1
	}
	// early: read the clock after the first pass (whatever it took), not
	// after every+1 looks, where a reply takes a system call to come (the
	// AF_XDP kick, transport.Kicker): it comes microseconds later, and the
	// ack bookkeeping of its handling takes this reading instead of one
	// between the reply and the application (ackClock). Where replies
	// come sooner (rings, the in-process wire) a reading per wait would
	// cost more than it saves.
	// The same holds when an ack deadline waits for a reading
	// (noteReceived): the application did not reply with a send, whose
	// reading would have stamped it.
	early := b.kicker != nil || b.unstamped.Load()
	for i := 0; ; i++ {
		// took: this pass's looks took frames (or a lane record), which
		// may have been for this waiter's request or not; the next look
		// follows at once, and only a pass that took nothing yields.
		took := false
		for _, s := range srcs {
			if mixed && !s.spin && i%syscallEvery != syscallEvery-1 || i == 0 && firstIdle {
				continue
			}
			if !slowIn && !s.spin {
				slowIn = true
				for _, s := range srcs {
					if !s.spin {
						s.pollIn.Add(1)
					}
				}
			}
			if w != nil {
				w.peeks = 0
				if !yield {
					w.peeks = lookPeeks
				}
			}
			looked, found := b.pollSource(s, seen, fresh, w)
			worked = worked || found
			took = took || found
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
					if start < 0 {
						start = b.clock() // the window's tuning times the wait (Request.Wait)
					}
					return pollHandOver, start, nil
				}
			}
		}
		if holds() {
			ok = true
			return pollHeld, start, nil
		}
		if b.stage.pending.Load() != 0 {
			b.stageHelp() // stage.go: a chunk of a staged send, between looks
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
		if i&every == every || yieldAll && i&(yieldClockEvery-1) == yieldClockEvery-1 || (early && seen == 0) {
			now := b.clock()
			readings++
			// floor scales schedFloor to the looks between readings
			// (busyClockEvery): a gap over it was not spent looking.
			// (A yielding waiter's looks are each a yield too: a gap
			// over schedFloor is the scheduler's, whichever yield of
			// the few since the last reading took it.)
			floor := int64(schedFloor) * int64(every+1) / clockEvery
			if yield {
				floor = int64(schedFloor)
			}
			if seen != 0 && !worked && now-seen >= floor {
				// Only a reading after looks that found nothing measures
				// the scheduler: one after a batch or a timer run
				// measures that work too (a pull's copies, a Send that
				// waited for room in the peer's queue).
				descheduling.observe(now - seen - floor + int64(schedFloor)) // descheduled.go
			}
			// A reading long after the last one: this waiter was
			// descheduled (or handled a large batch), and the answers
			// to what the timers would resend may wait in its sources.
			// It looks at them first, and at the deadlines at the next
			// reading, whatever that one shows (a waiter that yields
			// between looks may find every reading late).
			late := seen != 0 && now-seen >= floor && !deferred
			seen, fresh = now, now
			deferred = late
			// Retransmission deadlines: no timer wakes a board whose
			// waiters hold every P (finetimer.go).
			worked = false
			if !late {
				worked = b.runDue(now, r != nil && r.kind == kindSend)
			}
			if start < 0 {
				start = now - 1 // the first looks: well under a microsecond
			}
			el := time.Duration(now - start)
			if budget >= 0 && el >= budget {
				spent = true
				return pollSpent, start, nil
			}
			yield = yieldAll || el >= yieldAfter
			if yield && !yieldAll && budget >= 0 {
				// Yielding for its reply's lateness: a reading after
				// every yield, which is as dear or dearer. Looking at
				// its budget every+1 yields apart, a waiter made a
				// dozen of them, each a context switch on a loaded
				// node, in a window of 50 µs. A busy-polling waiter
				// has no budget to overrun: it keeps its stride.
				every = 0
			}
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
		if yield && !took {
			if sleepFirst {
				// One empty pass, no yield (waitBudget).
				spent = true
				return pollSpent, b.clock(), nil
			}
			// The reply is late: let another process (the peer,
			// perhaps) have this CPU. Not runtime.Gosched: that wakes
			// another thread to run this goroutine, a futex call per
			// look. A pass that took frames does not: more may wait
			// behind them (a look takes one lane record, or one
			// batch), and each yield on a CPU that other ranks share
			// is a context switch: a waiter of an alltoall, whose
			// peers' messages come together, switches once a round,
			// not once a message.
			b.waitYields.Add(1)
			fresh = 0
			if yieldAll || budget < 0 {
				// A busy-polling waiter holds its P while it
				// spins anyway: a yield that tells the runtime
				// (osYield) only lets sysmon take that P away
				// during a slow sched_yield, and the waiter
				// then waits for a P, and another thread for
				// the wake-up that hands it one, on the reply's
				// critical path.
				rawYield()
			} else {
				osYield()
			}
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
	// Served counts the sends on a queue's board (QueuedBoard) whose
	// look at the queue took frames on the sending goroutine: acks,
	// mostly, which the queue's progress thread did not have to poll for.
	Served uint64
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
		LoopYields: b.loopYields.Load(), HandOvers: b.waitHandOver.Load(), Kernel: b.sleep.waits.Load(), Sleeping: sleeping,
		Served: b.waitServed.Load()}
}
