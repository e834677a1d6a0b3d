// Command mxbench measures the gomx message layer (package mx) the way
// Open-MX's omx_perf does, and measures beside every result a plain
// UDP-socket exchange of the same sizes, so each figure has its baseline.
//
// # Subcommands
//
//   - pingpong: round trips of each size; reports one-way latency (half the
//     mean round trip) and throughput, for mx and for the UDP baseline.
//   - stream: a window of messages in flight from one side to the other;
//     reports messages/s and throughput.
//   - serve: the remote side of pingpong and stream for a client in another
//     process or on another host (`mxbench pingpong --peer host:port`).
//
// Without --peer both sides run in this process, each on its own board and
// goroutine. The transport is chosen with --transport: loopback (an
// in-process wire), udp (kernel UDP sockets on 127.0.0.1, or toward --peer),
// xdp (AF_XDP on a pair of interfaces), nic (gomx's e1000e driver) or usb
// (gomx's USB CDC Ethernet driver, docs/usbnet.md). Seeded
// fault injection (--loss, --reorder, --dup, --corrupt) works on every one:
// the loopback wire injects the faults itself, and the other transports are
// wrapped with the same model (package transport/fault). Sizes go from 0 to 4 MiB by doubling,
// or are given with --sizes as a comma-separated list with K and M suffixes.
// --verify checks every byte received. Output is a table by default, one
// JSON object per size with --json (docs/json.md), and curves against size
// with --plot. The transports are one table (wires.go): adding one is one
// entry there.
//
// Each subcommand declares only the flags it reads (flags.go): the ones all
// measuring subcommands share, in commonFlags, and parts of their own, so
// `mxbench SUBCOMMAND -h` lists exactly what it honours and a flag of
// another subcommand is refused with a message that names those that have
// it.
//
// # Testability
//
// main only calls run, which takes the output streams and arguments, prints
// a failure as one line on stderr, and returns the error; the exit status is
// 0 on success, 2 for a usage error and 1 for anything else (internal/cli).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gomx-dev/gomx/internal/cli"
)

func main() {
	os.Exit(code(run(os.Stdout, os.Stderr, os.Args[1:])))
}

// usageError is an error in the command line; it maps to exit status 2.
type usageError = cli.UsageError

func usagef(cmd, format string, args ...any) error {
	return cli.Usagef("mxbench", cmd, format, args...)
}

// code maps run's error to the exit status.
func code(err error) int { return cli.Code(err) }

type command struct {
	args    string
	summary string
	notes   string
	example []string
	run     func(stdout, stderr io.Writer, args []string) error
}

var commands map[string]command

// commandOrder is the order of the subcommands in the usage text.
var commandOrder = []string{"pingpong", "stream", "alltoall", "overlap", "serve"}

func init() {
	commands = map[string]command{
		"pingpong": {"[--transport T] [--peer HOST:PORT] [--sizes LIST] ...", "round-trip latency and throughput, mx beside a UDP-socket baseline",
			pingpongNotes, []string{
				"mxbench pingpong                                  # loopback wire, 0 B to 4 MiB",
				"mxbench pingpong --transport udp --sizes 8,1K,64K --verify",
				"mxbench pingpong --transport xdp --json > pp.jsonl # AF_XDP on a veth pair (root)",
				"mxbench pingpong --loss 0.01 --verify             # lossy loopback wire: every byte still arrives",
				"mxbench pingpong --transport udp --loss 0.001 --sizes 8,64K,1M # the same fault model over kernel UDP",
				"mxbench pingpong --peer 10.0.0.2:40000            # against `mxbench serve` there",
				"mxbench pingpong --plot pingpong.svg",
			}, runPingPong},
		"stream": {"[--transport T] [--peer HOST:PORT] [--sizes LIST] [--window N] ...", "one-way streaming throughput, mx beside a UDP-socket baseline",
			streamNotes, []string{
				"mxbench stream --transport udp --sizes 4K,64K,1M",
				"mxbench stream --window 64 --plot stream.png",
			}, runStream},
		"alltoall": {"[--procs N] [--sizes LIST] [--strategy S] ...", "IMB-style alltoall among the processes of a job (mpirun, srun, or --procs N)",
			alltoallNotes, []string{
				"mpirun -np 4 mxbench alltoall                      # the launcher's ranks; rank 0 prints",
				"srun -n 4 mxbench alltoall --sizes 8,64K,1M",
				"mxbench alltoall --procs 4 --json                 # mxbench starts the 4 processes itself",
			}, runAlltoall},
		"overlap": {"[--procs N] [--sizes LIST] [--strategy S] ...", "time to post and wait (EMP) and processor availability while messages move (RMPP)",
			overlapNotes, []string{
				"mxbench overlap                                   # 2 processes of this host",
				"mxbench overlap --sizes 64K,1M,4M --strategy all  # availability per large-message strategy",
				"mxbench overlap --sizes 1M,4M --strategy engine,cma --engine emulated  # copy-engine offload beside CMA",
				"mxbench overlap --sizes 1M,4M --strategy engine,cma --engine-cpu 1 --progress-cpu 1 --wait block  # the engine on CPU 1, and rank 0's other threads with it",
				"mxbench overlap --transport nic --nic model-82599 --nic-place --no-checksum --sizes 1M,4M --wait block  # both ranks in this process, large messages placed by the NICs",
			}, runOverlap},
		"serve": {"[--listen ADDR] [--endpoint N] [--once]", "the remote side for pingpong and stream clients (udp)",
			serveNotes, []string{
				"mxbench serve --listen 0.0.0.0:40000              # then, elsewhere: mxbench pingpong --peer HOST:40000",
				"mxbench serve --listen 127.0.0.1:40000 --once --timeout 1m",
			}, runServe},
	}
}

// run runs mxbench with the arguments after the program name. It prints a
// returned error on stderr itself, as one line (cli.Report), so main has
// only to exit with code(err).
func run(stdout, stderr io.Writer, args []string) (err error) {
	defer func() { cli.Report(stderr, "mxbench", err) }()
	if len(args) == 0 {
		return usagef("", "no subcommand: want one of %s", strings.Join(commandOrder, ", "))
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(stdout, stderr, []string{"-h"})
			}
			return usagef("", "no subcommand %q (want %s)", args[1], strings.Join(commandOrder, ", "))
		}
		printUsage(stdout)
		return nil
	case "version", "-version", "--version":
		if len(args) > 1 {
			return usagef("", "version takes no arguments (got %q)", args[1])
		}
		cli.PrintVersion(stdout, "mxbench")
		return nil
	case "strategies":
		if len(args) > 1 {
			return usagef("", "strategies takes no arguments (got %q)", args[1])
		}
		for _, s := range mxStrategies() {
			fmt.Fprintln(stdout, s)
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return usagef("", "unknown subcommand %q (want %s)", args[0], strings.Join(commandOrder, ", "))
	}
	return c.run(stdout, stderr, args[1:])
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, `mxbench measures the gomx message layer (MX, as Open-MX speaks it) the way
Open-MX's omx_perf does, and measures a plain UDP-socket exchange of the same
sizes beside every figure, so each one has its baseline.

Usage:
  mxbench COMMAND [flags]

Commands:
`)
	for _, n := range commandOrder {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, `  %-10s %s
  %-10s %s
  %-10s %s

Run "mxbench COMMAND -h" for a command's description, examples and flags.

Getting started:
  mxbench pingpong                       both sides in this process, in-process wire
  mxbench pingpong --transport udp       kernel UDP sockets on 127.0.0.1
  sudo mxbench pingpong --transport xdp  AF_XDP on a veth pair mxbench makes
  mxbench serve / mxbench pingpong --peer HOST:PORT   across two processes or hosts

Sizes are bytes with an optional K, M or G suffix (powers of 1024). MB/s is
10^6 bytes per second. Errors are one line on stderr. Exit status: 0 success,
1 failure, 2 usage error.
`, "strategies", "list mx's large-message strategies, one name a line (what --strategy all runs)",
		"version", "print the module version and VCS revision", "help", "this text; `mxbench help COMMAND` is `mxbench COMMAND -h`")
}

// newFlags returns a flag set that reports errors instead of printing or
// exiting; parse prints the help on -h.
func newFlags(cmd string, _ io.Writer) *flag.FlagSet {
	return cli.NewFlags(cmd)
}

// parse parses args, printing the subcommand's help on stdout for -h, and
// turns flag errors into usage errors.
func parse(stdout io.Writer, cmd string, fs *flag.FlagSet, args []string) error {
	c := commands[cmd]
	h := cli.Help{Tool: "mxbench", Name: cmd, Args: c.args, Summary: c.summary, Notes: c.notes, Example: c.example}
	pos, err := cli.ParseFlags(stdout, h, fs, args)
	if err != nil {
		return unknownFlag(cmd, err)
	}
	if len(pos) > 0 {
		return usagef(cmd, "unexpected arguments: %s", strings.Join(pos, " "))
	}
	return nil
}

// flagsOf returns the flags subcommand cmd declares.
func flagsOf(cmd string) *flag.FlagSet {
	fs := cli.NewFlags(cmd)
	if cmd == "serve" {
		new(serveFlags).register(fs)
	} else {
		new(benchFlags).register(fs, cmd)
	}
	return fs
}

// unknownFlag turns the flag package's error for a flag cmd does not
// declare into one that names cmd and the subcommands that have the flag:
// each subcommand declares only the flags it honours, so a flag of
// another one is a mistake, not a setting to ignore. Other errors pass.
func unknownFlag(cmd string, err error) error {
	const undefined = "flag provided but not defined: -"
	var ue *usageError
	if !errors.As(err, &ue) || !strings.HasPrefix(ue.Err.Error(), undefined) {
		return err
	}
	name := strings.TrimPrefix(ue.Err.Error(), undefined)
	var owners []string
	for _, o := range commandOrder {
		if o != cmd && flagsOf(o).Lookup(name) != nil {
			owners = append(owners, o)
		}
	}
	if len(owners) == 0 {
		return usagef(cmd, "%s has no flag --%s", cmd, name)
	}
	have := owners[0] + " has"
	if n := len(owners); n > 1 {
		have = strings.Join(owners[:n-1], ", ") + " and " + owners[n-1] + " have"
	}
	return usagef(cmd, "%s has no flag --%s: only %s it (drop it)", cmd, name, have)
}
