package ioat

import (
	"testing"

	"github.com/gomx-dev/gomx/emulated"
)

// BenchmarkChannelBatch measures the descriptor rate of one channel: batches
// of 32 small copies, several batches in flight, completions reaped from
// the write-back word.
func BenchmarkChannelBatch32(b *testing.B) {
	p, err := emulated.NewCBDMA(emulated.CBDMAOptions{Channels: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	c, err := Open(p.Devices()[0], Options{RingSize: 4096})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 1<<20)
	m, _ := p.IOMMU().Map(buf)
	defer p.IOMMU().Unmap(m)
	const batch = 32
	var out [256]Completion
	b.ResetTimer()
	done := 0
	for sent := 0; sent < b.N; {
		for c.Free() >= batch && sent < b.N {
			for i := 0; i < batch; i++ {
				off := (sent % 4096) * 64
				c.EnqueueCopy(m, off, m, 512<<10+off, 64, uint64(sent))
				sent++
			}
			c.Submit()
		}
		done += c.Poll(out[:])
	}
	for done < b.N {
		done += c.Poll(out[:])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "desc/s")
}
