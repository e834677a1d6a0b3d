package mx

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The poll window (described in poll.go's opening comment): its defaults,
// the governor that grows and shrinks each endpoint's window from what its
// waits observed, GOMX_SPIN and GOMX_SPIN_MAX, and how a poller or a receive
// loop gives its CPU back (osYield, yieldToWoken).

// DefaultSpin is the default BoardOptions.Spin: about two one-way futex
// wake-ups on this kind of machine, so a reply that comes as fast as a
// wake-up would is caught without one, while a waiter whose peer is slower
// gives the CPU back after a bounded cost.
const DefaultSpin = 50 * time.Microsecond

// DefaultSpinMax is the default BoardOptions.SpinMax: a few scheduler
// time slices of a loaded machine short, so a reply from a peer that was
// descheduled briefly is still caught by polling, and an endpoint whose
// messages come later gives the CPU back after at most this long where
// each process has a CPU (on an oversubscribed node, after at most the
// stretched cap, 16 ms at most: BoardOptions.SpinMax).
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
	w, grew, shrank := g.next(g.window.Load(), blocked, int64(max(b.opts.Spin, 0)), int64(b.spinCap()))
	g.window.Store(w)
	switch {
	case grew:
		b.spinGrew.Add(1)
	case shrank:
		b.spinShrank.Add(1)
	}
}

// tune tunes the window after a wait that started counting its budget at
// start (-1: it read no clock) and slept: one that polled its window
// (polled) by when its message came (observe); one handed over to the
// receive loop at once (handed, pollHandOver) only when its message came
// later than SpinMax, which polling would not have caught.
func (g *spinGovernor) tune(b *Board, start int64, polled, handed bool) {
	if start < 0 || !polled && !handed {
		return
	}
	blocked := b.clock() - start
	if polled || blocked >= int64(b.spinCap()) {
		g.observe(b, blocked)
	}
}

// waitBudget is how long a wait on e polls before sleeping: -1 (no limit)
// in busy-poll mode, else the endpoint's poll window, and at least
// SpinMax while waiters yield (oversub.go) and the window is at Spin,
// where it starts, or above.
//
// While waiters yield, a wait polls SpinMax unless the governor says its
// messages come late: a wait whose message came after SpinMax halved the
// window below Spin, and none since brought it back (a message within
// SpinMax doubles it, to Spin at least). Such an endpoint waits for
// messages far away (an idle rank of a job,
// in a barrier while two ranks talk). Yielding for SpinMax there caught
// nothing and cost the most: each yield is a context switch on a node
// whose CPUs the job's other ranks share, and for as long as the waiter
// holds its P the runtime's sysmon wakes every 20 µs (some 40 of an idle
// rank's 60 switches after each barrier of a 16-rank pingpong). Such a
// waiter looks once more and sleeps (pollWait), and an endpoint whose
// messages come soon (an alltoall's) yields for SpinMax from its first
// wait on: one whose window had to grow past Spin first looked once and
// slept (an eventfd write and a wake-up through the netpoller) on about
// every other wait of an 8 B alltoall, some 17% of its time. With Spin 0
// (GOMX_SPIN=0) the window stays 0 and every wait of a yielding board
// polls SpinMax. On an oversubscribed node the window may grow past
// SpinMax, up to the stretched cap (spinCap, oversub.go), by waits that
// slept and whose messages came within it: the budget is the window
// then.
func (b *Board) waitBudget(e *Endpoint) time.Duration {
	if b.opts.BusyPoll {
		return -1
	}
	// A window grown while the node was oversubscribed (spinCap) is
	// capped again by SpinMax once it is not.
	w := min(time.Duration(e.spin.window.Load()), b.spinCap())
	if b.oversub.yield.Load() && w >= b.opts.Spin {
		w = max(w, b.opts.SpinMax)
	}
	return w
}

// SpinWindow returns how long a blocking wait on e polls before it sleeps
// right now (see BoardOptions.SpinMax and BoardOptions.Yield); 0 when the
// board never polls.
func (e *Endpoint) SpinWindow() time.Duration {
	if len(e.b.waitSources()) == 0 {
		return 0
	}
	if e.b.opts.BusyPoll {
		return time.Duration(e.spin.window.Load())
	}
	return e.b.waitBudget(e)
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

// clockEvery is how many looks a polling waiter makes between readings of
// the clock (deadlines, its budget, the context) where reading it is cheap;
// busyClockEvery stretches that for a busy-polling waiter, which has no
// budget, where the clock costs a system call (the vDSO cannot read the
// clock source: a virtual machine with an HPET or ACPI PM timer for clock,
// such as a TCG guest, where every reading is a device register emulated
// under QEMU's big lock, which the other vCPU's MMIO then waits for).
const clockEvery = 16

// slowClock is the cost of one clock reading above which busy-polling
// waiters read it every slowClockEvery looks instead of every clockEvery.
const (
	slowClock      = 500 * time.Nanosecond
	slowClockEvery = 256
)

var clockCost = sync.OnceValue(func() time.Duration {
	const n = 16
	start := time.Now()
	for range n {
		_ = time.Now()
	}
	return time.Since(start) / n
})

// busyClockEvery is the looks between clock readings of a busy-polling
// waiter: clockEvery, or slowClockEvery where a reading costs more than
// slowClock. A deadline is then noticed up to slowClockEvery looks late: at
// most a few milliseconds where a look is as slow as such a clock.
func busyClockEvery() int { return clockStride(clockCost()) }

// clockStride is busyClockEvery for a clock whose reading costs cost.
func clockStride(cost time.Duration) int {
	if cost > slowClock {
		return slowClockEvery
	}
	return clockEvery
}

// rawYield is osYield without telling the Go runtime that the goroutine
// enters a system call. sched_yield returns as soon as the kernel runs
// the thread again, but on an oversubscribed CPU that may be after other
// processes ran for a while; a goroutine inside Syscall for 20 µs or more
// has its P taken by sysmon and handed to another thread (a futex wake),
// and must get a P back when it returns (another). A waiter that yields
// after every look (oversub.go) paid that on most of its yields; the P it
// keeps instead has nothing else to run that could not wait for the next
// look. A busy-polling waiter, which keeps its P whatever it does, yields
// so too.
func rawYield() { _, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

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
