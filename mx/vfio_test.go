package mx

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// TestForgedFramesVFIO runs the forged-frame attack over real (or QEMU's)
// 82574Ls through the VFIO driver: two boards on NICs 0 and 1, the attacker
// on NIC 2, all three on one segment (QEMU's hub in `make qemu-test`, which
// runs this test in its guests). Malformed and forged frames must be
// dropped and counted, never delivered, when they come through a real
// NIC's receive path, not only the model's. It skips without three such
// NICs bound to vfio-pci, and fails instead where GOMX_REQUIRE_QEMU names
// e1000e.
func TestForgedFramesVFIO(t *testing.T) {
	forgedFrames(t, newVFIOWire(t))
}

// newVFIOWire is the nic wire over three VFIO 82574Ls on one segment (named
// in GOMX_E1000E_DEVICES, or the first three on the bus).
func newVFIOWire(t *testing.T) *wire2 {
	v := nictest.OpenVFIO(t, nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 3,
		Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }})
	d := v.Devices
	return e1000eWire(t, "VFIO", [3]pci.Device{d[0], d[1], d[2]}, func() {})
}
