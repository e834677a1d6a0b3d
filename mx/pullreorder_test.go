package mx

import (
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestPullReorderCostsLittle pulls 1 MiB messages over the in-process wire
// while it swaps 2% of the frames each way with the next one (replies,
// PULLs, acks, questions alike), in both wait modes. Without loss, a
// reply overtaken by a few others is not lost (lossEvidence), nor a block
// whose PULL was overtaken: the puller asks for at most a few frames again
// per frame the wire moved, where taking each overtaken reply for lost
// once cost the rest of the window (its late original taken for the
// re-request's answer). With loss on top, every byte still arrives.
func TestPullReorderCostsLittle(t *testing.T) {
	n := 24
	if testing.Short() {
		n = 8
	}
	for _, loss := range []float64{0, 0.01} {
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("loss=%g/busypoll=%v", loss, busy), func(t *testing.T) {
				checkLeaks(t)
				net := loopback.NewNetwork(loopback.Options{QueueLen: 8192})
				a, err := net.Attach(0x020000000001)
				if err != nil {
					t.Fatal(err)
				}
				b, err := net.Attach(0x020000000002)
				if err != nil {
					t.Fatal(err)
				}
				opts := fastOptions()
				opts.BusyPoll = busy
				pr := newPairOn(t, &wire2{a: a, b: b, faults: net.SetFaults, close: func() { net.Close() }}, opts)
				msg := pattern(1<<20, 21)
				buf := make([]byte, len(msg))
				cb0, w0 := pr.b.Counters(), net.Stats()
				net.SetFaults(loopback.Faults{Reorder: 0.02, Loss: loss, Seed: 2100})
				for i := range n {
					exchangeWhole(t, pr, msg, buf, uint64(i))
				}
				net.SetFaults(loopback.Faults{})
				cb, w := pr.b.Counters(), net.Stats()
				delta := func(k Counter) uint64 { return cb.Get(k) - cb0.Get(k) }
				moved, lost := w.Reordered-w0.Reordered, w.Dropped-w0.Dropped
				again := delta(PullFramesRerequested)
				t.Logf("%d frames moved, %d lost: %d frames asked for again (fast %d, on an answer %d, timer %d), %d duplicate replies, %d pull asks",
					moved, lost, again, delta(FastRetransmits), delta(AskRetransmits), delta(TimerRetransmits),
					delta(DupPullReplies), delta(PullAsks))
				if moved == 0 {
					t.Fatal("the wire moved no frame: nothing was tested")
				}
				if loss > 0 {
					return // the messages arrived whole: that is the test
				}
				// A question that overtakes a PULL the wire held back is
				// answered before that PULL's replies go out: its block
				// is asked for again (ask.go). That may happen once.
				if most := 2*moved + uint64(opts.PullBlockFrames); again > most {
					t.Errorf("%d frames asked for again for %d the wire moved and none lost: want at most %d (counters %v)",
						again, moved, most, nonZero(cb))
				}
			})
		}
	}
}
