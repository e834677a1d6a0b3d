package mx

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
)

// cpus returns a CPU set of the CPUs listed.
func cpus(list ...int) unix.CPUSet {
	var s unix.CPUSet
	for _, c := range list {
		s.Set(c)
	}
	return s
}

// TestOversubCount: the processes are counted once each (a process with
// two boards, and this process's own boards, are one), the CPUs are the
// union of their masks, and the node is oversubscribed only when the
// processes outnumber them: ranks bound one per core are not, ranks bound
// round robin to two CPUs are, and so are unbound ones on two CPUs.
func TestOversubCount(t *testing.T) {
	const self = 100
	cases := []struct {
		name  string
		masks map[int]unix.CPUSet
		pids  []int
		procs int
		cpus  int
		over  bool
	}{
		{"two ranks, a core each", map[int]unix.CPUSet{self: cpus(0), 101: cpus(1)}, []int{101}, 2, 2, false},
		{"eight ranks on a core each", map[int]unix.CPUSet{self: cpus(0), 101: cpus(1), 102: cpus(2), 103: cpus(3), 104: cpus(4), 105: cpus(5), 106: cpus(6), 107: cpus(7)},
			[]int{101, 102, 103, 104, 105, 106, 107}, 8, 8, false},
		{"four ranks bound round robin to two CPUs", map[int]unix.CPUSet{self: cpus(0), 101: cpus(1), 102: cpus(0), 103: cpus(1)},
			[]int{101, 102, 103}, 4, 2, true},
		{"four unbound ranks on two CPUs", map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1), 103: cpus(0, 1)},
			[]int{101, 102, 103}, 4, 2, true},
		{"a process with two boards, and our own", map[int]unix.CPUSet{self: cpus(0), 101: cpus(1), 102: cpus(1)},
			[]int{101, self, 101, 102}, 3, 2, true},
		{"a peer gone", map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1)}, []int{101, 102}, 2, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o oversubState
			reads, gone := 0, 0
			for _, pid := range c.pids {
				if _, ok := c.masks[pid]; !ok {
					gone++
				}
			}
			getaff := func(pid int, set *unix.CPUSet) error {
				reads++
				m, ok := c.masks[pid]
				if !ok {
					return syscall.ESRCH
				}
				*set = m
				return nil
			}
			for round := range 2 {
				reads = 0
				procs, n, ok := o.count(self, c.pids, getaff)
				if !ok || procs != c.procs || n != c.cpus || oversubscribed(procs, n) != c.over {
					t.Fatalf("round %d: %d processes on %d CPUs (ok %v), oversubscribed %v: want %d on %d, %v",
						round, procs, n, ok, oversubscribed(procs, n), c.procs, c.cpus, c.over)
				}
				if round == 1 && reads != 1+gone {
					// Our own mask, and those of the processes the
					// first count found gone: the others are known.
					t.Fatalf("second count read %d masks", reads)
				}
			}
			if len(o.aff) != c.procs-1 {
				t.Fatalf("%d processes remembered, want %d", len(o.aff), c.procs-1)
			}
			// A peer that is gone from the rings is forgotten.
			if _, _, ok := o.count(self, nil, getaff); !ok || len(o.aff) != 0 {
				t.Fatalf("%d processes remembered after they left", len(o.aff))
			}
		})
	}
}

// TestOversubIgnoresSleepers: what the peers' doorbells showed at two looks
// decides how much each process counts. One asleep at both looks that
// slept no more in between, or that slept longer than the interval,
// counts for nothing and its CPUs are not counted; one that polled, or
// slept some of the interval, counts whole; many that each slept most of
// it count together for their shares; one not seen before counts whole.
func TestOversubIgnoresSleepers(t *testing.T) {
	const self = 100
	const span = 50 * time.Millisecond
	type door struct {
		asleep bool
		slept  time.Duration
	}
	cases := []struct {
		name         string
		masks        map[int]unix.CPUSet // self's and the peers'
		first, then  map[int]door        // each peer's doorbell at the two looks
		procs, ncpus int
		over         bool
	}{
		{"a pair and two idle ranks asleep throughout",
			map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1), 103: cpus(0, 1)},
			map[int]door{101: {false, 0}, 102: {true, 7 * span}, 103: {true, 0}},
			map[int]door{101: {false, 0}, 102: {true, 7 * span}, 103: {true, 0}}, 2, 2, false},
		{"an idle rank that woke between the looks for a moment",
			map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1)},
			map[int]door{101: {false, 0}, 102: {true, 0}},
			map[int]door{101: {false, 0}, 102: {true, span - span/100}}, 2, 2, false},
		{"a rank that slept half the time counts whole",
			map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1)},
			map[int]door{101: {false, 0}, 102: {false, 0}},
			map[int]door{101: {false, 0}, 102: {false, span / 2}}, 3, 2, true},
		{"asleep now, but awake at the last look",
			map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1)},
			map[int]door{101: {false, 0}, 102: {false, 0}},
			map[int]door{101: {false, 0}, 102: {true, 0}}, 3, 2, true},
		{"ten ranks each awake a tenth of the time",
			map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1), 103: cpus(0, 1), 104: cpus(0, 1), 105: cpus(0, 1),
				106: cpus(0, 1), 107: cpus(0, 1), 108: cpus(0, 1), 109: cpus(0, 1), 110: cpus(0, 1)},
			map[int]door{101: {}, 102: {}, 103: {}, 104: {}, 105: {}, 106: {}, 107: {}, 108: {}, 109: {}, 110: {}},
			map[int]door{101: {false, span * 9 / 10}, 102: {false, span * 9 / 10}, 103: {false, span * 9 / 10}, 104: {false, span * 9 / 10},
				105: {false, span * 9 / 10}, 106: {false, span * 9 / 10}, 107: {false, span * 9 / 10}, 108: {false, span * 9 / 10},
				109: {false, span * 9 / 10}, 110: {false, span * 9 / 10}}, 2, 2, false},
		{"sixteen ranks each awake a tenth of the time",
			func() map[int]unix.CPUSet {
				m := map[int]unix.CPUSet{self: cpus(0, 1)}
				for p := 101; p <= 116; p++ {
					m[p] = cpus(0, 1)
				}
				return m
			}(),
			func() map[int]door {
				m := map[int]door{}
				for p := 101; p <= 116; p++ {
					m[p] = door{}
				}
				return m
			}(),
			func() map[int]door {
				m := map[int]door{}
				for p := 101; p <= 116; p++ {
					m[p] = door{false, span * 9 / 10}
				}
				return m
			}(), 3, 2, true},
		{"two awake on one CPU, a sleeper on another",
			map[int]unix.CPUSet{self: cpus(0), 101: cpus(0), 102: cpus(1)},
			map[int]door{101: {false, 0}, 102: {true, 0}},
			map[int]door{101: {false, 0}, 102: {true, 0}}, 2, 1, true},
		{"a peer first seen at the second look",
			map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1)},
			map[int]door{101: {false, 0}},
			map[int]door{101: {false, 0}, 102: {true, 0}}, 3, 2, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getaff := func(pid int, set *unix.CPUSet) error {
				m, ok := c.masks[pid]
				if !ok {
					return syscall.ESRCH
				}
				*set = m
				return nil
			}
			sleeps := func(doors map[int]door) []shm.PeerSleep {
				var s []shm.PeerSleep
				for pid, d := range doors {
					// A board per process, named after it.
					s = append(s, shm.PeerSleep{Peer: transport.NICID(pid), Pid: pid, Asleep: d.asleep, Slept: d.slept})
				}
				return s
			}
			var pids []int
			for pid := range c.masks {
				if pid != self {
					pids = append(pids, pid)
				}
			}
			var o oversubState
			o.share(int64(time.Second), sleeps(c.first))
			if _, _, ok := o.count(self, pids, getaff); !ok {
				t.Fatal("own mask not read")
			}
			o.share(int64(time.Second+span), sleeps(c.then))
			procs, n, ok := o.count(self, pids, getaff)
			if !ok || procs != c.procs || n != c.ncpus || oversubscribed(procs, n) != c.over {
				t.Fatalf("%d processes on %d CPUs (ok %v), oversubscribed %v: want %d on %d, %v",
					procs, n, ok, oversubscribed(procs, n), c.procs, c.ncpus, c.over)
			}
		})
	}
	// A rank that fell asleep just after the last look: its doorbell
	// shows when that sleep began (Since), so it counts for the hundredth
	// of the interval it was awake, where without it, it counts whole
	// once more and the next look comes doorEvery later (fell).
	t.Run("a rank that fell asleep after the last look", func(t *testing.T) {
		masks := map[int]unix.CPUSet{self: cpus(0, 1), 101: cpus(0, 1), 102: cpus(0, 1)}
		getaff := func(pid int, set *unix.CPUSet) error { *set = masks[pid]; return nil }
		pids := []int{101, 102}
		first := int64(time.Second)
		for _, known := range []bool{true, false} {
			var o oversubState
			o.share(first, []shm.PeerSleep{{Peer: 101, Pid: 101}, {Peer: 102, Pid: 102}})
			o.count(self, pids, getaff)
			fell := shm.PeerSleep{Peer: 102, Pid: 102, Asleep: true}
			if known {
				fell.Since = o.mono + time.Duration(first) + span/100
			}
			o.share(first+int64(span), []shm.PeerSleep{{Peer: 101, Pid: 101}, fell})
			procs, n, _ := o.count(self, pids, getaff)
			if known && (procs != 2 || oversubscribed(procs, n)) {
				t.Fatalf("%d processes on %d CPUs: want 2 (self and the one awake), the sleeper out", procs, n)
			}
			if !known && (procs != 3 || !o.fell) {
				t.Fatalf("%d processes on %d CPUs, next look at doorEvery %v: want 3, true (when it fell asleep is not known)", procs, n, o.fell)
			}
		}
	})
	// Looks a stretched tick apart (idleTickMax): a peer that woke a
	// millisecond ago after a second asleep counts whole, as it would
	// over looks a tick apart, not for the thousandth of the interval
	// it was awake (the rank took itself for alone on its CPU); one
	// asleep now counts for nothing. The next look measures shares.
	t.Run("a peer that woke after a stretched tick", func(t *testing.T) {
		masks := map[int]unix.CPUSet{self: cpus(0), 101: cpus(0), 102: cpus(0)}
		getaff := func(pid int, set *unix.CPUSet) error { *set = masks[pid]; return nil }
		pids := []int{101, 102}
		var o oversubState
		o.share(int64(time.Second), []shm.PeerSleep{{Peer: 101, Pid: 101, Asleep: true}, {Peer: 102, Pid: 102, Asleep: true}})
		o.count(self, pids, getaff)
		woke := int64(time.Second + idleTickMax + time.Millisecond)
		o.share(woke, []shm.PeerSleep{{Peer: 101, Pid: 101, Slept: idleTickMax}, {Peer: 102, Pid: 102, Asleep: true}})
		if procs, n, _ := o.count(self, pids, getaff); procs != 2 || n != 1 || !oversubscribed(procs, n) {
			t.Fatalf("%d processes on %d CPUs: want 2 on 1 (self and the peer awake now)", procs, n)
		}
		o.share(woke+int64(span), []shm.PeerSleep{{Peer: 101, Pid: 101, Asleep: true, Slept: idleTickMax + span*9/10},
			{Peer: 102, Pid: 102, Asleep: true}})
		if procs, n, _ := o.count(self, pids, getaff); procs != 1 || n != 1 || oversubscribed(procs, n) {
			t.Fatalf("%d processes on %d CPUs a tick later: want 1 on 1 (the peer slept nine tenths of the tick)", procs, n)
		}
	})
}

// TestOversubCountsAwakeProcesses: a board sharing rings with three other
// processes counts the one that busy-polls and the one that computes
// outside mx, whose receive loop sleeps on its rings, and not the one
// blocked waiting for a message, from what their doorbells show, however
// many CPUs the host has. The computing one counts whole over looks
// between which its loop slept.
func TestOversubCountsAwakeProcesses(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	dir := shmDir(t)
	ctx := testCtx(t, 2*time.Minute)
	waiting := startShmChild(t, ctx, dir+" 1").Process.Pid
	startShmChild(t, ctx, dir+" 2 busy")
	computing := startShmChild(t, ctx, dir+" 3 compute").Process.Pid
	tr, err := shm.Open(shm.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBoard(tr, shmTestOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, board := range []int{1, 2, 3} {
		addr, err := e.Connect(ctx, shm.NICBase|transport.NICID(board), 0, testKey)
		if err != nil {
			t.Fatal(err)
		}
		echoSizes(t, ctx, e, addr, []int{8})
	}
	if pids := tr.PeerPids(nil); len(pids) != 3 {
		t.Fatalf("rings from %v, want the three children", pids)
	}
	// The computing child's doorbell as the board's counts go (under
	// its lock, which they hold): its loop asleep on its rings and no
	// waiter blocked at one look and at another two counts later. Its
	// loop slept most of that time (it wakes at its ticks): none of it
	// was blocked in a wait.
	door := func() (shm.PeerSleep, bool) {
		for _, s := range tr.PeerSleeps(nil) {
			if s.Pid == computing {
				return s, true
			}
		}
		return shm.PeerSleep{}, false
	}
	var firstLook uint32
	have := false
	waitUntil(t, "two counts over the computing child asleep on its rings", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		d, ok := door()
		if !ok || !d.Sleeping || d.Asleep {
			have = false
			return false
		}
		if !have {
			firstLook, have = b.oversub.looks, true
			return false
		}
		return b.oversub.looks >= firstLook+2
	})
	b.mu.Lock()
	share, waitShare := b.oversub.shares[computing], b.oversub.shares[waiting]
	b.mu.Unlock()
	if share < awakeWhole {
		t.Fatalf("the computing child counts for %.2f of a process, want whole", share)
	}
	// Itself, the busy child and the computing one, once the waiting one
	// has slept through a look.
	waitUntil(t, "the waiting child to be left out", func() bool {
		b.mu.Lock()
		waitShare = b.oversub.shares[waiting]
		b.mu.Unlock()
		_, procs, _ := b.Oversubscribed()
		return waitShare == 0 && procs == 3
	})
}

// TestYieldPolicyEnv: GOMX_YIELD sets a policy left at auto, a wrong one
// is refused naming the choices, and an explicit option wins.
func TestYieldPolicyEnv(t *testing.T) {
	for _, c := range []struct {
		env  string
		opt  YieldPolicy
		want YieldPolicy
		bad  bool
	}{
		{"", YieldAuto, YieldAuto, false},
		{"always", YieldAuto, YieldAlways, false},
		{"never", YieldAuto, YieldNever, false},
		{"auto", YieldAuto, YieldAuto, false},
		{"always", YieldNever, YieldNever, false},
		{"sometimes", YieldAuto, 0, true},
	} {
		t.Setenv("GOMX_YIELD", c.env)
		o := BoardOptions{Yield: c.opt}
		err := o.yieldEnv()
		if c.bad {
			if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), "GOMX_YIELD") || !strings.Contains(err.Error(), "always or never") {
				t.Fatalf("GOMX_YIELD=%q: %v, want a bad-options error naming the choices", c.env, err)
			}
			continue
		}
		if err != nil || o.Yield != c.want {
			t.Fatalf("GOMX_YIELD=%q over %v: %v, %v; want %v", c.env, c.opt, o.Yield, err, c.want)
		}
	}
	t.Setenv("GOMX_YIELD", "")
	if o := (BoardOptions{Yield: 7}); !errors.Is(o.yieldEnv(), ErrBadOptions) {
		t.Fatal("Yield 7 taken")
	}
}

// TestYieldingWaiterYields: a waiter on a board whose waiters yield
// gives its CPU away from its first empty looks and, its message coming
// while it does, completes it by polling: it neither spins a window first
// nor sleeps.
func TestYieldingWaiterYields(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.Yield = YieldAlways
	o.SpinMax = time.Hour // the message comes whenever the machine lets it
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	if y, _, _ := pr.ba.Oversubscribed(); !y {
		t.Fatal("YieldAlways: the board's waiters do not yield")
	}
	pr.a.spin.window.Store(int64(2 * pr.ba.opts.Spin)) // its messages came soon
	if w := pr.a.SpinWindow(); w != o.SpinMax {
		t.Fatalf("SpinWindow %v: a yielding waiter polls for SpinMax, %v", w, o.SpinMax)
	}
	st0 := pr.ba.WaitStats() // the connects
	// Spin's 5 ms window at first would make no system call; this waiter
	// yields at once, many times over before the message is sent.
	const yields = 200
	receiveWhile(t, pr, "the waiter to yield", func() bool { return pr.ba.WaitStats().Yields >= st0.Yields+yields }, nil)
	st := pr.ba.WaitStats()
	if st.Polled != st0.Polled+1 || st.Slept != st0.Slept || st.Yields < st0.Yields+yields {
		t.Fatalf("wait stats %+v (before %+v): want one wait completed while yielding", st, st0)
	}
}

// TestStretchedWaiterYieldsBeforeSleeping: on an oversubscribed board
// whose SpinMax is stretched (stretchSpin), a waiter whose messages came
// soon polls, yielding, for SpinMax before it sleeps, although its
// budget (SpinMax) is below the stretched cap: the cap bounds how far a
// window may grow, not the budget under which a waiter sleeps at once.
func TestStretchedWaiterYieldsBeforeSleeping(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.Yield = YieldAlways // the board's count leaves spinMax as stored
	o.SpinMax = time.Hour // the message comes whenever the machine lets it
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	pr.ba.oversub.spinMax.Store(int64(8 * o.SpinMax)) // 8 processes a CPU
	if c := pr.ba.spinCap(); c != 8*o.SpinMax {
		t.Fatalf("spinCap %v, want the stored %v", c, 8*o.SpinMax)
	}
	pr.a.spin.window.Store(int64(2 * pr.ba.opts.Spin)) // its messages came soon
	if w := pr.a.SpinWindow(); w != o.SpinMax {
		t.Fatalf("SpinWindow %v: a yielding waiter polls for SpinMax, %v", w, o.SpinMax)
	}
	st0 := pr.ba.WaitStats()
	receiveWhile(t, pr, "the waiter to yield or sleep", func() bool {
		st := pr.ba.WaitStats()
		return st.Yields > st0.Yields || st.Slept > st0.Slept
	}, func() {
		if st := pr.ba.WaitStats(); st.Slept != st0.Slept || st.Yields == st0.Yields {
			t.Fatalf("wait stats %+v (before %+v): want yields and no sleep before the message", st, st0)
		}
	})
}

// TestYieldingWaiterSleepsAfterSpinMax: a yielding waiter whose message
// does not come sleeps once SpinMax is spent, so an idle rank of an
// oversubscribed job does not keep a CPU busy; the message still
// completes it.
func TestYieldingWaiterSleepsAfterSpinMax(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.Yield = YieldAlways
	o.Spin = time.Microsecond
	o.SpinMax = time.Millisecond
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	pr.a.spin.window.Store(int64(2 * o.Spin)) // its messages came soon: it yields for SpinMax
	st0 := pr.ba.WaitStats()
	receiveWhile(t, pr, "the waiter to sleep", func() bool { return pr.ba.WaitStats().Slept == st0.Slept+1 }, func() {
		if st := pr.ba.WaitStats(); st.Yields == st0.Yields {
			t.Fatalf("wait stats %+v: slept without yielding first", st)
		}
	})
}

// TestBusyPollerKeepsItsClockStride: a busy-polling waiter whose message
// is late yields between looks, as a waiter yielding for a late reply
// does, but has no budget to overrun: it reads the clock (and runs the
// due timers) once every busyClockEvery passes, not after every yield.
// Counted in readings and yields.
func TestBusyPollerKeepsItsClockStride(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.BusyPoll = true
	o.Yield = YieldNever
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	const yields = 2000
	st0, r0 := pr.ba.WaitStats(), pr.ba.waitReadings.Load()
	receiveWhile(t, pr, "the busy poller to yield", func() bool { return pr.ba.WaitStats().Yields >= st0.Yields+yields }, nil)
	y, r := pr.ba.WaitStats().Yields-st0.Yields, pr.ba.waitReadings.Load()-r0
	if r == 0 || r > y/4 {
		t.Fatalf("%d clock readings in %d yields: want one every %d passes or so, not one a yield", r, y, busyClockEvery())
	}
}

// TestYieldingWaiterOfLateMessagesSleeps: on a board whose waiters yield,
// an endpoint whose messages came later than SpinMax (its window below
// Spin, as an idle rank's after the pair's run) does not yield for
// SpinMax: its wait looks and sleeps without a single yield, each of
// which is a context switch on a node the job's ranks share and keeps the
// runtime's sysmon polling. A wait that slept and got its message within
// SpinMax brings the window back to Spin, and the next wait yields for
// SpinMax again. Counted in waits and yields.
func TestYieldingWaiterOfLateMessagesSleeps(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.Yield = YieldAlways
	o.SpinMax = time.Hour // every message comes within it
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	spin := pr.ba.opts.Spin
	pr.a.spin.window.Store(int64(spin / 2)) // as after a message later than SpinMax
	if w := pr.a.SpinWindow(); w >= o.SpinMax {
		t.Fatalf("SpinWindow %v with the window at %v: want it unlifted", w, time.Duration(pr.a.spin.window.Load()))
	}
	st0 := pr.ba.WaitStats()
	receiveWhile(t, pr, "the waiter to sleep", func() bool { return pr.ba.WaitStats().Slept == st0.Slept+1 }, func() {
		if st := pr.ba.WaitStats(); st.Yields != st0.Yields {
			t.Errorf("%d yields before the waiter slept, want none", st.Yields-st0.Yields)
		}
	})
	if w := time.Duration(pr.a.spin.window.Load()); w < spin {
		t.Fatalf("window %v after a wait whose message came within SpinMax: want Spin (%v) or more", w, spin)
	}
	if w := pr.a.SpinWindow(); w != o.SpinMax {
		t.Fatalf("SpinWindow %v: want SpinMax (%v) once the window is back at Spin", w, o.SpinMax)
	}
}

// TestStretchSpin: on an oversubscribed node a yielding waiter polls for
// SpinMax times the processes each CPU has, rounded up, up to 16 ms
// (maxStretchedSpin); elsewhere for SpinMax.
func TestStretchSpin(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		procs, cpus int
		want        time.Duration
	}{
		{1, 2, ms}, {2, 2, ms}, {0, 0, ms}, {3, 2, 2 * ms}, {4, 2, 2 * ms},
		{16, 2, 8 * ms}, {17, 2, 9 * ms}, {32, 2, 16 * ms}, {64, 64, ms},
		// bounded by maxStretchedSpin: 16 ms, not 64 or 512
		{128, 2, 16 * ms}, {1024, 2, 16 * ms},
	} {
		if got := stretchSpin(ms, c.procs, c.cpus); got != c.want {
			t.Errorf("stretchSpin(1ms, %d processes, %d CPUs) = %v, want %v", c.procs, c.cpus, got, c.want)
		}
	}
	// A SpinMax above the bound is the user's own: the stretch does not
	// lower it, nor grow it.
	if got := stretchSpin(time.Hour, 128, 2); got != time.Hour {
		t.Errorf("stretchSpin(1h, 128 processes, 2 CPUs) = %v, want 1h", got)
	}
}

// TestSpinWindowStretchesWithProcessesPerCPU: on a board that counted 16
// processes on 2 CPUs, a yielding waiter first polls for SpinMax, as
// anywhere (an idle rank's first wait costs no more); waits that slept and
// got their message within 8 times SpinMax grow the window up to that, and
// one whose message came later halves it. Once the count finds a CPU per
// process again, a window grown so is capped at SpinMax.
func TestSpinWindowStretchesWithProcessesPerCPU(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.Spin = 50 * time.Microsecond
	o.SpinMax = time.Millisecond
	// YieldAlways: the board's own count (countOversub, every
	// oversubscribed tick under YieldAuto) leaves what count stores alone.
	o.Yield = YieldAlways
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	b := pr.ba
	count := func(procs, cpus int) { // as countOversub stores a count
		b.oversub.yield.Store(oversubscribed(procs, cpus))
		b.oversub.spinMax.Store(int64(stretchSpin(b.opts.SpinMax, procs, cpus)))
	}
	count(16, 2)
	pr.a.spin.window.Store(int64(o.Spin))
	if w := pr.a.SpinWindow(); w != o.SpinMax {
		t.Fatalf("SpinWindow %v at the start with 16 processes on 2 CPUs, want SpinMax (%v)", w, o.SpinMax)
	}
	for range 20 { // each a wait that slept, its message 3 ms after it began
		pr.a.spin.observe(b, int64(3*o.SpinMax))
	}
	if w := pr.a.SpinWindow(); w != 8*o.SpinMax {
		t.Fatalf("SpinWindow %v after waits whose messages came 3 ms late, with 16 processes on 2 CPUs: want %v", w, 8*o.SpinMax)
	}
	pr.a.spin.observe(b, int64(9*o.SpinMax))
	if w := pr.a.SpinWindow(); w != 4*o.SpinMax {
		t.Fatalf("SpinWindow %v after a message past 8 SpinMax: want it halved, %v", w, 4*o.SpinMax)
	}
	count(2, 2)
	if w := pr.a.SpinWindow(); w != o.SpinMax {
		t.Fatalf("SpinWindow %v with a CPU per process, want SpinMax (%v)", w, o.SpinMax)
	}
}

// TestOversubAutoInOneProcess: boards of one process are one process,
// however many there are: auto never finds them oversubscribed.
func TestOversubAutoInOneProcess(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	pr := newPair(t, shmFactory, fastOptions(), loopback.Faults{})
	pingOnce(t, testCtx(t, time.Minute), pr.a, pr.atob, pr.b, 1, ^uint64(0), [][]byte{[]byte("x")}, [][]byte{make([]byte, 1)})
	pr.ba.mu.Lock()
	pr.ba.countOversub(pr.ba.clock() + int64(time.Hour))
	pr.ba.mu.Unlock()
	if y, procs, n := pr.ba.Oversubscribed(); y || procs != 1 || n < 1 {
		t.Fatalf("Oversubscribed: %v, %d processes, %d CPUs: want no, 1, at least 1", y, procs, n)
	}
}

// TestYieldingWaiterTakesAllThatWaits: a yielding waiter whose rings hold
// several messages takes them one look after another and gives its CPU
// away only after a look that found nothing: the messages that came for
// its other receives while it waited (an alltoall's, from every peer)
// cost it no yield, where each yield on a CPU that other ranks share is a
// context switch.
func TestYieldingWaiterTakesAllThatWaits(t *testing.T) {
	t.Setenv("GOMX_YIELD", "")
	o := fastOptions()
	o.Yield = YieldAlways
	o.SpinMax = time.Hour
	pr := newPair(t, shmFactory, o, loopback.Faults{})
	ctx := testCtx(t, time.Minute)
	s := pr.ba.spinSrcs[0]
	// The receive loop stays away from rings a waiter polls (stayAway):
	// a poller of the test's own keeps it away, so the messages wait in
	// the rings for the measured waiter alone.
	s.pollIn.Add(1)
	defer func() {
		s.pollLeft.Add(1)
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}()
	const others = 16
	for attempt := 0; ; attempt++ {
		if attempt == 20 {
			t.Fatal("the receive loop took the rings in every attempt")
		}
		s.kick()
		waitUntil(t, "the receive loop to leave the rings", func() bool {
			if !s.mu.TryLock() {
				s.kick()
				return false
			}
			s.mu.Unlock()
			return true
		})
		st0 := pr.ba.WaitStats()
		base := uint64(attempt+1) << 8
		var reqs []*Request
		bufs := make([][]byte, others+1)
		for i := range bufs {
			bufs[i] = make([]byte, 8)
			r, err := pr.a.IRecv([][]byte{bufs[i]}, base+uint64(i), ^uint64(0), nil)
			if err != nil {
				t.Fatal(err)
			}
			reqs = append(reqs, r)
		}
		for i := range bufs {
			sr, err := pr.b.ISend([][]byte{[]byte(fmt.Sprintf("msg %4d", i))}, pr.btoa, base+uint64(i), nil)
			if err != nil {
				t.Fatal(err)
			}
			mustWait(t, sr, time.Minute)
		}
		// The last message's receive first: the others' messages lie
		// before it in the rings.
		if _, err := reqs[others].Wait(ctx); err != nil {
			t.Fatal(err)
		}
		st := pr.ba.WaitStats()
		for i, r := range reqs[:others] {
			if _, err := r.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("msg %4d", i); string(bufs[i]) != want {
				t.Fatalf("receive %d got %q, want %q", i, bufs[i], want)
			}
		}
		if st.LoopRecvs != st0.LoopRecvs {
			continue // the loop took some of them: not this waiter's looks alone
		}
		if st.Yields != st0.Yields {
			t.Fatalf("the waiter yielded %d times taking %d messages that were in its rings, want none", st.Yields-st0.Yields, others+1)
		}
		return
	}
}
