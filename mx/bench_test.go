package mx

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// BenchmarkPingPong measures one-way latency (half a round trip) between two
// boards in one process, like omx_perf, reporting us/oneway, and the CPU
// time and fine-timer firings per message.
func BenchmarkPingPong(b *testing.B) {
	for _, tf := range transportFactories {
		for _, mode := range []string{"busypoll", "blocking"} {
			for _, size := range []int{8, 128, 1024, 32 << 10, 1 << 20} {
				b.Run(fmt.Sprintf("%s/%s/%dB", tf.name, mode, size), func(b *testing.B) {
					opts := DefaultBoardOptions()
					opts.BusyPoll = mode == "busypoll"
					pingPong(b, tf, opts, size)
				})
			}
		}
	}
}

func pingPong(b *testing.B, tf transportFactory, opts BoardOptions, size int) {
	pr := newPair(b, tf, opts, loopback.Faults{})
	ctx := context.Background()
	sbuf, rbuf := make([]byte, size), make([]byte, size)
	pbuf, qbuf := make([]byte, size), make([]byte, size)
	done := make(chan error, 1)
	iters := b.N + 10
	go func() {
		segs, rsegs := [][]byte{qbuf}, [][]byte{pbuf}
		for i := 0; i < iters; i++ {
			r, err := pr.b.IRecv(rsegs, 0, 0, nil)
			if err != nil {
				done <- err
				return
			}
			if _, err := r.Wait(ctx); err != nil {
				done <- err
				return
			}
			s, err := pr.b.ISend(segs, pr.btoa, 0, nil)
			if err != nil {
				done <- err
				return
			}
			if _, err := s.Wait(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	segs, rsegs := [][]byte{sbuf}, [][]byte{rbuf}
	round := func() { pingOnce(b, ctx, pr.a, pr.atob, pr.a, 0, 0, segs, rsegs) }
	for i := 0; i < 10; i++ {
		round()
	}
	firings := func() (n uint64) {
		for _, bd := range []*Board{pr.ba, pr.bb} {
			n += bd.Counters()[FineFirings]
		}
		return n
	}
	b.ReportAllocs()
	b.ResetTimer()
	f0, c0 := firings(), cpuTime()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		round()
	}
	el := time.Since(start)
	cpu := cpuTime() - c0
	b.StopTimer()
	f1 := firings()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(el.Nanoseconds())/1e3/float64(2*b.N), "us/oneway")
	b.ReportMetric(float64(2*b.N*size)/el.Seconds()/1e6, "MB/s")
	// The process's CPU time and the fine timer's firings (finetimer.go)
	// per message, both boards together.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(2*b.N), "cpu-ns/msg")
	b.ReportMetric(float64(f1-f0)*1000/float64(2*b.N), "fine-firings/1k-msg")
}

// BenchmarkStream measures one-directional throughput with 16 sends in
// flight, reporting MB/s.
func BenchmarkStream(b *testing.B) {
	for _, tf := range transportFactories {
		for _, size := range []int{8, 4096, 32 << 10, 256 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%s/%dB", tf.name, size), func(b *testing.B) {
				stream(b, tf, DefaultBoardOptions(), size)
			})
		}
	}
}

func stream(b *testing.B, tf transportFactory, opts BoardOptions, size int) {
	const window = 16
	pr := newPair(b, tf, opts, loopback.Faults{})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		bufs := make([][]byte, window)
		reqs := make([]*Request, window)
		for i := range bufs {
			bufs[i] = make([]byte, size)
		}
		for i := 0; i < b.N; i++ {
			k := i % window
			if reqs[k] != nil {
				if _, err := reqs[k].Wait(ctx); err != nil {
					done <- err
					return
				}
			}
			r, err := pr.b.IRecv([][]byte{bufs[k]}, 0, 0, nil)
			if err != nil {
				done <- err
				return
			}
			reqs[k] = r
		}
		for _, r := range reqs {
			if r != nil {
				if _, err := r.Wait(ctx); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	msg := make([]byte, size)
	segs := [][]byte{msg}
	reqs := make([]*Request, window)
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		k := i % window
		if reqs[k] != nil {
			if _, err := reqs[k].Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		r, err := pr.a.ISend(segs, pr.atob, 0, nil)
		if err != nil {
			b.Fatal(err)
		}
		reqs[k] = r
	}
	for _, r := range reqs {
		if r != nil {
			r.Wait(ctx)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.ReportMetric(float64(b.N)*float64(size)/el.Seconds()/1e6, "MB/s")
}
