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
	// Queues is the number of RX queues.
	Queues int
	// Closed reports whether the NIC is closed.
	Closed func() bool
	// Ready reports whether queue q has a frame waiting.
	Ready func(q int) bool
	// Arm unmasks queue q's interrupt (interrupt mode only).
	Arm func(q int)
	// IRQs are the queues' vectors by queue; nil in polling mode.
	IRQs []*pci.Interrupt
	// Spin is how many looks at the rings interrupt mode takes without
	// yielding, and Yield how many more it takes with runtime.Gosched
	// between them (the polling wait's yields), before it arms the vectors
	// and sleeps: a frame that comes within them costs no interrupt and no
	// register write, and the yields let the goroutines that send and
	// complete run meanwhile. Both 0: arm after the first look.
	Spin, Yield int
	// Count counts the interrupts consumed.
	Count *atomic.Uint64
	// Errorf wraps an error with the NIC and the operation.
	Errorf func(op string, err error) error
}

// maxWait is the most queues one WaitRx sleeps on (pci.WaitAny's bound,
// and the 82599's 64 queue pairs).
const maxWait = 64

// Wait waits until one of queues (every queue when empty) has a frame and
// returns it, as nicdrv.NIC.WaitRx says.
func (w *RxWaiter) Wait(ctx context.Context, queues []int) (int, error) {
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
	}
	var irqs [maxWait]*pci.Interrupt
	for i := 0; ; i++ {
		if w.Closed() {
			return 0, w.Errorf("wait for RX", nicdrv.ErrClosed)
		}
		for _, q := range queues {
			if w.Ready(q) {
				return q, nil
			}
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if w.IRQs == nil {
			if i < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
			continue
		}
		if i < w.Spin+w.Yield {
			if i >= w.Spin {
				runtime.Gosched()
			}
			continue
		}
		// Arm the queues' vectors, look again, then sleep: a frame that
		// came between the first look and the arming raises a vector.
		for k, q := range queues {
			w.Arm(q)
			irqs[k] = w.IRQs[q]
		}
		for _, q := range queues {
			if w.Ready(q) {
				return q, nil
			}
		}
		_, c, err := pci.WaitAny(ctx, irqs[:len(queues)]...)
		if err != nil {
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
