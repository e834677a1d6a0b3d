package emulated

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	ixhw "github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/pci"
)

// nicRig is port 0 of a cabled pair programmed by hand, one TX and one RX
// ring of 8 descriptors each, and port 1 receiving the same way.
type nicRig struct {
	t    *testing.T
	p    *E1000E
	regs [2]pci.Registers
	mem  []byte
	m    *pci.Mapping
}

const (
	nrTx   = 0      // port 0 TX ring
	nrRx   = 0x1000 // port p RX ring at nrRx + p*0x1000
	nrData = 0x4000 // buffers, 2 KiB each
)

func newNICRig(t *testing.T) *nicRig { return newNICRigWith(t, func(*E1000EOptions) {}) }

// newNICRigWith is newNICRig on a model whose options set changes.
func newNICRigWith(t *testing.T, set func(*E1000EOptions)) *nicRig {
	o := DefaultE1000EOptions()
	set(&o)
	p, err := NewE1000E(o)
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 256<<10)
	m, err := p.IOMMU().Map(mem)
	if err != nil {
		t.Fatal(err)
	}
	r := &nicRig{t: t, p: p, mem: mem, m: m}
	t.Cleanup(func() {
		p.Close()
		p.IOMMU().Unmap(m)
	})
	for i := range 2 {
		f := p.Functions()[i]
		if err := pci.SetCommand(f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
			t.Fatal(err)
		}
		r.regs[i], _ = f.BAR(0)
	}
	return r
}

func (r *nicRig) iova(off int) uint64 { return r.m.Segments[0].IOVA + uint64(off) }

// startRx programs port i's RX ring with 8 buffers and enables RX.
func (r *nicRig) startRx(i int) {
	g := r.regs[i]
	ring := nrRx + i*0x1000
	for d := 0; d < 8; d++ {
		hw.RxRead{Buffer: r.iova(nrData + (8*i+d)*2048)}.Encode(r.mem[ring+d*16:])
	}
	g.Write32(hw.RDBAL, uint32(r.iova(ring)))
	g.Write32(hw.RDBAH, uint32(r.iova(ring)>>32))
	g.Write32(hw.RDLEN, 8*16)
	g.Write32(hw.RDH, 0)
	g.Write32(hw.RDT, 7)
	g.Write32(hw.RFCTL, hw.RfctlEXTEN)
	g.Write32(hw.RCTL, hw.RctlEN|hw.RctlUPE|hw.RctlSECRC)
}

// send puts one frame on port 0's TX ring and rings the doorbell.
func (r *nicRig) send(slot int, frame []byte) {
	g := r.regs[0]
	if slot == 0 {
		g.Write32(hw.TDBAL, uint32(r.iova(nrTx)))
		g.Write32(hw.TDBAH, uint32(r.iova(nrTx)>>32))
		g.Write32(hw.TDLEN, 8*16)
		g.Write32(hw.TDH, 0)
		g.Write32(hw.TCTL, hw.TctlEN|hw.TctlPSP)
	}
	buf := nrData + 0x10000
	copy(r.mem[buf:], frame)
	hw.LegacyTx(r.iova(buf), len(frame), hw.TxCmdEOP|hw.TxCmdRS).Encode(r.mem[nrTx+slot*16:])
	g.Write32(hw.TDT, uint32(slot+1))
}

// sendGather transmits one frame from two descriptors on a fresh TX ring:
// head at headIOVA, then tail at tailIOVA (copied there when it lies in
// the rig's memory), EOP and RS on the second.
func (r *nicRig) sendGather(head []byte, headIOVA uint64, tail []byte, tailIOVA uint64) {
	g := r.regs[0]
	g.Write32(hw.TDBAL, uint32(r.iova(nrTx)))
	g.Write32(hw.TDBAH, uint32(r.iova(nrTx)>>32))
	g.Write32(hw.TDLEN, 8*16)
	g.Write32(hw.TDH, 0)
	g.Write32(hw.TCTL, hw.TctlEN|hw.TctlPSP)
	for _, p := range []struct {
		b    []byte
		iova uint64
	}{{head, headIOVA}, {tail, tailIOVA}} {
		if off := p.iova - r.iova(0); p.iova >= r.iova(0) && off < uint64(len(r.mem)) {
			copy(r.mem[off:], p.b)
		}
	}
	hw.LegacyTx(headIOVA, len(head), hw.TxCmdIFCS).Encode(r.mem[nrTx:])
	hw.LegacyTx(tailIOVA, len(tail), hw.TxCmdEOP|hw.TxCmdIFCS|hw.TxCmdRS).Encode(r.mem[nrTx+16:])
	g.Write32(hw.TDT, 2)
}

// received returns the frame in port i's RX descriptor d, nil if none.
func (r *nicRig) received(i, d int) []byte {
	wb := hw.DecodeRxWriteBack(r.mem[nrRx+i*0x1000+d*16:])
	if wb.Status&hw.RxStatDD == 0 {
		return nil
	}
	off := nrData + (8*i+d)*2048
	return r.mem[off : off+int(wb.Length)]
}

func (r *nicRig) wantViolation(port int, substr string) {
	r.t.Helper()
	s := r.p.Stats(port)
	if s.Violations == 0 || !strings.Contains(s.LastViolation, substr) {
		r.t.Errorf("want a violation about %q, got %d: %q", substr, s.Violations, s.LastViolation)
	}
}

func testFrame(n int) []byte {
	f := make([]byte, n)
	copy(f, []byte{0x52, 0x54, 0, 0x12, 0x34, 0x57, 0x52, 0x54, 0, 0x12, 0x34, 0x56, 0x88, 0xB5})
	for i := 14; i < n; i++ {
		f[i] = byte(i * 7)
	}
	return f
}

func TestE1000EFrameCrossesCable(t *testing.T) {
	r := newNICRig(t)
	r.startRx(1)
	r.regs[1].Write32(hw.CTRL, hw.CtrlSLU)
	r.send(0, testFrame(100))
	if got := r.received(1, 0); !bytes.Equal(got, testFrame(100)) {
		t.Fatalf("received % x", got)
	}
	if r.mem[nrTx+12]&hw.TxStatDD == 0 {
		t.Error("no DD written back for a descriptor with RS")
	}
	// Short frames are padded to 60 bytes with TCTL.PSP.
	r.send(1, testFrame(20))
	if got := r.received(1, 1); len(got) != 60 || !bytes.Equal(got[:20], testFrame(20)) {
		t.Fatalf("short frame received as %d bytes", len(got))
	}
	for i := range 2 {
		if s := r.p.Stats(i); s.Violations != 0 {
			t.Errorf("port %d: %s", i, s.LastViolation)
		}
	}
	// Statistics clear on read; QEMU 7.2 clears both halves on the high
	// read.
	g := r.regs[1]
	if v := g.Read32(hw.GPRC); v != 2 {
		t.Errorf("GPRC %d, want 2", v)
	}
	if v := g.Read32(hw.GPRC); v != 0 {
		t.Errorf("GPRC %d after a read, want 0", v)
	}
	if lo := g.Read32(hw.GORCL); lo != 100+4+60+4 {
		t.Errorf("GORCL %d", lo)
	}
	g.Read32(hw.GORCH)
	if lo := g.Read32(hw.GORCL); lo != 0 {
		t.Errorf("GORCL %d after reading GORCH", lo)
	}
}

func TestE1000EStrictness(t *testing.T) {
	t.Run("TARC", func(t *testing.T) {
		r := newNICRig(t)
		r.startRx(1)
		r.regs[0].Write32(hw.TARC, 0) // QEMU 7.2 transmits nothing from a queue without bit 10
		r.send(0, testFrame(64))
		if r.received(1, 0) != nil {
			t.Error("frame sent from a queue with TARC bit 10 clear")
		}
		r.wantViolation(0, "TARC")
	})
	t.Run("RFCTLAfterRCTL", func(t *testing.T) {
		r := newNICRig(t)
		r.startRx(1)
		r.regs[1].Write32(hw.RFCTL, 0)
		r.wantViolation(1, "RFCTL written while RCTL.EN")
	})
	t.Run("RingWhileEnabled", func(t *testing.T) {
		r := newNICRig(t)
		r.startRx(1)
		r.regs[1].Write32(hw.RDLEN, 16*16)
		r.wantViolation(1, "RDLEN0 written while RCTL.EN")
	})
	t.Run("Width", func(t *testing.T) {
		r := newNICRig(t)
		r.regs[0].Write16(hw.CTRL, 1)
		r.wantViolation(0, "2-byte write")
	})
	t.Run("ResetKeepsRegisters", func(t *testing.T) {
		r := newNICRig(t)
		g := r.regs[0]
		g.Write32(hw.RAL(0), 0x11223344)
		g.Write32(hw.TDLEN, 256)
		_ = pci.ClearCommand(r.p.Functions()[0], pci.CommandBusMaster)
		g.Write32(hw.CTRL, hw.CtrlRST|hw.CtrlSLU)
		if g.Read32(hw.CTRL)&hw.CtrlRST != 0 {
			t.Error("CTRL.RST did not self-clear")
		}
		if g.Read32(hw.TDLEN) != 256 {
			t.Error("CTRL.RST reset TDLEN: QEMU 7.2 does not, and the model must not hide a driver relying on it")
		}
		mac := r.p.MAC(0)
		if g.Read32(hw.RAL(0)) != uint32(mac[0])|uint32(mac[1])<<8|uint32(mac[2])<<16|uint32(mac[3])<<24 {
			t.Error("CTRL.RST did not reload the MAC address")
		}
		if s := r.p.Stats(0); s.Violations != 0 {
			t.Errorf("a clean reset counted a violation: %s", s.LastViolation)
		}
	})
	t.Run("ResetWhileMastering", func(t *testing.T) {
		r := newNICRig(t)
		r.regs[0].Write32(hw.CTRL, hw.CtrlRST)
		r.wantViolation(0, "GIO_MASTER_DISABLE")
	})
	t.Run("NoBusMaster", func(t *testing.T) {
		r := newNICRig(t)
		r.startRx(1)
		_ = pci.ClearCommand(r.p.Functions()[1], pci.CommandBusMaster)
		r.send(0, testFrame(64))
		if r.received(1, 0) != nil {
			t.Error("frame DMA'd by a NIC without bus mastering")
		}
		if s := r.p.Stats(1); s.RxDropped == 0 {
			t.Error("drop not counted")
		}
	})
	t.Run("LinkDown", func(t *testing.T) {
		r := newNICRig(t)
		r.startRx(1)
		r.p.SetLink(0, false)
		if r.regs[1].Read32(hw.STATUS)&hw.StatusLU != 0 {
			t.Error("STATUS.LU with the cable pulled")
		}
		if r.regs[1].Read32(hw.ICR)&hw.IntLSC == 0 {
			t.Error("no LSC cause on link change")
		}
		r.send(0, testFrame(64))
		if r.received(1, 0) != nil {
			t.Error("frame crossed a pulled cable")
		}
	})
	t.Run("GatheredFrame", func(t *testing.T) {
		// A header and a payload in two descriptors, EOP on the second,
		// arrive as one frame; the hook sees where each points.
		var seen []uint64
		r := newNICRigWith(t, func(o *E1000EOptions) {
			o.TxBuffer = func(port int, iova uint64, mem []byte) { seen = append(seen, iova) }
		})
		r.startRx(1)
		fr := testFrame(200)
		r.sendGather(fr[:14], r.iova(nrData+0x10000), fr[14:], r.iova(nrData+0x18000))
		if got := r.received(1, 0); string(got) != string(fr) {
			t.Errorf("gathered frame arrived as %x, want %x", got, fr)
		}
		if len(seen) != 2 || seen[0] != r.iova(nrData+0x10000) || seen[1] != r.iova(nrData+0x18000) {
			t.Errorf("hook saw buffers at %#x, want the two descriptors' addresses", seen)
		}
	})
	t.Run("UnmappedTxPayload", func(t *testing.T) {
		// The second descriptor of a frame points outside every mapping:
		// a recorded violation and IOMMU fault, nothing sent.
		r := newNICRig(t)
		r.startRx(1)
		fr := testFrame(200)
		r.sendGather(fr[:14], r.iova(nrData+0x10000), fr[14:], 0xdead0000)
		r.wantViolation(0, "not mapped")
		if n, _ := r.p.IOMMU().Faults(); n == 0 {
			t.Error("no IOMMU fault recorded")
		}
		if got := r.received(1, 0); got != nil {
			t.Errorf("a frame with an unmapped payload arrived: %x", got)
		}
	})
	t.Run("UnmappedBuffer", func(t *testing.T) {
		r := newNICRig(t)
		r.startRx(1)
		hw.RxRead{Buffer: 0xdead0000}.Encode(r.mem[nrRx+0x1000:])
		r.send(0, testFrame(64))
		r.wantViolation(1, "not mapped")
		if n, _ := r.p.IOMMU().Faults(); n == 0 {
			t.Error("no IOMMU fault recorded")
		}
	})
}

// The access counts are what a user of the model reads to learn what a
// driver costs on QEMU: every register access by name, and the descriptor
// DMA, exactly.
func TestE1000EAccesses(t *testing.T) {
	r := newNICRig(t)
	r.startRx(1)
	r.regs[1].Write32(hw.CTRL, hw.CtrlSLU)
	r.p.ResetAccesses(0)
	r.p.ResetAccesses(1)
	r.send(0, testFrame(100)) // five ring writes, TCTL, TDT; RS on the descriptor
	r.regs[1].Read32(hw.STATUS)
	r.regs[1].Write32(hw.Q(hw.RDT, 0), 0)
	a, b := r.p.Accesses(0), r.p.Accesses(1)
	if a.TotalReads() != 0 || a.TotalWrites() != 6 || a.Writes["TDT0"] != 1 || a.Writes["TDBAL0"] != 1 {
		t.Errorf("port 0: reads %v, writes %v; want none, and TDBAL0, TDBAH0, TDLEN0, TDH0, TCTL, TDT0 once each", a.Reads, a.Writes)
	}
	if a.TxDescFetches != 1 || a.TxDescWriteBacks != 1 || a.RxDescFetches != 0 {
		t.Errorf("port 0: %+v; want one TX descriptor fetched and written back", a)
	}
	if b.Reads["STATUS"] != 1 || b.Writes["RDT0"] != 1 || b.TotalReads() != 1 || b.TotalWrites() != 1 {
		t.Errorf("port 1: reads %v, writes %v; want STATUS read and RDT0 written once", b.Reads, b.Writes)
	}
	if b.RxDescFetches != 1 || b.RxDescWriteBacks != 1 || b.TxDescFetches != 0 {
		t.Errorf("port 1: %+v; want one RX descriptor fetched and written back", b)
	}
	r.p.ResetAccesses(1)
	if b := r.p.Accesses(1); b.TotalReads()+b.TotalWrites()+b.RxDescFetches+b.RxDescWriteBacks != 0 {
		t.Errorf("after ResetAccesses: %+v", b)
	}
}

// matchRAR reads the receive address registers as RAL(i) at RAL(0)+8i and
// RAH(i) 4 bytes after it; both NICs lay them out so. An address matches
// only where its entry holds it with Address Valid set.
func TestMatchRAR(t *testing.T) {
	for i := 0; i < hw.RAREntries; i++ {
		if hw.RAL(i) != hw.RAL(0)+8*i || hw.RAH(i) != hw.RAL(i)+4 {
			t.Fatalf("82574L RAL(%d) %#x, RAH(%d) %#x: not the layout matchRAR reads", i, hw.RAL(i), i, hw.RAH(i))
		}
	}
	for i := 0; i < ixhw.RAREntries; i++ {
		if ixhw.RAL(i) != ixhw.RAL(0)+8*i || ixhw.RAH(i) != ixhw.RAL(i)+4 {
			t.Fatalf("82599 RAL(%d) %#x, RAH(%d) %#x: not the layout matchRAR reads", i, ixhw.RAL(i), i, ixhw.RAH(i))
		}
	}
	var regs [hw.BAR0Size / 4]uint32
	mac := [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}
	regs[hw.RAL(3)/4] = 0x12005452
	regs[hw.RAH(3)/4] = 0x5634
	if matchRAR(regs[:], hw.RAL(0), hw.RAREntries, mac) {
		t.Error("an entry without Address Valid matched")
	}
	regs[hw.RAH(3)/4] |= 1 << 31
	if !matchRAR(regs[:], hw.RAL(0), hw.RAREntries, mac) {
		t.Error("a valid entry holding the address did not match")
	}
	if matchRAR(regs[:], hw.RAL(0), hw.RAREntries, [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x57}) {
		t.Error("another address matched")
	}
}

// TestE1000ELongPacket: without RCTL.LPE the 82574L discards a frame
// longer than 1522 bytes with its FCS, tagged or not: 1518 without
// (hw.MaxFrame) arrives, 1519 is dropped and counted in ROC.
func TestE1000ELongPacket(t *testing.T) {
	r := newNICRig(t)
	r.startRx(1)
	r.regs[1].Write32(hw.CTRL, hw.CtrlSLU)
	r.regs[0].Write32(hw.RCTL, hw.RctlLPE) // the sender may send long ones
	r.send(0, testFrame(hw.MaxFrame))
	r.send(1, testFrame(hw.MaxFrame+1))
	r.send(2, testFrame(100))
	if got := r.received(1, 0); !bytes.Equal(got, testFrame(hw.MaxFrame)) {
		t.Errorf("a %d-byte frame: received %d bytes", hw.MaxFrame, len(got))
	}
	if got := r.received(1, 1); !bytes.Equal(got, testFrame(100)) {
		t.Errorf("after a %d-byte frame: received %d bytes, want the next, 100", hw.MaxFrame+1, len(got))
	}
	if v := r.regs[1].Read32(hw.ROC); v != 1 {
		t.Errorf("ROC %d, want 1", v)
	}
}
