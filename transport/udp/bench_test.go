package udp

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// pingPong bounces one frame of size bytes between two sockets on 127.0.0.1
// b.N times; with poll the receivers busy-poll (Recv with timeout 0).
func pingPong(b *testing.B, size int, poll bool) {
	if poll && runtime.GOMAXPROCS(0) < 2 {
		b.Skip("busy-poll ping-pong needs GOMAXPROCS >= 2")
	}
	ping, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ping.Close()
	pong, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer pong.Close()
	timeout := time.Duration(-1)
	if poll {
		timeout = 0
	}
	recv := func(tr *Transport, f []transport.Frame) bool {
		for {
			k, err := tr.Recv(f, timeout)
			if err != nil {
				return false
			}
			if k > 0 {
				return true
			}
		}
	}
	go func() {
		in := make([]transport.Frame, 1)
		out := []transport.Frame{{Peer: ping.Addr(), Data: make([]byte, size)}}
		for recv(pong, in) {
			pong.Send(out)
		}
	}()
	in := make([]transport.Frame, 1)
	out := []transport.Frame{{Peer: pong.Addr(), Data: make([]byte, size)}}
	for range 1000 {
		ping.Send(out)
		recv(ping, in)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ping.Send(out)
		if !recv(ping, in) {
			b.Fatal("ping socket closed")
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(2*b.N), "ns/oneway")
}

// BenchmarkPingPong8B is the 8-byte one-way latency over 127.0.0.1 with
// busy-polling receivers: the UDP baseline of the mx latency targets.
func BenchmarkPingPong8B(b *testing.B) { pingPong(b, 8, true) }

// BenchmarkPingPong8BBlocking is the same with receivers that sleep in the
// Go network poller.
func BenchmarkPingPong8BBlocking(b *testing.B) { pingPong(b, 8, false) }

// BenchmarkStream sends batches of 32 frames to a receiving goroutine and
// reports the frames and bytes per second that arrive (UDP drops what the
// receiver cannot keep up with; the drop share is reported too).
func BenchmarkStream(b *testing.B) {
	for _, size := range []int{8, 1024, DefaultMTU} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { stream(b, size) })
	}
}

func stream(b *testing.B, size int) {
	const batch = 32
	tx, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		b.Fatal(err)
	}
	var received atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		in := make([]transport.Frame, batch)
		for {
			k, err := rx.Recv(in, -1)
			if err != nil {
				return
			}
			received.Add(int64(k))
		}
	}()
	out := make([]transport.Frame, batch)
	for i := range out {
		out[i] = transport.Frame{Peer: rx.Addr(), Data: make([]byte, size)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent := int64(0)
	for range b.N {
		// Keep at most 1024 frames in flight so that the socket buffer,
		// not the benchmark, sets the pace.
		for i := 0; sent-received.Load() > 1024 && i < 100000; i++ {
			runtime.Gosched()
		}
		n, _ := tx.Send(out)
		sent += int64(n)
	}
	// Let the stragglers land, briefly and boundedly.
	for i := 0; received.Load() < sent && i < 1000; i++ {
		time.Sleep(10 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	rx.Close()
	<-done
	got := received.Load()
	secs := elapsed.Seconds()
	b.ReportMetric(float64(got)/secs, "frames/s")
	b.ReportMetric(float64(got)*float64(size)/secs/1e6, "MB/s")
	b.ReportMetric(100*float64(sent-got)/float64(max(sent, 1)), "%lost")
}

// BenchmarkSendRecv8B is the cost of one 8-byte Send and the Recv(0) that
// takes it, in one goroutine: two syscalls and the kernel's loopback path,
// without cross-core wakeups.
func BenchmarkSendRecv8B(b *testing.B) {
	a, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	p, err := Listen("127.0.0.1:0", Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	out := []transport.Frame{{Peer: p.Addr(), Data: make([]byte, 8)}}
	in := make([]transport.Frame, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		a.Send(out)
		for i := 0; ; i++ {
			if k, _ := p.Recv(in, 0); k == 1 {
				break
			}
			if i == 1_000_000 {
				b.Fatal("frame lost")
			}
		}
	}
}
