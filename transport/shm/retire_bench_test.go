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
