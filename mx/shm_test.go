package mx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
)

// shmDir is a short private endpoint directory for a test (unix socket
// paths are limited to 108 bytes).
func shmDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "gomx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "ep")
}

// newShmWire puts the two boards on shared-memory transports of one
// endpoint directory (in this process, with the in-process shortcut off, so
// every message crosses the rings).
func newShmWire(t testing.TB, f loopback.Faults) *wire2 {
	return shmWireWith(shm.Options{})(t, f)
}

// shmWireWith is newShmWire on transports opened with o (its Dir a fresh
// one of the test's), the third one too.
func shmWireWith(o shm.Options) func(testing.TB, loopback.Faults) *wire2 {
	return func(t testing.TB, _ loopback.Faults) *wire2 {
		o := o
		o.Dir = shmDir(t)
		open := func() transport.Transport {
			tr, err := shm.Open(o)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}
		return &wire2{a: open(), b: open(), third: open, close: func() {}}
	}
}

// shmBoardTo opens a shm board in dir with options o and its endpoint 0,
// and connects that to endpoint 0 of board peer (a child process's); the
// board closes when the test ends.
func shmBoardTo(t *testing.T, ctx context.Context, dir string, o BoardOptions, peer transport.NICID) (*Board, *Endpoint, Addr) {
	t.Helper()
	tr, err := shm.Open(shm.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBoard(tr, o)
	if err != nil {
		tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e, addr := openConnected(t, ctx, b, shm.NICBase|peer)
	return b, e, addr
}

// shmChildEnv makes the test binary an mx echo server on a shm board:
// "DIR BOARD".
const shmChildEnv = "GOMX_MX_SHM_CHILD"

// TestShmProcesses echoes every size class through an mx endpoint in a
// child process over shared memory, then kills the child: the requests
// that involve it complete with ErrUnreachable at once (the transport saw
// the process go; the resend limit is over an hour). New processes then
// take the board over in turn, each reached by a new Connect (some before
// the loss of the one before is seen) and killed, and nothing is left
// behind.
func TestShmProcesses(t *testing.T) {
	runChild(shmChildEnv, shmEchoChild)
	checkLeaks(t)
	dir := shmDir(t)
	leaktest.Check(t, "") // once the child is reaped, in startShmChild's cleanup
	ctx := testCtx(t, 60*time.Second)
	cmd := startShmChild(t, ctx, dir+" 99")
	tr, err := shm.Open(shm.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	o := shmTestOptions()
	// Pull through the rings: a single copy could finish reading the dying
	// child's message before its death is seen (TestLargeStrategies covers
	// the single copy).
	o.Local.Large = LargeRings
	b, err := NewBoard(tr, o)
	if err != nil {
		t.Fatal(err)
	}
	peer := shm.NICBase | 99
	e, addr := openConnected(t, ctx, b, peer)
	echoSizes(t, ctx, e, addr, []int{0, 1, 32, 33, 128, 129, 4096, 32768, 32769, 1 << 20, 4<<20 + 1})
	// The child sends a large message we have not asked for, then dies.
	s, _ := e.ISend(nil, addr, 1<<62, nil)
	mustWait(t, s, 10*time.Second)
	if _, err := e.Probe(ctx, 1<<62, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Kill()
	pull, _ := e.IRecv([][]byte{make([]byte, 1<<20)}, 1<<62, ^uint64(0), nil)
	if _, err := pull.Wait(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("pull from the dead: %v, want ErrUnreachable", err)
	}
	// Once the loss is known, sends fail until a new connect.
	if s, err := e.ISend([][]byte{pattern(100, 1)}, addr, 5, nil); err != nil {
		t.Fatal(err)
	} else if _, err := s.Wait(ctx); !errors.Is(err, ErrUnreachable) {
		t.Errorf("send to the dead: %v, want ErrUnreachable", err)
	}
	if e.Counters().Get(Unreachable) == 0 {
		t.Error("the lost peer was not counted")
	}
	// New processes take board 99 and endpoint 0 over in turn: each is
	// connected to and echoes, then is killed. Every other one's loss is
	// seen (a send to it fails) before the next starts; the others' next
	// is started and connected to at once, racing the notice of the loss.
	// The loss of one is never taken for the loss of the next (a peer
	// process has two connections with us, and both close; a notice may
	// be acted on after the next connect), and the connect that a loss
	// reset midway agrees with the new process on the session.
	counters := func() string {
		var nz []string
		e.Counters().NonZero(func(k Counter, v uint64) { nz = append(nz, fmt.Sprintf("%v=%d", k, v)) })
		return fmt.Sprintf("%v\n%v", nz, b.TransportCounters())
	}
	for round := range 8 {
		cmd2 := startShmChild(t, ctx, dir+" 99")
		addr, err = e.Connect(ctx, peer, 0, testKey)
		if err != nil {
			t.Fatalf("round %d: connect to the new process: %v", round, err)
		}
		buf := make([]byte, 5000)
		r, _ := e.IRecv([][]byte{buf}, 3, ^uint64(0), nil)
		s, _ = e.ISend([][]byte{pattern(5000, 3)}, addr, 3, nil)
		if _, err := s.Wait(testCtx(t, 10*time.Second)); err != nil {
			t.Fatalf("round %d: send to the new process: %v\n%s", round, err, counters())
		}
		if _, err := r.Wait(testCtx(t, 10*time.Second)); err != nil {
			t.Fatalf("round %d: echo from the new process: %v\n%s", round, err, counters())
		}
		if !bytes.Equal(buf, pattern(5000, 3)) {
			t.Fatalf("round %d: echo from the new process differs", round)
		}
		cmd2.Process.Kill()
		cmd2.Wait() // gone: nothing of it can answer any more
		if round%2 == 1 {
			continue // the next connect races the notice
		}
		if s, err := e.ISend([][]byte{pattern(100, 1)}, addr, 5, nil); err != nil {
			t.Fatal(err)
		} else if _, err := s.Wait(ctx); !errors.Is(err, ErrUnreachable) {
			t.Fatalf("round %d: send to the killed process: %v, want ErrUnreachable", round, err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 1 { // the dead child's socket may stay
		t.Errorf("left in the endpoint directory: %v", ents)
	}
}

// shmTestOptions never give up on a peer by resending (for over an hour):
// a dead peer must be noticed through the transport.
func shmTestOptions() BoardOptions {
	o := fastOptions()
	o.ResendMax = 1_000_000
	o.ZombieSends = -1 // eager sends complete on their ack, so a dead peer shows
	return o
}

// startShmChild starts the echo child on "DIR BOARD" and waits until it
// is ready.
func startShmChild(t *testing.T, ctx context.Context, arg string, env ...string) *exec.Cmd {
	t.Helper()
	cmd, sc := startTestChild(t, ctx, "TestShmProcesses", append([]string{shmChildEnv + "=" + arg}, env...)...)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child did not start: %q", sc.Text())
	}
	return cmd
}

// openShmChild opens, in a child process of the tests, board board of the
// shared-memory directory dir with options o, and its endpoint 0 (key
// testKey); the caller closes the board.
func openShmChild(dir string, board int, o BoardOptions) (*Board, *Endpoint, error) {
	tr, err := shm.Open(shm.Options{Dir: dir, Board: board})
	if err != nil {
		return nil, nil, err
	}
	b, err := NewBoard(tr, o)
	if err != nil {
		tr.Close()
		return nil, nil, err
	}
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		b.Close()
		return nil, nil, err
	}
	return b, e, nil
}

// shmEchoChild echoes messages on board BOARD of DIR; match 1<<62 makes it
// answer with an unexpected 1 MiB message. "busy" after them busy-polls;
// "compute" echoes one message and then waits for nothing in mx, as an
// application computing would.
func shmEchoChild(arg string) error {
	f := strings.Fields(arg)
	board, _ := strconv.Atoi(f[1])
	opts := shmTestOptions()
	opts.BusyPoll = len(f) > 2 && f[2] == "busy"
	compute := len(f) > 2 && f[2] == "compute"
	b, e, err := openShmChild(f[0], board, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	fmt.Println("ready")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	buf := make([]byte, 4<<20+1)
	for {
		r, err := e.IRecv([][]byte{buf}, 0, 0, nil)
		if err != nil {
			return err
		}
		st, err := r.Wait(ctx)
		if err != nil {
			return err
		}
		msg := buf[:st.XferLength]
		if st.Match == 1<<62 {
			msg = pattern(1<<20, 62)
		}
		s, err := e.ISend([][]byte{msg}, st.Source, st.Match, nil)
		if err != nil {
			return err
		}
		if st.Match == 1<<62 {
			continue // never completes: the parent kills us first
		}
		if _, err := s.Wait(ctx); err != nil {
			return err
		}
		if compute {
			<-ctx.Done() // not an mx wait: the parent kills us first
			return nil
		}
	}
}

// TestRingsCarryNoTrailer: two gomx boards that agreed on the CRC-32C
// trailer leave it off the frames they exchange through shared-memory
// rings (nothing corrupts a ring, and the CRC cost both sides of every
// message): a frame a board sends into a ring is exactly its header and
// payload, and every size class still arrives intact with no frame
// dropped.
func TestRingsCarryNoTrailer(t *testing.T) {
	pr := newPair(t, shmFactory, fastOptions(), loopback.Faults{})
	pr.ba.mu.Lock()
	agreed := pr.atob.p.crc
	pr.ba.mu.Unlock()
	if !agreed {
		t.Fatal("two gomx shm boards did not agree on the trailer: this test needs them to")
	}
	ctx := testCtx(t, time.Minute)
	for i, size := range []int{0, 8, 33, 4096, 40000, 1 << 20} {
		pr.sendLarge(t, pattern(size, uint64(i)), 1, uint64(i))
	}
	for _, b := range []*Board{pr.ba, pr.bb} {
		if c := b.Counters(); c.Get(DropBadChecksum)+c.Get(DropBadHeader) != 0 {
			t.Fatalf("frames dropped: %d bad checksums, %d bad headers", c.Get(DropBadChecksum), c.Get(DropBadHeader))
		}
	}
	// A raw ring endpoint sees what a board writes: its CONNECT, without
	// the 4 bytes of trailer.
	raw := pr.w.third().(*shm.Transport)
	defer raw.Close()
	c, err := pr.a.IConnect(raw.Addr(), 0, testKey, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.a.Cancel(c)
	frames := make([]transport.Frame, 8)
	for {
		n, err := raw.Recv(frames, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			f := frames[0].Data
			want, err := wire.FrameLen(f, pr.ba.ord)
			if err != nil {
				t.Fatal(err)
			}
			if len(f) != want {
				t.Fatalf("a CONNECT of %d bytes took %d in the ring: a trailer rode along", want, len(f))
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatal("no CONNECT reached the raw ring endpoint")
		}
	}
}
