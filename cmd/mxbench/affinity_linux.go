package main

import "golang.org/x/sys/unix"

// setAffinity binds the calling thread to one CPU; failure (a restricted
// cpuset) leaves it unpinned, which only makes figures noisier.
func setAffinity(cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	_ = unix.SchedSetaffinity(0, &set)
}
