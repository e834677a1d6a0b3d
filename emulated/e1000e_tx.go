package emulated

import (
	"encoding/binary"

	"github.com/gomx-dev/gomx/internal/csum"
	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// The 82574L model's transmit path: a TDT write walks the TX ring, reads
// the context and data descriptors, gathers each frame from guest memory,
// inserts the checksums the descriptors ask for, writes the descriptors
// back and hands the frames to the wire (or back to the receive path when
// the NIC loops). Registers are in e1000e_regs.go, receive in e1000e_rx.go.

// transmit is a TDT write: QEMU 7.2 sends synchronously, so every frame
// between TDH and the new TDT is on the wire when the write returns.
func (n *e1000eNIC) transmit(q int, tdt uint32) {
	n.txMu.Lock()
	defer n.txMu.Unlock()
	n.mu.Lock()
	n.acc.count(&n.acc.writes, hw.Q(hw.TDT, q))
	if n.closed {
		n.mu.Unlock()
		return
	}
	tdt &= 0xFFFF
	n.set(hw.Q(hw.TDT, q), tdt)
	l := n.reg(hw.Q(hw.TDLEN, q)) / hw.DescSize
	switch {
	case !n.has(hw.TCTL, hw.TctlEN):
		n.mu.Unlock()
		return
	case tdt >= l && l != 0:
		n.violation("TDT%d = %d outside a ring of %d descriptors", q, tdt, l)
		n.mu.Unlock()
		return
	case !n.has(hw.Q(hw.TARC, q), hw.TARCEnable):
		n.violation("TDT%d written with TARC%d bit 10 clear: QEMU 7.2 does not transmit from a disabled queue", q, q)
		n.mu.Unlock()
		return
	case !n.f.busMaster():
		n.violation("TDT%d written with PCI bus mastering off: the NIC cannot fetch descriptors", q)
		n.mu.Unlock()
		return
	}
	n.out = n.out[:0]
	sent := n.txRingLocked(q, l, tdt)
	loop := n.macLoop() || n.phyLoop()
	lu := n.linkUp()
	if sent {
		n.causeLocked(hw.IntTXDW | hw.IntTXQ0<<q)
	}
	n.mu.Unlock()

	for _, fr := range n.out {
		switch {
		case loop:
			n.receive(fr)
		case !lu:
			// Link down: the frame is lost on the wire.
		default:
			toWire(n, fr)
		}
		n.spare = append(n.spare, fr)
	}
	n.out = n.out[:0]
}

// frameBuf returns an empty frame buffer for the TX path (txMu held).
func (n *e1000eNIC) frameBuf() []byte {
	if k := len(n.spare); k > 0 {
		b := n.spare[k-1]
		n.spare = n.spare[:k-1]
		return b[:0]
	}
	return make([]byte, 0, 16384)
}

// txRingLocked walks TX ring q from TDH to tdt, gathering frames into
// n.out; it reports whether any descriptor completed.
func (n *e1000eNIC) txRingLocked(q int, l, tdt uint32) bool {
	dom := n.f.dom
	base := uint64(n.reg(hw.Q(hw.TDBAH, q)))<<32 | uint64(n.reg(hw.Q(hw.TDBAL, q)))
	head := n.reg(hw.Q(hw.TDH, q))
	if head >= l {
		n.violation("TDH%d = %d outside a ring of %d descriptors", q, head, l)
		return false
	}
	frame := n.frameBuf()
	var popts uint8
	did, faulted := false, false // faulted: the frame read unmapped memory
	dom.rlock()
	defer dom.runlock()
	for head != tdt {
		raw, ok := dom.translate(base+uint64(head)*hw.DescSize, hw.DescSize, false, &n.hint)
		if !ok {
			n.violation("TX descriptor %d of queue %d at an unmapped IOVA", head, q)
			break
		}
		n.acc.txFetch++
		d := hw.DecodeTxDesc(raw)
		switch {
		case d.Extended() && d.DTyp() == hw.TxDTypContext:
			n.txCtx = d
		case d.Extended() && d.DTyp() != hw.TxDTypData:
			n.violation("TX descriptor type %d: want 0 (context) or 1 (data)", d.DTyp())
		default:
			if !d.Extended() && d.Cmd()&hw.TxCmdIC != 0 {
				n.violation("legacy TX descriptor with IC: QEMU 7.2 does not insert legacy checksums; use a context and data descriptor")
			}
			if d.Extended() {
				popts |= d.POPTS()
			}
			ln := d.Len()
			if ln > 0 {
				buf, ok := dom.translate(d.Addr, ln, false, &n.hint)
				if !ok {
					n.violation("TX buffer at IOVA %#x (%d bytes) is not mapped", d.Addr, ln)
					frame = frame[:0]
					faulted = true
				} else if !faulted {
					if n.txHook != nil {
						n.txHook(n.port, d.Addr, buf)
					}
					if len(frame)+ln <= cap(frame) {
						frame = append(frame, buf...)
					}
				}
			}
			if d.Cmd()&hw.TxCmdEOP != 0 {
				if faulted {
					// The fetch failed: the frame is dropped, as the
					// NIC drops a frame whose DMA read aborted.
					frame, faulted = frame[:0], false
				} else {
					n.finishFrameLocked(&frame, popts)
				}
				popts = 0
			}
		}
		if d.Cmd()&hw.TxCmdRS != 0 {
			dmasync.Publish()
			raw[12] |= hw.TxStatDD
			n.acc.txWB++
		}
		did = true
		head = (head + 1) % l
	}
	n.set(hw.Q(hw.TDH, q), head)
	if len(frame) > 0 {
		// A frame without EOP stays unsent, as on hardware until EOP comes.
		n.violation("TX queue %d: descriptors up to TDT end without EOP", q)
	}
	if cap(frame) > 0 {
		n.spare = append(n.spare, frame[:0])
	}
	return did
}

// finishFrameLocked pads, checksums and counts a complete frame and queues
// it for delivery.
func (n *e1000eNIC) finishFrameLocked(frame *[]byte, popts uint8) {
	fr := *frame
	*frame = n.frameBuf()
	if len(fr) < 14 {
		n.violation("TX frame of %d bytes: shorter than an Ethernet header", len(fr))
		n.spare = append(n.spare, fr[:0])
		return
	}
	max := hw.MaxFrame // without RCTL.LPE: 1522 bytes with the FCS, tagged or not
	if n.has(hw.RCTL, hw.RctlLPE) {
		max = 16128
	}
	if len(fr) > max {
		n.violation("TX frame of %d bytes: longer than %d", len(fr), max)
		n.spare = append(n.spare, fr[:0])
		return
	}
	if n.has(hw.TCTL, hw.TctlPSP) {
		for len(fr) < hw.MinFrame {
			fr = append(fr, 0)
		}
	}
	if popts != 0 {
		n.txChecksum(fr, popts)
	}
	n.nTx.Add(1)
	n.count64(hw.GOTCL, uint64(len(fr)+4))
	n.count64(hw.TOTL, uint64(len(fr)+4))
	n.regs[hw.GPTC/4]++
	n.regs[hw.TPT/4]++
	if fr[0]&1 != 0 {
		if isBroadcast(fr) {
			n.regs[hw.BPTC/4]++
		} else {
			n.regs[hw.MPTC/4]++
		}
	}
	n.out = append(n.out, fr)
}

func isBroadcast(fr []byte) bool {
	return fr[0]&fr[1]&fr[2]&fr[3]&fr[4]&fr[5] == 0xFF
}

func (n *e1000eNIC) count64(lo int, v uint64) {
	c := uint64(n.regs[lo/4+1])<<32 | uint64(n.regs[lo/4]) + v
	n.regs[lo/4], n.regs[lo/4+1] = uint32(c), uint32(c>>32)
}

// txChecksum inserts the checksums the context descriptor describes: the
// sum over [start, end] is stored at the offset, the field's own content
// (the driver's pseudo-header seed) included, as Intel NICs do.
func (n *e1000eNIC) txChecksum(fr []byte, popts uint8) {
	c := n.txCtx
	ipcss, ipcso, ipcse := int(uint8(c.Addr)), int(uint8(c.Addr>>8)), int(uint16(c.Addr>>16))
	tucss, tucso, tucse := int(uint8(c.Addr>>32)), int(uint8(c.Addr>>40)), int(uint16(c.Addr>>48))
	ins := func(start, at, end int, udp bool) {
		if end == 0 || end >= len(fr) {
			end = len(fr) - 1
		}
		if start > end || at+2 > len(fr) {
			n.violation("TX checksum context out of the frame: start %d, offset %d, end %d, frame %d bytes", start, at, end, len(fr))
			return
		}
		s := csum.Checksum(fr[start : end+1])
		if udp && s == 0 {
			s = 0xFFFF
		}
		binary.BigEndian.PutUint16(fr[at:], s)
	}
	if popts&hw.TxPoptsIXSM != 0 {
		binary.BigEndian.PutUint16(fr[min(ipcso, len(fr)-2):], 0)
		ins(ipcss, ipcso, ipcse, false)
	}
	if popts&hw.TxPoptsTXSM != 0 {
		ins(tucss, tucso, tucse, c.Cmd()&hw.TxTucmdTCP == 0)
	}
}
