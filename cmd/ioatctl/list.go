package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gomx-dev/gomx/cmd/internal/ioatdev"
	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/ioat/idxd"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// listEntry is one record of list's output: a CBDMA function, a DSA
// function, or one of a DSA's work queues as the kernel's idxd driver
// configured it (Kind "cbdma", "dsa" or "wq"). A WQ's record carries its
// DSA's PCI fields and follows the DSA's record.
type listEntry struct {
	Schema   string   `json:"schema"`
	Run      cli.Meta `json:"run"`
	Kind     string   `json:"kind"`
	Address  string   `json:"address"`
	Device   string   `json:"device"`
	Platform string   `json:"platform"`
	// CBVER is "3.3" when read from the registers, "" when not readable
	// (not bound to vfio-pci, or not openable).
	CBVER string `json:"cbver,omitempty"`
	// Channels is CHANCNT, the function's channels, read with CBVER (0,
	// left out, when not readable).
	Channels   int    `json:"channels,omitempty"`
	Driver     string `json:"driver"`
	IOMMUGroup int    `json:"iommu_group"`
	NUMANode   int    `json:"numa_node"`
	// IDXD is the idxd driver's view of a DSA (nil when idxd does not
	// list it, or for a CBDMA function).
	IDXD *listIDXD `json:"idxd,omitempty"`
	// WQ describes a work queue record.
	WQ *listWQ `json:"wq,omitempty"`
}

// listIDXD is a DSA as the idxd driver lists it under /sys/bus/dsa.
type listIDXD struct {
	Name         string `json:"name"`
	State        string `json:"state"`
	PASIDEnabled bool   `json:"pasid_enabled"`
	WQs          int    `json:"wqs"`
}

// listWQ is one work queue of a DSA as idxd configured it.
type listWQ struct {
	Name  string `json:"name"`
	Mode  string `json:"mode"`
	Type  string `json:"type"`
	State string `json:"state"`
	Size  int    `json:"size"`
	Group int    `json:"group"`
}

// listSchema names and versions the JSON record of list (docs/json.md).
const listSchema = "ioatctl.list/2"

// runList is the list subcommand.
func runList(e *env, args []string) error {
	const cmd = "list"
	fs := newFlags(cmd)
	asJSON := fs.Bool("json", false, "print one JSON object per CBDMA function, DSA function and DSA work queue (schema ioatctl.list/2, docs/json.md)")
	pos, err := parseFlags(e, fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	sys := vfio.Sysfs{Root: e.sysfsRoot}
	fns, err := cbdmaFunctions(sys)
	if err != nil {
		return fmt.Errorf("%w (is sysfs mounted at %s? set %s to read another tree)", err, e.sysfsRoot, envSysfsRoot)
	}
	probes, why := readVersions(e, sys, fns)
	dsas, err := ioatdev.DSAFunctions(sys)
	if err != nil {
		return err
	}
	entries := make([]listEntry, 0, len(fns)+len(dsas))
	meta := cli.NewMeta("ioatctl")
	for _, f := range fns {
		entries = append(entries, listEntry{
			Schema: listSchema, Run: meta, Kind: "cbdma", Address: f.Addr.String(), Device: fmt.Sprintf("%04x", f.Device),
			Platform: string(hw.Models[f.Device].Platform), CBVER: probes[f.Addr].cbver, Channels: probes[f.Addr].channels,
			Driver: f.Driver, IOMMUGroup: f.IOMMUGroup, NUMANode: f.NUMANode,
		})
	}
	idxdDevs, _ := idxd.Scan(e.sysfsRoot) // none when idxd is not loaded
	for _, f := range dsas {
		x := listEntry{
			Schema: listSchema, Run: meta, Kind: "dsa", Address: f.Addr.String(), Device: fmt.Sprintf("%04x", f.Device),
			Platform: dsahw.Devices[f.Device], Driver: f.Driver, IOMMUGroup: f.IOMMUGroup, NUMANode: f.NUMANode,
		}
		entries = append(entries, x)
		for _, d := range idxdDevs {
			if d.PCI != x.Address {
				continue
			}
			// The WQs idxd configured (size > 0), each a record after
			// its DSA's.
			var wqs []listEntry
			for _, w := range d.WQs {
				if w.Size == 0 {
					continue
				}
				wx := x
				wx.Kind = "wq"
				wx.WQ = &listWQ{Name: w.Name, Mode: w.Mode, Type: w.Type, State: w.State, Size: w.Size, Group: w.Group}
				wqs = append(wqs, wx)
			}
			entries[len(entries)-1].IDXD = &listIDXD{Name: d.Name, State: d.State, PASIDEnabled: d.PASIDEnabled, WQs: len(wqs)}
			entries = append(entries, wqs...)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, x := range entries {
			if err := enc.Encode(x); err != nil {
				return err
			}
		}
		return nil
	}
	if len(entries) == 0 {
		fmt.Fprintf(e.stdout, "No CBDMA (I/OAT) function or DSA found in %s.\n", filepath.Join(e.sysfsRoot, "bus/pci/devices"))
		fmt.Fprintf(e.stdout, "`ioatctl copy --device emulated` works anyway: it runs the in-process model of the engine.\n")
		return nil
	}
	bound := listTable(e.stdout, entries) - dsaBound(dsas)
	fmt.Fprintf(e.stdout, "\n%s, %s, %d bound to vfio-pci.", plural(len(fns), "CBDMA function"), channelCount(entries[:len(fns)]), bound)
	if bound < len(fns) {
		fmt.Fprintf(e.stdout, " Bind them with `sudo ioatctl bind --all` (or name them).")
	}
	fmt.Fprintln(e.stdout)
	if len(dsas) > 0 {
		fmt.Fprintf(e.stdout, "%s (Data Streaming Accelerator), %d bound to vfio-pci: see docs/dsa.md (`ioatctl bind ADDR` moves one from idxd; `--device ADDR` drives it).\n", plural(len(dsas), "DSA function"), dsaBound(dsas))
	}
	if line := userWQLine(e); line != "" {
		fmt.Fprintln(e.stdout, line)
	}
	if why != "" {
		fmt.Fprintf(e.stdout, "CBVER and CHANCNT not read: %s\n", why)
	}
	return nil
}

// userWQLine describes the kernel's DSA user work queues (idxd sysfs), or
// says none is configured; "" when the idxd driver lists no DSA.
func userWQLine(e *env) string {
	devs, err := idxd.Scan(e.sysfsRoot)
	if err != nil || len(devs) == 0 {
		return ""
	}
	var parts []string
	for _, w := range idxd.UserWQs(devs) {
		parts = append(parts, fmt.Sprintf("%s (%s, %d entries, %s)", w.Name, w.Mode, w.Size, w.State))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("The idxd driver has %s and no user work queue: `sudo ioatctl dsa-config` configures one.", plural(len(devs), "DSA"))
	}
	return fmt.Sprintf("DSA user work queues (kernel idxd): %s: `--device %s` drives one; `ioatctl dsa-config --check` says what is missing.",
		strings.Join(parts, ", "), idxd.UserWQs(devs)[0].Name)
}

// dsaBound counts the DSA functions bound to vfio-pci.
func dsaBound(fns []vfio.Function) int {
	n := 0
	for _, f := range fns {
		if f.Driver == "vfio-pci" {
			n++
		}
	}
	return n
}

// listTable prints list's table: one row per channel, named as the other
// subcommands name it (the address, with /n for channel n of a function
// with several), or one per function whose CHANCNT was not read. It
// returns how many functions are bound to vfio-pci.
func listTable(w io.Writer, entries []listEntry) (bound int) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANNEL\tDEVICE\tPLATFORM\tCBVER\tDRIVER\tIOMMU GROUP\tNUMA")
	for _, x := range entries {
		if x.Kind == "wq" {
			continue // the user WQ line describes them
		}
		if x.Driver == "vfio-pci" {
			bound++
		}
		names := []string{x.Address}
		if x.Channels > 1 {
			names = names[:0]
			for n := range x.Channels {
				names = append(names, fmt.Sprintf("%s/%d", x.Address, n))
			}
		}
		for _, name := range names {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, x.Device, x.Platform,
				dash(x.CBVER), orNone(x.Driver), dashInt(x.IOMMUGroup), dashInt(x.NUMANode))
		}
	}
	tw.Flush()
	return bound
}

// channelCount says how many channels the entries hold: CHANCNT where it
// was read; a function whose CHANCNT was not read has at least one.
func channelCount(entries []listEntry) string {
	n, unread := 0, 0
	for _, x := range entries {
		if x.Channels == 0 {
			unread++
		}
		n += max(x.Channels, 1)
	}
	if unread == 0 {
		return plural(n, "channel")
	}
	return fmt.Sprintf("at least %s (CHANCNT not read on %s)", plural(n, "channel"), plural(unread, "function"))
}

// probe is what list reads from a function's registers.
type probe struct {
	cbver    string
	channels int
}

// readVersions reads CBVER and CHANCNT of each function bound to
// vfio-pci, through one VFIO container. A function that cannot be opened
// gets no entry; why says what stood in the way ("" when nothing did).
func readVersions(e *env, sys vfio.Sysfs, fns []vfio.Function) (map[pci.Address]probe, string) {
	vers := map[pci.Address]probe{}
	var bound []pci.Address
	for _, f := range fns {
		if f.Driver == "vfio-pci" {
			bound = append(bound, f.Addr)
		}
	}
	if len(bound) == 0 {
		return vers, ""
	}
	o := vfio.DefaultOptions()
	o.Sysfs = sys
	o.DevVFIO = e.devVFIO
	ctr, err := vfio.OpenContainer(o)
	if err != nil {
		return vers, err.Error()
	}
	var errs []error
	for _, a := range bound {
		p, err := readProbe(ctr, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vers[a] = p
	}
	if err := ctr.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return vers, err.Error()
	}
	return vers, ""
}

// readProbe opens the function and reads it (probeRegs).
func readProbe(ctr *vfio.Container, a pci.Address) (p probe, err error) {
	d, err := ctr.Open(a)
	if err != nil {
		return p, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	return probeRegs(d)
}

// probeRegs reads CBVER and CHANCNT, with memory decoding enabled for the
// reads and restored afterwards (vfio-pci refuses BAR accesses while
// decoding is off).
func probeRegs(d pci.Device) (p probe, err error) {
	cmd, err := pci.ReadConfig16(d, pci.ConfigCommand)
	if err != nil {
		return p, err
	}
	regs, err := d.BAR(0)
	if err != nil {
		return p, err
	}
	if cmd&pci.CommandMemory == 0 {
		if err := pci.SetCommand(d, pci.CommandMemory); err != nil {
			return p, err
		}
		defer func() { err = errors.Join(err, pci.ClearCommand(d, pci.CommandMemory)) }()
	}
	p.cbver = cbverString(regs.Read8(hw.RegCBVer))
	p.channels = int(regs.Read8(hw.RegChanCnt) & 0x1F)
	return p, nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func dashInt(n int) string {
	if n < 0 {
		return "-"
	}
	return strconv.Itoa(n)
}
