// Package peers measures gomx beside its peers on the same emulated
// hardware, in one QEMU boot: the e1000e pair of hack/qemu's machine, driven
// in turn by gomx (mx over the VFIO e1000e transport, and a raw-frame ping),
// by DPDK's testpmd as a macswap reflector, and by the kernel's e1000e
// driver with busy-polling UDP sockets. `make peers-e1000e` (the script
// hack/peers/e1000e) runs it. `make peers-usb` boots the usb machine
// instead ([USBConfig]) and compares mxbench over gomx's USB driver with
// mxbench over UDP through the kernel's cdc_ether driver.
//
// # Why one VM
//
// Under TCG every figure depends on how busy the host is, so figures from
// different boots do not compare. Here the peers take turns within one
// guest, each measurement is repeated several times, and the table reports
// the median of the runs: the ratios between rows are what carries over.
//
// # How
//
// The host side is hack/qemu's: it builds an initramfs with the same init
// and boots a configuration of its own ([Config], not one of qemu.Configs,
// so `make qemu-test` is unchanged). The image carries, besides the init,
// the guest program (hack/peers/guest), mxbench, the e1000e kernel module
// (which the init does not load: the NICs start on vfio-pci), and DPDK's
// dpdk-testpmd with the shared libraries u-root's ldd names for it and for
// the three poll-mode drivers it needs (PCI bus, e1000, ring mempool).
// testpmd comes from the host's Debian packages (dpdk-dev and the PMD
// libraries), which [TestpmdFiles] installs with apt when missing.
//
// The raw ping is made alike for both reflectors: the pinger runs on a
// thread pinned to vCPU 0, and gomx's reflector on a thread pinned to
// vCPU 1, where testpmd runs its forwarding lcore; both reflectors take
// bursts of 32 from rings of 512 descriptors. The guest also counts, in
// gomx's driver, the register accesses per reflected frame (each an exit
// into QEMU's device model) and prints them under the timings, beside
// what DPDK's em driver does per frame by its code; unlike the timings,
// those counts do not depend on the host's load.
//
// The guest program prints its table on the console, each line starting
// with the guest's marker; [TableFilter] keeps those lines (and the host's
// progress) out of the rest of the console.
package peers

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/u-root/u-root/pkg/ldd"

	"github.com/gomx-dev/gomx/hack/qemu"
)

// Marker starts the guest program's table lines (hack/peers/guest).
const Marker = "PEERS| "

// Testpmd is where Debian's dpdk-dev puts testpmd, and PMDDir its poll-mode
// drivers.
const (
	Testpmd = "/usr/bin/dpdk-testpmd"
	PMDDir  = "/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0"
)

// PMDs are the poll-mode driver libraries testpmd needs for an 82574L on
// vfio-pci.
var PMDs = []string{"librte_bus_pci.so", "librte_net_e1000.so", "librte_mempool_ring.so"}

// Packages are the Debian packages that provide Testpmd and PMDs.
var Packages = []string{"dpdk-dev", "librte-net-e1000-23", "librte-mempool-ring23", "librte-bus-pci23"}

// Config is the peers VM: hack/qemu's IOMMU machine with two vCPUs (testpmd
// and the reflector poll on their own) and room for testpmd's hugepages.
func Config(runs int, guestArgs ...string) qemu.Config {
	return qemu.Config{
		Name: "peers-e1000e", SMP: 2, MemMiB: 2048, Hugepages: 256,
		Timeout: time.Duration(300+240*runs) * time.Second,
		Doc:     "the iommu machine with 2 vCPUs: mx, kernel UDP, gomx's and testpmd's reflectors on the e1000e pair",
		Run:     append([]string{"/bin/guest", fmt.Sprintf("-runs=%d", runs)}, guestArgs...),
	}
}

// USBConfig is the usb peers VM: hack/qemu's usb machine (QEMU's usb-net on
// an xHCI controller, cabled to NIC B alone), in which the guest program
// measures mxbench over gomx's USB driver and gomx's e1000e driver, then
// over UDP through the kernel's cdc_ether and e1000e drivers. TCG moves a
// few hundred frames a second through the usb-net at best, so the time
// allowed grows with the runs.
func USBConfig(runs int, guestArgs ...string) qemu.Config {
	return qemu.Config{
		Name: "peers-usb", SMP: 1, MemMiB: 1024, Hugepages: 48, USB: true,
		Timeout: time.Duration(240+600*runs) * time.Second,
		Doc:     "the usb machine: mxbench over gomx's USB and e1000e drivers, then over UDP through cdc_ether and the kernel's e1000e",
		Run:     append([]string{"/bin/guest", fmt.Sprintf("-runs=%d", runs), "-usb-device=" + qemu.USBNetSelector, "-b=" + qemu.NICBAddr}, guestArgs...),
	}
}

// TestpmdFiles returns testpmd, the PMDs with their symbolic links, and
// every shared library they need (with the dynamic loader), installing the
// Debian packages first when testpmd is missing and install is set.
func TestpmdFiles(ctx context.Context, install bool, out io.Writer) ([]string, error) {
	if _, err := os.Stat(Testpmd); err != nil {
		if !install {
			return nil, fmt.Errorf("%s is missing: apt-get install %s", Testpmd, strings.Join(Packages, " "))
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "--no-install-recommends"}, Packages...)...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("apt-get install %s: %w", strings.Join(Packages, " "), err)
		}
	}
	roots := []string{Testpmd}
	var links []string
	for _, p := range PMDs {
		m, _ := filepath.Glob(filepath.Join(PMDDir, p+"*"))
		if len(m) == 0 {
			return nil, fmt.Errorf("no %s in %s: apt-get install %s", p, PMDDir, strings.Join(Packages, " "))
		}
		for _, f := range m {
			if fi, err := os.Lstat(f); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				links = append(links, f)
			} else {
				roots = append(roots, f)
			}
		}
	}
	files, err := ldd.List(roots...)
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", strings.Join(roots, " "), err)
	}
	seen := map[string]bool{}
	var all []string
	for _, f := range append(append(roots, links...), files...) {
		if !seen[f] {
			seen[f] = true
			all = append(all, f)
		}
	}
	return all, nil
}

// TableFilter is the console writer of a peers run: it passes the host's
// progress lines and the guest's table lines (without the console prefix),
// and keeps every other console line, which is in the serial log anyway.
// With Verbose set it passes everything.
type TableFilter struct {
	Out     io.Writer
	Verbose bool

	mu      sync.Mutex
	partial []byte
}

// Write passes the complete lines of p that the filter keeps.
func (f *TableFilter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partial = append(f.partial, p...)
	for {
		i := bytes.IndexByte(f.partial, '\n')
		if i < 0 {
			break
		}
		line := string(f.partial[:i])
		f.partial = f.partial[i+1:]
		if out, ok := Keep(line, f.Verbose); ok {
			fmt.Fprintln(f.Out, out)
		}
	}
	return len(p), nil
}

// Report ends a peers command's output (qemu.Options.Report): the table
// was streamed already, so for each VM only how long it ran, beside the
// wall time since start of the whole run, and its problems, each line
// named by cmd.
func Report(cmd string, start time.Time) func([]qemu.BootResult) string {
	return func(rs []qemu.BootResult) string {
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "%s: VM %s in %.0fs (wall of the whole run %.0fs)", cmd, r.Config.Name, r.Wall.Seconds(), time.Since(start).Seconds())
			for _, p := range r.Problems {
				fmt.Fprintf(&b, "\n  problem: %s", p)
			}
		}
		return b.String()
	}
}

// Keep decides what TableFilter prints for one line: the table line
// without the console's "[config time]" prefix, a guest line that says a
// phase ended or failed, a host line, or (verbose) any line.
func Keep(line string, verbose bool) (string, bool) {
	if i := strings.Index(line, Marker); i >= 0 {
		return line[i+len(Marker):], true
	}
	if !strings.HasPrefix(line, "[") || verbose {
		return line, true
	}
	for _, s := range []string{"] peers: ", "] init: FAIL", "] init: === "} {
		if strings.Contains(line, s) {
			return line, true
		}
	}
	return "", false
}

// Install makes sure the host has what a host-side peer run needs: every
// program in programs on PATH and every file in files. When one is
// missing it installs pkgs from Debian as root with install set (saying so
// on stderr, prefixed by tool), and otherwise fails naming what is missing
// and the apt-get line that brings it.
func Install(ctx context.Context, stderr io.Writer, tool string, install bool, programs, files, pkgs []string) error {
	var missing []string
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, filepath.Base(f))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if !install || os.Geteuid() != 0 {
		return fmt.Errorf("%s missing: apt-get install %s", strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	fmt.Fprintf(stderr, "%s: installing %s\n", tool, strings.Join(pkgs, " "))
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	return nil
}
