package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/vfio"
)

// defaultReserve is how much hugepage memory setup reserves when --pages is
// not given: enough for the cold copy benchmark (64 MiB per side), verify
// and the descriptor rings, with room to spare.
const defaultReserve = 512 << 20

// runSetup is the setup subcommand: reserve hugepages, then report what
// the machine has and lacks for the driver.
func runSetup(e *env, args []string) error {
	const cmd = "setup"
	fset := newFlags(cmd)
	pages := fset.Int("pages", -1, "hugepages the pool should hold at least (default: 512 MiB worth; 0 only reports)")
	size := fset.String("size", "2M", "hugepage size: 2M or 1G")
	check := fset.Bool("check", false, "change nothing: report, and exit 0 only when the machine is ready for the hardware (1 otherwise)")
	pos, err := parseFlags(e, fset, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected argument %q", pos[0])
	}
	var ps hugepage.PageSize
	switch strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(*size, "iB"), "B")) {
	case "2M":
		ps = hugepage.Size2M
	case "1G":
		ps = hugepage.Size1G
	default:
		return usagef(cmd, "--size %s: want 2M or 1G", *size)
	}
	n := *pages
	if n < 0 {
		n = max(1, defaultReserve/int(ps))
	}
	if *check {
		if *pages >= 0 {
			return usagef(cmd, "--check changes nothing, so --pages has no effect: drop one of them")
		}
		n = 0
	}

	var reserveErr error
	if n > 0 {
		got, err := hugepage.Reserve(ps, n)
		if err != nil {
			reserveErr = err
			fmt.Fprintf(e.stdout, "reserve:  %d x %v asked, the pool holds %d: %v\n", n, ps, got, err)
		} else {
			fmt.Fprintf(e.stdout, "reserve:  the %v pool holds %d pages (%d asked)\n", ps, got, n)
		}
	}

	ready := true
	fmt.Fprintln(e.stdout, "\nhugepage pools:")
	pools, err := hugepage.Status()
	if err != nil {
		ready = false
		fmt.Fprintf(e.stdout, "  %v\n", err)
	} else {
		tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SIZE\tTOTAL\tFREE\tRESERVED\tSURPLUS\tAVAILABLE")
		avail := 0
		for _, p := range pools {
			fmt.Fprintf(tw, "  %v\t%d\t%d\t%d\t%d\t%d\n", p.PageSize, p.Total, p.Free, p.Reserved, p.Surplus, p.Available())
			avail += p.Available() * int(p.PageSize)
		}
		tw.Flush()
		if avail == 0 {
			ready = false
			fmt.Fprintf(e.stdout, "  no free hugepages: buffers fall back to locked 4 KiB pages (slower); run `sudo ioatctl setup`\n")
		}
	}

	fmt.Fprintln(e.stdout, "\nVFIO:")
	sys := vfio.Sysfs{Root: e.sysfsRoot}
	checks := []struct {
		what string
		ok   bool
		fix  string
	}{
		{"/dev/vfio/vfio", exists(filepath.Join(e.devVFIO, "vfio")), "run `sudo modprobe vfio-pci`"},
		{"vfio-pci driver", exists(filepath.Join(e.sysfsRoot, "bus/pci/drivers/vfio-pci")) || exists(filepath.Join(e.sysfsRoot, "module/vfio_pci")),
			"run `sudo modprobe vfio-pci`"},
		{"IOMMU", nonEmptyDir(filepath.Join(e.sysfsRoot, "kernel/iommu_groups")) || sys.NoIOMMUEnabled(),
			"boot with intel_iommu=on (or, unsafe, `modprobe vfio enable_unsafe_noiommu_mode=1`)"},
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, c := range checks {
		if c.ok {
			fmt.Fprintf(tw, "  %s\tok\n", c.what)
		} else {
			ready = false
			fmt.Fprintf(tw, "  %s\tmissing: %s\n", c.what, c.fix)
		}
	}
	fns, err := cbdmaFunctions(sys)
	switch {
	case err != nil:
		ready = false
		fmt.Fprintf(tw, "  CBDMA functions\tcannot list: %v\n", err)
	case len(fns) == 0:
		ready = false
		fmt.Fprintf(tw, "  CBDMA functions\tnone found\n")
	default:
		bound := 0
		for _, f := range fns {
			if f.Driver == "vfio-pci" {
				bound++
			}
		}
		if bound == 0 {
			ready = false
			fmt.Fprintf(tw, "  CBDMA functions\t%d found, none bound to vfio-pci: run `sudo ioatctl bind --all`\n", len(fns))
		} else {
			fmt.Fprintf(tw, "  CBDMA functions\t%d found, %d bound to vfio-pci\n", len(fns), bound)
		}
	}
	tw.Flush()
	if ready {
		fmt.Fprintln(e.stdout, "\nready: `ioatctl copy --channels 4` runs on the hardware.")
	} else {
		fmt.Fprintln(e.stdout, "\nnot ready for hardware: fix the items above. `ioatctl copy --device emulated` works anyway.")
	}
	if *check && !ready {
		return errors.New("not ready for the hardware: fix the items marked missing above (`ioatctl copy` runs on the emulated engine meanwhile)")
	}
	if reserveErr != nil {
		return errors.New("could not reserve the hugepages asked for (see above)")
	}
	return nil
}

// exists reports whether path exists.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// nonEmptyDir reports whether path is a directory with at least one entry.
func nonEmptyDir(path string) bool {
	ents, err := os.ReadDir(path)
	return err == nil && len(ents) > 0
}
