package shm

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
)

// BenchmarkFloorPingPong is the floor under mx's intra-node latency: an
// 8-byte frame bounced between this process and an echo child through the
// rings alone (no mx), both sides polling inside Recv (Options.Spin of an
// hour). It reports the one-way latency (us/oneway: the mean;
// p50-us/oneway: half the median round trip) and the receiver sleeps and
// CPU yields per round trip, which are 0 when the fast path makes no
// system call. With GOMX_BENCH_BIND=1 the two processes are bound to one
// CPU each (every thread), as mpirun --bind-to core binds MPI ranks.
//
//	GOMX_BENCH_BIND=1 go test -run '^$' -bench FloorPingPong ./transport/shm/
func BenchmarkFloorPingPong(b *testing.B) {
	frames := make([]transport.Frame, 8)
	pingPong(b, "spin", 0, []byte("8 bytes!"), func(a *Transport) int {
		n, err := a.Recv(frames, -1)
		if err != nil {
			b.Fatal(err)
		}
		return n
	})
}

// BenchmarkTransportPingPong is BenchmarkFloorPingPong through the calls mx
// makes per message (mx/board.go sendFrame, mx/poll.go pollSource): a Send
// of one frame the size of an mx TINY message of 8 bytes (34 bytes), and a
// receiver that polls with Recv(rx, 0) into a batch of 64 frames until a
// frame is there, on both sides. Each of those Recvs publishes the head of
// the previous batch and looks at the rings once, so its p50-us/oneway
// minus the floor's is what the Transport API costs a message above the
// bare rings. looks/op is the Recvs that found nothing per round trip:
// the waiting, apart from the work.
//
//	GOMX_BENCH_BIND=1 go test -run '^$' -bench 'PingPong' ./transport/shm/
func BenchmarkTransportPingPong(b *testing.B) {
	rx := make([]transport.Frame, 64)
	var looks uint64
	pingPong(b, "poll", 0, make([]byte, 34), func(a *Transport) int {
		for i := 0; ; i++ {
			n, err := a.Recv(rx, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n > 0 {
				return n
			}
			looks++
			if i&0xfffff == 0xfffff && len(a.LostPeers(nil)) > 0 {
				b.Fatal("the echo child went away")
			}
		}
	}, &looks)
}

// BenchmarkPeersIdleProcs is BenchmarkFloorPingPong in a job of N
// processes: the 8-byte ping-pong between this process and the echo child
// while N-2 other processes (children of their own) have rings both ways
// with both of them, as the ranks of a job that connected to each other,
// and then sleep in Recv. Its one-way latency stays flat in N when neither
// side's poll scans the idle peers' rings and the idle peers cost no CPU.
//
//	GOMX_BENCH_BIND=1 go test -run '^$' -bench PeersIdleProcs -benchtime 200000x ./transport/shm/
func BenchmarkPeersIdleProcs(b *testing.B) {
	frames := make([]transport.Frame, 8)
	for _, n := range []int{2, 16, 64} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			pingPong(b, "spin", n-2, []byte("8 bytes!"), func(a *Transport) int {
				n, err := a.Recv(frames, -1)
				if err != nil {
					b.Fatal(err)
				}
				return n
			})
		})
	}
}

// pingPong bounces msg between this process and an echo child of the given
// mode ("spin": Recv(-1) with an hour's spin; "poll": Recv(rx, 0) in a
// loop, one Send per frame), receiving with recv, and reports the one-way
// latency. idle more children connect to both and then sleep in Recv
// (connectIdle). With a counter of empty looks, it reports them per round
// trip.
func pingPong(b *testing.B, mode string, idle int, msg []byte, recv func(*Transport) int, looks ...*uint64) {
	dir := testDir(b)
	a, err := Open(Options{Dir: dir, Spin: time.Hour, NoHugepages: true})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	cmd, out := spawn(b, os.Args[0], nil, fmt.Sprintf("echo %s %d %s", dir, 4343, mode))
	waitReady(b, out)
	peer := NICBase | 4343
	if idle > 0 {
		connectIdle(b, a, dir, peer, idle)
	}
	defer bindBench(b, cmd.Process.Pid)()
	tx := []transport.Frame{{Peer: peer, Data: msg}}
	trip := func() {
		if _, err := a.Send(tx); err != nil {
			b.Fatal(err)
		}
		for got := 0; got == 0; {
			got = recv(a)
		}
	}
	for range 1000 {
		trip()
	}
	rtts := make([]time.Duration, 0, b.N)
	c0 := a.Counters()
	var l0 uint64
	if len(looks) > 0 {
		l0 = *looks[0]
	}
	b.ResetTimer()
	prev := time.Now()
	start := prev
	for range b.N {
		trip()
		now := time.Now()
		rtts = append(rtts, now.Sub(prev))
		prev = now
	}
	el := prev.Sub(start)
	b.StopTimer()
	slices.Sort(rtts)
	b.ReportMetric(el.Seconds()*1e6/float64(2*b.N), "us/oneway")
	b.ReportMetric(rtts[len(rtts)/2].Seconds()*1e6/2, "p50-us/oneway")
	c1 := a.Counters()
	per := func(name string) float64 {
		return float64(counterIn(c1, name)-counterIn(c0, name)) / float64(b.N)
	}
	b.ReportMetric(per("shm receiver sleeps"), "sleeps/op")
	b.ReportMetric(per("shm receiver yields"), "yields/op")
	if len(looks) > 0 {
		b.ReportMetric(float64(*looks[0]-l0)/float64(b.N), "looks/op")
	}
	a.Send([]transport.Frame{{Peer: peer, Data: []byte("quit")}})
	cmd.Wait()
}

// connectIdle starts n idle children ("idle DIR BOARD A E"): each connects
// to a (this process) and to the echo board e, both ways (the echo board
// answers its hello, a sends it one), and then sleeps in Recv until a's
// "quit" or its peers go away. It returns once a has every hello and every
// child has a's: a job whose ranks connected to each other, each pair
// through the receivers' queues.
func connectIdle(b *testing.B, a *Transport, dir string, e transport.NICID, n int) {
	boards := make([]transport.NICID, n)
	for i := range boards {
		board := 5000 + i
		boards[i] = NICBase | transport.NICID(board)
		_, out := spawn(b, os.Args[0], nil, fmt.Sprintf("idle %s %d %d %d", dir, board, a.Board(), e&^NICBase))
		waitReady(b, out)
	}
	rx := make([]transport.Frame, 64)
	got := map[transport.NICID]bool{}
	deadline := time.Now().Add(time.Minute)
	for len(got) < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d idle children said hello", len(got), n)
		}
		k, err := a.Recv(rx, 100*time.Millisecond)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range rx[:k] {
			got[f.Peer] = true
		}
	}
	for _, p := range boards {
		if _, err := a.Send([]transport.Frame{{Peer: p, Data: []byte("hello")}}); err != nil {
			b.Fatal(err)
		}
	}
	if f := a.Footprint(); f.Peers != n {
		b.Fatalf("connected with %d boards, want the %d idle ones", f.Peers, n)
	}
}

func counterIn(cs []transport.Counter, name string) uint64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// bindBench binds this process to the first CPU it may use and the child
// pid to the second, every thread, when GOMX_BENCH_BIND is set and there
// are two CPUs; the returned function unbinds this process.
func bindBench(b *testing.B, pid int) func() {
	if os.Getenv("GOMX_BENCH_BIND") == "" {
		return func() {}
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		b.Logf("not binding: %d CPUs (%v)", all.Count(), err)
		return func() {}
	}
	var cpus []int
	for c := 0; c < 1024 && len(cpus) < 2; c++ {
		if all.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	set := func(pid int, s unix.CPUSet) {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				unix.SchedSetaffinity(tid, &s)
			}
		}
	}
	var s0, s1 unix.CPUSet
	s0.Set(cpus[0])
	s1.Set(cpus[1])
	set(pid, s1)
	set(os.Getpid(), s0)
	return func() { set(os.Getpid(), all) }
}

// TestSmallFramesCostNothing: an 8-byte frame to a connected peer, sent and
// then received by a polling Recv, allocates nothing and makes the
// receiver neither sleep nor need a wake-up, whatever record of the ring it
// lands in (the loop goes round a small ring several times).
func TestSmallFramesCostNothing(t *testing.T) {
	a, b := newTestPair(t, Options{RingSize: minRingLen, MTU: 4096, NoHugepages: true})
	defer a.Close()
	defer b.Close()
	msg := []transport.Frame{{Peer: b.Addr(), Data: []byte("8 bytes!")}}
	frames := make([]transport.Frame, 8)
	bad := ""
	trip := func() {
		if _, err := a.Send(msg); err != nil {
			bad = err.Error()
		}
		if n, err := b.Recv(frames, 0); n != 1 || err != nil || string(frames[0].Data) != "8 bytes!" {
			bad = fmt.Sprintf("Recv = %d, %v", n, err)
		}
	}
	trip() // connects
	laps := 3 * minRingLen / ringAlign
	if allocs := testing.AllocsPerRun(laps, trip); allocs != 0 || bad != "" {
		t.Fatalf("%.2f allocations per frame (%s)", allocs, bad)
	}
	if s, w := counterIn(b.Counters(), "shm receiver sleeps"), counterIn(a.Counters(), "shm receiver wake-ups sent"); s != 0 || w != 0 {
		t.Fatalf("%d sleeps, %d wake-ups for frames to a polling receiver", s, w)
	}
}

// BenchmarkSendRecvSmall is the CPU cost of an 8-byte frame through a ring
// on one core, with no cross-core transfer: a Send, then a Recv that polls
// (timeout 0), in one goroutine, so the bookkeeping of both sides is what
// it measures. It must not allocate.
func BenchmarkSendRecvSmall(b *testing.B) {
	tr := openBoards(b, 2)
	a, r := tr[0], tr[1]
	msg := []transport.Frame{{Peer: r.Addr(), Data: []byte("8 bytes!")}}
	frames := make([]transport.Frame, 8)
	trip := func() {
		if _, err := a.Send(msg); err != nil {
			b.Fatal(err)
		}
		if n, err := r.Recv(frames, 0); n != 1 || err != nil {
			b.Fatalf("Recv = %d, %v", n, err)
		}
	}
	trip() // connects
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		trip()
	}
}

// BenchmarkRecvEmpty is the cost of one look at rings that hold nothing: a
// Recv(rx, 0) from a connected peer that sent nothing more, what a waiter
// polling the rings (mx/poll.go) pays per look while it waits. It must not
// allocate.
func BenchmarkRecvEmpty(b *testing.B) {
	tr := openBoards(b, 2)
	a, r := tr[0], tr[1]
	rx := make([]transport.Frame, 64)
	if _, err := a.Send([]transport.Frame{{Peer: r.Addr(), Data: []byte("8 bytes!")}}); err != nil {
		b.Fatal(err)
	}
	if n, err := r.Recv(rx, time.Second); n != 1 || err != nil {
		b.Fatalf("Recv = %d, %v", n, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if n, err := r.Recv(rx, 0); n != 0 || err != nil {
			b.Fatalf("Recv = %d, %v", n, err)
		}
	}
}

// BenchmarkSendPeers is Send's cost when consecutive frames go to
// different peers (an all-to-all): 8-byte frames to four receivers in turn,
// each drained every 256 of its frames. ns/op is one frame sent and
// received.
func BenchmarkSendPeers(b *testing.B) {
	tr := openBoards(b, 5)
	a, peers := tr[0], tr[1:]
	msgs := make([][]transport.Frame, len(peers))
	rx := make([]transport.Frame, 64)
	for i, p := range peers {
		msgs[i] = []transport.Frame{{Peer: p.Addr(), Data: []byte("8 bytes!")}}
		if _, err := a.Send(msgs[i]); err != nil { // connects
			b.Fatal(err)
		}
		if n, err := p.Recv(rx, time.Second); n != 1 || err != nil {
			b.Fatalf("Recv = %d, %v", n, err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		p := i % len(peers)
		if _, err := a.Send(msgs[p]); err != nil {
			b.Fatal(err)
		}
		if i%(256*len(peers)) >= 256*len(peers)-len(peers) {
			for n := 1; n > 0; {
				n, _ = peers[p].Recv(rx, 0)
			}
		}
	}
}

// openBoards opens n transports on ordinary pages in a fresh endpoint
// directory, closed when b ends.
func openBoards(b *testing.B, n int) []*Transport {
	dir := testDir(b)
	tr := make([]*Transport, n)
	for i := range tr {
		t, err := Open(Options{Dir: dir, NoHugepages: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { t.Close() })
		tr[i] = t
	}
	return tr
}
