package mx

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestSackInsert checks the receiver's block list: kept in sequence order
// from the ack point (across the 14-bit wrap), fragments of one message
// merged into one block, and when full the farthest blocks left out.
func TestSackInsert(t *testing.T) {
	var s wire.Sack
	base := uint16(seqMask - 2) // the sequence numbers wrap after two
	for _, x := range []struct {
		seq  uint16
		held uint32
	}{{seqNext(seqNext(base)) + 3, 1}, {base + 1, 4}, {seqNext(seqNext(base)) + 3, 2}, {base + 1, 1}} {
		sackInsert(&s, x.seq&seqMask, x.held, base)
	}
	want := []wire.SackBlock{{Seq: base + 1, Held: 5}, {Seq: 2, Held: 3}} // 2: past the wrap
	if s.N != len(want) {
		t.Fatalf("%d blocks, want %d: %+v", s.N, len(want), s.Blocks[:s.N])
	}
	for i, b := range want {
		if s.Blocks[i] != b {
			t.Errorf("block %d = %+v, want %+v", i, s.Blocks[i], b)
		}
	}
	// Full: a nearer block pushes out the farthest; a farther one is left out.
	s.N = 0
	for i := range wire.SackMaxBlocks {
		sackInsert(&s, uint16(100+2*i), wire.SackWhole, 99)
	}
	sackInsert(&s, 200, wire.SackWhole, 99)
	sackInsert(&s, 101, wire.SackWhole, 99)
	if s.N != wire.SackMaxBlocks || s.Blocks[1].Seq != 101 || s.Blocks[s.N-1].Seq != 100+2*(wire.SackMaxBlocks-2) {
		t.Fatalf("full list: %+v", s.Blocks[:s.N])
	}
	for i := 1; i < s.N; i++ {
		if seqDiff(s.Blocks[i].Seq, 99) <= seqDiff(s.Blocks[i-1].Seq, 99) {
			t.Fatalf("blocks out of order: %+v", s.Blocks[:s.N])
		}
	}
}

// holdSends wraps a transport and, once armed, keeps every frame it would
// send (in order) until release: a sender whose frames the wire carries
// late, so that its peer reads a medium's first fragments well before
// the rest.
type holdSends struct {
	transport.Transport
	mu   sync.Mutex
	hold bool
	held []transport.Frame
}

func (h *holdSends) Send(frames []transport.Frame) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sendKept(h.Transport, frames, func(f transport.Frame) bool {
		if h.hold {
			h.held = append(h.held, transport.Frame{Peer: f.Peer, Data: bytes.Clone(f.Data)})
		}
		return !h.hold
	})
}

func (h *holdSends) arm() {
	h.mu.Lock()
	h.hold = true
	h.mu.Unlock()
}

// release sends, in one batch, the held frames up to and including the
// first that contains marker (all of them for a nil marker), and stops
// holding once none is left. It reports whether it found the marker.
func (h *holdSends) release(marker []byte) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, found := len(h.held), marker == nil
	for i, f := range h.held {
		if marker != nil && bytes.Contains(f.Data, marker) {
			n, found = i+1, true
			break
		}
	}
	if !found {
		return false, nil
	}
	if n > 0 {
		if _, err := h.Transport.Send(h.held[:n]); err != nil {
			return true, err
		}
	}
	h.held = append(h.held[:0], h.held[n:]...)
	h.hold = len(h.held) > 0
	return true, nil
}

// TestSackTailIsNoHole: a receiver that has read a medium's first two
// fragments, and not yet its last two, acks with a SACK that lists the
// two it holds (every TRUC carries the SACK). Its sender reads that TRUC
// only once the SACK's reordering window has passed (its receive
// goroutine held back, as a loaded machine holds it), after the rest of
// the medium reached the receiver. Nothing was lost and nothing arrived
// past the missing fragments, so nothing is resent: no fast retransmit,
// no duplicate at the receiver.
func TestSackTailIsNoHole(t *testing.T) {
	checkLeaks(t)
	w := newLoopbackWire(t, loopback.Faults{})
	h := &holdSends{Transport: w.a}
	g := newGatedRecv(h)
	w.a = g
	opts := DefaultBoardOptions()
	opts.ZombieSends = -1
	pr := newPairOn(t, w, opts)
	ctx := testCtx(t, time.Minute)
	for range 10 { // round trips to measure: the reordering window is srtt's
		roundTrip(t, ctx, pr)
	}
	pr.ba.mu.Lock()
	p := pr.a.partner(pr.bb.NICID(), 2, false)
	stride, sack := p.stride, p.sack
	pr.ba.mu.Unlock()
	if !sack {
		t.Fatal("selective acks were not negotiated")
	}
	marker := []byte("the-second-fragment-ends-the-first-batch")
	msg := pattern(3*stride+100, 9) // four fragments
	copy(msg[stride+50:], marker)
	ca0, cb0 := pr.a.Counters(), pr.b.Counters()

	buf, tiny := make([]byte, len(msg)), make([]byte, 8)
	rt, _ := pr.b.IRecv([][]byte{tiny}, 3, ^uint64(0), nil)
	rm, _ := pr.b.IRecv([][]byte{buf}, 4, ^uint64(0), nil)
	g.shutGate()
	select {
	case <-g.blocked: // a reads nothing from here on
	case <-ctx.Done():
		t.Fatal("a's receive goroutine never reached Recv")
	}
	h.arm()
	st, _ := pr.a.ISend([][]byte{[]byte("tiny!!!!")}, pr.atob, 3, nil)
	sm, _ := pr.a.ISend([][]byte{msg}, pr.atob, 4, nil)
	// The tiny message and the medium's first two fragments, in one
	// batch: b delivers the tiny one and acks it with a SACK that lists
	// the two fragments it holds.
	if ok, err := h.release(marker); !ok || err != nil {
		t.Fatalf("the medium's second fragment was not sent: %v", err)
	}
	mustWait(t, rt, 10*time.Second)
	waitCond(t, "b acked with a SACK", func() bool { return pr.b.Counters().Get(SacksSent) > cb0.Get(SacksSent) })
	waitCond(t, "a's SACK reordering window for the medium passed", func() bool {
		pr.ba.mu.Lock()
		defer pr.ba.mu.Unlock()
		return pr.ba.clock() > sm.lastSend+p.reorderWait()
	})
	if _, err := h.release(nil); err != nil { // the rest, and whatever a's timers sent meanwhile
		t.Fatal(err)
	}
	mustWait(t, rm, 10*time.Second)
	g.openGate()
	mustWait(t, st, 10*time.Second)
	mustWait(t, sm, 10*time.Second)
	if !bytes.Equal(buf, msg) {
		t.Fatal("the medium message differs")
	}
	ca, cb := pr.a.Counters(), pr.b.Counters()
	for _, c := range []struct {
		e    string
		k    Counter
		d    uint64
		want uint64
	}{
		{"a", FastRetransmits, ca.Get(FastRetransmits) - ca0.Get(FastRetransmits), 0},
		{"a", TimerRetransmits, ca.Get(TimerRetransmits) - ca0.Get(TimerRetransmits), 0},
		{"a", AskRetransmits, ca.Get(AskRetransmits) - ca0.Get(AskRetransmits), 0},
		{"b", DupReceived, cb.Get(DupReceived) - cb0.Get(DupReceived), 0},
	} {
		if c.d != c.want {
			t.Errorf("%s: %v %d on a wire that lost nothing", c.e, c.k, c.d)
		}
	}
	if d := ca.Get(SacksReceived) - ca0.Get(SacksReceived); d == 0 {
		t.Errorf("a received no SACK: the medium's fragments were not split as meant")
	}
}
