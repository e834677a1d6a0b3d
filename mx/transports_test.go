package mx

import (
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
	"github.com/gomx-dev/gomx/transport/nic"
	"github.com/gomx-dev/gomx/transport/udp"
	"github.com/gomx-dev/gomx/xdp/xdptest"
)

// A wire gives a test two connected transports (two boards) and, for wires
// that can, a fault knob.
type wire2 struct {
	a, b   transport.Transport
	faults func(loopback.Faults) // nil when the wire cannot inject faults
	third  func() transport.Transport
	close  func()
	// shortcut lets the boards on this wire use the in-process shortcut
	// (local.go); every other wire turns it off so that its tests measure
	// the wire.
	shortcut bool
}

// transportFactory builds a fresh pair of boards' transports.
type transportFactory struct {
	name string
	new  func(t testing.TB, f loopback.Faults) *wire2
	// faulty reports whether new honours the faults argument.
	faulty bool
}

// transportFactories lists every transport the conformance suite runs over.
// Loopback and UDP are always available; add more (xdp, shm, vfio NIC
// queues) here and every test that ranges over this table runs on them too.
var transportFactories = []transportFactory{
	{name: "loopback", new: newLoopbackWire, faulty: true},
	{name: "udp", new: newUDPWire},
	{name: "xdp", new: newXDPWire},
	{name: "nic", new: newNICWire},
	{name: "local", new: newLocalWire},
	{name: "shm", new: newShmWire},
}

// newLocalWire is the loopback wire with the in-process shortcut on: the
// connect crosses the wire, every message after it is handed over directly.
func newLocalWire(t testing.TB, f loopback.Faults) *wire2 {
	w := newLoopbackWire(t, f)
	w.shortcut = true
	return w
}

func newLoopbackWire(t testing.TB, f loopback.Faults) *wire2 {
	n := loopback.NewNetwork(loopback.Options{Faults: f, QueueLen: 8192})
	a, err := n.Attach(0x020000000001)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Attach(0x020000000002)
	if err != nil {
		t.Fatal(err)
	}
	next := transport.NICID(0x020000000003)
	return &wire2{a: a, b: b, faults: n.SetFaults,
		third: func() transport.Transport {
			p, err := n.Attach(next)
			if err != nil {
				t.Fatal(err)
			}
			next++
			return p
		},
		close: func() { n.Close() }}
}

func newUDPWire(t testing.TB, _ loopback.Faults) *wire2 {
	a, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		t.Skipf("udp transport unavailable (%v): needs an IPv4 loopback interface", err)
	}
	b, err := udp.Listen("127.0.0.1:0", udp.Options{})
	if err != nil {
		a.Close()
		t.Skipf("udp transport unavailable (%v)", err)
	}
	return &wire2{a: a, b: b,
		third: func() transport.Transport {
			c, err := udp.Listen("127.0.0.1:0", udp.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		close: func() {}}
}

// newXDPWire puts the two boards on AF_XDP sockets at the ends of a veth
// pair in two throwaway namespaces (raw Ethernet framing). It needs root;
// without it the test skips saying so, or fails when GOMX_REQUIRE_XDP=1.
// The wire has no third board: a veth pair has two ends.
func newXDPWire(t testing.TB, _ loopback.Faults) *wire2 {
	a, b := xdptest.Pair(t)
	return &wire2{a: a, b: b,
		third: func() transport.Transport {
			t.Fatal("the xdp wire has two ends only")
			return nil
		},
		close: func() {}}
}

// fastOptions are board options with timers short enough for tests.
func fastOptions() BoardOptions {
	o := DefaultBoardOptions()
	o.AckDelay = 500 * time.Microsecond
	o.ResendDelay = 4 * time.Millisecond
	o.PullTimeout = 4 * time.Millisecond
	o.ResendMax = 2000
	o.Local.Off = true // the wire's own tests; the "local" wire turns it on
	return o
}

// newNICWire puts the boards on the user-space e1000e driver (transport
// nic, raw Ethernet framing) over emulated 82574Ls on one hub; third()
// opens the third port's NIC, so a test can forge frames from it.
func newNICWire(t testing.TB, _ loopback.Faults) *wire2 {
	_, w := nicModelWire(t)
	return w
}

// nicModelWire is newNICWire's wire and the model of its three NICs
// (ports 0, 1 and 2: a, b and third), whose counters a test may read;
// closing the wire fails the test if the driver broke the model's rules
// (Violations).
func nicModelWire(t testing.TB) (*emulated.E1000E, *wire2) {
	p, err := emulated.NewE1000E(emulated.E1000EOptions{Ports: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Hub(0, 1, 2); err != nil {
		p.Close()
		t.Fatal(err)
	}
	f := p.Functions()
	return p, e1000eWire(t, "nic", [3]pci.Device{f[0], f[1], f[2]}, func() {
		for i := range 3 {
			if s := p.Stats(i); s.Violations != 0 {
				t.Errorf("model NIC %d: %d violations, the last: %s", i, s.Violations, s.LastViolation)
			}
		}
		p.Close()
	})
}

// e1000eWire puts the boards on the nic transport over 82574Ls devs[0]
// and devs[1]; third() opens devs[2], so a test can forge frames from it.
// done runs when the wire closes, after the third NIC.
func e1000eWire(t testing.TB, what string, devs [3]pci.Device, done func()) *wire2 {
	open := func(i int) transport.Transport {
		n, err := e1000e.Open(devs[i], e1000e.DefaultOptions())
		if err != nil {
			t.Fatal(err)
		}
		tr, err := nic.New(n, nic.Options{})
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		return tr
	}
	var third transport.Transport
	return &wire2{a: open(0), b: open(1),
		third: func() transport.Transport {
			if third != nil {
				t.Fatalf("the %s wire has three ports", what)
			}
			third = open(2)
			return third
		},
		close: func() {
			if third != nil {
				third.Close()
			}
			done()
		}}
}
