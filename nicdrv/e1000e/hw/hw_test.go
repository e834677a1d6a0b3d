package hw

import (
	"bytes"
	"testing"
)

// The offsets and bits below are restated from the 82574L facts in
// shared/spec/nic.md §1.2-§1.7, independently of the constants' names.
func TestRegisterOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"CTRL", CTRL, 0x0}, {"STATUS", STATUS, 0x8}, {"EECD", EECD, 0x10}, {"EERD", EERD, 0x14},
		{"CTRL_EXT", CTRLEXT, 0x18}, {"MDIC", MDIC, 0x20}, {"ICR", ICR, 0xC0}, {"IMS", IMS, 0xD0},
		{"IMC", IMC, 0xD8}, {"IVAR", IVAR, 0xE4}, {"EITR(4)", EITR(4), 0xF8}, {"RCTL", RCTL, 0x100},
		{"TCTL", TCTL, 0x400}, {"TIPG", TIPG, 0x410}, {"EXTCNF_CTRL", EXTCNFCTRL, 0xF00},
		{"RDBAL1", Q(RDBAL, 1), 0x2900}, {"RDT0", Q(RDT, 0), 0x2818}, {"RXDCTL1", Q(RXDCTL, 1), 0x2928},
		{"TDBAL1", Q(TDBAL, 1), 0x3900}, {"TDT1", Q(TDT, 1), 0x3918}, {"TARC1", Q(TARC, 1), 0x3940},
		{"RXCSUM", RXCSUM, 0x5000}, {"RFCTL", RFCTL, 0x5008}, {"MTA", MTA, 0x5200},
		{"RAL15", RAL(15), 0x5478}, {"RAH15", RAH(15), 0x547C}, {"MRQC", MRQC, 0x5818},
		{"RETA", RETA, 0x5C00}, {"RSSRK", RSSRK, 0x5C80}, {"GCR", GCR, 0x5B00}, {"GCR2", GCR2, 0x5B64},
		{"GPRC", GPRC, 0x4074}, {"GPTC", GPTC, 0x4080}, {"GORCL", GORCL, 0x4088}, {"TPR", TPR, 0x40D0},
		{"MPC", MPC, 0x4010}, {"RNBC", RNBC, 0x40A0},
	} {
		if c.got != c.want {
			t.Errorf("%s at %#x, datasheet says %#x", c.name, c.got, c.want)
		}
	}
	if RSSRK+4*10 > BAR0Size || VFTA+4*128 != 0x5800 {
		t.Error("table registers overrun their ranges")
	}
}

func TestBits(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"CTRL.SLU", CtrlSLU, 1 << 6}, {"CTRL.RST", CtrlRST, 1 << 26}, {"STATUS.LU", StatusLU, 1 << 1},
		{"STATUS.GIO_MASTER_ENABLE", StatusGIOMasterEn, 1 << 19}, {"RCTL.EN", RctlEN, 1 << 1},
		{"RCTL.SECRC", RctlSECRC, 1 << 26}, {"RCTL.BAM", RctlBAM, 1 << 15}, {"RFCTL.EXTEN", RfctlEXTEN, 1 << 15},
		{"RXCSUM.PCSD", RxcsumPCSD, 1 << 13}, {"TARC enable", TARCEnable, 1 << 10}, {"TXDCTL bit 22", TxdctlBit22, 1 << 22},
		{"ICR.LSC", IntLSC, 1 << 2}, {"ICR.RXQ0", IntRXQ0, 1 << 20}, {"ICR.OTHER", IntOther, 1 << 24},
		{"MDIC.READY", MDICReady, 1 << 28}, {"TIPG", TIPGDefault, 0x00602008},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, datasheet says %#x", c.name, c.got, c.want)
		}
	}
}

func TestDescriptorLayouts(t *testing.T) {
	b := make([]byte, DescSize)
	RxRead{Buffer: 0x1122334455667788}.Encode(b)
	want := []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Errorf("RX read descriptor % x, want % x", b, want)
	}
	wb := RxWriteBack{MRQ: 0x102, Hash: 0xAABBCCDD, Status: RxStatDD | RxStatEOP | RxErrIPE, Length: 1514, VLAN: 7}
	wb.Encode(b)
	// Bytes 8-11 status/errors, 12-13 length, 14-15 VLAN.
	if b[8] != 3 || b[11] != 0x40 || b[12] != 0xEA || b[13] != 0x05 || b[14] != 7 {
		t.Errorf("write-back layout % x", b)
	}
	if got := DecodeRxWriteBack(b); got != wb {
		t.Errorf("write-back round trip %+v, want %+v", got, wb)
	}

	LegacyTx(0x1000, 60, TxCmdEOP|TxCmdIFCS|TxCmdRS).Encode(b)
	// Legacy: 8-9 length, 10 CSO, 11 CMD, 12 status.
	if b[8] != 60 || b[9] != 0 || b[10] != 0 || b[11] != 0x0B || b[12] != 0 {
		t.Errorf("legacy TX layout % x", b)
	}
	d := DataTx(0x2000, 1514, TxCmdEOP|TxCmdRS, TxPoptsTXSM)
	d.Encode(b)
	if b[11]&TxCmdDEXT == 0 || b[10]>>4 != TxDTypData || b[13] != TxPoptsTXSM {
		t.Errorf("extended data TX layout % x", b)
	}
	if got := DecodeTxDesc(b); got.Len() != 1514 || !got.Extended() || got.DTyp() != TxDTypData || got.Done() {
		t.Errorf("decoded %+v", got)
	}
	b[12] |= TxStatDD
	if !DecodeTxDesc(b).Done() {
		t.Error("DD in byte 12 not seen")
	}
}

func TestMTAHash(t *testing.T) {
	// 01:00:5e:00:00:fb: bits 47:36 = 0xfb0 >> ... : (0x00>>4)|(0xfb<<4) = 0xfb0.
	reg, bit := MTAHash([6]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb})
	if reg != 0xfb0>>5 || bit != 0xfb0&31 {
		t.Errorf("MTA hash reg %d bit %d", reg, bit)
	}
}

// The packet split layout below is restated from Linux's union
// e1000_rx_desc_packet_split and the PSRCTL field comments in defines.h
// (value0 128..16256 in 128-byte units at bits 6:0, value1..3 in KiB at
// bits 13:8, 21:16, 29:24), written out byte by byte.
func TestPacketSplitLayout(t *testing.T) {
	if got := PSRCTLValue(256, 4096, 4096, 0); got != 0x00040402 {
		t.Errorf("PSRCTLValue(256, 4K, 4K, 0) = %#08x, the datasheet's reset value is 0x00040402", got)
	}
	if got := PSBufferSizes(0x3F3F3F7F); got != [4]int{16256, 63 << 10, 63 << 10, 63 << 10} {
		t.Errorf("largest PSRCTL reads as %v", got)
	}
	var b [PSDescSize]byte
	RxPSRead{Buffer: [4]uint64{0x1122334455667788, 0x10, 0x20, 0x30}}.Encode(b[:])
	if b[0] != 0x88 || b[7] != 0x11 || b[8] != 0x10 || b[16] != 0x20 || b[24] != 0x30 {
		t.Errorf("read format % x: want four little-endian addresses at 0, 8, 16, 24", b)
	}
	wb := RxPSWriteBack{MRQ: 1, Hash: 2, Status: RxStatDD | RxStatEOP, Length0: 42, VLAN: 5,
		HeaderStatus: PSHdrSplit | 42, Length: [3]uint16{1000, 7, 9}}
	wb.Encode(b[:])
	want := [PSDescSize]byte{0: 1, 4: 2, 8: 3, 12: 42, 14: 5, 16: 42, 17: 0x80, 18: 0xE8, 19: 0x03, 20: 7, 22: 9}
	if b != want {
		t.Errorf("write-back\n% x\nwant\n% x", b, want)
	}
	if d := DecodeRxPSWriteBack(b[:]); d != wb || !d.Split() || d.HeaderLen() != 42 || d.Lengths() != [4]int{42, 1000, 7, 9} {
		t.Errorf("decoded %+v, want %+v", d, wb)
	}
	if PSDescUnits != 2 || RfctlIPFRSPDis != 0x4000 {
		t.Error("packet split geometry or RFCTL.IPFRSP_DIS wrong")
	}
}
