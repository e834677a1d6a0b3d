// Package hw holds the hardware facts of the Intel 82574L gigabit NIC (the
// device QEMU calls e1000e): PCI IDs, BAR0 register offsets and bits, and
// the layouts of the extended receive descriptor and the legacy and
// extended transmit descriptors.
//
// It is pure description: no device access, no state. The driver (package
// nicdrv/e1000e) and the in-process model (package emulated) both speak
// these definitions, so a register is named once. Values come from the
// project's spec notes (shared/spec/nic.md §1), which restate Linux's
// e1000e, DPDK's em driver and QEMU's e1000e model.
package hw

import "encoding/binary"

// PCI identity.
const (
	VendorIntel = 0x8086
	// Device82574L is the 82574L, which QEMU's e1000e models.
	Device82574L = 0x10D3
	// Device82574LA is the 82574LA variant.
	Device82574LA = 0x10F6
	// BAR0Size is the size of the register BAR.
	BAR0Size = 128 << 10
	// MSIXVectors is the number of MSI-X vectors the function offers.
	MSIXVectors = 5
	// Queues is the number of RX and of TX queues.
	Queues = 2
	// RAREntries is the number of receive address registers.
	RAREntries = 16
	// MTAEntries is the number of 32-bit multicast table registers.
	MTAEntries = 128
	// MaxFrame is the largest frame without FCS the MAC passes without
	// RCTL.LPE: it drops one past 1522 bytes with the FCS, tagged or not.
	MaxFrame = 1518
	// MinFrame is the shortest frame without FCS: TCTL.PSP pads to it.
	MinFrame = 60
)

// Is82574 tells whether a PCI vendor and device ID pair is an 82574L or
// 82574LA, the functions this driver runs.
func Is82574(vendor, device uint16) bool {
	return vendor == VendorIntel && (device == Device82574L || device == Device82574LA)
}

// Register offsets in BAR0.
const (
	CTRL       = 0x0000
	STATUS     = 0x0008
	EECD       = 0x0010
	EERD       = 0x0014
	CTRLEXT    = 0x0018
	MDIC       = 0x0020
	VET        = 0x0038
	ICR        = 0x00C0
	ITR        = 0x00C4
	ICS        = 0x00C8
	IMS        = 0x00D0
	IMC        = 0x00D8
	EIAC       = 0x00DC
	IAM        = 0x00E0
	IVAR       = 0x00E4
	EITR0      = 0x00E8 // + 4*vector, vectors 0..4
	RCTL       = 0x0100
	TCTL       = 0x0400
	TIPG       = 0x0410
	EXTCNFCTRL = 0x0F00
	PBA        = 0x1000
	PSRCTL     = 0x2170
	RDTR       = 0x2820
	RADV       = 0x282C
	TIDV       = 0x3820
	TADV       = 0x382C
	RXCSUM     = 0x5000
	RFCTL      = 0x5008
	MTA        = 0x5200 // + 4*i, i < MTAEntries
	RAL0       = 0x5400 // RAL(i) = RAL0 + 8*i
	RAH0       = 0x5404
	VFTA       = 0x5600 // + 4*i, 128 entries
	MRQC       = 0x5818
	GCR        = 0x5B00
	SWSM       = 0x5B50
	FWSM       = 0x5B54
	GCR2       = 0x5B64
	RETA       = 0x5C00 // 32 registers of 4 one-byte entries
	RSSRK      = 0x5C80 // 10 registers: the 40-byte Toeplitz key
)

// Per-queue register offsets; queue n is at + QueueStride*n.
const (
	RDBAL       = 0x2800
	RDBAH       = 0x2804
	RDLEN       = 0x2808
	RDH         = 0x2810
	RDT         = 0x2818
	RXDCTL      = 0x2828
	TDBAL       = 0x3800
	TDBAH       = 0x3804
	TDLEN       = 0x3808
	TDH         = 0x3810
	TDT         = 0x3818
	TXDCTL      = 0x3828
	TARC        = 0x3840
	QueueStride = 0x100
)

// Q returns the offset of per-queue register reg for queue n.
func Q(reg, n int) int { return reg + QueueStride*n }

// RAL returns the offset of receive address low register i.
func RAL(i int) int { return RAL0 + 8*i }

// RAH returns the offset of receive address high register i.
func RAH(i int) int { return RAH0 + 8*i }

// EITR returns the offset of the throttle register of MSI-X vector v.
func EITR(v int) int { return EITR0 + 4*v }

// Statistics registers (clear on read). 64-bit counters are a low and a
// high register; read the low one first.
const (
	CRCERRS    = 0x4000
	ALGNERRC   = 0x4004
	RXERRC     = 0x400C
	MPC        = 0x4010
	GPRC       = 0x4074
	BPRC       = 0x4078
	MPRC       = 0x407C
	GPTC       = 0x4080
	GORCL      = 0x4088
	GORCH      = 0x408C
	GOTCL      = 0x4090
	GOTCH      = 0x4094
	RNBC       = 0x40A0
	RUC        = 0x40A4
	ROC        = 0x40AC
	TORL       = 0x40C0
	TORH       = 0x40C4
	TOTL       = 0x40C8
	TOTH       = 0x40CC
	TPR        = 0x40D0
	TPT        = 0x40D4
	MPTC       = 0x40F0
	BPTC       = 0x40F4
	StatsFirst = 0x4000
	StatsLast  = 0x4124
)

// CTRL bits.
const (
	CtrlFD           = 1 << 0
	CtrlGIOMasterDis = 1 << 2
	CtrlLRST         = 1 << 3
	CtrlASDE         = 1 << 5
	CtrlSLU          = 1 << 6
	CtrlSpeed1000    = 2 << 8
	CtrlFrcSpd       = 1 << 11
	CtrlFrcDpx       = 1 << 12
	CtrlRST          = 1 << 26
	CtrlRFCE         = 1 << 27
	CtrlTFCE         = 1 << 28
	Ctrl82574Bit29   = 1 << 29 // cleared by init_hw_82571 on 82574
	CtrlVME          = 1 << 30
	CtrlPHYRST       = 1 << 31
)

// STATUS bits.
const (
	StatusFD          = 1 << 0
	StatusLU          = 1 << 1
	StatusTXOFF       = 1 << 4
	StatusSpeedMask   = 3 << 6
	StatusSpeed1000   = 2 << 6
	StatusSpeed100    = 1 << 6
	StatusLANInitDone = 1 << 9
	StatusPHYRA       = 1 << 10
	StatusGIOMasterEn = 1 << 19
)

// EECD and EERD bits.
const (
	EECDAutoRd    = 1 << 9
	EERDStart     = 1 << 0
	EERDDone      = 1 << 1
	EERDAddrShift = 2
	EERDDataShift = 16
)

// CTRL_EXT bits.
const (
	CtrlExtSpdByps = 1 << 15
	CtrlExtRODis   = 1 << 17
	CtrlExtBit22   = 1 << 22 // set by init_hw_82571 on 82574
	CtrlExtBit23   = 1 << 23 // cleared by init_hw_82571 on 82574
	CtrlExtEIAME   = 1 << 24
	CtrlExtIAME    = 1 << 27
	CtrlExtDrvLoad = 1 << 28
	CtrlExtPBAClr  = 1 << 31
)

// MDIC fields.
const (
	MDICDataMask  = 0xFFFF
	MDICRegShift  = 16
	MDICPHYShift  = 21
	MDICOpWrite   = 1 << 26
	MDICOpRead    = 2 << 26
	MDICReady     = 1 << 28
	MDICErr       = 1 << 30
	PHYAddr       = 1 // the 82574's internal PHY
	PHYControl    = 0 // BMCR
	PHYStatus     = 1 // BMSR
	PHYID1        = 2
	PHYID2        = 3
	PHYCtlLoop    = 1 << 14
	PHYCtlANRest  = 1 << 9
	PHYCtlReset   = 1 << 15
	PHYStatusLink = 1 << 2
	PHYStatusANC  = 1 << 5
)

// Interrupt cause bits (ICR, ICS, IMS, IMC).
const (
	IntTXDW     = 1 << 0
	IntTXQE     = 1 << 1
	IntLSC      = 1 << 2
	IntRXDMT0   = 1 << 4
	IntRXO      = 1 << 6
	IntRXT0     = 1 << 7
	IntRXQ0     = 1 << 20
	IntRXQ1     = 1 << 21
	IntTXQ0     = 1 << 22
	IntTXQ1     = 1 << 23
	IntOther    = 1 << 24
	IntAsserted = 1 << 31
	// IntMSIXCauses are the causes EIAC may auto-clear.
	IntMSIXCauses = IntRXQ0 | IntRXQ1 | IntTXQ0 | IntTXQ1 | IntOther
)

// IVAR: 4-bit entries of a 3-bit vector and a valid bit.
const (
	IVARValid      = 0x8
	IVARRxQ0Shift  = 0
	IVARRxQ1Shift  = 4
	IVARTxQ0Shift  = 8
	IVARTxQ1Shift  = 12
	IVAROtherShift = 16
	IVARTxAllWB    = 1 << 31
)

// RCTL bits.
const (
	RctlEN         = 1 << 1
	RctlSBP        = 1 << 2
	RctlUPE        = 1 << 3
	RctlMPE        = 1 << 4
	RctlLPE        = 1 << 5
	RctlLBMMask    = 3 << 6
	RctlLBMMAC     = 1 << 6
	RctlLBMTcvr    = 3 << 6
	RctlDTYPMask   = 3 << 10
	RctlDTYPPS     = 1 << 10
	RctlMOMask     = 3 << 12
	RctlBAM        = 1 << 15
	RctlBSIZEMask  = 3 << 16
	RctlBSIZE2048  = 0 << 16
	RctlBSIZE1024  = 1 << 16
	RctlBSIZE512   = 2 << 16
	RctlBSIZE256   = 3 << 16
	RctlVFE        = 1 << 18
	RctlBSEX       = 1 << 25
	RctlSECRC      = 1 << 26
	RctlFLXBUFMask = 0xF << 27
)

// RXCSUM, RFCTL and MRQC bits.
const (
	RxcsumIPOFL    = 1 << 8
	RxcsumTUOFL    = 1 << 9
	RxcsumPCSD     = 1 << 13
	RfctlEXTEN     = 1 << 15
	MRQCEnableRSS2 = 0x1
	MRQCEnableMask = 0x3
	MRQCTCPIPv4    = 1 << 16
	MRQCIPv4       = 1 << 17
	MRQCTCPIPv6    = 1 << 18
	MRQCIPv6Ex     = 1 << 19
	MRQCIPv6       = 1 << 20
	// RETAQueue1 is the RETA entry bit that sends a hash to queue 1.
	RETAQueue1  = 0x80
	RETAEntries = 128
	RSSKeyLen   = 40
)

// TCTL, TIPG, TXDCTL, TARC bits.
const (
	TctlEN        = 1 << 1
	TctlPSP       = 1 << 3
	TctlCTShift   = 4
	TctlCOLDShift = 12
	TctlRTLC      = 1 << 24
	TctlMULR      = 1 << 28
	// TIPGDefault is IPGT 8, IPGR1 8, IPGR2 6.
	TIPGDefault        = 8 | 8<<10 | 6<<20
	TxdctlWTHRESHShift = 16
	TxdctlGRAN         = 1 << 24
	TxdctlBit22        = 1 << 22 // must be 1 on 82571/2/3/4
	RxdctlGRAN         = 1 << 24
	TARCEnable         = 1 << 10 // TARC0_ENABLE: the queue transmits
	TARCBit26          = 1 << 26
	TARC82574Clr       = 0xF << 27
)

// Other control bits.
const (
	ExtcnfMDIOSWOwn = 1 << 5
	GCRBit22        = 1 << 22
	GCR2Bit0        = 1 << 0
)

// Descriptor geometry.
const (
	// DescSize is the size of a legacy/extended RX or TX descriptor.
	DescSize = 16
	// RingAlign is the alignment of a ring base (Q7.2 ignores the low 4
	// bits; the datasheet asks for 16 bytes).
	RingAlign = 16
	// RingLenAlign: RDLEN and TDLEN are multiples of 128 bytes (8
	// descriptors).
	RingLenAlign = 128
	// MaxRingLen is the largest ring in descriptors (RDLEN keeps bits
	// 19:7).
	MaxRingLen = (1 << 20) / DescSize
)

// Extended RX descriptor write-back: status and error bits of the 32-bit
// word at offset 8.
const (
	RxStatDD    = 1 << 0
	RxStatEOP   = 1 << 1
	RxStatVP    = 1 << 3
	RxStatUDPCS = 1 << 4
	RxStatTCPCS = 1 << 5
	RxStatIPCS  = 1 << 6
	RxStatIPIDV = 1 << 9
	RxStatUDPV  = 1 << 10
	RxErrCE     = 1 << 24
	RxErrSE     = 1 << 25
	RxErrSEQ    = 1 << 26
	RxErrCXE    = 1 << 28
	RxErrTCPE   = 1 << 29
	RxErrIPE    = 1 << 30
	RxErrRXE    = 1 << 31
	// RxErrFrame are the errors that make a frame bad (not the checksum
	// ones, which only report).
	RxErrFrame = RxErrCE | RxErrSE | RxErrSEQ | RxErrCXE | RxErrRXE
)

// RSS types in the low nibble of the MRQ word.
const (
	RSSTypeNone    = 0
	RSSTypeTCPIPv4 = 1
	RSSTypeIPv4    = 2
)

// RxRead is the extended RX descriptor as software writes it: the buffer
// address, and 8 zero bytes where the device writes status back.
type RxRead struct {
	Buffer uint64
}

// Encode writes d into the 16 bytes of b.
func (d RxRead) Encode(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], d.Buffer)
	binary.LittleEndian.PutUint64(b[8:], 0)
}

// RxWriteBack is the extended RX descriptor as the device writes it back.
type RxWriteBack struct {
	// MRQ is the RSS type (bits 3:0) and, from QEMU, the queue (bit 8).
	MRQ uint32
	// Hash is the RSS hash with RXCSUM.PCSD, else the IP id and checksum.
	Hash uint32
	// Status holds the status (low) and error (high) bits.
	Status uint32
	// Length is the number of bytes written into the buffer.
	Length uint16
	// VLAN is the stripped VLAN tag when Status has VP.
	VLAN uint16
}

// Encode writes d into the 16 bytes of b.
func (d RxWriteBack) Encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], d.MRQ)
	le.PutUint32(b[4:], d.Hash)
	le.PutUint32(b[8:], d.Status)
	le.PutUint16(b[12:], d.Length)
	le.PutUint16(b[14:], d.VLAN)
}

// DecodeRxWriteBack reads a written-back descriptor from b.
func DecodeRxWriteBack(b []byte) RxWriteBack {
	le := binary.LittleEndian
	return RxWriteBack{MRQ: le.Uint32(b[0:]), Hash: le.Uint32(b[4:]), Status: le.Uint32(b[8:]), Length: le.Uint16(b[12:]), VLAN: le.Uint16(b[14:])}
}

// Transmit descriptor command bits (byte 11 of a legacy descriptor; bits
// 31:24 of the length/command word of an extended one).
const (
	TxCmdEOP  = 1 << 0
	TxCmdIFCS = 1 << 1
	TxCmdIC   = 1 << 2
	TxCmdRS   = 1 << 3
	TxCmdDEXT = 1 << 5
	TxCmdVLE  = 1 << 6
	TxCmdIDE  = 1 << 7
	// TxStatDD is the done bit the device writes back into byte 12.
	TxStatDD = 1 << 0
	// Extended descriptor types (bits 23:20 of the command word).
	TxDTypContext = 0x0
	TxDTypData    = 0x1
	// POPTS bits (byte 13 of an extended data descriptor).
	TxPoptsIXSM = 1 << 0
	TxPoptsTXSM = 1 << 1
	// Context descriptor TUCMD bits (bits 31:24 of the command word).
	TxTucmdTCP = 1 << 0 // TCP (else UDP)
	TxTucmdIP  = 1 << 1 // IPv4 (else IPv6)
)

// TxDesc is a transmit descriptor in either format, as 16 bytes: Addr at
// 0, then Lower (length, CSO/DTYP, command), then Upper (status, CSS or
// POPTS, VLAN).
type TxDesc struct {
	Addr  uint64
	Lower uint32
	Upper uint32
}

// Encode writes d into the 16 bytes of b.
func (d TxDesc) Encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], d.Addr)
	le.PutUint32(b[8:], d.Lower)
	le.PutUint32(b[12:], d.Upper)
}

// DecodeTxDesc reads a transmit descriptor from b.
func DecodeTxDesc(b []byte) TxDesc {
	le := binary.LittleEndian
	return TxDesc{Addr: le.Uint64(b[0:]), Lower: le.Uint32(b[8:]), Upper: le.Uint32(b[12:])}
}

// LegacyTx builds a legacy data descriptor of n bytes with command cmd.
func LegacyTx(addr uint64, n int, cmd uint8) TxDesc {
	return TxDesc{Addr: addr, Lower: uint32(uint16(n)) | uint32(cmd)<<24}
}

// DataTx builds an extended data descriptor of n bytes with command cmd
// (DEXT is added) and checksum options popts.
func DataTx(addr uint64, n int, cmd, popts uint8) TxDesc {
	return TxDesc{Addr: addr, Lower: uint32(n)&0xFFFFF | TxDTypData<<20 | uint32(cmd|TxCmdDEXT)<<24, Upper: uint32(popts) << 8}
}

// ContextTx builds a checksum context descriptor: the IP checksum starts at
// ipcss and goes to ipcso, ends at ipcse (0: end of the IP header is not
// bounded); the TCP/UDP checksum starts at tucss, is stored at tucso and
// ends at tucse (0: end of frame). tucmd says TCP or UDP, IPv4 or IPv6.
func ContextTx(ipcss, ipcso uint8, ipcse uint16, tucss, tucso uint8, tucse uint16, tucmd uint8) TxDesc {
	return TxDesc{
		Addr:  uint64(ipcss) | uint64(ipcso)<<8 | uint64(ipcse)<<16 | uint64(tucss)<<32 | uint64(tucso)<<40 | uint64(tucse)<<48,
		Lower: TxDTypContext<<20 | uint32(tucmd|TxCmdDEXT)<<24,
	}
}

// Cmd is the command byte of a descriptor.
func (d TxDesc) Cmd() uint8 { return uint8(d.Lower >> 24) }

// Extended reports whether the descriptor is in the extended format.
func (d TxDesc) Extended() bool { return d.Cmd()&TxCmdDEXT != 0 }

// DTyp is the extended descriptor type.
func (d TxDesc) DTyp() uint8 { return uint8(d.Lower>>20) & 0xF }

// Len is the buffer length: 16 bits in a legacy descriptor, 20 in an
// extended data descriptor.
func (d TxDesc) Len() int {
	if d.Extended() {
		return int(d.Lower & 0xFFFFF)
	}
	return int(d.Lower & 0xFFFF)
}

// POPTS is the checksum option byte of an extended data descriptor.
func (d TxDesc) POPTS() uint8 { return uint8(d.Upper >> 8) }

// Done reports the DD status bit.
func (d TxDesc) Done() bool { return d.Upper&TxStatDD != 0 }

// MTAHash is the multicast table bit a group address selects with
// RCTL.MO = 0: bits 47:36 of the address.
func MTAHash(mac [6]byte) (reg, bit int) {
	h := (int(mac[4]) >> 4) | int(mac[5])<<4
	h &= 0xFFF
	return h >> 5, h & 31
}

// Packet split receive (RCTL.DTYP = 01 with RFCTL.EXTEN): PSRCTL sizes the
// four buffers of every descriptor, in 128-byte units for buffer 0 (the
// header buffer) and 1 KiB units for buffers 1 to 3. Buffer 0 takes 128 to
// 16256 bytes and buffer 1 1 to 63 KiB: neither may be 0. Buffers 2 and 3
// may be 0 (unused). Values from Linux's e1000e defines.h; QEMU 7.2 reads
// the fields the same way (e1000e_parse_rxbufsize).
const (
	PSRCTLBSize0Mask  = 0x7F
	PSRCTLBSize1Shift = 8
	PSRCTLBSize2Shift = 16
	PSRCTLBSize3Shift = 24
	PSRCTLBSizeNMask  = 0x3F // each of BSIZE1..3, after its shift
	PSRCTLBSize0Unit  = 128
	PSRCTLBSizeNUnit  = 1024
	// PSBuffers is the number of buffers of a packet split descriptor.
	PSBuffers = 4
	// PSDescSize is the size of a packet split descriptor. The NIC still
	// counts RDH and RDT in 16-byte units, so each one advances them by 2
	// (Linux's e1000_alloc_rx_buffers_ps writes the tail as index << 1).
	PSDescSize = 32
	// PSDescUnits is how many 16-byte ring units one descriptor spans.
	PSDescUnits = PSDescSize / DescSize
	// RfctlIPFRSPDis stops the NIC splitting IP fragments after their IP
	// header.
	RfctlIPFRSPDis = 1 << 14
	// PSHdrLenMask and PSHdrSplit are the header length and the "header
	// split" (HDRSP) bit of the write-back's header status word.
	PSHdrLenMask = 0x3FF
	PSHdrSplit   = 1 << 15
)

// PSRCTLValue builds a PSRCTL value of the given buffer sizes in bytes: size0 a
// multiple of 128, the others multiples of 1024.
func PSRCTLValue(size0, size1, size2, size3 int) uint32 {
	return uint32(size0/PSRCTLBSize0Unit)&PSRCTLBSize0Mask |
		uint32(size1/PSRCTLBSizeNUnit)&PSRCTLBSizeNMask<<PSRCTLBSize1Shift |
		uint32(size2/PSRCTLBSizeNUnit)&PSRCTLBSizeNMask<<PSRCTLBSize2Shift |
		uint32(size3/PSRCTLBSizeNUnit)&PSRCTLBSizeNMask<<PSRCTLBSize3Shift
}

// PSBufferSizes reads the four buffer sizes in bytes out of a PSRCTL value.
func PSBufferSizes(psrctl uint32) [PSBuffers]int {
	return [PSBuffers]int{
		int(psrctl&PSRCTLBSize0Mask) * PSRCTLBSize0Unit,
		int(psrctl>>PSRCTLBSize1Shift&PSRCTLBSizeNMask) * PSRCTLBSizeNUnit,
		int(psrctl>>PSRCTLBSize2Shift&PSRCTLBSizeNMask) * PSRCTLBSizeNUnit,
		int(psrctl>>PSRCTLBSize3Shift&PSRCTLBSizeNMask) * PSRCTLBSizeNUnit,
	}
}

// RxPSRead is a packet split descriptor as software writes it: four buffer
// addresses (0 for an unused buffer). Buffer 1's address shares its low bit
// with the DD bit of the write-back, so it must be even.
type RxPSRead struct {
	Buffer [PSBuffers]uint64
}

// Encode writes d into the 32 bytes of b.
func (d RxPSRead) Encode(b []byte) {
	for i, a := range d.Buffer {
		binary.LittleEndian.PutUint64(b[8*i:], a)
	}
}

// RxPSWriteBack is a packet split descriptor as the device writes it back
// (Linux's union e1000_rx_desc_packet_split, wb): the extended
// descriptor's first 16 bytes with Length0 the bytes in buffer 0, then the
// header status and the lengths of buffers 1 to 3.
type RxPSWriteBack struct {
	// MRQ and Hash are as in RxWriteBack.
	MRQ, Hash uint32
	// Status holds the status (low) and error (high) bits.
	Status uint32
	// Length0 is the number of bytes in buffer 0.
	Length0 uint16
	// VLAN is the stripped VLAN tag when Status has VP.
	VLAN uint16
	// HeaderStatus is the header length (PSHdrLenMask) and HDRSP
	// (PSHdrSplit): set when buffer 0 holds the headers of a split frame.
	HeaderStatus uint16
	// Length are the bytes in buffers 1, 2 and 3.
	Length [PSBuffers - 1]uint16
}

// Encode writes d into the 32 bytes of b (the last 8 are reserved, 0).
func (d RxPSWriteBack) Encode(b []byte) {
	le := binary.LittleEndian
	le.PutUint32(b[0:], d.MRQ)
	le.PutUint32(b[4:], d.Hash)
	le.PutUint32(b[8:], d.Status)
	le.PutUint16(b[12:], d.Length0)
	le.PutUint16(b[14:], d.VLAN)
	le.PutUint16(b[16:], d.HeaderStatus)
	for i, l := range d.Length {
		le.PutUint16(b[18+2*i:], l)
	}
	le.PutUint64(b[24:], 0)
}

// DecodeRxPSWriteBack reads a written-back packet split descriptor from
// the 32 bytes of b.
func DecodeRxPSWriteBack(b []byte) RxPSWriteBack {
	le := binary.LittleEndian
	d := RxPSWriteBack{MRQ: le.Uint32(b[0:]), Hash: le.Uint32(b[4:]), Status: le.Uint32(b[8:]),
		Length0: le.Uint16(b[12:]), VLAN: le.Uint16(b[14:]), HeaderStatus: le.Uint16(b[16:])}
	for i := range d.Length {
		d.Length[i] = le.Uint16(b[18+2*i:])
	}
	return d
}

// Lengths are the byte counts of the four buffers, buffer 0 first.
func (d RxPSWriteBack) Lengths() [PSBuffers]int {
	return [PSBuffers]int{int(d.Length0), int(d.Length[0]), int(d.Length[1]), int(d.Length[2])}
}

// HeaderLen is the length of the headers in buffer 0 when Split.
func (d RxPSWriteBack) HeaderLen() int { return int(d.HeaderStatus & PSHdrLenMask) }

// Split reports HDRSP: buffer 0 holds the frame's headers only.
func (d RxPSWriteBack) Split() bool { return d.HeaderStatus&PSHdrSplit != 0 }
