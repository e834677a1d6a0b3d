package nic_test

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated/nicpair"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
)

// recvResult is what a Recv returned.
type recvResult struct {
	n   int
	err error
}

// recvBounded runs tr.Recv with a wait longer than any test (an hour) and
// returns what it returned once start has run, failing the test when it
// has not returned within bound.
func recvBounded(t *testing.T, tr transport.Transport, frames []transport.Frame, start func(), bound time.Duration) recvResult {
	t.Helper()
	done := make(chan recvResult, 1)
	go func() {
		n, err := tr.Recv(frames, time.Hour)
		done <- recvResult{n, err}
	}()
	start()
	select {
	case r := <-done:
		return r
	case <-time.After(bound):
		t.Fatalf("Recv still waiting %v after the call that should end it", bound)
		return recvResult{}
	}
}

// irqPair names a pair of model NICs and opens it.
type irqPair struct {
	name string
	nics func(t testing.TB) [2]nicdrv.NIC
}

// irqPairs are model NIC pairs in interrupt mode: a transport on one
// queue's vector, on two, and on four (a sleep in poll(2) on their
// eventfds).
var irqPairs = []irqPair{
	{"82574L", func(t testing.TB) [2]nicdrv.NIC {
		o := e1000e.DefaultOptions()
		o.Interrupts = true
		return nicpair.E1000E(t, o)
	}},
	{"82574L/two-queues", func(t testing.TB) [2]nicdrv.NIC {
		o := e1000e.DefaultOptions()
		o.Interrupts, o.Queues = true, 2
		return nicpair.E1000E(t, o)
	}},
	{"82599/four-queues", func(t testing.TB) [2]nicdrv.NIC {
		o := ixgbe.DefaultOptions()
		o.Interrupts, o.Queues = true, 4
		return nicpair.IXGBE(t, o)
	}},
}

// TestWake checks transport.Waker over the NIC, polling and on interrupts,
// on one queue's vector and on a board's four (a sleep in poll(2) on their
// eventfds): a Wake ends a Recv that waits for frames with 0, nil, one
// that came while no Recv waited ends the next wait, and a frame is
// received as usual after both.
func TestWake(t *testing.T) {
	polling := irqPair{"polling", func(t testing.TB) [2]nicdrv.NIC { return nicpair.E1000E(t, e1000e.DefaultOptions()) }}
	for _, c := range []irqPair{polling, irqPairs[0], irqPairs[2]} {
		t.Run(c.name, func(t *testing.T) {
			ts := nicpair.Transports(t, c.nics(t), nicpair.Raw)
			a, b := ts[0], ts[1]
			t.Cleanup(func() {
				for _, tr := range []transport.Transport{a, b} {
					if err := tr.Close(); err != nil {
						t.Error(err)
					}
				}
			})
			var w transport.Waker = a
			frames := make([]transport.Frame, 4)
			// A Wake while Recv waits (or before it waits: it then
			// returns at once).
			if r := recvBounded(t, a, frames, w.Wake, 30*time.Second); r.n != 0 || r.err != nil {
				t.Fatalf("woken Recv: %d frames, %v; want 0, nil", r.n, r.err)
			}
			// A Wake with no Recv under way ends the next wait.
			w.Wake()
			if r := recvBounded(t, a, frames, func() {}, 30*time.Second); r.n != 0 || r.err != nil {
				t.Fatalf("Recv after a Wake: %d frames, %v; want 0, nil", r.n, r.err)
			}
			// The Wakes are spent: the next Recv waits for the frame.
			data := []byte("a frame after the wake-ups, long enough for the minimum")
			send := func() {
				if _, err := b.Send([]transport.Frame{{Peer: a.Addr(), Data: data}}); err != nil {
					t.Error(err)
				}
			}
			r := recvBounded(t, a, frames, send, 30*time.Second)
			if r.err != nil || r.n != 1 || string(frames[0].Data) != string(data) {
				t.Fatalf("Recv after the wake-ups: %d frames, %v; want the frame sent", r.n, r.err)
			}
		})
	}
}

// A Recv that waits with a timeout, as a receive loop does until its next
// tick many times a millisecond, makes no context and no timer per wait
// (it passes the timeout to WaitRx as a deadline): once the first wait
// made them, the waits that end at their timeout, on one queue's
// interrupt or several, and the wait a Wake ends, allocate nothing, and a
// frame is still received after them.
func TestRecvWaitAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, c := range irqPairs {
		t.Run(c.name, func(t *testing.T) {
			ts := nicpair.Transports(t, c.nics(t), nicpair.Raw)
			a, b := ts[0], ts[1]
			t.Cleanup(func() {
				for _, tr := range ts {
					if err := tr.Close(); err != nil {
						t.Error(err)
					}
				}
			})
			frames := make([]transport.Frame, 4)
			wait := func() {
				if n, err := a.Recv(frames, 20*time.Microsecond); n != 0 || err != nil {
					t.Fatalf("Recv on an idle link: %d frames, %v; want 0, nil", n, err)
				}
			}
			wait()
			if n := testing.AllocsPerRun(50, wait); n != 0 {
				t.Errorf("a Recv that waits out its timeout: %v allocations, want 0", n)
			}
			woken := func() {
				a.Wake()
				wait()
			}
			woken() // the Wake ended the context: the next wait makes one
			wait()
			if n := testing.AllocsPerRun(50, wait); n != 0 {
				t.Errorf("a Recv that waits out its timeout after a Wake: %v allocations, want 0", n)
			}
			data := []byte("a frame after the waits, long enough for the minimum")
			send := func() {
				if _, err := b.Send([]transport.Frame{{Peer: a.Addr(), Data: data}}); err != nil {
					t.Error(err)
				}
			}
			r := recvBounded(t, a, frames, send, 30*time.Second)
			if r.err != nil || r.n != 1 || string(frames[0].Data) != string(data) {
				t.Fatalf("Recv after the waits: %d frames, %v; want the frame sent", r.n, r.err)
			}
		})
	}
}
