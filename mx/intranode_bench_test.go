package mx

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
	"github.com/gomx-dev/gomx/transport/udp"
)

// BenchmarkIntranode measures ping-pong between two endpoints of one host
// for each intra-node path: "local" (two boards of one process, the
// in-process shortcut: one copy, no protocol), "shm-procs/rings" and
// "shm-procs/cma" (two processes on shm boards: the full protocol through
// shared-memory rings, large messages pulled through the rings or copied
// once by the receiver with process_vm_readv), "udp-procs" (two processes on
// UDP boards over the kernel's loopback, host path off) and "udp+shm-procs"
// (the same UDP boards with the host path on by default: mx takes the rings
// and the single copy by itself). It reports the one-way latency
// (us/oneway: the mean; p50-us/oneway: half the median round trip, as
// OSU-style ping-pongs report on a loaded machine), the ping-pong bandwidth
// (MB/s = size / mean one-way time), how many messages per round trip were
// copied once (cma/op), which says which strategy ran, and the share of
// waits that completed while polling (polled/wait, see Board.WaitStats).
func BenchmarkIntranode(b *testing.B) {
	for _, path := range []string{"local", "shm-procs/rings", "shm-procs/cma", "udp-procs", "udp+shm-procs"} {
		for _, mode := range []string{"blocking", "busypoll"} {
			for _, size := range []int{8, 64 << 10, 4 << 20} {
				b.Run(fmt.Sprintf("%s/%s/%dB", path, mode, size), func(b *testing.B) {
					opts := DefaultBoardOptions()
					opts.BusyPoll = mode == "busypoll"
					switch path {
					case "local":
						pingPong(b, transportFactory{name: "local", new: newLocalWire}, opts, size)
					case "shm-procs/rings", "shm-procs/cma":
						opts.Local.Large, _ = ParseLargeStrategy(strings.TrimPrefix(path, "shm-procs/"))
						shmPingPong(b, opts, size)
					default:
						udpPingPong(b, opts, size, path == "udp+shm-procs")
					}
				})
			}
		}
	}
}

// shmPingPong runs the ping-pong against an echo server in a child process.
func shmPingPong(b *testing.B, opts BoardOptions, size int) {
	dir := shmDir(b)
	arg := dir + " 98"
	if opts.BusyPoll {
		arg += " busy"
	}
	sc, stop := startEcho(b, "TestShmProcesses", shmChildEnv+"="+arg, "GOMX_SHM_LARGE="+opts.Local.Large.String())
	defer stop()
	if !sc.Scan() || sc.Text() != "ready" {
		b.Fatal("child did not start")
	}
	tr, err := shm.Open(shm.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	_, e, addr, ctx, done := connectEcho(b, tr, opts, shm.NICBase|98)
	defer done()
	runPingPong(b, ctx, e, addr, size)
}

// udpPingPong runs the ping-pong between UDP boards of two processes, with
// or without the host path.
func udpPingPong(b *testing.B, opts BoardOptions, size int, host bool) {
	dir := "-"
	opts.Local.Off = true
	if host {
		dir = shmDir(b)
		opts.Local.Off, opts.Local.ShmDir = false, dir // on by default: UDP ids are host-unique
	}
	arg := dir
	if opts.BusyPoll {
		arg += "+busy"
	}
	sc, stop := startEcho(b, "TestHostPath", hostChildEnv+"="+arg)
	defer stop()
	nic := scanNIC(sc)
	if nic == 0 {
		b.Fatal("child did not start")
	}
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		b.Skipf("udp unavailable: %v", err)
	}
	bd, e, addr, ctx, done := connectEcho(b, tr, opts, nic)
	defer done()
	if bd.HostPath(nic) != host {
		b.Fatalf("host path %v, want %v", bd.HostPath(nic), host)
	}
	runPingPong(b, ctx, e, addr, size)
}

// startEcho starts this test binary as the echo server that test runs in
// a child (env: its role), placed beside this process by bindPair, and
// returns the child's output and what kills and reaps it.
func startEcho(b *testing.B, test string, env ...string) (*bufio.Scanner, func()) {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.bench=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	unbind := bindPair(b, cmd.Process.Pid)
	return bufio.NewScanner(out), func() {
		unbind()
		cmd.Process.Kill()
		cmd.Wait()
	}
}

// connectEcho opens a board on tr and its endpoint 0, and connects it to
// endpoint 0 of the echo server's board nic. done closes the board.
func connectEcho(b *testing.B, tr transport.Transport, opts BoardOptions, nic transport.NICID) (bd *Board, e *Endpoint, addr Addr, ctx context.Context, done func()) {
	bd, err := NewBoard(tr, opts)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	done = func() {
		cancel()
		bd.Close()
	}
	if e, err = bd.OpenEndpoint(0, testKey); err != nil {
		done()
		b.Fatal(err)
	}
	if addr, err = e.Connect(ctx, nic, 0, testKey); err != nil {
		done()
		b.Fatal(err)
	}
	return bd, e, addr, ctx, done
}

// runPingPong times b.N round trips of size bytes to an echo server.
func runPingPong(b *testing.B, ctx context.Context, e *Endpoint, addr Addr, size int) {
	sbuf, rbuf := make([]byte, size), make([]byte, size)
	round := func() { pingOnce(b, ctx, e, addr, e, 0, 0, [][]byte{sbuf}, [][]byte{rbuf}) }
	for range 10 {
		round()
	}
	rtt := make([]time.Duration, min(b.N, 1<<20))
	w0 := e.Board().WaitStats()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		round()
		rtt[i%len(rtt)] = time.Since(t0)
	}
	b.StopTimer()
	slices.Sort(rtt)
	w := e.Board().WaitStats()
	if waits := (w.Polled - w0.Polled) + (w.Slept - w0.Slept); waits > 0 {
		b.ReportMetric(float64(w.Polled-w0.Polled)/float64(waits), "polled/wait")
	}
	b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/2e3, "p50-us/oneway")
	oneway := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / 2
	b.ReportMetric(oneway/1e3, "us/oneway")
	b.ReportMetric(float64(size)/oneway*1e3, "MB/s")
	b.ReportMetric(float64(e.Counters().Get(RecvCMA))/float64(b.N+10), "cma/op")
	s, _ := e.ISend(nil, addr, 1<<63, nil) // not echoed: the child's loop ends on a kill
	s.Forget()
}

// bindPair, when GOMX_BENCH_BIND is set, binds every thread of this process
// to the first CPU it may use and every thread of the child pid to the
// second (threads started later inherit it), as mpirun's default
// --bind-to core does with two ranks, so the comparison with Open MPI in
// hack/intranode-vs-openmpi.sh runs both under the same placement. It
// returns what puts this process's threads back.
func bindPair(b *testing.B, pid int) func() {
	if os.Getenv("GOMX_BENCH_BIND") == "" {
		return func() {}
	}
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		b.Logf("not binding: %d CPUs (%v)", all.Count(), err)
		return func() {}
	}
	set := func(pid int, cpu int) {
		var s unix.CPUSet
		if cpu < 0 {
			s = all
		} else {
			s.Set(cpu)
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			if tid, err := strconv.Atoi(t.Name()); err == nil {
				unix.SchedSetaffinity(tid, &s)
			}
		}
	}
	var cpus []int
	for c := 0; c < len(all)*64 && len(cpus) < 2; c++ {
		if all.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	set(pid, cpus[1])
	set(os.Getpid(), cpus[0])
	return func() { set(os.Getpid(), -1) }
}

// BenchmarkMessageCost measures what mx itself spends on an 8-byte message
// between two boards, apart from waiting for the peer: one goroutine posts
// the receive on one board and looks for its message once (as a receiver
// that waits already would, which finds nothing yet), sends from the other
// and waits (polling the source, so the receiver's work runs on the same
// goroutine), then answers the other way, so acks ride on the messages as
// in a ping-pong. ns/msg is the time of one message, sender's and
// receiver's work together, both boards on one CPU with warm caches: mx's
// instructions, plus one write and one read of the wire (the rings'
// records for shm, a slot of the in-process wire's queue for loopback),
// and no cross-CPU transfer. cpu-ns/msg is the process's CPU time per
// message, every thread's (so work a receive loop took over counts too):
// a loaded machine, which deschedules the benchmark, stretches ns/msg but
// hardly cpu-ns/msg.
//
// Over the in-process wire, AF_XDP and the nic transport on emulated
// 82574Ls (gomx's e1000e driver, as make peers-e1000e runs it on QEMU's),
// a raw sub-benchmark does the same with bare transport frames of the
// same size and no message layer (one Send, and Recv until the frame is
// there, each way; frames as long as mx's tiny message): mx's own cost is
// the difference.
func BenchmarkMessageCost(b *testing.B) {
	b.Run("shm", func(b *testing.B) { messageCost(b, shmFactory, 0) })
	b.Run("shm/evict", func(b *testing.B) { messageCost(b, shmFactory, evictBytes) })
	for _, tf := range []transportFactory{{name: "loopback", new: newLoopbackWire}, {name: "xdp", new: newXDPWire}, {name: "nic", new: newNICWire}} {
		b.Run(tf.name+"/mx", func(b *testing.B) { messageCost(b, tf, 0) })
		b.Run(tf.name+"/raw", func(b *testing.B) { rawMessageCost(b, tf) })
	}
}

// rawMessageCost is BenchmarkMessageCost's raw exchange: an 8-byte frame
// each way between the two transports of a fresh wire of tf.
func rawMessageCost(b *testing.B, tf transportFactory) {
	w := tf.new(b, loopback.Faults{})
	b.Cleanup(func() {
		w.a.Close()
		w.b.Close()
		w.close()
	})
	in := make([]transport.Frame, rxBatch)
	atob := []transport.Frame{{Peer: w.b.Addr(), Data: make([]byte, wire.HeadLen+wire.MsgLen+8)}}
	btoa := []transport.Frame{{Peer: w.a.Addr(), Data: make([]byte, wire.HeadLen+wire.MsgLen+8)}}
	one := func(from, to transport.Transport, f []transport.Frame) {
		if _, err := from.Send(f); err != nil {
			b.Fatal(err)
		}
		for range 1 << 30 {
			n, err := to.Recv(in, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n > 0 {
				return
			}
		}
		b.Fatal("a frame never came")
	}
	for range 100 {
		one(w.a, w.b, atob)
		one(w.b, w.a, btoa)
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	for range b.N {
		one(w.a, w.b, atob)
		one(w.b, w.a, btoa)
	}
	cpu := cpuTime() - c0
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/msg")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(2*b.N), "cpu-ns/msg")
}

// evictBytes is what BenchmarkMessageCost's shm/evict reads between two
// messages: more than a level-1 data cache, so each message finds its
// lines gone, as it does on a CPU that other ranks' turns share (an
// oversubscribed alltoall): a cache simulator's level-1 misses per
// message count the lines a message touches, and ns/msg and cpu-ns/msg,
// which leave the reads out, against shm's say what those misses cost
// (docs/alltoall.md).
const evictBytes = 256 << 10

// messageCost is BenchmarkMessageCost over tf; evict, when not 0, is how
// many bytes it reads between two messages (evictBytes).
func messageCost(b *testing.B, tf transportFactory, evict int) {
	o := DefaultBoardOptions()
	o.BusyPoll = true
	pr := newPair(b, tf, o, loopback.Faults{})
	ctx := context.Background()
	msg, bufA, bufB := make([]byte, 8), make([]byte, 8), make([]byte, 8)
	ssegs, asegs, bsegs := [][]byte{msg}, [][]byte{bufA}, [][]byte{bufB}
	one := func(src *Endpoint, to Addr, dst *Endpoint, rsegs [][]byte) {
		r, err := dst.IRecv(rsegs, 1, ^uint64(0), nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := r.Test(); ok {
			b.Fatal("a receive completed before its message was sent")
		}
		s, err := src.ISend(ssegs, to, 1, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 {
		one(pr.a, pr.atob, pr.b, bsegs)
		one(pr.b, pr.btoa, pr.a, asegs)
	}
	fine := func() (arms, firings, loops uint64) {
		for _, bd := range []*Board{pr.ba, pr.bb} {
			c := bd.Counters()
			arms, firings = arms+c[FineArms], firings+c[FineFirings]
			loops += bd.WaitStats().LoopRecvs
		}
		return arms, firings, loops
	}
	// The eviction buffer is written once, so it has pages of its own: an
	// untouched one reads the kernel's zero page, whose few lines stay in
	// the cache. Its flushes run on one thread, whose CPU clock they read.
	junk := make([]byte, evict)
	for i := range junk {
		junk[i] = 1
	}
	if evict > 0 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var sum byte
	b.ReportAllocs()
	b.ResetTimer()
	a0, f0, l0 := fine()
	c0 := cpuTime()
	// The evictions' time and CPU time (its thread's: they do not block),
	// taken out of ns/msg and cpu-ns/msg.
	var flushed, flushedCPU time.Duration
	threadCPU := func() time.Duration {
		var ts unix.Timespec
		unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
		return time.Duration(ts.Nano())
	}
	flush := func() {
		if len(junk) == 0 {
			return
		}
		t0, tc0 := time.Now(), threadCPU()
		for i := 0; i < len(junk); i += 64 {
			sum += junk[i]
		}
		flushedCPU += threadCPU() - tc0
		flushed += time.Since(t0)
	}
	for range b.N {
		flush()
		one(pr.a, pr.atob, pr.b, bsegs)
		flush()
		one(pr.b, pr.btoa, pr.a, asegs)
	}
	cpu := cpuTime() - c0 - flushedCPU
	b.StopTimer()
	if want := byte(2 * b.N * len(junk) / 64); sum != want {
		b.Fatalf("the eviction buffer read %d, want %d", sum, want)
	}
	a1, f1, l1 := fine()
	b.ReportMetric(float64((b.Elapsed()-flushed).Nanoseconds())/float64(2*b.N), "ns/msg")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(2*b.N), "cpu-ns/msg")
	b.ReportMetric(float64(a1-a0)*1000/float64(2*b.N), "fine-arms/1k-msg")
	b.ReportMetric(float64(f1-f0)*1000/float64(2*b.N), "fine-firings/1k-msg")
	b.ReportMetric(float64(l1-l0)*1000/float64(2*b.N), "loop-recvs/1k-msg")
}

// BenchmarkEmptyLook measures a polling waiter's look at empty rings
// (poll.go's lookPeeks): "once" is a look that peeks once (the source's
// TryLock, one shm.Transport.Peek, the unlock), as a waiter that yields
// between looks makes; "peeks" is the look of a waiter in its polling
// loop, which looks lookPeeks*peekEvery/2 more times under the same hold
// of the lock (a whole peek every peekEvery, the hot rings' record words
// alone between), and reports ns/look: how long, on average, a record
// that lands on a lane waits before a look sees it (at most about a
// whole peek, for one that lands just after a peek looked at its ring). The board's receive loop is
// kept away as a polling waiter keeps it (counted among the source's
// pollers).
func BenchmarkEmptyLook(b *testing.B) {
	o := DefaultBoardOptions()
	o.BusyPoll = true
	pr := newPair(b, shmFactory, o, loopback.Faults{})
	bd := pr.ba
	s := bd.spinSrcs[0]
	s.pollIn.Add(1) // for the whole benchmark
	defer s.pollLeft.Add(1)
	ownSource(b, s)
	s.mu.Unlock()
	r, err := pr.a.IRecv([][]byte{make([]byte, 8)}, 1, ^uint64(0), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pr.a.Cancel(r)
	for _, c := range []struct {
		name  string
		peeks int
	}{{"once", 0}, {"peeks", lookPeeks}} {
		b.Run(c.name, func(b *testing.B) {
			w := &waiterReq{r: r, peeks: c.peeks}
			for range b.N {
				if looked, found := bd.pollSource(s, 0, 0, w); !looked || found {
					b.Fatalf("looked %v, found %v: want an empty look", looked, found)
				}
			}
			looks := 1 + c.peeks*peekEvery/2
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*looks), "ns/look")
		})
	}
}
