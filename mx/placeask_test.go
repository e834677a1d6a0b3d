package mx

import (
	"bytes"
	"testing"
	"time"
)

// TestPlacedPullAsksLatePeer: a placed pull whose sender is held back
// (descheduled) far past the pull's timeout asks the region's owner
// what it sent instead of asking for whole blocks again, and acts on the
// answer only once the replies ahead of it on the lane were handled: the
// message arrives whole with no frame asked for again and none received
// twice. Both wait modes.
func TestPlacedPullAsksLatePeer(t *testing.T) {
	for _, busy := range []bool{true, false} {
		name := "busy-poll"
		if !busy {
			name = "blocking"
		}
		t.Run(name, func(t *testing.T) {
			checkLeaks(t)
			o := zcOptions("on")
			o.BusyPoll = busy
			o.PullTimeout = 2 * time.Millisecond
			w := zcWire(t, zcModels[3], nil, nil)
			pr := newPairOn(t, w, o)
			if pl := pr.bb.plc; pl == nil || pl.lanes == 0 {
				t.Fatalf("the receiving board has no lanes: %+v", pl)
			}
			const size = 1 << 20
			src, dst := pattern(size, 93), make([]byte, size)
			ctx := testCtx(t, time.Minute)
			s, err := pr.a.ISend([][]byte{src}, pr.atob, 5, nil)
			if err != nil {
				t.Fatal(err)
			}
			waitCond(t, "b has the RNDV", func() bool { return pr.b.Counters().Get(RecvRndv) > 0 })
			// The sender stops before it reads a PULL: b's pull stays
			// silent for many of its timeouts.
			freeze(pr.ba)
			frozen := true
			defer func() {
				if frozen {
					thaw(pr.ba)
				}
			}()
			r, err := pr.b.IRecv([][]byte{dst}, 5, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			waitCond(t, "b's pull was silent past two timeouts", func() bool {
				c := pr.b.Counters()
				return c.Get(PullAsks) >= 2 || c.Get(PullFramesRerequested) > 0
			})
			frozen = false
			thaw(pr.ba)
			if _, err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("the message arrived changed")
			}
			c := pr.b.Counters()
			if n := c.Get(PullFramesRerequested); n != 0 {
				t.Errorf("%d pull frames asked for again from a late peer on a lossless wire: %v", n, nonZero(pr.b.cnt))
			}
			if n := c.Get(AskRetransmits); n != 0 {
				t.Errorf("%d pull blocks re-requested on an answer while their replies waited on the lane: %v", n, nonZero(pr.b.cnt))
			}
			if n := c.Get(DupPullReplies); n != 0 {
				t.Errorf("%d pull replies received twice", n)
			}
			if cs := pr.b.CopyStats(); cs.RecvPlaced == 0 {
				t.Errorf("nothing placed: %+v", cs)
			}
		})
	}
}
