// Command qemu-test runs gomx's tests inside QEMU against real VFIO
// devices; `make qemu-test` runs it. See package
// github.com/gomx-dev/gomx/hack/qemu for what it builds and boots.
//
//	go run ./hack/qemu/cmd/qemu-test                     # every configuration
//	go run ./hack/qemu/cmd/qemu-test -config iommu       # one
//	GOMX_QEMU_KEEP=1 go run ./hack/qemu/cmd/qemu-test    # keep artifacts of a passing run too
//	go run ./hack/qemu/cmd/qemu-test -config usb -env GOMX_USBNET_FRAMES=10000  # fewer USB frames
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gomx-dev/gomx/hack/qemu"
)

func main() { qemu.Main(run) }

func run(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("qemu-test", flag.ContinueOnError)
	fs.SetOutput(stdout)
	config := fs.String("config", envOr("GOMX_QEMU_CONFIG", "all"),
		"comma-separated configurations to boot, or all ("+strings.Join(qemu.ConfigNames(), ", ")+"); default from GOMX_QEMU_CONFIG")
	keep := qemu.KeepFlag(fs, "the initramfs, test binaries and serial logs")
	dir := fs.String("dir", os.Getenv("GOMX_QEMU_DIR"), "build directory for the cache and the runs (default REPO/build/qemu); default from GOMX_QEMU_DIR")
	pkgs := fs.String("pkgs", strings.Join(qemu.DefaultPackages, ","), "comma-separated packages whose tests run in the guest")
	vmTimeout := fs.Duration("vm-timeout", 0, "bound on each VM run (default: each configuration's, 5m)")
	quiet := fs.Bool("quiet", false, "do not copy the guest console to stdout (it is in the serial logs)")
	list := fs.Bool("list", false, "list the configurations and exit")
	var env []string
	fs.Func("env", "`K=V` to add to the guest tests' environment, in every configuration (repeatable)", func(s string) error {
		if k, _, ok := strings.Cut(s, "="); !ok || k == "" || strings.ContainsAny(s, " \t") {
			return fmt.Errorf("-env %q: want K=V without blanks", s)
		}
		env = append(env, s)
		return nil
	})
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: qemu-test [flags]\n\nBoots QEMU guests that run gomx's tests against real VFIO devices.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("qemu-test: unexpected arguments %q (see -h)", fs.Args())
	}
	if *list {
		for _, c := range qemu.Configs {
			fmt.Fprintf(stdout, "%-11s %s\n", c.Name, c.Doc)
		}
		return nil
	}
	configs, err := qemu.Lookup(*config)
	if err != nil {
		return fmt.Errorf("qemu-test: %w", err)
	}
	if *vmTimeout < 0 {
		return fmt.Errorf("qemu-test: -vm-timeout %v is negative", *vmTimeout)
	}
	for i := range configs {
		if *vmTimeout > 0 {
			configs[i].Timeout = *vmTimeout
		}
		configs[i].Env = append(append([]string(nil), configs[i].Env...), env...)
	}
	_, err = qemu.Run(ctx, qemu.Options{
		BuildDir: *dir,
		Configs:  configs,
		Packages: strings.Split(*pkgs, ","),
		Keep:     *keep,
		Stream:   !*quiet,
		Out:      stdout,
	})
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
