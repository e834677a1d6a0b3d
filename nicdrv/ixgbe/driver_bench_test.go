package ixgbe

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drvtest"
)

// BenchmarkDriver is the driver alone, with no model (drvtest.BenchDriver
// says what a frame is and what ns/frame and cpu-ns/frame are): one TX
// and one RX ring over register writes that go nowhere, and a stand-in
// for the NIC that sets DD in each sent descriptor and writes back a
// 60-byte frame into each RX descriptor (two and four stores per frame).
func BenchmarkDriver(b *testing.B) {
	plat, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer plat.Close()
	dev := plat.Functions()[0]
	drvtest.BenchDriver(b, dev, func(pools *drv.Pools) drvtest.DriverRing {
		const size = drvtest.BenchRing
		n := &NIC{dev: dev, d: drv.Device{Dev: dev, Regs: drvtest.TailRegs{}}, pools: pools, opts: Options{MaxFrame: 1518, Queues: 1}}
		rx := newRxQueue(n, 0, make([]byte, size*16), 0)
		rx.refill()
		rx.rdt = rx.tail
		tx := newTxQueue(n, 0, make([]byte, size*16), 0)
		n.rx, n.tx = []*rxQueue{rx}, []*txQueue{tx}
		return drvtest.DriverRing{
			NIC:    n,
			TxTail: func() uint32 { return tx.s.Tail },
			Wire: func(from uint32, k int) {
				for s := from; s != tx.s.Tail; s = (s + 1) % size {
					tx.d[s][12] |= 1 // DD
				}
				for i, s := 0, rx.next; i < k; i, s = i+1, (s+1)%size {
					d := &rx.d[s]
					binary.LittleEndian.PutUint64(d[0:], 0)        // no packet type, no hash
					binary.LittleEndian.PutUint64(d[8:], 3|60<<32) // DD, EOP; 60 bytes
				}
			},
			Release: func() {
				_ = rx.Release()
				_ = tx.s.Release()
			},
		}
	})
}

// BenchmarkPlace is BenchmarkDriver's receive side with payload
// placement: a queue of Options.PlaceOnly with a ring of 512, and a frame
// is one placement posted through the NIC's PostRx, written back by the
// stand-in NIC (a 64-byte header split off, 200 bytes placed) and received
// through RxBatch as its header buffer with the placement attached, which
// Free gives back; in batches of 32. The figure is the driver's cost per
// placed frame with the pool's.
func BenchmarkPlace(b *testing.B) {
	const batch, size, mf = 32, 512, 1518
	plat, err := emulated.NewIXGBE(emulated.IXGBEOptions{Ports: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer plat.Close()
	dev := plat.Functions()[0]
	pools, err := drv.NewPools(dev.DMA(), drv.PoolsOptions{Queues: 1, Buffers: 64, Headers: 2 * size, Name: "gomx-bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer pools.Close()
	n := &NIC{dev: dev, d: drv.Device{Dev: dev, Regs: drvtest.TailRegs{}}, pools: pools,
		opts: Options{MaxFrame: mf, Queues: 1, Placement: true, PlaceOnly: 1},
		info: nicdrv.Info{PlaceHeader: placeHeader, PlaceMin: mf - placeHeader}}
	rx := newRxQueue(n, 0, make([]byte, size*16), 0)
	rx.refill()
	rx.rdt = rx.tail
	n.rx = []*rxQueue{rx}
	mem := make([]byte, batch*2048)
	ps := drvtest.Placements(mem, batch, mf-placeHeader)
	out := make([]*nicdrv.Buffer, batch)
	round := func() {
		from := rx.tail
		if k, err := n.PostRx(0, ps); k != batch || err != nil {
			b.Fatalf("PostRx took %d: %v", k, err)
		}
		// The NIC: SPH and a 64-byte header, DD and EOP, 200 bytes
		// placed, as whole words.
		for s := from; s != rx.tail; s = (s + 1) % size {
			d := &rx.d[s]
			binary.LittleEndian.PutUint64(d[0:], (1<<15|placeHeader<<5)<<16)
			binary.LittleEndian.PutUint64(d[8:], 3|200<<32)
		}
		if k, err := n.RxBatch(0, out); k != batch || err != nil {
			b.Fatalf("RxBatch got %d: %v", k, err)
		}
		if err := pools.Header[0].Free(out...); err != nil {
			b.Fatal(err)
		}
	}
	drvtest.PerFrame(b, batch, round)
	_ = rx.Release()
}
