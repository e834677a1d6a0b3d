package mx

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/emulated/nicpair"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/nic"
)

// idleWakes is what an idle board's progress thread did while its tick
// period stretched from 8 ticks to 32: the timer runs, its wake-ups
// (looks), those that found nothing to do (SleepsEmpty), and the returns
// of the NIC transport's waits on the driver (nic_rx_wait_wakeups), which
// count the thread's wake-ups inside Recv too.
type idleWakes struct{ runs, looks, empty, nicWakes uint64 }

// nicWakes is b's transport's count of its waits' returns.
func nicWakes(b *Board) uint64 {
	for _, c := range b.TransportCounters() {
		if c.Name == "nic_rx_wait_wakeups" {
			return c.Value
		}
	}
	return 0
}

// measureIdle waits until b's ticks stretched to the longest (a new
// board ticks busy for its first busyLinger), brings them back (as work
// that the ticks time does) and counts what its progress thread did until
// they stretched to the longest again.
func measureIdle(t *testing.T, b *Board) idleWakes {
	t.Helper()
	waitIdle(t, b, idleTickMax, 30*time.Second)
	_, runs0, looks0 := b.idleState()
	empty0, nic0 := b.Counters()[SleepsEmpty], nicWakes(b)
	b.mu.Lock()
	b.wakeTicks()
	b.unlock()
	waitIdle(t, b, idleTickMax, 30*time.Second)
	_, runs1, looks1 := b.idleState()
	return idleWakes{runs: runs1 - runs0, looks: looks1 - looks0,
		empty: b.Counters()[SleepsEmpty] - empty0, nicWakes: nicWakes(b) - nic0}
}

// TestIdleNICBoardSleeps checks that the boards of an idle queued board
// over NIC models with interrupts (the progress threads sleep on their
// queues' MSI-X vectors) do not wake their progress threads for nothing:
// from its ticks brought back until they stretch to the longest again
// (three ticks) its thread wakes about once per tick, not once per
// millisecond, as it did while the NIC transport's Recv could not be
// ended early; and on the 82574L, whose queues steer UDP ports in
// software, a queue's wait sleeps until another queue hands it a frame
// instead of looking every millisecond. Messages afterwards still go
// through at once, and Close ends the long waits. Counted in wake-ups,
// not time.
func TestIdleNICBoardSleeps(t *testing.T) {
	const queues = 2
	for _, c := range []struct {
		name string
		nics func(t *testing.T) [2]*nic.Transport
	}{
		{"82599", func(t *testing.T) [2]*nic.Transport {
			o := ixgbe.DefaultOptions()
			o.Queues, o.RxRing, o.TxRing = queues, 128, 128
			o.Interrupts, o.NoModeration = true, true
			ts, _ := queuedNICsWith(t, o, emulated.CableOptions{})
			return ts
		}},
		{"82574L", func(t *testing.T) [2]*nic.Transport {
			o := e1000e.DefaultOptions()
			o.Queues, o.Interrupts = queues, true
			return nicpair.Transports(t, nicpair.E1000E(t, o), nicpair.UDP)
		}},
	} {
		t.Run(c.name, func(t *testing.T) { idleNICBoards(t, c.nics(t), queues) })
	}
}

// idleNICBoards is TestIdleNICBoardSleeps over one pair of transports.
func idleNICBoards(t *testing.T, ts [2]*nic.Transport, queues int) {
	qbs, eps := queuedExchange(t, [2]transport.Transport{ts[0], ts[1]}, queues)
	ctx := testCtx(t, time.Minute)
	// A message each way on every queue: every board has had work, and
	// its ticks stretch from the same start.
	msg, got := pattern(64, 3), make([]byte, 64)
	tos := make([]Addr, queues)
	for k := range queues {
		a, b := eps[0][k], eps[1][k]
		to, err := a.Connect(ctx, b.Addr().NIC, b.ID(), testKey)
		if err != nil {
			t.Fatal(err)
		}
		tos[k] = to
		exchange(t, ctx, a, to, b, 1, ^uint64(0), [][]byte{msg}, [][]byte{got})
	}

	t.Run("idle", func(t *testing.T) {
		for i := range 2 {
			for q, bd := range qbs[i].Boards() {
				t.Run(fmt.Sprintf("board%d/queue%d", i, q), func(t *testing.T) {
					t.Parallel()
					if bd.src.waker == nil {
						t.Fatal("the NIC transport is not a transport.Waker")
					}
					w := measureIdle(t, bd)
					t.Logf("%d timer runs, %d wake-ups (%d with nothing to do), %d returns from the driver's wait",
						w.runs, w.looks, w.empty, w.nicWakes)
					// The tick brought back and two quiet ticks, a
					// fourth if a tick was due as it was brought back; a
					// wake-up each, and slack for a hand-over at the start.
					if w.runs > 4 || w.looks > 8 || w.empty > 8 || w.nicWakes > 8 {
						t.Errorf("idle: %d timer runs, %d progress wake-ups, %d of them empty, %d returns from the driver's wait until its tick stretched to the longest; want at most 4, 8, 8, 8",
							w.runs, w.looks, w.empty, w.nicWakes)
					}
				})
			}
		}
	})

	// The stretched waits delay no frame: the interrupt, or the queue
	// that hands a frame over, ends them.
	for k := range queues {
		exchange(t, ctx, eps[0][k], tos[k], eps[1][k], 2, ^uint64(0), [][]byte{msg}, [][]byte{got})
		if !bytes.Equal(got, msg) {
			t.Fatalf("queue %d: message corrupted after the boards idled", k)
		}
	}
}
