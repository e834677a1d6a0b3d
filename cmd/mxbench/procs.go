package main

import (
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
	"strconv"
	"sync"
	"time"

	"github.com/gomx-dev/gomx/internal/launch"
)

// jobFlags are the flags of a run as N processes.
type jobFlags struct {
	procs    int
	strategy string
	engine   string // --engine (engine.go)
	// engineCPU is --engine-cpu (engine.go), read only when given:
	// without it the emulated engine's threads stay unbound.
	engineCPU int
	bind      bool // --bind
	// given are the flags on the command line.
	given map[string]bool
}

// registerJob adds --procs and --strategy.
func (f *benchFlags) registerJob(fs *flag.FlagSet) {
	fs.IntVar(&f.job.procs, "procs", 0, "run as N processes of this host, started by mxbench itself (under mpirun, srun or a PMI launcher the launcher's ranks are used instead)")
	fs.StringVar(&f.job.strategy, "strategy", envOr("GOMX_SHM_LARGE", ""), "between processes: how large messages move, as mx names it ("+joinOr(mxStrategies())+"), a comma-separated list, or all (env GOMX_SHM_LARGE; default: mx's own choice)")
	fs.BoolVar(&f.job.bind, "bind", true, "with --procs, bind each rank's process (every thread) to one CPU, its rank modulo the CPUs, as mpirun --bind-to core binds MPI ranks (--bind=false: let the kernel place them)")
	f.registerEngine(fs)
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
	if cmd == "overlap" && f.job.procs == 0 {
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
		job = launch.Job{Rank: 0, Size: f.job.procs, Launcher: "mxbench --procs", OneNode: true}
	}
	if job.Size < needed {
		return job, false, usagef(cmd, "%s needs %d processes or more (got %d)", cmd, needed, job.Size)
	}
	if job.Size > 256 {
		return job, false, usagef(cmd, "%d processes: at most 256", job.Size)
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

// startJob brings this process into the job: under a launcher it finds
// the bootstrap address; with --procs it listens, then starts the other
// ranks as copies of itself with the launcher environment a PMI launcher
// would give them. wait, for rank 0 of --procs, waits for the children
// and reports the first that failed; ctx is cancelled when one fails.
func startJob(ctx context.Context, job launch.Job, args []string, stderr io.Writer) (jctx context.Context, addr string, ln net.Listener, wait func() error, err error) {
	if job.Launcher != "mxbench --procs" {
		addr, err := launch.Bootstrap(job, jobEnv)
		return ctx, addr, nil, func() error { return nil }, err
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	addr = fmt.Sprintf("unix:@gomx-mxbench-%d-%d-%s", os.Getuid(), os.Getpid(), hex.EncodeToString(nonce[:]))
	if ln, err = launch.Listen(ctx, addr); err != nil {
		return nil, "", nil, nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		ln.Close()
		return nil, "", nil, nil, fmt.Errorf("--procs: find this program to start it again: %w", err)
	}
	jctx, cancel := context.WithCancelCause(ctx)
	var cmds []*exec.Cmd
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	out := &lockedWriter{w: stderr} // each child's output is copied by a goroutine of its own
	for r := 1; r < job.Size; r++ {
		c := exec.Command(exe, args...)
		c.Env = append(os.Environ(), "PMI_RANK="+strconv.Itoa(r), "PMI_SIZE="+strconv.Itoa(job.Size),
			"GOMX_BOOTSTRAP="+addr, "MXBENCH_PROCS_CHILD=1")
		c.Stdout, c.Stderr = out, out // the other ranks print only their failures
		if err := c.Start(); err != nil {
			cancel(err)
			for _, c := range cmds {
				c.Process.Kill()
			}
			wg.Wait()
			ln.Close()
			return nil, "", nil, nil, fmt.Errorf("--procs: start rank %d: %w", r, err)
		}
		cmds = append(cmds, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Wait(); err != nil {
				err = fmt.Errorf("rank %d of %d %w (%v): its error is above", r, job.Size, errRankFailed, err)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel(err)
			}
		}()
	}
	stop := context.AfterFunc(jctx, func() {
		// Rank 0 gave up or a rank failed: the others must not linger.
		for _, c := range cmds {
			c.Process.Kill()
		}
	})
	wait = func() error {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			for _, c := range cmds {
				c.Process.Kill()
			}
			<-done
		}
		stop()
		cancel(nil)
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	return jctx, addr, ln, wait, nil
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
