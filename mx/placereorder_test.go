package mx

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// swapTx is a board's NIC transport that sends each frame pick chooses
// one frame late: held back and sent right after the next frame, as a
// wire that reorders does (fault.Options.Reorder). A held frame's bytes
// outside registered memory are copied (the board reuses its buffers);
// its payload in a region is sent from there, in place.
type swapTx struct {
	*nic.Transport
	pick func(f *transport.Frame) bool
	mu   sync.Mutex
	held *transport.Frame
	out  []transport.Frame
}

// Send sends frames, each one pick chooses after the frame that follows
// it.
func (w *swapTx) Send(frames []transport.Frame) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.out[:0]
	for _, f := range frames {
		if w.held == nil && w.pick(&f) {
			h := f
			h.Head = bytes.Clone(f.Head)
			if f.Region == nil {
				h.Data = bytes.Clone(f.Data)
			}
			w.held = &h
			continue
		}
		out = append(out, f)
		if w.held != nil {
			out = append(out, *w.held)
			w.held = nil
		}
	}
	n, err := w.Transport.Send(out)
	clear(out)
	w.out = out[:0]
	if err != nil {
		return min(n, len(frames)), err
	}
	return len(frames), nil
}

// mxHeader is the mx bytes a frame sent starts with: its Head, or its
// Data for a frame without one.
func mxHeader(f *transport.Frame) []byte {
	if f.Head != nil {
		return f.Head
	}
	return f.Data
}

// TestPlacedLaneReorderCostsNoFrame: lane replies, or the PULLs that ask
// for them, swapped on the wire, in patterns a test picks, with nothing
// lost. Each reply overtaken lands in the span of the one that overtook
// it and the other way round; both are held and copied into place (one of
// them aside first: a cycle). Nothing is asked for again: a reply a few
// frames late is not lost (laneEvidence), and a block whose PULL was
// overtaken comes whole after the next one's. Before, every reply
// overtaken was asked for again on lane 0 and came twice, and a PULL
// overtaken cost its whole block asked again. The message arrives whole,
// and each reply the wire moved costs at most three copies of a reply
// (at MaxFrame 1514 the first two swapped cost the second: see aligned).
func TestPlacedLaneReorderCostsNoFrame(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		const size = 256 << 10 // 181 frames: fewer than 256
		for _, c := range []struct {
			name    string
			replies []int // frames whose reply goes after the next one
			pull    int   // the PULL on the lane (1-based) that goes after the next one, 0 for none
			moved   int   // replies out of their spans
			// At MaxFrame 1514 (pulls cut from their end) the short
			// first reply overtaken lands in the second span, which
			// overlaps the end of the first, where the second reply
			// landed: that one is asked for again.
			aligned uint64
		}{
			{name: "one reply", replies: []int{50}, moved: 2},
			{name: "the first", replies: []int{0}, moved: 2, aligned: 1},
			{name: "across a block's end", replies: []int{31}, moved: 2},
			{name: "one a block", replies: []int{5, 40, 70, 100, 140}, moved: 10},
			{name: "a run", replies: []int{10, 12, 14}, moved: 6},
			{name: "a PULL overtaken", pull: 2, moved: 64},
		} {
			t.Run(c.name, func(t *testing.T) {
				checkLeaks(t)
				m := laneLossModel(mf, func(int) bool { return false })
				w := zcWire(t, m, nil, nil)
				var mu sync.Mutex
				swapped, pulls := map[int]bool{}, 0
				w.a = &swapTx{Transport: w.a.(*nic.Transport), pick: func(f *transport.Frame) bool {
					h := mxHeader(f)
					if f.Lane == 0 || len(h) < wire.HeadLen+wire.PullReplyLen || wire.Type(h[wire.HeadLen]) != wire.TypePullReply {
						return false
					}
					seq := int(h[wire.HeadLen+1])
					mu.Lock()
					defer mu.Unlock()
					if swapped[seq] || !slices.Contains(c.replies, seq) {
						return false
					}
					swapped[seq] = true
					return true
				}}
				w.b = &swapTx{Transport: w.b.(*nic.Transport), pick: func(f *transport.Frame) bool {
					d := f.Data
					if len(d) < wire.HeadLen+wire.PullLen || wire.Type(d[wire.HeadLen]) != wire.TypePull || d[wire.HeadLen+18] == 0 {
						return false // a PULL asking on lane 0: for frames asked again
					}
					mu.Lock()
					defer mu.Unlock()
					pulls++
					return pulls == c.pull
				}}
				pr := newPairOn(t, w, zcOptions("on"))
				if pl := pr.bb.plc; pl == nil || pl.lanes == 0 {
					t.Fatalf("the receiving board has no lanes: %+v", pl)
				}
				geo := pullGeometry(pr, size)
				src, dst := pattern(size, 53), make([]byte, size)
				exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 5, ^uint64(0), [][]byte{src}, [][]byte{dst})
				if !bytes.Equal(src, dst) {
					t.Fatalf("the message arrived changed: %s", firstDiff(src, dst, geo))
				}
				cnt, cs := pr.b.Counters(), pr.b.CopyStats()
				again, silent := cnt.Get(PullFramesRerequested), cnt.Get(PullTimeouts)+cnt.Get(PullAsks)
				t.Logf("%d replies moved: %d frames asked for again, %d received, %d duplicates, %d held, %d copied aside, %d timer re-requests, %d questions; %d bytes placed, %d copied",
					c.moved, again, cnt.Get(RecvPullReply), cnt.Get(DupPullReplies), cnt.Get(PlaceHeld), cnt.Get(PlaceAside), cnt.Get(PullTimeouts), cnt.Get(PullAsks), cs.RecvPlaced, cs.RecvScatter)
				// A loaded machine may keep replies past the pull's
				// question: its answer may then ask again for them.
				want := uint64(0)
				if mf == 1514 {
					want = c.aligned
				}
				if silent == 0 && (again != want || cnt.Get(DupPullReplies) != 0) {
					t.Errorf("a wire that lost nothing: %d frames asked for again, %d replies received twice; want %d and none (counters %v)", again, cnt.Get(DupPullReplies), want, nonZero(cnt))
				}
				// Every reply but the ones moved and the last (shorter than
				// a span) is placed; each moved is copied once into place,
				// and one of each pair once more, aside.
				L := uint64(geo.L)
				if silent == 0 && cs.RecvPlaced+uint64(c.moved+1)*L < cs.RecvBytes {
					t.Errorf("%d bytes placed of %d: want all but %d replies' (counters %v)", cs.RecvPlaced, cs.RecvBytes, c.moved+1, nonZero(cnt))
				}
				if limit := cs.RecvBytes - cs.RecvPlaced + uint64(c.moved/2)*L; cs.RecvScatter > limit {
					t.Errorf("%d bytes copied for %d not placed: want at most %d, one copy a byte and one more for one reply of each pair moved (counters %v)",
						cs.RecvScatter, cs.RecvBytes-cs.RecvPlaced, limit, nonZero(cnt))
				}
			})
		}
	})
}
