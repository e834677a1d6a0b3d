package mx

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/shm"
)

// BenchmarkAlltoallCost measures what an 8-byte message of an alltoall
// among n boards on shared-memory rings costs mx's CPU, without the
// scheduler: the n boards live in one process, and one goroutine plays
// every rank in turn, so no wait ever yields or sleeps and cpu-ns/msg is
// the sender's and the receiver's work (the send into a lane or the
// receive queue, the look that finds the record, its delivery, the
// requests' lives) with warm caches. Beside a multi-process run on a
// crowded machine, whose CPU per round moves with how often the ranks
// give their CPUs away, it counts the instructions a message costs.
//
// "posted": every rank posts its receives, then every rank sends, then
// every rank waits: each record finds its receive posted (laneFast).
// "unexpected": every rank sends first, then each rank posts and waits
// for its receives one at a time: the records a wait's looks take before
// their receive is posted go to the unexpected queue, and the receive
// posted later takes them from there, as in an oversubscribed alltoall,
// where a rank that runs ahead sends the next round's messages before
// its peers post their receives (about half the messages of 8 ranks on
// 2 CPUs).
func BenchmarkAlltoallCost(b *testing.B) {
	for _, n := range []int{4, 8} {
		for _, mode := range []string{"posted", "unexpected"} {
			b.Run(fmt.Sprintf("%d/%s", n, mode), func(b *testing.B) { alltoallCost(b, n, mode == "unexpected") })
		}
	}
}

func alltoallCost(b *testing.B, n int, unexp bool) {
	dir := shmDir(b)
	o := DefaultBoardOptions()
	o.Local.Off = true // through the rings, as between processes
	// Waits poll (every source, as messageCost's), and the receive loops,
	// which each board's waits keep away while they come often enough
	// (pollGrace), sleep at once when they do look: none of their CPU is
	// counted.
	o.BusyPoll = true
	eps := make([]*Endpoint, n)
	addrs := make([][]Addr, n)
	for i := range n {
		tr, err := shm.Open(shm.Options{Dir: dir, Spin: -1})
		if err != nil {
			b.Fatal(err)
		}
		bd, err := NewBoard(tr, o)
		if err != nil {
			tr.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { bd.Close() })
		if eps[i], err = bd.OpenEndpoint(0, testKey); err != nil {
			b.Fatal(err)
		}
	}
	ctx := testCtx(b, time.Minute)
	for i := range n {
		addrs[i] = make([]Addr, n)
		for j := range n {
			if i == j {
				continue
			}
			a, err := eps[i].Connect(ctx, eps[j].b.NICID(), 0, testKey)
			if err != nil {
				b.Fatal(err)
			}
			addrs[i][j] = a
		}
	}
	sbuf := make([]byte, 8)
	rbuf := make([][][]byte, n)
	for i := range rbuf {
		rbuf[i] = make([][]byte, n)
		for j := range rbuf[i] {
			rbuf[i][j] = make([]byte, 8)
		}
	}
	reqs := make([][]*Request, n)
	wait := func(rs []*Request) {
		for _, r := range rs {
			if _, err := r.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	post := func(i, j int) *Request {
		r, err := eps[i].IRecv([][]byte{rbuf[i][j]}, uint64(j), ^uint64(0), nil)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	send := func(i int) {
		for k := 1; k < n; k++ {
			j := (i + k) % n
			r, err := eps[i].ISend([][]byte{sbuf}, addrs[i][j], uint64(i), nil)
			if err != nil {
				b.Fatal(err)
			}
			reqs[i] = append(reqs[i], r)
		}
	}
	round := func() {
		if !unexp {
			for i := range n {
				for k := 1; k < n; k++ {
					reqs[i] = append(reqs[i], post(i, (i-k+n)%n))
				}
			}
		}
		for i := range n {
			send(i)
		}
		for i := range n {
			wait(reqs[i])
			reqs[i] = reqs[i][:0]
			if unexp {
				for k := 1; k < n; k++ {
					wait([]*Request{post(i, (i-k+n)%n)})
				}
			}
		}
	}
	for range 3000 {
		round()
	}
	queued := func() (q uint64) {
		for _, e := range eps {
			q += e.Counters()[UnexpectedQueued]
		}
		return q
	}
	b.ReportAllocs()
	b.ResetTimer()
	q0 := queued()
	c0 := cpuTime()
	for range b.N {
		round()
	}
	cpu := cpuTime() - c0
	b.StopTimer()
	msgs := float64(b.N * n * (n - 1))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/msgs, "ns/msg")
	b.ReportMetric(float64(cpu.Nanoseconds())/msgs, "cpu-ns/msg")
	b.ReportMetric(float64(queued()-q0)/msgs, "unexp/msg")
}
