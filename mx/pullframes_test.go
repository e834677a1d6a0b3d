package mx

import (
	"bytes"
	"errors"
	"runtime"
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
	o := zcOptions("on")
	// Replies asked for again on the timer (a progress goroutine kept off
	// its CPU past PullTimeout) would be frames beyond the bound.
	o.PullTimeout = 250 * time.Millisecond
	pr := newPairOn(t, zcWire(t, zcModels[1], nil, nil), o)
	const n, size = 16, 256 << 10
	ctx := testCtx(t, time.Minute)
	// The most pulls over the transport seen at once, sampled while the
	// messages move: the bound allows PullFrames / 128 = 4.
	most := make(chan int32)
	stop := make(chan struct{})
	go func() {
		var m int32
		for {
			select {
			case <-stop:
				most <- m
				return
			default:
			}
			m = max(m, pr.bb.pulling.Load())
			runtime.Gosched()
		}
	}()
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
	close(stop)
	if m := <-most; m > 4 {
		t.Errorf("%d pulls ran at once: PullFrames (512) allows 4 of 128 frames", m)
	}
	if q := pr.b.Counters().Get(PullsQueued); q == 0 {
		t.Error("no pull waited: 16 pulls of 128 frames ran at once, past PullFrames (512)")
	}
	if rq := pr.b.Counters().Get(TimerRetransmits); rq != 0 {
		// Replies asked for again went past the bound: what the NIC
		// missed then says nothing.
		t.Logf("%d re-requests on the timer (a loaded machine): the NIC's misses not checked", rq)
		return
	}
	for _, c := range pr.w.b.(transport.Stats).Counters() {
		if c.Name == "nic_rx_missed" && c.Value != 0 {
			t.Errorf("the receiving NIC missed %d frames: the pulls asked for more than it holds", c.Value)
		}
	}
	bad := DefaultBoardOptions()
	bad.PullFrames = -2
	if _, err := bad.withDefaults(); !errors.Is(err, ErrBadOptions) {
		t.Errorf("PullFrames -2: %v, want ErrBadOptions", err)
	}
}
