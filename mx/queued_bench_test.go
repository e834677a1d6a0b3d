package mx

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
)

// BenchmarkQueuedRate is the aggregate message rate of N endpoint pairs,
// each driven by its own goroutine, over two emulated 82599s: with N
// queues, each pair's endpoints on queues of their own whose ports the NIC
// steers there (one progress goroutine per queue), against the same N
// pairs on one queue (one progress goroutine and one board lock for all).
// Each goroutine posts a window of 64-byte messages and their receives and
// waits for all of them, b.N messages in all. The model NICs run on the
// same cores as the boards, so the figure is the machine's, not a NIC's.
func BenchmarkQueuedRate(b *testing.B) {
	for _, n := range []int{1, 2, 4, 8} {
		for _, steered := range []bool{true, false} {
			name, queues := fmt.Sprintf("endpoints=%d/steered-queues=%d", n, n), n
			if !steered {
				name, queues = fmt.Sprintf("endpoints=%d/one-queue", n), 1
			}
			b.Run(name, func(b *testing.B) { benchQueuedRate(b, n, queues) })
		}
	}
}

func benchQueuedRate(b *testing.B, n, queues int) {
	ts, _ := queuedNICs(b, max(queues, 1), emulated.CableOptions{})
	var qbs [2]*QueuedBoard
	for i := range 2 {
		qb, err := NewQueuedBoard(ts[i], QueuedOptions{Board: overNIC})
		if err != nil {
			b.Fatal(err)
		}
		defer qb.Close()
		qbs[i] = qb
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src, dst := make([]*Endpoint, n), make([]*Endpoint, n)
	to := make([]Addr, n)
	for k := range n {
		var err error
		if src[k], err = qbs[0].OpenEndpoint(AnyEndpoint, testKey); err != nil {
			b.Fatal(err)
		}
		if dst[k], err = qbs[1].OpenEndpoint(AnyEndpoint, testKey); err != nil {
			b.Fatal(err)
		}
		if to[k], err = src[k].Connect(ctx, dst[k].Addr().NIC, dst[k].ID(), testKey); err != nil {
			b.Fatal(err)
		}
	}
	const window = 32
	per := (b.N + n - 1) / n
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for k := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := make([]byte, 64)
			bufs := make([][]byte, window)
			for i := range bufs {
				bufs[i] = make([]byte, 64)
			}
			sends, recvs := make([]*Request, window), make([]*Request, window)
			for done := 0; done < per; {
				w := min(window, per-done)
				for i := range w {
					r, err := dst[k].IRecv([][]byte{bufs[i]}, uint64(done+i), ^uint64(0), nil)
					if err != nil {
						errs <- err
						return
					}
					recvs[i] = r
				}
				for i := range w {
					s, err := src[k].ISend([][]byte{msg}, to[k], uint64(done+i), nil)
					if err != nil {
						errs <- err
						return
					}
					sends[i] = s
				}
				for i := range w {
					if _, err := sends[i].Wait(ctx); err != nil {
						errs <- err
						return
					}
					if _, err := recvs[i].Wait(ctx); err != nil {
						errs <- err
						return
					}
				}
				done += w
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(per*n)/el.Seconds(), "msgs/s")
}
