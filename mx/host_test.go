package mx

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/shm"
	"github.com/gomx-dev/gomx/transport/udp"
)

// hostChildEnv makes the test binary an mx echo server on a UDP board with
// the host path on (by default: UDP ids are host-unique), in the endpoint
// directory given.
const hostChildEnv = "GOMX_MX_HOST_CHILD"

func hostOptions(dir string) BoardOptions {
	o := fastOptions()
	o.Local.Off = false
	o.Local.ShmDir = dir
	return o
}

// TestHostPath: two processes with UDP boards on this host find each other
// in the endpoint directory and exchange every size class through shared
// memory, without configuration beyond turning the host path on.
func TestHostPath(t *testing.T) {
	runChild(hostChildEnv, hostEchoChild)
	checkLeaks(t)
	dir := shmDir(t)
	ctx := testCtx(t, 60*time.Second)
	_, nic := startHostChild(t, ctx, dir)
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp unavailable: %v", err)
	}
	b, err := NewBoard(tr, hostOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.HostPathErr(); err != nil {
		t.Fatal(err)
	}
	e, addr := openConnected(t, ctx, b, nic)
	if !b.HostPath(nic) {
		t.Fatal("the peer on this host is not reached through shared memory")
	}
	// Frames to it are cut for the rings' MTU, not UDP's 1472 bytes: a
	// 4 KiB message is one medium fragment, a pull reply 64 KiB.
	b.mu.Lock()
	stride, reply := addr.p.stride, addr.p.replyLen
	b.mu.Unlock()
	if stride < 4096 || reply < 32<<10 {
		t.Errorf("host path frames: medium stride %d, pull reply %d; want the rings' sizes", stride, reply)
	}
	echoSizes(t, ctx, e, addr, []int{0, 1, 32, 33, 128, 129, 4096, 32768, 32769, 1 << 20, 4<<20 + 1})
	// Every frame went through the rings, none through UDP.
	var shmSent uint64
	for _, c := range b.host.tr.Counters() {
		if c.Name == "shm frames sent" {
			shmSent = c.Value
		}
	}
	if e.Counters().Get(RecvCMA) == 0 {
		t.Error("no large message was copied once from the child")
	}
	if shmSent < 11 {
		t.Fatalf("only %d frames went through shared memory", shmSent)
	}
	for _, c := range b.TransportCounters() {
		if (c.Name == "sent" || c.Name == "received") && c.Value != 0 {
			t.Fatalf("UDP %s %d frames", c.Name, c.Value)
		}
	}
	s, _ := e.ISend(nil, addr, echoStop, nil)
	mustWait(t, s, 10*time.Second)
}

// recvCounter counts the receives made on a transport (n) and the frames
// they returned.
type recvCounter struct {
	transport.Transport
	n, frames atomic.Uint64
}

func (c *recvCounter) Recv(f []transport.Frame, d time.Duration) (int, error) {
	c.n.Add(1)
	k, err := c.Transport.Recv(f, d)
	c.frames.Add(uint64(k))
	return k, err
}

// TestBusyPollHostPathSyscalls: a busy-polling waiter on a UDP board with
// the host path looks at the UDP socket, a system call, only once per
// syscallEvery looks at the rings, so a message through the rings does not
// wait behind one at every look; and frames that come over UDP (from a
// peer without the host path) are still taken by the waiter.
func TestBusyPollHostPathSyscalls(t *testing.T) {
	dir := shmDir(t)
	ctx := testCtx(t, 2*time.Minute)
	_, ringPeer := startHostChild(t, ctx, dir+"+busy")
	_, udpPeer := startHostChild(t, ctx, "-+busy")
	u, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp unavailable: %v", err)
	}
	sock := &recvCounter{Transport: u}
	o := hostOptions(dir)
	o.BusyPoll = true
	o.Local.Shm = true // the wrapper hides the UDP transport's host-unique ids
	b, err := NewBoard(sock, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.HostPathErr(); err != nil {
		t.Fatal(err)
	}
	rings := b.host.src
	ringLooks := &recvCounter{Transport: rings.tr}
	// The progress goroutine may sit in the rings' Recv, holding the
	// source's lock, with no frame to come: ask it out (Wake) until the
	// lock is ours.
	for !rings.mu.TryLock() {
		if ctx.Err() != nil {
			t.Fatal("the rings' receive loop never let go of its source")
		}
		rings.kick()
		runtime.Gosched()
	}
	rings.tr = ringLooks
	// Every look a Recv, so the wrapper counts them all: a waiter's look
	// through the lane (takeLane) takes no Recv when it finds the rings
	// empty or takes a lane record. The ratio asserted is the waiters'
	// looks at each source, whatever one look at the rings does.
	rings.lane = nil
	rings.mu.Unlock()
	e, toRings := openConnected(t, ctx, b, ringPeer)
	toUDP, err := e.Connect(ctx, udpPeer, 0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !b.HostPath(ringPeer) || b.HostPath(udpPeer) {
		t.Fatalf("host path to the ring peer %v, to the UDP peer %v; want true, false", b.HostPath(ringPeer), b.HostPath(udpPeer))
	}
	sizes := make([]int, 2000)
	for i := range sizes {
		sizes[i] = 8
	}
	sock0, rings0, loop0 := sock.n.Load(), ringLooks.n.Load(), b.loopRecvs.Load()
	echoSizes(t, ctx, e, toRings, sizes)
	waiterSock := (sock.n.Load() - sock0) - (b.loopRecvs.Load() - loop0)
	looks := ringLooks.n.Load() - rings0
	if looks == 0 || waiterSock*8 > looks {
		t.Errorf("%d echoes through the rings: waiters looked at the UDP socket %d times and at the rings %d times; want at most one socket look per %d ring looks",
			len(sizes), waiterSock, looks, syscallEvery)
	}
	t.Logf("%d echoes through the rings: %d looks at the rings, %d at the UDP socket", len(sizes), looks, waiterSock)
	udpIn := sock.frames.Load()
	echoSizes(t, ctx, e, toUDP, []int{0, 8, 128, 1000, 4096, 70000})
	if got := sock.frames.Load() - udpIn; got < 6 {
		t.Errorf("%d frames came over UDP for 6 echoes", got)
	}
	for _, a := range []Addr{toRings, toUDP} {
		s, _ := e.ISend(nil, a, echoStop, nil)
		mustWait(t, s, 10*time.Second)
	}
}

// hostEchoChild serves echoes on a UDP board, with the host path in dir,
// or without one when dir is "-" (and busy-polling waits with a "+busy"
// suffix).
func hostEchoChild(dir string) error {
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		return err
	}
	busy := strings.HasSuffix(dir, "+busy")
	dir = strings.TrimSuffix(dir, "+busy")
	opts := hostOptions(dir)
	if dir == "-" {
		opts = DefaultBoardOptions()
		opts.Local.Off = true
	}
	opts.BusyPoll = busy
	b, err := NewBoard(tr, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.HostPathErr(); err != nil {
		return err
	}
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		return err
	}
	fmt.Printf("NIC %d\n", uint64(b.NICID()))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return echoLoop(ctx, e, nil)
}

// TestHostPathDefault: the host path is on by default exactly for
// transports whose NIC ids are unique on the host, and GOMX_SHM / NoShm
// turn it off.
func TestHostPathDefault(t *testing.T) {
	dir := shmDir(t)
	open := func(tr transport.Transport, o BoardOptions) *Board {
		t.Helper()
		o.Local.ShmDir = dir
		b, err := NewBoard(tr, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	udpTr := func() transport.Transport {
		tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
		if err != nil {
			t.Skipf("udp unavailable: %v", err)
		}
		return tr
	}
	a := open(udpTr(), BoardOptions{})
	b := open(udpTr(), BoardOptions{})
	if a.HostPathErr() != nil || a.host == nil {
		t.Fatalf("UDP board without a host path: %v", a.HostPathErr())
	}
	if !a.HostPath(b.NICID()) {
		t.Error("a UDP board on this host is not reached through shared memory")
	}
	off := open(udpTr(), BoardOptions{Local: LocalOptions{NoShm: true}})
	if off.host != nil || a.HostPath(off.NICID()) {
		t.Error("NoShm left a host path")
	}
	// Off (no in-process shortcut) keeps frames on the transport, unless
	// Shm asks for the host path too, as a benchmark client whose server
	// is another process does.
	if noLocal := open(udpTr(), BoardOptions{Local: LocalOptions{Off: true}}); noLocal.host != nil || a.HostPath(noLocal.NICID()) {
		t.Error("Off alone left a host path")
	}
	both := open(udpTr(), BoardOptions{Local: LocalOptions{Off: true, Shm: true}})
	if both.host == nil || !both.HostPath(a.NICID()) || !a.HostPath(both.NICID()) {
		t.Errorf("Off with Shm: no host path (%v)", both.HostPathErr())
	}
	t.Setenv("GOMX_SHM", "off")
	if envOff := open(udpTr(), BoardOptions{}); envOff.host != nil {
		t.Error("GOMX_SHM=off left a host path")
	}
	t.Setenv("GOMX_SHM", "")
	port, err := loopback.NewNetwork(loopback.Options{}).Attach(1)
	if err != nil {
		t.Fatal(err)
	}
	if lb := open(port, BoardOptions{}); lb.host != nil {
		t.Error("a loopback board (ids repeat across processes) opened a host path")
	}
}

// startHostChild starts TestHostPath's child (a UDP board with the host
// path on, in dir) and returns it with the NIC id it printed.
func startHostChild(t *testing.T, ctx context.Context, dir string, env ...string) (*exec.Cmd, transport.NICID) {
	t.Helper()
	cmd, sc := startTestChild(t, ctx, "TestHostPath", append([]string{hostChildEnv + "=" + dir}, env...)...)
	nic := scanNIC(sc)
	if nic == 0 {
		t.Fatalf("child: %q", sc.Text())
	}
	return cmd, nic
}

// openHostPeer opens a UDP board with options o (the host path on) and an
// endpoint connected to the board nic of this host, which it checks is
// reached through shared memory. The board closes when t ends.
func openHostPeer(t *testing.T, ctx context.Context, o BoardOptions, nic transport.NICID) (*Board, *Endpoint, Addr) {
	t.Helper()
	tr, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp unavailable: %v", err)
	}
	b, err := NewBoard(tr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e, addr := openConnected(t, ctx, b, nic)
	if !b.HostPath(nic) {
		t.Fatal("the peer on this host is not reached through shared memory")
	}
	return b, e, addr
}

// scanNIC reads the "NIC <id>" line TestHostPath's child prints first, or
// returns 0 when the child printed something else or nothing.
func scanNIC(sc *bufio.Scanner) transport.NICID {
	if sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "NIC "); ok {
			v, _ := strconv.ParseUint(s, 10, 64)
			return transport.NICID(v)
		}
	}
	return 0
}

// TestLoopSpinFollowsFrameGaps: the host path's receive loop stops spinning
// when its frames come far apart (each spin would end in a sleep), spins
// again when they come within reach of a spin, and learns nothing from a
// Recv that found frames at once.
func TestLoopSpinFollowsFrameGaps(t *testing.T) {
	const max = 20 * time.Microsecond
	s := loopSpin{cur: max, max: max}
	var steps int
	for s.cur > 0 {
		if steps++; steps > 10 {
			t.Fatalf("still spinning %v after %d gaps of a millisecond", s.cur, steps-1)
		}
		s.next(time.Millisecond)
	}
	if d, changed := s.next(time.Millisecond); d != 0 || changed {
		t.Fatalf("a long gap with no spin: spin %v (changed %v), want 0 unchanged", d, changed)
	}
	if d, changed := s.next(100 * time.Nanosecond); d != 0 || changed {
		t.Fatalf("frames found at once moved the spin to %v (changed %v)", d, changed)
	}
	for steps = 0; s.cur < max; {
		if steps++; steps > 10 {
			t.Fatalf("spin %v after %d frames that came within %v", s.cur, steps-1, max)
		}
		if _, changed := s.next(max / 2); !changed {
			t.Fatalf("a frame within the spin's reach left the spin at %v", s.cur)
		}
	}
	if s.cur != max {
		t.Fatalf("spin %v, beyond its maximum %v", s.cur, max)
	}
}

// TestBlockingWaitOneP: between processes with one P each (ranks bound to
// one CPU), a blocking ping-pong through the host path's rings is not held
// up by the receive loop. The loop hands its processor to each waiter its
// frames wake (LoopYields) before it spins in Recv again, so that waiter's
// next wait finds the rings free and polls them itself, instead of finding
// the loop inside Recv, asking it out and sleeping at once (HandOvers),
// which every message did before. Without polling (Spin off) every reply
// reaches its sleeping waiter through such a yield. Every byte comes back.
func TestBlockingWaitOneP(t *testing.T) {
	const n = 200
	for _, poll := range []bool{true, false} {
		name := "poll"
		if !poll {
			name = "nopoll"
		}
		t.Run(name, func(t *testing.T) {
			dir := shmDir(t)
			ctx := testCtx(t, time.Minute)
			_, nic := startHostChild(t, ctx, dir, "GOMAXPROCS=1")
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
			o := hostOptions(dir)
			if !poll {
				o.Spin = -1
			}
			b, e, addr := openHostPeer(t, ctx, o, nic)
			st0 := b.WaitStats()
			for i := range n {
				msg, buf := pattern(8, uint64(i)), make([]byte, 8)
				r, err := e.IRecv([][]byte{buf}, uint64(i), ^uint64(0), nil)
				if err != nil {
					t.Fatal(err)
				}
				s, err := e.ISend([][]byte{msg}, addr, uint64(i), nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Wait(ctx); err != nil || !bytes.Equal(buf, msg) {
					t.Fatalf("round trip %d: %v, or wrong bytes %x (sent %x)", i, err, buf, msg)
				}
				if _, err := s.Wait(ctx); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
			}
			for _, c := range b.host.tr.Counters() {
				t.Logf("%s %d", c.Name, c.Value)
			}
			t.Logf("spin %v; counters %v", b.host.tr.Spin(), b.Counters())
			for range 0 {
			}
			st := b.WaitStats()
			yields, handOvers := st.LoopYields-st0.LoopYields, st.HandOvers-st0.HandOvers
			t.Logf("%d round trips: %d loop yields, %d hand-overs, %d polled, %d slept", n, yields, handOvers, st.Polled-st0.Polled, st.Slept-st0.Slept)
			if poll && handOvers > n/4 {
				t.Errorf("%d of %d waits found the loop inside Recv and slept at once; want the loop to leave the rings to them", handOvers, n)
			}
			if !poll && yields < n/2 {
				t.Errorf("the loop yielded to %d of %d woken waiters; want it to hand each its processor", yields, n)
			}
			s, _ := e.ISend(nil, addr, echoStop, nil)
			mustWait(t, s, 10*time.Second)
		})
	}
}

// TestHostPathFrameAtOpen: frames that reach the rings while a board opens
// (a peer still connecting to the endpoint number a process at the same
// address had before) are answered by the board each time it opens. What
// guards this is NewBoard's order, which starts the path's goroutine only
// once the board is set up; it once started it before the board's send
// buffer existed, and a nack for a frame taken in that window panicked.
// The window is too short for this test to hit reliably; it checks the
// scenario end to end.
func TestHostPathFrameAtOpen(t *testing.T) {
	checkLeaks(t)
	dir := shmDir(t)
	hdir, err := hostDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp unavailable: %v", err)
	}
	addr := first.Addr()
	first.Close()
	// A stranger on this host keeps asking endpoint 7 of that address to
	// connect, before, during and after each board at it opens.
	peer, err := shm.Open(shm.Options{Dir: hdir})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	frame := make([]byte, wire.HeadLen+wire.ConnectLen)
	(&wire.Connect{DstEP: 7, SrcEP: 1, SrcSession: 9, Key: testKey}).Put(frame[wire.HeadLen:], wire.BigEndian)
	stop, done := make(chan struct{}), make(chan struct{})
	rx := make([]transport.Frame, 16)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			peer.Send([]transport.Frame{{Peer: addr, Data: frame}}) // fails while no board is there
			// It takes what comes back (the nacks, the rings' own
			// records), as any peer on the rings does.
			peer.Recv(rx, 0) // valid until the next Recv: nothing to release
			runtime.Gosched()
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 10 {
		tr, err := udp.Listen(addr.UDPAddr().String(), udp.Options{})
		if err != nil {
			t.Skipf("udp: the address is taken again: %v", err)
		}
		o := hostOptions(dir)
		o.Local.Shm = true
		b, err := NewBoard(tr, o)
		if err != nil {
			t.Fatal(err)
		}
		if b.HostPathErr() != nil || b.host == nil {
			b.Close()
			t.Fatalf("board %d: no host path: %v", i, b.HostPathErr())
		}
		waitCond(t, "the board refuses the stranger's connect", func() bool {
			return b.Counters().Get(DropBadEndpoint) > 0
		})
		b.Close()
	}
}
