package ixgbe

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drvtest"
)

// FuzzRxWriteBacks feeds arbitrary advanced write-back descriptors (what a
// device, or a broken one, may write into the RX ring) to the receive path,
// with and without header split. The oracle reads the bytes itself, at the
// datasheet's offsets (hdr_info at 2, status and errors at 8, length at
// 12), and restates the rule: the driver consumes descriptors in order up
// to the first without DD; a frame is its header buffer (when split, SPH,
// at its first descriptor) and the packet buffers of its descriptors up to
// EOP; it is delivered when every length fits its buffer (2 KiB, a header
// 256 bytes), the header is at least 14 bytes, the frame is 14 bytes to MaxFrame long in at most
// MaxFrame/2048+2 buffers, and RXE is clear. Delivered frames have exactly
// those lengths, and every buffer comes back to the pool.
func FuzzRxWriteBacks(f *testing.F) {
	one := make([]byte, 16)
	one[8], one[12] = 3, 60 // DD EOP, 60 bytes
	f.Add(one, false, uint16(1518))
	f.Add(one, false, uint16(0)) // MaxFrame 1514, the least
	two := make([]byte, 48)
	two[8], two[12], two[13] = 1, 0, 8 // DD, 2048 bytes, no EOP
	two[16+8], two[16+12] = 3, 100
	two[32+8] = 0 // not done
	f.Add(two, false, uint16(9018))
	split := make([]byte, 16)
	binary.LittleEndian.PutUint16(split[2:], 1<<15|42<<5)
	split[8], split[12] = 3, 200
	f.Add(split, true, uint16(1518))
	bad := make([]byte, 16)
	bad[8], bad[11], bad[12] = 3, 1<<5, 60 // RXE
	f.Add(bad, false, uint16(1518))

	pool, pools := fuzzPools(f, 512)
	f.Fuzz(func(t *testing.T, raw []byte, split bool, maxFrame uint16) {
		const size = 32
		mf := int(maxFrame)%(maxJumbo-minFrame+1) + minFrame
		n := &NIC{d: drv.Device{Regs: drvtest.TailRegs{}}, pools: pools, opts: Options{MaxFrame: mf, HeaderSplit: split, Queues: 1}}
		ring := make([]byte, size*16)
		r := newRxQueue(n, 0, ring, 0)
		r.refill()
		r.rdt = r.tail
		k := min(len(raw)/16, int(r.rdt))
		copy(ring, raw[:16*k])
		// The oracle.
		var want []int
		parts, bytes, bad := 0, 0, false
		maxParts := (mf+2047)/2048 + 1
		for i := 0; i < k; i++ {
			d := raw[16*i:]
			st := binary.LittleEndian.Uint32(d[8:])
			if st&1 == 0 {
				break
			}
			hi := binary.LittleEndian.Uint16(d[2:])
			if split && hi&0x8000 != 0 && parts == 0 && !bad {
				if h := int(hi>>5) & 0x3FF; h >= 14 && h <= 256 {
					parts, bytes = parts+1, bytes+h
				} else {
					bad = true
				}
			}
			if l := int(binary.LittleEndian.Uint16(d[12:])); l > 2048 {
				bad = true
			} else if l > 0 {
				parts, bytes = parts+1, bytes+l
			}
			if parts > maxParts || bytes > mf {
				bad = true
			}
			if st&2 != 0 {
				if !bad && parts > 0 && bytes >= 14 && st&(1<<29) == 0 {
					want = append(want, bytes)
				}
				parts, bytes, bad = 0, 0, false
			}
		}
		out := make([]*nicdrv.Buffer, 64)
		got, err := r.batch(out)
		// A failed check below must not leave buffers out of the pools
		// the iterations share: the next input would then fail for this
		// one's fault, and the fuzzer would report (and minimize) that
		// input instead of this one.
		returned := false
		t.Cleanup(func() {
			if !returned {
				_ = pool.Free(out[:got]...)
				_ = r.Release()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != len(want) {
			t.Fatalf("delivered %d frames, want %d (%v)", got, len(want), want)
		}
		for i, b := range out[:got] {
			if b.FrameLen() != want[i] {
				t.Fatalf("frame %d of %d bytes, want %d", i, b.FrameLen(), want[i])
			}
			for c := b; c != nil; c = c.Next {
				if len(c.Data) > c.Cap() {
					t.Fatal("a buffer's Data beyond its capacity")
				}
			}
		}
		returned = true
		if err := pool.Free(out[:got]...); err != nil {
			t.Fatal(err)
		}
		if err := r.Release(); err != nil {
			t.Fatal(err)
		}
		drvtest.CheckReturned(t, pool, pools)
	})
}

// fuzzPools returns a pool of buffers and the buffer pools of one queue
// over it (packet buffers from the pool, and 64 header buffers), on a
// one-port model's IOMMU, all closed when f ends.
func fuzzPools(f *testing.F, buffers int) (*nicdrv.Pool, *drv.Pools) {
	plat, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { plat.Close() })
	return drvtest.Pools(f, plat.IOMMU(), buffers)
}
