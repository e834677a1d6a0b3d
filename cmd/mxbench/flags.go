package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/internal/chart"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport/fault"
)

// benchFlags is what a measuring subcommand (pingpong, stream, alltoall,
// overlap) reads when it runs. It is built of parts, each declaring its
// own flags: commonFlags every one of them honours, and the parts that only
// some subcommands read. register declares the parts a subcommand honours
// and no others, so its -h lists exactly its flags and a flag it would
// ignore is refused (unknownFlag names the subcommands that have it); the
// parts it does not declare stay zero, and its code paths never read them.
type benchFlags struct {
	commonFlags
	pairFlags     // pingpong, stream
	sendFlags     // pingpong, stream, alltoall
	pingpongFlags // pingpong
	streamFlags   // stream
	alltoallFlags // alltoall
	overlapFlags  // overlap
}

// commonFlags are the flags every measuring subcommand honours: the sizes
// and iterations, how waits wait, buffers and checks, the board's options,
// the report, and running as a job of N processes.
type commonFlags struct {
	listen     string
	key        uint
	sizes      units.List
	start, end units.Size
	multiplier int
	iterations int
	warmup     int
	aligned    bool
	// noChecksum and noZeroCopy are the board options of the same names
	// (docs/zero-copy.md).
	noChecksum, noZeroCopy bool
	verify                 bool
	// wait is --wait: spin or block once chooseWait has resolved auto,
	// and waitWhy says why that one runs (the header and the JSON).
	wait, waitWhy string
	// schedBlocking is whether alltoall's auto schedule follows the
	// rule of blocking ranks, alike on every rank (agreedBlocking).
	schedBlocking bool
	// yield is the board's yield policy (mx.BoardOptions.Yield), by name.
	yield   string
	jsonOut bool
	plot    string
	rndv    units.Size
	timeout time.Duration
	job     jobFlags
}

// pairFlags are the flags of the two-endpoint benchmarks, pingpong and
// stream: the wire between the endpoints (in this process, or toward an
// mxbench serve), the baselines measured beside mx, the fault model, and
// the runtime's settling. A job's ranks always talk over udp boards, and
// alltoall and overlap run only as jobs.
type pairFlags struct {
	transport string
	peer      string
	remoteEP  int
	baseline  bool
	settle    time.Duration
	// cpuprofile is where the measured sizes' CPU profile goes.
	cpuprofile string
	// trace is where the measured sizes' execution trace goes.
	trace string
	// unavailable says why the chosen wire cannot run in this process
	// (chooseTransport), when it is not falling back.
	unavailable string
	faults      faultFlags
	xdp         xdpFlags
	nic         nicFlags
	usb         usbFlags
	// queues is --queues: serve each board's NIC queues from queued
	// boards (mx.NewQueuedBoard), 0 for one board on one queue; bindApp
	// is --bind-app (queues.go).
	queues  int
	bindApp bool
}

// sendFlags choose how the measured messages are sent: pingpong, stream
// and alltoall. overlap posts EMP's sends and its exchange as the papers
// do.
type sendFlags struct {
	sync bool
}

// pingpongFlags are pingpong's own flags.
type pingpongFlags struct {
	trials int
	unidir bool
	// interleave is --interleave (interleave.go).
	interleave bool
}

// streamFlags are stream's own flags.
type streamFlags struct {
	window int
}

// alltoallFlags are alltoall's own flags.
type alltoallFlags struct {
	schedule string
	// warmupBySize: --warmup was not given, so each size warms up for
	// alltoallWarmup's rounds rather than --warmup's 10.
	warmupBySize bool
}

// overlapFlags are overlap's own flags.
type overlapFlags struct {
	// progressCPU is --progress-cpu (progress.go), read only when given.
	progressCPU int
	// ownThread: side a's board runs its progress goroutine on a thread
	// of its own (mx.BoardOptions.ProgressThread), whose CPU clock
	// overlap over --transport reads (own_availability). Only with --wait
	// block: a busy-polling or yielding goroutine locked to a thread hands
	// its processor to another thread and back on every yield, which
	// would change what the run measures.
	ownThread bool
}

// faultFlags configure the seeded fault model (package transport/fault):
// the loopback wire injects the faults itself; on every other wire each
// board's transport is wrapped with them.
type faultFlags struct {
	loss, reorder, dup, corrupt float64
	seed                        int64
	// given is set when a fault flag was given, even at 0: the model is
	// then in the path, with the board options of a lossy run, so a
	// `--loss 0` run is the like-for-like lossless reference.
	given bool
}

// any reports whether the fault model is in the path.
func (f faultFlags) any() bool {
	return f.given || f.loss > 0 || f.reorder > 0 || f.dup > 0 || f.corrupt > 0
}

// noteGiven records whether a fault flag was on the command line.
func (f *faultFlags) noteGiven(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "loss", "reorder", "dup", "corrupt":
			f.given = true
		}
	})
}

// options returns the fault model's options with the given seed.
func (f faultFlags) options(seed int64) fault.Options {
	return fault.Options{Loss: f.loss, Reorder: f.reorder, Duplicate: f.dup, Corrupt: f.corrupt, Seed: seed}
}

// describe is the faults' part of the report header.
func (f faultFlags) describe() string {
	return fmt.Sprintf("faults: loss %s, reorder %s, dup %s, corrupt %s, seed %d",
		trimZeros(f.loss), trimZeros(f.reorder), trimZeros(f.dup), trimZeros(f.corrupt), f.seed)
}

// defaultIterations is omx_perf's default round-trip count per size.
const defaultIterations = 1000

// maxBytesPerSize bounds the default iteration count for large sizes, so a
// 0..4 MiB sweep ends in seconds: each size moves at most this many bytes
// one way unless --iterations is given.
const maxBytesPerSize = 256 << 20

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// register declares on fs the flags cmd honours, and only those.
func (f *benchFlags) register(fs *flag.FlagSet, cmd string) {
	f.commonFlags.register(fs)
	switch cmd {
	case "pingpong":
		f.pairFlags.register(fs)
		f.sendFlags.register(fs)
		f.pingpongFlags.register(fs)
	case "stream":
		f.pairFlags.register(fs)
		f.sendFlags.register(fs)
		f.streamFlags.register(fs)
	case "alltoall":
		f.sendFlags.register(fs)
		f.alltoallFlags.register(fs)
	case "overlap":
		f.overlapFlags.register(fs)
		f.pairFlags.registerWires(fs, "", overlapWireHelp())
	}
}

func (f *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "", "local IP:PORT for the udp transport (default: 127.0.0.1:0, the address that routes to --peer, or in a job across nodes an address of this node the others reach: the route to another node, hydra's -iface, the node's name, the default route)")
	fs.UintVar(&f.key, "key", 0x6d786265, "the 32-bit endpoint key both sides use")
	fs.Var(&f.sizes, "sizes", "comma-separated message sizes with K/M suffixes, e.g. 0,8,1K,64K,4M (overrides --start/--end)")
	f.end.N = 4 << 20
	fs.Var(&f.start, "start", "first size of the sweep (omx_perf -S)")
	fs.Var(&f.end, "end", "last size of the sweep (omx_perf -E)")
	fs.IntVar(&f.multiplier, "multiplier", 2, "size multiplier of the sweep (omx_perf -M)")
	fs.IntVar(&f.iterations, "iterations", 0, fmt.Sprintf("measured iterations per size (default %d, fewer above %s so each size moves at most that much)", defaultIterations, units.Format(maxBytesPerSize/defaultIterations)))
	fs.IntVar(&f.warmup, "warmup", 10, "unmeasured iterations before each size (omx_perf -W)")
	fs.BoolVar(&f.aligned, "aligned", false, "page-aligned buffers")
	fs.BoolVar(&f.noChecksum, "no-checksum", false, "no CRC-32C frame trailer (for wires that check frames themselves, as an Ethernet NIC's FCS does): large messages then go out in place over --transport nic")
	fs.BoolVar(&f.noZeroCopy, "no-zero-copy", false, "copy every pull reply, even where the transport could send it in place (the copying path, to compare)")
	fs.BoolVar(&f.verify, "verify", false, "fill every message with a pattern and check every byte received")
	fs.StringVar(&f.wait, "wait", waitAuto, "spin (busy-poll the transport), block (sleep until woken), or auto: block in a job whose polling ranks on this host outnumber the CPUs this process may run on, its affinity mask capped by its cgroup's CPU quota (alltoall's and overlap's ranks all poll, a pingpong's or stream's ranks 0 and 1), spin otherwise (the ranks --procs starts take rank 0's choice); the header and the JSON's wait_why say which ran and why")
	fs.StringVar(&f.yield, "yield", "auto", "when a waiter gives its CPU away with sched_yield from its first empty look, and a blocking one polls so for the board's SpinMax (1ms), or as its waits show their messages need up to SpinMax times the awake ranks a CPU has, before it sleeps (one whose messages came later than that looks once and sleeps), as Open MPI's ranks do when oversubscribed: auto (when the processes sharing rings that are not blocked in a wait outnumber the CPUs they may run on), always or never (spin first; $GOMX_YIELD sets the same)")
	fs.BoolVar(&f.jsonOut, "json", false, "one JSON object per size instead of a table")
	fs.Var(&f.rndv, "rndv-threshold", "largest eagerly sent message (default: the board's, 32K)")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "bound on every wait: connecting (and resolving --peer), and each size")
	fs.StringVar(&f.plot, "plot", "", "also draw latency and throughput against size, mx and its baselines, into `FILE`.svg or .png")
	f.registerJob(fs)
}

func (f *pairFlags) register(fs *flag.FlagSet) {
	f.registerWires(fs, envOr("MXBENCH_TRANSPORT", "loopback"), wireHelp())
	fs.StringVar(&f.peer, "peer", "", "HOST:PORT of an mxbench serve (udp); empty runs both sides in this process")
	fs.IntVar(&f.remoteEP, "remote-endpoint", 0, "the server's endpoint id")
	fs.DurationVar(&f.settle, "settle", defaultSettle, "unmeasured round trips for this long before the first size, until the Go runtime's monitor thread has backed off (0: none; both sides in this process or --procs)")
	fs.BoolVar(&f.baseline, "baseline", true, "also measure a plain UDP-socket exchange of the same sizes")
	fs.StringVar(&f.trace, "trace", "", "write an execution trace of the measured sizes (runtime/trace) to `FILE`, for go tool trace: which goroutines ran, waited for a CPU, blocked or slept, and when")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured sizes (both sides in this process; --baseline=false keeps the UDP baseline out) to `FILE`, for go tool pprof, and print per size how the boards' waits went per iteration")
	fs.Float64Var(&f.faults.loss, "loss", 0, "fraction of frames lost, on every --transport (see --seed)")
	fs.Float64Var(&f.faults.reorder, "reorder", 0, "fraction of frames swapped with the next one to the same board")
	fs.Float64Var(&f.faults.dup, "dup", 0, "fraction of frames duplicated")
	fs.Float64Var(&f.faults.corrupt, "corrupt", 0, "fraction of frames with a bit flipped")
	fs.Int64Var(&f.faults.seed, "seed", 1, "fault PRNG seed: the same seed loses the same frames; off the loopback wire, the first board's sends use it and the second's (or, with --peer, this board's receives) use seed+1")
	fs.IntVar(&f.queues, "queues", 0, "nic, xdp: open each board as a queued board of N queues (mx.NewQueuedBoard): UDP framing, one progress thread per queue, each endpoint's port steered to its queue by the NIC's rule where it has one (--nic model-82599), by software hand-over otherwise; 0: one board on one queue")
	fs.BoolVar(&f.bindApp, "bind-app", false, "with --queues: bind each queue's progress thread to a CPU (the two boards' queue q to different CPUs) and run each side's goroutine on the CPU serving its endpoint (mx.Endpoint.CPUs), as Open-MX binds a process to its queue's core")
}

// registerWires declares --transport, def its default and help its usage,
// and every wire's own flags (--nic, --iface, --usb ...): what chooses
// and opens the two transports of a run in this process (pair.go,
// wires.go), for pingpong and stream, and for overlap run in this process.
func (f *pairFlags) registerWires(fs *flag.FlagSet, def, help string) {
	fs.StringVar(&f.transport, "transport", def, help)
	f.xdp.register(fs)
	f.nic.register(fs)
	f.usb.register(fs)
}

// overlapWireHelp is the usage of overlap's --transport.
func overlapWireHelp() string {
	return "run ranks 0 and 1 as two boards of this process over this wire, " + wireNames() +
		" (e.g. nic with --nic model-82599 --nic-place: large messages placed by the NICs), instead of as two processes of a job (the default; then rank 0 reaches rank 1 by the host's paths)"
}

func (f *sendFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.sync, "sync", false, "synchronous sends (issend: completes when the receiver has the data)")
}

func (f *pingpongFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.trials, "trials", 1, "pingpong: timed trials of --iterations round trips per size, back to back; a row reports its best trial, as NetPIPE reports the fastest of its trials (3 in Debian's build; the UDP and raw baselines too)")
	fs.BoolVar(&f.unidir, "unidirectional", false, "the server answers with 0 bytes (omx_perf -U)")
	fs.BoolVar(&f.interleave, "interleave", false, "pingpong over xdp: alternate --trials trials of the raw AF_XDP exchange (on a second veth pair) and of mx, each after its own --warmup, and report the median of the pairs' differences of their median one-way times with its confidence interval (`paired` in --json; --baseline=false then leaves out only the UDP baseline): resolves what a loaded host's changes of state hide between a raw run and an mx run")
}

func (f *streamFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.window, "window", 16, "messages in flight")
}

func (f *alltoallFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.schedule, "schedule", schedAuto, "alltoall's schedule: "+joinOr(schedules)+
		" (auto: bruck for 256 B or less among 8 ranks or more, linear up to 32 KiB, pairwise above, as MPICH chooses, when every rank spins; linear but for 256 B or less among 16 ranks or more, as Open MPI chooses, when they block or when an outside launcher's ranks each choose their --wait auto, so that all run the same schedule)")
	if w := fs.Lookup("warmup"); w != nil {
		w.Usage = fmt.Sprintf("untimed rounds before each size's timed ones, the same for every size (default: as many as the size's default timed rounds, at least %d; see NOTES)", alltoallMinWarmup)
	}
}

// noteWarmup records whether --warmup was on the command line: without
// it each size warms up by alltoallWarmup.
func (f *alltoallFlags) noteWarmup(fs *flag.FlagSet) {
	f.warmupBySize = true
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "warmup" {
			f.warmupBySize = false
		}
	})
}

// alltoallMinWarmup is the fewest untimed rounds alltoall runs before a
// size's timed ones when --warmup is not given.
const alltoallMinWarmup = 20

// alltoallWarmup is the untimed rounds before the timed rounds of an
// alltoall whose ranks each send bytes per round: --warmup when given,
// else as many as the default timed rounds (defaultRounds), at least
// alltoallMinWarmup: many rounds for small blocks, a few for large ones,
// as the OSU latency test skips 100 iterations of small messages and 10
// above 8 KiB. mx's first rounds after the job's set-up are slower than
// the rest (the Go runtime's monitor polls every 20 µs until it has found
// nothing to do 50 times, which on a shared CPU takes milliseconds; the
// first large rounds set up lanes and copies): among 4 ranks on 2 shared
// CPUs, 400-1,200 rounds of 8 B, 100 of 4 KiB, 30-40 of 64 KiB and 10 of
// 1 MiB (docs/alltoall.md).
func (f *benchFlags) alltoallWarmup(bytes int) int {
	if !f.warmupBySize {
		return f.warmup
	}
	return max(alltoallMinWarmup, defaultRounds(bytes))
}

func (f *overlapFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.progressCPU, "progress-cpu", 0, "overlap: while rank 0 computes, run its other threads (mx's progress, the Go runtime's) on this CPU, as an MPI progress thread gets a core of its own, so the rank's CPU runs only the computation (e.g. --engine-cpu's CPU); default, or -1: they share the rank's CPU")
}

// chooseTransport settles --transport where the user left it open or asked
// for more than this process may do: a run against a --peer defaults to
// udp, and xdp without the privileges it needs falls back to udp, saying
// why on stderr.
//
// When the user gave one of the wire's own flags (--iface for xdp) there is
// no fallback: the run fails, after the flags are validated, with what is
// missing (unavailable).
func (f *benchFlags) chooseTransport(fs *flag.FlagSet, stderr io.Writer) {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if f.peer != "" && !given["transport"] && os.Getenv("MXBENCH_TRANSPORT") == "" {
		f.transport = "udp"
	}
	w, ok := wireNamed(f.transport)
	if !ok || w.missing == nil || f.peer != "" {
		return
	}
	why := w.missing(f)
	if why == "" {
		return
	}
	for _, n := range w.flags {
		if given[n] {
			f.unavailable = fmt.Sprintf("--transport %s: %s; --%s is %s's own flag, so mxbench does not fall back to udp", w.name, why, n, w.name)
			return
		}
	}
	fmt.Fprintf(stderr, "mxbench: --transport %s unavailable (%s): falling back to udp\n", f.transport, why)
	f.transport = "udp"
}

// pairCommand reports whether cmd is one of the two-endpoint benchmarks,
// which declare pairFlags.
func pairCommand(cmd string) bool { return cmd == "pingpong" || cmd == "stream" }

// pairInProcess reports whether cmd may run its two sides in this process
// over --transport: pingpong and stream, and overlap when --transport was
// given (overlap otherwise runs as a job).
func (f *benchFlags) pairInProcess(cmd string) bool {
	return pairCommand(cmd) || cmd == "overlap" && f.transport != ""
}

// validate checks the flags cmd declared and returns the sizes to run.
func (f *benchFlags) validate(cmd string) ([]int, error) {
	switch {
	case f.pairInProcess(cmd):
		if err := f.validatePair(cmd); err != nil {
			return nil, err
		}
	case cmd == "overlap":
		if err := f.refuseOtherWires(cmd, ""); err != nil {
			return nil, err
		}
	}
	switch cmd {
	case "pingpong":
		if f.trials < 1 {
			return nil, usagef(cmd, "--trials %d: want at least 1", f.trials)
		}
		if f.trials > 1 && f.peer != "" {
			return nil, usagef(cmd, "--trials is not passed to an mxbench serve: run both sides here (--procs 2, or a launcher) or leave --trials out")
		}
		if f.interleave {
			if err := f.validateInterleave(cmd); err != nil {
				return nil, err
			}
		}
	case "stream":
		if f.window < 1 {
			return nil, usagef(cmd, "--window %d: want at least 1", f.window)
		}
	}
	return f.commonFlags.validate(cmd)
}

// validateInterleave checks --interleave: a wire with a raw exchange that
// can run beside mx's, pairs enough for a median. (--baseline=false then
// leaves out the UDP baseline only.)
func (f *benchFlags) validateInterleave(cmd string) error {
	w, _ := wireNamed(f.transport)
	switch {
	case f.peer != "" || w.rawBeside == nil:
		return usagef(cmd, "--interleave compares mx with the raw exchange of its wire, both sides in this process: --transport xdp")
	case f.trials < 3:
		return usagef(cmd, "--interleave takes the median of --trials pairs of trials: give --trials 3 or more (below 9 its confidence interval is the pairs' extremes)")
	case f.xdp.iface != "":
		return usagef(cmd, "--interleave runs the raw exchange on a veth pair of its own: drop --iface and --peer-iface")
	}
	return nil
}

// validatePair checks pairFlags: the wire, the fault model, --settle.
func (f *benchFlags) validatePair(cmd string) error {
	w, ok := wireNamed(f.transport)
	if !ok {
		return usagef(cmd, "--transport %q: want %s", f.transport, wireNames())
	}
	if f.peer != "" && !w.peer {
		return usagef(cmd, "--peer needs a network transport: add --transport udp (%s runs both sides in this process)", w.name)
	}
	if err := f.refuseOtherWires(cmd, w.name); err != nil {
		return err
	}
	if w.validate != nil {
		if err := w.validate(f, cmd); err != nil {
			return err
		}
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"loss", f.faults.loss}, {"reorder", f.faults.reorder}, {"dup", f.faults.dup}, {"corrupt", f.faults.corrupt}} {
		if v.x < 0 || v.x >= 1 {
			return usagef(cmd, "--%s %g: want a fraction in [0, 1)", v.name, v.x)
		}
	}
	if f.settle < 0 {
		return usagef(cmd, "--settle must not be negative")
	}
	if f.remoteEP < 0 || f.remoteEP > 255 {
		return usagef(cmd, "--remote-endpoint %d: want 0..255", f.remoteEP)
	}
	return f.validateQueues(cmd)
}

// refuseOtherWires refuses the flags of every wire but the one named
// (none when name is empty: overlap run as a job): a wire's own flags
// given for another wire are mistakes.
func (f *benchFlags) refuseOtherWires(cmd, name string) error {
	for _, o := range wires {
		if o.validate != nil && o.name != name {
			if err := o.validate(&benchFlags{pairFlags: pairFlags{transport: name, xdp: f.xdp, nic: f.nic, usb: f.usb}}, cmd); err != nil {
				return err
			}
		}
	}
	return nil
}

// validate checks the flags every measuring subcommand has and returns
// the sizes to run.
func (f *commonFlags) validate(cmd string) ([]int, error) {
	if f.timeout <= 0 {
		return nil, usagef(cmd, "--timeout %v: want a positive duration such as 30s", f.timeout)
	}
	if f.plot != "" {
		if err := chart.CheckPath(f.plot); err != nil {
			return nil, usagef(cmd, "--plot %v", err)
		}
	}
	if f.wait != waitSpin && f.wait != waitBlock && f.wait != waitAuto {
		return nil, usagef(cmd, "--wait %q: want spin, block or auto", f.wait)
	}
	if _, err := mx.ParseYieldPolicy(f.yield); err != nil {
		return nil, usagef(cmd, "--yield %q: want auto, always or never", f.yield)
	}
	if f.iterations < 0 || f.warmup < 0 {
		return nil, usagef(cmd, "--iterations and --warmup must not be negative")
	}
	if f.key > 0xFFFFFFFF {
		return nil, usagef(cmd, "--key %#x: want a 32-bit value", f.key)
	}
	var sizes []int
	if f.sizes.IsSet {
		for _, s := range f.sizes.V {
			sizes = append(sizes, int(s))
		}
	} else {
		if f.multiplier < 2 {
			return nil, usagef(cmd, "--multiplier %d: want at least 2", f.multiplier)
		}
		if f.start.N > f.end.N {
			return nil, usagef(cmd, "--start %s is above --end %s", units.Format(f.start.N), units.Format(f.end.N))
		}
		for s := f.start.N; s <= f.end.N; {
			sizes = append(sizes, int(s))
			if s == 0 {
				s = 1
			} else {
				s *= int64(f.multiplier)
			}
		}
	}
	for _, s := range sizes {
		if s > maxMessage {
			return nil, usagef(cmd, "size %s: the largest message mxbench sends is %s", units.Format(int64(s)), units.Format(maxMessage))
		}
	}
	if len(sizes) == 0 {
		return nil, usagef(cmd, "no sizes to run")
	}
	if f.plot != "" && len(sizes) < 2 {
		return nil, usagef(cmd, "--plot draws curves against size: give two sizes or more (--sizes 8,1K,64K)")
	}
	return sizes, nil
}

// maxMessage is the largest message size mxbench accepts (a buffer of this
// size is allocated per side, per window slot for stream).
const maxMessage = 64 << 20

// iterationsFor returns how many measured iterations a size gets.
func (f *benchFlags) iterationsFor(size int) int {
	if f.iterations > 0 {
		return f.iterations
	}
	return defaultRounds(size)
}

// defaultRounds is the measured iterations of size bytes without
// --iterations: defaultIterations, fewer (at least 10) when they would
// move more than maxBytesPerSize.
func defaultRounds(size int) int {
	if size > 0 && size*defaultIterations > maxBytesPerSize {
		return max(10, maxBytesPerSize/size)
	}
	return defaultIterations
}

// yieldPolicy is the board's yield policy --yield names (checked by
// validate).
func (f *commonFlags) yieldPolicy() mx.YieldPolicy {
	p, _ := mx.ParseYieldPolicy(f.yield)
	return p
}

// spin reports whether waits busy-poll.
func (f *benchFlags) spin() bool { return f.wait == waitSpin }

// describeWait names the wait mode for the report header, and why it runs.
func (f *benchFlags) describeWait() string {
	how := "blocking waits"
	if f.spin() {
		how = "busy-poll"
	}
	return how + " (" + f.waitWhy + ")"
}

// pin locks the calling goroutine to its thread and, when the thread may
// run on another CPU, binds it to the n-th of its CPUs (pinThread). The
// goroutine must not unlock (only pinnedThread.reschedule does, with the
// thread's CPUs restored): when it exits, the runtime retires the pinned
// thread instead of reusing it.
func pin(n int) {
	pinThread(n) // affinity_linux.go
}

// trimZeros prints a float without trailing zeros, for the report header.
func trimZeros(x float64) string {
	s := fmt.Sprintf("%.4f", x)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}
