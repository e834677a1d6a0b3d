package loopback

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// pingPong bounces one 8-byte frame between two ports b.N times. With poll
// the receivers busy-poll (Recv with timeout 0); otherwise they block.
func pingPong(b *testing.B, size int, poll bool) {
	if poll && runtime.GOMAXPROCS(0) < 2 {
		b.Skip("busy-poll ping-pong needs GOMAXPROCS >= 2")
	}
	n := NewNetwork(Options{})
	defer n.Close()
	ping, _ := n.Attach(1)
	pong, _ := n.Attach(2)
	timeout := time.Duration(-1)
	if poll {
		timeout = 0
	}
	recv := func(p *Port, f []transport.Frame) {
		for {
			k, err := p.Recv(f, timeout)
			if k > 0 || err != nil {
				return
			}
		}
	}
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		in := make([]transport.Frame, 1)
		out := []transport.Frame{{Peer: 1, Data: make([]byte, size)}}
		for {
			recv(pong, in)
			if len(in[0].Data) == 0 || in[0].Data[0] == 0xff {
				return
			}
			pong.Send(out)
		}
	}()
	in := make([]transport.Frame, 1)
	out := []transport.Frame{{Peer: 2, Data: make([]byte, size)}}
	out[0].Data[0] = 1
	for range 2 * DefaultQueueLen { // warm up: every slot buffer, the scheduler
		ping.Send(out)
		recv(ping, in)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ping.Send(out)
		recv(ping, in)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	out[0].Data[0] = 0xff
	ping.Send(out)
	<-stop
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(2*b.N), "ns/oneway")
}

// BenchmarkPingPong8B is the 8-byte one-way latency of the mx target (under
// 1 µs in one process), with busy-polling receivers.
func BenchmarkPingPong8B(b *testing.B) { pingPong(b, 8, true) }

// BenchmarkPingPong8BBlocking is the same with receivers that sleep in Recv.
func BenchmarkPingPong8BBlocking(b *testing.B) { pingPong(b, 8, false) }

// BenchmarkStream streams batches of 32 frames from one port to a receiver
// goroutine, keeping at most half a queue in flight so that nothing is
// dropped, and reports frames and bytes per second.
func BenchmarkStream(b *testing.B) {
	for _, size := range []int{8, 1024, DefaultMTU} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { stream(b, size) })
	}
}

func stream(b *testing.B, size int) {
	const batch, queue = 32, 1024
	n := NewNetwork(Options{QueueLen: queue})
	defer n.Close()
	tx, _ := n.Attach(1)
	rx, _ := n.Attach(2)
	var received atomic.Int64
	go func() {
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
		out[i] = transport.Frame{Peer: 2, Data: make([]byte, size)}
	}
	var sent int64
	send := func() {
		for sent-received.Load() > queue/2 {
			runtime.Gosched()
		}
		tx.Send(out)
		sent += batch
	}
	for range 2 * queue / batch { // grow every slot buffer once
		send()
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	frames := 0
	for range b.N {
		send()
		frames += batch
	}
	for received.Load() < sent {
		runtime.Gosched()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	tx.Close()
	rx.Close()
	if d := n.Stats().QueueDrops; d != 0 {
		b.Fatalf("%d frames dropped", d)
	}
	secs := elapsed.Seconds()
	b.ReportMetric(float64(frames)/secs, "frames/s")
	b.ReportMetric(float64(frames*size)/secs/1e6, "MB/s")
}

// BenchmarkSendRecv8B is the CPU cost of one 8-byte Send and the Recv(0) that
// takes it, in one goroutine: the floor under the ping-pong figures, without
// the cross-core cache traffic and scheduling that a loaded machine adds.
func BenchmarkSendRecv8B(b *testing.B) {
	n := NewNetwork(Options{})
	defer n.Close()
	a, _ := n.Attach(1)
	p, _ := n.Attach(2)
	out := []transport.Frame{{Peer: 2, Data: make([]byte, 8)}}
	in := make([]transport.Frame, 1)
	for range 2 * DefaultQueueLen {
		a.Send(out)
		p.Recv(in, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		a.Send(out)
		if k, _ := p.Recv(in, 0); k != 1 {
			b.Fatal("frame lost")
		}
	}
}
