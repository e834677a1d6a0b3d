package drv

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gomx-dev/gomx/nicdrv"
)

// CheckQueue is nil when q is one of a NIC's n queues of direction dir
// ("RX", "TX"), else nicdrv.ErrBadQueue naming it: RxBatch and TxBatch
// check their queue with it and then call the queue's batch themselves
// (the package doc says why the call is not made here).
func (d *Device) CheckQueue(dir string, q, n int) error {
	if uint(q) < uint(n) {
		return nil
	}
	return d.badQueue(dir, q)
}

// badQueue is CheckQueue's error, apart so that CheckQueue inlines.
func (d *Device) badQueue(dir string, q int) error {
	return d.Errorf(fmt.Sprintf("%s queue %d", dir, q), nicdrv.ErrBadQueue)
}

// Close is nicdrv.NIC.Close over a driver's rings, each locked by its
// batches: under the control lock ctl, the first call sets closed, waits
// out the batches in flight by taking every ring's lock (later batches see
// closed and return nicdrv.ErrClosed), and tears the NIC down with them
// held; later calls return nil.
func Close[R, T sync.Locker](ctl *sync.Mutex, closed *atomic.Bool, rx []R, tx []T, teardown func() error) error {
	ctl.Lock()
	defer ctl.Unlock()
	if closed.Swap(true) {
		return nil
	}
	for _, r := range rx {
		r.Lock()
		defer r.Unlock()
	}
	for _, t := range tx {
		t.Lock()
		defer t.Unlock()
	}
	return teardown()
}

// Releaser is a queue as Teardown sees it: Release gives back the
// buffers it holds, once the NIC is quiet.
type Releaser interface{ Release() error }

// Teardown quiesces a NIC and releases what it holds, for Close and for a
// failed Open, in the order that keeps memory safe: quiesce stops the
// NIC's DMA (when BAR0 was mapped; it turns bus mastering off even when a
// wait in it times out), then the interrupts are turned off (irqs: they
// were enabled), the queues give their buffers back (once pools exist),
// and only then are the ring memory and the pools freed. Every step runs
// whatever an earlier one returned; the error joins them all. It runs
// once, so its generic calls cost nothing a caller would notice.
func Teardown[R, T Releaser](d *Device, quiesce func() error, irqs bool, rx []R, tx []T, rings *Rings, pools *Pools) error {
	var errs []error
	if d.Regs != nil {
		errs = append(errs, quiesce())
	}
	if irqs {
		// The driver keeps its Interrupts: a WaitRx still looking at
		// one finds it closed and returns ErrClosed.
		errs = append(errs, d.Dev.DisableInterrupts())
	}
	if pools != nil {
		for _, r := range rx {
			errs = append(errs, r.Release())
		}
		for _, t := range tx {
			errs = append(errs, t.Release())
		}
	}
	errs = append(errs, rings.Release())
	if pools != nil {
		errs = append(errs, pools.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return d.Errorf("close", err)
	}
	return nil
}
