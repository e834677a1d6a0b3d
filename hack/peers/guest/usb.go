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
	fs.IntVar(&u.streamIters, "usb-stream-iterations", 2, "usb: mxbench stream --iterations")
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

// usbBench is one mxbench command of the table, for one size (each size
// runs on its own, so that a size the link cannot move within the timeout
// costs only its own row), and the figure it gives.
type usbBench struct {
	cmd   string
	size  int
	arg   string // the size as given to --sizes
	iters int
	extra []string
	unit  string
}

// value is the bench's figure in r: latency for pingpong, MB/s for stream;
// baseline is mxbench's plain UDP-socket figure (0 when absent).
func (b usbBench) value(r mxResult) float64 {
	if b.cmd == "pingpong" {
		return r.LatencyUS
	}
	return r.MBPerS
}

func (b usbBench) baseline(r mxResult) float64 {
	switch {
	case r.Baseline == nil:
		return 0
	case b.cmd == "pingpong":
		return r.Baseline.LatencyUS
	}
	return r.Baseline.MBPerS
}

func (b usbBench) args(transport ...string) []string {
	a := append([]string{b.cmd}, transport...)
	return append(append(a, "--sizes", b.arg, "--iterations", strconv.Itoa(b.iters)), b.extra...)
}

func usbBenches(u usbOptions) ([]usbBench, error) {
	common := []string{"--wait", "block", "--timeout", u.timeout.String()}
	var out []usbBench
	for _, c := range []struct {
		cmd, sizes, unit string
		iters            int
		extra            []string
	}{
		{"pingpong", u.pingSizes, "latency us", u.pingIters, append([]string{"--warmup", "5"}, common...)},
		{"stream", u.streamSizes, "MB/s", u.streamIters, append([]string{"--warmup", "1", "--window", strconv.Itoa(u.window)}, common...)},
	} {
		for _, f := range strings.Split(c.sizes, "/") {
			n, err := parseSize(f)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("size %q of %s: want a number with an optional K or M", f, c.cmd)
			}
			out = append(out, usbBench{cmd: c.cmd, size: n, arg: f, iters: c.iters, extra: c.extra, unit: c.unit})
		}
	}
	return out, nil
}

func runUSB(o options) error {
	start := time.Now()
	s := series{}
	benches, err := usbBenches(o.usb)
	if err != nil {
		return err
	}
	// failed holds, per cell, why it has no figure; a cell that failed
	// (most often: the link could not move the size within the timeout)
	// is not tried again.
	failed := map[string]error{}
	for i := range o.runs {
		for _, b := range benches {
			key := cell("gomx", b.cmd, b.size, false)
			if failed[key] != nil {
				continue
			}
			res, err := runMxbench(nil, b.args("--transport", "usb", "--usb", o.usb.dev+","+o.b.String(), "--baseline=false")...)
			if err != nil {
				fmt.Printf("peers: gomx: %v\n", err)
				failed[key] = err
				continue
			}
			for _, r := range res {
				s.add(key, b.value(r))
			}
		}
		if err := kernelUSB(o, benches, s, failed); err != nil {
			fmt.Printf("peers: kernel: %v\n", err)
			failed["kernel"] = err
			break
		}
		fmt.Printf("peers: run %d/%d done (%v)\n", i+1, o.runs, time.Since(start).Round(time.Second))
	}

	fmt.Printf("%sQEMU usb-net (CDC ECM, xHCI) cabled to an e1000e; mxbench --wait block; median of %d runs; guest clocksource %s\n", Marker, o.runs, clocksource())
	fmt.Printf("%s%-18s %6s %14s %16s %9s %16s\n", Marker, "", "bytes", "gomx usbnet", "kernel cdc_ether", "ratio", "kernel UDP")
	fmt.Printf("%s%-18s %6s %14s %16s %9s %16s\n", Marker, "", "", "+gomx e1000e", "+e1000e, mx/UDP", "gomx/krn", "sockets, no mx")
	for _, b := range benches {
		g, k := s.median(cell("gomx", b.cmd, b.size, false)), s.median(cell("kernel", b.cmd, b.size, false))
		base := s.median(cell("kernel", b.cmd, b.size, true))
		ratio := "-"
		if g > 0 && k > 0 {
			ratio = fmt.Sprintf("%.2f", g/k)
		}
		fmt.Printf("%s%-18s %6d %14s %16s %9s %16s\n", Marker, b.cmd+" "+b.unit, b.size, figure(g), figure(k), ratio, figure(base))
	}
	for _, b := range benches {
		for _, side := range []string{"gomx", "kernel"} {
			key := cell(side, b.cmd, b.size, false)
			var runs []string
			for _, v := range s[key] {
				runs = append(runs, strconv.FormatFloat(v, 'f', 2, 64))
			}
			if err := failed[key]; err != nil {
				runs = append(runs, "then FAILED: "+err.Error())
			}
			fmt.Printf("%sruns: %-6s %-8s %7d B: %s\n", Marker, side, b.cmd, b.size, strings.Join(runs, " "))
		}
	}
	if err := failed["kernel"]; err != nil {
		fmt.Printf("%skernel FAILED: %v\n", Marker, err)
	}
	fmt.Printf("%sratio: gomx / kernel (latency: below 1 is gomx faster; MB/s: above 1 is gomx faster); a size that failed (timeout %v) has no figure; guest wall %v\n", Marker, o.usb.timeout, time.Since(start).Round(time.Second))
	if failed["kernel"] != nil {
		return errors.New("the kernel's side failed; see above")
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
// over UDP: a server in NIC B's namespace, the client in the usb-net's. A
// size that fails is recorded in failed and not tried again; the error is
// the setup's.
func kernelUSB(o options, benches []usbBench, s series, failed map[string]error) (err error) {
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
		key := cell("kernel", b.cmd, b.size, false)
		if failed[key] != nil {
			continue
		}
		res, err := runMxbench(x.in, b.args("--transport", "udp", "--peer", addr)...)
		if err != nil {
			fmt.Printf("peers: kernel: %v\n", err)
			failed[key] = err
			continue
		}
		for _, r := range res {
			s.add(key, b.value(r))
			if v := b.baseline(r); v > 0 {
				s.add(cell("kernel", b.cmd, b.size, true), v)
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
