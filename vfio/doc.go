// Package vfio implements the pci device contract for real PCI functions,
// through the Linux kernel's vfio-pci driver and the legacy VFIO
// container/group API (the one Linux 6.1 has; iommufd is not used).
//
// # From sysfs to a device
//
// A function is usable from user space once vfio-pci owns it. [Sysfs] reads
// what the kernel knows about PCI functions (IDs, class, bound driver, IOMMU
// group, NUMA node) and moves a function between its kernel driver and
// vfio-pci with [Sysfs.Bind] and [Sysfs.Unbind], through the function's
// driver_override attribute. Its Root is configurable, so the same code runs
// against a recorded tree in tests.
//
// The IOMMU isolates functions in groups: the smallest sets it can tell
// apart. VFIO hands out whole groups, as /dev/vfio/N, and only when every
// function of the group is bound to vfio-pci or to no driver ("viable");
// [Sysfs.CheckViable] names the functions that stand in the way.
//
// A [Container] (/dev/vfio/vfio) is one DMA address space. [OpenContainer]
// checks the API version and the IOMMU model. [Container.Open] attaches the
// function's group to the container (the first group also sets the IOMMU
// model, type1v2 when the kernel has it), gets the device file descriptor
// and reads the device's regions and interrupts. Every step is undone when
// a later one fails. Groups stay attached until the container is closed,
// so the container's mappings outlive the devices.
//
// # Registers and config space
//
// A [Device] exposes memory BARs as pci.Registers. A BAR that VFIO lets us
// mmap is accessed with exactly one load or store of the requested width on
// the mapping (sync/atomic for 32 and 64 bits); any other BAR through one
// pread or pwrite of that width on the device file. Configuration space is
// always read and written through the config region of the device file,
// where VFIO virtualises the parts a user must not touch (BAR addresses, the
// MSI and MSI-X capabilities). A driver enables memory decoding and bus
// mastering itself, with pci.SetCommand; [Device.Close] clears bus
// mastering so the function stops DMA before anything else is released.
//
// # DMA
//
// The Container implements pci.DMA, and every device opened from it returns
// it from DMA, so one buffer mapped once is reachable by all of them at the
// same address. With an IOMMU (type1), [Container.Map] takes an IOVA from a
// first-fit allocator over [Options.IOVABase, Options.IOVALimit),
// intersected with the ranges the IOMMU reports as usable, and calls
// VFIO_IOMMU_MAP_DMA, which pins the pages. Mappings of 2 MiB and more get
// 2 MiB aligned IOVAs so the IOMMU can use large pages.
//
// Without an IOMMU the kernel offers an unsafe no-IOMMU mode, used only
// when [Options.NoIOMMU] asks for it and the vfio module was loaded with
// enable_unsafe_noiommu_mode=1. Devices then see physical memory: Map
// locks the buffer and returns its physical addresses, from
// hugepage.Translate, as segments that break wherever physical memory stops
// being contiguous; nothing protects the machine from a wrong address.
//
// # Interrupts
//
// [Device.EnableInterrupts] wires MSI-X vectors (or a single MSI vector when
// the function has no MSI-X) to eventfds with VFIO_DEVICE_SET_IRQS; each
// vector is a pci.Interrupt that a goroutine can wait on without spinning.
//
// # Teardown
//
// [Device.Close] disables interrupts, clears bus mastering, unmaps the BARs
// and closes the device file. [Container.Close] closes devices still open,
// unmaps remaining mappings, detaches and closes the groups and closes the
// container, and reports leftover devices and mappings as an error, because
// they are leaks in the caller. Closing twice is harmless.
//
// # Errors
//
// Failures are *pci.OpError values naming the ioctl, file or register and
// the PCI address, wrapping an errno or one of the pci sentinels:
// pci.ErrNotSupported (missing kernel support or device feature),
// pci.ErrBusy (a function owned by another driver, a non-viable group, a
// group open elsewhere), pci.ErrNoSpace (IOVA space exhausted),
// pci.ErrNotMapped, pci.ErrBadRange and pci.ErrClosed. Errors caused by the
// environment say what to do: load a module, turn the IOMMU on, run as root.
//
// # Testing
//
// The unit tests run anywhere: they check the ABI layouts against
// linux/vfio.h, the IOVA allocator, and the sysfs helpers against a tree
// generated from vfio/testdata/sysfs.txt. The tests that need real devices
// open every function bound to vfio-pci; they skip, saying how to set up
// VFIO, when /dev/vfio/vfio is absent, and fail instead when the
// environment variable GOMX_REQUIRE_VFIO is 1 (as in the QEMU runs).
//
// The TestQEMU* tests need the devices of the QEMU test machine that
// `make qemu-test` boots (hack/qemu): QEMU's edu device, whose DMA engine
// copies between hugepage memory and its own buffer through the IOMMU (or
// to physical addresses in no-IOMMU mode), raises MSI on an eventfd and is
// stopped by the IOMMU at an unmapped IOVA with a DMAR fault in the kernel
// log; two e1000e NICs on one wire, one sending a frame by DMA that the
// other receives by DMA, and MSI-X on an eventfd; and an IOMMU group made
// non-viable by a function bound to uio_pci_generic. Elsewhere they skip;
// the VM runner lists the features it provides in GOMX_REQUIRE_QEMU (edu,
// e1000e, nonviable, iommu, noiommu), which turns those skips into
// failures.
package vfio
