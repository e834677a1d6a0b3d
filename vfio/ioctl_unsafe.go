package vfio

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The ioctl wrappers below are the only code that hands Go memory to the
// kernel. Each passes a pointer to a fixed-layout struct from abi.go (or a
// byte buffer holding one) for the duration of one system call; the
// conversion to uintptr happens in the call's argument list, which keeps the
// object alive and in place until the call returns.

// ioctlValue issues an ioctl whose argument is passed by value and returns
// the ioctl's result.
func ioctlValue(fd int, req uint, arg uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), arg)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// ioctlBytes issues an ioctl whose argument points to b.
func ioctlBytes(fd int, req uint, b []byte) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&b[0])))
	runtime.KeepAlive(b)
	if errno != 0 {
		return int(r), errno
	}
	return int(r), nil
}

// groupStatus issues VFIO_GROUP_GET_STATUS and returns the group's flags.
func groupStatus(fd int) (uint32, error) {
	st := vfioGroupStatus{Argsz: uint32(unsafe.Sizeof(vfioGroupStatus{}))}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), _VFIO_GROUP_GET_STATUS, uintptr(unsafe.Pointer(&st)))
	if errno != 0 {
		return 0, errno
	}
	return st.Flags, nil
}

// groupSetContainer issues VFIO_GROUP_SET_CONTAINER, whose argument is a
// pointer to the container fd as an int32.
func groupSetContainer(groupFD, containerFD int) error {
	cfd := int32(containerFD)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(groupFD), _VFIO_GROUP_SET_CONTAINER, uintptr(unsafe.Pointer(&cfd)))
	if errno != 0 {
		return errno
	}
	return nil
}

// groupGetDeviceFD issues VFIO_GROUP_GET_DEVICE_FD with the device name
// (the PCI address as sysfs spells it) as a NUL-terminated string.
func groupGetDeviceFD(groupFD int, name string) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(groupFD), _VFIO_GROUP_GET_DEVICE_FD, uintptr(unsafe.Pointer(p)))
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}

// deviceGetInfo issues VFIO_DEVICE_GET_INFO.
func deviceGetInfo(fd int) (vfioDeviceInfo, error) {
	info := vfioDeviceInfo{Argsz: uint32(unsafe.Sizeof(vfioDeviceInfo{}))}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), _VFIO_DEVICE_GET_INFO, uintptr(unsafe.Pointer(&info)))
	if errno != 0 {
		return info, errno
	}
	return info, nil
}

// deviceGetRegionInfo issues VFIO_DEVICE_GET_REGION_INFO for one region.
// Capabilities are not fetched: argsz is the bare struct.
func deviceGetRegionInfo(fd int, index uint32) (vfioRegionInfo, error) {
	ri := vfioRegionInfo{Argsz: uint32(unsafe.Sizeof(vfioRegionInfo{})), Index: index}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), _VFIO_DEVICE_GET_REGION_INFO, uintptr(unsafe.Pointer(&ri)))
	if errno != 0 {
		return ri, errno
	}
	return ri, nil
}

// deviceGetIRQInfo issues VFIO_DEVICE_GET_IRQ_INFO for one interrupt index.
func deviceGetIRQInfo(fd int, index uint32) (vfioIRQInfo, error) {
	ii := vfioIRQInfo{Argsz: uint32(unsafe.Sizeof(vfioIRQInfo{})), Index: index}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), _VFIO_DEVICE_GET_IRQ_INFO, uintptr(unsafe.Pointer(&ii)))
	if errno != 0 {
		return ii, errno
	}
	return ii, nil
}

// iommuMapDMA issues VFIO_IOMMU_MAP_DMA for the size bytes of process memory
// starting at vaddr. The caller keeps that memory referenced for as long as
// the mapping exists.
func iommuMapDMA(fd int, vaddr uintptr, iova, size uint64) error {
	m := vfioIOMMUType1DMAMap{
		Argsz: uint32(unsafe.Sizeof(vfioIOMMUType1DMAMap{})),
		Flags: _VFIO_DMA_MAP_FLAG_READ | _VFIO_DMA_MAP_FLAG_WRITE,
		Vaddr: uint64(vaddr),
		IOVA:  iova,
		Size:  size,
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), _VFIO_IOMMU_MAP_DMA, uintptr(unsafe.Pointer(&m)))
	if errno != 0 {
		return errno
	}
	return nil
}

// iommuUnmapDMA issues VFIO_IOMMU_UNMAP_DMA and returns how many bytes the
// kernel unmapped.
func iommuUnmapDMA(fd int, iova, size uint64) (uint64, error) {
	u := vfioIOMMUType1DMAUnmap{
		Argsz: uint32(unsafe.Sizeof(vfioIOMMUType1DMAUnmap{})),
		IOVA:  iova,
		Size:  size,
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), _VFIO_IOMMU_UNMAP_DMA, uintptr(unsafe.Pointer(&u)))
	if errno != 0 {
		return 0, errno
	}
	return u.Size, nil
}

// addrOf returns the address of the first byte of b, which must not be
// empty. The result is only a number: the caller keeps b referenced.
func addrOf(b []byte) uintptr {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}
