package qemu

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomx-dev/gomx/pci"
)

// BindDriver hands a PCI function of the guest from its current driver to
// the kernel driver drv (uio_pci_generic, e1000e, vfio-pci) through
// driver_override, and checks that drv took it. The guest's init and the
// peers program run it; the driver's module must be loaded.
func BindDriver(a pci.Address, drv string) error {
	dir := filepath.Join("/sys/bus/pci/devices", a.String())
	if err := os.WriteFile(filepath.Join(dir, "driver_override"), []byte(drv), 0); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(dir, "driver")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "driver", "unbind"), []byte(a.String()), 0); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/sys/bus/pci/drivers_probe", []byte(a.String()), 0); err != nil {
		return err
	}
	got, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil || filepath.Base(got) != drv {
		return fmt.Errorf("%s did not take %s (driver link %q, %v); is %s.ko loaded?", drv, a, got, err, drv)
	}
	return nil
}
