package nictest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
	"golang.org/x/sys/unix"
)

// VFIOWant says which real (or QEMU) NICs a test wants behind VFIO, and how
// the environment names them.
type VFIOWant struct {
	// Driver is the driver's name as GOMX_REQUIRE_QEMU lists it ("e1000e"):
	// when that variable names it, a missing NIC fails the test instead of
	// skipping it.
	Driver string
	// DevicesEnv is the variable that names the NICs to use, a comma list
	// of PCI addresses ("GOMX_E1000E_DEVICES"); when it is empty, the first
	// functions on the bus that Match and are bound to vfio-pci are used.
	DevicesEnv string
	// Match picks the functions of the driver's NIC model.
	Match func(vfio.Function) bool
	// Count is how many NICs the test needs (2 for a cabled pair).
	Count int
}

// VFIONICs is Count NICs opened through one VFIO container.
type VFIONICs struct {
	// Devices are the opened PCI functions, in bus order (or the order of
	// DevicesEnv).
	Devices []*vfio.Device
	// NoIOMMU tells whether the container runs in vfio's no-IOMMU mode.
	NoIOMMU bool
}

// FindVFIO finds the NICs w asks for without opening them, and says how
// to open their container. It skips, with a hint how to provide them, when
// there are too few (the suite then ran on the models only), and fails
// instead when GOMX_REQUIRE_QEMU names w.Driver, as in `make qemu-test`.
func FindVFIO(t testing.TB, w VFIOWant) (vfio.Options, []pci.Address) {
	t.Helper()
	skip := func(why string) {
		t.Helper()
		if req := os.Getenv("GOMX_REQUIRE_QEMU"); strings.Contains(req, w.Driver) {
			t.Fatalf("GOMX_REQUIRE_QEMU=%s but %s", req, why)
		}
		t.Skipf("%s: ran on the emulated NICs only (bind %d cabled %s NICs to vfio-pci, or name them in %s)", why, w.Count, w.Driver, w.DevicesEnv)
	}
	o := vfio.DefaultOptions()
	if _, err := os.Stat("/dev/vfio/vfio"); err != nil {
		skip("no VFIO (" + err.Error() + ")")
	}
	o.NoIOMMU = NoIOMMU()
	var addrs []pci.Address
	if env := os.Getenv(w.DevicesEnv); env != "" {
		for _, s := range strings.Split(env, ",") {
			a, err := pci.ParseAddress(strings.TrimSpace(s))
			if err != nil {
				t.Fatalf("%s: %v", w.DevicesEnv, err)
			}
			addrs = append(addrs, a)
		}
	} else {
		fns, err := o.Sysfs.Functions()
		if err != nil {
			skip("no PCI sysfs (" + err.Error() + ")")
		}
		for _, f := range fns {
			if w.Match(f) && f.Driver == "vfio-pci" {
				addrs = append(addrs, f.Addr)
			}
		}
	}
	if len(addrs) < w.Count {
		skip(fmt.Sprintf("%d %s functions bound to vfio-pci, the test needs %d", len(addrs), w.Driver, w.Count))
	}
	return o, addrs[:w.Count]
}

// NoIOMMU tells whether VFIO runs here in its no-IOMMU mode (a noiommu
// group exists): the DMA addresses of a mapping are then physical, and
// it breaks where physical memory does.
func NoIOMMU() bool {
	m, _ := filepath.Glob("/dev/vfio/noiommu-*")
	return len(m) > 0
}

// OpenVFIO finds the NICs w asks for (skipping or failing as FindVFIO
// does), opens them in one container, and closes devices and container
// when the test ends.
func OpenVFIO(t testing.TB, w VFIOWant) *VFIONICs {
	t.Helper()
	o, addrs := FindVFIO(t, w)
	ctr, err := vfio.OpenContainer(o)
	if err != nil {
		t.Fatal(err)
	}
	v := &VFIONICs{NoIOMMU: o.NoIOMMU}
	t.Cleanup(func() {
		for _, d := range v.Devices {
			if err := d.Close(); err != nil {
				t.Errorf("close %v: %v", d.Address(), err)
			}
		}
		if err := ctr.Close(); err != nil {
			t.Errorf("close the VFIO container: %v", err)
		}
	})
	for _, a := range addrs {
		d, err := ctr.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		v.Devices = append(v.Devices, d)
	}
	return v
}

// Faults returns a counter of the IOMMU's DMA fault reports for Rig.Faults,
// or nil when it cannot count them: without an IOMMU there are none to
// count, and reading the kernel log needs root.
func (v *VFIONICs) Faults() func() uint64 {
	if v.NoIOMMU {
		return nil
	}
	if _, err := dmarFaults(); err != nil {
		return nil
	}
	return func() uint64 { n, _ := dmarFaults(); return n }
}

// QEMUSetLinkEnv names the variable `make qemu-test` sets in the guest:
// the QEMU netdevs of the cabled NICs, whose cables the host pulls when
// asked on the console (hack/qemu/setlink.go prints the same name).
const QEMUSetLinkEnv = "GOMX_QEMU_SET_LINK"

// QEMUSetLink returns a Rig.SetLink that asks the host to pull or plug
// QEMU's cables, or nil outside `make qemu-test` (real hardware has no one
// to pull them).
func QEMUSetLink() func(up bool) error {
	netdevs := os.Getenv(QEMUSetLinkEnv)
	if netdevs == "" {
		return nil
	}
	return func(up bool) error {
		state := "off"
		if up {
			state = "on"
		}
		for _, nd := range strings.Split(netdevs, ",") {
			fmt.Printf("GOMX-QEMU-SET-LINK %s %s\n", nd, state)
		}
		return nil
	}
}

// dmarFaults counts the Intel IOMMU's DMA fault reports in the kernel log
// ("DMAR: [DMA Read" or "DMAR: [DMA Write"): a device that touches memory
// it has no mapping for shows up there.
func dmarFaults() (uint64, error) {
	size, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, size)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return 0, err
	}
	log := string(buf[:n])
	return uint64(strings.Count(log, "DMAR: [DMA Read") + strings.Count(log, "DMAR: [DMA Write")), nil
}
