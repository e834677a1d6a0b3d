package vfio

import (
	"fmt"
	"testing"
)

// FuzzParseHexAttr feeds arbitrary bytes to the parser of sysfs ID
// attributes: it must not panic, must respect the width, and must read back
// what it would print.
func FuzzParseHexAttr(f *testing.F) {
	for _, s := range []string{"0x8086\n", "0x088000\n", "0x04\n", "", "0x", "0x-1", "0xffffffffffffffffff", " 0X1 \n"} {
		f.Add([]byte(s), 16)
	}
	f.Fuzz(func(t *testing.T, b []byte, bits int) {
		if bits < 1 || bits > 64 {
			return
		}
		v, err := parseHexAttr(b, bits)
		if err != nil {
			return
		}
		if bits < 64 && v>>bits != 0 {
			t.Fatalf("parseHexAttr(%q, %d) = %#x, wider than %d bits", b, bits, v, bits)
		}
		if w, err := parseHexAttr([]byte(fmt.Sprintf("%#x\n", v)), bits); err != nil || w != v {
			t.Fatalf("round trip of %#x: %#x, %v", v, w, err)
		}
	})
}

// FuzzParseDecAttr feeds arbitrary bytes to the numa_node parser.
func FuzzParseDecAttr(f *testing.F) {
	for _, s := range []string{"-1\n", "0\n", "1", "", "x", "99999999999"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseDecAttr(b)
		if err != nil {
			return
		}
		if w, err := parseDecAttr([]byte(fmt.Sprint(v))); err != nil || w != v {
			t.Fatalf("round trip of %d: %d, %v", v, w, err)
		}
	})
}

// FuzzParseIOMMUInfo feeds arbitrary bytes to the decoder of the kernel's
// VFIO_IOMMU_GET_INFO answer: it must not panic or loop, and every range
// it returns must be non-empty.
func FuzzParseIOMMUInfo(f *testing.F) {
	f.Add(iommuInfoBytes(0x40201000, [][2]uint64{{0, 0xfedfffff}, {0xfef00000, 1<<39 - 1}}))
	f.Add(iommuInfoBytes(0x1000, nil))
	f.Add(make([]byte, vfioIOMMUType1InfoSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseIOMMUInfo(b)
		if err != nil {
			return
		}
		for _, r := range info.ranges {
			if r.end <= r.start {
				t.Fatalf("empty or reversed range %+v from %x", r, b)
			}
		}
	})
}
