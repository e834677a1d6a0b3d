// Package leaktest checks, in tests, that what gomx's shared-memory path
// takes in a process is given back: the mappings of its memfds (queues,
// lanes, pool segments), its memfd and eventfd descriptors, every other
// descriptor (sockets, pipes, the pidfds of started processes), the files
// of its endpoint directory, and the processes it started.
//
// Teardown is asynchronous: a peer's connection closes on its watcher
// goroutine, a rank's socket leaves the directory once its process has
// closed its board, a child is reaped once it exits. So the checks wait,
// for a bounded time, until the counts come back, and fail naming what is
// still left; a count taken once right after a Close would fail on a
// machine slower than the author's, or pass on one that happened to be
// fast.
//
// The counts cover the whole process, every goroutine and every test of
// it, not the test that asks: a test running beside it would open and
// close its own. So Check and WaitClean set an environment variable with
// t.Setenv, which panics in a test that called t.Parallel (or under
// one), and the leaks they report are only what changed since Now: the
// descriptors added and those gone, and the processes started since.
package leaktest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Held is what this process holds of what a gomx transport opens.
type Held struct {
	// Maps counts the mappings of gomx memfds (memfd:gomx-...).
	Maps int
	// GomxFDs counts the descriptors of gomx memfds and of eventfds
	// (doorbells and room bells). The runtime keeps one eventfd of its
	// own, so only a change in the count says something.
	GomxFDs int
	// FDs counts every open descriptor.
	FDs int
	// open is what each descriptor names (its /proc/self/fd link),
	// sorted, for the messages of WaitClean.
	open []string
	// kids are the pids of the processes this one started and has not
	// reaped (Children), sorted.
	kids []int
}

// marker is the environment variable Check and WaitClean set, so that a
// parallel test using them panics (t.Setenv): the counts are the whole
// process's.
const marker = "GOMX_LEAKTEST"

// String gives the counts of h.
func (h Held) String() string {
	return fmt.Sprintf("%d mappings of gomx memfds, %d descriptors of gomx memfds or eventfds, %d descriptors in all", h.Maps, h.GomxFDs, h.FDs)
}

// Now reads what this process holds from /proc/self.
func Now(t testing.TB) Held {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	h := Held{Maps: bytes.Count(b, []byte("memfd:gomx-"))}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by ReadDir
		}
		h.FDs++
		h.open = append(h.open, l)
		if strings.Contains(l, "memfd:gomx-") || l == "anon_inode:[eventfd]" {
			h.GomxFDs++
		}
	}
	slices.Sort(h.open)
	h.kids = Children(t, os.Getpid())
	return h
}

// same reports whether h holds as many of each as o.
func (h Held) same(o Held) bool {
	return h.Maps == o.Maps && h.GomxFDs == o.GomxFDs && h.FDs == o.FDs
}

// added lists what h's descriptors name that o's do not, each name as
// many times as h has more of it; o.added(h) lists those gone.
func (h Held) added(o Held) []string {
	var out []string
	i := 0
	for _, l := range h.open {
		for i < len(o.open) && o.open[i] < l {
			i++
		}
		if i < len(o.open) && o.open[i] == l {
			i++
			continue
		}
		out = append(out, l)
	}
	return out
}

// newKids lists the pids of h's children that o did not have.
func (h Held) newKids(o Held) []int {
	var out []int
	for _, k := range h.kids {
		if _, found := slices.BinarySearch(o.kids, k); !found {
			out = append(out, k)
		}
	}
	return out
}

// Left lists the files under dir, at any depth: what a transport or a
// job left in its endpoint directory. Directories do not count (mx keeps
// one for each network namespace); a dir that does not exist holds
// nothing. A part of dir it could not read is an error, and what it did
// read is returned with it.
func Left(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// Children lists the processes pid started that have not been reaped
// (running, or exited and not yet waited for).
func Children(t testing.TB, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

// WaitClean waits, for up to within, until this process holds what it
// held before (Now), dir holds no file (Left; "" checks none) and no
// process it started since before is left (Children), and otherwise
// fails the test naming what is left: the descriptors added and those
// gone, the files, the pids.
func WaitClean(t testing.TB, before Held, dir string, within time.Duration) {
	t.Helper()
	t.Setenv(marker, "1")
	const poll = 10 * time.Millisecond
	var (
		now     Held
		files   []string
		kids    []int
		walkErr error
	)
	for deadline := time.Now().Add(within); ; time.Sleep(poll) {
		now = Now(t)
		kids = now.newKids(before)
		if dir != "" {
			files, walkErr = Left(dir)
		}
		if now.same(before) && len(files) == 0 && walkErr == nil && len(kids) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if !now.same(before) {
		t.Errorf("left behind after %v: %d mappings of gomx memfds, %d descriptors of gomx memfds or eventfds, %d descriptors in all (held %v before, %v now); descriptors added: %q; gone: %q",
			within, now.Maps-before.Maps, now.GomxFDs-before.GomxFDs, now.FDs-before.FDs, before, now, now.added(before), before.added(now))
	}
	if len(files) != 0 {
		t.Errorf("left behind in %s after %v: %v", dir, within, files)
	}
	if walkErr != nil {
		t.Errorf("reading %s: %v", dir, walkErr)
	}
	if len(kids) != 0 {
		t.Errorf("left behind after %v: %d processes this one started, pids %v", within, len(kids), kids)
	}
}

// Check has the test fail if, once it and the cleanups it registers
// later have run, this process holds more or less than it does now, dir
// holds a file, or a process started since is left, waiting up to 10
// seconds for the teardown to finish. It panics in a parallel test
// (t.Setenv): the counts are the whole process's.
func Check(t testing.TB, dir string) {
	t.Helper()
	t.Setenv(marker, "1")
	before := Now(t)
	t.Cleanup(func() { WaitClean(t, before, dir, 10*time.Second) })
}
