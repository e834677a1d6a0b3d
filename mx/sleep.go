package mx

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// A waiter that sleeps receives.
//
// A blocking waiter whose poll window is spent (poll.go) can sleep on its
// request's channel, until a receive loop, woken by the kernel for the
// frame, handles it and completes the request. That is two threads per
// message: the loop's, which the kernel wakes, and the
// waiter's, which the loop wakes. In a Go program the Go scheduler hides
// the second (the loop hands its processor to the goroutine it woke), but
// a thread of a C program waiting in libmyriexpress runs a goroutine
// locked to it (cgo's callback), and waking it is a hand-over between
// threads: a futex wake for the waiter's thread and a futex sleep for the
// loop's, per message.
//
// So with BoardOptions.SleepOnSources a blocking waiter takes the board's
// receive sources from their loops and sleeps in the kernel on them
// itself, on its own thread, as an Open-MX application thread sleeps in
// its driver's wait: ppoll(2) on the sources' descriptors (a UDP socket,
// the rings' doorbell eventfd: transport.Sleeper) and on the board's own
// eventfd, which anything else that completes its request, raises an
// event it waits for or wakes its endpoint writes while it sleeps
// (ringSleeper). The kernel wakes that thread for the frame; it receives
// the frame, handles it and completes the request there, and the wait
// returns, with no hand-over between threads.
//
// It is an option, which libmyriexpress sets, and not the default: those
// descriptors stay registered with the Go runtime's poller (the
// transports' own Recv waits there), so a frame that wakes the sleeping
// thread also wakes the runtime's idle thread in epoll_wait, which finds
// nobody to run. For a C thread that spurious wake-up is cheaper than the
// hand-over it replaces; a Go program, whose loop hands its processor to
// the woken goroutine at no cost, would pay it for nothing (measured over
// UDP, 8 B ping-pong, both processes: C 2.0 futex calls and 166 µs of CPU
// per round trip against 11.7 and 276 with the channel sleep; Go 220 µs
// against 185). A frame that comes while the owner handles the last one
// (the next batch of a burst) is taken by looking again for burstSpin
// before sleeping, not by a sleep per batch. And a large message over the
// transport, which comes as a stream of datagrams (a pull's requests at
// the sender, its replies at the receiver: a spurious wake-up each), is
// left to the loop: a wait for such a send sleeps on its channel, and an
// owner hands the sources back and does so too while such a pull is in
// flight: one hand-over per large message, not a wake-up of the runtime's
// poller per frame. Over the rings a burst costs no such wake-up (a
// producer writes the eventfd only to a consumer that said it sleeps), so
// large messages there stay the owner's.
//
// One waiter of a board at a time owns its sources so (sleepState.owner); the
// others sleep on their channels, and are completed by the
// owner's receives. A waiter takes a source whose loop is inside Recv by
// asking the loop to step aside (the transport's Wake) and waiting a
// moment for it (takeGrace); a source it does not get stays its loop's,
// and the loop's completion of the waiter's request wakes it through the
// board's eventfd. While the owner sleeps, the loops stay away (it counts
// among the sources' pollers) and keep only the timers, on the board's
// tick: retransmission and acks run as they do while waiters poll. When
// its condition holds the owner hands the sources back as a polling
// waiter that succeeded does (the loop stays away spinGrace more: the
// application usually waits again soon), or at once when other waiters
// sleep on channels, whose messages need a receiver; and at once after a
// timeout or a wake-up.
//
// A process has at most GOMAXPROCS-1 waiters asleep so (kernelSleepers),
// so none on a process with one P: a goroutine blocked in a system call
// keeps its P from every other goroutine until sysmon takes it back (20 µs
// or more later, with a thread started for it). Nor is it done on sources
// that cannot sleep outside Recv (transports that are not
// transport.Sleepers: in-process networks, the NIC drivers' rings).

// burstSpin is how long the owner looks again after a look that found
// frames before it sleeps: a burst's next batch (a pull's replies) is
// usually on its way.
const burstSpin = 20 * time.Microsecond

// takeGrace is how long a waiter that asked a receive loop to leave Recv
// waits for it before it sleeps without that source.
const takeGrace = 200 * time.Microsecond

// sleepState is a board's side of the waiter that sleeps on its sources.
type sleepState struct {
	// ok: every source can sleep outside Recv, and the board has its
	// eventfd (fd).
	ok bool
	fd int
	// owner is held by the waiter that owns the sources for a sleep.
	owner atomic.Bool
	// armed: the owner sleeps (or is about to): a completion, an event
	// or a wake-up must write fd (ringSleeper).
	armed atomic.Bool
	// chanSleepers counts waiters asleep on their channels.
	chanSleepers atomic.Int32
	// The owner's scratch: the sources it took and the descriptors it
	// polls (fd first).
	srcs []*rxSource
	fds  []unix.PollFd
	// waits counts the waits that slept on their sources and ended with
	// their condition holding (WaitStats.Kernel).
	waits atomic.Uint64
}

// openSleep makes the board's eventfd when every source can sleep outside
// Recv and the options allow it.
func (b *Board) openSleep() {
	b.sleep.fd = -1
	if !b.opts.SleepOnSources {
		return
	}
	for _, s := range b.allSrcs {
		if s.sleeper == nil {
			return
		}
	}
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return // waiters sleep on their channels
	}
	b.sleep.fd, b.sleep.ok = fd, true
	b.sleep.fds = make([]unix.PollFd, 0, len(b.allSrcs)+1)
}

// closeSleep closes the eventfd, once no waiter can own the sources.
func (b *Board) closeSleep() {
	if b.sleep.fd >= 0 {
		unix.Close(b.sleep.fd)
		b.sleep.fd = -1
	}
}

// kernelSleepers counts the waiters of the process asleep on their boards'
// sources. Each holds its P in a system call, which the runtime takes back
// only after sysmon's next look (20 µs to 10 ms): at most GOMAXPROCS-1 of
// them sleep so at once, so that the receive loops and timers always have
// a P to run on (a pair of boards in one process, each with a waiter
// asleep on it, held both Ps of a 2-CPU host, and their acks came late).
var kernelSleepers atomic.Int32

// canSleepOnSources reports whether a waiter that is about to sleep may
// sleep on the board's sources (see above).
func (b *Board) canSleepOnSources() bool {
	return b.sleep.ok && !b.sleep.owner.Load() && kernelSleepers.Load() < int32(runtime.GOMAXPROCS(0)-1)
}

// ringSleeper wakes the owner asleep on the sources, if it sleeps: called
// by whatever may end its wait (a completion, an endpoint event, a
// wake-up), after the state it changed is stored. One write per sleep.
func (b *Board) ringSleeper() {
	if b.sleep.armed.Load() && b.sleep.armed.Swap(false) {
		one := [8]byte{1}
		_, _ = unix.Write(b.sleep.fd, one[:])
	}
}

// sleepOutcome says how sleepOnSources ended.
type sleepOutcome uint8

const (
	// sleepNotTaken: another waiter owns the sources, no source could be
	// taken, or a pull is in flight; the caller sleeps on its channel.
	sleepNotTaken sleepOutcome = iota
	// sleepHeld: the condition holds (a waiter's request may have been
	// consumed already: w.ok).
	sleepHeld
	// sleepErr: ctx is done or the endpoint was woken up (the error says
	// which) and the condition does not hold.
	sleepErr
)

// sleepOnSources is the sleep of a blocking waiter that receives (see
// above): it takes the board's sources and sleeps in the kernel on them
// until w's request is done (or, when w is nil, cond holds), ctx is done
// or e is woken up past gen. spun: the waiter polled the sources before
// and kept them (pollWait's stay): they are handed back here.
func (b *Board) sleepOnSources(ctx context.Context, w *waiterReq, cond func() bool, e *Endpoint, gen uint64) (sleepOutcome, error) {
	if !b.sleep.owner.CompareAndSwap(false, true) {
		b.handBack(b.spinSrcs)
		return sleepNotTaken, nil
	}
	defer b.sleep.owner.Store(false)
	if kernelSleepers.Add(1) > int32(runtime.GOMAXPROCS(0)-1) {
		kernelSleepers.Add(-1)
		b.handBack(b.spinSrcs)
		return sleepNotTaken, nil
	}
	defer kernelSleepers.Add(-1)
	srcs := b.takeSources()
	if len(srcs) == 0 {
		b.handBack(b.spinSrcs)
		return sleepNotTaken, nil
	}
	var r *Request
	if w != nil {
		r = w.r
		w.polling, w.asleep = true, true
	}
	holds := func() bool {
		if r != nil {
			return w.ok || r.done.Load()
		}
		return cond()
	}
	ok := false
	defer func() {
		if ok {
			b.sleep.waits.Add(1)
		}
		others := b.sleep.chanSleepers.Load() > 0
		for _, s := range srcs {
			s.asleep.Store(false)
			if w != nil && w.doneAt == s {
				s.mu.Unlock()
				continue // gone from its pollers already (lookLocked)
			}
			if ok && !others {
				if s.idle.Load() != idleFresh {
					s.idle.Store(idleFresh) // the loop times it (stayAway)
				}
			} else {
				s.idle.Store(idleNever)
			}
			s.pollLeft.Add(1)
			s.mu.Unlock()
			if !ok || others {
				select {
				case s.wake <- struct{}{}:
				default:
				}
			}
		}
		if ok && b.unstamped.Load() {
			// A look with no reading at hand (before its first sleep)
			// left an ack deadline for the next reading (ack.go): the
			// board's loop, which stays away until the next tick while
			// the owner sleeps, looks now and stamps it, rather than a
			// tick later.
			select {
			case b.src.wake <- struct{}{}:
			default:
			}
		}
	}()
	var deadline time.Time
	if d, has := ctx.Deadline(); has {
		deadline = d
	} else if ctx.Done() != nil {
		// Cancellable without a deadline: its cancellation wakes the
		// sleep.
		stop := context.AfterFunc(ctx, func() {
			b.sleep.armed.Store(true) // make ringSleeper write
			b.ringSleeper()
		})
		defer stop()
	}
	var seen int64       // the clock when it last woke, for the timers (lookLocked)
	var found int64 = -1 // when a look last found something, -1: not since it woke
	woke := false        // it slept: the timers that came due meanwhile run after its look
	// ack: the reading made since the look before, for the ack
	// deadlines of what the next look handles (lookLocked's ack): the
	// one made as it woke, or a burst's; 0 once a look used it. seen
	// stays as old as the burst it woke to: fine for the timers
	// (later), not for the ack deadlines.
	var ack int64
	for i := 0; ; i++ {
		got := false
		for _, s := range srcs {
			got = b.lookLocked(s, seen, ack, w) || got
			if w != nil && w.ok {
				ok = true
				return sleepHeld, nil
			}
		}
		ack = 0
		if woke {
			// finetimer.go: the timers that came due while it slept,
			// once it took what arrived meanwhile (an answer to what
			// they would resend).
			woke = false
			b.runDue(seen, false)
		}
		b.runCopies() // cma.go
		if holds() {
			ok = true
			return sleepHeld, nil
		}
		if err := ctx.Err(); err != nil {
			return sleepErr, fmt.Errorf("%w: %w", ErrTimeout, err)
		}
		if e != nil && e.wakeGen.Load() != gen {
			return sleepErr, ErrWokenUp
		}
		if got || found >= 0 {
			// A burst: look again for burstSpin after its last find
			// (the clock read every 8 looks), then sleep.
			if got || i&7 == 7 {
				now := b.clock()
				ack = now
				if got {
					found = now
				} else if time.Duration(now-found) >= burstSpin {
					found = -1
				}
				b.runDue(now, false)
			}
			if found >= 0 {
				continue
			}
		}
		if b.pulling.Load() > 0 {
			// A pull's replies come as a stream of frames, each of
			// which would also wake the runtime's poller (see above):
			// the receive loop, asleep there anyway, takes them.
			return sleepNotTaken, nil
		}
		if b.fineLapsed.Load() {
			// Deadlines noted while it polled (finetimer.go's
			// watched): its sleep lasts until the next tick.
			b.mu.Lock()
			b.armLapsed()
			b.unlock()
		}
		b.sleepOnce(srcs, holds, e, gen, deadline)
		seen = b.clock()
		ack = seen
		woke = true
	}
}

// sleepOnChan sleeps a waiter on its channel ch (its request's, or its
// endpoint's event channel), b.mu not held, until ch or wake (its
// endpoint's) is closed or ctx is done. Meanwhile the waiter counts as
// asleep on its channel (chanSleepers: an owner of the sources hands them
// back at once) and as blocked (oversub.go). It returns nil for ch,
// ErrTimeout wrapping ctx's error, or ErrWokenUp.
func (b *Board) sleepOnChan(ctx context.Context, ch, wake <-chan struct{}) error {
	b.sleep.chanSleepers.Add(1)
	b.blocked(1)
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	case <-wake:
		err = ErrWokenUp
	}
	b.sleep.chanSleepers.Add(-1)
	b.blocked(-1)
	return err
}

// takeSources takes the board's sources for the owner, each counted among
// its pollers first, so that a loop that looks sees it and stays away. A
// source whose loop is inside Recv is asked out (Wake) and waited for for
// takeGrace at most; one not taken then stays its loop's.
func (b *Board) takeSources() []*rxSource {
	srcs := b.sleep.srcs[:0]
	var waitFor []*rxSource
	for _, s := range b.allSrcs {
		s.pollIn.Add(1)
		if s.mu.TryLock() {
			s.asleep.Store(true)
			srcs = append(srcs, s)
			continue
		}
		s.sleeper.Wake()
		waitFor = append(waitFor, s)
	}
	if len(waitFor) > 0 {
		start := b.clock()
		for i := 0; len(waitFor) > 0; i++ {
			k := 0
			for _, s := range waitFor {
				if s.mu.TryLock() {
					s.asleep.Store(true)
					srcs = append(srcs, s)
					continue
				}
				waitFor[k] = s
				k++
			}
			waitFor = waitFor[:k]
			if k > 0 && i&15 == 15 && time.Duration(b.clock()-start) > takeGrace {
				for _, s := range waitFor {
					s.pollLeft.Add(1) // its loop keeps it
				}
				break
			}
			if k > 0 {
				osYield()
			}
		}
	}
	b.sleep.srcs = srcs
	return srcs
}

// handBack gives sources no waiter polls any more back to their loops at
// once: those a waiter polled and kept (pollWait's stay), or those a
// waiter leaves without its message.
func (b *Board) handBack(srcs []*rxSource) {
	for _, s := range srcs {
		if s.polling() == 0 {
			s.idle.Store(idleNever)
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// sleepOnce sleeps in the kernel on the owned sources and the board's
// eventfd until one is readable, the board's next tick comes (its timers
// are looked at then) or deadline (zero: none). It arms
// the eventfd first and then checks the condition again: whoever changes
// it after that check sees the sleep armed and writes the eventfd
// (ringSleeper), and whoever changed it before is seen by the check.
func (b *Board) sleepOnce(srcs []*rxSource, holds func() bool, e *Endpoint, gen uint64, deadline time.Time) {
	fds := append(b.sleep.fds[:0], unix.PollFd{Fd: int32(b.sleep.fd), Events: unix.POLLIN})
	sleep := true
	b.blocked(1) // oversub.go: before ArmSleep, which reads it
	defer b.blocked(-1)
	b.sleep.armed.Store(true)
	for _, s := range srcs {
		fd, ok := s.sleeper.ArmSleep()
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		sleep = sleep && ok
	}
	if holds() || (e != nil && e.wakeGen.Load() != gen) {
		sleep = false
	}
	if sleep {
		// Until the next tick, which an idle board stretches
		// (progress.go), and at least a tick.
		wait := min(max(time.Duration(b.nextTick.Load()-b.clock()), b.tick), idleTickMax)
		if !deadline.IsZero() {
			wait = min(wait, time.Until(deadline))
		}
		if wait > 0 {
			ts := unix.NsecToTimespec(int64(wait))
			if n, err := unix.Ppoll(fds, &ts, nil); n == 0 && err == nil { // EINTR, a timeout: the caller looks again
				b.sleepsEmpty.Add(1)
			}
		}
	}
	b.sleep.armed.Store(false)
	for i, s := range srcs {
		s.sleeper.EndSleep(fds[i+1].Revents&unix.POLLIN != 0)
	}
	if fds[0].Revents&unix.POLLIN != 0 {
		var c [8]byte
		_, _ = unix.Read(b.sleep.fd, c[:])
	}
	b.sleep.fds = fds
}

// sleepEnv reads GOMX_SLEEP into o.SleepOnSources: "recv" sets it,
// "loop" clears it, unset leaves it as given.
func (o *BoardOptions) sleepEnv() error {
	switch v := os.Getenv("GOMX_SLEEP"); v {
	case "":
	case "recv":
		o.SleepOnSources = true
	case "loop":
		o.SleepOnSources = false
	default:
		return fmt.Errorf("%w: GOMX_SLEEP=%q: write recv (waiters sleep on the board's sources) or loop (waiters sleep until the receive loop completes them)", ErrBadOptions, v)
	}
	return nil
}
