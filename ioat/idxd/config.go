package idxd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Plan is a configuration of user work queues on one device, as
// accel-config's config-engine, config-wq, enable-device and enable-wq
// would set it.
type Plan struct {
	// Device is the device's name ("dsa0").
	Device string
	// WQs is how many work queues to configure (wq N.0 .. N.WQs-1), each
	// in its own group with at least one engine (spare engines spread
	// over the groups). At most the device's groups and engines.
	WQs int
	// Mode is "dedicated" (MOVDIR64B; any CPU with DSA) or "shared"
	// (ENQCMD, several processes at once).
	Mode string
	// Size is each WQ's entries (0: an equal share of the device's
	// max_work_queues_size).
	Size int
	// Priority is 1..15 (0: 10, as Intel's scripts use).
	Priority int
	// Name is given to each WQ ("" : "gomx").
	Name string
	// MaxBatchSize and MaxTransferSize set the WQs' limits (0: leave the
	// kernel's).
	MaxBatchSize, MaxTransferSize uint64
	// Reset allows disabling a device that is enabled (its WQs stop,
	// kernel users of them included) to configure it anew.
	Reset bool
}

// Writer writes one sysfs attribute. The default writes the value in one
// write to the attribute, which must exist (sysfs files are never created
// by their writers), as the kernel's ABI takes it; tests give a fake kernel.
type Writer func(path, value string) error

func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte(value)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Step is one attribute write Configure made.
type Step struct {
	Path, Value string
}

// Configure applies p through sysfs under root the way the kernel's ABI
// documents it: with the device disabled (p.Reset disables an enabled
// one: unbinding its WQs from their driver, then the device), it puts
// every engine and WQ out of use (engine group_id -1, WQ size 0, type
// "none" for the WQs the plan leaves out), then
// engine i (and the spare ones) into group i, and WQ i into group i with
// its mode, size, priority, threshold (shared), type "user", driver
// "user" and name; then it binds the device to the bus's device driver
// ("idxd", or "dsa" on kernels before 5.17) and each WQ to its user
// driver ("user", or "dsa"). It returns the writes made, and fails naming
// the attribute the kernel refused.
func Configure(root string, p Plan, w Writer) ([]Step, error) {
	if w == nil {
		w = writeFile
	}
	devs, err := Scan(root)
	if err != nil {
		return nil, err
	}
	var d *Device
	for i := range devs {
		if devs[i].Name == p.Device {
			d = &devs[i]
		}
	}
	if d == nil {
		return nil, fmt.Errorf("idxd: no device %q under %s (have %s)", p.Device, filepath.Join(root, DevicesDir), deviceNames(devs))
	}
	if p.Mode == "" {
		p.Mode = "dedicated"
	}
	if p.Priority == 0 {
		p.Priority = 10
	}
	if p.Name == "" {
		p.Name = "gomx"
	}
	limit := min(d.MaxGroups, d.MaxEngines, len(d.WQs), len(d.Engines), len(d.Groups))
	switch {
	case !d.Configurable:
		return nil, fmt.Errorf("idxd: %s is not configurable (its WQs are fixed by the platform): use the WQs it has", d.Name)
	case p.Mode != "dedicated" && p.Mode != "shared":
		return nil, fmt.Errorf("idxd: mode %q: want dedicated or shared", p.Mode)
	case p.WQs < 1 || p.WQs > limit:
		return nil, fmt.Errorf("idxd: %d WQs: %s takes 1..%d (one group and engine each)", p.WQs, d.Name, limit)
	case p.Priority < 1 || p.Priority > 15:
		return nil, fmt.Errorf("idxd: priority %d: want 1..15", p.Priority)
	case p.MaxBatchSize > d.MaxBatchSize || p.MaxTransferSize > d.MaxTransferSize:
		return nil, fmt.Errorf("idxd: batch %d, transfer %d: %s allows at most %d and %d", p.MaxBatchSize, p.MaxTransferSize, d.Name, d.MaxBatchSize, d.MaxTransferSize)
	}
	if p.Size == 0 {
		p.Size = d.MaxWQSize / p.WQs
	}
	if p.Size < 1 || p.Size*p.WQs > d.MaxWQSize {
		return nil, fmt.Errorf("idxd: %d WQs of %d entries: %s has %d in all", p.WQs, p.Size, d.Name, d.MaxWQSize)
	}
	devDrv, wqDrv := drivers(root)
	var steps []Step
	set := func(path, v string) error {
		steps = append(steps, Step{path, v})
		if err := w(path, v); err != nil {
			return fmt.Errorf("idxd: write %q to %s: %w", v, path, err)
		}
		return nil
	}
	attr := func(name, a, v string) error { return set(filepath.Join(root, DevicesDir, name, a), v) }
	if d.State != "disabled" {
		if !p.Reset {
			return nil, fmt.Errorf("idxd: %s is %s (WQs %s): configuring it disables it and stops every user of its WQs, kernel ones included: add --reset to do so", d.Name, d.State, wqStates(d))
		}
		for _, q := range d.WQs {
			if q.State == "enabled" {
				drv := wqDrv
				if q.DriverName != "" {
					drv = filepath.Join(root, DriversDir, q.DriverName)
				}
				if err := set(filepath.Join(drv, "unbind"), q.Name); err != nil {
					return steps, err
				}
			}
		}
		if err := set(filepath.Join(devDrv, "unbind"), d.Name); err != nil {
			return steps, err
		}
	}
	for _, e := range d.Engines {
		if err := attr(e.Name, "group_id", "-1"); err != nil {
			return steps, err
		}
	}
	for i, q := range d.WQs {
		if err := attr(q.Name, "size", "0"); err != nil {
			return steps, err
		}
		if i >= p.WQs && q.Type != "none" {
			if err := attr(q.Name, "type", "none"); err != nil {
				return steps, err
			}
		}
	}
	for i, e := range d.Engines {
		if err := attr(e.Name, "group_id", strconv.Itoa(i%p.WQs)); err != nil {
			return steps, err
		}
	}
	for i := 0; i < p.WQs; i++ {
		q := d.WQs[i]
		writes := [][2]string{{"block_on_fault", "0"}, {"group_id", strconv.Itoa(i)}, {"mode", p.Mode},
			{"priority", strconv.Itoa(p.Priority)}, {"size", strconv.Itoa(p.Size)}}
		if p.Mode == "shared" {
			writes = append(writes, [2]string{"threshold", strconv.Itoa(p.Size)})
		}
		writes = append(writes, [2]string{"type", "user"})
		if q.DriverName != "" || exists(filepath.Join(root, DevicesDir, q.Name, "driver_name")) {
			writes = append(writes, [2]string{"driver_name", "user"})
		}
		writes = append(writes, [2]string{"name", p.Name})
		if p.MaxBatchSize != 0 {
			writes = append(writes, [2]string{"max_batch_size", strconv.FormatUint(p.MaxBatchSize, 10)})
		}
		if p.MaxTransferSize != 0 {
			writes = append(writes, [2]string{"max_transfer_size", strconv.FormatUint(p.MaxTransferSize, 10)})
		}
		for _, kv := range writes {
			if err := attr(q.Name, kv[0], kv[1]); err != nil {
				return steps, err
			}
		}
	}
	if err := set(filepath.Join(devDrv, "bind"), d.Name); err != nil {
		return steps, err
	}
	for i := 0; i < p.WQs; i++ {
		if err := set(filepath.Join(wqDrv, "bind"), d.WQs[i].Name); err != nil {
			return steps, err
		}
	}
	return steps, nil
}

// drivers returns the bus's device driver and user-WQ driver
// directories: "idxd" and "user" since Linux 5.17, "dsa" for both before.
func drivers(root string) (dev, wq string) {
	base := filepath.Join(root, DriversDir)
	dev, wq = filepath.Join(base, "dsa"), filepath.Join(base, "dsa")
	if exists(filepath.Join(base, "idxd")) {
		dev = filepath.Join(base, "idxd")
	}
	if exists(filepath.Join(base, "user")) {
		wq = filepath.Join(base, "user")
	}
	return dev, wq
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func deviceNames(devs []Device) string {
	s := ""
	for i, d := range devs {
		if i > 0 {
			s += ", "
		}
		s += d.Name
	}
	if s == "" {
		return "none"
	}
	return s
}

func wqStates(d *Device) string {
	s := ""
	for _, q := range d.WQs {
		if q.State == "enabled" {
			if s != "" {
				s += ", "
			}
			s += q.Name + " " + q.Type
		}
	}
	if s == "" {
		return "none enabled"
	}
	return s
}

// Problem is one thing Check found that keeps a user WQ from working.
type Problem struct {
	// Where names the device or WQ ("dsa0", "wq0.1").
	Where string
	// What is wrong, and Fix the command or setting that mends it.
	What, Fix string
}

// Check reports what keeps the user WQs under root from working, reading
// only: no dsa bus, no device, a device disabled or without PASID, no
// user WQ, user WQs disabled, without a group or of size 0, a character
// device missing under dev or not readable and writable by this process.
// It returns the devices, the user WQs that are ready, and the problems.
func Check(root, dev string) (devs []Device, ready []WQ, problems []Problem) {
	devs, err := Scan(root)
	if err != nil {
		return nil, nil, []Problem{{Where: "/sys/bus/dsa", What: err.Error(), Fix: "sudo modprobe idxd (the machine needs a DSA: Sapphire Rapids or later)"}}
	}
	var ps []Problem
	if len(devs) == 0 {
		return nil, nil, []Problem{{Where: "/sys/bus/dsa", What: "the idxd driver lists no DSA device", Fix: "check `ioatctl list` for a DSA bound to vfio-pci (give it back with `sudo ioatctl unbind ADDR`)"}}
	}
	for _, d := range devs {
		if !d.PASIDEnabled {
			ps = append(ps, Problem{d.Name, "pasid_enabled is 0: user WQs cannot take process addresses (no shared virtual memory)", "boot with intel_iommu=on,sm_on so idxd enables SVA"})
		}
		if d.State != "enabled" {
			ps = append(ps, Problem{d.Name, "the device is " + d.State, "sudo ioatctl dsa-config --device " + d.Name})
		}
		users := 0
		for _, q := range d.WQs {
			if q.Type != "user" {
				continue
			}
			users++
			bad := len(ps)
			switch {
			case q.State != "enabled":
				ps = append(ps, Problem{q.Name, "the WQ is " + q.State, "sudo ioatctl dsa-config --device " + d.Name + " (or accel-config enable-wq " + d.Name + "/" + q.Name + ")"})
			case q.Size == 0:
				ps = append(ps, Problem{q.Name, "the WQ has size 0", "sudo ioatctl dsa-config --device " + d.Name})
			case q.Group < 0:
				ps = append(ps, Problem{q.Name, "the WQ is in no group", "sudo ioatctl dsa-config --device " + d.Name})
			}
			if q.State == "enabled" {
				cd := q.CharDev(dev)
				if f, err := os.OpenFile(cd, os.O_RDWR, 0); err != nil {
					fix := "is udev running?"
					if errors.Is(err, os.ErrPermission) {
						fix = "sudo chown $USER " + cd + " (or run as root)"
					}
					ps = append(ps, Problem{q.Name, "cannot open " + cd + ": " + err.Error(), fix})
				} else {
					f.Close()
				}
			}
			if len(ps) == bad && d.State == "enabled" && d.PASIDEnabled {
				ready = append(ready, q)
			}
		}
		if users == 0 {
			ps = append(ps, Problem{d.Name, "no work queue of type user", "sudo ioatctl dsa-config --device " + d.Name})
		}
	}
	return devs, ready, ps
}
