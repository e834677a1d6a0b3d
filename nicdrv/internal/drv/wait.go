package drv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
)

// RxWaiter is nicdrv.NIC.WaitRx for a driver whose queues each have a ring
// to look at and, in interrupt mode, an MSI-X vector of their own. The
// driver fills it in once, at Open.
type RxWaiter struct {
	// Queues is the number of RX queues. Only the first 64 can be
	// waited on (Arm's mask has a bit for each): Wait refuses a queue
	// numbered 64 or above with nicdrv.ErrNotSupported.
	Queues int
	// Closed reports whether the NIC is closed.
	Closed func() bool
	// Ready reports whether queue q has a frame waiting, and where on
	// its ring the next frame will be taken from (the position moves
	// whenever the driver takes frames; see quiet).
	Ready func(q int) (bool, uint32)
	// Arm unmasks the interrupts of the queues set in mask, bit q for
	// queue q (interrupt mode only), in as few register writes as the NIC
	// allows: a wait arms every queue it sleeps on at once. It clears
	// those queues' latched causes first (the frames taken since a
	// vector fired latched them), so the arming does not fire at once for
	// frames already taken. That is why at most one Wait may wait on a
	// queue at a time: on a real NIC a cause stays latched until the
	// throttle (EITR) lets its message out, and a second waiter's Arm in
	// that window would clear it, taking the wake-up of the first waiter,
	// which sleeps on. The second's look after arming finds the frame, the
	// first does not look again.
	Arm func(mask uint64)
	// IRQs are the queues' vectors by queue; nil in polling mode.
	IRQs []*pci.Interrupt
	// Spin is how many looks at a ring interrupt mode takes before it
	// arms the vectors and sleeps: a frame that comes within them costs no
	// interrupt and no register write. A wait on several queues looks at
	// each in turn and so takes Spin / queues looks at them all (at least
	// one): the spin costs about the same whatever it waits on, where a
	// wait on a board's five queues spun five times a queue's CPU (mxbench
	// overlap's progress thread, docs/zero-copy.md). The looks do not
	// yield: the caller that waits is typically a progress goroutine
	// locked to its OS thread, for which runtime.Gosched hands the Go
	// processor to another thread and back (two futex calls and two
	// context switches a look); the looks hold the processor for a few
	// microseconds instead, and the sleep that ends them gives it up
	// once. 0: arm after the first look. The looks a queue gets adapt
	// to whether they pay (see spinProbe), unless FixedSpin.
	Spin int
	// FixedSpin keeps every wait's looks at Spin.
	FixedSpin bool
	// Count counts the interrupts consumed.
	Count *atomic.Uint64
	// Errorf wraps an error with the NIC and the operation.
	Errorf func(op string, err error) error
	// Now reads the clock a wait's deadline is checked on; nil:
	// time.Now. (pci.WaitAny's sleep ends on the real clock.)
	Now func() time.Time

	// q is each queue's wait state, on a line of its own: two queues'
	// waiters on two CPUs write no line in common.
	q [maxWait]waitQueue
}

// waitQueue is one queue's wait state, carried from one Wait to the next.
type waitQueue struct {
	// quiet holds the looks at the queue's ring that found it empty
	// since the driver last took a frame from it (the ring position of
	// the last look in the upper 32 bits, the looks in the lower).
	quiet atomic.Uint64
	// served marks the queue as one whose next Wait arms after its
	// first look (Served): the ring position Served found in the lower
	// 32 bits, bit 32 set; 0 when unmarked.
	served atomic.Uint64
	// spin holds the looks the queue's waits take before they arm while
	// its spins catch nothing (spinProbe): the number in the lower 32
	// bits, 0 for Spin; the armings since its last full spin in the
	// upper 32.
	spin atomic.Uint64
	_    [64 - 3*8]byte
}

// spinProbe is how many armings a queue whose spin was cut takes between
// two full spins.
//
// A spin pays when a frame comes within it. One that comes sooner than
// the looks take is taken at no cost but the looks; one that comes later
// costs the looks, the arming and a sleep. So each queue keeps how many
// looks its waits take: Spin to begin with, and after any wait whose
// spin caught a frame (or whose look right after the arming found one:
// the spin was just short); halved at each arming whose spin caught
// nothing, down to one look; and every spinProbe-th arming since the
// last full spin looks Spin times again, so that frames that begin to
// follow closely are noticed within that many waits. A wait on several
// queues spins as long as the one of them that looks longest. A receive
// loop whose frames come in bursts a round trip apart (a pull's blocks
// over the emulated 82599s: 0.02-0.05 of 20 armings an exchange caught
// a frame in the spin, docs/nics.md) thus looks about Spin / 8 times
// a wait on average (each cut spin halving down from the probe) instead
// of Spin, and one whose next frame follows within
// the looks keeps them all.
const spinProbe = 16

// Served says that queue q's frames were taken by looks of the caller's
// own until now (an application that serves its queue, with the waiting
// thread away): its next Wait, in interrupt mode, arms the vector after
// its first look instead of looking Spin times first, since those looks
// were taken already. The mark holds only while the ring stays where
// Served found it: a frame taken before that Wait looks voids it. Without
// interrupts it does nothing.
func (w *RxWaiter) Served(q int) {
	if w.IRQs == nil || q < 0 || q >= w.Queues || q >= maxWait {
		return
	}
	if ready, p := w.Ready(q); !ready {
		w.q[q].served.Store(1<<32 | uint64(p))
	}
}

// The looks before arming count across waits. A receive loop that wakes
// on a schedule (mx's progress goroutine runs its timers every tick, a
// few tens of microseconds apart while messages are in flight) calls Wait
// with a timeout shorter than the Spin looks can take on cores shared
// with other threads; a count that began at zero at every call
// would never reach the arming, and such a loop would poll an idle ring
// for as long as it stayed idle, never sleeping on its vector. So Wait
// begins where the last wait on the queue stopped, as long as the ring's
// position shows that no frame was taken from it since (a ring that took
// exactly a multiple of its size in between looks untouched, and its wait
// arms early once). A frame taken starts the count again, so a queue that
// is busy but not flooded still costs no interrupt and no register write
// per frame.

// maxWait is the most queues one WaitRx sleeps on (pci.WaitAny's bound,
// and the 82599's 64 queue pairs).
const maxWait = 64

// pollYield is how many looks the polling wait takes with a
// runtime.Gosched between them before it sleeps pollSleep between looks.
// Unlike the interrupt wait it yields: a polling thread that spun and then
// slept answered a frame nobody waited for up to a sleep later (a Go sleep
// this short lasts about a millisecond on an idle process), measured in
// docs/nics.md.
const (
	pollYield = 100
	pollSleep = 20 * time.Microsecond
)

// clockEvery is how many looks the wait takes between readings of the
// clock for its deadline while it looks without sleeping: a reading costs
// about as much as a look at a few rings, and a deadline noticed a few
// such looks late is a few hundred nanoseconds late. A look that a sleep
// follows (polling past pollYield, whose 20 µs sleeps last about a
// millisecond, or the arming before an interrupt wait) reads it every
// time, so a deadline is never noticed a sleep late.
const clockEvery = 8

// Wait waits until one of queues (every queue when empty) has a frame and
// returns it, or until ctx ends or deadline (the zero Time: never)
// passes, as nicdrv.NIC.WaitRx says.
func (w *RxWaiter) Wait(ctx context.Context, deadline time.Time, queues []int) (int, error) {
	var all [maxWait]int
	if len(queues) == 0 {
		for q := 0; q < w.Queues && q < maxWait; q++ {
			all[q] = q
		}
		queues = all[:min(w.Queues, maxWait)]
	}
	if len(queues) > maxWait {
		return 0, w.Errorf("wait for RX", fmt.Errorf("%d queues: at most %d at once", len(queues), maxWait))
	}
	for _, q := range queues {
		if q < 0 || q >= w.Queues {
			return 0, w.Errorf(fmt.Sprintf("wait on RX queue %d", q), nicdrv.ErrBadQueue)
		}
		if q >= maxWait {
			// Arm's mask has a bit for each of the first 64 only.
			return 0, w.Errorf(fmt.Sprintf("wait on RX queue %d", q),
				fmt.Errorf("only queues below %d can be waited on: %w", maxWait, nicdrv.ErrNotSupported))
		}
	}
	var irqs [maxWait]*pci.Interrupt
	var pos [maxWait]uint32
	spin := w.spinFor(queues)
	armed := false
	for i := 0; ; i++ {
		if w.Closed() {
			return 0, w.Errorf("wait for RX", nicdrv.ErrClosed)
		}
		for k, q := range queues {
			ready, p := w.Ready(q)
			if ready {
				if i > 0 && !armed && w.IRQs != nil && w.Spin > 0 {
					w.q[q].spin.Store(0) // caught in the spin
				}
				return q, nil
			}
			pos[k] = p
		}
		if i == 0 && w.IRQs != nil {
			i = w.carried(queues, pos[:len(queues)])
		}
		err := ctx.Err()
		sleeps := (w.IRQs != nil && i >= spin) || (w.IRQs == nil && i >= pollYield)
		if err == nil && !deadline.IsZero() && (i%clockEvery == 0 || sleeps) && !w.now().Before(deadline) {
			err = context.DeadlineExceeded
		}
		if err != nil {
			if w.IRQs != nil {
				w.carry(queues, pos[:len(queues)], i, spin)
			}
			return 0, err
		}
		if w.IRQs == nil {
			if i < pollYield {
				runtime.Gosched()
			} else {
				time.Sleep(pollSleep)
			}
			continue
		}
		if i < spin {
			continue
		}
		// Arm the queues' vectors, look again, then sleep: a frame that
		// came between the first look and the arming raises a vector.
		var mask uint64
		for k, q := range queues {
			mask |= 1 << q
			irqs[k] = w.IRQs[q]
		}
		w.Arm(mask)
		first := !armed
		if first {
			armed = true
			w.spinMissed(queues, spin)
		}
		for _, q := range queues {
			if ready, _ := w.Ready(q); ready {
				if first && w.Spin > 0 {
					w.q[q].spin.Store(0) // just after the spin: it was short
				}
				return q, nil
			}
		}
		_, c, err := pci.WaitAny(ctx, deadline, irqs[:len(queues)]...)
		if err != nil {
			w.carry(queues, pos[:len(queues)], i, spin)
			if errors.Is(err, pci.ErrClosed) || w.Closed() {
				return 0, w.Errorf("wait for RX", nicdrv.ErrClosed)
			}
			if cerr := ctx.Err(); cerr != nil {
				return 0, cerr
			}
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
				// The eventfd's deadline is the context's, and may pass
				// a moment before the context notices.
				return 0, context.DeadlineExceeded
			}
			return 0, w.Errorf("wait for RX interrupt", err)
		}
		w.Count.Add(c)
	}
}

// now reads Now, or time.Now without it.
func (w *RxWaiter) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// spinFor is how many looks at queues at once the wait takes before it
// arms (see Spin and spinProbe): the looks of the queue that looks
// longest, shared among them all.
func (w *RxWaiter) spinFor(queues []int) int {
	if w.Spin <= 0 {
		return w.Spin
	}
	looks := 1
	for _, q := range queues {
		looks = max(looks, w.looksOf(q))
	}
	return max(looks/len(queues), 1)
}

// looksOf is how many looks queue q's waits take before they arm.
func (w *RxWaiter) looksOf(q int) int {
	if w.FixedSpin {
		return w.Spin
	}
	v := w.q[q].spin.Load()
	if n := int(uint32(v)); n != 0 && v>>32 != spinProbe-1 {
		return n
	}
	return w.Spin
}

// spinMissed notes that a wait on queues armed after spin looks at them
// all, catching no frame: each queue's looks are halved (from the looks
// it took, down to one), and its probe count moves on (spinProbe).
func (w *RxWaiter) spinMissed(queues []int, spin int) {
	if w.FixedSpin || w.Spin <= 0 {
		return
	}
	for _, q := range queues {
		v := w.q[q].spin.Load()
		n, probes := uint32(v), v>>32+1
		if n == 0 || probes >= spinProbe {
			n, probes = uint32(w.Spin), 0 // a full spin, missed
		}
		n = max(min(n, uint32(spin*len(queues)))/2, 1)
		w.q[q].spin.Store(probes<<32 | uint64(n))
	}
}

// carried is how many looks at queues found them empty before this wait,
// at the positions pos its first look found them: the fewest that any of
// them carries (0 for a queue a frame was taken from since, Spin for one
// marked Served at pos). It consumes every queue's mark.
func (w *RxWaiter) carried(queues []int, pos []uint32) int {
	n := uint32(1<<32 - 1)
	var marks [maxWait]uint64
	for k, q := range queues {
		marks[k] = w.q[q].served.Load()
		v := w.q[q].quiet.Load()
		switch {
		case marks[k] != 0 && uint32(marks[k]) == pos[k]:
			n = min(n, uint32(w.Spin))
		case uint32(v>>32) != pos[k]:
			n = 0
		default:
			n = min(n, uint32(v))
		}
	}
	for k, q := range queues {
		if marks[k] != 0 {
			w.q[q].served.CompareAndSwap(marks[k], 0)
		}
	}
	return int(n)
}

// carry records, as a wait ends empty after its look i (counted from 0)
// at them all, that queues were found empty at pos (kept no higher than
// the arming needs). A wait whose looks reached its spin (i >= spin, its
// spinFor: it armed, or was about to) records Spin whatever it
// waited on: its queues had their spin, so the next wait on any of them,
// even on fewer queues, whose spin is longer, arms after its first look.
// One that stopped short records its looks at them all.
func (w *RxWaiter) carry(queues []int, pos []uint32, i, spin int) {
	looks := min(i+1, w.Spin)
	if i >= spin {
		looks = w.Spin
	}
	for k, q := range queues {
		w.q[q].quiet.Store(uint64(pos[k])<<32 | uint64(looks))
	}
}
