package xdp

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/gomx-dev/gomx/internal/netnstest"
)

// side is one end of a test veth pair: the program on its interface and one
// socket per queue.
type side struct {
	ns, iface string
	mac       [6]byte
	prog      *Program
	socks     []*Socket
}

// rig is a veth pair with the steering program and sockets on both ends.
type rig struct {
	pair *netnstest.Pair
	a, b side
}

// newRig builds a veth pair with queues queues, attaches the program in
// mode on both ends and opens and registers a socket on every queue. All of
// it is closed in t.Cleanup before the namespaces go.
func newRig(t testing.TB, queues int, mode AttachMode, o Options) *rig {
	t.Helper()
	requireXDP(t)
	p := netnstest.NewPair(t, queues)
	r := &rig{pair: p,
		a: side{ns: p.NSA, iface: p.A, mac: p.MACA},
		b: side{ns: p.NSB, iface: p.B, mac: p.MACB}}
	for _, s := range []*side{&r.a, &r.b} {
		err := netnstest.Do(s.ns, func() error {
			prog, err := Attach(s.iface, ProgramOptions{Mode: mode})
			if err != nil {
				return err
			}
			s.prog = prog
			t.Cleanup(func() { prog.Close() })
			for q := range queues {
				sk, err := Open(s.iface, q, o)
				if err != nil {
					return err
				}
				t.Cleanup(func() { sk.Close() })
				s.socks = append(s.socks, sk)
				if err := prog.Register(sk, 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// pattern is the random bytes test frames are cut from.
var pattern = func() []byte {
	b := make([]byte, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}()

// testFrameLen is the length of test frame seq: 60 to 1514 bytes.
func testFrameLen(seq uint32) int {
	return 60 + int(seq*7919%1455)
}

// putTestFrame writes test frame seq for queue q into b and returns its
// length: Ethernet header, then q and seq, then pattern bytes chosen by seq.
func putTestFrame(b []byte, dst, src [6]byte, q int, seq uint32) int {
	n := testFrameLen(seq)
	PutEthHeader(b, EthHeader{Dst: dst, Src: src, EtherType: EtherTypeOpenMX})
	// Data: peer index (2), type (1), destination endpoint (1), queue
	// (4), sequence (4), then the pattern.
	b[14], b[15], b[16], b[17] = 0, 0, 37, 0
	binary.BigEndian.PutUint32(b[18:22], uint32(q))
	binary.BigEndian.PutUint32(b[22:26], seq)
	off := int(seq*131) % (len(pattern) - 2048)
	copy(b[26:n], pattern[off:])
	return n
}

// checkTestFrame reports whether f is test frame seq of queue q, byte for
// byte, and which queue and seq it claims to be.
func checkTestFrame(f []byte, dst, src [6]byte) (q int, seq uint32, ok bool) {
	if len(f) < 26 {
		return -1, 0, false
	}
	q = int(binary.BigEndian.Uint32(f[18:22]))
	seq = binary.BigEndian.Uint32(f[22:26])
	var want [2048]byte
	n := putTestFrame(want[:], dst, src, q, seq)
	return q, seq, len(f) == n && string(f) == string(want[:n])
}
