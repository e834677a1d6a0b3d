package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/netns"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/xdp"
)

// xdpFlags select the wire of an xdp run. Both ends are in this process:
// by default on a veth pair mxbench creates in two throwaway network
// namespaces (the same wire as the xdp tests), or on two interfaces of this
// namespace cabled to each other (--iface, --peer-iface).
type xdpFlags struct {
	iface, peerIface string
	mode             string
	udpFraming       bool
	// queues is --queues: the veth pair then has that many queues and
	// the transports UDP framing, for queued boards.
	queues int

	pair *netns.Pair // the veth pair of this run, when mxbench made it
	// beside is the second veth pair, of --interleave's raw exchange.
	beside *netns.Pair
}

func (x *xdpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&x.iface, "iface", "", "xdp: this side's interface (default: a veth pair in throwaway namespaces)")
	fs.StringVar(&x.peerIface, "peer-iface", "", "xdp: the other side's interface, cabled to --iface")
	fs.StringVar(&x.mode, "xdp-mode", "auto", "xdp: program attach mode: auto (driver, else generic), driver or generic")
	fs.BoolVar(&x.udpFraming, "xdp-udp", false, "xdp: carry frames in IPv4/UDP instead of raw Ethernet (veth pair only)")
}

func (x *xdpFlags) validate(cmd, tr, peer string) error {
	if tr != "xdp" {
		if x.iface != "" || x.peerIface != "" || x.udpFraming {
			return usagef(cmd, "--iface, --peer-iface and --xdp-udp need --transport xdp")
		}
		return nil
	}
	if peer != "" {
		return usagef(cmd, "--transport xdp runs both sides in this process: drop --peer (use --iface and --peer-iface for two cabled NICs)")
	}
	if (x.iface == "") != (x.peerIface == "") {
		return usagef(cmd, "give both --iface and --peer-iface, or neither for a veth pair")
	}
	if x.udpFraming && x.iface != "" {
		return usagef(cmd, "--xdp-udp works on the veth pair only (it knows the addresses there)")
	}
	for _, n := range []struct{ flag, name string }{{"iface", x.iface}, {"peer-iface", x.peerIface}} {
		if n.name == "" {
			continue
		}
		if _, err := net.InterfaceByName(n.name); err != nil {
			return usagef(cmd, "--%s %s: no such interface in this namespace (see `ip link`)", n.flag, n.name)
		}
	}
	if x.iface != "" && x.iface == x.peerIface {
		return usagef(cmd, "--iface and --peer-iface are both %s: name two interfaces cabled to each other", x.iface)
	}
	switch x.mode {
	case "auto", "driver", "generic":
	default:
		return usagef(cmd, "--xdp-mode %q: want auto, driver or generic", x.mode)
	}
	return nil
}

// missing says what this process lacks to run the xdp transport on a veth
// pair it builds (root for namespaces, CAP_NET_ADMIN, CAP_NET_RAW and
// CAP_BPF for AF_XDP), or "" when nothing is missing.
func (x *xdpFlags) missing() string {
	if x.iface == "" {
		if why := netns.Missing(); why != "" {
			return why
		}
	}
	for _, c := range []struct {
		cap  int
		name string
	}{{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {unix.CAP_NET_RAW, "CAP_NET_RAW"}, {unix.CAP_BPF, "CAP_BPF"}} {
		if !netns.HasCap(c.cap) {
			return "AF_XDP needs " + c.name + " (run as root)"
		}
	}
	return ""
}

func (x *xdpFlags) attachMode() xdp.AttachMode {
	switch x.mode {
	case "driver":
		return xdp.DriverMode
	case "generic":
		return xdp.GenericMode
	}
	return xdp.AutoAttach
}

// setup makes the veth pair when the run needs one. Close undoes it.
func (x *xdpFlags) setup() error {
	if x.iface != "" || x.pair != nil {
		return nil
	}
	p, err := netns.NewPair(max(1, x.queues))
	if err != nil {
		return fmt.Errorf("xdp: a veth pair for the run: %w (or give --iface and --peer-iface)", err)
	}
	x.pair = p
	return nil
}

// close deletes the veth pairs mxbench made.
func (x *xdpFlags) close() error {
	var err error
	for _, p := range []**netns.Pair{&x.pair, &x.beside} {
		if *p != nil {
			err = errors.Join(err, (*p).Close())
			*p = nil
		}
	}
	return err
}

// in runs fn in side a's (or b's) namespace of pair p, or here for
// --iface (p nil).
func in(p *netns.Pair, a bool, fn func() error) error {
	switch {
	case p == nil:
		return fn()
	case a:
		return p.InA(fn)
	default:
		return p.InB(fn)
	}
}

// open opens one side's xdp transport on veth pair p (nil: --iface and
// --peer-iface).
func (x *xdpFlags) open(p *netns.Pair, a bool, port uint16) (*xdp.Transport, error) {
	o := xdp.TransportOptions{Attach: x.attachMode()}
	switch {
	case p == nil && a:
		o.Interface = x.iface
	case p == nil:
		o.Interface = x.peerIface
	case a:
		o.Interface = p.A
	default:
		o.Interface = p.B
	}
	if (x.udpFraming || x.queues > 0) && p != nil {
		ip := p.IPB
		if a {
			ip = p.IPA
		}
		o.UDP = netip.AddrPortFrom(ip, port)
	}
	var t *xdp.Transport
	open := func() error {
		var err error
		t, err = xdp.NewTransport(o)
		return err
	}
	err := in(p, a, open)
	// The run opens the same queues again right after the raw AF_XDP
	// baseline closed them, and the kernel lets go of a closed socket's
	// queue in deferred work, which a loaded machine may run late: wait
	// for the queue, a bounded time, before calling it taken.
	for deadline := time.Now().Add(xdpRebindWait); errors.Is(err, xdp.ErrBusy) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		err = in(p, a, open)
	}
	return t, err
}

// xdpRebindWait bounds the wait for a queue the run itself closed.
const xdpRebindWait = 5 * time.Second

// transports opens both ends of an xdp run.
func (x *xdpFlags) transports() (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	if err := x.setup(); err != nil {
		return nil, nil, "", nil, err
	}
	return x.transportsOn(x.pair)
}

// transportsOn opens both ends on veth pair p (nil: --iface and
// --peer-iface).
func (x *xdpFlags) transportsOn(p *netns.Pair) (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	ta, err := x.open(p, true, 40100)
	if err != nil {
		return nil, nil, "", nil, err
	}
	tb, err := x.open(p, false, 40100)
	if err != nil {
		ta.Close()
		return nil, nil, "", nil, err
	}
	framing := "raw Ethernet"
	if x.udpFraming || x.queues > 0 {
		framing = "IPv4/UDP"
	}
	mode := ta.Program().Mode()
	if p != nil {
		what = fmt.Sprintf("xdp on veth %s<->%s (namespaces %s, %s), %s framing, %v XDP", p.A, p.B, p.NSA, p.NSB, framing, mode)
	} else {
		what = fmt.Sprintf("xdp on %s<->%s, %s framing, %v XDP", x.iface, x.peerIface, framing, mode)
	}
	if s := ta.Sockets(); len(s) > 0 && !s[0].ZeroCopy() {
		what += ", copy mode"
	}
	return ta, tb, what, nil, nil
}

// udpPair opens the UDP baseline's sockets: across the veth pair when there
// is one, so the baseline crosses the same wire, else on 127.0.0.1.
func (x *xdpFlags) udpPair() (a, b transport.Transport, err error) {
	if x.pair == nil {
		return udpBaselinePair()
	}
	var ua, ub *plainUDP
	if err := x.pair.InA(func() (err error) {
		ua, err = listenPlainUDP(netip.AddrPortFrom(x.pair.IPA, 0))
		return err
	}); err != nil {
		return nil, nil, err
	}
	if err := x.pair.InB(func() (err error) {
		ub, err = listenPlainUDP(netip.AddrPortFrom(x.pair.IPB, 0))
		return err
	}); err != nil {
		ua.Close()
		return nil, nil, err
	}
	return ua, ub, nil
}

// rawXDP measures the raw AF_XDP exchange of every size, before the mx
// boards take the interfaces (one XDP program per interface).
func (x *xdpFlags) rawXDP(cmd string, f *benchFlags, sizes []int) (map[int]*baselineResult, error) {
	out := map[int]*baselineResult{}
	if err := x.setup(); err != nil {
		return nil, err
	}
	raw, closeRaw, err := x.rawOn(x.pair, f, slices.Max(sizes))
	if err != nil {
		return nil, err
	}
	defer closeRaw()
	for _, size := range sizes {
		iters := f.iterationsFor(size)
		var r rawResult
		if cmd == "stream" {
			r, err = raw.stream(size, iters, f.warmup)
		} else {
			r, err = bestRaw(f.trials, func() (rawResult, error) { return raw.pingpong(size, iters, f.warmup, f.unidir) })
		}
		if err != nil {
			return nil, fmt.Errorf("raw AF_XDP %s of %d bytes: %w", cmd, size, err)
		}
		out[size] = toBaseline("xdp", r, cmd)
	}
	return out, nil
}

// rawOn opens a raw AF_XDP exchange on veth pair p (nil: --iface and
// --peer-iface) and returns it with what closes it.
func (x *xdpFlags) rawOn(p *netns.Pair, f *benchFlags, maxSize int) (*rawPair, func(), error) {
	ta, tb, _, _, err := x.transportsOn(p)
	if err != nil {
		return nil, nil, err
	}
	closeBoth := func() {
		ta.Close()
		tb.Close()
	}
	raw, err := newRawPair(ta, tb, maxSize, f.spin())
	if err != nil {
		closeBoth()
		return nil, nil, err
	}
	raw.limit = f.timeout
	return raw, closeBoth, nil
}

// rawBeside opens the raw AF_XDP exchange of --interleave on a veth pair
// of its own, made like the run's (same queues, framing and attach
// mode), since the run's interfaces carry the mx boards' program and
// sockets while the raw trials alternate with theirs. What it returns
// closes the exchange; close deletes the pair with the run's.
func (x *xdpFlags) rawBeside(f *benchFlags, maxSize int) (*rawPair, func(), error) {
	p, err := netns.NewPair(max(1, x.queues))
	if err != nil {
		return nil, nil, fmt.Errorf("xdp: a second veth pair for the interleaved raw exchange: %w", err)
	}
	x.beside = p // close deletes it too, also on an interrupt
	raw, closeRaw, err := x.rawOn(p, f, maxSize)
	if err != nil {
		return nil, nil, err
	}
	return raw, closeRaw, nil
}
