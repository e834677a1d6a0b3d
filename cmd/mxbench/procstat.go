package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the unit of /proc/<pid>/stat's times: USER_HZ, 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// sinceProcessStart is how long ago this process started (exec, the Go
// runtime's start and mxbench's own set-up included), from the kernel's
// start time in /proc/self/stat and the time since boot in /proc/uptime,
// to the tick (10 ms); false when /proc does not say.
func sinceProcessStart() (time.Duration, bool) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start past the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); starttime is field 22.
	if len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, false
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	u, _, _ := strings.Cut(string(up), " ")
	sec, err := strconv.ParseFloat(u, 64)
	if err != nil {
		return 0, false
	}
	d := time.Duration(sec*float64(time.Second)) - time.Duration(start)*time.Second/clockTicks
	return max(d, 0), true
}

// peakRSS is this process's peak resident memory (VmHWM of
// /proc/self/status) in bytes; 0 when /proc does not say.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// cpuTime is the CPU time this process has used so far, user and system,
// every thread (getrusage(2) RUSAGE_SELF); 0 when the kernel does not say.
func cpuTime() time.Duration {
	cpu, _ := cpuAndSwitches()
	return cpu
}

// cpuAndSwitches is cpuTime and the context switches of every thread of
// this process so far, voluntary (a sleep, a yield to another process) and
// not (preempted); zeros when the kernel does not say.
func cpuAndSwitches() (time.Duration, int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Nvcsw + ru.Nivcsw
}
