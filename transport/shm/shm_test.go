package shm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/leaktest"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/transporttest"
)

// childEnv makes the test binary a child process playing a role (see
// TestMain): "echo DIR BOARD [spin|poll]", "dial DIR BOARD" (report
// whether attaching to BOARD works), "hold DIR BOARD PEER" (connect to
// PEER, send a frame, then wait to be killed), "idle DIR BOARD A E"
// (connect to A and E, then sleep until a peer goes away) or "atlimit
// DIR 0" (see atLimitChild).
const childEnv = "GOMX_SHM_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(child(strings.Fields(role)))
	}
	os.Exit(m.Run())
}

func child(args []string) int {
	dir := args[1]
	board, _ := strconv.Atoi(args[2])
	switch args[0] {
	case "atlimit":
		return atLimitChild(dir) // fdlimit_test.go
	case "dial":
		// Another user: neither the directory nor the board may be usable.
		if _, err := Open(Options{Dir: dir}); err == nil {
			fmt.Println("opened a board in the directory")
			return 1
		}
		t := &Transport{opts: Options{Dir: dir, MTU: 65535, RingSize: 1 << 20}}
		if _, err := t.dial(NICBase | transport.NICID(board)); err == nil {
			fmt.Println("attached to the board")
			return 1
		} else {
			fmt.Println("refused:", err)
		}
		return 0
	case "last", "lastclose":
		// Sends count numbered frames to peer, then goes: exits without
		// Close (as a crash would), or after it.
		t, err := Open(Options{Dir: dir, Board: board})
		if err != nil {
			fmt.Println("open:", err)
			return 1
		}
		peer, _ := strconv.Atoi(args[3])
		count, _ := strconv.Atoi(args[4])
		for i := range count {
			if _, err := t.Send([]transport.Frame{{Peer: NICBase | transport.NICID(peer), Data: []byte(fmt.Sprintf("frame %d", i))}}); err != nil {
				fmt.Fprintln(os.Stderr, "child send:", err)
				return 1
			}
		}
		if args[0] == "lastclose" {
			t.Close()
		}
		return 0
	case "claim":
		// A producer killed mid-enqueue (TestQueueProducerKilledMidEnqueue):
		// sends "hello" through PEER's receive queue, then claims three
		// cells after it, writes part of a frame and waits to be killed.
		t, err := Open(Options{Dir: dir, Board: board})
		if err != nil {
			fmt.Println("open:", err)
			return 1
		}
		peer := NICBase | transport.NICID(must(strconv.Atoi(args[3])))
		if _, err := t.Send([]transport.Frame{{Peer: peer, Data: []byte("hello")}}); err != nil {
			fmt.Println("send:", err)
			return 1
		}
		o, err := t.ringTo(peer)
		if err != nil || o.data != nil {
			fmt.Println("no queue to the peer:", err)
			return 1
		}
		c, ok := o.q.claim(3)
		if !ok {
			fmt.Println("no room to claim")
			return 1
		}
		copy(o.q.cells[int(c&o.q.mask)*cellLen+cellHdr:], "half a fra")
		fmt.Println("ready")
		select {} // until killed
	case "idle":
		// An idle rank of a job (BenchmarkPeersIdleProcs): says hello
		// to A and E, then sleeps in Recv, dropping what comes, until a
		// peer goes away.
		t, err := Open(Options{Dir: dir, Board: board})
		if err != nil {
			fmt.Println("open:", err)
			return 1
		}
		defer t.Close()
		for _, p := range args[3:5] {
			peer, _ := strconv.Atoi(p)
			if _, err := t.Send([]transport.Frame{{Peer: NICBase | transport.NICID(peer), Data: []byte("hello")}}); err != nil {
				fmt.Fprintln(os.Stderr, "child send:", err)
				return 1
			}
		}
		fmt.Println("ready")
		frames := make([]transport.Frame, 64)
		for {
			if _, err := t.Recv(frames, time.Second); err != nil {
				return 1
			}
			if len(t.LostPeers(nil)) > 0 {
				return 0
			}
		}
	case "echo", "hold":
		o := Options{Dir: dir, Board: board}
		if len(args) > 3 && args[3] == "spin" {
			o.Spin = time.Hour // BenchmarkFloorPingPong: poll, never sleep
		}
		t, err := Open(o)
		if err != nil {
			fmt.Println("open:", err)
			return 1
		}
		fmt.Println("ready")
		if args[0] == "hold" {
			peer, _ := strconv.Atoi(args[3])
			if _, err := t.Send([]transport.Frame{{Peer: NICBase | transport.NICID(peer), Data: []byte("hello")}}); err != nil {
				fmt.Fprintln(os.Stderr, "child send:", err)
				return 1
			}
			select {} // until killed
		}
		frames := make([]transport.Frame, 64)
		if len(args) > 3 && args[3] == "poll" {
			return pollEcho(t, frames)
		}
		for {
			n, err := t.Recv(frames, -1)
			if err != nil {
				fmt.Fprintln(os.Stderr, "child recv:", err)
				return 1
			}
			for i := 0; i < n; i++ {
				if string(frames[i].Data) == "quit" {
					t.Close()
					return 0
				}
			}
			if _, err := t.Send(frames[:n]); err != nil {
				fmt.Fprintln(os.Stderr, "child echo:", err)
				return 1
			}
		}
	}
	return 2
}

// pollEcho is the echo child of BenchmarkTransportPingPong: it receives as
// mx's waiters do (Recv(frames, 0) in a loop) and sends each frame back on
// its own (as mx's sendFrame does), until "quit" or until its peer goes
// away.
func pollEcho(t *Transport, frames []transport.Frame) int {
	defer t.Close()
	tx := make([]transport.Frame, 1)
	for i := 0; ; i++ {
		n, err := t.Recv(frames, 0)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child recv:", err)
			return 1
		}
		if n == 0 && i&0xfffff == 0xfffff && len(t.LostPeers(nil)) > 0 {
			return 0 // the benchmark is gone
		}
		for _, f := range frames[:n] {
			if string(f.Data) == "quit" {
				return 0
			}
			tx[0] = transport.Frame{Peer: f.Peer, Data: f.Data}
			if _, err := t.Send(tx); err != nil {
				fmt.Fprintln(os.Stderr, "child echo:", err)
				return 1
			}
		}
	}
}

// testDir is a short private endpoint directory (socket paths are limited
// to 108 bytes).
func testDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "gomx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "ep")
}

// openChecked opens a board in a directory of its own, closed when the
// test ends, and checks that the test leaves nothing behind.
func openChecked(t *testing.T) (*Transport, string) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	a, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() }) // before the check: cleanups run last first
	return a, dir
}

func newTestPair(t *testing.T, o Options) (a, b *Transport) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	o.Dir = dir
	a, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err = Open(o)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("a: %v\nb: %v", a.Counters(), b.Counters())
		}
	})
	return a, b
}

// inPlaceOpts has the suite send regions from the sender's pool, in
// place, and prove it (transporttest.Options.InPlace).
var inPlaceOpts = transporttest.Options{
	InPlace: true,
	RegionMemory: func(t *testing.T, a transport.Transport, n int) []byte {
		b, err := testPool(t, a.(*Transport)).Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		return b
	},
}

// testPool returns tr's pool, made on first use (closed with tr).
func testPool(t *testing.T, tr *Transport) *Pool {
	tr.outMu.Lock()
	p := tr.pool
	tr.outMu.Unlock()
	if p != nil {
		return p
	}
	p, err := tr.NewPool(PoolOptions{TableWords: 1, NoHugepages: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	transporttest.RunWith(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		a, b := newTestPair(t, Options{})
		return a, b
	}, inPlaceOpts)
}

func TestConformanceSmallRings(t *testing.T) {
	// Rings that fill up and wrap all the time, on ordinary pages.
	transporttest.RunWith(t, func(t *testing.T) (transport.Transport, transport.Transport) {
		a, b := newTestPair(t, Options{MTU: 9000, RingSize: minRingLen, NoHugepages: true})
		return a, b
	}, inPlaceOpts)
}

func TestOptionsAndDirectory(t *testing.T) {
	for _, o := range []Options{{Board: -1}, {Board: MaxBoard + 1}, {MTU: 10}, {RingSize: 1000}} {
		o.Dir = testDir(t)
		if _, err := Open(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	dir := testDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("a directory open to others: %v", err)
	}
	os.Chmod(dir, 0o700)
	a, err := Open(Options{Dir: dir, Board: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Addr() != NICBase|7 || a.Board() != 7 {
		t.Fatalf("board 7 has NIC %v", a.Addr())
	}
	if st, err := os.Stat(a.Path()); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v", a.Path(), st.Mode(), err)
	}
	if _, err := Open(Options{Dir: dir, Board: 7}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second open of a live board: %v", err)
	}
	if _, err := a.Send([]transport.Frame{{Peer: NICBase | 8, Data: []byte("x")}}); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("send to a missing board: %v", err)
	}
	if _, err := a.Send([]transport.Frame{{Peer: 0x020000000001, Data: []byte("x")}}); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("send to a non-shm NIC: %v", err)
	}
}

// spawn starts the test binary as a child in role and waits for "ready".
func spawn(t testing.TB, bin string, cred *syscall.Credential, role string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Stderr = os.Stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			cmd.Process.Signal(syscall.SIGQUIT) // its goroutines, on stderr
			time.Sleep(time.Second)
		}
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

func waitReady(t testing.TB, r *bufio.Reader) {
	t.Helper()
	line, err := r.ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q %v", line, err)
	}
}

// recvFrom receives until a frame from peer arrives (bounded).
func recvFrom(t *testing.T, tr *Transport, peer transport.NICID) []byte {
	t.Helper()
	frames := make([]transport.Frame, 8)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		n, err := tr.Recv(frames, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < n; i++ {
			if frames[i].Peer == peer {
				return append([]byte(nil), frames[i].Data...)
			}
		}
	}
	t.Fatalf("nothing from %v: %v rings %d", peer, tr.Counters(), len(*tr.in.Load()))
	return nil
}

// TestAcrossProcesses echoes frames of every size through a child process.
func TestAcrossProcesses(t *testing.T) {
	a, dir := openChecked(t)
	cmd, out := spawn(t, os.Args[0], nil, fmt.Sprintf("echo %s %d", dir, 4242))
	waitReady(t, out)
	peer := NICBase | 4242
	for _, size := range []int{0, 1, 7, 8, 100, 4096, 9000, 65535} {
		msg := bytes.Repeat([]byte{byte(size)}, size)
		for i := range msg {
			msg[i] ^= byte(i * 7)
		}
		if _, err := a.Send([]transport.Frame{{Peer: peer, Data: msg}}); err != nil {
			t.Fatal(err)
		}
		if got := recvFrom(t, a, peer); !bytes.Equal(got, msg) {
			t.Fatalf("%d bytes: echo differs", size)
		}
	}
	if pids := a.PeerPids(nil); len(pids) != 1 || pids[0] != cmd.Process.Pid {
		t.Fatalf("PeerPids %v, want the child's %d", pids, cmd.Process.Pid)
	}
	a.Send([]transport.Frame{{Peer: peer, Data: []byte("quit")}})
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

// TestKilledPeer: a producer killed mid-run is noticed (it wrote into our
// receive queue, so nothing of it is mapped here; our mapping of its queue
// goes at the next send), sends to it fail, and a new process takes over
// its board number.
func TestKilledPeer(t *testing.T) {
	a, dir := openChecked(t)
	cmd, out := spawn(t, os.Args[0], nil, fmt.Sprintf("hold %s %d %d", dir, 77, a.Board()))
	waitReady(t, out)
	peer := NICBase | 77
	if got := recvFrom(t, a, peer); string(got) != "hello" {
		t.Fatalf("got %q", got)
	}
	// Our ring to it, too.
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("hi")}}); err != nil {
		t.Fatal(err)
	}
	m1 := leaktest.Now(t).Maps
	cmd.Process.Kill()
	cmd.Wait()
	frames := make([]transport.Frame, 8)
	deadline := time.Now().Add(20 * time.Second)
	for {
		a.Recv(frames, 10*time.Millisecond)
		if c := counter(a, "shm peers gone"); c >= 2 && len(a.PeerPids(nil)) == 0 {
			if leaktest.Now(t).Maps == m1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed peer was not noticed: %v", a.Counters())
		}
	}
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("x")}}); !errors.Is(err, transport.ErrUnreachable) {
		t.Fatalf("send to a killed peer: %v", err)
	}
	if pids := a.PeerPids(nil); len(pids) != 0 {
		t.Fatalf("PeerPids %v after the peer was killed, want none", pids)
	}
	// A new process takes the board over (its socket file is stale).
	cmd2, out2 := spawn(t, os.Args[0], nil, fmt.Sprintf("echo %s %d", dir, 77))
	waitReady(t, out2)
	if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("again")}}); err != nil {
		t.Fatal(err)
	}
	if got := recvFrom(t, a, peer); string(got) != "again" {
		t.Fatalf("got %q", got)
	}
	a.Send([]transport.Frame{{Peer: peer, Data: []byte("quit")}})
	cmd2.Wait()
}

// TestKilledPeerReportedOnce: a killed peer process is reported lost
// (LostPeers) once, though both its connections close (its ring to us and
// ours to it), each seen by a watcher of its own: the second close, however
// late, is no news, which the layer above would take for the loss of the
// process that took the board over since. Processes take board 77 in
// turn, each killed once both its rings are up (the last one closes its
// transport instead, which is a loss too, and leaves no socket behind);
// LostPeers is looked at as often as the test can, so that a look falls
// between the two closes.
func TestKilledPeerReportedOnce(t *testing.T) {
	a, dir := openChecked(t)
	peer := NICBase | 77
	const rounds = 10
	for round := range rounds {
		cmd, out := spawn(t, os.Args[0], nil, fmt.Sprintf("echo %s %d", dir, 77))
		waitReady(t, out)
		msg := fmt.Appendf(nil, "round %d", round)
		if _, err := a.Send([]transport.Frame{{Peer: peer, Data: msg}}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := recvFrom(t, a, peer); !bytes.Equal(got, msg) {
			t.Fatalf("round %d: echo %q, want %q", round, got, msg)
		}
		if lost := a.LostPeers(nil); len(lost) != 0 {
			t.Fatalf("round %d: %v reported lost while it runs (a late report of the process before it)", round, lost)
		}
		gone := counter(a, "shm peers gone") // connections seen closed
		if round < rounds-1 {
			cmd.Process.Kill()
		} else if _, err := a.Send([]transport.Frame{{Peer: peer, Data: []byte("quit")}}); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		reports := 0
		count := func() {
			for _, p := range a.LostPeers(nil) {
				if p != peer {
					t.Fatalf("round %d: board %v reported lost", round, p)
				}
				reports++
			}
		}
		for i := 0; counter(a, "shm peers gone") < gone+2; i++ {
			if i == 1<<22 {
				t.Fatalf("round %d: the killed peer's connections were not both seen closed: %v", round, a.Counters())
			}
			count()
			if i&1023 == 1023 {
				time.Sleep(time.Millisecond)
			} else {
				runtime.Gosched()
			}
		}
		count()
		if reports != 1 {
			t.Fatalf("round %d: the killed process was reported lost %d times, want once", round, reports)
		}
	}
}

// TestLastFramesOfAPeerThatWent: the frames a peer published before it
// exited (crashed, or closed its transport) are all delivered, in order,
// before its ring is dropped; then nothing of it is left.
func TestLastFramesOfAPeerThatWent(t *testing.T) {
	for _, role := range []string{"last", "lastclose"} {
		t.Run(role, func(t *testing.T) {
			a, dir := openChecked(t)
			const count = 200
			cmd, _ := spawn(t, os.Args[0], nil, fmt.Sprintf("%s %s %d %d %d", role, dir, 78, a.Board(), count))
			if err := cmd.Wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
			// Not a Recv before its connection is seen closed: the frames
			// are all in a ring whose producer is gone.
			for i := 0; counter(a, "shm peers gone") == 0; i++ {
				if i == 20000 {
					t.Fatal("the peer's exit was not noticed")
				}
				time.Sleep(time.Millisecond)
			}
			frames := make([]transport.Frame, 16)
			next := 0
			for i := 0; next < count; i++ {
				if i == 1000 {
					t.Fatalf("%d of %d frames arrived: %v", next, count, a.Counters())
				}
				n, err := a.Recv(frames, 10*time.Millisecond)
				if err != nil {
					t.Fatal(err)
				}
				for _, f := range frames[:n] {
					if want := fmt.Sprintf("frame %d", next); string(f.Data) != want || f.Peer != NICBase|78 {
						t.Fatalf("got %q from %v, want %q from %v", f.Data, f.Peer, want, NICBase|78)
					}
					next++
				}
			}
			for i := 0; len(*a.in.Load()) != 0; i++ {
				if i == 1000 {
					t.Fatalf("the ring of the peer that went is still mapped after %d receives", i)
				}
				if n, _ := a.Recv(frames, time.Millisecond); n != 0 {
					t.Fatalf("%d frames more", n)
				}
			}
			if role == "last" {
				// Its socket file stays; the next Open sweeps it.
				b, err := Open(Options{Dir: dir})
				if err != nil {
					t.Fatal(err)
				}
				b.Close()
			}
		})
	}
}

func counter(t *Transport, name string) uint64 {
	for _, c := range t.Counters() {
		if c.Name == name {
			return c.Value
		}
	}
	return 0
}

// TestOtherUserCannotAttach runs a child as nobody: it may neither open a
// board in our directory nor attach to one of our boards.
func TestOtherUserCannotAttach(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a child as another user (nobody); run the tests as root")
	}
	a, dir := openChecked(t)
	// The test binary must be reachable by nobody.
	bindir, err := os.MkdirTemp("", "gomxbin")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bindir)
	os.Chmod(bindir, 0o755)
	bin := filepath.Join(bindir, "shm.test")
	src, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, src, 0o755); err != nil {
		t.Fatal(err)
	}
	// Open the parent directories of the endpoint directory to nobody, so
	// only the endpoint directory's own mode and SO_PEERCRED stand guard.
	os.Chmod(filepath.Dir(dir), 0o755)
	nobody := func() {
		t.Helper()
		cmd, out := spawn(t, bin, &syscall.Credential{Uid: 65534, Gid: 65534}, fmt.Sprintf("dial %s %d", dir, a.Board()))
		res, _ := io.ReadAll(out)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("nobody attached: %s (%v)", res, err)
		}
		if !strings.HasPrefix(string(res), "refused:") {
			t.Fatalf("child said %q", res)
		}
		t.Logf("nobody: %s", strings.TrimSpace(string(res)))
	}
	nobody() // the directory's mode stops it
	// Even with the directory and the socket opened up by mistake, the
	// board checks who connects (SO_PEERCRED) and refuses.
	os.Chmod(dir, 0o755)
	os.Chmod(a.Path(), 0o666)
	defer os.Chmod(dir, 0o700)
	nobody()
	deadline := time.Now().Add(10 * time.Second)
	for counter(a, "shm connections refused") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the board did not refuse nobody's connection")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestNamedByNIC: a board named after another transport's NIC id is
// reached by that id, and Reaches tells which peers listen.
func TestNamedByNIC(t *testing.T) {
	dir := testDir(t)
	leaktest.Check(t, dir)
	const udpNIC = transport.NICID(0x7F0000019C40) // 127.0.0.1:40000
	if _, err := Open(Options{Dir: dir, NIC: udpNIC, Board: 3}); err == nil {
		t.Fatal("NIC and Board together were accepted")
	}
	a, err := Open(Options{Dir: dir, NIC: udpNIC})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Addr() != udpNIC || !b.Reaches(udpNIC) || b.Reaches(udpNIC+1) {
		t.Fatalf("addr %v, reaches %v/%v", a.Addr(), b.Reaches(udpNIC), b.Reaches(udpNIC+1))
	}
	if _, err := b.Send([]transport.Frame{{Peer: udpNIC, Data: []byte("to udp")}}); err != nil {
		t.Fatal(err)
	}
	if got := recvFrom(t, a, b.Addr()); string(got) != "to udp" {
		t.Fatalf("got %q", got)
	}
	if _, err := a.Send([]transport.Frame{{Peer: b.Addr(), Data: []byte("back")}}); err != nil {
		t.Fatal(err)
	}
	if got := recvFrom(t, b, udpNIC); string(got) != "back" {
		t.Fatalf("got %q", got)
	}
}
