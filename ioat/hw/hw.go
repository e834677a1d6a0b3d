// Package hw holds the hardware facts of the Intel I/OAT "Crystal Beach" DMA
// engine (CBDMA): PCI IDs, BAR0 register offsets and bits, the channel state
// machine encoding, CHANERR bits and the 64-byte descriptor layout.
//
// It is pure description: no device access, no state. The driver (package
// ioat) and the in-process model (package emulated) both speak these
// definitions, so a register is named once. Values come from the project's
// spec notes (shared/spec/ioat.md §1-§3), which restate the Linux, SPDK, DPDK
// and FreeBSD drivers and the Xeon datasheets.
package hw

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// VendorIntel is Intel's PCI vendor ID.
const VendorIntel = 0x8086

// Platform names a CBDMA generation.
type Platform string

// Known CBDMA platforms, from spec §1.
const (
	PlatformTBG   Platform = "Tylersburg 5520 (TBG)"
	PlatformJSF   Platform = "Jasper Forest (JSF)"
	PlatformSNB   Platform = "Sandy Bridge-EP (SNB)"
	PlatformIVB   Platform = "Ivy Bridge-EP (IVB)"
	PlatformHSW   Platform = "Haswell-EP (HSW)"
	PlatformBDX   Platform = "Broadwell-EP (BDX)"
	PlatformBWD   Platform = "Avoton/Rangeley (BWD)"
	PlatformBDXDE Platform = "Broadwell-DE (BDX-DE)"
	PlatformSKX   Platform = "Skylake-SP/Cascade Lake (SKX)"
	PlatformICX   Platform = "Ice Lake-SP (ICX)"
)

// Quirks are the per-platform workarounds a driver must apply.
type Quirks uint32

// Quirk bits.
const (
	// QuirkNullSizeNonZero: a null descriptor of size 0 is an error (CB3.0);
	// the driver always uses a non-zero null size, so this is informational.
	QuirkNullSizeNonZero Quirks = 1 << iota
	// QuirkForceV32: treat the channel as CBVER 3.2 whatever CBVER reads
	// (Linux does this for SKX 0x2021): clear CHANERR_INT and split 64-bit
	// accesses.
	QuirkForceV32
	// QuirkMSIXResetWipe: reset wipes the MSI-X table entry; save and
	// restore it around reset (BWD, BDX-DE).
	QuirkMSIXResetWipe
	// QuirkTBGParity: clear a spurious uncorrectable-error status bit by
	// writing 0x10 to DMAUNCERRSTS after reset (TBG function 0).
	QuirkTBGParity
	// QuirkAddr40: DMA and descriptor addresses must stay below 2^40 (JSF).
	QuirkAddr40
	// QuirkSuspendXORFirst: on IVB, suspending an active RAID-capable
	// channel can corrupt other channels (erratum CF5); suspend legacy
	// channels first. A copy-only driver suspends nothing while others run.
	QuirkSuspendXORFirst
)

// Model describes one CBDMA PCI device ID.
type Model struct {
	Device   uint16
	Platform Platform
	Quirks   Quirks
}

// Models lists every CBDMA device ID the driver accepts (spec §1). Legacy
// CB1/CB2 parts (CBVER < 3.0) are not listed: their register layout differs
// and no modern driver supports them.
var Models = buildModels()

func buildModels() map[uint16]Model {
	m := map[uint16]Model{}
	add := func(p Platform, q Quirks, ids ...uint16) {
		for _, id := range ids {
			m[id] = Model{Device: id, Platform: p, Quirks: q}
		}
	}
	add(PlatformTBG, QuirkNullSizeNonZero, 0x3430, 0x3431, 0x3432, 0x3433, 0x3429, 0x342A, 0x342B, 0x342C)
	m[0x3430] = Model{Device: 0x3430, Platform: PlatformTBG, Quirks: QuirkNullSizeNonZero | QuirkTBGParity}
	add(PlatformJSF, QuirkAddr40, 0x3710, 0x3711, 0x3712, 0x3713, 0x3714, 0x3715, 0x3716, 0x3717, 0x3718, 0x3719)
	add(PlatformSNB, 0, 0x3C20, 0x3C21, 0x3C22, 0x3C23, 0x3C24, 0x3C25, 0x3C26, 0x3C27, 0x3C2E, 0x3C2F)
	add(PlatformIVB, QuirkSuspendXORFirst, 0x0E20, 0x0E21, 0x0E22, 0x0E23, 0x0E24, 0x0E25, 0x0E26, 0x0E27, 0x0E2E, 0x0E2F)
	add(PlatformHSW, 0, 0x2F20, 0x2F21, 0x2F22, 0x2F23, 0x2F24, 0x2F25, 0x2F26, 0x2F27, 0x2F2E, 0x2F2F)
	add(PlatformBDX, 0, 0x6F20, 0x6F21, 0x6F22, 0x6F23, 0x6F24, 0x6F25, 0x6F26, 0x6F27, 0x6F2E, 0x6F2F)
	add(PlatformBWD, QuirkMSIXResetWipe, 0x0C50, 0x0C51, 0x0C52, 0x0C53)
	add(PlatformBDXDE, QuirkMSIXResetWipe, 0x6F50, 0x6F51, 0x6F52, 0x6F53)
	add(PlatformSKX, QuirkForceV32, 0x2021)
	add(PlatformICX, 0, 0x0B00)
	return m
}

// Global (device) registers, offsets in BAR0 (spec §2.1).
const (
	RegChanCnt      = 0x00 // 8-bit, bits 4:0 number of channels
	RegXferCap      = 0x01 // 8-bit, log2 of max bytes per descriptor
	RegGenCtrl      = 0x02 // 8-bit
	RegIntrCtrl     = 0x03 // 8-bit
	RegAttnStatus   = 0x04 // 32-bit
	RegCBVer        = 0x08 // 8-bit, major 7:4 minor 3:0
	RegIntrDelay    = 0x0C // 16-bit
	RegCSStatus     = 0x0E // 16-bit
	RegDMACap       = 0x10 // 32-bit
	RegDCAOffset    = 0x14 // 16-bit
	RegChWPrefLimit = 0x4C // 8-bit, v3.4
)

// INTRCTRL bits.
const (
	IntrCtrlMasterEnable = 1 << 0
	IntrCtrlStatus       = 1 << 1
	IntrCtrlStatusMaster = 1 << 2
	IntrCtrlMSIXVector   = 1 << 3
)

// DMACAPABILITY bits.
const (
	CapPageBreak   = 1 << 0
	CapCRC         = 1 << 1
	CapMarkerSkip  = 1 << 2
	CapDCA         = 1 << 4
	CapCRCMove     = 1 << 5
	CapFill        = 1 << 6
	CapAPIC        = 1 << 7
	CapXOR         = 1 << 8
	CapPQ          = 1 << 9
	CapDWBES       = 1 << 13
	CapRAID16SS    = 1 << 17
	CapCmplTimeout = 1 << 19
	CapDPS         = 1 << 23
)

// ChannelBase returns the BAR0 offset of channel n's register block.
func ChannelBase(n int) int { return 0x80 * (n + 1) }

// Per-channel registers, offsets from ChannelBase (spec §2.2).
const (
	ChanCtrl      = 0x00 // 16-bit
	ChanDMAComp   = 0x02 // 16-bit
	ChanCmd       = 0x04 // 8-bit
	ChanDMACount  = 0x06 // 16-bit doorbell
	ChanSts       = 0x08 // 64-bit (two 32-bit halves below 3.3)
	ChanChainAddr = 0x10 // 64-bit
	ChanCmp       = 0x18 // 64-bit completion write-back address
	ChanCDAR      = 0x20 // 64-bit
	ChanErr       = 0x28 // 32-bit, write 1 to clear
	ChanErrMask   = 0x2C // 32-bit
	ChanDCACtrl   = 0x30 // 32-bit
	ChanDRSCtl    = 0xB6 // 16-bit, v3.4
	ChanLTRSwSel  = 0xBC // 8-bit, v3.4
	ChanLTRActive = 0xC0 // 32-bit, v3.4
	ChanLTRIdle   = 0xC4 // 32-bit, v3.4
)

// DRSCTL fields (v3.4, Linux registers.h IOAT_CHAN_DRS*): bits 3:0 encode
// the descriptor ring size as log2(bytes / 4 KiB), bit 8 enables the
// ring-size hint for prefetching, bit 9 makes prefetch wrap at the ring's
// end (only for a ring in one contiguous chunk).
const (
	DRSSizeMask = 0x000F
	DRSEnable   = 0x0100
	DRSAutoWrap = 0x0200
)

// LTR values Linux programs on v3.4 (registers.h IOAT_CHAN_LTR_*): a
// latency value, its scale (0x0800: 1 µs units) and the snoop-requirement
// bit (0x8000). Active: 0 µs; idle: 600 µs. LTR_SWSEL picks which applies.
const (
	LTRActive      = 0x8800
	LTRIdle        = 0x8A58
	LTRSelActive   = 0
	LTRSelIdle     = 1
	Addr40Limit    = 1 << 40 // Jasper Forest's DMA reach (QuirkAddr40)
	ChanBlockSize  = 0x80    // stride of the channel register blocks
	ChanBlockSize4 = 0xC8    // bytes a v3.4 channel block spans (LTR_IDLE ends at 0xC8)
)

// BAR0Size is the size of the register BAR the model exposes (QEMU's RFC
// model uses 16 KiB: registers, MSI-X table at 0x2000, PBA at 0x3000).
const BAR0Size = 0x4000

// CHANCTRL bits.
const (
	CtrlIntRearm      = 1 << 0
	CtrlErrCmplEn     = 1 << 2
	CtrlAnyErrAbortEn = 1 << 3
	CtrlErrIntEn      = 1 << 4
	CtrlDescNoSnoop   = 1 << 5
	CtrlInUse         = 1 << 8
	CtrlCmplDCAEn     = 1 << 9
)

// CHANCMD bits.
const (
	CmdStart   = 1 << 0
	CmdAppend  = 1 << 1
	CmdSuspend = 1 << 2
	CmdAbort   = 1 << 3
	CmdResume  = 1 << 4
	CmdReset   = 1 << 5
)

// State is a channel state, the low three bits of CHANSTS.
type State uint8

// Channel states (spec §4.1).
const (
	StateActive    State = 0
	StateIdle      State = 1
	StateSuspended State = 2
	StateHalted    State = 3
	StateArmed     State = 4
)

// String gives the channel state's name.
func (s State) String() string {
	switch s {
	case StateActive:
		return "ACTIVE"
	case StateIdle:
		return "IDLE"
	case StateSuspended:
		return "SUSPENDED"
	case StateHalted:
		return "HALTED"
	case StateArmed:
		return "ARMED"
	}
	return fmt.Sprintf("STATE(%d)", uint8(s))
}

// CHANSTS fields.
const (
	StsStateMask       = 0x7
	StsUnaffiliatedErr = 1 << 3
	StsSoftErr         = 1 << 4
	StsAddrMask        = ^uint64(0x3F)
)

// StatusState extracts the channel state from a CHANSTS value.
func StatusState(sts uint64) State { return State(sts & StsStateMask) }

// StatusAddr extracts the address of the last completed descriptor.
func StatusAddr(sts uint64) uint64 { return sts & StsAddrMask }

// CHANERR bits (spec §4.5; bit names follow Linux where drivers disagree).
const (
	ErrSrcAddr      = 1 << 0
	ErrDstAddr      = 1 << 1
	ErrNextAddr     = 1 << 2
	ErrDescriptor   = 1 << 3 // descriptor error / next-descriptor alignment
	ErrChainAddr    = 1 << 4 // chain-address value error
	ErrChanCmd      = 1 << 5
	ErrChipsetData  = 1 << 6
	ErrDMAData      = 1 << 7
	ErrReadData     = 1 << 8 // read data error (IOMMU fault on read)
	ErrWriteData    = 1 << 9 // write data error (IOMMU fault on write)
	ErrDescCtrl     = 1 << 10
	ErrDescLen      = 1 << 11
	ErrCmplAddr     = 1 << 12
	ErrIntConfig    = 1 << 13
	ErrSuperExtAddr = 1 << 14
	ErrUnaffiliated = 1 << 15
	ErrXORP         = 1 << 16
	ErrXORQ         = 1 << 17
	ErrDescCount    = 1 << 18
)

var errNames = [...]string{
	0: "source address", 1: "destination address", 2: "next descriptor address",
	3: "descriptor", 4: "chain address value", 5: "CHANCMD", 6: "chipset data integrity",
	7: "DMA data integrity", 8: "read data", 9: "write data", 10: "descriptor control",
	11: "descriptor length", 12: "completion address", 13: "interrupt configuration",
	14: "super-extended descriptor address", 15: "unaffiliated", 16: "XOR-P validation",
	17: "XOR-Q validation", 18: "descriptor count", 19: "DIF all-F", 20: "DIF guard",
	21: "DIF application tag", 22: "DIF reference tag", 23: "bundle bit",
	24: "result DIF all-F", 25: "result DIF guard", 26: "result DIF application tag",
	27: "result DIF reference tag",
}

// ErrString names the bits set in a CHANERR value, e.g.
// "0x100 (read data)".
func ErrString(chanerr uint32) string {
	if chanerr == 0 {
		return "0x0 (none)"
	}
	var names []string
	for i := 0; i < 32; i++ {
		if chanerr&(1<<i) == 0 {
			continue
		}
		if i < len(errNames) && errNames[i] != "" {
			names = append(names, errNames[i])
		} else {
			names = append(names, fmt.Sprintf("bit %d", i))
		}
	}
	return fmt.Sprintf("%#x (%s)", chanerr, strings.Join(names, ", "))
}

// Configuration-space registers beyond the standard header (spec §2.3).
const (
	CfgDMAUncErrSts  = 0x148
	CfgDMAUncErrMsk  = 0x14C
	CfgDMAUncErrSev  = 0x150
	CfgDMAUncErrPtr  = 0x154
	CfgDMAGlbErrPtr  = 0x160
	CfgChanErrInt    = 0x180 // internal copy of CHANERR, write 1 to clear (< 3.3)
	CfgChanErrMskInt = 0x184
	CfgChanErrSevInt = 0x188
	CfgChanErrPtr    = 0x18C
)

// Version numbers as read from CBVER.
const (
	Ver30 = 0x30
	Ver32 = 0x32
	Ver33 = 0x33
	Ver34 = 0x34
)

// DescSize is the size and required alignment of every descriptor.
const DescSize = 64

// Op codes (descriptor control bits 31:24).
const (
	OpCopy = 0x00
	OpFill = 0x01
)

// Descriptor control bits for copy (and, where noted, fill).
const (
	CtlIntEn        = 1 << 0 // copy, fill
	CtlSrcSnoopDis  = 1 << 1 // copy only
	CtlDstSnoopDis  = 1 << 2 // copy, fill
	CtlComplWrite   = 1 << 3 // copy, fill
	CtlFence        = 1 << 4 // copy, fill
	CtlNull         = 1 << 5 // copy only
	CtlSrcPageBreak = 1 << 6 // copy only
	CtlDstPageBreak = 1 << 7 // copy, fill
	CtlBundle       = 1 << 8
	CtlDestDCA      = 1 << 9
	CtlHint         = 1 << 10
	CtlOpShift      = 24
	ctlReservedCopy = 0x00FFF800 // bits 23:11
	ctlReservedFill = 0x00FFFE62 // bits 23:9 (DCA and HINT included), 6:5 and 1
)

// Descriptor field offsets within the 64 bytes.
const (
	DescOffSize    = 0x00
	DescOffCtl     = 0x04
	DescOffSrc     = 0x08 // fill: the 64-bit pattern
	DescOffDst     = 0x10
	DescOffNext    = 0x18
	DescOffNextSrc = 0x20
	DescOffNextDst = 0x28
	DescOffUser1   = 0x30
	DescOffUser2   = 0x38
)

// Descriptor is a decoded copy, fill or null descriptor.
type Descriptor struct {
	Size    uint32
	Ctl     uint32
	Src     uint64 // source address; for fill, the pattern
	Dst     uint64
	Next    uint64
	NextSrc uint64
	NextDst uint64
	User1   uint64
	User2   uint64
}

// Op returns the descriptor's op code.
func (d *Descriptor) Op() uint8 { return uint8(d.Ctl >> CtlOpShift) }

// Encode writes the descriptor into b, which must hold DescSize bytes.
func (d *Descriptor) Encode(b []byte) {
	_ = b[DescSize-1]
	le := binary.LittleEndian
	le.PutUint32(b[DescOffSize:], d.Size)
	le.PutUint32(b[DescOffCtl:], d.Ctl)
	le.PutUint64(b[DescOffSrc:], d.Src)
	le.PutUint64(b[DescOffDst:], d.Dst)
	le.PutUint64(b[DescOffNext:], d.Next)
	le.PutUint64(b[DescOffNextSrc:], d.NextSrc)
	le.PutUint64(b[DescOffNextDst:], d.NextDst)
	le.PutUint64(b[DescOffUser1:], d.User1)
	le.PutUint64(b[DescOffUser2:], d.User2)
}

// Decode reads a descriptor from b, which must hold DescSize bytes.
func (d *Descriptor) Decode(b []byte) {
	_ = b[DescSize-1]
	le := binary.LittleEndian
	d.Size = le.Uint32(b[DescOffSize:])
	d.Ctl = le.Uint32(b[DescOffCtl:])
	d.Src = le.Uint64(b[DescOffSrc:])
	d.Dst = le.Uint64(b[DescOffDst:])
	d.Next = le.Uint64(b[DescOffNext:])
	d.NextSrc = le.Uint64(b[DescOffNextSrc:])
	d.NextDst = le.Uint64(b[DescOffNextDst:])
	d.User1 = le.Uint64(b[DescOffUser1:])
	d.User2 = le.Uint64(b[DescOffUser2:])
}

// Validate checks the descriptor as the engine does before executing it and
// returns the CHANERR bits it would raise (0 when valid). xferCap is log2 of
// the maximum transfer size (0 meaning 4 GiB); caps is the channel's
// DMACAPABILITY: fill needs CapFill, the page-break bits CapPageBreak and
// the destination-DCA hint CapDCA. The bundle bit is refused: it belongs
// to operations (CRC, DIF) this engine does not have.
func (d *Descriptor) Validate(xferCap uint8, caps uint32) uint32 {
	switch d.Op() {
	case OpCopy:
		if d.Ctl&ctlReservedCopy != 0 {
			return ErrDescCtrl
		}
	case OpFill:
		if caps&CapFill == 0 || d.Ctl&ctlReservedFill != 0 {
			return ErrDescCtrl
		}
	default:
		return ErrDescCtrl
	}
	if d.Ctl&CtlBundle != 0 ||
		d.Ctl&(CtlSrcPageBreak|CtlDstPageBreak) != 0 && caps&CapPageBreak == 0 ||
		d.Ctl&CtlDestDCA != 0 && caps&CapDCA == 0 {
		return ErrDescCtrl
	}
	if d.Size == 0 {
		return ErrDescLen
	}
	if xferCap != 0 && uint64(d.Size) > 1<<xferCap {
		return ErrDescLen
	}
	if d.Next&(DescSize-1) != 0 {
		return ErrDescriptor
	}
	const top16 = 0xFFFF << 48
	if d.Ctl&CtlNull == 0 {
		if d.Op() == OpCopy && (d.Src&top16 != 0 || d.Src+uint64(d.Size) < d.Src ||
			d.Ctl&CtlSrcPageBreak != 0 && d.NextSrc&top16 != 0) {
			return ErrSrcAddr
		}
		if d.Dst&top16 != 0 || d.Dst+uint64(d.Size) < d.Dst ||
			d.Ctl&CtlDstPageBreak != 0 && d.NextDst&top16 != 0 {
			return ErrDstAddr
		}
	}
	return 0
}

// PageSize is the page a page-break descriptor breaks at.
const PageSize = 4096

// Pieces splits a transfer of size bytes at addr into the run before the
// page break and the run continuing at next, as a descriptor with the
// page-break bit set for that side does: the first run ends at the next
// 4 KiB boundary (or covers everything when the transfer fits before it).
func Pieces(addr, next uint64, size uint32, pageBreak bool) (firstLen uint32, second uint64) {
	if !pageBreak {
		return size, 0
	}
	toEnd := PageSize - addr%PageSize
	if uint64(size) <= toEnd {
		return size, 0
	}
	return uint32(toEnd), next
}

// FillPattern lays the 64-bit pattern down over dst little-endian from its
// first byte (byte i gets byte i%8 of the pattern), as a fill descriptor
// does from its destination address.
func FillPattern(dst []byte, pattern uint64) {
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], pattern)
	copy(dst, p[:])
	for done := 8; done < len(dst); done *= 2 {
		copy(dst[done:], dst[:done])
	}
}
