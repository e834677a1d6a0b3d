package mx

import (
	"bytes"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// TestForgedSweep forges, from the peer's own NIC and with a valid trailer
// (CRC-32C is no authenticator), every packet type for every 16-bit
// sequence number (or attempt, ack, handle) without the right session: a
// stale destination session on sequenced packets and acks, no session at
// all on NACK_LIB, a wrong key or an unechoed session on CONNECT. None may
// reset the partner or deliver anything, and afterwards the connection
// carries every message class both ways.
func TestForgedSweep(t *testing.T) {
	opts := fastOptions()
	opts.ZombieSends = -1 // sends complete on their ack: a lost partner shows
	pr := newPair(t, loopbackOnly, opts, loopback.Faults{})
	as, bs := pr.a.Addr().Session, pr.b.Addr().Session
	from := pr.ba.NICID()
	stale := bs ^ 0x5A5A5A5A
	forge := func(n int, put func(h []byte)) { inject(pr.bb, from, sealedFrame(n, put)) }
	payload := bytes.Repeat([]byte{0xAB}, 100)
	o := wire.BigEndian
	for s := 0; s < 1<<16; s++ {
		seq := uint16(s)
		forge(wire.MsgLen+4, func(h []byte) {
			(&wire.Msg{Type: wire.TypeTiny, DstEP: 2, SrcEP: 1, Length: 4, Seq: seq, Ack: seq, Match: 1, Session: stale}).Put(h, o)
		})
		forge(wire.MsgLen+100, func(h []byte) {
			(&wire.Msg{Type: wire.TypeSmall, DstEP: 2, SrcEP: 1, Length: 100, Seq: seq, Ack: seq, Match: 1, Session: stale}).Put(h, o)
			copy(h[wire.MsgLen:], payload)
		})
		forge(wire.MediumLen+100, func(h []byte) {
			(&wire.Medium{DstEP: 2, SrcEP: 1, MsgLength: 100, FragLength: 100, Seq: seq, Ack: seq, Match: 1, Session: stale}).Put(h, o)
			copy(h[wire.MediumLen:], payload)
		})
		forge(wire.RndvLen, func(h []byte) {
			(&wire.Rndv{DstEP: 2, SrcEP: 1, Seq: seq, Ack: seq, Match: 1, Session: stale, MsgLength: 1 << 20}).Put(h, o)
		})
		forge(wire.NotifyLen, func(h []byte) {
			(&wire.Notify{DstEP: 2, SrcEP: 1, Seq: seq, Ack: seq, Session: stale, RegionSeq: 1}).Put(h, o)
		})
		forge(wire.TrucLen, func(h []byte) {
			(&wire.Truc{DstEP: 2, SrcEP: 1, Session: stale, AckUpTo: seq, AckNum: uint32(s) << 16}).Put(h, o)
		})
		for _, kind := range []uint8{wire.NackBadEndpoint, wire.NackEndpointClosed, wire.NackBadSession} {
			forge(wire.NackLibLen, func(h []byte) {
				(&wire.NackLib{SrcEP: 1, DstEP: 2, Kind: kind, Seq: seq}).Put(h, o)
			})
		}
		forge(wire.PullReplyLen+100, func(h []byte) {
			(&wire.PullReply{FrameSeq: uint8(s), FrameLength: 100, Handle: uint32(s), Magic: pullMagic(2)}).Put(h, o)
		})
		forge(wire.NackMCPLen, func(h []byte) {
			(&wire.NackMCP{SrcEP: 1, Kind: wire.NackBadRDMAWindow, Handle: uint32(s), Magic: pullMagic(2)}).Put(h, o)
		})
		if s < 1<<12 { // CONNECTs: every attempt and a spread of seqnums
			forge(wire.ConnectLen, func(h []byte) {
				(&wire.Connect{DstEP: 2, SrcEP: 1, SrcSession: as ^ uint32(s+1), Key: testKey ^ 1,
					NextRecvSeq: seq * 16, Attempt: uint8(s)}).Put(h, o)
			})
			forge(wire.ConnectLen, func(h []byte) {
				(&wire.Connect{DstEP: 2, SrcEP: 1, IsReply: true, SrcSession: bs ^ uint32(s+1), DstSession: as,
					NextRecvSeq: seq * 16, Attempt: uint8(s)}).Put(h, o)
			})
		}
	}
	if c := pr.b.Counters(); c.Get(Unreachable) != 0 || c.Get(DropBadSession) == 0 {
		t.Fatalf("counters after the sweep: unreachable %d, bad session %d", c.Get(Unreachable), c.Get(DropBadSession))
	}
	if _, ok := pr.b.IProbe(0, 0); ok {
		t.Fatal("a forged message was delivered")
	}
	// A NACK_LIB for every sequence number while sends are in flight (the
	// wire drops everything meanwhile): a nack is believed only when it
	// nacks the resend it caused, so a blind sweep fails nothing, and the
	// sends complete once the wire works again.
	pr.w.faults(loopback.Faults{Loss: 1})
	var inflight []*Request
	for i := range 3 {
		s, _ := pr.a.ISend([][]byte{[]byte("in flight")}, pr.atob, uint64(0xF000+i), nil)
		inflight = append(inflight, s)
	}
	for s := 0; s < 1<<16; s++ {
		inject(pr.ba, pr.bb.NICID(), sealedFrame(wire.NackLibLen, func(h []byte) {
			(&wire.NackLib{SrcEP: 2, DstEP: 1, Kind: wire.NackBadSession, Seq: uint16(s)}).Put(h, o)
		}))
	}
	pr.w.faults(loopback.Faults{})
	for _, s := range inflight {
		mustWait(t, s, 20*time.Second)
	}
	if c := pr.a.Counters(); c.Get(Unreachable) != 0 || c.Get(NacksUnconfirmed) < uint64(len(inflight)) {
		t.Fatalf("sender: unreachable %d, unconfirmed nacks %d", c.Get(Unreachable), c.Get(NacksUnconfirmed))
	}
	// The connection still works, every class, both ways.
	for _, size := range []int{0, 100, 20000, 200000} {
		for _, dir := range []struct {
			from, to *Endpoint
			addr     Addr
		}{{pr.a, pr.b, pr.atob}, {pr.b, pr.a, pr.btoa}} {
			buf := make([]byte, size)
			r, _ := dir.to.IRecv([][]byte{buf}, uint64(size), ^uint64(0), nil)
			s, err := dir.from.ISend([][]byte{pattern(size, 9)}, dir.addr, uint64(size), nil)
			if err != nil {
				t.Fatal(err)
			}
			mustWait(t, r, 20*time.Second)
			mustWait(t, s, 20*time.Second)
			if !bytes.Equal(buf, pattern(size, 9)) {
				t.Fatalf("%d bytes after the sweep: payload differs", size)
			}
		}
	}
}
