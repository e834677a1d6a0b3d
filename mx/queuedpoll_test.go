package mx

import (
	"context"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/transport"
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
	var qbs [2]*QueuedBoard
	for i := range 2 {
		qb, err := NewQueuedBoard(ts[i], QueuedOptions{Board: bo})
		if err != nil {
			t.Fatal(err)
		}
		defer qb.Close()
		qbs[i] = qb
	}
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
		a, err := qbs[0].OpenEndpoint(AnyEndpoint, testKey)
		if err != nil {
			t.Fatal(err)
		}
		b, err := qbs[1].OpenEndpoint(AnyEndpoint, testKey)
		if err != nil {
			t.Fatal(err)
		}
		to, err := a.Connect(ctx, b.Addr().NIC, b.ID(), testKey)
		if err != nil {
			t.Fatal(err)
		}
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
