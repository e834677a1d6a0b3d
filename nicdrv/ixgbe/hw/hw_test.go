package hw

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

// The offsets below are restated from the 82599 facts in
// shared/spec/nic.md §2 and Linux's ixgbe_type.h, independently of the
// constants' names.
func TestRegisterOffsets(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"CTRL", CTRL, 0x0}, {"STATUS", STATUS, 0x8}, {"CTRL_EXT", CTRLEXT, 0x18}, {"EICR", EICR, 0x800},
		{"EIMS", EIMS, 0x880}, {"EIMC", EIMC, 0x888}, {"GPIE", GPIE, 0x898}, {"EITR(0)", EITR(0), 0x820},
		{"EITR(23)", EITR(23), 0x87C}, {"EITR(24)", EITR(24), 0x12300}, {"EITR(63)", EITR(63), 0x1239C},
		{"IVAR(0)", IVAR(0), 0x900}, {"IVAR(63)", IVAR(63), 0x9FC}, {"IVAR_MISC", IVARMisc, 0xA00},
		{"RDBAL(0)", RDBAL(0), 0x1000}, {"RDT(1)", RDT(1), 0x1058}, {"RXDCTL(63)", RXDCTL(63), 0x1FE8},
		{"RDBAL(64)", RDBAL(64), 0xD000}, {"SRRCTL(0)", SRRCTL(0), 0x2100}, {"SRRCTL(15)", SRRCTL(15), 0x213C},
		{"SRRCTL(16)", SRRCTL(16), 0x1414}, {"TDBAL(0)", TDBAL(0), 0x6000}, {"TDT(2)", TDT(2), 0x6098},
		{"TXDCTL(1)", TXDCTL(1), 0x6068}, {"RDRXCTL", RDRXCTL, 0x2F00}, {"RXCTRL", RXCTRL, 0x3000},
		{"RXPBSIZE(1)", RXPBSIZE(1), 0x3C04}, {"TXPBSIZE(0)", TXPBSIZE(0), 0xCC00}, {"HLREG0", HLREG0, 0x4240},
		{"MAXFRS", MAXFRS, 0x4268}, {"AUTOC", AUTOC, 0x42A0}, {"LINKS", LINKS, 0x42A4}, {"RTTDCS", RTTDCS, 0x4900},
		{"DMATXCTL", DMATXCTL, 0x4A80}, {"DTXMXSZRQ", DTXMXSZ, 0x8100}, {"EEC", EEC, 0x10010},
		{"FCTRL", FCTRL, 0x5080}, {"MTA", MTA, 0x5200}, {"RAL(0)", RAL(0), 0xA200}, {"RAH(127)", RAH(127), 0xA5FC},
		{"MRQC", MRQC, 0x5818}, {"RETA", RETA, 0x5C00}, {"RSSRK", RSSRK, 0x5C80}, {"ETQF(7)", ETQF(7), 0x5144},
		{"ETQS(0)", ETQS(0), 0xEC00}, {"SAQF(1)", SAQF(1), 0xE004}, {"DAQF(0)", DAQF(0), 0xE200},
		{"SDPQF(0)", SDPQF(0), 0xE400}, {"FTQF(127)", FTQF(127), 0xE7FC}, {"L34T_IMIR(0)", L34TIMIR(0), 0xE800},
		{"FDIRCTRL", FDIRCTRL, 0xEE00}, {"FDIRHASH", FDIRHASH, 0xEE28}, {"FDIRCMD", FDIRCMD, 0xEE2C},
		{"FDIRHKEY", FDIRHKEY, 0xEE68}, {"FDIRM", FDIRM, 0xEE70}, {"GPRC", GPRC, 0x4074}, {"GORCL", GORCL, 0x4088},
		{"MPC(0)", MPC(0), 0x3FA0}, {"QPRC(1)", QPRC(1), 0x1070}, {"QBTC_L(1)", QBTCL(1), 0x8708},
		{"PSRTYPE(0)", PSRTYPE(0), 0xEA00},
	} {
		if c.got != c.want {
			t.Errorf("%s at %#x, want %#x", c.name, c.got, c.want)
		}
	}
	if EITR(63)+4 > BAR0Size || EEC+4 > BAR0Size {
		t.Error("registers beyond BAR0")
	}
}

func TestDescriptorLayouts(t *testing.T) {
	b := make([]byte, DescSize)
	RxRead{PktAddr: 0x1122334455667788, HdrAddr: 0x99AA}.Encode(b)
	if binary.LittleEndian.Uint64(b) != 0x1122334455667788 || binary.LittleEndian.Uint64(b[8:]) != 0x99AA {
		t.Errorf("RX read format % x", b)
	}
	wb := RxWriteBack{PktInfo: PktTypeIPv4 | RSSTypeTCPIPv4, HdrInfo: HdrInfoSPH | 54<<HdrInfoLenShift, Hash: 0xDEADBEEF,
		Status: RxStatDD | RxStatEOP | RxErrIPE, Length: 1500, VLAN: 7}
	wb.Encode(b)
	// Bytes 8-11 carry DD in bit 0 of byte 8; the length at 12-13.
	if b[8]&1 != 1 || binary.LittleEndian.Uint16(b[12:]) != 1500 || b[11]&0x80 == 0 || binary.LittleEndian.Uint32(b[4:]) != 0xDEADBEEF {
		t.Errorf("RX write-back % x", b)
	}
	if got := DecodeRxWriteBack(b); got != wb || got.HeaderLen() != 54 || !got.Split() {
		t.Errorf("decode %+v, want %+v", got, wb)
	}
	d := DataTx(0xABC0, 1514, TxCmdEOP|TxCmdRS|TxCmdIFCS, 1514<<TxPaylenShift)
	d.Encode(b)
	// cmd_type_len: length 15:0, DTYP 0011 in 23:20, EOP 24, IFCS 25, RS 27, DEXT 29.
	if ctl := binary.LittleEndian.Uint32(b[8:]); ctl != 1514|0x3<<20|1<<24|1<<25|1<<27|1<<29 {
		t.Errorf("cmd_type_len %#x", ctl)
	}
	if DecodeTxDesc(b) != d || d.Len() != 1514 || d.DTyp() != TxDTypData || d.Done() {
		t.Errorf("TX data descriptor round trip %+v", DecodeTxDesc(b))
	}
	c := ContextTx(14, 20, TxCtxTucmdIPv4|TxCtxTucmdL4TCP)
	if c.DTyp() != TxDTypContext || uint32(c.Addr) != 14<<9|20 {
		t.Errorf("context descriptor %+v", c)
	}
}

// bucketOracle follows the C formulation of the hash literally: the input
// as 44 bytes in memory, loaded as native (little-endian) words, XORed,
// then byte-swapped, the key bits walked one at a time.
func bucketOracle(in FdirInput, key uint32) uint32 {
	var mem [44]byte
	mem[0], mem[1] = in.Pool, in.FlowType
	binary.BigEndian.PutUint16(mem[2:], in.VLAN)
	copy(mem[4:], in.DstIP[:])
	copy(mem[20:], in.SrcIP[:])
	binary.BigEndian.PutUint16(mem[36:], in.SrcPort)
	binary.BigEndian.PutUint16(mem[38:], in.DstPort)
	copy(mem[40:], in.Flex[:])
	dw := func(i int) uint32 { return binary.LittleEndian.Uint32(mem[4*i:]) }
	x := uint32(0)
	for i := 1; i <= 10; i++ {
		x ^= dw(i)
	}
	fvv := bits.ReverseBytes32(dw(0))
	hi := bits.ReverseBytes32(x)
	lo := bits.RotateLeft32(hi, 16)
	hi ^= fvv ^ (fvv >> 16)
	var h uint32
	step := func(n int) {
		if key>>n&1 == 1 {
			h ^= lo >> n
		}
		if key>>(n+16)&1 == 1 {
			h ^= hi >> n
		}
	}
	step(0)
	lo ^= fvv ^ (fvv << 16)
	for n := 1; n < 16; n++ {
		step(n)
	}
	return h & 0x1FFF
}

func TestFdirBucketHash(t *testing.T) {
	x := uint64(0x9E3779B97F4A7C15)
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := 0; i < 2000; i++ {
		var in FdirInput
		in.FlowType = uint8(next() & 7)
		in.VLAN = uint16(next())
		in.Pool = uint8(next() & 63)
		binary.LittleEndian.PutUint64(in.DstIP[:], next())
		binary.LittleEndian.PutUint64(in.SrcIP[8:], next())
		in.SrcPort, in.DstPort = uint16(next()), uint16(next())
		in.Flex = [2]byte{byte(next()), byte(next())}
		key := uint32(next())
		if i%2 == 0 {
			key = FdirBucketKey
		}
		if got, want := FdirBucketHash(in, key), bucketOracle(in, key); got != want {
			t.Fatalf("%+v key %#x: hash %#x, oracle %#x", in, key, got, want)
		}
	}
	// Only the destination port differs: the bucket changes.
	a := FdirInput{FlowType: FlowUDP, DstPort: 0x4000}
	b := a
	b.DstPort++
	if FdirBucketHash(a, FdirBucketKey) == FdirBucketHash(b, FdirBucketKey) {
		t.Error("ports 0x4000 and 0x4001 hash to one bucket")
	}
}

func TestMTAHash(t *testing.T) {
	// 01:00:5e:00:00:fb: bits 47:36 are 0xfb0 >> 0: byte 5 (0xfb) << 4 | byte 4 (0x00) >> 4.
	r, b := MTAHash([6]byte{0x01, 0x00, 0x5E, 0x00, 0x00, 0xFB})
	if r != 0xFB0>>5 || b != 0xFB0&31 {
		t.Errorf("MTA register %d bit %d", r, b)
	}
}
