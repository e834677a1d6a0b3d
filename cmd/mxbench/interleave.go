package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// --interleave: mx against the raw exchange, trial by trial.
//
// On a shared virtual machine the host moves between states whose
// one-way times differ by a microsecond or more, within seconds. A run
// that measures the raw exchange first and mx after it compares two
// states as often as two paths. So --interleave alternates short trials
// of each, raw and mx, pairs them in time (raw then mx in even pairs, mx
// then raw in odd ones, so a drift falls on both sides alike), and takes
// the median of the pairs' differences: a pair's two trials run within
// some tens of milliseconds of each other, in one state of the host
// nearly always, and the median sets aside the few pairs that straddle a
// change. Each trial makes its own --warmup round trips first, after a
// pause (interleavePause) in which the other side's boards go quiet.

// interleavePause is the pause before each trial of --interleave. An mx
// board keeps ticking every tickBusy (62.5 µs) for 100 ms after its last
// timed work (mx's busyLinger), and those wake-ups would fall on the raw
// trial that followed; both kinds of trial start after the same pause, so
// neither starts from a CPU the other left warmer.
const interleavePause = 150 * time.Millisecond

// paired is the comparison of --interleave: per-trial medians of mx and
// of the raw exchange, and their differences pair by pair.
type paired struct {
	// Trials is the number of pairs: trials of each side.
	Trials int `json:"trials"`
	// MxP50US and RawP50US are the medians, over each side's trials, of
	// each trial's median one-way time.
	MxP50US  float64 `json:"mx_p50_us"`
	RawP50US float64 `json:"raw_p50_us"`
	// DiffP50US is the median over the pairs of mx's trial median minus
	// the raw trial median of the same pair.
	DiffP50US float64 `json:"diff_p50_us"`
	// DiffLoUS and DiffHiUS bound DiffP50US: a distribution-free
	// confidence interval of the median difference (order statistics
	// of the pairs' differences), of coverage Confidence.
	DiffLoUS   float64 `json:"diff_lo_us"`
	DiffHiUS   float64 `json:"diff_hi_us"`
	Confidence float64 `json:"confidence"`
}

// measureInterleaved runs one pingpong size as --interleave asks: f.trials
// pairs of trials of iters round trips, the raw exchange's on raw and
// mx's on sa and sb, alternated as described above. The row's mx figures
// and its raw ones are over the round trips of all their trials, as
// --trials makes them; Paired compares the trials pair by pair.
func measureInterleaved(ctx context.Context, f *benchFlags, sa, sb *side, raw *rawPair, size, iters int) (result, error) {
	res := result{Size: size, Iterations: iters, Trials: f.trials}
	var mxRTT, rawRTT []time.Duration
	var rawAll rawResult
	mxMed := make([]time.Duration, 0, f.trials)
	rawMed := make([]time.Duration, 0, f.trials)
	bestMx := -1.0
	for t := range f.trials {
		for k := range 2 {
			time.Sleep(interleavePause)
			if err := ctx.Err(); err != nil {
				return res, err
			}
			if (k == 0) == (t%2 == 0) {
				r, err := raw.pingpong(size, iters, f.warmup, f.unidir)
				rawAll.Errors += r.Errors
				if err != nil {
					return res, fmt.Errorf("raw trial %d: %w", t+1, err)
				}
				if t == 0 || r.OneWay < rawAll.OneWay {
					rawAll.OneWay, rawAll.MBPerS = r.OneWay, r.MBPerS
				}
				rawMed = append(rawMed, median(r.rtts))
				rawRTT = append(rawRTT, r.rtts...)
				continue
			}
			m, err := measureLocal(ctx, "pingpong", f, sa, sb, size, iters, f.warmup, 1)
			res.Errors += m.Errors
			if err != nil {
				return res, fmt.Errorf("mx trial %d: %w", t+1, err)
			}
			if bestMx < 0 || m.LatencyUS < bestMx {
				bestMx, res.LatencyUS, res.MBPerS = m.LatencyUS, m.LatencyUS, m.MBPerS
			}
			mxMed = append(mxMed, median(m.rtts))
			mxRTT = append(mxRTT, m.rtts...)
		}
	}
	res.setQuantiles(mxRTT)
	rawAll.rtts = rawRTT
	rawAll.setQuantiles()
	res.Raw = toBaseline("xdp", rawAll, "pingpong")
	res.Paired = pairUp(mxMed, rawMed)
	return res, nil
}

// median returns the median of d (sorted here); 0 for none.
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// pairUp compares the per-trial median round trips of mx and of the raw
// exchange, pair by pair (the same index), in one-way microseconds.
func pairUp(mx, raw []time.Duration) *paired {
	n := min(len(mx), len(raw))
	if n == 0 {
		return nil
	}
	us := func(d time.Duration) float64 { return d.Seconds() * 1e6 / 2 }
	diffs := make([]float64, n)
	for i := range n {
		diffs[i] = us(mx[i]) - us(raw[i])
	}
	slices.Sort(diffs)
	k, cover := medianInterval(n)
	return &paired{
		Trials:    n,
		MxP50US:   us(median(mx[:n])),
		RawP50US:  us(median(raw[:n])),
		DiffP50US: medianOf(diffs),
		DiffLoUS:  diffs[k], DiffHiUS: diffs[n-1-k],
		Confidence: cover,
	}
}

// medianOf returns the median of sorted x: the mean of the middle two
// when there is an even number.
func medianOf(x []float64) float64 {
	n := len(x)
	if n%2 == 1 {
		return x[n/2]
	}
	return (x[n/2-1] + x[n/2]) / 2
}

// medianInterval returns the distribution-free confidence interval of a
// median from n samples: the k-th smallest and k-th largest of them
// (0-based k) bound it with probability cover = 1 - 2 P(B <= k), B
// binomial(n, 1/2), whatever the samples' distribution. It picks the
// narrowest interval that still covers 95 %, or, for fewer than six
// samples, where none does, the smallest and largest.
func medianInterval(n int) (k int, cover float64) {
	p := math.Pow(0.5, float64(n))
	cover = 1 - 2*p // k = 0: P(B = 0) on each side
	cdf := 0.0      // P(B <= j)
	for j := 0; 2*j <= n-1; j++ {
		cdf += binom(n, j) * p
		if c := 1 - 2*cdf; c >= 0.95 {
			k, cover = j, c
			continue
		}
		break
	}
	return k, cover
}

// binom is n choose k.
func binom(n, k int) float64 {
	r := 1.0
	for i := 1; i <= k; i++ {
		r = r * float64(n-k+i) / float64(i)
	}
	return r
}
