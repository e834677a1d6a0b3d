package mx

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// TestPullFramesBound: sixteen large receives matched at once over the
// emulated 82599 pair would ask for 2048 pull replies together, more than
// the receiving NIC's RX ring and packet buffer hold; the board runs only
// as many pulls as BoardOptions.PullFrames allows and queues the rest, so
// the NIC misses no frame and every message arrives whole.
func TestPullFramesBound(t *testing.T) {
	checkLeaks(t)
	pr := newPairOn(t, zcWire(t, zcModels[1], nil, nil), zcOptions("on"))
	const n, size = 16, 256 << 10
	ctx := testCtx(t, time.Minute)
	var src, dst [n][]byte
	var rs, ss [n]*Request
	for k := range n {
		src[k], dst[k] = pattern(size, uint64(k+1)), make([]byte, size)
		var err error
		if rs[k], err = pr.b.IRecv([][]byte{dst[k]}, uint64(k), ^uint64(0), nil); err != nil {
			t.Fatal(err)
		}
	}
	for k := range n {
		var err error
		if ss[k], err = pr.a.ISend([][]byte{src[k]}, pr.atob, uint64(k), nil); err != nil {
			t.Fatal(err)
		}
	}
	for k := range n {
		for _, r := range []*Request{ss[k], rs[k]} {
			if _, err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(dst[k], src[k]) {
			t.Fatalf("message %d arrived changed", k)
		}
	}
	if q := pr.b.Counters().Get(PullsQueued); q == 0 {
		t.Error("no pull waited: 16 pulls of 128 frames ran at once, past PullFrames (512)")
	}
	for _, c := range pr.w.b.(transport.Stats).Counters() {
		if c.Name == "nic_rx_missed" && c.Value != 0 {
			t.Errorf("the receiving NIC missed %d frames: the pulls asked for more than it holds", c.Value)
		}
	}
	o := DefaultBoardOptions()
	o.PullFrames = -2
	if _, err := o.withDefaults(); !errors.Is(err, ErrBadOptions) {
		t.Errorf("PullFrames -2: %v, want ErrBadOptions", err)
	}
}
