package mx

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
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
	if dir := os.Getenv(hostChildEnv); dir != "" {
		if err := hostEchoChild(dir); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
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
	e, err := b.OpenEndpoint(0, testKey)
	if err != nil {
		t.Fatal(err)
	}
	addr, err := e.Connect(ctx, nic, 0, testKey)
	if err != nil {
		t.Fatal(err)
	}
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
	return echoLoop(ctx, e)
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
func startHostChild(t *testing.T, ctx context.Context, dir string) (*exec.Cmd, transport.NICID) {
	t.Helper()
	cmd, sc := startTestChild(t, ctx, "TestHostPath", hostChildEnv+"="+dir)
	var nic transport.NICID
	if sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), "NIC "); ok {
			v, _ := strconv.ParseUint(s, 10, 64)
			nic = transport.NICID(v)
		}
	}
	if nic == 0 {
		t.Fatalf("child: %q", sc.Text())
	}
	return cmd, nic
}
