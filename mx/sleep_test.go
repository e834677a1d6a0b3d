package mx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
)

// needSleepers skips a test of the waiter that sleeps on the sources when
// the process cannot have one (sleep.go: at most GOMAXPROCS-1).
func needSleepers(t *testing.T) {
	t.Helper()
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("with GOMAXPROCS 1 no waiter sleeps on the sources (sleep.go): run with GOMAXPROCS=2 or more")
	}
}

// sleeperPair makes a pair over UDP whose waiters sleep at once on the
// board's sources (skipping as needSleepers does).
func sleeperPair(t *testing.T) *pair {
	t.Helper()
	needSleepers(t)
	o := fastOptions()
	o.Spin = -1
	o.SleepOnSources = true
	return newPair(t, factoryNamed(t, "udp"), o, loopback.Faults{})
}

// asleepOn starts a wait on its own goroutine and returns its result
// channel once the waiter sleeps: on b's sources, or on its channel when it
// could not take them (a loop that did not step aside within takeGrace, on
// a loaded machine).
func asleepOn(t *testing.T, b *Board, wait func() error) chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- wait() }()
	waitUntil(t, "the waiter to sleep", func() bool {
		return b.WaitStats().Sleeping == 1 || b.sleep.chanSleepers.Load() > 0
	})
	return errc
}

// TestSleeperReceives: over UDP and over the rings, blocking waits sleep
// on the board's sources themselves and receive their messages on their
// own goroutine (WaitStats.Kernel), every byte intact, each message sent
// once its waiter sleeps (a few, under load, on their channels: see
// asleepOn); and two waiters of one board, one asleep on the
// sources and one on its channel, both get their messages.
func TestSleeperReceives(t *testing.T) {
	needSleepers(t)
	for _, name := range []string{"udp", "shm"} {
		t.Run(name, func(t *testing.T) {
			o := fastOptions()
			o.Spin = -1 // sleep at once: every wait is the sleeper's
			o.SleepOnSources = true
			pr := newPair(t, factoryNamed(t, name), o, loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			st0 := pr.ba.WaitStats()
			const n = 50
			for i := range n {
				buf := make([]byte, 64)
				r, err := pr.a.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				errc := asleepOn(t, pr.ba, func() error { _, err := r.Wait(ctx); return err })
				msg := pattern(64, uint64(i))
				s, err := pr.b.ISend([][]byte{msg}, pr.btoa, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				mustWait(t, s, time.Minute)
				if err := <-errc; err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
				if !bytes.Equal(buf, msg) {
					t.Fatalf("message %d differs", i)
				}
			}
			// Most take the sources; under load a few may find the
			// loop slow to step aside and sleep on their channels.
			if st := pr.ba.WaitStats(); st.Kernel == st0.Kernel || st.Kernel > st0.Kernel+n || st.Sleeping != 0 {
				t.Fatalf("wait stats %+v (before %+v): want up to %d waits received asleep on the sources, none asleep now", st, st0, n)
			}
			t.Logf("%d of %d waits received asleep on the sources", pr.ba.WaitStats().Kernel-st0.Kernel, n)
			// Two waiters: one owns the sources, the other sleeps on its
			// channel; the owner's message comes last.
			bufs := [2][]byte{make([]byte, 8), make([]byte, 8)}
			var errs [2]chan error
			for i := range 2 {
				r, err := pr.a.IRecv([][]byte{bufs[i]}, uint64(100+i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				errs[i] = make(chan error, 1)
				go func() { _, err := r.Wait(ctx); errs[i] <- err }()
				if i == 0 {
					waitUntil(t, "the first waiter to sleep", func() bool {
						return pr.ba.WaitStats().Sleeping == 1 || pr.ba.sleep.chanSleepers.Load() > 0
					})
				}
			}
			for _, i := range []int{1, 0} {
				s, err := pr.b.ISend([][]byte{[]byte(fmt.Sprintf("waiter %d", i))}, pr.btoa, uint64(100+i), nil)
				if err != nil {
					t.Fatal(err)
				}
				mustWait(t, s, time.Minute)
				if err := <-errs[i]; err != nil || string(bufs[i]) != fmt.Sprintf("waiter %d", i) {
					t.Fatalf("waiter %d: %v, %q", i, err, bufs[i])
				}
			}
		})
	}
}

// TestSleeperEnds: a waiter asleep on the sources ends as one asleep on
// its channel does: woken up (ErrWokenUp), by its context's deadline or
// cancellation (ErrTimeout), by its endpoint's close (ErrEndpointClosed),
// for a request wait and an event wait (WaitAny) alike; and it hands the
// sources back, so a message that comes next still arrives.
func TestSleeperEnds(t *testing.T) {
	pr := sleeperPair(t)
	buf := make([]byte, 8)
	r, err := pr.a.IRecv([][]byte{buf}, 5, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		wait func() error
		end  func(cancel context.CancelFunc)
		want error
	}{
		{"wakeup", func() error { _, err := r.Wait(context.Background()); return err }, func(context.CancelFunc) { pr.a.Wakeup() }, ErrWokenUp},
		{"deadline", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, err := r.Wait(ctx)
			return err
		}, nil, ErrTimeout},
		{"wait any, wakeup", func() error { _, err := pr.a.WaitAny(context.Background(), 1, ^uint64(0)); return err }, func(context.CancelFunc) { pr.a.Wakeup() }, ErrWokenUp},
	} {
		t.Run(c.name, func(t *testing.T) {
			errc := asleepOn(t, pr.ba, c.wait)
			if c.end != nil {
				c.end(nil)
			}
			if err := <-errc; !errors.Is(err, c.want) {
				t.Fatalf("ended with %v, want %v", err, c.want)
			}
		})
	}
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := asleepOn(t, pr.ba, func() error { _, err := r.Wait(ctx); return err })
		cancel()
		if err := <-errc; !errors.Is(err, ErrTimeout) {
			t.Fatalf("ended with %v, want %v", err, ErrTimeout)
		}
	})
	// The request is still posted: the next message completes it.
	s, err := pr.b.ISend([][]byte{[]byte("after it")}, pr.btoa, 5, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustWait(t, s, time.Minute)
	if st := mustWait(t, r, time.Minute); st.Code != nil || string(buf) != "after it" {
		t.Fatalf("the next message: %+v %q", st, buf)
	}
	t.Run("close", func(t *testing.T) {
		r2, err := pr.a.IRecv([][]byte{buf}, 6, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		errc := asleepOn(t, pr.ba, func() error { _, err := r2.Wait(context.Background()); return err })
		if err := pr.a.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, ErrEndpointClosed) {
			t.Fatalf("ended with %v, want %v", err, ErrEndpointClosed)
		}
	})
}

// TestSleeperWokenByCompletion: a completion wakes the waiter asleep on
// the sources at once (complete finds the sleep armed and writes the
// board's eventfd), not at the sleep's timeout: an IRecv cancelled on
// another goroutine ends its Wait with ErrCancelled, and no sleep of the
// board timed out meanwhile. A tick's timeout may still fall between the
// counts under load, so an attempt may repeat; without the wake every
// attempt would count its sleeper's own timeout.
func TestSleeperWokenByCompletion(t *testing.T) {
	pr := sleeperPair(t)
	const attempts = 20
	for i := range attempts {
		r, err := pr.a.IRecv([][]byte{make([]byte, 8)}, uint64(200+i), ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		errc := asleepOn(t, pr.ba, func() error { _, err := r.Wait(context.Background()); return err })
		if pr.ba.WaitStats().Sleeping != 1 {
			// On its channel (see asleepOn): not the sleep this
			// test is about.
			if _, err := pr.a.Cancel(r); err != nil {
				t.Fatal(err)
			}
			<-errc
			continue
		}
		waitUntil(t, "the sleep to be armed", func() bool { return pr.ba.sleep.armed.Load() })
		empty := pr.ba.sleepsEmpty.Load()
		if ok, err := pr.a.Cancel(r); !ok || err != nil {
			t.Fatalf("cancel: %v, %v", ok, err)
		}
		if err := <-errc; !errors.Is(err, ErrCancelled) {
			t.Fatalf("ended with %v, want %v", err, ErrCancelled)
		}
		if pr.ba.sleepsEmpty.Load() == empty {
			t.Logf("attempt %d: woken with no sleep timed out", i+1)
			return
		}
	}
	t.Fatalf("in each of %d attempts a sleep of the board timed out before the cancelled wait ended: the completion did not wake its sleeper", attempts)
}

// TestSleepEnv: GOMX_SLEEP chooses where a blocking waiter sleeps, and a
// bad value names the variable and its values.
func TestSleepEnv(t *testing.T) {
	for _, c := range []struct {
		v          string
		given, set bool
		bad        bool
	}{{"", false, false, false}, {"", true, true, false}, {"recv", false, true, false}, {"loop", true, false, false}, {"kernel", false, false, true}} {
		t.Run(fmt.Sprintf("%q/%v", c.v, c.given), func(t *testing.T) {
			t.Setenv("GOMX_SLEEP", c.v)
			o := BoardOptions{SleepOnSources: c.given}
			err := o.sleepEnv()
			if c.bad {
				if err == nil || !errors.Is(err, ErrBadOptions) || !bytes.Contains([]byte(err.Error()), []byte("GOMX_SLEEP")) {
					t.Fatalf("GOMX_SLEEP=%q: error %v, want one naming GOMX_SLEEP", c.v, err)
				}
				return
			}
			if err != nil || o.SleepOnSources != c.set {
				t.Fatalf("GOMX_SLEEP=%q over %v: SleepOnSources %v, error %v; want %v", c.v, c.given, o.SleepOnSources, err, c.set)
			}
		})
	}
}
