package vfio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/gomx-dev/gomx/pci"
)

// The few registers and descriptor bits of the 82574L (QEMU's e1000e) that a
// polled, register-level send and receive needs: legacy descriptors, no
// interrupts, no offloads. A full driver is a later issue.
const (
	e1000eCTRL   = 0x0000
	e1000eSTATUS = 0x0008
	e1000eICR    = 0x00c0 // interrupt cause read (clears on read)
	e1000eICS    = 0x00c8 // interrupt cause set
	e1000eIMS    = 0x00d0 // interrupt mask set
	e1000eIMC    = 0x00d8 // interrupt mask clear
	e1000eIVAR   = 0x00e4 // MSI-X vector of each cause
	e1000eRCTL   = 0x0100
	e1000eTCTL   = 0x0400
	e1000eTIPG   = 0x0410
	e1000eRDBAL  = 0x2800
	e1000eRDBAH  = 0x2804
	e1000eRDLEN  = 0x2808
	e1000eRDH    = 0x2810
	e1000eRDT    = 0x2818
	e1000eTDBAL  = 0x3800
	e1000eTDBAH  = 0x3804
	e1000eTDLEN  = 0x3808
	e1000eTDH    = 0x3810
	e1000eTDT    = 0x3818
	e1000eRAL0   = 0x5400
	e1000eRAH0   = 0x5404

	e1000eIcrRXQ0     = 1 << 20 // receive queue 0 cause
	e1000eIvarValid   = 1 << 3  // IVAR entry valid; bits 2:0 are the vector
	e1000eIvarRXQ0Vec = 0       // IVAR bits 3:0 hold receive queue 0's entry

	e1000eCtrlSLU  = 1 << 6 // set link up
	e1000eStatusLU = 1 << 1 // link up

	e1000eRctlEN    = 1 << 1
	e1000eRctlUPE   = 1 << 3 // unicast promiscuous
	e1000eRctlMPE   = 1 << 4 // multicast promiscuous
	e1000eRctlBAM   = 1 << 15
	e1000eRctlSECRC = 1 << 26 // strip the Ethernet CRC

	e1000eTctlEN   = 1 << 1
	e1000eTctlPSP  = 1 << 3 // pad short packets
	e1000eTctlCT   = 0x0f << 4
	e1000eTctlCOLD = 0x3f << 12

	// Legacy descriptors are 16 bytes: TX {addr u64, len u16, cso u8,
	// cmd u8, status u8, css u8, special u16}; RX {addr u64, len u16,
	// csum u16, status u8, errors u8, special u16}.
	e1000eDescSize    = 16
	e1000eTxCmdEOP    = 1 << 0
	e1000eTxCmdIFCS   = 1 << 1 // insert the CRC
	e1000eTxCmdRS     = 1 << 3 // report status (write DD back)
	e1000eStatusDD    = 1 << 0 // descriptor done (TX and RX)
	e1000eRxStatusEOP = 1 << 1
	e1000eRxBufSize   = 2048 // RCTL.BSIZE 00
)

// TestQEMUE1000eFrame sends one Ethernet frame from NIC A's transmit DMA
// and finds it, by NIC B's receive DMA, in B's receive buffer in hugepage
// memory. Both NICs share one container, so one mapping serves both: the
// rings and buffers of A and B live in the same 2 MiB hugepage.
func TestQEMUE1000eFrame(t *testing.T) {
	o, fns := qemuFunctions(t, "e1000e", e1000eVendor, e1000eDevice, 2)
	c, devs := openAll(t, o, fns[0].Addr, fns[1].Addr)
	region, m := dmaRegion(t, c)
	mem := region.Bytes()
	// Layout in the hugepage.
	const (
		txRing  = 0x0000 // 8 descriptors (the ring length must be a multiple of 128 bytes)
		txBuf   = 0x1000
		rxRing  = 0x2000 // 16 descriptors
		rxBufs  = 0x10000
		txCount = 8
		rxCount = 16
	)
	iova := func(off int) uint64 {
		a, n, err := m.IOVA(off)
		if err != nil || n < e1000eRxBufSize {
			t.Fatalf("IOVA of offset %#x: %#x, %d contiguous bytes, %v", off, a, n, err)
		}
		return a
	}
	var regs [2]pci.Registers
	for i, d := range devs {
		r, err := d.BAR(0)
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = r
		r.Write32(e1000eIMC, 0xffffffff) // polled: no interrupts
		r.Write32(e1000eCTRL, r.Read32(e1000eCTRL)|e1000eCtrlSLU)
		t.Logf("%s: CTRL=%#08x STATUS=%#08x MAC %s", d.Address(), r.Read32(e1000eCTRL), r.Read32(e1000eSTATUS), macOf(r))
	}
	a, b := regs[0], regs[1]
	// The link is up from reset in QEMU; wait a little in case it is not.
	for _, r := range regs {
		deadline := time.Now().Add(5 * time.Second)
		for r.Read32(e1000eSTATUS)&e1000eStatusLU == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("STATUS.LU still 0 after 5 s (STATUS=%#x)", r.Read32(e1000eSTATUS))
			}
			time.Sleep(time.Millisecond)
		}
	}

	// NIC B: receive ring, every descriptor owning a 2 KiB buffer.
	clear(mem[:rxBufs+rxCount*e1000eRxBufSize])
	for i := range rxCount {
		d := mem[rxRing+i*e1000eDescSize:]
		binary.LittleEndian.PutUint64(d, iova(rxBufs+i*e1000eRxBufSize))
	}
	b.Write32(e1000eRCTL, 0)
	rx := iova(rxRing)
	b.Write32(e1000eRDBAL, uint32(rx))
	b.Write32(e1000eRDBAH, uint32(rx>>32))
	b.Write32(e1000eRDLEN, rxCount*e1000eDescSize)
	b.Write32(e1000eRDH, 0)
	b.Write32(e1000eRDT, 0)
	b.Write32(e1000eRCTL, e1000eRctlEN|e1000eRctlUPE|e1000eRctlMPE|e1000eRctlBAM|e1000eRctlSECRC)
	b.Write32(e1000eRDT, rxCount-1) // hand all but one descriptor to the NIC

	// NIC A: one frame, broadcast, a local experimental ethertype.
	frame := make([]byte, 80)
	for i := range 6 {
		frame[i] = 0xff
	}
	copy(frame[6:12], macBytes(a))
	binary.BigEndian.PutUint16(frame[12:], 0x88b5)
	copy(frame[14:], "gomx: e1000e A --TX DMA--> wire --> e1000e B RX DMA")
	copy(mem[txBuf:], frame)
	td := mem[txRing : txRing+e1000eDescSize]
	binary.LittleEndian.PutUint64(td[0:], iova(txBuf))
	binary.LittleEndian.PutUint16(td[8:], uint16(len(frame)))
	td[11] = e1000eTxCmdEOP | e1000eTxCmdIFCS | e1000eTxCmdRS
	td[12] = 0
	tx := iova(txRing)
	a.Write32(e1000eTCTL, 0)
	a.Write32(e1000eTDBAL, uint32(tx))
	a.Write32(e1000eTDBAH, uint32(tx>>32))
	a.Write32(e1000eTDLEN, txCount*e1000eDescSize)
	a.Write32(e1000eTDH, 0)
	a.Write32(e1000eTDT, 0)
	a.Write32(e1000eTIPG, 8|8<<10|6<<20)
	a.Write32(e1000eTCTL, e1000eTctlEN|e1000eTctlPSP|e1000eTctlCT|e1000eTctlCOLD)
	a.Write32(e1000eTDT, 1) // doorbell: descriptor 0 is the NIC's

	if err := pollByte(mem, txRing+12, e1000eStatusDD, 10*time.Second); err != nil {
		t.Fatalf("NIC A transmit descriptor: %v (TDH=%d TDT=%d)", err, a.Read32(e1000eTDH), a.Read32(e1000eTDT))
	}
	rd := rxRing // the first receive descriptor
	if err := pollByte(mem, rd+12, e1000eStatusDD, 10*time.Second); err != nil {
		t.Fatalf("NIC B receive descriptor: %v (RDH=%d RDT=%d)", err, b.Read32(e1000eRDH), b.Read32(e1000eRDT))
	}
	n := int(binary.LittleEndian.Uint16(mem[rd+8:]))
	status, errs := mem[rd+12], mem[rd+13]
	if status&e1000eRxStatusEOP == 0 || errs != 0 {
		t.Errorf("receive descriptor status %#x errors %#x, want EOP and no errors", status, errs)
	}
	got := mem[rxBufs : rxBufs+n]
	if !bytes.Equal(got, frame) {
		t.Fatalf("NIC B received %d bytes by DMA, want the %d sent by NIC A\n got % x\nwant % x", n, len(frame), got, frame)
	}
	t.Logf("frame of %d bytes sent by %s's DMA landed in %s's hugepage buffer at %s %#x: %q",
		n, devs[0].Address(), devs[1].Address(), map[bool]string{true: "physical address", false: "IOVA"}[c.NoIOMMU()], iova(rxBufs), got[14:66])

	// Stop both before the memory goes: receive and transmit off.
	b.Write32(e1000eRCTL, 0)
	a.Write32(e1000eTCTL, 0)
}

// pollByte waits until mem[off]&bit is set by a device's DMA. The sleep is
// a call the compiler cannot see through, so mem[off] is loaded afresh on
// every iteration.
func pollByte(mem []byte, off int, bit byte, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for mem[off]&bit == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("bit %#x of byte %#x not set by the device within %v", bit, off, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// macBytes reads the NIC's MAC address from receive address register 0.
func macBytes(r pci.Registers) []byte {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], r.Read32(e1000eRAL0))
	binary.LittleEndian.PutUint32(b[4:], r.Read32(e1000eRAH0))
	return b[:6]
}

func macOf(r pci.Registers) string {
	b := macBytes(r)
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5])
}

// TestQEMUE1000eInterrupt enables one MSI-X vector on NIC A, routes the
// receive-queue-0 cause to it (IVAR), sets that cause by software (ICS) and
// sees the eventfd fire.
func TestQEMUE1000eInterrupt(t *testing.T) {
	o, fns := qemuFunctions(t, "e1000e", e1000eVendor, e1000eDevice, 1)
	_, devs := openAll(t, o, fns[0].Addr)
	d := devs[0]
	if n := d.Info().IRQs[IRQIndexMSIX].Count; n < 1 {
		t.Fatalf("e1000e reports %d MSI-X vectors, want at least 1", n)
	}
	r, err := d.BAR(0)
	if err != nil {
		t.Fatal(err)
	}
	r.Write32(e1000eIMC, 0xffffffff)
	_ = r.Read32(e1000eICR) // clear what is pending
	irqs, err := d.EnableInterrupts(1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.DisableInterrupts(); err != nil {
			t.Errorf("DisableInterrupts: %v", err)
		}
	}()
	// QEMU 7.2 throttles MSI-X vectors with at least a 128 µs interval
	// whatever EITR says: every message arms a timer, and a timer that
	// expires after MSI-X is disabled trips an assertion that kills the VM
	// (e1000e_intrmgr_on_msix_throttling_timer). So interrupts are disabled
	// only well after the last message; see the end of the test.
	r.Write32(e1000eIVAR, e1000eIvarValid<<e1000eIvarRXQ0Vec) // vector 0
	r.Write32(e1000eIMS, e1000eIcrRXQ0)
	r.Write32(e1000eICS, e1000eIcrRXQ0)
	n, err := irqs[0].WaitTimeout(10 * time.Second)
	if err != nil || n == 0 {
		t.Fatalf("no MSI-X on the eventfd within 10 s of setting a cause (got %d, %v; ICR=%#x)", n, err, r.Read32(e1000eICR))
	}
	r.Write32(e1000eIMC, 0xffffffff)
	if icr := r.Read32(e1000eICR); icr&e1000eIcrRXQ0 == 0 {
		t.Errorf("ICR = %#x after the interrupt, want the receive queue 0 cause %#x", icr, e1000eIcrRXQ0)
	}
	// Let QEMU's throttling timer of the vector expire (128 µs of virtual
	// time) before the deferred DisableInterrupts turns MSI-X off.
	time.Sleep(200 * time.Millisecond)
}
