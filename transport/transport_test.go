package transport

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestMACRoundTrip(t *testing.T) {
	mac := [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x01}
	id := MACNICID(mac)
	if id != 0x525400123401 {
		t.Fatalf("MACNICID = %#x", uint64(id))
	}
	if id.MAC() != mac {
		t.Fatalf("MAC() = %v", id.MAC())
	}
	if s := id.String(); s != "52:54:00:12:34:01" {
		t.Fatalf("String() = %q", s)
	}
}

func TestUDPRoundTrip(t *testing.T) {
	ap := netip.MustParseAddrPort("10.99.0.2:40001")
	id, err := UDPNICID(ap)
	if err != nil {
		t.Fatal(err)
	}
	if id&^NICIDMask != 0 {
		t.Fatalf("id %#x uses more than 48 bits", uint64(id))
	}
	if got := id.UDPAddr(); got != ap {
		t.Fatalf("UDPAddr() = %v, want %v", got, ap)
	}
	if _, err := UDPNICID(netip.MustParseAddrPort("[::1]:1")); err == nil {
		t.Fatal("IPv6 accepted")
	}
	v4mapped := netip.AddrPortFrom(netip.MustParseAddr("::ffff:127.0.0.1"), 9)
	if id, err := UDPNICID(v4mapped); err != nil || id.UDPAddr().String() != "127.0.0.1:9" {
		t.Fatalf("v4-mapped: %v %v", id.UDPAddr(), err)
	}
}

// TestHeadNeedsARegionThatTakesIt: Check refuses a Frame.Head on a region
// that does not take one, naming the fix, and accepts it on one that does.
func TestHeadNeedsARegionThatTakesIt(t *testing.T) {
	owner := new(int)
	mem := make([]byte, 64)
	r := NewRegion(owner, mem, true, nil)
	f := r.Frame(1, 0, 32)
	f.Head = []byte{1, 2, 3}
	if err := r.Check(owner, &f); !errors.Is(err, ErrForeignRegion) || !strings.Contains(err.Error(), "TakesHead") {
		t.Fatalf("Check of a Head on a region without heads: %v", err)
	}
	r.SetTakesHead()
	if err := r.Check(owner, &f); err != nil {
		t.Fatalf("Check of a Head on a region that takes one: %v", err)
	}
}
