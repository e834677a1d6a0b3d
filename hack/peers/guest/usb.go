package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/kmodule"

	"github.com/gomx-dev/gomx/hack/qemu"
)

// The usb VM's measurements: mxbench pingpong and stream over gomx's USB
// driver (QEMU's usb-net, a CDC ECM function, through libusb) cabled to
// gomx's e1000e driver on NIC B (VFIO), then the same mxbench over UDP
// sockets with the kernel driving both devices (cdc_ether on the usb-net,
// e1000e on NIC B), each interface in a network namespace of its own so
// that the datagrams cross the cable. One table compares them.

// usbOptions are the usb VM's flags.
type usbOptions struct {
	dev         string // USB selector of the usb-net; "" runs the e1000e VM's measurements
	pingSizes   string
	pingIters   int
	streamSizes string
	streamIters int
	window      int
	timeout     time.Duration
}

func (u *usbOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&u.dev, "usb-device", "", "VID:PID or BUS:ADDR of the USB CDC function cabled to NIC B: measure gomx's USB driver beside cdc_ether instead of the e1000e peers")
	// The init splits its -run argument at commas, so the sizes come
	// separated by '/' and are given to mxbench with commas.
	fs.StringVar(&u.pingSizes, "usb-ping-sizes", "8/1K", "usb: mxbench pingpong --sizes, separated by '/'")
	fs.IntVar(&u.pingIters, "usb-ping-iterations", 100, "usb: mxbench pingpong --iterations")
	fs.StringVar(&u.streamSizes, "usb-stream-sizes", "64K/1M", "usb: mxbench stream --sizes, separated by '/'")
	fs.IntVar(&u.streamIters, "usb-stream-iterations", 4, "usb: mxbench stream --iterations")
	fs.IntVar(&u.window, "usb-window", 2, "usb: mxbench stream --window")
	fs.DurationVar(&u.timeout, "usb-timeout", 4*time.Minute, "usb: mxbench --timeout (each size, and connecting)")
}

// series are the per-run figures of one cell of the usb table.
type series map[string][]float64

func (s series) add(key string, v float64) { s[key] = append(s[key], v) }

func (s series) median(key string) float64 { return row{us: s[key]}.median() }

func cell(side, cmd string, size int, baseline bool) string {
	return fmt.Sprintf("%s/%s/%d/%v", side, cmd, size, baseline)
}

// usbBench is one mxbench command of the table and the figure it gives.
type usbBench struct {
	cmd, sizes string
	iters      int
	extra      []string
	value      func(r mxResult) float64
	baseline   func(r mxResult) float64
	unit       string
}

func usbBenches(u usbOptions) []usbBench {
	u.pingSizes = strings.ReplaceAll(u.pingSizes, "/", ",")
	u.streamSizes = strings.ReplaceAll(u.streamSizes, "/", ",")
	common := []string{"--wait", "block", "--timeout", u.timeout.String()}
	return []usbBench{
		{cmd: "pingpong", sizes: u.pingSizes, iters: u.pingIters, extra: append([]string{"--warmup", "5"}, common...),
			value: func(r mxResult) float64 { return r.LatencyUS }, unit: "latency us",
			baseline: func(r mxResult) float64 {
				if r.Baseline == nil {
					return 0
				}
				return r.Baseline.LatencyUS
			}},
		{cmd: "stream", sizes: u.streamSizes, iters: u.streamIters,
			extra: append([]string{"--warmup", "1", "--window", strconv.Itoa(u.window)}, common...),
			value: func(r mxResult) float64 { return r.MBPerS }, unit: "MB/s",
			baseline: func(r mxResult) float64 {
				if r.Baseline == nil {
					return 0
				}
				return r.Baseline.MBPerS
			}},
	}
}

func runUSB(o options) error {
	start := time.Now()
	s := series{}
	benches := usbBenches(o.usb)
	var sizes [][]int
	failed := map[string]error{}
	for i := range o.runs {
		for bi, b := range benches {
			if failed["gomx"] != nil {
				break
			}
			res, err := runMxbench(nil, append([]string{b.cmd, "--transport", "usb", "--usb", o.usb.dev + "," + o.b.String(),
				"--sizes", b.sizes, "--iterations", strconv.Itoa(b.iters), "--baseline=false"}, b.extra...)...)
			if err != nil {
				fmt.Printf("peers: gomx: %v\n", err)
				failed["gomx"] = err
				break
			}
			if len(sizes) <= bi {
				var sz []int
				for _, r := range res {
					sz = append(sz, r.Size)
				}
				sizes = append(sizes, sz)
			}
			for _, r := range res {
				s.add(cell("gomx", b.cmd, r.Size, false), b.value(r))
			}
		}
		if failed["kernel"] == nil {
			if err := kernelUSB(o, benches, s); err != nil {
				fmt.Printf("peers: kernel: %v\n", err)
				failed["kernel"] = err
			}
		}
		fmt.Printf("peers: run %d/%d done (%v)\n", i+1, o.runs, time.Since(start).Round(time.Second))
	}
	if len(sizes) < len(benches) {
		// gomx failed before a size list came: take the flags'.
		sizes = nil
		for _, b := range benches {
			var sz []int
			for _, f := range strings.Split(b.sizes, ",") {
				n, _ := parseSize(f)
				sz = append(sz, n)
			}
			sizes = append(sizes, sz)
		}
	}

	fmt.Printf("%sQEMU usb-net (CDC ECM, xHCI) cabled to an e1000e; mxbench --wait block; median of %d runs; guest clocksource %s\n", Marker, o.runs, clocksource())
	fmt.Printf("%s%-18s %6s %14s %16s %9s %16s\n", Marker, "", "bytes", "gomx usbnet", "kernel cdc_ether", "ratio", "kernel UDP")
	fmt.Printf("%s%-18s %6s %14s %16s %9s %16s\n", Marker, "", "", "+gomx e1000e", "+e1000e, mx/UDP", "gomx/krn", "sockets, no mx")
	for bi, b := range benches {
		for _, size := range sizes[bi] {
			g, k := s.median(cell("gomx", b.cmd, size, false)), s.median(cell("kernel", b.cmd, size, false))
			base := s.median(cell("kernel", b.cmd, size, true))
			ratio := "-"
			if g > 0 && k > 0 {
				ratio = fmt.Sprintf("%.2f", g/k)
			}
			fmt.Printf("%s%-18s %6d %14s %16s %9s %16s\n", Marker, b.cmd+" "+b.unit, size, figure(g), figure(k), ratio, figure(base))
		}
	}
	for bi, b := range benches {
		for _, size := range sizes[bi] {
			for _, side := range []string{"gomx", "kernel"} {
				var runs []string
				for _, v := range s[cell(side, b.cmd, size, false)] {
					runs = append(runs, strconv.FormatFloat(v, 'f', 2, 64))
				}
				fmt.Printf("%sruns: %-6s %-8s %7d B: %s\n", Marker, side, b.cmd, size, strings.Join(runs, " "))
			}
		}
	}
	for side, err := range failed {
		fmt.Printf("%s%s FAILED: %v\n", Marker, side, err)
	}
	fmt.Printf("%sratio: gomx / kernel (latency: below 1 is gomx faster; MB/s: above 1 is gomx faster); guest wall %v\n", Marker, time.Since(start).Round(time.Second))
	if len(failed) > 0 {
		return errors.New("a side failed; see above")
	}
	return nil
}

// figure formats a median, "-" for none.
func figure(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// parseSize reads 8, 1K, 1M.
func parseSize(s string) (int, error) {
	m := 1
	switch {
	case strings.HasSuffix(s, "K"):
		m, s = 1<<10, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		m, s = 1<<20, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.Atoi(s)
	return n * m, err
}

// kernelUSB hands both devices to the kernel (NIC B rebound to e1000e;
// cdc_ether took the usb-net back when mxbench closed it), puts each
// interface in a namespace of its own, and runs the benches as mxbench
// over UDP: a server in NIC B's namespace, the client in the usb-net's.
func kernelUSB(o options, benches []usbBench, s series) (err error) {
	p, err := kmodule.NewProber(kmodule.ProbeOpts{})
	if err != nil {
		return fmt.Errorf("reading modules.dep: %w", err)
	}
	if err := p.Probe("e1000e", ""); err != nil {
		return fmt.Errorf("loading e1000e: %w", err)
	}
	defer func() { err = errors.Join(err, qemu.BindDriver(o.b, "vfio-pci")) }()
	if err := qemu.BindDriver(o.b, "e1000e"); err != nil {
		return err
	}
	usbIf, err := driverNetdev("cdc_ether", 30*time.Second)
	if err != nil {
		return err
	}
	x, err := namespaced(usbIf, [4]byte{10, 9, 0, 1})
	if err != nil {
		return fmt.Errorf("%s: %w", usbIf, err)
	}
	defer x.close()
	nicIf, err := netdevOf(o.b)
	if err != nil {
		return err
	}
	y, err := namespaced(nicIf, [4]byte{10, 9, 0, 2})
	if err != nil {
		return fmt.Errorf("%s: %w", nicIf, err)
	}
	defer y.close()

	const addr = "10.9.0.2:7000"
	srv := exec.Command("/bin/mxbench", "serve", "--listen", addr, "--wait", "block", "--timeout", o.usb.timeout.String())
	srv.Stdout, srv.Stderr = os.Stdout, os.Stdout
	if err := y.in(srv.Start); err != nil {
		return fmt.Errorf("mxbench serve: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	defer func() {
		_ = srv.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
	}()
	for _, b := range benches {
		res, err := runMxbench(x.in, append([]string{b.cmd, "--transport", "udp", "--peer", addr,
			"--sizes", b.sizes, "--iterations", strconv.Itoa(b.iters)}, b.extra...)...)
		if err != nil {
			return err
		}
		for _, r := range res {
			s.add(cell("kernel", b.cmd, r.Size, false), b.value(r))
			if v := b.baseline(r); v > 0 {
				s.add(cell("kernel", b.cmd, r.Size, true), v)
			}
		}
	}
	return nil
}

// driverNetdev waits for the network interface of a device bound to the
// kernel driver drv and returns its name.
func driverNetdev(drv string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		ifs, _ := filepath.Glob("/sys/class/net/*")
		for _, i := range ifs {
			d, err := os.Readlink(filepath.Join(i, "device", "driver"))
			if err == nil && filepath.Base(d) == drv {
				return filepath.Base(i), nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no network interface of %s after %v (is the module loaded, did it take the device back?)", drv, wait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clocksource is the guest kernel's clocksource: tsc, or hpet when the
// kernel's watchdog found the TSC skewed (as it may under TCG on a loaded
// host), which makes every clock read an exit into QEMU.
func clocksource() string {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
