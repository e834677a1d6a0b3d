package netns

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// Close deletes both namespaces, and a second Close is harmless.
func TestPairClose(t *testing.T) {
	if why := Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	p, err := NewPair(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{p.NSA, p.NSB} {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			t.Fatalf("namespace %s missing after NewPair: %v", ns, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{p.NSA, p.NSB} {
		if _, err := os.Stat("/run/netns/" + ns); err == nil {
			t.Errorf("namespace %s left behind by Close", ns)
		}
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A NewPair that fails half-way leaves nothing behind: not the namespace
// it had made, not a veth pair in the caller's namespace, and not a name
// that belonged to someone else.
func TestNewPairFailureLeavesNothing(t *testing.T) {
	if why := Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	// The next pair's B namespace name is taken, so NewPair fails after
	// making A.
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, seq.Load()+1)
	nsA, nsB, ifA := "gomx-"+id+"-a", "gomx-"+id+"-b", "gxa"+id
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	taken := filepath.Join(Dir, nsB)
	if err := os.WriteFile(taken, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(taken)
	p, err := NewPair(1)
	if err == nil {
		p.Close()
		t.Fatal("NewPair succeeded with its namespace name taken")
	}
	if !strings.Contains(err.Error(), nsB) || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("error %q does not name the taken namespace %s", err, nsB)
	}
	if _, err := os.Stat(filepath.Join(Dir, nsA)); err == nil {
		t.Errorf("namespace %s left behind by a failed NewPair", nsA)
	}
	if _, err := os.Stat(taken); err != nil {
		t.Errorf("the other owner's %s was removed: %v", taken, err)
	}
	if _, err := net.InterfaceByName(ifA); err == nil {
		t.Errorf("veth %s left in the caller's namespace", ifA)
	}
	for _, q := range []int{0, -1, MaxQueues + 1} {
		if _, err := NewPair(q); err == nil || !strings.Contains(err.Error(), "queues") {
			t.Errorf("NewPair(%d) = %v; want an error about the queue count", q, err)
		}
	}
}

// Each end has the queues asked for, is up with its address, knows the
// other end's MAC without ARP, and SetLinkUp takes it down and up again.
func TestPairLinks(t *testing.T) {
	if why := Missing(); why != "" {
		if os.Getenv("GOMX_REQUIRE_XDP") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	p, err := NewPair(4)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, side := range []struct {
		ns, iface string
		ip, peer  netip.Addr
		peerMAC   [6]byte
	}{{p.NSA, p.A, p.IPA, p.IPB, p.MACB}, {p.NSB, p.B, p.IPB, p.IPA, p.MACA}} {
		l, err := Link(side.ns, side.iface)
		if err != nil {
			t.Fatal(err)
		}
		a := l.Attrs()
		if a.NumRxQueues != 4 || a.NumTxQueues != 4 || a.Flags&net.FlagUp == 0 {
			t.Errorf("%s: %d rx, %d tx queues, flags %v; want 4, 4, up", side.iface, a.NumRxQueues, a.NumTxQueues, a.Flags)
		}
		err = Do(side.ns, func() error {
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			if len(addrs) != 1 || addrs[0].IPNet.String() != side.ip.String()+"/24" {
				t.Errorf("%s addresses %v, want %v/24", side.iface, addrs, side.ip)
			}
			neighs, err := netlink.NeighList(a.Index, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			found := false
			for _, n := range neighs {
				if n.IP.Equal(side.peer.AsSlice()) && string(n.HardwareAddr) == string(side.peerMAC[:]) && n.State == netlink.NUD_PERMANENT {
					found = true
				}
			}
			if !found {
				t.Errorf("%s: no permanent neighbour %v at %x in %v", side.iface, side.peer, side.peerMAC, neighs)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, up := range []bool{false, true} {
		if err := SetLinkUp(p.NSB, p.B, up); err != nil {
			t.Fatal(err)
		}
		l, err := Link(p.NSB, p.B)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Attrs().Flags&net.FlagUp != 0; got != up {
			t.Errorf("after SetLinkUp(%v), %s is up=%v", up, p.B, got)
		}
	}
	if err := SetLinkUp("gomx-nonexistent", "x", true); err == nil || !strings.Contains(err.Error(), "gomx-nonexistent") {
		t.Errorf("SetLinkUp in a missing namespace = %v; want an error naming it", err)
	}
}
