package e1000e

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drvtest"
)

// FuzzPlaceWriteBacks feeds arbitrary packet split write-backs to a placing
// queue whose ring holds the pool descriptors ahead and then placements.
// The oracle reads the bytes at the datasheet's offsets (status and errors
// at 8, buffer 0's length at 12, the header status at 16, buffers 1 to 3
// at 18, 20, 22) and restates the rule: descriptors are consumed in order
// up to the first without DD; a frame is one descriptor with EOP (one that
// follows a descriptor without EOP is dropped with it); it is delivered
// when no frame error is set, buffer 0 holds 14 to 128 bytes, buffers 2
// and 3 nothing, buffer 1 at most what it may hold (the placement, or the
// pool buffer behind buffer 0), and the lengths agree with the split (HDRSP
// with the header length equal to buffer 0's, or without it buffer 0 full
// when buffer 1 holds anything); a placed descriptor's frame then comes
// with the placement attached, a pool descriptor's whole in its buffer.
// Every placement taken is counted consumed, and every buffer comes back.
func FuzzPlaceWriteBacks(f *testing.F) {
	seed := make([]byte, 32*12)
	for i := range 12 {
		d := seed[32*i:]
		d[8], d[12] = 3, 128                        // DD EOP, buffer 0 full
		binary.LittleEndian.PutUint16(d[18:], 1386) // the rest of a 1514-byte frame
	}
	f.Add(seed)
	bad := make([]byte, 64)
	bad[8], bad[12] = 1, 128 // DD, no EOP
	bad[32+8], bad[32+12] = 3, 60
	f.Add(bad)

	plat, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { plat.Close() })
	pool, pools := drvtest.Pools(f, plat.IOMMU(), 256)
	const size, posted, placeMin = 32, 12, placeLargest - placeSplitMin
	mem := make([]byte, posted*2048)
	f.Fuzz(func(t *testing.T, raw []byte) {
		n := &NIC{d: drv.Device{Regs: drvtest.TailRegs{}}, pools: pools, opts: Options{Placement: true, Queues: 1, RxRing: size},
			info: nicdrv.Info{PlaceHeader: placeHeader, PlaceMin: placeMin}}
		ring := make([]byte, size*32)
		r := &rxQueue{nic: n, pool: pool, ring: ring, size: size, dsz: 32, ps: true, freeThresh: rxFreeThresh(size)}
		r.fill = drv.NewRxFill(size, []*nicdrv.Pool{pool}, &r.cnt.NoBuf)
		r.slot = r.fill.Bufs[0]
		r.initPlace()
		n.rx = []*rxQueue{r}
		r.refill()
		r.writeTail()
		ahead := int(r.tail)
		if k, err := r.post(drvtest.Placements(mem, posted, placeMin)); k != posted || err != nil {
			t.Fatalf("post: %d, %v", k, err)
		}
		k := min(len(raw)/32, int(r.rdt))
		copy(ring, raw[:32*k])
		var want []drvtest.PlacedFrame
		consumed, open := 0, false
		for i := 0; i < k; i++ {
			d := raw[32*i:]
			le := func(o int) int { return int(binary.LittleEndian.Uint16(d[o:])) }
			st := binary.LittleEndian.Uint32(d[8:])
			if st&1 == 0 {
				break
			}
			placed := i >= ahead
			if placed {
				consumed++
			}
			l0, hs, l1, l2, l3 := le(12), le(16), le(18), le(20), le(22)
			payCap := 2048 - 128
			if placed {
				payCap = placeMin
			}
			layout := hs&0x8000 != 0 && hs&0x3FF == l0 || hs&0x8000 == 0 && (l1 == 0 || l0 == 128)
			frameErr := st&(1<<24|1<<25|1<<26|1<<28|1<<31) != 0
			ok := !open && !frameErr && l0 >= 14 && l0 <= 128 && l1 <= payCap && l2 == 0 && l3 == 0 && layout
			if st&2 == 0 {
				open = true
				continue
			}
			if ok {
				if placed {
					want = append(want, drvtest.PlacedFrame{Data: l0, Placed: l1})
				} else {
					want = append(want, drvtest.PlacedFrame{Data: l0 + l1, Placed: -1})
				}
			}
			open = false
		}
		q := drvtest.PlacingQueue{Batch: r.batch, Placements: &r.Placements, Release: r.Release, Pool: pool, Pools: pools}
		q.CheckDelivered(t, want, consumed, posted)
	})
}
