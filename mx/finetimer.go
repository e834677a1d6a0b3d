package mx

import (
	"os"
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The fine timer: retransmission deadlines to the microsecond.
//
// A lost frame that no later frame reveals (the only frame of a small
// message, the last one of a burst, a ping-pong's pong) comes back only when
// a timer fires, so the timer's precision is the cost of such a loss. Go's
// runtime sleeps in epoll_wait, whose timeout is in milliseconds: a Go timer
// set to 60 µs fires after about 1.1 ms on an idle Linux machine, and the
// progress goroutine, which waits for frames with the transport's Recv and
// a Go timer, cannot take a deadline closer than that. On a wire whose round
// trip is a few microseconds, that millisecond was the whole cost of a lost
// small frame.
//
// An fd event, unlike a timeout, ends epoll_wait at once. So every board
// has a timerfd (CLOCK_MONOTONIC, an hrtimer in the kernel) in the Go
// netpoller and a goroutine blocked reading it. The protocol notes the
// deadlines whose precision pays (noteDue: a question to a late peer,
// ask.go, which resends nothing, the tail-loss probe, which resends one
// frame, and a SACK hole's reordering window); when one is
// earlier than the timerfd's, the timerfd is set to it. Full resends, pull
// re-requests and a pull's questions to its owner (ask.go) keep the
// board's ticks: fired precisely at RTOMin, they
// resend whole messages whenever a loaded machine stalls the peer. When it fires, the goroutine runs the board's timers, which
// note what is still pending. No thread sleeps for it and nothing runs on
// an idle board. The progress goroutine keeps its own ticks, so the fine
// timer only ever makes a timer fire sooner; where no timerfd can be had
// (a seccomp filter, say), the ticks alone remain. A board whose waiters
// spin is not woken by it: they look at its deadlines themselves (below).
//
// # Setting the timerfd off the recovery's path
//
// A timerfd_settime whose expiry is the CPU's next timer event reprograms
// the local APIC timer, which a virtual machine's guest cannot do without
// an exit to its hypervisor: on this project's VM one took 9-11 µs set
// 40 µs ahead, 0.5-1.7 µs set 1 ms ahead (behind the tick), where a plain
// system call takes 0.12-0.14 µs (BenchmarkTimerfdSettime). A lost small
// frame's repair set it on its path: the firing goroutine for its next
// deadline before the goroutines its question readied could run on its
// P, and, seeing the timerfd unset, the receive loop and the sender for
// the deadlines of the answer and the resend, each holding b.mu and its
// P meanwhile. So a firing whose run sent frames first yields its P
// (runtime.Gosched: it goes behind what it readied, on the global run
// queue, though an idle P may take it at once), and while the goroutine
// is up (fired, not yet set again: fineAwake) armFine leaves the timerfd
// alone and a noted deadline only lowers b.due: the goroutine sets the
// timerfd once, for the earliest, as it goes back to sleep (rearmFine).
// This covers the board whose timer fired; its peer sets its own timerfd
// as before. Figures: docs/loss-recovery.md, "What is not done".

// openFineTimer creates the board's timerfd: the file the goroutine reads
// and the descriptor to set it with (never File.Fd, which would make the
// file blocking). It returns nil, -1 when there is none.
func openFineTimer() (*os.File, int) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, -1
	}
	return os.NewFile(uintptr(fd), "mx fine timer"), fd
}

// armFine sets the timerfd to fire at t (board clock, ns) unless it is
// already set to fire sooner: a timerfd_settime per round trip was a
// sixth of a small-message ping-pong's CPU. Firing early costs a wakeup
// that sets it again. Called with b.mu held.
func (b *Board) armFine(t int64) {
	if b.fine == nil || b.closed || b.fineAwake { // closed: the descriptor may be closed and reused
		return
	}
	if b.armed != 0 && b.armed <= t {
		return
	}
	b.armed = t
	b.cnt[FineArms]++
	d := max(t-b.clock(), 1000) // a zero value would disarm it
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d)}
	_ = unix.TimerfdSettime(b.fineFd, 0, &spec, nil)
}

// noteDue records a retransmission deadline (board clock, ns): the fine
// timer runs the timers then, unless busy-polling waiters watch the board
// (below). Called with b.mu held.
func (b *Board) noteDue(t int64) {
	if d := b.due.Load(); d != 0 && d <= t {
		return
	}
	b.due.Store(t)
	if b.watched() {
		b.fineLapsed.Store(true)
		return
	}
	b.armFine(t)
}

// A board that busy-polling waiters watch needs no fine timer.
//
// In a steady ping-pong each board has one deadline pending at nearly
// every instant (its own message's tail-loss probe, then the ack it owes
// for the peer's), and each message replaces it with a later one. A
// timerfd armed for the earliest deadline therefore fired once per
// deadline interval (tailAckDelay, 62.5 µs by default) whatever the
// message rate, found nothing due, and was set again: a netpoller
// wake-up, two reads and a timerfd_settime, some 30 µs of CPU each
// (docs/message-cost.md). Yet while waiters busy-poll (BoardOptions.
// BusyPoll) the deadlines are checked by whoever runs (below): the
// polling waiters at their clock readings, and the receive loop, which
// stays away from Recv for the poll grace after a waiter's success and
// looks at the timers when it comes back. And while every P runs a
// polling waiter the runtime does not look at its poller, so the timerfd
// could not have run its goroutine anyway.
//
// So a deadline noted while the board is watched (a waiter polls its
// transport, or one succeeded within the grace: the receive loop stays
// away) does not set the timerfd, and a firing that finds the board
// watched does not set it again; either notes that the fine timer lapsed
// (fineLapsed). The receive loop, when it stops staying away and returns
// to Recv, where it would sleep, sets the timerfd for the deadline then
// pending (armLapsed), so a board that nobody watches any longer gets its
// deadlines to the microsecond again. A steady busy-poll ping-pong makes
// no timer system call; what it gives up is the precision of a deadline
// that passes in the grace after the application stopped waiting, which
// the loop runs at its next look instead (at most the grace later).
// Blocking waiters poll their transport for their poll window before
// they sleep where it costs no system call to look at (an AF_XDP socket,
// shared-memory rings: poll.go), and watch the deadlines meanwhile as
// busy-polling ones do; the last to give up and sleep hands Recv back to
// the loop at once, which sets the timerfd. A waiter that sleeps on the
// sources itself (sleep.go) sets it before it sleeps.

// watched reports whether polling waiters keep the board's deadlines, so
// the fine timer need not (see above): busy-polling waiters, or blocking
// waiters in their poll window on a transport they poll (poll.go), until
// they leave it. A waiter asleep on the sources (sleep.go) wakes at the
// board's ticks only and leaves the deadlines to the fine timer.
func (b *Board) watched() bool {
	s := b.src
	if !b.opts.BusyPoll && !(s.spin && b.opts.Spin > 0) {
		return false
	}
	if s.polling() > 0 {
		return !s.asleep.Load()
	}
	switch idle := s.idle.Load(); idle {
	case idleFresh:
		return true
	case idleNever:
		return false
	default:
		return b.now() < idle+int64(b.spinGrace())
	}
}

// armLapsed sets the fine timer for the pending deadline if it lapsed
// while the board was watched (b.mu held).
func (b *Board) armLapsed() {
	if !b.fineLapsed.Swap(false) {
		return
	}
	if d := b.due.Load(); d != 0 {
		b.armFine(d)
	}
}

// fineTimer is the fine timer's goroutine: it runs the timers whenever
// the timerfd fires, until Close closes the timerfd.
func (b *Board) fineTimer() {
	defer close(b.fineExited)
	if b.fine == nil {
		return
	}
	var buf [8]byte // the expiry count
	for {
		if _, err := b.fine.Read(buf[:]); err != nil {
			return // closed
		}
		b.mu.Lock()
		if b.closed {
			b.unlockKick()
			return
		}
		b.armed = 0
		b.fineAwake = true
		b.cnt[FineFirings]++
		b.uncapped = true // armed only while no waiter polls (watched)
		sent := b.sends
		if b.fineTicks && b.clock() >= b.nextTick.Load() {
			b.timersLocked(false) // the tick of a board that was idle (progress.go)
		} else if d := b.due.Load(); d != 0 && b.clock() >= d {
			b.runTimersLocked()
		} else {
			b.cnt[FineIdle]++
		}
		b.uncapped = false
		if b.sends != sent {
			// What the run sent (a question, a resend, an ack)
			// readied the receiver's goroutines, on the in-process
			// wire on this P: they go first (this goroutine goes
			// behind them, on the global run queue, though a P that
			// is idle may take it at once), and the deadlines they
			// note are set by rearmFine (see above). Queued copies
			// (cma.go) wait for the unlock after it.
			b.release(false)
			if h := fineYieldHook.Load(); h != nil {
				(*h)(b)
			}
			runtime.Gosched()
			b.mu.Lock()
			if b.closed {
				b.fineAwake = false // armFine does nothing on a closed board anyway
				b.unlockKick()
				return
			}
		}
		b.rearmFine()
		b.unlock()
	}
}

// fineYieldHook, when set by a test, runs in the fine timer goroutine's
// yield after a run that sent frames, without b.mu.
var fineYieldHook atomic.Pointer[func(b *Board)]

// rearmFine is the fine timer's goroutine going back to sleep: it sets the
// timerfd for the idle board's next tick and for the earliest deadline
// noted, including those noted since it fired, which armFine left to it
// (fineAwake). Called with b.mu held.
func (b *Board) rearmFine() {
	b.fineAwake = false
	if b.fineTicks {
		if b.idleTick != 0 || b.looks.Load() != b.fineMark {
			b.fineTicks = false // the progress goroutine keeps them again
		} else {
			b.armFine(b.nextTick.Load())
		}
	}
	if d := b.due.Load(); d != 0 {
		if b.watched() {
			b.fineLapsed.Store(true)
		} else {
			b.armFine(d)
		}
	}
}

// Deadlines are checked by whoever runs.
//
// The timerfd wakes a board whose goroutines sleep, but not one whose
// goroutines spin: Go's runtime looks at its poller, where the timerfd's
// readiness waits, only when a P has nothing to run, or from sysmon about
// every 10 ms. While busy-polling waiters hold every P (BoardOptions.BusyPoll,
// one waiter per CPU), a deadline noted for 60 µs fired some 7 ms late, and
// every lost frame that only a timer reveals cost that. The Go timers of
// the receive loops, asleep in Recv or staying away from it, are late the
// same way.
//
// So a goroutine that polls looks at the deadlines itself, as DPDK drives
// rte_timer_manage from its poll loop: a polling waiter (pollWait) on the
// clock reading it makes every 16 looks (256 where the clock is slow),
// whether they found anything or not, and the receive loop after every
// Recv. The board's earliest deadline
// (deadline: the next tick, or the noted retransmission deadline if that is
// sooner) is two atomics, a load each to look at; only once it has passed
// does the looker take the board's lock and run the timers (runDue). A
// look that finds the lock taken leaves them to its holder or to the next
// look, 16 polls later.

// deadline returns when the board's timers next need to run (board clock,
// ns): the next tick, or the noted retransmission deadline if sooner.
func (b *Board) deadline() int64 {
	t := b.nextTick.Load()
	if d := b.due.Load(); d != 0 && d < t {
		t = d
	}
	return t
}

// runDue runs the board's timers when now, a clock reading of a polling
// goroutine that holds no lock, is past their deadline, or ack deadlines
// wait for a reading (Board.unstamped), and nobody holds the
// board's lock. uncapped: the waiter spins on no reply (Board.uncapped).
func (b *Board) runDue(now int64, uncapped bool) (ran bool) {
	if now < b.deadline() && !b.unstamped.Load() || !b.mu.TryLock() {
		return false
	}
	if !b.closed {
		b.uncapped = uncapped
		b.timersAt(false, now) // the reading that found it due
		b.uncapped = false
	}
	b.unlock()
	return true
}

// A timer run that serves a deadline looks at the sources first.
//
// The goroutine that runs the timers when a noted deadline passes (the
// fine timer's; a polling waiter's; a receive loop's) is not always the one
// that receives: the answers to what the timers would resend may wait,
// unread, in a transport's queue, because the goroutine that owns it was
// descheduled, or is the one running the timers now. A probe or a resend
// sent then is spurious: a frame and a duplicate at the peer for an answer
// that was already here. So a run whose noted deadline has passed first
// takes what every source it can have at once already holds (a source
// another goroutine is receiving from is that goroutine's to look at),
// without waiting and at most drainBatches batches of each, as a verdict's
// drain does (verdict.go). Such runs come once per probe timeout of a busy
// partner; the periodic tick's runs do not drain.
//
// A run that comes schedFloor or more after that deadline was itself kept
// from running, and the peer's goroutines, on the same machine or one as
// loaded, likely as long: they may not have answered yet. So such a run
// also gives them as long again: no probe, resend or pull re-request goes
// out before now plus the lateness (Board.holdUntil; at most RTOMax), and
// what is still unanswered then goes out at once, however late that run
// is itself (a deadline within a grace gets none of its own, so a loaded
// machine, where every run is late, cannot put resends off for ever). A
// lost frame costs that much more only on a machine that just kept the
// board from running.
// Lateness is measured against the noted deadline only, which the fine
// timer and polling waiters keep to the microsecond, not against the tick,
// which the receive loop's Go timer fires a millisecond late on an idle
// machine.

// lateRun is the start of a timer run at now: once the noted deadline has
// passed, it drains the sources, and holds retransmissions when the run
// comes late for a deadline past the last grace (see above; b.mu held).
func (b *Board) lateRun(now int64) {
	d := b.due.Load()
	if d == 0 || now < d {
		return
	}
	b.drainDue()
	if late := now - d; late >= int64(schedFloor) && d > b.holdUntil {
		b.holdUntil = max(b.holdUntil, now+min(late, int64(b.opts.RTOMax)))
	}
}

// held reports whether retransmissions wait for a late run's grace at now,
// noting its end as a deadline when they do (b.mu held).
func (b *Board) held(now int64) bool {
	if now >= b.holdUntil {
		return false
	}
	b.noteDue(b.holdUntil)
	return true
}

// drainDue receives and handles what the sources already hold: those
// nobody else is receiving from, and the one this goroutine received from
// last (b.rxOwned; b.mu held).
func (b *Board) drainDue() {
	for _, s := range b.allSrcs {
		owned := s == b.rxOwned
		if !owned && !s.mu.TryLock() {
			continue // its owner looks at it
		}
		for range drainBatches {
			n, _ := s.tr.Recv(s.rx, 0)
			if n == 0 {
				break
			}
			b.cnt[DueDrainFrames] += uint64(n)
			b.handleBatchLocked(s, s.rx[:n])
		}
		if !owned {
			s.mu.Unlock()
		}
	}
}
