package mx

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// echoStop is the match that ends echoLoop.
const echoStop = 1 << 63

// echoSizes sends a message of each size to the echo peer at addr (match i
// for size i) and checks that the same bytes come back.
func echoSizes(t testing.TB, ctx context.Context, e *Endpoint, addr Addr, sizes []int) {
	t.Helper()
	for i, size := range sizes {
		msg := pattern(size, uint64(i))
		buf := make([]byte, size)
		r, _ := e.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
		s, err := e.ISend([][]byte{msg}, addr, uint64(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", size, err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatalf("echo %d: %v", size, err)
		}
		if !bytes.Equal(buf, msg) {
			t.Fatalf("echo of %d bytes differs", size)
		}
	}
}

// echoLoop, in a child process, receives every message into buf (nil:
// 4 MiB+1 of its own) and sends it back to its source with its match,
// until a message with match echoStop.
func echoLoop(ctx context.Context, e *Endpoint, buf []byte) error {
	if buf == nil {
		buf = make([]byte, 4<<20+1)
	}
	for {
		r, err := e.IRecv([][]byte{buf}, 0, 0, nil)
		if err != nil {
			return err
		}
		st, err := r.Wait(ctx)
		if err != nil {
			return err
		}
		if st.Match == echoStop {
			return nil
		}
		s, err := e.ISend([][]byte{buf[:st.XferLength]}, st.Source, st.Match, nil)
		if err != nil {
			return err
		}
		if _, err := s.Wait(ctx); err != nil {
			return err
		}
	}
}

// runChild makes this test binary the child a test started with
// startTestChild, when env is set in its environment: it runs child on
// env's value and exits, 0 if child returned nil, else 1 with the error
// on stderr (which the parent passes on). Without env it returns.
func runChild(env string, child func(arg string) error) {
	arg := os.Getenv(env)
	if arg == "" {
		return
	}
	if err := child(arg); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startTestChild re-runs this test binary as a child that runs only the
// test named test, with env added to its environment, and returns a scanner
// over its stdout. The child is killed and reaped when t ends.
func startTestChild(t *testing.T, ctx context.Context, test string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewScanner(out)
}
