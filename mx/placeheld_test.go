package mx

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport/nic"
)

// TestPlaceHeldChainOneCopy: frame 5's reply is lost before the NIC on
// a lane, so replies 6 to 20 each land in the span before their own and
// are held where they landed, none safe to move (each one's place holds
// the next, the last's own span still posted). The copy of frame 5 then
// comes from lane 0 and cannot wait: the chain is flushed from its end,
// reply 20 copied aside (its span still posted), 19 down to 6 each
// copied once from where the NIC wrote it; frame 5 goes in. Reply 21
// lands in span 20 and waits; once the lane's postings are done, 21 and
// then 20 go in. Every frame ends with its own bytes, and the CPU copied
// each moved reply once, one twice.
func TestPlaceHeldChainOneCopy(t *testing.T) {
	const n, L = 40, 1450
	pl := laneSpans(n, L, 0, 1458)
	pl.blocks = []pblock{{first: 0, n: n}}
	pp, pc := pl.pp, pl.e.b.plc
	want := pattern(pl.geo.Total, 7)
	frame := func(i int) []byte { return want[pl.geo.Start(i):pl.geo.End(i)] }
	// The NIC writes reply j in the span of frame s, and the board
	// handles it: its posting and those before are done.
	land := func(j, s int) {
		placed := pp.seg[pl.geo.Start(s) : pl.geo.Start(s)+copy(pp.seg[pl.geo.Start(s):], frame(j))]
		pp.taken[s/64] |= 1 << (s % 64)
		pc.done[1] = max(pc.done[1], pp.post[s])
		if j == s {
			pl.blocks[0].ngot++
			return
		}
		if pl.placeWritable(j, placed) {
			t.Fatalf("reply %d in span %d: written at once, its place not final", j, s)
		}
		if !pl.placeHold(j, nil, placed) {
			t.Fatalf("reply %d not held", j)
		}
		pl.placeFlush(false)
	}
	for j := range 5 {
		land(j, j)
	}
	for j := 6; j <= 20; j++ {
		land(j, j-1)
	}
	if len(pp.held) != 15 || pl.e.cnt[PlaceAside] != 0 || pl.e.copies.scatter.Load() != 0 {
		t.Fatalf("replies 6-20 in the spans before their own: %d held, %d aside, %d bytes copied; want 15 held where they landed, nothing copied",
			len(pp.held), pl.e.cnt[PlaceAside], pl.e.copies.scatter.Load())
	}
	// The copy of frame 5, from lane 0.
	if !pl.placeWritable(5, nil) {
		t.Fatal("frame 5's copy may not be written with its span and the one before done")
	}
	copy(pp.seg[pl.geo.Start(5):], frame(5))
	pl.blocks[0].ngot++
	if len(pp.held) != 1 || pp.held[0].i != 20 || pl.e.cnt[PlaceAside] != 1 {
		t.Fatalf("after frame 5's copy: held %v, %d aside; want reply 20 alone, copied aside", pp.held, pl.e.cnt[PlaceAside])
	}
	land(21, 20)
	if len(pp.held) != 2 {
		t.Fatalf("reply 21 in span 20: %d held, want 20 and 21", len(pp.held))
	}
	pc.done[1] = pp.post[n-2] // a Cancel took the lane's postings back
	pl.placeFlush(false)
	if len(pp.held) != 0 || pl.blocks[0].ngot != 22 {
		t.Fatalf("every posting done: %d still held, %d frames in, want 22", len(pp.held), pl.blocks[0].ngot)
	}
	for i := range 22 {
		if !bytes.Equal(pp.seg[pl.geo.Start(i):pl.geo.End(i)], frame(i)) {
			t.Errorf("frame %d holds bytes not its own", i)
		}
	}
	// Replies 6 to 21 once each, 20 once more.
	if got, want := pl.e.copies.scatter.Load(), uint64(17*L); got != want {
		t.Errorf("%d bytes copied, want %d (16 moved replies and one copied aside)", got, want)
	}
}

// TestPlaceSpanOfAShorterFrame: a message whose first frame is shorter
// (a region offset, wire.PullFrames.Skew) loses that frame before the NIC
// on a lane, and the second, a full one, lands in the first's span: its
// last bytes lie in the second frame's span, which the NIC may write
// since. That reply is not trusted (spanTaken); one that fits the range
// of the frame whose span it took is.
func TestPlaceSpanOfAShorterFrame(t *testing.T) {
	const L = 1450
	geo := wire.PullFrames{Total: 20*L - 300, L: L, Skew: 300}
	b := &Board{plc: &placeRecv{min: 1458, lanes: 1}}
	pl := &pull{e: &Endpoint{b: b}, geo: geo, nframes: geo.Count()}
	pl.pp = &pullPlace{seg: make([]byte, geo.Total), min: 1458, lane: 1, post: make([]uint64, pl.nframes), taken: make([]uint64, 1)}
	for i := range pl.nframes - 1 {
		pl.pp.post[i] = uint64(1 + i)
	}
	b.plc.pulls = []*pull{pl}
	span := func(s, n int) []byte { return pl.pp.seg[geo.Start(s) : geo.Start(s)+n] }
	for _, c := range []struct {
		name  string
		s, n  int
		whole bool
	}{
		{"frame 1 in frame 0's span", 0, geo.End(1) - geo.Start(1), false},
		{"frame 0 in its own span", 0, geo.End(0) - geo.Start(0), true},
		{"frame 2 in frame 1's span", 1, L, true},
		{"frame 2 in frame 3's span", 3, L, true},
	} {
		lane, took, whole := b.spanTaken(span(c.s, c.n))
		if lane != 1 || took != pl.pp.post[c.s] || whole != c.whole {
			t.Errorf("%s: lane %d, posting %d, within its frame %v; want 1, %d, %v", c.name, lane, took, whole, pl.pp.post[c.s], c.whole)
		}
	}
}

// TestPlaceStashShrinks: the buffers of held replies given back are kept
// for the next, but those no held reply took between two timer runs are
// freed: the stash follows what is in use, and empties when idle.
func TestPlaceStashShrinks(t *testing.T) {
	pc := &placeRecv{}
	for range 8 {
		pc.putStash(make([]byte, 0, 1450))
	}
	pc.trimStash() // the first run: all 8 came since
	if len(pc.stash) != 8 {
		t.Fatalf("%d buffers kept after the run they came in, want 8", len(pc.stash))
	}
	a, b := pc.takeStash(), pc.takeStash()
	pc.putStash(a)
	pc.putStash(b)
	pc.trimStash() // 2 in use at once since the last run: 6 idle
	if len(pc.stash) != 2 {
		t.Fatalf("%d buffers kept with 2 in use since the last run, want 2", len(pc.stash))
	}
	pc.trimStash() // idle
	if len(pc.stash) != 0 || pc.stash != nil {
		t.Fatalf("%d buffers kept on an idle board, want none", len(pc.stash))
	}
}

// cancelFails is a placing nic transport whose Cancel fails while fail
// is set, as a queue that does not stop in time would.
type cancelFails struct {
	*nic.Transport
	fail atomic.Bool
}

func (c *cancelFails) Cancel(lane int) error {
	if c.fail.Load() {
		return errors.New("the queue did not stop (test)")
	}
	return c.Transport.Cancel(lane)
}

// TestPlacedLaneCancelFailsKeepsReceive: the last reply of a pull placing
// on a lane, which has a buffer of the transport's posted there (no room
// for a span at MaxFrame 1518; its span at 1514, the copy then held until
// the NIC can write no more there), is lost before the NIC; its copy comes
// on lane 0, so that posting is left when the pull finishes, and the
// transport fails to take it back. The receive does not complete while
// the lane still has it
// posted, nor does another pull take the lane: it waits in the drain
// list, the cancel is tried again on the timers, and once one succeeds
// the receive completes, whole, and the lane is free. (Before, the
// receive completed at once and was completed again from the drain list,
// a request the application may have reused by then.)
func TestPlacedLaneCancelFailsKeepsReceive(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		const size = 100 << 10 // 71 frames
		checkLeaks(t)
		var frames atomic.Int64
		w := zcWire(t, laneLossModel(mf, func(seq int) bool { return seq == int(frames.Load())-1 }), nil, nil)
		cf := &cancelFails{Transport: w.b.(*nic.Transport)}
		cf.fail.Store(true)
		w.b = cf
		pr := newPairOn(t, w, zcOptions("on"))
		frames.Store(int64(pullGeometry(pr, size).Count()))
		src, dst := pattern(size, 59), make([]byte, size)
		ctx := testCtx(t, time.Minute)
		r, err := pr.b.IRecv([][]byte{dst}, 7, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.a.ISend([][]byte{src}, pr.atob, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		waitCond(t, "a cancel failed", func() bool { return pr.b.Counters().Get(PlaceCancelErrors) >= 2 })
		b := pr.bb
		held := func() int {
			b.mu.Lock()
			defer b.mu.Unlock()
			n := 0
			for k := 1; k <= b.plc.lanes; k++ {
				if b.plc.busy[k] != nil {
					n++
				}
			}
			return n
		}
		if _, done := r.Test(); done || held() != 1 {
			t.Fatalf("with a posting left on its lane: receive complete %v, %d lanes held; want it waiting, its lane held (counters %v)", done, held(), nonZero(pr.b.Counters()))
		}
		cf.fail.Store(false)
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil { // the receiver's NOTIFY
			t.Fatalf("%v (receiver's counters %v)", err, nonZero(pr.b.Counters()))
		}
		if !bytes.Equal(src, dst) {
			t.Fatal("the message arrived changed")
		}
		if n := held(); n != 0 || pr.b.Counters().Get(PlaceLaneCancels) == 0 {
			t.Errorf("after the cancel: %d lanes held, counters %v", n, nonZero(pr.b.Counters()))
		}
	})
}

// TestPlaceHeldCycle: lane replies swapped before the NIC, no loss. The
// replies of a cycle each land in another's span (with 2: reply 6 in
// span 5, then 5 in span 6), so each is held where the NIC wrote it,
// and each place holds another of them: no order of copies from where
// they landed undoes it. The reply that closes the cycle is copied aside
// (one second copy), the rest flushes as a chain at once, and every
// frame ends with its own bytes. (Before, each waited for the other to
// move, nothing asked for them again, and the pull failed unreachable.)
func TestPlaceHeldCycle(t *testing.T) {
	const n, L = 40, 1450
	for _, c := range []struct {
		name   string
		land   [][2]int // reply, span, in the order the NIC takes them
		cycles uint64
	}{
		{"two", [][2]int{{6, 5}, {5, 6}}, 1},
		{"three", [][2]int{{7, 5}, {5, 6}, {6, 7}}, 1},
		{"three the other way", [][2]int{{6, 5}, {7, 6}, {5, 7}}, 1},
		{"two, then two", [][2]int{{6, 5}, {5, 6}, {9, 8}, {8, 9}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			pl := laneSpans(n, L, 0, 1458)
			pl.blocks = []pblock{{first: 0, n: n}}
			pp, pc := pl.pp, pl.e.b.plc
			want := pattern(pl.geo.Total, 7)
			frame := func(i int) []byte { return want[pl.geo.Start(i):pl.geo.End(i)] }
			moved := map[int]bool{}
			for _, js := range c.land {
				moved[js[0]] = true
			}
			land := func(j, s int) {
				placed := pp.seg[pl.geo.Start(s) : pl.geo.Start(s)+copy(pp.seg[pl.geo.Start(s):], frame(j))]
				pp.taken[s/64] |= 1 << (s % 64)
				pc.done[1] = max(pc.done[1], pp.post[s])
				if j == s {
					pl.blocks[0].ngot++
					return
				}
				if pl.placeWritable(j, placed) {
					copy(pp.seg[pl.geo.Start(j):], placed)
					pl.blocks[0].ngot++
					return
				}
				if !pl.placeHold(j, nil, placed) {
					t.Fatalf("reply %d not held", j)
				}
				pl.placeFlush(false)
			}
			next := 0
			for _, js := range c.land {
				for ; next < js[1] && next < js[0]; next++ {
					if !moved[next] {
						land(next, next)
					}
				}
				land(js[0], js[1])
			}
			if len(pp.held) != 0 {
				t.Fatalf("every reply of the cycles in, their spans taken: %d still held (%+v)", len(pp.held), pp.held)
			}
			for j := next; j < n; j++ {
				if !moved[j] {
					land(j, j)
				}
			}
			if len(pp.held) != 0 || pl.blocks[0].ngot != n {
				t.Fatalf("every reply in: %d held, %d frames in, want %d", len(pp.held), pl.blocks[0].ngot, n)
			}
			for i := range n {
				if !bytes.Equal(pp.seg[pl.geo.Start(i):pl.geo.End(i)], frame(i)) {
					t.Errorf("frame %d holds bytes not its own", i)
				}
			}
			// Each moved reply copied once, one a cycle twice.
			if got, want := pl.e.cnt[PlaceAside], c.cycles; got != want {
				t.Errorf("%d replies copied aside, want %d (one a cycle)", got, want)
			}
			if got, want := pl.e.copies.scatter.Load(), (uint64(len(moved))+c.cycles)*L; got != want {
				t.Errorf("%d bytes copied, want %d (each moved reply once, one a cycle twice)", got, want)
			}
		})
	}
}

// TestPlaceLane0FinishedPullHasNoSpanPosted: on lane 0 a pull's replies
// take its spans in the order posted, whatever frame each is (lost,
// duplicated, another's), and a reply not in its own span is kept only
// once its own span is done (placeWritable), even when buffers of the
// transport's ahead of the spans take its first replies. So a pull whose
// every frame is in has had every span consumed, and its receive completes at once
// (placeEnd finds nothing posted): none waits in the drain list for
// traffic that may never come. Random schedules: replies sent in order,
// lost, duplicated, among strangers, the missing asked for again.
func TestPlaceLane0FinishedPullHasNoSpanPosted(t *testing.T) {
	const n, L = 60, 1450
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		pl := laneSpans(n, L, 0, 1458)
		pp, pc := pl.pp, pl.e.b.plc
		pp.lane = 0
		// Buffers of the transport's posted ahead of the spans (fewer
		// frames came before the pull's replies than it counted, or
		// more).
		ahead := uint64(rng.IntN(2 * n))
		var posted uint64
		for k, s := range pp.post {
			if s != 0 {
				pp.post[k] += ahead
				posted = max(posted, pp.post[k])
			}
		}
		in := make([]bool, n)
		var queue []int
		got, consumed := 0, uint64(0)
		for step := 0; got < n; step++ {
			if step > 100*n {
				t.Fatalf("seed %d: %d of %d frames in after %d arrivals", seed, got, n, step)
			}
			if len(queue) == 0 { // the frames not in, asked for again
				for k := range n {
					if !in[k] {
						queue = append(queue, k)
					}
				}
			}
			i := queue[0] // the frame that arrives, sent in order
			if rng.IntN(20) != 0 {
				queue = queue[1:] // else duplicated
			}
			if rng.IntN(10) == 0 {
				continue // lost
			}
			stranger := rng.IntN(10) == 0
			var took uint64
			if consumed < posted {
				consumed++
				took = consumed
				if took > ahead { // posting ahead+1+s is frame s's span
					s := int(took - ahead - 1)
					pp.taken[s/64] |= 1 << (s % 64)
				}
				pc.done[0] = max(pc.done[0], took)
			}
			if stranger || in[i] {
				continue
			}
			own := took > ahead && pp.post[i] == took
			if took > ahead && took <= pc.relied[0] {
				continue // spoiled: asked for again
			}
			if !own && !pl.placeWritable(i, nil) {
				continue // its own span not done: asked for again
			}
			in[i] = true
			got++
		}
		if consumed < posted {
			t.Fatalf("seed %d: every frame in with %d of %d postings consumed", seed, consumed, posted)
		}
	}
}
