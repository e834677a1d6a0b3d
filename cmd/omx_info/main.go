// Command omx_info lists the boards gomx's MX C library (libmyriexpress)
// opens in this environment, as Open-MX's omx_info lists a host's boards:
// for each, its number, name, UDP address and NIC id, MTU, the largest
// eager message, and whether it reaches the user's other processes of
// this host through shared memory. It reads the same variables the
// library's mx_init reads (GOMX_BOARDS, OMX_DISABLE_SHARED, ...; see
// package cmd/internal/mxenv and docs/c-api.md) and opens the boards the same
// way, so a bad variable fails here with the message mx_init would give.
// -v adds the options the variables set.
//
// main only calls run, which takes the output streams and arguments and
// returns the error; tests call run.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/gomx-dev/gomx/cmd/internal/mxenv"
	"github.com/gomx-dev/gomx/internal/cli"
	"github.com/gomx-dev/gomx/internal/units"
	"github.com/gomx-dev/gomx/mx"
)

func main() {
	err := run(os.Stdout, os.Args[1:])
	cli.Report(os.Stderr, "omx_info", err)
	os.Exit(cli.Code(err))
}

var help = cli.Help{
	Tool:    "omx_info",
	Summary: "list the boards libmyriexpress opens in this environment",
	Notes: "The boards come from GOMX_BOARDS (udp:IP:PORT,...; default " + mxenv.DefaultBoards + ");\n" +
		"OMX_DISABLE_SHARED, OMX_RNDV_THRESHOLD and the other variables of docs/c-api.md apply.\n" +
		"A board on port 0 gets a port from the kernel: the one shown is this run's.\n",
	Example: []string{
		"omx_info",
		"GOMX_BOARDS=udp:10.0.0.5:40000 omx_info -v  # the board other hosts reach at 10.0.0.5:40000",
	},
}

func run(stdout io.Writer, args []string) error {
	fs := cli.NewFlags("omx_info")
	verbose := fs.Bool("v", false, "also print the options the environment sets")
	rest, err := cli.ParseFlags(stdout, help, fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return cli.Usagef("omx_info", "", "unexpected argument %q", rest[0])
	}
	cfg, err := mxenv.Load()
	if err != nil {
		return err
	}
	names := mx.NewNames()
	boards, err := cfg.OpenBoards(names)
	if err != nil {
		return err
	}
	defer mxenv.CloseBoards(boards)
	fmt.Fprintf(stdout, "gomx libmyriexpress (MX API 0x301), %s\n", cli.ReadBuild())
	plural := "s"
	if len(boards) == 1 {
		plural = ""
	}
	fmt.Fprintf(stdout, "found %d board%s (max %d) supporting %d endpoints each\n", len(boards), plural, mxenv.MaxBoards, mx.MaxEndpoints)
	for i, b := range boards {
		name, _ := names.NICIDToHostname(b.NICID())
		shm := "on"
		if !b.Options().Local.NoShm {
			if err := b.HostPathErr(); err != nil {
				shm = "unavailable: " + err.Error()
			}
		} else {
			shm = "off (OMX_DISABLE_SHARED)"
		}
		fmt.Fprintf(stdout, "board #%d name %s addr udp:%v nic id %v\n", i, name, b.NICID().UDPAddr(), b.NICID())
		fmt.Fprintf(stdout, "   mtu %d, eager up to %s, shared memory %s\n", b.MTU(), units.Format(int64(b.RendezvousThreshold())), shm)
	}
	if *verbose {
		o := boards[0].Options()
		fmt.Fprintf(stdout, "errors: %s\n", map[bool]string{true: "fatal (MX_ERRORS_ARE_FATAL)", false: "returned (MX_ERRORS_RETURN)"}[cfg.Fatal])
		fmt.Fprintf(stdout, "self: %v, busy poll: %v, resends max %d, not-acked max %d, zombie sends %d, shared eager up to %s\n",
			!o.Local.Off, o.BusyPoll, o.ResendMax, o.NotAckedMax, o.ZombieSends, units.Format(int64(o.Local.ShmEager)))
	}
	return nil
}
