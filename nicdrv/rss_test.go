package nicdrv_test

import (
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
)

// msKey is the key of Microsoft's "Verifying the RSS Hash Calculation".
var msKey = []byte{
	0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
	0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
	0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
}

// The IPv4 verification vectors of that document: the hash of the
// addresses alone, and with the ports.
func TestToeplitzMicrosoftVectors(t *testing.T) {
	for _, v := range []struct {
		dst, src   string
		ip, ipPort uint32
	}{
		{"161.142.100.80:1766", "66.9.149.187:2794", 0x323e8fc2, 0x51ccc178},
		{"65.69.140.83:4739", "199.92.111.2:14230", 0xd718262a, 0xc626b0ea},
		{"12.22.207.184:38024", "24.19.198.95:12898", 0xd2d0a5de, 0x5c2b394a},
		{"209.142.163.6:2217", "38.27.205.30:48228", 0x82989176, 0xafc7327f},
		{"202.188.127.2:1303", "153.39.163.191:44251", 0x5d1809c5, 0x10e828a2},
	} {
		src, dst := netip.MustParseAddrPort(v.src), netip.MustParseAddrPort(v.dst)
		addrs := &nicdrv.RSS{Key: msKey, Table: make([]int, 128)}
		ports := &nicdrv.RSS{Key: msKey, Table: make([]int, 128), UDPPorts: true}
		if h := addrs.HashUDP4(src, dst); h != v.ip {
			t.Errorf("%s -> %s, addresses: %#08x, want %#08x", v.src, v.dst, h, v.ip)
		}
		if h := ports.HashUDP4(src, dst); h != v.ipPort {
			t.Errorf("%s -> %s, with ports: %#08x, want %#08x", v.src, v.dst, h, v.ipPort)
		}
	}
}

// naiveToeplitz is the definition read literally, with the key as one big
// number: input bit i (from the first byte's top bit) selects key bits
// [i, i+32).
func naiveToeplitz(key, in []byte) uint32 {
	k := new(big.Int).SetBytes(key)
	nbits := 8 * len(key)
	var h uint32
	for i := range 8 * len(in) {
		if in[i/8]&(0x80>>(i%8)) == 0 {
			continue
		}
		w := new(big.Int).Rsh(k, uint(nbits-32-i))
		h ^= uint32(w.Uint64())
	}
	return h
}

func TestToeplitzAgainstDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		key := make([]byte, 40)
		for i := range key {
			key[i] = byte(r.Uint32())
		}
		in := make([]byte, r.IntN(37))
		for i := range in {
			in[i] = byte(r.Uint32())
		}
		if got, want := nicdrv.Toeplitz(key, in), naiveToeplitz(key, in); got != want {
			t.Fatalf("key % x input % x: %#08x, want %#08x", key, in, got, want)
		}
	}
}

// alternate is a 128-entry table alternating between two queues, as the
// e1000e driver programs it.
func alternate() []int {
	t := make([]int, 128)
	for i := range t {
		t[i] = i & 1
	}
	return t
}

// destKey is msKey with the bits that carry a source address into a
// 128-entry index cleared (bits 25..62).
func destKey() []byte {
	k := append([]byte(nil), msKey...)
	k[3] &= 0x80
	k[4], k[5], k[6] = 0, 0, 0
	k[7] &= 0x01
	return k
}

// DestQueue names a queue exactly when every sender lands there: checked
// against QueueUDP4 for many senders.
func TestDestQueue(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	randAddr := func() netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}), uint16(r.Uint32()))
	}
	for _, c := range []struct {
		name   string
		rss    nicdrv.RSS
		steers bool
	}{
		{"microsoft key", nicdrv.RSS{Key: msKey, Table: alternate()}, false},
		{"destination key", nicdrv.RSS{Key: destKey(), Table: alternate()}, true},
		{"destination key, ports hashed", nicdrv.RSS{Key: destKey(), Table: alternate(), UDPPorts: true}, false},
		{"one queue", nicdrv.RSS{Key: msKey, Table: make([]int, 128)}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			seen := [2]int{}
			for range 200 {
				dst := randAddr()
				q, err := c.rss.DestQueue(dst)
				if (err == nil) != c.steers {
					t.Fatalf("DestQueue(%v) = %d, %v; want steering %v", dst, q, err, c.steers)
				}
				moved := false
				for range 64 {
					got := c.rss.QueueUDP4(randAddr(), dst)
					if err == nil && got != q {
						t.Fatalf("DestQueue(%v) = %d, but a sender lands on queue %d", dst, q, got)
					}
					moved = moved || got != c.rss.QueueUDP4(randAddr(), dst)
				}
				if err != nil && !moved {
					t.Errorf("DestQueue(%v): %v, yet 64 senders all landed on one queue", dst, err)
				}
				seen[q]++
			}
			if c.steers && c.name != "one queue" && (seen[0] == 0 || seen[1] == 0) {
				t.Errorf("destinations per queue %v: some addresses should reach each queue", seen)
			}
		})
	}
	if err := (&nicdrv.RSS{Key: msKey, Table: make([]int, 100)}).Check(); err == nil {
		t.Error("a 100-entry table passed Check")
	}
}
