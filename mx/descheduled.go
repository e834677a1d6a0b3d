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
// the clock every 16 looks at its sources (pollWait; a busy-polling waiter
// every 256 where a reading costs a system call), a microsecond or two
// apart while it runs, so a longer gap between two readings is a time it
// was runnable but not running (or handling a large batch, which costs the
// same at the peer). A waiter that sleeps times its wake-up: from the
// completion that woke it (Endpoint.complete notes the time) to its
// running again (Request.Wait). The peer, on the same machine or on one as
// loaded, waits for a CPU as long. The machine is the process's, not a
// board's: every board of the process records into one estimate
// (descheduling), so a board opened on a loaded machine allows for it
// from its first message. It keeps the longest gap of the last one to two
// windows of schedWindow, and every retransmission timeout allows three
// times that for the peer to be scheduled: it is the granularity term of
// the RTO (rtt.timeout's gran), a floor of the probe timeout past srtt
// (partner.pto), and added to the rings' floor (partner.rtoBounds). On an idle machine the gaps stay under schedFloor,
// nothing is recorded, and the timeouts are the round trip's; under load
// they grow to the scheduler's slices within one wait, and shrink again
// two windows after the load is gone. A machine loaded far past its CPUs
// can still keep a peer off its CPU longer than any recent gap said, and
// then recovery acts on a wire that lost nothing: rarely, and at the
// cost of a frame or a message.
// Timers the Go runtime fires (a receive loop's Recv timeout, the fine
// timer's timerfd read through Go's poller) are not used: they are late by
// the runtime's own timer granularity, a millisecond on an idle machine,
// which says nothing about the peer.

// schedWindow is how long an observed gap counts: at least one window, at
// most two.
const schedWindow = 2 * time.Second

// descheduling is the process's estimate: boards share one machine.
var descheduling schedDelay

// schedFloor is the shortest gap recorded: shorter ones are polling as
// usual (a look that handled a batch, a timer run) and cost no store.
const schedFloor = 20 * time.Microsecond

// schedDelay is an estimate of how long the machine deschedules a
// runnable goroutine: the longest gap of the current window and of the
// previous one; a window without a rotation is forgotten with the one
// before it. A partner keeps one of how late its pulls' owner is
// (partner.plate: moved and recorded by pull.reply, moved by askDue).
// Pollers record (observe) and timer runs move the window (rotate)
// without a lock.
type schedDelay struct {
	cur, prev atomic.Int64 // ns
	start     atomic.Int64 // when the current window began (time.Now, ns since the Unix epoch)
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
// (called on every timer run of every board), and forgets both windows
// when two have; at most one of the boards that come at once moves it.
func (s *schedDelay) rotate() {
	st := s.start.Load()
	now := time.Now().UnixNano()
	if now-st >= int64(schedWindow) && s.start.CompareAndSwap(st, now) {
		c := s.cur.Swap(0)
		if now-st >= 2*int64(schedWindow) {
			c = 0 // no rotation for a window: nothing it held is recent
		}
		s.prev.Store(c)
	}
}

// slack is how long a retransmission timeout waits, beyond the round
// trip, for a peer the machine may have descheduled: three times the
// longest recent gap (ns; 0 on an idle machine). The peer's gaps are not
// this process's: on a loaded machine the longest of a second differs
// from one second to the next by a factor of two or so.
func (s *schedDelay) slack() int64 {
	return 3 * max(s.cur.Load(), s.prev.Load())
}
