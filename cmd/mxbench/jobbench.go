package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/internal/units"
)

// jobProcsWithEngine is GOMAXPROCS of a rank bound to one CPU whose
// emulated engine has a CPU of its own (--engine-cpu): the application,
// mx's goroutines, the engine's channel, and one to spare (see
// runJobCommand).
const jobProcsWithEngine = 4

// runJobCommand runs cmd (pingpong, stream, alltoall, overlap) as one rank
// of job: it joins the job, runs every strategy's sizes with the other
// ranks, and on rank 0 reports. args are the command line after the
// program name, for the ranks --procs starts.
func runJobCommand(cmd string, f *benchFlags, job launch.Job, sizes []int, args []string, rep reporter, stderr io.Writer) (err error) {
	strategies, err := jobStrategies(f.job.strategy)
	if err != nil {
		return usagef(cmd, "%v", err)
	}
	je, err := f.chooseEngine(cmd, strategies, job.Size)
	if err != nil {
		return err
	}
	progressCPU, err := f.chooseProgressCPU(cmd)
	if err != nil {
		return err
	}
	jr, err := startJob(context.Background(), job, args, f.procsWaitEnviron(), stderr)
	if err != nil {
		return rankError(job, err)
	}
	ctx := jr.ctx
	procs := job.Launcher == procsLauncher || os.Getenv("MXBENCH_PROCS_CHILD") != ""
	over := oversubscribes(job.Size)
	if procs && over && je.cpu < 0 {
		// A rank's share of this host is less than a CPU: one
		// processor, as a bound rank gets (below). With the runtime's
		// default (a P per CPU) the goroutines the rank's frames wake
		// run on a second thread beside the waiter: futex wake-ups and
		// context switches on CPUs every rank competes for (8 ranks on
		// 2 CPUs, 8 B alltoall: 21-27 switches a round, against 14-15
		// with one P).
		runtime.GOMAXPROCS(1)
	}
	bound := false
	if procs && f.bindRanks(over) {
		// Once rank 0 started the others (they would inherit its
		// binding, and see one CPU); before the boards start their
		// goroutines' threads, which inherit it. An emulated engine's
		// channels share the rank's CPU unless --engine-cpu gives them
		// one: mx's waits step aside while the engine copies.
		slot := job.Rank
		if cpus, err := allowedCPUs(); err == nil {
			slot = bindSlot(cmd, job.Rank, job.Size, len(cpus))
		}
		cpu := bindProcess(slot)
		bound = cpu >= 0
		switch {
		case cpu >= 0 && je.cpu < 0:
			// One processor for the one CPU, from the start, as a
			// rank that mpirun starts bound gets from its runtime.
			// Bound after it started, the rank kept the runtime's
			// two until its monitor saw the binding, up to a second
			// later: two threads running Go code on one CPU, where
			// a goroutine that yields (runtime.Gosched: the emulated
			// engine polling for its doorbell, a wait polling its
			// copy) keeps the CPU from the thread holding the
			// goroutine it yields to until the kernel's time slice
			// ends. The engine rows of a short run measured those
			// slices (64 KiB and 1 MiB messages 300-550 us one-way,
			// 4 MiB ones, measured later, 115 us), not the engine.
			runtime.GOMAXPROCS(1)
		case cpu >= 0:
			// The runtime would size GOMAXPROCS to the one CPU the
			// rank may use; the engine's thread, on a CPU of its own,
			// runs Go code and needs a P of its own, or it would copy
			// only when the rank's goroutines stop, and mx's goroutines
			// need one beside the application's, as on an unbound rank,
			// or they would progress only at a preemption. And one to
			// spare: mx's receive loop sleeps in a futex system call
			// holding its P, and with no P idle the runtime's sysmon
			// takes such a P back after 20 µs and, each time it does,
			// goes back to polling every 20 µs: with three, the
			// availability run's computation was preempted by sysmon's
			// wake-ups on its CPU some 10 000 times a second, and the
			// goroutines the engine's completions woke waited for a P.
			runtime.GOMAXPROCS(jobProcsWithEngine)
		}
	}
	// Every rank's failure, rank 0's own among them, the earliest first.
	defer func() { err = jr.wait(rankError(job, err)) }()
	if jr.ln != nil {
		defer jr.ln.Close()
	}
	re, err := je.open(job.Rank)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := re.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	// A pingpong's or stream's ranks 2 and up only wait for the pair:
	// their boards block whatever --wait says, as idle ranks do. Busy-
	// polling, each would keep a CPU (or, yielding, a place in its run
	// queue) from the pair, and the pair's cost would grow with N for
	// want of idle ranks (16 ranks on 2 CPUs, --wait spin: 200-580 µs a
	// message where the pair alone takes 7-16).
	waitsOnly := (cmd == "pingpong" || cmd == "stream") && job.Rank >= 2
	w, err := openWorld(cctx, f, job, jr.addr, jr.ln, strategies, re, waitsOnly)
	cancel()
	if err != nil {
		return err
	}
	w.engineName, w.engineCPU = je.name(), je.cpuField()
	w.bound = bound
	w.progressCPU = progressCPU
	defer w.close()
	// Noted before the boards close, which the other ranks may fail of.
	defer func() { jr.fail(rankError(job, err)) }()
	// First of all, what the boards counted: why a peer was declared
	// unreachable, what the rings dropped.
	defer func() {
		if err != nil || f.job.counters && job.Rank == 0 {
			w.printCounters(stderr)
		}
	}()
	w.pinSpinner(f, waitsOnly)
	cctx, cancel = context.WithTimeout(ctx, f.timeout)
	paths, err := w.paths(cctx)
	cancel()
	if err != nil {
		return err
	}
	cctx, cancel = context.WithTimeout(ctx, f.timeout)
	startup, err := w.gatherStartup(cctx)
	cancel()
	if err != nil {
		return err
	}
	if job.Rank == 0 {
		how := "mxbench --procs"
		if job.Launcher != how {
			how = "the " + job.Launcher + " launcher"
		}
		rep.header(fmt.Sprintf("mxbench %s: %d processes started by %s, rank 0 reaches rank 1 by %s (%s), %s%s%s%s%s%s",
			cmd, job.Size, how, w.hostPath(1), paths, f.describeWait(), syncNote(f), settleNote(f), je.describe(), progressNote(progressCPU), startup))
	}
	for k, strategy := range strategies {
		var err error
		switch cmd {
		case "alltoall":
			err = w.alltoall(ctx, f, k, strategy, sizes, rep)
		case "overlap":
			err = w.overlap(ctx, f, k, strategy, sizes, rep)
		default:
			err = w.pairBench(ctx, cmd, f, k, strategy, sizes, rep)
		}
		if err != nil {
			return err
		}
	}
	cctx, cancel = context.WithTimeout(ctx, f.timeout)
	defer cancel()
	return w.finish(cctx) // nobody closes its board while another still talks to it
}

// pairBench runs pingpong or stream between ranks 0 and 1 on board k; the
// other ranks wait at the barriers.
func (w *world) pairBench(ctx context.Context, cmd string, f *benchFlags, k int, strategy string, sizes []int, rep reporter) error {
	maxSize := slices.Max(sizes)
	var s *side
	switch w.job.Rank {
	case 0:
		s = newSide(w.eps[k], w.peers[k][1], maxSize, max(f.window, 1), f)
	case 1:
		s = newSide(w.eps[k], w.peers[k][0], maxSize, max(f.window, 1), f)
	}
	if s != nil {
		s.pinned = w.pinned // passes through the scheduler as an in-process side does
		if err := sharedBuffers(w.eps[k], strategy, s.sbufs); err != nil {
			return err
		}
	}
	reply := func(size int) int {
		if f.unidir {
			return 0
		}
		return size
	}
	if k == 0 && f.settle > 0 && s != nil {
		// The runtime settles once per process: the first board only.
		sctx, cancel := context.WithTimeout(ctx, f.timeout+f.settle)
		var err error
		if w.job.Rank == 0 {
			_, err = s.settle(sctx, f.settle)
		} else {
			err = s.settleReply(sctx)
		}
		cancel()
		if err != nil {
			return err
		}
	}
	for _, size := range sizes {
		iters := f.iterationsFor(size)
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		if err := w.barrier(sctx); err != nil {
			cancel()
			return err
		}
		before := w.eps[k].Counters()
		cpu0, t0 := cpuTime(), time.Now()
		pairCPU0, sw0 := cpuAndSwitches()
		var res result
		var err error
		switch {
		case w.job.Rank == 0 && cmd == "stream":
			res, err = s.stream(sctx, size, iters, f.warmup, f.window)
		case w.job.Rank == 0:
			res, err = s.pingpong(sctx, size, reply(size), iters, f.warmup, f.trials)
		case w.job.Rank == 1 && cmd == "stream":
			err = s.sink(sctx, size, f.warmup+iters, f.window)
		case w.job.Rank == 1:
			err = s.pong(sctx, size, reply(size), f.warmup+f.trials*iters)
		}
		if err != nil {
			cancel()
			return fmt.Errorf("%s of %s: %w", cmd, units.Format(int64(size)), err)
		}
		pairCPU, sw := cpuAndSwitches()
		// Rank 1 received the measured direction: its counters say how.
		m := strategyOf(countersSince(before, w.eps[k].Counters()), strategy, w.hostPathTo(k), size)
		if s != nil {
			m.CPU, m.Switches = int64(pairCPU-pairCPU0), sw-sw0
		}
		var wall time.Duration
		if w.job.Size > 2 {
			// The other ranks wait here until the pair is done, so
			// their CPU time covers its run: for rank 0's word alone,
			// not in a barrier, whose message to rank 0 would be sent
			// at once, in the middle of the run, and cost the pair a
			// message and its acks from every idle rank (the gather
			// below tells rank 0 that all are done).
			if _, err := w.bcast(sctx, nil); err != nil {
				cancel()
				return err
			}
			if s == nil {
				cpu, sw := cpuAndSwitches()
				m.CPU, m.Switches = int64(cpu-cpu0), sw-sw0
			}
			wall = time.Since(t0)
		}
		all, err := w.gatherMoved(sctx, m)
		cancel()
		if err != nil {
			return err
		}
		if w.job.Rank == 0 {
			res.Procs, res.Strategy, res.StrategyAsked, res.Fallbacks = w.job.Size, all[1].Strategy, strategy, all[1].Fallbacks
			res.IdleCPU, res.IdleSwitches = idleCPU(all, wall), idleSwitches(all)
			res.PairCPUUS, res.PairSwitches = pairCost(all, pairMessages(cmd, f, size, iters))
			res.Engine, res.EngineCPU = w.engineName, w.engineCPU
			rep.row(res)
		}
	}
	return nil
}

// idleCPU is the CPUs ranks 2 and up used over wall, from their reports
// (moved.CPU); 0 in a job of two.
func idleCPU(all []moved, wall time.Duration) float64 {
	if len(all) <= 2 || wall <= 0 {
		return 0
	}
	var sum int64
	for _, m := range all[2:] {
		sum += m.CPU
	}
	return float64(sum) / float64(wall)
}

// idleSwitches is the mean of the context switches of ranks 2 and up
// while the pair ran, from their reports (moved.Switches); 0 in a job of
// two.
func idleSwitches(all []moved) float64 {
	if len(all) <= 2 {
		return 0
	}
	var sum int64
	for _, m := range all[2:] {
		sum += m.Switches
	}
	return float64(sum) / float64(len(all)-2)
}

// bindSlot is the CPU, counted among the ncpus this process may use, that
// --bind gives rank of a job of size ranks running cmd: the rank modulo
// ncpus, as mpirun --bind-to core places ranks, except that a pingpong or
// stream, where ranks 0 and 1 measure and the others wait, keeps the
// first two CPUs for the pair when the host has more and places the
// waiting ranks round robin on the rest. Either way ranks 0 and 1 sit on
// the same two CPUs whatever the job's size, so that runs at different N
// compare like for like; on a host of two CPUs the waiting ranks share
// them with the pair.
func bindSlot(cmd string, rank, size, ncpus int) int {
	if (cmd == "pingpong" || cmd == "stream") && size > 2 && ncpus > 2 && rank >= 2 {
		return 2 + (rank-2)%(ncpus-2)
	}
	return rank
}

// pairMessages is how many messages ranks 0 and 1 moved in one size of
// cmd: every round trip of a pingpong (warmup and trials) is two, a
// reply of 0 bytes (--unidirectional) among them; a stream's messages
// are one way.
func pairMessages(cmd string, f *benchFlags, size, iters int) int {
	if cmd == "stream" {
		return f.warmup + iters
	}
	return 2 * (f.warmup + max(f.trials, 1)*iters)
}

// pairCost is the CPU time (µs) and the context switches of ranks 0 and 1
// together per message, from their reports (moved.CPU, moved.Switches).
func pairCost(all []moved, msgs int) (cpuUS, switches float64) {
	if len(all) < 2 || msgs <= 0 {
		return 0, 0
	}
	cpu := all[0].CPU + all[1].CPU
	sw := all[0].Switches + all[1].Switches
	return float64(cpu) / 1e3 / float64(msgs), float64(sw) / float64(msgs)
}

// hostPathTo reports whether this rank reaches its partner (rank 1 for
// rank 0, else rank 0) on board k through shared memory.
func (w *world) hostPathTo(k int) bool {
	p := 0
	if w.job.Rank == 0 {
		p = 1
	}
	return w.boards[k].HostPath(w.nics[k][p])
}

// gatherMoved collects every rank's account of how its messages moved.
func (w *world) gatherMoved(ctx context.Context, m moved) ([]moved, error) {
	b, _ := json.Marshal(m)
	recs, err := w.gather(ctx, b)
	if err != nil || w.job.Rank != 0 {
		return nil, err
	}
	out := make([]moved, len(recs))
	for r, rec := range recs {
		if err := json.Unmarshal(rec, &out[r]); err != nil {
			return nil, fmt.Errorf("rank %d's report: %v", r, err)
		}
	}
	return out, nil
}

// jobReporter returns the reporter of a job's rank: rank 0's table or JSON,
// and nothing for the others.
func jobReporter(job launch.Job, rep reporter) reporter {
	if job.Rank != 0 {
		return silent{}
	}
	return rep
}

// silent is the reporter of ranks other than 0.
type silent struct{}

func (silent) header(string) {}
func (silent) row(result)    {}

func runAlltoall(stdout, stderr io.Writer, args []string) error {
	return runBench("alltoall", stdout, stderr, args)
}

func runOverlap(stdout, stderr io.Writer, args []string) error {
	return runBench("overlap", stdout, stderr, args)
}

// pinSpinner pins the calling goroutine, the rank's, to its thread and
// the thread to the rank's CPU (pinThread) when the rank busy-polls for
// the pair: not when its waits only wait (waitsOnly: ranks 2 and up of a
// pingpong or stream), nor when its process may run on one CPU only
// (--procs bound it there). The rank's pingpong sides pass through the
// scheduler on that thread (world.pinned).
func (w *world) pinSpinner(f *benchFlags, waitsOnly bool) {
	if f.spin() && !waitsOnly && !boundToOne() {
		w.pinned = pinThread(w.job.Rank)
	}
}

// boundToOne reports whether this process may run on one CPU only: bound
// by --procs (bindProcess) or by the launcher that started it. Its
// busy-polling goroutine then stays unlocked (pin is for a process that
// may run on several): every thread of the process runs on that CPU
// anyway, and a goroutine locked to its thread costs the Go runtime a
// hand-over at each of sysmon's preemptions of a goroutine that ran 10 ms
// (every 10-20 ms while it spins): the thread's P goes to another thread,
// which runs what else is runnable (mx's receive loop, its timers) and
// hands the P back, two futex wake-ups on the rank's one CPU, where an
// unlocked goroutine's preemption is a goroutine switch on its own thread
// (docs/message-cost.md, "The mean, the median and the host's two states").
func boundToOne() bool {
	cpus, err := allowedCPUs()
	return err == nil && len(cpus) == 1
}
