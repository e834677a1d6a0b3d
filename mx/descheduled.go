package mx

import (
	"sync/atomic"
	"time"
)

// How long the machine keeps a runnable goroutine off its CPU.
//
// A retransmission timeout built from the measured round trip alone
// (srtt, rttvar: rtt.go) fires whenever the peer is late for a reason
// the round trips did not show, and on a loaded machine the usual one is
// the scheduler: a peer runnable but descheduled for a time slice or
// several answers milliseconds late, on a wire that lost nothing, while
// its last few round trips, taken when it ran, were microseconds. The
// tail-loss probe then resends a frame the peer has, the RTO resends
// whole messages, and a puller asks again for replies on their way. The
// EWMA of RFC 6298 forgets a slow round trip within a few samples, and
// Karn's rule keeps the slowest ones (those the probe overtook) out of it.
//
// A waiter that polls sees the same scheduler from its own side: it reads
// the clock every 16 looks at its sources (pollWait), a microsecond or two
// apart while it runs, so a longer gap between two readings is a time it
// was runnable but not running (or handling a large batch, which costs the
// same at the peer). The peer, on the same machine or on one as loaded,
// waits for a CPU as long. So the board keeps the longest such gap of the
// last one to two seconds (two windows of schedWindow), and every
// retransmission timeout allows twice that for the peer to be scheduled:
// it is the granularity term of the RTO (rtt.timeout's gran), and a floor
// of the probe timeout past srtt (partner.pto). On an idle machine the gaps
// stay under schedFloor, nothing is recorded, and the timeouts are the
// round trip's as before; under load they grow to the scheduler's slices
// within one wait, and shrink again two windows after the load is gone.
// Timers the Go runtime fires (a receive loop's Recv timeout, the fine
// timer's timerfd read through Go's poller) are not used: they are late by
// the runtime's own timer granularity, a millisecond on an idle machine,
// which says nothing about the peer.

// schedWindow is how long an observed gap counts: at least one window, at
// most two.
const schedWindow = time.Second

// schedFloor is the shortest gap recorded: shorter ones are polling as
// usual (a look that handled a batch, a timer run) and cost no store.
const schedFloor = 20 * time.Microsecond

// schedDelay is a board's estimate of how long the machine deschedules a
// runnable goroutine: the longest gap of the current window and of the
// previous one. Pollers record without the board's lock (observe); the
// window moves under it (rotate).
type schedDelay struct {
	cur, prev atomic.Int64 // ns
	start     int64        // when the current window began (board clock; b.mu)
}

// observe records a gap of d ns during which a polling goroutine did not
// run.
func (s *schedDelay) observe(d int64) {
	if d < int64(schedFloor) {
		return
	}
	for {
		c := s.cur.Load()
		if d <= c || s.cur.CompareAndSwap(c, d) {
			return
		}
	}
}

// rotate moves the window when schedWindow has passed since it began
// (b.mu held; called on every timer run).
func (s *schedDelay) rotate(now int64) {
	if now-s.start >= int64(schedWindow) {
		s.prev.Store(s.cur.Swap(0))
		s.start = now
	}
}

// slack is how long a retransmission timeout waits, beyond the round
// trip, for a peer the machine may have descheduled: twice the longest
// recent gap (ns; 0 on an idle machine).
func (s *schedDelay) slack() int64 {
	return 2 * max(s.cur.Load(), s.prev.Load())
}
