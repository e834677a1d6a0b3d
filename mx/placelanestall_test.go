package mx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

// laneLossModel is the "82599-lanes" pair over a cable that loses, once
// each, the PULL_REPLY frames sent to a lane whose frame number
// (wire.PullReply.FrameSeq: the frame's index in its message, for
// messages of fewer than 256 frames) lose picks: replies lost before the
// receiving NIC, where no span is taken. Its NICs take frames of
// maxFrame bytes (laneFrames).
func laneLossModel(maxFrame int, lose func(seq int) bool) zcModel {
	var mu sync.Mutex
	lost := map[int]bool{}
	cable := emulated.CableOptions{Lose: func(fr []byte) bool {
		const at = 14 + wire.HeadLen // Ethernet header, peer index
		if len(fr) < at+wire.PullReplyLen || wire.Type(fr[at]) != wire.TypePullReply {
			return false
		}
		et := binary.BigEndian.Uint16(fr[12:])
		if et <= transport.EtherType || et > transport.LaneEtherType(transport.MaxLanes) {
			return false
		}
		seq := int(fr[at+1])
		mu.Lock()
		defer mu.Unlock()
		if lost[seq] || !lose(seq) {
			return false
		}
		lost[seq] = true
		return true
	}}
	return zcModel{name: "82599-lanes-losing",
		open: ixgbeOnCable(cable),
		drv: func(d pci.Device) (nicdrv.NIC, error) {
			o := ixgbe.DefaultOptions()
			o.Placement, o.Queues, o.PlaceOnly = true, 5, 4
			o.MaxFrame = maxFrame
			return ixgbe.Open(d, o)
		},
		place: true}
}

// laneFrames runs test with the lanes' NICs opened for frames of 1518
// bytes (a lane's spans longer than a reply: pulls cut from the region
// offset) and of 1514 (the MTU's: spans a reply's payload long, pulls
// cut from their end, wire.Pull.AlignEnd).
func laneFrames(t *testing.T, test func(t *testing.T, maxFrame int)) {
	for _, mf := range []int{1518, 1514} {
		t.Run(fmt.Sprint(mf), func(t *testing.T) { test(t, mf) })
	}
}

// TestPlacedLaneLossAtPullEnd: lane replies lost on the cable, before the
// receiving NIC, among them one of the last two frames of the message.
// Nothing later on the lane takes the spans posted for the last frames,
// and a copy asked for again on lane 0 may be kept only once the NIC
// writes no more into its span: the answer to the pull's question shows
// the loss, the pull takes its lane's postings back, and the copies are
// kept. The message arrives whole (before, every copy was refused until
// the pull failed as unreachable).
func TestPlacedLaneLossAtPullEnd(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		const size = 256 << 10 // 181 frames: fewer than 256
		for _, c := range []struct {
			name string
			lose func(seq, n int) bool
		}{
			{"last two", func(seq, n int) bool { return seq >= n-2 }},
			{"the last block", func(seq, n int) bool { return seq >= n-20 && seq%3 == 0 }},
		} {
			t.Run(c.name, func(t *testing.T) {
				checkLeaks(t)
				var frames atomic.Int64 // the message's, once known
				m := laneLossModel(mf, func(seq int) bool { return c.lose(seq, int(frames.Load())) })
				pr := newPairOn(t, zcWire(t, m, nil, nil), zcOptions("on"))
				if pl := pr.bb.plc; pl == nil || pl.lanes == 0 {
					t.Fatalf("the receiving board has no lanes: %+v", pl)
				}
				n := pullGeometry(pr, size).Count()
				frames.Store(int64(n))
				src, dst := pattern(size, 41), make([]byte, size)
				ctx := testCtx(t, time.Minute)
				r, err := pr.b.IRecv([][]byte{dst}, 3, ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				s, err := pr.a.ISend([][]byte{src}, pr.atob, 3, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Wait(ctx); err != nil {
					t.Fatalf("%v (counters %v)", err, nonZero(pr.b.Counters()))
				}
				if _, err := s.Wait(ctx); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(src, dst) {
					t.Fatal("the message arrived changed")
				}
				cnt := pr.b.Counters()
				if cnt.Get(PlaceLaneCancels) == 0 {
					t.Errorf("no lane taken back: the loss did not leave spans posted (%d frames; counters %v)", n, nonZero(cnt))
				}
				if cs := pr.b.CopyStats(); cs.RecvPlaced == 0 {
					t.Errorf("nothing placed: %+v", cs)
				}
			})
		}
	})
}

// TestPlacedLaneSpanWrittenOver: two lane replies of a one-block pull are
// lost before the NIC, so each later reply lands in the span posted two
// frames before its own. The receiver reads them all in one batch, but
// before it handles them the lost frames' copies (asked for again, on
// lane 0, in the same batch) could be copied into their place, over
// those spans: the spans were consumed (two timer runs ago, "settled"),
// or the lane's postings taken back ("cancelled"). The replies handled
// after them must not be copied from spans a kept copy has written over.
// Settled: the pull holds the copies until the replies that took those
// spans are handled (a pull placing on a lane trusts no posting's
// consumption before its frame is handled while it can hold), so nothing
// is written over and nothing more is asked for. Cancelled: the copies
// are kept at once, and the replies that took the spans they relied on
// are dropped and asked for again. Either way the message arrives whole.
// (Before, each was copied from its span, holding the copy's bytes by
// then, into its own place: a run of the message two frames off.)
func TestPlacedLaneSpanWrittenOver(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		const size = 40 << 10 // 29 frames: one block
		for _, how := range []string{"settled", "cancelled"} {
			t.Run(how, func(t *testing.T) {
				checkLeaks(t)
				lose := func(seq int) bool { return seq == 2 || seq == 3 }
				o := zcOptions("on")
				// Nothing on a timer while the test sets the order.
				o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
				pr := newPairOn(t, zcWire(t, laneLossModel(mf, lose), nil, nil), o)
				src, dst := pattern(size, 43), make([]byte, size)
				ctx := testCtx(t, time.Minute)
				s, err := pr.a.ISend([][]byte{src}, pr.atob, 4, nil)
				if err != nil {
					t.Fatal(err)
				}
				b := pr.bb
				r, release := ownedLanePull(t, pr, dst, 4) // nothing handles what b receives but the test
				pl := r.pl
				n := pl.nframes
				b.mu.Unlock()
				sent := func(k int) func() bool {
					return func() bool { return pr.a.Counters().Get(SendPullReply) >= uint64(k) }
				}
				waitCond(t, "a sent the replies", sent(n))
				// The copies of the lost frames, asked for again on lane 0
				// as a reply after them would ask (lossEvidence), by hand:
				// that reply is not handled yet.
				b.mu.Lock()
				pl.rerequest(&pl.blocks[0], 0b1100, FastRetransmits)
				b.mu.Unlock()
				waitCond(t, "a sent the copies", sent(n+2))
				batch := make([]transport.Frame, rxBatch)
				got, err := b.tr.Recv(batch, 0)
				if err != nil {
					t.Fatal(err)
				}
				// Lane 0's frames first (the copies, and an ack that may
				// have come): a Recv takes the queues in turn, lane 0's
				// may come first.
				var copies, lane []transport.Frame
				replies := 0
				for _, f := range batch[:got] {
					if f.Lane != 0 {
						lane = append(lane, f)
						continue
					}
					copies = append(copies, f)
					if len(f.Data) > wire.HeadLen && wire.Type(f.Data[wire.HeadLen]) == wire.TypePullReply {
						replies++
					}
				}
				if replies != 2 || len(lane) != n-2 {
					t.Fatalf("received %d frames, %d on the lane and %d copies: want the %d replies not lost and the two copies in one batch", got, len(lane), replies, n-2)
				}
				batch = append(append(batch[:0], copies...), lane...)
				b.mu.Lock()
				switch how {
				case "settled": // the board's timers ran twice since the Recv
					b.placeTick()
					b.placeTick()
				case "cancelled": // the lane's postings taken back
					b.placeCancel(pl.e, pl.pp.lane)
				}
				b.handleBatchLocked(b.src, batch)
				spoiled := pr.b.cnt[PlaceSpoiled]
				// What the pull holds now is right.
				for _, bl := range pl.blocks { // none once every frame is in
					for i := range bl.n {
						if at, end := pl.geo.Start(bl.first+i), pl.geo.End(bl.first+i); bl.got&(1<<i) != 0 && !bytes.Equal(src[at:end], dst[at:end]) && !isHeld(pl, bl.first+i) {
							t.Errorf("frame %d of %d kept with bytes not its own", bl.first+i, n)
						}
					}
				}
				// Timers that run as fast as the test's others, for the
				// frames dropped.
				b.opts.PullTimeout, b.opts.RTOMin, b.opts.RTOMax = 4*time.Millisecond, fastOptions().RTOMin, fastOptions().RTOMax
				b.mu.Unlock()
				release()
				waitDone(t, ctx, r, s)
				if !bytes.Equal(src, dst) {
					t.Fatalf("the message arrived changed: %s", firstDiff(src, dst, pl.geo))
				}
				cnt := pr.b.Counters()
				switch {
				case how == "cancelled" && spoiled == 0:
					t.Errorf("no reply dropped for a span written over: %v", nonZero(cnt))
				case how == "settled" && (spoiled != 0 || cnt.Get(PullFramesRerequested) != 2 || cnt.Get(PlaceHeld) == 0):
					t.Errorf("settled: want the copies held, no reply dropped and only the 2 lost frames asked for again: %v", nonZero(cnt))
				}
				// Each byte not placed copied once, but for the replies
				// copied aside: at most one a frame asked for again.
				cs, aside := pr.b.CopyStats(), cnt.Get(PlaceAside)
				t.Logf("%d bytes copied for the %d not placed, %d replies held, %d copied aside, %d frames asked again",
					cs.RecvScatter, cs.RecvBytes-cs.RecvPlaced, cnt.Get(PlaceHeld), aside, cnt.Get(PullFramesRerequested))
				if aside > cnt.Get(PullFramesRerequested) || cs.RecvScatter > cs.RecvBytes-cs.RecvPlaced+aside*uint64(pl.geo.L) {
					t.Errorf("%d bytes copied for %d not placed, %d replies copied aside: want one copy a byte, one more for at most one reply a frame asked again (counters %v)",
						cs.RecvScatter, cs.RecvBytes-cs.RecvPlaced, aside, nonZero(cnt))
				}
			})
		}
	})
}

// TestPlacedLaneAnswerKeepsOriginalsOwed: frames a question's answer
// asks for again on lane 0 may still come on the lane, late (their
// replies waited in the sender's queue): they stay owed on the lane
// (laneOwed) until a copy arrives, so the next block is posted where
// the lane's replies will land. Frames asked for again on evidence (a
// later reply of the lane came) are lost there, and no longer owed. Both
// originals and copies then arrive, and neither is evidence against the
// other queue's frames: nothing more is asked for.
func TestPlacedLaneAnswerKeepsOriginalsOwed(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		const size = 40 << 10 // 29 frames: one block
		checkLeaks(t)
		o := zcOptions("on")
		o.PullTimeout, o.RTOMin, o.RTOMax = 10*time.Second, 10*time.Second, 10*time.Second
		pr := newPairOn(t, zcWire(t, laneLossModel(mf, func(int) bool { return false }), nil, nil), o)
		src, dst := pattern(size, 53), make([]byte, size)
		ctx := testCtx(t, time.Minute)
		s, err := pr.a.ISend([][]byte{src}, pr.atob, 6, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := pr.bb
		r, release := ownedLanePull(t, pr, dst, 6) // the replies wait unread while the test asks again
		pl := r.pl
		n := pl.nframes
		pl.rerequest(&pl.blocks[0], 0b1100, AskRetransmits)
		asked := pl.laneOwed(1)
		pl.rerequest(&pl.blocks[0], 0b110000, FastRetransmits)
		evidence := pl.laneOwed(1)
		b.mu.Unlock()
		if asked != n || evidence != n-2 {
			t.Errorf("frames owed on the lane: %d after an answer asked for 2 again, %d after evidence asked for 2 more; want %d and %d", asked, evidence, n, n-2)
		}
		release()
		waitDone(t, ctx, r, s)
		if !bytes.Equal(src, dst) {
			t.Fatalf("the message arrived changed: %s", firstDiff(src, dst, pl.geo))
		}
		if cnt := pr.b.Counters(); cnt.Get(PullFramesRerequested) != 4 || cnt.Get(PlaceSpoiled) != 0 {
			t.Errorf("want only the 4 frames asked for again by hand, nothing spoiled: %v", nonZero(cnt))
		}
	})
}

// pullGeometry is the frames of a pull of size bytes from pr's a to b
// (a's reply length toward b, less b's header room), read under a's lock.
func pullGeometry(pr *pair, size int) wire.PullFrames {
	pr.ba.mu.Lock()
	defer pr.ba.mu.Unlock()
	return wire.PullFrames{Total: size, L: pr.atob.p.replyLen - pr.bb.plc.hd}
}

// firstDiff says where got first differs from want, by frame of geo.
func firstDiff(want, got []byte, geo wire.PullFrames) string {
	for i := range want {
		if want[i] != got[i] {
			return fmt.Sprintf("byte %d (frame %d of %d)", i, geo.Index(i), geo.Count())
		}
	}
	return "nowhere"
}

// TestPlacedLaneLossyCable: a stream over a cable that loses 2 % of the
// frames before the receiving NIC, four messages of 100 KiB to 1 MiB +
// 4097 in flight on the lanes, six rounds: every message arrives whole,
// the pulls whose answers showed spans left posted take their lanes back,
// and payloads are placed. Which frames are lost, and when the copies
// meet the replies, varies with the timing: the tests above set the order
// by hand.
func TestPlacedLaneLossyCable(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		m := zcModel{name: "82599-lanes-lossy-cable",
			open:  ixgbeOnCable(emulated.CableOptions{Faults: fault.Options{Loss: 0.02, Seed: 5}}),
			drv:   laneLossModel(mf, nil).drv,
			place: true}
		checkLeaks(t)
		pr := newPairOn(t, zcWire(t, m, nil, nil), zcOptions("on"))
		windowedRounds(t, pr, []int{1 << 20, 256 << 10, 1<<20 + 4097, 100 << 10}, 6, func(src, dst []byte) string {
			return firstDiff(src, dst, pullGeometry(pr, len(src)))
		})
		rc, cnt := pr.b.CopyStats(), pr.b.Counters()
		t.Logf("received %d bytes, %d in place; %d pull frames asked again, %d lanes taken back, %d replies spoiled",
			rc.RecvBytes, rc.RecvPlaced, cnt.Get(PullFramesRerequested), cnt.Get(PlaceLaneCancels), cnt.Get(PlaceSpoiled))
		if rc.RecvPlaced == 0 {
			t.Errorf("nothing was received in place: %+v", rc)
		}
	})
}

// TestPlacedLaneReorderedCable: frames swapped on the cable, before the
// receiving NIC, with no loss: lane replies land each in another's span,
// and swapped ones in each other's (a cycle of held replies, which only a
// copy aside undoes). Every message arrives whole, in time: a held reply
// that waited forever failed its pull as unreachable.
func TestPlacedLaneReorderedCable(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		for _, fo := range []fault.Options{{Reorder: 0.02, Seed: 1}, {Reorder: 0.02, Loss: 0.01, Duplicate: 0.01, Seed: 2}} {
			t.Run(fmt.Sprintf("loss %g dup %g", fo.Loss, fo.Duplicate), func(t *testing.T) {
				m := zcModel{name: "82599-lanes-reordering-cable",
					open: func(t testing.TB, _ func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
						p, err := emulated.NewIXGBE(emulated.DefaultIXGBEOptions())
						if err != nil {
							t.Fatal(err)
						}
						if err := emulated.Connect(emulated.CableOptions{Faults: fo}, p.Port(0), p.Port(1)); err != nil {
							p.Close()
							t.Fatal(err)
						}
						f := p.Functions()
						return [2]pci.Device{f[0], f[1]}, p.IOMMU(), p.Close
					},
					drv:   laneLossModel(mf, nil).drv,
					place: true}
				checkLeaks(t)
				pr := newPairOn(t, zcWire(t, m, nil, nil), zcOptions("on"))
				windowedRounds(t, pr, []int{1 << 20, 256 << 10, 1<<20 + 4097, 100 << 10}, 6, func(src, dst []byte) string {
					return firstDiff(src, dst, pullGeometry(pr, len(src)))
				})
				rc, cnt := pr.b.CopyStats(), pr.b.Counters()
				t.Logf("received %d bytes, %d in place; %d replies held, %d copied aside, %d pull frames asked again, %d timeouts",
					rc.RecvBytes, rc.RecvPlaced, cnt.Get(PlaceHeld), cnt.Get(PlaceAside), cnt.Get(PullFramesRerequested), cnt.Get(PullTimeouts))
				if rc.RecvPlaced == 0 {
					t.Errorf("nothing was received in place: %+v", rc)
				}
			})
		}
	})
}

// TestPlacedLaneLossCostsItsFrames: lane replies lost on the cable,
// before the receiving NIC, in patterns a test picks. Each loss moves
// every later reply of the blocks posted into the span before its own;
// those replies arrived whole and are kept (held until their place is
// safe), not asked for again, and the next block posted is realigned.
// So no reply that arrived is dropped, a loss costs about its own frame
// asked for again on evidence, as on the copying path, and the message
// arrives whole. (Before, a reply in another frame's span was dropped,
// and a copy asked for again on lane 0 was taken as evidence against the
// replies still waiting in the lane's ring: 1 reply lost cost 110 frames
// dropped and asked for again.) What the pull's timer or a question's
// answer asks again for when a loaded machine kept replies late is not
// bounded: those replies are late, not dropped.
func TestPlacedLaneLossCostsItsFrames(t *testing.T) {
	laneFrames(t, func(t *testing.T, mf int) {
		const size = 256 << 10 // 181 frames: fewer than 256
		for _, c := range []struct {
			name string
			lost func(n int) []int
		}{
			{"one", func(int) []int { return []int{50} }},
			{"the first", func(int) []int { return []int{0} }},
			{"two blocks apart", func(int) []int { return []int{40, 100} }},
			{"a run", func(int) []int { return []int{10, 11, 12} }},
			{"across a block's end", func(int) []int { return []int{31, 32, 33} }},
			{"the last two", func(n int) []int { return []int{n - 2, n - 1} }},
			{"one a block", func(n int) []int { return []int{5, 40, 70, 100, 140, n - 3} }},
		} {
			t.Run(c.name, func(t *testing.T) {
				checkLeaks(t)
				var frames atomic.Int64 // the message's, once known
				m := laneLossModel(mf, func(seq int) bool { return slices.Contains(c.lost(int(frames.Load())), seq) })
				pr := newPairOn(t, zcWire(t, m, nil, nil), zcOptions("on"))
				if pl := pr.bb.plc; pl == nil || pl.lanes == 0 {
					t.Fatalf("the receiving board has no lanes: %+v", pl)
				}
				geo := pullGeometry(pr, size)
				n := geo.Count()
				frames.Store(int64(n))
				lost := len(c.lost(n))
				src, dst := pattern(size, 47), make([]byte, size)
				exchange(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 5, ^uint64(0), [][]byte{src}, [][]byte{dst})
				if !bytes.Equal(src, dst) {
					t.Fatalf("the message arrived changed: %s", firstDiff(src, dst, geo))
				}
				// Every reply that arrived whole is kept: received once, not
				// dropped and asked for again. Receptions beyond the
				// message's frames are duplicates, replies to the pull once
				// ended, or replies dropped (the cascade: before, 1 reply
				// lost dropped 110). The pull's timer or the answer to its
				// question may ask again for replies that were only late (on
				// a loaded machine, a block or the window whose replies were
				// not yet sent or read): those come back as duplicates, or
				// not at all, and are a legitimate recovery. Only where the
				// pull never went silent is every frame asked for again on
				// evidence, which a loss costs about its own frame of.
				cnt := pr.b.Counters()
				again, silent := cnt.Get(PullFramesRerequested), cnt.Get(PullTimeouts)+cnt.Get(PullAsks)
				dropped := int64(cnt.Get(RecvPullReply)) - int64(cnt.Get(DupPullReplies)+cnt.Get(DropBadPullReply)) - int64(n)
				t.Logf("%d replies lost: %d dropped, %d frames asked for again, %d timer re-requests, %d questions", lost, dropped, again, cnt.Get(PullTimeouts), cnt.Get(PullAsks))
				if dropped > int64(lost) {
					t.Errorf("%d replies of %d lost before the NIC: %d replies received whole were dropped, want at most %d (counters %v)", lost, n, dropped, lost, nonZero(cnt))
				}
				if silent == 0 && again > uint64(3*lost) {
					t.Errorf("%d replies of %d lost before the NIC: %d frames asked for again on evidence, want at most %d (counters %v)", lost, n, again, 3*lost, nonZero(cnt))
				}
				// Each byte the NIC did not write in its place is copied
				// once: from where a loss moved its reply, or from the copy
				// asked for again. A held reply copied aside (a copy of a
				// lost frame that could not wait for it to move) is a
				// second copy of one reply, at most one a frame asked again.
				cs, L := pr.b.CopyStats(), uint64(geo.L)
				aside := cnt.Get(PlaceAside)
				t.Logf("%d bytes copied for the %d not placed (%.2f a byte), %d replies held, %d copied aside",
					cs.RecvScatter, cs.RecvBytes-cs.RecvPlaced, float64(cs.RecvScatter)/float64(cs.RecvBytes-cs.RecvPlaced), cnt.Get(PlaceHeld), aside)
				if cs.RecvPlaced == 0 && silent == 0 {
					// A loaded machine's question may ask again, on lane 0,
					// for every reply the loss left to place.
					t.Errorf("nothing placed: %+v", cs)
				}
				if aside > again || cs.RecvScatter > cs.RecvBytes-cs.RecvPlaced+aside*L {
					t.Errorf("%d bytes copied for %d not placed, %d replies copied aside for %d frames asked again: want one copy a byte, one more for at most one reply a frame asked again (counters %v)",
						cs.RecvScatter, cs.RecvBytes-cs.RecvPlaced, aside, again, nonZero(cnt))
				}
			})
		}
	})
}

// isHeld reports whether pl holds frame i's reply (not yet in the receive
// buffer).
func isHeld(pl *pull, i int) bool {
	if pl.pp == nil {
		return false
	}
	for _, h := range pl.pp.held {
		if h.i == i {
			return true
		}
	}
	return false
}

// ownedLanePull posts the receive of dst matching match on pr's board b
// once b has the RNDV, with b's receive source owned by the test, so that
// nothing but the test handles what b receives, and checks that the
// receive pulls one block on a lane. It returns the receive with b.mu
// held, and release, which gives the source back (once; the test's
// cleanup calls it too).
func ownedLanePull(t *testing.T, pr *pair, dst []byte, match uint64) (r *Request, release func()) {
	t.Helper()
	waitCond(t, "b has the RNDV", func() bool { return pr.b.Counters().Get(RecvRndv) > 0 })
	b := pr.bb
	ownSource(t, b.src)
	owned := true
	release = func() {
		if owned {
			owned = false
			b.src.mu.Unlock()
		}
	}
	t.Cleanup(release)
	r, err := pr.b.IRecv([][]byte{dst}, match, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	if pl := r.pl; pl == nil || pl.pp == nil || pl.pp.lane == 0 || len(pl.blocks) != 1 {
		b.mu.Unlock()
		t.Fatalf("the receive does not pull one block on a lane: %+v", pl)
	}
	return r, release
}

// ixgbeOnCable opens an emulated 82599 whose two ports are joined by a
// cable of the given options, as zcModel.open does.
func ixgbeOnCable(cable emulated.CableOptions) func(testing.TB, func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
	return func(t testing.TB, _ func(int, uint64, []byte)) ([2]pci.Device, *emulated.IOMMU, func() error) {
		p, err := emulated.NewIXGBE(emulated.DefaultIXGBEOptions())
		if err != nil {
			t.Fatal(err)
		}
		if err := emulated.Connect(cable, p.Port(0), p.Port(1)); err != nil {
			p.Close()
			t.Fatal(err)
		}
		f := p.Functions()
		return [2]pci.Device{f[0], f[1]}, p.IOMMU(), p.Close
	}
}
