package main

// The raw-frame ping: gomx's driver on NIC A pings a macswap reflector on
// NIC B (gomx's own, then DPDK's testpmd), counting the MMIO accesses of
// gomx's driver per reflected frame.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/nicdrv"
	"github.com/gomx-dev/gomx/nicdrv/e1000e"
	"github.com/gomx-dev/gomx/nicdrv/nictest"
	"github.com/gomx-dev/gomx/pci"
	"github.com/gomx-dev/gomx/vfio"
)

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
