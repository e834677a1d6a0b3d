// Package dsahw holds the hardware facts of the Intel Data Streaming
// Accelerator (DSA, Linux's idxd driver), the copy engine of Xeons from
// Sapphire Rapids on: PCI IDs, BAR0 register offsets and fields, the
// device commands and their CMDSTS error codes, the GRPCFG and WQCFG
// table layouts, the 64-byte descriptor, the 32-byte completion record,
// opcodes, flags and completion status codes.
//
// It is pure description, like package ioat/hw for CBDMA: no device
// access and no state. The driver (package ioat) and the in-process model
// (package emulated) both speak these definitions, so every field is named
// once. The values restate Linux drivers/dma/idxd/registers.h and
// include/uapi/linux/idxd.h, SPDK include/spdk/idxd_spec.h and DPDK
// drivers/dma/idxd/idxd_hw_defs.h (see shared/spec/dsa.md).
//
// # Shape of a DSA function
//
// BAR0 holds the registers: capabilities (GENCAP, WQCAP, GRPCAP, ENGCAP,
// OPCAP), the offsets of the configuration tables (TABLEOFF), the device
// state (GENSTS), the command register (CMD) and its status (CMDSTS), and
// the software error log (SWERR). BAR2 holds the portals: each work queue
// (WQ) owns four 4 KiB pages at wq x 0x4000, the first of which takes
// descriptors with no limit. A descriptor reaches a dedicated WQ as one
// 64-byte posted write (MOVDIR64B); software counts what it has in flight,
// since a write past the WQ's free entries is dropped without a trace.
// Work queues feed engines through groups: GRPCFG names each group's WQs
// and engines, WQCFG each WQ's size, mode and limits.
package dsahw

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// VendorIntel is Intel's PCI vendor ID.
const VendorIntel = 0x8086

// DSA PCI device IDs.
const (
	DeviceSPR  = 0x0b25 // Sapphire Rapids / Emerald Rapids
	DeviceGNRD = 0x11fb // Granite Rapids-D
	DeviceDMR  = 0x1212 // Diamond Rapids
)

// Devices names every DSA device ID the driver accepts.
var Devices = map[uint16]string{
	DeviceSPR:  "DSA (Sapphire Rapids)",
	DeviceGNRD: "DSA (Granite Rapids-D)",
	DeviceDMR:  "DSA (Diamond Rapids)",
}

// BARs.
const (
	BARRegs   = 0 // MMIO registers
	BARPortal = 2 // work queue portals
)

// Portal geometry: four 4 KiB pages per WQ; the first (unlimited) takes
// descriptors from a driver that owns the device.
const (
	PortalPage   = 0x1000
	PortalStride = 4 * PortalPage
)

// PortalOffset is the offset in BAR2 of WQ wq's unlimited portal.
func PortalOffset(wq int) int { return wq * PortalStride }

// BAR0 register offsets.
const (
	RegVersion  = 0x00
	RegGenCap   = 0x10
	RegWQCap    = 0x20
	RegGrpCap   = 0x30
	RegEngCap   = 0x38
	RegOpCap    = 0x40 // 256 bits: four 64-bit words
	RegTableOff = 0x60 // 16-bit fields, each in units of TableUnit
	RegGenCfg   = 0x80
	RegGenCtrl  = 0x88
	RegGenSts   = 0x90
	RegIntCause = 0x98
	RegCmd      = 0xA0
	RegCmdSts   = 0xA8
	RegCmdCap   = 0xB0
	RegSWErr    = 0xC0 // 32 bytes: four 64-bit words
)

// TableUnit is the unit of the TABLEOFF fields.
const TableUnit = 0x100

// TABLEOFF field shifts (in the first 64-bit word).
const (
	TableGrpCfgShift   = 0
	TableWQCfgShift    = 16
	TableMSIXPermShift = 32
	TableIMSShift      = 48
)

// GENCAP fields.
const (
	GenCapBlockOnFault     = 1 << 0
	GenCapOverlapCopy      = 1 << 1
	GenCapCacheControlMem  = 1 << 2
	GenCapCacheControlCach = 1 << 3
	GenCapIntHandleReq     = 1 << 7
	GenCapConfigEn         = 1 << 31 // group and WQ configuration is writable
	GenCapMaxXferShift     = 16      // bits 20:16
	GenCapMaxBatchShift    = 21      // bits 24:21
)

// MaxXferShift is log2 of the largest transfer one descriptor may move.
func MaxXferShift(gencap uint64) uint { return uint(gencap>>GenCapMaxXferShift) & 0x1F }

// MaxBatchShift is log2 of the most descriptors a batch may hold.
func MaxBatchShift(gencap uint64) uint { return uint(gencap>>GenCapMaxBatchShift) & 0xF }

// WQCAP fields.
const (
	WQCapDedicated = 1 << 49
	WQCapShared    = 1 << 48
	WQCapPriority  = 1 << 51
)

// WQCap decodes WQCAP: the entries all WQs share, how many WQs there are,
// and log2 of the WQCFG entry size in 32-byte units.
func WQCap(v uint64) (totalSize, numWQs int, cfgShift uint) {
	return int(v & 0xFFFF), int(v >> 16 & 0xFF), uint(v >> 24 & 0xF)
}

// WQCfgStride is the size of one WQCFG entry for a WQCAP value.
func WQCfgStride(wqcap uint64) int {
	_, _, s := WQCap(wqcap)
	return 32 << s
}

// GroupCount decodes GRPCAP: the number of groups.
func GroupCount(grpcap uint64) int { return int(grpcap & 0xFF) }

// EngineCount decodes ENGCAP: the number of engines.
func EngineCount(engcap uint64) int { return int(engcap & 0xFF) }

// GENCTRL bits.
const (
	GenCtrlSoftErrIntEn = 1 << 0 // interrupt on an SWERR entry
)

// GENSTS device states (bits 1:0).
const (
	StateDisabled = 0
	StateEnabled  = 1
	StateDraining = 2
	StateHalted   = 3
	StateMask     = 3
)

// StateName names a GENSTS state.
func StateName(s uint32) string {
	return [...]string{"disabled", "enabled", "draining", "halted"}[s&StateMask]
}

// INTCAUSE bits (write 1 to clear).
const (
	IntCauseError   = 1 << 0 // an SWERR entry was logged
	IntCauseCommand = 1 << 1 // a command asked for an interrupt completed
)

// CMD register: the command in bits 24:20, its operand in 19:0, and bit 31
// asks for an interrupt (vector 0) when it completes.
const (
	CmdShift  = 20
	CmdIntReq = 1 << 31
)

// Commands.
const (
	CmdEnableDevice  = 1
	CmdDisableDevice = 2
	CmdDrainAll      = 3
	CmdAbortAll      = 4
	CmdResetDevice   = 5
	CmdEnableWQ      = 6
	CmdDisableWQ     = 7 // operand: WQ bitmask
	CmdDrainWQ       = 8
	CmdAbortWQ       = 9
	CmdResetWQ       = 10
)

// Command builds a CMD register value.
func Command(cmd uint32, operand uint32) uint32 { return cmd<<CmdShift | operand&0xFFFFF }

// CMDSTS: error code in bits 7:0, result in 23:8, active in bit 31.
const (
	CmdStsActive  = 1 << 31
	CmdStsErrMask = 0xFF
)

// CMDSTS error codes.
const (
	CmdOK               = 0x00
	CmdErrInvalCmd      = 0x01
	CmdErrInvalWQIdx    = 0x02
	CmdErrHW            = 0x03
	CmdErrDevEnabled    = 0x10 // enable device: already enabled
	CmdErrConfig        = 0x11 // enable device: bad configuration
	CmdErrBusMaster     = 0x12 // enable device: bus mastering off
	CmdErrPASIDInval    = 0x13
	CmdErrWQSizeERange  = 0x14 // enable device: WQ sizes add up past WQCAP
	CmdErrGrpConfig     = 0x15 // enable device: a group with WQs has no engine
	CmdErrGrpConfig2    = 0x16 // enable device: an engine in two groups
	CmdErrGrpConfig3    = 0x17 // enable device: a WQ in two groups
	CmdErrGrpConfig4    = 0x18 // enable device: a WQ or engine beyond the count
	CmdErrDevNotEnabled = 0x20 // enable WQ: device disabled
	CmdErrWQEnabled     = 0x21 // enable WQ: already enabled
	CmdErrWQSize        = 0x22 // enable WQ: size 0
	CmdErrWQPriority    = 0x23 // enable WQ: priority 0
	CmdErrWQMode        = 0x24 // enable WQ: mode the device lacks
	CmdErrBOFEn         = 0x25
	CmdErrPASIDEn       = 0x26
	CmdErrMaxBatchSize  = 0x27 // enable WQ: max_batch_shift above GENCAP's
	CmdErrMaxXferSize   = 0x28 // enable WQ: max_xfer_shift above GENCAP's
	CmdErrDisDevEnabled = 0x31 // disable device: not enabled
	CmdErrWQNotEnabled  = 0x32 // disable/drain/abort/reset WQ: not enabled
)

var cmdErrNames = map[uint8]string{
	CmdOK: "success", CmdErrInvalCmd: "invalid command", CmdErrInvalWQIdx: "invalid WQ index", CmdErrHW: "hardware error",
	CmdErrDevEnabled: "device already enabled", CmdErrConfig: "invalid configuration", CmdErrBusMaster: "bus mastering disabled",
	CmdErrPASIDInval: "invalid PASID", CmdErrWQSizeERange: "WQ sizes exceed the total", CmdErrGrpConfig: "a group with WQs has no engine",
	CmdErrGrpConfig2: "an engine in several groups", CmdErrGrpConfig3: "a WQ in several groups", CmdErrGrpConfig4: "a WQ or engine out of range in a group",
	CmdErrDevNotEnabled: "device not enabled", CmdErrWQEnabled: "WQ already enabled", CmdErrWQSize: "WQ size is 0",
	CmdErrWQPriority: "WQ priority is 0", CmdErrWQMode: "WQ mode not supported", CmdErrBOFEn: "block on fault not supported",
	CmdErrPASIDEn: "PASID not supported", CmdErrMaxBatchSize: "WQ max batch size over the device's", CmdErrMaxXferSize: "WQ max transfer size over the device's",
	CmdErrDisDevEnabled: "device not enabled (disable)", CmdErrWQNotEnabled: "WQ not enabled",
}

// CmdErrString names a CMDSTS error code.
func CmdErrString(code uint8) string {
	if s, ok := cmdErrNames[code]; ok {
		return fmt.Sprintf("%#x (%s)", code, s)
	}
	return fmt.Sprintf("%#x", code)
}

// SWERR fields (the first of its four 64-bit words; the third is the fault
// address). Writing the valid and overflow bits back clears the entry.
const (
	SWErrValid      = 1 << 0
	SWErrOverflow   = 1 << 1
	SWErrDescValid  = 1 << 2
	SWErrWQIdxValid = 1 << 3
	SWErrBatch      = 1 << 4
	SWErrCodeShift  = 8  // bits 15:8: the completion status code
	SWErrWQShift    = 16 // bits 23:16
	SWErrOpShift    = 32 // bits 39:32: the descriptor's opcode
)

// GRPCFG: 64 bytes per group. The WQ bitmap is 256 bits at +0, the engine
// bitmap 64 bits at +0x20, the flags at +0x28.
const (
	GrpCfgSize    = 64
	GrpCfgWQs     = 0x00
	GrpCfgEngines = 0x20
	GrpCfgFlags   = 0x28
)

// WQCFG dword offsets and fields.
const (
	WQCfgSize     = 0x00 // bits 15:0: entries
	WQCfgThresh   = 0x04
	WQCfgMode     = 0x08 // bit 0 dedicated, bit 1 block on fault, 7:4 priority
	WQCfgLimits   = 0x0C // bits 4:0 max_xfer_shift, 8:5 max_batch_shift
	WQCfgState    = 0x18 // bits 31:30: WQ state
	WQModeDedic   = 1 << 0
	WQModeBOF     = 1 << 1
	WQPrioShift   = 4
	WQStateShift  = 30
	WQStateEnable = 1
)

// WQLimits builds the WQCFG limits dword.
func WQLimits(xferShift, batchShift uint) uint32 {
	return uint32(xferShift&0x1F) | uint32(batchShift&0xF)<<5
}

// Opcodes (descriptor bits 31:24 of its second dword).
const (
	OpNoop     = 0x00
	OpBatch    = 0x01
	OpDrain    = 0x02
	OpMemMove  = 0x03
	OpFill     = 0x04
	OpCompare  = 0x05
	OpCompVal  = 0x06
	OpCRDelta  = 0x07
	OpAPDelta  = 0x08
	OpDualcast = 0x09
	OpCRCGen   = 0x10
	OpCopyCRC  = 0x11
	OpDIFCheck = 0x12
	OpDIFIns   = 0x13
	OpDIFStrip = 0x14
	OpDIFUpdt  = 0x15
	OpCFlush   = 0x20
)

// HasOp reports whether the 256-bit OPCAP (four little-endian words)
// advertises op.
func HasOp(opcap [4]uint64, op uint8) bool { return opcap[op/64]>>(op%64)&1 != 0 }

// Descriptor flags (24 bits).
const (
	FlagFence = 1 << 0
	FlagBOF   = 1 << 1 // block on fault
	FlagCRAV  = 1 << 2 // completion record address valid
	FlagRCR   = 1 << 3 // request a completion record
	FlagRCI   = 1 << 4 // request a completion interrupt
	FlagCC    = 1 << 8 // cache control: destination writes go to the cache
)

// Descriptor layout: 64 bytes.
const (
	DescSize       = 64
	DescOffPASID   = 0x00
	DescOffFlags   = 0x04 // flags 23:0, opcode 31:24
	DescOffCompl   = 0x08
	DescOffSrc     = 0x10 // source, fill pattern or descriptor list
	DescOffDst     = 0x18 // destination or second source
	DescOffSize    = 0x20 // transfer size or descriptor count
	DescOffIntH    = 0x24 // interrupt handle (16 bits)
	DescOffOpSpec  = 0x28 // op-specific: expected result, CRC seed, ...
	DescOffCRCSeed = 0x28
)

// Descriptor is a DSA work descriptor.
type Descriptor struct {
	PASID  uint32 // bits 19:0, priv bit 31
	Flags  uint32 // 24 bits
	Op     uint8
	Compl  uint64 // completion record address (32-byte aligned)
	Src    uint64 // source, pattern or descriptor list address
	Dst    uint64 // destination, second source or compare pattern
	Size   uint32 // transfer size, or descriptor count for a batch
	IntH   uint16 // interrupt handle: the MSI-X vector under VFIO
	OpSpec [24]byte
}

// Encode writes d into b[:64].
func (d *Descriptor) Encode(b []byte) {
	_ = b[DescSize-1]
	le := binary.LittleEndian
	le.PutUint32(b[DescOffPASID:], d.PASID)
	le.PutUint32(b[DescOffFlags:], d.Flags&0xFFFFFF|uint32(d.Op)<<24)
	le.PutUint64(b[DescOffCompl:], d.Compl)
	le.PutUint64(b[DescOffSrc:], d.Src)
	le.PutUint64(b[DescOffDst:], d.Dst)
	le.PutUint32(b[DescOffSize:], d.Size)
	le.PutUint16(b[DescOffIntH:], d.IntH)
	le.PutUint16(b[DescOffIntH+2:], 0)
	copy(b[DescOffOpSpec:DescSize], d.OpSpec[:])
}

// Decode reads d from b[:64].
func (d *Descriptor) Decode(b []byte) {
	_ = b[DescSize-1]
	le := binary.LittleEndian
	d.PASID = le.Uint32(b[DescOffPASID:])
	f := le.Uint32(b[DescOffFlags:])
	d.Flags, d.Op = f&0xFFFFFF, uint8(f>>24)
	d.Compl = le.Uint64(b[DescOffCompl:])
	d.Src = le.Uint64(b[DescOffSrc:])
	d.Dst = le.Uint64(b[DescOffDst:])
	d.Size = le.Uint32(b[DescOffSize:])
	d.IntH = le.Uint16(b[DescOffIntH:])
	copy(d.OpSpec[:], b[DescOffOpSpec:DescSize])
}

// Completion record layout: 32 bytes, 32-byte aligned.
const (
	ComplSize       = 32
	ComplAlign      = 32
	ComplOffStatus  = 0x00 // status 6:0; bit 7 set when the record was written for a write error
	ComplOffResult  = 0x01 // compare: 0 equal, 1 different
	ComplOffBytes   = 0x04 // bytes completed (or descriptors, for a batch)
	ComplOffFault   = 0x08 // faulting address
	ComplOffOpSpec  = 0x10 // CRC value, invalid flags, ...
	ComplStatusMask = 0x7F
)

// Completion status codes (the record's status byte, bits 6:0).
const (
	StatusNone          = 0x00 // not written yet
	StatusSuccess       = 0x01
	StatusSuccessPred   = 0x02 // success with a false predicate
	StatusPageFault     = 0x03 // page fault without block on fault: partial
	StatusPageFaultIR   = 0x04
	StatusBatchFail     = 0x05 // a descriptor of the batch failed
	StatusBatchPageFlt  = 0x06 // page fault reading the descriptor list
	StatusDROffNoInc    = 0x07
	StatusDROffERange   = 0x08
	StatusDIFErr        = 0x09
	StatusBadOpcode     = 0x10
	StatusInvalidFlags  = 0x11
	StatusNonZeroRsvd   = 0x12
	StatusXferERange    = 0x13 // transfer size 0 or over max_xfer_shift
	StatusDescCntERange = 0x14 // batch count below 2 or over max_batch_shift
	StatusDRERange      = 0x15
	StatusOverlap       = 0x16
	StatusDualcastErr   = 0x17
	StatusDescListAlign = 0x18
	StatusIntHandle     = 0x19
	StatusCRAXlat       = 0x1A // completion record address translation failed
	StatusCRAAlign      = 0x1B // completion record misaligned
	StatusAddrAlign     = 0x1C
	StatusPrivBad       = 0x1D
	StatusTrafficClass  = 0x1E
	StatusPFaultRDBA    = 0x1F
	StatusHWErr1        = 0x20
	StatusHWErrDRB      = 0x21
	StatusXlatFail      = 0x22
)

var statusNames = map[uint8]string{
	StatusNone: "not complete", StatusSuccess: "success", StatusSuccessPred: "success (false predicate)",
	StatusPageFault: "page fault (partial completion)", StatusPageFaultIR: "page fault (interrupt handle)",
	StatusBatchFail: "batch: a descriptor failed", StatusBatchPageFlt: "batch: page fault reading the descriptor list",
	StatusDROffNoInc: "delta record offset not increasing", StatusDROffERange: "delta record offset out of range",
	StatusDIFErr: "DIF error", StatusBadOpcode: "unsupported opcode", StatusInvalidFlags: "invalid flags",
	StatusNonZeroRsvd: "non-zero reserved field", StatusXferERange: "transfer size out of range",
	StatusDescCntERange: "batch descriptor count out of range", StatusDRERange: "delta record size out of range",
	StatusOverlap: "overlapping buffers", StatusDualcastErr: "dualcast misaligned", StatusDescListAlign: "descriptor list misaligned",
	StatusIntHandle: "invalid interrupt handle", StatusCRAXlat: "completion record address not translated",
	StatusCRAAlign: "completion record misaligned", StatusAddrAlign: "address misaligned", StatusPrivBad: "privilege",
	StatusTrafficClass: "traffic class", StatusPFaultRDBA: "page fault on drain readback", StatusHWErr1: "hardware error",
	StatusHWErrDRB: "hardware error (drain readback)", StatusXlatFail: "address translation failed",
}

// StatusString names a completion status code.
func StatusString(s uint8) string {
	s &= ComplStatusMask
	if n, ok := statusNames[s]; ok {
		return fmt.Sprintf("%#x (%s)", s, n)
	}
	return fmt.Sprintf("%#x (unknown)", s)
}

// IsFault reports whether a status says an address could not be reached
// (a page fault or a failed translation): the data was not all there.
func IsFault(s uint8) bool {
	switch s & ComplStatusMask {
	case StatusPageFault, StatusPageFaultIR, StatusBatchPageFlt, StatusXlatFail, StatusCRAXlat:
		return true
	}
	return false
}

// Completion is a decoded completion record.
type Completion struct {
	Status uint8  // bits 6:0 of the status byte
	Write  bool   // bit 7: the fault was on a write
	Result uint8  // compare: 0 equal, 1 different
	Bytes  uint32 // bytes completed (descriptors completed, for a batch)
	Fault  uint64 // faulting address
	CRC    uint64 // CRC generation: the CRC value
}

// Done reports whether the record has been written.
func (c Completion) Done() bool { return c.Status != StatusNone }

// OK reports whether the operation succeeded.
func (c Completion) OK() bool { return c.Status == StatusSuccess || c.Status == StatusSuccessPred }

// DecodeCompletion decodes a 32-byte completion record. It fails on a
// buffer shorter than ComplSize and on reserved bytes 2-3 that are not
// zero, which the device always writes as zero.
func DecodeCompletion(b []byte) (Completion, error) {
	if len(b) < ComplSize {
		return Completion{}, fmt.Errorf("dsahw: completion record of %d bytes, want %d", len(b), ComplSize)
	}
	le := binary.LittleEndian
	if r := le.Uint16(b[2:]); r != 0 {
		return Completion{}, fmt.Errorf("dsahw: completion record reserved bytes 2-3 are %#x, want 0", r)
	}
	return Completion{
		Status: b[ComplOffStatus] & ComplStatusMask,
		Write:  b[ComplOffStatus]&0x80 != 0,
		Result: b[ComplOffResult],
		Bytes:  le.Uint32(b[ComplOffBytes:]),
		Fault:  le.Uint64(b[ComplOffFault:]),
		CRC:    le.Uint64(b[ComplOffOpSpec:]),
	}, nil
}

// EncodeCompletion writes c as a 32-byte record into b, status byte last
// in program order (a reader polls it).
func EncodeCompletion(b []byte, c Completion) {
	_ = b[ComplSize-1]
	le := binary.LittleEndian
	b[ComplOffResult] = c.Result
	le.PutUint16(b[2:], 0)
	le.PutUint32(b[ComplOffBytes:], c.Bytes)
	le.PutUint64(b[ComplOffFault:], c.Fault)
	le.PutUint64(b[ComplOffOpSpec:], c.CRC)
	le.PutUint64(b[ComplOffOpSpec+8:], 0)
	s := c.Status & ComplStatusMask
	if c.Write {
		s |= 0x80
	}
	b[ComplOffStatus] = s
}

// CRC32C is the CRC that CRC generation (OpCRCGen) reports in the
// completion record's CRC field: CRC-32C (Castagnoli) of the data,
// continuing from seed, as hash/crc32.Update computes it (the seed and the
// result inverted). The model computes it; the driver offers it.
func CRC32C(seed uint32, p []byte) uint32 { return crc32.Update(seed, castagnoli, p) }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)
