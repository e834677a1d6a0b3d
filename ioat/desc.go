package ioat

import (
	"encoding/binary"

	"github.com/gomx-dev/gomx/ioat/hw"
)

// putDesc writes the first four fields of a descriptor; the next links
// were written once when the ring was built.
func putDesc(b []byte, size, ctl uint32, src, dst uint64) {
	_ = b[hw.DescOffNext-1]
	binary.LittleEndian.PutUint32(b[hw.DescOffSize:], size)
	binary.LittleEndian.PutUint32(b[hw.DescOffCtl:], ctl)
	binary.LittleEndian.PutUint64(b[hw.DescOffSrc:], src)
	binary.LittleEndian.PutUint64(b[hw.DescOffDst:], dst)
}

func loadCtl(b []byte) uint32 { return binary.LittleEndian.Uint32(b[hw.DescOffCtl:]) }

func storeCtl(b []byte, ctl uint32) { binary.LittleEndian.PutUint32(b[hw.DescOffCtl:], ctl) }
