package main

import (
	"math"
	"math/bits"
	"testing"
	"time"
)

// TestMedianInterval checks medianInterval's interval and coverage against
// an enumeration of every way n samples can fall on either side of the
// median (each side with probability 1/2, whatever the distribution): the
// interval from the k-th smallest to the k-th largest covers the median
// when more than k and fewer than n-k samples lie below it.
func TestMedianInterval(t *testing.T) {
	for n := 1; n <= 18; n++ {
		k, cover := medianInterval(n)
		covers := func(k int) float64 {
			in := 0
			for m := uint32(0); m < 1<<n; m++ {
				if below := bits.OnesCount32(m); below > k && below < n-k {
					in++
				}
			}
			return float64(in) / float64(uint32(1)<<n)
		}
		if got := covers(k); math.Abs(got-cover) > 1e-9 {
			t.Errorf("n %d: k %d, coverage %.4f, enumeration says %.4f", n, k, cover, got)
		}
		if 2*k > n-1 {
			t.Errorf("n %d: k %d leaves no interval", n, k)
		}
		// The narrowest interval that still covers 95 %: one step in
		// covers less (or there is none), unless even k = 0 does not.
		switch {
		case k == 0 && covers(0) >= 0.95 && 2 <= n-1 && covers(1) >= 0.95:
			t.Errorf("n %d: k 0, but k 1 covers %.4f", n, covers(1))
		case k > 0 && cover < 0.95:
			t.Errorf("n %d: k %d covers %.4f, below 95 %%", n, k, cover)
		case k > 0 && 2*(k+1) <= n-1 && covers(k+1) >= 0.95:
			t.Errorf("n %d: k %d, but k %d covers %.4f", n, k, k+1, covers(k+1))
		}
	}
}

// TestPairUp: the differences are taken pair by pair (the same index), in
// one-way microseconds, and their median and interval come from the
// differences, not from the two sides' medians.
func TestPairUp(t *testing.T) {
	us := func(v ...float64) []time.Duration { // one-way µs to round trips
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(2*x*1000))
		}
		return d
	}
	// The raw exchange moves by a microsecond between pairs; mx is 0.5 µs
	// above it in every pair but the last, which straddles a change.
	mx := us(3.5, 4.5, 3.5, 4.5, 3.5, 4.5, 3.5, 4.5, 3.5, 2.0)
	raw := us(3.0, 4.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0)
	p := pairUp(mx, raw)
	const eps = 1e-9
	switch {
	case p.Trials != 10:
		t.Errorf("trials %d, want 10", p.Trials)
	case math.Abs(p.DiffP50US-0.5) > eps:
		t.Errorf("median difference %.3f, want 0.5", p.DiffP50US)
	case math.Abs(p.DiffLoUS-0.5) > eps || math.Abs(p.DiffHiUS-0.5) > eps:
		t.Errorf("interval %.3f to %.3f, want 0.5 to 0.5 (the outlier is the smallest)", p.DiffLoUS, p.DiffHiUS)
	case math.Abs(p.MxP50US-3.5) > eps || math.Abs(p.RawP50US-4.0) > eps:
		// Unpaired, the two sides' medians would put mx below raw.
		t.Errorf("medians mx %.3f raw %.3f, want 3.5 and 4.0", p.MxP50US, p.RawP50US)
	}
	if pairUp(nil, raw) != nil {
		t.Error("no pairs: want nil")
	}
}
