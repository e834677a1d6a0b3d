package pci

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// polled reports whether descriptor fd is in an epoll set of this process
// (Go's network poller's): /proc/self/fdinfo lists, for each eventpoll
// descriptor, the descriptors it watches as "tfd: N".
func polled(t *testing.T, fd int) bool {
	t.Helper()
	links, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(fd)
	for _, l := range links {
		if dst, err := os.Readlink(l); err != nil || dst != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile(filepath.Join("/proc/self/fdinfo", filepath.Base(l)))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			// "tfd:        8 events:       19 data: ..."
			if f := strings.Fields(line); len(f) > 1 && f[0] == "tfd:" && f[1] == want {
				return true
			}
		}
	}
	return false
}

// An interrupt that is only waited on with WaitAny (poll(2)) and read
// with Poll stays out of Go's network poller, whose thread its signals
// and reads would otherwise wake for nothing; a single Wait, which parks
// there, puts it in; Close closes the descriptor either way.
func TestInterruptJoinsPollerOnlyForWait(t *testing.T) {
	for _, local := range []bool{false, true} {
		irqs := newInterrupts(t, local, 2)
		for round := range 3 {
			go func() { _ = irqs[round%2].Signal() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			got, n, err := WaitAny(ctx, time.Time{}, irqs...)
			cancel()
			if err != nil || got != round%2 || n != 1 {
				t.Fatalf("local %v: WaitAny = %d, %d, %v; want %d, 1, nil", local, got, n, err, round%2)
			}
		}
		_ = irqs[0].Signal()
		if n := irqs[0].Poll(); n != 1 {
			t.Fatalf("local %v: Poll = %d, want 1", local, n)
		}
		for k, i := range irqs {
			if polled(t, i.FD()) {
				t.Errorf("local %v: interrupt %d (eventfd %d) is in the network poller after WaitAny and Poll", local, k, i.FD())
			}
		}
		go func() { _ = irqs[0].Signal() }()
		if n, err := irqs[0].WaitTimeout(10 * time.Second); err != nil || n != 1 {
			t.Fatalf("local %v: Wait = %d, %v; want 1, nil", local, n, err)
		}
		// A kernel interrupt's Wait parks in the poller; a local one's
		// on Signal's token, and stays out.
		if in := polled(t, irqs[0].FD()); in != !local {
			t.Errorf("local %v: after a Wait, eventfd %d in the network poller: %v, want %v", local, irqs[0].FD(), in, !local)
		}
		for k, i := range irqs {
			fd := i.FD()
			if err := i.Close(); err != nil {
				t.Errorf("local %v: Close %d: %v", local, k, err)
			}
			if _, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && !reused(fd) {
				t.Errorf("local %v: eventfd %d of interrupt %d still open after Close", local, fd, k)
			}
		}
	}
}

// reused reports whether fd, closed, now names something other than an
// eventfd (another test's descriptor took the number).
func reused(fd int) bool {
	dst, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && dst != "anon_inode:[eventfd]"
}
