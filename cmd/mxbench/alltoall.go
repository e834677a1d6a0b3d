package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/shm"
)

// alltoallNotes is the help of alltoall.
const alltoallNotes = `IMB's Alltoall among the ranks of a job: in every round each rank sends
SIZE bytes to every other rank and receives SIZE bytes from each, in the
schedule --schedule names: linear (every receive and send posted
non-blocking, then waited for together), pairwise (one exchange per step,
n-1 steps) or bruck (log2 n steps of n/2 blocks packed into one message);
auto, the default, takes bruck for 256 B or less among 8 ranks or more,
linear up to 32 KiB and pairwise above, as MPICH does, except that with
--wait block (an oversubscribed host) it takes linear above 256 B, since
each pairwise step costs every rank a wake-up, and among fewer than 16
ranks at any size, as Open MPI does: each step a rank waits for costs it
a context switch there. The schedule that
ran is in the table and the JSON. With --verify every rank sends every
other its own bytes, checked on arrival. Per size, every rank first runs
untimed rounds: --warmup's, or by default as many as the size's timed
rounds (1000, fewer when a rank would send more than 256 MiB), at least
20, since a job's first rounds are slower than the rest (its ranks' Go
runtimes start polling every 20 µs after the set-up, and the first large
rounds set up lanes and copies: among 4 ranks on 2 CPUs mx's first
400-1,200 rounds of 8 B took twice the later ones). warmup in the table
and the JSON says how many ran; --timeout bounds them with the barrier
after them, and then, on its own, the timed rounds. Then, after that
barrier, every rank times its rounds; t_avg_us is the mean over ranks of
each rank's mean time per round, t_min_us and t_max_us the fastest and
slowest rank's, as IMB reports them. MB/s is the bytes one rank sends per round, (N-1) x SIZE,
over t_avg. strategy says how rank 0's large messages moved (eager, rings,
cma, or the name mx gives a strategy; see pingpong -h). shm_MiB is the
most shared memory one rank's host path mapped (its own receive queue and
the queue of each peer it sends to, its lanes both ways, pool segments),
node_MiB the node's (each segment once), rings the most lanes one rank
had: a pair that keeps sending gets a lane (a ring of its own), at most 8
a rank each way (transport/shm Options.Lanes), so a rank of a 128-rank
job maps some 50 MiB.
rss_MiB is the largest peak resident memory of a rank so far (VmHWM,
rss_max_bytes in the JSON). The header says how long after its process
started the slowest rank had its board open and every peer connected
(startup_ms in the JSON).
A send buffer in mx's shared pool (Endpoint.AllocShared, as MPI_Alloc_mem
places one) is copied once straight out of shared memory, with mx's own
choice too; --strategy shared shows that path, cma the copy by
process_vm_readv that other buffers take.

--wait auto, the default, blocks when the job has more ranks on this host
than the CPUs rank 0 may run on (its affinity mask capped by its cgroup's
CPU quota) and busy-polls when each has a CPU, as peers-alltoall compares
with Open MPI: busy-polling ranks that outnumber the CPUs hold the CPU the
rank they wait for needs (16 ranks of 64 KiB on 2 CPUs at load 58-68:
9-221 ms a round against 6.7 blocking). The ranks --procs starts take
rank 0's choice, so that every rank runs the same schedule. The header
and wait_why in the JSON say which wait ran and why; --wait spin or block
is kept as given.
With more ranks than the CPUs they may run on (this host oversubscribed,
as mpirun --oversubscribe runs MPI ranks), a rank's waiters give their CPU
away with sched_yield from their first empty look, as Open MPI's ranks do
there, and a blocking wait polls so for 1 ms before it sleeps, longer
once its waits show that their messages come later, up to 1 ms times the
ranks a CPU has (8 ms among 16 ranks on 2 CPUs; one whose messages came
later than that looks once and sleeps): the rank that must answer usually
waits for that very CPU, behind the others that share it. mx counts the processes
it shares rings with and their CPUs by itself (--yield auto); --yield
always or never overrides it. yielding_ranks in the JSON says how many
ranks yielded. --procs binds its ranks one to a CPU when the job has no
more ranks than the host's CPUs, and leaves an oversubscribed job unbound,
with one Go processor a rank, as mpirun leaves one: a bound rank cannot
move to the CPU that is free (--bind overrides; bound_ranks in the JSON).

The ranks come from mpirun, srun or a PMI launcher (mpirun -np 4 mxbench
alltoall), or --procs N starts N processes of this host. Processes on one
host reach each other through shared memory, which mx picks by itself.
Only rank 0 prints; another rank prints one line if it fails.
`

// shmFootprint reads the shared memory b's host path maps, owns, its
// rings both ways, the lanes it retired so far (idle ones, given back to
// the receive queue, and those its consumers asked back) and the lanes it
// asked its producers back for busier pairs, from the transport's own
// counters (0 without one).
func shmFootprint(b *mx.Board) (mapped, owned int64, rings int, retired, askedBack uint64) {
	for _, c := range b.TransportCounters() {
		switch c.Name {
		case shm.CounterLanesRetired:
			retired = c.Value
		case shm.CounterLanesAskedBack:
			askedBack = c.Value
		case shm.CounterMappedBytes:
			mapped = int64(c.Value)
		case shm.CounterOwnedBytes:
			owned = int64(c.Value)
		case shm.CounterRingsWritten, shm.CounterRingsRead:
			rings += int(c.Value)
		}
	}
	return mapped, owned, rings, retired, askedBack
}

// The schedules of alltoall, as MPI libraries name them.
const (
	// schedLinear posts a receive from every rank, then sends to every
	// rank, rank+1 first (so the ranks do not all send to rank 0 first),
	// and waits for them all: MPICH's and Open MPI's basic linear.
	schedLinear = "linear"
	// schedPairwise exchanges with one pair of ranks per step, n-1 steps:
	// in step j, to rank+j and from rank-j, both waited for before the
	// next.
	schedPairwise = "pairwise"
	// schedBruck moves the blocks in ceil(log2 n) steps of n/2 blocks
	// each, to rank+2^k and from rank-2^k: fewer, larger messages, for
	// small sizes (Bruck et al., 1997).
	schedBruck = "bruck"
	// schedAuto chooses by size and ranks (chooseSchedule).
	schedAuto = "auto"
)

// schedules are the names --schedule takes.
var schedules = []string{schedAuto, schedLinear, schedPairwise, schedBruck}

// chooseSchedule is the schedule auto runs for size bytes among n ranks
// that wait by busy-polling, or by blocking when blocking is set; every
// rank must pass the same blocking (benchFlags.schedBlocking), or ranks
// run different schedules and wait for each other for ever. Polling
// ranks get MPICH's choice (its defaults MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE
// 256 and MEDIUM_MSG_SIZE 32768): Bruck for blocks of 256 bytes or less
// among 8 ranks or more, where the number of messages dominates; linear
// up to 32 KiB, where every message in flight at once keeps the rings
// busy; pairwise above, where one exchange at a time keeps each sender's
// memory from being read by every peer at once. Blocking ranks (an
// oversubscribed host) get linear above 256 bytes: a step of pairwise
// costs each rank a sleep and a wake-up, and on 2 CPUs linear measured
// 1.5-5x faster than pairwise among 8 and 16 ranks at 4 KiB, 64 KiB and
// 1 MiB (docs/intranode-scale.md), while Bruck still beat linear at 8
// and 256 B among 16. Among 8 to 15 blocking ranks small blocks go
// linear too, as Open MPI's fixed rules send them: on a host with fewer
// CPUs than ranks every step a rank waits for costs it a sched_yield and
// a context switch (some 3 µs here), and Bruck's log2 n steps, each
// waiting for a message its predecessor sends only once it has run,
// switched about twice per rank and round among 8, linear's single wait
// about once (docs/intranode-scale.md, "Small messages at scale").
func chooseSchedule(asked string, size, n int, blocking bool) string {
	if asked != "" && asked != schedAuto {
		return asked
	}
	switch {
	case size <= 256 && n >= bruckFrom(blocking):
		return schedBruck
	case size <= 32<<10 || blocking:
		return schedLinear
	}
	return schedPairwise
}

// bruckFrom is the fewest ranks auto runs Bruck's schedule among for
// small blocks: MPICH's 8 for busy-polling ranks, Open MPI's 16 for
// blocking ones (chooseSchedule).
func bruckFrom(blocking bool) int {
	if blocking {
		return 16
	}
	return 8
}

// a2aTag is the match of alltoall's messages from rank src; step is the
// Bruck step (0 for the other schedules), so its messages of different
// steps never match each other's receives.
func a2aTag(src, step int) uint64 {
	return tagA2A | uint64(step)<<32 | uint64(uint32(src))
}

// a2aSeed is the pattern of the block rank src sends rank dst in round i.
func a2aSeed(i, src, dst, n int) int { return (i*n+src)*n + dst }

// a2a is one rank's alltoall on one endpoint: its send blocks (one per
// rank; all the same buffer unless --verify, which gives every
// destination its own bytes), its receive blocks (one per rank), and
// Bruck's buffers.
type a2a struct {
	w      *world
	f      *benchFlags
	k      int
	sblk   [][]byte
	rblk   [][]byte
	tmp    []byte // Bruck: n blocks, rotated
	pack   []byte // Bruck: the blocks of one step, out
	unpack []byte // Bruck: the blocks of one step, in
	reqs   []*mx.Request
	want   []int // per request: the bytes a receive must get, -1 for a send
}

// newA2A allocates the blocks for sizes up to maxSize and the schedules
// that may run.
func newA2A(w *world, f *benchFlags, k int, strategy string, maxSize int, bruck bool) (*a2a, error) {
	n := w.job.Size
	a := &a2a{w: w, f: f, k: k, sblk: make([][]byte, n), rblk: make([][]byte, n), reqs: make([]*mx.Request, 0, 2*n)}
	if f.verify {
		for d := range n {
			a.sblk[d] = newBuffer(maxSize, f.aligned)
		}
		if err := sharedBuffers(w.eps[k], strategy, a.sblk); err != nil {
			return nil, err
		}
	} else {
		sb := [][]byte{newBuffer(maxSize, f.aligned)}
		if err := sharedBuffers(w.eps[k], strategy, sb); err != nil {
			return nil, err
		}
		for d := range n {
			a.sblk[d] = sb[0]
		}
	}
	for r := range n {
		if r != w.job.Rank {
			a.rblk[r] = newBuffer(maxSize, f.aligned)
		}
	}
	if bruck {
		half := (n + 1) / 2
		a.tmp = newBuffer(n*maxSize, f.aligned)
		a.pack = newBuffer(half*maxSize, f.aligned)
		a.unpack = newBuffer(half*maxSize, f.aligned)
	}
	return a, nil
}

// send posts block b to rank dst with match tag.
func (a *a2a) send(b []byte, dst int, tag uint64) error {
	ep := a.w.eps[a.k]
	var r *mx.Request
	var err error
	if a.f.sync {
		r, err = ep.ISSend([][]byte{b}, a.w.peers[a.k][dst], tag, nil)
	} else {
		r, err = ep.ISend([][]byte{b}, a.w.peers[a.k][dst], tag, nil)
	}
	if err == nil {
		a.reqs = append(a.reqs, r)
	}
	return err
}

// recv posts a receive into b of a message with match tag.
func (a *a2a) recv(b []byte, tag uint64) error {
	r, err := a.w.eps[a.k].IRecv([][]byte{b}, tag, matchAll, nil)
	if err == nil {
		a.reqs = append(a.reqs, r)
	}
	return err
}

// wait waits for every request posted since the last wait, and checks
// that each receive got want bytes.
func (a *a2a) wait(ctx context.Context, want []int) error {
	for i, r := range a.reqs {
		st, err := r.Wait(ctx)
		if err != nil {
			return err
		}
		if want != nil && want[i] >= 0 && int(st.XferLength) != want[i] {
			return fmt.Errorf("%d bytes from rank %d, want %d", st.XferLength, uint32(st.Match), want[i])
		}
	}
	a.reqs = a.reqs[:0]
	return nil
}

// round runs round i of size bytes with schedule sched.
func (a *a2a) round(ctx context.Context, sched string, size, i int) error {
	n, me := a.w.job.Size, a.w.job.Rank
	if a.f.verify {
		for d := range n {
			if d != me {
				pattern(a.sblk[d][:size], a2aSeed(i, me, d, n))
			}
		}
	}
	var err error
	switch sched {
	case schedLinear:
		err = a.linear(ctx, size)
	case schedPairwise:
		err = a.pairwise(ctx, size)
	case schedBruck:
		err = a.bruck(ctx, size)
	default:
		err = fmt.Errorf("schedule %q", sched)
	}
	if err != nil || !a.f.verify {
		return err
	}
	for s := range n {
		if s == me {
			continue
		}
		if at := check(a.rblk[s][:size], a2aSeed(i, s, me, n)); at >= 0 {
			return fmt.Errorf("from rank %d, offset %d: %w", s, at, errVerify)
		}
	}
	return nil
}

// linear: every receive, then every send, then wait for them all.
func (a *a2a) linear(ctx context.Context, size int) error {
	n, me := a.w.job.Size, a.w.job.Rank
	want := a.want[:0]
	for j := 1; j < n; j++ {
		src := (me - j + n) % n
		if err := a.recv(a.rblk[src][:size], a2aTag(src, 0)); err != nil {
			return err
		}
		want = append(want, size)
	}
	for j := 1; j < n; j++ {
		dst := (me + j) % n
		if err := a.send(a.sblk[dst][:size], dst, a2aTag(me, 0)); err != nil {
			return err
		}
		want = append(want, -1)
	}
	a.want = want
	return a.wait(ctx, want)
}

// pairwise: one exchange per step.
func (a *a2a) pairwise(ctx context.Context, size int) error {
	n, me := a.w.job.Size, a.w.job.Rank
	want := []int{size, -1}
	for j := 1; j < n; j++ {
		src, dst := (me-j+n)%n, (me+j)%n
		if err := a.recv(a.rblk[src][:size], a2aTag(src, 0)); err != nil {
			return err
		}
		if err := a.send(a.sblk[dst][:size], dst, a2aTag(me, 0)); err != nil {
			return err
		}
		if err := a.wait(ctx, want); err != nil {
			return fmt.Errorf("step %d: %w", j, err)
		}
	}
	return nil
}

// bruck: rotate the blocks so that block j goes j ranks on, move in step
// k every block whose index has bit k set 2^k ranks on (packed into one
// message), then take block j as the one from rank me-j.
func (a *a2a) bruck(ctx context.Context, size int) error {
	n, me := a.w.job.Size, a.w.job.Rank
	blk := func(b []byte, j int) []byte { return b[j*size : (j+1)*size] }
	for j := 1; j < n; j++ {
		copy(blk(a.tmp, j), a.sblk[(me+j)%n][:size])
	}
	step := 0
	for d := 1; d < n; d <<= 1 {
		step++
		m := 0
		for j := 1; j < n; j++ {
			if j&d != 0 {
				copy(blk(a.pack, m), blk(a.tmp, j))
				m++
			}
		}
		src, dst := (me-d+n)%n, (me+d)%n
		if err := a.recv(a.unpack[:m*size], a2aTag(src, step)); err != nil {
			return err
		}
		if err := a.send(a.pack[:m*size], dst, a2aTag(me, step)); err != nil {
			return err
		}
		if err := a.wait(ctx, []int{m * size, -1}); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		m = 0
		for j := 1; j < n; j++ {
			if j&d != 0 {
				copy(blk(a.tmp, j), blk(a.unpack, m))
				m++
			}
		}
	}
	for j := 1; j < n; j++ {
		copy(a.rblk[(me-j+n)%n][:size], blk(a.tmp, j))
	}
	return nil
}

// alltoallBuffers is the memory of one rank's alltoall buffers for blocks
// of up to maxSize bytes among n ranks (newA2A): a receive block per
// rank, a send block per rank with --verify (else one), and Bruck's
// rotated, packed and unpacked blocks.
func alltoallBuffers(n, maxSize int, verify bool) int64 {
	blocks := int64(n) + 1
	if verify {
		blocks += int64(n) - 1
	}
	if maxSize <= 256 {
		blocks += 2 * int64(n)
	}
	return blocks * int64(maxSize)
}

// alltoallFits refuses a job of n ranks on this host whose buffers would
// not fit in the memory the kernel says is available: the ranks would
// run the host out of memory instead of measuring it.
func alltoallFits(cmd string, n, maxSize int, verify bool) error {
	need := int64(n) * alltoallBuffers(n, maxSize, verify)
	avail, ok := memAvailable()
	if !ok || need <= avail/2 {
		return nil
	}
	return usagef(cmd, "%d ranks with blocks of up to %s need %s of buffers on this host, and %s is available: give smaller --sizes or --end, or fewer ranks",
		n, units.Format(int64(maxSize)), units.Format(need), units.Format(avail))
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (int64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, false
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// warmUp runs the untimed rounds of one size and the barrier after them,
// together bounded by timeout: a timeout there says how to fit them in.
func (a *a2a) warmUp(ctx context.Context, w *world, sched string, size, rounds int, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hint := func(err error) error {
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: %d warm-up rounds of %s took longer than --timeout %v: give --warmup N or a longer --timeout", err, rounds, units.Format(int64(size)), timeout)
		}
		return err
	}
	for i := range rounds {
		if err := a.round(wctx, sched, size, i); err != nil {
			return hint(fmt.Errorf("alltoall of %s, warmup round %d: %w", units.Format(int64(size)), i, err))
		}
	}
	return hint(w.barrier(wctx))
}

// alltoall runs every size on board k.
func (w *world) alltoall(ctx context.Context, f *benchFlags, k int, strategy string, sizes []int, rep reporter) error {
	n := w.job.Size
	maxSize := slices.Max(sizes)
	bruck := false
	for _, size := range sizes {
		bruck = bruck || chooseSchedule(f.schedule, size, n, f.schedBlocking) == schedBruck
	}
	a, err := newA2A(w, f, k, strategy, maxSize, bruck)
	if err != nil {
		return err
	}
	ep := w.eps[k]
	for _, size := range sizes {
		sched := chooseSchedule(f.schedule, size, n, f.schedBlocking)
		iters := f.iterationsFor(size * max(n-1, 1))
		warmup := f.alltoallWarmup(size * max(n-1, 1))
		before := ep.Counters()
		if err := a.warmUp(ctx, w, sched, size, warmup, f.timeout); err != nil {
			return err
		}
		// The timed rounds get a --timeout of their own, after the
		// warm-up's.
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		// yielded: whether the rank's waiters yielded in any timed round.
		// After the last one the count can have changed already: ranks
		// done first sleep in the gather, and --yield auto counts them
		// out.
		yielded := false
		start := time.Now()
		for i := range iters {
			if err := a.round(sctx, sched, size, warmup+i); err != nil {
				cancel()
				return fmt.Errorf("alltoall of %s, round %d: %w", units.Format(int64(size)), i, err)
			}
			if !yielded {
				yielded, _, _ = w.boards[k].Oversubscribed()
			}
		}
		perRound := time.Since(start).Seconds() * 1e6 / float64(max(iters, 1))
		m := strategyOf(countersSince(before, ep.Counters()), strategy, w.boards[k].HostPath(w.nics[k][(w.job.Rank+1)%n]), size)
		m.Mapped, m.Owned, m.Rings, m.Retired, m.AskedBack = shmFootprint(w.boards[k])
		m.RSS = peakRSS()
		m.Yield = yielded
		m.Bound = w.bound
		times, err := w.gather(sctx, binary.BigEndian.AppendUint64(nil, math.Float64bits(perRound)))
		if err == nil {
			var all []moved
			if all, err = w.gatherMoved(sctx, m); err == nil && w.job.Rank == 0 {
				res := result{Size: size, Iterations: iters}
				res.Schedule, res.Warmup = sched, &warmup
				res.Procs, res.Strategy, res.StrategyAsked, res.Engine, res.EngineCPU = n, all[0].Strategy, strategy, w.engineName, w.engineCPU
				lo, hi, sum := math.Inf(1), 0.0, 0.0
				for r, t := range times {
					if len(t) != 8 {
						cancel()
						return fmt.Errorf("rank %d's time: %d bytes", r, len(t))
					}
					x := math.Float64frombits(binary.BigEndian.Uint64(t))
					lo, hi, sum = min(lo, x), max(hi, x), sum+x
					res.Fallbacks += all[r].Fallbacks
					res.ShmMappedMax = max(res.ShmMappedMax, all[r].Mapped)
					res.ShmRingsMax = max(res.ShmRingsMax, all[r].Rings)
					res.ShmNodeBytes += all[r].Owned
					res.ShmLanesRetired += all[r].Retired
					res.ShmLanesAskedBack += all[r].AskedBack
					res.RSSMax = max(res.RSSMax, all[r].RSS)
					if all[r].Yield {
						res.YieldingRanks++
					}
					if all[r].Bound {
						res.BoundRanks++
					}
				}
				res.TMinUS, res.TMaxUS, res.LatencyUS = lo, hi, sum/float64(n)
				res.TAvgUS = res.LatencyUS
				res.StartupMS = float64(w.startupMax) / float64(time.Millisecond)
				if res.LatencyUS > 0 {
					res.MBPerS = float64((n-1)*size) / res.LatencyUS
				}
				rep.row(res)
			}
		}
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}
