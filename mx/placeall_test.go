package mx

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestPlacedLaneEveryByte: over 82599s whose lanes take frames of the MTU
// (MaxFrame = MTU + 14, VLAN tags stripped: a lane's span is a full
// reply's payload), a pull on a lane asks its peer to cut the message
// from its end (wire.Pull.AlignEnd), so the last reply is full and fits
// its span at the end of the receive buffer, and the short one comes
// first, where its span has room: every payload byte is written by the
// NIC, none by the CPU, whatever the size, one message at a time or
// several in flight (one a lane), at MTU 1500 and 9000, a multiple of
// the reply length (no short frame) included. A receive
// buffer shorter than the message pulls what fits (ErrTruncated), placed
// the same way.
// Byte-exact, and nothing asked for again (the pull timers are long).
func TestPlacedLaneEveryByte(t *testing.T) {
	sizes := []int{1 << 20, 1<<20 + 1, 3<<20 + 517, 40000 + 3, 4 << 20, 40 * 1450, 8 * 8950}
	for _, m := range []zcModel{zcModels[3], zcModels[5]} {
		t.Run(m.name, func(t *testing.T) {
			checkLeaks(t)
			o := zcOptions("on")
			o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
			pr := newPairOn(t, zcWire(t, m, nil, nil), o)
			if pl := pr.bb.plc; pl == nil || pl.lanes != 4 || pl.laneMin != cmp.Or(m.mtu, 1500)-50 {
				t.Fatalf("the receiving board's lanes: %+v, want 4 taking spans of a full padded reply (%d)", pl, cmp.Or(m.mtu, 1500)-50)
			}
			// One at a time, then all in flight, then into buffers 1,000
			// bytes short of the messages.
			for _, c := range []struct {
				window int
				short  int
			}{{1, 0}, {len(sizes), 0}, {len(sizes), 1000}} {
				ctx := testCtx(t, 2*time.Minute)
				for first := 0; first < len(sizes); first += c.window {
					before, asked := pr.b.CopyStats(), pr.b.Counters().Get(PullFramesRerequested)
					var rs, ss []*Request
					var srcs, dsts [][]byte
					want := 0
					for k := first; k < min(first+c.window, len(sizes)); k++ {
						size := sizes[k]
						src, dst := pattern(size, uint64(90+k)), make([]byte, size-c.short)
						r, err := pr.b.IRecv([][]byte{dst}, uint64(k), ^uint64(0), nil)
						if err != nil {
							t.Fatal(err)
						}
						s, err := pr.a.ISend([][]byte{src}, pr.atob, uint64(k), nil)
						if err != nil {
							t.Fatal(err)
						}
						rs, ss, srcs, dsts = append(rs, r), append(ss, s), append(srcs, src), append(dsts, dst)
						want += len(dst)
					}
					for k := range rs {
						if _, err := rs[k].Wait(ctx); err != nil && (c.short == 0 || !errors.Is(err, ErrTruncated)) {
							t.Fatalf("%d bytes: %v (counters %v)", len(srcs[k]), err, nonZero(pr.b.Counters()))
						}
						if _, err := ss[k].Wait(ctx); err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(srcs[k][:len(dsts[k])], dsts[k]) {
							t.Fatalf("%d bytes into %d: arrived changed", len(srcs[k]), len(dsts[k]))
						}
					}
					got := pr.b.CopyStats().Sub(before)
					what := fmt.Sprintf("window %d, buffers %d bytes short, from %d bytes", c.window, c.short, len(srcs[0]))
					if n := pr.b.Counters().Get(PullFramesRerequested); n != asked {
						t.Errorf("%s: %d frames asked for again on a lossless wire", what, n-asked)
						continue
					}
					if got.RecvScatter != 0 || got.RecvPlaced != uint64(want) {
						t.Errorf("%s: %d bytes copied, %d placed of %d: want every byte placed, none copied", what, got.RecvScatter, got.RecvPlaced, want)
					}
				}
			}
		})
	}
}
