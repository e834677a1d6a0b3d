package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/ioatdev"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// listEntry is one CBDMA function in list's output.
type listEntry struct {
	Schema   string   `json:"schema"`
	Run      cli.Meta `json:"run"`
	Address  string   `json:"address"`
	Device   string   `json:"device"`
	Platform string   `json:"platform"`
	// CBVER is "3.3" when read from the registers, "" when not readable
	// (not bound to vfio-pci, or not openable).
	CBVER      string `json:"cbver,omitempty"`
	Driver     string `json:"driver"`
	IOMMUGroup int    `json:"iommu_group"`
	NUMANode   int    `json:"numa_node"`
}

// listSchema names and versions the JSON record of list (docs/json.md).
const listSchema = "ioatctl.list/1"

// runList is the list subcommand.
func runList(e *env, args []string) error {
	const cmd = "list"
	fs := newFlags(cmd)
	asJSON := fs.Bool("json", false, "print one JSON object per function (schema ioatctl.list/1, docs/json.md)")
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
	vers, why := readVersions(e, sys, fns)
	dsas, err := ioatdev.DSAFunctions(sys)
	if err != nil {
		return err
	}
	entries := make([]listEntry, 0, len(fns)+len(dsas))
	meta := cli.NewMeta("ioatctl")
	for _, f := range fns {
		entries = append(entries, listEntry{
			Schema: listSchema, Run: meta, Address: f.Addr.String(), Device: fmt.Sprintf("%04x", f.Device),
			Platform: string(hw.Models[f.Device].Platform), CBVER: vers[f.Addr],
			Driver: f.Driver, IOMMUGroup: f.IOMMUGroup, NUMANode: f.NUMANode,
		})
	}
	for _, f := range dsas {
		entries = append(entries, listEntry{
			Schema: listSchema, Run: meta, Address: f.Addr.String(), Device: fmt.Sprintf("%04x", f.Device),
			Platform: dsahw.Devices[f.Device], Driver: f.Driver, IOMMUGroup: f.IOMMUGroup, NUMANode: f.NUMANode,
		})
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
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tDEVICE\tPLATFORM\tCBVER\tDRIVER\tIOMMU GROUP\tNUMA")
	bound := 0
	for _, x := range entries {
		if x.Driver == "vfio-pci" {
			bound++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", x.Address, x.Device, x.Platform,
			dash(x.CBVER), orNone(x.Driver), dashInt(x.IOMMUGroup), dashInt(x.NUMANode))
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "\n%d CBDMA functions, %d bound to vfio-pci.", len(fns), bound-dsaBound(dsas))
	if bound < len(entries) && len(fns) > 0 {
		fmt.Fprintf(e.stdout, " Bind them with `sudo ioatctl bind --all` (or name them).")
	}
	fmt.Fprintln(e.stdout)
	if len(dsas) > 0 {
		fmt.Fprintf(e.stdout, "%d DSA (Data Streaming Accelerator) functions, %d bound to vfio-pci: see docs/dsa.md (`ioatctl bind ADDR` moves one from idxd; `--device ADDR` drives it).\n", len(dsas), dsaBound(dsas))
	}
	if why != "" {
		fmt.Fprintf(e.stdout, "CBVER not read: %s\n", why)
	}
	return nil
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

// readVersions reads CBVER of each function bound to vfio-pci, through one
// VFIO container. A function that cannot be opened gets no entry; why says
// what stood in the way ("" when nothing did).
func readVersions(e *env, sys vfio.Sysfs, fns []vfio.Function) (map[pci.Address]string, string) {
	vers := map[pci.Address]string{}
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
		v, err := readCBVER(ctr, a)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vers[a] = cbverString(v)
	}
	if err := ctr.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return vers, err.Error()
	}
	return vers, ""
}

// readCBVER opens the function and reads its CBVER register, with memory
// decoding enabled for the read and restored afterwards (vfio-pci refuses
// BAR accesses while decoding is off).
func readCBVER(ctr *vfio.Container, a pci.Address) (v uint8, err error) {
	d, err := ctr.Open(a)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	cmd, err := pci.ReadConfig16(d, pci.ConfigCommand)
	if err != nil {
		return 0, err
	}
	regs, err := d.BAR(0)
	if err != nil {
		return 0, err
	}
	if cmd&pci.CommandMemory == 0 {
		if err := pci.SetCommand(d, pci.CommandMemory); err != nil {
			return 0, err
		}
		defer func() { err = errors.Join(err, pci.ClearCommand(d, pci.CommandMemory)) }()
	}
	return regs.Read8(hw.RegCBVer), nil
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
