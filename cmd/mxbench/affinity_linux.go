package main

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// setAffinity binds the calling thread to one CPU; failure (a restricted
// cpuset) leaves it unpinned, which only makes figures noisier.
func setAffinity(cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	_ = unix.SchedSetaffinity(0, &set)
}

// bindProcess binds every thread of this process to the n-th CPU it may
// run on (n modulo their count), as mpirun --bind-to core binds a rank;
// threads the runtime starts later inherit the binding from the thread
// that starts them. It reports the CPU, or -1 when there is one CPU only
// or the kernel refused (a restricted cpuset), which leaves the process
// unbound: the figures only get noisier.
func bindProcess(n int) int {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		return -1
	}
	var cpus []int
	for c := 0; c < 1024; c++ {
		if all.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	cpu := cpus[n%len(cpus)]
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			if unix.SchedSetaffinity(tid, &set) != nil {
				return -1
			}
		}
	}
	return cpu
}
