package emulated

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// pacer holds a model's engine to a bandwidth cap: each transfer is due
// when the bytes moved since the engine last went idle, at the capped
// rate, would have taken that long. Both models use it, a CBDMA channel
// per channel and a DSA per device (its engines share one rate).
type pacer struct {
	start, due time.Time
	bytes      int64
}

// next accounts a transfer of n bytes at limit bytes/s starting no
// earlier than now, and returns when it is due.
func (p *pacer) next(n int, limit int64, now time.Time) time.Time {
	if p.due.Before(now) {
		// The engine was idle or behind: no credit for lost time, a new
		// transfer starts now.
		p.start, p.bytes = now, 0
	}
	p.bytes += int64(n)
	p.due = p.start.Add(time.Duration(float64(p.bytes) / float64(limit) * float64(time.Second)))
	return p.due
}

// sleepUntil blocks the calling goroutine until due, or until stop is
// set. Go's timers are coarse (about a millisecond here): it sleeps for
// the bulk in nanosleep, which blocks only this thread and is precise to
// tens of microseconds, then yield-spins to the due time. Sleeping rather
// than spinning leaves the CPU (and its SMT sibling) to the application,
// which is the point of an offload engine.
func sleepUntil(due time.Time, stop *atomic.Bool) {
	if d := time.Until(due); d > 60*time.Microsecond {
		ts := unix.NsecToTimespec(int64(d - 40*time.Microsecond))
		_ = unix.Nanosleep(&ts, nil)
	}
	for time.Now().Before(due) && !stop.Load() {
		runtime.Gosched()
	}
}
