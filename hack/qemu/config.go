package qemu

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config is one boot configuration: the machine QEMU emulates and what the
// guest's init is told to set up.
type Config struct {
	// Name identifies the configuration on the command line and in logs.
	Name string
	// Doc is one sentence saying what the configuration covers.
	Doc string
	// SMP is the number of vCPUs; more than one turns on multi-threaded TCG.
	SMP int
	// MemMiB is the guest RAM in MiB.
	MemMiB int
	// NoIOMMU boots without the emulated Intel IOMMU and loads a vfio.ko
	// built with CONFIG_VFIO_NOIOMMU in unsafe no-IOMMU mode.
	NoIOMMU bool
	// Hugepages is how many 2 MiB hugepages the init reserves.
	Hugepages int
	// Timeout bounds the whole VM run, from QEMU's start to its exit.
	Timeout time.Duration
	// Env adds K=V pairs to the environment of what the guest runs.
	Env []string
	// ThirdNIC adds a third e1000e on the hub (NICCAddr), the attacker of
	// mx's forged-frame test; the test configurations have it, the
	// benchmark VM of hack/peers does not.
	ThirdNIC bool
	// Run, when set, is the program (a path in the initramfs, then its
	// arguments) the guest's init runs instead of the test binaries, as a
	// separate configuration such as hack/peers does; the init still sets
	// up modules, hugepages and bindings first.
	Run []string
	// USB adds an xHCI controller with QEMU's usb-net (a CDC ECM function,
	// device USBNetID) cabled to the e1000e hub, loads USBGuestModules,
	// and runs the test binaries of USBPackages (built with cgo against
	// libusb, in USBTestDir) instead of those of the default packages.
	USB bool
	// Optional leaves the configuration out of "all" (what CI runs): it
	// boots only when named.
	Optional bool
}

// Devices the guest tests expect, and where QEMU puts them (-nodefaults
// leaves slot 0 to the host bridge).
const (
	// NIC A and NIC B: two e1000e (82574L, 8086:10d3) on one in-process hub,
	// so a frame one sends is received by the other.
	NICAAddr = "0000:00:01.0"
	NICBAddr = "0000:00:02.0"
	// NICCAddr is the third e1000e on the same hub (Config.ThirdNIC): a
	// stranger on the segment, which the tests use to forge frames.
	NICCAddr = "0000:00:05.0"
	// EduAddr is QEMU's edu device (1234:11e8), a toy DMA engine.
	EduAddr = "0000:00:03.0"
	// The IOMMU configurations also get a PCIe-to-PCI bridge at 00:04.0 with
	// two more edu devices behind it. Devices behind such a bridge share an
	// IOMMU group; the init binds one of them to uio_pci_generic, so the
	// group is not viable for VFIO, which the vfio tests check.
	BridgeAddr = "0000:00:04.0"
	// XHCISlot is where the usb configuration puts QEMU's xHCI controller.
	XHCISlot = "06.0"
)

// The usb configuration's USB Ethernet function, and how the guest's tests
// learn of it.
const (
	// USBNetID is the QEMU device id of the usb-net, which device_del names.
	USBNetID = "usb0"
	// USBNetMAC is the usb-net's MAC, which its iMACAddress string carries.
	USBNetMAC = "52:54:00:12:34:10"
	// USBNetSelector is how usbnet.ParseSelector names the usb-net:
	// QEMU's usb-net answers as a NetChip RNDIS/Ethernet gadget.
	USBNetSelector = "0525:a4a2"
	// USBNetEnv names the guest variable holding USBNetSelector; the
	// usbnet QEMU tests skip without it.
	USBNetEnv = "GOMX_USBNET_DEVICE"
	// USBCableSock stands in MachineArgs for the prefix of the unix
	// sockets that cable the usb-net to NIC B; Boot puts a path beside the
	// serial log there.
	USBCableSock = "@USB-CABLE-SOCKET@"
)

// Configs are the boot configurations `make qemu-test` runs, in order.
var Configs = []Config{
	{
		Name: "iommu", SMP: 1, ThirdNIC: true, MemMiB: 1024, Hugepages: 48, Timeout: 300 * time.Second,
		Doc: "q35 with an emulated Intel IOMMU (caching mode, interrupt remapping), three e1000e NICs on one hub (A and B cabled for the NIC suites, C the attacker of the forged-frame test), an edu DMA engine and a non-viable IOMMU group; VFIO type1v2",
	},
	{
		Name: "iommu-smp2", SMP: 2, ThirdNIC: true, MemMiB: 1024, Hugepages: 48, Timeout: 300 * time.Second,
		Doc: "the iommu configuration with 2 vCPUs (multi-threaded TCG)",
	},
	{
		Name: "usb", SMP: 1, MemMiB: 1024, Hugepages: 48, Timeout: 8 * time.Minute, USB: true,
		Env: []string{"GOMX_USBNET_FRAMES=2000"},
		Doc: "the iommu machine with an xHCI controller and QEMU's usb-net (CDC ECM) cabled to NIC B: gomx's USB driver (libusb) against gomx's e1000e driver (VFIO), 2 000 frames each way, the conformance suite, an mx ping-pong, the usb-net unplugged mid-run",
	},
	{
		Name: "usb-100k", Optional: true, SMP: 1, MemMiB: 1024, Hugepages: 48, Timeout: 25 * time.Minute, USB: true,
		Doc: "the usb configuration with 100 000 frames each way (about 11 minutes under TCG here); all leaves it out",
	},
	{
		Name: "noiommu", SMP: 1, ThirdNIC: true, MemMiB: 1024, Hugepages: 48, Timeout: 300 * time.Second, NoIOMMU: true,
		Doc: "no IOMMU: vfio.ko rebuilt with CONFIG_VFIO_NOIOMMU, loaded with enable_unsafe_noiommu_mode=1; DMA to hugepage physical addresses",
	},
}

// Lookup returns the configurations named in a comma-separated list, in
// the order of Configs; "all" or "" means every one that is not Optional.
func Lookup(names string) ([]Config, error) {
	if names == "" || names == "all" {
		var all []Config
		for _, c := range Configs {
			if !c.Optional {
				all = append(all, c)
			}
		}
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(names, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []Config
	for _, c := range Configs {
		if want[c.Name] {
			out = append(out, c)
			delete(want, c.Name)
		}
	}
	if len(want) > 0 {
		var unknown []string
		for n := range want {
			unknown = append(unknown, n)
		}
		sort.Strings(unknown)
		return nil, fmt.Errorf("unknown configuration %s; known: %s", strings.Join(unknown, ", "), strings.Join(ConfigNames(), ", "))
	}
	return out, nil
}

// ConfigNames lists the names of Configs.
func ConfigNames() []string {
	var n []string
	for _, c := range Configs {
		n = append(n, c.Name)
	}
	return n
}

// Require is the value of GOMX_REQUIRE_QEMU the guest tests get: the QEMU
// devices that must be present, so that their tests fail instead of
// skipping.
func (c Config) Require() string {
	if c.USB {
		return "e1000e,usbnet,iommu"
	}
	if c.NoIOMMU {
		return "edu,e1000e,noiommu"
	}
	return "edu,e1000e,nonviable,iommu"
}

// InitArgs are the arguments the guest's /init gets (after "--" on the
// kernel command line).
func (c Config) InitArgs() []string {
	args := []string{
		"-config=" + c.Name,
		"-hugepages=" + strconv.Itoa(c.Hugepages),
		"-env=GOMX_REQUIRE_VFIO=1",
		"-env=GOMX_REQUIRE_HUGEPAGES=1",
		"-env=GOMX_REQUIRE_QEMU=" + c.Require(),
		"-env=" + SetLinkEnv + "=" + setLinkNetdevs,
	}
	if c.USB {
		args = append(args,
			"-env="+USBNetEnv+"="+USBNetSelector,
			// The tests start once the usb-net has enumerated and
			// cdc_ether holds it, as they expect.
			"-wait-usb="+USBNetSelector+"/cdc_ether",
			"-env="+DeviceDelEnv+"="+USBNetID,
			"-env=GOMX_E1000E_DEVICES="+NICBAddr,
			"-tests="+USBTestDir,
		)
	}
	for _, e := range c.Env {
		args = append(args, "-env="+e)
	}
	if c.USB {
		// One test binary, which gets the VM's time less a minute.
		args = append(args, "-test-timeout="+(c.Timeout-time.Minute).String())
	}
	if len(c.Run) > 0 {
		// The program gets the VM's time less a minute for boot and setup.
		args = append(args, "-run="+strings.Join(c.Run, ","), "-test-timeout="+(c.Timeout-time.Minute).String())
	}
	if c.NoIOMMU {
		args = append(args, "-insmod="+NoIOMMUVfioPath+":enable_unsafe_noiommu_mode=1")
	} else {
		args = append(args, "-nonviable")
	}
	mods := GuestModules
	if c.USB {
		mods = append(append([]string(nil), mods...), USBGuestModules...)
	}
	args = append(args, "-modprobe="+strings.Join(mods, ","))
	return args
}

// Append is the kernel command line. no_timer_check skips the kernel's
// early check that the IO-APIC timer ticks, which a TCG guest on a loaded
// host can fail ("timer doesn't work through Interrupt-remapped IO-APIC"
// and a panic). tsc=reliable keeps the guest on the TSC clocksource, as
// bare-metal Xeons run: TCG derives the guest's TSC from the host's
// monotonic clock, but the kernel's clocksource watchdog, seeing a vCPU
// descheduled by a loaded host as skew, would otherwise fall back to the
// emulated HPET, on which every clock reading is a system call and a
// device-register exit into QEMU (4-7 µs), and the Go runtime and mx read
// the clock often.
func (c Config) Append() string {
	a := "console=ttyS0 panic=-1 loglevel=4 no_timer_check tsc=reliable rdinit=/init"
	if !c.NoIOMMU {
		a += " intel_iommu=on"
	}
	return a + " -- " + strings.Join(c.InitArgs(), " ")
}

// QEMUArgs is the qemu-system-x86_64 command line (without the program
// name) that boots kernel and initrd in this configuration, with the
// serial console on stdout: MachineArgs, then the kernel, the initrd and
// Append.
func (c Config) QEMUArgs(kernel, initrd string) []string {
	return append(c.MachineArgs(), "-kernel", kernel, "-initrd", initrd, "-append", c.Append())
}

// MachineArgs are the QEMU arguments that describe the machine: board,
// accelerator, CPUs, memory, devices, and the serial console on stdio
// (-nodefaults drops QEMU's own serial, monitor, NIC and VGA). TCG only:
// KVM guests hang on the project's machines, and TCG behaves the same
// everywhere.
func (c Config) MachineArgs() []string {
	accel := "tcg"
	if c.SMP > 1 {
		accel = "tcg,thread=multi"
	}
	args := []string{
		"-M", "q35,kernel-irqchip=split", "-accel", accel,
		"-smp", strconv.Itoa(c.SMP), "-m", strconv.Itoa(c.MemMiB) + "M", "-cpu", "max",
		"-nodefaults", "-display", "none", "-monitor", "none", "-serial", "stdio", "-no-reboot",
	}
	if !c.NoIOMMU {
		// The IOMMU must come before the devices it translates for.
		args = append(args, "-device", "intel-iommu,intremap=on,caching-mode=on")
	}
	edu := "edu,addr=03.0"
	if c.NoIOMMU {
		// Without an IOMMU the device sees physical addresses, which may
		// lie above edu's default 28-bit DMA mask.
		edu += ",dma_mask=0xffffffffffffffff"
	}
	nicB := "hubport,id=n1,hubid=0"
	if c.USB {
		// The usb-net and NIC B are cabled to each other alone, through a
		// pair of unix datagram sockets (reliable and ordered; a full
		// socket pushes back): QEMU's hub reorders frames when a port
		// pushes back (its flush delivers the hub's queued frames ahead of
		// those already queued at the receiver), and the usb-net, which
		// holds one frame at a time, pushes back all the time. A stream
		// socket would do too, but QEMU 7.2 listens and connects
		// asynchronously and never retries a refused connection; each
		// datagram end binds its own path at start.
		u, b := USBCableSock+"-u", USBCableSock+"-b"
		args = append(args, "-netdev", "dgram,id=u0,local.type=unix,local.path="+u+",remote.type=unix,remote.path="+b)
		nicB = "dgram,id=n1,local.type=unix,local.path=" + b + ",remote.type=unix,remote.path=" + u
	}
	args = append(args,
		"-netdev", "hubport,id=n0,hubid=0", "-netdev", nicB,
		"-device", "e1000e,netdev=n0,mac=52:54:00:12:34:01,romfile=,addr=01.0",
		"-device", "e1000e,netdev=n1,mac=52:54:00:12:34:02,romfile=,addr=02.0",
		"-device", edu,
	)
	if c.ThirdNIC {
		args = append(args, "-netdev", "hubport,id=n2,hubid=0",
			"-device", "e1000e,netdev=n2,mac=52:54:00:12:34:03,romfile=,addr=05.0")
	}
	if c.USB {
		// usb-net offers CDC ECM (configuration 1) and RNDIS; its netdev
		// u0 is cabled to NIC B's.
		args = append(args,
			"-device", "qemu-xhci,id=xhci,addr="+XHCISlot,
			"-device", "usb-net,id="+USBNetID+",netdev=u0,mac="+USBNetMAC+",bus=xhci.0")
	}
	if !c.NoIOMMU {
		args = append(args,
			"-device", "pcie-pci-bridge,id=br1,addr=04.0",
			"-device", "edu,bus=br1,addr=01.0",
			"-device", "edu,bus=br1,addr=02.0",
		)
	}
	return args
}
