// Package qemu runs gomx's own tests inside QEMU guests against real PCI
// devices behind the kernel's VFIO stack. It is what `make qemu-test` and
// `go test -tags qemu ./hack/qemu/` drive.
//
// # What a run does
//
// The host side ([Run]) installs the Debian packages it lacks
// (qemu-system-x86, kmod, xz-utils), downloads the pinned guest kernel
// package ([KernelPackage], falling back with a warning to whatever
// [KernelMetaPackage] depends on) with apt-get download into a cache that
// git ignores, and extracts its uncompressed vmlinux, which QEMU boots
// through PVH seconds faster than the bzImage under TCG. For the no-IOMMU
// configuration it builds vfio.ko with CONFIG_VFIO_NOIOMMU from Debian's
// kernel source package (build-vfio-noiommu.sh), because Debian's own
// vfio.ko lacks that option.
//
// It then builds an initramfs, written by [Archive] without a cpio tool:
// the static init of hack/qemu/init as /init, the VFIO and uio modules in
// dependency order (from modinfo), and the test binaries of the packages
// that need real devices, each built with `go test -c` next to its
// testdata. Every configuration in [Configs] boots that one image.
//
// # In the guest
//
// The init loads the modules, reserves hugepages, binds QEMU's edu DMA
// engine and its two e1000e NICs (cabled to each other through an
// in-process hub) to vfio-pci, and runs every test binary with -test.v and
// GOMX_REQUIRE_VFIO=1, GOMX_REQUIRE_HUGEPAGES=1 and GOMX_REQUIRE_QEMU set,
// so that a test that would skip for lack of a device fails instead. It
// prints a [Summary] on the serial console, one line starting with
// [SummaryMarker], and powers off.
//
// # Pulling cables
//
// QEMU runs with its human monitor on a socket beside the serial log. A
// guest test that needs a link to go down or up prints a line
// "GOMX-QEMU-SET-LINK n0 off" (the netdevs it may name are in
// GOMX_QEMU_SET_LINK), and the host runs set_link on the monitor before
// reading on (setlink.go). The NIC suite pulls both e1000e cables this way.
//
// # Verdict
//
// [ParseLog] fails a boot on a missing summary, a failed setup step, a test
// binary that did not pass, and any "--- FAIL", "panic: " or kernel panic
// line in the log; [Boot] adds a timeout. Every step on both sides has a
// bound. A failed run keeps its directory (initramfs, test binaries, build
// output and one serial log per configuration, each starting with the QEMU
// command line); [Options.Keep] (GOMX_QEMU_KEEP=1) keeps a passing one too.
package qemu
