package vfio

import (
	"testing"
	"unsafe"
)

// The expected values below were printed by a C program compiled against
// include/uapi/linux/vfio.h of Linux 6.1 (Debian 12 linux-libc-dev) on
// amd64: sizeof, offsetof and the ioctl macros.

func TestABIIoctlNumbers(t *testing.T) {
	for _, c := range []struct {
		name string
		got  uint
		want uint
	}{
		{"VFIO_GET_API_VERSION", _VFIO_GET_API_VERSION, 0x3b64},
		{"VFIO_CHECK_EXTENSION", _VFIO_CHECK_EXTENSION, 0x3b65},
		{"VFIO_SET_IOMMU", _VFIO_SET_IOMMU, 0x3b66},
		{"VFIO_GROUP_GET_STATUS", _VFIO_GROUP_GET_STATUS, 0x3b67},
		{"VFIO_GROUP_SET_CONTAINER", _VFIO_GROUP_SET_CONTAINER, 0x3b68},
		{"VFIO_GROUP_UNSET_CONTAINER", _VFIO_GROUP_UNSET_CONTAINER, 0x3b69},
		{"VFIO_GROUP_GET_DEVICE_FD", _VFIO_GROUP_GET_DEVICE_FD, 0x3b6a},
		{"VFIO_DEVICE_GET_INFO", _VFIO_DEVICE_GET_INFO, 0x3b6b},
		{"VFIO_DEVICE_GET_REGION_INFO", _VFIO_DEVICE_GET_REGION_INFO, 0x3b6c},
		{"VFIO_DEVICE_GET_IRQ_INFO", _VFIO_DEVICE_GET_IRQ_INFO, 0x3b6d},
		{"VFIO_DEVICE_SET_IRQS", _VFIO_DEVICE_SET_IRQS, 0x3b6e},
		{"VFIO_DEVICE_RESET", _VFIO_DEVICE_RESET, 0x3b6f},
		{"VFIO_IOMMU_GET_INFO", _VFIO_IOMMU_GET_INFO, 0x3b70},
		{"VFIO_IOMMU_MAP_DMA", _VFIO_IOMMU_MAP_DMA, 0x3b71},
		{"VFIO_IOMMU_UNMAP_DMA", _VFIO_IOMMU_UNMAP_DMA, 0x3b72},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestABIConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"VFIO_API_VERSION", _VFIO_API_VERSION, 0},
		{"VFIO_TYPE1_IOMMU", _VFIO_TYPE1_IOMMU, 1},
		{"VFIO_TYPE1v2_IOMMU", _VFIO_TYPE1v2_IOMMU, 3},
		{"VFIO_NOIOMMU_IOMMU", _VFIO_NOIOMMU_IOMMU, 8},
		{"VFIO_GROUP_FLAGS_VIABLE", _VFIO_GROUP_FLAGS_VIABLE, 1},
		{"VFIO_GROUP_FLAGS_CONTAINER_SET", _VFIO_GROUP_FLAGS_CONTAINER_SET, 2},
		{"VFIO_DEVICE_FLAGS_RESET", _VFIO_DEVICE_FLAGS_RESET, 1},
		{"VFIO_DEVICE_FLAGS_PCI", _VFIO_DEVICE_FLAGS_PCI, 2},
		{"VFIO_DEVICE_FLAGS_PLATFORM", _VFIO_DEVICE_FLAGS_PLATFORM, 4},
		{"VFIO_DEVICE_FLAGS_CAPS", _VFIO_DEVICE_FLAGS_CAPS, 0x80},
		{"VFIO_REGION_INFO_FLAG_READ", _VFIO_REGION_INFO_FLAG_READ, 1},
		{"VFIO_REGION_INFO_FLAG_WRITE", _VFIO_REGION_INFO_FLAG_WRITE, 2},
		{"VFIO_REGION_INFO_FLAG_MMAP", _VFIO_REGION_INFO_FLAG_MMAP, 4},
		{"VFIO_REGION_INFO_FLAG_CAPS", _VFIO_REGION_INFO_FLAG_CAPS, 8},
		{"VFIO_PCI_BAR0_REGION_INDEX", _VFIO_PCI_BAR0_REGION_INDEX, 0},
		{"VFIO_PCI_BAR5_REGION_INDEX", _VFIO_PCI_BAR5_REGION_INDEX, 5},
		{"VFIO_PCI_ROM_REGION_INDEX", _VFIO_PCI_ROM_REGION_INDEX, 6},
		{"VFIO_PCI_CONFIG_REGION_INDEX", _VFIO_PCI_CONFIG_REGION_INDEX, 7},
		{"VFIO_PCI_VGA_REGION_INDEX", _VFIO_PCI_VGA_REGION_INDEX, 8},
		{"VFIO_PCI_NUM_REGIONS", _VFIO_PCI_NUM_REGIONS, 9},
		{"VFIO_PCI_INTX_IRQ_INDEX", _VFIO_PCI_INTX_IRQ_INDEX, 0},
		{"VFIO_PCI_MSI_IRQ_INDEX", _VFIO_PCI_MSI_IRQ_INDEX, 1},
		{"VFIO_PCI_MSIX_IRQ_INDEX", _VFIO_PCI_MSIX_IRQ_INDEX, 2},
		{"VFIO_PCI_ERR_IRQ_INDEX", _VFIO_PCI_ERR_IRQ_INDEX, 3},
		{"VFIO_PCI_REQ_IRQ_INDEX", _VFIO_PCI_REQ_IRQ_INDEX, 4},
		{"VFIO_PCI_NUM_IRQS", _VFIO_PCI_NUM_IRQS, 5},
		{"VFIO_IRQ_INFO_EVENTFD", _VFIO_IRQ_INFO_EVENTFD, 1},
		{"VFIO_IRQ_INFO_MASKABLE", _VFIO_IRQ_INFO_MASKABLE, 2},
		{"VFIO_IRQ_INFO_AUTOMASKED", _VFIO_IRQ_INFO_AUTOMASKED, 4},
		{"VFIO_IRQ_INFO_NORESIZE", _VFIO_IRQ_INFO_NORESIZE, 8},
		{"VFIO_IRQ_SET_DATA_NONE", _VFIO_IRQ_SET_DATA_NONE, 1},
		{"VFIO_IRQ_SET_DATA_BOOL", _VFIO_IRQ_SET_DATA_BOOL, 2},
		{"VFIO_IRQ_SET_DATA_EVENTFD", _VFIO_IRQ_SET_DATA_EVENTFD, 4},
		{"VFIO_IRQ_SET_ACTION_MASK", _VFIO_IRQ_SET_ACTION_MASK, 8},
		{"VFIO_IRQ_SET_ACTION_UNMASK", _VFIO_IRQ_SET_ACTION_UNMASK, 0x10},
		{"VFIO_IRQ_SET_ACTION_TRIGGER", _VFIO_IRQ_SET_ACTION_TRIGGER, 0x20},
		{"VFIO_IOMMU_INFO_PGSIZES", _VFIO_IOMMU_INFO_PGSIZES, 1},
		{"VFIO_IOMMU_INFO_CAPS", _VFIO_IOMMU_INFO_CAPS, 2},
		{"VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE", _VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, 1},
		{"VFIO_DMA_MAP_FLAG_READ", _VFIO_DMA_MAP_FLAG_READ, 1},
		{"VFIO_DMA_MAP_FLAG_WRITE", _VFIO_DMA_MAP_FLAG_WRITE, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

func TestABILayout(t *testing.T) {
	type field struct {
		name      string
		got, want uintptr
	}
	var (
		gs  vfioGroupStatus
		di  vfioDeviceInfo
		ri  vfioRegionInfo
		ii  vfioIRQInfo
		is  vfioIRQSet
		ti  vfioIOMMUType1Info
		ch  vfioInfoCapHeader
		cr  vfioIOMMUType1InfoCapIOVARange
		ir  vfioIOVARange
		dm  vfioIOMMUType1DMAMap
		dum vfioIOMMUType1DMAUnmap
	)
	for _, c := range []field{
		{"sizeof(struct vfio_group_status)", unsafe.Sizeof(gs), 8},
		{"vfio_group_status.flags", unsafe.Offsetof(gs.Flags), 4},

		{"sizeof(struct vfio_device_info)", unsafe.Sizeof(di), 20},
		{"vfio_device_info.num_regions", unsafe.Offsetof(di.NumRegions), 8},
		{"vfio_device_info.num_irqs", unsafe.Offsetof(di.NumIRQs), 12},
		{"vfio_device_info.cap_offset", unsafe.Offsetof(di.CapOffset), 16},

		{"sizeof(struct vfio_region_info)", unsafe.Sizeof(ri), 32},
		{"vfio_region_info.index", unsafe.Offsetof(ri.Index), 8},
		{"vfio_region_info.cap_offset", unsafe.Offsetof(ri.CapOffset), 12},
		{"vfio_region_info.size", unsafe.Offsetof(ri.Size), 16},
		{"vfio_region_info.offset", unsafe.Offsetof(ri.Offset), 24},

		{"sizeof(struct vfio_irq_info)", unsafe.Sizeof(ii), 16},
		{"vfio_irq_info.index", unsafe.Offsetof(ii.Index), 8},
		{"vfio_irq_info.count", unsafe.Offsetof(ii.Count), 12},

		{"sizeof(struct vfio_irq_set)", unsafe.Sizeof(is), 20},
		{"vfioIRQSetSize", vfioIRQSetSize, 20},
		{"vfio_irq_set.index", unsafe.Offsetof(is.Index), 8},
		{"vfio_irq_set.start", unsafe.Offsetof(is.Start), 12},
		{"vfio_irq_set.count", unsafe.Offsetof(is.Count), 16},

		{"sizeof(struct vfio_iommu_type1_info)", unsafe.Sizeof(ti), 24},
		{"vfioIOMMUType1InfoSize", vfioIOMMUType1InfoSize, 24},
		{"vfio_iommu_type1_info.iova_pgsizes", unsafe.Offsetof(ti.IOVAPgsizes), 8},
		{"vfio_iommu_type1_info.cap_offset", unsafe.Offsetof(ti.CapOffset), 16},

		{"sizeof(struct vfio_info_cap_header)", unsafe.Sizeof(ch), 8},
		{"vfio_info_cap_header.version", unsafe.Offsetof(ch.Version), 2},
		{"vfio_info_cap_header.next", unsafe.Offsetof(ch.Next), 4},
		{"sizeof(struct vfio_iommu_type1_info_cap_iova_range)", unsafe.Sizeof(cr), 16},
		{"vfio_iommu_type1_info_cap_iova_range.nr_iovas", unsafe.Offsetof(cr.NrIOVAs), 8},
		{"vfio_iommu_type1_info_cap_iova_range.reserved", unsafe.Offsetof(cr.Reserved), 12},
		{"sizeof(struct vfio_iova_range)", unsafe.Sizeof(ir), 16},
		{"vfio_iova_range.end", unsafe.Offsetof(ir.End), 8},

		{"sizeof(struct vfio_iommu_type1_dma_map)", unsafe.Sizeof(dm), 32},
		{"vfio_iommu_type1_dma_map.vaddr", unsafe.Offsetof(dm.Vaddr), 8},
		{"vfio_iommu_type1_dma_map.iova", unsafe.Offsetof(dm.IOVA), 16},
		{"vfio_iommu_type1_dma_map.size", unsafe.Offsetof(dm.Size), 24},

		{"sizeof(struct vfio_iommu_type1_dma_unmap)", unsafe.Sizeof(dum), 24},
		{"vfio_iommu_type1_dma_unmap.iova", unsafe.Offsetof(dum.IOVA), 8},
		{"vfio_iommu_type1_dma_unmap.size", unsafe.Offsetof(dum.Size), 16},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// TestMarshalIRQSet checks the hand-built vfio_irq_set buffer against the
// struct layout: header fields at their offsets, then the eventfds.
func TestMarshalIRQSet(t *testing.T) {
	b := marshalIRQSet(_VFIO_IRQ_SET_DATA_EVENTFD|_VFIO_IRQ_SET_ACTION_TRIGGER, _VFIO_PCI_MSIX_IRQ_INDEX, []int32{7, 9})
	if len(b) != vfioIRQSetSize+8 {
		t.Fatalf("len = %d, want %d", len(b), vfioIRQSetSize+8)
	}
	hdr := (*vfioIRQSet)(unsafe.Pointer(&b[0]))
	want := vfioIRQSet{Argsz: 28, Flags: 0x24, Index: 2, Start: 0, Count: 2}
	if *hdr != want {
		t.Errorf("header = %+v, want %+v", *hdr, want)
	}
	fds := unsafe.Slice((*int32)(unsafe.Pointer(&b[vfioIRQSetSize])), 2)
	if fds[0] != 7 || fds[1] != 9 {
		t.Errorf("eventfds = %v, want [7 9]", fds)
	}
}
