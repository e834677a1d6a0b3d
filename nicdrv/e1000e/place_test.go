package e1000e_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// openPlacePair opens a (copying) and b (placing) on two cabled models.
func openPlacePair(t *testing.T) (a, b *e1000e.NIC) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	return nictest.OpenPair(t, func(i int) (*e1000e.NIC, error) {
		o := e1000e.DefaultOptions()
		o.Placement = i == 1
		return e1000e.Open(p.Functions()[i], o)
	})
}

// TestPlacement posts placements in a receive buffer on the emulated
// 82574L: the frames after the pool descriptors ahead land with their
// first 128 bytes in a header buffer and the rest in the placement,
// byte-exact and in posting order, at every size from a minimum frame to
// a full one; frames before and after arrive whole in pool Buffers; short
// placements and a NIC opened without placement are refused; placements
// left posted at Close leave no mapping, fault or violation.
func TestPlacement(t *testing.T) {
	a, b := openPlacePair(t)
	placement(t, a, b, func(n int) []byte { return make([]byte, n) })
}

// TestPlacementVFIO is TestPlacement over real (or QEMU's) 82574Ls
// through VFIO, the placements in hugepage memory: QEMU 7.2's e1000e
// writes a frame it does not split into buffer 0 until it is full, then
// buffer 1, as the model does.
func TestPlacementVFIO(t *testing.T) {
	v := nictest.OpenVFIO(t, vfioWant)
	a, err := e1000e.Open(v.Devices[0], e1000e.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	o := e1000e.DefaultOptions()
	o.Placement = true
	b, err := e1000e.Open(v.Devices[1], o)
	if err != nil {
		_ = a.Close()
		t.Fatal(err)
	}
	for _, n := range []*e1000e.NIC{a, b} {
		if _, err := n.WaitLink(true, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	placement(t, a, b, func(n int) []byte {
		r, err := hugepage.Alloc(n, hugepage.Options{Name: "gomx-e1000e-place-test"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close() })
		return r.Bytes()
	})
}

// TestPlacementPoolAhead: a placing queue keeps as many pool descriptors
// ahead as frames came in pool buffers since its last refill, one on a
// quiet queue (as it starts, and as it takes one frame at a time), so that
// one frame, not eight, arrives before the placements posted next. A
// burst on such a queue waits in the NIC for the next RxBatch calls:
// every frame arrives, none missed.
func TestPlacementPoolAhead(t *testing.T) {
	a, b := openPlacePair(t)
	defer func() {
		for _, n := range []*e1000e.NIC{a, b} {
			if err := n.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	if st := b.RxPlacement(0); st.Ahead != 1 {
		t.Fatalf("just opened: %+v, want one pool descriptor ahead", st)
	}
	free := func(bufs []*nicdrv.Buffer) {
		for _, g := range bufs {
			if err := g.Pool().Free(g); err != nil {
				t.Error(err)
			}
		}
	}
	before, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		nictest.SendFrames(t, a, [][]byte{nictest.PlaceFrame(b.MAC(), a.MAC(), i, 200)})
		free(nictest.RecvFrames(t, b, 1))
	}
	if st := b.RxPlacement(0); st.Ahead != 1 {
		t.Errorf("after frames one at a time: %+v, want one pool descriptor ahead", st)
	}
	var burst [][]byte
	for i := range 12 {
		burst = append(burst, nictest.PlaceFrame(b.MAC(), a.MAC(), 100+i, 1514))
	}
	nictest.SendFrames(t, a, burst)
	got := nictest.RecvFrames(t, b, len(burst))
	for i, g := range got {
		if !bytes.Equal(g.Data, burst[i]) {
			t.Errorf("burst frame %d: %d bytes, not the frame sent", i, len(g.Data))
		}
	}
	free(got)
	after, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after.RxMissed != before.RxMissed || after.RxFrames-before.RxFrames != 10+uint64(len(burst)) {
		t.Errorf("%d frames received, %d missed; want %d and none", after.RxFrames-before.RxFrames, after.RxMissed-before.RxMissed, 10+len(burst))
	}
}

// placement is TestPlacement's body over a copying NIC a cabled to b,
// opened with placement, with the placements in memory of alloc; it
// closes both.
func placement(t *testing.T, a, b *e1000e.NIC, alloc func(int) []byte) {
	info := b.Info()
	if info.PlaceHeader != 128 || info.PlaceMin != info.MaxFrame+4-34 {
		t.Fatalf("Info: PlaceHeader %d, PlaceMin %d (MaxFrame %d)", info.PlaceHeader, info.PlaceMin, info.MaxFrame)
	}
	sizes := []int{60, 127, 128, 129, 200, 1000, 1513, 1514}
	placed := 2 * len(sizes)
	const stride = 1514 - 128
	mem := alloc(placed*stride + info.PlaceMin)
	ps, unmap := nictest.Placements(t, b, mem, placed, stride)

	if info.PlaceOnly != 0 {
		t.Errorf("Info().PlaceOnly %d: the 82574L keeps no queue for placement alone", info.PlaceOnly)
	}
	if err := b.CancelRx(0); !errors.Is(err, nicdrv.ErrNotSupported) {
		t.Errorf("CancelRx(0): %v, want ErrNotSupported (no queue for placement alone)", err)
	}
	if err := b.CancelRx(7); !errors.Is(err, nicdrv.ErrBadQueue) {
		t.Errorf("CancelRx(7): %v, want ErrBadQueue", err)
	}
	nictest.PlaceAhead(t, a, b, ps, func(i, _ int) int { return sizes[i%len(sizes)] })

	// An IPv4/UDP frame the NIC splits at its 42 bytes of headers: whole
	// in a pool Buffer, and in a placement its payload after them.
	udp := udpFrame(b.MAC(), a.MAC(), 1514)
	ahead := b.RxPlacement(0).Ahead
	if k, err := b.PostRx(0, ps[:1]); k != 1 || err != nil {
		t.Fatalf("PostRx: %d: %v", k, err)
	}
	var fs [][]byte
	for range ahead + 1 {
		fs = append(fs, udp)
	}
	nictest.SendFrames(t, a, fs)
	for i, g := range nictest.RecvFrames(t, b, len(fs)) {
		ext, _ := g.Attached()
		switch {
		case i < ahead && (ext != nil || !bytes.Equal(g.Data, udp)):
			t.Errorf("UDP frame %d in a pool buffer: %d bytes, placed %v: not the frame whole", i, len(g.Data), ext != nil)
		case i == ahead && (!bytes.Equal(g.Data, udp[:42]) || !bytes.Equal(ext, udp[42:])):
			t.Errorf("UDP frame in a placement: %d + %d bytes, want its 42 bytes of headers and the rest", len(g.Data), len(ext))
		}
		_ = g.Pool().Free(g)
	}

	// Placements left posted at Close are consumed and unreachable.
	nictest.ClosePlacing(t, a, b, ps, unmap)
}

// TestPlacementOptions: Placement is refused with header split, naming
// the conflict.
func TestPlacementOptions(t *testing.T) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	o := e1000e.DefaultOptions()
	o.Placement, o.HeaderSplit = true, true
	if n, err := e1000e.Open(p.Functions()[0], o); err == nil {
		_ = n.Close()
		t.Errorf("Open with Placement and HeaderSplit succeeded")
	}
}

// TestPlacementPooledPosting: a Placement without memory posts a pool
// descriptor in line with the placements: the frame that takes it arrives
// whole in a pool Buffer, the one after it takes the next placement, and
// the pool descriptor counts as posted and consumed as a placement does.
func TestPlacementPooledPosting(t *testing.T) {
	a, b := openPlacePair(t)
	defer func() {
		for _, n := range []*e1000e.NIC{a, b} {
			if err := n.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	info := b.Info()
	mem := make([]byte, 2*info.PlaceMin)
	ps, unmap := nictest.Placements(t, b, mem, 2, info.PlaceMin)
	defer unmap()
	st := b.RxPlacement(0)
	post := []nicdrv.Placement{ps[0], {}, ps[1]}
	if k, err := b.PostRx(0, post); k != len(post) || err != nil {
		t.Fatalf("PostRx: took %d of %d: %v", k, len(post), err)
	}
	if got := b.RxPlacement(0); got.Posted != st.Posted+3 || got.Ahead != st.Ahead+3 {
		t.Fatalf("after posting: %+v (before %+v), want three more posted and ahead", got, st)
	}
	var frames [][]byte
	for i := range st.Ahead + 3 {
		frames = append(frames, nictest.PlaceFrame(b.MAC(), a.MAC(), i, 1000))
	}
	nictest.SendFrames(t, a, frames)
	got := nictest.RecvFrames(t, b, len(frames))
	for i, g := range got {
		k := i - st.Ahead // which posting it took: -1 and below for the pool ones ahead
		switch {
		case k == 0 || k == 2:
			p := ps[k/2]
			if at, _ := g.Attached(); len(at) == 0 || &at[0] != &p.Mem[0] || !bytes.Equal(append(append([]byte(nil), g.Data...), at...), frames[i]) {
				t.Errorf("frame %d: not in placement %d", i, k/2)
			}
		default:
			if at, _ := g.Attached(); len(at) != 0 || !bytes.Equal(g.Data, frames[i]) {
				t.Errorf("frame %d: not whole in a pool Buffer", i)
			}
		}
		if err := g.Pool().Free(g); err != nil {
			t.Error(err)
		}
	}
	if got := b.RxPlacement(0); got.Consumed != st.Consumed+3 {
		t.Errorf("after the frames: %+v, want the three postings consumed", got)
	}
}
