// Package drvtest holds what the PCI NIC drivers' own tests (nicdrv/e1000e
// and nicdrv/ixgbe, package-internal: they drive a ring without a model
// behind it) share: a register file that swallows the data path's tail
// writes, the pools the receive fuzzers take their buffers from and the
// placements they post, the fuzzers' checks of what a placing queue
// delivered and of buffers that did not come back, and the loop of the
// per-frame benchmarks with their figures (BenchDriver's the drivers' own). The conformance suite every NIC passes is nicdrv/nictest; this
// package is for the tests that reach into a driver.
package drvtest

import (
	"runtime"
	"testing"

	"github.com/gomx-dev/gomx/internal/cpuclock"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/internal/drv"
	"github.com/gomx-dev/gomx/pci"
)

// TailRegs is a register file that takes the tail writes of the data path
// and drops them: a ring driven by a test, with no NIC behind it. Any
// read, or any other call, panics (the embedded Registers is nil), so a
// data path that reads a register fails the test.
type TailRegs struct{ pci.Registers }

// Write32 drops the write.
func (TailRegs) Write32(int, uint32) {}

// Pools returns a pool of buffers in dma and one queue's pools over it
// (packet buffers from that pool, 64 header buffers), all closed when tb
// ends.
func Pools(tb testing.TB, dma pci.DMA, buffers int) (*nicdrv.Pool, *drv.Pools) {
	tb.Helper()
	pool, err := nicdrv.NewPool(dma, nicdrv.PoolOptions{Buffers: buffers})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pool.Close() })
	pools, err := drv.NewPools(dma, drv.PoolsOptions{Queues: 1, Shared: pool, Headers: 64})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pools.Close() })
	return pool, pools
}

// Placements cuts n placements of size bytes from mem, 2 KiB apart (mem
// holds n*2048 bytes), with made-up IOVAs from 1<<40 on: a ring driven
// by a test has no NIC behind it to write to them.
func Placements(mem []byte, n, size int) []nicdrv.Placement {
	ps := make([]nicdrv.Placement, n)
	for i := range ps {
		ps[i] = nicdrv.Placement{Mem: mem[i*2048 : i*2048+size], IOVA: uint64(1<<40 + i*2048)}
	}
	return ps
}

// PlacingQueue is a placing RX queue a receive fuzzer drives: its receive
// (the queue's batch), its record of placements, the release Close makes
// of what it holds, and the pools it takes from (Pools returned them).
type PlacingQueue struct {
	Batch      func([]*nicdrv.Buffer) (int, error)
	Placements *drv.Placements
	Release    func() error
	Pool       *nicdrv.Pool
	Pools      *drv.Pools
}

// CheckDelivered receives what q delivers and fails t unless it is the
// frames of want (CheckPlaced) with consumed placements counted consumed;
// it then gives the frames back, releases q, and fails t unless every one
// of the posted placements is counted consumed and every buffer is back
// (CheckReturned).
func (q PlacingQueue) CheckDelivered(t testing.TB, want []PlacedFrame, consumed, posted int) {
	t.Helper()
	out := make([]*nicdrv.Buffer, 64)
	got, err := q.Batch(out)
	if err != nil {
		t.Fatal(err)
	}
	CheckPlaced(t, out[:got], want)
	if q.Placements.Consumed != uint64(consumed) {
		t.Fatalf("%d placements consumed, want %d", q.Placements.Consumed, consumed)
	}
	if err := q.Pool.Free(out[:got]...); err != nil {
		t.Fatal(err)
	}
	if err := q.Release(); err != nil {
		t.Fatal(err)
	}
	if q.Placements.Consumed != uint64(posted) {
		t.Fatalf("after release %d of %d placements consumed", q.Placements.Consumed, posted)
	}
	CheckReturned(t, q.Pool, q.Pools)
}

// PlacedFrame is what a placing queue should deliver for one frame: Data
// bytes in its Buffer and, for a placed descriptor, Placed bytes in the
// placement attached to it; Placed is -1 for a frame received whole into a
// pool Buffer.
type PlacedFrame struct{ Data, Placed int }

// CheckPlaced fails t unless out holds exactly the frames of want, in
// order: each one Buffer of the lengths want gives, with a placement
// attached exactly where want has one.
func CheckPlaced(t testing.TB, out []*nicdrv.Buffer, want []PlacedFrame) {
	t.Helper()
	if len(out) != len(want) {
		t.Fatalf("delivered %d frames, want %d (%v)", len(out), len(want), want)
	}
	for i, b := range out {
		ext, _ := b.Attached()
		if len(b.Data) != want[i].Data || (want[i].Placed < 0) != (ext == nil) || ext != nil && len(ext) != want[i].Placed || b.Next != nil {
			t.Fatalf("frame %d: %d bytes, %d placed (%v); want %+v", i, len(b.Data), len(ext), ext != nil, want[i])
		}
	}
}

// CheckReturned fails t unless every buffer of pool and of the queue's
// header pool is back.
func CheckReturned(t testing.TB, pool *nicdrv.Pool, pools *drv.Pools) {
	t.Helper()
	if pool.Available() != pool.Len() {
		t.Fatalf("%d of %d buffers back in the pool", pool.Available(), pool.Len())
	}
	if h := pools.Header[0]; h.Available() != h.Len() {
		t.Fatalf("%d of %d header buffers back in their pool", h.Available(), h.Len())
	}
}

// DriverRing is queue 0 of a driver's NIC as a BenchDriver hook sets it
// up over TailRegs: one TX and one RX ring, with no NIC behind them.
type DriverRing struct {
	// NIC is the driver's, for its TxBatch and RxBatch on queue 0.
	NIC nicdrv.NIC
	// TxTail is the send ring's tail: where the next sent frame goes.
	TxTail func() uint32
	// Wire stands in for the NIC: it sets DD in each send descriptor from
	// from up to the tail, and writes back n received 60-byte frames (DD
	// and EOP) from the receive ring's next descriptor on, each write-back
	// as whole words, as a NIC writes it.
	Wire func(from uint32, n int)
	// Release gives back what the rings hold.
	Release func()
}

// BenchRing is how many descriptors each ring of BenchDriver has.
const BenchRing = 512

// BenchDriver is the drivers' BenchmarkDriver: the driver alone, with no
// model. setup builds dev's NIC over TailRegs and pools with one TX and
// one RX ring of BenchRing descriptors; a frame is what BenchmarkModelPair's
// loop does to it, in batches of 32: Alloc, TxBatch, (the NIC, Wire),
// RxBatch, Free, the batches through the NIC's own TxBatch and RxBatch as
// a caller makes them. The figures are PerFrame's: the driver's cost per
// frame with the pool's, and not a model's.
func BenchDriver(b *testing.B, dev pci.Device, setup func(pools *drv.Pools) DriverRing) {
	const batch, size = 32, BenchRing
	pools, err := drv.NewPools(dev.DMA(), drv.PoolsOptions{Queues: 1, Buffers: 4 * size, Name: "gomx-bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer pools.Close()
	r := setup(pools)
	defer r.Release()
	pool := pools.Packet[0]
	bufs := make([]*nicdrv.Buffer, batch)
	out := make([]*nicdrv.Buffer, batch)
	PerFrame(b, batch, func() {
		if _, err := pool.Alloc(bufs); err != nil {
			b.Fatal(err)
		}
		for _, bf := range bufs {
			bf.SetLen(60)
		}
		from := r.TxTail()
		if k, err := r.NIC.TxBatch(0, bufs); k != batch || err != nil {
			b.Fatalf("TxBatch took %d: %v", k, err)
		}
		r.Wire(from, batch)
		if k, err := r.NIC.RxBatch(0, out); k != batch || err != nil {
			b.Fatalf("RxBatch got %d: %v", k, err)
		}
		if err := pool.Free(out...); err != nil {
			b.Fatal(err)
		}
	})
}

// PerFrame runs a per-frame benchmark whose round handles batch frames:
// 64 rounds to warm up, then b.N frames' worth, timed. It reports
// ns/frame, the wall time per frame, and cpu-ns/frame, the benchmark
// thread's CPU time per frame, which on a loaded machine leaves out the
// time the thread waited for a CPU. It locks the goroutine to its thread
// (runtime.LockOSThread) while it runs, for the CPU time to be the
// rounds'.
func PerFrame(b *testing.B, batch int, round func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range 64 {
		round()
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuclock.Thread()
	for i := 0; i < b.N; i += batch {
		round()
	}
	cpu := cpuclock.Thread() - c0
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/frame")
}
