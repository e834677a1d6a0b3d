package netnstest

import (
	"net"
	"os"
	"testing"
)

// A pair has both ends up in their own namespaces, with the addresses and
// MACs it reports, and Do runs code inside a namespace only.
func TestPair(t *testing.T) {
	Require(t, "GOMX_REQUIRE_XDP")
	p := NewPair(t, 2)
	for _, side := range []struct {
		ns, iface string
		mac       [6]byte
	}{{p.NSA, p.A, p.MACA}, {p.NSB, p.B, p.MACB}} {
		err := Do(side.ns, func() error {
			ifi, err := net.InterfaceByName(side.iface)
			if err != nil {
				return err
			}
			if ifi.Flags&net.FlagUp == 0 || string(ifi.HardwareAddr) != string(side.mac[:]) {
				t.Errorf("%s in %s: flags %v, MAC %v; want up with %x", side.iface, side.ns, ifi.Flags, ifi.HardwareAddr, side.mac)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		l, err := Link(side.ns, side.iface)
		if err != nil {
			t.Fatal(err)
		}
		if a := l.Attrs(); a.NumRxQueues != 2 || a.NumTxQueues != 2 {
			t.Errorf("%s in %s has %d rx and %d tx queues, want 2 and 2", side.iface, side.ns, a.NumRxQueues, a.NumTxQueues)
		}
	}
	// The calling thread is not moved: the pair's interfaces are not here.
	if _, err := net.InterfaceByName(p.A); err == nil {
		t.Errorf("%s visible outside its namespace", p.A)
	}
	if _, err := os.Stat("/run/netns/" + p.NSA); err != nil {
		t.Errorf("namespace %s: %v", p.NSA, err)
	}
}
