package mx

import (
	"context"
	"errors"
	"fmt"
	"os"
	ossignal "os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport/shm"
)

// fdLimitChildEnv makes the test binary a shm board at its descriptor
// limit: "DIR MODE FREE", MODE dial (it connects to board 88 of DIR and
// prints the outcome), accept (it waits to be connected to) or refill (as
// accept, and at each SIGUSR1, once its transport has refused a
// connection, it opens a descriptor if it can and prints the outcome), with FREE descriptors left under its RLIMIT_NOFILE.
const fdLimitChildEnv = "GOMX_MX_FDLIMIT_CHILD"

// TestConnectAtFDLimit: a connect over the rings that a process's
// RLIMIT_NOFILE stops fails at once with ErrNoResources, naming the
// process at its limit and `ulimit -n`, instead of resending until the
// resend limit (here over an hour): when the connecting process is at
// its limit (it cannot dial, cannot take the welcome's descriptors, or
// cannot take the peer's connection back), and when the process
// connected to is (it refuses the connection and says why). The limit is
// lowered in the child processes only. Refill connects twice, the child
// opening a descriptor in between: the slot of the spare descriptor the
// child's transport refuses with stays its own.
func TestConnectAtFDLimit(t *testing.T) {
	if arg := os.Getenv(fdLimitChildEnv); arg != "" {
		if err := fdLimitChild(arg); err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	checkLeaks(t)
	for _, c := range []struct {
		mode string
		free int
	}{
		{"dial", 0}, {"dial", 1}, {"dial", 2}, {"dial", 3}, {"dial", 4},
		{"accept", 0}, {"accept", 1}, {"accept", 2}, {"accept", 3},
		{"refill", 0},
	} {
		t.Run(fmt.Sprintf("%s/free=%d", c.mode, c.free), func(t *testing.T) {
			dir := shmDir(t)
			leaktest.Check(t, "") // once the child is reaped
			ctx := testCtx(t, 2*time.Minute)
			tr, err := shm.Open(shm.Options{Dir: dir, Board: 88})
			if err != nil {
				t.Fatal(err)
			}
			b, err := NewBoard(tr, shmTestOptions())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			e, err := b.OpenEndpoint(0, testKey)
			if err != nil {
				t.Fatal(err)
			}
			cmd, sc := startTestChild(t, ctx, "TestConnectAtFDLimit", fmt.Sprintf("%s=%s %s %d", fdLimitChildEnv, dir, c.mode, c.free))
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("child did not start: %q", sc.Text())
			}
			var got string
			if c.mode == "dial" {
				if !sc.Scan() {
					t.Fatal("the child said nothing of its connect")
				}
				got = sc.Text()
			} else {
				got = connectAtFDLimit(t, ctx, e)
			}
			if c.mode == "refill" {
				if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
					t.Fatal(err)
				}
				if !sc.Scan() {
					t.Fatal("the child said nothing of its open")
				}
				if !strings.Contains(sc.Text(), "too many open files") {
					t.Fatalf("the child opened a descriptor at its limit, in the slot of its transport's spare: %s", sc.Text())
				}
				t.Log(sc.Text())
				got = connectAtFDLimit(t, ctx, e)
			}
			for _, want := range []string{"connect: ", "no resources", "RLIMIT_NOFILE", "ulimit -n"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s", got)
					t.Fatalf("the connect's error does not say %q", want)
				}
			}
			t.Log(got)
		})
	}
}

// connectAtFDLimit connects e to the child, board 77, which is at its
// descriptor limit, and returns its error's text after "connect: ".
func connectAtFDLimit(t *testing.T, ctx context.Context, e *Endpoint) string {
	t.Helper()
	_, err := e.Connect(ctx, shm.NICBase|77, 0, testKey)
	if !errors.Is(err, ErrNoResources) || !errors.Is(err, shm.ErrFDLimit) {
		t.Fatalf("connect to a process at its descriptor limit: %v; want ErrNoResources wrapping shm.ErrFDLimit", err)
	}
	return "connect: " + err.Error()
}

// fdLimitChild is TestConnectAtFDLimit's child (fdLimitChildEnv).
func fdLimitChild(arg string) error {
	var dir, mode string
	var free int
	if _, err := fmt.Sscan(arg, &dir, &mode, &free); err != nil {
		return err
	}
	usr1 := make(chan os.Signal, 1)
	ossignal.Notify(usr1, syscall.SIGUSR1) // opens no descriptor
	b, e, err := openShmChild(dir, 77, shmTestOptions())
	if err != nil {
		return err
	}
	defer b.Close()
	// Lower the limit to a little above what the process holds, take
	// what is left but free, and give the rest back when done.
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	lim := uint64(len(ents) + 32)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim, Max: lim}); err != nil {
		return err
	}
	var held []int
	defer func() { closeFDs(held) }()
	for range lim {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		held = append(held, fd)
	}
	closeFDs(held[len(held)-free:])
	held = held[:len(held)-free]
	fmt.Println("ready")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if mode == "dial" {
		_, err := e.Connect(ctx, shm.NICBase|88, 0, testKey)
		fmt.Printf("connect: %v\n", err)
	}
	for mode == "refill" {
		select {
		case <-usr1:
			// The first connect is refused once the parent's Connect
			// returned, but the spare is taken back after: wait for it.
			for refusedConns(b) == 0 && ctx.Err() == nil {
				runtime.Gosched()
			}
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				held = append(held, fd)
			}
			fmt.Printf("child: open a descriptor between the connects: %v\n", err)
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done() // the parent kills us first
	return nil
}

// refusedConns is b's shm transport's count of connections refused, each
// counted once the spare descriptor it was refused with is back.
func refusedConns(b *Board) uint64 {
	for _, c := range b.TransportCounters() {
		if c.Name == "shm connections refused" {
			return c.Value
		}
	}
	return 0
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
