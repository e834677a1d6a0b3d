package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
)

// Where rank 0's other threads run while overlap computes (--progress-cpu).
//
// A rank bound to one CPU (--bind) runs everything on it: the
// application's computation, and the Go runtime's threads, which run mx's
// receive loops, its engine copies, its timers and the runtime's own
// poller and monitor. During the availability run those threads are woken
// for every frame and every engine completion and preempt the computation
// on its CPU: some 1 000 to 2 500 times per run at 4 MiB, which cost the
// engine strategy a quarter of the processor although the engine does the
// copying. MPI users who want communication to progress beside their
// computation give the library's progress thread a core of its own (Open
// MPI's and MPICH's asynchronous progress threads, bound by the launcher).
// In Go a library's goroutines are not tied to threads, so the same
// arrangement is made on the threads: rank 0's computing goroutine keeps
// its thread on the rank's CPU, and every other thread of the rank runs on
// the progress CPU for the time of the computation (confineOthers). mx is
// unchanged: its goroutines simply run there. The engine strategy's
// copies still run on the engine; cma's copies now run on the progress
// CPU, which is what an asynchronous progress thread buys an MPI library
// that copies with the CPU.
//
// It is asked for, never a default: the job's threads then load two CPUs,
// and when other sessions load the host the scheduler (autogroup) gives
// the computing thread less of its CPU than when the rank stayed on one.

// chooseProgressCPU validates --progress-cpu, overlap's flag (overlapFlags).
// It returns nil for none.
func (f *benchFlags) chooseProgressCPU(cmd string) (*int, error) {
	cpu := f.progressCPU
	switch {
	case f.job.given["progress-cpu"] && cpu == -1:
		return nil, nil
	case f.job.given["progress-cpu"] && cpu < 0:
		return nil, usagef(cmd, "--progress-cpu %d: want a CPU number (see lscpu), or -1 for none", cpu)
	case !f.job.given["progress-cpu"]:
		return nil, nil
	}
	allowed, err := allowedCPUs()
	if err != nil {
		return nil, fmt.Errorf("--progress-cpu %d: reading this process's CPUs: %w", cpu, err)
	}
	if !slices.Contains(allowed, cpu) {
		return nil, usagef(cmd, "--progress-cpu %d: this process may run on CPUs %v only (taskset -p %d): name one of them, or give --progress-cpu -1", cpu, allowed, os.Getpid())
	}
	return &cpu, nil
}

// progressNote is the report header's note on --progress-cpu.
func progressNote(cpu *int) string {
	if cpu == nil {
		return ""
	}
	return fmt.Sprintf("; while rank 0 computes, its other threads (mx's progress, the Go runtime's) run on CPU %d (--progress-cpu)", *cpu)
}

// computeAlone locks the calling goroutine to its thread and, when cpu is
// not nil, moves every other thread of the process to *cpu (see
// confineOthers). The returned function undoes both.
func computeAlone(cpu *int) (undo func() error, err error) {
	runtime.LockOSThread()
	if cpu == nil {
		return func() error { runtime.UnlockOSThread(); return nil }, nil
	}
	back, err := confineOthers(*cpu)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() error {
		err := back()
		runtime.UnlockOSThread()
		return err
	}, nil
}
