package nictest

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// The helpers of the drivers' payload placement tests (nicdrv.Placer):
// frames whose every byte says which frame it is, sending and receiving
// them on queue 0, placements cut from the caller's memory, the checks of
// where received frames landed, and the run every placing driver's test
// makes (PlaceAhead).

// PlacingNIC is a NIC that places payloads.
type PlacingNIC interface {
	nicdrv.NIC
	nicdrv.Placer
}

// PlaceAhead runs what every placing driver must do on queue 0 of b, an
// idle queue of a NIC opened with placement, cabled to a, opened without:
// a refuses PostRx (ErrNotSupported) and b a placement shorter than
// Info().PlaceMin (ErrFrameSize); b takes every one of ps, and
// RxPlacement counts them posted with the pool descriptors ahead before
// them. Then a sends ahead+len(ps)+12 frames, frame i of
// frameSize(i, ahead) bytes: once every frame up to the last placement is written back and
// none delivered, Ahead has not moved; received, they land as
// CheckPlacedFrames says, with headers of Info().PlaceHeader bytes; and
// every placement is counted consumed. The frames' buffers go back to
// their pools; ps stays mapped.
func PlaceAhead(t *testing.T, a, b PlacingNIC, ps []nicdrv.Placement, frameSize func(i, ahead int) int) {
	t.Helper()
	info := b.Info()
	placed := len(ps)
	if _, err := a.PostRx(0, ps[:1]); !errors.Is(err, nicdrv.ErrNotSupported) {
		t.Errorf("PostRx on a NIC opened without Placement: %v, want ErrNotSupported", err)
	}
	short := nicdrv.Placement{Mem: ps[0].Mem[:info.PlaceMin-1], IOVA: ps[0].IOVA}
	if k, err := b.PostRx(0, []nicdrv.Placement{short}); k != 0 || !errors.Is(err, nicdrv.ErrFrameSize) {
		t.Errorf("PostRx of a %d-byte placement: %d taken, %v; want 0 and ErrFrameSize", len(short.Mem), k, err)
	}

	st := b.RxPlacement(0)
	if st.Ahead == 0 || st.Posted != 0 {
		t.Fatalf("idle queue: %+v, want pool descriptors ahead and nothing posted", st)
	}
	ahead := st.Ahead
	if k, err := b.PostRx(0, ps); k != placed || err != nil {
		t.Fatalf("PostRx: %d of %d taken: %v", k, placed, err)
	}
	if st := b.RxPlacement(0); st.Ahead != ahead+placed || st.Posted != uint64(placed) || st.Consumed != 0 {
		t.Fatalf("after posting: %+v", st)
	}
	// ahead frames to pool buffers, placed to the placements, then more
	// to pool buffers.
	var frames [][]byte
	for i := range ahead + placed + 12 {
		frames = append(frames, PlaceFrame(b.MAC(), a.MAC(), i, frameSize(i, ahead)))
	}
	before, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	SendFrames(t, a, frames)
	// Written back and not delivered, the frames still come before a
	// placement posted now: Ahead does not move until RxBatch.
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		s, err := b.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if s.RxFrames-before.RxFrames >= uint64(ahead+placed) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d frames written back", s.RxFrames-before.RxFrames, ahead+placed)
		}
	}
	if st := b.RxPlacement(0); st.Ahead != ahead+placed {
		t.Errorf("every descriptor written back, none delivered: Ahead %d, want %d", st.Ahead, ahead+placed)
	}
	got := RecvFrames(t, b, len(frames))
	CheckPlacedFrames(t, got, frames, ps, ahead, info.PlaceHeader)
	for _, g := range got {
		if err := g.Pool().Free(g); err != nil {
			t.Error(err)
		}
	}
	if st := b.RxPlacement(0); st.Consumed != uint64(placed) {
		t.Errorf("after the frames: %+v, want %d consumed", st, placed)
	}
}

// ClosePlacing closes b, a placing NIC, with 4 of ps posted on queue 0
// and a, the NIC cabled to it, and fails t unless the placements left
// posted are counted consumed and b refuses PostRx once closed
// (ErrClosed). It calls unmap, which unmaps ps, once b is closed.
func ClosePlacing(t testing.TB, a, b PlacingNIC, ps []nicdrv.Placement, unmap func()) {
	t.Helper()
	if k, err := b.PostRx(0, ps[:4]); k != 4 || err != nil {
		t.Fatalf("PostRx: %d: %v", k, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if st := b.RxPlacement(0); st.Consumed != st.Posted {
		t.Errorf("after Close: %+v, want every placement consumed", st)
	}
	unmap()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PostRx(0, ps[:1]); !errors.Is(err, nicdrv.ErrClosed) {
		t.Errorf("PostRx after Close: %v", err)
	}
}

// CheckPlacedFrames checks received frames against the frames sent: the
// ahead first and those after the placements whole in pool Buffers, the
// others split between a header buffer of the frame's first hdr bytes and
// their placement, which holds the rest at its own address.
func CheckPlacedFrames(t testing.TB, got []*nicdrv.Buffer, frames [][]byte, ps []nicdrv.Placement, ahead, hdr int) {
	t.Helper()
	placed := len(ps)
	for i, g := range got {
		fr := frames[i]
		ext, iova := g.Attached()
		inPlace := i >= ahead && i < ahead+placed
		if inPlace != (ext != nil) {
			t.Fatalf("frame %d: placed %v, want %v", i, ext != nil, inPlace)
		}
		if !inPlace {
			if g.Next != nil || !bytes.Equal(g.Data, fr) {
				t.Fatalf("frame %d in a pool buffer: %d bytes in %d buffers, want the %d-byte frame whole", i, g.FrameLen(), g.Segments(), len(fr))
			}
			continue
		}
		p := ps[i-ahead]
		h := min(hdr, len(fr))
		if !bytes.Equal(g.Data, fr[:h]) || !bytes.Equal(ext, fr[h:]) {
			t.Fatalf("frame %d (%d bytes): header %d bytes, placed %d: not the frame's", i, len(fr), len(g.Data), len(ext))
		}
		if iova != p.IOVA || len(ext) > 0 && &ext[0] != &p.Mem[0] {
			t.Fatalf("frame %d landed outside its placement", i)
		}
		if !bytes.Equal(p.Mem[:len(ext)], fr[h:]) {
			t.Fatalf("frame %d: the placement's memory does not hold its payload", i)
		}
	}
}

// PlaceFrame is frame seq of n bytes from src to dst, of the local
// experimental EtherType 0x88B5, not IP (so no NIC splits it at its
// headers): a pattern that names its sequence number in every byte.
func PlaceFrame(dst, src nicdrv.MAC, seq, n int) []byte {
	fr := make([]byte, n)
	copy(fr[0:6], dst[:])
	copy(fr[6:12], src[:])
	fr[12], fr[13] = 0x88, 0xB5
	for i := 14; i < n; i++ {
		fr[i] = byte(seq*31 + i)
	}
	return fr
}

// SendFrames sends frames, in order, on queue 0 of n, in batches of 32.
func SendFrames(t testing.TB, n nicdrv.NIC, frames [][]byte) {
	t.Helper()
	for len(frames) > 0 {
		bufs := make([]*nicdrv.Buffer, min(len(frames), 32))
		k, err := n.Pool(0).Alloc(bufs)
		if err != nil && k == 0 {
			t.Fatalf("alloc: %v", err)
		}
		for i := range k {
			copy(bufs[i].SetLen(len(frames[i])), frames[i])
		}
		sent, err := n.TxBatch(0, bufs[:k])
		if err != nil {
			t.Fatalf("TX: %v", err)
		}
		_ = n.Pool(0).Free(bufs[sent:k]...)
		frames = frames[sent:]
	}
}

// RecvFrames receives k frames from queue 0 of n, within a bounded wait.
func RecvFrames(t testing.TB, n nicdrv.NIC, k int) []*nicdrv.Buffer {
	t.Helper()
	var got []*nicdrv.Buffer
	buf := make([]*nicdrv.Buffer, 32)
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < k {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d frames", len(got), k)
		}
		m, err := n.RxBatch(0, buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:m]...)
		if m == 0 {
			runtime.Gosched()
		}
	}
	return got
}

// Placements maps mem in n's DMA domain and cuts count placements of
// Info().PlaceMin bytes from it, stride bytes apart; the function it
// returns unmaps mem.
func Placements(t testing.TB, n nicdrv.NIC, mem []byte, count, stride int) ([]nicdrv.Placement, func()) {
	t.Helper()
	info := n.Info()
	m, err := n.Pool(0).DMA().Map(mem)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]nicdrv.Placement, count)
	for i := range ps {
		iova, contig, err := m.IOVA(i * stride)
		if err != nil || contig < info.PlaceMin {
			t.Fatalf("placement %d: IOVA-contiguous for %d bytes (%v): the emulated IOMMU maps a heap buffer in one piece, VFIO a hugepage", i, contig, err)
		}
		ps[i] = nicdrv.Placement{Mem: mem[i*stride : i*stride+info.PlaceMin], IOVA: iova}
	}
	return ps, func() {
		if err := n.Pool(0).DMA().Unmap(m); err != nil {
			t.Error(err)
		}
	}
}

// OpenPair opens NIC 0 and NIC 1 of a cabled pair with open and waits
// (5 s at most) until both see their link up. On failure it closes what it
// opened and fails t; the caller closes the NICs.
func OpenPair[N nicdrv.NIC](t testing.TB, open func(i int) (N, error)) (a, b N) {
	t.Helper()
	var err error
	if a, err = open(0); err != nil {
		t.Fatal(err)
	}
	if b, err = open(1); err != nil {
		_ = a.Close()
		t.Fatal(err)
	}
	for _, n := range []N{a, b} {
		if _, err := n.WaitLink(true, 5*time.Second); err != nil {
			_, _ = a.Close(), b.Close()
			t.Fatal(err)
		}
	}
	return a, b
}
