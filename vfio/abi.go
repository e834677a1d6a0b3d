package vfio

// This file is the only place where the kernel's VFIO UAPI names appear. The
// values and layouts are those of include/uapi/linux/vfio.h in Linux 6.1 (the
// legacy container/group API; no iommufd). abi_unsafe_test.go checks every
// size, offset and ioctl number below against values taken from that header.
//
// The names keep the kernel's spelling behind a leading underscore so that
// they are unexported and easy to grep for; the rest of the package uses Go
// names.

// Ioctl numbers. VFIO ioctls are _IO(VFIO_TYPE, VFIO_BASE + n) with
// VFIO_TYPE ';' and VFIO_BASE 100: no size or direction bits, the argument
// size travels in the argsz field of each struct instead.
const (
	_VFIO_TYPE = ';'
	_VFIO_BASE = 100

	_VFIO_GET_API_VERSION        = _VFIO_TYPE<<8 | (_VFIO_BASE + 0)
	_VFIO_CHECK_EXTENSION        = _VFIO_TYPE<<8 | (_VFIO_BASE + 1)
	_VFIO_SET_IOMMU              = _VFIO_TYPE<<8 | (_VFIO_BASE + 2)
	_VFIO_GROUP_GET_STATUS       = _VFIO_TYPE<<8 | (_VFIO_BASE + 3)
	_VFIO_GROUP_SET_CONTAINER    = _VFIO_TYPE<<8 | (_VFIO_BASE + 4)
	_VFIO_GROUP_UNSET_CONTAINER  = _VFIO_TYPE<<8 | (_VFIO_BASE + 5)
	_VFIO_GROUP_GET_DEVICE_FD    = _VFIO_TYPE<<8 | (_VFIO_BASE + 6)
	_VFIO_DEVICE_GET_INFO        = _VFIO_TYPE<<8 | (_VFIO_BASE + 7)
	_VFIO_DEVICE_GET_REGION_INFO = _VFIO_TYPE<<8 | (_VFIO_BASE + 8)
	_VFIO_DEVICE_GET_IRQ_INFO    = _VFIO_TYPE<<8 | (_VFIO_BASE + 9)
	_VFIO_DEVICE_SET_IRQS        = _VFIO_TYPE<<8 | (_VFIO_BASE + 10)
	_VFIO_DEVICE_RESET           = _VFIO_TYPE<<8 | (_VFIO_BASE + 11)
	_VFIO_IOMMU_GET_INFO         = _VFIO_TYPE<<8 | (_VFIO_BASE + 12)
	_VFIO_IOMMU_MAP_DMA          = _VFIO_TYPE<<8 | (_VFIO_BASE + 13)
	_VFIO_IOMMU_UNMAP_DMA        = _VFIO_TYPE<<8 | (_VFIO_BASE + 14)
)

// _VFIO_API_VERSION is what VFIO_GET_API_VERSION returns.
const _VFIO_API_VERSION = 0

// IOMMU models, for VFIO_CHECK_EXTENSION and VFIO_SET_IOMMU.
const (
	_VFIO_TYPE1_IOMMU   = 1
	_VFIO_TYPE1v2_IOMMU = 3
	_VFIO_NOIOMMU_IOMMU = 8
)

// Flags of struct vfio_group_status.
const (
	_VFIO_GROUP_FLAGS_VIABLE        = 1 << 0
	_VFIO_GROUP_FLAGS_CONTAINER_SET = 1 << 1
)

// Flags of struct vfio_device_info.
const (
	_VFIO_DEVICE_FLAGS_RESET    = 1 << 0
	_VFIO_DEVICE_FLAGS_PCI      = 1 << 1
	_VFIO_DEVICE_FLAGS_PLATFORM = 1 << 2
	_VFIO_DEVICE_FLAGS_CAPS     = 1 << 7
)

// Flags of struct vfio_region_info.
const (
	_VFIO_REGION_INFO_FLAG_READ  = 1 << 0
	_VFIO_REGION_INFO_FLAG_WRITE = 1 << 1
	_VFIO_REGION_INFO_FLAG_MMAP  = 1 << 2
	_VFIO_REGION_INFO_FLAG_CAPS  = 1 << 3
)

// Region indexes of a vfio-pci device (enum in linux/vfio.h).
const (
	_VFIO_PCI_BAR0_REGION_INDEX   = 0
	_VFIO_PCI_BAR5_REGION_INDEX   = 5
	_VFIO_PCI_ROM_REGION_INDEX    = 6
	_VFIO_PCI_CONFIG_REGION_INDEX = 7
	_VFIO_PCI_VGA_REGION_INDEX    = 8
	_VFIO_PCI_NUM_REGIONS         = 9
)

// Interrupt indexes of a vfio-pci device (enum in linux/vfio.h).
const (
	_VFIO_PCI_INTX_IRQ_INDEX = 0
	_VFIO_PCI_MSI_IRQ_INDEX  = 1
	_VFIO_PCI_MSIX_IRQ_INDEX = 2
	_VFIO_PCI_ERR_IRQ_INDEX  = 3
	_VFIO_PCI_REQ_IRQ_INDEX  = 4
	_VFIO_PCI_NUM_IRQS       = 5
)

// Flags of struct vfio_irq_info.
const (
	_VFIO_IRQ_INFO_EVENTFD    = 1 << 0
	_VFIO_IRQ_INFO_MASKABLE   = 1 << 1
	_VFIO_IRQ_INFO_AUTOMASKED = 1 << 2
	_VFIO_IRQ_INFO_NORESIZE   = 1 << 3
)

// Flags of struct vfio_irq_set.
const (
	_VFIO_IRQ_SET_DATA_NONE      = 1 << 0
	_VFIO_IRQ_SET_DATA_BOOL      = 1 << 1
	_VFIO_IRQ_SET_DATA_EVENTFD   = 1 << 2
	_VFIO_IRQ_SET_ACTION_MASK    = 1 << 3
	_VFIO_IRQ_SET_ACTION_UNMASK  = 1 << 4
	_VFIO_IRQ_SET_ACTION_TRIGGER = 1 << 5
)

// Flags of struct vfio_iommu_type1_info, and the capability IDs found on
// its capability chain.
const (
	_VFIO_IOMMU_INFO_PGSIZES = 1 << 0
	_VFIO_IOMMU_INFO_CAPS    = 1 << 1

	_VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE = 1
)

// Flags of struct vfio_iommu_type1_dma_map.
const (
	_VFIO_DMA_MAP_FLAG_READ  = 1 << 0
	_VFIO_DMA_MAP_FLAG_WRITE = 1 << 1
)

// vfioGroupStatus is analogous to struct vfio_group_status in linux/vfio.h.
type vfioGroupStatus struct {
	Argsz uint32
	Flags uint32
}

// vfioDeviceInfo is analogous to struct vfio_device_info in linux/vfio.h
// (6.1 layout: 20 bytes, no trailing pad).
type vfioDeviceInfo struct {
	Argsz      uint32
	Flags      uint32
	NumRegions uint32
	NumIRQs    uint32
	CapOffset  uint32
}

// vfioRegionInfo is analogous to struct vfio_region_info in linux/vfio.h.
type vfioRegionInfo struct {
	Argsz     uint32
	Flags     uint32
	Index     uint32
	CapOffset uint32
	Size      uint64
	Offset    uint64
}

// vfioIRQInfo is analogous to struct vfio_irq_info in linux/vfio.h.
type vfioIRQInfo struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Count uint32
}

// vfioIRQSet is analogous to struct vfio_irq_set in linux/vfio.h, without
// the flexible data[] member: the eventfds (one int32 each) follow the
// header in the same buffer, see marshalIRQSet.
type vfioIRQSet struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Start uint32
	Count uint32
}

// vfioIRQSetSize is sizeof(struct vfio_irq_set), where data[] begins.
const vfioIRQSetSize = 20

// vfioIOMMUType1Info is analogous to struct vfio_iommu_type1_info in
// linux/vfio.h; the explicit pad makes the Go size equal the C size (24).
type vfioIOMMUType1Info struct {
	Argsz       uint32
	Flags       uint32
	IOVAPgsizes uint64
	CapOffset   uint32
	_           uint32
}

// vfioIOMMUType1InfoSize is sizeof(struct vfio_iommu_type1_info).
const vfioIOMMUType1InfoSize = 24

// vfioInfoCapHeader is analogous to struct vfio_info_cap_header in
// linux/vfio.h. Next is the offset of the next capability from the start of
// the info struct, 0 at the end of the chain.
type vfioInfoCapHeader struct {
	ID      uint16
	Version uint16
	Next    uint32
}

// vfioIOMMUType1InfoCapIOVARange is analogous to struct
// vfio_iommu_type1_info_cap_iova_range in linux/vfio.h, without the flexible
// iova_ranges[] member (an array of vfioIOVARange that follows it).
type vfioIOMMUType1InfoCapIOVARange struct {
	Header   vfioInfoCapHeader
	NrIOVAs  uint32
	Reserved uint32
}

// vfioIOVARange is analogous to struct vfio_iova_range in linux/vfio.h. End
// is inclusive.
type vfioIOVARange struct {
	Start uint64
	End   uint64
}

// vfioIOMMUType1DMAMap is analogous to struct vfio_iommu_type1_dma_map in
// linux/vfio.h.
type vfioIOMMUType1DMAMap struct {
	Argsz uint32
	Flags uint32
	Vaddr uint64
	IOVA  uint64
	Size  uint64
}

// vfioIOMMUType1DMAUnmap is analogous to struct vfio_iommu_type1_dma_unmap
// in linux/vfio.h, without the flexible data[] member (only used for dirty
// bitmaps). The kernel writes the number of bytes unmapped back to Size.
type vfioIOMMUType1DMAUnmap struct {
	Argsz uint32
	Flags uint32
	IOVA  uint64
	Size  uint64
}
