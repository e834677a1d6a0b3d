// Command peers-e1000e boots the peers VM of package
// github.com/gomx-dev/gomx/hack/peers once and prints its table: mx over
// gomx's VFIO e1000e transport beside the kernel's e1000e UDP with
// busy-poll, and a raw-frame ping against gomx's and DPDK testpmd's macswap
// reflectors. hack/peers/e1000e and `make peers-e1000e` run it (as root).
//
//	go run ./hack/peers/cmd/peers-e1000e -runs 5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/hack/peers"
	"github.com/gomx-dev/gomx/hack/qemu"
)

func main() { qemu.Main(run) }

func run(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("peers-e1000e", flag.ContinueOnError)
	fs.SetOutput(stdout)
	runs := fs.Int("runs", 5, "repetitions of every measurement; the table reports the median")
	rounds := fs.Int("rounds", 500, "ping-pong rounds per raw and UDP measurement")
	mxIters := fs.Int("mx-iterations", 500, "mxbench iterations per size and run")
	mxSizes := fs.String("mx-sizes", "64,1K,4K", "mxbench --sizes")
	noTestpmd := fs.Bool("no-testpmd", false, "leave DPDK's testpmd out (no apt, no testpmd row)")
	only := fs.String("only", "", "\"raw\": only the raw-ping rows (gomx's and testpmd's reflectors); \"mx\": only the mx row and gomx's raw ping; for quick experiments")
	mxCompare := fs.String("mx-compare", "", "static builds of mxbench (CGO_ENABLED=0), separated by colons, to run beside the tree's in every run, each first in turn; rows marked (compare), or (FILE NAME) for several: another commit's, say; absolute paths outside /tmp, which the guest mounts afresh")
	mxProfile := fs.Bool("mx-profile", false, "profile mxbench in the guest; the console carries the profile (base64), which -keep leaves in the serial log")
	mxTrace := fs.Bool("mx-trace", false, "record an execution trace of mxbench in the guest (runtime/trace: what each goroutine, thread and P did); the console carries it (base64), which -keep leaves in the serial log")
	verbose := fs.Bool("v", false, "copy the whole guest console, not only the table")
	keep := qemu.KeepFlag(fs, "the run directory with the serial log")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *rounds < 10 || *mxIters < 1 {
		return errors.New("peers-e1000e: -runs must be at least 1, -rounds at least 10, -mx-iterations at least 1")
	}
	if os.Geteuid() != 0 {
		return errors.New("peers-e1000e: run as root (it installs Debian packages and boots QEMU with hack/qemu)")
	}
	start := time.Now()

	guestArgs := []string{fmt.Sprintf("-rounds=%d", *rounds), fmt.Sprintf("-mx-iterations=%d", *mxIters), "-mx-sizes=" + *mxSizes}
	if *only != "" {
		guestArgs = append(guestArgs, "-only="+*only)
	}
	if *mxTrace {
		guestArgs = append(guestArgs, "-mx-trace")
	}
	if *mxProfile {
		guestArgs = append(guestArgs, "-mx-profile")
	}
	var files []string
	if *mxCompare != "" {
		seen := map[string]bool{}
		for _, f := range strings.Split(*mxCompare, ":") {
			if !filepath.IsAbs(f) || strings.HasPrefix(f, "/tmp/") {
				return fmt.Errorf("peers-e1000e: -mx-compare %q: want absolute paths outside /tmp", f)
			}
			if seen[filepath.Base(f)] {
				return fmt.Errorf("peers-e1000e: -mx-compare: two builds named %q: their rows would mix (give them different file names)", filepath.Base(f))
			}
			seen[filepath.Base(f)] = true
			files = append(files, f)
		}
		guestArgs = append(guestArgs, "-mx-compare="+*mxCompare)
	}
	if *noTestpmd {
		guestArgs = append(guestArgs, "-testpmd=")
	} else {
		f, err := peers.TestpmdFiles(ctx, true, io.Discard)
		if err != nil {
			return fmt.Errorf("peers-e1000e: %w (or pass -no-testpmd)", err)
		}
		files = append(files, f...)
	}
	out := &peers.TableFilter{Out: stdout, Verbose: *verbose}
	results, err := qemu.Run(ctx, qemu.Options{
		Configs:  []qemu.Config{peers.Config(*runs, guestArgs...)},
		Programs: []string{"./hack/peers/guest", "./cmd/mxbench"},
		Files:    files,
		Modules:  append(append([]string(nil), qemu.GuestModules...), "e1000e"),
		Keep:     *keep,
		Stream:   true,
		Out:      out,
		Report:   peers.Report("peers-e1000e", start),
	})
	_ = results
	return err
}
