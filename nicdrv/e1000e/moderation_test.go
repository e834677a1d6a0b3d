package e1000e_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
)

// TestInterruptModeration floods a NIC in interrupt mode and counts what
// reaches the receiver: every frame, in far fewer interrupts than frames,
// and never more interrupts than one per programmed interval (EITR) of the
// model's clock, plus the first. The receiver re-arms its queue after
// every batch, so without the throttle the model would interrupt once per
// burst.
func TestInterruptModeration(t *testing.T) {
	const (
		interval = time.Millisecond
		step     = interval / 8 // clock advance per burst
		bursts   = 400
		perBurst = 4
	)
	clk := nictest.NewManualClock(time.Unix(1e9, 0))
	o := emulated.DefaultE1000EOptions()
	o.Clock = clk
	p := newModel(t, o)
	a, b := openIRQPair(t, p, interval)
	// The link-up interrupt (the "other" vector) came before: count from
	// here, when only the RX vector is armed.
	base := p.Stats(1).Interrupts
	if n := clk.Pending(); n != 0 {
		t.Fatalf("%d interrupt messages held by the throttle before the flood: the count would include them", n)
	}

	var received atomic.Uint64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		bufs := make([]*nicdrv.Buffer, 64)
		for {
			if _, err := b.WaitRx(ctx, time.Time{}, 0); err != nil {
				if errors.Is(err, context.Canceled) {
					err = nil
				}
				done <- err
				return
			}
			n, err := b.RxBatch(0, bufs)
			if err != nil {
				done <- err
				return
			}
			_ = b.Pool(0).Free(bufs[:n]...)
			received.Add(uint64(n))
		}
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("receiver: %v", err)
		}
	}()

	// The flood is paced by what the receiver and the throttle do, never
	// by wall time: a burst goes out once the receiver is asleep with its
	// queue armed (IMS) or a message is waiting in the throttle (a timer
	// on the model's clock); otherwise the receiver is still busy with the
	// last wake-up. So without moderation every burst would cost an
	// interrupt, and with it the bursts pile up behind one. The real-time
	// pauses only let the receiver run (bounded: a lost interrupt fails).
	regs, err := p.Functions()[1].BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	// stall bounds one wait with no frame received, not the flood: on a
	// loaded host the 400 bursts together take longer than that.
	const stall = 20 * time.Second
	waitUntil := func(what string, cond func() bool, tick bool) {
		deadline, got := time.Now().Add(stall), received.Load()
		for !cond() {
			if n := received.Load(); n != got {
				deadline, got = time.Now().Add(stall), n
			}
			if time.Now().After(deadline) {
				st, _ := b.Stats()
				t.Fatalf("%s: %d of %d frames received (model %+v, driver %+v)", what, received.Load(), sent, p.Stats(1), st)
			}
			if tick {
				clk.Advance(step)
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	start := clk.Now()
	frames := make([]*nicdrv.Buffer, perBurst)
	for i := range bursts {
		waitUntil("the receiver neither re-armed nor waits on the throttle", func() bool {
			return regs.Read32(hw.IMS)&hw.IntRXQ0 != 0 || clk.Pending() > 0
		}, false)
		if n, err := a.Pool(0).Alloc(frames); err != nil || n != perBurst {
			t.Fatalf("burst %d: alloc: %d, %v", i, n, err)
		}
		for j, f := range frames {
			nictest.Frame(f.SetLen(2048), b.MAC(), a.MAC(), uint64(sent+j), 60)
			f.SetLen(60)
		}
		for k := 0; k < perBurst; {
			n, err := a.TxBatch(0, frames[k:])
			if err != nil {
				t.Fatal(err)
			}
			k += n
		}
		sent += perBurst
		clk.Advance(step)
	}
	// The throttled tail: move the clock on until every frame is in.
	waitUntil("the receiver was not woken", func() bool { return received.Load() == uint64(sent) }, true)
	elapsed := clk.Now().Sub(start)
	irqs := p.Stats(1).Interrupts - base
	limit := uint64(elapsed/interval) + 1
	t.Logf("%d frames in %d interrupts over %v of model time (at most %d allowed)", sent, irqs, elapsed, limit)
	if irqs == 0 {
		t.Fatal("no interrupts counted: the receiver was woken some other way")
	}
	if irqs > limit {
		t.Errorf("%d interrupts in %v of model time: EITR of %v allows at most %d", irqs, elapsed, interval, limit)
	}
	if uint64(sent) < 4*irqs {
		t.Errorf("%d frames in %d interrupts: moderation should gather several frames per interrupt", sent, irqs)
	}
	if st, err := b.Stats(); err != nil || st.Interrupts == 0 || st.Interrupts > irqs {
		t.Errorf("driver counted %d interrupts (%v); the model raised %d", st.Interrupts, err, irqs)
	}
}

// A WaitRx that sleeps on a ring emptied while its vector was masked
// clears the cause those frames latched as it arms (the ICR write before
// IMS): nictest.CheckArmClearsLatchedCause says how that shows.
func TestArmClearsLatchedCause(t *testing.T) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	// The shortest throttle (one 256 ns unit): without the clear, the
	// latched cause's message is not held back past the wait.
	a, b := openIRQPair(t, p, 256*time.Nanosecond)
	send := func(i int) {
		f, err := a.Pool(0).Get()
		if err != nil {
			t.Fatal(err)
		}
		nictest.Frame(f.SetLen(2048), b.MAC(), a.MAC(), uint64(i), 60)
		f.SetLen(60)
		for deadline := time.Now().Add(10 * time.Second); ; {
			if n, err := a.TxBatch(0, []*nicdrv.Buffer{f}); err != nil || n == 1 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("TX ring stayed full")
			}
		}
	}
	// take waits (bounded) for count frames and frees them.
	take := func(count int) {
		bufs := make([]*nicdrv.Buffer, 8)
		for got, deadline := 0, time.Now().Add(10*time.Second); got < count; {
			n, err := b.RxBatch(0, bufs)
			if err != nil {
				t.Fatal(err)
			}
			_ = b.Pool(0).Free(bufs[:n]...)
			got += n
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d frames arrived", got, count)
			}
		}
	}
	nictest.CheckArmClearsLatchedCause(t, nictest.LatchedCause{
		NIC:        b,
		Writes:     func(reg string) uint64 { return p.Accesses(1).Writes[reg] },
		Mask:       "IMS",
		Interrupts: func() uint64 { return p.Stats(1).Interrupts },
		Send:       send,
		Take:       take,
	})
}

// A WaitRx on both queues arms them with one ICR write that clears the
// causes they latched (bits 20 and 21, and no other cause), then one IMS
// write, then one STATUS read that flushes those posted writes, and makes
// no other register access, before it sleeps.
func TestWaitRxArmsInOrder(t *testing.T) {
	p := newModel(t, emulated.DefaultE1000EOptions())
	o := e1000e.DefaultOptions()
	o.Queues, o.Interrupts = 2, true
	rec := &nictest.RegLog{Device: p.Functions()[1], Name: regName}
	b, err := e1000e.Open(rec, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	got := rec.WaitRxAccesses(t, b, "read STATUS", 0, 1)
	causes := fmt.Sprintf("%#x", hw.IntRXQ0|hw.IntRXQ1)
	want := []string{"write ICR = " + causes, "write IMS = " + causes, "read STATUS"}
	if !slices.Equal(got, want) {
		t.Errorf("a WaitRx on queues 0 and 1 made the register accesses %q, want %q", got, want)
	}
}

// openIRQPair opens p's two NICs, the second in interrupt mode with the
// given EITR interval, closes them when the test ends, and waits for the
// link.
func openIRQPair(t *testing.T, p *emulated.E1000E, interval time.Duration) (a, b *e1000e.NIC) {
	t.Helper()
	a, err := e1000e.Open(p.Functions()[0], e1000e.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	bo := e1000e.DefaultOptions()
	bo.Interrupts, bo.InterruptInterval = true, interval
	if b, err = e1000e.Open(p.Functions()[1], bo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.WaitLink(true, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return a, b
}
