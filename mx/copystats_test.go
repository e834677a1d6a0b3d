package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestCopyStatsCounts: over a lossless copying wire, an eager message
// costs its sender three copies of each payload byte (the message
// buffer, the frame, the transport's) and its receiver one; a large one
// costs the sender two (the pull reply's frame, the transport's) and the
// receiver one. The figures are what a user reads from mxbench.
func TestCopyStatsCounts(t *testing.T) {
	pr := newPair(t, transportFactories[0], fastOptions(), loopback.Faults{})
	ctx := testCtx(t, 20*time.Second)
	for _, tc := range []struct {
		size       int
		send, recv float64
	}{
		{100, 3, 1},
		{20 << 10, 3, 1},
		{300 << 10, 2, 1},
	} {
		sa, sb := pr.a.CopyStats(), pr.b.CopyStats()
		resent := retransmits(pr)
		src := pattern(tc.size, uint64(tc.size))
		dst := make([]byte, tc.size)
		exchange(t, ctx, pr.a, pr.atob, pr.b, 7, ^uint64(0), [][]byte{src}, [][]byte{dst})
		if !bytes.Equal(src, dst) {
			t.Fatalf("%d bytes: arrived changed", tc.size)
		}
		a, b := pr.a.CopyStats().Sub(sa), pr.b.CopyStats().Sub(sb)
		if a.SentBytes != uint64(tc.size) || b.RecvBytes != uint64(tc.size) {
			t.Errorf("%d bytes: counted %d sent, %d received", tc.size, a.SentBytes, b.RecvBytes)
		}
		if retransmits(pr) != resent {
			// A descheduled peer made a timer resend: its copies count
			// too, so the figure is only a floor.
			if a.SendPerByte() < tc.send || b.RecvPerByte() < tc.recv {
				t.Errorf("%d bytes: %.2f bytes copied per byte sent, %.2f per byte received; want at least %.0f, %.0f",
					tc.size, a.SendPerByte(), b.RecvPerByte(), tc.send, tc.recv)
			}
			continue
		}
		if a.SendPerByte() != tc.send || b.RecvPerByte() != tc.recv {
			t.Errorf("%d bytes: %.2f bytes copied per byte sent, %.2f per byte received; want %.0f, %.0f (%+v, %+v)",
				tc.size, a.SendPerByte(), b.RecvPerByte(), tc.send, tc.recv, a, b)
		}
		if a.SendInPlace != 0 {
			t.Errorf("%d bytes: %d sent in place over the loopback wire, which copies", tc.size, a.SendInPlace)
		}
	}
}

// retransmits is every resend and re-request of the pair's endpoints.
func retransmits(pr *pair) uint64 {
	var n uint64
	for _, e := range []*Endpoint{pr.a, pr.b} {
		c := e.Counters()
		n += c.Get(FastRetransmits) + c.Get(TimerRetransmits) + c.Get(TailProbes) + c.Get(AskRetransmits)
	}
	return n
}

// questions counts the questions either side of pr asked about late
// frames (ask.go): each is a frame, and its answer another, that no pull
// counted on.
func questions(pr *pair) uint64 {
	var n uint64
	for _, e := range []*Endpoint{pr.a, pr.b} {
		c := e.Counters()
		n += c.Get(TailAsks) + c.Get(PullAsks)
	}
	return n
}
