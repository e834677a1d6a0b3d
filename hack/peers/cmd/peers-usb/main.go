// Command peers-usb boots the usb peers VM of package
// github.com/gomx-dev/gomx/hack/peers once and prints its table: mxbench
// pingpong latency and stream bandwidth over gomx's USB driver (QEMU's
// usb-net through libusb) cabled to gomx's e1000e driver, beside the same
// mxbench over UDP with the kernel's cdc_ether and e1000e drivers on the
// same two devices, with the ratio. `make peers-usb` runs it (as root).
//
//	go run ./hack/peers/cmd/peers-usb -runs 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/hack/peers"
	"github.com/gomx-dev/gomx/hack/qemu"
)

func main() { qemu.Main(run) }

func run(ctx context.Context, stdout io.Writer, args []string) error {
	fs := flag.NewFlagSet("peers-usb", flag.ContinueOnError)
	fs.SetOutput(stdout)
	runs := fs.Int("runs", 3, "repetitions of every measurement; the table reports the median")
	pingSizes := fs.String("ping-sizes", "8,1K", "mxbench pingpong --sizes")
	pingIters := fs.Int("ping-iterations", 100, "mxbench pingpong --iterations")
	streamSizes := fs.String("stream-sizes", "64K,1M", "mxbench stream --sizes")
	streamIters := fs.Int("stream-iterations", 2, "mxbench stream --iterations")
	window := fs.Int("window", 2, "mxbench stream --window")
	verbose := fs.Bool("v", false, "copy the whole guest console, not only the table")
	keep := qemu.KeepFlag(fs, "the run directory with the serial log")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *pingIters < 1 || *streamIters < 1 || *window < 1 {
		return errors.New("peers-usb: -runs, -ping-iterations, -stream-iterations and -window must be at least 1")
	}
	if os.Geteuid() != 0 {
		return errors.New("peers-usb: run as root (it installs Debian packages and boots QEMU with hack/qemu)")
	}
	start := time.Now()
	guestArgs := []string{
		// The guest's init splits its program's arguments at commas.
		"-usb-ping-sizes=" + strings.ReplaceAll(*pingSizes, ",", "/"), fmt.Sprintf("-usb-ping-iterations=%d", *pingIters),
		"-usb-stream-sizes=" + strings.ReplaceAll(*streamSizes, ",", "/"), fmt.Sprintf("-usb-stream-iterations=%d", *streamIters),
		fmt.Sprintf("-usb-window=%d", *window),
	}
	_, err := qemu.Run(ctx, qemu.Options{
		Configs:     []qemu.Config{peers.USBConfig(*runs, guestArgs...)},
		Programs:    []string{"./hack/peers/guest"},
		USBPrograms: []string{"./cmd/mxbench"},
		Modules:     append(append([]string(nil), qemu.GuestModules...), "e1000e"),
		Keep:        *keep,
		Stream:      true,
		Out:         &peers.TableFilter{Out: stdout, Verbose: *verbose},
		Report:      peers.Report("peers-usb", start),
	})
	return err
}
