package emulated

import (
	"encoding/binary"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// Packet split receive, as QEMU 7.2's e1000e model does it
// (hw/net/e1000e_core.c: e1000e_parse_rxbufsize, e1000e_do_ps,
// e1000e_write_packet_to_guest, e1000e_write_ps_rx_descr):
//
//   - RCTL.DTYP = 01 with RFCTL.EXTEN selects 32-byte descriptors of four
//     buffers, sized by PSRCTL (latched on the RCTL write with EN). RDH and
//     RDT still count 16-byte units: a descriptor advances the head by 2.
//   - A frame is split when it is IPv4 or IPv6 and, if it is a fragment,
//     RFCTL.IPFRSP_DIS is clear: the header is everything before the
//     TCP/UDP payload of an unfragmented TCP or UDP datagram, else
//     everything before the IP payload. A header longer than buffer 0 or
//     than the frame is not split.
//   - The first descriptor of a split frame gets the header in buffer 0
//     and the rest of what it holds in buffers 1 to 3; later descriptors of
//     the frame leave buffer 0 empty. A frame not split fills buffer 0, then
//     1, 2, 3, from its first byte. Buffers of size 0 are skipped.
//   - The write-back zeroes the 32 bytes, then gives the length of each
//     buffer, the extended status and errors, and, for a split frame, the
//     header length with HDRSP in the header status word.
//   - A descriptor whose buffer 0 address is 0 is skipped: written back with
//     no data, its share of the frame lost.
//
// Where the datasheet forbids a value (PSRCTL.BSIZE0 or BSIZE1 of 0,
// packet split without extended descriptors, a reserved DTYP, an odd RDT)
// the model records a violation, as for any misprogramming. Where QEMU
// 7.2 would abort (a frame that overflows a descriptor's four buffers) it
// records a violation and drops the frame.

// latchPSLocked latches the descriptor type and packet split buffer sizes
// on an RCTL write with EN.
func (n *e1000eNIC) latchPSLocked(rctl uint32) {
	n.rxPS = false
	switch rctl & hw.RctlDTYPMask {
	case 0:
		return
	case hw.RctlDTYPPS:
	default:
		n.violation("RCTL.DTYP=%d is reserved: 00 legacy or extended, 01 packet split", rctl&hw.RctlDTYPMask>>10)
		return
	}
	if !n.has(hw.RFCTL, hw.RfctlEXTEN) {
		n.violation("RCTL.DTYP=01 (packet split) with RFCTL.EXTEN clear: QEMU 7.2 then uses legacy descriptors; set RFCTL.EXTEN before RCTL")
		return
	}
	sz := hw.PSBufferSizes(n.reg(hw.PSRCTL))
	if sz[0] == 0 {
		n.violation("PSRCTL.BSIZE0 = 0 with packet split: buffer 0 takes 128 to 16256 bytes (1 to 127 units of 128); program PSRCTL before RCTL")
		return
	}
	if sz[1] == 0 {
		n.violation("PSRCTL.BSIZE1 = 0 with packet split: buffer 1 takes 1 to 63 KiB; program PSRCTL before RCTL")
		return
	}
	for q := 0; q < hw.Queues; q++ {
		if n.reg(hw.Q(hw.RDLEN, q)) != 0 && n.reg(hw.Q(hw.RDT, q))%hw.PSDescUnits != 0 {
			n.violation("RDT%d = %d when RCTL enables packet split: the tail counts 16-byte units, so it is twice the descriptor index (even)", q, n.reg(hw.Q(hw.RDT, q)))
		}
	}
	n.rxPS, n.rxPSBuf = true, sz
}

// psHeaderLen is e1000e_do_ps: where the NIC splits fr, or ok false when
// it does not. splitFrags is !RFCTL.IPFRSP_DIS; buf0 is buffer 0's size.
func psHeaderLen(fr []byte, splitFrags bool, buf0 int) (hdr int, ok bool) {
	l3, etype := 14, uint16(0)
	if len(fr) >= 14 {
		etype = binary.BigEndian.Uint16(fr[12:])
	}
	// VLAN tags (802.1Q, 802.1ad) stay in the frame without CTRL.VME.
	for i := 0; i < 2 && (etype == 0x8100 || etype == 0x88A8) && len(fr) >= l3+4; i++ {
		etype = binary.BigEndian.Uint16(fr[l3+2:])
		l3 += 4
	}
	var l4 int
	var proto byte
	var frag bool
	switch etype {
	case 0x0800:
		if len(fr) < l3+20 || fr[l3]>>4 != 4 {
			return 0, false
		}
		ihl := int(fr[l3]&0xF) * 4
		if ihl < 20 || len(fr) < l3+ihl {
			return 0, false
		}
		frag = binary.BigEndian.Uint16(fr[l3+6:])&0x3FFF != 0 // MF or an offset
		proto, l4 = fr[l3+9], l3+ihl
	case 0x86DD:
		if len(fr) < l3+40 || fr[l3]>>4 != 6 {
			return 0, false
		}
		proto, l4 = fr[l3+6], l3+40
		for walked := 0; walked < 8; walked++ {
			var ext int
			switch proto {
			case 0, 43, 60, 135: // hop-by-hop, routing, destination, mobility
				if len(fr) < l4+2 {
					return 0, false
				}
				ext = (int(fr[l4+1]) + 1) * 8
			case 44: // fragment
				ext, frag = 8, true
			case 51: // authentication
				if len(fr) < l4+2 {
					return 0, false
				}
				ext = (int(fr[l4+1]) + 2) * 4
			}
			if ext == 0 {
				break
			}
			if len(fr) < l4+ext {
				return 0, false
			}
			proto, l4 = fr[l4], l4+ext
		}
	default:
		return 0, false
	}
	if frag && !splitFrags {
		return 0, false
	}
	hdr = l4
	if !frag {
		switch {
		case proto == 6 && len(fr) >= l4+20:
			hdr = l4 + int(fr[l4+12]>>4)*4
		case proto == 17 && len(fr) >= l4+8:
			hdr = l4 + 8
		}
	}
	if hdr > buf0 || hdr > len(fr) {
		return 0, false
	}
	return hdr, true
}

// deliverPSLocked writes one frame into RX queue q's ring of packet split
// descriptors; l is the ring's length in 16-byte units, total the bytes to
// write (the frame and, without SECRC, a zero FCS).
func (n *e1000eNIC) deliverPSLocked(fr []byte, q int, hash, rssType uint32, l uint32, total int) rxResult {
	sizes := n.rxPSBuf
	descCap := sizes[0] + sizes[1] + sizes[2] + sizes[3]
	hdr, split := psHeaderLen(fr, !n.has(hw.RFCTL, hw.RfctlIPFRSPDis), sizes[0])
	head, tail := n.reg(hw.Q(hw.RDH, q)), n.reg(hw.Q(hw.RDT, q))
	if head >= l || tail >= l {
		n.nDrop.Add(1)
		return rxDropped
	}
	if head%hw.PSDescUnits != 0 || tail%hw.PSDescUnits != 0 {
		n.violation("RDH%d = %d, RDT%d = %d with packet split descriptors: both count 16-byte units and must be even", q, head, q, tail)
		n.nDrop.Add(1)
		return rxDropped
	}
	need := (total + descCap - 1) / descCap
	if int((tail+l-head)%l/hw.PSDescUnits) < need {
		n.regs[hw.RNBC/4]++
		n.causeLocked(hw.IntRXO)
		return rxNoRoom
	}
	status := n.rxChecksumLocked(fr)
	dom := n.f.dom
	base := uint64(n.reg(hw.Q(hw.RDBAH, q)))<<32 | uint64(n.reg(hw.Q(hw.RDBAL, q)))
	dom.rlock()
	defer dom.runlock()
	var fcs [4]byte
	off := 0 // bytes of the frame (and FCS) accounted for
	for i := 0; i < need; i++ {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.PSDescSize, true, &n.hint)
		if !ok {
			n.violation("RX descriptor at unit %d of queue %d at an unmapped IOVA", head, q)
			n.nDrop.Add(1)
			return rxDropped
		}
		var ba [hw.PSBuffers]uint64
		for j := range ba {
			ba[j] = binary.LittleEndian.Uint64(raw[8*j:])
		}
		descSize := min(total-off, descCap)
		var written [hw.PSBuffers]int
		if ba[0] != 0 && off < len(fr) {
			cur := 0
			// put writes b into the descriptor's buffers from buffer cur
			// on, as e1000e_write_to_rx_buffers does.
			put := func(b []byte) bool {
				for len(b) > 0 {
					for cur < hw.PSBuffers && written[cur] == sizes[cur] {
						cur++
					}
					if cur == hw.PSBuffers {
						n.violation("a %d-byte frame overflows the buffers of a packet split descriptor (%v; header %d): QEMU 7.2 aborts here", len(fr), sizes, hdr)
						return false
					}
					k := min(len(b), sizes[cur]-written[cur])
					dst, ok := dom.translate(ba[cur]+uint64(written[cur]), k, true, &n.hint)
					if !ok {
						n.violation("RX buffer %d at IOVA %#x (%d bytes) is not mapped", cur, ba[cur]+uint64(written[cur]), k)
						return false
					}
					copy(dst, b[:k])
					written[cur] += k
					b = b[k:]
				}
				return true
			}
			copySize := min(len(fr)-off, descCap)
			chunk := fr[off : off+copySize]
			if split {
				if i == 0 {
					if !put(chunk[:hdr]) {
						n.nDrop.Add(1)
						return rxDropped
					}
					chunk = chunk[hdr:]
				}
				cur = 1 // buffer 0 holds the header, or stays empty
			}
			if !put(chunk) {
				n.nDrop.Add(1)
				return rxDropped
			}
			if off+descSize >= total && !put(fcs[:total-len(fr)]) {
				n.nDrop.Add(1)
				return rxDropped
			}
		}
		off += descSize
		wb := hw.RxPSWriteBack{Status: hw.RxStatDD, Length0: uint16(written[0]),
			Length: [3]uint16{uint16(written[1]), uint16(written[2]), uint16(written[3])}}
		if split {
			wb.HeaderStatus = uint16(hdr) | hw.PSHdrSplit
		}
		if i == need-1 {
			wb.Status |= hw.RxStatEOP | status
			if n.has(hw.RXCSUM, hw.RxcsumPCSD) {
				wb.Hash = hash
				wb.MRQ = rssType | uint32(q)<<8
			}
		}
		var tmp [hw.PSDescSize]byte
		wb.Encode(tmp[:])
		// The word with DD goes last, so a driver polling it sees the
		// rest written.
		store64(raw[0:8], binary.LittleEndian.Uint64(tmp[0:]))
		store64(raw[16:24], binary.LittleEndian.Uint64(tmp[16:]))
		store64(raw[24:32], binary.LittleEndian.Uint64(tmp[24:]))
		dmasync.Publish()
		store64(raw[8:16], binary.LittleEndian.Uint64(tmp[8:]))
		head = (head + hw.PSDescUnits) % l
	}
	n.set(hw.Q(hw.RDH, q), head)
	n.countRxLocked(fr, q)
	return rxDone
}
