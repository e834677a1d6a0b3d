package emulated

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// rig is one emulated channel programmed by hand, register by register,
// the way the spec's sequences do it.
type rig struct {
	t    *testing.T
	p    *CBDMA
	f    *Function
	regs pci.Registers
	mem  []byte // ring (16 slots), completion word, data
	m    *pci.Mapping
}

const (
	rigRing = 0
	rigComp = 16 * 64
	rigData = 4096
)

func newRig(t *testing.T, o CBDMAOptions) *rig {
	o.Channels = 1
	p, err := NewCBDMA(o)
	if err != nil {
		t.Fatal(err)
	}
	f := p.Functions()[0]
	regs, _ := f.BAR(0)
	mem := make([]byte, 128<<10)
	m, err := p.IOMMU().Map(mem)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, p: p, f: f, regs: regs, mem: mem, m: m}
	t.Cleanup(func() {
		p.Close()
		p.IOMMU().Unmap(m)
	})
	if err := pci.SetCommand(f, pci.CommandMemory|pci.CommandBusMaster); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) iova(off int) uint64 { return r.m.Segments[0].IOVA + uint64(off) }

func (r *rig) ch(off int) int { return hw.ChannelBase(0) + off }

func (r *rig) desc(slot int, d hw.Descriptor) {
	if d.Next == 0 {
		d.Next = r.iova(rigRing + (slot+1)%16*64)
	}
	d.Encode(r.mem[rigRing+slot*64:])
}

func (r *rig) start() {
	r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlErrCmplEn|hw.CtrlAnyErrAbortEn)
	r.regs.Write64(r.ch(hw.ChanCmp), r.iova(rigComp))
	r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
}

// waitState waits, bounded, for the channel to reach state want. The
// clock is read before the register, so the read that fails the test is
// one taken after the whole bound: a test thread descheduled between a
// read and the clock check does not fail on a state seconds old. The
// failure names what the channel's goroutine did (descriptors run,
// parks), which tells an engine that never ran from one that missed the
// doorbell.
func (r *rig) waitState(want hw.State) uint64 {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		expired := time.Now().After(deadline)
		sts := r.regs.Read64(r.ch(hw.ChanSts))
		if hw.StatusState(sts) == want {
			return sts
		}
		if expired {
			c := r.p.chans[0]
			r.t.Fatalf("channel state %v, want %v (CHANERR %s; %d descriptors run, %d parks, DMACOUNT %d)", hw.StatusState(sts), want,
				hw.ErrString(r.regs.Read32(r.ch(hw.ChanErr))), c.nDesc.Load(), c.parks.Load(), uint16(c.dmacount.Load()))
		}
		time.Sleep(10 * time.Microsecond)
	}
}

func TestCopyFillNull(t *testing.T) {
	r := newRig(t, CBDMAOptions{})
	src := r.mem[rigData : rigData+1000]
	for i := range src {
		src[i] = byte(i * 7)
	}
	r.desc(0, hw.Descriptor{Size: 1000, Ctl: hw.OpCopy << hw.CtlOpShift, Src: r.iova(rigData), Dst: r.iova(rigData + 8192)})
	r.desc(1, hw.Descriptor{Size: 8, Ctl: hw.OpCopy<<hw.CtlOpShift | hw.CtlNull})
	r.desc(2, hw.Descriptor{Size: 21, Ctl: hw.OpFill<<hw.CtlOpShift | hw.CtlComplWrite | hw.CtlFence, Src: 0x0807060504030201, Dst: r.iova(rigData + 16384)})
	r.start()
	if got := hw.StatusState(r.regs.Read64(r.ch(hw.ChanSts))); got != hw.StateArmed {
		t.Fatalf("after CHAINADDR: %v, want ARMED", got)
	}
	r.regs.Write16(r.ch(hw.ChanDMACount), 3)
	sts := r.waitState(hw.StateIdle)
	if hw.StatusAddr(sts) != r.iova(rigRing+2*64) {
		t.Fatalf("CHANSTS names %#x, want the third descriptor", hw.StatusAddr(sts))
	}
	if wb := binary.LittleEndian.Uint64(r.mem[rigComp:]); wb != sts {
		t.Fatalf("completion write-back %#x, CHANSTS %#x", wb, sts)
	}
	if !bytes.Equal(r.mem[rigData+8192:rigData+8192+1000], src) {
		t.Fatal("copy: wrong bytes")
	}
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 0}
	if got := r.mem[rigData+16384 : rigData+16384+22]; !bytes.Equal(got, want) {
		t.Fatalf("fill: % x", got)
	}
}

// TestErrors checks the errors of spec §4.5: each misprogrammed
// descriptor halts the channel with its CHANERR bit and writes the halted
// status back.
func TestErrors(t *testing.T) {
	big := uint32(1<<20 + 1)
	cases := []struct {
		name string
		d    hw.Descriptor
		want uint32
	}{
		{"zero size", hw.Descriptor{Size: 0, Ctl: 0}, hw.ErrDescLen},
		{"over XFERCAP", hw.Descriptor{Size: big}, hw.ErrDescLen},
		{"unknown op", hw.Descriptor{Size: 8, Ctl: 0x87 << hw.CtlOpShift}, hw.ErrDescCtrl},
		{"reserved bit", hw.Descriptor{Size: 8, Ctl: 1 << 15}, hw.ErrDescCtrl},
		{"misaligned next", hw.Descriptor{Size: 8, Ctl: hw.CtlNull, Next: 0x1000 + 8}, hw.ErrDescriptor},
		{"48-bit source", hw.Descriptor{Size: 8, Src: 1 << 60, Dst: 0}, hw.ErrSrcAddr},
		{"unmapped source", hw.Descriptor{Size: 8, Src: 0x1000, Dst: 0x1000}, hw.ErrReadData},
		{"unmapped destination", hw.Descriptor{Size: 8, Src: 0, Dst: 0x1000}, hw.ErrWriteData},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, CBDMAOptions{})
			d := c.d
			if c.name == "unmapped destination" {
				d.Src = r.iova(rigData)
			}
			r.desc(0, d)
			r.start()
			r.regs.Write16(r.ch(hw.ChanDMACount), 1)
			sts := r.waitState(hw.StateHalted)
			if got := r.regs.Read32(r.ch(hw.ChanErr)); got&c.want == 0 {
				t.Fatalf("CHANERR %s, want %s", hw.ErrString(got), hw.ErrString(c.want))
			}
			if wb := binary.LittleEndian.Uint64(r.mem[rigComp:]); hw.StatusState(wb) != hw.StateHalted || wb != sts {
				t.Fatalf("error write-back %#x, CHANSTS %#x", wb, sts)
			}
			// CHANERR is write-1-to-clear.
			r.regs.Write32(r.ch(hw.ChanErr), c.want)
			if got := r.regs.Read32(r.ch(hw.ChanErr)); got&c.want != 0 {
				t.Fatalf("CHANERR %#x after W1C", got)
			}
		})
	}
}

// TestSlowClear: a SlowClear bit keeps reading set for SlowClearReads
// reads after it is cleared, yet the channel arms and runs at once.
func TestSlowClear(t *testing.T) {
	r := newRig(t, CBDMAOptions{SlowClear: hw.ErrWriteData, SlowClearReads: 3})
	r.desc(0, hw.Descriptor{Size: 8, Src: r.iova(rigData), Dst: 0x1000})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateHalted)
	want := uint32(hw.ErrWriteData)
	if got := r.regs.Read32(r.ch(hw.ChanErr)); got != want {
		t.Fatalf("CHANERR %s after the fault, want %s", hw.ErrString(got), hw.ErrString(want))
	}
	r.regs.Write32(r.ch(hw.ChanErr), want)
	r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdReset)
	for i := 0; i < 3; i++ {
		if got := r.regs.Read32(r.ch(hw.ChanErr)); got != want {
			t.Fatalf("read %d after the clear: CHANERR %s, want %s still", i+1, hw.ErrString(got), hw.ErrString(want))
		}
	}
	if got := r.regs.Read32(r.ch(hw.ChanErr)); got != 0 {
		t.Fatalf("CHANERR %s after its slow clear ran out, want 0", hw.ErrString(got))
	}
	// The error was gone at the clear: the channel takes a new chain.
	r.desc(1, hw.Descriptor{Size: 8, Src: r.iova(rigData), Dst: r.iova(rigData + 64), Ctl: hw.CtlComplWrite})
	r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlErrCmplEn|hw.CtrlAnyErrAbortEn)
	r.regs.Write64(r.ch(hw.ChanCmp), r.iova(rigComp))
	r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing+64))
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
	if s := r.p.Stats(0); s.Violations != 0 {
		t.Fatalf("violations: %s", s.LastViolation)
	}
}

func TestCompletionAddressError(t *testing.T) {
	r := newRig(t, CBDMAOptions{})
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlComplWrite})
	r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlAnyErrAbortEn)
	r.regs.Write64(r.ch(hw.ChanCmp), 0x7000) // not mapped
	r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateHalted)
	if got := r.regs.Read32(r.ch(hw.ChanErr)); got&hw.ErrCmplAddr == 0 {
		t.Fatalf("CHANERR %s, want completion address error", hw.ErrString(got))
	}
}

// TestStrictness checks that misprogramming gets the hardware's answer,
// not silent success.
func TestStrictness(t *testing.T) {
	t.Run("no bus master", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		pci.ClearCommand(r.f, pci.CommandBusMaster)
		r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		r.waitState(hw.StateHalted)
		if r.p.Stats(0).Violations == 0 {
			t.Fatal("DMA with bus mastering off was not flagged")
		}
	})
	t.Run("memory decode off", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		pci.ClearCommand(r.f, pci.CommandMemory)
		if v := r.regs.Read8(hw.RegCBVer); v != 0xFF {
			t.Fatalf("CBVER with memory decode off reads %#x, want all ones", v)
		}
	})
	t.Run("CHANERR_INT blocks arming below 3.3", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{Version: hw.Ver32})
		r.desc(0, hw.Descriptor{Size: 0}) // zero size: an error
		r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlAnyErrAbortEn)
		r.regs.Write32(r.ch(hw.ChanChainAddr), uint32(r.iova(rigRing)))
		r.regs.Write32(r.ch(hw.ChanChainAddr)+4, uint32(r.iova(rigRing)>>32))
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		r.waitState(hw.StateHalted)
		r.regs.Write32(r.ch(hw.ChanErr), 0xFFFFFFFF) // clears CHANERR only
		r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdReset)
		for r.regs.Read8(r.ch(hw.ChanCmd))&hw.CmdReset != 0 {
			time.Sleep(time.Microsecond)
		}
		r.regs.Write32(r.ch(hw.ChanChainAddr), uint32(r.iova(rigRing)))
		r.regs.Write32(r.ch(hw.ChanChainAddr)+4, uint32(r.iova(rigRing)>>32))
		if s := hw.StatusState(uint64(r.regs.Read32(r.ch(hw.ChanSts)))); s != hw.StateHalted {
			t.Fatalf("armed (%v) with CHANERR_INT set", s)
		}
		v, _ := pci.ReadConfig32(r.f, hw.CfgChanErrInt)
		pci.WriteConfig32(r.f, hw.CfgChanErrInt, v)
		r.regs.Write32(r.ch(hw.ChanChainAddr), uint32(r.iova(rigRing)))
		r.regs.Write32(r.ch(hw.ChanChainAddr)+4, uint32(r.iova(rigRing)>>32))
		if s := hw.StatusState(uint64(r.regs.Read32(r.ch(hw.ChanSts)))); s != hw.StateArmed {
			t.Fatalf("state %v after clearing CHANERR_INT, want ARMED", s)
		}
	})
	t.Run("CHAINADDR while active", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
		r.start()
		r.regs.Write16(r.ch(hw.ChanDMACount), 1)
		r.waitState(hw.StateIdle)
		r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
		if got := r.regs.Read32(r.ch(hw.ChanErr)); got&hw.ErrChainAddr == 0 {
			t.Fatalf("CHANERR %s, want chain address error", hw.ErrString(got))
		}
	})
	t.Run("CB1 start command", func(t *testing.T) {
		r := newRig(t, CBDMAOptions{})
		r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdStart)
		if got := r.regs.Read32(r.ch(hw.ChanErr)); got&hw.ErrChanCmd == 0 {
			t.Fatalf("CHANERR %s, want CHANCMD error", hw.ErrString(got))
		}
	})
}

func TestSuspendResumeAndInUse(t *testing.T) {
	r := newRig(t, CBDMAOptions{})
	if v := r.regs.Read16(r.ch(hw.ChanCtrl)); v&hw.CtrlInUse != 0 {
		t.Fatal("first CHANCTRL read returned IN_USE")
	}
	if v := r.regs.Read16(r.ch(hw.ChanCtrl)); v&hw.CtrlInUse == 0 {
		t.Fatal("second CHANCTRL read did not return IN_USE")
	}
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
	r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdSuspend)
	r.waitState(hw.StateSuspended)
	r.regs.Write8(r.ch(hw.ChanCmd), hw.CmdResume)
	r.waitState(hw.StateIdle)
}

func TestInterrupt(t *testing.T) {
	r := newRig(t, CBDMAOptions{})
	irqs, err := r.f.EnableInterrupts(1)
	if err != nil {
		t.Fatal(err)
	}
	r.regs.Write8(hw.RegIntrCtrl, hw.IntrCtrlMSIXVector)
	r.desc(0, hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlIntEn})
	r.regs.Write16(r.ch(hw.ChanCtrl), hw.CtrlAnyErrAbortEn|hw.CtrlIntRearm)
	r.regs.Write64(r.ch(hw.ChanCmp), r.iova(rigComp))
	r.regs.Write64(r.ch(hw.ChanChainAddr), r.iova(rigRing))
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	if n, err := irqs[0].WaitTimeout(5 * time.Second); err != nil || n == 0 {
		t.Fatalf("no interrupt: %d %v", n, err)
	}
	if _, err := r.f.EnableInterrupts(2); err == nil {
		t.Fatal("two vectors on a one-vector function")
	}
}

// TestVectorPerChannel: a function with four channels offers four MSI-X
// vectors; with INTRCTRL's MSI-X vector control each channel interrupts
// on its own, without it every channel on vector 0.
func TestVectorPerChannel(t *testing.T) {
	r := newRig(t, CBDMAOptions{ChannelsPerFunction: 4, Version: hw.Ver32})
	f, regs, mem, iova := r.f, r.regs, r.mem, r.iova(0)
	if _, err := f.EnableInterrupts(5); err == nil {
		t.Fatal("five vectors on a four-channel function")
	}
	irqs, err := f.EnableInterrupts(4)
	if err != nil {
		t.Fatal(err)
	}
	// Channel n's one descriptor (a self-linked null asking for an
	// interrupt) at 64 x n, its completion word at 1024 + 64 x n.
	run := func(n int) {
		b := hw.ChannelBase(n)
		d := hw.Descriptor{Size: 8, Ctl: hw.CtlNull | hw.CtlIntEn | hw.CtlComplWrite, Next: iova + uint64(64*n)}
		d.Encode(mem[64*n:])
		regs.Write8(b+hw.ChanCmd, hw.CmdReset)
		regs.Write16(b+hw.ChanCtrl, hw.CtrlAnyErrAbortEn|hw.CtrlIntRearm)
		regs.Write64(b+hw.ChanCmp, iova+uint64(1024+64*n))
		regs.Write64(b+hw.ChanChainAddr, iova+uint64(64*n))
		regs.Write16(b+hw.ChanDMACount, 1)
	}
	for _, perChannel := range []bool{true, false} {
		ctl := uint8(hw.IntrCtrlMasterEnable)
		if perChannel {
			ctl |= hw.IntrCtrlMSIXVector
		}
		regs.Write8(hw.RegIntrCtrl, ctl)
		for n := range 4 {
			want := 0
			if perChannel {
				want = n
			}
			run(n)
			if got, err := irqs[want].WaitTimeout(5 * time.Second); err != nil || got != 1 {
				t.Fatalf("per-channel %v: channel %d: vector %d got %d signals, %v; want 1", perChannel, n, want, got, err)
			}
			for v := range irqs {
				if got := irqs[v].Poll(); got != 0 {
					t.Errorf("per-channel %v: channel %d also signalled vector %d", perChannel, n, v)
				}
			}
		}
	}
	r.noViolations()
}

func TestBandwidthCap(t *testing.T) {
	r := newRig(t, CBDMAOptions{Bandwidth: 10 << 20}) // 10 MiB/s: 32 KiB takes ~3ms
	r.desc(0, hw.Descriptor{Size: 32 << 10, Src: r.iova(rigData), Dst: r.iova(rigData + 32<<10)})
	r.start()
	t0 := time.Now()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
	if el := time.Since(t0); el < 2*time.Millisecond {
		// A cap that does not slow the channel down makes overlap
		// experiments meaningless; this is a behaviour check, with a
		// generous floor, not a timing assertion on speed.
		t.Fatalf("32 KiB at 10 MiB/s completed in %v", el)
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []CBDMAOptions{{Channels: 17}, {Version: 0x31}, {XferCap: 5}, {Bandwidth: -1}, {DeviceID: 0x1234}} {
		if _, err := NewCBDMA(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestIOMMU(t *testing.T) {
	u := newIOMMU(0, true)
	buf := make([]byte, 3*4096+100)
	m, err := u.Map(buf[50:])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Segments) < 4 {
		t.Fatalf("scatter mapping has %d segments", len(m.Segments))
	}
	total := 0
	for i, s := range m.Segments {
		total += s.Len
		if i > 0 && s.IOVA == m.Segments[i-1].IOVA+uint64(m.Segments[i-1].Len) {
			t.Fatal("adjacent segments")
		}
	}
	if total != len(buf)-50 {
		t.Fatalf("segments cover %d bytes", total)
	}
	if err := u.Unmap(m); err != nil {
		t.Fatal(err)
	}
	if err := u.Unmap(m); err == nil {
		t.Fatal("double unmap accepted")
	}
	var hint int
	u.rlock()
	_, ok := u.translate(m.Segments[0].IOVA, 1, false, &hint)
	u.runlock()
	if ok {
		t.Fatal("IOVA still translates after Unmap")
	}
}

// TestChannelCPUs: with CBDMAOptions.CPUs the channel's thread is bound to
// them (it reads the binding back from the kernel), the caller's threads
// are not, and the channel copies as before; a CPU the kernel refuses
// fails NewCBDMA with an error naming it.
func TestChannelCPUs(t *testing.T) {
	var mine unix.CPUSet
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	all := cpuList(&mine)
	cpu := all[len(all)-1]
	r := newRig(t, CBDMAOptions{CPUs: []int{cpu}})
	if got := r.p.Stats(0).CPUs; !slices.Equal(got, []int{cpu}) {
		t.Fatalf("the channel's thread runs on CPUs %v, want [%d]", got, cpu)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if got := cpuList(&after); !slices.Equal(got, all) {
		t.Fatalf("the caller's thread was bound too: CPUs %v, was %v", got, all)
	}
	src := r.mem[rigData : rigData+4096]
	for i := range src {
		src[i] = byte(i * 13)
	}
	r.desc(0, hw.Descriptor{Size: 4096, Ctl: hw.OpCopy << hw.CtlOpShift, Src: r.iova(rigData), Dst: r.iova(rigData + 8192)})
	r.start()
	r.regs.Write16(r.ch(hw.ChanDMACount), 1)
	r.waitState(hw.StateIdle)
	if !bytes.Equal(r.mem[rigData+8192:rigData+8192+4096], src) {
		t.Fatal("the bound channel copied wrong bytes")
	}
	if unbound := newRig(t, CBDMAOptions{}); unbound.p.Stats(0).CPUs != nil {
		t.Fatalf("a channel without CPUs reports a binding: %v", unbound.p.Stats(0).CPUs)
	}

	for _, bad := range []int{-1, cpuSetSize} {
		if _, err := NewCBDMA(CBDMAOptions{Channels: 1, CPUs: []int{bad}}); err == nil || !strings.Contains(err.Error(), fmt.Sprint(bad)) {
			t.Errorf("CPU %d: error %v, want one naming it", bad, err)
		}
	}
	absent := cpuSetSize - 1
	if mine.IsSet(absent) {
		t.Skipf("CPU %d is usable here: no CPU to be refused", absent)
	}
	p, err := NewCBDMA(CBDMAOptions{Channels: 2, CPUs: []int{absent}})
	if err == nil {
		p.Close()
		t.Fatalf("CPU %d, which this process may not use, was accepted", absent)
	}
	if !strings.Contains(err.Error(), "[1023]") || !strings.Contains(err.Error(), "taskset") {
		t.Fatalf("refused binding: %v; want the CPUs and a hint", err)
	}
}

// TestPinnedChannelWakesOnDoorbell: a channel on a CPU of its own parks on
// a futex the doorbell wakes directly. With the park's bound raised to a
// minute, every one of many doorbells rung at a parked channel (or one
// about to park) must run its descriptor: a lost wake-up hangs the loop
// and fails it, instead of costing a bounded sleep.
func TestPinnedChannelWakesOnDoorbell(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	all := cpuList(&mine)
	r := newRig(t, CBDMAOptions{CPUs: []int{all[len(all)-1]}, Spin: time.Microsecond})
	c := r.p.chans[0]
	c.parkMax.Store(int64(time.Minute))
	for i := range 16 {
		r.desc(i, hw.Descriptor{Size: 8, Ctl: hw.CtlNull})
	}
	r.start()
	// A park is counted just before the thread sleeps: once the count
	// moved past its value before the previous doorbell, the channel ran
	// that descriptor and is asleep again, or about to be (a doorbell
	// then changes the futex word, and the sleep returns at once).
	parked := uint64(0)
	for i := 1; i <= 200; i++ {
		waitFor(t, fmt.Sprintf("the channel to park before doorbell %d", i), func() bool { return c.parks.Load() > parked })
		parked = c.parks.Load()
		r.regs.Write16(r.ch(hw.ChanDMACount), uint16(i))
		waitFor(t, fmt.Sprintf("descriptor %d to run after its doorbell woke the parked channel", i), func() bool {
			return r.p.Stats(0).Descriptors == uint64(i)
		})
	}
}

// waitFor polls cond until it holds, and fails the test, naming what it
// waited for, if it does not within a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Microsecond)
	}
}
