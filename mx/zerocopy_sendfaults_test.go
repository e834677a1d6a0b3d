package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/nic"
)

// embeddedNIC adds to a nic transport by embedding it, as mxbench's NIC
// transports do: the regions its Register hands out are the nic
// transport's.
type embeddedNIC struct{ *nic.Transport }

// TestZeroCopySendFaultsLoss: with zero copy on, the sender's pull replies
// pass through a send-side fault wrapper around a transport that embeds
// the nic transport (mxbench's --transport nic --loss). The wrapper copies
// every frame of the application's registered memory, the frames it loses
// are asked for again a bounded number of times, and every message
// arrives byte-exact. (The wrapper once refused every frame of a region
// owned by the transport behind the one it wraps, so each reply was lost
// and asked for again until the pull failed.)
func TestZeroCopySendFaultsLoss(t *testing.T) {
	m := zcModels[1] // 82599
	checkLeaks(t)
	w := zcWire(t, m, nil, nil)
	fw, err := fault.Wrap(embeddedNIC{w.a.(*nic.Transport)}, fault.WrapOptions{Send: fault.Options{Loss: 0.02, Seed: 13}})
	if err != nil {
		t.Fatal(err)
	}
	w.a = fw
	pr := newPairOn(t, w, zcOptions("on"))
	const rounds = 4
	for i := range rounds {
		src := pattern(1<<20+4097, uint64(i))
		dst := make([]byte, len(src))
		exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, uint64(i), ^uint64(0), [][]byte{src}, [][]byte{dst})
		if !bytes.Equal(src, dst) {
			t.Fatalf("message %d arrived changed", i)
		}
	}
	send, _ := fw.Counts()
	if send.Dropped == 0 {
		t.Fatalf("the wrapper lost no frame of %d (seed 13): the test shows nothing", send.Frames)
	}
	rq := pr.b.Counters().Get(PullFramesRerequested)
	t.Logf("%d frames sent through the faults, %d lost, %d pull frames asked for again", send.Frames, send.Dropped, rq)
	if rq == 0 || rq > 4*send.Dropped {
		t.Errorf("%d pull frames asked for again for %d frames lost, want 1 to %d", rq, send.Dropped, 4*send.Dropped)
	}
	if c := pr.a.CopyStats(); c.SendInPlace != 0 || c.SendTransport < c.SentBytes {
		t.Errorf("through the send faults, which copy every frame: %+v, want every byte counted as the transport's copy", c)
	}
}
