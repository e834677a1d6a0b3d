// Command guest is the program the peers VMs run (see package
// github.com/gomx-dev/gomx/hack/peers). In the e1000e VM, in one boot, it
// measures mx over gomx's VFIO e1000e transport, a raw-frame ping from
// gomx's driver against a macswap reflector (gomx's own, then DPDK's
// testpmd), and a plain UDP ping-pong through the kernel's e1000e driver on
// the same two NICs, each in its own network namespace with SO_BUSY_POLL.
// In the usb VM (-usb-device, usb.go) it measures mxbench over gomx's USB
// driver cabled to gomx's e1000e driver, then the same mxbench over UDP
// through the kernel's cdc_ether and e1000e drivers on the same two
// devices. Every measurement is repeated -runs times and the median of the
// runs is reported. Its output lines that start with [Marker] form the
// table the host prints.
//
// The runs interleave the peers (mx, gomx's reflector, testpmd's, the
// kernel's driver), so that the host's changing load falls on all alike.
// The NICs start bound to vfio-pci (the init binds them); each run rebinds
// them to e1000e for the kernel's turn, and back.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/pci"
)

// Marker starts every line of the result table.
const Marker = "PEERS| "

type options struct {
	a, b       pci.Address
	runs       int
	rounds     int
	mxSizes    string
	mxIters    int
	rawSizes   []int
	testpmd    string
	busyPollUS int
	rawOnly    bool     // -only raw: the raw-ping rows alone
	mxOnly     bool     // -only mx: the mx row alone
	mxProfile  bool     // print mxbench's CPU profile on the console
	mxTrace    bool     // print mxbench's execution trace on the console
	mxCompare  []string // other mxbench builds, run beside /bin/mxbench in every run
	usb        usbOptions
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err == nil {
		if o.usb.dev != "" {
			err = runUSB(o)
		} else {
			err = run(o)
		}
	}
	if err != nil {
		fmt.Printf("peers: FAIL %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("peers-guest", flag.ContinueOnError)
	a := fs.String("a", "0000:00:01.0", "PCI address of NIC A")
	b := fs.String("b", "0000:00:02.0", "PCI address of NIC B")
	fs.IntVar(&o.runs, "runs", 5, "repetitions of every measurement (the median is reported)")
	fs.IntVar(&o.rounds, "rounds", 500, "ping-pong rounds per raw and UDP measurement")
	fs.StringVar(&o.mxSizes, "mx-sizes", "64,1K,4K", "mxbench --sizes")
	fs.IntVar(&o.mxIters, "mx-iterations", 500, "mxbench --iterations")
	sizes := fs.String("raw-sizes", "64,1514", "raw and UDP frame sizes in bytes (UDP payload = frame - 42)")
	fs.StringVar(&o.testpmd, "testpmd", "/usr/bin/dpdk-testpmd", "DPDK's testpmd; \"\" skips that reflector")
	fs.IntVar(&o.busyPollUS, "busy-poll", 50, "SO_BUSY_POLL microseconds on the kernel's UDP sockets")
	only := fs.String("only", "", "\"raw\" measures only the raw-ping rows (gomx's and testpmd's reflectors), \"mx\" only the mx row and gomx's raw ping, for quick experiments")
	compare := fs.String("mx-compare", "", "other builds of mxbench (paths in the guest, separated by colons), run beside /bin/mxbench in every run, the builds' order turned by one each run: their rows end in (compare), or (NAME) when there are several")
	fs.BoolVar(&o.mxProfile, "mx-profile", false, "run mxbench with --cpuprofile and print the profile on the console, base64 between "+ProfileBegin+" and "+ProfileEnd+" lines")
	fs.BoolVar(&o.mxTrace, "mx-trace", false, "run mxbench with --trace (runtime/trace) and print the trace on the console, base64 between "+TraceBegin+" and "+TraceEnd+" lines")
	o.usb.register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch *only {
	case "":
	case "raw":
		o.rawOnly = true
	case "mx":
		o.mxOnly = true
	default:
		return o, fmt.Errorf("-only %q: want \"raw\", \"mx\" or nothing", *only)
	}
	if *compare != "" {
		o.mxCompare = strings.Split(*compare, ":")
	}
	var err error
	if o.a, err = pci.ParseAddress(*a); err != nil {
		return o, err
	}
	if o.b, err = pci.ParseAddress(*b); err != nil {
		return o, err
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 60 || n > 1514 {
			return o, fmt.Errorf("-raw-sizes %q: want frame sizes between 60 and 1514", *sizes)
		}
		o.rawSizes = append(o.rawSizes, n)
	}
	if o.runs < 1 || o.rounds < 10 {
		return o, errors.New("-runs must be at least 1 and -rounds at least 10")
	}
	return o, nil
}

// row is one line of the table: a one-way latency per run, in
// microseconds, or the reason there is none.
type row struct {
	what string
	size int
	us   []float64
	err  string
}

func (r row) median() float64 {
	if len(r.us) == 0 {
		return 0
	}
	s := slices.Clone(r.us)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func run(o options) error {
	var rows []*row
	get := func(what string, size int) *row {
		for _, r := range rows {
			if r.what == what && r.size == size {
				return r
			}
		}
		r := &row{what: what, size: size}
		rows = append(rows, r)
		return r
	}
	fail := func(what string, sizes []int, err error) {
		fmt.Printf("peers: %s: %v\n", what, err)
		for _, s := range sizes {
			if r := get(what, s); r.err == "" {
				r.err = err.Error()
			}
		}
	}
	const (
		mxRow = "mx over gomx e1000e (VFIO)"
		// The median round trip's half, as the raw ping reports its
		// rounds (the mx row is mxbench's mean).
		mxMedian  = "mx p50 over gomx e1000e"
		mxFast    = "mx p10 over gomx e1000e"
		gomxRow   = "raw ping, gomx reflector"
		testpmdRw = "raw ping, testpmd reflector"
		// The fastest tenth of the rounds: the path's own cost, less
		// blurred by the host descheduling the VM's vCPUs than the median.
		gomxFast    = "raw ping p10, gomx reflector"
		testpmdFast = "raw ping p10, testpmd reflector"
		udpRow      = "kernel e1000e UDP, busy-poll"
		udp1Row     = "kernel UDP, one thread, turns"
	)
	start := time.Now()
	// The clock source decides what a clock read costs: TSC is read in
	// user space (the vDSO); others (hpet, acpi_pm) make it a system call
	// that reads a device register, which TCG magnifies.
	for _, f := range []string{"current_clocksource", "available_clocksource"} {
		b, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/" + f)
		fmt.Printf("%s%s: %s\n", Marker, f, strings.TrimSpace(string(b)))
	}

	// The runs interleave the peers, so that a change in the host's load
	// (TCG) falls on all of them alike: each run measures every peer once,
	// the kernel's driver last, and gives the NICs back to vfio-pci after.
	one := o
	one.runs = 1
	failed := map[string]bool{}
	// mxRows runs mxbench from bin and appends its figures to the mx rows
	// (their names ending in suffix).
	mxRows := func(bin, suffix string) {
		if failed[mxRow+suffix] {
			return
		}
		res, err := mxbench(o, bin)
		if err != nil {
			fail(mxRow+suffix, []int{64}, err)
			failed[mxRow+suffix] = true
			return
		}
		for _, r := range res {
			get(mxRow+suffix, r.Size).us = append(get(mxRow+suffix, r.Size).us, r.LatencyUS)
			if r.LatencyP50US > 0 {
				get(mxMedian+suffix, r.Size).us = append(get(mxMedian+suffix, r.Size).us, r.LatencyP50US)
				get(mxFast+suffix, r.Size).us = append(get(mxFast+suffix, r.Size).us, r.LatencyP10US)
			}
		}
	}
	for i := range o.runs {
		// (a) mx over the VFIO e1000e transport, through mxbench: the
		// builds to compare with beside the tree's, each first in turn,
		// so that the host's load falls on all builds alike.
		if !o.rawOnly {
			for _, b := range compareOrder(o.mxCompare, i) {
				mxRows(b.bin, b.suffix)
			}
		}
		// (c) raw ping against gomx's reflector, then testpmd's.
		if !failed[gomxRow] {
			if err := rawGomx(one, func(size int, us, fast float64) {
				get(gomxRow, size).us = append(get(gomxRow, size).us, us)
				get(gomxFast, size).us = append(get(gomxFast, size).us, fast)
			}); err != nil {
				fail(gomxRow, o.rawSizes, err)
				failed[gomxRow] = true
			}
		}
		if o.mxOnly {
			// The testpmd and kernel rows are left out; gomx's raw
			// ping stays, the yardstick of the mx row.
		} else if o.testpmd == "" {
			fail(testpmdRw, o.rawSizes, errors.New("skipped (-testpmd \"\")"))
		} else if !failed[testpmdRw] {
			if err := rawTestpmd(one, func(size int, us, fast float64) {
				get(testpmdRw, size).us = append(get(testpmdRw, size).us, us)
				get(testpmdFast, size).us = append(get(testpmdFast, size).us, fast)
			}); err != nil {
				fail(testpmdRw, o.rawSizes, err)
				failed[testpmdRw] = true
			}
		}
		// (b) the kernel's driver: the NICs rebound to e1000e and back.
		if !failed[udpRow] && !o.rawOnly && !o.mxOnly {
			if err := kernelUDP(one,
				func(size int, us float64) { get(udpRow, size).us = append(get(udpRow, size).us, us) },
				func(size int, us float64) { get(udp1Row, size).us = append(get(udp1Row, size).us, us) }); err != nil {
				fail(udpRow, o.rawSizes, err)
				failed[udpRow] = true
			}
		}
		fmt.Printf("peers: run %d/%d done (%v)\n", i+1, o.runs, time.Since(start).Round(time.Second))
	}

	// The table.
	fmt.Printf("%s%-30s %6s %12s %s\n", Marker, "one-way latency (RTT/2)", "bytes", "median us", "runs (us)")
	for _, r := range rows {
		if r.err != "" && len(r.us) == 0 {
			fmt.Printf("%s%-30s %6d %12s %s\n", Marker, r.what, r.size, "-", "FAILED: "+r.err)
			continue
		}
		var runs []string
		for _, u := range r.us {
			runs = append(runs, strconv.FormatFloat(u, 'f', 1, 64))
		}
		fmt.Printf("%s%-30s %6d %12.1f %s\n", Marker, r.what, r.size, r.median(), strings.Join(runs, " "))
	}
	ratio := func(name, num, den string, size int, target float64, cmp string) {
		n, d := get(num, size).median(), get(den, size).median()
		if n == 0 || d == 0 {
			fmt.Printf("%s%s: not measured\n", Marker, name)
			return
		}
		q := n / d
		met := q <= target
		verdict := "MET"
		if !met {
			verdict = "NOT MET"
		}
		fmt.Printf("%s%s = %.2f (target %s %.2f: %s)\n", Marker, name, q, cmp, target, verdict)
	}
	printMMIO()
	ratio("mx 64 B one-way / kernel UDP 64 B frame", mxRow, udpRow, 64, 0.5, "<=")
	ratio("gomx reflector / testpmd reflector, 64 B", gomxRow, testpmdRw, 64, 1.0, "<=")
	ratio("gomx reflector / testpmd reflector, 64 B p10", gomxFast, testpmdFast, 64, 1.0, "<=")
	fmt.Printf("%s%d runs; guest wall %v\n", Marker, o.runs, time.Since(start).Round(time.Second))
	return nil
}

// build is an mxbench to run and the suffix of its rows.
type build struct{ bin, suffix string }

// compareOrder is the order of run i's mxbench builds: the tree's
// (/bin/mxbench) and those of -mx-compare, turned by i, so that each goes
// first as often as the others over the runs. A single build to compare
// with marks its rows (compare), several their file names.
func compareOrder(compare []string, i int) []build {
	if len(compare) == 0 {
		return []build{{"/bin/mxbench", ""}}
	}
	all := make([]build, 0, len(compare)+1)
	for _, c := range compare {
		suffix := " (compare)"
		if len(compare) > 1 {
			suffix = " (" + filepath.Base(c) + ")"
		}
		all = append(all, build{c, suffix})
	}
	all = append(all, build{"/bin/mxbench", ""})
	k := i % len(all)
	return append(all[k:], all[:k]...)
}

// mxResult is the part of mxbench's --json output used here.
type mxResult struct {
	Size      int     `json:"size"`
	LatencyUS float64 `json:"latency_us"`
	// LatencyP50US and LatencyP10US are half the median round trip and
	// half the one a tenth of them beat.
	LatencyP50US float64 `json:"latency_p50_us"`
	LatencyP10US float64 `json:"latency_p10_us"`
	MBPerS       float64 `json:"mb_per_s"`
	Errors       int     `json:"errors"`
	// Baseline is mxbench's plain UDP-socket exchange of the same size.
	Baseline *struct {
		LatencyUS float64 `json:"latency_us"`
		MBPerS    float64 `json:"mb_per_s"`
	} `json:"baseline"`
}

// The lines around a CPU profile the guest prints (-mx-profile).
const (
	ProfileBegin = "PEERS-PROFILE-BEGIN"
	ProfileEnd   = "PEERS-PROFILE-END"
	// TraceBegin and TraceEnd surround an execution trace (-mx-trace).
	TraceBegin = "PEERS-TRACE-BEGIN"
	TraceEnd   = "PEERS-TRACE-END"
)

func mxbench(o options, bin string) ([]mxResult, error) {
	args := []string{"pingpong", "--transport", "nic", "--nic", o.a.String() + "," + o.b.String(),
		"--sizes", o.mxSizes, "--iterations", strconv.Itoa(o.mxIters), "--warmup", "50", "--baseline=false"}
	const (
		prof  = "/tmp/mxbench.pprof"
		trace = "/tmp/mxbench.trace"
	)
	if o.mxProfile {
		args = append(args, "--cpuprofile", prof)
	}
	if o.mxTrace {
		args = append(args, "--trace", trace)
	}
	res, err := runBench(nil, bin, args...)
	// A failed run still stops its recordings: print what they hold.
	if o.mxProfile {
		err = errors.Join(err, printFile(prof, ProfileBegin, ProfileEnd))
	}
	if o.mxTrace {
		err = errors.Join(err, printFile(trace, TraceBegin, TraceEnd))
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// printFile prints the file at path on the console, base64 in lines of 76
// characters between the lines begin and end.
func printFile(path, begin, end string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	enc := base64.StdEncoding.EncodeToString(b)
	fmt.Println(begin)
	for len(enc) > 0 {
		n := min(len(enc), 76)
		fmt.Println(enc[:n])
		enc = enc[n:]
	}
	fmt.Println(end)
	return nil
}

// runMxbench runs /bin/mxbench with args and --json, its standard error on
// the console, and returns its rows. start, when set, starts the process
// (inside a network namespace, see end.in).
func runMxbench(start func(func() error) error, args ...string) ([]mxResult, error) {
	return runBench(start, "/bin/mxbench", args...)
}

// runBench is runMxbench of the mxbench at bin.
func runBench(start func(func() error) error, bin string, args ...string) ([]mxResult, error) {
	fmt.Printf("peers: %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, append(args, "--json")...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stdout
	var err error
	if start != nil {
		err = start(cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return nil, fmt.Errorf("mxbench %s: %w", strings.Join(args, " "), err)
	}
	var res []mxResult
	dec := json.NewDecoder(&out)
	for {
		var r mxResult
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("mxbench output: %w", err)
		}
		if r.Errors != 0 {
			return nil, fmt.Errorf("mxbench %s: %d B: %d errors", strings.Join(args, " "), r.Size, r.Errors)
		}
		res = append(res, r)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("mxbench %s printed no results", strings.Join(args, " "))
	}
	return res, nil
}
