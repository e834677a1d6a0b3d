package mx

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport"
)

// idleWakes is what an idle board's progress thread did while its tick
// period stretched from 8 ticks to 32: the timer runs, its wake-ups
// (looks), and those that found nothing to do (SleepsEmpty).
type idleWakes struct{ runs, looks, empty uint64 }

// measureIdle brings b's ticks back (as work that the ticks time does),
// waits until they stretch to 8 and then to 32 ticks, and counts what its
// progress thread did in between.
func measureIdle(t *testing.T, b *Board) idleWakes {
	t.Helper()
	b.mu.Lock()
	b.wakeTicks()
	b.unlock()
	waitIdle(t, b, 8*b.tick, 30*time.Second)
	_, runs0, looks0 := b.idleState()
	empty0 := b.Counters()[SleepsEmpty]
	waitIdle(t, b, 32*b.tick, 30*time.Second)
	_, runs1, looks1 := b.idleState()
	return idleWakes{runs: runs1 - runs0, looks: looks1 - looks0, empty: b.Counters()[SleepsEmpty] - empty0}
}

// TestIdleNICBoardSleeps checks that the boards of an idle queued board
// over the emulated 82599 with interrupts (the progress threads sleep on
// their queues' MSI-X vectors) do not wake their progress threads for
// nothing: while a board's tick period goes from 8 ticks to 32 its thread
// wakes about once per stretched tick, not once per tick (24 times), as
// it did while the NIC transport's Recv could not be ended early and so
// had to wait a tick at most. A message afterwards still goes through
// at once, and Close ends the long waits. Counted in wake-ups, not time.
func TestIdleNICBoardSleeps(t *testing.T) {
	const queues = 2
	o := ixgbe.DefaultOptions()
	o.Queues, o.RxRing, o.TxRing = queues, 128, 128
	o.Interrupts, o.NoModeration = true, true
	ts, _ := queuedNICsWith(t, o, emulated.CableOptions{})
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
					t.Logf("%d timer runs, %d wake-ups, %d with nothing to do", w.runs, w.looks, w.empty)
					// 8 -> 16 -> 32: two stretched ticks, a third if the
					// period was past 8 when first read; a wake-up each,
					// and slack for a hand-over at the start.
					if w.runs > 3 || w.looks > 8 || w.empty > 8 {
						t.Errorf("idle: %d timer runs, %d progress wake-ups, %d of them empty while its tick stretched from 8 to 32 ticks; want at most 3, 8, 8",
							w.runs, w.looks, w.empty)
					}
				})
			}
		}
	})

	// The stretched waits delay no frame: the interrupt ends them.
	for k := range queues {
		exchange(t, ctx, eps[0][k], tos[k], eps[1][k], 2, ^uint64(0), [][]byte{msg}, [][]byte{got})
		if !bytes.Equal(got, msg) {
			t.Fatalf("queue %d: message corrupted after the boards idled", k)
		}
	}
}
