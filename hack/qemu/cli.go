package qemu

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gomx-dev/gomx/internal/cli"
)

// Main is the main function of a command that boots guests with Run
// (qemu-test, hack/peers' peers-e1000e): it calls run with the command
// line and a context that SIGINT or SIGTERM cancels, so an interrupted run
// stops its VM and keeps the run directory; then it prints run's error on
// stderr (nothing for -h) and exits with cli.Code's status.
func Main(run func(ctx context.Context, stdout io.Writer, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdout, os.Args[1:])
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(cli.Code(err))
}

// KeepFlag defines -keep on fs, the flag behind Options.Keep, defaulting
// to true when GOMX_QEMU_KEEP=1; what describes what a kept run directory
// holds.
func KeepFlag(fs *flag.FlagSet, what string) *bool {
	return fs.Bool("keep", os.Getenv("GOMX_QEMU_KEEP") == "1",
		"keep "+what+" even when the run passes (a failed run always keeps them); default from GOMX_QEMU_KEEP=1")
}
