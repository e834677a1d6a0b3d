// Package drvtest holds what the PCI NIC drivers' own tests (nicdrv/e1000e
// and nicdrv/ixgbe, package-internal: they drive a ring without a model
// behind it) share: a register file that swallows the data path's tail
// writes, the pools the receive fuzzers take their buffers from, the
// fuzzers' checks of what a placing queue delivered and of buffers that
// did not come back, and the loop of the per-frame benchmarks with their
// figures. The conformance suite every NIC passes is nicdrv/nictest; this
// package is for the tests that reach into a driver.
package drvtest

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// PerFrame runs a per-frame benchmark whose round handles batch frames:
// 64 rounds to warm up, then b.N frames' worth, timed. It reports
// ns/frame, the wall time per frame, and cpu-ns/frame, the benchmark
// thread's CPU time per frame, which on a loaded machine leaves out the
// time the thread waited for a CPU. The caller locks its goroutine to its
// thread (runtime.LockOSThread) for the CPU time to be the round's.
func PerFrame(b *testing.B, batch int, round func()) {
	for range 64 {
		round()
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := ThreadCPU()
	for i := 0; i < b.N; i += batch {
		round()
	}
	cpu := ThreadCPU() - c0
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/frame")
}

// ThreadCPU is the calling thread's CPU time.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
