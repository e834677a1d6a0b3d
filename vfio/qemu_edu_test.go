package vfio

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/pci"
)

// Registers of QEMU's edu device (hw/misc/edu.c, docs/specs/edu.rst), BAR0.
// The DMA registers take 4 or 8-byte accesses.
const (
	eduRegID        = 0x00 // 0x010000ed: major 1, minor 0, "ed"
	eduRegLiveness  = 0x04 // reads back the bitwise complement of what was written
	eduRegIRQStatus = 0x24
	eduRegIRQRaise  = 0x60 // writing v ORs v into the status and raises the interrupt
	eduRegIRQAck    = 0x64 // writing v clears v from the status
	eduRegDMASrc    = 0x80
	eduRegDMADst    = 0x88
	eduRegDMACount  = 0x90
	eduRegDMACmd    = 0x98

	eduCmdRun   = 1 << 0 // start; the device clears it when done
	eduCmdToRAM = 1 << 1 // direction: 0 RAM -> edu buffer, 1 edu buffer -> RAM
	eduCmdIRQ   = 1 << 2 // raise eduIRQDMA on completion

	eduIRQDMA = 0x100 // status bit of a finished DMA

	// eduBuf is the device's 4 KiB DMA buffer, reachable only by DMA at
	// these bus addresses of the device itself.
	eduBuf     = 0x40000
	eduBufSize = 4096
)

// edu is one opened edu function.
type edu struct {
	d    *Device
	regs pci.Registers
}

// eduOptions is the container window for edu: its DMA mask is 28 bits (in
// the IOMMU configurations; without an IOMMU QEMU runs it with a 64-bit
// mask, and IOVAs are physical addresses anyway).
func eduOptions(o Options) Options {
	if !o.NoIOMMU {
		o.IOVABase, o.IOVALimit = 1<<20, 1<<28
	}
	return o
}

// openEdu opens the first edu function in a container of its own and
// checks its identity and liveness registers.
func openEdu(t *testing.T) (*Container, *edu) {
	t.Helper()
	o, fns := qemuFunctions(t, "edu", eduVendor, eduDevice, 1)
	c, devs := openAll(t, eduOptions(o), fns[0].Addr)
	regs, err := devs[0].BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	if id := regs.Read32(eduRegID); id != 0x010000ed {
		t.Fatalf("edu ID register = %#x, want 0x010000ed", id)
	}
	regs.Write32(eduRegLiveness, 0x12345678)
	if v := regs.Read32(eduRegLiveness); v != ^uint32(0x12345678) {
		t.Fatalf("edu liveness register = %#x after writing 0x12345678, want %#x", v, ^uint32(0x12345678))
	}
	return c, &edu{d: devs[0], regs: regs}
}

// dmaRegion allocates a 2 MiB hugepage and maps it in c, as one segment.
// The test's cleanup unmaps it (unless the test did) and frees it.
func dmaRegion(t *testing.T, c *Container) (*hugepage.Region, *pci.Mapping) {
	t.Helper()
	region, err := hugepage.Alloc(2<<20, hugepage.Options{NoFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { region.Close() })
	m, err := c.Map(region.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Segments) != 1 {
		t.Fatalf("a 2 MiB hugepage mapped as %d segments, want 1", len(m.Segments))
	}
	t.Cleanup(func() {
		if err := c.Unmap(m); err != nil && !errors.Is(err, pci.ErrNotMapped) {
			t.Errorf("Unmap: %v", err)
		}
	})
	return region, m
}

// start programs one DMA transfer and starts it.
func (e *edu) start(src, dst uint64, n int, cmd uint64) {
	e.regs.Write64(eduRegDMASrc, src)
	e.regs.Write64(eduRegDMADst, dst)
	e.regs.Write64(eduRegDMACount, uint64(n))
	e.regs.Write64(eduRegDMACmd, cmd|eduCmdRun)
}

// wait polls the command register until the device clears RUN. The
// transfer runs off a 100 ms timer of the emulated machine.
func (e *edu) wait(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for e.regs.Read64(eduRegDMACmd)&eduCmdRun != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("edu DMA still running after %v (command register %#x)", timeout, e.regs.Read64(eduRegDMACmd))
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// dma runs one transfer to completion.
func (e *edu) dma(t *testing.T, src, dst uint64, n int, cmd uint64) {
	t.Helper()
	e.start(src, dst, n, cmd)
	if err := e.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// fill writes a pattern that differs for every seed and offset.
func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = seed ^ byte(i*7+i>>8)
	}
}

// TestQEMUEduDMA copies 256 bytes from hugepage memory into the edu's
// buffer and back to another place in the hugepage, by the device's own
// DMA through the IOMMU (or, without one, to physical addresses), and
// compares the bytes.
func TestQEMUEduDMA(t *testing.T) {
	c, e := openEdu(t)
	region, m := dmaRegion(t, c)
	buf := region.Bytes()
	const n, srcOff, dstOff = 256, 0x1000, 0x3000
	fill(buf[srcOff:srcOff+n], 0x5a)
	clear(buf[dstOff : dstOff+n])
	src, _, err := m.IOVA(srcOff)
	if err != nil {
		t.Fatal(err)
	}
	dst, _, err := m.IOVA(dstOff)
	if err != nil {
		t.Fatal(err)
	}
	mode := "IOVA"
	if c.NoIOMMU() {
		mode = "physical address"
		if p, err := region.Phys(srcOff); err != nil || p != src {
			t.Fatalf("no-IOMMU mapping gives %#x for offset %#x, pagemap says %#x (%v)", src, srcOff, p, err)
		}
	}
	e.dma(t, src, eduBuf, n, 0)
	e.dma(t, eduBuf, dst, n, eduCmdToRAM)
	if !bytes.Equal(buf[dstOff:dstOff+n], buf[srcOff:srcOff+n]) {
		t.Fatalf("edu round trip RAM(%s %#x) -> device -> RAM(%#x): bytes differ\n got % x\nwant % x",
			mode, src, dst, buf[dstOff:dstOff+32], buf[srcOff:srcOff+32])
	}
	t.Logf("edu DMA round trip of %d bytes through %s %#x -> buffer -> %#x", n, mode, src, dst)
}

// TestQEMUEduInterrupt enables the edu's MSI vector on an eventfd and sees
// it fire twice: once raised by a register write, once by a finished DMA.
func TestQEMUEduInterrupt(t *testing.T) {
	c, e := openEdu(t)
	region, m := dmaRegion(t, c)
	info := e.d.Info()
	if info.IRQs[IRQIndexMSI].Count < 1 {
		t.Fatalf("edu reports %d MSI vectors, want 1", info.IRQs[IRQIndexMSI].Count)
	}
	irqs, err := e.d.EnableInterrupts(1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.d.DisableInterrupts(); err != nil {
			t.Errorf("DisableInterrupts: %v", err)
		}
	}()
	if n := irqs[0].Poll(); n != 0 {
		t.Errorf("%d interrupts pending before any was raised", n)
	}
	e.regs.Write32(eduRegIRQRaise, 0x1)
	n, err := irqs[0].WaitTimeout(10 * time.Second)
	if err != nil || n == 0 {
		t.Fatalf("no MSI on the eventfd within 10 s of raising one (got %d, %v)", n, err)
	}
	if st := e.regs.Read32(eduRegIRQStatus); st != 0x1 {
		t.Errorf("interrupt status = %#x, want 0x1", st)
	}
	e.regs.Write32(eduRegIRQAck, 0x1)

	// A DMA with the IRQ flag: wait on the eventfd instead of polling.
	buf := region.Bytes()
	fill(buf[:64], 0x33)
	src, _, err := m.IOVA(0)
	if err != nil {
		t.Fatal(err)
	}
	e.start(src, eduBuf, 64, eduCmdIRQ)
	n, err = irqs[0].WaitTimeout(10 * time.Second)
	if err != nil || n == 0 {
		t.Fatalf("no MSI within 10 s of a DMA with the interrupt flag (got %d, %v)", n, err)
	}
	if st := e.regs.Read32(eduRegIRQStatus); st&eduIRQDMA == 0 {
		t.Errorf("interrupt status = %#x after a DMA, want bit %#x", st, eduIRQDMA)
	}
	if cmd := e.regs.Read64(eduRegDMACmd); cmd&eduCmdRun != 0 {
		t.Errorf("command register %#x: DMA still running after its completion interrupt", cmd)
	}
	e.regs.Write32(eduRegIRQAck, eduIRQDMA)
}

// TestQEMUEduDMABlocked checks that the IOMMU stops a device at an IOVA
// that is not mapped: after Unmap, the edu writes to the IOVA where the
// buffer was. The data must not land in the (still allocated) buffer, the
// guest kernel must log a DMAR fault for the device at that address, and
// the device must still work afterwards.
func TestQEMUEduDMABlocked(t *testing.T) {
	o, _ := qemuFunctions(t, "edu", eduVendor, eduDevice, 1)
	if o.NoIOMMU {
		t.Skip("no-IOMMU mode: nothing stops a device's DMA, so there is no fault to observe")
	}
	c, e := openEdu(t)
	region, m := dmaRegion(t, c)
	// A second mapping shows that the device still works after the fault.
	spare, sm := dmaRegion(t, c)
	buf := region.Bytes()
	const n, off = 128, 0x2000
	iova, _, err := m.IOVA(off)
	if err != nil {
		t.Fatal(err)
	}
	// Load the device's buffer with a pattern, by DMA while still mapped.
	fill(buf[off:off+n], 0xa5)
	e.dma(t, iova, eduBuf, n, 0)
	fill(buf[off:off+n], 0x00)
	want := append([]byte(nil), buf[off:off+n]...)

	if err := c.Unmap(m); err != nil {
		t.Fatal(err)
	}
	if err := c.Unmap(m); !errors.Is(err, pci.ErrNotMapped) {
		t.Errorf("second Unmap = %v, want ErrNotMapped", err)
	}

	log := openKmsg(t)
	dev := fmt.Sprintf("[%02x:%02x.%d]", e.d.Address().Bus, e.d.Address().Device, e.d.Address().Function)
	e.dma(t, eduBuf, iova, n, eduCmdToRAM)
	fault := log.waitFor(func(msg string) bool {
		if !strings.Contains(msg, "DMAR") || !strings.Contains(msg, dev) {
			return false
		}
		addr, ok := faultAddr(msg)
		return ok && addr>>12 == iova>>12
	}, 10*time.Second)
	if fault == "" {
		t.Errorf("no DMAR fault for device %s at IOVA %#x in the kernel log within 10 s", dev, iova)
	} else {
		t.Logf("kernel: %s", fault)
	}
	if !bytes.Equal(buf[off:off+n], want) {
		t.Errorf("a DMA to the unmapped IOVA %#x reached the buffer behind it", iova)
	}

	// The device is not wedged: the same transfer to a mapped IOVA lands.
	sbuf := spare.Bytes()
	clear(sbuf[:n])
	siova, _, err := sm.IOVA(0)
	if err != nil {
		t.Fatal(err)
	}
	e.dma(t, eduBuf, siova, n, eduCmdToRAM)
	fill(want, 0xa5)
	if !bytes.Equal(sbuf[:n], want) {
		t.Errorf("after the fault, a DMA to mapped IOVA %#x did not land: got % x", siova, sbuf[:16])
	}
}

// faultAddr parses "fault addr 0x800000" out of a DMAR fault message.
func faultAddr(msg string) (uint64, bool) {
	_, rest, ok := strings.Cut(msg, "fault addr ")
	if !ok {
		return 0, false
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
	return v, err == nil
}
