package shm

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// BenchmarkLanesFollowBusyPairs: one producer sends 4 KiB frames to four
// consumers in phases, each phase to two of them ((p, p+1) mod 4), with
// two lanes to share. Its RetireIdle runs at every 1/16th of a phase with
// a clock that runs an eighth of LaneIdle a look, so a phase lasts two
// LaneIdles: a pair idle for a whole phase is retired, a busy one never.
// With retirement (retire) the lanes follow the busy pairs; without
// (keep: LaneIdle negative) the pairs that were busy first keep them, and
// the others' frames go through the queues, gathered from cells. It
// reports ns per frame sent and received, lane% (the share of frames
// sent while their pair wrote a lane), retired (lanes retired per phase)
// and the bytes the producer maps at the end (MiB).
//
//	go test -run '^$' -bench LanesFollowBusyPairs -benchtime 200000x ./transport/shm/
func BenchmarkLanesFollowBusyPairs(b *testing.B) {
	for _, c := range []struct {
		name string
		idle time.Duration
	}{{"retire", time.Second}, {"keep", -1}} {
		b.Run(c.name, func(b *testing.B) {
			const consumers, phase, batch = 4, 8192, 16 // phase: frames per pair
			dir := testDir(b)
			opts := Options{Dir: dir, MTU: 8192, LaneAfter: 64, Lanes: 2, LaneIdle: c.idle, Spin: -1}
			var boards []*Transport
			for range consumers + 1 {
				t, err := Open(opts)
				if err != nil {
					b.Fatal(err)
				}
				boards = append(boards, t)
				defer t.Close()
			}
			tx, rx := boards[0], boards[1:]
			clk := &laneClock{now: time.Unix(1e9, 0)}
			frame := make([]byte, 4096)
			out := make([]transport.Frame, batch)
			in := make([]transport.Frame, 64)
			var onLane, phases int
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < b.N; {
				p := sent / (2 * phase)
				pair := [2]*Transport{rx[p%consumers], rx[(p+1)%consumers]}
				for _, r := range pair {
					lane := laneTaken(tx, r.Addr())
					for i := range out {
						out[i] = transport.Frame{Peer: r.Addr(), Data: frame}
					}
					if _, err := tx.Send(out); err != nil {
						b.Fatal(err)
					}
					if lane {
						onLane += batch
					}
					for got := 0; got < batch; {
						n, err := r.Recv(in, time.Second)
						if err != nil || n == 0 {
							b.Fatalf("receive: %d frames, %v", n, err)
						}
						got += n
					}
					sent += batch
				}
				if sent%(2*phase/16) == 0 {
					tx.RetireIdle(clk.after(c.idle / 8))
				}
				if sent/(2*phase) != p {
					phases++
				}
			}
			b.StopTimer()
			b.ReportMetric(100*float64(onLane)/float64(b.N), "lane%")
			b.ReportMetric(float64(counter(tx, CounterLanesRetired))/float64(max(phases, 1)), "retired/phase")
			b.ReportMetric(float64(tx.Footprint().MappedBytes)/(1<<20), "MiB")
			if testing.Verbose() {
				fmt.Println(c.name, tx.Footprint())
			}
		})
	}
}

// BenchmarkLanesFollowBusyProducers is BenchmarkLanesFollowBusyPairs with
// the receiver's bound binding instead of the producer's: four producers
// send to one consumer that reads two lanes. In phase p producers p and
// p+1 (mod 4) are busy, sending 4 KiB frames in batches of 16, and the
// other two trickle, a frame each per look of RetireIdle, so their lanes
// are never idle for LaneIdle. Everyone's RetireIdle runs at every 1/16th
// of a phase with a clock that runs an eighth of LaneIdle a look (a phase
// is two LaneIdles). A lane goes to a busy pair only if the consumer asks
// a trickling producer for its lane back (askback.go); without that, the
// pairs that were busy first keep the lanes for good. It reports ns per
// busy frame sent and received, lane% (the share of the busy frames sent
// while their pair wrote a lane), asked (lanes asked back per phase) and
// the bytes the consumer maps at the end (MiB).
//
//	go test -run '^$' -bench LanesFollowBusyProducers -benchtime 200000x ./transport/shm/
func BenchmarkLanesFollowBusyProducers(b *testing.B) {
	const producers, phase, batch = 4, 8192, 16 // phase: frames per busy pair
	dir := testDir(b)
	opts := Options{Dir: dir, MTU: 8192, LaneAfter: 64, Lanes: 2, LaneIdle: time.Second, Spin: -1}
	var boards []*Transport
	for range producers + 1 {
		t, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		boards = append(boards, t)
		defer t.Close()
	}
	rx, tx := boards[0], boards[1:]
	clk := &laneClock{now: time.Unix(1e9, 0)}
	frame := make([]byte, 4096)
	out := make([]transport.Frame, batch)
	for i := range out {
		out[i] = transport.Frame{Peer: rx.Addr(), Data: frame}
	}
	in := make([]transport.Frame, 64)
	recv := func(n int) {
		for got := 0; got < n; {
			k, err := rx.Recv(in, time.Second)
			if err != nil || k == 0 {
				b.Fatalf("receive: %d frames, %v", k, err)
			}
			got += k
		}
	}
	var onLane, phases int
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		p := sent / (2 * phase)
		for _, k := range [2]int{p % producers, (p + 1) % producers} {
			if laneTaken(tx[k], rx.Addr()) {
				onLane += batch
			}
			if _, err := tx[k].Send(out); err != nil {
				b.Fatal(err)
			}
			recv(batch)
			sent += batch
		}
		if sent%(2*phase/16) == 0 {
			for _, k := range [2]int{(p + 2) % producers, (p + 3) % producers} {
				if _, err := tx[k].Send(out[:1]); err != nil {
					b.Fatal(err)
				}
			}
			recv(2)
			now := clk.after(time.Second / 8)
			for _, t := range boards {
				t.RetireIdle(now)
			}
		}
		if sent/(2*phase) != p {
			phases++
		}
	}
	b.StopTimer()
	b.ReportMetric(100*float64(onLane)/float64(b.N), "lane%")
	b.ReportMetric(float64(counter(rx, "shm lanes asked back for busier pairs"))/float64(max(phases, 1)), "asked/phase")
	b.ReportMetric(float64(rx.Footprint().MappedBytes)/(1<<20), "MiB")
}
