// Command init is PID 1 of the QEMU test guest (see package
// github.com/gomx-dev/gomx/hack/qemu). It is built static and put at /init
// in the initramfs.
//
// It mounts /proc, /sys, /dev and a hugetlbfs (u-root's libinit creators),
// loads the files given with -insmod, then the modules named by -modprobe
// together with their dependencies (u-root's kmodule, reading the
// modules.dep the host put in /lib/modules/RELEASE), reserves hugepages,
// binds QEMU's edu and e1000e devices to vfio-pci with the project's own
// vfio.Sysfs.Bind (and, with -nonviable, one edu behind the PCIe-to-PCI
// bridge to uio_pci_generic, so that its IOMMU group is not viable), waits
// (bounded) for each -wait-usb device to finish enumerating, since loading
// xhci_pci does not wait for that, then runs every /tests/PKG/PKG.test with -test.v in the directory of its
// package's testdata (or, with -run, that one program instead). Each binary is killed after -test-timeout. Output goes to the serial console; at the end the
// init prints one summary line (hack/qemu.SummaryMarker followed by JSON)
// and powers the machine off. Every step is bounded, and a panic in the
// init still powers off, so QEMU always exits.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/u-root/u-root/pkg/kmodule"
	"github.com/u-root/u-root/pkg/libinit"
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/hack/qemu"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

func main() {
	defer powerOff()
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("init: panic: %v\n", r)
		}
	}()
	if err := run(os.Args[1:]); err != nil {
		fmt.Printf("init: %v\n", err)
	}
}

// options are the init's flags, passed after "--" on the kernel command line.
type options struct {
	config      string
	insmod      []string
	modprobe    string
	hugepages   int
	bind        string
	nonviable   bool
	tests       string
	testTimeout time.Duration
	env         []string
	run         []string
	waitUSB     []qemu.USBWait
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.StringVar(&o.config, "config", "", "name of the boot configuration, for the summary")
	fs.Func("insmod", "`PATH[:PARAM=V[:...]]` of a module file to load first (repeatable)", func(s string) error {
		if !strings.HasPrefix(s, "/") {
			return fmt.Errorf("-insmod %q: want an absolute path to a .ko file", s)
		}
		o.insmod = append(o.insmod, s)
		return nil
	})
	fs.StringVar(&o.modprobe, "modprobe", "", "comma-separated modules to load with their dependencies from modules.dep")
	fs.IntVar(&o.hugepages, "hugepages", 64, "2 MiB hugepages to reserve")
	fs.StringVar(&o.bind, "bind", "1234:11e8,8086:10d3", "vendor:device IDs to bind to vfio-pci")
	fs.BoolVar(&o.nonviable, "nonviable", false, "bind one function of a shared IOMMU group to uio_pci_generic")
	fs.StringVar(&o.tests, "tests", "/tests", "directory of PKG/PKG.test binaries")
	fs.DurationVar(&o.testTimeout, "test-timeout", 150*time.Second, "kill a test binary after this long")
	fs.Func("env", "K=V to add to the tests' environment (repeatable)", func(s string) error {
		if !strings.Contains(s, "=") {
			return fmt.Errorf("-env %q: want K=V", s)
		}
		o.env = append(o.env, s)
		return nil
	})
	fs.Func("wait-usb", "`VID:PID[/DRIVER]` of a USB device to wait for (configured, its node in /dev, DRIVER holding an interface) before running anything (repeatable)", func(s string) error {
		w, err := qemu.ParseUSBWait(s)
		o.waitUSB = append(o.waitUSB, w)
		return err
	})
	fs.Func("run", "`PROG[,ARG...]` to run instead of the test binaries (bounded by -test-timeout)", func(s string) error {
		o.run = strings.Split(s, ",")
		if !strings.HasPrefix(o.run[0], "/") {
			return fmt.Errorf("-run %q: want an absolute path to a program", s)
		}
		return nil
	})
	return o, fs.Parse(args)
}

func run(args []string) error {
	start := time.Now()
	// Each setup step is printed as it ends and recorded for the summary.
	// PID 1 already writes to /dev/console, a node of the initramfs.
	var s qemu.Summary
	step := func(name string, err error) {
		st := qemu.Step{Name: name}
		if err != nil {
			st.Err = err.Error()
			fmt.Printf("init: FAIL %s: %v\n", name, err)
		} else {
			fmt.Printf("init: ok   %s\n", name)
		}
		s.Setup = append(s.Setup, st)
	}
	step("mount", mountAll())
	o, err := parseFlags(args)
	if err != nil {
		step("flags", err)
		printSummary(s)
		return err
	}
	s.Config = o.config
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		s.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	fmt.Printf("init: config %q, kernel %s, args %q\n", o.config, s.Kernel, args)

	loadModules(o, step)
	step(fmt.Sprintf("reserve %d hugepages", o.hugepages), reserveHugepages(o.hugepages))
	bindDevices(o, step)
	for _, w := range o.waitUSB {
		// The step's name is fixed, for a failure to read the same in
		// every run's summary; the time it took is a console line of
		// its own, printed just before the step's ok or FAIL line.
		t := time.Now()
		err := w.Wait(context.Background(), "/sys", "/dev", qemu.USBReadyTimeout)
		fmt.Printf("init: waited %v for USB device %s\n", time.Since(t).Round(time.Millisecond), w)
		step("wait for USB device "+w.String(), err)
	}
	fmt.Printf("init: setup took %v\n", time.Since(start).Round(time.Millisecond))

	if len(o.run) > 0 {
		s.Tests = []qemu.TestResult{runTest(o.run[0], o.run[1:], o)}
	} else {
		s.Tests = runTests(o)
	}
	printSummary(s)
	return nil
}

// mounts are the pseudo file systems the tests need. The kernel does not
// mount devtmpfs for an initramfs.
var mounts = []libinit.Creator{
	libinit.Mount{Source: "proc", Target: "/proc", FSType: "proc"},
	libinit.Mount{Source: "sysfs", Target: "/sys", FSType: "sysfs"},
	libinit.Mount{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs"},
	libinit.Mount{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs"},
	libinit.Dir{Name: "/dev/hugepages", Mode: 0o755},
	libinit.Mount{Source: "hugetlbfs", Target: "/dev/hugepages", FSType: "hugetlbfs", Opts: "pagesize=2M"},
}

// mountAll creates mounts. libinit.Create would only log a failure; the
// summary needs it, so each creator runs here.
func mountAll() error {
	var errs []error
	for _, c := range mounts {
		if err := c.Create(); err != nil && !errors.Is(err, unix.EBUSY) {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

// loadModules loads each -insmod file, then each -modprobe module with the
// modules it depends on (in dependency order, independent ones at once). A
// module the kernel already has is fine: kmodule reads /proc/modules, so a
// vfio.ko loaded by -insmod stands in for the stock one.
func loadModules(o options, step func(string, error)) {
	for _, spec := range o.insmod {
		path, params, _ := strings.Cut(spec, ":")
		params = strings.ReplaceAll(params, ":", " ")
		step(strings.TrimSpace("load "+path+" "+params), insmod(path, params))
	}
	if o.modprobe == "" {
		return
	}
	p, err := kmodule.NewProber(kmodule.ProbeOpts{})
	if err != nil {
		step("read modules.dep", err)
		return
	}
	for _, name := range strings.Split(o.modprobe, ",") {
		step("modprobe "+name, p.Probe(strings.TrimSpace(name), ""))
	}
}

func insmod(path, params string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := kmodule.FileInit(f, params, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("finit_module: %w (see the kernel log above)", err)
	}
	return nil
}

func reserveHugepages(n int) error {
	const p = "/proc/sys/vm/nr_hugepages"
	if err := os.WriteFile(p, []byte(strconv.Itoa(n)), 0); err != nil {
		return err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if got, _ := strconv.Atoi(strings.TrimSpace(string(b))); got < n {
		return fmt.Errorf("%s is %d after writing %d: give the guest more memory", p, got, n)
	}
	return nil
}

// bindDevices hands the functions with the wanted IDs to vfio-pci. With
// -nonviable, the last of them in an IOMMU group shared with another goes
// to uio_pci_generic instead.
func bindDevices(o options, step func(string, error)) {
	ids := map[[2]uint16]bool{}
	for _, s := range strings.Split(o.bind, ",") {
		v, d, ok := strings.Cut(strings.TrimSpace(s), ":")
		vv, err1 := strconv.ParseUint(v, 16, 16)
		dd, err2 := strconv.ParseUint(d, 16, 16)
		if !ok || err1 != nil || err2 != nil {
			step("parse -bind", fmt.Errorf("%q is not vendor:device in hex", s))
			return
		}
		ids[[2]uint16{uint16(vv), uint16(dd)}] = true
	}
	sys := vfio.DefaultSysfs()
	fns, err := sys.Functions()
	if err != nil {
		step("list PCI functions", err)
		return
	}
	var want []vfio.Function
	groups := map[int][]vfio.Function{}
	for _, f := range fns {
		fmt.Printf("init: pci %s %04x:%04x class %06x driver %q group %d\n", f.Addr, f.Vendor, f.Device, f.Class, f.Driver, f.IOMMUGroup)
		if ids[[2]uint16{f.Vendor, f.Device}] {
			want = append(want, f)
			groups[f.IOMMUGroup] = append(groups[f.IOMMUGroup], f)
		}
	}
	busy := map[pci.Address]bool{}
	if o.nonviable {
		var shared []int
		for g, m := range groups {
			if g >= 0 && len(m) > 1 {
				shared = append(shared, g)
			}
		}
		sort.Ints(shared)
		if len(shared) == 0 {
			step("find a shared IOMMU group", errors.New("no IOMMU group holds two of the devices: is the pcie-pci-bridge with two edu devices there?"))
		} else {
			m := groups[shared[0]]
			busy[m[len(m)-1].Addr] = true
		}
	}
	for _, f := range want {
		if busy[f.Addr] {
			step("bind "+f.Addr.String()+" to uio_pci_generic", qemu.BindDriver(f.Addr, "uio_pci_generic"))
			continue
		}
		step("bind "+f.Addr.String()+" to vfio-pci", sys.Bind(f.Addr))
	}
}

// runTests runs every test binary under dir, one at a time.
func runTests(o options) []qemu.TestResult {
	bins, _ := filepath.Glob(filepath.Join(o.tests, "*", "*.test"))
	sort.Strings(bins)
	if len(bins) == 0 {
		return []qemu.TestResult{{Binary: o.tests, Exit: -1, Err: "no test binaries found"}}
	}
	var out []qemu.TestResult
	for _, b := range bins {
		args := []string{"-test.v", "-test.count=1", "-test.timeout=" + (o.testTimeout - 10*time.Second).String()}
		if pat, err := os.ReadFile(filepath.Join(filepath.Dir(b), qemu.TestRunFile)); err == nil {
			args = append(args, "-test.run="+strings.TrimSpace(string(pat)))
		}
		out = append(out, runTest(b, args, o))
	}
	return out
}

// runTest runs one test binary (or the -run program) with args in its
// directory, copying its output to the console while counting results, and
// kills it (and anything it started) when the timeout passes.
func runTest(bin string, args []string, o options) qemu.TestResult {
	r := qemu.TestResult{Binary: filepath.Base(bin), Exit: -1}
	fmt.Printf("init: === running %s\n", bin)
	start := time.Now()

	ctx, cancel := context.WithTimeout(context.Background(), o.testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(append(os.Environ(), "PATH=/bin", "HOME=/tmp", "TMPDIR=/tmp"), o.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var c qemu.Counter
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.Line(line)
			os.Stdout.WriteString(line + "\n")
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	r.Seconds = time.Since(start).Seconds()
	r.Passed, r.Failed, r.Skipped, r.Panicked = c.Passed, c.Failed, c.Skipped, c.Panicked
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.TimedOut = true
	case err == nil:
		r.Exit = 0
	case errors.As(err, &ee):
		r.Exit = ee.ExitCode()
	default:
		r.Err = err.Error()
	}
	fmt.Printf("init: === %s\n", r.Line())
	return r
}

// printSummary quiets the kernel's console messages, so that none splits
// the line, and prints the summary in one write.
func printSummary(s qemu.Summary) {
	_ = os.WriteFile("/proc/sys/kernel/printk", []byte("1"), 0)
	for _, t := range s.Tests {
		fmt.Printf("init: %s\n", t.Line())
	}
	os.Stdout.WriteString("\n" + qemu.FormatSummary(s) + "\n")
}

// powerOff syncs and powers the machine off; QEMU runs with -no-reboot, so
// it exits. If that fails, returning from PID 1 panics the kernel, and
// panic=-1 reboots, which also ends QEMU.
func powerOff() {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Printf("init: power off: %v\n", err)
	}
}
