package mx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/loopback"
)

// omxPeer plays an Open-MX 1.5 board (built with MTU 9000) on the loopback
// wire: its frames are written field by field at omx_wire.h's offsets with
// encoding/binary, not with package wire, with garbage in every pad and no
// trailer, and it cuts mediums and pull replies with Open-MX's sizes
// (8192-byte fragments, 8968-byte pull replies).
type omxPeer struct {
	t       *testing.T
	tr      transport.Transport
	bo      binary.ByteOrder
	ord     wire.Order
	ep      uint8
	session uint32
	gomx    transport.NICID
	myIdx   uint16 // the gomx board's index in our peer table
	backlog [][]byte
	trucs   [][]byte // every TRUC the gomx board sent us
}

const (
	omxFrag  = 8192
	omxReply = 8968
)

// frame returns a Data buffer of n bytes after the peer index, every byte
// garbage until a field is written.
func (o *omxPeer) frame(n int, peerIdx uint16) []byte {
	b := bytes.Repeat([]byte{0xEE}, wire.HeadLen+n)
	o.bo.PutUint16(b, peerIdx)
	return b
}

func (o *omxPeer) u8(b []byte, off int, v uint8)   { b[wire.HeadLen+off] = v }
func (o *omxPeer) u16(b []byte, off int, v uint16) { o.bo.PutUint16(b[wire.HeadLen+off:], v) }
func (o *omxPeer) u32(b []byte, off int, v uint32) { o.bo.PutUint32(b[wire.HeadLen+off:], v) }
func (o *omxPeer) g16(b []byte, off int) uint16    { return o.bo.Uint16(b[wire.HeadLen+off:]) }
func (o *omxPeer) g32(b []byte, off int) uint32    { return o.bo.Uint32(b[wire.HeadLen+off:]) }

func (o *omxPeer) send(b []byte) {
	o.t.Helper()
	if _, err := o.tr.Send([]transport.Frame{{Peer: o.gomx, Data: b}}); err != nil {
		o.t.Fatal(err)
	}
}

// recv returns the next frame of type want, keeping others for later; it
// fails after 10 s.
func (o *omxPeer) recv(want wire.Type) []byte {
	o.t.Helper()
	for i, b := range o.backlog {
		if wire.Type(b[wire.HeadLen]) == want {
			o.backlog = append(o.backlog[:i], o.backlog[i+1:]...)
			return b
		}
	}
	frames := make([]transport.Frame, 64)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, _ := o.tr.Recv(frames, 50*time.Millisecond)
		var got []byte
		for _, f := range frames[:n] {
			b := bytes.Clone(f.Data)
			if wire.Type(b[wire.HeadLen]) == wire.TypeTruc {
				o.trucs = append(o.trucs, b)
			}
			// TRUCs, which come whenever an ack is due, are kept only
			// by a caller waiting for one: a second TRUC of the batch
			// that holds the first must wait for its next call (a
			// loaded run delivers the medium's and the tinies' acks in
			// one batch).
			if got == nil && wire.Type(b[wire.HeadLen]) == want {
				got = b
			} else if t := wire.Type(b[wire.HeadLen]); t != wire.TypeTruc || want == wire.TypeTruc {
				o.backlog = append(o.backlog, b)
			}
		}
		if got != nil {
			return got
		}
	}
	o.t.Fatalf("no %v frame from the gomx board", want)
	return nil
}

// msgHeader writes the 24-byte omx_pkt_msg part shared by TINY, SMALL,
// MEDIUM (whose length is 32 bits) and RNDV.
func (o *omxPeer) msgHeader(b []byte, typ wire.Type, dst uint8, seq, ack uint16, match uint64, session uint32) {
	o.u8(b, 0, uint8(typ))
	o.u8(b, 1, dst)
	o.u8(b, 2, o.ep)
	o.u8(b, 3, 0)
	o.u16(b, 8, seq)
	o.u16(b, 10, ack)
	o.u32(b, 12, uint32(match>>32))
	o.u32(b, 16, uint32(match))
	o.u32(b, 20, session)
}

func TestOpenMXConversation(t *testing.T) {
	for _, little := range []bool{false, true} {
		t.Run(map[bool]string{false: "big-endian", true: "little-endian"}[little], func(t *testing.T) {
			testOpenMXConversation(t, little)
		})
	}
}

func testOpenMXConversation(t *testing.T, little bool) {
	w := newLoopbackWire(t, loopback.Faults{})
	port := w.third()
	opts := fastOptions()
	opts.LittleEndian = little
	opts.ZombieSends = -1    // sends complete on the peer's ack
	opts.PullBlockFrames = 2 // several PULLs per message
	opts.ResendDelay = time.Second
	g, err := NewBoard(w.a, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(); port.Close(); w.close() })
	ge, err := g.OpenEndpoint(2, testKey)
	if err != nil {
		t.Fatal(err)
	}
	o := &omxPeer{t: t, tr: port, bo: binary.BigEndian, ord: wire.BigEndian, ep: 5, session: 0x5E55_1011,
		gomx: g.NICID(), myIdx: 3}
	if little {
		o.bo, o.ord = binary.LittleEndian, wire.LittleEndian
	}

	// 1. Open-MX connects: a 16-byte-data CONNECT request, garbage pads.
	const omxNext = 0x0100 // the seqnum Open-MX expects first from gomx
	c := o.frame(wire.ConnectLen, wire.NoPeerIndex)
	o.u8(c, 0, uint8(wire.TypeConnect))
	o.u8(c, 1, 2)
	o.u8(c, 2, o.ep)
	o.u8(c, 4, 16)
	o.u16(c, 8, 0)
	o.u16(c, 10, o.myIdx)
	o.u32(c, 16, o.session)
	o.u32(c, 20, testKey)
	o.u16(c, 24, omxNext)
	o.u8(c, 26, 0)
	o.u8(c, 27, 1)
	o.send(c)
	rep := o.recv(wire.TypeConnect)
	if len(rep) != wire.HeadLen+wire.ConnectLen+wire.ConnectExtLen {
		t.Fatalf("connect reply of %d bytes: a trailer to an Open-MX peer?", len(rep))
	}
	if o.bo.Uint16(rep) != o.myIdx || rep[wire.HeadLen+26] == 0 || o.g32(rep, 16) != o.session ||
		o.g32(rep, 20) != ge.Addr().Session || rep[wire.HeadLen+27] != 1 || rep[wire.HeadLen+28] != 0 {
		t.Fatalf("connect reply % x", rep)
	}
	gomxNext := o.g16(rep, 24) // what gomx expects first from us
	sendSeq := gomxNext
	gIdx := o.g16(rep, 10) // our index in gomx's table: our frames' head
	from := Addr{NIC: port.Addr(), Endpoint: o.ep}

	// 2. An Open-MX medium of 20000 bytes: fragments at i*8192, sent out
	// of order.
	msg := pattern(20000, 1)
	buf := make([]byte, len(msg))
	r, _ := ge.IRecv([][]byte{buf}, 0x77, ^uint64(0), nil)
	for _, i := range []int{2, 0, 1} {
		n := min(omxFrag, len(msg)-i*omxFrag)
		f := o.frame(wire.MediumLen+n, gIdx)
		o.msgHeader(f, wire.TypeMedium, 2, sendSeq, omxNext, 0x77, ge.Addr().Session)
		o.u32(f, 4, uint32(len(msg)))
		o.u16(f, 24, uint16(n))
		o.u8(f, 26, uint8(i))
		copy(f[wire.HeadLen+wire.MediumLen:], msg[i*omxFrag:])
		o.send(f)
	}
	sendSeq++
	st := mustWait(t, r, 10*time.Second)
	if !bytes.Equal(buf, msg) || st.Source.NIC != from.NIC || st.Source.Endpoint != o.ep {
		t.Fatalf("Open-MX medium: %+v, payload equal %v", st, bytes.Equal(buf, msg))
	}
	to := st.Source

	// 2b. Two TINYs out of order: a gomx receiver with selective acks would
	// answer the early one with a SACK at once; an Open-MX peer gets no
	// SACK, only Open-MX's 28-byte TRUC after AckDelay.
	r1, _ := ge.IRecv([][]byte{make([]byte, 8)}, 0x71, ^uint64(0), nil)
	r2, _ := ge.IRecv([][]byte{make([]byte, 8)}, 0x72, ^uint64(0), nil)
	for _, k := range []uint16{1, 0} {
		f := o.frame(wire.MsgLen+4, gIdx)
		o.msgHeader(f, wire.TypeTiny, 2, sendSeq+k, omxNext, 0x71+uint64(k), ge.Addr().Session)
		o.u16(f, 4, 4)
		o.u16(f, 6, 0)
		copy(f[wire.HeadLen+wire.MsgLen:], "tiny")
		o.send(f)
	}
	sendSeq += 2
	mustWait(t, r1, 10*time.Second)
	mustWait(t, r2, 10*time.Second)
	for k := 0; ; k++ { // earlier TRUCs (the medium's delayed ack) may come first
		tr := o.recv(wire.TypeTruc)
		if o.g16(tr, 14) == sendSeq {
			break
		}
		if k == 10 {
			t.Fatalf("no ack of the out-of-order tinies; last TRUC % x", tr)
		}
	}
	o.checkTrucs()

	// 3. A gomx medium to Open-MX: fragments of at most 8192 at i*8192,
	// no trailer, Open-MX's seqnums, completed by Open-MX's TRUC ack.
	s, err := ge.ISend([][]byte{msg}, to, 0x88, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	var seq uint16
	for k := 0; k < 3; k++ {
		f := o.recv(wire.TypeMedium)
		i, n := int(f[wire.HeadLen+26]), int(o.g16(f, 24))
		if len(f) != wire.HeadLen+wire.MediumLen+n || n > omxFrag || o.g32(f, 4) != uint32(len(msg)) ||
			o.g32(f, 20) != o.session || i*omxFrag+n > len(msg) {
			t.Fatalf("gomx medium fragment: % x", f[:wire.HeadLen+wire.MediumLen])
		}
		seq = o.g16(f, 8)
		copy(got[i*omxFrag:], f[wire.HeadLen+wire.MediumLen:])
	}
	if !bytes.Equal(got, msg) || seq != omxNext {
		t.Fatalf("gomx medium: seq %#x, payload equal %v", seq, bytes.Equal(got, msg))
	}
	ack := o.frame(wire.TrucLen, gIdx)
	o.u8(ack, 0, uint8(wire.TypeTruc))
	o.u8(ack, 1, 2)
	o.u8(ack, 2, o.ep)
	o.u8(ack, 4, 16)
	o.u32(ack, 8, ge.Addr().Session)
	o.u8(ack, 12, wire.TrucAck)
	o.u16(ack, 14, omxNext+1)
	o.u32(ack, 16, ge.Addr().Session)
	o.u32(ack, 20, 1)
	o.u16(ack, 24, sendSeq)
	o.u8(ack, 26, 0)
	o.send(ack)
	mustWait(t, s, 10*time.Second)

	// 4. An Open-MX large message at offset 100 of its region: gomx pulls
	// it with Open-MX's frame geometry and notifies.
	const roff = 100
	region := pattern(roff+30000, 2)
	large := region[roff:]
	buf = make([]byte, len(large))
	r, _ = ge.IRecv([][]byte{buf}, 0x99, ^uint64(0), nil)
	f := o.frame(wire.RndvLen, gIdx)
	o.msgHeader(f, wire.TypeRndv, 2, sendSeq, omxNext+1, 0x99, ge.Addr().Session)
	o.u16(f, 4, 8)
	o.u32(f, 24, uint32(len(large)))
	o.u8(f, 28, 3)
	o.u8(f, 29, 7)
	o.u16(f, 30, roff)
	o.send(f)
	sendSeq++
	for {
		pl := o.recvAny(t, wire.TypePull, wire.TypeNotify)
		if wire.Type(pl[wire.HeadLen]) == wire.TypeNotify {
			if o.g32(pl, 8) != uint32(len(large)) || pl[wire.HeadLen+12] != 3 || pl[wire.HeadLen+13] != 7 || o.g16(pl, 18) != omxNext+1 {
				t.Fatalf("notify % x", pl)
			}
			break
		}
		if o.g32(pl, 4) != o.session || o.g32(pl, 12) != 3 || pl[wire.HeadLen+16] != 7 || o.g32(pl, 20) != roff ||
			o.g32(pl, 28) != 2^wire.PullMagicXor {
			t.Fatalf("gomx pull % x", pl)
		}
		o.answerPull(pl, region, gIdx)
	}
	mustWait(t, r, 10*time.Second)
	if !bytes.Equal(buf, large) {
		t.Fatal("Open-MX large message: payload differs")
	}

	// 5. A gomx large send, pulled by Open-MX: once whole, once from region
	// offset 100 with a first-frame offset, then the NOTIFY completes it.
	large = pattern(60000, 3) // above the 32 KiB rendezvous threshold
	if s, err = ge.ISend([][]byte{large}, to, 0xAA, nil); err != nil {
		t.Fatal(err)
	}
	rv := o.recv(wire.TypeRndv)
	if o.g32(rv, 24) != uint32(len(large)) || o.g16(rv, 30) != 0 {
		t.Fatalf("gomx rndv % x", rv)
	}
	rid, rseq := rv[wire.HeadLen+28], rv[wire.HeadLen+29]
	for _, off := range []int{0, 100} {
		got := o.pull(t, gIdx, ge.Addr().Session, rid, rseq, off, len(large)-off)
		if !bytes.Equal(got, large[off:]) {
			t.Fatalf("pull from region offset %d: payload differs", off)
		}
	}
	nt := o.frame(wire.NotifyLen, gIdx)
	o.u8(nt, 0, uint8(wire.TypeNotify))
	o.u8(nt, 1, 2)
	o.u8(nt, 2, o.ep)
	o.u8(nt, 3, 0)
	o.u32(nt, 4, ge.Addr().Session)
	o.u32(nt, 8, uint32(len(large)))
	o.u8(nt, 12, rid)
	o.u8(nt, 13, rseq)
	// Byte 14 is the first of Open-MX's pad1, which it never clears:
	// here it holds what a gomx peer with ExtPullStatus writes for a
	// failed pull. From Open-MX it is a pad, and the send completes.
	o.u8(nt, 14, wire.NotifyPullFailed)
	o.u16(nt, 18, sendSeq)
	o.u16(nt, 20, omxNext+2)
	o.send(nt)
	if st := mustWait(t, s, 10*time.Second); st.XferLength != uint32(len(large)) {
		t.Fatalf("large send: %+v", st)
	}
	if n := ge.Counters()[SendsPullFailed]; n != 0 {
		t.Fatalf("an Open-MX NOTIFY's pad read as a failed pull: SendsPullFailed %d", n)
	}

	// 6. NACK_LIBs for one send (sequence number, no session) fail that
	// send only; the next one goes through.
	s, _ = ge.ISend([][]byte{[]byte("nacked")}, to, 1, nil)
	tiny := o.recv(wire.TypeTiny)
	// Open-MX's driver nacks every copy; gomx believes the nack of the
	// copy it resends at once.
	o.nack(gIdx, 5, wire.NackBadSession, o.g16(tiny, 8))
	tiny = o.recv(wire.TypeTiny)
	o.nack(gIdx, 5, wire.NackBadSession, o.g16(tiny, 8))
	if _, err := s.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrBadSession) {
		t.Fatalf("nacked send: %v", err)
	}
	s, _ = ge.ISend([][]byte{[]byte("next")}, to, 2, nil)
	tiny = o.recv(wire.TypeTiny)
	for k := 0; k < 10 && bytes.HasPrefix(tiny[wire.HeadLen+wire.MsgLen:], []byte("nacked")); k++ {
		// A tail-loss probe of the nacked send, already on the wire
		// when the nack failed it.
		tiny = o.recv(wire.TypeTiny)
	}
	if !bytes.Equal(tiny[wire.HeadLen+wire.MsgLen:wire.HeadLen+wire.MsgLen+4], []byte("next")) {
		t.Fatalf("send after a nack: % x", tiny)
	}
	s.Forget()

	// 7. Open-MX nacks a connect (sequence number 0, no session): the
	// connect fails within a round trip, not after the resend limit.
	cr, err := ge.IConnect(port.Addr(), 9, testKey, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := o.recv(wire.TypeConnect)
	if o.g16(req, 8) != 0 || req[wire.HeadLen+1] != 9 {
		t.Fatalf("connect request % x", req)
	}
	o.nack(gIdx, 9, wire.NackBadEndpoint, 0)
	o.recv(wire.TypeConnect)
	o.nack(gIdx, 9, wire.NackBadEndpoint, 0)
	if _, err := cr.Wait(testCtx(t, 10*time.Second)); !errors.Is(err, ErrBadEndpoint) {
		t.Fatalf("nacked connect: %v", err)
	}
	if c := ge.Counters(); c.Get(Unreachable) != 0 || c.Get(DropBadChecksum) != 0 {
		t.Fatalf("counters: unreachable %d", c.Get(Unreachable))
	}
	o.checkTrucs()
	if c := ge.Counters(); c.Get(SacksSent) != 0 || c.Get(SacksReceived) != 0 {
		t.Fatalf("selective acks with an Open-MX peer: %d sent, %d received", c.Get(SacksSent), c.Get(SacksReceived))
	}
}

// checkTrucs fails unless every TRUC the gomx board sent is Open-MX's: 28
// bytes after the peer index (no SACK, no trailer), data length 16.
func (o *omxPeer) checkTrucs() {
	o.t.Helper()
	for _, tr := range o.trucs {
		if len(tr) != wire.HeadLen+wire.TrucLen || tr[wire.HeadLen+4] != 16 {
			o.t.Fatalf("TRUC to an Open-MX peer of %d bytes, data length %d: % x", len(tr), tr[wire.HeadLen+4], tr)
		}
	}
}

func (o *omxPeer) recvAny(t *testing.T, a, b wire.Type) []byte {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, f := range o.backlog {
			if tp := wire.Type(f[wire.HeadLen]); tp == a || tp == b {
				o.backlog = append(o.backlog[:i], o.backlog[i+1:]...)
				return f
			}
		}
		frames := make([]transport.Frame, 64)
		n, _ := o.tr.Recv(frames, 50*time.Millisecond)
		for _, f := range frames[:n] {
			o.backlog = append(o.backlog, bytes.Clone(f.Data))
		}
	}
	t.Fatalf("no %v or %v", a, b)
	return nil
}

func (o *omxPeer) nack(head uint16, src uint8, kind uint8, seq uint16) {
	f := o.frame(wire.NackLibLen, head)
	o.u8(f, 0, uint8(wire.TypeNackLib))
	o.u8(f, 1, src)
	o.u8(f, 2, 0)
	o.u8(f, 3, kind)
	o.u8(f, 9, 2)
	o.u16(f, 10, head)
	o.u16(f, 12, seq)
	o.send(f)
}

// answerPull answers a PULL the way Open-MX's driver does (omx_pull.c):
// frame k of the block starts at FirstFrame*L - RegionOffset%L +
// FirstFrameOffset in the message, the first frame is L - FirstFrameOffset
// long, the others L, and the bytes come from the region at RegionOffset
// plus the message offset.
func (o *omxPeer) answerPull(pl, region []byte, head uint16) {
	roff := int(o.g32(pl, 20))
	handle, magic := o.g32(pl, 24), o.g32(pl, 28)
	ffo, blen, fi := int(o.g32(pl, 32)), int(o.g32(pl, 36)), int(o.g32(pl, 40))
	off := fi*omxReply - roff%omxReply + ffo
	for i := 0; blen > 0; i++ {
		n := omxReply
		if i == 0 {
			n -= ffo
		}
		n = min(n, blen)
		f := o.frame(wire.PullReplyLen+n, head)
		o.u8(f, 0, uint8(wire.TypePullReply))
		o.u8(f, 1, uint8(fi+i))
		o.u16(f, 2, uint16(n))
		o.u32(f, 4, uint32(off))
		o.u32(f, 8, handle)
		o.u32(f, 12, magic)
		copy(f[wire.HeadLen+wire.PullReplyLen:], region[roff+off:roff+off+n])
		o.send(f)
		off += n
		blen -= n
	}
}

// pull pulls total bytes from offset roff of a gomx region as Open-MX's
// driver does: blocks of 32 frames, the first one shortened so the later
// ones are aligned on the region; it checks every reply's header.
func (o *omxPeer) pull(t *testing.T, head uint16, session uint32, rid, rseq uint8, roff, total int) []byte {
	t.Helper()
	got := make([]byte, total)
	skew := roff % omxReply
	nframes := (total + skew + omxReply - 1) / omxReply
	const handle = 0x00C0FFEE
	magic := uint32(o.ep) ^ wire.PullMagicXor
	for first := 0; first < nframes; first += 32 {
		start := 0
		if first > 0 {
			start = first*omxReply - skew
		}
		end := min((first+32)*omxReply-skew, total)
		ffo := 0
		if first == 0 {
			ffo = skew
		}
		p := o.frame(wire.PullLen, head)
		o.u8(p, 0, uint8(wire.TypePull))
		o.u8(p, 1, 2)
		o.u8(p, 2, o.ep)
		o.u8(p, 3, 0)
		o.u32(p, 4, session)
		o.u32(p, 8, uint32(total))
		o.u32(p, 12, uint32(rid))
		o.u8(p, 16, rseq)
		o.u32(p, 20, uint32(roff))
		o.u32(p, 24, handle)
		o.u32(p, 28, magic)
		o.u32(p, 32, uint32(ffo))
		o.u32(p, 36, uint32(end-start))
		o.u32(p, 40, uint32(first))
		o.send(p)
		for k := first; k < min(first+32, nframes); k++ {
			f := o.recv(wire.TypePullReply)
			n, off := int(o.g16(f, 2)), int(o.g32(f, 4))
			want := 0
			if k > 0 {
				want = k*omxReply - skew
			}
			wantLen := min((k+1)*omxReply-skew, total) - want
			if len(f) != wire.HeadLen+wire.PullReplyLen+n || f[wire.HeadLen+1] != uint8(k) || off != want ||
				n != wantLen || o.g32(f, 8) != handle || o.g32(f, 12) != magic {
				t.Fatalf("pull reply %d: % x (want offset %d length %d)", k, f[:wire.HeadLen+wire.PullReplyLen], want, wantLen)
			}
			copy(got[off:], f[wire.HeadLen+wire.PullReplyLen:])
		}
	}
	return got
}
