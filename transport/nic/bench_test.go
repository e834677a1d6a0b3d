package nic_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated/nicpair"
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

// BenchmarkWake measures how long a Wake takes to end a Recv that sleeps
// on its NIC's interrupts, over the interrupt pairs of TestWake: one
// queue's vector, and a board's four 82599 vectors (a poll(2) sleep).
// Each round lets the Recv reach its sleep (a millisecond, then the
// Wake), so ns/op is mostly that pause; wake-us is the time from the
// Wake to Recv's return, the figure to read.
func BenchmarkWake(b *testing.B) {
	for _, c := range irqPairs {
		b.Run(c.name, func(b *testing.B) {
			ts := nicpair.Transports(b, c.nics(b), nicpair.Raw)
			defer func() {
				for _, tr := range ts {
					_ = tr.Close()
				}
			}()
			a := ts[0]
			back := make(chan error)
			start := make(chan struct{})
			go func() {
				frames := make([]transport.Frame, 4)
				for range start {
					_, err := a.Recv(frames, time.Hour)
					back <- err
				}
			}()
			defer close(start)
			var woken time.Duration
			for range b.N {
				start <- struct{}{}
				time.Sleep(time.Millisecond)
				t0 := time.Now()
				a.Wake()
				if err := <-back; err != nil {
					b.Fatal(err)
				}
				woken += time.Since(t0)
			}
			b.ReportMetric(float64(woken.Microseconds())/float64(b.N), "wake-us")
		})
	}
}
