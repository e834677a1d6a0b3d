package emulated

import (
	"encoding/binary"

	"github.com/gomx-dev/gomx/internal/csum"
	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// The 82574L model's receive path: a frame from the wire is filtered by
// address, held while the RX ring has no free descriptor, steered to a
// queue by RSS, written to guest memory with its descriptor (legacy or
// extended) and checksum status, and counted. Packet split descriptors are
// in e1000e_split.go; registers in e1000e_regs.go; transmit in
// e1000e_tx.go.

func (n *e1000eNIC) rxOnLocked() bool { return n.rxOn }
func (n *e1000eNIC) crcErrorLocked()  { n.regs[hw.CRCERRS/4]++ }
func (n *e1000eNIC) missedLocked()    { n.regs[hw.MPC/4]++ }

// acceptLocked is the receive filter: RAR, promiscuous, broadcast and multicast
// table.
func (n *e1000eNIC) acceptLocked(fr []byte) bool {
	if len(fr) < 14 {
		n.nDrop.Add(1)
		return false
	}
	rctl := n.reg(hw.RCTL)
	var dst [6]byte
	copy(dst[:], fr)
	switch {
	case isBroadcast(fr):
		return rctl&(hw.RctlBAM|hw.RctlMPE) != 0
	case dst[0]&1 != 0:
		if rctl&hw.RctlMPE != 0 {
			return true
		}
		if rctl&hw.RctlMOMask != 0 {
			n.violation("RCTL.MO=%d: this model hashes multicast with MO=0 only", rctl&hw.RctlMOMask>>12)
		}
		r, b := hw.MTAHash(dst)
		return n.reg(hw.MTA+4*r)&(1<<b) != 0
	case rctl&hw.RctlUPE != 0:
		return true
	}
	return matchRAR(n.regs[:], hw.RAL(0), hw.RAREntries, dst)
}

// deliverLocked writes one frame into the RX ring its queue selects.
func (n *e1000eNIC) deliverLocked(fr []byte) rxResult {
	if !n.f.busMaster() {
		n.nDrop.Add(1)
		return rxDropped
	}
	rctl := n.reg(hw.RCTL)
	max := hw.MaxFrame // without RCTL.LPE: 1522 bytes with the FCS, tagged or not
	if rctl&hw.RctlLPE != 0 {
		max = 16128
	}
	if len(fr) > max {
		n.regs[hw.ROC/4]++
		n.nDrop.Add(1)
		return rxDropped
	}
	q, hash, rssType := n.rssLocked(fr)
	l := n.reg(hw.Q(hw.RDLEN, q)) / hw.DescSize
	if l == 0 {
		n.violation("frame for RX queue %d, whose ring is not programmed (RDLEN%d = 0)", q, q)
		n.nDrop.Add(1)
		return rxDropped
	}
	total := len(fr)
	if rctl&hw.RctlSECRC == 0 {
		total += 4 // QEMU appends a zero FCS when it is not stripped
	}
	need := uint32((total + n.rxBuf - 1) / n.rxBuf)
	head, tail := n.reg(hw.Q(hw.RDH, q)), n.reg(hw.Q(hw.RDT, q))
	if head >= l || tail >= l {
		n.nDrop.Add(1)
		return rxDropped
	}
	if (tail+l-head)%l < need {
		n.regs[hw.RNBC/4]++
		n.causeLocked(hw.IntRXO)
		return rxNoRoom
	}
	if n.rxPS {
		return n.deliverPSLocked(fr, q, hash, rssType, l, total)
	}
	status := n.rxChecksumLocked(fr)
	dom := n.f.dom
	base := uint64(n.reg(hw.Q(hw.RDBAH, q)))<<32 | uint64(n.reg(hw.Q(hw.RDBAL, q)))
	dom.rlock()
	defer dom.runlock()
	off := 0
	for i := uint32(0); i < need; i++ {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, true, &n.hint)
		if !ok {
			n.violation("RX descriptor %d of queue %d at an unmapped IOVA", head, q)
			n.nDrop.Add(1)
			return rxDropped
		}
		n.acc.rxFetch++
		addr := binary.LittleEndian.Uint64(raw)
		k := min(n.rxBuf, total-off)
		buf, ok := dom.translate(addr, k, true, &n.hint)
		if !ok {
			n.violation("RX buffer at IOVA %#x (%d bytes) is not mapped", addr, k)
			n.nDrop.Add(1)
			return rxDropped
		}
		m := copy(buf, fr[min(off, len(fr)):])
		clear(buf[m:])
		off += k
		wb := hw.RxWriteBack{Status: hw.RxStatDD, Length: uint16(k)}
		if i == need-1 {
			wb.Status |= hw.RxStatEOP | status
		}
		if n.has(hw.RXCSUM, hw.RxcsumPCSD) {
			wb.Hash = hash
			wb.MRQ = rssType | uint32(q)<<8
		}
		var tmp [hw.DescSize]byte
		if n.rxExt {
			wb.Encode(tmp[:])
		} else {
			// Legacy write-back: the buffer address stays, then length,
			// checksum, status, errors, VLAN.
			copy(tmp[0:8], raw[0:8])
			binary.LittleEndian.PutUint16(tmp[8:], uint16(k))
			tmp[12] = byte(wb.Status & 0xFF)
			tmp[13] = byte(wb.Status >> 24)
		}
		store64(raw[0:8], binary.LittleEndian.Uint64(tmp[0:]))
		dmasync.Publish()
		store64(raw[8:16], binary.LittleEndian.Uint64(tmp[8:]))
		n.acc.rxWB++
		head = (head + 1) % l
	}
	n.set(hw.Q(hw.RDH, q), head)
	n.countRxLocked(fr, q)
	return rxDone
}

// countRxLocked counts a frame written into RX queue q and raises its
// interrupt causes.
func (n *e1000eNIC) countRxLocked(fr []byte, q int) {
	n.nRx.Add(1)
	n.regs[hw.GPRC/4]++
	n.regs[hw.TPR/4]++
	n.count64(hw.GORCL, uint64(len(fr)+4))
	n.count64(hw.TORL, uint64(len(fr)+4))
	if fr[0]&1 != 0 {
		if isBroadcast(fr) {
			n.regs[hw.BPRC/4]++
		} else {
			n.regs[hw.MPRC/4]++
		}
	}
	n.causeLocked(hw.IntRXT0 | hw.IntRXQ0<<q)
}

// rssLocked picks the RX queue: RSS over IPv4 (and TCP ports) when MRQC
// enables it with RXCSUM.PCSD and extended descriptors, else queue 0.
func (n *e1000eNIC) rssLocked(fr []byte) (q int, hash, typ uint32) {
	mrqc := n.reg(hw.MRQC)
	if mrqc&hw.MRQCEnableMask != hw.MRQCEnableRSS2 || !n.has(hw.RXCSUM, hw.RxcsumPCSD) || !n.rxExt {
		return 0, 0, 0
	}
	ip, l4, proto, ok := parseIPv4(fr)
	if !ok {
		return 0, 0, 0
	}
	var in []byte
	switch {
	case proto == 6 && l4 != nil && mrqc&hw.MRQCTCPIPv4 != 0:
		in = append(append([]byte(nil), ip[12:20]...), l4[0:4]...)
		typ = hw.RSSTypeTCPIPv4
	case mrqc&hw.MRQCIPv4 != 0:
		in = ip[12:20]
		typ = hw.RSSTypeIPv4
	default:
		return 0, 0, 0
	}
	var key [hw.RSSKeyLen]byte
	for i := range key {
		key[i] = byte(n.reg(hw.RSSRK+i/4*4) >> (8 * (i % 4)))
	}
	hash = toeplitz(key[:], in)
	e := byte(n.reg(hw.RETA+int(hash&127)/4*4) >> (8 * (hash & 3)))
	if e&hw.RETAQueue1 != 0 {
		q = 1
	}
	return q, hash, typ
}

// toeplitz is the Microsoft RSS hash of in under key.
func toeplitz(key, in []byte) uint32 {
	var h uint32
	for i, b := range in {
		for bit := 0; bit < 8; bit++ {
			if b&(0x80>>bit) == 0 {
				continue
			}
			// The 32 key bits starting at bit i*8+bit.
			s := i*8 + bit
			var w uint32
			for k := 0; k < 32; k++ {
				p := s + k
				if p/8 < len(key) && key[p/8]&(0x80>>(p%8)) != 0 {
					w |= 1 << (31 - k)
				}
			}
			h ^= w
		}
	}
	return h
}

// parseIPv4 finds the IPv4 header and, for an unfragmented TCP or UDP
// datagram, the L4 header, of an untagged Ethernet frame.
func parseIPv4(fr []byte) (ip, l4 []byte, proto byte, ok bool) {
	if len(fr) < 34 || fr[12] != 0x08 || fr[13] != 0x00 || fr[14]>>4 != 4 {
		return nil, nil, 0, false
	}
	ihl := int(fr[14]&0xF) * 4
	tot := int(binary.BigEndian.Uint16(fr[16:]))
	if ihl < 20 || tot < ihl || 14+tot > len(fr) {
		return nil, nil, 0, false
	}
	ip = fr[14 : 14+tot]
	proto = ip[9]
	frag := binary.BigEndian.Uint16(ip[6:]) & 0x3FFF
	if frag == 0 && (proto == 6 && tot-ihl >= 20 || proto == 17 && tot-ihl >= 8) {
		l4 = ip[ihl:]
	}
	return ip, l4, proto, true
}

// rxChecksumLocked checks what RXCSUM asks of an IPv4 frame and returns
// the status and error bits for the descriptor.
func (n *e1000eNIC) rxChecksumLocked(fr []byte) uint32 {
	rxcsum := n.reg(hw.RXCSUM)
	if rxcsum&(hw.RxcsumIPOFL|hw.RxcsumTUOFL) == 0 {
		return 0
	}
	ip, l4, proto, ok := parseIPv4(fr)
	if !ok {
		return 0
	}
	var st uint32
	if rxcsum&hw.RxcsumIPOFL != 0 {
		st |= hw.RxStatIPCS
		if csum.Fold(csum.Add(0, ip[:int(ip[0]&0xF)*4])) != 0xFFFF {
			st |= hw.RxErrIPE
		}
	}
	if rxcsum&hw.RxcsumTUOFL != 0 && l4 != nil {
		if proto == 17 && binary.BigEndian.Uint16(l4[6:]) == 0 {
			return st // UDP without a checksum
		}
		sum := csum.Add(csum.Pseudo(ip[12:20], proto, len(l4)), l4)
		if proto == 6 {
			st |= hw.RxStatTCPCS
		} else {
			st |= hw.RxStatUDPCS
		}
		if csum.Fold(sum) != 0xFFFF {
			st |= hw.RxErrTCPE
		}
	}
	return st
}
