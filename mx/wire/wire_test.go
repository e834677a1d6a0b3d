package wire

import (
	"bytes"
	"errors"
	"testing"
)

// frame builds Data = peer index + header + payload + CRC.
func frame(put func(p []byte) int) []byte {
	b := make([]byte, 10000)
	PutPeerIndex(b, 7)
	n := HeadLen + put(b[HeadLen:])
	n = SealInPlace(b, n)
	return b[:n]
}

func TestRoundTrip(t *testing.T) {
	payload := bytes.Repeat([]byte{0xAB}, 300)
	msg := Msg{Type: TypeSmall, DstEP: 1, SrcEP: 2, Gen: 3, Length: 100, Seq: 0x4001, Ack: 0x4000, Match: 0x0123456789abcdef, Session: 0xdeadbeef}
	f := frame(func(p []byte) int { msg.Put(p); copy(p[MsgLen:], payload[:100]); return MsgLen + 100 })
	// Ethernet padding after the trailer must not matter.
	f = append(f, 0, 0, 0)
	g, err := Verify(f, true)
	if err != nil {
		t.Fatal(err)
	}
	if idx, _ := PeerIndex(g); idx != 7 {
		t.Fatalf("peer index %d", idx)
	}
	h, pl, err := DecodeMsg(g[HeadLen:])
	if err != nil || h != msg || !bytes.Equal(pl, payload[:100]) {
		t.Fatalf("msg: %+v %v", h, err)
	}

	med := Medium{DstEP: 1, SrcEP: 2, MsgLength: 1000, Seq: 5, Ack: 6, Match: 7, Session: 8, FragLength: 232, FragIndex: 3, FragStride: 256}
	f = frame(func(p []byte) int { med.Put(p); return MediumLen + 232 })
	g, err = Verify(f, true)
	if err != nil {
		t.Fatal(err)
	}
	mh, mp, err := DecodeMedium(g[HeadLen:])
	if err != nil || mh != med || len(mp) != 232 || mh.Offset() != 768 || mh.Frags() != 4 {
		t.Fatalf("medium: %+v %v", mh, err)
	}

	rv := Rndv{DstEP: 1, SrcEP: 2, Gen: 1, Seq: 9, Ack: 10, Match: 11, Session: 12, MsgLength: 1 << 22, RegionID: 13, RegionSeq: 14, RegionOffset: 15}
	rh, err := DecodeRndv(frame(func(p []byte) int { rv.Put(p); return RndvLen })[HeadLen:])
	if err != nil || rh != rv {
		t.Fatalf("rndv: %+v %v", rh, err)
	}
	pl2 := Pull{DstEP: 1, SrcEP: 2, Session: 3, TotalLength: 100000, RegionID: 4, RegionSeq: 5, FrameLength: 1000, RegionOffset: 0, Handle: 6, Magic: 7, FirstFrameOffset: 0, BlockLength: 32000, FirstFrame: 32}
	ph, err := DecodePull(frame(func(p []byte) int { pl2.Put(p); return PullLen })[HeadLen:])
	if err != nil || ph != pl2 {
		t.Fatalf("pull: %+v %v", ph, err)
	}
	pr := PullReply{FrameSeq: 3, FrameLength: 10, Offset: 3000, Handle: 6, Magic: 7}
	prh, prp, err := DecodePullReply(frame(func(p []byte) int { pr.Put(p); return PullReplyLen + 10 })[HeadLen:])
	if err != nil || prh != pr || len(prp) != 10 {
		t.Fatalf("pull reply: %+v %v", prh, err)
	}
	nt := Notify{DstEP: 1, SrcEP: 2, Session: 3, PulledLength: 4, RegionID: 5, RegionSeq: 6, Seq: 7, Ack: 8}
	nh, err := DecodeNotify(frame(func(p []byte) int { nt.Put(p); return NotifyLen })[HeadLen:])
	if err != nil || nh != nt {
		t.Fatalf("notify: %+v %v", nh, err)
	}
	for _, c := range []Connect{
		{DstEP: 1, SrcEP: 2, YourIndex: 3, MaxFrame: 1500, Attempt: 4, SrcSession: 5, Key: 6, NextRecvSeq: 7},
		{DstEP: 1, SrcEP: 2, YourIndex: 3, MaxFrame: 9000, IsReply: true, Attempt: 4, SrcSession: 5, DstSession: 8, NextRecvSeq: 7, Status: ConnectBadKey},
	} {
		ch, err := DecodeConnect(frame(func(p []byte) int { c.Put(p); return ConnectLen })[HeadLen:])
		if err != nil || ch != c {
			t.Fatalf("connect: %+v %v", ch, err)
		}
	}
	tr := Truc{DstEP: 1, SrcEP: 2, Session: 3, AckUpTo: 4, AckNum: 5, SendSeq: 6, Resent: true}
	th, err := DecodeTruc(frame(func(p []byte) int { tr.Put(p); return TrucLen })[HeadLen:])
	if err != nil || th != tr {
		t.Fatalf("truc: %+v %v", th, err)
	}
	nl := NackLib{SrcEP: 1, Kind: NackBadSession, Session: 9, DstEP: 2, PeerIndex: 3, Seq: 4}
	nlh, err := DecodeNackLib(frame(func(p []byte) int { nl.Put(p); return NackLibLen })[HeadLen:])
	if err != nil || nlh != nl {
		t.Fatalf("nack lib: %+v %v", nlh, err)
	}
	nm := NackMCP{SrcEP: 1, Kind: NackBadRDMAWindow, Handle: 2, Magic: 3}
	nmh, err := DecodeNackMCP(frame(func(p []byte) int { nm.Put(p); return NackMCPLen })[HeadLen:])
	if err != nil || nmh != nm {
		t.Fatalf("nack mcp: %+v %v", nmh, err)
	}
}

func TestRejects(t *testing.T) {
	tiny := Msg{Type: TypeTiny, Length: 8}
	good := frame(func(p []byte) int { tiny.Put(p); return MsgLen + 8 })
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"head only", []byte{0, 0}, ErrShort},
		{"unknown type", []byte{0, 0, 99, 0, 0, 0}, ErrUnknownType},
		{"short header", good[:10], ErrShort},
		{"short payload", good[:HeadLen+MsgLen+4], ErrShort},
		{"no trailer", good[:len(good)-4], ErrShort},
		{"bit flip", func() []byte { b := bytes.Clone(good); b[HeadLen+20] ^= 1; return b }(), ErrChecksum},
		{"tiny too long", func() []byte {
			m := Msg{Type: TypeTiny, Length: 33}
			return frame(func(p []byte) int { m.Put(p); return MsgLen + 33 })
		}(), ErrBadLength},
	}
	for _, c := range cases {
		if _, err := Verify(c.data, true); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// Medium fragments that do not fit their message.
	for _, m := range []Medium{
		{MsgLength: 1000, FragStride: 256, FragIndex: 4, FragLength: 0},   // index past the end
		{MsgLength: 1000, FragStride: 256, FragIndex: 0, FragLength: 255}, // wrong length
		{MsgLength: 1000, FragStride: 0, FragIndex: 0, FragLength: 0},     // no stride
		{MsgLength: 100000, FragStride: 100, FragIndex: 0, FragLength: 100},
	} {
		f := frame(func(p []byte) int { m.Put(p); return MediumLen + int(m.FragLength) })
		if _, _, err := DecodeMedium(f[HeadLen:]); !errors.Is(err, ErrBadLength) {
			t.Errorf("medium %+v: %v", m, err)
		}
	}
	pl := Pull{FrameLength: 1000, TotalLength: 5000, FirstFrame: 4, BlockLength: 1001}
	f := frame(func(p []byte) int { pl.Put(p); return PullLen })
	if _, err := DecodePull(f[HeadLen:]); !errors.Is(err, ErrBadLength) {
		t.Errorf("pull block outside: %v", err)
	}
}
