package ixgbe_test

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// A batch of frames with memory attached asks the NIC for one write-back,
// on its last descriptor, not one a frame; every attachment of the batch
// still completes at the first reclaim after the NIC sent it, and the
// frames arrive byte-exact. A batch that ends with a plain frame after
// attached ones asks on the plain frame's descriptor, which covers them.
func TestAttachedOneWriteBackPerBatch(t *testing.T) {
	p, n := openPair(t, ixgbe.DefaultOptions())
	a, b := n[0], n[1]
	const batches, attached = 6, 12 // 24 descriptors a batch: below RSEvery (32)
	mem := make([]byte, attached*2048)
	mp, err := a.Pool(0).DMA().Map(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer p.IOMMU().Unmap(mp)
	var done nictest.Completions
	seq := uint64(0xB1000)
	for round := range batches {
		plain := 0
		if round == batches-1 {
			plain = 3
		}
		bufs := make([]*nicdrv.Buffer, attached+plain)
		if _, err := a.Pool(0).Alloc(bufs); err != nil {
			t.Fatal(err)
		}
		var want [][]byte
		for i, buf := range bufs {
			off := i * 2048
			fr := nictest.Frame(make([]byte, 2048), b.MAC(), a.MAC(), seq, nictest.Size(seq))
			seq++
			want = append(want, fr)
			if i >= attached {
				copy(buf.SetLen(len(fr)), fr)
				continue
			}
			copy(mem[off:], fr[14:])
			iova, _, err := mp.IOVA(off)
			if err != nil {
				t.Fatal(err)
			}
			copy(buf.SetLen(14), fr)
			buf.Attach(mem[off:off+len(fr)-14], iova, &done)
		}
		wb := p.Accesses(0).TxDescWriteBacks
		if k, err := a.TxBatch(0, bufs); k != len(bufs) || err != nil {
			t.Fatalf("batch %d: TxBatch took %d of %d: %v", round, k, len(bufs), err)
		}
		for i, w := range want {
			if _, got := arrival(t, b); string(got) != string(w) {
				t.Fatalf("batch %d, frame %d: %d bytes arrived, not the %d sent", round, i, len(got), len(w))
			}
		}
		if got := p.Accesses(0).TxDescWriteBacks - wb; got != 1 {
			t.Errorf("batch %d of %d attached and %d plain frames: %d descriptor write-backs, want 1", round, attached, plain, got)
		}
		if _, err := a.TxBatch(0, nil); err != nil { // reclaims
			t.Fatal(err)
		}
		if c := done.Count(); c != int64((round+1)*attached) {
			t.Fatalf("after batch %d was sent and reclaimed, %d attachments completed, want %d", round, c, (round+1)*attached)
		}
	}
}
