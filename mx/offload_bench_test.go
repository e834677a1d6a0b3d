package mx

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
)

// BenchmarkEngineOffload measures seed 003's Fig. 11 on the emulated
// engine: a large message sent from a shared buffer and copied by the
// receiver's copy engine, with and without overlapped pinning and with and
// without the registration cache (each effect alone), against the CPU's
// single copy ("cpu"). The same buffers are used for every message, as in
// IMB PingPong, so the cache maps them once. The emulated engine copies
// with a CPU thread, paced to engineRate per channel by sleeping (so, like
// the hardware, it leaves the CPU to the mapping meanwhile), and its IOMMU
// charges mapCost of busy CPU per 4 KiB page mapped (emulated.IOMMU.SetMapCost:
// a model of pinning and IOMMU programming), so the figures show the shape
// of the effects, not I/OAT's speed. It reports the one-way bandwidth (MB/s), the time per message
// (us/msg), the fastest message (best-us/msg, the figure to compare on a
// loaded machine) and the mappings made per message (maps/msg).
func BenchmarkEngineOffload(b *testing.B) {
	const (
		mapCost    = 250 * time.Nanosecond // per 4 KiB page: pinning is 10-25% of a copy (seed 003 §3.B)
		engineRate = 2500 << 20            // bytes/s: seed 003 reached 2.3 GB/s with I/OAT
	)
	variants := []struct {
		name               string
		noOverlap, noCache bool
		cpu                bool
	}{
		{"cpu", false, false, true},
		{"engine/cache+overlap", false, false, false},
		{"engine/cache", true, false, false},
		{"engine/overlap", false, true, false},
		{"engine/neither", true, true, false},
	}
	for _, size := range []int{1 << 20, 4 << 20, 16 << 20} {
		for _, v := range variants {
			b.Run(fmt.Sprintf("%dKiB/%s", size>>10, v.name), func(b *testing.B) {
				large := LargeEngine
				if v.cpu {
					large = LargeShared
				}
				// One channel paced at I/OAT's speed: the model then copies
				// while the CPU maps, as the hardware does, and no variant
				// gains from spreading its chunks over channels.
				po := emulated.CBDMAOptions{Channels: 1, Bandwidth: engineRate}
				g := newEngineRigOn(b, po, large, nil, func(o *BoardOptions) {
					o.Local.EngineNoOverlap, o.Local.EngineNoCache = v.noOverlap, v.noCache
				})
				g.plat.IOMMU().SetMapCost(mapCost)
				msg, err := g.a.AllocShared(size)
				if err != nil {
					b.Fatal(err)
				}
				copy(msg, pattern(size, 1))
				g.send(b, msg, 1, 1) // connects and shares the segments
				miss0 := g.eng.CacheStats().Misses
				buf := make([]byte, size)
				ctx := testCtx(b, time.Minute)
				b.SetBytes(int64(size))
				best := time.Duration(1<<63 - 1)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					t0 := time.Now()
					exchange(b, ctx, g.a, g.atob, g.b, 2, ^uint64(0), [][]byte{msg}, [][]byte{buf})
					best = min(best, time.Since(t0))
				}
				b.StopTimer()
				el := b.Elapsed()
				b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e6, "MB/s")
				b.ReportMetric(float64(el.Microseconds())/float64(b.N), "us/msg")
				// The fastest message: on a shared, loaded machine the
				// mean mostly measures the other processes.
				b.ReportMetric(float64(best.Nanoseconds())/1e3, "best-us/msg")
				b.ReportMetric(float64(g.eng.CacheStats().Misses-miss0)/float64(b.N), "maps/msg")
				c := g.b.Counters()
				if v.cpu && c.Get(RecvEngine) != 0 || !v.cpu && c.Get(RecvShared) != 0 {
					b.Fatalf("wrong strategy ran: engine %d, cpu %d", c.Get(RecvEngine), c.Get(RecvShared))
				}
				// A copy the engine failed (a channel watchdog on a starved
				// machine) was redone by the CPU: count it, it skews the time.
				if n := c.Get(EngineFallbacks); n != 0 {
					b.ReportMetric(float64(n)/float64(b.N), "fallbacks/msg")
				}
			})
		}
	}
}
