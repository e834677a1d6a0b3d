package main

import (
	"fmt"
	"strings"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/udp"
)

// wire is one choice of --transport: everything mxbench knows about it is
// here, so adding a transport (a VFIO NIC, shared memory) is one entry in
// wires and the functions it names, and no other file changes.
type wire struct {
	name  string
	about string // for the help of --transport
	// peer is set for a wire that reaches an `mxbench serve` in another
	// process (--peer).
	peer bool
	// faults is set for a wire that injects --loss, --reorder, --dup and
	// --corrupt itself (the loopback wire); mxbench wraps the transports of
	// every other wire with the same fault model (package transport/fault).
	faults bool
	// missing, when not nil, says what this process lacks to use the wire
	// ("" when nothing); mxbench then falls back to udp and says why,
	// unless one of the wire's own flags was given.
	missing func(f *benchFlags) string
	// flags are the wire's own flags: given, they make a fallback wrong.
	flags []string
	// validate, when not nil, checks the wire's own flags (usage errors);
	// it is also called with f.transport naming another wire, and must
	// then refuse its own flags.
	validate func(f *benchFlags, cmd string) error
	// setup, when not nil, prepares the wire before anything is measured
	// (the xdp veth pair); cleanup undoes it, also on an interrupt.
	setup   func(f *benchFlags) error
	cleanup func(f *benchFlags)
	// open opens both ends of an in-process run and describes them for
	// the header; nw is the loopback network, for its fault counters.
	open func(f *benchFlags) (a, b transport.Transport, what string, nw *loopback.Network, err error)
	// udpPair, when not nil, opens the UDP baseline's sockets on the same
	// wire (default: two sockets on 127.0.0.1).
	udpPair func(f *benchFlags) (a, b transport.Transport, err error)
	// raw, when not nil, measures the same exchange directly on the wire,
	// without mx (the "raw" columns). The baselines then run first, before
	// mx's boards take the wire.
	raw func(f *benchFlags, cmd string, sizes []int) (map[int]*baselineResult, error)
	// rawBeside, when not nil, opens the raw exchange on a wire of the
	// same kind beside the one mx's boards use, for --interleave; what
	// it returns closes it (cleanup removes what it made, too).
	rawBeside func(f *benchFlags, maxSize int) (*rawPair, func(), error)
}

// wires are the transports, in the order the help lists them.
var wires = []wire{
	{name: "loopback", about: "in-process wire with seeded fault injection", faults: true, open: openLoopback},
	{name: "udp", about: "kernel UDP sockets on 127.0.0.1, or toward --peer", peer: true, open: openUDP},
	{name: "xdp", about: "AF_XDP on a veth pair in throwaway namespaces, or --iface/--peer-iface (root)",
		missing:  func(f *benchFlags) string { return f.xdp.missing() },
		flags:    []string{"iface", "peer-iface", "xdp-mode", "xdp-udp", "interleave"},
		validate: func(f *benchFlags, cmd string) error { return f.xdp.validate(cmd, f.transport, f.peer) },
		setup:    func(f *benchFlags) error { return f.xdp.setup() },
		cleanup:  func(f *benchFlags) { f.xdp.close() },
		open: func(f *benchFlags) (transport.Transport, transport.Transport, string, *loopback.Network, error) {
			return f.xdp.transports()
		},
		udpPair: func(f *benchFlags) (transport.Transport, transport.Transport, error) { return f.xdp.udpPair() },
		raw: func(f *benchFlags, cmd string, sizes []int) (map[int]*baselineResult, error) {
			return f.xdp.rawXDP(cmd, f, sizes)
		},
		rawBeside: func(f *benchFlags, maxSize int) (*rawPair, func(), error) { return f.xdp.rawBeside(f, maxSize) },
	},
	{name: "nic", about: "gomx's user-space drivers on two cabled 82574Ls or 82599s bound to vfio-pci (--nic A,B), or two emulated ones (--nic model, --nic model-82599)",
		flags:    []string{"nic", "nic-interrupts", "nic-place", "nic-mtu"},
		validate: func(f *benchFlags, cmd string) error { return f.nic.validate(cmd, f.transport, f.peer) },
		open: func(f *benchFlags) (transport.Transport, transport.Transport, string, *loopback.Network, error) {
			return f.nic.transports()
		},
	},
	{name: "usb", about: "gomx's user-space USB CDC ECM/NCM driver on two cabled adapters (--usb A,B, an mxbench built with make build-usb), or two pure-Go fakes (--usb fake)",
		flags:    []string{"usb"},
		validate: func(f *benchFlags, cmd string) error { return f.usb.validate(cmd, f.transport, f.peer) },
		open: func(f *benchFlags) (transport.Transport, transport.Transport, string, *loopback.Network, error) {
			return f.usb.transports()
		},
	},
}

// wireNamed returns the wire called name.
func wireNamed(name string) (wire, bool) {
	for _, w := range wires {
		if w.name == name {
			return w, true
		}
	}
	return wire{}, false
}

// wireNames lists the wires for messages: "loopback, udp or xdp".
func wireNames() string {
	var n []string
	for _, w := range wires {
		n = append(n, w.name)
	}
	if len(n) < 2 {
		return strings.Join(n, "")
	}
	return strings.Join(n[:len(n)-1], ", ") + " or " + n[len(n)-1]
}

// wireHelp is the usage of --transport.
func wireHelp() string {
	var b strings.Builder
	b.WriteString(wireNames() + " (env MXBENCH_TRANSPORT; udp by default with --peer):")
	for _, w := range wires {
		fmt.Fprintf(&b, " %s, %s;", w.name, w.about)
	}
	b.WriteString(" a wire this process cannot use falls back to udp, saying why")
	return b.String()
}

// openLoopback opens the in-process wire, with the faults the flags ask
// for.
func openLoopback(f *benchFlags) (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	nw = loopback.NewNetwork(loopback.Options{Faults: f.faults.options(f.faults.seed)})
	pa, err := nw.Attach(0x02_00_00_00_00_01)
	if err != nil {
		nw.Close()
		return nil, nil, "", nil, err
	}
	pb, err := nw.Attach(0x02_00_00_00_00_02)
	if err != nil {
		nw.Close()
		return nil, nil, "", nil, err
	}
	what = "loopback (in-process wire)"
	if f.faults.any() {
		what += ", " + f.faults.describe()
	}
	return pa, pb, what, nw, nil
}

// openUDP opens two kernel UDP transports on --listen's address (default
// 127.0.0.1).
func openUDP(f *benchFlags) (a, b transport.Transport, what string, nw *loopback.Network, err error) {
	listen := f.listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	ua, err := udp.Listen(listen, udp.Options{})
	if err != nil {
		return nil, nil, "", nil, fmt.Errorf("--listen %s: %w", listen, err)
	}
	ub, err := udp.Listen(listen, udp.Options{})
	if err != nil {
		ua.Close()
		return nil, nil, "", nil, fmt.Errorf("--listen %s: %w", listen, err)
	}
	return ua, ub, fmt.Sprintf("udp %v <-> %v", ua.Addr().UDPAddr(), ub.Addr().UDPAddr()), nil, nil
}
