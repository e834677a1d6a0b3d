package mx

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// A waiter on a queued board polls its own queue's RX ring (a queue
// transport is a transport.Spinner) and takes its message there, on its
// own goroutine, instead of sleeping until the queue's progress thread
// completes its request: run to completion, as a DPDK lcore serves its
// queue. The messages arrive byte-exact, and the receiving boards count
// waits completed by the waiter's own poll (WaitStats.Polled).
func TestQueuedWaiterPollsItsQueue(t *testing.T) {
	const queues = 2
	ts, _ := queuedNICs(t, queues, emulated.CableOptions{})
	if ts[0].SpinCheap() {
		t.Fatal("the board transport's look, which sweeps every queue, counts as cheap")
	}
	bo := overNIC
	bo.Spin = DefaultSpin // whatever GOMX_SPIN says
	qbs := queuedBoards(t, ts, bo)
	for _, b := range qbs[1].Boards() {
		if sp, ok := b.tr.(transport.Spinner); !ok || !sp.SpinCheap() {
			t.Fatalf("queue transport %T: not a cheap Spinner", b.tr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	polled := func() uint64 {
		var n uint64
		for _, b := range qbs[1].Boards() {
			n += b.WaitStats().Polled
		}
		return n
	}
	for k := range queues {
		a, b, to := queuedConnect(t, ctx, qbs)
		before := polled()
		// Until a wait on b's board completed by its own poll: the
		// queue's thread may take a given frame first, but not every one.
		for i := 0; polled() == before; i++ {
			if i == 10000 {
				t.Fatalf("queue pair %d: none of %d waits completed by the waiter's poll of its queue", k, i)
			}
			msg := pattern(64, uint64(i))
			got := make([]byte, 64)
			exchange(t, ctx, a, to, b, uint64(i), ^uint64(0), [][]byte{msg}, [][]byte{got})
			if string(got) != string(msg) {
				t.Fatalf("queue pair %d, message %d: corrupted", k, i)
			}
		}
	}
}

// A sender on a queued board serves its own queue too: the acks of a
// stream of sends come back on the sending board's queue, where nobody
// waits, and a later send's look takes them on the sending goroutine
// (WaitStats.Served). Every message arrives byte-exact and every send
// completes. Once an endpoint of the board has an UnexpectedHandler, its
// sends no longer look (the handler runs where the progress engine runs,
// never inside ISend), and the stream still completes.
func TestQueuedSenderServesItsQueue(t *testing.T) {
	const queues, window = 2, 16
	ts, _ := queuedNICs(t, queues, emulated.CableOptions{})
	bo := overNIC
	bo.Spin = DefaultSpin // whatever GOMX_SPIN says: the loop stays away
	qbs := queuedBoards(t, ts, bo)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream := func(k int, a *Endpoint, to Addr, b *Endpoint, round int) {
		t.Helper()
		got := make([][]byte, window)
		recvs, sends := make([]*Request, window), make([]*Request, window)
		for i := range window {
			got[i] = make([]byte, 64)
			var err error
			if recvs[i], err = b.IRecv([][]byte{got[i]}, uint64(round*window+i), ^uint64(0), nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range window {
			match := uint64(round*window + i)
			var err error
			if sends[i], err = a.ISend([][]byte{pattern(64, match)}, to, match, nil); err != nil {
				t.Fatal(err)
			}
		}
		for i := range window {
			if _, err := sends[i].Wait(ctx); err != nil {
				t.Fatalf("queue pair %d, send %d: %v", k, round*window+i, err)
			}
			if _, err := recvs[i].Wait(ctx); err != nil {
				t.Fatalf("queue pair %d, receive %d: %v", k, round*window+i, err)
			}
			if want := pattern(64, uint64(round*window+i)); string(got[i]) != string(want) {
				t.Fatalf("queue pair %d, message %d: corrupted", k, round*window+i)
			}
		}
	}
	for k := range queues {
		a, b, to := queuedConnect(t, ctx, qbs)
		// Windows of sends until one of the sending board's sends took
		// frames of its queue: its thread may take a given ack first,
		// but not every one.
		served := func() uint64 { return a.b.WaitStats().Served }
		before := served()
		round := 0
		for ; served() == before; round++ {
			if round == 1000 {
				t.Fatalf("queue pair %d: no send of %d windows took frames of its queue", k, round)
			}
			stream(k, a, to, b, round)
		}
		a.SetUnexpectedHandler(func(UnexpectedMessage) HandlerResult { return Continue })
		before = served()
		for range 20 {
			stream(k, a, to, b, round)
			round++
		}
		if n := served() - before; n != 0 {
			t.Fatalf("queue pair %d: %d sends looked at the queue of a board with an unexpected handler", k, n)
		}
	}
}

// A queue's receive loop stays out of Recv for servedLinger after its
// application last served the queue (a send's look, a waiter's success),
// looking again every spinGrace, so a queue the application keeps serving
// costs its thread no wait in Recv; it takes Recv back once a waiter of
// the board sleeps (its message must find an owner), once the serving
// stopped servedLinger ago, or once a waiter gave up polling. A board
// that is not a queue's keeps only the poll grace.
func TestQueuedLoopLingers(t *testing.T) {
	ts, _ := queuedNICs(t, 1, emulated.CableOptions{})
	defer ts[1].Close()
	bo := overNIC
	bo.Spin = 50 * time.Microsecond
	qb, err := NewQueuedBoard(ts[0], QueuedOptions{Board: bo})
	if err != nil {
		t.Fatal(err)
	}
	defer qb.Close()
	b := qb.Boards()[0]
	s := b.src
	grace := b.spinGrace()
	// stay sets the source's last service ago before now and asks
	// stayAway, again while the asking took long enough to blur ago (a
	// descheduled test): at most 100 tries.
	stay := func(ago time.Duration) (bool, time.Duration) {
		t.Helper()
		for range 100 {
			t0 := b.clock()
			s.idle.Store(t0 - int64(ago))
			away, d := b.stayAway(s)
			if b.clock()-t0 < int64(grace) {
				return away, d
			}
		}
		t.Skip("every try took longer than the poll grace: the machine is too loaded to time the linger")
		return false, 0
	}
	lingering := grace + (servedLinger-grace)/4
	if away, d := stay(lingering); !away || d <= 0 || d > grace {
		t.Errorf("served %v ago (grace %v, linger %v): away %v for %v, want away for at most the grace", lingering, grace, servedLinger, away, d)
	}
	b.sleep.chanSleepers.Add(1)
	if away, _ := stay(lingering); away {
		t.Errorf("served %v ago with a waiter asleep: away, want Recv taken back", lingering)
	}
	b.sleep.chanSleepers.Add(-1)
	if away, _ := stay(2 * servedLinger); away {
		t.Errorf("served %v ago: away, want Recv taken back after %v", 2*servedLinger, servedLinger)
	}
	// Another source of the board (the host path's rings, whose loop
	// does not drain while away) does not linger.
	own := s
	s = &rxSource{spin: true}
	if away, _ := stay(lingering); away {
		t.Errorf("the board's other source, served %v ago: away past the grace (%v)", lingering, grace)
	}
	s = own
	s.idle.Store(idleNever)
	if away, _ := b.stayAway(s); away {
		t.Error("after a waiter gave up polling: away, want Recv taken back")
	}
	b.serveSends.Store(false)
	defer b.serveSends.Store(true)
	if away, _ := stay(lingering); away {
		t.Errorf("a board that is not a queue's, served %v ago: away past the grace (%v)", lingering, grace)
	}
}

// queuedBoards opens a QueuedBoard with options bo over each of ts,
// closed when the test ends.
func queuedBoards(t *testing.T, ts [2]*nic.Transport, bo BoardOptions) [2]*QueuedBoard {
	t.Helper()
	var qbs [2]*QueuedBoard
	for i := range 2 {
		qb, err := NewQueuedBoard(ts[i], QueuedOptions{Board: bo})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qb.Close() })
		qbs[i] = qb
	}
	return qbs
}

// queuedConnect opens an endpoint on each of qbs (on the queue with the
// fewest endpoints) and connects the first to the second.
func queuedConnect(t *testing.T, ctx context.Context, qbs [2]*QueuedBoard) (a, b *Endpoint, to Addr) {
	t.Helper()
	a, err := qbs[0].OpenEndpoint(AnyEndpoint, testKey)
	if err != nil {
		t.Fatal(err)
	}
	b, err = qbs[1].OpenEndpoint(AnyEndpoint, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if to, err = a.Connect(ctx, b.Addr().NIC, b.ID(), testKey); err != nil {
		t.Fatal(err)
	}
	return a, b, to
}

// servedQueues opens its queues as servedQueue transports, counting the
// Served calls of all of them and noting the EIMS writes of model port 0
// (whose NIC it is) at the first.
type servedQueues struct {
	*nic.Transport
	p      *emulated.IXGBE
	served atomic.Uint64
	armed  atomic.Uint64 // EIMS_EX0 writes when Served was first called
}

func (s *servedQueues) OpenQueue(q int) (transport.Transport, error) {
	x, err := s.Transport.OpenQueue(q)
	if err != nil {
		return nil, err
	}
	return &servedQueue{Transport: x.(*nic.Transport), s: s}, nil
}

// servedQueue is a queue transport that counts its Served calls; every
// other method, optional interfaces too, is the queue's own, so the board
// is configured as over the queue itself.
type servedQueue struct {
	*nic.Transport
	s *servedQueues
}

func (q *servedQueue) Served() {
	if q.s.served.Add(1) == 1 {
		q.s.armed.Store(q.s.p.Accesses(0).Writes["EIMS_EX0"])
	}
	q.Transport.Served()
}

// A queue's receive loop that stayed away while its application served
// the queue tells its transport so as it goes back into Recv, and the
// driver's wait then arms the queue's vector (an EIMS write): after
// messages whose sends and waits served the queue, the loop takes Recv
// back once the linger is over, says the queue was served, and sleeps.
func TestQueuedLoopTellsServed(t *testing.T) {
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = 1, 128, 128
	o.Interrupts, o.NoModeration = true, true
	ts, p := queuedNICsWith(t, o, emulated.CableOptions{})
	sq := &servedQueues{Transport: ts[0], p: p}
	var qbs [2]*QueuedBoard
	for i, tr := range []transport.Transport{sq, ts[1]} {
		qb, err := NewQueuedBoard(tr, QueuedOptions{Board: overNIC})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qb.Close() })
		qbs[i] = qb
	}
	ctx := testCtx(t, 10*time.Second)
	a, b, to := queuedConnect(t, ctx, qbs)
	msg, got := pattern(64, 3), make([]byte, 64)
	for i := range 20 {
		exchange(t, ctx, a, to, b, uint64(i), ^uint64(0), [][]byte{msg}, [][]byte{got})
	}
	armed := func() bool { return sq.served.Load() > 0 && p.Accesses(0).Writes["EIMS_EX0"] > sq.armed.Load() }
	for !armed() && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if !armed() {
		t.Fatalf("the loop of a queue its application served: %d Served calls, vector armed %d times since (%v)",
			sq.served.Load(), p.Accesses(0).Writes["EIMS_EX0"]-sq.armed.Load(), ctx.Err())
	}
}
