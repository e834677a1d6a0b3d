// Package idxd reads and writes the configuration the Linux idxd driver
// publishes in sysfs for DSA devices (Documentation/ABI/stable/
// sysfs-driver-dma-idxd): the devices, their work queues, engines and
// groups, under /sys/bus/dsa/devices. It is the kernel path's view of a
// DSA, the one Linux supports: the kernel owns the device, and a work
// queue of type "user" appears to processes as a character device,
// /dev/dsa/wqD.Q, whose portal they map and write descriptors to.
//
// Scan builds a snapshot of every device and work queue from the
// attribute files; it parses what it reads and changes nothing. Configure
// writes a work-queue plan the way accel-config does (engines into
// groups, then each WQ's group, mode, size, priority, type and name, then
// the device and each WQ bound to the idxd bus's drivers), and Check
// reports how a snapshot differs from what a user WQ needs, without
// writing anything.
//
// Every path is relative to a sysfs root given by the caller ("/sys" on a
// real system), so tests run the whole package on a fake tree.
package idxd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// DevicesDir is where the dsa bus lists its devices, relative to the
// sysfs root.
const DevicesDir = "bus/dsa/devices"

// DriversDir holds the dsa bus's drivers: "idxd" (older kernels: "dsa")
// enables a device, "user" (older kernels: "dsa" too) a user WQ.
const DriversDir = "bus/dsa/drivers"

// ErrNoIDXD means sysfs has no dsa bus: the idxd driver is not loaded, or
// the machine has no DSA.
var ErrNoIDXD = errors.New("no /sys/bus/dsa: the idxd driver is not loaded (modprobe idxd) or the machine has no DSA")

// Device is one DSA (or IAA) device as sysfs describes it.
type Device struct {
	// Name is the sysfs name, "dsa0"; ID its number.
	Name string
	ID   int
	// PCI is the PCI address of the function ("0000:6a:01.0"), from the
	// device's place in the sysfs tree ("" when it cannot be told).
	PCI string
	// State is "disabled", "enabled" or "halted".
	State string
	// Configurable is false when the device's configuration is fixed
	// (GENCAP config_en clear): its WQs are as the firmware set them.
	Configurable bool
	// PASIDEnabled is the kernel's word that the device works with shared
	// virtual memory (an IOMMU in scalable mode with SVA): user WQs then
	// take process virtual addresses. Without it user WQs are refused.
	PASIDEnabled bool
	// MaxGroups, MaxWQs, MaxEngines and MaxWQSize are the device's
	// capabilities (GRPCAP, WQCAP, ENGCAP, total WQ size).
	MaxGroups, MaxWQs, MaxEngines, MaxWQSize int
	// MaxTransferSize and MaxBatchSize are the device's limits.
	MaxTransferSize, MaxBatchSize uint64
	// OpCap is the 256-bit operation bitmap (bit n: opcode n supported).
	OpCap [4]uint64
	// WQs, Engines and Groups are the device's, in index order.
	WQs     []WQ
	Engines []Engine
	Groups  []Group
}

// HasOp reports whether OpCap has opcode op.
func (d *Device) HasOp(op uint8) bool { return d.OpCap[op/64]>>(op%64)&1 != 0 }

// WQ is one work queue.
type WQ struct {
	// Name is the sysfs name, "wq0.1": device 0, WQ 1. Device and Index
	// are those numbers.
	Name          string
	Device, Index int
	// Mode is "dedicated" or "shared"; Type "none", "kernel" or "user";
	// State "disabled", "enabled" or "locked"; WQName the name given to
	// it ("" when none).
	Mode, Type, State, WQName string
	// Size is the WQ's entries (0: unused); Group its group (-1: none);
	// Priority 1..15; Threshold the entries a shared WQ leaves to ENQCMDS.
	Size, Group, Priority, Threshold int
	// MaxTransferSize and MaxBatchSize are the WQ's limits.
	MaxTransferSize, MaxBatchSize uint64
	// BlockOnFault makes the device wait for a faulting page instead of
	// reporting a partial completion.
	BlockOnFault bool
	// DriverName is the bus driver a WQ of this type binds to ("user"),
	// on kernels that have the attribute ("" elsewhere).
	DriverName string
}

// Dedicated reports whether the WQ is in dedicated mode.
func (w *WQ) Dedicated() bool { return w.Mode == "dedicated" }

// CharDev is the WQ's character device under dev (the /dev directory):
// dev/dsa/wqD.Q, as the idxd driver names it.
func (w *WQ) CharDev(dev string) string { return filepath.Join(dev, "dsa", w.Name) }

// Engine is one engine and the group it is in (-1: none).
type Engine struct {
	Name          string
	Device, Index int
	Group         int
}

// Group is one group.
type Group struct {
	Name          string
	Device, Index int
}

var (
	reDev   = regexp.MustCompile(`^(dsa|iax)([0-9]+)$`)
	reChild = regexp.MustCompile(`^(wq|engine|group)([0-9]+)\.([0-9]+)$`)
)

// Scan reads every device under root/bus/dsa/devices. It fails with
// ErrNoIDXD when the directory is missing, and names the attribute and
// value of anything it cannot parse.
func Scan(root string) ([]Device, error) {
	dir := filepath.Join(root, DevicesDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoIDXD
	}
	if err != nil {
		return nil, fmt.Errorf("idxd: %w", err)
	}
	byID := map[int]*Device{}
	var ids []int
	for _, e := range ents {
		if m := reDev.FindStringSubmatch(e.Name()); m != nil && m[1] == "dsa" {
			id, _ := strconv.Atoi(m[2])
			d, err := readDevice(dir, e.Name(), id)
			if err != nil {
				return nil, err
			}
			byID[id] = d
			ids = append(ids, id)
		}
	}
	for _, e := range ents {
		m := reChild.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		dev, _ := strconv.Atoi(m[2])
		idx, _ := strconv.Atoi(m[3])
		d := byID[dev]
		if d == nil {
			continue // an IAA's, or a device that went away
		}
		a := attrs{dir: filepath.Join(dir, e.Name())}
		switch m[1] {
		case "wq":
			w := WQ{Name: e.Name(), Device: dev, Index: idx}
			w.Mode = a.str("mode")
			w.Type = a.str("type")
			w.State = a.str("state")
			w.WQName = a.str("name")
			w.DriverName = a.opt("driver_name")
			w.Size = a.int("size")
			w.Group = a.int("group_id")
			w.Priority = a.int("priority")
			w.Threshold = a.optInt("threshold")
			w.MaxTransferSize = a.uint("max_transfer_size")
			w.MaxBatchSize = a.uint("max_batch_size")
			w.BlockOnFault = a.optInt("block_on_fault") != 0
			if a.err != nil {
				return nil, a.err
			}
			d.WQs = append(d.WQs, w)
		case "engine":
			en := Engine{Name: e.Name(), Device: dev, Index: idx, Group: a.int("group_id")}
			if a.err != nil {
				return nil, a.err
			}
			d.Engines = append(d.Engines, en)
		case "group":
			d.Groups = append(d.Groups, Group{Name: e.Name(), Device: dev, Index: idx})
		}
	}
	sort.Ints(ids)
	out := make([]Device, 0, len(ids))
	for _, id := range ids {
		d := byID[id]
		sort.Slice(d.WQs, func(i, j int) bool { return d.WQs[i].Index < d.WQs[j].Index })
		sort.Slice(d.Engines, func(i, j int) bool { return d.Engines[i].Index < d.Engines[j].Index })
		sort.Slice(d.Groups, func(i, j int) bool { return d.Groups[i].Index < d.Groups[j].Index })
		out = append(out, *d)
	}
	return out, nil
}

func readDevice(dir, name string, id int) (*Device, error) {
	p := filepath.Join(dir, name)
	a := attrs{dir: p}
	d := &Device{Name: name, ID: id}
	d.State = a.str("state")
	d.Configurable = a.optInt("configurable") != 0
	d.PASIDEnabled = a.optInt("pasid_enabled") != 0
	d.MaxGroups = a.int("max_groups")
	d.MaxWQs = a.int("max_work_queues")
	d.MaxEngines = a.int("max_engines")
	d.MaxWQSize = a.int("max_work_queues_size")
	d.MaxTransferSize = a.uint("max_transfer_size")
	d.MaxBatchSize = a.uint("max_batch_size")
	if s := a.str("op_cap"); a.err == nil {
		oc, err := ParseOpCap(s)
		if err != nil {
			return nil, fmt.Errorf("idxd: %s/op_cap: %w", p, err)
		}
		d.OpCap = oc
	}
	if a.err != nil {
		return nil, a.err
	}
	// The device's directory sits under its PCI function's:
	// .../0000:6a:01.0/dsa0.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		if parent := filepath.Base(filepath.Dir(real)); strings.Count(parent, ":") == 2 {
			d.PCI = parent
		}
	}
	return d, nil
}

// ParseOpCap parses op_cap as sysfs prints a bitmap ("%*pb"): 32-bit hex
// words separated by commas, the most significant first. It takes up to
// eight words (256 bits), as many as the device has.
func ParseOpCap(s string) ([4]uint64, error) {
	var oc [4]uint64
	s = strings.TrimSpace(s)
	if s == "" {
		return oc, fmt.Errorf("empty operation bitmap")
	}
	words := strings.Split(s, ",")
	if len(words) > 8 {
		return oc, fmt.Errorf("operation bitmap %q has %d words: want at most 8 (256 bits)", s, len(words))
	}
	for i, w := range words {
		if len(w) == 0 || len(w) > 8 {
			return [4]uint64{}, fmt.Errorf("operation bitmap %q: word %q is not 1 to 8 hex digits", s, w)
		}
		v, err := strconv.ParseUint(w, 16, 32)
		if err != nil || strings.ContainsAny(w, "+-_xX") {
			return [4]uint64{}, fmt.Errorf("operation bitmap %q: word %q is not hex", s, w)
		}
		bit := 32 * (len(words) - 1 - i) // of the word's lowest bit
		oc[bit/64] |= v << (bit % 64)
	}
	return oc, nil
}

// attrs reads the attribute files of one sysfs directory, keeping the
// first error.
type attrs struct {
	dir string
	err error
}

func (a *attrs) read(name string, optional bool) (string, bool) {
	if a.err != nil {
		return "", false
	}
	b, err := os.ReadFile(filepath.Join(a.dir, name))
	if err != nil {
		if optional && errors.Is(err, os.ErrNotExist) {
			return "", false
		}
		a.err = fmt.Errorf("idxd: %w", err)
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func (a *attrs) str(name string) string { s, _ := a.read(name, false); return s }
func (a *attrs) opt(name string) string { s, _ := a.read(name, true); return s }

func (a *attrs) parseInt(name, s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		a.err = fmt.Errorf("idxd: %s: %q is not a number", filepath.Join(a.dir, name), s)
	}
	return v
}

func (a *attrs) int(name string) int {
	s, ok := a.read(name, false)
	if !ok {
		return 0
	}
	return a.parseInt(name, s)
}

func (a *attrs) optInt(name string) int {
	s, ok := a.read(name, true)
	if !ok {
		return 0
	}
	return a.parseInt(name, s)
}

func (a *attrs) uint(name string) uint64 {
	s, ok := a.read(name, false)
	if !ok {
		return 0
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		a.err = fmt.Errorf("idxd: %s: %q is not a number", filepath.Join(a.dir, name), s)
	}
	return v
}

// UserWQs returns the work queues of type "user" across devs, in device
// and index order.
func UserWQs(devs []Device) []WQ {
	var out []WQ
	for _, d := range devs {
		for _, w := range d.WQs {
			if w.Type == "user" {
				out = append(out, w)
			}
		}
	}
	return out
}

// Find returns the device and work queue named name ("wq0.1", or
// "dsa0/wq0.1").
func Find(devs []Device, name string) (*Device, *WQ, bool) {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	for i := range devs {
		for j := range devs[i].WQs {
			if devs[i].WQs[j].Name == name {
				return &devs[i], &devs[i].WQs[j], true
			}
		}
	}
	return nil, nil, false
}
