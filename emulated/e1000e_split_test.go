package emulated

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
)

// Packet split rings of the rig: port p's ring of 4 descriptors at
// nrRx + p*0x1000, and buffer j of descriptor d at psBuf(p, d, j), 4 KiB
// apart.
func psBuf(p, d, j int) int { return 0x20000 + ((p*4+d)*4+j)*0x1000 }

// startRxPS programs port i's RX ring with 4 packet split descriptors of
// four buffers each (buffer 0 of descriptor 0 at address 0 when null0) and
// enables RX with PSRCTL psrctl and RFCTL rfctl.
func (r *nicRig) startRxPS(i int, psrctl, rfctl uint32, null0 bool) {
	g := r.regs[i]
	ring := nrRx + i*0x1000
	for d := 0; d < 4; d++ {
		var rd hw.RxPSRead
		for j := range rd.Buffer {
			rd.Buffer[j] = r.iova(psBuf(i, d, j))
		}
		if null0 && d == 0 {
			rd.Buffer[0] = 0
		}
		rd.Encode(r.mem[ring+d*hw.PSDescSize:])
	}
	g.Write32(hw.RDBAL, uint32(r.iova(ring)))
	g.Write32(hw.RDBAH, uint32(r.iova(ring)>>32))
	g.Write32(hw.RDLEN, 4*hw.PSDescSize)
	g.Write32(hw.RDH, 0)
	g.Write32(hw.PSRCTL, psrctl)
	g.Write32(hw.RFCTL, rfctl)
	g.Write32(hw.RDT, 3*hw.PSDescUnits)
	g.Write32(hw.RCTL, hw.RctlEN|hw.RctlUPE|hw.RctlSECRC|hw.RctlDTYPPS)
	r.regs[i].Write32(hw.CTRL, hw.CtrlSLU)
}

// receivedPS returns port i's write-back of descriptor d and the bytes in
// each of its buffers.
func (r *nicRig) receivedPS(i, d int) (hw.RxPSWriteBack, [4][]byte) {
	wb := hw.DecodeRxPSWriteBack(r.mem[nrRx+i*0x1000+d*hw.PSDescSize:])
	var parts [4][]byte
	for j, l := range wb.Lengths() {
		parts[j] = r.mem[psBuf(i, d, j) : psBuf(i, d, j)+l]
	}
	return wb, parts
}

// ipFrame builds an IPv4 (v6 false) or IPv6 frame of n bytes carrying
// protocol proto, with its first fragment's MF bit when frag.
func ipFrame(n int, v6 bool, proto byte, frag bool) []byte {
	f := testFrame(n)
	ip := f[14:]
	if v6 {
		binary.BigEndian.PutUint16(f[12:], 0x86DD)
		clear(ip[:40])
		ip[0], ip[6] = 0x60, proto
		binary.BigEndian.PutUint16(ip[4:], uint16(n-54))
		return f
	}
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	clear(ip[:20])
	ip[0], ip[9] = 0x45, proto
	binary.BigEndian.PutUint16(ip[2:], uint16(n-14))
	if frag {
		ip[6] = 0x20
	}
	if proto == 6 {
		ip[20+12] = 6 << 4 // 24-byte TCP header
	}
	return f
}

func TestE1000EPacketSplit(t *testing.T) {
	ps256x4K := hw.PSRCTLValue(256, 4096, 0, 0)
	for _, c := range []struct {
		name    string
		frame   []byte
		rfctl   uint32
		hdr     int    // 0: not split
		lengths [4]int // of the four buffers
	}{
		{"IPv4UDP", ipFrame(200, false, 17, false), 0, 42, [4]int{42, 158}},
		{"IPv4TCPOptions", ipFrame(300, false, 6, false), 0, 14 + 20 + 24, [4]int{58, 242}},
		{"IPv6UDP", ipFrame(1000, true, 17, false), 0, 62, [4]int{62, 938}},
		{"IPv6Other", ipFrame(100, true, 58, false), 0, 54, [4]int{54, 46}},
		// QEMU fills buffer 0 from the first byte when it does not split.
		{"NonIPFillsBuffer0First", testFrame(1000), 0, 0, [4]int{256, 744}},
		{"NonIPSmall", testFrame(200), 0, 0, [4]int{200}},
		{"FragmentSplitAfterIP", ipFrame(500, false, 17, true), 0, 34, [4]int{34, 466}},
		{"FragmentWholeWithIPFRSPDis", ipFrame(500, false, 17, true), hw.RfctlIPFRSPDis, 0, [4]int{256, 244}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newNICRig(t)
			r.startRxPS(1, ps256x4K, hw.RfctlEXTEN|c.rfctl, false)
			r.send(0, c.frame)
			wb, parts := r.receivedPS(1, 0)
			if wb.Status&(hw.RxStatDD|hw.RxStatEOP) != hw.RxStatDD|hw.RxStatEOP {
				t.Fatalf("status %#x: want DD and EOP", wb.Status)
			}
			if wb.Lengths() != c.lengths {
				t.Errorf("buffer lengths %v, want %v", wb.Lengths(), c.lengths)
			}
			if wb.Split() != (c.hdr > 0) || wb.HeaderLen() != c.hdr {
				t.Errorf("header status %#04x: want split %v at %d", wb.HeaderStatus, c.hdr > 0, c.hdr)
			}
			if got := bytes.Join(parts[:], nil); !bytes.Equal(got, c.frame) {
				t.Errorf("buffers hold % x\nwant % x", got, c.frame)
			}
			if rdh := r.regs[1].Read32(hw.RDH); rdh != hw.PSDescUnits {
				t.Errorf("RDH %d after one packet split descriptor, want %d (16-byte units)", rdh, hw.PSDescUnits)
			}
			if s := r.p.Stats(1); s.Violations != 0 {
				t.Errorf("violation: %s", s.LastViolation)
			}
		})
	}
	t.Run("FrameOverTwoDescriptors", func(t *testing.T) {
		r := newNICRig(t)
		r.startRxPS(1, hw.PSRCTLValue(128, 1024, 0, 0), hw.RfctlEXTEN, false)
		fr := testFrame(1500)
		r.send(0, fr)
		wb0, p0 := r.receivedPS(1, 0)
		wb1, p1 := r.receivedPS(1, 1)
		if wb0.Status&hw.RxStatEOP != 0 || wb1.Status&hw.RxStatEOP == 0 {
			t.Errorf("EOP on the first (%#x) or not on the second (%#x) descriptor", wb0.Status, wb1.Status)
		}
		if got := bytes.Join(append(p0[:], p1[:]...), nil); !bytes.Equal(got, fr) {
			t.Errorf("a frame over two descriptors reads back as %d bytes", len(got))
		}
	})
	t.Run("NullBuffer0Skipped", func(t *testing.T) {
		r := newNICRig(t)
		r.startRxPS(1, ps256x4K, hw.RfctlEXTEN, true)
		r.send(0, testFrame(100))
		wb, _ := r.receivedPS(1, 0)
		if wb.Status&hw.RxStatDD == 0 || wb.Lengths() != [4]int{} {
			t.Errorf("descriptor with buffer 0 at address 0: status %#x, lengths %v; QEMU writes it back empty", wb.Status, wb.Lengths())
		}
		if n, _ := r.p.IOMMU().Faults(); n != 0 {
			t.Error("the model wrote to address 0")
		}
	})
}

func TestE1000EPacketSplitStrictness(t *testing.T) {
	for _, c := range []struct {
		name          string
		psrctl, rfctl uint32
		rctl          uint32
		want          string
	}{
		{"BSIZE0Zero", hw.PSRCTLValue(0, 4096, 0, 0), hw.RfctlEXTEN, hw.RctlDTYPPS, "BSIZE0 = 0"},
		{"BSIZE1Zero", hw.PSRCTLValue(256, 0, 4096, 0), hw.RfctlEXTEN, hw.RctlDTYPPS, "BSIZE1 = 0"},
		{"NoExtended", hw.PSRCTLValue(256, 4096, 0, 0), 0, hw.RctlDTYPPS, "RFCTL.EXTEN clear"},
		{"ReservedDTYP", hw.PSRCTLValue(256, 4096, 0, 0), hw.RfctlEXTEN, 2 << 10, "reserved"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newNICRig(t)
			g := r.regs[1]
			g.Write32(hw.RDBAL, uint32(r.iova(nrRx+0x1000)))
			g.Write32(hw.RDLEN, 128)
			g.Write32(hw.PSRCTL, c.psrctl)
			g.Write32(hw.RFCTL, c.rfctl)
			g.Write32(hw.RCTL, hw.RctlEN|c.rctl)
			r.wantViolation(1, c.want)
		})
	}
	t.Run("OddTail", func(t *testing.T) {
		r := newNICRig(t)
		r.startRxPS(1, hw.PSRCTLValue(256, 4096, 0, 0), hw.RfctlEXTEN, false)
		r.regs[1].Write32(hw.RDT, 5)
		r.wantViolation(1, "twice the descriptor index")
	})
	t.Run("OddTailAtEnable", func(t *testing.T) {
		r := newNICRig(t)
		g := r.regs[1]
		g.Write32(hw.RDBAL, uint32(r.iova(nrRx+0x1000)))
		g.Write32(hw.RDLEN, 128)
		g.Write32(hw.RDT, 3) // a descriptor index, not 16-byte units
		g.Write32(hw.PSRCTL, hw.PSRCTLValue(256, 4096, 0, 0))
		g.Write32(hw.RFCTL, hw.RfctlEXTEN)
		g.Write32(hw.RCTL, hw.RctlEN|hw.RctlDTYPPS)
		r.wantViolation(1, "twice the descriptor index")
	})
	t.Run("PSRCTLWhileReceiving", func(t *testing.T) {
		r := newNICRig(t)
		r.startRxPS(1, hw.PSRCTLValue(256, 4096, 0, 0), hw.RfctlEXTEN, false)
		r.regs[1].Write32(hw.PSRCTL, hw.PSRCTLValue(128, 2048, 0, 0))
		r.wantViolation(1, "PSRCTL written while RCTL.EN")
	})
	t.Run("OverflowQEMUWouldAbortOn", func(t *testing.T) {
		// A split frame whose payload overflows buffers 1 to 3 of its
		// first descriptor: QEMU 7.2 asserts; the model records it.
		r := newNICRig(t)
		r.startRxPS(1, hw.PSRCTLValue(128, 1024, 0, 0), hw.RfctlEXTEN, false)
		r.send(0, ipFrame(1500, false, 17, false))
		r.wantViolation(1, "overflows")
	})
}

// QEMU keeps the latched descriptor type until RCTL is written with EN
// again: a driver that reprograms a ring for extended descriptors after a
// packet split session (RDT odd, RX off) is not in error.
func TestE1000EPacketSplitThenExtended(t *testing.T) {
	r := newNICRig(t)
	r.startRxPS(1, hw.PSRCTLValue(256, 4096, 0, 0), hw.RfctlEXTEN, false)
	r.regs[1].Write32(hw.RCTL, 0)
	r.startRx(1)
	r.send(0, testFrame(100))
	if got := r.received(1, 0); !bytes.Equal(got, testFrame(100)) {
		t.Fatalf("received % x after switching back to extended descriptors", got)
	}
	if s := r.p.Stats(1); s.Violations != 0 {
		t.Errorf("violation: %s", s.LastViolation)
	}
}

// FuzzPacketSplitFrame sends arbitrary frames (what any peer may put on
// the wire) through a cabled model into packet split descriptors. The
// oracle is the frame itself: put back together, the buffers hold exactly
// what was sent (padded to 60 bytes), whatever the NIC made of its
// headers; a split never leaves buffer 0 holding more than its 256 bytes
// or a header shorter than Ethernet plus an IPv4 header, and only frames
// whose EtherType (after VLAN tags) is IPv4 or IPv6 are split.
func FuzzPacketSplitFrame(f *testing.F) {
	f.Add(ipFrame(200, false, 17, false), false)
	f.Add(ipFrame(300, false, 6, false), false)
	f.Add(ipFrame(1000, true, 17, false), false)
	f.Add(ipFrame(500, false, 17, true), true)
	f.Add(testFrame(1500), false)
	f.Fuzz(func(t *testing.T, fr []byte, noFragSplit bool) {
		if len(fr) < 14 || len(fr) > 1514 {
			return
		}
		fr = slices.Clone(fr)
		copy(fr[0:6], []byte{0x52, 0x54, 0, 0x12, 0x34, 0x57}) // port 1, unicast
		r := newNICRig(t)
		rfctl := uint32(hw.RfctlEXTEN)
		if noFragSplit {
			rfctl |= hw.RfctlIPFRSPDis
		}
		r.startRxPS(1, hw.PSRCTLValue(256, 1024, 1024, 0), rfctl, false)
		r.send(0, fr)
		want := slices.Concat(fr, make([]byte, max(0, 60-len(fr))))
		var got []byte
		var wb hw.RxPSWriteBack
		for d := 0; d < 4; d++ {
			w, parts := r.receivedPS(1, d)
			if w.Status&hw.RxStatDD == 0 {
				t.Fatalf("frame of %d bytes: descriptor %d not written back", len(fr), d)
			}
			if d == 0 {
				wb = w
			}
			got = append(got, bytes.Join(parts[:], nil)...)
			if w.Status&hw.RxStatEOP != 0 {
				break
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("buffers hold %d bytes, %d sent; split %v at %d", len(got), len(want), wb.Split(), wb.HeaderLen())
		}
		if wb.Split() {
			et := binary.BigEndian.Uint16(fr[12:])
			for off := 16; (et == 0x8100 || et == 0x88A8) && off+2 <= len(fr) && off <= 20; off += 4 {
				et = binary.BigEndian.Uint16(fr[off:])
			}
			if (et != 0x0800 && et != 0x86DD) || wb.HeaderLen() > 256 || wb.HeaderLen() < 34 || int(wb.Length0) != wb.HeaderLen() {
				t.Fatalf("EtherType %#04x split with a %d-byte header, %d bytes in buffer 0", et, wb.HeaderLen(), wb.Length0)
			}
		}
		if s := r.p.Stats(1); s.Violations != 0 {
			t.Fatalf("violation: %s", s.LastViolation)
		}
	})
}
