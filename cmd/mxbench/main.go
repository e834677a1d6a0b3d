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
// in-process wire, with seeded fault injection: --loss, --reorder, --dup,
// --corrupt), udp (kernel UDP sockets on 127.0.0.1, or toward --peer) or xdp
// (AF_XDP on a pair of interfaces). Sizes go from 0 to 4 MiB by doubling,
// or are given with --sizes as a comma-separated list with K and M suffixes.
// --verify checks every byte received. Output is a table by default and one
// JSON object per size with --json.
//
// # Testability
//
// main only calls run, which takes the output streams and arguments and
// returns an error; the exit status is 0 on success, 2 for a usage error and
// 1 for anything else.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
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
	run     func(stdout, stderr io.Writer, args []string) error
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"pingpong": {"[--transport T] [--peer HOST:PORT] [--sizes LIST] ...", "round-trip latency and throughput, mx beside a UDP-socket baseline", runPingPong},
		"stream":   {"[--transport T] [--peer HOST:PORT] [--sizes LIST] [--window N] ...", "one-way streaming throughput, mx beside a UDP-socket baseline", runStream},
		"serve":    {"[--transport udp|xdp] [--listen ADDR] [--endpoint N]", "the remote side for pingpong and stream clients", runServe},
	}
}

func run(stdout, stderr io.Writer, args []string) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usagef("", "no subcommand")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return usagef("", "unknown subcommand %q", args[0])
	}
	return c.run(stdout, stderr, args[1:])
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: mxbench <subcommand> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := commands[n]
		fmt.Fprintf(w, "  %-9s %s\n            %s\n", n, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nRun `mxbench <subcommand> -h` for its flags.")
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(cmd string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("mxbench "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args and turns flag errors into usage errors.
func parse(cmd string, fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef(cmd, "%v", err)
	}
	if fs.NArg() > 0 {
		return usagef(cmd, "unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}
