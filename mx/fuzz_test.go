package mx

import (
	"encoding/binary"
	"testing"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// FuzzHandleFrame feeds arbitrary frames, as if from the connected peer's
// NIC, to a board with a live endpoint, partner, pull and region: the
// receive path must validate everything and never panic. Frames are sealed
// half of the time so the fuzzer gets past the checksum.
func FuzzHandleFrame(f *testing.F) {
	w := newLoopbackWire(f, loopback.Faults{})
	pr := newPairOn(f, w, shortResends())
	// A live region on b: a large send a has not matched.
	s, err := pr.b.ISend([][]byte{make([]byte, 100000)}, pr.btoa, 1, nil)
	if err != nil {
		f.Fatal(err)
	}
	s.Forget()
	seed := func(n int, put func(h []byte)) { f.Add(sealedFrame(n, put)[wire.HeadLen:], true) }
	seed(wire.MsgLen+4, func(h []byte) { (&wire.Msg{Type: wire.TypeTiny, DstEP: 2, SrcEP: 1, Length: 4}).Put(h, wire.BigEndian) })
	seed(wire.MediumLen+808, func(h []byte) {
		(&wire.Medium{DstEP: 2, SrcEP: 1, MsgLength: 9000, FragIndex: 1, FragLength: 808}).Put(h, wire.BigEndian)
	})
	seed(wire.RndvLen, func(h []byte) { (&wire.Rndv{DstEP: 2, SrcEP: 1, MsgLength: 1 << 20}).Put(h, wire.BigEndian) })
	seed(wire.PullLen, func(h []byte) {
		(&wire.Pull{DstEP: 2, SrcEP: 1, TotalLength: 100000, BlockLength: 8000, RegionSeq: 1, Magic: pullMagic(1)}).Put(h, wire.BigEndian)
	})
	seed(wire.PullReplyLen+8, func(h []byte) { (&wire.PullReply{FrameLength: 8, Magic: pullMagic(1)}).Put(h, wire.BigEndian) })
	seed(wire.NotifyLen, func(h []byte) { (&wire.Notify{DstEP: 2, SrcEP: 1, RegionSeq: 1}).Put(h, wire.BigEndian) })
	seed(wire.ConnectLen, func(h []byte) {
		(&wire.Connect{DstEP: 2, SrcEP: 1, Key: testKey, SrcSession: 5}).Put(h, wire.BigEndian)
	})
	seed(wire.TrucLen, func(h []byte) { (&wire.Truc{DstEP: 2, SrcEP: 1, AckUpTo: 3, AckNum: 9}).Put(h, wire.BigEndian) })
	seed(wire.NackLibLen, func(h []byte) { (&wire.NackLib{SrcEP: 1, DstEP: 2, Kind: 1}).Put(h, wire.BigEndian) })
	seed(wire.NackMCPLen, func(h []byte) { (&wire.NackMCP{SrcEP: 1, Kind: 4, Magic: pullMagic(1)}).Put(h, wire.BigEndian) })
	f.Fuzz(func(t *testing.T, body []byte, seal bool) {
		// Use the real sessions so the fuzzer reaches the deep checks.
		b := append([]byte(nil), body...)
		if len(b) >= 8 && b[0] == byte(wire.TypePull) {
			binary.BigEndian.PutUint32(b[4:], pr.b.Addr().Session)
		}
		if len(b) >= 24 && (b[0] == byte(wire.TypeTiny) || b[0] == byte(wire.TypeSmall) || b[0] == byte(wire.TypeMedium) || b[0] == byte(wire.TypeRndv)) {
			binary.BigEndian.PutUint32(b[20:], pr.b.Addr().Session)
		}
		fr := make([]byte, wire.HeadLen+len(b)+wire.ChecksumLen)
		wire.PutPeerIndex(fr, wire.NoPeerIndex, wire.BigEndian)
		copy(fr[wire.HeadLen:], b)
		n := wire.HeadLen + len(b)
		if seal {
			n = wire.SealInPlace(fr, n)
		}
		inject(pr.bb, pr.ba.NICID(), fr[:n])
	})
}
