package mx

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// BenchmarkPullEngine measures large messages (256 KiB, 1 MiB, 4 MiB)
// pulled over the network path with the receiver's pull-reply copies done
// by the CPU ("cpu") or by a copy engine from held transport frames, the
// emulated CBDMA ("cbdma") or DSA ("dsa"), on the loopback wire (9 KB
// frames), the UDP transport and the emulated 82574L pair (1.4 KB frames). It reports the
// one-way bandwidth (MB/s), the time per message (us/msg), the time the
// receiver's progress goroutine spent on the copies per message
// (rx-copy-us/msg: the copy itself for the CPU; holding, starting, reaping
// and releasing for the engine) and the process's CPU time per message
// (cpu-us/msg, both boards and the engine model together). The emulated
// engine copies with its own goroutines (unpaced: pacing by sleeping costs
// a timer tick per 1.4 KB fragment), so cpu-us/msg includes the engine's
// work; rx-copy-us/msg is the figure that shows what the offload gives
// back to the progress goroutine.
func BenchmarkPullEngine(b *testing.B) {
	for _, wire := range []string{"loopback", "udp", "nic"} {
		var tf transportFactory
		for _, f := range transportFactories {
			if f.name == wire {
				tf = f
			}
		}
		for _, size := range []int{256 << 10, 1 << 20, 4 << 20} {
			for _, engine := range []string{"cpu", "cbdma", "dsa"} {
				b.Run(fmt.Sprintf("%s/%dKiB/%s", wire, size>>10, engine), func(b *testing.B) {
					eng := benchEngine(b, engine)
					oa, ob := fastOptions(), fastOptions()
					if eng != nil {
						ob.Local.Engine = eng
						ob.PullEngineMin = 64 << 10
					}
					pr := newPair(b, tf, oa, loopback.Faults{}, ob)
					msg := pattern(size, 1)
					buf := make([]byte, size)
					ctx := testCtx(b, 5*time.Minute)
					one := func() {
						exchange(b, ctx, pr.a, pr.atob, pr.b, 2, ^uint64(0), [][]byte{msg}, [][]byte{buf})
					}
					one() // warm: connections, engine mappings of buf
					pr.bb.mu.Lock()
					pr.bb.timeCopies, pr.bb.copyNanos = true, 0
					pr.bb.mu.Unlock()
					cpu0 := cpuTime()
					b.SetBytes(int64(size))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						one()
					}
					b.StopTimer()
					cpu := cpuTime() - cpu0
					pr.bb.mu.Lock()
					copyNs := pr.bb.copyNanos
					pr.bb.timeCopies = false
					pr.bb.mu.Unlock()
					el := b.Elapsed()
					b.ReportMetric(float64(size)*float64(b.N)/el.Seconds()/1e6, "MB/s")
					b.ReportMetric(float64(el.Microseconds())/float64(b.N), "us/msg")
					b.ReportMetric(float64(copyNs)/1e3/float64(b.N), "rx-copy-us/msg")
					b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/msg")
					c := pr.b.Counters()
					if eng != nil && c.Get(RecvPullEngine) == 0 || eng == nil && c.Get(RecvPullEngine) != 0 {
						b.Fatalf("wrong strategy ran: %d replies by the engine", c.Get(RecvPullEngine))
					}
					if eng != nil {
						b.ReportMetric(float64(eng.CacheStats().Misses)/float64(b.N+1), "maps/msg")
					}
					if n := c.Get(PullEngineFallbacks); n != 0 {
						b.ReportMetric(float64(n)/float64(b.N), "fallbacks/msg")
					}
					pr.ba.Close()
					pr.bb.Close()
				})
			}
		}
	}
}

// benchEngine returns a copy engine over two channels of the emulated
// CBDMA ("cbdma") or two work queues of the emulated DSA ("dsa"), closed
// after the boards (newPair's cleanup runs first), or nil for "cpu".
func benchEngine(b *testing.B, model string) *ioat.Engine {
	var devs []pci.Device
	switch model {
	case "cpu":
		return nil
	case "cbdma":
		plat, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { plat.Close() })
		devs = plat.Devices()
	case "dsa":
		plat, err := emulated.NewDSA(emulated.DSAOptions{Engines: 2, Groups: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { plat.Close() })
		devs = plat.Devices()
	}
	eo := ioat.DefaultEngineOptions()
	eo.CPUThreshold = -1
	eng, err := ioat.NewEngine(devs, eo)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { eng.Close() })
	return eng
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
