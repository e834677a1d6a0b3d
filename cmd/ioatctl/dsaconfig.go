package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/ioat/idxd"
)

// runDSAConfig is the dsa-config subcommand: configure a DSA's user work
// queues through the idxd driver's sysfs files (as accel-config does), or
// with --check report what is configured and what is wrong.
func runDSAConfig(e *env, args []string) error {
	const cmd = "dsa-config"
	fset := newFlags(cmd)
	check := fset.Bool("check", false, "change nothing: report the DSAs' user work queues and what keeps them from working; exit 0 only when one is ready")
	device := fset.String("device", "", "the DSA to configure, as sysfs names it (default: the first, dsa0)")
	wqs := fset.Int("wqs", 1, "user work queues to configure, each in its own group with its own engine(s)")
	mode := fset.String("mode", "dedicated", "dedicated (MOVDIR64B, one process per WQ) or shared (ENQCMD, several processes; the CPU needs ENQCMD)")
	size := fset.Int("size", 0, "entries per WQ (default: the device's total split equally)")
	prio := fset.Int("priority", 10, "WQ priority, 1..15")
	name := fset.String("name", "gomx", "the name given to each WQ")
	batch := fset.Int("max-batch", 0, "each WQ's max_batch_size (default: the kernel's)")
	xfer := fset.String("max-transfer", "", "each WQ's max_transfer_size, e.g. 2M (default: the kernel's)")
	reset := fset.Bool("reset", false, "disable the device first if it is enabled: every user of its WQs (kernel ones included) loses them")
	pos, err := parseFlags(e, fset, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	if *check {
		return dsaCheck(e)
	}
	if *batch < 0 {
		return usagef(cmd, "--max-batch %d: want a positive count", *batch)
	}
	p := idxd.Plan{Device: *device, WQs: *wqs, Mode: *mode, Size: *size, Priority: *prio, Name: *name, MaxBatchSize: uint64(*batch), Reset: *reset}
	if *xfer != "" {
		n, err := units.Parse(*xfer)
		if err != nil {
			return usagef(cmd, "--max-transfer: %v", err)
		}
		p.MaxTransferSize = uint64(n)
	}
	if p.Device == "" {
		devs, err := idxd.Scan(e.sysfsRoot)
		if err != nil {
			return err
		}
		if len(devs) == 0 {
			return errors.New("the idxd driver lists no DSA device: see `ioatctl list` (a DSA bound to vfio-pci is given back with `sudo ioatctl unbind ADDR`)")
		}
		p.Device = devs[0].Name
	}
	steps, err := idxd.Configure(e.sysfsRoot, p, nil)
	for _, s := range steps {
		fmt.Fprintf(e.stderr, "ioatctl: dsa-config: %s <- %s\n", s.Path, s.Value)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "configured %s: %d %s user WQ(s), name %q\n\n", p.Device, p.WQs, p.Mode, p.Name)
	return dsaCheck(e)
}

// dsaCheck prints the DSAs and their user WQs, the WQs ready for gomx, and
// the problems with their fixes; it fails when no user WQ is ready.
func dsaCheck(e *env) error {
	devs, ready, probs := idxd.Check(e.sysfsRoot, e.devDir)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if len(devs) > 0 {
		fmt.Fprintln(tw, "DEVICE\tPCI\tSTATE\tPASID\tWQ\tTYPE\tMODE\tSIZE\tGROUP\tSTATE\tNAME")
		for _, d := range devs {
			pasid := "no"
			if d.PASIDEnabled {
				pasid = "yes"
			}
			shown := false
			for _, q := range d.WQs {
				if q.Size == 0 && q.Type != "user" {
					continue
				}
				shown = true
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", d.Name, dash(d.PCI), d.State, pasid, q.Name, q.Type, q.Mode, q.Size, q.Group, q.State, dash(q.WQName))
			}
			if !shown {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\n", d.Name, dash(d.PCI), d.State, pasid)
			}
		}
		tw.Flush()
	}
	if len(probs) > 0 {
		fmt.Fprintln(e.stdout, "\nproblems:")
		for _, p := range probs {
			fmt.Fprintf(e.stdout, "  %s: %s\n      fix: %s\n", p.Where, p.What, p.Fix)
		}
	}
	if len(ready) == 0 {
		return errors.New("no DSA user work queue is ready: fix the problems above (`sudo ioatctl dsa-config` configures one)")
	}
	fmt.Fprintln(e.stdout, "\nready:")
	for _, q := range ready {
		fmt.Fprintf(e.stdout, "  %s (%s, %d entries): %s\n", q.Name, q.Mode, q.Size, q.CharDev(e.devDir))
	}
	return nil
}
