package nictest

import (
	"runtime"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/nicdrv"
)

// The helpers of the drivers' payload placement tests (nicdrv.Placer):
// frames whose every byte says which frame it is, sending and receiving
// them on queue 0, and placements cut from the caller's memory.

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
