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
	sbuf, rbuf := make([]byte, size), make([]byte, size)
	pbuf, qbuf := make([]byte, size), make([]byte, size)
	ctx, done := pr.echoB(testCtx(b, time.Minute), b.N+10, [][]byte{pbuf}, [][]byte{qbuf})
	segs, rsegs := [][]byte{sbuf}, [][]byte{rbuf}
	round := func() { pingOnce(b, ctx, pr.a, pr.atob, pr.a, 0, 0, segs, rsegs) }
	for i := 0; i < 10; i++ {
		round()
	}
	b.ReportAllocs()
	b.ResetTimer()
	w0, c0 := takeWakes(pr.ba, pr.bb), cpuTime()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		round()
	}
	el := time.Since(start)
	cpu := cpuTime() - c0
	b.StopTimer()
	w1 := takeWakes(pr.ba, pr.bb)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(el.Nanoseconds())/1e3/float64(2*b.N), "us/oneway")
	b.ReportMetric(float64(2*b.N*size)/el.Seconds()/1e6, "MB/s")
	// The process's CPU time and the fine timer's firings (finetimer.go)
	// per message, both boards together.
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(2*b.N), "cpu-ns/msg")
	w1.sub(w0).report(b, 2*b.N)
}

// boardWakes is what woke two boards: their fine timers' arms, firings
// and firings with nothing due, their periodic timer runs (ticks), and
// their sleeps that ended by a timeout with nothing to do, of all the
// waits their receive loops made (finetimer.go).
type boardWakes struct {
	arms, firings, idle, ticks, empty, waits uint64
}

// takeWakes adds up the boards' wake-up counts now.
func takeWakes(bds ...*Board) (w boardWakes) {
	for _, bd := range bds {
		c := bd.Counters()
		_, ticks, _ := bd.idleState()
		w.arms += c[FineArms]
		w.firings += c[FineFirings]
		w.idle += c[FineIdle]
		w.empty += c[SleepsEmpty]
		w.ticks += ticks
		w.waits += bd.loopWaits.Load()
	}
	return w
}

func (w boardWakes) sub(v boardWakes) boardWakes {
	return boardWakes{w.arms - v.arms, w.firings - v.firings, w.idle - v.idle, w.ticks - v.ticks, w.empty - v.empty, w.waits - v.waits}
}

// report reports the counts per 1 000 of msgs messages.
func (w boardWakes) report(b *testing.B, msgs int) {
	per := func(n uint64) float64 { return float64(n) * 1000 / float64(max(msgs, 1)) }
	b.ReportMetric(per(w.arms), "fine-arms/1k-msg")
	b.ReportMetric(per(w.firings), "fine-firings/1k-msg")
	b.ReportMetric(per(w.idle), "fine-idle/1k-msg")
	b.ReportMetric(per(w.ticks), "ticks/1k-msg")
	b.ReportMetric(per(w.empty), "empty-sleeps/1k-msg")
	b.ReportMetric(per(w.waits), "loop-waits/1k-msg")
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
