package mx

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/emulated/nicpair"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/xdp"
	"github.com/gomx-dev/gomx/xdp/xdptest"
)

// queuedNICs returns UDP-framed NIC transports over two emulated 82599s,
// joined by a cable that cable describes (the zero value: a perfect one),
// with the given number of queues and rings of 128 descriptors, and the
// models' platform; the test closes the transports.
func queuedNICs(t testing.TB, queues int, cable emulated.CableOptions) ([2]*nic.Transport, *emulated.IXGBE) {
	return queuedNICsRing(t, queues, 128, cable)
}

// queuedNICsRing is queuedNICs with RX and TX rings of ring descriptors.
func queuedNICsRing(t testing.TB, queues, ring int, cable emulated.CableOptions) ([2]*nic.Transport, *emulated.IXGBE) {
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = queues, ring, ring
	return queuedNICsWith(t, o, cable)
}

// queuedNICsWith is queuedNICs with the drivers opened with o.
func queuedNICsWith(t testing.TB, o ixgbe.Options, cable emulated.CableOptions) ([2]*nic.Transport, *emulated.IXGBE) {
	ns, p := nicpair.IXGBEOn(t, cable, o)
	return nicpair.Transports(t, ns, nicpair.UDP), p
}

// allowedCPUs is the CPUs this process may run on.
func allowedCPUs(t testing.TB) []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	var cpus []int
	for c := range maxCPU {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// Endpoints of a queued board land one per queue, each on its queue's
// board with its queue's NIC id and the CPU its queue's thread is bound
// to, and exchange messages byte-exact with the endpoints of another
// queued board, each pair over its own queues.
func TestQueuedBoard(t *testing.T) {
	const queues = 4
	ts, _ := queuedNICs(t, queues, emulated.CableOptions{})
	qbs, _ := queuedExchange(t, [2]transport.Transport{ts[0], ts[1]}, queues)
	// Every queue's board received its own endpoint's frames from its
	// queue: none was handed over in software (the 82599 steers by rule).
	for i := range 2 {
		checkSteered(t, qbs[i])
	}
}

// The same with each queue's progress thread asleep on its queue's MSI-X
// vector, unmoderated, once its ring stayed empty a while: every message
// arrives byte-exact on its own queue's board, no programming violation
// is recorded, and frames that find a thread asleep wake it through the
// vector (messages go on, within a bounded time, until both models have
// raised an interrupt: whether a given frame finds its thread asleep or
// still looking depends on the scheduler).
func TestQueuedBoardInterrupts(t *testing.T) {
	const queues = 3
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = queues, 128, 128
	o.Interrupts, o.NoModeration = true, true
	ts, p := queuedNICsWith(t, o, emulated.CableOptions{})
	qbs, eps := queuedExchange(t, [2]transport.Transport{ts[0], ts[1]}, queues)
	ctx := testCtx(t, 60*time.Second)
	a, b := eps[0][0], eps[1][0]
	to, err := a.Connect(ctx, b.Addr().NIC, b.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	msg, got := pattern(100, 7), make([]byte, 100)
	for i := 0; p.Stats(0).Interrupts == 0 || p.Stats(1).Interrupts == 0; i++ {
		if ctx.Err() != nil {
			break
		}
		exchange(t, ctx, a, to, b, uint64(100+i), ^uint64(0), [][]byte{msg}, [][]byte{got})
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d corrupted", i)
		}
	}
	for i := range 2 {
		if s := p.Stats(i); s.Interrupts == 0 || s.Violations != 0 {
			t.Errorf("NIC %d raised %d interrupts (want some: its progress threads slept on their vectors), %d violations (%s)",
				i, s.Interrupts, s.Violations, s.LastViolation)
		}
		checkSteered(t, qbs[i])
	}
}

// The same over AF_XDP on a veth pair of several queues: each queue's
// socket is a board of its own, and as veth puts a frame on the rx queue
// of the sender's tx queue, endpoints on queues of the same index need no
// hand-over between queues.
func TestQueuedBoardXDP(t *testing.T) {
	const queues = 3
	a, b := xdptest.QueuedPair(t, queues)
	qbs, eps := queuedExchange(t, [2]transport.Transport{a, b}, queues)
	counters := func(b *Board) map[string]uint64 {
		c := map[string]uint64{}
		for _, x := range b.TransportCounters() {
			c[x.Name] = x.Value
		}
		return c
	}
	for i := range 2 {
		for _, b := range qbs[i].Boards() {
			c := counters(b)
			if c["xdp_queue_taken_over"] != 0 || c["xdp_queue_handed_over"] != 0 || c["xdp_rx_frames"] == 0 {
				t.Errorf("board %v: %d frames received on its queue, %d handed over, %d taken over",
					b.NICID(), c["xdp_rx_frames"], c["xdp_queue_handed_over"], c["xdp_queue_taken_over"])
			}
		}
	}
	// Endpoints on queues of different indices talk too: their frames land
	// on the rx queue of the sender's index and are handed over.
	ctx := testCtx(t, 30*time.Second)
	x, y := eps[0][0], eps[1][1]
	to, err := x.Connect(ctx, y.Addr().NIC, y.ID(), testKey)
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{10, 100000} {
		msg := pattern(size, uint64(100+i))
		got := make([]byte, size)
		exchange(t, ctx, x, to, y, uint64(i), ^uint64(0), [][]byte{msg}, [][]byte{got})
		if !bytes.Equal(got, msg) {
			t.Fatalf("across queues, %d bytes: corrupted", size)
		}
	}
	if c := counters(qbs[1].Boards()[1]); c["xdp_queue_taken_over"] == 0 {
		t.Errorf("queue 1 of b took no frame over from queue 0: %v", c)
	}
}

// Queued boards over AF_XDP on veth given no CPUs: veth's rx queues have
// no interrupt of their own, so no endpoint reports a serving CPU, and the
// transport of several queues names none. xdp's TestIRQCPU checks the
// CPUs a NIC's queues name (a fake /proc), TestEndpointCPUsFromTheQueuesIRQ
// that an endpoint reports its transport's.
func TestQueuedBoardXDPServingCPU(t *testing.T) {
	const queues = 2
	a, b := xdptest.QueuedPair(t, queues)
	defer b.Close()
	if c := a.IRQCPU(); c != -1 {
		t.Errorf("a transport of %d rx queues names CPU %d as its queue's", queues, c)
	}
	qb, err := NewQueuedBoard(a, QueuedOptions{Board: overNIC})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	defer qb.Close()
	for range queues {
		e, err := qb.OpenEndpoint(AnyEndpoint, testKey)
		if err != nil {
			t.Fatal(err)
		}
		s := e.Board().tr.(*xdp.Transport).Sockets()[0]
		if got := e.CPUs(); got != nil {
			_, why := xdp.QueueCPU(s.Interface(), s.Queue())
			t.Errorf("endpoint on veth rx queue %d served by CPUs %v, want none: veth has no queue interrupt (%s)", s.Queue(), got, why)
		}
	}
}

// irqTransport is a loopback port that names the CPU servicing its
// receive queue's interrupt (transport.IRQCPU), as an AF_XDP queue of a
// NIC does; -1 for none.
type irqTransport struct {
	transport.Transport
	cpu int
}

func (t irqTransport) IRQCPU() int { return t.cpu }

// An endpoint reports the CPU that services its queue's interrupt as the
// one serving it when its board's progress thread is not bound; a bound
// thread's CPUs come first (the user asked for them), and a transport
// that names no CPU leaves the endpoint with none.
func TestEndpointCPUsFromTheQueuesIRQ(t *testing.T) {
	cpus := allowedCPUs(t)
	irq, bound := cpus[len(cpus)-1], cpus[0]
	n := loopback.NewNetwork(loopback.Options{})
	defer n.Close()
	for i, c := range []struct {
		irq      int
		progress []int
		want     []int
	}{
		{irq: irq, want: []int{irq}},
		{irq: irq, progress: []int{bound}, want: []int{bound}},
		{irq: -1},
	} {
		if c.progress != nil && irq == bound {
			t.Logf("row %d skipped: one CPU allowed, so a bound thread's CPU and the IRQ's cannot be told apart", i)
			continue
		}
		port, err := n.Attach(transport.NICID(0x020000000010 + i))
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBoard(irqTransport{Transport: port, cpu: c.irq}, BoardOptions{ProgressCPUs: c.progress})
		if err != nil {
			port.Close()
			t.Fatal(err)
		}
		e, err := b.OpenEndpoint(0, testKey)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.CPUs(); !slices.Equal(got, c.want) {
			t.Errorf("IRQ CPU %d, progress bound to %v: endpoint served by %v, want %v", c.irq, c.progress, got, c.want)
		}
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	}
}

// queuedExchange opens a queued board over each of ts (which it owns:
// the boards close them when the test ends) and an endpoint per queue on
// each, checks that each lands on its own queue's board with its NIC id
// and bound CPU, and exchanges messages of several sizes byte-exact
// between the endpoints of the same queue index. It returns the boards
// and each one's endpoints, queue by queue.
func queuedExchange(t *testing.T, ts [2]transport.Transport, queues int) ([2]*QueuedBoard, [2][]*Endpoint) {
	cpus := allowedCPUs(t)
	var qbs [2]*QueuedBoard
	for i := range 2 {
		qb, err := NewQueuedBoard(ts[i], QueuedOptions{CPUs: cpus, Board: overNIC})
		if err != nil {
			ts[i].Close()
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := qb.Close(); err != nil {
				t.Error(err)
			}
		})
		qbs[i] = qb
	}
	eps := [2][]*Endpoint{make([]*Endpoint, queues), make([]*Endpoint, queues)}
	for i := range 2 {
		seen := map[transport.NICID]bool{}
		for k := range queues {
			e, err := qbs[i].OpenEndpoint(AnyEndpoint, testKey)
			if err != nil {
				t.Fatal(err)
			}
			if seen[e.Addr().NIC] {
				t.Fatalf("two endpoints on the queue of %v", e.Addr().NIC)
			}
			seen[e.Addr().NIC] = true
			q := slices.Index(qbs[i].Boards(), e.Board())
			if want := []int{cpus[q%len(cpus)]}; !slices.Equal(e.CPUs(), want) {
				t.Errorf("endpoint on queue %d served by CPUs %v, want %v", q, e.CPUs(), want)
			}
			eps[i][k] = e
		}
	}
	ctx := testCtx(t, 30*time.Second)
	for k := range queues {
		a, b := eps[0][k], eps[1][k]
		to, err := a.Connect(ctx, b.Addr().NIC, b.ID(), testKey)
		if err != nil {
			t.Fatal(err)
		}
		for i, size := range []int{0, 100, 5000, 100000} {
			msg := pattern(size, uint64(k*10+i))
			got := make([]byte, size)
			exchange(t, ctx, a, to, b, uint64(i), ^uint64(0), [][]byte{msg}, [][]byte{got})
			if !bytes.Equal(got, msg) {
				t.Fatalf("queue pair %d, %d bytes: corrupted", k, size)
			}
		}
	}
	return qbs, eps
}

// overNIC keeps the boards of one process on the NIC: no in-process
// shortcut, no shared-memory host path.
var overNIC = BoardOptions{Local: LocalOptions{Off: true, NoShm: true}}

// A transport without queues is refused, and a CPU the kernel cannot bind
// fails NewBoard with ErrBadOptions.
func TestQueuedBoardRefusals(t *testing.T) {
	ts, _ := queuedNICs(t, 2, emulated.CableOptions{})
	defer ts[1].Close()
	n := loopback.NewNetwork(loopback.Options{})
	defer n.Close()
	tr, err := n.Attach(0x020000000001)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewQueuedBoard(tr, QueuedOptions{}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("NewQueuedBoard over %T: %v, want ErrBadOptions", tr, err)
	}
	tr.Close()
	if _, err := NewQueuedBoard(ts[0], QueuedOptions{Queues: 3}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("3 queues of 2: %v, want ErrBadOptions", err)
	}
	cpus := allowedCPUs(t)
	bad := slices.Max(cpus) + 1
	if bad < maxCPU {
		if _, err := NewQueuedBoard(ts[0], QueuedOptions{CPUs: []int{bad}}); !errors.Is(err, ErrBadOptions) {
			t.Errorf("progress bound to CPU %d, outside this process's %v: %v, want ErrBadOptions", bad, cpus, err)
		}
	}
	// The queues closed again: the board transport works on its own.
	if _, err := ts[0].Send([]transport.Frame{{Peer: ts[1].Addr(), Data: []byte("x")}}); err != nil {
		t.Errorf("board Send after a refused NewQueuedBoard: %v", err)
	}
	ts[0].Close()
	if _, err := NewBoard(tr, BoardOptions{ProgressCPUs: []int{-1}}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("ProgressCPUs -1: %v", err)
	}
}

// checkSteered fails the test unless every board of qb received its own
// endpoint's frames on its own queue, none handed over in software.
func checkSteered(t *testing.T, qb *QueuedBoard) {
	t.Helper()
	for _, b := range qb.Boards() {
		c := map[string]uint64{}
		for _, x := range b.TransportCounters() {
			c[x.Name] = x.Value
		}
		if c["nic_queue_forwarded"] != 0 || c["nic_queue_delivered"] == 0 {
			t.Errorf("board %v: %d frames received on its queue, %d handed over between queues",
				b.NICID(), c["nic_queue_delivered"], c["nic_queue_forwarded"])
		}
	}
}
