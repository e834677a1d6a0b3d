package main

// The kernel's side: rebinding a function to a kernel driver, moving its
// interface into a network namespace of its own, and the UDP ping-pong
// through the kernel's e1000e driver.

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/u-root/u-root/pkg/kmodule"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/hack/qemu"
	"github.com/gomx-dev/gomx/pci"
)

// netdevOf returns the network interface the kernel made for a function.
func netdevOf(a pci.Address) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", a.String(), "net", "*"))
		if len(m) == 1 {
			return filepath.Base(m[0]), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no network interface for %s after 10 s", a)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// end is one NIC under the kernel's driver, in its own namespace, with a
// UDP socket bound to ip:port (fd -1 when it has none).
type end struct {
	ns netns.NsHandle
	ip [4]byte
	fd int
}

// setup moves the interface of a into a new namespace, gives it ip/24,
// brings it up, waits for its carrier and opens a busy-polling UDP socket
// in it.
func setup(a pci.Address, ip [4]byte, busyPollUS int) (*end, error) {
	name, err := netdevOf(a)
	if err != nil {
		return nil, err
	}
	e, err := namespaced(name, ip)
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", name, a, err)
	}
	err = e.in(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		e.fd = fd
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, busyPollUS); err != nil {
			return fmt.Errorf("SO_BUSY_POLL: %w", err)
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: ip, Port: 9000})
	})
	if err != nil {
		e.close()
		return nil, fmt.Errorf("%s (%s): %w", name, a, err)
	}
	return e, nil
}

// namespaced moves the interface name into a new network namespace, gives
// it ip/24, brings it up and waits for its carrier.
func namespaced(name string, ip [4]byte) (*end, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	ns, err := netns.New() // this thread is now in ns
	if err != nil {
		return nil, err
	}
	e := &end{ns: ns, ip: ip, fd: -1}
	err = func() error {
		if err := netns.Set(orig); err != nil {
			return err
		}
		link, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(link, int(ns)); err != nil {
			return err
		}
		if err := netns.Set(ns); err != nil {
			return err
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: netlink.NewIPNet(ip[:])}
		addr.IPNet.Mask = []byte{255, 255, 255, 0}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			// A driver that does not track the carrier (cdc_ether on a
			// function that never sends NETWORK_CONNECTION) leaves the
			// state unknown, and passes traffic.
			if st := l.Attrs().OperState; st == netlink.OperUp || st == netlink.OperUnknown {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: no carrier 20 s after link up (state %v)", name, l.Attrs().OperState)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if serr := netns.Set(orig); serr != nil {
		// The thread stays locked and dies with the goroutine.
		runtime.LockOSThread()
		err = errors.Join(err, serr)
	}
	if err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// in runs f on a thread that is in e's namespace for the call: sockets f
// opens, and processes it starts, live there.
func (e *end) in(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	if err := netns.Set(e.ns); err != nil {
		return err
	}
	err = f()
	if serr := netns.Set(orig); serr != nil {
		// The thread stays locked and dies with the goroutine.
		runtime.LockOSThread()
		err = errors.Join(err, serr)
	}
	return err
}

func (e *end) close() {
	if e.fd >= 0 {
		unix.Close(e.fd)
	}
	e.ns.Close()
}

// udpPing sends rounds datagrams of payload bytes from x to y and back,
// taking turns on one goroutine as the raw ping's pinger and reflector do
// in the e1000e tests, and returns the median round trip. A lost datagram
// (1 s receive timeout) is sent again, at most 5 times.
func udpPing(x, y *end, payload, rounds int) (time.Duration, error) {
	msg := make([]byte, payload)
	buf := make([]byte, 2048)
	rtts := make([]time.Duration, 0, rounds)
	hop := func(from, to *end, seq int) error {
		for try := 0; try < 5; try++ {
			msg[0], msg[1] = byte(seq), byte(seq>>8)
			if err := unix.Sendto(from.fd, msg, 0, &unix.SockaddrInet4{Addr: to.ip, Port: 9000}); err != nil {
				return err
			}
			n, _, err := recvfrom(to.fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil {
				return err
			}
			if n != payload || buf[0] != byte(seq) || buf[1] != byte(seq>>8) {
				continue // a late duplicate of an earlier try
			}
			return nil
		}
		return fmt.Errorf("%d B datagram %d lost 5 times", payload, seq)
	}
	for i := range rounds {
		start := time.Now()
		if err := hop(x, y, i); err != nil {
			return 0, err
		}
		if err := hop(y, x, i); err != nil {
			return 0, err
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// recvfrom is unix.Recvfrom, retried when the Go runtime's preemption
// signal interrupts it.
func recvfrom(fd int, buf []byte) (int, unix.Sockaddr, error) {
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if !errors.Is(err, unix.EINTR) {
			return n, from, err
		}
	}
}

// echo answers every datagram on e with the same bytes, on a thread of its
// own, until stop is set (the socket's 1 s timeout bounds each wait).
func echo(e *end, stop *atomic.Bool, done chan<- error) {
	runtime.LockOSThread()
	buf := make([]byte, 2048)
	for !stop.Load() {
		n, from, err := unix.Recvfrom(e.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			done <- err
			return
		}
		if err := unix.Sendto(e.fd, buf[:n], 0, from); err != nil {
			done <- err
			return
		}
	}
	done <- nil
}

// udpPingEcho sends rounds datagrams from x to y's echo thread and returns
// the median round trip; a datagram lost (1 s timeout) is sent again, at
// most 5 times.
func udpPingEcho(x, y *end, payload, rounds int) (time.Duration, error) {
	msg := make([]byte, payload)
	buf := make([]byte, 2048)
	rtts := make([]time.Duration, 0, rounds)
	to := &unix.SockaddrInet4{Addr: y.ip, Port: 9000}
	for i := range rounds {
		ok := false
		for try := 0; try < 5 && !ok; try++ {
			msg[0], msg[1] = byte(i), byte(i>>8)
			start := time.Now()
			if err := unix.Sendto(x.fd, msg, 0, to); err != nil {
				return 0, err
			}
			for {
				n, _, err := unix.Recvfrom(x.fd, buf, 0)
				if errors.Is(err, unix.EAGAIN) {
					break
				}
				if errors.Is(err, unix.EINTR) {
					continue // the Go runtime's preemption signal
				}
				if err != nil {
					return 0, err
				}
				if n == payload && buf[0] == byte(i) && buf[1] == byte(i>>8) {
					rtts = append(rtts, time.Since(start))
					ok = true
					break
				}
			}
		}
		if !ok {
			return 0, fmt.Errorf("%d B datagram %d lost 5 times", payload, i)
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// kernelUDP measures the kernel's e1000e driver: UDP between the two NICs,
// each in its own namespace, with SO_BUSY_POLL. add gets the figure with
// an echo thread on NIC B (as mxbench's two boards run), addTurns the one
// with both sides taking turns on one thread (as the e1000e tests' raw
// ping does).
func kernelUDP(o options, add, addTurns func(size int, us float64)) (err error) {
	p, err := kmodule.NewProber(kmodule.ProbeOpts{})
	if err != nil {
		return fmt.Errorf("reading modules.dep: %w", err)
	}
	if err := p.Probe("e1000e", ""); err != nil {
		return fmt.Errorf("loading e1000e: %w", err)
	}
	defer func() {
		// Back to vfio-pci for the next run; unbinding e1000e removes
		// the interfaces from their namespaces.
		for _, a := range []pci.Address{o.a, o.b} {
			err = errors.Join(err, qemu.BindDriver(a, "vfio-pci"))
		}
	}()
	for _, a := range []pci.Address{o.a, o.b} {
		if err := qemu.BindDriver(a, "e1000e"); err != nil {
			return err
		}
	}
	x, err := setup(o.a, [4]byte{10, 9, 0, 1}, o.busyPollUS)
	if err != nil {
		return err
	}
	defer x.close()
	y, err := setup(o.b, [4]byte{10, 9, 0, 2}, o.busyPollUS)
	if err != nil {
		return err
	}
	defer y.close()
	// Frame = 14 Ethernet + 20 IP + 8 UDP + payload.
	if _, err := udpPing(x, y, 22, 50); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for range o.runs {
		for _, size := range o.rawSizes {
			rtt, err := udpPing(x, y, size-42, o.rounds)
			if err != nil {
				return err
			}
			addTurns(size, rtt.Seconds()*1e6/2)
		}
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go echo(y, &stop, done)
	var merr error
	for r := 0; r < o.runs && merr == nil; r++ {
		for _, size := range o.rawSizes {
			rtt, err := udpPingEcho(x, y, size-42, o.rounds)
			if err != nil {
				merr = err
				break
			}
			add(size, rtt.Seconds()*1e6/2)
		}
	}
	stop.Store(true)
	return errors.Join(merr, <-done)
}
