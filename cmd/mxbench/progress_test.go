package main

import (
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// threadCPUs returns the CPUs every thread of this process may run on.
func threadCPUs(t *testing.T) map[int]unix.CPUSet {
	t.Helper()
	tids, err := threads()
	if err != nil {
		t.Fatal(err)
	}
	m := map[int]unix.CPUSet{}
	for _, tid := range tids {
		var set unix.CPUSet
		if unix.SchedGetaffinity(tid, &set) == nil {
			m[tid] = set
		}
	}
	return m
}

// bindAll binds every thread of this process to set, pass after pass
// until a pass meets none bound otherwise: a thread started by one not
// yet bound inherits that one's CPUs.
func bindAll(t *testing.T, set unix.CPUSet) {
	t.Helper()
	for range 100 {
		stray := false
		for tid, had := range threadCPUs(t) {
			if had == set {
				continue
			}
			stray = true
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				t.Fatalf("binding thread %d to %v: %v", tid, cpuList(set), err)
			}
		}
		if !stray {
			return
		}
	}
	t.Fatalf("threads kept starting bound to other CPUs than %v", cpuList(set))
}

// TestConfineOthers: in a process bound to one CPU as --bind binds a rank,
// every other thread is moved to the progress CPU, as read back from the
// kernel; the caller's thread and a thread bound elsewhere on purpose
// stay; the undo puts them all back, threads started meanwhile included.
func TestConfineOthers(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// The CPUs the kernel lets this process use: a full mask, narrowed
	// to them (earlier tests may have bound this process to one).
	var all unix.CPUSet
	for c := range 1024 {
		all.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	all = unix.CPUSet{} // the kernel writes only the CPUs it knows of
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		t.Fatal(err)
	}
	cpus := cpuList(all)
	if len(cpus) < 2 {
		t.Skipf("this process may run on CPUs %v: placing threads needs two (run on a machine, or a cpuset, with more)", cpus)
	}
	var home, to, elsewhere unix.CPUSet
	home.Set(cpus[0])
	to.Set(cpus[len(cpus)-1])
	elsewhere.Set(cpus[0])
	elsewhere.Set(cpus[len(cpus)-1])
	bindAll(t, home)
	defer bindAll(t, all)
	// A thread bound elsewhere on purpose, as an emulated engine's channel.
	pinned, stop, exited := make(chan int), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer func() { _ = unix.SchedSetaffinity(0, &home) }()
		if err := unix.SchedSetaffinity(0, &elsewhere); err != nil {
			pinned <- -1
			return
		}
		pinned <- unix.Gettid()
		<-stop
	}()
	pinnedTid := <-pinned
	defer func() {
		close(stop)
		<-exited // its thread bound back before the next test
	}()
	if pinnedTid < 0 {
		t.Fatal("binding the pinned thread failed")
	}
	me := unix.Gettid()
	before := threadCPUs(t)
	undo, err := confineOthers(cpus[len(cpus)-1])
	if err != nil {
		t.Fatal(err)
	}
	// Threads started now inherit the progress CPU; undo brings them back.
	// They stay until the listing is done, and then go back to the
	// runtime's idle threads: a thread exiting while /proc lists the
	// others may hide one from the listing.
	done, release := make(chan struct{}), make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread() // a thread of its own
			done <- struct{}{}
			<-release
			runtime.UnlockOSThread()
			done <- struct{}{}
		}()
	}
	for range 4 {
		<-done
	}
	during := threadCPUs(t)
	close(release)
	for range 4 {
		<-done
	}
	if during[me] != home {
		t.Errorf("the calling thread moved: %v, want %v", cpuList(during[me]), cpuList(home))
	}
	if during[pinnedTid] != elsewhere {
		t.Errorf("the thread bound to CPUs %v moved: %v", cpuList(elsewhere), cpuList(during[pinnedTid]))
	}
	moved := 0
	for tid, had := range before {
		now, ok := during[tid]
		if !ok || tid == me || had != home {
			continue
		}
		if now != to {
			t.Errorf("thread %d may run on CPUs %v, want %v", tid, cpuList(now), cpuList(to))
		}
		moved++
	}
	if moved == 0 {
		t.Errorf("no thread moved to CPU %v: their CPUs before %v", cpuList(to), before)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	for tid, now := range threadCPUs(t) {
		switch {
		case tid == pinnedTid:
			if now != elsewhere {
				t.Errorf("the pinned thread lost its binding: %v", cpuList(now))
			}
		case now != home:
			t.Errorf("after the undo, thread %d may run on CPUs %v, want %v", tid, cpuList(now), cpuList(home))
		}
	}
}

// TestProgressCPUErrors: a progress CPU the process may not use, or one
// given to a command without a computation, is refused naming the flag.
func TestProgressCPUErrors(t *testing.T) {
	cpus, err := allowedCPUs()
	if err != nil {
		t.Fatal(err)
	}
	bad := 1023
	if slices.Contains(cpus, bad) {
		t.Skip("this process may run on CPU 1023")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"overlap", "--progress-cpu", strconv.Itoa(bad)}, "--progress-cpu 1023: this process may run on CPUs"},
		{[]string{"overlap", "--progress-cpu", "-2"}, "want a CPU number"},
		{[]string{"pingpong", "--procs", "2", "--progress-cpu", "0"}, "pingpong has no flag --progress-cpu: only overlap has it"},
	} {
		err := run(&strings.Builder{}, &strings.Builder{}, tc.args)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("mxbench %v: %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}
