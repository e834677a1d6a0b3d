package emulated

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// fuzzMem is the memory a fuzzer gives the model: one mapped window with
// unmapped guard memory on both sides, kept by the test so it knows, apart
// from the model's IOMMU, which IOVAs are mapped and which bytes the
// device may touch.
type fuzzMem struct {
	whole  []byte // guard | window | guard
	window []byte
	m      *pci.Mapping
	iova   uint64 // IOVA of window[0]
	guard  []byte // the guards' pattern, to compare after
}

const fuzzGuard = 64 << 10

func newFuzzMem(t *testing.T, p *CBDMA, size int) *fuzzMem {
	fm := &fuzzMem{whole: make([]byte, 2*fuzzGuard+size)}
	for i := range fm.whole {
		fm.whole[i] = byte(i*131 + 7)
	}
	fm.window = fm.whole[fuzzGuard : fuzzGuard+size : fuzzGuard+size]
	for i := range fm.window {
		fm.window[i] = 0
	}
	var err error
	if fm.m, err = p.IOMMU().Map(fm.window); err != nil {
		t.Fatal(err)
	}
	if len(fm.m.Segments) != 1 {
		t.Fatalf("window mapped in %d segments", len(fm.m.Segments))
	}
	fm.iova = fm.m.Segments[0].IOVA
	fm.guard = append(append([]byte(nil), fm.whole[:fuzzGuard]...), fm.whole[fuzzGuard+size:]...)
	return fm
}

// mapped tells whether [iova, iova+n) lies in the window, by the test's
// own map.
func (fm *fuzzMem) mapped(iova, n uint64) bool {
	return iova >= fm.iova && n <= uint64(len(fm.window)) && iova-fm.iova <= uint64(len(fm.window))-n
}

func (fm *fuzzMem) at(iova uint64, n uint64) []byte {
	o := iova - fm.iova
	return fm.window[o : o+n]
}

// checkGuards fails when any byte outside the mapped window changed: DMA
// outside mapped memory.
func (fm *fuzzMem) checkGuards(t *testing.T) {
	t.Helper()
	after := append(append([]byte(nil), fm.whole[:fuzzGuard]...), fm.whole[len(fm.whole)-fuzzGuard:]...)
	if !bytes.Equal(after, fm.guard) {
		t.Fatal("the device wrote memory outside the mapped window")
	}
}

// oracle is the test's own reading of the descriptor rules (spec §3,
// §4.5; Linux hw.h for the control-bit layouts), written apart from
// hw.Descriptor.Validate: it returns the CHANERR bit the engine raises
// first, and the bytes the destination must hold when it raises none.
type piece struct{ addr, n uint64 }

func split(addr, next, size uint64, brk bool) []piece {
	if !brk || size <= 4096-addr%4096 {
		return []piece{{addr, size}}
	}
	first := 4096 - addr%4096
	return []piece{{addr, first}, {next, size - first}}
}

func oracle(fm *fuzzMem, raw []byte) (bit uint32, dst []piece, want []byte) {
	le := binary.LittleEndian
	size := uint64(le.Uint32(raw[0:]))
	ctl := le.Uint32(raw[4:])
	src, dstA := le.Uint64(raw[8:]), le.Uint64(raw[16:])
	next := le.Uint64(raw[24:])
	nsrc, ndst := le.Uint64(raw[32:]), le.Uint64(raw[40:])
	op := ctl >> 24
	null := ctl&(1<<5) != 0
	srcBrk, dstBrk := ctl&(1<<6) != 0, ctl&(1<<7) != 0
	switch op {
	case 0: // copy: bits 23:11 reserved, bit 8 (bundle) unsupported
		if ctl&0x00FFF800 != 0 || ctl&(1<<8) != 0 {
			return 1 << 10, nil, nil
		}
	case 1: // fill: bits 23:8, 6:5 and 1 reserved or unsupported
		if ctl&0x00FFFF00 != 0 || ctl&0x62 != 0 {
			return 1 << 10, nil, nil
		}
	default:
		return 1 << 10, nil, nil
	}
	if size == 0 || size > 1<<20 {
		return 1 << 11, nil, nil
	}
	if next%64 != 0 {
		return 1 << 3, nil, nil
	}
	if null {
		return 0, nil, nil
	}
	const top = 0xFFFF << 48
	if op == 0 && (src&top != 0 || src+size < src || srcBrk && nsrc&top != 0) {
		return 1 << 0, nil, nil
	}
	if dstA&top != 0 || dstA+size < dstA || dstBrk && ndst&top != 0 {
		return 1 << 1, nil, nil
	}
	want = make([]byte, 0, size)
	if op == 0 {
		for _, p := range split(src, nsrc, size, srcBrk) {
			if !fm.mapped(p.addr, p.n) {
				return 1 << 8, nil, nil
			}
			want = append(want, fm.at(p.addr, p.n)...)
		}
	} else {
		for i := uint64(0); i < size; i++ {
			want = append(want, byte(src>>(8*(i%8))))
		}
	}
	dst = split(dstA, ndst, size, dstBrk)
	for _, p := range dst {
		if !fm.mapped(p.addr, p.n) {
			return 1 << 9, nil, nil
		}
	}
	return 0, dst, want
}

// FuzzDescriptor feeds arbitrary 64-byte descriptors to a CB 3.3 channel
// and holds the outcome to the oracle: the CHANERR bit it names, or the
// destination bytes it computes, and no byte changed outside the
// destination.
func FuzzDescriptor(f *testing.F) {
	seed := func(d hw.Descriptor) {
		b := make([]byte, 64)
		d.Encode(b)
		f.Add(b)
	}
	seed(hw.Descriptor{Size: 64, Ctl: hw.OpCopy << hw.CtlOpShift})
	seed(hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlComplWrite})
	seed(hw.Descriptor{Size: 100, Ctl: hw.OpFill<<hw.CtlOpShift | hw.CtlFence, Src: 0xAA55})
	seed(hw.Descriptor{Size: 5000, Ctl: hw.CtlSrcPageBreak | hw.CtlDstPageBreak, Src: 4000, NextSrc: 20000, Dst: 9000, NextDst: 40000})
	seed(hw.Descriptor{Size: 0})
	seed(hw.Descriptor{Size: 1 << 30, Ctl: 0x87 << hw.CtlOpShift})
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) < 64 {
			return
		}
		p, err := NewCBDMA(CBDMAOptions{Channels: 1, Version: hw.Ver33})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		fm := newFuzzMem(t, p, 192<<10)
		defer p.IOMMU().Unmap(fm.m)
		// Memory: ring at 0, completion at 1024, data from 4 KiB. Address
		// fields with their low bit clear are pointed into the window
		// (low bit set: taken as they are), so data paths run.
		d := append([]byte(nil), raw[:64]...)
		le := binary.LittleEndian
		for _, off := range []int{8, 16, 32, 40} {
			if v := le.Uint64(d[off:]); v&1 == 0 {
				le.PutUint64(d[off:], fm.iova+4096+v%(180<<10))
			}
		}
		le.PutUint64(d[24:], fm.iova+64) // next: slot 1
		if raw[0]&1 == 1 {
			le.PutUint32(d[0:], le.Uint32(d[0:])%(64<<10))
		}
		for i := 4096; i < len(fm.window); i++ {
			fm.window[i] = byte(i * 7)
		}
		copy(fm.window, d)
		bit, dst, want := oracle(fm, d)
		before := append([]byte(nil), fm.window[2048:]...)

		f := p.Functions()[0]
		if err := pci.SetCommand(f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
			t.Fatal(err)
		}
		regs, _ := f.BAR(0)
		b := hw.ChannelBase(0)
		regs.Write16(b+hw.ChanCtrl, hw.CtrlErrCmplEn|hw.CtrlAnyErrAbortEn)
		regs.Write64(b+hw.ChanCmp, fm.iova+1024)
		regs.Write64(b+hw.ChanChainAddr, fm.iova)
		regs.Write16(b+hw.ChanDMACount, 1)
		deadline := time.Now().Add(10 * time.Second)
		var st hw.State
		for {
			st = hw.StatusState(regs.Read64(b + hw.ChanSts))
			if st == hw.StateIdle || st == hw.StateHalted {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("descriptor % x neither completed nor halted", d)
			}
			time.Sleep(time.Microsecond)
		}
		chanerr := regs.Read32(b + hw.ChanErr)
		if bit != 0 {
			if st != hw.StateHalted || chanerr != bit {
				t.Fatalf("descriptor % x: state %v CHANERR %s, oracle wants HALTED with %s", d, st, hw.ErrString(chanerr), hw.ErrString(bit))
			}
			if !bytes.Equal(before, fm.window[2048:]) {
				t.Fatalf("refused descriptor % x changed memory", d)
			}
		} else {
			if st != hw.StateIdle || chanerr != 0 {
				t.Fatalf("descriptor % x: state %v CHANERR %s, oracle wants it executed", d, st, hw.ErrString(chanerr))
			}
			// Expected memory: the snapshot with the destination pieces
			// overwritten by the oracle's bytes (later pieces win, as
			// they are written later).
			exp := before
			o := uint64(0)
			for _, pc := range dst {
				copy(exp[pc.addr-fm.iova-2048:], want[o:o+pc.n])
				o += pc.n
			}
			if !overlap(fm, d, dst) && !bytes.Equal(exp, fm.window[2048:]) {
				t.Fatalf("descriptor % x: memory differs from the oracle's", d)
			}
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		fm.checkGuards(t)
	})
}

// overlap tells whether a copy's source pieces overlap its destination
// (the result then depends on the engine's copy order; only the outcome is
// checked).
func overlap(fm *fuzzMem, d []byte, dst []piece) bool {
	le := binary.LittleEndian
	ctl := le.Uint32(d[4:])
	if ctl>>24 != 0 {
		return false
	}
	src := split(le.Uint64(d[8:]), le.Uint64(d[32:]), uint64(le.Uint32(d[0:])), ctl&(1<<6) != 0)
	for _, s := range src {
		for _, w := range dst {
			if s.addr < w.addr+w.n && w.addr < s.addr+s.n {
				return true
			}
		}
	}
	return false
}

// FuzzRegisterWrites applies arbitrary register and config accesses to a
// channel whose window holds a ring of valid copies and fills: the model
// may halt or record violations, but must not panic, deadlock, or touch a
// byte outside the mapped window (checked against the guards the test
// keeps on both sides).
func FuzzRegisterWrites(f *testing.F) {
	f.Add([]byte{0x86, 0, 1, 0x0D, 0, 0, 0, 0, 0, 0, 0x84, 0, 8, 0x20, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x90, 0, 3, 0x40, 0, 0, 0, 1, 0, 0, 0, 0x86, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0})
	// CHANCTRL, CHANCMP and CHAINADDR into the window, then DMACOUNT 40.
	f.Add([]byte{
		0x80, 0, 1, 0x0C, 0, 0, 0, 0, 0, 0, 0,
		0x98, 0, 3 | 0x80, 0, 4, 0, 0, 0, 0, 0, 0,
		0x90, 0, 3 | 0x80, 0, 0, 0, 0, 0, 0, 0, 0,
		0x86, 0, 1, 40, 0, 0, 0, 0, 0, 0, 0,
	})
	f.Fuzz(func(t *testing.T, prog []byte) {
		ver := []uint8{hw.Ver32, hw.Ver33, hw.Ver34}[len(prog)%3]
		p, err := NewCBDMA(CBDMAOptions{Channels: 1, Version: ver, ResetDelay: time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		fm := newFuzzMem(t, p, 64<<10)
		// A 32-entry ring of valid descriptors at 0, completion at 4 KiB,
		// data from 8 KiB.
		for i := 0; i < 32; i++ {
			d := hw.Descriptor{Size: 1024, Ctl: uint32(i%2) << hw.CtlOpShift, Src: fm.iova + 8192 + uint64(i)*512, Dst: fm.iova + 32<<10 + uint64(i)*512,
				Next: fm.iova + uint64((i+1)%32)*64}
			if i%5 == 0 {
				d.Ctl |= hw.CtlComplWrite
			}
			d.Encode(fm.window[i*64:])
		}
		f := p.Functions()[0]
		regs, _ := f.BAR(0)
		for i := 0; i+11 <= len(prog) && i < 11*64; i += 11 {
			off := int(binary.LittleEndian.Uint16(prog[i:])) % 0x200
			v := binary.LittleEndian.Uint64(prog[i+3:])
			if prog[i+2]&0x80 != 0 {
				v = fm.iova + v%uint64(len(fm.window)) // an address in the window
			}
			switch prog[i+2] & 0x7F % 6 {
			case 0:
				regs.Write8(off, uint8(v))
			case 1:
				regs.Write16(off&^1, uint16(v))
			case 2:
				regs.Write32(off&^3, uint32(v))
			case 3:
				regs.Write64(off&^7, v)
			case 4:
				_ = regs.Read64(off &^ 7)
			case 5:
				var b [4]byte
				binary.LittleEndian.PutUint32(b[:], uint32(v))
				_ = f.WriteConfig(off&^3, b[:])
			}
		}
		// Close must return (no deadlock with a running channel); after
		// it no DMA happens, so the guards are final.
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		fm.checkGuards(t)
		if err := p.IOMMU().Unmap(fm.m); err != nil {
			t.Fatal(err)
		}
	})
}
