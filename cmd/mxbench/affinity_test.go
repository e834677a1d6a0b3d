package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// boundToOneThreads counts the threads of this process bound to a single CPU.
func boundToOneThreads(t *testing.T) int {
	t.Helper()
	n := 0
	for _, set := range threadCPUs(t) {
		if set.Count() == 1 {
			n++
		}
	}
	return n
}

// TestRescheduleKeepsPinning: a pinned busy-poller that passes through the
// scheduler (reschedule) while other goroutines want to run still runs on
// a thread bound to its one CPU afterwards, as its figures assume, and
// leaves no other thread of the process bound to that CPU, neither while
// it runs nor after it exits: the runtime's other goroutines, and the
// threads it starts, keep every CPU.
func TestRescheduleKeepsPinning(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing is pinned")
	}
	before := boundToOneThreads(t)
	type seen struct {
		cpu   int // the poller's (pinThread)
		own   unix.CPUSet
		bound int // threads bound to one CPU, the poller's included
		err   error
	}
	done := make(chan seen)
	go func() {
		th := pinThread(runtime.NumCPU() - 1)
		// Whatever happens, the thread this goroutine exits on (and the
		// runtime retires) is handed back as it was.
		defer func() { _ = unix.SchedSetaffinity(0, &th.orig) }()
		stop := make(chan struct{})
		for range runtime.GOMAXPROCS(0) * 2 {
			go func() { // runnable goroutines that want the thread meanwhile
				for {
					select {
					case <-stop:
						return
					default:
						runtime.Gosched()
					}
				}
			}()
		}
		for n := 1; n <= 200*rescheduleEvery; n++ {
			th.reschedule(n)
		}
		close(stop)
		s := seen{cpu: th.cpu}
		s.err = unix.SchedGetaffinity(0, &s.own)
		s.bound = boundToOneThreads(t)
		done <- s
	}()
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.cpu < 0 {
		t.Fatal("with two CPUs or more the poller was not bound to one (pinThread)")
	}
	if got := cpuList(s.own); len(got) != 1 || got[0] != s.cpu {
		t.Errorf("after 200 passes through the scheduler the poller may run on CPUs %v, want only %d", got, s.cpu)
	}
	if s.bound > before+1 {
		t.Errorf("after 200 passes through the scheduler %d threads are bound to one CPU, %d before: the poller left %d behind",
			s.bound, before, s.bound-before-1)
	}
	// The poller's thread retires with it; no other stays bound.
	deadline := time.Now().Add(time.Minute)
	for boundToOneThreads(t) > before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := boundToOneThreads(t); n > before {
		t.Errorf("after the poller exited %d threads are bound to one CPU, %d before", n, before)
	}
}

// TestJobRankReschedules: the busy-polling ranks 0 and 1 of a job, each
// pinned as runJobCommand pins it (world.pinSpinner), pass through the scheduler in a pingpong every
// rescheduleEvery messages, as an in-process run's sides do, and each
// still runs on a thread bound to its one CPU afterwards, leaving no
// other thread of the process bound to one: the ranks here are the two
// boards of one process over the loopback wire (localWorlds), running
// the job's pairBench.
func TestJobRankReschedules(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: nothing is pinned")
	}
	var f benchFlags
	fs := newFlags("pingpong", io.Discard)
	f.register(fs, "pingpong")
	iters := 2 * rescheduleEvery
	if err := fs.Parse([]string{"--transport", "loopback", "--wait", "spin", "--sizes", "8",
		"--iterations", fmt.Sprint(iters), "--warmup", "2", "--timeout", "5m"}); err != nil {
		t.Fatal(err)
	}
	sizes, err := f.validate("pingpong")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := f.newPair(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	before := boundToOneThreads(t)
	type seen struct {
		passes int
		own    unix.CPUSet
		err    error
	}
	done := make(chan seen, 2)
	for rank, w := range localWorlds(p) {
		go func() {
			w.pinSpinner(&f, false)
			var s seen
			if w.pinned == nil {
				s.err = fmt.Errorf("rank %d busy-polls but was not pinned", rank)
				done <- s
				return
			}
			defer func() { _ = unix.SchedSetaffinity(0, &w.pinned.orig) }()
			if s.err = w.pairBench(ctx, "pingpong", &f, 0, "", sizes, silent{}); s.err != nil {
				cancel() // the other rank's waits end too
			} else {
				s.err = unix.SchedGetaffinity(0, &s.own)
			}
			s.passes = w.pinned.passes
			done <- s
		}()
	}
	var bound int
	for rank := range 2 {
		s := <-done
		if s.err != nil {
			t.Fatalf("a rank: %v", s.err)
		}
		if s.passes < iters/rescheduleEvery {
			t.Errorf("a rank passed through the scheduler %d times in %d round trips, want at least %d", s.passes, iters, iters/rescheduleEvery)
		}
		if got := cpuList(s.own); len(got) != 1 {
			t.Errorf("after its passes a rank may run on CPUs %v, want one", got)
		}
		if rank == 0 {
			bound = boundToOneThreads(t) // the other rank's thread too, or not yet released
		}
	}
	if bound > before+2 {
		t.Errorf("with both ranks done %d threads are bound to one CPU, %d before: the passes left %d behind", bound, before, bound-before-2)
	}
	// The ranks' threads retire with them; no other stays bound.
	deadline := time.Now().Add(time.Minute)
	for boundToOneThreads(t) > before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := boundToOneThreads(t); n > before {
		t.Errorf("after the ranks exited %d threads are bound to one CPU, %d before", n, before)
	}
}
