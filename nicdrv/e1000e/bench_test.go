package e1000e_test

import (
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// BenchmarkModelPair streams frames from one driver to the other over two
// cabled emulated 82574Ls, in batches of 32: the cost of the driver's fast
// path plus the model's DMA, per frame.
func BenchmarkModelPair(b *testing.B) {
	for _, size := range []int{60, 1514} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			p, err := emulated.NewE1000E(emulated.DefaultE1000EOptions())
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			var n [2]*e1000e.NIC
			for i := range n {
				if n[i], err = e1000e.Open(p.Functions()[i], e1000e.DefaultOptions()); err != nil {
					b.Fatal(err)
				}
				defer n[i].Close()
			}
			streamFrames(b, n[0], n[1], nictest.Frame(make([]byte, 2048), n[1].MAC(), n[0].MAC(), 1, size), size, nil)
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mframes/s")
		})
	}
}

// streamFrames sends b.N copies of tmpl (size bytes) from queue 0 of from
// to to in batches of 32, timed, each batch received before the next is
// sent; rx, when not nil, sees every batch received before its buffers go
// back to the pool.
func streamFrames(b *testing.B, from, to *e1000e.NIC, tmpl []byte, size int, rx func([]*nicdrv.Buffer)) {
	const batch = 32
	tx := make([]*nicdrv.Buffer, batch)
	in := make([]*nicdrv.Buffer, batch)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent, got := 0, 0
	for sent < b.N {
		k := min(batch, b.N-sent)
		if _, err := from.Pool(0).Alloc(tx[:k]); err != nil {
			b.Fatal(err)
		}
		for _, bf := range tx[:k] {
			copy(bf.SetLen(size), tmpl)
		}
		for off := 0; off < k; {
			m, err := from.TxBatch(0, tx[off:k])
			if err != nil {
				b.Fatal(err)
			}
			off += m
		}
		sent += k
		for got < sent {
			m, err := to.RxBatch(0, in)
			if err != nil {
				b.Fatal(err)
			}
			if rx != nil {
				rx(in[:m])
			}
			got += m
			_ = to.Pool(0).Free(in[:m]...)
		}
	}
}
