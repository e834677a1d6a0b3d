package e1000e_test

import (
	"testing"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/e1000e/hw"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/vfio"
)

// vfioWant asks for two cabled 82574Ls bound to vfio-pci: the ones named
// in GOMX_E1000E_DEVICES, or else the first two on the bus (QEMU's pair in
// the VM).
var vfioWant = nictest.VFIOWant{Driver: "e1000e", DevicesEnv: "GOMX_E1000E_DEVICES", Count: 2,
	Match: func(f vfio.Function) bool { return hw.Is82574(f.Vendor, f.Device) }}

// vfioRig opens the driver on two real (or QEMU) 82574Ls in one container.
// In QEMU the host pulls the cables on request; on real hardware the rig
// cannot (SetLink is nil).
func vfioRig(t *testing.T, c nictest.Config) *nictest.Rig {
	v := nictest.OpenVFIO(t, vfioWant)
	opts := e1000e.DefaultOptions()
	opts.Queues = c.Queues
	opts.Interrupts = c.Interrupts
	opts.HeaderSplit = c.HeaderSplit
	r := &nictest.Rig{Faults: v.Faults(), SetLink: nictest.QEMUSetLink()}
	if err := r.Open(func(i int) (nicdrv.NIC, error) { return e1000e.Open(v.Devices[i], opts) }); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestConformanceVFIO(t *testing.T) {
	nictest.FindVFIO(t, vfioWant) // skip once, not in every subtest
	nictest.Run(t, vfioRig)
}

func TestSelfTestVFIO(t *testing.T) {
	d := nictest.OpenVFIO(t, vfioWant).Devices[0]
	for _, mode := range []e1000e.Loopback{e1000e.LoopbackMAC, e1000e.LoopbackPHY} {
		if err := e1000e.SelfTest(d, mode, e1000e.DefaultOptions()); err != nil {
			t.Errorf("%v loopback: %v", mode, err)
		}
	}
}
