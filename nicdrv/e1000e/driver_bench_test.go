package e1000e

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drvtest"
)

// BenchmarkDriver is the driver alone, with no model (drvtest.BenchDriver
// says what a frame is and what ns/frame and cpu-ns/frame are): one TX
// and one RX ring over register writes that go nowhere, and a stand-in
// for the NIC that sets DD in each sent descriptor and writes back a
// 60-byte frame into each RX descriptor.
func BenchmarkDriver(b *testing.B) {
	plat, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer plat.Close()
	dev := plat.Functions()[0]
	drvtest.BenchDriver(b, dev, func(pools *drv.Pools) drvtest.DriverRing {
		const size = drvtest.BenchRing
		n := &NIC{dev: dev, d: drv.Device{Dev: dev, Regs: drvtest.TailRegs{}}, pools: pools, opts: Options{Queues: 1}}
		rx := newRxQueue(n, 0, make([]byte, size*16), 0)
		rx.refill()
		rx.rdt = rx.tail
		tx := newTxQueue(n, 0, make([]byte, size*16), 0)
		n.rx, n.tx = []*rxQueue{rx}, []*txQueue{tx}
		return drvtest.DriverRing{
			NIC:    n,
			TxTail: func() uint32 { return tx.s.Tail },
			Wire: func(from uint32, k int) {
				// DD is in byte 12 of a sent descriptor; a write-back
				// has DD and EOP in the status and the length.
				for s := from; s != tx.s.Tail; s = (s + 1) % size {
					tx.ring[s*16+12] |= 1
				}
				for i, s := 0, rx.next; i < k; i, s = i+1, (s+1)%size {
					d := rx.ring[s*16:]
					binary.LittleEndian.PutUint64(d[0:], 0)
					binary.LittleEndian.PutUint64(d[8:], 3|60<<32)
				}
			},
			Release: func() {
				_ = rx.fill.Release()
				_ = tx.s.Release()
			},
		}
	})
}
