package nic_test

import (
	"fmt"
	"testing"

	"github.com/gomx-dev/gomx/transport"
)

// BenchmarkSendInPlace streams batches of 32 full frames (1500 bytes of
// Data, 1514 on the wire: the transport's MTU) from a region, copied into
// pool buffers (heap memory the NIC cannot reach is what makes the
// transport copy: Register maps, so the copying case sends the same bytes
// without a Region) or sent in place (header buffer plus a descriptor at
// the region), and receives them at the other end of the model's cable.
// ns/frame and B/op are per frame sent and received; the model itself
// copies each frame on TX and RX, as QEMU does, so the difference is the
// sender's copy.
func BenchmarkSendInPlace(b *testing.B) {
	for _, inPlace := range []bool{false, true} {
		b.Run(fmt.Sprintf("1514B/inplace=%v", inPlace), func(b *testing.B) {
			_, ts := modelTransports(b)
			const batch, size = 32, 1500
			mem := make([]byte, batch*size)
			r, err := ts[0].Register(mem)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			out := make([]transport.Frame, batch)
			for i := range out {
				out[i] = r.Frame(ts[1].Addr(), i*size, size)
				if !inPlace {
					out[i].Region = nil
				}
			}
			in := make([]transport.Frame, batch)
			b.SetBytes(batch * size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if n, err := ts[0].Send(out); n != batch || err != nil {
					b.Fatalf("Send: %d, %v", n, err)
				}
				for got := 0; got < batch; {
					n, err := ts[1].Recv(in, -1)
					if err != nil {
						b.Fatal(err)
					}
					got += n
				}
				if inPlace && r.Pending() != 0 {
					b.Fatalf("%d sends pending after the model received them", r.Pending())
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
			if inPlace && r.InPlaceSends() != uint64(b.N*batch) {
				b.Errorf("%d in place of %d", r.InPlaceSends(), b.N*batch)
			}
		})
	}
}
