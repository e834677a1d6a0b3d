package mx

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestPlacedPullTruncated: a large message pulled into a receive buffer
// shorter than it, on every pair whose receiving NIC places payloads (lane
// 0, lanes, jumbo lanes, the 82574L, QEMU's through VFIO): the buffer
// short by one byte, by half a reply, by half the message, one byte longer
// and one shorter than a reply, and one byte. The receive completes with
// ErrTruncated, its status saying the sender's length (MsgLength) and the
// bytes delivered (XferLength, the buffer's), as MX reports a
// truncation; the send reports
// the bytes the receiver took. The buffer holds the message's first bytes,
// exactly; the NIC wrote nothing past its end (the guard bytes after it,
// in the same allocation and so perhaps in the same registered page, are
// untouched; the IOMMU, which maps only what mx registers, recorded no
// fault; the models no violation, checked when the pair closes); a
// buffer shorter than a reply was copied (nothing placed) and one of four
// replies or more placed at least in part (in between, whether a frame is
// placed depends on the descriptors posted ahead and on the last frame's
// room for a span, so it is logged, not asserted); every span posted was
// taken, no lane stays bound to a pull and no receive waits for its
// spans. The next message on the same endpoints, into a buffer of its
// size, arrives byte-exact.
func TestPlacedPullTruncated(t *testing.T) {
	const size = 256<<10 + 7 // 181 replies of 1,450 bytes and a short one
	const guard, canary = 4096, 0xA5
	for _, m := range slices.Concat(zcModels, zcVFIOModels) {
		if !m.place {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			checkLeaks(t)
			o := zcOptions("on")
			// No re-request of a late frame, however slow the host, and a
			// give-up budget (ResendDelay × ResendMax, 8 s by zcOptions)
			// past those timers: a frame lost under a loaded TCG guest is
			// resent at the RTO, not given up on before it.
			o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
			o.ResendMax = int(time.Minute / o.ResendDelay)
			pr := newPairOn(t, zcWire(t, m, nil, nil), o)
			pc := pr.bb.plc
			if pc == nil {
				t.Fatal("the receiving board does not place")
			}
			L := pullGeometry(pr, size).L
			ctx := testCtx(t, 2*time.Minute)
			for i, n := range []int{size - 1, size - L/2, size / 2, L + 1, L - 1, 1} {
				src := pattern(size, uint64(80+i))
				mem := bytes.Repeat([]byte{canary}, n+guard)
				buf := mem[:n:n]
				clear(buf)
				before, resent := pr.b.CopyStats(), retransmits(pr)
				r, err := pr.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				s, err := pr.a.ISend([][]byte{src}, pr.atob, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("%d bytes into %d", size, n)
				st, err := r.Wait(ctx)
				if !errors.Is(err, ErrTruncated) || !errors.Is(st.Code, ErrTruncated) {
					t.Fatalf("%s: receive %v, want ErrTruncated (counters %v)", what, err, nonZero(pr.b.Counters()))
				}
				if st.MsgLength != size || st.XferLength != uint32(n) {
					t.Errorf("%s: status says %d of %d bytes, want %d of %d", what, st.XferLength, st.MsgLength, n, size)
				}
				ss, err := s.Wait(ctx)
				if err != nil {
					t.Fatalf("%s: send %v", what, err)
				}
				if ss.XferLength != uint32(n) {
					t.Errorf("%s: the send says the receiver took %d bytes", what, ss.XferLength)
				}
				if !bytes.Equal(buf, src[:n]) {
					t.Fatalf("%s: the buffer differs from the message's start at %s", what, firstDiff(src[:n], buf, pullGeometry(pr, n)))
				}
				for k, v := range mem[n:] {
					if v != canary {
						t.Fatalf("%s: byte %d past the buffer's end was written", what, k)
					}
				}
				c := pr.b.CopyStats().Sub(before)
				t.Logf("%s: %d bytes placed, %d copied", what, c.RecvPlaced, c.RecvScatter)
				if c.RecvBytes != uint64(n) {
					t.Errorf("%s: %d bytes counted received", what, c.RecvBytes)
				}
				if retransmits(pr) == resent && c.RecvScatter+c.RecvPlaced != uint64(n) {
					t.Errorf("%s: %d bytes copied and %d placed: want each written once", what, c.RecvScatter, c.RecvPlaced)
				}
				switch {
				case n < L && c.RecvPlaced != 0:
					t.Errorf("%s: %d bytes placed in a buffer shorter than a reply", what, c.RecvPlaced)
				case n >= 4*L && c.RecvPlaced == 0:
					t.Errorf("%s: nothing placed: the test did not place the pull", what)
				}
				checkNothingPosted(t, pr, what)
			}
			src, dst := pattern(size, 99), make([]byte, size)
			exchange(t, ctx, pr.a, pr.atob, pr.b, 99, ^uint64(0), [][]byte{src}, [][]byte{dst})
			if !bytes.Equal(src, dst) {
				t.Fatalf("the message after the truncated ones arrived changed at %s", firstDiff(src, dst, pullGeometry(pr, size)))
			}
			checkNothingPosted(t, pr, "the last message")
		})
	}
}

// checkNothingPosted waits until every span pr's receiving board posted
// was taken by a frame, on every lane, and checks that no lane is bound
// to a pull and no receive waits for its spans.
func checkNothingPosted(t *testing.T, pr *pair, what string) {
	t.Helper()
	pc := pr.bb.plc
	waitCond(t, what+": every span posted taken", func() bool {
		for lane := 0; lane <= pc.lanes; lane++ {
			if st := pc.tr.Placement(lane); st.Posted != st.Consumed {
				return false
			}
		}
		return true
	})
	pr.bb.mu.Lock()
	defer pr.bb.mu.Unlock()
	for k, pl := range pc.busy {
		if pl != nil {
			t.Errorf("%s: lane %d still bound to a pull", what, k)
		}
	}
	if len(pc.drain) != 0 || len(pc.pulls) != 0 {
		t.Errorf("%s: %d receives wait for their spans, %d pulls place", what, len(pc.drain), len(pc.pulls))
	}
}
