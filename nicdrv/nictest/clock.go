package nictest

import (
	"sync"
	"time"
)

// ManualClock is a clock for the emulated NICs (emulated.Clock) that moves
// only when the test says so: a model's interrupt throttle then counts in
// time the test controls, so its effect shows in counts, however loaded
// the machine is. It is safe for concurrent use.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

// NewManualClock returns a ManualClock that reads now until advanced.
func NewManualClock(now time.Time) *ManualClock { return &ManualClock{now: now} }

// Now is the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f once the clock has been advanced by d, unless the
// returned stop function is called first (it reports whether it stopped
// the call).
func (c *ManualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &manualTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, tm)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := tm.stopped
		tm.stopped = true
		return !was
	}
}

// Pending counts the timers not yet run or stopped.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, tm := range c.timers {
		if !tm.stopped {
			n++
		}
	}
	return n
}

// Advance moves the clock by d and runs the timers that came due, outside
// the clock's lock (they take the model's).
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []func()
	keep := c.timers[:0]
	for _, tm := range c.timers {
		switch {
		case tm.stopped:
		case !tm.at.After(c.now):
			tm.stopped = true
			due = append(due, tm.f)
		default:
			keep = append(keep, tm)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}
