package emulated

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// The tests in this file hold the model to what the reference drivers
// (Linux drivers/dma/ioat, SPDK lib/ioat, DPDK drivers/dma/ioat) show real
// CBDMA accepts and refuses; the package doc's table names the reference
// for each row.

// noViolations fails the test when the model recorded any violation.
func (r *rig) noViolations() {
	r.t.Helper()
	if s := r.p.Stats(0); s.Violations != 0 {
		r.t.Fatalf("%d violations, last: %s", s.Violations, s.LastViolation)
	}
}

// wantHalt waits, bounded, for the channel to halt and fails the test
// unless CHANERR then holds bit (what names it).
func (r *rig) wantHalt(bit uint32, what string) {
	r.t.Helper()
	r.waitState(hw.StateHalted)
	if e := r.regs.Read32(r.ch(hw.ChanErr)); e&bit == 0 {
		r.t.Fatalf("CHANERR %s, want %s", hw.ErrString(e), what)
	}
}

func (r *rig) wantViolation(what string) {
	r.t.Helper()
	if s := r.p.Stats(0); s.Violations == 0 {
		r.t.Fatalf("%s: no violation recorded", what)
	}
}

func (r *rig) resetAndWait() {
	r.t.Helper()
	r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdReset)
	deadline := time.Now().Add(5 * time.Second)
	for r.regs.Read8(r.ch(hw.ChanCmd))&hw.CmdReset != 0 {
		if time.Now().After(deadline) {
			r.t.Fatal("RESET did not clear")
		}
		time.Sleep(time.Microsecond)
	}
}

// TestWideAccessesBelow33 drives a CB 3.2 channel with 64-bit accesses to
// CHANSTS, CHAINADDR and CHANCMP, as SPDK (spdk_mmio_read_8 of chansts,
// 64-bit chainaddr/chancmp stores) and DPDK (64-bit register struct
// fields) do on every version, BDX 0x6F20 included.
func TestWideAccessesBelow33(t *testing.T) {
	r := newRig(t, CBDMAOptions{Version: hw.Ver32})
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlComplWrite})
	r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlErrCmplEn|hw.CtrlAnyErrAbortEn)
	r.regs.Write64(r.ch(hw.ChanCmp), r.iova(rigComp))
	r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
	if got := r.regs.Read64(r.ch(hw.ChanChainAddr)); got != r.iova(rigRing) {
		t.Fatalf("CHAINADDR reads %#x, want %#x", got, r.iova(rigRing))
	}
	if got := r.regs.Read64(r.ch(hw.ChanCmp)); got != r.iova(rigComp) {
		t.Fatalf("CHANCMP reads %#x, want %#x", got, r.iova(rigComp))
	}
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	sts := r.waitState(hw.StateIdle)
	if hw.StatusAddr(sts) != r.iova(rigRing) {
		t.Fatalf("64-bit CHANSTS read %#x lost its high dword", sts)
	}
	r.noViolations()
}

// TestChanstsHalvesLatched: reading the low dword of CHANSTS latches the
// high dword, so a 32-bit driver never sees two halves of different
// values.
func TestChanstsHalvesLatched(t *testing.T) {
	r := newRig(t, CBDMAOptions{Version: hw.Ver32, IOVABase: 0xFFFFF000})
	// The ring straddles 2^32 so consecutive descriptors differ in the
	// high dword.
	lo0 := r.iova(rigRing)
	if lo0>>32 == r.iova(rigData)>>32 {
		t.Skipf("rig memory at %#x does not straddle 4 GiB", lo0)
	}
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
	lo := r.regs.Read32(r.ch(hw.ChanSts))
	// The channel moves on between the two reads.
	c := r.p.chans[0]
	c.mu.Lock()
	c.lastDone = r.iova(rigData)
	c.setState(hw.StateIdle)
	c.mu.Unlock()
	hi := r.regs.Read32(r.ch(hw.ChanSts) + 4)
	if got := uint64(hi)<<32 | uint64(lo); hw.StatusAddr(got) != r.iova(rigRing) {
		t.Fatalf("CHANSTS halves read as %#x: the high half was not latched by the low read", got)
	}
}

// TestDPDKRecoveryWithoutPolling follows DPDK's __ioat_recover: RESET,
// then CHAINADDR, CHANCTRL and CHANCMP at once, without polling RESET,
// then waits for ARMED.
func TestDPDKRecoveryWithoutPolling(t *testing.T) {
	for _, ver := range []uint8{hw.Ver32, hw.Ver33, hw.Ver34} {
		r := newRig(t, CBDMAOptions{Version: ver, ResetDelay: 50 * time.Millisecond})
		r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlComplWrite})
		r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdReset)
		r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
		r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlAnyErrAbortEn|hw.CtrlErrCmplEn)
		r.regs.Write64(r.ch(hw.ChanCmp), r.iova(rigComp))
		r.waitState(hw.StateArmed)
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		r.waitState(hw.StateIdle)
		r.noViolations()
	}
}

// TestChainAddrZero: DPDK's probe writes CHAINADDR = 0 on every iteration
// of its reset loop; no reference treats it as an error.
func TestChainAddrZero(t *testing.T) {
	r := newRig(t, CBDMAOptions{ResetDelay: 5 * time.Millisecond})
	r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdReset)
	for i := 0; i < 1000 && r.regs.Read8(r.ch(hw.ChanCmd))&hw.CmdReset != 0; i++ {
		r.regs.Write64(r.ch(hw.ChanChainAddr), 0)
		time.Sleep(10 * time.Microsecond)
	}
	if e := r.regs.Read32(r.ch(hw.ChanErr)); e != 0 {
		t.Fatalf("CHAINADDR = 0 raised CHANERR %s", hw.ErrString(e))
	}
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
	r.noViolations()
}

// TestAdvertisedFeatures: a descriptor may use what DMACAP advertises:
// page-break on every version, DCA below 3.4 (Linux disables DCA from 3.4
// on, and so does the model's DMACAP).
func TestAdvertisedFeatures(t *testing.T) {
	for _, ver := range []uint8{hw.Ver32, hw.Ver33, hw.Ver34} {
		r := newRig(t, CBDMAOptions{Version: ver})
		cap := r.regs.Read32(hw.RegDMACap)
		if cap&hw.CapPageBreak == 0 {
			t.Fatalf("v%x: no page-break capability", ver)
		}
		src := r.mem[rigData : rigData+8192]
		for i := range src {
			src[i] = byte(i*5 + 1)
		}
		// Source: 100 bytes before the page end, then 200 bytes from the
		// next-source page; destination plain.
		srcA := r.iova(rigData + 4096 - 100)
		srcB := r.iova(rigData + 3*4096)
		want := append(append([]byte(nil), r.mem[rigData+4096-100:rigData+4096]...), r.mem[rigData+3*4096:rigData+3*4096+200]...)
		ctl := uint32(hw.CtlSrcPageBreak)
		if cap&hw.CapDCA != 0 {
			ctl |= hw.CtlDestDCA
		}
		r.desc(0, hw.Descriptor{Size: 300, Ctl: ctl, Src: srcA, NextSrc: srcB, Dst: r.iova(rigData + 64<<10)})
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		r.waitState(hw.StateIdle)
		if got := r.mem[rigData+64<<10 : rigData+64<<10+300]; !bytes.Equal(got, want) {
			t.Fatalf("v%x: page-break copy moved the wrong bytes", ver)
		}
		if ver >= hw.Ver34 && cap&hw.CapDCA != 0 {
			t.Fatalf("v3.4 advertises DCA")
		}
		if cap&hw.CapDCA != 0 {
			off := int(r.regs.Read16(hw.RegDCAOffset))
			if off >= hw.ChannelBase(0) && off < hw.ChannelBase(16)+0x100 {
				t.Fatalf("v%x: DCAOFFSET %#x points into the channel blocks", ver, off)
			}
		}
	}
}

// TestDoorbellMisuse: DMACOUNT moved backwards, past the ring, or rung
// before CHAINADDR is the hardware's descriptor-count error or a recorded
// violation, never thousands of stray descriptors.
func TestDoorbellMisuse(t *testing.T) {
	t.Run("backwards", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		for i := 0; i < 16; i++ {
			r.desc(i, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
		}
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 3)
		r.waitState(hw.StateIdle)
		r.regs.Write16(r.ch(hw.ChanDMACount), 2)
		r.wantHalt(hw.ErrDescCount, "descriptor count")
		if n := r.p.Stats(0).Descriptors; n > 16 {
			t.Fatalf("%d descriptors ran", n)
		}
		r.wantViolation("DMACOUNT moved backwards")
	})
	t.Run("past the ring", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		for i := 0; i < 16; i++ {
			r.desc(i, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
		}
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 100) // the ring has 16
		r.wantHalt(hw.ErrDescCount, "descriptor count")
		if n := r.p.Stats(0).Descriptors; n > 16 {
			t.Fatalf("%d descriptors ran from a 16-entry ring", n)
		}
		r.wantViolation("DMACOUNT past the ring")
	})
	t.Run("before CHAINADDR", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		r.wantViolation("doorbell before CHAINADDR")
	})
}

// TestFillHintReserved: bit 10 is HINT in a copy descriptor but reserved in
// a fill (Linux hw.h, struct ioat_fill_descriptor).
func TestFillHintReserved(t *testing.T) {
	r := newRig(t, CBDMAOptions{})
	r.desc(0, hw.Descriptor{Size: 64, Ctl: hw.OpFill<<hw.CtlOpShift | hw.CtlHint, Dst: r.iova(rigData)})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.wantHalt(hw.ErrDescCtrl, "descriptor control")
}

// TestPrefetch: with DMACAP.DPS (3.4) descriptors are fetched when the
// doorbell is rung, so a rewrite after the doorbell is not seen; below 3.4
// the model fetches at execution, as before.
func TestPrefetch(t *testing.T) {
	r := newRig(t, CBDMAOptions{Version: hw.Ver34, Bandwidth: 1 << 20})
	if r.regs.Read32(hw.RegDMACap)&hw.CapDPS == 0 {
		t.Fatal("3.4 without DPS")
	}
	// Descriptor 0 is slow (32 KiB at 1 MiB/s); descriptor 1 is rewritten
	// while 0 runs.
	r.desc(0, hw.Descriptor{Size: 32 << 10, Src: r.iova(rigData), Dst: r.iova(rigData + 64<<10)})
	r.desc(1, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 2)
	r.desc(1, hw.Descriptor{Size: 0}) // would be a length error if fetched now
	r.waitState(hw.StateIdle)
	if e := r.regs.Read32(r.ch(hw.ChanErr)); e != 0 {
		t.Fatalf("rewritten descriptor was fetched after the doorbell: CHANERR %s", hw.ErrString(e))
	}
}

// TestPrefetchStaleTarget: the engine reads DMACOUNT before it fetches, so
// a doorbell in between may already have fetched past the count it holds.
// Fetching on from that stale count must not read slots no doorbell has
// announced: the driver writes them later, and a descriptor fetched too
// early runs with what the slot held before (here, a length error).
func TestPrefetchStaleTarget(t *testing.T) {
	r := newRig(t, CBDMAOptions{Version: hw.Ver34})
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.desc(1, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 2)
	r.waitState(hw.StateIdle)
	c := r.p.chans[0]
	c.pfMu.Lock()
	c.prefetchLocked(1) // the count the engine read before the doorbell of 2
	fetched := c.pfCount
	c.pfMu.Unlock()
	if fetched != 2 {
		t.Fatalf("a stale doorbell count fetched on to descriptor count %d, want 2", fetched)
	}
	r.desc(2, hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlComplWrite})
	r.regs.Write16(r.ch(hw.ChanDMACount), 3)
	want := r.iova(rigRing + 2*64)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if e := r.regs.Read32(r.ch(hw.ChanErr)); e != 0 {
			t.Fatalf("CHANERR %s after the driver wrote the slot and rang", hw.ErrString(e))
		}
		sts := r.regs.Read64(r.ch(hw.ChanSts))
		if hw.StatusAddr(sts) == want && hw.StatusState(sts) == hw.StateIdle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CHANSTS %#x: descriptor 2 at %#x never completed", sts, want)
		}
		time.Sleep(time.Microsecond)
	}
	r.noViolations()
}

// TestDataLandsAtCompletion: under a bandwidth cap the destination changes
// only when the descriptor completes, so a driver that reads too early
// sees the old bytes, and a descriptor cut short by RESET moves nothing.
func TestDataLandsAtCompletion(t *testing.T) {
	r := newRig(t, CBDMAOptions{Bandwidth: 8 << 10}) // 8 KiB takes a second
	for i := 0; i < 8<<10; i++ {
		r.mem[rigData+i] = 0xAB
	}
	r.desc(0, hw.Descriptor{Size: 8 << 10, Src: r.iova(rigData), Dst: r.iova(rigData + 64<<10)})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateActive)
	if r.mem[rigData+64<<10] == 0xAB {
		t.Fatal("data landed while the descriptor was still in flight")
	}
	// Cut the transfer short: it must never land.
	r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdReset)
	if err := r.p.Close(); err != nil { // waits for the engine to let go
		t.Fatal(err)
	}
	if r.mem[rigData+64<<10] == 0xAB {
		t.Fatal("a descriptor cut short by RESET landed its data")
	}
}

// TestErrorMaskAndAbort: CHANERRMSK keeps a masked error from halting the
// channel; without ANY_ERR_ABORT_EN an error stops the channel without
// halting it. Both are recorded, never silently ignored.
func TestErrorMaskAndAbort(t *testing.T) {
	t.Run("masked", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		r.regs.Write32(r.ch(hw.ChanErrMask), hw.ErrReadData)
		r.desc(0, hw.Descriptor{Size: 8, Src: 0x1000, Dst: r.iova(rigData)}) // unmapped source
		r.desc(1, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 2)
		r.waitState(hw.StateIdle)
		if e := r.regs.Read32(r.ch(hw.ChanErr)); e&hw.ErrReadData == 0 {
			t.Fatalf("masked error not latched in CHANERR (%s)", hw.ErrString(e))
		}
		r.wantViolation("masked copy error")
	})
	t.Run("no abort", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		r.desc(0, hw.Descriptor{Size: 0})
		r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlErrCmplEn)
		r.regs.Write64(r.ch(hw.ChanCmp), r.iova(rigComp))
		r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		deadline := time.Now().Add(5 * time.Second)
		for r.regs.Read32(r.ch(hw.ChanErr)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no CHANERR")
			}
			time.Sleep(time.Microsecond)
		}
		if s := hw.StatusState(r.regs.Read64(r.ch(hw.ChanSts))); s == hw.StateHalted || s == hw.StateIdle {
			t.Fatalf("state %v without ANY_ERR_ABORT_EN: want a stopped, not halted, channel", s)
		}
	})
}

// TestXferCapRange: XFERCAP is a 5-bit field.
func TestXferCapRange(t *testing.T) {
	if _, err := NewCBDMA(CBDMAOptions{XferCap: 32}); err == nil {
		t.Fatal("XFERCAP 32 accepted: the field has 5 bits")
	}
}

// TestMultiChannelFunction: a function with CHANCNT > 1 has one register
// block per channel at 0x80 x (n+1), each an independent engine.
func TestMultiChannelFunction(t *testing.T) {
	r := newRig(t, CBDMAOptions{ChannelsPerFunction: 3, Version: hw.Ver33})
	regs, mem, iova := r.regs, r.mem, r.iova(0)
	if n := regs.Read8(hw.RegChanCnt) & 0x1F; n != 3 {
		t.Fatalf("CHANCNT %d, want 3", n)
	}
	for ch := 0; ch < 3; ch++ {
		base := hw.ChannelBase(ch)
		ring := ch * 1024
		src, dst := 8192+ch*4096, 32768+ch*4096
		mem[src] = byte(ch + 1)
		d := hw.Descriptor{Size: 64, Ctl: hw.CtlComplWrite, Src: iova + uint64(src), Dst: iova + uint64(dst), Next: iova + uint64(ring)}
		d.Encode(mem[ring:])
		regs.Write16(base+hw.ChanCtrl, hw.CtrlAnyErrAbortEn|hw.CtrlErrCmplEn)
		regs.Write64(base+hw.ChanCmp, iova+uint64(ring+512))
		regs.Write64(base+hw.ChanChainAddr, iova+uint64(ring))
		regs.Write16(base+hw.ChanDMACount, 1)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ch := 0; ch < 3; ch++ {
		for hw.StatusState(regs.Read64(hw.ChannelBase(ch)+hw.ChanSts)) != hw.StateIdle {
			if time.Now().After(deadline) {
				t.Fatalf("channel %d never finished", ch)
			}
			time.Sleep(time.Microsecond)
		}
		if mem[32768+ch*4096] != byte(ch+1) {
			t.Fatalf("channel %d did not copy", ch)
		}
		if wb := binary.LittleEndian.Uint64(mem[ch*1024+512:]); hw.StatusAddr(wb) != iova+uint64(ch*1024) {
			t.Fatalf("channel %d write-back %#x", ch, wb)
		}
	}
	r.noViolations()
}

// TestShortConfigSpace: with ConfigSize 256 the function has no extended
// configuration space: reads past it fail, as through some VFIO/UIO
// paths, and there is no CHANERR_INT to clear.
func TestShortConfigSpace(t *testing.T) {
	r := newRig(t, CBDMAOptions{Version: hw.Ver32, ConfigSize: 256})
	if _, err := pci.ReadConfig32(r.f, hw.CfgChanErrInt); err == nil {
		t.Fatal("config 0x180 readable on a 256-byte config space")
	}
	r.desc(0, hw.Descriptor{Size: 0})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateHalted)
	r.regs.Write32(r.ch(hw.ChanErr), r.regs.Read32(r.ch(hw.ChanErr)))
	r.resetAndWait()
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
}

// TestHiddenArmed: a part that never reports ARMED (Linux's registers.h
// defines no such state) still runs a chain after CHAINADDR.
func TestHiddenArmed(t *testing.T) {
	r := newRig(t, CBDMAOptions{HideArmed: true})
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	if s := hw.StatusState(r.regs.Read64(r.ch(hw.ChanSts))); s == hw.StateArmed {
		t.Fatal("HideArmed channel reports ARMED")
	}
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
}

// TestAddr40: Jasper Forest refuses addresses at or above 2^40.
func TestAddr40(t *testing.T) {
	r := newRig(t, CBDMAOptions{DeviceID: 0x3710, Version: hw.Ver32})
	r.desc(0, hw.Descriptor{Size: 8, Src: 1 << 40, Dst: r.iova(rigData)})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.wantHalt(hw.ErrSrcAddr, "source address")
}

// TestInjectHang: an injected hang stops the channel without completing
// (and, with CHANERR bits, flags them without halting) until reset.
func TestInjectHang(t *testing.T) {
	r := newRig(t, CBDMAOptions{})
	r.p.InjectHang(0, 0, hw.ErrChipsetData)
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	deadline := time.Now().Add(5 * time.Second)
	for r.regs.Read32(r.ch(hw.ChanErr)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no CHANERR")
		}
		time.Sleep(time.Microsecond)
	}
	if s := hw.StatusState(r.regs.Read64(r.ch(hw.ChanSts))); s != hw.StateActive {
		t.Fatalf("state %v, want ACTIVE (hung)", s)
	}
	r.regs.Write32(r.ch(hw.ChanErr), 0xFFFFFFFF)
	r.resetAndWait()
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
}
