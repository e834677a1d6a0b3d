package shm

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/leaktest"
)

// TestCloseAtFDLimit: Close returns while the accept loop waits at the
// descriptor limit, in poll(2) on the listener and the spare descriptor,
// and the loop refused the connection that came first with the reason.
// The limit is lowered in a child process (setrlimit is process-wide),
// and the test waits until one of the child's threads sits in ppoll
// (/proc/PID/task/*/syscall) before it asks it to close.
func TestCloseAtFDLimit(t *testing.T) {
	dir := testDir(t)
	leaktest.Check(t, dir) // once the child is reaped and its board gone
	cmd, out := spawn(t, os.Args[0], nil, "atlimit "+dir+" 0")
	path, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("child: %q %v", path, err)
	}
	waitReady(t, out)
	// A connection the child cannot take: refused with the reason, after
	// which its accept loop fails with EMFILE at once and waits in poll.
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	if err := unix.Connect(s, &unix.SockaddrUnix{Name: strings.TrimSpace(path)}); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Write(s, make([]byte, helloLen)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, welcomeLen+1)
	n, err := unix.Read(s, b)
	if reason, ok := refuseReason(b[:max(n, 0)]); err != nil || !ok || reason != refuseFDLimit {
		t.Fatalf("the child at its limit answered %d bytes (%v), not a refusal for lack of descriptors", n, err)
	}
	for n := 0; !inPoll(t, cmd.Process.Pid); n++ {
		if n > 10000 {
			t.Fatal("no thread of the child waits in ppoll after its refusal")
		}
		time.Sleep(time.Millisecond)
	}
	// A hang is told by the child never saying it closed: kill it then.
	kill := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
	defer kill.Stop()
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); line != "closed\n" {
		t.Fatalf("the child's Close, with its accept loop waiting at the limit, did not return within a minute: %q %v", line, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

// inPoll reports whether a thread of process pid is in ppoll(2), as
// unix.Poll calls it.
func inPoll(t *testing.T, pid int) bool {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("the child's threads: %v", err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread gone
		}
		if nr, _, _ := strings.Cut(string(b), " "); nr == strconv.Itoa(unix.SYS_PPOLL) {
			return true
		}
	}
	return false
}

// atLimitChild is TestCloseAtFDLimit's child ("atlimit DIR 0"): it opens
// a board in DIR, prints its socket's path and "ready" with no descriptor
// left under its RLIMIT_NOFILE, and at SIGUSR1 closes the board and
// prints "closed".
func atLimitChild(dir string) int {
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1) // opens no descriptor
	tr, err := Open(Options{Dir: dir})
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	lim := uint64(len(ents) + 16)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
		fmt.Println("setrlimit:", err)
		return 1
	}
	var held []int
	for range lim {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "%s\nready\n", tr.Path())
	w.Flush()
	<-usr1
	tr.Close()
	for _, fd := range held {
		unix.Close(fd)
	}
	fmt.Println("closed")
	return 0
}
