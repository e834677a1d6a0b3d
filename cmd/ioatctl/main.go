// Command ioatctl finds, prepares, benchmarks and verifies Intel I/OAT
// (CBDMA) copy engines through the gomx user-space driver.
//
// # Subcommands
//
//   - list: the CBDMA functions sysfs knows, with their driver, IOMMU group
//     and NUMA node, and CBVER for those bound to vfio-pci.
//   - bind, unbind: hand functions to vfio-pci and back to the kernel.
//   - setup: reserve hugepages and report whether the machine is ready
//     (hugepage pools, /dev/vfio, vfio-pci, IOMMU, bound functions);
//     --check only reports, and exits 0 only when ready.
//   - copy: throughput of the engine against the CPU (Go's copy) on the
//     same buffers, size or size sweep, with a window of outstanding copies
//     as in the paper that introduced user-space I/OAT copies (window 128),
//     cache-cold (twice the last-level cache the CPU reports, package
//     cmd/internal/cache) or cache-hot, optionally verified, optionally plotted.
//   - verify: random copies and fills checked byte for byte, guard bytes
//     included, like SPDK's ioat verify.
//   - overlap: the paper's overlap benchmark, (Tcopy + Tcompute −
//     Ttotal)/Tcopy, for the engine and for the CPU.
//
// Every benchmark runs on real channels bound to vfio-pci or, when there are
// none (or with --device emulated), on the in-process model of package
// emulated, and says which and why. The model's channels are CPU threads:
// its buffers are ordinary memory (nothing pinned, so any user can run it)
// and the output says what its figures do and do not show. Output is a
// table by default and JSON Lines with --json (docs/json.md); `version`
// prints the build.
//
// # Testability
//
// main only calls run, which takes the output streams and arguments, prints
// a failure as one line on stderr, and returns the error; code maps it to
// the exit status (0, 1 for failures, 2 for usage errors). Flags, help,
// progress and the JSON metadata are internal/cli's, shared with mxbench. The environment variables GOMX_SYSFS_ROOT
// and GOMX_DEV_VFIO move sysfs and /dev/vfio, so tests run list and bind
// against a recorded tree.
package main

import (
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

// Exit statuses (see cli.Code).
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

// usagef returns a usage error of subcommand cmd.
func usagef(cmd, format string, args ...any) error {
	return cli.Usagef("ioatctl", cmd, format, args...)
}

// code maps run's error to the process exit status.
func code(err error) int { return cli.Code(err) }

// command is one subcommand.
type command struct {
	name    string
	args    string // synopsis of the arguments
	summary string
	run     func(env *env, args []string) error
}

// commands lists the subcommands, by name.
var commands = map[string]command{}

func init() {
	for _, c := range []command{
		{"list", "[--json]", "list CBDMA functions: address, device, platform, CBVER, driver, IOMMU group, NUMA node", runList},
		{"bind", "[--all] ADDR...", "bind CBDMA functions to vfio-pci", runBind},
		{"unbind", "[--all] ADDR...", "give functions bound to vfio-pci back to the kernel", runUnbind},
		{"setup", "[--check] [--pages N] [--size 2M|1G]", "reserve hugepages and report whether VFIO is ready (--check: report only)", runSetup},
		{"dsa-config", "[--check] [--device dsaN] [--wqs N] [--mode dedicated|shared] ...", "configure a DSA's user work queues through the idxd driver (--check: report only)", runDSAConfig},
		{"copy", "[--channels N] [--size S | --sweep | --sizes LIST] ...", "copy throughput: engine against CPU copy (MB/s, ops/s)", runCopy},
		{"verify", "[--duration D | --iterations N] [--seed S] ...", "random copies and fills checked byte for byte", runVerify},
		{"overlap", "[--sizes LIST] [--iterations N] ...", "how much of a copy the engine overlaps with computation", runOverlap},
	} {
		commands[c.name] = c
	}
}

// env is what a subcommand runs with: its output streams and the
// environment-dependent paths.
type env struct {
	stdout, stderr io.Writer
	// sysfsRoot is where sysfs is mounted (GOMX_SYSFS_ROOT, default /sys).
	sysfsRoot string
	// devVFIO is the directory of the VFIO nodes (GOMX_DEV_VFIO, default
	// /dev/vfio).
	devVFIO string
	// devDir is the device directory, where the kernel's DSA work queues
	// are (dsa/wqD.Q; GOMX_DEV, default /dev).
	devDir string
}

// Environment variables ioatctl reads.
const (
	envSysfsRoot = "GOMX_SYSFS_ROOT"
	envDevVFIO   = "GOMX_DEV_VFIO"
	envDev       = "GOMX_DEV"
)

func newEnv(stdout, stderr io.Writer) *env {
	e := &env{stdout: stdout, stderr: stderr, sysfsRoot: "/sys", devVFIO: "/dev/vfio", devDir: "/dev"}
	if v := os.Getenv(envDev); v != "" {
		e.devDir = v
	}
	if v := os.Getenv(envSysfsRoot); v != "" {
		e.sysfsRoot = v
	}
	if v := os.Getenv(envDevVFIO); v != "" {
		e.devVFIO = v
	}
	return e
}

// run runs ioatctl with the arguments after the program name, writing
// results to stdout and diagnostics to stderr. It prints a returned error
// to stderr itself, as one line (cli.Report), so main has only to exit
// with code(err).
func run(stdout, stderr io.Writer, args []string) (err error) {
	defer func() { cli.Report(stderr, "ioatctl", err) }()
	if len(args) == 0 {
		return usagef("", "no subcommand: want one of %s", strings.Join(commandNames(), ", "))
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				return c.run(newEnv(stdout, stderr), []string{"-h"})
			}
			return usagef("", "no subcommand %q (want %s)", args[1], strings.Join(commandNames(), ", "))
		}
		printUsage(stdout)
		return nil
	case "version", "-version", "--version":
		if len(args) > 1 {
			return usagef("", "version takes no arguments (got %q)", args[1])
		}
		cli.PrintVersion(stdout, "ioatctl")
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		return usagef("", "unknown subcommand %q (want %s)", args[0], strings.Join(commandNames(), ", "))
	}
	return c.run(newEnv(stdout, stderr), args[1:])
}

// commandNames returns the subcommand names in the order of the usage text.
func commandNames() []string {
	order := map[string]int{"list": 0, "bind": 1, "unbind": 2, "setup": 3, "dsa-config": 4, "copy": 5, "verify": 6, "overlap": 7}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
	return names
}

// printUsage writes the top-level help.
func printUsage(w io.Writer) {
	fmt.Fprintf(w, `ioatctl drives Intel I/OAT (CBDMA) copy engines from user space.

Usage:
  ioatctl COMMAND [flags] [arguments]

Commands:
`)
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, `  %-8s %s
  %-8s %s

Run "ioatctl COMMAND -h" for a command's description, examples and flags.

Getting started:
  ioatctl copy --channels 4        benchmark (emulated engine when no hardware is bound)
  ioatctl setup --check            is this machine ready for the hardware? (changes nothing)
  sudo ioatctl setup               reserve hugepages, check VFIO
  ioatctl list                     find CBDMA functions
  sudo ioatctl bind --all          hand them to vfio-pci

Environment:
  %s   sysfs mount point (default /sys); tests point it at a recorded tree
  %s     directory of the VFIO nodes (default /dev/vfio)

Sizes are bytes with an optional K, M or G suffix (or KiB, MiB, GiB), all powers
of 1024. Throughput is in MB/s, where MB = 10^6 bytes.
Errors are one line on stderr. Exit status: 0 success, 1 failure, 2 usage error.
`, "version", "print the module version and VCS revision", "help", "this text; `ioatctl help COMMAND` is `ioatctl COMMAND -h`", envSysfsRoot, envDevVFIO)
}

// newFlags returns a FlagSet for subcommand cmd that reports errors instead
// of printing or exiting; parseFlags prints its help on -h.
func newFlags(cmd string) *flag.FlagSet { return cli.NewFlags(cmd) }

// parseFlags parses args with fs, allowing flags after positional arguments
// ("bind 0000:00:04.0 --all"). On -h it prints the command's help to stdout
// and returns flag.ErrHelp; a bad flag is a usageError.
func parseFlags(e *env, fs *flag.FlagSet, args []string) ([]string, error) {
	return cli.ParseFlags(e.stdout, commandHelp(fs.Name()), fs, args)
}

// commandHelp is the help of subcommand name, flags aside.
func commandHelp(name string) cli.Help {
	c := commands[name]
	return cli.Help{Tool: "ioatctl", Name: c.name, Args: c.args, Summary: c.summary,
		Notes: commandNotes[c.name], Example: commandExamples[c.name]}
}

// commandExamples are the examples of each subcommand's help.
var commandExamples = map[string][]string{
	"list":   {"ioatctl list", "ioatctl list --json"},
	"bind":   {"sudo ioatctl bind --all", "sudo ioatctl bind 0000:00:04.0 0000:00:04.1"},
	"unbind": {"sudo ioatctl unbind --all"},
	"setup":  {"ioatctl setup --check        # changes nothing; exit 0 only when ready", "sudo ioatctl setup           # reserve 512 MiB of 2 MiB pages, then report", "sudo ioatctl setup --pages 4 --size 1G"},
	"dsa-config": {"ioatctl dsa-config --check       # changes nothing; exit 0 only when a user WQ is ready",
		"sudo ioatctl dsa-config --wqs 2 --mode dedicated --max-batch 32",
		"sudo ioatctl dsa-config --device dsa1 --mode shared --reset"},
	"copy":    {"ioatctl copy --channels 4", "ioatctl copy --sweep --json > copy.jsonl", "ioatctl copy --sweep --plot copy.svg", "ioatctl copy --device emulated --hot --size 64K --iterations 100000"},
	"verify":  {"ioatctl verify --channels 4 --duration 10s", "ioatctl verify --iterations 1000 --seed 7 --json"},
	"overlap": {"ioatctl overlap", "ioatctl overlap --sizes 64K,1M --iterations 50 --json"},
}

// commandNotes is the prose of each subcommand's help, after the synopsis.
var commandNotes = map[string]string{
	"list": `Lists PCI functions with vendor 8086 and a CBDMA device ID. CBVER is read from
the registers only for functions bound to vfio-pci that can be opened; "-"
otherwise. Reads sysfs at $GOMX_SYSFS_ROOT (default /sys) and VFIO nodes in
$GOMX_DEV_VFIO (default /dev/vfio).
`,
	"bind": `Binds each function to vfio-pci through its driver_override (needs root and
the vfio-pci module). --all binds every CBDMA function. Every function of an
IOMMU group must be bound to vfio-pci before the group can be used.
`,
	"unbind": `Unbinds each function from vfio-pci and lets its kernel driver (ioatdma)
take it back (needs root). --all unbinds every CBDMA function bound to vfio-pci.
`,
	"setup": `Reserves --pages hugepages of --size (never lowering the pool; needs root;
--pages 0 only reports), then prints the hugepage pools and whether /dev/vfio,
vfio-pci and the IOMMU are there and which CBDMA functions are bound.
--check changes nothing and exits 0 only when every item is ready (1 when
one is missing), for scripts: ` + "`ioatctl setup --check && ioatctl copy`" + `.
`,
	"dsa-config": `Configures user work queues on a DSA the kernel's idxd driver owns, the
path Linux supports (the process maps /dev/dsa/wqD.Q and submits with its own
virtual addresses), through the sysfs files accel-config writes: every engine
and WQ out of use, engine i into group i, WQ i into group i with --mode,
--size, --priority, type user and --name, then the device bound to the idxd
driver and each WQ to the user driver. Each write is echoed on stderr. A
device already enabled is left alone unless --reset (its WQs stop, kernel
users included). Needs root. Then prints the report of --check.

--check changes nothing: it lists each DSA (state, PASID) and its user WQs,
the problems (idxd not loaded, device disabled, no PASID/SVA, no user WQ, a
WQ disabled or of size 0, /dev/dsa/wqD.Q missing or not writable by you) with
their fixes, and the WQs ready for gomx; it exits 0 only when one is ready.
A shared WQ needs ENQCMD in the CPU: there is no software fallback, so a
CPU without it uses dedicated WQs. $GOMX_DEV moves /dev (tests).
`,
	"copy": `Measures, in one run, the engine's throughput and the CPU's (Go's copy) on
the same buffers, sizes, window and cache pattern. The engine offloads every
copy (no CPU threshold). MB = 10^6 bytes.

--cold (default) rotates over buffers of twice the last-level cache the CPU
reports (sysfs, else CPUID) per side, within --memory for both sides (a
quarter of MemAvailable by default); when the budget is smaller the header
says the run is NOT cold. --hot copies the same buffer pair every time.
--window is the number of copies outstanding at once (128, as in the paper),
at most one per buffer slot, so copies in flight never share a destination
(with --hot, one); the header says when it was clamped.
--sweep measures 4 KiB to 8 MiB, doubling; --sizes takes a list. --duration
applies to each size and each mover (engine, CPU). Sizes are bytes with an
optional K, M, G (or KiB, MiB, GiB) suffix, powers of 1024.

--device auto uses every CBDMA function bound to vfio-pci, or the emulated
engine when there is none; the header says which and why. The emulated
engine is CPU threads (a goroutine per channel): its buffers are ordinary
memory, so it runs for any user with no hugepages and no locked-memory
allowance, and its figures show the driver's overhead, not hardware's.
--plot FILE.svg|png draws both curves against size (with --sweep or --sizes).
`,
	"verify": `Runs random copies (random source and destination offsets, lengths 0 to
512 KiB and, one time in four, up to 4 MiB) and random 64-bit pattern fills
on every channel (each channel of each function: older parts have several
per function, named ADDRESS/N), each in its own stream with its own buffers,
as SPDK's verify runs one per core. Every operation is checked byte for byte,
and so are 4 KiB of guard bytes on each side of its destination; the whole
buffers are checked at the end. Exits with status 1 on any mismatch.
Because each channel has its own engine, --policy has no effect here.
`,
	"overlap": `The paper's overlap benchmark. Per size: Tcopy is a copy started and waited
for at once; a loop of register arithmetic is calibrated so that Tcompute is
about 1.5 x Tcopy; Ttotal is start the copy, compute, wait. Overlap =
(Tcopy + Tcompute - Ttotal) / Tcopy: 1 when the copy hides entirely behind
the computation, 0 when it does not overlap at all. Times are averages over
--iterations. The CPU copy (Go's copy) blocks, so its overlap is 0 by
construction; it is printed for comparison, as in the paper.
`,
}
