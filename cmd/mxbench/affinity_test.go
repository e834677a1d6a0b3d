package main

import (
	"runtime"
	"slices"
	"testing"
)

// TestRescheduleKeepsPinning: a pinned busy-poller that passes through the
// scheduler (reschedule) while other goroutines want to run still runs on
// a thread bound to its one CPU afterwards, as its figures assume.
func TestRescheduleKeepsPinning(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) < 2 {
		t.Skip("one CPU allowed: nothing is pinned")
	}
	cpu := cpus[len(cpus)-1]
	done := make(chan []int)
	go func() {
		pin(cpu) // never unlocked: the pinned thread retires with the goroutine
		th := pinnedHere(cpu)
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
		now, err := allowedCPUs()
		if err != nil {
			t.Error(err)
		}
		done <- now
	}()
	if got := <-done; !slices.Equal(got, []int{cpu % runtime.NumCPU()}) {
		t.Errorf("after 200 passes through the scheduler the poller may run on CPUs %v, want only %d", got, cpu)
	}
}
