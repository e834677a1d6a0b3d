package xdp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/netnstest"
)

// Our frames reach the sockets while a ping and a UDP exchange on the same
// interfaces keep working: the program passes what is not ours.
func TestCoexistence(t *testing.T) {
	r := newRig(t, 2, DriverMode, Options{})
	done := make(chan error, 1)
	go func() { done <- ipTraffic(r.pair) }()
	count := 20000
	if testing.Short() {
		count = 2000
	}
	transfer(t, &r.a, &r.b, count)
	transfer(t, &r.b, &r.a, count)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c, err := r.b.prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	var passed uint64
	for _, q := range c {
		passed += q.Passed
	}
	if passed == 0 {
		t.Errorf("the program passed no frame to the kernel, yet ping and UDP worked: %+v", c)
	}
}

// ipTraffic pings B from A and exchanges UDP datagrams both ways.
func ipTraffic(p *netnstest.Pair) error {
	if err := p.InA(func() error { return ping(p.IPB, 3) }); err != nil {
		return err
	}
	var srv, cli *net.UDPConn
	if err := p.InB(func() (err error) {
		srv, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.IPB, 9999)))
		return err
	}); err != nil {
		return err
	}
	defer srv.Close()
	if err := p.InA(func() (err error) {
		cli, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.IPB, 9999)))
		return err
	}); err != nil {
		return err
	}
	defer cli.Close()
	buf := make([]byte, 64)
	for i := range 10 {
		msg := fmt.Sprintf("hello %d", i)
		if _, err := cli.Write([]byte(msg)); err != nil {
			return err
		}
		srv.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, from, err := srv.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:n]) != msg {
			return fmt.Errorf("UDP server got %q, %v; want %q", buf[:n], err, msg)
		}
		if _, err := srv.WriteToUDPAddrPort([]byte("re "+msg), from); err != nil {
			return err
		}
		cli.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err = cli.Read(buf)
		if err != nil || string(buf[:n]) != "re "+msg {
			return fmt.Errorf("UDP client got %q, %v; want %q", buf[:n], err, "re "+msg)
		}
	}
	return nil
}

// ping sends count ICMP echo requests to dst over a raw socket of the
// calling thread's namespace and waits up to 2s for each reply.
func ping(dst netip.Addr, count int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	to := &unix.SockaddrInet4{Addr: dst.As4()}
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		req := []byte{8, 0, 0, 0, 0x47, 0x4d, 0, byte(seq), 'g', 'o', 'm', 'x'}
		sum := ipChecksum(req)
		req[2], req[3] = byte(sum>>8), byte(sum)
		if err := unix.Sendto(fd, req, 0, to); err != nil {
			return fmt.Errorf("ping %v: %w", dst, err)
		}
		ok := false
		for deadline := time.Now().Add(2 * time.Second); !ok && time.Now().Before(deadline); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			// An IPv4 header (no options from Linux), then the ICMP reply.
			ok = n >= 20+8 && buf[20] == 0 && buf[24] == 0x47 && buf[25] == 0x4d && buf[27] == byte(seq)
		}
		if !ok {
			return fmt.Errorf("ping %v: no echo reply to request %d within 2s", dst, seq)
		}
	}
	return nil
}

// sendRaw transmits frames built by build on sk, bounded in time.
func sendRaw(t *testing.T, sk *Socket, count int, build func(b []byte, i int) int) {
	t.Helper()
	descs := make([]Desc, 32)
	deadline := time.Now().Add(10 * time.Second)
	for sent := 0; sent < count; {
		n := sk.Alloc(descs[:min(len(descs), count-sent)])
		for i := range n {
			descs[i].Len = uint32(build(sk.Frame(descs[i]), sent+i))
		}
		for off := 0; off < n; {
			m, err := sk.Transmit(descs[off:n])
			if err != nil {
				t.Fatal(err)
			}
			off += m
			if m == 0 {
				runtime.Gosched()
			}
			if time.Now().After(deadline) {
				t.Fatalf("sent %d of %d frames before the deadline", sent+off, count)
			}
		}
		sent += n
		if n == 0 {
			sk.Flush()
			if time.Now().After(deadline) {
				t.Fatalf("sent %d of %d frames before the deadline", sent, count)
			}
			runtime.Gosched()
		}
	}
	for range 1000 {
		if n, _ := sk.Flush(); n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// drain receives from sk until want frames came or nothing came for idle,
// calling fn on each, and returns how many came.
func drain(sk *Socket, want int, idle time.Duration, release bool, fn func(f []byte)) int {
	descs := make([]Desc, 64)
	got := 0
	last := time.Now()
	for got < want && time.Since(last) < idle {
		n := sk.Receive(descs)
		for _, d := range descs[:n] {
			if fn != nil {
				fn(sk.Frame(d))
			}
		}
		if release {
			sk.Release(descs[:n])
		}
		if n > 0 {
			got += n
			last = time.Now()
		} else {
			time.Sleep(100 * time.Microsecond)
		}
	}
	return got
}

// Frames for an endpoint land on the socket its slot was configured for;
// the sockets share one queue and one UMEM.
func TestEndpointSteering(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 1)
	var prog *Program
	var s0, s1, tx *Socket
	pullType, pullOff, pullXor := PullReplyRule(false)
	err := p.InB(func() (err error) {
		if prog, err = Attach(p.B, ProgramOptions{Slots: 2, Mode: DriverMode, PullReplyType: pullType, PullReplyOffset: pullOff, PullReplyXOR: pullXor}); err != nil {
			return err
		}
		t.Cleanup(func() { prog.Close() })
		if s0, err = Open(p.B, 0, Options{Frames: 4096}); err != nil {
			return err
		}
		t.Cleanup(func() { s0.Close() })
		if s1, err = OpenShared(s0, Options{}); err != nil {
			return err
		}
		t.Cleanup(func() { s1.Close() })
		if err := prog.Register(s0, 0); err != nil {
			return err
		}
		if err := prog.Register(s1, 1); err != nil {
			return err
		}
		return prog.SetEndpoint(5, 1)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.InA(func() (err error) {
		tx, err = Open(p.A, 0, Options{Frames: 256})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })

	const each = 300
	sendRaw(t, tx, 2*each, func(b []byte, i int) int {
		n := putTestFrame(b, p.MACB, p.MACA, 0, uint32(i))
		b[17] = []byte{7, 5}[i%2] // destination endpoint: 7 to slot 0, 5 to slot 1
		return n
	})
	for _, c := range []struct {
		sk *Socket
		ep byte
	}{{s0, 7}, {s1, 5}} {
		var wrong int
		got := drain(c.sk, each, 2*time.Second, true, func(f []byte) {
			if f[17] != c.ep {
				wrong++
			}
		})
		if got != each || wrong != 0 {
			t.Errorf("socket for endpoint %d got %d frames (%d for other endpoints), want %d", c.ep, got, wrong, each)
		}
	}
	// A pull reply carries its endpoint, XORed, at Data offset 17 (frame
	// offset 31), not at the usual place.
	sendRaw(t, tx, 20, func(b []byte, i int) int {
		n := putTestFrame(b, p.MACB, p.MACA, 0, uint32(i))
		b[16], b[17], b[31] = 0x2A, 7, 5^0x80
		return n
	})
	if got := drain(s1, 20, time.Second, true, func(f []byte) {}); got != 20 {
		t.Errorf("endpoint 5's socket got %d of 20 pull replies", got)
	}
	if got := drain(s0, 1, 50*time.Millisecond, true, nil); got != 0 {
		t.Errorf("endpoint 7's socket got %d pull replies for endpoint 5", got)
	}
	cs, err := prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cs[0].Redirected != 2*each+20 || cs[0].Unclaimed != 0 {
		t.Errorf("counters %+v, want %d redirected and none unclaimed", cs[0], 2*each+20)
	}
	// Emptying slot 1 turns endpoint 5's frames into unclaimed ones, which
	// the kernel gets.
	if err := prog.Unregister(0, 1); err != nil {
		t.Fatal(err)
	}
	sendRaw(t, tx, 10, func(b []byte, i int) int {
		n := putTestFrame(b, p.MACB, p.MACA, 0, uint32(i))
		b[17] = 5
		return n
	})
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if cs, _ = prog.Counters(); cs[0].Unclaimed == 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if cs[0].Unclaimed != 10 {
		t.Errorf("after Unregister, %d frames counted unclaimed, want 10", cs[0].Unclaimed)
	}
}

// Bad requests fail with errors that say what is wrong, and leave nothing
// behind (TestMain checks the UMEM memory).
func TestOpenErrors(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 2)
	check := func(what string, err, want error, says string) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: got %v, want an error wrapping %v", what, err, want)
			return
		}
		if !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %q does not say %q", what, err, says)
		}
		t.Logf("%s: %v", what, err)
	}
	p.InB(func() error {
		_, err := Open(p.B, 2, Options{})
		check("queue 2 of 2", err, ErrQueue, "has 2 rx queues")
		_, err = Open(p.B, -1, Options{})
		check("queue -1", err, ErrQueue, "no such queue")
		_, err = Open("gomx-nonexistent", 0, Options{})
		check("no such interface", err, ErrInterface, "no such interface")
		_, err = Attach("gomx-nonexistent", ProgramOptions{})
		check("attach to no such interface", err, ErrInterface, "no such interface")
		_, err = Open(p.B, 0, Options{FrameSize: 3000})
		check("bad frame size", err, ErrConfig, "FrameSize 3000")
		_, err = Attach(p.B, ProgramOptions{Slots: 3})
		check("bad slots", err, ErrConfig, "Slots 3")
		return nil
	})
	if err := netnstest.SetLinkUp(p.NSB, p.B, false); err != nil {
		t.Fatal(err)
	}
	p.InB(func() error {
		_, err := Open(p.B, 0, Options{})
		check("interface down", err, ErrInterface, "ip link set dev "+p.B+" up")
		_, err = Attach(p.B, ProgramOptions{})
		check("attach to an interface that is down", err, ErrInterface, "is down")
		return nil
	})
	if err := netnstest.SetLinkUp(p.NSB, p.B, true); err != nil {
		t.Fatal(err)
	}
	// Without CAP_NET_RAW, CAP_NET_ADMIN, CAP_BPF and CAP_SYS_ADMIN (dropped
	// on this thread only), opening and attaching fail with ErrPermission.
	p.InB(func() error {
		restore, err := dropCaps(unix.CAP_NET_RAW, unix.CAP_NET_ADMIN, unix.CAP_BPF, unix.CAP_SYS_ADMIN)
		if err != nil {
			t.Errorf("dropping capabilities: %v", err)
			return nil
		}
		defer restore()
		_, err = Open(p.B, 0, Options{})
		check("no CAP_NET_RAW", err, ErrPermission, "CAP_NET_RAW")
		_, err = Attach(p.B, ProgramOptions{})
		check("no CAP_BPF", err, ErrPermission, "CAP_BPF")
		return nil
	})
	// A second program on the interface is refused: the hook is taken.
	p.InB(func() error {
		prog, err := Attach(p.B, ProgramOptions{Mode: DriverMode})
		if err != nil {
			t.Error(err)
			return nil
		}
		defer prog.Close()
		_, err = Attach(p.B, ProgramOptions{Mode: DriverMode})
		check("second program", err, ErrBusy, "xdp off")
		return nil
	})
}

// dropCaps removes caps from the effective set of the calling thread, which
// must be locked to it, and returns a function that puts them back.
func dropCaps(caps ...int) (func(), error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, err
	}
	saved := data
	for _, c := range caps {
		data[c/32].Effective &^= 1 << (uint(c) % 32)
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return nil, err
	}
	return func() { unix.Capset(&hdr, &saved[0]) }, nil
}

// A receiver that does not give frames back runs the fill ring dry: the
// kernel drops and counts, nothing hangs, and receiving resumes once frames
// are released.
func TestFillRingDry(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 1)
	var prog *Program
	var rx, tx *Socket
	if err := p.InB(func() (err error) {
		if prog, err = Attach(p.B, ProgramOptions{Mode: DriverMode}); err != nil {
			return err
		}
		t.Cleanup(func() { prog.Close() })
		if rx, err = Open(p.B, 0, Options{Frames: 256, RingSize: 128}); err != nil {
			return err
		}
		t.Cleanup(func() { rx.Close() })
		return prog.Register(rx, 0)
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.InA(func() (err error) {
		tx, err = Open(p.A, 0, Options{Frames: 256})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })

	// Hold every frame received: the 128 fill entries run out.
	var held []Desc
	descs := make([]Desc, 64)
	for round := range 10 {
		sendRaw(t, tx, 100, func(b []byte, i int) int { return putTestFrame(b, p.MACB, p.MACA, 0, uint32(round*100+i)) })
		for range 100 {
			n := rx.Receive(descs)
			held = append(held, descs[:n]...)
			if n == 0 {
				break
			}
		}
	}
	st, err := rx.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("holding %d frames; stats %+v", len(held), st)
	if st.RxFillRingEmpty == 0 && st.RxDropped == 0 {
		t.Errorf("1000 frames into a 256-frame UMEM that is never refilled, yet no drop counted: %+v", st)
	}
	if len(held) >= 1000 {
		t.Errorf("received %d frames into 256 UMEM frames", len(held))
	}
	rx.Release(held)
	sendRaw(t, tx, 50, func(b []byte, i int) int { return putTestFrame(b, p.MACB, p.MACA, 0, uint32(i)) })
	if got := drain(rx, 50, 2*time.Second, true, nil); got != 50 {
		t.Errorf("after releasing, %d of 50 frames arrived", got)
	}
}

// xdpAttached reports whether the kernel reports an XDP program on iface in
// ns (what `ip link` shows as prog/xdp).
func xdpAttached(t *testing.T, ns, iface string) bool {
	t.Helper()
	l, err := netnstest.Link(ns, iface)
	if err != nil {
		t.Fatal(err)
	}
	x := l.Attrs().Xdp
	return x != nil && x.Attached
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// xskMappings counts mappings of sockets (the rings show as socket:[inode])
// and of anonymous hugepages (the UMEM).
func xskMappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "socket:[") || strings.Contains(l, "anon_hugepage") {
			n++
		}
	}
	return n
}

// Close leaves no program attached and no descriptor or mapping behind,
// after a successful setup and after a failed one.
func TestCloseHygiene(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 2)
	// Warm up what the runtime and cilium/ebpf open once per process.
	p.InB(func() error {
		if prog, err := Attach(p.B, ProgramOptions{}); err == nil {
			prog.Close()
		}
		return nil
	})
	runtime.GC()
	fds, maps := openFDs(t), xskMappings(t)
	err := p.InB(func() error {
		prog, err := Attach(p.B, ProgramOptions{Slots: 2})
		if err != nil {
			return err
		}
		var socks []*Socket
		for q := range 2 {
			s, err := Open(p.B, q, Options{Frames: 512})
			if err != nil {
				return err
			}
			s2, err := OpenShared(s, Options{})
			if err != nil {
				return err
			}
			socks = append(socks, s, s2)
			prog.Register(s, 0)
			prog.Register(s2, 1)
		}
		// A failed Open (the queue is taken by a socket that does not
		// share its UMEM) must undo its steps too.
		if _, err := Open(p.B, 0, Options{Frames: 512}); !errors.Is(err, ErrBusy) {
			t.Errorf("second unshared socket on a queue: got %v, want ErrBusy", err)
		}
		if !xdpAttached(t, p.NSB, p.B) {
			t.Error("no program attached after Attach")
		}
		if m := xskMappings(t); m <= maps {
			t.Errorf("no ring or UMEM mappings while open (%d before, %d now)", maps, m)
		}
		// Close the UMEM owner first: the sharer keeps the memory alive.
		for _, s := range socks {
			if err := s.Close(); err != nil {
				t.Error(err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		}
		return prog.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	if xdpAttached(t, p.NSB, p.B) {
		t.Error("program still attached after Close")
	}
	if n := openFDs(t); n > fds {
		t.Errorf("%d file descriptors open after Close, %d before", n, fds)
	}
	if m := xskMappings(t); m > maps {
		t.Errorf("%d socket or hugepage mappings after Close, %d before", m, maps)
	}
}

// helperEnv makes the test binary a helper process for
// TestDetachOnProcessDeath: it attaches to the interface named in the
// variable ("netns/iface"), says so and waits to be killed.
const helperEnv = "GOMX_XDP_TEST_HELPER"

func TestHelperAttachAndWait(t *testing.T) {
	v := os.Getenv(helperEnv)
	if v == "" {
		t.Skip("helper process for TestDetachOnProcessDeath")
	}
	ns, iface, _ := strings.Cut(v, "/")
	err := netnstest.Do(ns, func() error {
		_, err := Attach(iface, ProgramOptions{Mode: DriverMode})
		return err
	})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("attached")
	time.Sleep(30 * time.Second)
	os.Exit(1)
}

// The program is detached when the process that attached it dies, even by
// SIGKILL: it is held by a bpf_link whose only reference is a descriptor.
func TestDetachOnProcessDeath(t *testing.T) {
	requireXDP(t)
	p := netnstest.NewPair(t, 1)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperAttachAndWait$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+p.NSB+"/"+p.B)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if l := s.Text(); l == "attached" || strings.HasPrefix(l, "error:") {
				line <- l
				return
			}
		}
		line <- "helper exited"
	}()
	select {
	case l := <-line:
		if l != "attached" {
			t.Fatalf("helper: %s", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("helper did not attach within 20s")
	}
	if !xdpAttached(t, p.NSB, p.B) {
		t.Fatal("helper says attached, ip link shows no program")
	}
	cmd.Process.Signal(unix.SIGKILL)
	cmd.Wait()
	for range 200 {
		if !xdpAttached(t, p.NSB, p.B) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("program still attached 2s after its process was killed")
}
