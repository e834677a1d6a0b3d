package ioat

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/pci"
)

// hybridModels are the engines BenchmarkHybrid measures hybrid mode on:
// one CBDMA channel at 2 GB/s (what one Xeon channel moves, and
// BenchmarkOverlap's rate) and one DSA work queue at 8 GB/s.
var hybridModels = []struct {
	name string
	open func(b *testing.B) []pci.Device
}{
	{"cbdma-2G", func(b *testing.B) []pci.Device {
		p, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 1, Bandwidth: 2e9})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		return p.Devices()
	}},
	{"dsa-8G", func(b *testing.B) []pci.Device {
		p, err := emulated.NewDSA(emulated.DSAOptions{Engines: 1, Groups: 1, Bandwidth: 8e9, MaxXferShift: 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		return p.Devices()
	}},
}

// BenchmarkHybrid compares, for one copy at a time followed by a reader
// that sums the destination (the receiver of a message), the CPU alone
// (copy), the engine alone, and hybrid mode (the CPU copies the first
// 64 KiB or 256 KiB while the engine copies the rest). It reports the
// rate of copy and read together (MB/s) and each phase's time (copy-us,
// read-us).
func BenchmarkHybrid(b *testing.B) {
	for _, m := range hybridModels {
		for _, n := range []int{1 << 20, 4 << 20} {
			for _, head := range []int{-1, 0, 64 << 10, 256 << 10} {
				mode := "engine"
				switch {
				case head < 0:
					mode = "cpu"
				case head > 0:
					mode = "hybrid-" + sizeName(head)
				}
				b.Run(fmt.Sprintf("%s/%s/%s", m.name, sizeName(n), mode), func(b *testing.B) {
					o := offloadAll()
					o.HybridHead = max(head, 0)
					if head < 0 {
						o.CPUThreshold = n + 1
					}
					e, err := NewEngine(m.open(b), o)
					if err != nil {
						b.Fatal(err)
					}
					defer e.Close()
					src, _ := e.Alloc(n)
					dst, _ := e.Alloc(n)
					defer src.Close()
					defer dst.Close()
					var tc, tr time.Duration
					var sink uint64
					b.SetBytes(int64(n))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						t0 := time.Now()
						if err := e.Copy(dst.Bytes(), src.Bytes()); err != nil {
							b.Fatal(err)
						}
						t1 := time.Now()
						for _, v := range dst.Bytes() {
							sink += uint64(v)
						}
						tc += t1.Sub(t0)
						tr += time.Since(t1)
					}
					b.ReportMetric(float64(tc.Microseconds())/float64(b.N), "copy-us")
					b.ReportMetric(float64(tr.Microseconds())/float64(b.N), "read-us")
					if sink == 1 {
						b.Log(sink)
					}
				})
			}
		}
	}
}
