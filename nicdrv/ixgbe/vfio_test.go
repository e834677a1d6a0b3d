package ixgbe_test

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe"
	"github.com/gomx-dev/gomx/nicdrv/ixgbe/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/vfio"
)

// vfioWant asks for two cabled 82599 ports bound to vfio-pci: the ones
// named in GOMX_IXGBE_DEVICES, or else the first two on the bus.
var vfioWant = nictest.VFIOWant{Driver: "ixgbe", DevicesEnv: "GOMX_IXGBE_DEVICES", Count: 2,
	Match: func(f vfio.Function) bool { return hw.Is82599(f.Vendor, f.Device) }}

// vfioRig opens the driver on two real 82599 ports in one container. Real
// hardware has no one to pull the cable (SetLink is nil).
func vfioRig(t *testing.T, c nictest.Config) *nictest.Rig {
	v := nictest.OpenVFIO(t, vfioWant)
	r := &nictest.Rig{Faults: v.Faults(), SetLink: nictest.QEMUSetLink()}
	if err := r.Open(func(i int) (nicdrv.NIC, error) { return ixgbe.Open(v.Devices[i], options(c)) }); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConformanceVFIO runs the suite on two real 82599 ports cabled to
// each other (docs/nics.md says how to bind them).
func TestConformanceVFIO(t *testing.T) {
	nictest.FindVFIO(t, vfioWant)
	nictest.Run(t, vfioRig)
}
