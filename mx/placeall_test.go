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
					n := min(c.window, len(sizes)-first)
					rs, ss, srcs, dsts := postWindow(t, pr, n, func(j int) (uint64, []byte, []byte) {
						k := first + j
						return uint64(k), pattern(sizes[k], uint64(90+k)), make([]byte, sizes[k]-c.short)
					})
					want := 0
					for _, dst := range dsts {
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

// TestPlacedLaneOlderPeer: a peer that sends to lanes but did not announce
// ExtPullAlign (an older gomx) is asked for no aligned pull: the frames
// are cut from the region offset, each lane span a full reply's payload
// (1450 bytes, MaxFrame 1514), so a short last frame has no span at the
// end of the receive buffer and is copied, exactly its bytes, and every
// other byte is placed. Byte-exact, nothing asked for again.
func TestPlacedLaneOlderPeer(t *testing.T) {
	checkLeaks(t)
	o := zcOptions("on")
	o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
	pr := newPairOn(t, zcWire(t, zcModels[3], nil, nil), o)
	ctx := testCtx(t, 2*time.Minute)
	xfer := func(size int, tag uint64) {
		t.Helper()
		src, dst := pattern(size, tag), make([]byte, size)
		r, err := pr.b.IRecv([][]byte{dst}, tag, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.a.ISend([][]byte{src}, pr.atob, tag, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatalf("%d bytes: %v (counters %v)", size, err, nonZero(pr.b.Counters()))
		}
		if _, err := s.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(src, dst) {
			t.Fatalf("%d bytes: arrived changed at %s", size, firstDiff(src, dst, pullGeometry(pr, size)))
		}
	}
	xfer(64, 1) // connects the boards
	for _, side := range []struct {
		b    *Board
		e    *Endpoint
		peer *Board
		to   uint8
	}{{pr.ba, pr.a, pr.bb, pr.b.id}, {pr.bb, pr.b, pr.ba, pr.a.id}} {
		side.b.mu.Lock()
		pi, p := side.b.peer(side.peer.NICID(), side.b.peerIndex(side.peer.NICID())), side.e.partnerAt(side.peer.NICID(), side.to)
		if pi == nil || p == nil || !pi.pullAlign || !p.pullAlign || !p.replyLane {
			side.b.mu.Unlock()
			t.Fatalf("peer %+v, partner %+v: want both announcing ExtPlaceLane and ExtPullAlign", pi, p)
		}
		pi.pullAlign, p.pullAlign = false, false
		side.b.mu.Unlock()
	}
	const L = 1450
	for i, size := range []int{1 << 20, 1<<20 + 1, 40 * L, 3<<20 + 517} {
		before, asked := pr.b.CopyStats(), pr.b.Counters().Get(PullFramesRerequested)
		xfer(size, uint64(10+i))
		got := pr.b.CopyStats().Sub(before)
		if n := pr.b.Counters().Get(PullFramesRerequested); n != asked {
			t.Errorf("%d bytes: %d frames asked for again on a lossless wire", size, n-asked)
		}
		if got.RecvScatter != uint64(size%L) || got.RecvPlaced != uint64(size-size%L) {
			t.Errorf("%d bytes: %d copied, %d placed: want the short last frame's %d copied, the rest placed", size, got.RecvScatter, got.RecvPlaced, size%L)
		}
	}
}
