package drv

import (
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
