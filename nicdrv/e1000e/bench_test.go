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
			const batch = 32
			tx := make([]*nicdrv.Buffer, batch)
			rx := make([]*nicdrv.Buffer, batch)
			tmpl := nictest.Frame(make([]byte, 2048), n[1].MAC(), n[0].MAC(), 1, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			sent, got := 0, 0
			for sent < b.N {
				k := min(batch, b.N-sent)
				if _, err := n[0].Pool().Alloc(tx[:k]); err != nil {
					b.Fatal(err)
				}
				for _, bf := range tx[:k] {
					copy(bf.SetLen(size), tmpl)
				}
				for off := 0; off < k; {
					m, err := n[0].TxBatch(0, tx[off:k])
					if err != nil {
						b.Fatal(err)
					}
					off += m
				}
				sent += k
				for got < sent {
					m, err := n[1].RxBatch(0, rx)
					if err != nil {
						b.Fatal(err)
					}
					got += m
					_ = n[1].Pool().Free(rx[:m]...)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/frame")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mframes/s")
		})
	}
}
