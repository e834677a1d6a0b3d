package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gomx-dev/gomx/cmd/internal/launch"
	"github.com/gomx-dev/gomx/transport/shm"
)

// maxRanks is the most ranks a job may have: the collectives' matches
// carry a rank in 16 bits (gather). maxHostRanks is the most of them one
// host may run: every rank's board takes the others of its host into its
// shared-memory receive queue (transport/shm MaxProducers), and a peer
// past that would be refused and fall back to UDP in the middle of the
// job, so a job on one host that is larger is refused before it starts.
const (
	maxRanks     = 1 << 16
	maxHostRanks = shm.MaxProducers + 1
)

// The descriptors a rank holds, as /proc/<pid>/fd counted them in
// alltoall jobs of 6 to 32 ranks (docs/intranode-scale.md). A rank opens
// a board for each --strategy (openWorld), and each board connects to
// every other rank of the host: for each, the pair's two unix
// connections (the one it dialled to send, the one it accepted to
// receive) and the eventfd each brought (the peer's doorbell, the peer's
// room bell). A board holds some 9 more of its own (its UDP socket, its
// endpoint's listening socket, its doorbell memfd and eventfds, the spare
// descriptor that lets it refuse a connection at the limit) and the
// memfds of its spare lanes (up to 8, transport/shm Options.Lanes, until
// pairs take them), fdsPerBoard leaving room. alltoall --verify sends each
// peer its own block, which --strategy shared and engine take from the
// board's pool: a segment, and its memfd, a peer. Rank 0 of --procs holds,
// for each rank it started, the rank's pidfd and its stdout and stderr
// pipes. fdsBase covers the runtime's and the output's and one board's
// own, and leaves room for what a command adds.
const (
	fdsPerPeer    = 4
	fdsPerPooled  = 1
	fdsPerStarted = 3
	fdsPerBoard   = 20
	fdsBase       = 64
)

// jobFlags are the flags of a run as N processes, which every measuring
// subcommand has (commonFlags).
type jobFlags struct {
	procs    int
	strategy string
	engine   string // --engine (engine.go)
	// engineCPU is --engine-cpu (engine.go), read only when given:
	// without it the emulated engine's threads stay unbound.
	engineCPU int
	bind      bool // --bind
	counters  bool // --counters
	// given are the flags on the command line.
	given map[string]bool
}

// registerJob adds --procs, --strategy, --bind, --counters, --engine and
// --engine-cpu.
func (f *commonFlags) registerJob(fs *flag.FlagSet) {
	fs.IntVar(&f.job.procs, "procs", 0, "run as N processes of this host, started by mxbench itself (under mpirun, srun or a PMI launcher the launcher's ranks are used instead)")
	fs.StringVar(&f.job.strategy, "strategy", envOr("GOMX_SHM_LARGE", ""), "between processes: how large messages move, as mx names it ("+joinOr(mxStrategies())+"), a comma-separated list, or all (env GOMX_SHM_LARGE; default: mx's own choice)")
	fs.BoolVar(&f.job.bind, "bind", true, "with --procs, bind each rank's process (every thread) to one CPU, its rank modulo the CPUs, as mpirun --bind-to core binds MPI ranks (a pingpong's or stream's ranks 0 and 1 on the first two CPUs at every N, its waiting ranks on the rest when there are more); --bind=false: let the kernel place them; default: bind when the job has no more ranks than this host's CPUs, and leave an oversubscribed job unbound, as mpirun does")
	fs.BoolVar(&f.job.counters, "counters", false, "rank 0 prints its boards' and transports' counters that are not zero once the job ends (ack frames sent, lane records, messages), to stderr")
	f.registerEngine(fs)
}

// bindRanks reports whether the ranks --procs starts bind each to a CPU:
// as --bind says when it is given, else when the job does not
// oversubscribe this host (over false). Open MPI's mpirun binds by default
// only then too (its binding policy is none when oversubscribed), and for
// the same reason: a rank that waits for a message yields its CPU, and on
// a host with fewer CPUs than ranks the rank that must answer is one of
// those waiting for a CPU. Ranks bound round robin cannot go to the CPU
// that is free: with 8 ranks on 2 CPUs, the 8 B alltoall switched
// contexts twice as often bound as unbound (docs/intranode-scale.md).
func (f *commonFlags) bindRanks(over bool) bool {
	if f.job.given["bind"] {
		return f.job.bind
	}
	return !over
}

func joinOr(s []string) string {
	if len(s) < 2 {
		return fmt.Sprint(s)
	}
	out := ""
	for i, x := range s {
		switch {
		case i == 0:
		case i == len(s)-1:
			out += " or "
		default:
			out += ", "
		}
		out += x
	}
	return out
}

// jobEnv is where a job's rank and size come from: the environment of a
// launcher, or none.
var jobEnv = os.Getenv

// launched returns the job the launcher started this process in, if any.
func launched() (launch.Job, bool, error) {
	job, err := launch.FromEnv(jobEnv)
	if errors.Is(err, launch.ErrNoLauncher) {
		return launch.Job{}, false, nil
	}
	return job, err == nil, err
}

// jobMode reports whether cmd runs as a job (under a launcher or with
// --procs), checking the flags that go with it: alltoall always is one,
// overlap is one of 2 processes by default.
func (f *benchFlags) jobMode(cmd string, fs *flag.FlagSet) (launch.Job, bool, error) {
	f.job.given = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.job.given[fl.Name] = true })
	needed := 2
	if cmd == "overlap" && f.job.procs == 0 && f.transport == "" {
		f.job.procs = 2
	}
	job, ok, err := launched()
	if err != nil {
		return job, false, err
	}
	if ok {
		if f.job.procs != 0 && f.job.procs != job.Size {
			return job, false, usagef(cmd, "--procs %d under %s, which started %d ranks: drop --procs", f.job.procs, job.Launcher, job.Size)
		}
	} else if f.job.procs == 0 {
		switch {
		case cmd == "alltoall":
			return job, false, usagef(cmd, "alltoall runs among processes: add --procs N, or start it with mpirun -np N or srun -n N")
		case f.job.given["strategy"]:
			return job, false, usagef(cmd, "--strategy chooses how messages move between processes: add --procs 2 (or run under mpirun)")
		case f.job.given["engine"]:
			return job, false, usagef(cmd, "--engine gives the boards of a job's processes a copy engine: add --procs 2 --strategy engine (or run under mpirun)")
		}
		return job, false, nil
	} else {
		job = launch.Job{Rank: 0, Size: f.job.procs, Launcher: procsLauncher, OneNode: true, NodeRanks: f.job.procs}
	}
	if job.Size < needed {
		return job, false, usagef(cmd, "%s needs %d processes or more (got %d)", cmd, needed, job.Size)
	}
	if job.Size > maxRanks {
		return job, false, usagef(cmd, "%d processes: at most %d", job.Size, maxRanks)
	}
	if job.NodeRanks > maxHostRanks {
		return job, false, usagef(cmd, "%s: at most %d processes a host reach each other through shared memory (each one's receive queue takes %d peers, transport/shm MaxProducers): %s",
			hostRanks(job), maxHostRanks, shm.MaxProducers, hostFix(job.Launcher, maxHostRanks))
	}
	strategies, err := jobStrategies(f.job.strategy)
	if err != nil {
		return job, false, usagef(cmd, "%v", err)
	}
	if err := fdsFit(cmd, job, strategies, f.verify); err != nil {
		return job, false, err
	}
	if f.schedule != "" && !slices.Contains(schedules, f.schedule) {
		return job, false, usagef(cmd, "--schedule %q: want %s", f.schedule, joinOr(schedules))
	}
	if f.transport != "udp" && f.job.given["transport"] {
		return job, false, usagef(cmd, "--transport %s: a job's processes talk mx over udp boards (shared memory on one host, by themselves): drop --transport", f.transport)
	}
	if f.peer != "" {
		return job, false, usagef(cmd, "--peer and a job do not mix: the peers are the job's other ranks")
	}
	f.transport = "udp"
	return job, true, nil
}

// procsLauncher is the Launcher of a job --procs starts.
const procsLauncher = "mxbench --procs"

// hostRanks says how many of job's ranks share a host, and who says so.
func hostRanks(job launch.Job) string {
	switch {
	case job.Launcher == procsLauncher:
		return fmt.Sprintf("--procs %d", job.Size)
	case job.OneNode:
		return fmt.Sprintf("%d ranks on one host (%s)", job.Size, job.Launcher)
	}
	return fmt.Sprintf("%d of the %d ranks on one host (%s)", job.NodeRanks, job.Size, job.Launcher)
}

// hostFix says how to run no more than most ranks on a host under
// launcher.
func hostFix(launcher string, most int) string {
	if launcher == procsLauncher {
		return fmt.Sprintf("run %d or fewer", most)
	}
	opt := map[string]string{
		"openmpi": "mpirun --npernode %d",
		"slurm":   "srun --ntasks-per-node %d",
		"pmi":     "mpiexec -ppn %d",
		"pmix":    "prterun --map-by ppr:%d:node",
	}[launcher]
	if opt == "" {
		opt = "%d a node"
	}
	return fmt.Sprintf("run fewer ranks, or spread them over more hosts, %d or fewer on each (%s)", most, fmt.Sprintf(opt, most))
}

// fdsNeed is the descriptors rank 0 of job on its host holds (the
// counts above) when cmd runs strategies, verify as --verify says, and
// how many of them each other rank of its host adds, in words.
func fdsNeed(cmd string, job launch.Job, strategies []string, verify bool) (need, per int, what string) {
	boards := len(strategies)
	per = fdsPerPeer * boards
	what = fmt.Sprintf("%d descriptors for each other rank of its host", fdsPerPeer)
	if boards > 1 {
		what += fmt.Sprintf(" on each of its %d boards (one a --strategy)", boards)
	}
	if verify && cmd == "alltoall" {
		pooled := 0
		for _, s := range strategies {
			if sendsShared(s) {
				pooled++
			}
		}
		if pooled > 0 {
			per += fdsPerPooled * pooled
			what += fmt.Sprintf(", %d more a rank for the pool segment of its --verify block", fdsPerPooled)
			if pooled > 1 {
				what += fmt.Sprintf(" on each of the %d boards sending from shared buffers", pooled)
			}
		}
	}
	if job.Launcher == procsLauncher {
		per += fdsPerStarted
		what += fmt.Sprintf(", and, at rank 0, %d for each rank it starts", fdsPerStarted)
	}
	return fdsBase + fdsPerBoard*(boards-1) + per*(job.NodeRanks-1), per, what
}

// fdsFit makes sure the ranks of job on this host may open the
// descriptors they will hold (fdsNeed): past RLIMIT_NOFILE a rank fails
// to dial or accept a peer in the middle of the job, far from the cause,
// or waits for a connection its peer could not make. Go's runtime raises
// the soft limit to the hard one less one when the program starts
// (package syscall's init, go.dev/issue/46279); when that is short and
// the hard limit is not, fdsFit raises the soft limit to what the job
// needs (the ranks --procs starts inherit it). Past the hard limit it
// refuses the job, saying how to raise it or how many ranks fit.
func fdsFit(cmd string, job launch.Job, strategies []string, verify bool) error {
	if job.NodeRanks < 2 {
		return nil // alone on its host, or the launcher does not say
	}
	need, per, what := fdsNeed(cmd, job, strategies, verify)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur >= uint64(need) {
		return nil
	}
	if rl.Max >= uint64(need) {
		raised := rl
		raised.Cur = uint64(need)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			return nil
		}
	}
	fix := fmt.Sprintf("raise it (`ulimit -n %d` in the shell that starts the job; a hard limit that high may take root or /etc/security/limits.conf)", need)
	if most := (int(rl.Max)-(need-per*(job.NodeRanks-1)))/per + 1; most >= 2 {
		fix += " or " + hostFix(job.Launcher, most)
	}
	return usagef(cmd, "%s: a rank holds %s, %d in all, more than the hard limit of RLIMIT_NOFILE, %d, lets a process open: %s",
		hostRanks(job), what, need, rl.Max, fix)
}

// jobRun is this process's part in starting a job: the context its work
// runs under (cancelled when a rank --procs started fails), the bootstrap
// address, rank 0's listener under --procs, and the ranks it started.
type jobRun struct {
	ctx  context.Context
	addr string
	ln   net.Listener // rank 0 of --procs; nil otherwise
	job  launch.Job

	// The ranks --procs started (none under a launcher).
	cmds   []*exec.Cmd
	wg     sync.WaitGroup
	exited chan struct{}  // closed once every rank exited
	spawn  chan *exec.Cmd // the ranks to start, to the spawner's thread (spawner)
	grace  time.Duration  // killGrace when the job started
	// stacks: GOTRACEBACK asks for every goroutine's stack (see
	// tracebackAll), printed on out.
	stacks bool
	out    io.Writer
	cancel context.CancelCauseFunc
	stop   func() bool // unregisters the kill that follows a failure
	// stopped is closed when the kill that follows a failure has run;
	// wait waits for it when stop came too late, so nothing that kill
	// prints outlives the job.
	stopped chan struct{}
	mu      sync.Mutex
	failed  []error // rank failures as they came, rank 0's among them
	own     bool    // rank 0's own failure is among them
	// printed: this rank's goroutines were printed (printStacks).
	printed sync.Once
	kills   []killWhy // by rank-1: why rank 0 killed it, if it did
}

// killWhy is why rank 0 of --procs killed a rank.
type killWhy uint8

const (
	notKilled killWhy = iota
	stopped           // another rank failed: not a failure of its own
	quit              // the same, sent SIGQUIT first (GOTRACEBACK)
	lingered          // rank 0 was done and it still ran: a failure
)

// tracebackAll reports whether GOTRACEBACK asks the Go runtime for every
// goroutine's stack when a program crashes (all, system, crash, wer, 2).
// Then a rank whose wait times out prints its own goroutines before it
// closes its boards; with --procs, rank 0 prints its own at the job's
// first failure, and stops the ranks still running with SIGQUIT (each
// prints its goroutines) before it kills them, at once when its own wait
// timed out: a job that hung says where each rank was.
func tracebackAll() bool {
	switch os.Getenv("GOTRACEBACK") {
	case "all", "system", "crash", "wer", "2":
		return true
	}
	return false
}

// killGrace is how long the other ranks have to exit by themselves once
// one rank failed, before --procs kills them: a rank whose failure follows
// from the first one's (a peer gone unreachable) says so within it, and its
// error joins the report. A variable for the tests, which wait on
// conditions and need the grace to outlast a loaded machine.
var killGrace = 2 * time.Second

// stragglerWait is how long rank 0, done, waits for the other ranks of
// --procs to exit before it kills them.
const stragglerWait = time.Minute

// stderrTail is how many of a failed rank's last stderr lines its report
// repeats.
const stderrTail = 3

// startJob brings this process into the job: under a launcher it finds
// the bootstrap address; with --procs it listens, then starts the other
// ranks as copies of itself with the launcher environment a PMI launcher
// would give them, and env (rank 0's wait). Their stdout and stderr are copied to stderr as they
// come (they print only their failures), and wait reports every rank that
// failed; the job's context is cancelled when one does.
func startJob(ctx context.Context, job launch.Job, args, env []string, stderr io.Writer) (*jobRun, error) {
	if job.Launcher != procsLauncher {
		addr, err := launch.Bootstrap(job, jobEnv)
		return &jobRun{ctx: ctx, addr: addr, job: job, out: stderr, stacks: tracebackAll()}, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	j := &jobRun{job: job, grace: killGrace, stacks: tracebackAll()}
	j.addr = fmt.Sprintf("unix:@gomx-mxbench-%d-%d-%s", os.Getuid(), os.Getpid(), hex.EncodeToString(nonce[:]))
	var err error
	if j.ln, err = launch.Listen(ctx, j.addr); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		j.ln.Close()
		return nil, fmt.Errorf("--procs: find this program to start it again: %w", err)
	}
	j.ctx, j.cancel = context.WithCancelCause(ctx)
	out := &lockedWriter{w: stderr} // each child's output is copied by goroutines of its own
	j.out = out
	j.kills = make([]killWhy, job.Size-1)
	start := j.spawner()
	for r := 1; r < job.Size; r++ {
		c := exec.Command(exe, args...)
		c.Env = append(os.Environ(), "PMI_RANK="+strconv.Itoa(r), "PMI_SIZE="+strconv.Itoa(job.Size),
			"GOMX_BOOTSTRAP="+j.addr, "MXBENCH_PROCS_CHILD=1")
		c.Env = append(c.Env, env...)
		// A rank dies with rank 0, which started it: killed (SIGKILL,
		// a crash), rank 0 cannot stop the others, and they would wait
		// for it until their --timeout.
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		tail := &tailWriter{w: out}
		c.Stdout, c.Stderr = out, tail
		if err := start(c); err != nil {
			close(j.spawn)
			j.cancel(err)
			j.killAll(stopped)
			j.wg.Wait()
			j.ln.Close()
			return nil, fmt.Errorf("--procs: start rank %d: %w", r, err)
		}
		j.mu.Lock() // killAll reads them
		j.cmds = append(j.cmds, c)
		j.mu.Unlock()
		j.wg.Add(1)
		go j.reap(r, c, tail)
	}
	close(j.spawn)
	j.exited = make(chan struct{})
	go func() { j.wg.Wait(); close(j.exited) }()
	j.stopped = make(chan struct{})
	j.stop = context.AfterFunc(j.ctx, func() {
		defer close(j.stopped)
		// A rank failed, or rank 0 gave up: the others must not linger,
		// but those already failing get the grace to say why.
		j.printStacks(fmt.Sprintf("saw the job fail (%v)", context.Cause(j.ctx)))
		select {
		case <-j.exited:
			return
		case <-time.After(j.grace):
		}
		if j.stacks {
			// Each prints its goroutines' stacks and exits; one that
			// does not is killed after another grace.
			j.signalAll(syscall.SIGQUIT)
			select {
			case <-j.exited:
				return
			case <-time.After(j.grace):
			}
		}
		j.killAll(stopped)
	})
	return j, nil
}

// spawner returns the function that starts the ranks of --procs: on one
// OS thread of this process, kept until every rank it started has been
// reaped. The kernel sends a child's death signal (Pdeathsig) when the
// thread that started it ends, not the process, and the Go runtime ends
// a thread whose goroutine exits locked to it (mx's CPU binding locks
// some): started from any thread, a rank could be killed while rank 0
// still runs. Closing j.spawn after the last start lets the thread go
// once the ranks are reaped (j.wg).
func (j *jobRun) spawner() func(*exec.Cmd) error {
	j.spawn = make(chan *exec.Cmd)
	done := make(chan error)
	go func() {
		runtime.LockOSThread()
		for c := range j.spawn {
			done <- c.Start()
		}
		j.wg.Wait()
		runtime.UnlockOSThread()
	}()
	return func(c *exec.Cmd) error {
		j.spawn <- c
		return <-done
	}
}

// reap waits for rank r, run by c, and notes its failure.
func (j *jobRun) reap(r int, c *exec.Cmd, tail *tailWriter) {
	defer j.wg.Done()
	err := c.Wait()
	if err == nil {
		return
	}
	j.mu.Lock()
	why := j.kills[r-1]
	var ee *exec.ExitError
	if errors.As(err, &ee) && (why != notKilled && why != lingered && ee.ExitCode() == -1 || j.quitted(r) && ee.ExitCode() == 2) {
		// Killed as asked, or quit with its stacks (the runtime's
		// status 2): a rank that exited with a status of its own
		// before the signal landed failed by itself.
		j.mu.Unlock()
		return
	}
	f := &rankFailure{rank: r, size: j.job.Size, err: err, tail: tail.lines(), lingered: why == lingered}
	j.failed = append(j.failed, f)
	j.mu.Unlock()
	j.cancel(f)
}

// signalAll sends sig to the ranks still running, noting that they were
// stopped.
func (j *jobRun) signalAll(sig os.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, c := range j.cmds {
		if j.kills[i] == notKilled {
			j.kills[i] = quit
			c.Process.Signal(sig) // an error only says it exited already
		}
	}
}

// printStacks prints, once and only when GOTRACEBACK asks for every
// goroutine's stack (tracebackAll), this rank's goroutines and why.
func (j *jobRun) printStacks(why string) {
	if !j.stacks {
		return
	}
	j.printed.Do(func() {
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(j.out, "mxbench: rank %d of %d %s; GOTRACEBACK=%s, so its goroutines follow\n%s\n", j.job.Rank, j.job.Size, why, os.Getenv("GOTRACEBACK"), buf)
	})
}

// quitted reports whether rank r was sent SIGQUIT (j.mu held).
func (j *jobRun) quitted(r int) bool { return j.kills[r-1] == quit }

// killAll kills the ranks still running, noting why.
func (j *jobRun) killAll(why killWhy) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i, c := range j.cmds {
		if j.kills[i] == notKilled {
			j.kills[i] = why
		}
		c.Process.Kill() // an error only says it exited already
	}
}

// fail notes this rank's own failure, at the moment it happens (before its
// boards close, which the other ranks may notice and fail of), and asks
// the other ranks to stop. Under a launcher it does nothing: the launcher
// reports. An error that only says the job was cancelled because another
// rank failed is no failure of this rank's.
func (j *jobRun) fail(err error) {
	if err == nil {
		return
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// A wait ran out: what this rank was waiting for is in its
		// goroutines, which the boards' close is about to end. The
		// other ranks are likely part of the hang: theirs now too,
		// before the close makes them fail of it.
		j.printStacks(fmt.Sprintf("timed out (%v)", err))
		if j.stacks {
			j.signalAll(syscall.SIGQUIT)
		}
	}
	if j.cancel == nil {
		return
	}
	var rf *rankFailure
	if errors.Is(err, context.Canceled) && errors.As(context.Cause(j.ctx), &rf) {
		return // the rank that failed is reported
	}
	j.mu.Lock()
	if j.own {
		j.mu.Unlock()
		return // noted when it happened
	}
	j.own = true
	j.failed = append(j.failed, err)
	j.mu.Unlock()
	j.cancel(err)
}

// wait ends this rank's part in the job, own being its own error (nil
// when it succeeded), and returns the job's: own under a launcher; with
// --procs, once the other ranks exited (killed after stragglerWait when
// own is nil), every rank's failure, the earliest first, as one error,
// or own when it is the only one.
func (j *jobRun) wait(own error) error {
	if j.cancel == nil {
		return own
	}
	j.fail(own)
	select {
	case <-j.exited:
	case <-time.After(stragglerWait):
		j.killAll(lingered)
		<-j.exited
	}
	if !j.stop() {
		// It ran, or runs: every rank exited, so it returns at once,
		// and what it printed is in out before the job's report.
		<-j.stopped
	}
	j.cancel(nil)
	j.mu.Lock()
	defer j.mu.Unlock()
	switch len(j.failed) {
	case 0:
		return nil
	case 1:
		return j.failed[0]
	}
	return fmt.Errorf("%d ranks failed, the earliest first: %w", len(j.failed), errors.Join(j.failed...))
}

// rankFailure is a rank --procs started that failed: its exit status and
// the last lines it printed on stderr.
type rankFailure struct {
	rank, size int
	err        error // from exec: the exit status or signal
	tail       []string
	lingered   bool // killed: it still ran a minute after rank 0's end
}

func (f *rankFailure) Error() string {
	s := fmt.Sprintf("rank %d of %d %v (%v)", f.rank, f.size, errRankFailed, f.err)
	if f.lingered {
		s = fmt.Sprintf("rank %d of %d %v: still running %v after rank 0 was done, so killed", f.rank, f.size, errRankFailed, stragglerWait)
	}
	if len(f.tail) == 0 {
		return s + " and printed nothing on stderr"
	}
	return s + ", its stderr ending: " + strings.Join(f.tail, " / ")
}

func (f *rankFailure) Unwrap() []error { return []error{errRankFailed, f.err} }

// tailWriter copies a rank's stderr to w and keeps its last stderrTail
// lines, each cut to 512 bytes, for the report of its failure.
type tailWriter struct {
	w       io.Writer
	mu      sync.Mutex
	last    []string
	partial []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	for _, c := range p {
		if c == '\n' {
			t.push()
			continue
		}
		if len(t.partial) < 512 {
			t.partial = append(t.partial, c)
		}
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

// push ends the partial line (t.mu held).
func (t *tailWriter) push() {
	if len(bytes.TrimSpace(t.partial)) > 0 {
		if len(t.last) == stderrTail {
			t.last = t.last[:copy(t.last, t.last[1:])]
		}
		t.last = append(t.last, string(bytes.TrimSpace(t.partial)))
	}
	t.partial = t.partial[:0]
}

// lines returns the last lines written, the unfinished one too.
func (t *tailWriter) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.push()
	return append([]string(nil), t.last...)
}

// rankError names the rank in a job's failure, so the one line on stderr
// says which process failed.
func rankError(job launch.Job, err error) error {
	if err == nil || errors.Is(err, errRankFailed) {
		return err
	}
	var ue *usageError
	if errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("rank %d of %d: %w", job.Rank, job.Size, err)
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
