package pci

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseAddress(t *testing.T) {
	good := map[string]Address{
		"0000:00:04.0": {Device: 4},
		"00:04.7":      {Device: 4, Function: 7},
		"0001:80:1f.3": {Domain: 1, Bus: 0x80, Device: 0x1f, Function: 3},
	}
	for s, want := range good {
		a, err := ParseAddress(s)
		if err != nil || a != want {
			t.Errorf("ParseAddress(%q) = %v, %v; want %v", s, a, err, want)
		}
		if s == "0000:00:04.0" && a.String() != s {
			t.Errorf("String() = %q", a.String())
		}
	}
	for _, s := range []string{"", "0:00:04.0", "00:04", "00:20.0", "00:04.8", "zz:04.0", "0000:00:04.0:1"} {
		if _, err := ParseAddress(s); err == nil {
			t.Errorf("ParseAddress(%q) accepted", s)
		}
	}
}

func FuzzParseAddress(f *testing.F) {
	f.Add("0000:00:04.0")
	f.Add("ff:1f.7")
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		b, err := ParseAddress(a.String())
		if err != nil || a != b {
			t.Fatalf("%q -> %v does not round-trip: %v %v", s, a, b, err)
		}
	})
}

func TestMappingIOVA(t *testing.T) {
	m := &Mapping{Buf: make([]byte, 300), Segments: []Segment{{IOVA: 0x1000, Len: 100}, {IOVA: 0x9000, Len: 200}}}
	cases := []struct {
		off    int
		iova   uint64
		contig int
	}{{0, 0x1000, 100}, {99, 0x1063, 1}, {100, 0x9000, 200}, {299, 0x90C7, 1}}
	for _, c := range cases {
		iova, contig, err := m.IOVA(c.off)
		if err != nil || iova != c.iova || contig != c.contig {
			t.Errorf("IOVA(%d) = %#x, %d, %v; want %#x, %d", c.off, iova, contig, err, c.iova, c.contig)
		}
	}
	if _, _, err := m.IOVA(300); !errors.Is(err, ErrBadRange) {
		t.Errorf("IOVA past the end: %v", err)
	}
	if off, ok := m.Contains(0x9010, 16); !ok || off != 116 {
		t.Errorf("Contains = %d, %v", off, ok)
	}
	if _, ok := m.Contains(0x1060, 64); ok {
		t.Error("Contains accepted a range across segments")
	}
	if _, ok := m.Contains(^uint64(0)-1, 16); ok {
		t.Error("Contains accepted a wrapping range")
	}
}

// TestInterrupt runs the same checks on an interrupt the kernel signals
// (its waiters sleep in the network poller) and on a local one (Signal
// wakes them itself).
func TestInterrupt(t *testing.T) {
	for _, c := range []struct {
		name string
		make func() (*Interrupt, error)
	}{{"eventfd", NewInterrupt}, {"local", NewLocalInterrupt}} {
		t.Run(c.name, func(t *testing.T) {
			irq, err := c.make()
			if err != nil {
				t.Fatal(err)
			}
			if n := irq.Poll(); n != 0 {
				t.Fatalf("fresh interrupt has %d signals", n)
			}
			irq.Signal()
			irq.Signal()
			if n, err := irq.Wait(context.Background()); err != nil || n != 2 {
				t.Fatalf("Wait = %d, %v; want 2 signals", n, err)
			}
			if n, err := irq.WaitTimeout(5 * time.Millisecond); err != nil || n != 0 {
				t.Fatalf("WaitTimeout with nothing pending = %d, %v", n, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			go func() { time.Sleep(5 * time.Millisecond); cancel() }()
			if _, err := irq.Wait(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait after cancel: %v", err)
			}
			// A signal while a waiter sleeps wakes it with the count.
			woke := make(chan uint64)
			go func() { n, _ := irq.Wait(context.Background()); woke <- n }()
			time.Sleep(5 * time.Millisecond)
			irq.Signal()
			if n := <-woke; n != 1 {
				t.Fatalf("Wait across a Signal = %d signals, want 1", n)
			}
			done := make(chan error)
			go func() { _, err := irq.Wait(context.Background()); done <- err }()
			time.Sleep(5 * time.Millisecond)
			irq.Close()
			if err := <-done; !errors.Is(err, ErrClosed) {
				t.Fatalf("Wait across Close: %v", err)
			}
			if _, err := irq.Wait(context.Background()); !errors.Is(err, ErrClosed) {
				t.Fatalf("Wait after Close: %v", err)
			}
		})
	}
}

func TestOpError(t *testing.T) {
	err := &OpError{Op: "VFIO_GROUP_GET_DEVICE_FD", Addr: Address{Device: 4}, Err: ErrBusy}
	if !errors.Is(err, ErrBusy) || err.Error() != "0000:00:04.0: VFIO_GROUP_GET_DEVICE_FD: busy" {
		t.Fatalf("%v", err)
	}
}

// TestPollAfterClose: a Poll that comes after Close (a waiter's last look
// racing the device's shutdown) finds nothing, and takes nothing from the
// descriptor that now has the closed eventfd's number.
func TestPollAfterClose(t *testing.T) {
	irq, err := NewInterrupt()
	if err != nil {
		t.Fatal(err)
	}
	old := irq.FD()
	if err := irq.Close(); err != nil {
		t.Fatal(err)
	}
	other, err := NewInterrupt() // the lowest free number: most likely old
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if other.FD() != old {
		t.Logf("the new eventfd is %d, not %d: this run checks only that Poll finds nothing", other.FD(), old)
	}
	if err := other.Signal(); err != nil {
		t.Fatal(err)
	}
	if n := irq.Poll(); n != 0 {
		t.Fatalf("Poll of a closed Interrupt returned %d", n)
	}
	if n := other.Poll(); n != 1 {
		t.Fatalf("the other eventfd had %d signals left, want 1: the closed Interrupt's Poll read it", n)
	}
}

// WaitAny returns the one interrupt of several that fired, for kernel and
// local interrupts alike; ends with the context when none does; and
// reports an interrupt closed under it.
func TestWaitAny(t *testing.T) {
	for _, local := range []bool{false, true} {
		irqs := newInterrupts(t, local, 3)
		for want := range irqs {
			go func() { _ = irqs[want].Signal() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, n, err := WaitAny(ctx, time.Time{}, irqs...)
			cancel()
			if err != nil || got != want || n != 1 {
				t.Errorf("local %v: signal %d: WaitAny = %d, %d, %v", local, want, got, n, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Millisecond)
		if _, _, err := WaitAny(ctx, time.Time{}, irqs...); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("local %v: WaitAny with none signalled: %v, want the deadline", local, err)
		}
		cancel()
		done := make(chan error, 1)
		go func() {
			_, _, err := WaitAny(context.Background(), time.Time{}, irqs...)
			done <- err
		}()
		_ = irqs[1].Close()
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("local %v: WaitAny across Close: %v, want ErrClosed", local, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("local %v: WaitAny did not notice a Close", local)
		}
	}
}

// A signal pending when WaitAny is called is returned, and the others that
// fired keep their counts for the next wait. A context already done still
// gets it, with one Interrupt or several alike; with none pending it gets
// the context's error.
func TestWaitAnyPending(t *testing.T) {
	for _, local := range []bool{false, true} {
		irqs := newInterrupts(t, local, 3)
		a, b := irqs[0], irqs[1]
		for _, err := range []error{a.Signal(), b.Signal(), b.Signal()} {
			if err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, n, err := WaitAny(ctx, time.Time{}, irqs...)
		cancel()
		if err != nil || got != 0 || n != 1 {
			t.Errorf("local %v: a signalled once, b twice: WaitAny = %d, %d, %v; want a's 1", local, got, n, err)
		}
		if n := b.Poll(); n != 2 {
			t.Errorf("local %v: b holds %d signals after WaitAny returned a's, want 2", local, n)
		}
		done, cancel := context.WithCancel(context.Background())
		cancel()
		for _, waited := range [][]*Interrupt{irqs[:1], irqs} {
			if err := a.Signal(); err != nil {
				t.Fatal(err)
			}
			if got, n, err := WaitAny(done, time.Time{}, waited...); err != nil || got != 0 || n != 1 {
				t.Errorf("local %v: %d interrupts, a signalled, the context done: WaitAny = %d, %d, %v; want a's 1",
					local, len(waited), got, n, err)
			}
			if _, _, err := WaitAny(done, time.Time{}, waited...); !errors.Is(err, context.Canceled) {
				t.Errorf("local %v: %d interrupts, none signalled, the context done: %v, want context.Canceled",
					local, len(waited), err)
			}
		}
	}
}

// WaitAny ends at its deadline as at a context's: a signal pending
// is returned even when the deadline has passed, none pending then gives
// context.DeadlineExceeded without a sleep, a deadline to come ends a wait
// nothing signals, and a signal before it is returned. A local interrupt's
// waits reuse one timer: after the first, a wait with a deadline
// allocates nothing.
func TestWaitAnyDeadline(t *testing.T) {
	for _, local := range []bool{false, true} {
		for _, k := range []int{1, 3} {
			irqs := newInterrupts(t, local, k)
			past := time.Now().Add(-time.Second)
			if err := irqs[k-1].Signal(); err != nil {
				t.Fatal(err)
			}
			if got, n, err := WaitAny(context.Background(), past, irqs...); err != nil || got != k-1 || n != 1 {
				t.Errorf("local %v, %d interrupts: one pending, the deadline passed: %d, %d, %v; want %d, 1, nil", local, k, got, n, err, k-1)
			}
			if _, _, err := WaitAny(context.Background(), past, irqs...); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("local %v, %d interrupts: none pending, the deadline passed: %v, want context.DeadlineExceeded", local, k, err)
			}
			if _, _, err := WaitAny(context.Background(), time.Now().Add(5*time.Millisecond), irqs...); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("local %v, %d interrupts: none signalled before the deadline: %v, want context.DeadlineExceeded", local, k, err)
			}
			go func() { _ = irqs[0].Signal() }()
			if got, n, err := WaitAny(context.Background(), time.Now().Add(time.Hour), irqs...); err != nil || got != 0 || n != 1 {
				t.Errorf("local %v, %d interrupts: signalled before the deadline: %d, %d, %v; want 0, 1, nil", local, k, got, n, err)
			}
			if !local || k != 1 || raceEnabled {
				continue
			}
			wait := func() { _, _, _ = WaitAny(context.Background(), time.Now().Add(-time.Millisecond), irqs...) }
			wait()
			if n := testing.AllocsPerRun(50, wait); n != 0 {
				t.Errorf("a local interrupt's wait with a deadline: %v allocations, want 0", n)
			}
		}
	}
}

// newInterrupts returns n interrupts, local or kernel ones, closed as the
// test ends.
func newInterrupts(t *testing.T, local bool, n int) []*Interrupt {
	t.Helper()
	irqs := make([]*Interrupt, n)
	for i := range irqs {
		var err error
		if local {
			irqs[i], err = NewLocalInterrupt()
		} else {
			irqs[i], err = NewInterrupt()
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { irqs[i].Close() })
	}
	return irqs
}

// A context's end ends WaitAny's sleep on several interrupts at once,
// whatever its deadline: waits on different sets of interrupts at once,
// each with a deadline an hour away and its own context, end one by one
// as their contexts are cancelled, each with context.Canceled, and none
// of their sleeps ends at its timeout. A cancel meant for one waiter
// wakes no other: each sleeps about once (its wake-up's eventfd may hold
// one ring a registration made before the wait left, which costs one more
// sleep), where a shared wake-up still readable would make the others
// spin. A context cancelled before the wait ends it at its first look.
func TestWaitAnyCancelWakes(t *testing.T) {
	for _, local := range []bool{false, true} {
		irqs := newInterrupts(t, local, 6)
		sets := [][]*Interrupt{irqs[0:2], irqs[2:5], irqs[4:6]}
		timedOut, slept := sleepsTimedOut.Load(), sleeps.Load()
		type waiter struct {
			cancel context.CancelFunc
			done   chan error
		}
		ws := make([]waiter, len(sets))
		for k, set := range sets {
			ctx, cancel := context.WithCancel(context.Background())
			ws[k] = waiter{cancel, make(chan error, 1)}
			go func() {
				_, _, err := WaitAny(ctx, time.Now().Add(time.Hour), set...)
				ws[k].done <- err
			}()
		}
		// Cancel each once every waiter is asleep, so that the cancels
		// come during the sleeps.
		for i := 0; sleeps.Load()-slept < uint64(len(sets)); i++ {
			if i == 1e6 {
				t.Fatalf("local %v: %d of %d waiters asleep", local, sleeps.Load()-slept, len(sets))
			}
			runtime.Gosched()
		}
		for k, w := range ws {
			w.cancel()
			select {
			case err := <-w.done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("local %v: waiter %d, its context cancelled: %v, want context.Canceled", local, k, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("local %v: waiter %d still waits after its context was cancelled", local, k)
			}
			for _, o := range ws[k+1:] {
				select {
				case err := <-o.done:
					t.Fatalf("local %v: waiter %d's cancel ended another wait: %v", local, k, err)
				default:
				}
			}
		}
		if n := sleepsTimedOut.Load() - timedOut; n != 0 {
			t.Errorf("local %v: %d sleeps ended at their timeout, want 0: a cancel ends the sleep", local, n)
		}
		if n := sleeps.Load() - slept; n > uint64(2*len(sets)) {
			t.Errorf("local %v: %d sleeps for %d waits cancelled once each, want at most %d", local, n, len(sets), 2*len(sets))
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, _, err := WaitAny(ctx, time.Now().Add(time.Hour), sets[1]...); !errors.Is(err, context.Canceled) {
			t.Errorf("local %v: a wait on a context cancelled before it: %v, want context.Canceled", local, err)
		}
	}
}

// Waits on one context allocate nothing after the second, on one
// Interrupt or several, kernel or local: one that a signal pending
// satisfies, one that a signal during its sleep does, and one that times
// out, with a deadline passed or while it sleeps.
func TestWaitAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	for _, local := range []bool{false, true} {
		for _, k := range []int{1, 3} {
			irqs := newInterrupts(t, local, k)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			kick := make(chan struct{})
			defer close(kick)
			go func() {
				for range kick {
					_ = irqs[k-1].Signal()
				}
			}()
			check := func(what string, want error, wait func() error) {
				t.Helper()
				run := func() {
					if err := wait(); !errors.Is(err, want) {
						t.Fatalf("local %v, %d interrupts: %s: %v, want %v", local, k, what, err, want)
					}
				}
				run()
				if n := testing.AllocsPerRun(50, run); n != 0 {
					t.Errorf("local %v, %d interrupts: %s: %v allocations, want 0", local, k, what, n)
				}
			}
			wait := func(deadline time.Time) error {
				_, _, err := WaitAny(ctx, deadline, irqs...)
				return err
			}
			check("a signal pending", nil, func() error {
				_ = irqs[k-1].Signal()
				return wait(time.Now().Add(time.Hour))
			})
			check("a signal while it sleeps", nil, func() error {
				kick <- struct{}{}
				return wait(time.Now().Add(time.Hour))
			})
			check("the deadline passed", context.DeadlineExceeded, func() error {
				return wait(time.Now().Add(-time.Millisecond))
			})
			check("the deadline passes while it sleeps", context.DeadlineExceeded, func() error {
				return wait(time.Now().Add(100 * time.Microsecond))
			})
		}
	}
}

// Close ends every wait on the Interrupt with ErrClosed, a one-interrupt
// Wait and a WaitAny on it and another at once, on kernel and local
// interrupts alike: the Wait may read the signal Close writes to end the
// WaitAny's poll(2), and must pass it on. Once the last has left, the
// eventfd is closed, and Signal reports the Interrupt closed.
func TestCloseWakesEveryWaiter(t *testing.T) {
	for _, local := range []bool{false, true} {
		for round := range 100 {
			irqs := newInterrupts(t, local, 2)
			a := irqs[0]
			fd := a.FD()
			slept := sleeps.Load()
			done := make(chan error, 2)
			go func() {
				_, err := a.Wait(context.Background())
				done <- err
			}()
			go func() {
				_, _, err := WaitAny(context.Background(), time.Time{}, irqs...)
				done <- err
			}()
			// Close once the WaitAny sleeps, and likely the Wait too.
			for i := 0; sleeps.Load() == slept; i++ {
				if i == 1e6 {
					t.Fatalf("local %v, round %d: the WaitAny never slept", local, round)
				}
				runtime.Gosched()
			}
			runtime.Gosched()
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			for k := range 2 {
				select {
				case err := <-done:
					if !errors.Is(err, ErrClosed) {
						t.Fatalf("local %v, round %d: a wait on the closed Interrupt: %v, want ErrClosed", local, round, err)
					}
				case <-time.After(30 * time.Second): // a hang guard only
					t.Fatalf("local %v, round %d: %d of 2 waits still wait after Close", local, round, 2-k)
				}
			}
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
				t.Fatalf("local %v, round %d: the closed Interrupt's eventfd %d, every waiter gone: F_GETFD gives %v, want EBADF", local, round, fd, err)
			}
			if err := a.Signal(); !errors.Is(err, ErrClosed) {
				t.Fatalf("local %v, round %d: Signal after Close: %v, want ErrClosed", local, round, err)
			}
			_ = irqs[1].Close()
		}
	}
}

// A wait keeps its registration on its context for the next wait only
// when two waits in a row were on that context (a receive loop's), and
// Close drops it: a caller with a fresh context per wait leaves nothing
// behind that its cancel would run or that would hold the context, and a
// closed Interrupt is not reachable from the context it last waited on.
func TestWaitKeepsContext(t *testing.T) {
	for _, k := range []int{1, 3} {
		irqs := newInterrupts(t, false, k)
		wait := func(ctx context.Context) {
			t.Helper()
			_ = irqs[k-1].Signal()
			if _, _, err := WaitAny(ctx, time.Time{}, irqs...); err != nil {
				t.Fatalf("%d interrupts: %v", k, err)
			}
		}
		// kept reports whether a registration on ctx is kept: by the
		// Interrupt (one) or by a free waker (several).
		kept := func(ctx context.Context) bool {
			if k == 1 {
				irqs[0].watchMu.Lock()
				defer irqs[0].watchMu.Unlock()
				return irqs[0].watch.is(ctx)
			}
			wakers.mu.Lock()
			defer wakers.mu.Unlock()
			for _, w := range wakers.free {
				if w.stop != nil {
					t.Fatalf("%d interrupts: a free waker holds a wait's own registration", k)
				}
				if w.watch.is(ctx) {
					return true
				}
			}
			return false
		}
		for round := range 3 {
			ctx, cancel := context.WithCancel(context.Background())
			wait(ctx)
			cancel()
			if kept(ctx) {
				t.Fatalf("%d interrupts, round %d: a wait on a fresh context left a registration on it", k, round)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wait(ctx)
		wait(ctx)
		if !kept(ctx) {
			t.Fatalf("%d interrupts: two waits on one context kept no registration for the next", k)
		}
		if k == 1 {
			_ = irqs[0].Close()
			if kept(ctx) {
				t.Fatalf("the closed Interrupt still holds a registration on its last context")
			}
		}
	}
}
