package mx

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Waiting on an oversubscribed node.
//
// A waiter that polls (poll.go) spins on the rings for yieldAfter before
// it gives its CPU away, and sleeps once its poll window is spent. Both
// assume that the process that must answer runs on a CPU of its own. When
// a node runs more processes than it has CPUs (a job started with
// mpirun --oversubscribe, or more ranks than cores), the answer usually
// waits for the very CPU the waiter holds: every microsecond spent
// spinning delays it by as much, and a waiter that sleeps makes the
// answer cost a doorbell and a wake-up besides (a system call for the
// sender, a futex or an epoll wake-up and a context switch for the
// receiver), tens of microseconds on a virtual machine, per message. Open
// MPI, told the node is oversubscribed, spins in opal_progress calling
// sched_yield between looks instead (mpi_yield_when_idle): a process that
// waits hands its CPU to one that can go on at once, and a message costs
// a context switch.
//
// A board whose waiters yield (oversubscribed, or BoardOptions.Yield set
// to YieldAlways) does the same: a polling waiter calls sched_yield after
// every empty look from the first, and a blocking waiter polls so, giving
// the CPU away between looks, for at least BoardOptions.SpinMax (its poll
// window, which may grow up to SpinMax times the processes each CPU has:
// stretchSpin, as the answer waits behind them) before it sleeps (its poll window, tuned as before, may be longer) once its
// endpoint's window is at Spin, where it starts, or above: its messages
// come soon. An endpoint whose window a message later than SpinMax halved
// below Spin (an idle rank's) looks once and sleeps: its yields would be context switches
// on CPUs the busy ranks need, and sysmon's every 20 µs while it held its
// P (waitBudget, spin.go). The bound keeps a waiter whose message is far
// away (a peer computing) from burning a CPU that no one else wants, at
// a cost of one wake-up per SpinMax of waiting, which is small beside the
// wait. A busy-polling waiter, which never sleeps, yields after every
// empty look too.
//
// The board finds out by itself (YieldAuto, the default): whenever a ring
// comes or goes, and every oversubEvery, its timers count the processes
// it shares rings with that compete for a CPU (the peers whose rings come
// to it on the host path, or on a shared-memory board's own transport),
// itself among them, and the CPUs those processes may run on, the union
// of their scheduler affinity masks (sched_getaffinity(2) of each,
// remembered per process). More processes than CPUs is oversubscribed.
// The union, not this process's own mask, is what counts: ranks each
// bound to one core of a node with a core per rank see as many CPUs as
// ranks, while unbound ranks, or ranks bound to the two CPUs of a small
// machine, see how few there are.
//
// A process blocked in a wait does not compete: the idle ranks of a job
// in which two ranks talk would otherwise make those two yield at every
// look. Each receiver shows in its doorbell, which every board sending to
// it maps, whether it sleeps while a waiter of its board is blocked (on
// its channel or asleep on the sources: blocked) and how long it has
// slept so in all (shm.PeerSleeps), written only as it falls asleep and
// wakes and as waiters block. A receive loop asleep on its rings while
// the application computes outside mx is awake. A process counts for the
// share of the time since the last look it was not asleep: nothing when it
// was asleep at both looks and slept no more in between (asleep
// throughout), 1 - slept/interval when it woke in between, all of it when
// it is new or its doorbell could not be read; a share of awakeWhole or
// more counts whole. A process asleep now that was awake at the last look
// fell asleep at a time its doorbell does not show, so it counts whole
// once more; looks are doorEvery apart while some are left out or one fell
// asleep, so ranks that go idle (a job's ranks that wait while two of them
// talk) are left out a doorEvery later, not an oversubEvery.
// Looks more than 2*oversubEvery apart (an idle board's stretched tick)
// count a process as its doorbell shows it now, asleep or awake whole.
// The shares are summed and rounded, so the brief wake-ups of idle ranks
// count for nothing, ranks that poll count whole and many ranks that each
// sleep most of the time count together; the CPUs are those of the
// processes with a share. A look costs a load of a line per peer that the
// peer writes only when it sleeps or wakes, no system call. What the count
// cannot see is a CPU quota (a container's cgroup cpu.max), processes of
// other jobs that do not talk to this one, or a process with one
// goroutine blocked in a wait and another computing: YieldAlways (GOMX_YIELD=always) is for those;
// YieldNever (GOMX_YIELD=never) keeps the spin of a node with a core per
// rank whatever the count says.

// YieldPolicy says when a board's waiters give their CPU away from their
// first empty look instead of spinning (see BoardOptions.Yield).
type YieldPolicy uint8

const (
	// YieldAuto yields when the processes the board shares rings with
	// that are not blocked in a wait, itself among them, outnumber the
	// CPUs they may run on.
	YieldAuto YieldPolicy = iota
	// YieldAlways yields whatever the count says.
	YieldAlways
	// YieldNever never yields from the first look: waiters spin for
	// yieldAfter first, and sleep when their poll window is spent.
	YieldNever
)

// String returns the policy's name, as ParseYieldPolicy and GOMX_YIELD
// take it.
func (p YieldPolicy) String() string {
	switch p {
	case YieldAuto:
		return "auto"
	case YieldAlways:
		return "always"
	case YieldNever:
		return "never"
	}
	return fmt.Sprintf("YieldPolicy(%d)", uint8(p))
}

// ParseYieldPolicy reads a policy by name: auto, always or never.
func ParseYieldPolicy(s string) (YieldPolicy, error) {
	for _, p := range []YieldPolicy{YieldAuto, YieldAlways, YieldNever} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: yield policy %q: write auto (yield when the awake processes sharing rings outnumber their CPUs), always or never", ErrBadOptions, s)
}

// yieldEnv reads GOMX_YIELD into o.Yield when it is left at YieldAuto.
func (o *BoardOptions) yieldEnv() error {
	if o.Yield > YieldNever {
		return fmt.Errorf("%w: Yield %v: use YieldAuto, YieldAlways or YieldNever", ErrBadOptions, o.Yield)
	}
	v := os.Getenv("GOMX_YIELD")
	if v == "" || o.Yield != YieldAuto {
		return nil
	}
	p, err := ParseYieldPolicy(v)
	if err != nil {
		return fmt.Errorf("GOMX_YIELD: %w", err)
	}
	o.Yield = p
	return nil
}

// oversubEvery is how often a board with YieldAuto counts its processes
// and their CPUs again when the number of its peers did not change: the
// peers' sleep changes, one process may have taken another's place, and
// this process's own mask, read at every count, may have changed (a
// peer's mask is read once, when the peer is first seen, as launchers
// bind ranks when they start them). A count costs a system call per new
// process, and a load and a map look-up per peer. Whether the number
// changed costs a load per ring, at every timer run.
const oversubEvery = 50 * time.Millisecond

// doorEvery is how often a board that left sleeping processes out of its
// count looks at their doorbells again (at its timer runs, a tick apart
// while it is busy): processes that wake, as every rank does when an
// alltoall starts after a quiet phase, count again within a tick or two,
// not an oversubEvery later, and a wake-up is measured against a short
// interval, whose share awake it mostly is.
const doorEvery = 5 * time.Millisecond

// oversubState is a board's view of whether its node is oversubscribed.
type oversubState struct {
	// yield: waiters yield from their first empty look (read by every
	// waiter; written by the timers, under b.mu).
	yield atomic.Bool
	// procs and cpus are the last count (WaitStats).
	procs, cpus atomic.Int32
	// spinMax is SpinMax stretched by the last count (spinCap), ns; 0
	// before the first count and under YieldAlways and YieldNever.
	spinMax atomic.Int64
	// Under b.mu: when the count was last made, the affinity of every
	// peer process seen, and scratch for the pids.
	checked int64
	aff     map[int]affinity
	pids    []int
	round   uint32
	// The peers' doorbells at the last look (looked: when; looks counts
	// them), each process's share of that interval awake (shares), and
	// scratch.
	looked   int64
	looks    uint32
	sleepers bool // the last count left some out (or in part): see doorEvery
	// fell: the last look found a process asleep that it counted awake
	// for some of the interval (it fell asleep since the look before, at
	// a time its doorbell does not show): the next look, doorEvery
	// later, sees it asleep throughout and leaves it out.
	fell   bool
	doors  map[transport.NICID]doorLook
	shares map[int]float64
	sleeps []shm.PeerSleep
	// rings is shmTransport's answer, whose doorbell shows the board's
	// waiters blocked (blocked).
	rings *shm.Transport
	// mono is the board's clock's origin on CLOCK_MONOTONIC: a look at
	// now (board clock) is at mono + now on the clock a peer's doorbell
	// gives the start of its sleep in (shm.PeerSleep.Since). Both are
	// monotonic (the runtime's is CLOCK_MONOTONIC), so no wall-clock
	// step moves one against the other.
	mono time.Duration
	// all and one are count's masks: getaff, a function value, takes
	// their addresses, so locals would move to the heap at every count.
	all, one unix.CPUSet
}

// affinity is a process's CPU mask as last read, and the count round that
// last saw the process (a process not seen in a round is forgotten).
type affinity struct {
	set  unix.CPUSet
	seen uint32
}

// doorLook is a peer's doorbell as a look read it (see shm.PeerSleep),
// and which look that was.
type doorLook struct {
	asleep bool
	slept  time.Duration
	seen   uint32
}

// initOversub sets the policy's fixed answers at NewBoard.
func (b *Board) initOversub() {
	b.oversub.rings = b.shmTransport()
	b.oversub.mono = shm.MonoNow() - time.Duration(b.clock())
	b.oversub.yield.Store(b.opts.Yield == YieldAlways)
	b.oversub.checked = -int64(oversubEvery)
}

// shmTransport is the shared-memory transport of the board's peers on
// this host: the host path's, or the board's own.
func (b *Board) shmTransport() *shm.Transport {
	if h := b.host; h != nil {
		return h.tr
	}
	tr, _ := b.tr.(*shm.Transport)
	return tr
}

// blocked adds n (1 or -1) to the count of the board's waiters blocked in
// a wait that its rings' doorbell shows (shm.AddBlocked): the peers count
// this process as asleep only while its receiver sleeps and that count is
// above nothing, not while its receive loop sleeps and the application
// computes.
func (b *Board) blocked(n int32) {
	if tr := b.oversub.rings; tr != nil {
		tr.AddBlocked(n)
	}
}

// countOversub counts the processes the board shares rings with that are
// awake and the CPUs they may run on, and sets whether its waiters yield
// (b.mu held; from the timers): when a ring came or went since the last
// count, every oversubEvery, and from doorEvery while it leaves sleepers
// out or saw a process fall asleep (oversubState.fell).
func (b *Board) countOversub(now int64) {
	o := &b.oversub
	if b.opts.Yield != YieldAuto {
		return
	}
	tr := b.shmTransport()
	if tr == nil {
		return
	}
	rings := len(o.pids)
	o.pids = tr.PeerPids(o.pids[:0])
	if len(o.pids) == rings && now-o.checked < int64(oversubEvery) && (now-o.looked < int64(doorEvery) || !o.sleepers && !o.fell) {
		return
	}
	o.checked = now
	o.sleeps = tr.PeerSleeps(o.sleeps[:0])
	o.share(now, o.sleeps)
	procs, cpus, ok := o.count(os.Getpid(), o.pids, unix.SchedGetaffinity)
	if !ok {
		return
	}
	o.procs.Store(int32(procs))
	o.cpus.Store(int32(cpus))
	o.yield.Store(oversubscribed(procs, cpus))
	o.spinMax.Store(int64(stretchSpin(b.opts.SpinMax, procs, cpus)))
}

// stretchSpin is SpinMax on a node where procs processes share cpus CPUs:
// as many times SpinMax as each CPU has processes, rounded up, when they
// outnumber the CPUs.
//
// A yielding waiter's message comes from a process that waits, with the
// others sharing its CPU, for its turn: each yield of the waiter hands
// the CPU to one of them, which may hold it for a whole copy or a slice
// before the answer is sent. So on a node with k processes a CPU, an
// answer that would come within SpinMax on a CPU of its own comes within
// about k times that. A budget that does not grow so sends the waiters
// to sleep in every round of a job whose rounds last longer than SpinMax
// (16 ranks of a 64 KiB alltoall on 2 CPUs, 2-3 ms a round): every
// message then costs the sender an eventfd write and the receiver a
// wake-up through the netpoller, its window halves past Spin until its
// waits sleep at once (waitBudget), rounds grow longer still, and the
// lanes, which a pair keeps while it sends LaneAfter frames a LaneIdle,
// go back to the queue. That job took 12-14 ms a round with SpinMax and
// 2.2-2.6 ms with 8 times it (Open MPI, whose waiters never sleep: 2.2;
// docs/alltoall.md). The stretch is the cap of the poll window, which the
// waits earn (waitBudget): a yielding waiter polls SpinMax at first, as
// anywhere, and a wait that slept and got its message within the cap
// doubles its endpoint's window towards it. An idle rank's first wait
// (its message far away) costs no more than elsewhere, and halves its
// window: with the whole cap at once, the 14 idle ranks of a 16-rank
// pingpong yielded for 8 ms after the barrier, and its 8 B latency rose
// from 2.1-16.4 µs to 3.1-29.3.
//
// The stretch stops at maxStretchedSpin, or at SpinMax where that is
// larger (a SpinMax set so is the user's own bound).
func stretchSpin(spinMax time.Duration, procs, cpus int) time.Duration {
	if !oversubscribed(procs, cpus) {
		return spinMax
	}
	k := time.Duration((procs + cpus - 1) / cpus)
	return max(spinMax, min(spinMax*k, maxStretchedSpin))
}

// maxStretchedSpin bounds stretchSpin: 16 times the default SpinMax (32
// ranks on 2 CPUs stretch it so far). A wait past it costs its waiter one
// sleep and wake-up (an eventfd write and the netpoller, some tens of µs),
// a fraction of a percent of the wait, so polling longer saves nothing a
// job would notice, while every yielding waiter keeps its CPU's run queue
// one longer for the ranks whose work it waits for: with no bound, 128
// ranks on 2 CPUs would yield for 64 ms and 1024 for half a second before
// they sleep.
const maxStretchedSpin = 16 * time.Millisecond

// spinCap is the board's SpinMax as its waiters and its endpoints' poll
// windows use it: stretched by the last count of processes and CPUs
// (stretchSpin) while that count has the board's waiters yield, else
// BoardOptions.SpinMax.
func (b *Board) spinCap() time.Duration {
	if b.oversub.yield.Load() {
		if m := time.Duration(b.oversub.spinMax.Load()); m > b.opts.SpinMax {
			return m
		}
	}
	return b.opts.SpinMax
}

// share sets each process's share of the time since the last look (at
// now, on the board's clock) it was awake, from what its boards' doorbells
// show now (sleeps) and showed at the last look: the largest of its
// boards'. A board not looked at before counts as awake. When the last
// look is more than 2*oversubEvery old (an idle board's stretched tick,
// progress.go, or a stall) a board counts as it is now: awake whole,
// asleep nothing.
func (o *oversubState) share(now int64, sleeps []shm.PeerSleep) {
	if o.doors == nil {
		o.doors, o.shares = make(map[transport.NICID]doorLook), make(map[int]float64)
	}
	clear(o.shares)
	o.fell = false
	o.looks++
	span := time.Duration(now - o.looked)
	stale := o.looks > 1 && span > 2*oversubEvery // a stretched tick, or a stall
	for _, s := range sleeps {
		awake := 1.0
		if stale {
			// Shares of so long an interval say nothing of now: a
			// peer that woke a moment ago would count for nothing.
			// Count it as it is now; the next look refines it.
			if s.Asleep {
				awake = 0
			}
		} else if last, ok := o.doors[s.Peer]; ok && last.seen == o.looks-1 && span > 0 {
			slept := s.Slept - last.slept
			if s.Asleep && s.Since != 0 {
				// The sleep going on, in no total yet: from its
				// start, or from the last look if it began before.
				slept += min(max(o.mono+time.Duration(now)-s.Since, 0), span)
			}
			switch {
			case s.Asleep && last.asleep && s.Slept == last.slept:
				awake = 0 // asleep throughout
			case slept >= span:
				awake = 0
			default:
				awake = 1 - float64(slept)/float64(span)
			}
		}
		if s.Asleep && awake > 0 {
			o.fell = true
		}
		o.doors[s.Peer] = doorLook{asleep: s.Asleep, slept: s.Slept, seen: o.looks}
		if a, ok := o.shares[s.Pid]; !ok || awake > a {
			o.shares[s.Pid] = awake
		}
	}
	for p, d := range o.doors {
		if d.seen != o.looks {
			delete(o.doors, p)
		}
	}
	o.looked = now
}

// awakeWhole is the share of an interval a process awake that long counts
// for a whole process. A rank that polls and yields may still show some
// sleep: a blocking waiter whose poll window is spent sleeps until the
// next message, and that sleep says little of the CPU the process wants.
const awakeWhole = 1.0 / 8

// count counts the processes self and pids name (each once; pids may
// repeat, and name self) that compete for a CPU and the CPUs in the union
// of their affinity masks, which getaff reads for a process not seen in
// the last count (sched_getaffinity(2)); a process it finds gone is left
// out. A process counts for its share awake (share; a whole process when
// share has none for it or from awakeWhole), and its CPUs when that share
// is above nothing; self counts whole. ok is false when self's own mask cannot be read.
func (o *oversubState) count(self int, pids []int, getaff func(pid int, set *unix.CPUSet) error) (procs, cpus int, ok bool) {
	all := &o.all
	*all = unix.CPUSet{}
	if getaff(self, all) != nil {
		return 0, 0, false
	}
	if o.aff == nil {
		o.aff = make(map[int]affinity)
	}
	o.round++
	o.sleepers = false
	load := 1.0
	for _, pid := range pids {
		if pid == self || pid <= 0 {
			continue
		}
		a, known := o.aff[pid]
		if known && a.seen == o.round {
			continue // a second board of the same process
		}
		if !known {
			o.one = unix.CPUSet{}
			if getaff(pid, &o.one) != nil {
				continue // gone already
			}
			a.set = o.one
		}
		a.seen = o.round
		o.aff[pid] = a
		awake, ok := o.shares[pid]
		if !ok || awake >= awakeWhole {
			awake = 1
		} else {
			o.sleepers = true
		}
		if awake > 0 {
			load += awake
			orSet(all, &a.set)
		}
	}
	for pid, a := range o.aff {
		if a.seen != o.round {
			delete(o.aff, pid)
		}
	}
	return int(load + 0.5), all.Count(), true
}

// oversubscribed reports whether procs processes outnumber the cpus they
// may run on.
func oversubscribed(procs, cpus int) bool { return cpus > 0 && procs > cpus }

// orSet adds the CPUs of b to a.
func orSet(a, b *unix.CPUSet) {
	for i := range a {
		a[i] |= b[i]
	}
}

// Oversubscribed reports whether the board's waiters yield their CPU from
// their first empty look (see BoardOptions.Yield), and the processes and
// CPUs it last counted (zero under YieldAlways and YieldNever, and before
// the first count).
func (b *Board) Oversubscribed() (yield bool, procs, cpus int) {
	o := &b.oversub
	return o.yield.Load(), int(o.procs.Load()), int(o.cpus.Load())
}
