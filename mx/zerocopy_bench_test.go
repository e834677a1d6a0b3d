package mx

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkZeroCopy streams large messages over the nic transport on the
// emulated 82599 pair with pull replies sent in place ("in-place") and
// copied ("copy"), a window of 4 in flight, and reports the sender's CPU
// bytes copied per payload byte beside the throughput (MB/s) and the
// process's CPU time per MiB moved (cpu-us/MiB: both boards, both drivers
// and the model). The model moves every byte with the CPU in the thread
// that writes the TX tail, its DMA read of the application's pages
// included, so the gain shown is what mx and the driver no longer copy,
// and cpu-us/MiB, which the machine's load disturbs less than MB/s, is the
// figure to compare on a shared machine.
//
//	go test -run '^$' -bench BenchmarkZeroCopy -benchtime 20x ./mx/
func BenchmarkZeroCopy(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20} {
		for _, mode := range []string{"in-place", "copy"} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, mode), func(b *testing.B) {
				o := zcOptions("on")
				if mode == "copy" {
					o.ZeroCopy.Off = true
				}
				pr := newPairOn(b, zcWire(b, zcModels[1], nil, nil), o)
				benchStreamLarge(b, pr, size)
			})
		}
	}
}

// benchStreamLarge streams b.N messages of size from a to b, four in
// flight, and reports the sender's copies per payload byte.
func benchStreamLarge(b *testing.B, pr *pair, size int) {
	const window = 4
	ctx := context.Background()
	src := make([][]byte, window)
	dst := make([][]byte, window)
	for k := range window {
		src[k], dst[k] = pattern(size, uint64(k)), make([]byte, size)
	}
	var ss, rs [window]*Request
	wait := func(k int) {
		for _, r := range []*Request{ss[k], rs[k]} {
			if r == nil {
				continue
			}
			if _, err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		ss[k], rs[k] = nil, nil
	}
	before := pr.a.CopyStats()
	cpu0 := cpuTime()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := i % window
		wait(k)
		var err error
		if rs[k], err = pr.b.IRecv([][]byte{dst[k]}, uint64(k), ^uint64(0), nil); err != nil {
			b.Fatal(err)
		}
		if ss[k], err = pr.a.ISend([][]byte{src[k]}, pr.atob, uint64(k), nil); err != nil {
			b.Fatal(err)
		}
	}
	for k := range window {
		wait(k)
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/(float64(size)/(1<<20)), "cpu-us/MiB")
	c := pr.a.CopyStats().Sub(before)
	b.ReportMetric(c.SendPerByte(), "send-copied/B")
	b.ReportMetric(float64(c.SendInPlace)/float64(max(c.SentBytes, 1)), "in-place/B")
}
