package emulated

import (
	"encoding/binary"
	"runtime"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/dsahw"
)

// The DSA model's execution: the portals a descriptor is written to (64
// bytes at a time into a WQ), the device's engine goroutine that serves
// the enabled WQs in turn, the operations it executes (memory move, fill,
// compare, CRC, batches), and the completion record, page faults and
// software errors it reports, with the interrupt a descriptor asks for.
// Registers and commands are in dsa_regs.go; the platform and the
// device's state in dsa.go.

// portalWrite takes a 64-byte write at BAR2 offset off.
func (d *dsaDevice) portalWrite(bar, off int, rec *[64]byte) {
	if bar != 2 {
		d.violation("64-byte write to BAR%d %#x: descriptors go to the BAR2 portals", bar, off)
		return
	}
	wqi, page := off/dsahw.PortalStride, off%dsahw.PortalStride/dsahw.PortalPage
	d.qmu.Lock()
	defer d.qmu.Unlock()
	if page != 0 {
		d.nDrop.Add(1)
		d.violation("descriptor written to WQ %d's portal page %d: the model offers only the unlimited portal (page 0)", wqi, page)
		return
	}
	wq := &d.wqs[wqi]
	switch {
	case d.state != dsahw.StateEnabled || !wq.enabled:
		d.nDrop.Add(1)
		d.violation("descriptor written to WQ %d's portal with the device %s and the WQ %s: dropped", wqi, dsahw.StateName(d.state), map[bool]string{true: "enabled", false: "disabled"}[wq.enabled])
		return
	case !wq.dedicated:
		d.nDrop.Add(1)
		d.violation("MOVDIR64B to shared WQ %d: shared WQs take ENQCMD only; dropped", wqi)
		return
	case wq.qN == wq.size:
		// A posted write past the WQ's free entries is dropped without a
		// trace on hardware; the model records it.
		d.nDrop.Add(1)
		d.violation("descriptor written to full dedicated WQ %d (%d entries in flight): dropped; keep at most the WQ size outstanding", wqi, wq.size)
		return
	}
	d.queueLocked(wq, rec)
}

// queueLocked puts rec at the tail of wq, which has room, and wakes the
// engine if it had nothing queued; under qmu.
func (d *dsaDevice) queueLocked(wq *dsaWQ, rec *[64]byte) {
	wq.q[(wq.qHead+wq.qN)%wq.size] = *rec
	wq.qN++
	if d.work.Add(1) == 1 {
		d.kick()
	}
}

// kick wakes the engine goroutine if it is parked; a wake already pending
// does for this one too.
func (d *dsaDevice) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// portalAccess is a register-width access to BAR2: the portals take only
// 64-byte writes.
func (d *dsaDevice) portalAccess(off, w int, write bool) uint64 {
	if write {
		d.nDrop.Add(1)
		d.violation("%d-byte write to portal BAR2 %#x: portals take 64-byte writes (MOVDIR64B) only; dropped", w, off)
		return 0
	}
	return ^uint64(0) >> (64 - 8*w)
}

// run is the device's engine: it executes queued descriptors, spinning a
// while when idle, then parking until a portal write wakes it.
func (d *dsaDevice) run() {
	defer close(d.done)
	for !d.stopping.Load() {
		if d.work.Load() > 0 && !d.paused.Load() {
			d.mu.Lock()
			for n := 0; n < 64 && d.stepLocked(); n++ {
			}
			d.mu.Unlock()
			continue
		}
		deadline := time.Now().Add(d.o.Spin)
		for i := 0; (d.work.Load() == 0 || d.paused.Load()) && !d.stopping.Load(); i++ {
			if i&63 == 63 {
				if time.Now().After(deadline) {
					select {
					case <-d.wake:
					case <-time.After(defaultParkMax):
					}
					break
				}
				runtime.Gosched()
			}
		}
	}
}

// stepLocked executes one descriptor from the next WQ that has one, and
// reports whether there was one.
func (d *dsaDevice) stepLocked() bool {
	if d.state != dsahw.StateEnabled {
		return false
	}
	d.qmu.Lock()
	for k := 0; k < len(d.wqs); k++ {
		i := (d.next + k) % len(d.wqs)
		wq := &d.wqs[i]
		if !wq.enabled || wq.qN == 0 {
			continue
		}
		d.next = i + 1
		var desc dsahw.Descriptor
		desc.Decode(wq.q[wq.qHead][:])
		// The entry frees when an engine takes the descriptor, as on
		// hardware (WQ occupancy counts what waits for an engine), so
		// it is free before the completion record says so.
		wq.qHead = (wq.qHead + 1) % wq.size
		wq.qN--
		d.work.Add(-1)
		d.qmu.Unlock()
		d.execute(i, wq, &desc, false)
		return true
	}
	d.qmu.Unlock()
	return false
}

// allowedFlags are the descriptor flags the model accepts.
const allowedFlags = dsahw.FlagFence | dsahw.FlagCRAV | dsahw.FlagRCR | dsahw.FlagRCI | dsahw.FlagCC

// execute runs one descriptor of WQ wqi and writes its completion record;
// it returns the status. inBatch marks a member of a batch.
func (d *dsaDevice) execute(wqi int, wq *dsaWQ, desc *dsahw.Descriptor, inBatch bool) uint8 {
	d.nDesc.Add(1)
	d.executed++
	c := dsahw.Completion{Status: dsahw.StatusSuccess}
	injected := false
	for k, in := range d.inject {
		if in.at == d.executed-1 {
			d.inject = append(d.inject[:k], d.inject[k+1:]...)
			if in.hang {
				return dsahw.StatusNone
			}
			c.Status = in.status
			injected = true
			break
		}
	}
	switch {
	case injected:
		if c.Status == dsahw.StatusPageFault && desc.Op == dsahw.OpMemMove {
			half := desc.Size / 2
			d.move(desc.Dst, desc.Src, int(half), &c)
			c.Status, c.Bytes, c.Fault = dsahw.StatusPageFault, half, desc.Src+uint64(half)
		}
	case desc.Flags&^allowedFlags != 0 || desc.Flags&dsahw.FlagRCR != 0 && desc.Flags&dsahw.FlagCRAV == 0:
		c.Status = dsahw.StatusInvalidFlags
	case desc.Op > 0x3F || !dsahw.HasOp(d.opcap(), desc.Op) || inBatch && desc.Op == dsahw.OpBatch:
		c.Status = dsahw.StatusBadOpcode
	case desc.PASID != 0 && !d.o.SVA:
		c.Status = dsahw.StatusNonZeroRsvd // no PASID under VFIO
	case desc.Flags&dsahw.FlagCRAV != 0 && desc.Compl%dsahw.ComplAlign != 0:
		// The record cannot be written where asked: the error goes to
		// SWERR instead.
		d.swError(wqi, desc, dsahw.StatusCRAAlign, 0, inBatch)
		return dsahw.StatusCRAAlign
	default:
		d.run1(wqi, wq, desc, &c)
	}
	if !c.OK() {
		d.nErr.Add(1)
	}
	d.complete(wqi, desc, c, inBatch)
	return c.Status
}

// run1 executes a well-formed descriptor's operation into c.
func (d *dsaDevice) run1(wqi int, wq *dsaWQ, desc *dsahw.Descriptor, c *dsahw.Completion) {
	needsSize := desc.Op == dsahw.OpMemMove || desc.Op == dsahw.OpFill || desc.Op == dsahw.OpCompare || desc.Op == dsahw.OpCRCGen
	if needsSize && (desc.Size == 0 || uint64(desc.Size) > 1<<wq.xferShift) {
		c.Status = dsahw.StatusXferERange
		return
	}
	if needsSize {
		d.pace(int(desc.Size))
	}
	switch desc.Op {
	case dsahw.OpNoop, dsahw.OpDrain:
	case dsahw.OpMemMove:
		d.move(desc.Dst, desc.Src, int(desc.Size), c)
	case dsahw.OpFill:
		d.fill(desc.Dst, desc.Src, int(desc.Size), c)
	case dsahw.OpCompare:
		d.compare(desc.Src, desc.Dst, int(desc.Size), c)
	case dsahw.OpCRCGen:
		d.crc(desc.Src, int(desc.Size), binary.LittleEndian.Uint32(desc.OpSpec[:4]), c)
	case dsahw.OpBatch:
		d.batch(wqi, wq, desc, c)
	}
}

// pace holds a transfer of n bytes until the device's bandwidth cap says
// it is over; the data lands after it, so a driver that reads the
// destination before the completion record sees the old bytes. It keeps
// mu (commands wait for the transfer, as for any descriptor in flight)
// but not qmu, so portal writes go on.
func (d *dsaDevice) pace(n int) {
	limit := d.bwLimit.Load()
	if limit == 0 {
		limit = d.o.Bandwidth
	}
	if limit <= 0 {
		return
	}
	sleepUntil(d.bw.next(n, limit, time.Now()), &d.stopping)
}

// span translates [iova, iova+n) page by page; it returns the memory of
// the first piece, or how many bytes from iova are reachable when the
// range faults (ok false).
func (d *dsaDevice) span(iova uint64, n int, write bool) ([]byte, int, bool) {
	if b, ok := d.f.dom.translate(iova, n, write, &d.hint); ok {
		return b, n, true
	}
	done := 0
	for done < n {
		l := min(n-done, int(pageSize-(iova+uint64(done))%pageSize))
		if _, ok := d.f.dom.translate(iova+uint64(done), l, write, &d.hint); !ok {
			return nil, done, false
		}
		done += l
	}
	return nil, done, false // reachable page by page but not one mapping: treat the seam as a fault
}

// pageFault records a page fault: the first bytes done, then the address that
// failed.
func pageFault(c *dsahw.Completion, done int, at uint64, write bool) {
	c.Status, c.Bytes, c.Fault, c.Write = dsahw.StatusPageFault, uint32(done), at, write
}

func (d *dsaDevice) move(dst, src uint64, n int, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	s, sok, sOK := d.span(src, n, false)
	t, tok, tOK := d.span(dst, n, true)
	if sOK && tOK {
		copy(t, s)
		d.nBytes.Add(uint64(n))
		return
	}
	// Partial completion: the bytes both sides reach, page by page, then
	// the fault where the first of them stops.
	k := min(sok, tok)
	for done := 0; done < k; {
		l := min(k-done, int(pageSize-(src+uint64(done))%pageSize), int(pageSize-(dst+uint64(done))%pageSize))
		ps, _ := d.f.dom.translate(src+uint64(done), l, false, &d.hint)
		pt, _ := d.f.dom.translate(dst+uint64(done), l, true, &d.hint)
		copy(pt, ps)
		done += l
	}
	if sok <= tok {
		pageFault(c, k, src+uint64(k), false)
	} else {
		pageFault(c, k, dst+uint64(k), true)
	}
	d.nBytes.Add(uint64(k))
}

func (d *dsaDevice) fill(dst, pattern uint64, n int, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	var p [8]byte
	binary.LittleEndian.PutUint64(p[:], pattern)
	t, tok, ok := d.span(dst, n, true)
	if ok {
		for i := 0; i < len(t); i += copy(t[i:], p[:]) {
		}
		d.nBytes.Add(uint64(n))
		return
	}
	// Partial completion: the pages reachable before the fault, the
	// pattern continuing across them.
	for done := 0; done < tok; {
		l := min(tok-done, int(pageSize-(dst+uint64(done))%pageSize))
		pt, _ := d.f.dom.translate(dst+uint64(done), l, true, &d.hint)
		for i := range pt {
			pt[i] = p[(done+i)%8]
		}
		done += l
	}
	pageFault(c, tok, dst+uint64(tok), true)
	d.nBytes.Add(uint64(tok))
}

func (d *dsaDevice) compare(a, b uint64, n int, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	x, xok, ok1 := d.span(a, n, false)
	y, yok, ok2 := d.span(b, n, false)
	if ok1 && ok2 {
		if i := firstDiff(x, y); i >= 0 {
			c.Result, c.Bytes = 1, uint32(i)
			d.nBytes.Add(uint64(i))
			return
		}
		d.nBytes.Add(uint64(n))
		return
	}
	// Partial completion: the bytes both buffers reach, page by page; a
	// difference there completes the compare, else the fault where the
	// first of them stops.
	k := min(xok, yok)
	for done := 0; done < k; {
		l := min(k-done, int(pageSize-(a+uint64(done))%pageSize), int(pageSize-(b+uint64(done))%pageSize))
		px, _ := d.f.dom.translate(a+uint64(done), l, false, &d.hint)
		py, _ := d.f.dom.translate(b+uint64(done), l, false, &d.hint)
		if i := firstDiff(px, py); i >= 0 {
			c.Result, c.Bytes = 1, uint32(done+i)
			d.nBytes.Add(uint64(done + i))
			return
		}
		done += l
	}
	if xok <= yok {
		pageFault(c, k, a+uint64(k), false)
	} else {
		pageFault(c, k, b+uint64(k), false)
	}
	d.nBytes.Add(uint64(k))
}

// firstDiff returns the index of the first byte where x and y (of equal
// length) differ, or -1.
func firstDiff(x, y []byte) int {
	for i := range x {
		if x[i] != y[i] {
			return i
		}
	}
	return -1
}

// crc generates the CRC-32C of n bytes at src from seed. On a fault it
// reports the bytes done and their CRC in the record, from which the
// rest can go on.
func (d *dsaDevice) crc(src uint64, n int, seed uint32, c *dsahw.Completion) {
	d.f.dom.rlock()
	defer d.f.dom.runlock()
	s, sok, ok := d.span(src, n, false)
	if ok {
		c.CRC = uint64(dsahw.CRC32C(seed, s))
		d.nBytes.Add(uint64(n))
		return
	}
	crc := seed
	for done := 0; done < sok; {
		l := min(sok-done, int(pageSize-(src+uint64(done))%pageSize))
		p, _ := d.f.dom.translate(src+uint64(done), l, false, &d.hint)
		crc = dsahw.CRC32C(crc, p)
		done += l
	}
	pageFault(c, sok, src+uint64(sok), false)
	c.CRC = uint64(crc)
	d.nBytes.Add(uint64(sok))
}

// batch runs the descriptor list of a batch descriptor in order. Its own
// record reports the descriptors completed and, when any failed,
// StatusBatchFail.
func (d *dsaDevice) batch(wqi int, wq *dsaWQ, desc *dsahw.Descriptor, c *dsahw.Completion) {
	n := int(desc.Size)
	if n < 2 || n > 1<<wq.batchShift {
		c.Status = dsahw.StatusDescCntERange
		return
	}
	if desc.Src%dsahw.DescSize != 0 {
		c.Status = dsahw.StatusDescListAlign
		return
	}
	d.f.dom.rlock()
	l, ok := d.f.dom.translate(desc.Src, n*dsahw.DescSize, false, &d.hint)
	if ok {
		// The device reads the list once; later writes to it do not count.
		if cap(d.list) < len(l) {
			d.list = make([]byte, len(l))
		}
		copy(d.list[:len(l)], l)
	}
	list := d.list
	d.f.dom.runlock()
	if !ok {
		c.Status, c.Fault = dsahw.StatusBatchPageFlt, desc.Src
		return
	}
	failed := false
	var m dsahw.Descriptor
	for i := 0; i < n; i++ {
		m.Decode(list[i*dsahw.DescSize:])
		if m.Flags&dsahw.FlagFence != 0 && failed {
			// A fence stops the rest of the batch after a failure.
			c.Bytes = uint32(i)
			c.Status = dsahw.StatusBatchFail
			return
		}
		if s := d.execute(wqi, wq, &m, true); s != dsahw.StatusSuccess && s != dsahw.StatusSuccessPred {
			failed = true
		}
	}
	c.Bytes = uint32(n)
	if failed {
		c.Status = dsahw.StatusBatchFail
	}
}

// complete writes the completion record (when the descriptor asks for it
// or failed with an address to write to) and raises the interrupt.
func (d *dsaDevice) complete(wqi int, desc *dsahw.Descriptor, c dsahw.Completion, inBatch bool) {
	wantRec := desc.Flags&dsahw.FlagRCR != 0 || !c.OK() && desc.Flags&dsahw.FlagCRAV != 0
	if wantRec {
		d.f.dom.rlock()
		rec, ok := d.f.dom.translate(desc.Compl, dsahw.ComplSize, true, &d.hint)
		if ok {
			var b [dsahw.ComplSize]byte
			dsahw.EncodeCompletion(b[:], c)
			copy(rec[4:], b[4:])
			// The status word last, in one store: the driver polls it.
			// Publish comes first: a driver that sees the status must
			// find the release it acquires already made.
			dmasync.Publish()
			store32(rec, binary.LittleEndian.Uint32(b[:4]))
		}
		d.f.dom.runlock()
		if !ok {
			d.swError(wqi, desc, dsahw.StatusCRAXlat, desc.Compl, inBatch)
			return
		}
	} else if !c.OK() {
		// An error nobody asked a record for goes to SWERR.
		d.swError(wqi, desc, c.Status, c.Fault, inBatch)
		return
	}
	if desc.Flags&dsahw.FlagRCI != 0 {
		if desc.IntH == 0 || int(desc.IntH) > d.o.WQs {
			d.violation("completion interrupt handle %d: the vectors for completions are 1..%d (0 is for errors)", desc.IntH, d.o.WQs)
			return
		}
		d.raise(int(desc.IntH))
	}
}

// swError logs an error in SWERR (setting overflow if an entry is still
// valid) and raises vector 0 when GENCTRL asks.
func (d *dsaDevice) swError(wqi int, desc *dsahw.Descriptor, status uint8, addr uint64, inBatch bool) {
	d.nErr.Add(1)
	if d.swerr[0]&dsahw.SWErrValid != 0 {
		d.swerr[0] |= dsahw.SWErrOverflow
	} else {
		v := uint64(dsahw.SWErrValid|dsahw.SWErrDescValid|dsahw.SWErrWQIdxValid) | uint64(status)<<dsahw.SWErrCodeShift |
			uint64(wqi)<<dsahw.SWErrWQShift | uint64(desc.Op)<<dsahw.SWErrOpShift
		if inBatch {
			v |= dsahw.SWErrBatch
		}
		d.swerr = [4]uint64{v, 0, addr, 0}
	}
	d.intcause |= dsahw.IntCauseError
	if d.genctrl&dsahw.GenCtrlSoftErrIntEn != 0 {
		d.raise(0)
	}
}

func (d *dsaDevice) raise(v int) {
	if d.f.raise(v) {
		d.nIRQ.Add(1)
	}
}
