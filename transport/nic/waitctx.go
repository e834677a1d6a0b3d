package nic

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineCtx is the context of one Recv wait with a timeout: its parent
// carries the wait's cancel (Wake, nudge) and the transport's, and its
// deadline is read from the clock by Err and handed out by Deadline,
// instead of a timer that context.WithTimeout starts for every wait. That
// timer's expiry runs a goroutine of its own, and a Recv wait that ends at
// its timeout (a board's receive loop waits until its next tick, tens of
// microseconds while messages move) is most waits: the goroutine and the
// hand-off back to a receive loop locked to its OS thread cost two futex
// calls and two context switches per wait (a third of a steered queue
// pair's context switches). The drivers' waits look at ctx.Err between
// looks at the rings and pass ctx.Deadline to the eventfd they sleep on;
// a wait that needs Done (a select on it) gets a channel that a timer
// closes at the deadline, made the first time Done is called, so the
// context keeps the context package's contract.
type deadlineCtx struct {
	context.Context
	deadline time.Time
	// err is the first error Err returned: it never changes after.
	err atomic.Pointer[error]

	once  sync.Once
	timed context.Context // made by Done
	stop  context.CancelFunc
}

// withDeadline returns parent with deadline d, and the function that
// releases it (stopping Done's timer, if one was made).
func withDeadline(parent context.Context, d time.Time) (*deadlineCtx, func()) {
	c := &deadlineCtx{Context: parent, deadline: d}
	return c, c.release
}

// Deadline implements context.Context.
func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Err implements context.Context: the parent's error, or
// context.DeadlineExceeded once the deadline passed, whichever came first.
func (c *deadlineCtx) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	err := c.Context.Err()
	if err == nil && !time.Now().Before(c.deadline) {
		err = context.DeadlineExceeded
	}
	if err == nil {
		return nil
	}
	c.err.CompareAndSwap(nil, &err)
	return *c.err.Load()
}

// Done implements context.Context: a channel closed when the parent is
// done or the deadline passes (a timer, started by the first call).
func (c *deadlineCtx) Done() <-chan struct{} {
	c.once.Do(func() { c.timed, c.stop = context.WithDeadline(c.Context, c.deadline) })
	return c.timed.Done()
}

// release stops Done's timer, if Done made one. The wait is over: a Done
// called later (none should be) gets a closed channel, as the parent's
// will be once the wait's cancel runs.
func (c *deadlineCtx) release() {
	c.once.Do(func() {
		c.timed, c.stop = context.WithCancel(c.Context)
	})
	c.stop()
}
