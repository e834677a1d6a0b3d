package mx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/udp"
)

// TestManyGoroutines has several goroutines send and receive on the same
// endpoints at once; each stream must arrive complete and in order.
func TestManyGoroutines(t *testing.T) {
	const workers, per = 8, 300
	for _, tf := range transportFactories {
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/busypoll=%v", tf.name, busy), func(t *testing.T) {
				opts := fastOptions()
				opts.BusyPoll = busy
				pr := newPair(t, tf, opts, loopback.Faults{})
				ctx := testCtx(t, 60*time.Second)
				th := pr.ba.RendezvousThreshold()
				size := func(w, i int) int { return faultSize(w*per+i, th) % 70000 }
				var wg sync.WaitGroup
				errs := make(chan error, 2*workers)
				startStreams(&wg, errs, ctx, pr.a, pr.atob, pr.b, workers, per, size)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
			})
		}
	}
}

const childEnv = "GOMX_MX_TEST_CHILD"

// TestMultiProcess runs an echo server in a child process (this test binary
// re-executed) and talks to it over UDP.
func TestMultiProcess(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		if err := echoChild(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	checkLeaks(t)
	ctx := testCtx(t, 60*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	sc := bufio.NewScanner(out)
	var nic transport.NICID
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "NIC "); ok {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			nic = transport.NICID(v)
			break
		}
	}
	if nic == 0 {
		t.Fatal("child did not report its NIC id")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp unavailable: %v", err)
	}
	b, err := NewBoard(tr, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	// The child's name resolves through the system resolver too.
	names := NewNames()
	if got, err := names.HostnameToNICID(ctx, "localhost:"+strconv.Itoa(int(nic&0xFFFF))); err != nil || got != nic {
		t.Fatalf("resolve localhost: %v %v (want %v)", got, err, nic)
	}
	addr, err := e.Connect(ctx, nic, 0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	echoSizes(t, ctx, e, addr, []int{0, 1, 32, 33, 128, 129, 9000, 32768, 32769, 1 << 20, 4<<20 + 1})
	s, _ := e.ISend(nil, addr, echoStop, nil)
	if _, err := s.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("child: %v", err)
	}
}

// echoChild serves echoes until it receives match echoStop.
func echoChild() error {
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		return err
	}
	b, err := NewBoard(tr, fastOptions())
	if err != nil {
		return err
	}
	defer b.Close()
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		return err
	}
	fmt.Printf("NIC %d\n", uint64(b.NICID()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return echoLoop(ctx, e, nil)
}
