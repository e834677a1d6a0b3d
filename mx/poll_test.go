package mx

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
)

var shmFactory = transportFactory{name: "shm", new: newShmWire}

// waitUntil polls cond until it holds; the bound only keeps a broken build
// from hanging.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func shmCounter(tr *shm.Transport, name string) uint64 {
	for _, c := range tr.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestWaitPollsTheRings: a Wait on a shared-memory board polls the rings
// itself, and the message that arrives while it does completes it on the
// waiting goroutine: it never sleeps.
func TestWaitPollsTheRings(t *testing.T) {
	o := fastOptions()
	o.Spin = time.Hour // the message comes whenever the machine lets it
	waitCompletesWhilePolling(t, newPair(t, shmFactory, o, loopback.Faults{}), nil)
}

// TestWaitPollsAFXDP: a blocking Wait on a board over AF_XDP polls the
// socket's RX ring itself, as it polls shared-memory rings, and the
// message the kernel puts there completes it on the waiting goroutine,
// without a wake-up of the receive loop; a deadline noted meanwhile leaves
// the fine timer unset, since the waiter watches it (finetimer.go).
func TestWaitPollsAFXDP(t *testing.T) {
	o := fastOptions()
	o.Spin = time.Hour // the message comes whenever the machine lets it
	pr := newPair(t, transportFactory{name: "xdp", new: newXDPWire}, o, loopback.Faults{})
	if pr.a.SpinWindow() == 0 {
		t.Fatal("a blocking board over AF_XDP does not poll its socket")
	}
	waitCompletesWhilePolling(t, pr, func() {
		pr.ba.mu.Lock()
		if !pr.ba.watched() {
			t.Error("a board whose waiter polls its socket is not watched: its fine timer is set for every deadline")
		}
		pr.ba.mu.Unlock()
	})
}

// waitCompletesWhilePolling posts a receive on pr.a, waits for it on
// another goroutine until that waiter polls (then runs whilePolling, if
// not nil), sends the message from pr.b, and checks that the wait
// completed while polling, without a sleep, with the message's bytes.
func waitCompletesWhilePolling(t *testing.T, pr *pair, whilePolling func()) {
	t.Helper()
	st0 := pr.ba.WaitStats() // the connects
	receiveWhile(t, pr, "the waiter to poll", func() bool { return pr.ba.WaitStats().Spinning == 1 }, whilePolling)
	st := pr.ba.WaitStats()
	if st.Polled != st0.Polled+1 || st.Slept != st0.Slept || st.Spinning != 0 {
		t.Fatalf("wait stats %+v: want one wait completed while polling", st)
	}
}

// TestWaitFindsItsMessageAtOnce: a Wait whose message already sits in the
// rings (a reply that came while the waiter sent) completes with the
// message intact, and leaves no poller behind; it is a polled wait unless
// the board's receive loop took the message first (then the request was
// done before the Wait).
func TestWaitFindsItsMessageAtOnce(t *testing.T) {
	o := fastOptions()
	o.Spin = time.Hour
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	for i := range 50 {
		st0, c0 := pr.ba.WaitStats(), pr.a.Counters()
		buf := make([]byte, 8)
		r, err := pr.a.IRecv([][]byte{buf}, uint64(i), ^uint64(0), i)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pr.b.ISend([][]byte{[]byte("8 bytes!")}, pr.btoa, uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		mustWait(t, s, time.Minute)
		st, err := r.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(buf) != "8 bytes!" || st.Match != uint64(i) || st.XferLength != 8 || st.Context != i {
			t.Fatalf("message %d: received %q, status %+v", i, buf, st)
		}
		if _, ok := r.Test(); ok {
			t.Fatalf("message %d: the consumed request completed again", i)
		}
		ws := pr.ba.WaitStats()
		if ws.Polled > st0.Polled+1 || ws.Slept != st0.Slept || ws.Spinning != 0 {
			t.Fatalf("message %d: wait stats %+v (before %+v): want at most one polled wait, none slept, no poller left", i, ws, st0)
		}
		if d := countersSince(c0, pr.a.Counters()); d.Get(LaneRecvs) != 1 {
			t.Fatalf("message %d: %d lane receives, want 1", i, d.Get(LaneRecvs))
		}
	}
}

// TestIdleWaiterSleeps: a waiter whose message does not come polls for its
// budget only, then sleeps: in the kernel on the board's sources itself
// (sleep.go, SleepOnSources), or else on its request while the board's
// receive loop sleeps on the rings' eventfd; the message that comes later
// still wakes it.
func TestIdleWaiterSleeps(t *testing.T) {
	for _, inLoop := range []bool{false, true} {
		t.Run(fmt.Sprintf("inloop=%v", inLoop), func(t *testing.T) {
			if !inLoop && runtime.GOMAXPROCS(0) < 2 {
				t.Skip("with GOMAXPROCS 1 no waiter sleeps on the sources (sleep.go): run with GOMAXPROCS=2 or more")
			}
			o := fastOptions()
			o.Spin = 100 * time.Microsecond
			o.SleepOnSources = !inLoop
			pr := newPair(t, shmFactory, o, loopback.Faults{})
			ctx := testCtx(t, time.Minute)
			buf := make([]byte, 100)
			r, err := pr.a.IRecv([][]byte{buf}, 7, ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			var st0 WaitStats
			var errc chan error
			// A waiter takes the sources only if their receive loop lets
			// go of them within takeGrace (sleep.go); on a loaded machine
			// it may not, and the waiter sleeps on its channel instead, as
			// designed. Such a try is woken and made again (bounded): the
			// request stays posted.
			for try := 0; ; try++ {
				st0 = pr.ba.WaitStats() // the connects, and the tries before
				errc = make(chan error, 1)
				go func() {
					_, err := r.Wait(ctx)
					errc <- err
				}()
				waitUntil(t, "the waiter to give up polling", func() bool {
					st := pr.ba.WaitStats()
					return st.Slept == st0.Slept+1 && st.Spinning == 0
				})
				if inLoop {
					tr := pr.ba.tr.(*shm.Transport)
					sleeps := shmCounter(tr, "shm receiver sleeps")
					waitUntil(t, "the receive loop to sleep", func() bool { return shmCounter(tr, "shm receiver sleeps") > sleeps })
					break
				}
				waitUntil(t, "the waiter to sleep on the sources or its channel", func() bool {
					return pr.ba.WaitStats().Sleeping == 1 || pr.ba.sleep.chanSleepers.Load() > 0
				})
				if pr.ba.WaitStats().Sleeping == 1 {
					break
				}
				if try == 20 {
					t.Fatalf("in %d tries the waiter never took the sources from their loop", try+1)
				}
				pr.a.Wakeup()
				if err := <-errc; !errors.Is(err, ErrWokenUp) {
					t.Fatalf("a waiter asleep on its channel, woken up: %v", err)
				}
			}
			msg := pattern(100, 3)
			s, err := pr.b.ISend([][]byte{msg}, pr.btoa, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			mustWait(t, s, time.Minute)
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, msg) {
				t.Fatal("the message differs")
			}
			st := pr.ba.WaitStats()
			if st.Polled != st0.Polled || st.Slept != st0.Slept+1 || st.Sleeping != 0 {
				t.Fatalf("wait stats %+v: want the one wait to have slept, and nobody asleep now", st)
			}
			if want := st0.Kernel + map[bool]uint64{false: 1, true: 0}[inLoop]; st.Kernel != want {
				t.Fatalf("wait stats %+v: %d waits received asleep on the sources, want %d", st, st.Kernel, want)
			}
		})
	}
}

// TestTestPollsTheRings: Test alone (no Wait) completes a receive whose
// message sits in the rings, and a Wait on a board that may not spin
// sleeps at once.
func TestTestPollsTheRings(t *testing.T) {
	o := fastOptions()
	o.Spin = -1
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	st0 := pr.ba.WaitStats()
	if len(pr.ba.waitSources()) != 0 {
		t.Fatal("a board with Spin < 0 polls in Wait")
	}
	buf := make([]byte, 8)
	r, _ := pr.a.IRecv([][]byte{buf}, 1, ^uint64(0), nil)
	s, _ := pr.b.ISend([][]byte{[]byte("12345678")}, pr.btoa, 1, nil)
	mustWait(t, s, time.Minute)
	deadline := time.Now().Add(time.Minute)
	for {
		if st, ok := r.Test(); ok {
			if st.Code != nil || string(buf) != "12345678" {
				t.Fatalf("status %v, data %q", st.Code, buf)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Test never reported the message")
		}
	}
	if st := pr.ba.WaitStats(); st.Polled != st0.Polled || st.Slept != st0.Slept || st.Polled != 0 || st.Slept != 0 {
		t.Fatalf("wait stats %+v without a Wait", st)
	}
}

// TestSpinOption: GOMX_SPIN sets the budget of boards that leave Spin at
// zero; 0 turns polling off, a bad value is refused with an error naming
// the variable.
func TestSpinOption(t *testing.T) {
	open := func() (*Board, error) {
		port, err := loopback.NewNetwork(loopback.Options{}).Attach(1)
		if err != nil {
			t.Fatal(err)
		}
		return NewBoard(port, fastOptions())
	}
	for _, c := range []struct {
		env  string
		want time.Duration
	}{{"", DefaultSpin}, {"20us", 20 * time.Microsecond}, {"0", -1}, {"2ms", 2 * time.Millisecond}} {
		t.Setenv("GOMX_SPIN", c.env)
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Options().Spin; got != c.want {
			t.Errorf("GOMX_SPIN=%q: Spin %v, want %v", c.env, got, c.want)
		}
		b.Close()
	}
	t.Setenv("GOMX_SPIN", "soon")
	if _, err := open(); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("GOMX_SPIN=soon: %v, want ErrBadOptions", err)
	}
}

// TestSpinGovernorRule drives the poll window's rule with a model of wait
// outcomes (no clock): a wait that slept and whose message came before the
// cap doubles the window (from Spin when it was 0, never past the cap),
// one that came at or past the cap halves it, and no sequence of outcomes
// leaves the window outside [0, cap].
func TestSpinGovernorRule(t *testing.T) {
	const start, limit = 50, 1000
	var g spinGovernor
	for _, c := range []struct {
		window, blocked int64
		want            int64
		grew, shrank    bool
	}{
		{50, 60, 100, true, false},      // just after giving up: grow
		{100, 999, 200, true, false},    // anything before the cap
		{800, 900, 1000, true, false},   // capped
		{1000, 1000, 500, false, true},  // at the cap: the poll was wasted
		{1000, 50000, 500, false, true}, // long idle
		{0, 10, start, true, false},     // from nothing: jump to start
		{1, 1000, 0, false, true},       // halving ends at 0
		{0, 5000, 0, false, false},      // no poll, nothing to shrink
	} {
		w, grew, shrank := g.next(c.window, c.blocked, start, limit)
		if w != c.want || grew != c.grew || shrank != c.shrank {
			t.Errorf("window %d, blocked %d: got %d (grew %v shrank %v), want %d (%v %v)",
				c.window, c.blocked, w, grew, shrank, c.want, c.grew, c.shrank)
		}
	}
	// An endpoint whose peer always answers 300 after the wait starts:
	// after at most a few sleeps the window covers it and stays.
	w, sleeps := int64(start), 0
	for range 100 {
		if 300 <= w {
			continue // caught while polling: the window stays
		}
		sleeps++
		w, _, _ = g.next(w, 300, start, limit)
	}
	if sleeps > 3 || w < 300 || w > limit {
		t.Errorf("a steady 300 reply: %d sleeps, window %d", sleeps, w)
	}
	// An idle endpoint (replies past the cap) stops polling.
	for range 64 {
		w, _, _ = g.next(w, 10*limit, start, limit)
	}
	if w != 0 {
		t.Errorf("idle endpoint: window %d, want 0", w)
	}
	// Any sequence keeps the window within bounds.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		w, _, _ = g.next(w, rng.Int64N(3*limit), start, limit)
		if w < 0 || w > limit {
			t.Fatalf("window %d outside [0, %d]", w, limit)
		}
	}
}

// TestSpinWindowTracksWaits: on a shared-memory board, a wait that polled
// its window in vain and slept, then got its message within SpinMax,
// doubles its endpoint's window; a wait that polled the whole cap in vain
// halves it. Both are counted in WaitStats.
func TestSpinWindowTracksWaits(t *testing.T) {
	for _, c := range []struct {
		name         string
		spin, max    time.Duration
		want         time.Duration
		grew, shrank uint64
	}{
		{"grow", 20 * time.Microsecond, time.Hour, 40 * time.Microsecond, 1, 0},
		{"shrink", 100 * time.Microsecond, 100 * time.Microsecond, 50 * time.Microsecond, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := fastOptions()
			o.Spin, o.SpinMax = c.spin, c.max
			pr := newPair(t, shmFactory, o, loopback.Faults{})
			// The connects' waits have tuned it already: start over.
			pr.a.spin.window.Store(int64(c.spin))
			st0 := pr.ba.WaitStats()
			// The message comes only once the waiter gave up polling.
			receiveWhile(t, pr, "the waiter to give up polling", func() bool {
				st := pr.ba.WaitStats()
				return st.Slept == st0.Slept+1 && st.Spinning == 0
			}, nil)
			st := pr.ba.WaitStats()
			if w := pr.a.SpinWindow(); w != c.want || st.Grew-st0.Grew != c.grew || st.Shrank-st0.Shrank != c.shrank {
				t.Fatalf("window %v (want %v), grew %d shrank %d (want %d, %d)", w, c.want,
					st.Grew-st0.Grew, st.Shrank-st0.Shrank, c.grew, c.shrank)
			}
		})
	}
}

// TestSpinMaxOption: GOMX_SPIN_MAX caps boards that leave SpinMax at
// zero; a cap below Spin or a bad value is refused with an error naming
// the fix.
func TestSpinMaxOption(t *testing.T) {
	open := func(o BoardOptions) (*Board, error) {
		port, err := loopback.NewNetwork(loopback.Options{}).Attach(1)
		if err != nil {
			t.Fatal(err)
		}
		return NewBoard(port, o)
	}
	t.Setenv("GOMX_SPIN", "")
	t.Setenv("GOMX_SPIN_MAX", "300us")
	b, err := open(fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Options().SpinMax; got != 300*time.Microsecond {
		t.Errorf("GOMX_SPIN_MAX=300us: SpinMax %v", got)
	}
	b.Close()
	t.Setenv("GOMX_SPIN_MAX", "")
	b, err = open(fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Options().SpinMax; got != DefaultSpinMax {
		t.Errorf("default SpinMax %v, want %v", got, DefaultSpinMax)
	}
	b.Close()
	o := fastOptions()
	o.Spin, o.SpinMax = time.Millisecond, time.Microsecond
	if _, err := open(o); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "raise SpinMax") {
		t.Fatalf("SpinMax below Spin: %v", err)
	}
	for _, v := range []string{"soon", "-1ms", "0"} {
		t.Setenv("GOMX_SPIN_MAX", v)
		if _, err := open(fastOptions()); !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "GOMX_SPIN_MAX") {
			t.Fatalf("GOMX_SPIN_MAX=%s: %v", v, err)
		}
	}
}

// TestSpinRoundTripIsFree: an 8-byte round trip between two busy-polling
// endpoints of shared-memory boards allocates nothing and makes no system
// call on the message path: no futex wake-up or sleep of the rings, no
// sched_yield, while the progress goroutines stay out of the rings as they
// do while waiters poll. Each message is in its ring when its Wait starts,
// so the waiter finds it on its first look.
func TestSpinRoundTripIsFree(t *testing.T) {
	o := fastOptions()
	o.BusyPoll = true
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	msg, bufA, bufB := []byte("8 bytes!"), make([]byte, 8), make([]byte, 8)
	round := func() {
		ra, err := pr.a.IRecv([][]byte{bufA}, 1, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := pr.b.IRecv([][]byte{bufB}, 1, ^uint64(0), nil)
		if err != nil {
			t.Fatal(err)
		}
		sa, err := pr.a.ISend([][]byte{msg}, pr.atob, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rb.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		sb, err := pr.b.ISend([][]byte{bufB}, pr.btoa, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*Request{ra, sa, sb} {
			if _, err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 100 {
		round()
	}
	if string(bufA) != string(msg) {
		t.Fatalf("echo %q", bufA)
	}
	if allocs := testing.AllocsPerRun(1000, round); allocs != 0 {
		t.Errorf("%v allocations per round trip", allocs)
	}
	tra, trb := pr.ba.tr.(*shm.Transport), pr.bb.tr.(*shm.Transport)
	type snap struct{ loops, yields, shm uint64 }
	take := func() snap {
		var s snap
		for _, b := range []*Board{pr.ba, pr.bb} {
			st := b.WaitStats()
			s.loops += st.LoopRecvs
			s.yields += st.Yields
		}
		for _, tr := range []*shm.Transport{tra, trb} {
			for _, n := range []string{"shm receiver sleeps", "shm receiver wake-ups sent", "shm receiver yields"} {
				s.shm += shmCounter(tr, n)
			}
		}
		return s
	}
	// An application that keeps polling keeps the progress goroutines
	// out of the rings (poll.go); between this test's Waits nobody polls
	// for a moment, so stand in for one for the whole run.
	for _, b := range []*Board{pr.ba, pr.bb} {
		b.src.pollIn.Add(1)
		defer b.src.pollLeft.Add(1)
	}
	waitUntil(t, "the progress goroutines to leave the rings", func() bool {
		return pr.ba.loopRecvs.Load() == pr.ba.loopOut.Load() && pr.bb.loopRecvs.Load() == pr.bb.loopOut.Load()
	})
	// A waiter that the machine takes off its CPU mid-look finds, once
	// back, that it has polled for over yieldAfter and yields, as it
	// should: the peer may be off its CPU too. So a run of round trips
	// during which the machine descheduled a waiter (other processes
	// busy on every CPU) measures the machine, not the message path; the
	// test asks for one run in a few that made no system call at all.
	const rounds, runs = 2000, 5
	for run := 1; ; run++ {
		s0 := take()
		for range rounds {
			round()
		}
		s1 := take()
		if s1.loops != s0.loops {
			t.Fatalf("the progress goroutines received %d times while waiters polled", s1.loops-s0.loops)
		}
		if s1.yields == s0.yields && s1.shm == s0.shm {
			return
		}
		msg := fmt.Sprintf("%d round trips made system calls: %d sched_yield by waiters, %d futex calls and yields by the rings",
			rounds, s1.yields-s0.yields, s1.shm-s0.shm)
		if run == runs {
			t.Fatalf("in each of %d runs; the last: %s", runs, msg)
		}
		t.Logf("run %d: %s", run, msg)
	}
}

// TestWaitStepsAsideForEngine: a waiter whose message is being copied by
// the board's engine does not keep the processor from it. While the copy
// is held up, an adaptive waiter with a poll window of seconds stops
// polling and sleeps (a busy-polling one keeps polling, handing its
// processor over between looks); once the engine runs, the message
// arrives byte-exact. Then, with one Go processor (what a rank bound to
// one CPU gets) and the emulated engine's channels as goroutines, where a
// spinning waiter would hold the only P the engine can run on, messages
// keep arriving through the engine.
func TestWaitStepsAsideForEngine(t *testing.T) {
	for _, busy := range []bool{false, true} {
		name := "adaptive"
		if busy {
			name = "busypoll"
		}
		t.Run(name, func(t *testing.T) {
			g, held := newHeldEngineRig(t, func(o *BoardOptions) {
				o.Spin, o.SpinMax, o.BusyPoll = 5*time.Second, 5*time.Second, busy
			})
			msg, err := g.a.AllocShared(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			defer g.a.FreeShared(msg)
			copy(msg, pattern(len(msg), 7))
			exchange := func(i int, during func()) {
				t.Helper()
				buf := make([]byte, len(msg))
				r, err := g.b.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				s, err := g.a.ISend([][]byte{msg}, g.atob, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan error, 1)
				go func() { _, err := r.Wait(testCtx(t, time.Minute)); got <- err }()
				during()
				if err := <-got; err != nil || !bytes.Equal(buf, msg) {
					t.Fatalf("message %d: %v, or wrong bytes", i, err)
				}
				mustWait(t, s, time.Minute)
			}
			st0 := g.bb.WaitStats()
			exchange(0, func() {
				<-held.entered
				if busy {
					waitUntil(t, "the busy-polling waiter to poll", func() bool { return g.bb.WaitStats().Spinning == 1 })
				} else {
					waitUntil(t, "the waiter to step aside", func() bool {
						st := g.bb.WaitStats()
						return st.Engine > st0.Engine && st.Spinning == 0
					})
				}
				held.free()
			})
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			for i := 1; i <= 3; i++ {
				exchange(i, func() {})
			}
			if c := g.b.Counters(); c.Get(RecvEngine) != 4 || c.Get(EngineFallbacks) != 0 {
				t.Fatalf("engine copies %d, fallbacks %d; want 4, 0", c.Get(RecvEngine), c.Get(EngineFallbacks))
			}
		})
	}
}

// TestWaitSpinsBesideUnrelatedEngineCopy: stepping aside for the engine is
// per request. While the engine's copy of one message is held, a waiter on
// another request of the same board keeps polling the rings and takes its
// small message itself (a polled wait, no engine wait); a waiter on the
// held request steps aside; once the engine runs, the held message arrives
// byte-exact.
func TestWaitSpinsBesideUnrelatedEngineCopy(t *testing.T) {
	g, held := newHeldEngineRig(t, func(o *BoardOptions) {
		o.Spin, o.SpinMax = 5*time.Second, 5*time.Second
	})
	ctx := testCtx(t, time.Minute)
	big, bigBuf, rBig, sBig := g.sendHeld(t, held, 1, 5)
	st0 := g.bb.WaitStats()
	small, smallBuf := pattern(100, 6), make([]byte, 100)
	rSmall, err := g.b.IRecv([][]byte{smallBuf}, 2, ^uint64(0), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := rSmall.Wait(ctx); got <- err }()
	waitUntil(t, "the waiter of the unrelated request to poll while the engine copies", func() bool {
		return g.bb.WaitStats().Spinning == 1
	})
	sSmall, err := g.a.ISend([][]byte{small}, g.atob, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || !bytes.Equal(smallBuf, small) {
		t.Fatalf("small message: %v, or wrong bytes", err)
	}
	mustWait(t, sSmall, time.Minute)
	if st := g.bb.WaitStats(); st.Engine != st0.Engine || st.Polled <= st0.Polled {
		t.Fatalf("the unrelated wait: %d engine waits, %d polled (were %d, %d); want it polled, not stepping aside", st.Engine, st.Polled, st0.Engine, st0.Polled)
	}
	if _, done := rBig.Test(); done {
		t.Fatal("the held receive completed before its copy ran")
	}
	go func() { _, err := rBig.Wait(ctx); got <- err }()
	waitUntil(t, "the waiter of the held request to step aside", func() bool {
		st := g.bb.WaitStats()
		return st.Engine > st0.Engine && st.Spinning == 0
	})
	held.free()
	if err := <-got; err != nil || !bytes.Equal(bigBuf, big) {
		t.Fatalf("held message: %v, or wrong bytes", err)
	}
	mustWait(t, sBig, time.Minute)
}
