package mx

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
)

// strayPull drives one 1 MiB pull placed on lane 0 of model m by hand: a
// sends the RNDV and b acks it; a then stops, b matches the RNDV (the
// pull posts its spans and sends its first window of PULLs), and
// before a runs again, the test injects a frame: before b matches
// (first, with a stopped), or after the pull posted (then, a frame a
// sends). a's frames leave in the order it sent them and a handles
// b's in theirs, so a frame a sends in then, or one it sends on
// handling what b sent in first, reaches b's NIC before any reply. It
// returns b's copy accounting and counters for the message, which
// arrived byte-exact with nothing asked for again.
func strayPull(t *testing.T, m zcModel, first, then func(pr *pair)) (CopyStats, Counters) {
	t.Helper()
	checkLeaks(t)
	o := zcOptions("on")
	// Nothing on a timer: no re-request, resend or question but those
	// the test makes, however slow the host.
	o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
	pr := newPairOn(t, zcWire(t, m, nil, nil), o)
	if pr.bb.plc == nil || pr.bb.plc.lanes != 0 {
		t.Fatalf("%s: the receiving board does not place on lane 0: %+v", m.name, pr.bb.plc)
	}
	const size = 1 << 20
	src, dst := pattern(size, 61), make([]byte, size)
	ctx := testCtx(t, time.Minute)
	before, cnt := pr.b.CopyStats(), pr.b.Counters()
	s, err := pr.a.ISend([][]byte{src}, pr.atob, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	// b holds the RNDV and a its ack: a has nothing to ask b about.
	waitCond(t, "b has the RNDV and a its ack", func() bool {
		pr.ba.mu.Lock()
		acked := pr.atob.p.unacked.Len() == 0
		pr.ba.mu.Unlock()
		return acked && pr.b.Counters().Get(RecvRndv) > cnt[RecvRndv]
	})
	freeze(pr.ba)
	frozen := true
	defer func() {
		if frozen {
			thaw(pr.ba)
		}
	}()
	first(pr)
	r, err := pr.b.IRecv([][]byte{dst}, 7, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	window := uint64(pr.bb.opts.PullBlocks)
	waitCond(t, "b asked for the first window", func() bool {
		return pr.b.Counters().Get(SendPull) >= cnt[SendPull]+window
	})
	then(pr)
	frozen = false
	thaw(pr.ba)
	waitDone(t, ctx, r, s)
	if !bytes.Equal(src, dst) {
		t.Fatal("the message arrived changed")
	}
	c := pr.b.CopyStats().Sub(before)
	after := pr.b.Counters()
	for k := range after {
		after[k] -= cnt[k]
	}
	t.Logf("%s: %d bytes in place, %d copied, %.4f copied per byte; %d blocks realigned", m.name, c.RecvPlaced, c.RecvScatter, c.RecvPerByte(), after[PlaceRealigns])
	if c.RecvScatter+c.RecvPlaced != size {
		t.Errorf("%d bytes copied and %d placed of %d: want each written once", c.RecvScatter, c.RecvPlaced, size)
	}
	if n := after[PullFramesRerequested]; n != 0 {
		t.Errorf("%d pull frames asked for again on a lossless wire", n)
	}
	return c, after
}

// waitDone waits for a receive and a send.
func waitDone(t *testing.T, ctx context.Context, r, s *Request) {
	t.Helper()
	if _, err := r.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// placeZeroModels are the pairs that place on lane 0: the 82599 without
// lanes and the 82574L.
func placeZeroModels() []zcModel {
	var ms []zcModel
	for _, m := range zcModels {
		if m.name == "82599-place" || m.name == "82574L-place" {
			ms = append(ms, m)
		}
	}
	return ms
}

// TestPlacedPullStrayFrame: a frame the receiver did not count (a plain
// ack from the sender) arrives after a pull on lane 0 posted the spans of
// its first window and before the replies: it takes the pool descriptor
// ahead of them, and every reply of that window lands one span late and
// is copied, each from where it landed to the place its own offset names.
// The late replies tell the pull so, and the next block goes behind a
// spare pool descriptor, which the window's last reply takes: the replies
// of every later block land in their own spans. So the stray costs the
// first window, not the message (before, every reply of the message landed
// late), and every byte arrives right, written once.
func TestPlacedPullStrayFrame(t *testing.T) {
	for _, m := range placeZeroModels() {
		t.Run(m.name, func(t *testing.T) {
			c, cnt := strayPull(t, m, func(*pair) {}, func(pr *pair) {
				pr.atob.p.sendTruc(0) // a's lock is held (frozen)
			})
			if cnt[RecvTruc] == 0 {
				t.Fatal("the stray ack did not arrive")
			}
			if cnt[PlaceRealigns] == 0 {
				t.Errorf("no block was realigned behind a spare descriptor")
			}
			// The first window (PullBlocks x PullBlockFrames replies),
			// the last reply (shorter than a span) and the pool frames
			// ahead are copied; every other reply is in place.
			const size = 1 << 20
			o := DefaultBoardOptions()
			copied := (o.PullBlocks*o.PullBlockFrames + 4) * 1500
			if c.RecvPlaced < uint64(size-copied) {
				t.Errorf("%d bytes in place of %d: want all but the first window's (%d bytes at most copied)", c.RecvPlaced, size, copied)
			}
		})
	}
}

// TestPlacedPullCountsTheAnswer: the receiver asked its peer two
// questions (TRUCs with TrucAsk, as its tail timer asks when an ack is
// late, and again) and no answer has come when a pull on lane 0 starts.
// The peer answers each before it handles the PULLs, so the answers take
// descriptors ahead of the spans: the pull counts them there (behind
// spare pool descriptors where fewer are ahead), and every
// reply lands in its own span (before, the answers pushed every reply of
// the message two spans late).
func TestPlacedPullCountsTheAnswer(t *testing.T) {
	for _, m := range placeZeroModels() {
		t.Run(m.name, func(t *testing.T) {
			c, cnt := strayPull(t, m, func(pr *pair) {
				// As askDue asks (ask.go), by hand: a is stopped, so
				// the answer comes when a runs again, before it
				// handles the PULLs that follow the question.
				// Twice, as a question asked again when the first
				// went unanswered: two answers come.
				pr.bb.mu.Lock()
				p := pr.btoa.p
				for range 2 {
					now, own := pr.bb.now(), uint64(0)
					if p.askAt != 0 {
						own = p.askNum
					}
					num, fresh := p.askNumber(own)
					if fresh {
						p.askAt, p.askNum = now, num
					}
					p.lastAsk = now
					p.sendTruc(wire.TrucAsk | askTag(num)<<wire.TrucTagShift)
				}
				pr.bb.mu.Unlock()
			}, func(*pair) {})
			if cnt[RecvTruc] < 2 {
				t.Fatalf("b's questions were not answered: %v", nonZero(cnt))
			}
			// In place but for the replies that take the pool
			// descriptors ahead and the last one: as on a quiet wire.
			if c.RecvScatter > 12*1500 {
				t.Errorf("%d bytes copied: want only the replies before the first span and the last one", c.RecvScatter)
			}
		})
	}
}

// TestOwnSpanIsTheOffsets: a reply is taken as in place only when the
// span it took is the one posted for the offset its own header names;
// any other span (its neighbours', one posted for nothing, a span for
// its offset that was never posted) makes it a copy to that offset.
func TestOwnSpanIsTheOffsets(t *testing.T) {
	const L, hd, n = 1450, 32, 8
	geo := wire.PullFrames{Total: n*L - 100, L: L, Skew: 0}
	seg := make([]byte, geo.Total)
	pl := &pull{geo: geo, nframes: geo.Count()}
	pl.pp = &pullPlace{seg: seg, hd: hd, post: make([]uint64, pl.nframes)}
	for i := range pl.nframes - 1 { // the last frame has no span
		pl.pp.post[i] = uint64(10 + i)
	}
	for i := range pl.nframes {
		for j := range pl.nframes {
			placed := seg[geo.Start(j)+hd:]
			want := i == j && pl.pp.post[i] != 0
			if got := pl.ownSpan(i, placed); got != want {
				t.Errorf("frame %d in the span at frame %d's offset: own %v, want %v", i, j, got, want)
			}
			if pl.ownSpan(i, seg[geo.Start(j)+hd+1:]) {
				t.Errorf("frame %d in a span a byte past frame %d's: own", i, j)
			}
		}
	}
	if pl.ownSpan(-1, seg) || pl.ownSpan(pl.nframes, seg) {
		t.Error("an offset outside the pull: own")
	}
}

// laneSpans lays out a pull of n frames of L bytes placing on lane 1 as
// placeBlock lays one block on a lane, with spans of span bytes: frame
// i's posting is 1+i, the last frames (no room for a span) a buffer of
// the transport's, 0 in post.
func laneSpans(n, L, hd, span int) *pull {
	geo := wire.PullFrames{Total: n * L, L: L}
	b := &Board{plc: &placeRecv{min: span, laneMin: span, hd: hd}}
	pl := &pull{e: &Endpoint{b: b}, geo: geo, nframes: geo.Count()}
	pl.pp = &pullPlace{seg: make([]byte, geo.Total), hd: hd, min: span, lane: 1, post: make([]uint64, pl.nframes), taken: make([]uint64, (pl.nframes+63)/64)}
	for i := range pl.nframes {
		if geo.Start(i)+hd+span <= geo.Total {
			pl.pp.post[i] = uint64(1 + i)
		}
	}
	return pl
}

// TestPlaceSafeSpansReachingSeveralFrames: a jumbo 82599's spans (8958
// bytes) for a peer whose 1500-byte MTU sets the reply length (1450)
// cover six frames each. With every posting up to frame 92's done and
// frame 93's still posted, no frame whose range span 93 reaches (93 to
// 99, the last six with no span of their own) may be copied; once 93 is
// done, each may, and the copy relies on posting 94 (span 93's).
func TestPlaceSafeSpansReachingSeveralFrames(t *testing.T) {
	const n, L, span = 100, 1450, 8958
	for _, hd := range []int{0, 32} {
		pl := laneSpans(n, L, hd, span)
		pp, pc := pl.pp, pl.e.b.plc
		if pp.post[93] == 0 || pp.post[94] != 0 {
			t.Fatalf("hd %d: spans laid out as not expected: %v", hd, pp.post[90:])
		}
		pc.done[1] = pp.post[92]
		for i := 93; i < n; i++ {
			if pl.placeSafe(i) {
				t.Errorf("hd %d: frame %d may be copied with span 93 still posted", hd, i)
			}
		}
		if pc.relied[1] != 0 {
			t.Errorf("hd %d: relied on posting %d, no copy kept", hd, pc.relied[1])
		}
		pc.done[1] = pp.post[93]
		for i := 94; i < n; i++ {
			if !pl.placeSafe(i) {
				t.Errorf("hd %d: frame %d may not be copied with every span done", hd, i)
			}
		}
		if pc.relied[1] != pp.post[93] {
			t.Errorf("hd %d: the copies relied on posting %d, want %d (span 93's)", hd, pc.relied[1], pp.post[93])
		}
		// A frame whose span is far from the posted one is not held by it.
		pc.done[1] = pp.post[80]
		if !pl.placeSafe(70) || pl.placeSafe(85) {
			t.Errorf("hd %d: frame 70 (spans done) or 85 (span 81 posted) judged wrong", hd)
		}
	}
}

// TestPlaceOwnReliesOnTheSpansBefore: an unpadded reply in its own span
// has its header buffer's bytes written by the CPU at its start, where
// the spans before it reach: the copy relies on them (a frame that took
// one and is handled later is not trusted). A padded one writes nothing
// there.
func TestPlaceOwnReliesOnTheSpansBefore(t *testing.T) {
	const L = 1450
	for _, c := range []struct{ hd, span int }{{32, 1450}, {32, 8958}} {
		pl := laneSpans(20, L, c.hd, c.span)
		pl.placeOwn(10)
		if got, want := pl.e.b.plc.relied[1], pl.pp.post[9]; got != want {
			t.Errorf("hd %d, spans of %d: the header bytes of frame 10 relied on posting %d, want %d (frame 9's)", c.hd, c.span, got, want)
		}
	}
	pl := laneSpans(20, L, 0, 1450)
	pl.placeOwn(10)
	if pl.e.b.plc.relied[1] != 0 {
		t.Errorf("padded: relied on posting %d", pl.e.b.plc.relied[1])
	}
}
