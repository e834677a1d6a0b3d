// Package netns builds throwaway network namespaces joined by a veth pair:
// a real wire on one machine for AF_XDP sockets and UDP, used by the tests
// (through internal/netnstest) and by mxbench's --veth runs. Every name is
// unique to the process and the call, so several users may run at once;
// Close deletes the namespaces, and with them the veth pair.
//
// It speaks rtnetlink itself, through github.com/vishvananda/netlink, and
// names namespaces as iproute2 does (github.com/vishvananda/netns: a bind
// mount of the namespace on /run/netns/NAME), so `ip netns` and `ip -n` see
// them, but no program is run. A namespace is created on a goroutine locked
// to its OS thread, which then switches back; a netlink handle bound to a
// namespace configures it from outside, and Do runs Go code inside one.
//
// NewPair either returns a complete pair or removes everything it made: the
// veth pair is created directly inside the two namespaces (one request, as
// `ip link add ... netns A type veth peer ... netns B` does), so deleting the
// namespaces deletes it and nothing is left in the caller's namespace.
package netns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named namespaces live, as with `ip netns add`.
const Dir = "/run/netns"

// MaxQueues bounds the queues NewPair asks for per end (the kernel's limit
// for a veth is 4096; more than the CPUs buys nothing in a test).
const MaxQueues = 256

// seq makes names unique within the process; the pid makes them unique
// across processes.
var seq atomic.Uint32

// Missing says what this process lacks to build namespaces and veth pairs,
// or "" when nothing is missing.
func Missing() string {
	if !hasCap(unix.CAP_SYS_ADMIN) || !hasCap(unix.CAP_NET_ADMIN) {
		return "creating network namespaces needs CAP_SYS_ADMIN and CAP_NET_ADMIN: run as root (tests: `go test -exec sudo ./...`)"
	}
	return ""
}

// HasCap reports whether the process has capability c in its effective
// set.
func HasCap(c int) bool { return hasCap(c) }

func hasCap(c int) bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0
}

// Pair is two network namespaces joined by a veth pair, A and B, both up
// with an IPv4 address (IPA in NSA on A, IPB in NSB on B, a /24) and
// static neighbour entries for each other, so IP traffic needs no ARP.
type Pair struct {
	NSA, NSB   string     // namespace names (files in Dir, as ip netns names them)
	A, B       string     // interface names, A in NSA and B in NSB
	MACA, MACB [6]byte    // MAC addresses of A and B
	IPA, IPB   netip.Addr // IPv4 addresses of A and B
	Queues     int        // rx and tx queues on each end

	made []string // namespaces to delete on Close
}

// NewPair creates a Pair with queues rx and tx queues per end (1 to
// MaxQueues). On failure it undoes what it made; on success the caller must
// Close the pair.
func NewPair(queues int) (_ *Pair, err error) {
	if queues < 1 || queues > MaxQueues {
		return nil, fmt.Errorf("netns: %d queues per end: want 1 to %d", queues, MaxQueues)
	}
	if why := Missing(); why != "" {
		return nil, errors.New(why)
	}
	n := seq.Add(1)
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, n)
	p := &Pair{
		NSA: "gomx-" + id + "-a", NSB: "gomx-" + id + "-b",
		A: "gxa" + id, B: "gxb" + id,
		IPA: netip.MustParseAddr("10.77.0.1"), IPB: netip.MustParseAddr("10.77.0.2"),
		Queues: queues,
	}
	if len(p.A) > 15 {
		p.A, p.B = p.A[:15], p.B[:15]
	}
	defer func() {
		if err != nil {
			p.Close()
			err = fmt.Errorf("netns: %w", err)
		}
	}()
	var handles [2]netns.NsHandle
	for i, name := range []string{p.NSA, p.NSB} {
		if handles[i], err = create(name); err != nil {
			return nil, err
		}
		defer handles[i].Close()
		p.made = append(p.made, name)
	}
	veth := &netlink.Veth{
		LinkAttrs: netlink.LinkAttrs{
			Name: p.A, NumTxQueues: queues, NumRxQueues: queues,
			Namespace: netlink.NsFd(handles[0]),
		},
		PeerName:        p.B,
		PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues),
		PeerNamespace: netlink.NsFd(handles[1]),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth pair %s/%s with %d queues: %w", p.A, p.B, queues, err)
	}
	ends := [2]end{
		{ns: p.NSA, handle: handles[0], iface: p.A, addr: p.IPA},
		{ns: p.NSB, handle: handles[1], iface: p.B, addr: p.IPB},
	}
	defer func() {
		for _, e := range ends {
			if e.nl != nil {
				e.nl.Close()
			}
		}
	}()
	for i := range ends {
		if err := ends[i].up(); err != nil {
			return nil, err
		}
	}
	copy(p.MACA[:], ends[0].mac)
	copy(p.MACB[:], ends[1].mac)
	// Static neighbour entries: IP traffic between the ends needs no ARP.
	if err := ends[0].neighbour(p.IPB, ends[1].mac); err != nil {
		return nil, err
	}
	if err := ends[1].neighbour(p.IPA, ends[0].mac); err != nil {
		return nil, err
	}
	return p, nil
}

// end is one side of a pair being set up: a netlink handle bound to its
// namespace does the work from the calling thread.
type end struct {
	ns     string
	handle netns.NsHandle
	iface  string
	addr   netip.Addr
	nl     *netlink.Handle
	link   netlink.Link
	mac    net.HardwareAddr
}

// up gives the interface its address (a /24) and brings it and the
// namespace's loopback up.
func (e *end) up() error {
	h, err := netlink.NewHandleAt(e.handle)
	if err != nil {
		return fmt.Errorf("netlink socket in %s: %w", e.ns, err)
	}
	e.nl = h
	if e.link, err = h.LinkByName(e.iface); err != nil {
		return fmt.Errorf("find %s in %s: %w", e.iface, e.ns, err)
	}
	e.mac = e.link.Attrs().HardwareAddr
	if len(e.mac) != 6 {
		return fmt.Errorf("%s in %s has MAC %v, not an Ethernet address", e.iface, e.ns, e.mac)
	}
	ipnet := &net.IPNet{IP: e.addr.AsSlice(), Mask: net.CIDRMask(24, 32)}
	if err := h.AddrAdd(e.link, &netlink.Addr{IPNet: ipnet}); err != nil {
		return fmt.Errorf("add %v to %s in %s: %w", ipnet, e.iface, e.ns, err)
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo in %s: %w", e.ns, err)
	}
	for _, l := range []netlink.Link{lo, e.link} {
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("set %s up in %s: %w", l.Attrs().Name, e.ns, err)
		}
	}
	return nil
}

// neighbour adds a permanent neighbour entry for ip at mac on the end's
// interface, replacing any other.
func (e *end) neighbour(ip netip.Addr, mac net.HardwareAddr) error {
	err := e.nl.NeighSet(&netlink.Neigh{
		LinkIndex:    e.link.Attrs().Index,
		Family:       netlink.FAMILY_V4,
		State:        netlink.NUD_PERMANENT,
		IP:           ip.AsSlice(),
		HardwareAddr: mac,
	})
	if err != nil {
		return fmt.Errorf("neighbour %v at %v on %s in %s: %w", ip, mac, e.iface, e.ns, err)
	}
	return nil
}

// create makes a network namespace named name under Dir and returns a
// handle to it; the caller closes the handle. netns.NewNamed switches the
// calling thread into the new namespace, so it runs on a locked thread that
// switches back, and that is discarded by the runtime if it cannot.
func create(name string) (netns.NsHandle, error) {
	type result struct {
		h   netns.NsHandle
		err error
	}
	// A name in use belongs to someone else: fail before touching it.
	if _, err := os.Lstat(filepath.Join(Dir, name)); err == nil {
		return netns.None(), fmt.Errorf("create namespace %s: %s already exists", name, filepath.Join(Dir, name))
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{netns.None(), fmt.Errorf("namespace of this thread: %w", err)}
			return
		}
		defer orig.Close()
		h, err := netns.NewNamed(name)
		back := netns.Set(orig)
		if back == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			// NewNamed may have left its file behind.
			_ = remove(name)
			done <- result{netns.None(), fmt.Errorf("create namespace %s: %w", name, err)}
			return
		}
		if back != nil {
			h.Close()
			_ = remove(name)
			done <- result{netns.None(), fmt.Errorf("create namespace %s: switching back: %w", name, back)}
			return
		}
		done <- result{h, nil}
	}()
	r := <-done
	return r.h, r.err
}

// remove deletes a named namespace: unmounts its bind mount (the namespace
// goes when nothing else holds it) and removes the file. A name that is
// not there is no error.
func remove(name string) error {
	path := filepath.Join(Dir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Close deletes the pair's namespaces (and so the veth pair). It may be
// called more than once.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range p.made {
		if err := remove(ns); err != nil {
			errs = append(errs, fmt.Errorf("netns: delete namespace %s: %w", ns, err))
		}
	}
	p.made = nil
	return errors.Join(errs...)
}

// InA runs fn on an OS thread inside NSA (see Do).
func (p *Pair) InA(fn func() error) error { return Do(p.NSA, fn) }

// InB runs fn on an OS thread inside NSB (see Do).
func (p *Pair) InB(fn func() error) error { return Do(p.NSB, fn) }

// Link returns the named interface in the named namespace, as netlink
// reports it: flags, queue counts, an attached XDP program.
func Link(ns, iface string) (netlink.Link, error) {
	h, err := handleIn(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("netns: %s in %s: %w", iface, ns, err)
	}
	return l, nil
}

// SetLinkUp brings the named interface in the named namespace up, or down
// when up is false.
func SetLinkUp(ns, iface string, up bool) error {
	h, err := handleIn(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(iface)
	if err == nil {
		if up {
			err = h.LinkSetUp(l)
		} else {
			err = h.LinkSetDown(l)
		}
	}
	if err != nil {
		return fmt.Errorf("netns: set %s up=%v in %s: %w", iface, up, ns, err)
	}
	return nil
}

// handleIn returns a netlink handle working in the named namespace.
func handleIn(ns string) (*netlink.Handle, error) {
	nsh, err := netns.GetFromPath(filepath.Join(Dir, ns))
	if err != nil {
		return nil, fmt.Errorf("netns: namespace %s: %w", ns, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return nil, fmt.Errorf("netns: netlink socket in %s: %w", ns, err)
	}
	return h, nil
}

// Do runs fn on a fresh goroutine locked to its OS thread, with the thread
// switched into the named namespace, and returns fn's error. Sockets,
// links and lookups made by fn belong to that namespace; file descriptors
// made there keep working from any thread afterwards. fn must not start
// goroutines that expect to be in the namespace. If the thread cannot be
// switched back it is left locked, and so discarded by the runtime.
func Do(ns string, fn func() error) error {
	done := make(chan error, 1)
	// The namespace handles are closed before the result is sent, so that
	// when Do returns it holds no descriptor (tests count them).
	go func() { done <- doLocked(ns, fn) }()
	return <-done
}

// doLocked is Do's body, on the goroutine Do started.
func doLocked(ns string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: namespace of this thread: %w", err)
	}
	defer orig.Close()
	target, err := netns.GetFromPath(filepath.Join(Dir, ns))
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: namespace %s: %w", ns, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: setns %s: %w", ns, err)
	}
	err = fn()
	if netns.Set(orig) == nil {
		runtime.UnlockOSThread()
	}
	return err
}
