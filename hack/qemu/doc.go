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
// It then builds an initramfs with u-root's initramfs and cpio packages
// (github.com/u-root/mkuimage/uimage/initramfs, where u-root's
// pkg/uroot/initramfs moved): the static init of hack/qemu/init as /init,
// the test binaries of the packages that need real devices (each built with
// `go test -c`, next to its testdata), and the kernel's modules.dep with the
// .ko files the guest modules need, at lib/modules/RELEASE as in any root
// file system. The set of .ko files is what u-root's kmodule would load,
// asked in dry-run mode on the host. Every configuration in [Configs] boots
// that one image.
//
// # In the guest
//
// The init mounts the pseudo file systems with u-root's libinit creators,
// loads the modules with u-root's kmodule (dependencies first, from
// modules.dep; the no-IOMMU vfio.ko is loaded before, so kmodule keeps it),
// reserves hugepages, binds QEMU's edu DMA
// engine and its e1000e NICs (two cabled to each other through an
// in-process hub, and in the test configurations a third on the same hub
// that mx's forged-frame test attacks from) to vfio-pci, and runs every
// test binary with -test.v (and the -test.run pattern its package was
// listed with, if any) and
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
// # The usb configuration
//
// `make qemu-test QEMU_CONFIG=usb` boots the iommu machine with QEMU's
// xHCI controller and its usb-net, a CDC ECM function cabled to NIC B
// alone through a pair of unix datagram sockets (QEMU's hub would reorder
// its frames), and runs the tests of [USBPackages] (gomx's USB driver,
// package nicdrv/usbnet, against its e1000e driver behind VFIO) instead of
// the default ones. Those tests link libusb through cgo, and a
// static link is out of reach (Debian's libusb-1.0.a needs a libudev that
// Debian ships no static library of), so they are built dynamically, with
// the usb tag, into [USBTestDir], and the shared libraries and the dynamic
// loader that u-root's ldd names for them go into the image at their host
// paths. The guest loads [USBGuestModules] (the xHCI driver and the
// kernel's cdc_ether, which the driver detaches and gives back) and, since
// loading xhci_pci does not wait for the controller to enumerate its
// ports, waits up to [USBReadyTimeout] for the usb-net to be configured,
// its node in /dev/bus/usb and cdc_ether bound to it ([USBWait]) before
// any test opens it. A test
// unplugs the usb-net mid-run by printing "GOMX-QEMU-DEVICE-DEL usb0"
// (the devices it may name are in GOMX_QEMU_DEVICE_DEL); the host runs
// device_del on the monitor, as it runs set_link. Under TCG the usb-net
// moves a few hundred frames a second at best, so the usb configuration
// sends 2 000 frames each way (GOMX_USBNET_FRAMES), and the test's
// 100 000 run in usb-100k, which is Optional: "all" does not boot it.
//
// # Verdict
//
// [Boot] starts QEMU with vmtest's qemu package (github.com/hugelgupf/vmtest,
// built on u-root), which runs it on a pseudo-terminal console and kills it
// when the configuration's timeout passes. [ParseLog] fails a boot on a
// missing summary, a failed setup step, a test binary that did not pass,
// and any "--- FAIL", "panic: " or kernel panic line in the log; [Boot]
// adds the timeout and QEMU's own exit status. A QEMU that dies of its own
// fault (a segmentation fault or an abort, which no guest may cause; seen
// once under multi-threaded TCG, right after a set_link) is not a verdict
// on the tests: [Run] boots that configuration once more, and the report
// says it did and keeps both serial logs. Every step on both sides has a
// bound. A failed run keeps its directory (initramfs, test binaries, build
// output and one serial log per configuration, each starting with the QEMU
// command line); [Options.Keep] (GOMX_QEMU_KEEP=1) keeps a passing one too.
//
// # Other configurations
//
// A configuration with Config.Run (hack/peers' benchmark VMs) boots the
// same machine and init, which sets up as usual and then runs that one
// program instead of the test binaries; Options.Programs, Files and
// Modules put main packages, host files (a dynamically linked program and
// the libraries u-root's ldd names) and modules the program loads itself
// into its image, and Options.USBPrograms main packages built with cgo and
// the usb tag, beside the libraries they load (mxbench with libusb, on the
// usb machine). Such configurations are not in Configs, so `make
// qemu-test` never boots them.
//
// # What u-root does here, and what stays ours
//
// From u-root and vmtest: the archive layout and the newc writer
// (mkuimage's initramfs and cpio packages), module dependency resolution
// and loading (kmodule, on the host in dry-run mode and in the guest), the
// guest's mounts (libinit's Mount and Dir creators), and starting, draining
// and killing QEMU (vmtest's qemu.Options and VM). What is ours, and why:
//
//   - modules.dep comes from `depmod -b` on the host: Debian's kernel
//     package ships none (its postinst writes it), and kmodule only reads it.
//   - The init runs each libinit creator itself: libinit.Create only logs a
//     failure to the kernel log, and the summary must carry it.
//   - The init itself. u-root's init (cmds/core/init) starts a shell or a
//     uinit and knows no verdict. vmtest's own guest side (vminit, govmtest)
//     reports over 9P and virtio-serial, which Debian's kernel builds as
//     modules (9p, 9pnet_virtio, virtio_pci, virtio_console) that are not
//     loaded when vminit mounts; our init prints the summary on the serial
//     console instead. Binding the devices to vfio-pci and building a
//     non-viable IOMMU group are gomx's own.
//   - Running the test binaries: libinit.RunCommands returns only how many
//     commands it started, with no exit status and no timeout; ours kills a
//     binary after -test-timeout and counts its results.
//   - Powering off: u-root has it only as a command (cmds/core/shutdown), so
//     the init calls reboot(2) itself.
//   - The console lines: vmtest's LogSerialByLine reads them with a
//     bufio.Scanner (64 KiB lines) through a pipe; a longer line stops the
//     reader, then QEMU's output blocks for good (vmtest sets no WaitDelay),
//     which would break the bound on every step. Boot gives vmtest a writer
//     that never blocks (serialLog) instead.
//   - The QEMU options are filled in directly, not through vmtest's
//     OptionsFor, which adds -nographic (and with it QEMU's default devices
//     unless -nodefaults, which the fixed PCI addresses need) and reads
//     VMTEST_* variables.
//   - Fetching the guest kernel and rebuilding vfio.ko for no-IOMMU: neither
//     u-root nor vmtest fetches kernels (vmtest takes VMTEST_KERNEL).
package qemu
