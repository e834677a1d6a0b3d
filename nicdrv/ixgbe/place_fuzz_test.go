package ixgbe

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drvtest"
)

// FuzzPlaceWriteBacks feeds arbitrary write-back descriptors to a placing
// queue whose ring holds the pool descriptors ahead and then placements.
// The oracle reads the bytes at the datasheet's offsets and restates the
// rule: descriptors are consumed in order up to the first without DD; a
// frame is one descriptor with EOP (one that follows a descriptor without
// EOP is dropped with it); a pool descriptor's frame is its header (0 when
// SPH is clear) and packet bytes, delivered when the header is at most 64
// bytes, the packet fits behind it in the 2 KiB buffer, the frame is 14
// bytes to MaxFrame long and RXE is clear; a placed descriptor's frame is
// delivered when SPH is set, the header is 14 to 64 bytes, the packet
// fits its placement and RXE is clear, with the placement attached. Every
// placement taken is counted consumed, and every buffer comes back.
func FuzzPlaceWriteBacks(f *testing.F) {
	seed := make([]byte, 16*10)
	for i := range 10 {
		d := seed[16*i:]
		binary.LittleEndian.PutUint16(d[2:], 1<<15|64<<5)
		d[8], d[12] = 3, 200 // DD EOP, 200 bytes after the header
	}
	f.Add(seed)
	bad := make([]byte, 32)
	bad[8], bad[12] = 1, 10 // DD, no EOP
	bad[16+8], bad[16+12] = 3, 10
	f.Add(bad)

	pool, pools := fuzzPools(f, 256)
	const mf, posted = 1518, 12
	mem := make([]byte, posted*2048)
	f.Fuzz(func(t *testing.T, raw []byte) {
		const size = 32
		n := &NIC{d: drv.Device{Regs: drvtest.TailRegs{}}, pools: pools, opts: Options{MaxFrame: mf, Placement: true, Queues: 1},
			info: nicdrv.Info{PlaceHeader: placeHeader, PlaceMin: mf - placeHeader}}
		ring := make([]byte, size*16)
		r := newRxQueue(n, 0, ring, 0)
		n.rx = []*rxQueue{r}
		r.refill()
		ahead := int(r.tail)
		if k, err := r.post(drvtest.Placements(mem, posted, mf-placeHeader)); k != posted || err != nil {
			t.Fatalf("post: %d, %v", k, err)
		}
		k := min(len(raw)/16, int(r.rdt))
		copy(ring, raw[:16*k])
		var want []drvtest.PlacedFrame
		consumed, open := 0, false
		for i := 0; i < k; i++ {
			d := raw[16*i:]
			st := binary.LittleEndian.Uint32(d[8:])
			if st&1 == 0 {
				break
			}
			hi := binary.LittleEndian.Uint16(d[2:])
			h, l := 0, int(binary.LittleEndian.Uint16(d[12:]))
			if hi&0x8000 != 0 {
				h = int(hi>>5) & 0x3FF
			}
			placed := i >= ahead
			if placed {
				consumed++
			}
			ok := !open && st&(1<<29) == 0
			if placed {
				ok = ok && hi&0x8000 != 0 && h >= 14 && h <= placeHeader && l <= mf-placeHeader
			} else {
				ok = ok && h <= placeHeader && placeHeader+l <= 2048 && h+l >= 14 && h+l <= mf
			}
			if st&2 == 0 {
				open = true
				continue
			}
			if ok {
				if placed {
					want = append(want, drvtest.PlacedFrame{Data: h, Placed: l})
				} else {
					want = append(want, drvtest.PlacedFrame{Data: h + l, Placed: -1})
				}
			}
			open = false
		}
		q := drvtest.PlacingQueue{Batch: r.batch, Placements: &r.Placements, Release: r.Release, Pool: pool, Pools: pools}
		q.CheckDelivered(t, want, consumed, posted)
	})
}
