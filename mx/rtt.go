package mx

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
		e.srtt, e.rttvar, e.lo, e.ok = r, r/2, r, true
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
		e.lo = max(r, 1)
		return
	}
	e.lo += max(min(r-e.lo, e.lo)/4, 1)
}
