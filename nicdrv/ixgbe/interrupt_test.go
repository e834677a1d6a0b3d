package ixgbe_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// Every one of 64 queues has its own MSI-X vector: a frame steered to
// queue q wakes the WaitRx of queue q. And EITR moderates each vector: a
// queue re-armed after every frame is interrupted once per interval of the
// model's clock, however many frames come within it.
func TestPerQueueInterrupts(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		clk := nictest.NewManualClock(time.Unix(1000, 0))
		o := m
		o.Clock = clk
		p := newPlatform(t, o)
		opts := ixgbe.DefaultOptions()
		opts.Queues = 64
		opts.Interrupts = true
		opts.InterruptInterval = 100 * time.Microsecond
		opts.RxRing, opts.TxRing = 64, 64
		opts.PoolBuffers = 6144 // 64 rings of 63 buffers, and some to send
		n := openOn(t, p, opts)
		a, b := n[0], n[1]
		for q := 0; q < 64; q++ {
			if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: uint16(9000 + q), Queue: q}); err != nil {
				t.Fatal(err)
			}
		}
		sent0 := p.Stats(0).TxFrames
		for q := 0; q < 64; q++ {
			woke := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err := b.WaitRx(ctx, time.Time{}, q)
				woke <- err
			}()
			send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 1, uint16(9000+q), uint64(q)) })
			if err := <-woke; err != nil {
				t.Fatalf("queue %d: WaitRx: %v", q, err)
			}
			if got, _ := arrival(t, b); got != q {
				t.Fatalf("frame for queue %d arrived on %d", q, got)
			}
			clk.Advance(time.Millisecond) // past every throttle
		}
		// The model's DMA engine counts a delivery's interrupt after
		// the WaitRx it woke returned: every one counted before the
		// count below starts.
		waitSent(t, p, 0, sent0+64)
		// Moderation: queue 5 re-armed after every frame, the clock frozen.
		before, sent := p.Stats(1).Interrupts, p.Stats(0).TxFrames
		for i := range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			_, _ = b.WaitRx(ctx, time.Time{}, 5) // arms the vector
			cancel()
			send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 1, 9005, uint64(i)) })
			if q, _ := arrival(t, b); q != 5 {
				t.Fatalf("frame for queue 5 arrived on %d", q)
			}
		}
		waitSent(t, p, 0, sent+20) // every delivery done, its interrupt decided
		if got := p.Stats(1).Interrupts - before; got != 1 {
			t.Errorf("%d interrupts for 20 frames within one EITR interval, want 1", got)
		}
		clk.Advance(opts.InterruptInterval)
		if got := p.Stats(1).Interrupts - before; got != 2 {
			t.Errorf("%d interrupts once the interval passed, want the deferred one (2)", got)
		}
	})
}

// With NoModeration a frame that lands while WaitRx sleeps on its queue's
// vector wakes it at once, whatever the clock says: the model, whose
// clock is frozen here, raises the vector for every frame that finds it
// armed (EITR 0), where the moderated test above got one interrupt for
// twenty frames. WaitRx arms the vector (an EIMS_EX write) before it
// sleeps; each frame is sent only once that write is seen.
func TestWakeOnFrame(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		clk := nictest.NewManualClock(time.Unix(1000, 0))
		o := m
		o.Clock = clk
		p := newPlatform(t, o)
		opts := ixgbe.DefaultOptions()
		opts.Queues = 4
		opts.Interrupts, opts.NoModeration = true, true
		n := openOn(t, p, opts)
		a, b := n[0], n[1]
		const q = 2
		if _, err := b.AddRule(nicdrv.Rule{Kind: nicdrv.RuleUDPDestPort, Port: 9002, Queue: q}); err != nil {
			t.Fatal(err)
		}
		before, sent := p.Stats(1).Interrupts, p.Stats(0).TxFrames
		const frames = 20
		for i := range frames {
			armed := p.Accesses(1).Writes["EIMS_EX0"]
			woke := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				got, err := b.WaitRx(ctx, time.Time{}, q)
				if err == nil && got != q {
					err = fmt.Errorf("WaitRx returned queue %d, want %d", got, q)
				}
				woke <- err
			}()
			// Bounded wait for the arming write: the waiter first looks at
			// the ring a while, spinning and then yielding.
			nictest.WaitArmed(t, fmt.Sprintf("frame %d on queue %d", i, q), func(reg string) uint64 { return p.Accesses(1).Writes[reg] }, "EIMS_EX0", armed)
			send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 1, 9002, uint64(i)) })
			if err := <-woke; err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			// The interrupt is counted after it woke WaitRx, on the
			// goroutine that delivered the frame: the engine's in the
			// async mode, which counts the frame sent after that.
			waitSent(t, p, 0, sent+uint64(i+1))
			if got, _ := arrival(t, b); got != q {
				t.Fatalf("frame %d arrived on queue %d, want %d", i, got, q)
			}
		}
		if got := p.Stats(1).Interrupts - before; got != frames {
			t.Errorf("%d interrupts for %d frames that each found the vector armed, the clock frozen: want one each (EITR 0)", got, frames)
		}
		if s, _ := b.Stats(); s.Interrupts == 0 {
			t.Error("WaitRx consumed no interrupt: it never slept on the vector")
		}
	})
}

// A WaitRx on queues of both halves of the 64 (two in each) arms them
// with one EICR write that clears the latched causes of those below 16
// (3 and 5, and no other queue's), then one EIMS_EX write per register
// that holds one of them (EIMS_EX0 and EIMS_EX1), then one STATUS read
// that flushes those posted writes, and makes no other register access,
// before it sleeps.
func TestWaitRxArmsOneWritePerRegister(t *testing.T) {
	p := newPlatform(t, emulated.DefaultIXGBEOptions())
	opts := ixgbe.DefaultOptions()
	opts.Queues = 64
	opts.Interrupts, opts.NoModeration = true, true
	opts.RxRing, opts.TxRing = 64, 64
	opts.PoolBuffers = 6144 // 64 rings of 63 buffers, and some to send
	rec := &nictest.RegLog{Device: p.Functions()[1], Name: hw.RegName}
	b, err := ixgbe.Open(rec, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	got := rec.WaitRxAccesses(t, b, "read STATUS", 3, 5, 40, 41)
	want := []string{
		fmt.Sprintf("write EICR = %#x", 1<<3|1<<5),
		fmt.Sprintf("write EIMS_EX0 = %#x", 1<<3|1<<5),
		fmt.Sprintf("write EIMS_EX1 = %#x", 1<<(40-32)|1<<(41-32)),
		"read STATUS",
	}
	if !slices.Equal(got, want) {
		t.Errorf("a WaitRx on queues 3, 5, 40 and 41 made the register accesses %q, want %q", got, want)
	}
}

// A WaitRx that sleeps on a ring emptied while its vector was masked
// clears the cause those frames latched as it arms (the EICR write before
// EIMS_EX), in both DMA modes: nictest.CheckArmClearsLatchedCause says
// how that shows.
func TestArmClearsLatchedCause(t *testing.T) {
	dmaModes(t, func(t *testing.T, m emulated.IXGBEOptions) {
		p := newPlatform(t, m)
		opts := ixgbe.DefaultOptions()
		opts.Interrupts, opts.NoModeration = true, true
		n := openOn(t, p, opts)
		a, b := n[0], n[1]
		frame := func(i int) {
			send(t, a, func(fr []byte) []byte { return udpFrame(fr, b.MAC(), a.MAC(), 1, 9000, uint64(i)) })
		}
		sent := p.Stats(0).TxFrames
		nictest.CheckArmClearsLatchedCause(t, nictest.LatchedCause{
			NIC:        b,
			Writes:     func(reg string) uint64 { return p.Accesses(1).Writes[reg] },
			Mask:       "EIMS_EX0",
			Interrupts: func() uint64 { return p.Stats(1).Interrupts },
			Send:       frame,
			Take: func(count int) {
				waitSent(t, p, 0, sent+uint64(count)) // every frame in the ring, its cause latched
				for range count {
					arrival(t, b)
				}
			},
		})
	})
}
