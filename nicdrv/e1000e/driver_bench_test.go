package e1000e

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drvtest"
)

// BenchmarkDriver is the driver alone, with no model: one TX and one RX
// ring of 512 over register writes that go nowhere, and a stand-in for the
// NIC that sets DD in each sent descriptor and writes back a 60-byte frame
// into each RX descriptor. A frame is what BenchmarkModelPair's loop does
// to it, in batches of 32: Alloc, TxBatch, (the NIC), RxBatch, Free, the
// batches through the NIC's own TxBatch and RxBatch as a caller makes them.
// The figure is the driver's cost per frame with the pool's; the model's
// is not in it (drvtest.PerFrame says what ns/frame and cpu-ns/frame are).
func BenchmarkDriver(b *testing.B) {
	const batch, size = 32, 512
	plat, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer plat.Close()
	dev := plat.Functions()[0]
	pools, err := drv.NewPools(dev.DMA(), drv.PoolsOptions{Queues: 1, Buffers: 4 * size, Name: "gomx-bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer pools.Close()
	n := &NIC{dev: dev, d: drv.Device{Dev: dev, Regs: drvtest.TailRegs{}}, pools: pools, opts: Options{Queues: 1}}
	rx := newRxQueue(n, 0, make([]byte, size*16), 0)
	rx.refill()
	rx.rdt = rx.tail
	tx := newTxQueue(n, 0, make([]byte, size*16), 0)
	n.rx, n.tx = []*rxQueue{rx}, []*txQueue{tx}
	pool := pools.Packet[0]
	bufs := make([]*nicdrv.Buffer, batch)
	out := make([]*nicdrv.Buffer, batch)
	round := func() {
		if _, err := pool.Alloc(bufs); err != nil {
			b.Fatal(err)
		}
		for _, bf := range bufs {
			bf.SetLen(60)
		}
		from := tx.s.Tail
		if k, err := n.TxBatch(0, bufs); k != batch || err != nil {
			b.Fatalf("TxBatch took %d: %v", k, err)
		}
		// The NIC: every sent descriptor done (DD in byte 12); 32 frames
		// in, each write-back written as whole words (DD and EOP in the
		// status, 60 bytes).
		for s := from; s != tx.s.Tail; s = (s + 1) % size {
			tx.ring[s*16+12] |= 1
		}
		for i, s := 0, rx.next; i < batch; i, s = i+1, (s+1)%size {
			d := rx.ring[s*16:]
			binary.LittleEndian.PutUint64(d[0:], 0)
			binary.LittleEndian.PutUint64(d[8:], 3|60<<32)
		}
		if k, err := n.RxBatch(0, out); k != batch || err != nil {
			b.Fatalf("RxBatch got %d: %v", k, err)
		}
		if err := pool.Free(out...); err != nil {
			b.Fatal(err)
		}
	}
	drvtest.PerFrame(b, batch, round)
	_ = rx.fill.Release()
	_ = tx.s.Release()
}
