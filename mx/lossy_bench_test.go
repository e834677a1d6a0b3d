package mx

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// lossyOptions are the board options of the lossy benchmarks and tests:
// mxbench's settings for a faulty wire (resend soon rather than after
// Open-MX's half second), so the lossless and lossy figures of one run are
// measured with the same options.
func lossyOptions() BoardOptions {
	o := DefaultBoardOptions()
	o.ResendDelay = 20 * time.Millisecond
	o.PullTimeout = 50 * time.Millisecond
	return o
}

// BenchmarkLossyPingPong measures loss recovery (docs/benchmarks.md): ping-pong over the
// loopback wire with seeded frame loss, per loss rate and size, reporting
// bandwidth, mean and p99 one-way latency (half of each round trip) and the
// loss-recovery counters of both endpoints per round trip.
//
//	go test -run '^$' -bench LossyPingPong -benchtime 300x ./mx/
//
// Each runs with blocking waits (wait=block) and busy-polling ones
// (wait=spin).
func BenchmarkLossyPingPong(b *testing.B) {
	for _, wait := range []string{"block", "spin"} {
		for _, loss := range []float64{0, 0.001, 0.01} {
			for _, size := range []int{8, 64 << 10, 1 << 20} {
				b.Run(fmt.Sprintf("wait=%s/loss=%g/%dB", wait, loss, size), func(b *testing.B) {
					o := lossyOptions()
					o.BusyPoll = wait == "spin"
					lossyPingPong(b, o, loopback.Faults{Loss: loss, Seed: 13}, size)
				})
			}
		}
	}
}

func lossyPingPong(b *testing.B, o BoardOptions, f loopback.Faults, size int) {
	tf := transportFactories[0] // the loopback wire
	pr := newPair(b, tf, o, f)
	ctx := testCtx(b, 10*time.Minute)
	sbuf, rbuf := pattern(size, 1), make([]byte, size)
	pbuf := make([]byte, size)
	const warm = 10
	ctx, done := pr.echoB(ctx, b.N+warm, [][]byte{pbuf}, [][]byte{pbuf})
	round := func() { exchange(b, ctx, pr.a, pr.atob, pr.a, 0, 0, [][]byte{sbuf}, [][]byte{rbuf}) }
	for i := 0; i < warm; i++ {
		round()
	}
	ca0, cb0 := pr.a.Counters(), pr.b.Counters()
	qd0 := queueDrops(pr)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		round()
		lat = append(lat, time.Since(t0)/2)
	}
	el := time.Since(start)
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	if string(rbuf) != string(sbuf) {
		b.Fatal("the echoed message differs from the one sent")
	}
	ca, cb := pr.a.Counters(), pr.b.Counters()
	slices.Sort(lat)
	n := float64(b.N)
	b.ReportMetric(float64(el.Nanoseconds())/1e3/(2*n), "us/oneway")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Nanoseconds())/1e3, "p99-us/oneway")
	b.ReportMetric(2*n*float64(size)/el.Seconds()/1e6, "MB/s")
	for _, c := range []struct {
		k    Counter
		unit string
	}{
		{FastRetransmits, "fast-rtx/op"}, {TimerRetransmits, "timer-rtx/op"},
		{DupReceived, "dups/op"}, {PullFramesRerequested, "pull-rereq/op"}, {PullTimeouts, "pull-timeouts/op"},
		{TailProbes, "tlp/op"},
	} {
		d := ca[c.k] - ca0[c.k] + cb[c.k] - cb0[c.k]
		b.ReportMetric(float64(d)/n, c.unit)
	}
	// Frames the wire itself dropped for want of room (not the loss
	// model's): 0 unless a receive queue stayed full (transport/loopback).
	b.ReportMetric(float64(queueDrops(pr)-qd0)/n, "queue-drops/op")
}

// queueDrops sums the loopback ports' queue_drops counters of a pair.
func queueDrops(pr *pair) uint64 {
	var d uint64
	for _, bd := range []*Board{pr.ba, pr.bb} {
		for _, c := range bd.TransportCounters() {
			if c.Name == "queue_drops" {
				d += c.Value
			}
		}
	}
	return d
}

// pongOnce receives one message into buf on pr.b and sends it back.
func pongOnce(ctx context.Context, pr *pair, buf []byte) error {
	r, err := pr.b.IRecv([][]byte{buf}, 0, 0, nil)
	if err != nil {
		return err
	}
	if _, err := r.Wait(ctx); err != nil {
		return err
	}
	s, err := pr.b.ISend([][]byte{buf}, pr.btoa, 0, nil)
	if err != nil {
		return err
	}
	_, err = s.Wait(ctx)
	return err
}
