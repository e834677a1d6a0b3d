package mx

import (
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestPullReorderCostsLittle pulls 1 MiB messages over the in-process wire
// while it swaps 2% of the frames each way with the next one (replies,
// PULLs, acks, questions alike), in both wait modes. Without loss, a
// reply overtaken by a few others is not lost (lossEvidence), nor a block
// whose PULL was overtaken: the puller asks for at most a few frames again
// per frame the wire moved, where taking each overtaken reply for lost
// once cost the rest of the window (its late original taken for the
// re-request's answer). With loss on top, every byte still arrives, and
// the frames asked for again stay within the same bound plus two per loss.
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
				t.Logf("%d frames moved, %d lost: %d frames asked for again; re-requests fast %d, timer %d; resent on an answer (pull frames and stream) %d; %d duplicate replies, %d pull asks",
					moved, lost, again, delta(FastRetransmits), delta(TimerRetransmits), delta(AskRetransmits),
					delta(DupPullReplies), delta(PullAsks))
				if moved == 0 {
					t.Fatal("the wire moved no frame: nothing was tested")
				}
				// A question that overtakes a PULL the wire held back is
				// answered before that PULL's replies go out: its block
				// is asked for again (ask.go). That may happen once. A
				// lost frame costs itself again, and at most one more
				// (its re-request lost too, or a PULL lost).
				if most := 2*moved + 2*lost + uint64(opts.PullBlockFrames); again > most {
					t.Errorf("%d frames asked for again for %d the wire moved and %d it lost: want at most %d (counters %v)",
						again, moved, lost, most, nonZero(cb))
				}
			})
		}
	}
}

// TestPullTailLossAfterReRequest loses frame 70 of every 1 MiB pull and
// the second-to-last frame: the re-request for 70 goes out after the last
// block's PULL, and the last frame, the last one that block's PULL asked
// for, still shows the tail's hole lost the moment it comes (early
// retransmit). Its peer answers no question (an Open-MX peer) and RTOMin
// is far above the message's time, so a hole no reply revealed would wait
// for the pull timer: none may, and every byte arrives.
func TestPullTailLossAfterReRequest(t *testing.T) {
	for _, busy := range []bool{false, true} {
		t.Run(fmt.Sprintf("busypoll=%v", busy), func(t *testing.T) {
			pr, d, opts := dropRepliesPair(t, busy, map[uint8]int{})
			msg := pattern(1<<20, 5)
			buf := make([]byte, len(msg))
			exchangeWhole(t, pr, msg, buf, 0) // the pull round trip is measured
			noAsks(pr.b)
			pr.b.b.mu.Lock()
			nf := wire.PullFrames{Total: len(msg), L: pr.b.plist[0].replyLen}.Count()
			pr.b.b.mu.Unlock()
			if nf < 2*opts.PullBlockFrames+2 || nf > 256 {
				t.Fatalf("%d frames: the test wants frame 70 before the last block, indices in a byte", nf)
			}
			d.mu.Lock()
			d.drops[70], d.drops[uint8(nf-2)] = 1, 1
			d.mu.Unlock()
			const n = 4
			delta := exchangeCounted(t, pr, msg, buf, n)
			t.Logf("%d messages of %d frames: fast %d, timer %d, pull timeouts %d, pull asks %d, frames again %d",
				n, nf, delta(FastRetransmits), delta(TimerRetransmits), delta(PullTimeouts), delta(PullAsks),
				delta(PullFramesRerequested))
			if got := delta(TimerRetransmits) + delta(PullTimeouts) + delta(PullAsks); got != 0 {
				t.Errorf("%d timer re-requests, pull timeouts and questions: want both holes revealed by a later reply (counters %v)",
					got, nonZero(pr.b.Counters()))
			}
			if got, want := delta(FastRetransmits), uint64(2*n); got != want {
				t.Errorf("%d re-requests on evidence, want %d (2 per message)", got, want)
			}
		})
	}
}
