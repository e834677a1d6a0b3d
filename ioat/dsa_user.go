package ioat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/ioat/idxd"
	"github.com/gomx-dev/gomx/pci"
)

// The kernel path: a DSA the idxd driver owns, reached through one of its
// work queues of type "user" (what accel-config or `ioatctl dsa-config`
// sets up). The device is configured and enabled by the kernel; the
// process maps the WQ's portal page from /dev/dsa/wqD.Q and writes
// descriptors carrying its own virtual addresses (shared virtual memory,
// the kernel having bound the process's address space to a PASID). The
// WQ is the same *WQ as under VFIO, with a different portal and address
// space: Submit, Poll, batches and completion records are shared, so the
// Engine drives both alike (NewEngineQueues).
//
// Two things differ. A shared WQ takes ENQCMD, which the WQ may refuse
// when full (retried, bounded, then left for the next Poll). And the
// device reaches pageable process memory, so a descriptor can stop at a
// page that is not present: its completion record says page fault, how
// many bytes were done, the address and whether it was a write. The
// driver touches that page (as the CPU would fault it in) and re-runs the
// rest of the descriptor from there, byte-exact, in the same WQ entry,
// before any later request of the WQ is reported.

// Portal is a kernel-owned work queue's submission page: the 4 KiB a
// process maps from the WQ's character device (or the model's,
// emulated.DSAPortal). Write64B posts a descriptor with MOVDIR64B (a
// dedicated WQ); Enqueue submits it with ENQCMD (a shared WQ) and reports
// whether the WQ accepted it.
type Portal interface {
	Write64B(rec *[64]byte)
	Enqueue(rec *[64]byte) bool
	Close() error
}

// UserOptions configures OpenUserWQ.
type UserOptions struct {
	// Options sets the ring size, timeouts and ring memory; Interrupts
	// must be off (user WQs complete by polling) and TakeOver does not
	// apply.
	Options
	// Sysfs is the sysfs root (default "/sys"); Dev the device directory
	// (default "/dev").
	Sysfs, Dev string
	// OpenPortal opens a WQ's portal. The default opens its character
	// device (path) and maps the portal page.
	OpenPortal func(path string, wq idxd.WQ) (Portal, error)
	// DMA is the address space the device reaches. The default is the
	// process's own (ProcessMemory); a model passes its platform's.
	DMA pci.DMA
}

// userWQ is what a WQ of the kernel path keeps of it.
type userWQ struct {
	portal Portal
	dev    idxd.Device
	wq     idxd.WQ
	dir    string // the WQ's sysfs directory, for messages
	leak   bool   // records may still be written: keep the ring mapped
}

// ErrNoUserWQ means no enabled work queue of type "user" is there to
// open; the error names what is configured and the command that fixes it.
var ErrNoUserWQ = errors.New("no usable DSA user work queue")

// FindUserWQs lists the DSA devices and work queues the idxd driver
// publishes under sysfs (default "/sys").
func FindUserWQs(sysfs string) ([]idxd.Device, error) {
	if sysfs == "" {
		sysfs = "/sys"
	}
	devs, err := idxd.Scan(sysfs)
	if errors.Is(err, idxd.ErrNoIDXD) {
		return nil, fmt.Errorf("ioat: %w%s", err, vfioHint(sysfs))
	}
	return devs, err
}

// vfioHint says which DSAs are bound to vfio-pci, whose user WQs the
// kernel cannot offer.
func vfioHint(sysfs string) string {
	ents, _ := os.ReadDir(filepath.Join(sysfs, "bus/pci/drivers/vfio-pci"))
	var held []string
	for _, e := range ents {
		if strings.Count(e.Name(), ":") != 2 {
			continue
		}
		dir := filepath.Join(sysfs, "bus/pci/devices", e.Name())
		v, _ := os.ReadFile(filepath.Join(dir, "vendor"))
		d, _ := os.ReadFile(filepath.Join(dir, "device"))
		var vid, did uint16
		if _, err := fmt.Sscanf(strings.TrimSpace(string(v)), "0x%x", &vid); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimSpace(string(d)), "0x%x", &did); err != nil {
			continue
		}
		if vid == dsahw.VendorIntel && dsahw.Devices[did] != "" {
			held = append(held, e.Name())
		}
	}
	if len(held) == 0 {
		return ""
	}
	return fmt.Sprintf("; the DSA %s is bound to vfio-pci: open it through VFIO (ioatctl copy --device %s), or give it back to idxd for user WQs (sudo ioatctl unbind %s). Since Linux 6.9 vfio-pci refuses 8086:0b25 unless booted with vfio-pci.disable_denylist=1",
		strings.Join(held, ", "), held[0], held[0])
}

// OpenUserWQ opens the kernel's user work queue name ("wq0.0" or
// "dsa0/wq0.0"; "" picks the first enabled one) and returns it as a WQ an
// Engine can drive. It checks what the kernel path needs and fails naming
// the fix: the idxd driver loaded, a WQ of type "user" configured and
// enabled (ioatctl dsa-config), the device enabled with PASID (shared
// virtual memory), permission on /dev/dsa/wqD.Q, and ENQCMD for a shared
// WQ. It then maps the portal and runs a no-op through the WQ.
func OpenUserWQ(name string, o UserOptions) (_ *WQ, err error) {
	if err := o.Options.fill(); err != nil {
		return nil, err
	}
	if o.Interrupts {
		return nil, fmt.Errorf("ioat: a user work queue completes by polling only (the idxd driver gives user space no completion interrupts): open without Interrupts: %w", ErrBadRequest)
	}
	if o.Sysfs == "" {
		o.Sysfs = "/sys"
	}
	if o.Dev == "" {
		o.Dev = "/dev"
	}
	if o.OpenPortal == nil {
		o.OpenPortal = openCharDev
	}
	if o.DMA == nil {
		o.DMA = ProcessMemory()
	}
	devs, err := FindUserWQs(o.Sysfs)
	if err != nil {
		return nil, err
	}
	dev, wq, err := pickUserWQ(devs, name)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(o.Sysfs, idxd.DevicesDir, wq.Name)
	switch {
	case dev.State != "enabled":
		return nil, fmt.Errorf("ioat: %s: %w: the device is %s: enable it (sudo ioatctl dsa-config %s, or accel-config enable-device %s)", wq.Name, ErrNoUserWQ, dev.State, dev.Name, dev.Name)
	case !dev.PASIDEnabled:
		return nil, fmt.Errorf("ioat: %s: %w: %s has no PASID (pasid_enabled 0), so its user WQs cannot take process addresses: boot with the IOMMU in scalable mode (intel_iommu=on,sm_on) so idxd enables shared virtual memory, or use the device through VFIO: %w",
			wq.Name, ErrNoUserWQ, dev.Name, pci.ErrNotSupported)
	case wq.Size <= 0:
		return nil, fmt.Errorf("ioat: %s: %w: the WQ has size 0", wq.Name, ErrNoUserWQ)
	case !dev.HasOp(dsahw.OpMemMove) || !dev.HasOp(dsahw.OpNoop):
		return nil, fmt.Errorf("ioat: %s: %s's op_cap lacks memory move or no-op: %w", wq.Name, dev.Name, pci.ErrNotSupported)
	}
	portal, err := o.OpenPortal(wq.CharDev(o.Dev), *wq)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			portal.Close()
		}
	}()
	var addr pci.Address
	if dev.PCI != "" {
		addr, _ = pci.ParseAddress(dev.PCI)
	}
	d := &dsaDevice{addr: addr, name: dsahw.Devices[dsahw.DeviceSPR], opcap: dev.OpCap, cmdTO: o.ResetTimeout}
	maxXfer := int(min(wq.MaxTransferSize, 1<<31))
	if maxXfer < 4096 {
		return nil, fmt.Errorf("ioat: %s: max_transfer_size %d is below a page: set it with ioatctl dsa-config", wq.Name, wq.MaxTransferSize)
	}
	q := &WQ{d: d, idx: wq.Index, opts: o.Options, wqSize: uint64(wq.Size), maxXfer: maxXfer,
		maxBatch: int(max(min(wq.MaxBatchSize, 1024), 1)), dma: o.DMA, shared: !wq.Dedicated(),
		user: &userWQ{portal: portal, dev: *dev, wq: *wq, dir: dir}, now: time.Now}
	q.info = Info{Addr: addr, Index: wq.Index, Channels: len(dev.WQs), Platform: hw.Platform("DSA (kernel " + dev.Name + "/" + wq.Name + ")"),
		MaxTransfer: maxXfer, Fill: dev.HasOp(dsahw.OpFill),
		Compare: dev.HasOp(dsahw.OpCompare), CRC: dev.HasOp(dsahw.OpCRCGen), RingSize: o.RingSize}
	if err := q.allocRing(); err != nil {
		return nil, err
	}
	if err := q.selfStart(); err != nil {
		q.closing = true
		q.freeRing()
		return nil, err
	}
	return q, nil
}

// pickUserWQ finds the WQ to open, or says what is configured instead.
func pickUserWQ(devs []idxd.Device, name string) (*idxd.Device, *idxd.WQ, error) {
	const fix = "configure one with: sudo ioatctl dsa-config (or accel-config config-wq --type=user, then enable-wq)"
	if len(devs) == 0 {
		return nil, nil, fmt.Errorf("ioat: %w: the idxd driver lists no DSA device", ErrNoUserWQ)
	}
	if name != "" {
		dev, wq, ok := idxd.Find(devs, name)
		switch {
		case !ok:
			return nil, nil, fmt.Errorf("ioat: %w: no work queue %q under /sys/bus/dsa/devices (user WQs: %s)", ErrNoUserWQ, name, describeUser(devs))
		case wq.Type != "user":
			return nil, nil, fmt.Errorf("ioat: %s: %w: its type is %q, not \"user\": %s", wq.Name, ErrNoUserWQ, wq.Type, fix)
		case wq.State != "enabled":
			return nil, nil, fmt.Errorf("ioat: %s: %w: the WQ is %s: enable it (sudo ioatctl dsa-config, or accel-config enable-wq %s/%s)", wq.Name, ErrNoUserWQ, wq.State, dev.Name, wq.Name)
		}
		return dev, wq, nil
	}
	for i := range devs {
		for j := range devs[i].WQs {
			if w := &devs[i].WQs[j]; w.Type == "user" && w.State == "enabled" {
				return &devs[i], w, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("ioat: %w: no enabled work queue of type user (user WQs: %s): %s", ErrNoUserWQ, describeUser(devs), fix)
}

func describeUser(devs []idxd.Device) string {
	var parts []string
	for _, w := range idxd.UserWQs(devs) {
		parts = append(parts, w.Name+" "+w.State)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// portalOpenErr turns a failure to open a WQ's character device into one
// that names the fix.
func portalOpenErr(path string, wq idxd.WQ, err error) error {
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("ioat: %s: no permission on %s: run as root, or give your user the device (sudo chown $USER %s; the kernel creates it root's): %w", wq.Name, path, path, err)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("ioat: %s: %w: %s does not exist although sysfs lists the WQ enabled: is udev running, or /dev mounted elsewhere (UserOptions.Dev)?", wq.Name, ErrNoUserWQ, path)
	}
	return fmt.Errorf("ioat: %s: open %s: %w", wq.Name, path, err)
}

// toucher is a DMA domain that is an address space whose pages can be
// brought in: the process's own (ProcessMemory), or a model's
// (emulated.IOMMU with SVA).
type toucher interface {
	Touch(addr uint64, write bool) error
}

// resume handles a completed unit of the kernel path whose descriptors
// a page fault cut short: it touches each faulting page, rewrites the
// descriptor to do the rest, and re-runs those one at a time in the
// unit's entry. It reports whether the unit is still running (true) or
// done, its failures marked (false); a unit without a fault is left to
// Poll (false).
func (q *WQ) resume(ui uint64, st uint8) bool {
	u := &q.units[ui]
	rec := q.urecs[ui*dsahw.ComplSize:]
	ok := st == dsahw.StatusSuccess || st == dsahw.StatusSuccessPred
	switch {
	case u.redo:
		k := q.redo[0]
		if st == dsahw.StatusPageFault {
			// The re-run faulted again, further on.
			if q.redoTries++; q.redoTries > maxFaultTries {
				c, _ := dsahw.DecodeCompletion(rec)
				q.failFrom(k, &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[k&q.mask].op], Status: c.Status, Bytes: c.Bytes, Fault: c.Fault, Write: c.Write,
					Touch: fmt.Errorf("still faulting after %d resumptions", maxFaultTries)})
			} else if q.fixFault(k, rec) {
				q.repost(ui)
				return true
			}
		}
		if !ok && st != dsahw.StatusPageFault {
			c, _ := dsahw.DecodeCompletion(rec)
			q.failFrom(k, q.descErr(k, c))
		}
		q.redo = q.redo[:copy(q.redo, q.redo[1:])]
		q.redoTries = 0
	case st == dsahw.StatusPageFault && u.n == 1:
		if q.fixFault(u.first, rec) {
			q.redo = append(q.redo, u.first)
		}
		u.redo = true
	case st == dsahw.StatusBatchFail && u.n > 1:
		for k := u.first; k < u.first+u.n; k++ {
			mr := q.recs[(k&q.mask)*dsahw.ComplSize:]
			switch ms := uint8(load32(mr)) & dsahw.ComplStatusMask; {
			case ms == dsahw.StatusPageFault:
				if q.fixFault(k, mr) {
					q.redo = append(q.redo, k)
				}
			case ms != dsahw.StatusNone && ms != dsahw.StatusSuccess && ms != dsahw.StatusSuccessPred:
				mc, _ := dsahw.DecodeCompletion(mr)
				q.failFrom(k, q.descErr(k, mc))
			}
		}
		u.redo = true
	default:
		return false
	}
	if len(q.redo) == 0 {
		return false
	}
	q.repost(ui)
	return true
}

// maxFaultTries bounds the page faults one descriptor may take after its
// first: each resumes past the bytes done, so a descriptor faults at most
// once per page it spans unless its pages are taken away again meanwhile.
const maxFaultTries = 64

// fixFault brings in the page a descriptor faulted on and rewrites ring
// descriptor k to do the rest; it fails the request (false) when the page
// cannot be had.
func (q *WQ) fixFault(k uint64, rec []byte) bool {
	c, _ := dsahw.DecodeCompletion(rec)
	i := k & q.mask
	b := q.ring[i*dsahw.DescSize : i*dsahw.DescSize+dsahw.DescSize]
	le := binary.LittleEndian
	size := le.Uint32(b[dsahw.DescOffSize:])
	fail := func(why error) bool {
		q.failFrom(k, &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[i].op], Status: c.Status, Bytes: c.Bytes, Fault: c.Fault, Write: c.Write, Touch: why})
		return false
	}
	t, can := q.dma.(toucher)
	switch {
	case !can:
		return fail(fmt.Errorf("the DMA domain cannot bring pages in: %w", pci.ErrNotSupported))
	case c.Bytes >= size:
		return fail(fmt.Errorf("the device reported %d of %d bytes done with a fault", c.Bytes, size))
	}
	if err := t.Touch(c.Fault, c.Write); err != nil {
		return fail(err)
	}
	q.stats.PageFaults++
	op := uint8(le.Uint32(b[dsahw.DescOffFlags:]) >> 24)
	src := le.Uint64(b[dsahw.DescOffSrc:])
	if op == dsahw.OpFill {
		src = bits.RotateLeft64(src, -8*int(c.Bytes%8)) // the pattern goes on where it stopped
	} else {
		src += uint64(c.Bytes)
	}
	le.PutUint64(b[dsahw.DescOffSrc:], src)
	switch op {
	case dsahw.OpCRCGen:
		// The rest continues from the CRC of the bytes done; the
		// destination field is unused.
		if c.Bytes > 0 {
			le.PutUint64(b[dsahw.DescOffCRCSeed:], uint64(uint32(c.CRC)))
		}
	case dsahw.OpCompare:
		q.slots[i].off += uint64(c.Bytes) // the bytes done compared equal
		fallthrough
	default:
		le.PutUint64(b[dsahw.DescOffDst:], le.Uint64(b[dsahw.DescOffDst:])+uint64(c.Bytes))
	}
	le.PutUint32(b[dsahw.DescOffSize:], size-c.Bytes)
	le.PutUint32(q.recs[i*dsahw.ComplSize:], 0)
	return true
}

// repost writes redo[0] to the WQ as a single descriptor in unit ui's
// entry; on a shared WQ that refuses it, the unit waits and Poll tries
// again. It reports whether the WQ took it.
func (q *WQ) repost(ui uint64) bool {
	u := &q.units[ui]
	k := q.redo[0]
	le := binary.LittleEndian
	copy(q.rec[:], q.ring[(k&q.mask)*dsahw.DescSize:][:dsahw.DescSize])
	f := le.Uint32(q.rec[dsahw.DescOffFlags:])
	le.PutUint32(q.rec[dsahw.DescOffFlags:], f|dsahw.FlagCRAV|dsahw.FlagRCR)
	le.PutUint64(q.rec[dsahw.DescOffCompl:], q.urecIOVA[ui])
	le.PutUint32(q.urecs[ui*dsahw.ComplSize:], 0)
	u.waiting = !q.write()
	if !u.waiting {
		q.stats.Doorbells++
		q.stats.Retried++
		q.stall = 0
	}
	return !u.waiting
}

// sharedFull is the watchdog of a shared WQ that refuses every ENQCMD
// while none of this WQ's descriptors are in it: other users keep it
// full. After Options.Watchdog of that, what waits to be posted fails
// (matching ErrStalled), so no caller waits forever; later requests try
// again.
func (q *WQ) sharedFull() {
	if q.uHead != q.uTail {
		q.fullSince = time.Time{} // ours will complete and free entries
		return
	}
	if q.fullSince.IsZero() {
		q.fullSince = q.now()
		return
	}
	if q.now().Sub(q.fullSince) < q.opts.Watchdog {
		return
	}
	err := opErr(q.d.addr, "enqcmd", fmt.Errorf("%w: shared %s refused every ENQCMD for %v with none of this process's descriptors in it: other users keep it full; use a dedicated WQ (sudo ioatctl dsa-config --mode dedicated) or a larger one",
		ErrStalled, q.user.wq.Name, q.opts.Watchdog))
	for k := q.posted; k < q.head; k++ {
		q.failFrom(k, err)
	}
	q.stats.Watchdogs++
	q.stats.Completed += q.head - q.posted
	q.tail, q.posted = q.head, q.head
	q.fullSince = time.Time{}
}

// userStall is the watchdog of the kernel path: the WQ completed nothing
// for Options.Watchdog. User space cannot abort a kernel-owned WQ, so the
// WQ fails what it holds and takes no more work; its ring stays mapped,
// since the device may still write records into it.
func (q *WQ) userStall() {
	if q.stall&63 != 0 || q.now().Sub(q.stallAt) < q.opts.Watchdog {
		return
	}
	q.stats.Watchdogs++
	e := &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[q.tail&q.mask].op], Stalled: true, Waited: q.opts.Watchdog, Kernel: true}
	for k := q.tail; k < q.posted; k++ {
		q.failFrom(k, e)
	}
	q.broken = opErr(q.d.addr, "recover", fmt.Errorf("%w: %s completed nothing for %v: the device may have halted (see %s/state); the kernel owns it: disable and enable the WQ again (sudo ioatctl dsa-config, or accel-config), then reopen it",
		ErrChannelBroken, q.user.wq.Name, q.opts.Watchdog, filepath.Dir(q.user.dir)+"/"+q.user.dev.Name))
	for k := q.posted; k < q.head; k++ {
		q.failFrom(k, q.broken)
	}
	q.stats.Completed += q.head - q.tail
	q.tail, q.posted = q.head, q.head
	q.uTail = q.uHead
	q.redo = q.redo[:0]
	q.user.leak = true
	q.stall = 0
}

// closeUser closes a WQ of the kernel path: it stops posting, waits
// (bounded by Options.Watchdog) for what the device holds, fails what is
// left with ErrClosed, unmaps the portal and frees the ring. The WQ stays
// configured and enabled: the kernel owns it.
func (q *WQ) closeUser() error {
	q.closing = true
	w := startWait(q.opts.Watchdog)
	for q.uTail < q.uHead && !q.user.leak && !w.expired() {
		q.Poll(nil)
		if q.uTail < q.uHead {
			time.Sleep(time.Microsecond)
		}
	}
	drained := q.uTail == q.uHead && !q.user.leak
	q.closed = true
	for k := q.tail; k < q.head; k++ {
		q.failFrom(k, opErr(q.d.addr, "request", ErrClosed))
	}
	q.tail, q.posted = q.head, q.head
	err := q.user.portal.Close()
	if !drained {
		return errors.Join(err, fmt.Errorf("ioat: %s: close: the device still held descriptors after %v, ring memory left mapped", q.user.wq.Name, q.opts.Watchdog))
	}
	q.freeRing()
	return err
}

func (q *WQ) domain() pci.DMA { return q.dma }
