package main

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/gomx-dev/gomx/cmd/internal/ioatdev"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

// runBind is the bind subcommand.
func runBind(e *env, args []string) error {
	return bindOrUnbind(e, "bind", args)
}

// runUnbind is the unbind subcommand.
func runUnbind(e *env, args []string) error {
	return bindOrUnbind(e, "unbind", args)
}

// bindOrUnbind moves the functions named in args (or every CBDMA function
// with --all) to vfio-pci (cmd "bind") or back to the kernel ("unbind").
// It goes on after a failure and reports every failure at the end.
func bindOrUnbind(e *env, cmd string, args []string) error {
	fset := newFlags(cmd)
	all := fset.Bool("all", false, "every CBDMA function ("+map[string]string{
		"bind": "not yet bound to vfio-pci", "unbind": "bound to vfio-pci"}[cmd]+")")
	pos, err := parseFlags(e, fset, args)
	if err != nil {
		return err
	}
	if *all && len(pos) > 0 {
		return usagef(cmd, "--all and addresses exclude each other")
	}
	if !*all && len(pos) == 0 {
		return usagef(cmd, "name the functions to %s (PCI addresses such as 0000:00:04.0, see `ioatctl list`), or use --all", cmd)
	}
	var addrs []pci.Address
	for _, s := range pos {
		a, err := pci.ParseAddress(s)
		if err != nil {
			return usagef(cmd, "%v", err)
		}
		addrs = append(addrs, a)
	}
	sys := vfio.Sysfs{Root: e.sysfsRoot}
	fns, err := cbdmaFunctions(sys)
	if err != nil {
		return fmt.Errorf("%w (is sysfs mounted at %s?)", err, e.sysfsRoot)
	}
	known := map[pci.Address]vfio.Function{}
	for _, f := range fns {
		known[f.Addr] = f
	}
	// A DSA moves only when named: --all leaves them with the kernel's
	// idxd driver.
	dsas, _ := ioatdev.DSAFunctions(sys)
	for _, f := range dsas {
		known[f.Addr] = f
	}
	if *all {
		for _, f := range fns {
			if (cmd == "bind") != (f.Driver == "vfio-pci") {
				addrs = append(addrs, f.Addr)
			}
		}
		if len(addrs) == 0 {
			what := "every CBDMA function is bound to vfio-pci already"
			if cmd == "unbind" {
				what = "no CBDMA function is bound to vfio-pci"
			}
			if len(fns) == 0 {
				what = "no CBDMA function found (`ioatctl copy --device emulated` works anyway)"
			}
			fmt.Fprintf(e.stdout, "nothing to do: %s\n", what)
			return nil
		}
	}
	var errs []error
	for _, a := range addrs {
		f, ok := known[a]
		if !ok {
			if g, err := sys.Function(a); err != nil {
				errs = append(errs, err)
			} else {
				errs = append(errs, fmt.Errorf("%s is not a CBDMA function, nor a DSA (ID %04x:%04x): ioatctl only moves copy engines (see `ioatctl list`)", a, g.Vendor, g.Device))
			}
			continue
		}
		before := orNone(f.Driver)
		if cmd == "bind" {
			err = sys.Bind(a)
		} else {
			err = sys.Unbind(a)
		}
		if err != nil {
			errs = append(errs, bindHint(err))
			continue
		}
		after := "?"
		if g, err := sys.Function(a); err == nil {
			after = orNone(g.Driver)
		}
		fmt.Fprintf(e.stdout, "%s: %s -> %s\n", a, before, after)
		if cmd == "bind" {
			if err := sys.CheckViable(a); err != nil {
				fmt.Fprintf(e.stderr, "ioatctl: warning: %v\n", err)
			}
		}
	}
	return errors.Join(errs...)
}

// bindHint adds what to do to a sysfs failure the vfio package does not
// explain itself.
func bindHint(err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: changing drivers needs root: run with sudo", err)
	}
	return err
}
