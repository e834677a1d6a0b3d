package dsahw

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// TestLayout pins register offsets and the table and record layouts to the
// values of Linux registers.h, the uapi idxd.h and SPDK idxd_spec.h.
func TestLayout(t *testing.T) {
	regs := map[string][2]int{
		"VERSION": {RegVersion, 0x00}, "GENCAP": {RegGenCap, 0x10}, "WQCAP": {RegWQCap, 0x20},
		"GRPCAP": {RegGrpCap, 0x30}, "ENGCAP": {RegEngCap, 0x38}, "OPCAP": {RegOpCap, 0x40},
		"TABLEOFF": {RegTableOff, 0x60}, "GENCFG": {RegGenCfg, 0x80}, "GENCTRL": {RegGenCtrl, 0x88},
		"GENSTS": {RegGenSts, 0x90}, "INTCAUSE": {RegIntCause, 0x98}, "CMD": {RegCmd, 0xA0},
		"CMDSTS": {RegCmdSts, 0xA8}, "SWERR": {RegSWErr, 0xC0},
		"WQ 3 portal": {PortalOffset(3), 0xC000}, "GRPCFG engines": {GrpCfgEngines, 0x20}, "GRPCFG flags": {GrpCfgFlags, 0x28},
		"descriptor": {DescSize, 64}, "completion record": {ComplSize, 32},
		"WQCFG state": {WQCfgState, 24}, "WQCFG mode": {WQCfgMode, 8}, "WQCFG limits": {WQCfgLimits, 12},
	}
	for name, v := range regs {
		if v[0] != v[1] {
			t.Errorf("%s at %#x, the headers say %#x", name, v[0], v[1])
		}
	}
	ops := map[uint8]uint8{OpNoop: 0, OpBatch: 1, OpDrain: 2, OpMemMove: 3, OpFill: 4, OpCompare: 5, OpCompVal: 6, OpDualcast: 9, OpCRCGen: 0x10, OpCopyCRC: 0x11, OpCFlush: 0x20}
	for got, want := range ops {
		if got != want {
			t.Errorf("opcode %#x, want %#x", got, want)
		}
	}
	if StatusXferERange != 0x13 || StatusCRAAlign != 0x1B || StatusPageFault != 3 || StatusBatchFail != 5 || StatusBadOpcode != 0x10 {
		t.Error("status codes differ from uapi idxd.h")
	}
	if Command(CmdDisableWQ, 1<<5) != 7<<20|32 {
		t.Error("CMD encoding")
	}
	gencap := uint64(21)<<GenCapMaxXferShift | uint64(10)<<GenCapMaxBatchShift
	if MaxXferShift(gencap) != 21 || MaxBatchShift(gencap) != 10 {
		t.Error("GENCAP fields")
	}
	total, n, s := WQCap(uint64(128) | 8<<16 | 1<<24 | WQCapDedicated)
	if total != 128 || n != 8 || s != 1 || WQCfgStride(1<<24) != 64 {
		t.Errorf("WQCAP: %d %d %d", total, n, s)
	}
	if !HasOp([4]uint64{1 << OpMemMove, 0, 0, 0}, OpMemMove) || HasOp([4]uint64{}, OpFill) || !HasOp([4]uint64{1: 1}, 64) {
		t.Error("OPCAP bitmap")
	}
}

// rawDesc is the descriptor as uapi idxd.h declares it, field by field,
// for encoding/binary: an oracle independent of the offset constants.
type rawDesc struct {
	PASID   uint32
	FlagsOp uint32
	Compl   uint64
	Src     uint64
	Dst     uint64
	Size    uint32
	IntH    uint16
	Rsvd    uint16
	OpSpec  [24]byte
}

func TestDescriptorRoundTrip(t *testing.T) {
	d := Descriptor{PASID: 5, Flags: FlagCRAV | FlagRCR | FlagCC, Op: OpMemMove, Compl: 0x1000, Src: 0x2000, Dst: 0x3000, Size: 4096, IntH: 2}
	d.OpSpec[0] = 0xAA
	b := make([]byte, DescSize)
	d.Encode(b)
	var r rawDesc
	if err := binary.Read(bytes.NewReader(b), binary.LittleEndian, &r); err != nil {
		t.Fatal(err)
	}
	if binary.Size(r) != DescSize {
		t.Fatalf("uapi descriptor is %d bytes", binary.Size(r))
	}
	if r.FlagsOp>>24 != OpMemMove || r.FlagsOp&0xFFFFFF != d.Flags || r.Compl != d.Compl || r.Src != d.Src || r.Dst != d.Dst || r.Size != d.Size || r.IntH != 2 || r.OpSpec[0] != 0xAA {
		t.Fatalf("encoded %+v from %+v", r, d)
	}
	var e Descriptor
	e.Decode(b)
	if e != d {
		t.Fatalf("round trip %+v != %+v", e, d)
	}
}

// rawCompl is the completion record as uapi idxd.h declares it.
type rawCompl struct {
	Status uint8
	Result uint8
	Rsvd   uint16
	Bytes  uint32
	Fault  uint64
	OpSpec [16]byte
}

// oracleCompl decodes a record from the uapi layout.
func oracleCompl(b []byte) (Completion, bool) {
	var r rawCompl
	if binary.Read(bytes.NewReader(b), binary.LittleEndian, &r) != nil || r.Rsvd != 0 {
		return Completion{}, false
	}
	return Completion{
		Status: r.Status & 0x7F, Write: r.Status >= 0x80, Result: r.Result, Bytes: r.Bytes, Fault: r.Fault,
		CRC: binary.LittleEndian.Uint64(r.OpSpec[:8]),
	}, true
}

// FuzzDecodeCompletion checks the completion-record decoder against the
// uapi layout read by encoding/binary, and that encoding what it decoded
// gives the bytes back (bytes 24-31, reserved for copies, aside).
func FuzzDecodeCompletion(f *testing.F) {
	f.Add(make([]byte, 32))
	f.Add([]byte{1, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0xEF, 0xBE, 0xAD, 0xDE, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x83, 1, 0, 0, 0, 4, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCompletion(b)
		want, ok := oracleCompl(b)
		if (err == nil) != ok {
			t.Fatalf("decoder error %v, oracle ok %v, on % x", err, ok, b)
		}
		if !ok {
			return
		}
		if c != want {
			t.Fatalf("decoded %+v, oracle %+v", c, want)
		}
		if c.OK() != (c.Status == 1 || c.Status == 2) || c.Done() != (b[0]&0x7F != 0) {
			t.Fatalf("OK/Done disagree with status %#x", b[0])
		}
		out := make([]byte, ComplSize)
		EncodeCompletion(out, c)
		if !bytes.Equal(out[:24], b[:24]) {
			t.Fatalf("re-encoded % x from % x", out[:24], b[:24])
		}
		_ = StatusString(c.Status)
	})
}

func TestCRC32C(t *testing.T) {
	p := []byte("123456789")
	if got := CRC32C(0, p); got != 0xE3069283 {
		t.Fatalf("CRC-32C check value %#x, want 0xe3069283", got)
	}
	if CRC32C(CRC32C(0, p[:4]), p[4:]) != crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatal("CRC does not continue from its seed")
	}
}
