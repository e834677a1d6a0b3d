package emulated

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/pci"
)

// dsaRig is one emulated DSA programmed register by register, the way
// SPDK's idxd_device_configure and DPDK's init_pci_device do it.
type dsaRig struct {
	t      *testing.T
	p      *DSA
	f      *Function
	regs   pci.Registers
	portal pci.Registers
	mem    []byte // records at 0, descriptor lists at 4096, data from 64 KiB
	m      *pci.Mapping
}

const (
	dsaRecs = 0
	dsaList = 4096
	dsaData = 64 << 10
)

func newDSARig(t *testing.T, o DSAOptions) *dsaRig {
	p, err := NewDSA(o)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Functions()[0]
	regs, _ := f.BAR(0)
	portal, err := f.BAR(2)
	if err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 1<<20)
	m, err := p.IOMMU().Map(mem)
	if err != nil {
		t.Fatal(err)
	}
	r := &dsaRig{t: t, p: p, f: f, regs: regs, portal: portal, mem: mem, m: m}
	t.Cleanup(func() {
		p.Close()
		p.IOMMU().Unmap(m)
	})
	if err := pci.SetCommand(f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *dsaRig) iova(off int) uint64 { return r.m.Segments[0].IOVA + uint64(off) }

// cmd writes a command and waits for CMDSTS.active to clear; it returns
// the error code.
func (r *dsaRig) cmd(c, operand uint32) uint8 {
	r.regs.Write32(dsahw.RegCmd, dsahw.Command(c, operand))
	deadline := time.Now().Add(time.Second)
	for {
		s := r.regs.Read32(dsahw.RegCmdSts)
		if s&dsahw.CmdStsActive == 0 {
			return uint8(s & dsahw.CmdStsErrMask)
		}
		if time.Now().After(deadline) {
			r.t.Fatal("CMDSTS stayed active for a second")
		}
	}
}

// configure resets the device, puts engine 0 and WQ 0 (size entries) in
// group 0, enables the device and the WQ: the reference sequence.
func (r *dsaRig) configure(size int) {
	r.t.Helper()
	if c := r.cmd(dsahw.CmdResetDevice, 0); c != 0 {
		r.t.Fatalf("reset: %s", dsahw.CmdErrString(c))
	}
	if s := r.regs.Read32(dsahw.RegGenSts) & dsahw.StateMask; s != dsahw.StateDisabled {
		r.t.Fatalf("GENSTS %s after reset", dsahw.StateName(s))
	}
	grp := int(r.regs.Read64(dsahw.RegTableOff)&0xFFFF) * dsahw.TableUnit
	wqc := int(r.regs.Read64(dsahw.RegTableOff)>>16&0xFFFF) * dsahw.TableUnit
	r.regs.Write64(grp+dsahw.GrpCfgWQs, 1)
	r.regs.Write64(grp+dsahw.GrpCfgEngines, 1)
	r.regs.Write32(wqc+dsahw.WQCfgSize, uint32(size))
	r.regs.Write32(wqc+dsahw.WQCfgMode, dsahw.WQModeDedic|1<<dsahw.WQPrioShift)
	r.regs.Write32(wqc+dsahw.WQCfgLimits, dsahw.WQLimits(dsahw.MaxXferShift(r.regs.Read64(dsahw.RegGenCap)), 5))
	if c := r.cmd(dsahw.CmdEnableDevice, 0); c != 0 {
		r.t.Fatalf("enable device: %s", dsahw.CmdErrString(c))
	}
	if c := r.cmd(dsahw.CmdEnableWQ, 0); c != 0 {
		r.t.Fatalf("enable WQ: %s", dsahw.CmdErrString(c))
	}
	if r.regs.Read32(wqc+dsahw.WQCfgState)>>dsahw.WQStateShift != dsahw.WQStateEnable {
		r.t.Fatal("WQCFG state does not say enabled")
	}
}

func (r *dsaRig) submit(d dsahw.Descriptor) {
	var rec [64]byte
	d.Encode(rec[:])
	r.portal.WritePortal(dsahw.PortalOffset(0), &rec)
}

// wait polls record i (32 bytes at dsaRecs + 32i) until it is written.
func (r *dsaRig) wait(i int) dsahw.Completion {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for load32(r.mem[dsaRecs+32*i:])&0x7F == 0 {
		if time.Now().After(deadline) {
			r.t.Fatalf("completion record %d never written (violations: %+v)", i, r.p.Stats(0))
		}
		time.Sleep(time.Microsecond)
	}
	dmasync.Observe()
	c, err := dsahw.DecodeCompletion(r.mem[dsaRecs+32*i:])
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *dsaRig) desc(op uint8, rec int, src, dst uint64, n uint32) dsahw.Descriptor {
	return dsahw.Descriptor{Op: op, Flags: dsahw.FlagCRAV | dsahw.FlagRCR, Compl: r.iova(dsaRecs + 32*rec), Src: src, Dst: dst, Size: n}
}

func (r *dsaRig) noViolations() {
	r.t.Helper()
	if s := r.p.Stats(0); s.Violations != 0 {
		r.t.Fatalf("%d violations, last: %s", s.Violations, s.LastViolation)
	}
}

func TestDSAOperations(t *testing.T) {
	r := newDSARig(t, DSAOptions{MaxXferShift: 16})
	r.configure(16)
	for i := range r.mem[dsaData:] {
		r.mem[dsaData+i] = byte(i * 7)
	}
	src, dst := r.iova(dsaData), r.iova(dsaData+256<<10)

	r.submit(r.desc(dsahw.OpMemMove, 0, src, dst, 5000))
	if c := r.wait(0); !c.OK() || !bytes.Equal(r.mem[dsaData+256<<10:][:5000], r.mem[dsaData:][:5000]) {
		t.Fatalf("memmove: %+v", c)
	}
	r.submit(r.desc(dsahw.OpFill, 1, 0x0807060504030201, dst, 20))
	if c := r.wait(1); !c.OK() || r.mem[dsaData+256<<10+9] != 2 {
		t.Fatalf("fill: %+v % x", c, r.mem[dsaData+256<<10:][:20])
	}
	r.submit(r.desc(dsahw.OpCompare, 2, src+100, dst+100, 4000))
	if c := r.wait(2); !c.OK() || c.Result != 0 {
		t.Fatalf("compare equal: %+v", c)
	}
	r.mem[dsaData+256<<10+1000] ^= 0xFF
	r.submit(r.desc(dsahw.OpCompare, 3, src+100, dst+100, 4000))
	if c := r.wait(3); c.Result != 1 || c.Bytes != 900 {
		t.Fatalf("compare different: %+v", c)
	}
	d := r.desc(dsahw.OpCRCGen, 4, src, 0, 3000)
	binary.LittleEndian.PutUint32(d.OpSpec[:], 7)
	r.submit(d)
	if c := r.wait(4); !c.OK() || uint32(c.CRC) != dsahw.CRC32C(7, r.mem[dsaData:][:3000]) {
		t.Fatalf("crc: %+v", c)
	}
	r.noViolations()
}

func TestDSAErrors(t *testing.T) {
	r := newDSARig(t, DSAOptions{MaxXferShift: 16, NoCRC: true})
	r.configure(16)
	src, dst := r.iova(dsaData), r.iova(dsaData+256<<10)
	cases := []struct {
		name string
		d    dsahw.Descriptor
		want uint8
	}{
		{"bad opcode", r.desc(0x3F, 0, src, dst, 64), dsahw.StatusBadOpcode},
		{"CRC not in OPCAP", r.desc(dsahw.OpCRCGen, 1, src, 0, 64), dsahw.StatusBadOpcode},
		{"over max_xfer_shift", r.desc(dsahw.OpMemMove, 2, src, dst, 1<<16+1), dsahw.StatusXferERange},
		{"size 0", r.desc(dsahw.OpMemMove, 3, src, dst, 0), dsahw.StatusXferERange},
		{"batch of 1", r.desc(dsahw.OpBatch, 4, r.iova(dsaList), 0, 1), dsahw.StatusDescCntERange},
	}
	for i, c := range cases {
		r.submit(c.d)
		if got := r.wait(i); got.Status != c.want {
			t.Errorf("%s: status %s, want %s", c.name, dsahw.StatusString(got.Status), dsahw.StatusString(c.want))
		}
	}
	// Page fault: the source runs past the mapping's end.
	end := r.iova(len(r.mem))
	r.submit(r.desc(dsahw.OpMemMove, 5, end-3000, dst, 8192))
	if c := r.wait(5); c.Status != dsahw.StatusPageFault || c.Bytes != 3000 || c.Fault != end || c.Write {
		t.Errorf("page fault: %+v, want 3000 bytes done and a read fault at %#x", c, end)
	}
	if !bytes.Equal(r.mem[256<<10+dsaData:][:3000], r.mem[len(r.mem)-3000:]) {
		t.Error("page fault: the bytes before the fault were not copied")
	}
	// A misaligned completion record goes to SWERR.
	r.regs.Write32(dsahw.RegGenCtrl, dsahw.GenCtrlSoftErrIntEn)
	irqs, err := r.f.EnableInterrupts(2)
	if err != nil {
		t.Fatal(err)
	}
	bad := r.desc(dsahw.OpNoop, 6, 0, 0, 0)
	bad.Compl += 8
	r.submit(bad)
	if n, _ := irqs[0].WaitTimeout(2 * time.Second); n == 0 {
		t.Fatal("no error interrupt on vector 0")
	}
	sw := r.regs.Read64(dsahw.RegSWErr)
	if sw&dsahw.SWErrValid == 0 || uint8(sw>>dsahw.SWErrCodeShift) != dsahw.StatusCRAAlign {
		t.Fatalf("SWERR %#x, want valid with code %#x", sw, dsahw.StatusCRAAlign)
	}
	r.regs.Write64(dsahw.RegSWErr, dsahw.SWErrValid|dsahw.SWErrOverflow)
	if r.regs.Read64(dsahw.RegSWErr) != 0 {
		t.Fatal("SWERR not cleared by writing valid back")
	}
	// A completion interrupt on the WQ's vector.
	ok := r.desc(dsahw.OpNoop, 7, 0, 0, 0)
	ok.Flags |= dsahw.FlagRCI
	ok.IntH = 1
	r.submit(ok)
	if n, _ := irqs[1].WaitTimeout(2 * time.Second); n == 0 || !r.wait(7).OK() {
		t.Fatal("no completion interrupt on vector 1")
	}
	r.noViolations()
}

func TestDSABatch(t *testing.T) {
	r := newDSARig(t, DSAOptions{})
	r.configure(8)
	for i := 0; i < 4096; i++ {
		r.mem[dsaData+i] = byte(i)
	}
	list := r.mem[dsaList:]
	for i := 0; i < 4; i++ {
		d := r.desc(dsahw.OpMemMove, 1+i, r.iova(dsaData+1024*i), r.iova(dsaData+8192+1024*i), 1024)
		d.Flags = dsahw.FlagCRAV // records only on failure
		if i == 2 {
			d.Op = 0x3E // fails
			d.Flags |= dsahw.FlagRCR
		}
		d.Encode(list[64*i:])
	}
	r.submit(r.desc(dsahw.OpBatch, 0, r.iova(dsaList), 0, 4))
	c := r.wait(0)
	if c.Status != dsahw.StatusBatchFail || c.Bytes != 4 {
		t.Fatalf("batch: %+v, want batch-fail after 4 descriptors", c)
	}
	if s := r.wait(3).Status; s != dsahw.StatusBadOpcode {
		t.Fatalf("member 2: %s", dsahw.StatusString(s))
	}
	if !bytes.Equal(r.mem[dsaData+8192+3072:][:1024], r.mem[dsaData+3072:][:1024]) {
		t.Fatal("member 3 did not run")
	}
	r.noViolations()
}

// TestDSAMisconfiguration checks the command errors and the violations of
// a driver that misprograms the device.
func TestDSAMisconfiguration(t *testing.T) {
	grpOff, wqOff := dsaGrpCfgOff, dsaWQCfgOff
	t.Run("GroupWithoutEngine", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{})
		r.regs.Write64(grpOff, 1)
		r.regs.Write32(wqOff, 8)
		if c := r.cmd(dsahw.CmdEnableDevice, 0); c != dsahw.CmdErrGrpConfig {
			t.Fatalf("enable: %s", dsahw.CmdErrString(c))
		}
	})
	t.Run("WQSizesOverTotal", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{TotalWQSize: 32})
		r.regs.Write32(wqOff, 20)
		r.regs.Write32(wqOff+32, 20)
		if c := r.cmd(dsahw.CmdEnableDevice, 0); c != dsahw.CmdErrWQSizeERange {
			t.Fatalf("enable: %s", dsahw.CmdErrString(c))
		}
	})
	t.Run("WQSizeZero", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{})
		r.regs.Write64(grpOff, 1)
		r.regs.Write64(grpOff+dsahw.GrpCfgEngines, 1)
		r.regs.Write32(wqOff+dsahw.WQCfgMode, dsahw.WQModeDedic|1<<dsahw.WQPrioShift)
		if c := r.cmd(dsahw.CmdEnableDevice, 0); c != 0 {
			t.Fatal(dsahw.CmdErrString(c))
		}
		if c := r.cmd(dsahw.CmdEnableWQ, 0); c != dsahw.CmdErrWQSize {
			t.Fatalf("enable WQ: %s", dsahw.CmdErrString(c))
		}
	})
	t.Run("WQOverTotalAfterEnable", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{TotalWQSize: 32})
		r.configure(20)
		// Put WQ 1 (8 entries) in group 0 too, with the device disabled.
		if c := r.cmd(dsahw.CmdDisableDevice, 0); c != 0 {
			t.Fatal(dsahw.CmdErrString(c))
		}
		r.regs.Write64(grpOff, 3)
		r.regs.Write32(wqOff+32, 8)
		r.regs.Write32(wqOff+32+dsahw.WQCfgMode, dsahw.WQModeDedic|1<<dsahw.WQPrioShift)
		r.regs.Write32(wqOff+32+dsahw.WQCfgLimits, dsahw.WQLimits(16, 5))
		if c := r.cmd(dsahw.CmdEnableDevice, 0); c != 0 {
			t.Fatal(dsahw.CmdErrString(c))
		}
		if c := r.cmd(dsahw.CmdEnableWQ, 0); c != 0 {
			t.Fatal(dsahw.CmdErrString(c))
		}
		r.regs.Write32(wqOff+32, 16) // WQ 1 is disabled: its WQCFG is writable
		r.noViolations()
		if c := r.cmd(dsahw.CmdEnableWQ, 1); c != dsahw.CmdErrWQSize {
			t.Fatalf("enable WQ 1 past the total: %s", dsahw.CmdErrString(c))
		}
		if s := r.p.Stats(0); s.Violations != 1 {
			t.Fatalf("stats %+v, want the enable recorded", s)
		}
	})
	t.Run("CommandWhileActive", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{CommandDelay: time.Second})
		r.regs.Write32(dsahw.RegCmd, dsahw.Command(dsahw.CmdResetDevice, 0))
		r.regs.Write32(dsahw.RegCmd, dsahw.Command(dsahw.CmdEnableDevice, 0))
		s := r.p.Stats(0)
		if s.Violations != 1 || !strings.Contains(s.LastViolation, "active") {
			t.Fatalf("stats %+v", s)
		}
		if r.regs.Read32(dsahw.RegGenSts)&3 != dsahw.StateDisabled {
			t.Fatal("the command written while active was executed")
		}
	})
	t.Run("OverfilledDedicatedWQ", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{})
		r.configure(4)
		dv := r.p.devs[0]
		dv.paused.Store(true) // the engine takes nothing while the test fills the WQ
		for i := 0; i < 5; i++ {
			r.submit(r.desc(dsahw.OpNoop, i, 0, 0, 0))
		}
		s := r.p.Stats(0)
		if s.Dropped != 1 || s.Violations != 1 || !strings.Contains(s.LastViolation, "full dedicated WQ") {
			t.Fatalf("stats %+v, want the fifth descriptor dropped and recorded", s)
		}
		dv.paused.Store(false)
		for i := 0; i < 4; i++ {
			if !r.wait(i).OK() {
				t.Fatalf("descriptor %d failed", i)
			}
		}
		if load32(r.mem[dsaRecs+32*4:]) != 0 {
			t.Fatal("the dropped descriptor completed")
		}
	})
	t.Run("SmallPortalWrite", func(t *testing.T) {
		r := newDSARig(t, DSAOptions{})
		r.configure(4)
		r.portal.Write64(0, 1)
		if s := r.p.Stats(0); s.Violations != 1 || s.Dropped != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

// FuzzDSARegisters drives the DSA model with a program of register
// writes, commands and portal writes of descriptors built from the input
// (addresses folded into a mapped window). The oracle is the spec, not the
// model: the device never writes memory outside the window, GENSTS only
// says disabled or enabled (nothing here drains or halts it), CMDSTS only
// carries error codes uapi/registers.h define, and Close returns.
func FuzzDSARegisters(f *testing.F) {
	// Reset, group 0 = WQ 0 + engine 0, WQ 0 of 8 entries, enable, one move.
	f.Add([]byte{
		2, 0xA0, 0, 0, 0, 0x50, 0, 0, 0, 0, 0, 0,
		3, 0x00, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0,
		3, 0x20, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0x00, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0x08, 8, 0x11, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0x0C, 8, 0xB4, 0, 0, 0, 0, 0, 0, 0, 0,
		2, 0xA0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0,
		2, 0xA0, 0, 0, 0, 0x60, 0, 0, 0, 0, 0, 0,
		4, 0, 0, 3, 0x0C, 0, 0, 0, 0, 1, 0, 0,
	})
	f.Add([]byte{4, 0, 0, 1, 0x0C, 0, 0, 0, 0, 2, 0, 0, 2, 0xA0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		p, err := NewDSA(DSAOptions{CommandDelay: time.Nanosecond, WQs: 4, Engines: 2, Groups: 2, TotalWQSize: 32, MaxXferShift: 16})
		if err != nil {
			t.Fatal(err)
		}
		const guard, size = 8192, 64 << 10
		whole := make([]byte, 2*guard+size)
		for i := range whole {
			whole[i] = byte(i*131 + 7)
		}
		window := whole[guard : guard+size]
		clear(window)
		before := append(append([]byte(nil), whole[:guard]...), whole[guard+size:]...)
		m, err := p.IOMMU().Map(window)
		if err != nil {
			t.Fatal(err)
		}
		base := m.Segments[0].IOVA
		fn := p.Functions()[0]
		if err := pci.SetCommand(fn, pci.CommandMemory|pci.CommandBusMaster); err != nil {
			t.Fatal(err)
		}
		regs, _ := fn.BAR(0)
		portal, _ := fn.BAR(2)
		known := map[uint8]bool{}
		for c := range cmdErrCodes {
			known[c] = true
		}
		for i := 0; i+12 <= len(prog) && i < 12*64; i += 12 {
			off := int(binary.LittleEndian.Uint16(prog[i+1:]))
			v := binary.LittleEndian.Uint64(prog[i+4:])
			switch prog[i] % 5 {
			case 0:
				_ = regs.Read64(off % 0x1000 &^ 7)
			case 1:
				regs.Write32(0xA0, uint32(v)) // a command
			case 2:
				regs.Write32(0x800+off%0x80&^3, uint32(v)) // WQCFG
			case 3:
				regs.Write64(0x400+off%0x80&^7, v) // GRPCFG
			case 4:
				// A descriptor whose addresses fall in the window.
				in := func(x uint64) uint64 { return base + x%size }
				d := dsahw.Descriptor{Op: prog[i+3] % 0x12, Flags: uint32(prog[i+4]) & 0x1F,
					Compl: in(uint64(prog[i+5]) * 32), Src: in(uint64(prog[i+6]) * 256), Dst: in(uint64(prog[i+7]) * 256),
					Size: uint32(prog[i+8]) * 64, IntH: uint16(prog[i+9] % 3)}
				if d.Op == dsahw.OpFill {
					d.Src = v
				}
				var rec [64]byte
				d.Encode(rec[:])
				portal.WritePortal(dsahw.PortalOffset(int(prog[i+10]%4)), &rec)
			}
			if st := regs.Read32(dsahw.RegGenSts) & dsahw.StateMask; st > dsahw.StateEnabled {
				t.Fatalf("GENSTS %s after step %d", dsahw.StateName(st), i/12)
			}
			if code := uint8(regs.Read32(dsahw.RegCmdSts)); !known[code] {
				t.Fatalf("CMDSTS error code %#x is not one the spec defines", code)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		after := append(append([]byte(nil), whole[:guard]...), whole[guard+size:]...)
		if !bytes.Equal(after, before) {
			t.Fatal("the device wrote memory outside the mapped window")
		}
		if err := p.IOMMU().Unmap(m); err != nil {
			t.Fatal(err)
		}
	})
}

// cmdErrCodes are the CMDSTS error codes of Linux registers.h, written
// out here as the fuzzer's oracle.
var cmdErrCodes = map[uint8]string{
	0x00: "success", 0x01: "invalid command", 0x02: "invalid WQ index", 0x03: "hardware error",
	0x10: "device enabled", 0x11: "config", 0x12: "bus master", 0x13: "PASID invalid", 0x14: "WQ size range",
	0x15: "group config", 0x16: "group config 2", 0x17: "group config 3", 0x18: "group config 4",
	0x20: "device not enabled", 0x21: "WQ enabled", 0x22: "WQ size", 0x23: "WQ priority", 0x24: "WQ mode",
	0x25: "BOF", 0x26: "PASID enable", 0x27: "max batch", 0x28: "max transfer",
	0x31: "disable: device not enabled", 0x32: "WQ not enabled",
}

// TestDSAKernelPortal: the portal of the SVA model's user WQs takes
// ENQCMD on a shared WQ until it is full (then answers retry), refuses
// ENQCMD to a dedicated WQ and drops MOVDIR64B to a shared one, each a
// violation; a platform without SVA has no kernel side.
func TestDSAKernelPortal(t *testing.T) {
	p, err := NewDSA(DSAOptions{SVA: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.ConfigureKernel(0, []KernelWQ{{Size: 2, Shared: true}, {Size: 2}}); err != nil {
		t.Fatal(err)
	}
	p.Hold(0, true) // nothing leaves the WQs
	shared, _ := p.UserPortal(0, 0)
	dedicated, _ := p.UserPortal(0, 1)
	var rec [64]byte
	binary.LittleEndian.PutUint32(rec[dsahw.DescOffFlags:], uint32(dsahw.OpNoop)<<24)
	for i := 0; i < 2; i++ {
		if !shared.Enqueue(&rec) {
			t.Fatalf("the shared WQ refused descriptor %d while it had room", i)
		}
	}
	if shared.Enqueue(&rec) || shared.Refused() != 1 {
		t.Fatalf("the full shared WQ took a third descriptor (refused %d)", shared.Refused())
	}
	if s := p.Stats(0); s.Violations != 0 {
		t.Fatalf("a full shared WQ is no violation: %s", s.LastViolation)
	}
	if dedicated.Enqueue(&rec) || p.Stats(0).Violations != 1 {
		t.Errorf("ENQCMD to a dedicated WQ: %+v", p.Stats(0))
	}
	shared.Write64B(&rec)
	if s := p.Stats(0); s.Violations != 2 || s.Dropped != 1 || !strings.Contains(s.LastViolation, "shared WQs take ENQCMD only") {
		t.Errorf("MOVDIR64B to a shared WQ: %+v", s)
	}
	p.Hold(0, false)

	q, _ := NewDSA(DSAOptions{})
	defer q.Close()
	if err := q.ConfigureKernel(0, []KernelWQ{{Size: 2}}); err == nil || !strings.Contains(err.Error(), "SVA") {
		t.Errorf("ConfigureKernel without SVA: %v", err)
	}
	if _, err := q.UserPortal(0, 0); err == nil {
		t.Error("UserPortal without SVA")
	}
	if err := q.IOMMU().Touch(1<<32, false); !errors.Is(err, pci.ErrNotSupported) {
		t.Errorf("Touch on an IOMMU: %v", err)
	}
}

// TestDSABandwidthCap: a capped DSA takes at least the capped time for a
// transfer and lands the bytes only then; the cap is per function.
func TestDSABandwidthCap(t *testing.T) {
	r := newDSARig(t, DSAOptions{Bandwidth: 10 << 20}) // 10 MiB/s: 32 KiB takes ~3ms
	r.configure(16)
	for i := range 32 << 10 {
		r.mem[dsaData+i] = byte(i)
	}
	t0 := time.Now()
	r.submit(r.desc(dsahw.OpMemMove, 0, r.iova(dsaData), r.iova(dsaData+32<<10), 32<<10))
	if c := r.wait(0); c.Status != dsahw.StatusSuccess {
		t.Fatalf("status %#x", c.Status)
	}
	if el := time.Since(t0); el < 2*time.Millisecond {
		// A floor the cap promises, not a timing assertion on speed.
		t.Fatalf("32 KiB at 10 MiB/s completed in %v", el)
	}
	if !bytes.Equal(r.mem[dsaData:dsaData+32<<10], r.mem[dsaData+32<<10:dsaData+64<<10]) {
		t.Fatal("capped move copied the wrong bytes")
	}
	r.p.SetBandwidth(0, 0) // lifted: the next completes without the floor
	r.submit(r.desc(dsahw.OpMemMove, 1, r.iova(dsaData), r.iova(dsaData+32<<10), 32<<10))
	if c := r.wait(1); c.Status != dsahw.StatusSuccess {
		t.Fatalf("status %#x", c.Status)
	}
	r.noViolations()
	if _, err := NewDSA(DSAOptions{Bandwidth: -1}); err == nil {
		t.Error("negative bandwidth accepted")
	}
}

// TestDSASharedIOMMU: a DSA behind a CBDMA model's IOMMU executes on
// mappings made there, so one engine can drive both; options that would
// give it an address space of its own are refused.
func TestDSASharedIOMMU(t *testing.T) {
	cb, err := NewCBDMA(CBDMAOptions{Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	p, err := NewDSA(DSAOptions{IOMMU: cb.IOMMU()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.IOMMU() != cb.IOMMU() || p.Devices()[0].DMA() != cb.Devices()[0].DMA() {
		t.Fatal("the DSA is not in the CBDMA model's DMA domain")
	}
	for _, o := range []DSAOptions{{IOMMU: cb.IOMMU(), SVA: true}, {IOMMU: cb.IOMMU(), Scatter: true}, {IOMMU: cb.IOMMU(), IOVABase: 1 << 40}} {
		if q, err := NewDSA(o); err == nil {
			q.Close()
			t.Errorf("%+v accepted with a shared IOMMU", o)
		}
	}
}
