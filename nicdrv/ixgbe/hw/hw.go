// Package hw holds the hardware facts of the Intel 82599 10 gigabit NIC
// (X520 and its siblings): PCI IDs, BAR0 register offsets and bits, the
// advanced receive and transmit descriptor layouts (read and write-back
// formats), and the Flow Director bucket hash that software computes for
// every perfect filter it adds.
//
// It is pure description: no device access, no state. The driver (package
// nicdrv/ixgbe) and the in-process model (package emulated) both speak these
// definitions, so a register is named once. Values come from the project's
// spec notes (shared/spec/nic.md §2), which restate Linux's ixgbe
// (ixgbe_type.h, ixgbe_82599.c), DPDK's ixgbe base code and ixy.
//
// The file is long (about 800 lines) because it is the register map: one
// block of constants per register group, in the datasheet's order, where a
// reader looks an offset up; splitting it would scatter the map.
package hw

import "encoding/binary"

// PCI identity and sizes.
const (
	VendorIntel = 0x8086
	// Device82599SFP is the 82599 with SFP+ cages (X520), the common one.
	Device82599SFP = 0x10FB
	// BAR0Size is the size of the register BAR (512 KiB).
	BAR0Size = 512 << 10
	// Queues is the number of RX and of TX queues.
	Queues = 128
	// MaxQueuePairs is how many queue pairs this driver and model use: one
	// MSI-X vector each fits the 64 the function offers.
	MaxQueuePairs = 64
	// MSIXVectors is the number of MSI-X vectors the function offers.
	MSIXVectors = 64
	// RAREntries is the number of receive address registers.
	RAREntries = 128
	// MTAEntries is the number of 32-bit multicast table registers.
	MTAEntries = 128
	// ETQFEntries is the number of EtherType queue filters.
	ETQFEntries = 8
	// FiveTupleEntries is the number of 5-tuple queue filters.
	FiveTupleEntries = 128
	// RETAEntries is the number of 8-bit redirection table entries.
	RETAEntries = 128
	// RSSKeyLen is the length of the Toeplitz key in bytes.
	RSSKeyLen = 40
	// MaxFrame is the driver's default largest frame without FCS: a
	// 1500-byte MTU with a VLAN tag.
	MaxFrame = 1518
	// StdFrame is the largest untagged frame without FCS the MAC passes
	// with HLREG0.JUMBOEN off (4 more tagged): MAXFRS.MFS resets to 1518
	// and counts the FCS, as Linux's ixgbe (MFS = MTU + 14 + 4) reads it.
	StdFrame = 1514
	// MaxJumbo is the largest frame MAXFRS may allow (without FCS).
	MaxJumbo = 15872 - 4
	// MinFrame is the shortest frame without FCS: HLREG0.TXPADEN pads to
	// it.
	MinFrame = 60
	// DescSize is the size of an advanced RX or TX descriptor.
	DescSize = 16
	// RingAlign is the alignment of a ring base; RingLenAlign of its length.
	RingAlign    = 128
	RingLenAlign = 128
)

// Is82599 tells whether a PCI vendor and device ID pair is an 82599 PF this
// driver runs (every 82599 physical function shares the register model).
func Is82599(vendor, device uint16) bool {
	if vendor != VendorIntel {
		return false
	}
	switch device {
	case 0x10F7, 0x1514, 0x1517, 0x10F8, 0x10F9, 0x10FB, 0x10FC, 0x151C, 0x1507, 0x1529, 0x152A,
		0x154D, 0x154A, 0x1558, 0x1557, 0x154F:
		return true
	}
	return false
}

// General registers.
const (
	CTRL     = 0x00000
	STATUS   = 0x00008
	CTRLEXT  = 0x00018
	EICR     = 0x00800
	EICS     = 0x00808
	EIAC     = 0x00810
	EIMS     = 0x00880
	EIMC     = 0x00888
	EIAM     = 0x00890
	GPIE     = 0x00898
	IVARMisc = 0x00A00
	RDRXCTL  = 0x02F00
	RXCTRL   = 0x03000
	RXCSUM   = 0x05000
	FCTRL    = 0x05080
	VLNCTRL  = 0x05088
	MCSTCTRL = 0x05090
	MTA      = 0x05200
	MRQC     = 0x05818
	RETA     = 0x05C00
	RSSRK    = 0x05C80
	HLREG0   = 0x04240
	MAXFRS   = 0x04268
	AUTOC    = 0x042A0
	LINKS    = 0x042A4
	RTTDCS   = 0x04900
	DMATXCTL = 0x04A80
	DTXMXSZ  = 0x08100
	MTQC     = 0x08120
	EEC      = 0x10010
)

// Per-vector and per-queue register families.
const (
	eitrLow   = 0x00820
	eitrHigh  = 0x12300
	ivar0     = 0x00900
	eimsEx0   = 0x00AA0
	eimcEx0   = 0x00AB0
	eiacEx0   = 0x00AD0 // EIAM_EX
	rxLow     = 0x01000
	rxHigh    = 0x0D000
	txBase    = 0x06000
	qStride   = 0x40
	srrctlLow = 0x02100
	rxpbsize0 = 0x03C00
	txpbsize0 = 0x0CC00
	psrtype0  = 0x0EA00
	ral0      = 0x0A200
	mpc0      = 0x03FA0
)

// EITR is the throttle register of MSI-X vector v (0..63).
func EITR(v int) int {
	if v < 24 {
		return eitrLow + 4*v
	}
	return eitrHigh + 4*(v-24)
}

// IVAR is the interrupt allocation register of queue pair group i (0..63):
// it routes RX and TX queues 2i and 2i+1 (see IVARRxShift, IVARTxShift).
func IVAR(i int) int { return ivar0 + 4*i }

// IVARRxShift and IVARTxShift are where, in IVAR(q/2), the 8-bit entry of
// RX and TX queue q sits.
func IVARRxShift(q int) int { return 16 * (q & 1) }

// IVARTxShift: see IVARRxShift.
func IVARTxShift(q int) int { return 16*(q&1) + 8 }

// EIMSEx, EIMCEx and EIAMEx are the extended mask set, mask clear and
// auto-mask registers of vectors 32i..32i+31 (i 0 or 1).
func EIMSEx(i int) int { return eimsEx0 + 4*i }

// EIMCEx: see EIMSEx.
func EIMCEx(i int) int { return eimcEx0 + 4*i }

// EIAMEx: see EIMSEx.
func EIAMEx(i int) int { return eiacEx0 + 4*i }

// rxq is the base of RX queue q's block of registers.
func rxq(q int) int {
	if q < 64 {
		return rxLow + qStride*q
	}
	return rxHigh + qStride*(q-64)
}

// RDBAL is the low half of RX queue q's ring base (q 0..127).
func RDBAL(q int) int { return rxq(q) }

// RDBAH is the high half of RX queue q's ring base.
func RDBAH(q int) int { return rxq(q) + 0x04 }

// RDLEN is RX queue q's ring length in bytes.
func RDLEN(q int) int { return rxq(q) + 0x08 }

// RDH is RX queue q's head (the NIC's next descriptor).
func RDH(q int) int { return rxq(q) + 0x10 }

// RDT is RX queue q's tail (one past the last descriptor given to the NIC).
func RDT(q int) int { return rxq(q) + 0x18 }

// RXDCTL is RX queue q's control: thresholds and the queue's enable bit.
func RXDCTL(q int) int { return rxq(q) + 0x28 }

// SRRCTL is the split and replication receive control of RX queue q.
func SRRCTL(q int) int {
	if q < 16 {
		return srrctlLow + 4*q
	}
	return rxq(q) + 0x14
}

// TDBAL is the low half of TX queue q's ring base (q 0..127).
func TDBAL(q int) int { return txBase + qStride*q }

// TDBAH is the high half of TX queue q's ring base.
func TDBAH(q int) int { return txBase + qStride*q + 0x04 }

// TDLEN is TX queue q's ring length in bytes.
func TDLEN(q int) int { return txBase + qStride*q + 0x08 }

// TDH is TX queue q's head (the NIC's next descriptor).
func TDH(q int) int { return txBase + qStride*q + 0x10 }

// TDT is TX queue q's tail (one past the last descriptor to send).
func TDT(q int) int { return txBase + qStride*q + 0x18 }

// TXDCTL is TX queue q's control: thresholds and the queue's enable bit.
func TXDCTL(q int) int { return txBase + qStride*q + 0x28 }

// RXPBSIZE and TXPBSIZE size packet buffer i (0..7).
func RXPBSIZE(i int) int { return rxpbsize0 + 4*i }

// TXPBSIZE: see RXPBSIZE.
func TXPBSIZE(i int) int { return txpbsize0 + 4*i }

// PSRTYPE selects which headers pool i's header split recognises.
func PSRTYPE(i int) int { return psrtype0 + 4*i }

// RAL and RAH are receive address i (0..127): RAL bytes 0-3, RAH bytes 4-5
// and the address-valid bit.
func RAL(i int) int { return ral0 + 8*i }

// RAH: see RAL.
func RAH(i int) int { return ral0 + 8*i + 4 }

// Queue filters.
const (
	etqf0     = 0x05128
	etqs0     = 0x0EC00
	saqf0     = 0x0E000
	daqf0     = 0x0E200
	sdpqf0    = 0x0E400
	ftqf0     = 0x0E600
	l34t0     = 0x0E800
	FDIRCTRL  = 0x0EE00
	FDIRIPSA  = 0x0EE18
	FDIRIPDA  = 0x0EE1C
	FDIRPORT  = 0x0EE20
	FDIRVLAN  = 0x0EE24
	FDIRHASH  = 0x0EE28
	FDIRCMD   = 0x0EE2C
	FDIRFREE  = 0x0EE38
	FDIRDIP4M = 0x0EE3C
	FDIRSIP4M = 0x0EE40
	FDIRTCPM  = 0x0EE44
	FDIRUDPM  = 0x0EE48
	FDIRMATCH = 0x0EE58
	FDIRMISS  = 0x0EE5C
	FDIRHKEY  = 0x0EE68
	FDIRSKEY  = 0x0EE6C
	FDIRM     = 0x0EE70
	FDIRIP6M  = 0x0EE74
)

// ETQF and ETQS are EtherType filter i (0..7) and its queue select.
func ETQF(i int) int { return etqf0 + 4*i }

// ETQS: see ETQF.
func ETQS(i int) int { return etqs0 + 4*i }

// SAQF, DAQF, SDPQF, FTQF and L34TIMIR are 5-tuple filter i (0..127): source
// and destination IPv4 address, the ports, the protocol and control word,
// and the queue.
func SAQF(i int) int { return saqf0 + 4*i }

// DAQF is 5-tuple filter i's IPv4 destination address.
func DAQF(i int) int { return daqf0 + 4*i }

// SDPQF is 5-tuple filter i's ports (source 15:0, destination 31:16).
func SDPQF(i int) int { return sdpqf0 + 4*i }

// FTQF is 5-tuple filter i's protocol, priority, masks and enable.
func FTQF(i int) int { return ftqf0 + 4*i }

// L34TIMIR is 5-tuple filter i's queue.
func L34TIMIR(i int) int { return l34t0 + 4*i }

// Statistics (clear on read). 64-bit counters are read low half first; the
// read of the high half clears the counter.
const (
	CRCERRS = 0x04000
	ILLERRC = 0x04004
	ERRBC   = 0x04008
	RLEC    = 0x04040
	GPRC    = 0x04074
	BPRC    = 0x04078
	MPRC    = 0x0407C
	GPTC    = 0x04080
	GORCL   = 0x04088
	GORCH   = 0x0408C
	GOTCL   = 0x04090
	GOTCH   = 0x04094
	RUC     = 0x040A4
	RFC     = 0x040A8
	ROC     = 0x040AC
	RJC     = 0x040B0
	TORL    = 0x040C0
	TORH    = 0x040C4
	TPR     = 0x040D0
	TPT     = 0x040D4
	MPTC    = 0x040F0
	BPTC    = 0x040F4
	// StatsFirst and StatsLast bound the block of general counters.
	StatsFirst = CRCERRS
	StatsLast  = 0x04124
	// QueueStats is how many queues have their own counters.
	QueueStats = 16
)

// MPC counts frames missed for lack of room in packet buffer i (0..7).
func MPC(i int) int { return mpc0 + 4*i }

// QPRC counts frames queue q received (q 0..15).
func QPRC(q int) int { return 0x01030 + qStride*q }

// QBRCL is the low half of queue q's received byte counter.
func QBRCL(q int) int { return 0x01034 + qStride*q }

// QBRCH is the high half of queue q's received byte counter.
func QBRCH(q int) int { return 0x01038 + qStride*q }

// QPRDC counts frames queue q dropped for want of a descriptor (SRRCTL.DROP_EN).
func QPRDC(q int) int { return 0x01430 + qStride*q }

// QPTC counts frames queue q transmitted.
func QPTC(q int) int { return 0x06030 + qStride*q }

// QBTCL is the low half of queue q's transmitted byte counter.
func QBTCL(q int) int { return 0x08700 + 8*q }

// QBTCH is the high half of queue q's transmitted byte counter.
func QBTCH(q int) int { return 0x08704 + 8*q }

// CTRL bits.
const (
	CtrlGIODis  = 1 << 2  // PCIe master disable
	CtrlLinkRst = 1 << 3  // link reset
	CtrlRst     = 1 << 26 // device reset, self-clearing
	CtrlRstMask = CtrlLinkRst | CtrlRst
)

// STATUS bits.
const (
	StatusLinkUp = 1 << 7
	StatusGIO    = 1 << 19 // PCIe master enable: requests outstanding
)

// CTRL_EXT bits.
const (
	CtrlExtPFRstD  = 1 << 14 // PF reset done
	CtrlExtNSDis   = 1 << 16 // no-snoop disable
	CtrlExtDrvLoad = 1 << 28
)

// EEC bits.
const (
	EECPres   = 1 << 8
	EECAutoRd = 1 << 9 // NVM auto-read done
)

// RDRXCTL bits.
const (
	RdrxctlCRCStrip = 1 << 1
	RdrxctlDMAIDone = 1 << 3 // DMA initialisation done
	// RdrxctlRSCFrstSize and RdrxctlRSCACKC are set as Linux and ixy set
	// them on the 82599 (bits 17 and 25/26 of the datasheet's init).
	RdrxctlAGGDis = 1 << 17
	RdrxctlRSCACK = 1 << 25
	RdrxctlFCOE   = 1 << 26
)

// RXCTRL bits.
const RxctrlRXEN = 1 << 0

// HLREG0 bits.
const (
	Hlreg0TxCRCEn   = 1 << 0
	Hlreg0RxCRCStrp = 1 << 1
	Hlreg0JumboEn   = 1 << 2
	Hlreg0TxPadEn   = 1 << 10
	Hlreg0Lpbk      = 1 << 15
)

// VLNCTRL: VET, the EtherType of a VLAN tag (resets to 0x8100).
const VlnctrlVETMask = 0xFFFF

// MAXFRS: the largest frame (FCS included) in bits 31:16.
const MaxfrsShift = 16

// FCTRL bits.
const (
	FctrlSBP = 1 << 1
	FctrlMPE = 1 << 8
	FctrlUPE = 1 << 9
	FctrlBAM = 1 << 10
)

// MCSTCTRL: multicast filter enable (hash of bits 47:36, MO = 00).
const McstctrlMFE = 1 << 2

// RXCSUM bits.
const (
	RxcsumIPPCSE = 1 << 12
	RxcsumPCSD   = 1 << 13 // hash (not checksum) in the descriptor
)

// AUTOC and LINKS bits.
const (
	AutocANRestart    = 1 << 12
	AutocLMSMask      = 7 << 13
	AutocLMS10GSerial = 3 << 13
	AutocPMAPMDMask   = 3 << 7
	LinksUp           = 1 << 30
	LinksSpeedMask    = 3 << 28
	LinksSpeed10G     = 3 << 28
	LinksSpeed1G      = 2 << 28
	LinksSpeed100M    = 1 << 28
)

// RTTDCS, DMATXCTL.
const (
	RttdcsArbDis = 1 << 6
	DmatxctlTE   = 1 << 0
)

// RXDCTL and TXDCTL bits.
const (
	RxdctlEnable       = 1 << 25
	RxdctlVME          = 1 << 30
	TxdctlEnable       = 1 << 25
	TxdctlPThreshShift = 0
	TxdctlHThreshShift = 8
	TxdctlWThreshShift = 16
)

// SRRCTL fields.
const (
	// SrrctlBSizePktMask is the packet buffer size in KiB (bits 4:0).
	SrrctlBSizePktMask = 0x1F
	// SrrctlBSizeHdrShift: header buffer size in 64-byte units, bits 13:8.
	SrrctlBSizeHdrShift = 8
	SrrctlBSizeHdrMask  = 0x3F << 8
	SrrctlDescTypeMask  = 7 << 25
	// Descriptor types.
	SrrctlDescLegacy       = 0 << 25
	SrrctlDescAdvOneBuf    = 1 << 25
	SrrctlDescAdvHdrSplit  = 2 << 25
	SrrctlDescAdvHdrAlways = 5 << 25
	SrrctlDropEn           = 1 << 28
)

// PSRTYPE bits: the headers header split recognises.
const (
	PsrtypeTCPHdr  = 1 << 4
	PsrtypeUDPHdr  = 1 << 5
	PsrtypeIPv4Hdr = 1 << 8
	PsrtypeIPv6Hdr = 1 << 9
	PsrtypeL2Hdr   = 1 << 12
)

// MRQC fields.
const (
	MrqcMRQEMask = 0xF
	MrqcRSSEn    = 0x1
	MrqcTCPIPv4  = 1 << 16
	MrqcIPv4     = 1 << 17
	MrqcIPv6     = 1 << 20
	MrqcTCPIPv6  = 1 << 21
	MrqcUDPIPv4  = 1 << 22
	MrqcUDPIPv6  = 1 << 23
)

// RETAQueueMask is the queue field of a redirection table entry.
const RETAQueueMask = 0x0F

// GPIE and interrupt bits.
const (
	GpieMSIXMode = 1 << 4
	GpieOCD      = 1 << 5
	GpieEIAME    = 1 << 30
	GpiePBA      = 1 << 31
	// EicrLSC is the link status change cause (vector of IVAR_MISC's
	// "other" entry in MSI-X mode).
	EicrLSC   = 1 << 20
	EicrOther = 1 << 31
	// EicrRTxQMask are the 16 queue causes of EICR in MSI-X mode (vectors
	// 0..15; vectors 16..63 are in the extended registers).
	EicrRTxQMask = 0xFFFF
	IVARValid    = 0x80
	// IVARMiscOtherShift is where IVAR_MISC routes "other" causes.
	IVARMiscOtherShift = 8
	// EITR: interval in bits 11:3, counted in 2 µs units.
	EitrIntervalMask  = 0xFF8
	EitrIntervalShift = 3
	EitrUnitNanos     = 2000
	EitrCntWDis       = 1 << 31
)

// ETQF and ETQS bits.
const (
	EtqfFilterEn   = 1 << 31
	EtqfTypeMask   = 0xFFFF
	EtqsQueueEn    = 1 << 31
	EtqsQueueShift = 16
	EtqsQueueMask  = 0x7F << 16
)

// FTQF and L34T_IMIR fields (5-tuple filters).
const (
	FtqfProtoMask     = 3
	FtqfProtoTCP      = 0
	FtqfProtoUDP      = 1
	FtqfProtoSCTP     = 2
	FtqfProtoOther    = 3
	FtqfPriorityShift = 2
	FtqfPriorityMask  = 7 << 2
	FtqfPoolShift     = 8
	// FtqfMask bits: "do not compare" for each field.
	FtqfMaskSrcAddr = 1 << 25
	FtqfMaskDstAddr = 1 << 26
	FtqfMaskSrcPort = 1 << 27
	FtqfMaskDstPort = 1 << 28
	FtqfMaskProto   = 1 << 29
	FtqfPoolMaskEn  = 1 << 30
	FtqfQueueEn     = 1 << 31
	// SDPQF: source port bits 15:0, destination port 31:16.
	SdpqfDstPortShift = 16
	L34tQueueShift    = 21
	L34tQueueMask     = 0x7F << 21
	L34tSizeBP        = 1 << 12
	L34tReserved      = 1 << 19 // reserved, set as DPDK does
	L34tLLI           = 1 << 20
)

// Flow Director fields.
const (
	FdirctrlPBAllocMask  = 3
	FdirctrlPBAlloc64K   = 1
	FdirctrlInitDone     = 1 << 3
	FdirctrlPerfectMatch = 1 << 4
	FdirctrlReportStatus = 1 << 5
	FdirctrlDropQShift   = 8
	FdirctrlFlexShift    = 16
	FdirctrlFlexMask     = 0x1F << 16
	FdirctrlMaxLenShift  = 24
	FdirctrlFullThShift  = 28
	FdirmVLANID          = 1 << 0
	FdirmVLANP           = 1 << 1
	FdirmPool            = 1 << 2
	FdirmL4P             = 1 << 3
	FdirmFlex            = 1 << 4
	FdirmDIPv6           = 1 << 5
	// FDIRCMD.
	FdircmdCmdMask     = 3
	FdircmdAdd         = 1
	FdircmdRemove      = 2
	FdircmdQuery       = 3
	FdircmdFilterValid = 1 << 2
	FdircmdUpdate      = 1 << 3
	FdircmdL4TypeShift = 5
	FdircmdL4TypeMask  = 3 << 5
	FdircmdIPv6        = 1 << 7
	FdircmdDrop        = 1 << 9
	FdircmdLast        = 1 << 11
	FdircmdCollision   = 1 << 12
	FdircmdQueueEn     = 1 << 15
	FdircmdQueueShift  = 16
	FdircmdQueueMask   = 0x7F << 16
	// FDIRHASH: bucket hash bits 14:0, software index 31:16.
	FdirhashBucketMask = 0x7FFF
	FdirhashSWShift    = 16
	// FDIRPORT: destination port bits 31:16, source 15:0. FDIRVLAN: flex
	// bits 31:16, VLAN 15:0.
	FdirportDstShift  = 16
	FdirvlanFlexShift = 16
	// Flow types (the L4 type field of FDIRCMD and the hash input).
	FlowIPv4 = 0
	FlowUDP  = 1
	FlowTCP  = 2
	FlowSCTP = 3
	// FdirBucketKey is the bucket hash key Linux writes to FDIRHKEY.
	FdirBucketKey = 0x3DAD14E2
	// FdirSignatureKey is the signature hash key (FDIRSKEY).
	FdirSignatureKey = 0x174D3614
	// FdirPerfect64K is the number of perfect filters PBALLOC 1 holds.
	FdirPerfect64K = 2048
)

// FdirBucketBits is how many bucket hash bits the perfect filter table of
// PBALLOC value a uses (2K, 4K or 8K filters).
func FdirBucketBits(pballoc uint32) int { return 10 + int(pballoc) }

// FdirInput is the input of the Flow Director hash: the fields of a flow,
// already masked as the filter masks them (a field not compared is zero).
// Addresses and ports are in wire order.
type FdirInput struct {
	Pool     uint8
	FlowType uint8 // FlowUDP, ..., plus 4 for IPv6
	VLAN     uint16
	DstIP    [16]byte // IPv4 in the first 4 bytes
	SrcIP    [16]byte
	SrcPort  uint16
	DstPort  uint16
	Flex     [2]byte // the flex bytes as they are in the frame
}

// stream lays the input out as the 11 big-endian words the hash runs over:
// pool, flow type, VLAN; destination address; source address; source and
// destination port; flex bytes and a zero bucket field.
func (in FdirInput) stream() (w [11]uint32) {
	w[0] = uint32(in.Pool)<<24 | uint32(in.FlowType)<<16 | uint32(in.VLAN)
	for i := 0; i < 4; i++ {
		w[1+i] = binary.BigEndian.Uint32(in.DstIP[4*i:])
		w[5+i] = binary.BigEndian.Uint32(in.SrcIP[4*i:])
	}
	w[9] = uint32(in.SrcPort)<<16 | uint32(in.DstPort)
	w[10] = uint32(in.Flex[0])<<24 | uint32(in.Flex[1])<<16
	return w
}

// FdirBucketHash is the 13-bit bucket hash of a perfect filter under key
// (FDIRHKEY), the one software writes to FDIRHASH when it adds the filter
// and the NIC computes over every received frame: the XOR of the flow's
// words 1..10 and its word-swapped copy, each folded with the pool, flow
// type and VLAN word, are shifted through the key's 16 bit pairs.
func FdirBucketHash(in FdirInput, key uint32) uint32 {
	w := in.stream()
	var common uint32
	for _, x := range w[1:] {
		common ^= x
	}
	ftv := w[0]
	hi := common
	lo := common>>16 | common<<16
	hi ^= ftv ^ ftv>>16
	var h uint32
	for n := 0; n < 16; n++ {
		if n == 1 {
			// The pool, flow and VLAN word joins the low half only after
			// bit 0, which must not see it.
			lo ^= ftv ^ ftv<<16
		}
		if key&(1<<n) != 0 {
			h ^= lo >> n
		}
		if key&(1<<(n+16)) != 0 {
			h ^= hi >> n
		}
	}
	return h & 0x1FFF
}

// Advanced RX descriptor: read format (what software gives the NIC) and
// write-back format (what the NIC returns).
const (
	// RxStatDD .. are status bits of the write-back's status/error word.
	RxStatDD    = 1 << 0
	RxStatEOP   = 1 << 1
	RxStatFLM   = 1 << 2 // Flow Director filter matched
	RxStatVP    = 1 << 3
	RxStatUDPCS = 1 << 4
	RxStatL4CS  = 1 << 5
	RxStatIPCS  = 1 << 6
	RxStatPIF   = 1 << 7
	RxErrHBO    = 1 << 23 // header buffer overflow
	RxErrRXE    = 1 << 29
	RxErrTCPE   = 1 << 30
	RxErrIPE    = 1 << 31
	// Packet type bits of pkt_info (bits 15:4 of the first word).
	PktTypeIPv4 = 1 << 4
	PktTypeIPv6 = 1 << 6
	PktTypeTCP  = 1 << 8
	PktTypeUDP  = 1 << 9
	PktTypeSCTP = 1 << 10
	// PktTypeETQF marks a frame matched by an EtherType filter, whose
	// index is then in bits 6:4.
	PktTypeETQF      = 1 << 15
	PktTypeETQFShift = 4
	// RSS types (pkt_info bits 3:0).
	RSSTypeNone    = 0
	RSSTypeTCPIPv4 = 1
	RSSTypeIPv4    = 2
	RSSTypeTCPIPv6 = 3
	RSSTypeIPv6    = 5
	RSSTypeUDPIPv4 = 7
	RSSTypeUDPIPv6 = 8
	// hdr_info: header length bits 14:5, SPH (split header) bit 15.
	HdrInfoLenShift = 5
	HdrInfoLenMask  = 0x3FF << 5
	HdrInfoSPH      = 1 << 15
)

// RxRead is the read format: the packet buffer and, with header split, the
// header buffer (its bit 0 must be 0: DD sits there after write-back).
type RxRead struct {
	PktAddr, HdrAddr uint64
}

// Encode writes the descriptor into b (16 bytes).
func (d RxRead) Encode(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], d.PktAddr)
	binary.LittleEndian.PutUint64(b[8:], d.HdrAddr)
}

// RxWriteBack is the write-back format.
type RxWriteBack struct {
	PktInfo uint16 // RSS type bits 3:0, packet type bits 15:4
	HdrInfo uint16 // header length and SPH
	// Hash is the RSS hash; with a Flow Director match (RxStatFLM) the
	// filter's software index (bits 15:0) and bucket hash (bits 31:16).
	Hash   uint32
	Status uint32 // status bits 19:0, error bits 31:20
	Length uint16 // bytes in the packet buffer
	VLAN   uint16
}

// Encode writes the descriptor into b (16 bytes).
func (d RxWriteBack) Encode(b []byte) {
	binary.LittleEndian.PutUint16(b[0:], d.PktInfo)
	binary.LittleEndian.PutUint16(b[2:], d.HdrInfo)
	binary.LittleEndian.PutUint32(b[4:], d.Hash)
	binary.LittleEndian.PutUint32(b[8:], d.Status)
	binary.LittleEndian.PutUint16(b[12:], d.Length)
	binary.LittleEndian.PutUint16(b[14:], d.VLAN)
}

// DecodeRxWriteBack reads a write-back descriptor from b (16 bytes).
func DecodeRxWriteBack(b []byte) RxWriteBack {
	return RxWriteBack{PktInfo: binary.LittleEndian.Uint16(b[0:]), HdrInfo: binary.LittleEndian.Uint16(b[2:]),
		Hash: binary.LittleEndian.Uint32(b[4:]), Status: binary.LittleEndian.Uint32(b[8:]),
		Length: binary.LittleEndian.Uint16(b[12:]), VLAN: binary.LittleEndian.Uint16(b[14:])}
}

// HeaderLen is the length of the headers the NIC put in the header buffer.
func (d RxWriteBack) HeaderLen() int { return int(d.HdrInfo&HdrInfoLenMask) >> HdrInfoLenShift }

// Split tells whether the NIC split the frame (SPH).
func (d RxWriteBack) Split() bool { return d.HdrInfo&HdrInfoSPH != 0 }

// Advanced TX descriptors.
const (
	// cmd_type_len fields of a data descriptor.
	TxLenMask     = 0xFFFF
	TxDTypData    = 3 << 20
	TxDTypContext = 2 << 20
	TxDTypMask    = 0xF << 20
	TxCmdEOP      = 1 << 24
	TxCmdIFCS     = 1 << 25
	TxCmdRS       = 1 << 27
	TxCmdDEXT     = 1 << 29
	TxCmdVLE      = 1 << 30
	TxCmdTSE      = 1 << 31
	// olinfo_status fields.
	TxStatDD         = 1 << 0
	TxOlinfoIdxShift = 4
	TxOlinfoCC       = 1 << 7
	TxPoptsIXSM      = 1 << 8
	TxPoptsTXSM      = 1 << 9
	TxPaylenShift    = 14
	// Context descriptor: vlan_macip_lens and type_tucmd_mlhl.
	TxCtxIPLenMask   = 0x1FF
	TxCtxMACLenShift = 9
	TxCtxTucmdIPv4   = 1 << 10
	TxCtxTucmdL4UDP  = 0 << 11
	TxCtxTucmdL4TCP  = 1 << 11
	TxCtxTucmdL4Mask = 3 << 11
)

// TxDesc is an advanced TX descriptor: data (buffer address, cmd_type_len,
// olinfo_status) or context (vlan_macip_lens, seqnum_seed, type_tucmd_mlhl,
// mss_l4len_idx as the four words).
type TxDesc struct {
	Addr    uint64 // data: buffer; context: vlan_macip_lens | seqnum_seed<<32
	CmdType uint32 // data: cmd_type_len; context: type_tucmd_mlhl
	Olinfo  uint32 // data: olinfo_status; context: mss_l4len_idx
}

// Encode writes the descriptor into b (16 bytes).
func (d TxDesc) Encode(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], d.Addr)
	binary.LittleEndian.PutUint32(b[8:], d.CmdType)
	binary.LittleEndian.PutUint32(b[12:], d.Olinfo)
}

// DecodeTxDesc reads a TX descriptor from b (16 bytes).
func DecodeTxDesc(b []byte) TxDesc {
	return TxDesc{Addr: binary.LittleEndian.Uint64(b[0:]), CmdType: binary.LittleEndian.Uint32(b[8:]),
		Olinfo: binary.LittleEndian.Uint32(b[12:])}
}

// DataTx is an advanced data descriptor of n bytes at addr with command
// bits cmd (EOP, RS, IFCS ...) and olinfo (POPTS, PAYLEN, IDX).
func DataTx(addr uint64, n int, cmd, olinfo uint32) TxDesc {
	return TxDesc{Addr: addr, CmdType: uint32(n)&TxLenMask | TxDTypData | TxCmdDEXT | cmd, Olinfo: olinfo}
}

// ContextTx is an advanced context descriptor for checksum offload: MAC
// header length, IP header length and the TUCMD bits.
func ContextTx(macLen, ipLen int, tucmd uint32) TxDesc {
	return TxDesc{Addr: uint64(uint32(macLen)<<TxCtxMACLenShift | uint32(ipLen)&TxCtxIPLenMask),
		CmdType: TxDTypContext | TxCmdDEXT | tucmd}
}

// Len is a data descriptor's buffer length.
func (d TxDesc) Len() int { return int(d.CmdType & TxLenMask) }

// DTyp is the descriptor type (TxDTypData, TxDTypContext).
func (d TxDesc) DTyp() uint32 { return d.CmdType & TxDTypMask }

// Done tells whether the NIC wrote the descriptor back (DD).
func (d TxDesc) Done() bool { return d.Olinfo&TxStatDD != 0 }

// MTAHash is where destination address mac falls in the multicast table
// with MCSTCTRL.MO = 00: bits 47:36 of the address pick one of 4096 bits.
func MTAHash(mac [6]byte) (reg, bit int) {
	h := (int(mac[4])>>4 | int(mac[5])<<4) & 0xFFF
	return h >> 5, h & 31
}
