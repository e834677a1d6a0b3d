package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"syscall"
	"time"

	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/fault"
)

func runPingPong(stdout, stderr io.Writer, args []string) error {
	return runBench("pingpong", stdout, stderr, args)
}

func runStream(stdout, stderr io.Writer, args []string) error {
	return runBench("stream", stdout, stderr, args)
}

// runBench parses the flags of a measuring subcommand (pingpong, stream,
// alltoall, overlap) and runs every size: as a job of N processes, or for
// pingpong and stream also in this process or against a server.
func runBench(cmd string, stdout, stderr io.Writer, args []string) (err error) {
	var f benchFlags
	fs := newFlags(cmd, stderr)
	f.register(fs, cmd)
	if err := parse(stdout, cmd, fs, args); err != nil {
		return err
	}
	if f.pairInProcess(cmd) {
		f.chooseTransport(fs, stderr)
		f.faults.noteGiven(fs)
		f.sleepWhenBlocking(cmd)
	}
	if cmd == "alltoall" {
		f.alltoallFlags.noteWarmup(fs)
	}
	sizes, err := f.validate(cmd)
	if err != nil {
		return err
	}
	job, isJob, err := f.jobMode(cmd, fs)
	if err != nil {
		return err
	}
	f.chooseWait(cmd, job, isJob)
	if isJob && f.interleave {
		return usagef(cmd, "--interleave runs both sides in this process: drop --procs (or the launcher)")
	}
	if cmd == "alltoall" && isJob && job.OneNode && job.Rank == 0 {
		if err := alltoallFits(cmd, job.Size, slices.Max(sizes), f.verify); err != nil {
			return err
		}
	}
	w, _ := wireNamed(f.transport) // validate checked the name
	if f.unavailable != "" && !isJob {
		return errors.New(f.unavailable)
	}
	if isJob && job.Rank != 0 {
		f.plot = "" // only rank 0 reports
	}
	ctx := context.Background()
	var rep reporter
	if f.jsonOut {
		rep = &jsonReporter{enc: json.NewEncoder(stdout), rec: jsonRecord{Schema: schemaFor(cmd), Run: cli.NewMeta("mxbench"),
			Command: cmd, Transport: f.transport, Peer: f.peer, Wait: f.wait, WaitWhy: f.waitWhy, Sync: f.sync, Verify: f.verify}}
	} else {
		rep = &tableReporter{w: stdout, cmd: cmd, raw: w.raw != nil && (f.baseline || f.interleave)}
	}
	if (isJob || cmd == "overlap") && !f.jsonOut {
		rep = &jobTable{w: stdout, cmd: cmd, own: cmd == "overlap" && !isJob && !f.spin()}
	}
	prog := cli.NewProgress(stderr, "mxbench")
	defer prog.Stop()
	rep = &recorder{reporter: rep, prog: prog}
	defer func() {
		if err == nil && f.plot != "" {
			err = rep.(*recorder).plot(cmd, f.plot, f.transport, stdout, f.jsonOut)
		}
	}()
	if isJob {
		return runJobCommand(cmd, &f, job, sizes, append([]string{cmd}, args...), jobReporter(job, rep), stderr)
	}
	if f.peer != "" {
		return runClient(ctx, cmd, &f, sizes, rep, stderr)
	}
	var raw, udpFirst map[int]*baselineResult
	if w.setup != nil {
		if err := w.setup(&f); err != nil {
			return err
		}
		defer w.cleanup(&f)
		// An interrupted run must not leave what setup made behind.
		// signal.Stop does not close stop: done ends the watcher when
		// the run returns, so runs in one process leave none behind.
		// A hang-up, and a closed output pipe (`mxbench ... | head`,
		// which would otherwise kill the process on its next write),
		// clean up too, exiting as the shell reports each signal.
		stop, done := make(chan os.Signal, 1), make(chan struct{})
		signal.Notify(stop, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
		defer func() {
			signal.Stop(stop)
			close(done)
		}()
		go func() {
			select {
			case sig := <-stop:
				w.cleanup(&f)
				os.Exit(128 + int(sig.(syscall.Signal)))
			case <-done:
			}
		}()
	}
	if w.raw != nil && f.baseline {
		// Both baselines first: UDP while nothing of mx sits on the wire
		// (an XDP program in the path slows the kernel's receive side),
		// then the raw exchange, before the mx boards take the wire.
		prog.Set("%s: the UDP baseline of %d sizes", cmd, len(sizes))
		if udpFirst, err = measureUDPBaselines(cmd, &f, sizes); err != nil {
			return err
		}
		if !f.interleave {
			prog.Set("%s: the raw %s exchange of %d sizes", cmd, w.name, len(sizes))
			if raw, err = w.raw(&f, cmd, sizes); err != nil {
				return err
			}
		}
	}
	var beside *rawPair
	if f.interleave {
		prog.Set("%s: the raw %s exchange beside mx's wire", cmd, w.name)
		var closeBeside func()
		if beside, closeBeside, err = w.rawBeside(&f, slices.Max(sizes)); err != nil {
			return fmt.Errorf("--interleave: %w", err)
		}
		defer closeBeside()
	}
	f.ownThread = cmd == "overlap" && !f.spin()
	p, err := f.newPair(ctx)
	if err != nil {
		return fmt.Errorf("%s over %s: %w", cmd, f.transport, err)
	}
	defer p.close()
	if cmd == "overlap" {
		return overlapLocal(ctx, &f, p, sizes, rep)
	}
	rep.header(fmt.Sprintf("mxbench %s: %s, both sides in this process, %s%s%s", cmd, p.what, f.describeWait(), syncNote(&f), settleNote(&f)))
	maxSize := slices.Max(sizes) // validate refuses an empty list
	window := max(f.window, 1)
	var ub *udpBaseline
	if f.baseline && udpFirst == nil {
		if ub, err = newUDPBaseline(&f, maxSize); err != nil {
			return fmt.Errorf("UDP baseline: %w", err)
		}
		defer ub.close()
	}
	sa := newSide(p.a, p.aAddr, maxSize, window, &f)
	sb := newSide(p.b, p.bAddr, maxSize, window, &f)
	if f.settle > 0 {
		prog.Set("%s: settling for %v", cmd, f.settle)
		sctx, cancel := context.WithTimeout(ctx, f.timeout+f.settle)
		err := settleLocal(sctx, &f, sa, sb)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("%w (the settling round trips took longer than --settle %v and --timeout %v allow; raise --timeout, or --settle 0 to skip them)", err, f.settle, f.timeout)
		}
		if err != nil {
			return err
		}
	}
	if f.cpuprofile != "" {
		stop, serr := startCPUProfile(f.cpuprofile)
		if serr != nil {
			return serr
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	if f.trace != "" {
		stop, serr := startTrace(f.trace)
		if serr != nil {
			return serr
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	for i, size := range sizes {
		iters := f.iterationsFor(size)
		prog.Set("%s %s [%d/%d]: %d iterations", cmd, units.Format(int64(size)), i+1, len(sizes), iters)
		sctx, cancel := context.WithTimeout(ctx, f.timeout)
		before := []mx.Counters{p.a.Counters(), p.b.Counters()}
		copiesBefore := [2]mx.CopyStats{p.a.CopyStats(), p.b.CopyStats()}
		var wireBefore fault.Counts
		if p.wire != nil {
			wireBefore = p.wire()
		}
		waitsBefore := [2]mx.WaitStats{p.a.Board().WaitStats(), p.b.Board().WaitStats()}
		var res result
		if beside != nil {
			res, err = measureInterleaved(sctx, &f, sa, sb, beside, size, iters)
		} else {
			res, err = measureLocal(sctx, cmd, &f, sa, sb, size, iters, f.warmup, f.trials)
		}
		cancel()
		if f.cpuprofile != "" {
			printWaits(stderr, size, iters, waitsBefore, [2]mx.WaitStats{p.a.Board().WaitStats(), p.b.Board().WaitStats()})
		}
		res.Recovery = recoveryBetween(before, []mx.Counters{p.a.Counters(), p.b.Counters()})
		res.Copies = copiesBetween(copiesBefore, [2]mx.CopyStats{p.a.CopyStats(), p.b.CopyStats()})
		if p.wire != nil {
			res.Faults = faultsBetween(f.faults, wireBefore, p.wire())
		}
		if err != nil {
			rep.row(res)
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("%s of %s: %w (the size took longer than --timeout %v allows; raise --timeout or lower --iterations)", cmd, units.Format(int64(size)), err, f.timeout)
			}
			return fmt.Errorf("%s of %s: %w", cmd, units.Format(int64(size)), err)
		}
		if ub != nil {
			res.Baseline, err = ub.measure(cmd, &f, size, iters)
			if err != nil {
				return fmt.Errorf("UDP baseline of %s: %w", units.Format(int64(size)), err)
			}
		}
		if udpFirst != nil {
			res.Baseline = udpFirst[size]
		}
		if res.Raw == nil && raw != nil {
			res.Raw = raw[size]
		}
		rep.row(res)
	}
	if p.wire != nil && !f.jsonOut {
		st := p.wire()
		fmt.Fprintf(stdout, "# wire: %d frames sent, %d lost, %d duplicated, %d reordered, %d corrupted; every message arrived%s\n",
			st.Frames, st.Dropped, st.Duplicated, st.Reordered, st.Corrupted, verifiedNote(&f))
	}
	return nil
}

func syncNote(f *benchFlags) string {
	if f.sync {
		return ", synchronous sends"
	}
	return ""
}

// settleNote says in the header how long the run settled (--settle).
func settleNote(f *benchFlags) string {
	if f.settle > 0 {
		return fmt.Sprintf(", %v of round trips before the first size", f.settle)
	}
	return ""
}

func verifiedNote(f *benchFlags) string {
	if f.verify {
		return " and every byte was verified"
	}
	return ""
}

// settleLocal makes the settling round trips (--settle) with both sides
// in this process, each pinned as measureLocal pins them.
func settleLocal(ctx context.Context, f *benchFlags, sa, sb *side) error {
	errc := make(chan error, 1)
	go func() {
		f.place(sb, 1) // unlocked only for its passes (reschedule): the pinned thread retires with the goroutine
		errc <- sb.settleReply(ctx)
	}()
	errA := make(chan error, 1)
	go func() {
		f.place(sa, 0)
		_, err := sa.settle(ctx, f.settle)
		errA <- err
	}()
	if err := <-errA; err != nil {
		// The responder may still wait for round trips that will not come.
		select {
		case <-errc:
		case <-time.After(time.Second):
		}
		return err
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("responder: %w", err)
	}
	return nil
}

// measureLocal runs one size with both sides in this process: b's side in
// its own goroutine, pinned to another CPU; a pingpong makes warmup round
// trips, then trials timed trials of iters.
func measureLocal(ctx context.Context, cmd string, f *benchFlags, sa, sb *side, size, iters, warmup, trials int) (result, error) {
	errc := make(chan error, 1)
	reply := size
	if f.unidir {
		reply = 0
	}
	go func() {
		f.place(sb, 1) // unlocked only for its passes (reschedule): the pinned thread retires with the goroutine
		if cmd == "stream" {
			errc <- sb.sink(ctx, size, warmup+iters, f.window)
		} else {
			errc <- sb.pong(ctx, size, reply, warmup+trials*iters)
		}
	}()
	resc := make(chan result, 1)
	errA := make(chan error, 1)
	go func() {
		f.place(sa, 0)
		var res result
		var err error
		if cmd == "stream" {
			res, err = sa.stream(ctx, size, iters, warmup, f.window)
		} else {
			res, err = sa.pingpong(ctx, size, reply, iters, warmup, trials)
		}
		resc <- res
		errA <- err
	}()
	res := <-resc
	err := <-errA
	if err != nil {
		// The responder may still wait for messages that will not come;
		// what it saw, when it failed too (a receive that failed, bytes
		// that did not verify), goes beside the initiator's error.
		select {
		case rerr := <-errc:
			if rerr != nil {
				err = errors.Join(err, fmt.Errorf("responder: %w", rerr))
			}
		case <-time.After(time.Second):
		}
		return res, err
	}
	if err := <-errc; err != nil {
		return res, fmt.Errorf("responder: %w", err)
	}
	return res, nil
}

// udpBaseline is the plain UDP-socket exchange measured beside mx: two
// sockets in this process, on 127.0.0.1 or across the run's veth pair.
type udpBaseline struct {
	a, b transport.Transport
	raw  *rawPair
}

func newUDPBaseline(f *benchFlags, maxSize int) (*udpBaseline, error) {
	var a, b transport.Transport
	var err error
	if w, _ := wireNamed(f.transport); w.udpPair != nil {
		a, b, err = w.udpPair(f)
	} else {
		a, b, err = udpBaselinePair()
	}
	if err != nil {
		return nil, err
	}
	raw, err := newRawPair(a, b, maxSize, f.spin())
	if raw != nil {
		raw.limit = f.timeout
	}
	if err != nil {
		a.Close()
		b.Close()
		return nil, err
	}
	return &udpBaseline{a: a, b: b, raw: raw}, nil
}

// measureUDPBaselines measures the UDP baseline of every size.
func measureUDPBaselines(cmd string, f *benchFlags, sizes []int) (map[int]*baselineResult, error) {
	ub, err := newUDPBaseline(f, slices.Max(sizes))
	if err != nil {
		return nil, fmt.Errorf("UDP baseline: %w", err)
	}
	defer ub.close()
	out := map[int]*baselineResult{}
	for _, size := range sizes {
		if out[size], err = ub.measure(cmd, f, size, f.iterationsFor(size)); err != nil {
			return nil, fmt.Errorf("UDP baseline of %s: %w", units.Format(int64(size)), err)
		}
	}
	return out, nil
}

func (u *udpBaseline) close() {
	u.a.Close()
	u.b.Close()
}

// measure runs one size.
func (u *udpBaseline) measure(cmd string, f *benchFlags, size, iters int) (*baselineResult, error) {
	var r rawResult
	var err error
	if cmd == "stream" {
		r, err = u.raw.stream(size, iters, f.warmup)
	} else {
		r, err = bestRaw(f.trials, func() (rawResult, error) { return u.raw.pingpong(size, iters, f.warmup, f.unidir) })
	}
	if err != nil {
		return nil, err
	}
	return toBaseline("udp", r, cmd), nil
}

func toBaseline(name string, r rawResult, cmd string) *baselineResult {
	b := &baselineResult{Transport: name, LatencyUS: r.OneWay.Seconds() * 1e6, MBPerS: r.MBPerS, Errors: r.Errors,
		LatencyP50US: r.P50.Seconds() * 1e6, LatencyP10US: r.P10.Seconds() * 1e6}
	if cmd == "stream" && r.OneWay > 0 {
		b.MsgPerS = 1 / r.OneWay.Seconds()
	}
	return b
}

// startCPUProfile starts the runtime's CPU profile into path and returns
// what stops it and closes the file. The UDP baseline of each size, which
// runs between the mx sizes, is in the profile too (--baseline=false
// leaves it out).
func startCPUProfile(path string) (func() error, error) {
	return startRecording("--cpuprofile", path, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// startTrace starts the runtime's execution trace into path and returns
// what stops it and closes the file.
func startTrace(path string) (func() error, error) {
	return startRecording("--trace", path, trace.Start, trace.Stop)
}

// startRecording creates path and starts a recording into it with start;
// the function it returns stops the recording and closes the file. Errors
// name the flag that asked for it.
func startRecording(flag, path string, start func(io.Writer) error, stop func()) (func() error, error) {
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := start(out); err != nil {
		out.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return func() error {
		stop()
		return out.Close()
	}, nil
}

// printWaits says, for a profiled run, how the two boards' waits went per
// message of a size (mx.WaitStats): polled or slept, the waiters'
// sched_yield calls, the progress goroutines' receives and yields.
func printWaits(w io.Writer, size, iters int, before, after [2]mx.WaitStats) {
	var d mx.WaitStats
	for i := range 2 {
		a, b := after[i], before[i]
		d.Polled += a.Polled - b.Polled
		d.Slept += a.Slept - b.Slept
		d.Yields += a.Yields - b.Yields
		d.LoopRecvs += a.LoopRecvs - b.LoopRecvs
		d.LoopYields += a.LoopYields - b.LoopYields
		d.HandOvers += a.HandOvers - b.HandOvers
		d.Kernel += a.Kernel - b.Kernel
	}
	per := func(n uint64) float64 { return float64(n) / float64(max(iters, 1)) }
	stderrf(w, "%s, per iteration (both boards): %.2f waits polled, %.2f slept, %.2f in the kernel, %.2f sched_yields, %.2f progress receives, %.2f progress yields, %.2f hand-overs",
		units.Format(int64(size)), per(d.Polled), per(d.Slept), per(d.Kernel), per(d.Yields), per(d.LoopRecvs), per(d.LoopYields), per(d.HandOvers))
}

// stderrf prints a progress note.
func stderrf(w io.Writer, format string, args ...any) {
	if w == nil {
		w = os.Stderr
	}
	fmt.Fprintf(w, "mxbench: "+format+"\n", args...)
}
