package mx

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// bothWaitModes runs f as a subtest with busy-polling boards and as one
// with blocking boards.
func bothWaitModes(t *testing.T, f func(t *testing.T, busy bool)) {
	for _, busy := range []bool{true, false} {
		name := "busy-poll"
		if !busy {
			name = "blocking"
		}
		t.Run(name, func(t *testing.T) { f(t, busy) })
	}
}

// placedPull is a 1 MiB message on its way from a to b over an emulated
// 82599 pair (zcModels[3]) whose receiving board places pulls on lanes.
type placedPull struct {
	pr       *pair
	inner    transport.Transport // b's transport, under mx
	src, dst []byte
	s        *Request // a's send
	ctx      context.Context
}

// startPlacedPull opens the pair with options o and sends a message of
// pattern seed from a, returning once b holds its RNDV unexpected.
func startPlacedPull(t *testing.T, o BoardOptions, seed uint64) *placedPull {
	t.Helper()
	w := zcWire(t, zcModels[3], nil, nil)
	p := &placedPull{inner: w.b}
	p.pr = newPairOn(t, w, o)
	if pl := p.pr.bb.plc; pl == nil || pl.lanes == 0 {
		t.Fatalf("the receiving board has no lanes: %+v", pl)
	}
	const size = 1 << 20
	p.src, p.dst = pattern(size, seed), make([]byte, size)
	p.ctx = testCtx(t, time.Minute)
	var err error
	if p.s, err = p.pr.a.ISend([][]byte{p.src}, p.pr.atob, 5, nil); err != nil {
		t.Fatal(err)
	}
	waitCond(t, "b has the RNDV", func() bool { return p.pr.b.Counters().Get(RecvRndv) > 0 })
	return p
}

// check waits for r, b's receive of the message, and for the send, and
// fails t unless the message arrived whole and placed, with no pull frame
// asked for again and no reply received twice.
func (p *placedPull) check(t *testing.T, r *Request) {
	t.Helper()
	if _, err := r.Wait(p.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.s.Wait(p.ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.src, p.dst) {
		t.Fatal("the message arrived changed")
	}
	c := p.pr.b.Counters()
	if n := c.Get(PullFramesRerequested); n != 0 {
		t.Errorf("%d pull frames asked for again on a lossless wire: %v", n, nonZero(p.pr.b.cnt))
	}
	if n := c.Get(DupPullReplies); n != 0 {
		t.Errorf("%d pull replies received twice", n)
	}
	if cs := p.pr.b.CopyStats(); cs.RecvPlaced == 0 {
		t.Errorf("nothing placed: %+v", cs)
	}
}

// TestPlacedPullAsksLatePeer: a placed pull whose sender is held back
// (descheduled) far past the pull's timeout asks the region's owner
// what it sent instead of asking for whole blocks again, and acts on the
// answer only once the replies ahead of it on the lane were handled: the
// message arrives whole with no frame asked for again and none received
// twice. Both wait modes.
func TestPlacedPullAsksLatePeer(t *testing.T) {
	bothWaitModes(t, func(t *testing.T, busy bool) {
		checkLeaks(t)
		o := zcOptions("on")
		o.BusyPoll = busy
		o.PullTimeout = 2 * time.Millisecond
		p := startPlacedPull(t, o, 93)
		pr := p.pr
		// The sender stops before it reads a PULL: b's pull stays
		// silent for many of its timeouts.
		freeze(pr.ba)
		frozen := true
		defer func() {
			if frozen {
				thaw(pr.ba)
			}
		}()
		r, err := pr.b.IRecv([][]byte{p.dst}, 5, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, "b's pull was silent past two timeouts", func() bool {
			c := pr.b.Counters()
			return c.Get(PullAsks) >= 2 || c.Get(PullFramesRerequested) > 0
		})
		frozen = false
		thaw(pr.ba)
		p.check(t, r)
		if n := pr.b.Counters().Get(AskRetransmits); n != 0 {
			t.Errorf("%d pull blocks re-requested on an answer while their replies waited on the lane: %v", n, nonZero(pr.b.cnt))
		}
	})
}
