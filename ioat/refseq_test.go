package ioat

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/emulated"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// Reference sequences: small drivers that program a channel the way each
// reference driver family does, written from their documented behaviour
// (shared/spec/ioat.md §4.2-§4.5, which restates Linux drivers/dma/ioat,
// SPDK lib/ioat and DPDK drivers/dma/ioat). A reference backend runs one
// on every channel of a fresh emulated platform, leaves the channel as
// that driver leaves it, and hands the platform to the conformance suite.
// The emulated backend's cleanup then fails the test on any violation the
// model recorded, so the suite proves the model accepts what those
// drivers do, and that this driver takes over a channel after them.

type family int

const (
	familyLinux family = iota
	familySPDK
	familyDPDK
)

var familyNames = [...]string{"linux", "spdk", "dpdk"}

func (f family) String() string { return familyNames[f] }

// refDriver is one channel driven by a reference sequence.
type refDriver struct {
	t      testing.TB
	fam    family
	plat   *emulated.CBDMA
	ch     int // platform channel number (for fault injection)
	dev    pci.Device
	regs   pci.Registers
	base   int
	ver    uint8
	wide   bool // 64-bit accesses to CHANSTS, CHAINADDR, CHANCMP
	mem    []byte
	m      *pci.Mapping
	head   uint64 // descriptors written since the chain (re)started at offset
	offset uint64 // ring index where the chain last started
	count  uint16 // Linux's running DMACOUNT
}

const (
	refSlots = 16
	refComp  = refSlots * hw.DescSize
	refData  = 4096
)

func (r *refDriver) iova(off int) uint64 { return r.m.Segments[0].IOVA + uint64(off) }

func (r *refDriver) slot(i uint64) uint64 { return r.iova(int(i%refSlots) * hw.DescSize) }

func (r *refDriver) w64(off int, v uint64) {
	if r.wide {
		r.regs.Write64(r.base+off, v)
		return
	}
	r.regs.Write32(r.base+off, uint32(v))
	r.regs.Write32(r.base+off+4, uint32(v>>32))
}

func (r *refDriver) r64(off int) uint64 {
	if r.wide {
		return r.regs.Read64(r.base + off)
	}
	lo := r.regs.Read32(r.base + off)
	return uint64(r.regs.Read32(r.base+off+4))<<32 | uint64(lo)
}

func (r *refDriver) state() hw.State { return hw.StatusState(r.r64(hw.ChanSts)) }

// waitFor polls cond up to limit (generous: the references' own limits are
// tight because real hardware is fast, the model under load is not).
func (r *refDriver) waitFor(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s on %s: %s: timed out (state %v, CHANERR %s)", r.fam, r.dev.Address(), what, r.state(), hw.ErrString(r.regs.Read32(r.base+hw.ChanErr)))
		}
		time.Sleep(time.Microsecond)
	}
}

func (r *refDriver) comp() uint64 { return load64(r.mem[refComp:]) }

// quiesceReset is Linux's ioat_reset_hw and SPDK's ioat_reset: suspend an
// active channel, clear CHANERR (and below 3.3 CHANERR_INT), RESET and
// poll it clear.
func (r *refDriver) quiesceReset() {
	if s := r.state(); s == hw.StateActive || s == hw.StateIdle {
		r.regs.Write8(r.base+hw.ChanCmd, hw.CmdSuspend)
		r.waitFor("suspend", func() bool { s := r.state(); return s != hw.StateActive && s != hw.StateIdle })
	}
	r.regs.Write32(r.base+hw.ChanErr, r.regs.Read32(r.base+hw.ChanErr))
	if r.ver < hw.Ver33 {
		v, err := pci.ReadConfig32(r.dev, hw.CfgChanErrInt)
		if err != nil {
			r.t.Fatal(err)
		}
		if err := pci.WriteConfig32(r.dev, hw.CfgChanErrInt, v); err != nil {
			r.t.Fatal(err)
		}
	}
	r.regs.Write8(r.base+hw.ChanCmd, hw.CmdReset)
	r.waitFor("reset", func() bool { return r.regs.Read8(r.base+hw.ChanCmd)&hw.CmdReset == 0 })
}

// dpdkProbe is DPDK's ioat_dmadev_create: check CHANCNT, drop a stale
// IN_USE, clear CHANERR, SUSPEND, RESET, and write CHAINADDR = 0 on every
// iteration of the wait for RESET to clear.
func (r *refDriver) dpdkProbe() {
	if n := r.regs.Read8(hw.RegChanCnt) & 0x1F; n != 1 {
		r.t.Logf("dpdk: CHANCNT %d (DPDK warns and uses channel 0)", n)
	}
	if r.regs.Read16(r.base+hw.ChanCtrl)&hw.CtrlInUse != 0 {
		r.regs.Write16(r.base+hw.ChanCtrl, 0)
	}
	r.regs.Write32(r.base+hw.ChanErr, r.regs.Read32(r.base+hw.ChanErr))
	r.regs.Write8(r.base+hw.ChanCmd, hw.CmdSuspend)
	r.regs.Write8(r.base+hw.ChanCmd, hw.CmdReset)
	r.waitFor("reset", func() bool {
		r.w64(hw.ChanChainAddr, 0)
		return r.regs.Read8(r.base+hw.ChanCmd)&hw.CmdReset == 0
	})
}

// start programs the channel and starts it as the family does.
func (r *refDriver) start(at uint64) {
	r.offset, r.head, r.count = at, at, 0
	switch r.fam {
	case familyLinux:
		r.regs.Write8(hw.RegIntrCtrl, hw.IntrCtrlMSIXVector|hw.IntrCtrlMasterEnable)
		if r.ver < hw.Ver34 {
			r.regs.Write32(r.base+hw.ChanDCACtrl, 0xFFFFFFFF) // IOAT_DMA_DCA_ANY_CPU
		}
		r.regs.Write16(r.base+hw.ChanCtrl, hw.CtrlIntRearm|hw.CtrlErrCmplEn|hw.CtrlAnyErrAbortEn|hw.CtrlErrIntEn)
		if r.ver >= hw.Ver34 {
			r.regs.Write8(hw.RegChWPrefLimit, 5) // ioat_pending_level + 1
			r.regs.Write16(r.base+hw.ChanDRSCtl, 9|hw.DRSEnable|hw.DRSAutoWrap)
			r.regs.Write32(r.base+hw.ChanLTRActive, hw.LTRActive)
			r.regs.Write32(r.base+hw.ChanLTRIdle, hw.LTRIdle)
			r.regs.Write8(r.base+hw.ChanLTRSwSel, hw.LTRSelActive)
		}
		r.w64(hw.ChanCmp, r.iova(refComp))
		r.w64(hw.ChanChainAddr, r.slot(at))
		r.putNull(hw.CtlIntEn | hw.CtlComplWrite)
		r.doorbell(1)
		r.waitFor("start", func() bool { s := r.state(); return s == hw.StateActive || s == hw.StateIdle })
		r.waitDone()
	case familySPDK:
		r.regs.Write16(r.base+hw.ChanCtrl, hw.CtrlAnyErrAbortEn)
		r.w64(hw.ChanCmp, r.iova(refComp))
		r.w64(hw.ChanChainAddr, r.slot(at))
		r.putNull(hw.CtlComplWrite)
		r.doorbell(1)
		r.waitFor("start", func() bool { return r.state() == hw.StateIdle })
	case familyDPDK:
		r.w64(hw.ChanChainAddr, r.slot(at))
		r.w64(hw.ChanCmp, r.iova(refComp))
		r.regs.Write16(r.base+hw.ChanCtrl, hw.CtrlAnyErrAbortEn|hw.CtrlErrCmplEn)
		binary.LittleEndian.PutUint64(r.mem[refComp:], r.slot(at+refSlots-1))
		if r.state() == hw.StateHalted {
			r.t.Fatalf("dpdk: channel HALTED after start")
		}
	}
}

func (r *refDriver) putNull(ctl uint32) {
	d := hw.Descriptor{Size: 1, Ctl: hw.OpCopy<<hw.CtlOpShift | hw.CtlNull | ctl, Next: r.slot(r.head + 1)}
	d.Encode(r.mem[int(r.head%refSlots)*hw.DescSize:])
	r.head++
}

// doorbell announces n more descriptors in the family's style.
func (r *refDriver) doorbell(n int) {
	switch r.fam {
	case familyLinux:
		r.count += uint16(n) // dmacount += pending
		r.regs.Write16(r.base+hw.ChanDMACount, r.count)
	default: // SPDK writes (u16)head, DPDK next_write - offset
		r.regs.Write16(r.base+hw.ChanDMACount, uint16(r.head-r.offset))
	}
}

// waitDone waits until the write-back names the last descriptor written.
func (r *refDriver) waitDone() {
	want := r.slot(r.head - 1)
	r.waitFor("completion", func() bool { return hw.StatusAddr(r.comp()) == want })
}

// copies writes n 64-byte copies, rings once and waits; tag seeds the
// bytes so the copies are checked.
func (r *refDriver) copies(n int, tag byte) {
	for i := 0; i < n; i++ {
		src, dst := refData+i*128, refData+i*128+64
		for k := 0; k < 64; k++ {
			r.mem[src+k] = tag + byte(k)
		}
		ctl := uint32(0)
		if r.fam == familyDPDK || i == n-1 {
			ctl = hw.CtlComplWrite
		}
		d := hw.Descriptor{Size: 64, Ctl: ctl, Src: r.iova(src), Dst: r.iova(dst), Next: r.slot(r.head + 1)}
		d.Encode(r.mem[int(r.head%refSlots)*hw.DescSize:])
		r.head++
	}
	r.doorbell(n)
	r.waitDone()
	for i := 0; i < n; i++ {
		if r.mem[refData+i*128+64+5] != tag+5 {
			r.t.Fatalf("%s: copy %d did not land", r.fam, i)
		}
	}
}

// failAndRecover makes the second of three copies fail and recovers as
// the family does; SPDK has no recovery, so it is not asked to.
func (r *refDriver) failAndRecover() {
	r.plat.InjectError(r.ch, 1, hw.ErrReadData)
	first := r.head
	for i := 0; i < 3; i++ {
		d := hw.Descriptor{Size: 64, Ctl: hw.CtlComplWrite, Src: r.iova(refData), Dst: r.iova(refData + 1024), Next: r.slot(r.head + 1)}
		d.Encode(r.mem[int(r.head%refSlots)*hw.DescSize:])
		r.head++
	}
	r.doorbell(3)
	r.waitFor("halt", func() bool { return hw.StatusState(r.comp()) == hw.StateHalted })
	if hw.StatusAddr(r.comp()) != r.slot(first) {
		r.t.Fatalf("%s: halted after %#x, want the first copy", r.fam, hw.StatusAddr(r.comp()))
	}
	retry := first + 2 // the failed one is dropped, the third re-run
	switch r.fam {
	case familyLinux:
		// ioat_eh: reset_hw, then restart at the descriptor after the
		// failed one with the run value, completion and chain.
		r.quiesceReset()
		r.regs.Write16(r.base+hw.ChanCtrl, hw.CtrlIntRearm|hw.CtrlErrCmplEn|hw.CtrlAnyErrAbortEn|hw.CtrlErrIntEn)
		r.w64(hw.ChanCmp, r.iova(refComp))
		r.w64(hw.ChanChainAddr, r.slot(retry))
		r.offset, r.count = retry, 0
	case familyDPDK:
		// __ioat_recover: clear CHANERR, RESET without polling, then
		// CHAINADDR, CHANCTRL, CHANCMP and a short spin for ARMED.
		r.regs.Write32(r.base+hw.ChanErr, r.regs.Read32(r.base+hw.ChanErr))
		r.regs.Write8(r.base+hw.ChanCmd, hw.CmdReset)
		r.w64(hw.ChanChainAddr, r.slot(retry))
		r.regs.Write16(r.base+hw.ChanCtrl, hw.CtrlAnyErrAbortEn|hw.CtrlErrCmplEn)
		r.w64(hw.ChanCmp, r.iova(refComp))
		r.waitFor("armed", func() bool { return r.r64(hw.ChanSts) == uint64(hw.StateArmed) })
		r.offset = retry
	}
	r.doorbell(int(r.head - retry))
	r.waitDone()
}

// teardown leaves the channel as the family leaves it.
func (r *refDriver) teardown() {
	switch r.fam {
	case familyLinux:
		r.quiesceReset()
		if r.ver >= hw.Ver34 {
			r.regs.Write8(r.base+hw.ChanLTRSwSel, hw.LTRSelIdle)
		}
	case familySPDK:
		// spdk_ioat_detach frees the ring and leaves the channel IDLE;
		// the next attach resets it.
	case familyDPDK:
		if s := r.state(); s == hw.StateActive || s == hw.StateIdle {
			r.regs.Write8(r.base+hw.ChanCmd, hw.CmdSuspend)
		} else {
			r.regs.Write8(r.base+hw.ChanCmd, hw.CmdReset)
		}
		r.waitFor("stop", func() bool { s := r.state(); return s == hw.StateSuspended || s == hw.StateHalted })
	}
}

// runReference drives channel ch of dev through the family's whole life
// cycle: probe, start, copies, an error and its recovery where the family
// recovers, teardown.
func runReference(t testing.TB, fam family, plat *emulated.CBDMA, ch int, dev pci.Device) {
	t.Helper()
	regs, err := dev.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := pci.SetCommand(dev, pci.CommandMemory|pci.CommandBusMaster|pci.CommandINTxDisable); err != nil {
		t.Fatal(err)
	}
	r := &refDriver{t: t, fam: fam, plat: plat, ch: ch, dev: dev, regs: regs, base: hw.ChannelBase(0), ver: regs.Read8(hw.RegCBVer)}
	// SPDK and DPDK use 64-bit accesses on every version; Linux splits
	// them below 3.3.
	r.wide = fam != familyLinux || r.ver >= hw.Ver33
	r.mem = make([]byte, 16<<10)
	if r.m, err = dev.DMA().Map(r.mem); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := dev.DMA().Unmap(r.m); err != nil {
			t.Error(err)
		}
	}()
	if fam == familyDPDK {
		r.dpdkProbe()
	} else {
		r.quiesceReset()
	}
	r.start(0)
	r.copies(3, 10)
	r.copies(5, 20)
	// DPDK handles errors only from 3.4 on (its docs: no recovery on
	// BDX/SKX/CLX); SPDK reports a halted channel and stops.
	if fam == familyLinux || fam == familyDPDK && r.ver >= hw.Ver34 {
		r.failAndRecover()
		r.copies(2, 30)
	}
	r.teardown()
}

// referenceBackend is an emulated platform each of whose channels was
// first driven by fam's reference sequence.
func referenceBackend(fam family, o emulated.CBDMAOptions) backend {
	eb := emulatedBackend(o)
	return backend{name: "ref-" + fam.String() + "-" + strings.TrimPrefix(eb.name, "emulated-"), open: func(t testing.TB, channels int) ([]pci.Device, *testPlatform) {
		devs, plat := eb.open(t, channels)
		for i, d := range devs {
			runReference(t, fam, plat.cb, i, d)
		}
		return devs, plat
	}}
}

// TestReferenceSequences drives every version of the model the way each
// reference family does, with zero violations (checked by the backend's
// cleanup), then opens the channel with this driver and copies.
func TestReferenceSequences(t *testing.T) {
	for _, fam := range []family{familyLinux, familySPDK, familyDPDK} {
		for _, ver := range []uint8{hw.Ver32, hw.Ver33, hw.Ver34} {
			t.Run(fmt.Sprintf("%s-v%x", fam, ver), func(t *testing.T) {
				devs, _ := referenceBackend(fam, emulated.CBDMAOptions{Version: ver}).open(t, 1)
				c, err := Open(devs[0], Options{RingSize: 64})
				if err != nil {
					t.Fatalf("open after %s: %v", fam, err)
				}
				buf := make([]byte, 8192)
				buf[3] = 3
				m, _ := devs[0].DMA().Map(buf)
				defer devs[0].DMA().Unmap(m)
				if err := c.EnqueueCopy(m, 4096, m, 0, 4096, 1); err != nil {
					t.Fatal(err)
				}
				c.Submit()
				if r := drain(t, c, 1); r[0].Err != nil || buf[4096+3] != 3 {
					t.Fatalf("copy after %s: %v", fam, r[0].Err)
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}
