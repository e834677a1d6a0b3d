package shm

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport"
)

// sockets lists the socket files of dir.
func sockets(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, e := range ents {
		if e.Type()&os.ModeSocket != 0 {
			s = append(s, e.Name())
		}
	}
	return s
}

// TestStaleSocketsSwept: the socket a SIGKILLed process left in the
// endpoint directory is removed by the next Open of that directory, while
// a live process's socket stays and its board keeps working.
func TestStaleSocketsSwept(t *testing.T) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	killed, kout := spawn(t, os.Args[0], nil, fmt.Sprintf("echo %s %d", dir, 51))
	waitReady(t, kout)
	live, lout := spawn(t, os.Args[0], nil, fmt.Sprintf("echo %s %d", dir, 52))
	waitReady(t, lout)
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait() // reaped: its socket is gone from the kernel, its file not
	deadName, liveName := filepath.Base((&Transport{opts: Options{Dir: dir}}).sockPath(51)),
		filepath.Base((&Transport{opts: Options{Dir: dir}}).sockPath(52))
	if s := sockets(t, dir); !slices.Contains(s, deadName) {
		t.Fatalf("the killed process left no socket (%v): nothing to test", s)
	}

	a, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := sockets(t, dir)
	if slices.Contains(s, deadName) {
		t.Errorf("the killed process's socket %s is still there after an open: %v", deadName, s)
	}
	if !slices.Contains(s, liveName) || !slices.Contains(s, filepath.Base(a.Path())) {
		t.Errorf("a live socket was removed: %v", s)
	}
	if got := counter(a, "shm stale sockets removed at open"); got != 1 {
		t.Errorf("stale sockets removed: %d, want 1", got)
	}
	// The live board was not disturbed: it still echoes.
	if _, err := a.Send([]transport.Frame{{Peer: NICBase | 52, Data: []byte("still")}}); err != nil {
		t.Fatal(err)
	}
	if got := recvFrom(t, a, NICBase|52); string(got) != "still" {
		t.Fatalf("echo: %q", got)
	}
	if _, err := a.Send([]transport.Frame{{Peer: NICBase | 52, Data: []byte("quit")}}); err != nil {
		t.Fatal(err)
	}
	if err := live.Wait(); err != nil {
		t.Fatalf("live child: %v", err)
	}
}
