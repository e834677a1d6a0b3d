package hw

import (
	"testing"
)

// TestLayout pins the register map and descriptor layout to the spec.
func TestLayout(t *testing.T) {
	regs := map[string][2]int{
		"CHANCTRL": {ChannelBase(0) + ChanCtrl, 0x80}, "CHANCMD": {ChannelBase(0) + ChanCmd, 0x84},
		"DMACOUNT": {ChannelBase(0) + ChanDMACount, 0x86}, "CHANSTS": {ChannelBase(0) + ChanSts, 0x88},
		"CHAINADDR": {ChannelBase(0) + ChanChainAddr, 0x90}, "CHANCMP": {ChannelBase(0) + ChanCmp, 0x98},
		"CHANERR": {ChannelBase(0) + ChanErr, 0xA8}, "CBVER": {RegCBVer, 0x08}, "DMACAP": {RegDMACap, 0x10},
		"channel 1": {ChannelBase(1), 0x100}, "CHANERR_INT": {CfgChanErrInt, 0x180},
	}
	for name, v := range regs {
		if v[0] != v[1] {
			t.Errorf("%s at %#x, spec says %#x", name, v[0], v[1])
		}
	}
	d := Descriptor{Size: 0x11223344, Ctl: 0x01000009, Src: 1, Dst: 2, Next: 3, NextSrc: 4, NextDst: 5, User1: 6, User2: 7}
	b := make([]byte, DescSize)
	d.Encode(b)
	if b[0] != 0x44 || b[7] != 0x01 || b[8] != 1 || b[0x10] != 2 || b[0x18] != 3 || b[0x38] != 7 {
		t.Fatalf("descriptor bytes % x", b)
	}
	var e Descriptor
	e.Decode(b)
	if e != d {
		t.Fatalf("round trip %+v != %+v", e, d)
	}
	if d.Op() != OpFill {
		t.Fatal("op code not in bits 31:24")
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		d    Descriptor
		fill bool
		want uint32
	}{
		{Descriptor{Size: 64}, true, 0},
		{Descriptor{Size: 8, Ctl: CtlNull}, true, 0},
		{Descriptor{Size: 0}, true, ErrDescLen},
		{Descriptor{Size: 1<<20 + 1}, true, ErrDescLen},
		{Descriptor{Size: 64, Ctl: OpFill << CtlOpShift}, false, ErrDescCtrl},
		{Descriptor{Size: 64, Ctl: OpFill<<CtlOpShift | CtlNull}, true, ErrDescCtrl},
		{Descriptor{Size: 64, Next: 32}, true, ErrDescriptor},
		{Descriptor{Size: 64, Src: 1 << 50}, true, ErrSrcAddr},
		{Descriptor{Size: 64, Dst: ^uint64(0) - 8}, true, ErrDstAddr},
		{Descriptor{Size: 64, Ctl: CtlSrcPageBreak}, false, ErrDescCtrl},
		{Descriptor{Size: 64, Ctl: OpFill<<CtlOpShift | CtlHint}, true, ErrDescCtrl},
		{Descriptor{Size: 64, Ctl: CtlBundle}, true, ErrDescCtrl},
		{Descriptor{Size: 64, Ctl: CtlSrcPageBreak | CtlDestDCA}, true, 0},
	}
	for i, c := range cases {
		caps := uint32(0)
		if c.fill {
			caps = CapFill | CapPageBreak | CapDCA
		}
		if got := c.d.Validate(20, caps); got != c.want {
			t.Errorf("case %d %+v: %s, want %s", i, c.d, ErrString(got), ErrString(c.want))
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < DescSize {
			return
		}
		var d Descriptor
		d.Decode(b)
		_ = d.Validate(uint8(b[0]%32), uint32(b[1])<<1)
		out := make([]byte, DescSize)
		d.Encode(out)
		if string(out) != string(b[:DescSize]) {
			t.Fatal("decode/encode does not round-trip")
		}
	})
}

func TestModels(t *testing.T) {
	for id, m := range Models {
		if m.Device != id || m.Platform == "" {
			t.Errorf("%#04x: %+v", id, m)
		}
	}
	if Models[0x2021].Quirks&QuirkForceV32 == 0 || Models[0x6F50].Quirks&QuirkMSIXResetWipe == 0 {
		t.Error("SKX and BDX-DE quirks missing")
	}
	if s := ErrString(ErrReadData | 1<<30); s != "0x40000100 (read data, bit 30)" {
		t.Errorf("ErrString = %q", s)
	}
}
