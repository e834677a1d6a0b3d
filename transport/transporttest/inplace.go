package transporttest

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// The in-place half of the contract (see the transport package
// documentation, "In-place frames"): held frames, registered regions.

// holdSize is the size of the frames the hold cases send: above any
// padding minimum, small enough to be cheap.
const holdSize = 96

// holdMany is how many frames HoldEverything holds at once: more than the
// receive buffers of any transport here (the loopback ring's 4096 slots, a
// NIC pool's quarter), so a transport that lends without a bound runs dry.
const holdMany = 4200

// heldNow returns the transport's held_now counter, if it has one (the
// last one: a wrapper's comes after the wrapped transport's).
func heldNow(tr transport.Transport) (uint64, bool) {
	st, ok := tr.(transport.Stats)
	if !ok {
		return 0, false
	}
	v, found := uint64(0), false
	for _, c := range st.Counters() {
		if strings.HasSuffix(c.Name, "held_now") {
			v, found = c.Value, true
		}
	}
	return v, found
}

// counters returns a transport's counters, for a failure message.
func counters(tr transport.Transport) []transport.Counter {
	if st, ok := tr.(transport.Stats); ok {
		return st.Counters()
	}
	return nil
}

// holder receives frames of one stream at a transport and holds each one,
// checking it against its key.
type holder struct {
	s      *suite
	t      *testing.T
	from   transport.Transport
	to     transport.Transport
	id     uint64
	held   []transport.Frame
	keys   []uint64
	copied int
	dma    int
	rx     []transport.Frame
}

func (s *suite) newHolder(t *testing.T, from, to transport.Transport, id uint64) *holder {
	return &holder{s: s, t: t, from: from, to: to, id: id, rx: make([]transport.Frame, 64)}
}

func (h *holder) key(i int) uint64 { return h.id<<48 | uint64(i) }

// take receives up to one batch and holds the frames of keys [lo, hi) that
// it did not hold yet; it returns how many frames it received and how many
// of them it held. Frames of other keys (stale duplicates on a lossy wire)
// are checked and left alone.
func (h *holder) take(lo, hi int, have map[int]bool, timeout time.Duration) (received, held int) {
	t := h.t
	t.Helper()
	n, err := h.to.Recv(h.rx, timeout)
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	got := 0
	for i := range h.rx[:n] {
		f := &h.rx[i]
		if len(f.Data) < 8 {
			t.Fatalf("frame of %d bytes, want at least %d", len(f.Data), holdSize)
		}
		k := binary.LittleEndian.Uint64(f.Data)
		idx := int(k & (1<<48 - 1))
		if k>>48 != h.id || !h.s.matches(f.Data, content(holdSize, k)) {
			t.Fatalf("received a frame that was never sent (or is corrupt): %x", head(f.Data))
		}
		if idx < lo || idx >= hi || have[idx] {
			continue // a duplicate
		}
		if f.Peer != h.from.Addr() {
			t.Fatalf("frame from %v, want %v", f.Peer, h.from.Addr())
		}
		info, err := h.to.Hold(f)
		if err != nil {
			t.Fatalf("Hold of frame %d of the latest Recv: %v", i, err)
		}
		if info.Copied {
			h.copied++
		}
		if info.DMA != nil {
			h.dma++
		}
		have[idx] = true
		h.held = append(h.held, *f)
		h.keys = append(h.keys, k)
		got++
	}
	return n, got
}

// holdRange sends frames [lo, hi) in one batch and holds each one as it
// arrives. On a lossy transport it sends the missing ones again once
// nothing arrived for a moment.
func (h *holder) holdRange(lo, hi int) {
	t := h.t
	t.Helper()
	have := map[int]bool{}
	wait := hangGuard
	if h.s.opts.Lossy {
		wait = 20 * time.Millisecond
	}
	for try := 0; len(have) < hi-lo; try++ {
		if try == 50 || (try == 1 && !h.s.opts.Lossy) {
			t.Fatalf("%d of %d frames arrived while the receiver held %d: a transport must copy or push back, not lose or block\nsender: %v\nreceiver: %v",
				len(have), hi-lo, len(h.held), counters(h.from), counters(h.to))
		}
		var batch []transport.Frame
		for i := lo; i < hi; i++ {
			if !have[i] {
				batch = append(batch, transport.Frame{Peer: h.to.Addr(), Data: content(holdSize, h.key(i))})
			}
		}
		if n, err := h.from.Send(batch); n != len(batch) || err != nil {
			t.Fatalf("Send of %d frames: %d, %v", len(batch), n, err)
		}
		// Receive until the wire is quiet, stale duplicates included, so
		// that frames sent again do not pile up behind them.
		for len(have) < hi-lo {
			if n, _ := h.take(lo, hi, have, wait); n == 0 {
				break
			}
		}
	}
}

// check verifies every held frame against its key.
func (h *holder) check(when string) {
	h.t.Helper()
	bad := 0
	for i, f := range h.held {
		if !h.s.matches(f.Data, content(holdSize, h.keys[i])) {
			if bad++; bad <= 3 {
				h.t.Errorf("%s: held frame %d changed:\n now %x\nwant %x", when, i, head(f.Data), head(content(holdSize, h.keys[i])))
			}
		}
	}
	if bad > 3 {
		h.t.Errorf("%s: %d held frames changed in all", when, bad)
	}
}

func (h *holder) releaseAll() {
	for i := range h.held {
		h.to.Release(&h.held[i])
		if h.held[i].Data != nil || h.held[i].Ref != 0 {
			h.t.Fatalf("Release left the frame's Data or Ref set")
		}
	}
	h.held, h.keys = h.held[:0], h.keys[:0]
}

// holdSurvives holds a few frames, then receives many more through the
// same buffers: the held frames stay intact.
func (s *suite) holdSurvives(t *testing.T) {
	a, b := s.pair(t)
	h := s.newHolder(t, a, b, 40)
	h.holdRange(0, 8)
	// Let enough frames through to wrap any receive ring, without
	// holding them, a batch at a time (a small ring drops what does not
	// fit).
	flood := stream{id: 41, count: 1024, mtu: min(mtuOf(a, b), 256)}
	rx := make([]transport.Frame, 64)
	for k := 0; k < flood.count/64; k++ {
		part := make([]transport.Frame, 64)
		for i := range part {
			key := flood.key(k*64 + i)
			part[i] = transport.Frame{Peer: b.Addr(), Data: content(flood.size(k*64+i), key)}
		}
		if n, err := a.Send(part); n != len(part) || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
		for seen := 0; seen < len(part); {
			wait := hangGuard
			if s.opts.Lossy {
				wait = 20 * time.Millisecond
			}
			n, err := b.Recv(rx, wait)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				if !s.opts.Lossy {
					t.Fatalf("%d of %d frames arrived while 8 were held", k*64+seen, flood.count)
				}
				break
			}
			seen += n
		}
	}
	h.check("after 1024 later frames")
	h.releaseAll()
	if v, ok := heldNow(b); ok && v != 0 {
		t.Errorf("held_now = %d after every frame was released", v)
	}
}

// holdEverything holds more frames than any transport has buffers, then
// releases them and does it again: nothing lost, nothing blocked, nothing
// changed, and the buffers come back.
func (s *suite) holdEverything(t *testing.T) {
	a, b := s.pair(t)
	h := s.newHolder(t, a, b, 42)
	for round := range 2 {
		base := round * holdMany
		for lo := 0; lo < holdMany; lo += 64 {
			h.holdRange(base+lo, base+min(lo+64, holdMany))
		}
		if len(h.held) != holdMany {
			t.Fatalf("round %d: held %d frames, want %d", round, len(h.held), holdMany)
		}
		if v, ok := heldNow(b); ok && v != holdMany {
			t.Errorf("round %d: held_now = %d with %d frames held", round, v, holdMany)
		}
		h.check("with every frame held")
		h.releaseAll()
		if v, ok := heldNow(b); ok && v != 0 {
			t.Errorf("round %d: held_now = %d after every frame was released", round, v)
		}
	}
	t.Logf("%d holds copied, %d in DMA-able memory", h.copied, h.dma)
}

// holdRefused checks the frames Hold must refuse, and that Release of a
// frame never held is harmless.
func (s *suite) holdRefused(t *testing.T) {
	a, b := s.pair(t)
	built := transport.Frame{Peer: a.Addr(), Data: make([]byte, 8)}
	if _, err := b.Hold(&built); !errors.Is(err, transport.ErrNotHoldable) {
		t.Errorf("Hold of a frame Recv never returned: %v, want ErrNotHoldable", err)
	}
	b.Release(&built) // not held: nothing happens
	h := s.newHolder(t, a, b, 43)
	h.holdRange(0, 1)
	again := h.held[0]
	if _, err := b.Hold(&again); !errors.Is(err, transport.ErrNotHoldable) {
		t.Errorf("Hold of a held frame: %v, want ErrNotHoldable", err)
	}
	// A frame of an earlier Recv: receive one, Recv again, hold the first.
	have := map[int]bool{}
	var old transport.Frame
	for tries := 0; old.Data == nil; tries++ {
		if tries == 50 {
			t.Fatal("frame never arrived")
		}
		if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: content(holdSize, h.key(1))}}); err != nil {
			t.Fatal(err)
		}
		n, err := b.Recv(h.rx, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range h.rx[:n] {
			if binary.LittleEndian.Uint64(f.Data) == h.key(1) && !have[1] {
				old = f
				have[1] = true
			}
		}
	}
	if _, err := b.Recv(h.rx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Hold(&old); !errors.Is(err, transport.ErrNotHoldable) {
		t.Errorf("Hold of a frame of an earlier Recv: %v, want ErrNotHoldable", err)
	}
	h.check("after refused holds")
	h.releaseAll()
}

// sendInPlace sends frames from a registered region: byte-exact, Pending
// back to zero (completion) before the memory is reused, copies honest.
// A region that takes a head (Region.TakesHead) sends a last round whose
// frames carry their first 8 bytes in Frame.Head and the rest from the
// region: each arrives as Head followed by Data.
func (s *suite) sendInPlace(t *testing.T) {
	a, b := s.pair(t)
	const frames = 32
	mem := s.regionMemory(t, a, frames*holdSize)
	r, err := a.Register(mem)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	defer r.Close()
	if s.opts.InPlace && !r.InPlace() {
		t.Fatalf("the transport sends in place (Options.InPlace), but its region says it copies")
	}
	h := s.newHolder(t, a, b, 44)
	have := map[int]bool{}
	refill := func(round int) {
		for i := range frames {
			fill(mem[i*holdSize:(i+1)*holdSize], h.key(round*frames+i))
		}
	}
	rounds, heads := 3, r.TakesHead()
	if heads {
		rounds++
	}
	for round := range rounds {
		lo, hi := round*frames, (round+1)*frames
		refill(round)
		batch := make([]transport.Frame, frames)
		for i := range batch {
			batch[i] = r.Frame(b.Addr(), i*holdSize, holdSize)
			if round == 3 {
				// The key in the head, the rest from the region.
				batch[i] = r.Frame(b.Addr(), i*holdSize+8, holdSize-8)
				batch[i].Head = content(holdSize, h.key(round*frames+i))[:8]
			}
		}
		for tries := 0; ; tries++ {
			if n, err := a.Send(batch); n != frames || err != nil {
				t.Fatalf("Send of %d frames of a region: %d, %v", frames, n, err)
			}
			if !r.InPlace() && r.Pending() != 0 {
				t.Fatalf("a region that is copied has %d sends pending after Send", r.Pending())
			}
			wait := hangGuard
			if s.opts.Lossy {
				wait = 200 * time.Millisecond
			}
			for len(have) < hi {
				if n, _ := h.take(lo, hi, have, wait); n == 0 {
					break
				}
			}
			if len(have) == hi {
				break
			}
			if !s.opts.Lossy || tries == 20 {
				t.Fatalf("round %d: %d of %d frames of a region arrived", round, len(have)-lo, frames)
			}
		}
		h.check("sent from a region")
		h.releaseAll()
		for i := range frames {
			if want := content(holdSize, h.key(round*frames+i)); round == 3 && !s.matches(mem[i*holdSize+8:(i+1)*holdSize], want[8:]) ||
				round < 3 && !s.matches(mem[i*holdSize:(i+1)*holdSize], want) {
				t.Fatalf("round %d: sending changed the region's frame %d", round, i)
			}
		}
		// Completion: the receiver is done with every frame, so Pending
		// falls to zero once it has looked again (the loopback wire
		// completes at the receiver's next Recv).
		for tries := 0; r.Pending() != 0; tries++ {
			if tries == 1000 {
				t.Fatalf("round %d: %d sends still pending", round, r.Pending())
			}
			if _, err := b.Recv(h.rx, time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		// The memory is the caller's again: reuse it for the next round.
	}
	if !r.InPlace() && r.InPlaceSends() != 0 {
		t.Errorf("a region that is copied counted %d in-place sends", r.InPlaceSends())
	}
	if s.opts.InPlace && (r.CopiedSends() != 0 || r.InPlaceSends() < 3*frames) {
		t.Errorf("a transport that sends in place copied %d frames of the region and sent %d in place, want 0 and at least %d\ncounters: %v",
			r.CopiedSends(), r.InPlaceSends(), 3*frames, counters(a))
	}
	if n := r.InPlaceSends() + r.CopiedSends(); n < 3*frames {
		t.Errorf("region counted %d sends (in place or copied), want at least %d", n, 3*frames)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of an idle region: %v", err)
	}
	// A closed region, and memory outside it, are refused.
	if _, err := a.Send([]transport.Frame{r.Frame(b.Addr(), 0, holdSize)}); !errors.Is(err, transport.ErrForeignRegion) {
		t.Errorf("Send from a closed region: %v, want ErrForeignRegion", err)
	}
	r2, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	out := transport.Frame{Peer: b.Addr(), Data: make([]byte, 8), Region: r2}
	if _, err := a.Send([]transport.Frame{out}); !errors.Is(err, transport.ErrForeignRegion) {
		t.Errorf("Send of memory outside its region: %v, want ErrForeignRegion", err)
	}
	rb, err := b.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	if _, err := a.Send([]transport.Frame{rb.Frame(b.Addr(), 0, 8)}); !errors.Is(err, transport.ErrForeignRegion) {
		t.Errorf("Send from another transport's region: %v, want ErrForeignRegion", err)
	}
}

// closeHeld closes a transport while frames are held and in-place sends
// are pending: Close ends the holds and completes the sends, and Release
// afterwards is harmless.
func (s *suite) closeHeld(t *testing.T) {
	a, b := s.pair(t)
	h := s.newHolder(t, a, b, 45)
	h.holdRange(0, 16)
	mem := s.regionMemory(t, a, 4*holdSize)
	r, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	batch := []transport.Frame{r.Frame(b.Addr(), 0, holdSize), r.Frame(b.Addr(), holdSize, holdSize)}
	fill(mem[:holdSize], h.key(100))
	fill(mem[holdSize:2*holdSize], h.key(101))
	if _, err := a.Send(batch); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close with frames held: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close with in-place sends pending: %v", err)
	}
	if p := r.Pending(); p != 0 {
		t.Errorf("%d in-place sends pending after both ends closed", p)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of the region after the transport's: %v", err)
	}
	if v, ok := heldNow(b); ok && v != 0 {
		t.Errorf("held_now = %d after Close", v)
	}
	h.releaseAll() // after Close: nothing happens, nothing panics
	if _, err := b.Hold(&transport.Frame{Ref: 1}); err == nil {
		t.Errorf("Hold after Close succeeded")
	}
}

// regionMemory returns n bytes for a's Register: Options.RegionMemory's,
// or heap memory.
func (s *suite) regionMemory(t *testing.T, a transport.Transport, n int) []byte {
	if s.opts.RegionMemory != nil {
		return s.opts.RegionMemory(t, a, n)
	}
	return make([]byte, n)
}
