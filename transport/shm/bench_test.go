package shm

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// BenchmarkSendInPlace sends batches of 8 frames from a region in the
// sender's pool, copied into the ring (the same bytes without a Region) or
// in place (a reference record), and receives them in the same goroutine:
// the receiver's Data is the ring's bytes or the sender's pool memory.
// ns/frame is Send plus Recv per frame; neither side touches the payload
// beyond that, so the copy is what differs.
func BenchmarkSendInPlace(b *testing.B) {
	for _, size := range []int{1514, 9000, 65536} {
		for _, inPlace := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dB/inplace=%v", size, inPlace), func(b *testing.B) {
				o := Options{Dir: testDir(b), MTU: 65536, RingSize: 1 << 21}
				tx, err := Open(o)
				if err != nil {
					b.Fatal(err)
				}
				defer tx.Close()
				rx, err := Open(o)
				if err != nil {
					b.Fatal(err)
				}
				defer rx.Close()
				p, err := tx.NewPool(PoolOptions{TableWords: 1})
				if err != nil {
					b.Fatal(err)
				}
				const batch = 8
				mem, err := p.Alloc(batch * size)
				if err != nil {
					b.Fatal(err)
				}
				r, err := tx.Register(mem)
				if err != nil {
					b.Fatal(err)
				}
				out := make([]transport.Frame, batch)
				for i := range out {
					out[i] = r.Frame(rx.Addr(), i*size, size)
					if !inPlace {
						out[i].Region = nil
					}
				}
				in := make([]transport.Frame, batch)
				b.SetBytes(int64(batch * size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if n, err := tx.Send(out); n != batch || err != nil {
						b.Fatalf("Send: %d, %v", n, err)
					}
					for got := 0; got < batch; {
						n, err := rx.Recv(in, time.Second)
						if err != nil || n == 0 {
							b.Fatalf("Recv: %d, %v", n, err)
						}
						got += n
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/frame")
				if inPlace && r.CopiedSends() != 0 {
					b.Errorf("%d frames copied", r.CopiedSends())
				}
			})
		}
	}
}
