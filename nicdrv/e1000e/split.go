package e1000e

import (
	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// Header split receive (Options.HeaderSplit) uses the 82574's packet split
// descriptors: RCTL.DTYP = 01 with RFCTL.EXTEN, 32-byte descriptors of four
// buffer addresses. The driver gives each descriptor two pool buffers:
// buffer 0 (the header buffer, PSRCTL.BSIZE0) and buffer 1 (BSIZE1), both
// 2 KiB, and leaves buffers 2 and 3 unused (BSIZE2 = BSIZE3 = 0, address 0).
//
// For an unfragmented IPv4 or IPv6 TCP or UDP frame the NIC writes the
// headers (Ethernet to the end of the TCP or UDP header) into buffer 0, sets
// HDRSP and the header length in the write-back, and writes the rest into
// buffer 1. Any other frame it writes from the start of buffer 0 on; since
// buffer 0 holds 2 KiB, a standard frame stays whole in it. RFCTL.IPFRSP_DIS
// keeps IP fragments whole too. RxBatch hands out buffer 0 with Data the
// bytes in it, and chains buffer 1 (Buffer.Next) when the NIC wrote into it;
// an unused buffer 1 stays in its slot for the next frame.
//
// The NIC counts RDH and RDT in 16-byte units whatever the descriptor size,
// so the tail written is twice the descriptor index (as Linux's
// e1000_alloc_rx_buffers_ps does).

// psBufSize is the size of both buffers the driver gives a packet split
// descriptor: one pool buffer.
const psBufSize = nicdrv.BufferSize

// psrctl is the PSRCTL value of header split: buffers 0 and 1 of 2 KiB.
var psrctl = hw.PSRCTLValue(psBufSize, psBufSize, 0, 0)

// psAccept decides what to do with a written-back packet split descriptor:
// deliver a frame of hdr bytes in buffer 0 and pay bytes in buffer 1, or
// drop it. It drops, as rxAccept does, a frame in error or spread over
// several descriptors (discardNext says the next descriptor continues
// one); and, since what the NIC writes back is outside input, a descriptor
// whose lengths the driver's buffers cannot hold, that uses buffers 2 or 3
// (the driver gave none), whose buffer 0 is shorter than an Ethernet
// header, or whose header length disagrees with buffer 0's when it says
// the frame was split. Nothing in it may make the driver read past a
// buffer.
func psAccept(wb hw.RxPSWriteBack, discarding bool, bufCap int) (hdr, pay int, deliver, discardNext bool) {
	eop := wb.Status&hw.RxStatEOP != 0
	if discarding || !eop || wb.Status&hw.RxErrFrame != 0 {
		return 0, 0, false, !eop
	}
	l := wb.Lengths()
	switch {
	case l[0] < 14 || l[0] > bufCap || l[1] > bufCap || l[2] != 0 || l[3] != 0:
		return 0, 0, false, false
	case wb.Split() && wb.HeaderLen() != l[0]:
		return 0, 0, false, false
	}
	return l[0], l[1], true, false
}

// takePS is take for a packet split descriptor: the frame of slot s's
// written-back descriptor d as its header buffer with the payload buffer
// chained when the NIC wrote into it, or nil when psAccept drops it (the
// buffers then stay in the slot, and refill hands them over again).
func (r *rxQueue) takePS(d []byte, s uint32) *nicdrv.Buffer {
	wb := hw.DecodeRxPSWriteBack(d)
	hdr, pay, deliver, discardNext := psAccept(wb, r.discard, psBufSize)
	r.discard = discardNext
	if !deliver || r.slot[s] == nil || (pay > 0 && r.pay[s] == nil) {
		if !discardNext {
			r.cnt.Dropped.Add(1)
		}
		return nil
	}
	b := r.slot[s]
	r.slot[s] = nil
	b.Data = b.Data[:0:b.Cap()][:hdr]
	b.Next = nil
	if pay > 0 {
		p := r.pay[s]
		r.pay[s] = nil
		p.Data = p.Data[:0:p.Cap()][:pay]
		p.Queue, p.Flags, p.Hash, p.Next = r.q, 0, 0, nil
		b.Next = p
	}
	r.stamp(b, wb.MRQ, wb.Hash, wb.Status)
	return b
}
