package mx

import "time"

// Round-trip estimation (RFC 6298) per partner. The first ack of a request
// sent once (Karn's rule: never a resent one, whose ack is ambiguous) and
// then one such ack in rttEvery (sampleRTT), and every first reply to a
// pull block requested once, gives a sample; the
// retransmission timeout is srtt + max(granularity, 4*rttvar), clamped to
// BoardOptions.RTOMin..RTOMax. Before the first sample a partner uses the
// configured ResendDelay (sends) or PullTimeout (pulls), today's fixed
// timers, so a peer that never gives a clean sample is treated exactly as
// before. Each timer resend of the same request doubles its timeout
// (bounded by RTOMax); the unreachable verdict is taken on the time since
// the first send, not on the number of resends, so backoff never changes
// how long an unreachable partner takes to be declared so.

// rttMaxSample bounds one sample (and so srtt and rttvar), so the
// arithmetic below cannot overflow whatever the clock says: about 18 min.
const rttMaxSample = int64(1) << 40

// rtt is one partner's estimator; all values are nanoseconds.
type rtt struct {
	srtt, rttvar int64
	// lo is the lower envelope of the samples (noteLo): the round trip
	// of a peer that ran when its message came, which a question to a
	// late peer (ask.go) waits for rather than srtt + 4·rttvar, which one
	// descheduled sample raises for a hundred more.
	lo int64
	ok bool // at least one sample
}

// sample folds in one measured round trip. Samples that are not positive
// (a clock that went backwards, an ack computed against the wrong send)
// count as 1 ns; samples above rttMaxSample count as that.
func (e *rtt) sample(r int64) {
	r = max(1, min(r, rttMaxSample))
	if !e.ok {
		e.srtt, e.rttvar, e.lo, e.ok = r, r/2, max(r, rttLoMin), true
		return
	}
	e.noteLo(r)
	d := e.srtt - r
	if d < 0 {
		d = -d
	}
	e.rttvar = (3*e.rttvar + d) / 4
	e.srtt = (7*e.srtt + r) / 8
}

// timeout returns the retransmission timeout after backoff doublings:
// fallback before any sample, else srtt + max(gran, 4*rttvar); either way
// doubled backoff times and clamped to [lo, hi] (hi raised to fallback
// before any sample). It is always at least
// max(lo, 1) ns.
func (e *rtt) timeout(fallback, gran, lo, hi int64, backoff int) int64 {
	lo = max(lo, 1)
	hi = max(hi, lo)
	t := fallback
	if e.ok {
		t = e.srtt + max(gran, 4*e.rttvar)
	} else {
		hi = max(hi, fallback) // the configured timers apply as they are
	}
	t = max(lo, min(t, hi))
	for i := 0; i < backoff && t < hi; i++ {
		t *= 2
	}
	return max(lo, min(t, hi))
}

// sampleSince folds in the round trip of a request sent at sent and
// acked by a frame read at now, unless the send is not before the
// reading: a batch's reading is the receive loop's (useReading), and a
// sender stamps its request after taking the board, so a request sent
// and acked within one batch may carry a stamp past the reading that
// acks it (15 of 11,552 samples under load were not positive). Such a
// sample is no round trip, and as 1 ns it was the envelope at once.
func (e *rtt) sampleSince(now, sent int64) {
	if now > sent {
		e.sample(now - sent)
	}
}

// rttLoMin is the least the lower envelope (rtt.lo) can be: a clock
// reading that came out short (a sample of some nanoseconds) must not
// make a question wait nine of them. A path faster than the floor only
// waits a little longer for its first question (9 µs at most, the cap,
// askWait), never asks sooner. The floor is a constant, not a share of
// srtt: srtt/8 would hold the estimate's outlier the envelope is there
// to forget (after an 18 ms first sample, above 1 ms for a dozen
// samples).
const rttLoMin = int64(time.Microsecond)

// noteLo folds round trip r into the lower envelope: a shorter one
// lowers it at once, a longer one raises it by a quarter of the
// difference, at most a quarter of the envelope. A descheduled peer's
// sample of milliseconds so moves it by a quarter, not by thousands,
// while a path that became slower for good lifts it within a few dozen
// samples (from 1 µs towards 50 µs: 40 µs in 18).
func (e *rtt) noteLo(r int64) {
	if !e.ok {
		return
	}
	if r <= e.lo {
		e.lo = max(r, rttLoMin)
		return
	}
	e.lo += max(min(r-e.lo, e.lo)/4, 1)
}
