package ioat

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/dsahw"
	"github.com/gomx-dev/gomx/pci"
)

// A DSA work queue's data path: enqueue builds descriptors in the ring,
// Submit posts them to the portal (single descriptors or batches, never
// more than the WQ's size in flight), Poll reads the completion records,
// marks failures, runs the watchdog and reports requests in order. Open,
// configuration and Close are in dsa.go; the kernel path's page-fault
// resumption in dsa_user.go.

// Free returns how many descriptors can be enqueued now.
func (q *WQ) Free() int { return int(q.size - 1 - (q.head - q.tail)) }

// Outstanding returns how many descriptors are enqueued and not yet
// reported by Poll.
func (q *WQ) Outstanding() int { return int(q.head - q.reaped) }

func (q *WQ) usable() error {
	if !q.closed && q.broken == nil {
		return nil // inlined: the fast path of every enqueue
	}
	return q.unusable()
}

func (q *WQ) unusable() error {
	if q.closed {
		return opErr(q.d.addr, "enqueue", ErrClosed)
	}
	return q.broken
}

// EnqueueCopy adds a memory move of n bytes from src at srcOff to dst at
// dstOff, split at the transfer limit and at IOVA discontinuities, as
// Channel.EnqueueCopy does. Nothing runs until Submit.
func (q *WQ) EnqueueCopy(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if err := checkRange("copy destination", dst, dstOff, n); err != nil {
		return err
	}
	if err := checkRange("copy source", src, srcOff, n); err != nil {
		return err
	}
	if n == 0 {
		return q.EnqueueNull(tag)
	}
	return q.enqueue(dsahw.OpMemMove, dst, dstOff, src, srcOff, n, 0, tag)
}

// EnqueueFill adds a fill of n bytes at dst/dstOff with the 64-bit
// pattern (byte i gets byte i%8), split like EnqueueCopy. It fails with
// ErrNoFill when OPCAP lacks memory fill.
func (q *WQ) EnqueueFill(dst *pci.Mapping, dstOff, n int, pattern uint64, tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if !q.info.Fill {
		return opErr(q.d.addr, "fill", ErrNoFill)
	}
	if err := checkRange("fill destination", dst, dstOff, n); err != nil {
		return err
	}
	if n == 0 {
		return q.EnqueueNull(tag)
	}
	return q.enqueue(dsahw.OpFill, dst, dstOff, nil, 0, n, pattern, tag)
}

// EnqueueCompare adds a compare of n bytes of a at aOff with b at bOff,
// split like EnqueueCopy. Its Completion says whether they differ and
// where (Differ, Offset: the first byte that differs). It fails with
// pci.ErrNotSupported when OPCAP lacks compare.
func (q *WQ) EnqueueCompare(a *pci.Mapping, aOff int, b *pci.Mapping, bOff, n int, tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if !q.info.Compare {
		return opErr(q.d.addr, "compare", fmt.Errorf("%w: the device's OPCAP lacks memory compare (opcode 0x05): compare on the CPU (bytes.Equal)", pci.ErrNotSupported))
	}
	if err := checkRange("compare first buffer", a, aOff, n); err != nil {
		return err
	}
	if err := checkRange("compare second buffer", b, bOff, n); err != nil {
		return err
	}
	if n == 0 {
		return q.EnqueueNull(tag)
	}
	return q.enqueueResult(dsahw.OpCompare, opCompare, a, aOff, b, bOff, n, 0, tag)
}

// EnqueueCRC adds a CRC-32C (Castagnoli) generation over n bytes of src
// at srcOff, continuing from seed as crc32.Update does (0 starts a fresh
// CRC). Its Completion carries the CRC. A request longer than one
// descriptor runs as several, the first from seed and the others from
// 0, and Poll combines their CRCs. It fails with pci.ErrNotSupported
// when OPCAP lacks CRC generation.
func (q *WQ) EnqueueCRC(src *pci.Mapping, srcOff, n int, seed uint32, tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if !q.info.CRC {
		return opErr(q.d.addr, "crc", fmt.Errorf("%w: the device's OPCAP lacks CRC generation (opcode 0x10): compute it on the CPU (hash/crc32)", pci.ErrNotSupported))
	}
	if err := checkRange("CRC source", src, srcOff, n); err != nil {
		return err
	}
	if n == 0 {
		if err := q.EnqueueNull(tag); err != nil {
			return err
		}
		s := &q.slots[(q.head-1)&q.mask]
		s.op, s.res = opCRC, seed // no descriptor runs: the CRC of nothing is the seed
		return nil
	}
	return q.enqueueResult(dsahw.OpCRCGen, opCRC, src, srcOff, nil, 0, n, seed, tag)
}

// pieces counts the descriptors n bytes at aOff of a (and bOff of b, when
// set) take, each within the transfer limit and IOVA-contiguous on both
// sides (chunk), or says why the bytes cannot be cut.
func (q *WQ) pieces(a *pci.Mapping, aOff int, b *pci.Mapping, bOff, n int) (int, error) {
	need := 0
	for done := 0; done < n; need++ {
		l, _, _, err := q.chunk(a, aOff+done, b, bOff+done, n-done)
		if err != nil {
			return 0, err
		}
		done += l
	}
	return need, nil
}

// enqueueResult enqueues a compare (b set) or a CRC (b nil) in
// descriptors within the transfer limit and IOVA-contiguous. Each asks
// for its own completion record, where the device writes its result;
// post never puts them in a batch.
func (q *WQ) enqueueResult(op, kind uint8, a *pci.Mapping, aOff int, b *pci.Mapping, bOff, n int, seed uint32, tag uint64) error {
	need, err := q.pieces(a, aOff, b, bOff, n)
	if err != nil {
		return err
	}
	if need > q.Free() {
		return ErrRingFull
	}
	first := q.head
	le := binary.LittleEndian
	for done := 0; done < n; {
		l, x, y, _ := q.chunk(a, aOff+done, b, bOff+done, n-done)
		i := q.head & q.mask
		q.put(op, x, y, uint32(l), tag, first, done+l == n, kind)
		d := q.ring[i*dsahw.DescSize:]
		le.PutUint32(d[dsahw.DescOffFlags:], uint32(op)<<24|dsahw.FlagCRAV) // reads only: no cache control
		sd := uint64(0)
		if kind == opCRC && done == 0 {
			sd = uint64(seed)
		}
		le.PutUint64(d[dsahw.DescOffCRCSeed:], sd)
		q.slots[i].off, q.slots[i].n = uint64(done), uint32(l)
		done += l
	}
	return nil
}

// EnqueueNull adds a no-op descriptor that completes in order.
func (q *WQ) EnqueueNull(tag uint64) error {
	if err := q.usable(); err != nil {
		return err
	}
	if q.Free() < 1 {
		return ErrRingFull
	}
	q.put(dsahw.OpNoop, 0, 0, 0, tag, q.head, true, 2)
	return nil
}

// chunk is the next piece of a transfer: within the transfer limit and
// IOVA-contiguous in both buffers.
func (q *WQ) chunk(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int) (l int, d, s uint64, err error) {
	l = min(n, q.maxXfer)
	di, dc, err := dst.IOVA(dstOff)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("ioat: destination: %w", err)
	}
	l = min(l, dc)
	if src != nil {
		si, sc, err := src.IOVA(srcOff)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("ioat: source: %w", err)
		}
		l, s = min(l, sc), si
	}
	return l, di, s, nil
}

func (q *WQ) enqueue(op uint8, dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, pattern, tag uint64) error {
	if n <= q.maxXfer && len(dst.Segments) == 1 && (src == nil || len(src.Segments) == 1) {
		// One descriptor, addresses straight from the single segments
		// (checkRange has bounded the offsets): the common case, kept
		// free of the per-chunk lookups below.
		if q.head-q.tail >= q.mask {
			return ErrRingFull
		}
		d := dst.Segments[0].IOVA + uint64(dstOff)
		s, kind := pattern, uint8(1)
		if src != nil {
			s, kind = src.Segments[0].IOVA+uint64(srcOff), 0
		}
		q.put(op, s, d, uint32(n), tag, q.head, true, kind)
		return nil
	}
	need := 1
	if n > q.maxXfer || len(dst.Segments) > 1 || (src != nil && len(src.Segments) > 1) {
		var err error
		if need, err = q.pieces(dst, dstOff, src, srcOff, n); err != nil {
			return err
		}
	}
	if need > q.Free() {
		return ErrRingFull
	}
	first := q.head
	for done := 0; done < n; {
		l, d, s, _ := q.chunk(dst, dstOff+done, src, srcOff+done, n-done)
		if src == nil {
			s = bits.RotateLeft64(pattern, -8*(done%8))
		}
		done += l
		o := uint8(0)
		if src == nil {
			o = 1
		}
		q.put(op, s, d, uint32(l), tag, first, done == n, o)
	}
	return nil
}

// put writes the next ring descriptor. Its record asks for nothing yet:
// Submit decides between a single posting (RCR to the unit record) and a
// batch member (CRAV to its own record, written only on failure).
func (q *WQ) put(op uint8, src, dst uint64, n uint32, tag, first uint64, last bool, kind uint8) {
	i := q.head & q.mask
	b := (*[dsahw.DescSize]byte)(q.ring[i*dsahw.DescSize:])
	le := binary.LittleEndian
	le.PutUint32(b[dsahw.DescOffPASID:], 0)
	le.PutUint32(b[dsahw.DescOffFlags:], uint32(op)<<24|dsahw.FlagCRAV|dsahw.FlagCC)
	le.PutUint64(b[dsahw.DescOffCompl:], q.recIOVA[i])
	le.PutUint64(b[dsahw.DescOffSrc:], src)
	le.PutUint64(b[dsahw.DescOffDst:], dst)
	le.PutUint32(b[dsahw.DescOffSize:], n)
	le.PutUint32(b[dsahw.DescOffIntH:], 0)
	// A plain store clears the record's status: the device cannot
	// write it before the portal write that follows (MOVDIR64B fences
	// the stores before it), and a locked store costs more than the rest
	// of the descriptor.
	le.PutUint32(q.recs[i*dsahw.ComplSize:], 0)
	q.slots[i] = slot{tag: tag, opFirst: first, last: last, op: kind}
	q.head++
}

// Submit posts every descriptor enqueued since the last Submit, as far as
// the WQ has entries; Poll posts the rest as entries free.
func (q *WQ) Submit() {
	if q.closed || q.broken != nil {
		return
	}
	q.post()
}

// post turns ring descriptors [posted, head) into units while the WQ has
// free entries.
func (q *WQ) post() {
	for q.posted < q.head && q.uHead-q.uTail < q.wqSize && !q.closing {
		first := q.posted
		n := uint64(1)
		for first+n < q.head && int(n) < q.maxBatch && (first+n)&q.mask != 0 &&
			q.slots[first&q.mask].op < opCompare && q.slots[(first+n)&q.mask].op < opCompare &&
			q.slotIOVA[(first+n)&q.mask] == q.slotIOVA[first&q.mask]+n*dsahw.DescSize {
			n++
		}
		le := binary.LittleEndian
		u := q.uHead % q.wqSize
		q.units[u] = unit{first: first, n: n}
		le.PutUint32(q.urecs[u*dsahw.ComplSize:], 0) // before the portal write, as in put
		var flags uint32 = dsahw.FlagCRAV | dsahw.FlagRCR
		if q.intH != 0 {
			flags |= dsahw.FlagRCI
		}
		if n == 1 {
			copy(q.rec[:], q.ring[(first&q.mask)*dsahw.DescSize:][:dsahw.DescSize])
			f := le.Uint32(q.rec[dsahw.DescOffFlags:])
			le.PutUint32(q.rec[dsahw.DescOffFlags:], f|flags)
			le.PutUint64(q.rec[dsahw.DescOffCompl:], q.urecIOVA[u])
		} else {
			q.rec = [dsahw.DescSize]byte{}
			le.PutUint32(q.rec[dsahw.DescOffFlags:], uint32(dsahw.OpBatch)<<24|flags)
			le.PutUint64(q.rec[dsahw.DescOffCompl:], q.urecIOVA[u])
			le.PutUint64(q.rec[dsahw.DescOffSrc:], q.slotIOVA[first&q.mask])
			le.PutUint32(q.rec[dsahw.DescOffSize:], uint32(n))
		}
		le.PutUint16(q.rec[dsahw.DescOffIntH:], q.intH)
		if !q.write() {
			q.sharedFull() // a shared WQ is full: Poll posts it later
			return
		}
		q.fullSince = time.Time{}
		if q.uHead == q.uTail {
			q.stall = 0 // the watchdog's clock starts with this work
		}
		q.uHead++
		q.posted += n
		q.stats.Submitted += n
		q.stats.Doorbells++
	}
}

// enqTries bounds the ENQCMDs one submission tries on a full shared WQ
// before it leaves the descriptor for the next Submit or Poll.
const enqTries = 64

// write submits q.rec: one 64-byte posted write to BAR2 or to the
// kernel's portal (MOVDIR64B fences the descriptor and record stores
// before it), or ENQCMD on a shared WQ, retried while the WQ answers full
// (at most enqTries times). It reports whether the WQ took it.
func (q *WQ) write() bool {
	switch {
	case q.user == nil:
		q.d.portal.WritePortal(dsahw.PortalOffset(q.idx), &q.rec)
		return true
	case !q.shared:
		q.user.portal.Write64B(&q.rec)
		return true
	}
	for i := 0; i < enqTries; i++ {
		if q.user.portal.Enqueue(&q.rec) {
			return true
		}
		q.stats.EnqRetries++
	}
	return false
}

// Poll reaps completed requests into out, in submission order, and
// returns how many it wrote. It reads the completion records of posted
// units, never a register, except when the oldest unit has not completed
// for Options.Watchdog: then it reads SWERR and GENSTS, aborts the WQ and
// fails what was outstanding.
func (q *WQ) Poll(out []Completion) int {
	if q.closed {
		return q.deliver(out)
	}
	for q.uTail < q.uHead {
		ui := q.uTail % q.wqSize
		u := q.units[ui]
		if u.waiting && !q.repost(ui) {
			break
		}
		rec := q.urecs[ui*dsahw.ComplSize:]
		st := uint8(load32(rec)) & dsahw.ComplStatusMask
		if st == dsahw.StatusNone {
			q.stallCheck()
			break
		}
		dmasync.Observe()
		q.stall = 0
		if q.user != nil && q.resume(ui, st) {
			break // the unit's entry re-runs what a page fault cut short
		}
		if st != dsahw.StatusSuccess && st != dsahw.StatusSuccessPred && !q.units[ui].redo {
			q.unitFailed(u, rec, st)
		}
		if s := &q.slots[u.first&q.mask]; u.n == 1 && s.op >= opCompare && s.n > 0 &&
			(st == dsahw.StatusSuccess || st == dsahw.StatusSuccessPred) {
			c, _ := dsahw.DecodeCompletion(rec)
			s.differ, s.res = c.Result != 0, c.Bytes
			if s.op == opCRC {
				s.res = uint32(c.CRC)
			}
		}
		q.units[ui].redo = false
		q.uTail++
		q.tail = u.first + u.n
		q.stats.Completed += u.n
	}
	q.post()
	return q.deliver(out)
}

// unitFailed marks the requests of a unit whose record reports status st.
func (q *WQ) unitFailed(u unit, rec []byte, st uint8) {
	c, _ := dsahw.DecodeCompletion(rec)
	if u.n > 1 && st == dsahw.StatusBatchFail {
		// The members that failed wrote their own records.
		for k := u.first; k < u.first+u.n; k++ {
			mr := q.recs[(k&q.mask)*dsahw.ComplSize:]
			if ms := uint8(load32(mr)) & dsahw.ComplStatusMask; ms != dsahw.StatusNone && ms != dsahw.StatusSuccess && ms != dsahw.StatusSuccessPred {
				mc, _ := dsahw.DecodeCompletion(mr)
				q.failFrom(k, q.descErr(k, mc))
			}
		}
		return
	}
	// The whole unit failed with one status: a single descriptor, or a
	// batch the device refused as a whole.
	for k := u.first; k < u.first+u.n; k++ {
		q.failFrom(k, q.descErr(k, c))
	}
}

func (q *WQ) descErr(k uint64, c dsahw.Completion) error {
	return &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[k&q.mask].op], Status: c.Status, Bytes: c.Bytes, Fault: c.Fault, Write: c.Write}
}

// failFrom marks ring index k failed, and with it the rest of its
// request.
func (q *WQ) failFrom(k uint64, err error) {
	for ; k < q.head; k++ {
		s := &q.slots[k&q.mask]
		if s.failed == nil {
			s.failed = err
		}
		if s.last {
			return
		}
	}
}

// stallCheck runs the watchdog when the oldest unit has not completed:
// every 1024 looks it reads SWERR (an error logged for this WQ instead of
// a record), every 64 it checks the clock against Options.Watchdog.
func (q *WQ) stallCheck() {
	q.stall++
	if q.stall == 1 {
		q.stallAt = q.now()
		return
	}
	if q.user != nil {
		q.userStall()
		return
	}
	var sw uint64
	switch {
	case q.stall&1023 == 0:
		q.stats.StallChecks++
		sw = q.d.regs.Read64(dsahw.RegSWErr)
		if sw&dsahw.SWErrValid == 0 || int(sw>>dsahw.SWErrWQShift&0xFF) != q.idx {
			sw = 0
			if q.now().Sub(q.stallAt) < q.opts.Watchdog {
				return
			}
		}
	case q.stall&63 == 0 && q.now().Sub(q.stallAt) >= q.opts.Watchdog:
	default:
		return
	}
	// A record that never came: the device logged why in SWERR (a record
	// address it could not write), or it stopped. Abort the WQ's work and
	// fail everything posted.
	q.stats.Recoveries++
	gensts := q.d.regs.Read32(dsahw.RegGenSts)
	if sw&dsahw.SWErrValid != 0 {
		q.d.regs.Write64(dsahw.RegSWErr, dsahw.SWErrValid|dsahw.SWErrOverflow)
	} else {
		q.stats.Watchdogs++
	}
	q.d.mu.Lock()
	abortErr := q.d.cmd(fmt.Sprintf("ABORT_WQ %d", q.idx), dsahw.CmdAbortWQ, 1<<(q.idx%16)|uint32(q.idx/16)<<16)
	q.d.mu.Unlock()
	e := &DSAError{Addr: q.d.addr, WQ: q.idx, Op: opNames[q.slots[q.tail&q.mask].op], SWErr: sw, Stalled: sw&dsahw.SWErrValid == 0, Waited: q.opts.Watchdog, State: gensts & dsahw.StateMask}
	for k := q.tail; k < q.posted; k++ {
		q.failFrom(k, e)
	}
	q.stats.Completed += q.posted - q.tail
	q.tail = q.posted
	q.uTail = q.uHead
	q.stall = 0
	if abortErr != nil || gensts&dsahw.StateMask != dsahw.StateEnabled {
		q.broken = opErr(q.d.addr, "recover", fmt.Errorf("%w: WQ %d: device %s, abort: %v", ErrChannelBroken, q.idx, dsahw.StateName(gensts), abortErr))
		for k := q.posted; k < q.head; k++ {
			q.failFrom(k, q.broken)
		}
		q.tail, q.posted = q.head, q.head
	}
}

// deliver reports completed requests.
func (q *WQ) deliver(out []Completion) int {
	n := 0
	for n < len(out) && q.reaped < q.tail {
		k := q.reaped
		s := &q.slots[k&q.mask]
		q.reaped++
		if s.op >= opCompare {
			q.gather(k, s)
		}
		if !s.last {
			continue
		}
		out[n] = Completion{Tag: s.tag, Err: s.failed}
		if s.op >= opCompare {
			out[n].Differ, out[n].Offset, out[n].CRC = q.acc.Differ, q.acc.Offset, q.acc.CRC
		}
		n++
		q.stats.Ops++
		if s.failed != nil {
			q.stats.Failed++
		}
	}
	return n
}

// gather adds ring index k's result to its request's: a compare reports
// its first descriptor that found a difference; a CRC combines its
// descriptors' CRCs in order.
func (q *WQ) gather(k uint64, s *slot) {
	if k == s.opFirst {
		q.acc = Completion{}
	}
	switch {
	case s.op == opCompare && s.differ && !q.acc.Differ:
		q.acc.Differ, q.acc.Offset = true, int(s.off)+int(s.res)
	case s.op == opCRC && k == s.opFirst:
		q.acc.CRC = s.res
	case s.op == opCRC:
		q.acc.CRC = crc32cCombine(q.acc.CRC, s.res, uint64(s.n))
	}
}
