package nictest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/pci"
)

// Completions is a nicdrv.Completion that counts how many attachments
// completed, for tests of Buffer.Attach.
type Completions struct{ n atomic.Int64 }

// Done implements nicdrv.Completion.
func (c *Completions) Done() { c.n.Add(1) }

// Count is how many attachments have completed.
func (c *Completions) Count() int64 { return c.n.Load() }

// attachMemory allocates size bytes with mo, pageable where a's DMA
// accepts it (a model, when the locked-memory limit is reached), and maps
// them for a's NIC; the test's cleanup unmaps and frees them.
func attachMemory(t *testing.T, a nicdrv.NIC, size int, mo hugepage.Options) ([]byte, *pci.Mapping) {
	t.Helper()
	mo.AllowPageable = pci.AcceptsPageable(a.Pool(0).DMA())
	region, err := hugepage.Alloc(size, mo)
	if err != nil {
		t.Fatalf("memory to attach: %v", err)
	}
	t.Cleanup(func() { region.Close() })
	mem := region.Bytes()[:size]
	m, err := a.Pool(0).DMA().Map(mem)
	if err != nil {
		t.Fatalf("map memory to attach: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Pool(0).DMA().Unmap(m); err != nil {
			t.Errorf("unmap: %v", err)
		}
	})
	return mem, m
}

// attached sends frames whose payload is attached memory (Buffer.Attach):
// they arrive byte-exact, each attachment completes once the NIC sent it,
// the memory is not written, a Buffer freed unsent completes too, and a
// checksum offload with an attachment is refused with ErrNotSupported.
func (s *suite) attached(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	a, b := r.NICs[0], r.NICs[1]
	const frames = 16
	// Hugepage (or locked) memory, as a real device behind VFIO, with or
	// without an IOMMU, can reach at a fixed address (pageable for a
	// model, when the locked-memory limit is reached).
	mem, m := attachMemory(t, a, frames*2048, hugepage.DefaultOptions())
	var done Completions
	bufs := alloc(t, a, frames)
	for i, buf := range bufs {
		off := i * 2048
		seq := uint64(0xA7000 + i)
		fr := Frame(mem[off:off+2048], b.MAC(), a.MAC(), seq, Size(seq))
		copy(buf.SetLen(14), fr[:14])
		iova, contig, err := m.IOVA(off + 14)
		if err != nil || contig < len(fr)-14 {
			t.Fatalf("IOVA of frame %d: %v (%d contiguous bytes)", i, err, contig)
		}
		buf.Attach(fr[14:], iova, &done)
	}
	want := append([]byte(nil), mem...)
	sendAll(t, a, 0, bufs)
	for i := range frames {
		got := recvOne(t, b)
		if got == nil {
			t.Fatalf("%d of %d frames with attached payloads arrived", i, frames)
		}
		if seq, bad := checkFrame(got, b.MAC(), a.MAC()); bad != "" || seq != uint64(0xA7000+i) {
			t.Fatalf("frame %d with an attached payload: seq %d: %s", i, seq, bad)
		}
	}
	deadline := time.Now().Add(hang)
	for done.Count() != frames {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d attachments completed after their frames arrived", done.Count(), frames)
		}
		if _, err := a.TxBatch(0, nil); err != nil { // an empty batch reclaims
			t.Fatal(err)
		}
	}
	if string(mem) != string(want) {
		t.Error("sending changed the attached memory")
	}

	// Freed unsent: the memory is the caller's again at once.
	one := alloc(t, a, 1)
	iova, _, _ := m.IOVA(0)
	one[0].SetLen(14)
	one[0].Attach(mem[14:100], iova+14, &done)
	one[0].Flags = nicdrv.FlagTxIPChecksum
	if n, err := a.TxBatch(0, one); n != 0 || !errors.Is(err, nicdrv.ErrNotSupported) {
		t.Errorf("checksum offload with an attachment: took %d, %v; want 0, ErrNotSupported", n, err)
	}
	if err := a.Pool(0).Free(one...); err != nil {
		t.Fatal(err)
	}
	if done.Count() != frames+1 {
		t.Errorf("a Buffer freed unsent did not complete its attachment")
	}
}

// attachedAcrossPages sends frames whose attached payload straddles a
// 4 KiB page boundary of base-page memory, which an IOMMU maps at
// contiguous IOVAs while the physical pages behind them are wherever the
// kernel put them: every frame must arrive byte-exact. A driver that gave
// the NIC one descriptor for such a payload would lose frames under QEMU
// 7.2, which maps each TX descriptor's buffer in one piece and drops the
// frame (writing DD back all the same) where the pages are not adjacent.
// Without an IOMMU the IOVAs are physical and not contiguous across the
// boundary, so there is nothing to attach and the case skips.
func (s *suite) attachedAcrossPages(t *testing.T) {
	r := s.rig(t, Config{Queues: 1})
	a, b := r.NICs[0], r.NICs[1]
	const frames = 16
	mo := hugepage.DefaultOptions()
	mo.PageSize = hugepage.Size4K
	mem, m := attachMemory(t, a, (2*frames+2)*4096, mo)
	var done Completions
	bufs := alloc(t, a, frames)
	seqs := make([]uint64, 0, frames)
	for seq := uint64(0xA8000); len(seqs) < frames; seq++ {
		if Size(seq) >= 1200 {
			seqs = append(seqs, seq)
		}
	}
	for i, buf := range bufs {
		size := Size(seqs[i])
		off := (2*i+1)*4096 - size/2 // the payload crosses page 2i+1's start
		fr := Frame(mem[off:off+size], b.MAC(), a.MAC(), seqs[i], size)
		copy(buf.SetLen(14), fr[:14])
		iova, contig, err := m.IOVA(off + 14)
		if err != nil {
			t.Fatalf("IOVA of frame %d: %v", i, err)
		}
		if contig < size-14 {
			_ = a.Pool(0).Free(bufs...)
			t.Skipf("the DMA domain maps base pages at IOVAs that are not contiguous across a page (%d of %d bytes): no IOMMU, nothing to attach across pages", contig, size-14)
		}
		buf.Attach(fr[14:], iova, &done)
	}
	sendAll(t, a, 0, bufs)
	for i := range frames {
		got := recvOne(t, b)
		if got == nil {
			t.Fatalf("%d of %d frames with payloads across a page arrived", i, frames)
		}
		if seq, bad := checkFrame(got, b.MAC(), a.MAC()); bad != "" || seq != seqs[i] {
			t.Fatalf("frame %d with a payload across a page: seq %d (want %d): %s", i, seq, seqs[i], bad)
		}
	}
	deadline := time.Now().Add(hang)
	for done.Count() != frames {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d attachments completed after their frames arrived", done.Count(), frames)
		}
		if _, err := a.TxBatch(0, nil); err != nil { // an empty batch reclaims
			t.Fatal(err)
		}
	}
}
