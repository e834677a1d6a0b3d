// Package nicpair opens, for tests, the pair of NICs the transport/nic and
// mx tests run over: both ports of a pair of emulated NIC models (two
// 82599s, or two 82574Ls) joined by one cable, a driver opened on each, and
// a transport/nic transport on each when the test wants one.
//
// Every pair registers the same check for when the test ends, after the
// test's own cleanups closed the transports and NICs: no model recorded a
// programming violation, the IOMMU saw no DMA fault (a model that read or
// wrote memory after its driver's Close unmapped it would fault), and no
// DMA mapping is left. Then it closes the models.
//
// The cable may carry transport/fault's seeded fault model
// (emulated.CableOptions), so that a test runs the whole stack, drivers
// and models included, over a wire that loses, reorders, duplicates and
// corrupts frames.
//
// It stands beside the models it cables and above the drivers and the
// transport it opens on them. Package emulated itself imports neither: a
// model knows its driver's registers (the hw packages), never the driver.
package nicpair

import (
	"net/netip"
	"testing"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/transport/fault"
	"github.com/gomx-dev/gomx/transport/nic"
)

// UDPAddr is the UDP address of board i (0 or 1) of a pair in UDP framing.
func UDPAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)}), 40000)
}

// UDP is UDP framing for board i, at UDPAddr(i).
func UDP(i int) nic.Options {
	return nic.Options{Framing: nic.FramingUDP, UDP: UDPAddr(i)}
}

// Raw is the raw EtherType framing, for either board.
func Raw(int) nic.Options { return nic.Options{} }

// Health checks, when the test ends, what a pair of NIC models must show
// once their transports and drivers closed: no programming violation
// (violations(i) is model i's count and its last), no DMA fault and no
// mapping left in iommu; then it calls close.
func Health(t testing.TB, what string, violations func(i int) (uint64, string), iommu *emulated.IOMMU, close func() error) {
	t.Cleanup(func() {
		for i := range 2 {
			if n, last := violations(i); n != 0 {
				t.Errorf("%s %d: %d violations, the last: %s", what, i, n, last)
			}
		}
		if n, _ := iommu.Faults(); n != 0 {
			t.Errorf("%d DMA faults", n)
		}
		if live := iommu.Live(); live != 0 {
			t.Errorf("%d DMA mappings left after the transports closed", live)
		}
		close()
	})
}

// E1000E opens the e1000e driver with o on both ports of a cabled pair of
// model 82574Ls.
func E1000E(t testing.TB, o e1000e.Options) [2]nicdrv.NIC {
	return E1000EWith(t, emulated.DefaultE1000EOptions(), o)
}

// E1000EWith is E1000E on models built with mo.
func E1000EWith(t testing.TB, mo emulated.E1000EOptions, o e1000e.Options) [2]nicdrv.NIC {
	p, err := emulated.NewE1000E(mo)
	if err != nil {
		t.Fatal(err)
	}
	Health(t, "model NIC", func(i int) (uint64, string) {
		s := p.Stats(i)
		return s.Violations, s.LastViolation
	}, p.IOMMU(), p.Close)
	var ns [2]nicdrv.NIC
	for i := range 2 {
		n, err := e1000e.Open(p.Functions()[i], o)
		if err != nil {
			t.Fatal(err)
		}
		ns[i] = n
	}
	return ns
}

// IXGBE opens the ixgbe driver with o on both ports of a cabled pair of
// model 82599s.
func IXGBE(t testing.TB, o ixgbe.Options) [2]nicdrv.NIC {
	ns, _ := IXGBEOn(t, emulated.CableOptions{}, o)
	return ns
}

// IXGBEOn is IXGBE with the two ports joined by a cable that cable
// describes (the zero value: a perfect one); it returns the platform too,
// for its counters and its link (SetLink).
func IXGBEOn(t testing.TB, cable emulated.CableOptions, o ixgbe.Options) ([2]nicdrv.NIC, *emulated.IXGBE) {
	p, err := emulated.NewIXGBE(emulated.DefaultIXGBEOptions())
	if err != nil {
		t.Fatal(err)
	}
	Health(t, "model 82599", func(i int) (uint64, string) {
		s := p.Stats(i)
		return s.Violations, s.LastViolation
	}, p.IOMMU(), p.Close)
	if cable.Faults != (fault.Options{}) || cable.Lose != nil {
		if err := emulated.Connect(cable, p.Port(0), p.Port(1)); err != nil {
			t.Fatal(err)
		}
	}
	var ns [2]nicdrv.NIC
	for i := range 2 {
		n, err := ixgbe.Open(p.Functions()[i], o)
		if err != nil {
			t.Fatal(err)
		}
		ns[i] = n
	}
	return ns, p
}

// Transports makes a transport with opts(i) on NIC i (UDP, Raw or the
// test's own); a NIC whose transport cannot be made is closed.
func Transports(t testing.TB, ns [2]nicdrv.NIC, opts func(i int) nic.Options) [2]*nic.Transport {
	var ts [2]*nic.Transport
	for i, n := range ns {
		tr, err := nic.New(n, opts(i))
		if err != nil {
			n.Close()
			t.Fatal(err)
		}
		ts[i] = tr
	}
	return ts
}
