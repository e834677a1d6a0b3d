package fault_test

import (
	"testing"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// BenchmarkWrap is what the wrapper costs per frame: batches of 32 1-KiB
// frames sent and received in one goroutine over the loopback wire, bare,
// wrapped with faults off, and with 1% loss (and 1% reordering on the
// receive side) on either side.
//
//	go test -run '^$' -bench Wrap -count 5 ./transport/fault/
func BenchmarkWrap(b *testing.B) {
	loss := fault.Options{Loss: 0.01, Seed: 1}
	for _, c := range []struct {
		name string
		o    *fault.WrapOptions
	}{
		{"bare", nil},
		{"off", &fault.WrapOptions{}},
		{"send-loss", &fault.WrapOptions{Send: loss}},
		{"recv-loss-reorder", &fault.WrapOptions{Recv: fault.Options{Loss: 0.01, Reorder: 0.01, Seed: 1}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			n := loopback.NewNetwork(loopback.Options{})
			defer n.Close()
			pa, _ := n.Attach(1)
			pb, _ := n.Attach(2)
			var a, r transport.Transport = pa, pb
			if c.o != nil {
				wa, err := fault.Wrap(pa, fault.WrapOptions{Send: c.o.Send})
				if err != nil {
					b.Fatal(err)
				}
				wb, err := fault.Wrap(pb, fault.WrapOptions{Recv: c.o.Recv})
				if err != nil {
					b.Fatal(err)
				}
				defer wa.Close()
				defer wb.Close()
				a, r = wa, wb
			}
			const batch = 32
			out := make([]transport.Frame, batch)
			for i := range out {
				out[i] = transport.Frame{Peer: 2, Data: make([]byte, 1024)}
			}
			in := make([]transport.Frame, batch)
			b.ReportAllocs()
			b.SetBytes(batch * 1024)
			got := 0
			for b.Loop() {
				if _, err := a.Send(out); err != nil {
					b.Fatal(err)
				}
				for range 4 {
					k, err := r.Recv(in, 0)
					if err != nil {
						b.Fatal(err)
					}
					got += k
					if k < batch {
						break
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
			b.ReportMetric(float64(got)/float64(b.N*batch), "delivered/frame")
		})
	}
}
