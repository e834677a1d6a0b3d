package main

import (
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
	cpu := runtime.NumCPU() - 1
	before := boundToOneThreads(t)
	type seen struct {
		own   unix.CPUSet
		bound int // threads bound to one CPU, the poller's included
		err   error
	}
	done := make(chan seen)
	go func() {
		th := pinThread(cpu)
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
		var s seen
		s.err = unix.SchedGetaffinity(0, &s.own)
		s.bound = boundToOneThreads(t)
		done <- s
	}()
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	if got := cpuList(s.own); len(got) != 1 || got[0] != cpu {
		t.Errorf("after 200 passes through the scheduler the poller may run on CPUs %v, want only %d", got, cpu)
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
