package xdp

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapRing maps one ring of socket fd: off says where its parts sit in the
// mapping, pgoff which ring it is (XDP_PGOFF_*), entries its size. The
// returned entries slice and index pointers point into the mapping, which
// lives outside the Go heap until unmapRing.
func mapRing[T uint64 | xdpDesc](fd int, off ringOffset, pgoff int64, entries uint32) (ringMap, []T, error) {
	var zero T
	n := int(off.Desc) + int(entries)*int(unsafe.Sizeof(zero))
	mem, err := unix.Mmap(fd, pgoff, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ringMap{}, nil, err
	}
	r := ringMap{
		mem:      mem,
		producer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags])),
		size:     entries,
		mask:     entries - 1,
	}
	desc := unsafe.Slice((*T)(unsafe.Pointer(&mem[off.Desc])), entries)
	return r, desc, nil
}

// unmapRing releases a ring's mapping; a zero ringMap is fine.
func unmapRing(r *ringMap) error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	*r = ringMap{}
	return err
}

// The socket options and ioctls below pass pointers to kernel ABI structs.

func setsockoptUmemReg(fd int, reg *umemReg) error {
	return setsockopt(fd, solXDP, optUmemReg, unsafe.Pointer(reg), unsafe.Sizeof(*reg))
}

func getsockoptMmapOffsets(fd int) (mmapOffsets, error) {
	var off mmapOffsets
	err := getsockopt(fd, solXDP, optMmapOffsets, unsafe.Pointer(&off), unsafe.Sizeof(off))
	return off, err
}

func getsockoptStatistics(fd int) (statistics, error) {
	var st statistics
	err := getsockopt(fd, solXDP, optStatistics, unsafe.Pointer(&st), unsafe.Sizeof(st))
	return st, err
}

func getsockoptOptions(fd int) (xdpOptions, error) {
	var o xdpOptions
	err := getsockopt(fd, solXDP, optOptions, unsafe.Pointer(&o), unsafe.Sizeof(o))
	return o, err
}

func bindXDP(fd int, sa *sockaddrXDP) error {
	_, _, e := unix.Syscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(sa)), unsafe.Sizeof(*sa))
	if e != 0 {
		return e
	}
	return nil
}

func setsockopt(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), n, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockopt(fd, level, opt int, p unsafe.Pointer, n uintptr) error {
	l := uint32(n)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// addrOf is the address of the first byte of b, which must not be empty
// and must live outside the Go heap (a hugepage region).
func addrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// ethtool issues SIOCETHTOOL for iface on socket fd; cmd points to the
// command struct, whose first word is the ETHTOOL_* command.
func ethtool(fd int, iface string, cmd unsafe.Pointer) error {
	var ifr ifreqData
	copy(ifr.Name[:len(ifr.Name)-1], iface)
	ifr.Data = uintptr(cmd)
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), siocEthtool, uintptr(unsafe.Pointer(&ifr)))
	if e != 0 {
		return e
	}
	return nil
}

func ethtoolChannelsOf(fd int, iface string) (ethtoolChannels, error) {
	c := ethtoolChannels{Cmd: ethtoolGChannels}
	err := ethtool(fd, iface, unsafe.Pointer(&c))
	return c, err
}

func ethtoolRxnfcCmd(fd int, iface string, nfc *ethtoolRxnfc) error {
	return ethtool(fd, iface, unsafe.Pointer(nfc))
}

// ethtoolRuleLocations returns the locations of the interface's ntuple
// rules and the size of its rule table (ETHTOOL_GRXCLSRLCNT, then
// ETHTOOL_GRXCLSRLALL with room for every rule).
func ethtoolRuleLocations(fd int, iface string) (locs []uint32, tableSize uint32, err error) {
	cnt := ethtoolRxnfc{Cmd: ethtoolGRxClsRlCnt}
	if err := ethtool(fd, iface, unsafe.Pointer(&cnt)); err != nil {
		return nil, 0, err
	}
	tableSize = uint32(cnt.Data) &^ rxClsLocSpecial
	n := int(cnt.RuleCnt)
	hdr := int(unsafe.Offsetof(cnt.RuleCnt)) + 4
	buf := make([]uint64, (hdr+4*n+7)/8+1)
	all := (*ethtoolRxnfc)(unsafe.Pointer(&buf[0]))
	all.Cmd = ethtoolGRxClsRlAll
	all.RuleCnt = uint32(n)
	if err := ethtool(fd, iface, unsafe.Pointer(all)); err != nil {
		return nil, 0, err
	}
	raw := unsafe.Slice((*uint32)(unsafe.Add(unsafe.Pointer(&buf[0]), hdr)), n)
	return append([]uint32(nil), raw[:min(n, int(all.RuleCnt))]...), tableSize, nil
}
