package ioat

import (
	"math"
	"time"
)

// The Adaptive policy's measure and choice. Each queue keeps a moving
// average of the rate at which it completes bytes while it is busy:
// reaping k completions of B bytes at time t, when the queue has been
// busy since s (it went busy then, or was last reaped then with work
// still outstanding), gives the sample B/(t-s). The rate so measures the
// queue as the engine sees it, per-request costs and any sharing with
// other traffic included, and follows it when that changes. A request
// then goes where its expected finish, (outstanding + its bytes)/rate, is
// earliest; a large one is cut so that all the queues that take a piece
// are expected to finish together (water-filling over the rates).

// epoch is the origin of the engine's monotonic clock.
var epoch = time.Now()

// monoNow is nanoseconds since epoch, on the monotonic clock.
func monoNow() int64 { return int64(time.Since(epoch)) }

// rateWeight is the weight of a new sample in the moving average: a
// quarter, so one odd sample (a transfer the host's scheduler held up)
// moves the estimate by a quarter of its error and a lasting change takes
// over within about ten requests.
const rateWeight = 1.0 / 4

// adaptiveMinPiece is the smallest piece Adaptive cuts a request into: a
// smaller one costs a descriptor and a completion for little work.
const adaptiveMinPiece = 64 << 10

// markBusy notes that the idle queue gets work now. Called under mu,
// after a reap, before the request's bytes are added to load.
func (ec *echan) markBusy() {
	if ec.load.Load() == 0 {
		ec.busyFrom = monoNow()
	}
}

// observed folds a reap into the queue's rate: bytes completed in it
// (possibly 0), now that the queue holds outstanding bytes (after the
// reap). Called under mu.
//
// A completion is seen only when someone polls the queue, which may be
// long after it happened (the waiter may be waiting on another queue's
// request). While work remains after the reap, the queue was busy from
// busyFrom to now, and the sample is exact. When the reap empties it,
// the queue went idle somewhere between the last poll that found work
// left (lastMiss) and now: if that window is short beside the busy time,
// the sample counts; otherwise it is only a lower bound on the rate and
// may raise the estimate, never lower it, so a fast queue that waits to
// be polled is not taken for a slow one.
func (ec *echan) observed(bytes, outstanding int64) {
	now := monoNow()
	if bytes == 0 {
		if outstanding > 0 {
			ec.lastMiss = now
		}
		return
	}
	dt := now - ec.busyFrom
	exact := outstanding > 0 || ec.lastMiss >= ec.busyFrom && (now-ec.lastMiss)*4 <= dt
	ec.busyFrom = now
	if dt <= 0 {
		return
	}
	s := float64(bytes) / float64(dt)
	r := math.Float64frombits(ec.rate.Load())
	switch {
	case r == 0 || !exact && s > r:
		r = max(r, s)
	case exact:
		r += (s - r) * rateWeight
	default:
		return
	}
	ec.rate.Store(math.Float64bits(r))
	ec.sampled.Store(now)
}

// refresh reaps every queue nobody else is reaping, so that the
// scheduler sees current loads and the rates their completions give.
func (e *Engine) refresh() {
	for _, ec := range e.chans {
		if ec.mu.TryLock() {
			ec.reapLocked()
			ec.mu.Unlock()
		}
	}
}

// rateBytes is the queue's measured rate in bytes per second (0 until
// measured), for Stats.
func (ec *echan) rateBytes() float64 { return math.Float64frombits(ec.rate.Load()) * 1e9 }

// exploreAfter is how long a queue may go without a sample before the
// scheduler counts it as unmeasured again, so that a queue once measured
// slow (or held up by the host while measured) is tried again now and
// then rather than left idle for good.
const exploreAfter = 50 * time.Millisecond

// rates fills r with each queue's rate for scheduling. A queue not yet
// measured counts as fast as the fastest measured one (all alike when
// none is). With explore, for placing a whole request, it counts twice
// as fast, and so does one idle without a sample for exploreAfter: it
// then gets the next request and is measured, at the cost of one request
// per queue and period. A striped request does not explore: its piece on
// a slow queue would hold the whole request up.
func (e *Engine) rates(r []float64, explore bool) {
	now := monoNow()
	best := 0.0
	for i, ec := range e.chans {
		r[i] = math.Float64frombits(ec.rate.Load())
		best = max(best, r[i])
		if explore && ec.load.Load() == 0 && now-ec.sampled.Load() > int64(exploreAfter) {
			r[i] = 0
		}
	}
	if best == 0 {
		best = 1
	}
	boost := 1.0
	if explore {
		boost = 2
	}
	for i := range r {
		if r[i] == 0 {
			r[i] = boost * best
		}
	}
}

// earliest is the queue where a request of n bytes is expected to finish
// first, by the rates of rates.
func (e *Engine) earliest(n int) *echan {
	// The rates of up to 16 queues stay on the stack: no allocation
	// per request.
	var buf [16]float64
	var r []float64
	if len(e.chans) > len(buf) {
		r = make([]float64, len(e.chans))
	} else {
		r = buf[:len(e.chans)]
	}
	e.rates(r, true)
	var best *echan
	bt := math.Inf(1)
	for i, ec := range e.chans {
		if t := float64(ec.load.Load()+int64(n)) / r[i]; t < bt {
			best, bt = ec, t
		}
	}
	return best
}

// shares cuts n bytes among the queues so that each taking a piece is
// expected to finish at the same time T: queue i takes T*rate - its
// outstanding bytes, and a queue whose piece would be under
// adaptiveMinPiece (or nothing: it is busy past T) takes none. Pieces
// are multiples of 64 bytes but the last; out[i] is queue i's, 0 for
// none.
func (e *Engine) shares(n int, out []int) {
	nq := len(e.chans)
	r := make([]float64, nq)
	e.rates(r, false)
	in := make([]bool, nq)
	for i := range in {
		in[i] = true
	}
	// Water-filling: solve for T over the queues taking part, drop the
	// one with the smallest piece if that is under the minimum, and
	// solve again; at most once per queue.
	var T float64
	minPiece := float64(min(adaptiveMinPiece, n))
	for k := nq; ; k-- {
		sumR, sumL := 0.0, 0.0
		for i, ec := range e.chans {
			if in[i] {
				sumR += r[i]
				sumL += float64(ec.load.Load())
			}
		}
		T = (float64(n) + sumL) / sumR
		worst, wx := -1, math.Inf(1)
		for i, ec := range e.chans {
			if x := T*r[i] - float64(ec.load.Load()); in[i] && x < wx {
				worst, wx = i, x
			}
		}
		if k == 1 || wx >= minPiece {
			break
		}
		in[worst] = false
	}
	left, last := n, -1
	for i, ec := range e.chans {
		out[i] = 0
		if !in[i] || left == 0 {
			continue
		}
		x := (int(T*r[i]-float64(ec.load.Load())) + 63) &^ 63
		x = min(max(x, 64), left)
		out[i], left, last = x, left-x, i
	}
	out[last] += left // rounding: the remainder to the last queue taking part
}
