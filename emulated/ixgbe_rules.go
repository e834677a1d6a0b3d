package emulated

import (
	"encoding/binary"
	"math/bits"

	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
)

// The 82599 model's receive steering, the model's side of the driver's
// rules.go: the Flow Director perfect filter table and the FDIRCMD writes
// that program it, and the classification that picks a received frame's
// queue (EtherType filters, 5-tuple filters, Flow Director, RSS). Receive
// itself is in ixgbe_rx.go; the other registers in ixgbe_regs.go.

// fdirFilter is one Flow Director perfect filter as the table holds it.
type fdirFilter struct {
	in    hw.FdirInput // the masked fields it matches
	swIdx uint16
	queue int
	qen   bool
	drop  bool
}

// fdirCapLocked is how many perfect filters the table holds (0 when Flow
// Director is off).
func (n *ixgbeNIC) fdirCapLocked() int {
	pb := n.reg(hw.FDIRCTRL) & hw.FdirctrlPBAllocMask
	if pb == 0 {
		return 0
	}
	return hw.FdirPerfect64K << (pb - 1)
}

func (n *ixgbeNIC) writeFdirctrl(v uint32) {
	if n.has(hw.RXCTRL, hw.RxctrlRXEN) {
		n.violation("FDIRCTRL written with RXCTRL.RXEN set: Flow Director is initialised before receive is enabled")
	}
	pb := v & hw.FdirctrlPBAllocMask
	if pb != 0 {
		if v&hw.FdirctrlPerfectMatch == 0 {
			n.violation("FDIRCTRL without PERFECT_MATCH: this model has perfect filters only (signature filters are not modelled)")
		}
		mem := uint32(64<<10) << (pb - 1)
		if n.reg(hw.RXPBSIZE(0)) > 512<<10-mem {
			n.violation("FDIRCTRL.PBALLOC %d takes %d KiB of the packet buffer, but RXPBSIZE0 is %d KiB: shrink RXPBSIZE0 first", pb, mem>>10, n.reg(hw.RXPBSIZE(0))>>10)
		}
		v |= hw.FdirctrlInitDone
	}
	n.set(hw.FDIRCTRL, v)
	n.fdir, n.fdirN = nil, 0
}

// fdirMaskedLocked applies the Flow Director masks to a flow's fields.
func (n *ixgbeNIC) fdirMaskedLocked(in hw.FdirInput) hw.FdirInput {
	m := n.reg(hw.FDIRM)
	if m&hw.FdirmPool != 0 {
		in.Pool = 0
	}
	if m&hw.FdirmVLANID != 0 && m&hw.FdirmVLANP != 0 {
		in.VLAN = 0
	}
	if m&hw.FdirmL4P != 0 {
		in.FlowType &^= 3
	}
	if m&hw.FdirmFlex != 0 {
		in.Flex = [2]byte{}
	}
	if n.reg(hw.FDIRSIP4M) != 0 {
		in.SrcIP = [16]byte{}
	}
	if n.reg(hw.FDIRDIP4M) != 0 {
		in.DstIP = [16]byte{}
	}
	pm := n.reg(hw.FDIRUDPM)
	if in.FlowType&3 == hw.FlowTCP {
		pm = n.reg(hw.FDIRTCPM)
	}
	if pm&0xFFFF != 0 {
		in.SrcPort = 0
	}
	if pm>>16 != 0 {
		in.DstPort = 0
	}
	return in
}

// fdirCommandLocked carries out an FDIRCMD write: add, remove or query a
// perfect filter described by FDIRIPSA/IPDA/PORT/VLAN/HASH.
func (n *ixgbeNIC) fdirCommandLocked(v uint32) {
	n.set(hw.FDIRCMD, v&^hw.FdircmdCmdMask)
	cmd := v & hw.FdircmdCmdMask
	if cmd == 0 {
		return
	}
	if n.reg(hw.FDIRCTRL)&hw.FdirctrlInitDone == 0 {
		n.violation("FDIRCMD with Flow Director not initialised: write FDIRCTRL with PBALLOC and poll INIT_DONE first")
		return
	}
	fh := n.reg(hw.FDIRHASH)
	bucketBits := hw.FdirBucketBits(n.reg(hw.FDIRCTRL) & hw.FdirctrlPBAllocMask)
	bucket := fh & hw.FdirhashBucketMask & (1<<bucketBits - 1)
	sw := uint16(fh >> hw.FdirhashSWShift)
	var in hw.FdirInput
	in.FlowType = uint8(v & hw.FdircmdL4TypeMask >> hw.FdircmdL4TypeShift)
	if v&hw.FdircmdIPv6 != 0 {
		n.violation("FDIRCMD with IPv6 flow type: this model has IPv4 perfect filters only")
		return
	}
	binary.LittleEndian.PutUint32(in.SrcIP[:], n.reg(hw.FDIRIPSA))
	binary.LittleEndian.PutUint32(in.DstIP[:], n.reg(hw.FDIRIPDA))
	port := n.reg(hw.FDIRPORT)
	in.DstPort, in.SrcPort = uint16(port>>hw.FdirportDstShift), uint16(port)
	vl := n.reg(hw.FDIRVLAN)
	in.VLAN = uint16(vl)
	in.Flex = [2]byte{byte(vl >> 16), byte(vl >> 24)}
	in = n.fdirMaskedLocked(in)
	list := n.fdir[bucket]
	at := -1
	for i, f := range list {
		if f.swIdx == sw {
			at = i
		}
	}
	switch cmd {
	case hw.FdircmdAdd:
		want := hw.FdirBucketHash(in, n.reg(hw.FDIRHKEY)) & (1<<bucketBits - 1)
		if want != bucket {
			n.violation("FDIRHASH bucket %#x for a filter whose fields hash to %#x under FDIRHKEY %#x: compute the bucket hash over the masked fields; the filter lands in a bucket its flow never looks in", bucket, want, n.reg(hw.FDIRHKEY))
		}
		f := fdirFilter{in: in, swIdx: sw, queue: int(v & hw.FdircmdQueueMask >> hw.FdircmdQueueShift),
			qen: v&hw.FdircmdQueueEn != 0, drop: v&hw.FdircmdDrop != 0}
		if at >= 0 {
			list[at] = f
			return
		}
		if n.fdirN >= n.fdirCapLocked() {
			n.violation("FDIRCMD add to a full Flow Director table (%d filters): check FDIRFREE first", n.fdirN)
			n.set(hw.FDIRCMD, n.reg(hw.FDIRCMD)|hw.FdircmdCollision)
			return
		}
		if n.fdir == nil {
			n.fdir = map[uint32][]fdirFilter{}
		}
		n.fdir[bucket] = append(list, f)
		n.fdirN++
	case hw.FdircmdRemove:
		if at < 0 {
			return // removing an absent filter does nothing
		}
		n.fdir[bucket] = append(list[:at], list[at+1:]...)
		n.fdirN--
	case hw.FdircmdQuery:
		if at >= 0 {
			n.set(hw.FDIRCMD, n.reg(hw.FDIRCMD)|hw.FdircmdFilterValid)
		}
	}
}

// rxClass is what the filters decided about a frame.
type rxClass struct {
	queue   int
	drop    bool
	pktInfo uint16
	hash    uint32
	status  uint32
}

// ftqfProto is the IP protocol number of FTQF's protocol field (0 for
// "other", which matches no frame's protocol here).
func ftqfProto(f uint32) byte {
	switch f {
	case hw.FtqfProtoTCP:
		return 6
	case hw.FtqfProtoUDP:
		return 17
	case hw.FtqfProtoSCTP:
		return 132
	}
	return 0
}

// classifyLocked steers a frame in the 82599's order: EtherType filters,
// 5-tuple filters, Flow Director perfect filters, RSS, queue 0.
func (n *ixgbeNIC) classifyLocked(fr []byte) rxClass {
	var c rxClass
	etype := binary.BigEndian.Uint16(fr[12:])
	ip, l4, proto, isIPv4 := parseIPv4(fr)
	switch {
	case isIPv4:
		c.pktInfo |= hw.PktTypeIPv4
		switch {
		case l4 != nil && proto == 6:
			c.pktInfo |= hw.PktTypeTCP
		case l4 != nil && proto == 17:
			c.pktInfo |= hw.PktTypeUDP
		}
		c.status |= n.rxChecksumLocked(ip, l4, proto)
	case etype == 0x86DD:
		c.pktInfo |= hw.PktTypeIPv6
	}
	// 1. EtherType filters.
	for i := 0; i < hw.ETQFEntries; i++ {
		f := n.reg(hw.ETQF(i))
		if f&hw.EtqfFilterEn == 0 || uint16(f) != etype {
			continue
		}
		c.pktInfo = hw.PktTypeETQF | uint16(i)<<hw.PktTypeETQFShift
		if s := n.reg(hw.ETQS(i)); s&hw.EtqsQueueEn != 0 {
			c.queue = int(s & hw.EtqsQueueMask >> hw.EtqsQueueShift)
			return c
		}
		break
	}
	if !isIPv4 {
		return n.rssLocked(fr, c, nil, nil, 0)
	}
	var sport, dport uint16
	if l4 != nil && (proto == 6 || proto == 17 || proto == 132) {
		sport, dport = binary.BigEndian.Uint16(l4[0:]), binary.BigEndian.Uint16(l4[2:])
	}
	// 2. 5-tuple filters: the highest priority wins, then the lowest index.
	best, bestPrio := -1, uint32(0)
	// The filters with QUEUE_EN (ftqfOn), lowest first.
	for w, on := range n.ftqfOn {
		for ; on != 0; on &= on - 1 {
			i := w*64 + bits.TrailingZeros64(on)
			f := n.reg(hw.FTQF(i))
			if f&hw.FtqfMaskProto == 0 {
				want := ftqfProto(f & hw.FtqfProtoMask)
				if f&hw.FtqfProtoMask == hw.FtqfProtoOther || want != proto {
					continue
				}
			}
			if f&hw.FtqfMaskSrcAddr == 0 && n.reg(hw.SAQF(i)) != binary.LittleEndian.Uint32(ip[12:]) {
				continue
			}
			if f&hw.FtqfMaskDstAddr == 0 && n.reg(hw.DAQF(i)) != binary.LittleEndian.Uint32(ip[16:]) {
				continue
			}
			if (f&hw.FtqfMaskSrcPort == 0 || f&hw.FtqfMaskDstPort == 0) && l4 == nil {
				continue
			}
			ports := n.reg(hw.SDPQF(i))
			if f&hw.FtqfMaskSrcPort == 0 && uint16(ports) != sport {
				continue
			}
			if f&hw.FtqfMaskDstPort == 0 && uint16(ports>>hw.SdpqfDstPortShift) != dport {
				continue
			}
			if prio := f & hw.FtqfPriorityMask >> hw.FtqfPriorityShift; best < 0 || prio > bestPrio {
				best, bestPrio = i, prio
			}
		}
	}
	if best >= 0 {
		c.queue = int(n.reg(hw.L34TIMIR(best)) & hw.L34tQueueMask >> hw.L34tQueueShift)
		return c
	}
	// 3. Flow Director perfect filters.
	if n.reg(hw.FDIRCTRL)&hw.FdirctrlInitDone != 0 {
		var in hw.FdirInput
		switch {
		case l4 != nil && proto == 17:
			in.FlowType = hw.FlowUDP
		case l4 != nil && proto == 6:
			in.FlowType = hw.FlowTCP
		case l4 != nil && proto == 132:
			in.FlowType = hw.FlowSCTP
		}
		copy(in.SrcIP[:4], ip[12:16])
		copy(in.DstIP[:4], ip[16:20])
		in.SrcPort, in.DstPort = sport, dport
		if off := int(n.reg(hw.FDIRCTRL)&hw.FdirctrlFlexMask>>hw.FdirctrlFlexShift) * 2; off+2 <= len(fr) {
			in.Flex = [2]byte{fr[off], fr[off+1]}
		}
		in = n.fdirMaskedLocked(in)
		bucketBits := hw.FdirBucketBits(n.reg(hw.FDIRCTRL) & hw.FdirctrlPBAllocMask)
		bucket := hw.FdirBucketHash(in, n.reg(hw.FDIRHKEY)) & (1<<bucketBits - 1)
		for _, f := range n.fdir[bucket] {
			if f.in != in {
				continue
			}
			n.fdirHit.Add(1)
			c.status |= hw.RxStatFLM
			c.hash = uint32(f.swIdx) | bucket<<16
			switch {
			case f.drop:
				c.drop = true
			case f.qen:
				c.queue = f.queue
			default:
				return n.rssLocked(fr, c, ip, l4, proto)
			}
			return c
		}
		n.fdirMis.Add(1)
	}
	// 4. RSS, 5. queue 0.
	return n.rssLocked(fr, c, ip, l4, proto)
}

// rssLocked picks the queue by RSS when MRQC enables it (the hash of an
// IPv4 frame, or none), keeping c's other findings.
func (n *ixgbeNIC) rssLocked(fr []byte, c rxClass, ip, l4 []byte, proto byte) rxClass {
	mrqc := n.reg(hw.MRQC)
	if mrqc&hw.MrqcMRQEMask != hw.MrqcRSSEn || ip == nil {
		return c
	}
	var in []byte
	var typ uint16
	switch {
	case proto == 6 && l4 != nil && mrqc&hw.MrqcTCPIPv4 != 0:
		in, typ = append(append([]byte(nil), ip[12:20]...), l4[0:4]...), hw.RSSTypeTCPIPv4
	case proto == 17 && l4 != nil && mrqc&hw.MrqcUDPIPv4 != 0:
		in, typ = append(append([]byte(nil), ip[12:20]...), l4[0:4]...), hw.RSSTypeUDPIPv4
	case mrqc&hw.MrqcIPv4 != 0:
		in, typ = ip[12:20], hw.RSSTypeIPv4
	default:
		return c
	}
	var key [hw.RSSKeyLen]byte
	for i := range key {
		key[i] = byte(n.reg(hw.RSSRK+i/4*4) >> (8 * (i % 4)))
	}
	h := toeplitz(key[:], in)
	e := byte(n.reg(hw.RETA+int(h&127)/4*4) >> (8 * (h & 3)))
	c.queue = int(e & hw.RETAQueueMask)
	if c.status&hw.RxStatFLM == 0 {
		c.pktInfo |= typ
		if n.has(hw.RXCSUM, hw.RxcsumPCSD) {
			c.hash = h
		}
	}
	return c
}
