// Command guest is the program the peers VM runs (see package
// github.com/gomx-dev/gomx/hack/peers): in one boot it measures mx over
// gomx's VFIO e1000e transport, a raw-frame ping from gomx's driver against
// a macswap reflector (gomx's own, then DPDK's testpmd), and a plain UDP
// ping-pong through the kernel's e1000e driver on the same two NICs, each in
// its own network namespace with SO_BUSY_POLL. Every measurement is repeated
// -runs times and the median of the runs is reported. Its output lines that
// start with [Marker] form the table the host prints.
//
// The runs interleave the peers (mx, gomx's reflector, testpmd's, the
// kernel's driver), so that the host's changing load falls on all alike.
// The NICs start bound to vfio-pci (the init binds them); each run rebinds
// them to e1000e for the kernel's turn, and back.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/u-root/u-root/pkg/kmodule"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
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
	rawOnly    bool // -only raw: the raw-ping rows alone
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err == nil {
		err = run(o)
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
	only := fs.String("only", "", "\"raw\" measures only the raw-ping rows (gomx's and testpmd's reflectors), for quick experiments")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch *only {
	case "":
	case "raw":
		o.rawOnly = true
	default:
		return o, fmt.Errorf("-only %q: want \"raw\" or nothing", *only)
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
		mxRow     = "mx over gomx e1000e (VFIO)"
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

	// The runs interleave the peers, so that a change in the host's load
	// (TCG) falls on all of them alike: each run measures every peer once,
	// the kernel's driver last, and gives the NICs back to vfio-pci after.
	one := o
	one.runs = 1
	failed := map[string]bool{}
	for i := range o.runs {
		// (a) mx over the VFIO e1000e transport, through mxbench.
		if !failed[mxRow] && !o.rawOnly {
			if res, err := mxbench(o); err != nil {
				fail(mxRow, []int{64}, err)
				failed[mxRow] = true
			} else {
				for _, r := range res {
					get(mxRow, r.Size).us = append(get(mxRow, r.Size).us, r.LatencyUS)
				}
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
		if o.testpmd == "" {
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
		if !failed[udpRow] && !o.rawOnly {
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

// mxResult is the part of mxbench's --json output used here.
type mxResult struct {
	Size      int     `json:"size"`
	LatencyUS float64 `json:"latency_us"`
}

func mxbench(o options) ([]mxResult, error) {
	cmd := exec.Command("/bin/mxbench", "pingpong", "--transport", "nic", "--nic", o.a.String()+","+o.b.String(),
		"--sizes", o.mxSizes, "--iterations", strconv.Itoa(o.mxIters), "--warmup", "50", "--baseline=false", "--json")
	cmd.Stderr = os.Stdout
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("mxbench: %w", err)
	}
	var res []mxResult
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var r mxResult
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("mxbench output %q: %w", out, err)
		}
		res = append(res, r)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("mxbench printed no results: %q", out)
	}
	return res, nil
}

// opened is a NIC on its own VFIO container.
type opened struct {
	ctr  *vfio.Container
	dev  *vfio.Device
	nic  *e1000e.NIC
	regs *countingRegs
}

// countingDevice hands the driver BAR0 through countingRegs, so the guest
// can print how many MMIO accesses (each one a trip into QEMU's device
// model) gomx's driver makes per frame.
type countingDevice struct {
	pci.Device
	regs *countingRegs
}

// BAR implements pci.Device.
func (d countingDevice) BAR(i int) (pci.Registers, error) {
	r, err := d.Device.BAR(i)
	if i != 0 || err != nil {
		return r, err
	}
	d.regs.Registers = r
	return d.regs, nil
}

// countingRegs counts 32-bit register accesses (the 82574's only width).
// The counters are plain: each NIC's fast path runs on one goroutine, and
// they are read after it stopped.
type countingRegs struct {
	pci.Registers
	reads, writes uint64
}

// Read32 implements pci.Registers.
func (c *countingRegs) Read32(off int) uint32 { c.reads++; return c.Registers.Read32(off) }

// Write32 implements pci.Registers.
func (c *countingRegs) Write32(off int, v uint32) { c.writes++; c.Registers.Write32(off, v) }

// snapshot returns the counts so far.
func (c *countingRegs) snapshot() [2]uint64 { return [2]uint64{c.reads, c.writes} }

func open(a pci.Address) (*opened, error) {
	vo := vfio.DefaultOptions()
	ctr, err := vfio.OpenContainer(vo)
	if err != nil {
		return nil, err
	}
	d, err := ctr.Open(a)
	if err != nil {
		ctr.Close()
		return nil, err
	}
	regs := &countingRegs{}
	n, err := e1000e.Open(countingDevice{Device: d, regs: regs}, e1000e.DefaultOptions())
	if err != nil {
		d.Close()
		ctr.Close()
		return nil, err
	}
	return &opened{ctr: ctr, dev: d, nic: n, regs: regs}, nil
}

func (p *opened) close() error {
	return errors.Join(p.nic.Close(), p.dev.Close(), p.ctr.Close())
}

// reflect runs gomx's macswap reflector (nictest.MacSwap, in bursts of
// 32 as testpmd's default --burst) on n until stop is set, on a thread of
// its own pinned to CPU 1, where testpmd runs its forwarding lcore.
func reflect(n nicdrv.NIC, stop *atomic.Bool, done chan<- error) {
	runtime.LockOSThread()
	if err := pin(reflectorCPU); err != nil {
		done <- err
		return
	}
	rx := make([]*nicdrv.Buffer, 32)
	for !stop.Load() {
		if _, err := nictest.MacSwap(n, 0, rx); err != nil {
			done <- err
			return
		}
	}
	done <- nil
}

// The guest's two vCPUs: the pinger on one, the reflector (gomx's thread
// or testpmd's forwarding lcore) on the other, the same for both
// reflectors.
const (
	pingerCPU    = 0
	reflectorCPU = 1
)

// pin binds the calling thread (locked to its goroutine) to one CPU.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin thread to CPU %d: %w", cpu, err)
	}
	return nil
}

// ping sends rounds frames of size bytes from a to dst one at a time and
// returns the median round trip. A reply must be the frame with its
// addresses swapped, byte for byte; a round without a reply within a
// second is sent again (at most 5 times: the reflector may still be
// bringing its link up during the warm-up).
func ping(a nicdrv.NIC, dst nicdrv.MAC, size, rounds int) (median, p10 time.Duration, err error) {
	rtts := make([]time.Duration, 0, rounds)
	want := make([]byte, 2048)
	rx := make([]*nicdrv.Buffer, 8)
	// One slice for every send: a literal per round would escape to the
	// heap, and the garbage collector's pauses would fall on gomx's
	// reflector, which shares this process, and not on testpmd.
	one := make([]*nicdrv.Buffer, 1)
	for i := range rounds {
		got := false
		for try := 0; !got; try++ {
			if try == 5 {
				return 0, 0, fmt.Errorf("%d B round %d: no reply after %d tries", size, i, try)
			}
			buf, err := a.Pool(0).Get()
			if err != nil {
				return 0, 0, err
			}
			nictest.Frame(buf.SetLen(2048), dst, a.MAC(), uint64(i), size)
			buf.SetLen(size)
			start := time.Now()
			one[0] = buf
			if k, err := a.TxBatch(0, one); k != 1 || err != nil {
				return 0, 0, fmt.Errorf("send: %d, %v", k, err)
			}
			deadline := start.Add(time.Second)
			// The clock is read once per 256 empty polls: under TCG the
			// guest's clocksource may be an emulated device (HPET), each
			// read a trip through QEMU under the lock the NICs' MMIO
			// takes too.
			for polls := 1; polls%256 != 0 || time.Now().Before(deadline); polls++ {
				k, err := a.RxBatch(0, rx)
				if err != nil {
					return 0, 0, err
				}
				if k == 0 {
					continue
				}
				rtt := time.Since(start)
				w := nictest.Frame(want, a.MAC(), dst, uint64(i), size)
				for _, b := range rx[:k] {
					if string(b.Data) == string(w) {
						got = true
					}
				}
				a.Pool(0).Free(rx[:k]...)
				if got {
					rtts = append(rtts, rtt)
					break
				}
			}
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], rtts[len(rtts)/10], nil
}

// measure pings dst from a for every size and run, after a warm-up,
// reporting one-way microseconds (half the median round trip) per run. The
// pinger runs on a thread pinned to pingerCPU, whichever reflector it
// pings; steady (if not nil) is called after the warm-up.
func measure(o options, a nicdrv.NIC, dst nicdrv.MAC, add func(size int, us, p10 float64), steady func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return err
	}
	if err := pin(pingerCPU); err != nil {
		return err
	}
	defer unix.SchedSetaffinity(0, &old)
	if _, _, err := ping(a, dst, 64, 50); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if steady != nil {
		steady()
	}
	for range o.runs {
		for _, size := range o.rawSizes {
			rtt, fast, err := ping(a, dst, size, o.rounds)
			if err != nil {
				return err
			}
			add(size, rtt.Seconds()*1e6/2, fast.Seconds()*1e6/2)
		}
	}
	return nil
}

func rawGomx(o options, add func(size int, us, p10 float64)) (err error) {
	a, err := open(o.a)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, a.close()) }()
	b, err := open(o.b)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()
	var stop atomic.Bool
	done := make(chan error, 1)
	go reflect(b.nic, &stop, done)
	var a0, b0 [2]uint64
	merr := measure(o, a.nic, b.nic.MAC(), add, func() { a0, b0 = a.regs.snapshot(), b.regs.snapshot() })
	stop.Store(true)
	if err := errors.Join(merr, <-done); err != nil {
		return err
	}
	// Every round reflects one frame; after the warm-up nothing else moves.
	frames := float64(o.runs * len(o.rawSizes) * o.rounds)
	a1, b1 := a.regs.snapshot(), b.regs.snapshot()
	mmio(mmioRow{reflector: "gomx", frames: frames,
		reads: float64(b1[0]-b0[0]) / frames, writes: float64(b1[1]-b0[1]) / frames,
		pingReads: float64(a1[0]-a0[0]) / frames, pingWrites: float64(a1[1]-a0[1]) / frames})
	return nil
}

// rawTestpmd runs DPDK's testpmd as the macswap reflector on NIC B (its
// net_e1000_em driver through vfio-pci) and pings it from gomx's driver on
// NIC A. The image holds only the poll-mode drivers testpmd needs in EAL's
// plugin directory, which EAL loads whole.
func rawTestpmd(o options, add func(size int, us, p10 float64)) (err error) {
	if _, err := os.Stat(o.testpmd); err != nil {
		return fmt.Errorf("testpmd is not in the image (%v): install the Debian package dpdk on the host and rebuild", err)
	}
	for _, d := range []string{"/var/run", "/run"} {
		_ = os.MkdirAll(d, 0o755)
	}
	// EAL refuses a plugin directory with a world-writable ancestor, and
	// the initramfs's root is 0777.
	for d := "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0"; ; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("chmod %s for EAL: %w", d, err)
		}
		if d == "/" {
			break
		}
	}
	// EAL's main lcore on CPU 0, the forwarding lcore on CPU 1 (gomx's
	// reflector thread is pinned there too); the pinger shares CPU 0 with
	// testpmd's idle main thread. Rings of 512 descriptors and bursts of
	// 32, as gomx's reflector (the em driver's default rings are 256).
	cmd := exec.Command(o.testpmd, "-l", "0,1", "-n", "1", "--in-memory", "-a", o.b.String(),
		"--", "--forward-mode=macswap", "--auto-start", "--nb-cores=1", "--rxq=1", "--txq=1",
		"--rxd=512", "--txd=512", "--burst=32",
		"--total-num-mbufs=2048", "--no-lsc-interrupt")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	// testpmd's stdout is a pipe, so C's stdio buffers it: its lines
	// arrive late (all of them when it exits), and readiness is judged by
	// a reply to a ping instead of by its "Press enter to exit".
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tailMu sync.Mutex
	var tail []string
	tailDone := make(chan struct{})
	go func() {
		defer close(tailDone)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Println("testpmd: " + line)
			tailMu.Lock()
			tail = append(tail, line)
			if len(tail) > 6 {
				tail = tail[1:]
			}
			tailMu.Unlock()
		}
	}()
	lastLines := func() string {
		tailMu.Lock()
		defer tailMu.Unlock()
		return strings.Join(tail, " | ")
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return err
	}
	exited := make(chan error, 1)
	go func() { err := cmd.Wait(); pw.Close(); <-tailDone; exited <- err }()
	stopTestpmd := func() error {
		stdin.Close()
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("testpmd: %w: %s", err, lastLines())
			}
			return nil
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			return errors.New("testpmd did not exit within 30 s of the enter key; killed")
		}
	}
	a, err := open(o.a)
	if err != nil {
		return errors.Join(err, stopTestpmd())
	}
	// testpmd keeps the port's MAC, QEMU's for NIC B (hack/qemu's
	// MachineArgs); macswap sends the frame back whatever its destination.
	dst := nicdrv.MAC{0x52, 0x54, 0x00, 0x12, 0x34, 0x02}
	deadline := time.Now().Add(120 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			return errors.Join(fmt.Errorf("testpmd exited before forwarding (%v): %s", err, lastLines()), a.close())
		default:
		}
		if _, _, err := ping(a.nic, dst, 64, 1); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return errors.Join(fmt.Errorf("testpmd did not reflect a frame within 120 s: %s", lastLines()), a.close(), stopTestpmd())
		}
	}
	var a0 [2]uint64
	merr := measure(o, a.nic, dst, add, func() { a0 = a.regs.snapshot() })
	if merr == nil {
		frames := float64(o.runs * len(o.rawSizes) * o.rounds)
		a1 := a.regs.snapshot()
		mmio(mmioRow{reflector: "testpmd", frames: frames, reads: -1, writes: -1,
			pingReads: float64(a1[0]-a0[0]) / frames, pingWrites: float64(a1[1]-a0[1]) / frames})
	}
	return errors.Join(merr, a.close(), stopTestpmd())
}

// rebind hands a function from its current driver to drv.
func rebind(a pci.Address, drv string) error {
	dir := filepath.Join("/sys/bus/pci/devices", a.String())
	if err := os.WriteFile(filepath.Join(dir, "driver_override"), []byte(drv), 0); err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(dir, "driver")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "driver", "unbind"), []byte(a.String()), 0); err != nil {
			return err
		}
	}
	if err := os.WriteFile("/sys/bus/pci/drivers_probe", []byte(a.String()), 0); err != nil {
		return err
	}
	got, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil || filepath.Base(got) != drv {
		return fmt.Errorf("%s did not take %s (driver link %q, %v)", drv, a, got, err)
	}
	return nil
}

// netdevOf returns the network interface the kernel made for a function.
func netdevOf(a pci.Address) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join("/sys/bus/pci/devices", a.String(), "net", "*"))
		if len(m) == 1 {
			return filepath.Base(m[0]), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no network interface for %s after 10 s", a)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// end is one NIC under the kernel's driver, in its own namespace, with a
// UDP socket bound to ip:port.
type end struct {
	ns netns.NsHandle
	ip [4]byte
	fd int
}

// setup moves the interface of a into a new namespace, gives it ip/24,
// brings it up, waits for its carrier and opens a busy-polling UDP socket
// in it.
func setup(a pci.Address, ip [4]byte, busyPollUS int) (*end, error) {
	name, err := netdevOf(a)
	if err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	ns, err := netns.New() // this thread is now in ns
	if err != nil {
		return nil, err
	}
	e := &end{ns: ns, ip: ip, fd: -1}
	err = func() error {
		if err := netns.Set(orig); err != nil {
			return err
		}
		link, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if err := netlink.LinkSetNsFd(link, int(ns)); err != nil {
			return err
		}
		if err := netns.Set(ns); err != nil {
			return err
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return err
		}
		addr := &netlink.Addr{IPNet: netlink.NewIPNet(ip[:])}
		addr.IPNet.Mask = []byte{255, 255, 255, 0}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return err
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if l.Attrs().OperState == netlink.OperUp {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: no carrier 20 s after link up (state %v)", name, l.Attrs().OperState)
			}
			time.Sleep(20 * time.Millisecond)
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		e.fd = fd
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BUSY_POLL, busyPollUS); err != nil {
			return fmt.Errorf("SO_BUSY_POLL: %w", err)
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1}); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: ip, Port: 9000})
	}()
	if serr := netns.Set(orig); serr != nil {
		// The thread stays locked and dies with the goroutine.
		runtime.LockOSThread()
		err = errors.Join(err, serr)
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("%s (%s): %w", name, a, err)
	}
	return e, nil
}

func (e *end) close() {
	if e.fd >= 0 {
		unix.Close(e.fd)
	}
	e.ns.Close()
}

// udpPing sends rounds datagrams of payload bytes from x to y and back,
// taking turns on one goroutine as the raw ping's pinger and reflector do
// in the e1000e tests, and returns the median round trip. A lost datagram
// (1 s receive timeout) is sent again, at most 5 times.
func udpPing(x, y *end, payload, rounds int) (time.Duration, error) {
	msg := make([]byte, payload)
	buf := make([]byte, 2048)
	rtts := make([]time.Duration, 0, rounds)
	hop := func(from, to *end, seq int) error {
		for try := 0; try < 5; try++ {
			msg[0], msg[1] = byte(seq), byte(seq>>8)
			if err := unix.Sendto(from.fd, msg, 0, &unix.SockaddrInet4{Addr: to.ip, Port: 9000}); err != nil {
				return err
			}
			n, _, err := recvfrom(to.fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil {
				return err
			}
			if n != payload || buf[0] != byte(seq) || buf[1] != byte(seq>>8) {
				continue // a late duplicate of an earlier try
			}
			return nil
		}
		return fmt.Errorf("%d B datagram %d lost 5 times", payload, seq)
	}
	for i := range rounds {
		start := time.Now()
		if err := hop(x, y, i); err != nil {
			return 0, err
		}
		if err := hop(y, x, i); err != nil {
			return 0, err
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// recvfrom is unix.Recvfrom, retried when the Go runtime's preemption
// signal interrupts it.
func recvfrom(fd int, buf []byte) (int, unix.Sockaddr, error) {
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if !errors.Is(err, unix.EINTR) {
			return n, from, err
		}
	}
}

// echo answers every datagram on e with the same bytes, on a thread of its
// own, until stop is set (the socket's 1 s timeout bounds each wait).
func echo(e *end, stop *atomic.Bool, done chan<- error) {
	runtime.LockOSThread()
	buf := make([]byte, 2048)
	for !stop.Load() {
		n, from, err := unix.Recvfrom(e.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			done <- err
			return
		}
		if err := unix.Sendto(e.fd, buf[:n], 0, from); err != nil {
			done <- err
			return
		}
	}
	done <- nil
}

// udpPingEcho sends rounds datagrams from x to y's echo thread and returns
// the median round trip; a datagram lost (1 s timeout) is sent again, at
// most 5 times.
func udpPingEcho(x, y *end, payload, rounds int) (time.Duration, error) {
	msg := make([]byte, payload)
	buf := make([]byte, 2048)
	rtts := make([]time.Duration, 0, rounds)
	to := &unix.SockaddrInet4{Addr: y.ip, Port: 9000}
	for i := range rounds {
		ok := false
		for try := 0; try < 5 && !ok; try++ {
			msg[0], msg[1] = byte(i), byte(i>>8)
			start := time.Now()
			if err := unix.Sendto(x.fd, msg, 0, to); err != nil {
				return 0, err
			}
			for {
				n, _, err := unix.Recvfrom(x.fd, buf, 0)
				if errors.Is(err, unix.EAGAIN) {
					break
				}
				if errors.Is(err, unix.EINTR) {
					continue // the Go runtime's preemption signal
				}
				if err != nil {
					return 0, err
				}
				if n == payload && buf[0] == byte(i) && buf[1] == byte(i>>8) {
					rtts = append(rtts, time.Since(start))
					ok = true
					break
				}
			}
		}
		if !ok {
			return 0, fmt.Errorf("%d B datagram %d lost 5 times", payload, i)
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}

// kernelUDP measures the kernel's e1000e driver: UDP between the two NICs,
// each in its own namespace, with SO_BUSY_POLL. add gets the figure with
// an echo thread on NIC B (as mxbench's two boards run), addTurns the one
// with both sides taking turns on one thread (as the e1000e tests' raw
// ping does).
func kernelUDP(o options, add, addTurns func(size int, us float64)) (err error) {
	p, err := kmodule.NewProber(kmodule.ProbeOpts{})
	if err != nil {
		return fmt.Errorf("reading modules.dep: %w", err)
	}
	if err := p.Probe("e1000e", ""); err != nil {
		return fmt.Errorf("loading e1000e: %w", err)
	}
	defer func() {
		// Back to vfio-pci for the next run; unbinding e1000e removes
		// the interfaces from their namespaces.
		for _, a := range []pci.Address{o.a, o.b} {
			err = errors.Join(err, rebind(a, "vfio-pci"))
		}
	}()
	for _, a := range []pci.Address{o.a, o.b} {
		if err := rebind(a, "e1000e"); err != nil {
			return err
		}
	}
	x, err := setup(o.a, [4]byte{10, 9, 0, 1}, o.busyPollUS)
	if err != nil {
		return err
	}
	defer x.close()
	y, err := setup(o.b, [4]byte{10, 9, 0, 2}, o.busyPollUS)
	if err != nil {
		return err
	}
	defer y.close()
	// Frame = 14 Ethernet + 20 IP + 8 UDP + payload.
	if _, err := udpPing(x, y, 22, 50); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for range o.runs {
		for _, size := range o.rawSizes {
			rtt, err := udpPing(x, y, size-42, o.rounds)
			if err != nil {
				return err
			}
			addTurns(size, rtt.Seconds()*1e6/2)
		}
	}
	var stop atomic.Bool
	done := make(chan error, 1)
	go echo(y, &stop, done)
	var merr error
	for r := 0; r < o.runs && merr == nil; r++ {
		for _, size := range o.rawSizes {
			rtt, err := udpPingEcho(x, y, size-42, o.rounds)
			if err != nil {
				merr = err
				break
			}
			add(size, rtt.Seconds()*1e6/2)
		}
	}
	stop.Store(true)
	return errors.Join(merr, <-done)
}

// mmioRow is one raw-ping measurement's MMIO register accesses per
// reflected frame, counted in gomx's driver after the warm-up: the
// reflector's (NIC B; -1 when it is not gomx's, which the guest cannot
// count) and the pinger's (NIC A).
type mmioRow struct {
	reflector             string
	frames                float64
	reads, writes         float64
	pingReads, pingWrites float64
}

var mmioRows []mmioRow

func mmio(r mmioRow) { mmioRows = append(mmioRows, r) }

// printMMIO prints the MMIO accesses per frame of each reflector, averaged
// over the runs, beside what DPDK's em driver does for the same pattern
// (from its code: drivers/net/intel/e1000/em_rxtx.c; testpmd passes the
// em driver's rx_free_thresh of 0, so every receive burst that took a frame
// writes RDT, and every transmit burst writes TDT).
func printMMIO() {
	fmt.Printf("%s%-30s %12s %12s %12s %12s\n", Marker, "MMIO per reflected frame", "refl reads", "refl writes", "ping reads", "ping writes")
	for _, who := range []string{"gomx", "testpmd"} {
		var r mmioRow
		n := 0
		for _, m := range mmioRows {
			if m.reflector == who {
				r.reads += m.reads
				r.writes += m.writes
				r.pingReads += m.pingReads
				r.pingWrites += m.pingWrites
				n++
			}
		}
		if n == 0 {
			continue
		}
		f := float64(n)
		refl := [2]string{fmt.Sprintf("%.3f", r.reads/f), fmt.Sprintf("%.3f", r.writes/f)}
		if r.reads < 0 {
			refl = [2]string{"0 (code)", "2 (code)"}
		}
		fmt.Printf("%s%-30s %12s %12s %12.3f %12.3f\n", Marker, who+" reflector", refl[0], refl[1], r.pingReads/f, r.pingWrites/f)
	}
}
