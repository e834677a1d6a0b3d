package shm

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// A frame of a region in the sender's pool reaches the receiver as a
// reference: its Data lies in the receiver's mapping of the sender's
// segment (a byte the sender changes after Send, which the contract
// forbids and this test does on purpose, is what the receiver reads), the
// send completes only at the receiver's next Recv, and a receiver that
// goes away completes what was sent to it.
func TestSendInPlaceByReference(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer a.Close()
	defer b.Close()
	p := testPool(t, a)
	mem, err := p.Alloc(8192)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = byte(i)
	}
	r, err := a.Register(mem)
	if err != nil {
		t.Fatal(err)
	}
	if !r.InPlace() {
		t.Fatal("a region of the pool copies")
	}
	const off, size = 100, 1000
	if _, err := a.Send([]transport.Frame{r.Frame(b.Addr(), off, size)}); err != nil {
		t.Fatal(err)
	}
	mem[off] = 0xEE // only a reference can carry this to the receiver
	in := make([]transport.Frame, 4)
	n, err := b.Recv(in, 5*time.Second)
	if err != nil || n != 1 {
		t.Fatalf("Recv: %d, %v", n, err)
	}
	f := in[0]
	if len(f.Data) != size || f.Data[0] != 0xEE || f.Data[1] != byte(off+1) {
		t.Fatalf("received %d bytes starting %x: not the sender's memory", len(f.Data), f.Data[:min(4, len(f.Data))])
	}
	seg, base, _ := p.Locate(mem)
	inSeg := false
	if !b.PeerSegment(a.Addr(), seg, func(m []byte) { inSeg = &m[base+off] == &f.Data[0] }) || !inSeg {
		t.Error("the received Data does not point into the receiver's mapping of the sender's segment")
	}
	if r.Pending() != 1 {
		t.Errorf("Pending = %d while the receiver may still read the frame, want 1", r.Pending())
	}
	if _, err := b.Recv(in, 0); err != nil {
		t.Fatal(err)
	}
	if r.Pending() != 0 {
		t.Errorf("Pending = %d after the receiver's next Recv, want 0", r.Pending())
	}
	if got := counter(a, "shm frames sent in place"); got != 1 || r.CopiedSends() != 0 {
		t.Errorf("%d frames counted in place, %d copied; want 1, 0", got, r.CopiedSends())
	}

	// A receiver that goes away completes what it never read.
	if _, err := a.Send([]transport.Frame{r.Frame(b.Addr(), 0, 64)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for tries := 0; r.Pending() != 0; tries++ {
		if tries == 5000 {
			t.Fatalf("%d sends pending after the receiver closed", r.Pending())
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Errorf("Close of a completed region: %v", err)
	}
}

// A reference naming memory the producer did not share, or past its
// segment, or over the MTU, is dropped and counted.
func TestResolveRefusesForeignMemory(t *testing.T) {
	a, b := newTestPair(t, Options{})
	defer a.Close()
	defer b.Close()
	r := &inRing{segs: map[uint32]segment{7: {mem: make([]byte, 4096)}}}
	le := binary.LittleEndian
	for _, c := range []struct {
		id      uint32
		n       uint32
		off     uint64
		allowed bool
	}{
		{7, 100, 0, true},
		{7, 100, 3996, true},
		{8, 100, 0, false},       // not shared
		{7, 100, 3997, false},    // past the segment
		{7, 1, 1 << 63, false},   // offset overflow
		{7, 1<<31 + 1, 0, false}, // over the MTU
	} {
		var rec [refLen]byte
		le.PutUint32(rec[0:], c.id)
		le.PutUint32(rec[4:], c.n)
		le.PutUint64(rec[8:], c.off)
		before := b.cnt.refBad.Load()
		got := b.resolve(r, rec[:])
		if (got != nil) != c.allowed || (got != nil && len(got) != int(c.n)) {
			t.Errorf("reference %+v resolved to %d bytes (nil: %v)", c, len(got), got == nil)
		}
		if !c.allowed && b.cnt.refBad.Load() != before+1 {
			t.Errorf("reference %+v refused without being counted", c)
		}
	}
}
