// Package netns builds throwaway network namespaces joined by a veth pair:
// a real wire on one machine for AF_XDP sockets and UDP, used by the tests
// (through internal/netnstest) and by mxbench's --veth runs. Every name is
// unique to the process and the call, so several users may run at once;
// Close deletes the namespaces, and with them the veth pair.
//
// It drives iproute2 (`ip`) for setup and unix.Setns on a locked OS thread
// for work inside a namespace (Do).
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// seq makes names unique within the process; the pid makes them unique
// across processes.
var seq atomic.Uint32

// Missing says what this process lacks to build namespaces and veth pairs,
// or "" when nothing is missing.
func Missing() string {
	if _, err := exec.LookPath("ip"); err != nil {
		return "the ip tool (iproute2) is not installed: apt-get install iproute2"
	}
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
	NSA, NSB   string     // namespace names (ip netns)
	A, B       string     // interface names, A in NSA and B in NSB
	MACA, MACB [6]byte    // MAC addresses of A and B
	IPA, IPB   netip.Addr // IPv4 addresses of A and B
	Queues     int        // rx and tx queues on each end

	made []string // namespaces to delete on Close
}

// NewPair creates a Pair with queues rx and tx queues per end. On failure
// it undoes what it made; on success the caller must Close the pair.
func NewPair(queues int) (_ *Pair, err error) {
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
		}
	}()
	for _, ns := range []string{p.NSA, p.NSB} {
		if err := run("ip", "netns", "add", ns); err != nil {
			return nil, fmt.Errorf("netns: %w", err)
		}
		p.made = append(p.made, ns)
	}
	q := strconv.Itoa(queues)
	steps := [][]string{
		{"ip", "link", "add", p.A, "numtxqueues", q, "numrxqueues", q, "netns", p.NSA, "type", "veth",
			"peer", "name", p.B, "numtxqueues", q, "numrxqueues", q, "netns", p.NSB},
		{"ip", "-n", p.NSA, "addr", "add", p.IPA.String() + "/24", "dev", p.A},
		{"ip", "-n", p.NSB, "addr", "add", p.IPB.String() + "/24", "dev", p.B},
		{"ip", "-n", p.NSA, "link", "set", "lo", "up"},
		{"ip", "-n", p.NSB, "link", "set", "lo", "up"},
		{"ip", "-n", p.NSA, "link", "set", p.A, "up"},
		{"ip", "-n", p.NSB, "link", "set", p.B, "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, fmt.Errorf("netns: %w", err)
		}
	}
	if p.MACA, err = p.mac(p.NSA, p.A); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	if p.MACB, err = p.mac(p.NSB, p.B); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	for _, s := range [][]string{
		{"ip", "-n", p.NSA, "neigh", "replace", p.IPB.String(), "lladdr", net.HardwareAddr(p.MACB[:]).String(), "dev", p.A, "nud", "permanent"},
		{"ip", "-n", p.NSB, "neigh", "replace", p.IPA.String(), "lladdr", net.HardwareAddr(p.MACA[:]).String(), "dev", p.B, "nud", "permanent"},
	} {
		if err := run(s...); err != nil {
			return nil, fmt.Errorf("netns: %w", err)
		}
	}
	return p, nil
}

// Close deletes the pair's namespaces (and so the veth pair). It may be
// called more than once.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range p.made {
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("netns: %w", err))
		}
	}
	p.made = nil
	return errors.Join(errs...)
}

// mac reads an interface's MAC address inside a namespace.
func (p *Pair) mac(ns, iface string) ([6]byte, error) {
	var mac [6]byte
	err := Do(ns, func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		copy(mac[:], ifi.HardwareAddr)
		return nil
	})
	return mac, err
}

// InA runs fn on an OS thread inside NSA (see Do).
func (p *Pair) InA(fn func() error) error { return Do(p.NSA, fn) }

// InB runs fn on an OS thread inside NSB (see Do).
func (p *Pair) InB(fn func() error) error { return Do(p.NSB, fn) }

// IP runs `ip -n ns args...` and returns its combined output.
func IP(ns string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"-n", ns}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// Do runs fn on a fresh goroutine locked to its OS thread, with the thread
// switched into the named namespace, and returns fn's error. Sockets,
// links and lookups made by fn belong to that namespace; file descriptors
// made there keep working from any thread afterwards. fn must not start
// goroutines that expect to be in the namespace. If the thread cannot be
// switched back it is left locked, and so discarded by the runtime.
func Do(ns string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: namespace %s: %w", ns, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("netns: setns %s: %w", ns, err)
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
