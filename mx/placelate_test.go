package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// TestPlacedPullTimerWaitsForQueuedReplies: a placed pull whose replies
// all came, but wait unread in the transport because the goroutine that
// owns the receive source was held back past the pull's timeout, asks for
// nothing again. The timer that finds the pull silent runs while another
// goroutine owns the source (here the test, which holds it as a
// descheduled owner would): it puts the re-request off, and when the
// source is drained the replies answer it. The pull then completes with
// every byte in place, no frame asked for twice and none received twice.
// The pull is made overdue by dating its requests and progress two
// minute-long PullTimeouts back, not by a short timeout: the drain asks
// for the next window, and a timeout that a loaded machine outlasts while
// the drain handles the first made that window's re-request due in the
// same run (as it should be), its lane's postings taken back and its
// replies dropped. The peer here answers no questions, as an Open-MX peer: a gomx peer's
// pull asks instead (TestPlacedPullAsksLatePeer). Both wait modes.
func TestPlacedPullTimerWaitsForQueuedReplies(t *testing.T) {
	bothWaitModes(t, func(t *testing.T, busy bool) {
		checkLeaks(t)
		o := zcOptions("on")
		o.BusyPoll = busy
		// No round trip is measured before the stall, so PullTimeout
		// applies.
		const long = time.Minute
		o.PullTimeout = long
		// The RNDV waits at b unexpected; a then stops, and the
		// pull starts as b matches it: a holds the PULLs unread until
		// b has sent them all and stopped too; then a answers them,
		// and the replies land on b's lane while nothing on b reads.
		p := startPlacedPull(t, o, 91)
		pr := p.pr
		noAsks(pr.b) // the timer re-requests only toward a peer that is not asked
		freeze(pr.ba)
		r, err := pr.b.IRecv([][]byte{p.dst}, 5, ^uint64(0), nil)
		if err != nil {
			thaw(pr.ba)
			t.Fatal(err)
		}
		blocks := uint64(pr.bb.opts.PullBlocks)
		waitCond(t, "b asked for the first window", func() bool {
			return pr.b.Counters().Get(SendPull) >= blocks
		})
		freeze(pr.bb)
		// From here on every timer is one no loaded machine reaches
		// (a round trip measured from here on is bounded by RTOMin and
		// RTOMax), and the pull's liveness budget is far past how far
		// back the test dates it.
		bo := &pr.bb.opts
		bo.RTOMin, bo.RTOMax, bo.ResendMax = long, long, int(10*long/bo.ResendDelay)
		frozen := true
		defer func() {
			if frozen {
				thaw(pr.bb)
			}
		}()
		rx := p.rxFrames(t)
		thaw(pr.ba)
		window := blocks * uint64(pr.bb.opts.PullBlockFrames)
		waitCond(t, "a sent the first window of replies", func() bool {
			return pr.a.Counters().Get(SendPullReply) >= window
		})
		// The model's DMA engines carry them to b's rings after a
		// sent them: the timers below must find them there.
		waitCond(t, "b's NIC received the first window of replies", func() bool {
			return p.rxFrames(t)-rx >= window
		})
		// The pull has been silent for twice its timeout, as if b
		// had been held back that long.
		for _, pl := range pr.b.pulls {
			if pl == nil {
				continue
			}
			pl.lastProgress -= int64(2 * long)
			for j := range pl.blocks {
				pl.blocks[j].lastReq -= int64(2 * long)
			}
		}
		// b's timers find the pull silent while another goroutine
		// owns the source: the re-request waits.
		pr.bb.runTimersLocked()
		if n := pr.bb.cnt[VerdictsDeferred]; n == 0 {
			t.Errorf("the overdue pull's timer did not wait for the source to be drained")
		}
		if n := pr.b.cnt[PullFramesRerequested]; n != 0 {
			t.Errorf("%d frames asked for again while their replies waited in the ring: %v / %v", n, nonZero(pr.b.cnt), nonZero(pr.bb.cnt))
		}
		// The owner's own timer run drains the source first: the
		// replies answer the pull.
		pr.bb.rxOwned = pr.bb.src
		pr.bb.runTimersLocked()
		pr.bb.rxOwned = nil
		if n := pr.bb.cnt[VerdictDrainFrames]; n < window {
			t.Errorf("the owner's timer run drained %d frames before judging the pull, want the %d replies", n, window)
		}
		// The rest of the pull runs on the minute timers: nothing is
		// lost, so nothing may be asked again.
		frozen = false
		thaw(pr.bb)
		p.check(t, r)
		for _, n := range p.inner.(transport.Stats).Counters() {
			if n.Name == "nic_rx_no_descriptor" && n.Value != 0 {
				t.Errorf("the receiving NIC dropped %d frames", n.Value)
			}
		}
	})
}

// rxFrames is the good frames b's NIC has received (nic_rx_frames).
func (p *placedPull) rxFrames(t *testing.T) uint64 {
	t.Helper()
	for _, c := range p.inner.(transport.Stats).Counters() {
		if c.Name == "nic_rx_frames" {
			return c.Value
		}
	}
	t.Fatal("b's transport counts no nic_rx_frames")
	return 0
}
