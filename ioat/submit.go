package ioat

import (
	"errors"
	"fmt"
	"math/bits"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/hw"
	"github.com/gomx-dev/gomx/pci"
)

// A channel's data path: how much room the ring has, cutting a copy or a
// fill into descriptors (within the transfer limit and, on engines that
// need it, the 40-bit address range), enqueueing them, ringing the
// doorbell (Submit), and Poll: reading the completion write-back, handing
// completed requests back, noticing a stalled or halted channel and
// recovering from a failed descriptor. Opening, resetting, starting and
// closing a channel, and its interrupt, are in channel.go; writing a
// descriptor in desc.go.

// ringTo announces ring indexes up to idx with the doorbell, in steps
// below 2^15 so the 16-bit count never seems to go backwards.
func (c *Channel) ringTo(idx uint64) {
	for c.rung < idx {
		step := idx - c.rung
		if step > 0x7FFF {
			step = 0x7FFF
		}
		c.rung += step
		c.ring16(uint16(c.rung - c.restart))
	}
}

func (c *Channel) ring16(v uint16) {
	c.regs.Write16(c.base+hw.ChanDMACount, v)
	c.stats.Doorbells++
}

// Free returns how many descriptors can be enqueued now.
//
// A status names a descriptor by its ring slot, so it is read as the
// index, among those a status can still name, that sits in that slot:
// tail-1 onwards for CHANSTS (it never goes back, nor lags a write-back
// already seen: the engine updates CHANSTS, then writes its value back),
// wbFloor-1 onwards for the write-back. The write-back can lag behind a tail that a CHANSTS
// read moved on (it reports only the last descriptor of each batch, and
// one written before that read may land after it), so ring positions are
// free from wbFloor, not tail: a late write-back must not name a slot that
// has been refilled, or it would be taken for that new descriptor.
func (c *Channel) Free() int {
	n := int(c.size - 1 - (c.head - c.wbFloor))
	if lim := 65535 - int(c.head-c.tail); lim < n {
		n = lim
	}
	return n
}

// Outstanding returns how many descriptors are enqueued and not yet
// completed.
func (c *Channel) Outstanding() int { return int(c.head - c.reaped) }

// MaxTransfer is the largest transfer one descriptor moves.
func (c *Channel) MaxTransfer() int { return c.maxXfer }

func (c *Channel) usable() error {
	if c.closed {
		return opErr(c.info.Addr, "enqueue", ErrClosed)
	}
	if c.broken != nil {
		return c.broken
	}
	return nil
}

// descsFor counts the descriptors a transfer of n bytes needs.
func (c *Channel) descsFor(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int) (int, error) {
	count := 0
	for done := 0; done < n; count++ {
		l, err := c.chunk(dst, dstOff+done, src, srcOff+done, n-done, nil, nil)
		if err != nil {
			return 0, err
		}
		done += l
	}
	return count, nil
}

// chunk computes the next descriptor of a transfer: the longest run that is
// IOVA-contiguous in both buffers and within the transfer cap.
func (c *Channel) chunk(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, dIOVA, sIOVA *uint64) (int, error) {
	l := n
	if l > c.maxXfer {
		l = c.maxXfer
	}
	di, dc, err := dst.IOVA(dstOff)
	if err != nil {
		return 0, fmt.Errorf("ioat: destination: %w", err)
	}
	if dc < l {
		l = dc
	}
	if src != nil {
		si, sc, err := src.IOVA(srcOff)
		if err != nil {
			return 0, fmt.Errorf("ioat: source: %w", err)
		}
		if sc < l {
			l = sc
		}
		if sIOVA != nil {
			*sIOVA = si
		}
	}
	if dIOVA != nil {
		*dIOVA = di
	}
	return l, nil
}

// check40 refuses a transfer that touches an IOVA at or above 2^40 on
// Jasper Forest, whose channels cannot reach it.
func (c *Channel) check40(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int) error {
	var d, s uint64
	for done := 0; done < n; {
		l, err := c.chunk(dst, dstOff+done, src, srcOff+done, n-done, &d, &s)
		if err != nil {
			return err
		}
		if d+uint64(l) > hw.Addr40Limit || src != nil && s+uint64(l) > hw.Addr40Limit {
			return opErr(c.info.Addr, "enqueue", fmt.Errorf("IOVA %#x is beyond %s's 40-bit DMA reach: map the buffer below 1 TiB: %w", max(d, s), c.info.Platform, ErrBadRequest))
		}
		done += l
	}
	return nil
}

func checkRange(what string, m *pci.Mapping, off, n int) error {
	if m != nil && off >= 0 && n >= 0 && off+n <= len(m.Buf) {
		return nil // inlined: the fast path of every enqueue
	}
	return rangeErr(what, m, off, n)
}

func rangeErr(what string, m *pci.Mapping, off, n int) error {
	if m == nil {
		return fmt.Errorf("ioat: %s: no mapping: %w", what, ErrBadRequest)
	}
	if off < 0 || n < 0 || off+n > len(m.Buf) {
		return fmt.Errorf("ioat: %s: bytes [%d, %d) outside the %d-byte mapping: %w", what, off, off+n, len(m.Buf), ErrBadRequest)
	}
	return nil
}

// EnqueueCopy adds a copy of n bytes from src at srcOff to dst at dstOff to
// the ring, split into descriptors at the transfer cap and wherever either
// buffer's IOVAs are discontiguous. Nothing runs until Submit. A zero-length
// copy becomes a null descriptor, so it still completes in order. It fails
// with ErrRingFull, without enqueuing anything, when the ring lacks room.
func (c *Channel) EnqueueCopy(dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, tag uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	if err := checkRange("copy destination", dst, dstOff, n); err != nil {
		return err
	}
	if err := checkRange("copy source", src, srcOff, n); err != nil {
		return err
	}
	if n == 0 {
		return c.EnqueueNull(tag)
	}
	if c.addr40 {
		if err := c.check40(dst, dstOff, src, srcOff, n); err != nil {
			return err
		}
	}
	return c.enqueue(hw.OpCopy, dst, dstOff, src, srcOff, n, 0, tag)
}

// EnqueueFill adds a fill of n bytes at dst/dstOff with the 64-bit pattern,
// laid down little-endian from dstOff (byte i gets byte i%8 of the pattern),
// split like EnqueueCopy.
func (c *Channel) EnqueueFill(dst *pci.Mapping, dstOff, n int, pattern uint64, tag uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	if !c.info.Fill {
		return opErr(c.info.Addr, "fill", ErrNoFill)
	}
	if err := checkRange("fill destination", dst, dstOff, n); err != nil {
		return err
	}
	if n == 0 {
		return c.EnqueueNull(tag)
	}
	if c.addr40 {
		if err := c.check40(dst, dstOff, nil, 0, n); err != nil {
			return err
		}
	}
	return c.enqueue(hw.OpFill, dst, dstOff, nil, 0, n, pattern, tag)
}

// enqueue splits a copy (src non-nil) or a fill (src nil) of n > 0 bytes
// into descriptors and puts them on the ring, or none of them when the ring
// lacks room.
func (c *Channel) enqueue(op uint8, dst *pci.Mapping, dstOff int, src *pci.Mapping, srcOff, n int, pattern, tag uint64) error {
	need := 1
	if n > c.maxXfer || len(dst.Segments) > 1 || (src != nil && len(src.Segments) > 1) {
		var err error
		if need, err = c.descsFor(dst, dstOff, src, srcOff, n); err != nil {
			return err
		}
	}
	if need > c.Free() {
		return ErrRingFull
	}
	first := c.head
	var d hw.Descriptor
	var sIOVA *uint64
	if src != nil {
		sIOVA = &d.Src
	}
	for done := 0; done < n; {
		l, _ := c.chunk(dst, dstOff+done, src, srcOff+done, n-done, &d.Dst, sIOVA)
		d.Size = uint32(l)
		d.Ctl = uint32(op) << hw.CtlOpShift
		if src == nil {
			// The engine lays the pattern from each descriptor's start:
			// rotate it so the bytes keep their phase in the request.
			d.Src = bits.RotateLeft64(pattern, -8*(done%8))
		}
		done += l
		c.put(&d, tag, first, done == n, op)
	}
	return nil
}

// EnqueueNull adds a null descriptor: no data moves, but it completes in
// order, so it marks a point in the stream.
func (c *Channel) EnqueueNull(tag uint64) error {
	if err := c.usable(); err != nil {
		return err
	}
	if c.Free() < 1 {
		return ErrRingFull
	}
	d := hw.Descriptor{Size: 8, Ctl: hw.OpCopy<<hw.CtlOpShift | hw.CtlNull}
	c.put(&d, tag, c.head, true, 2)
	return nil
}

// put writes descriptor d into the next ring slot. The ring's next links
// never change, so only the first four words are written.
func (c *Channel) put(d *hw.Descriptor, tag, first uint64, last bool, op uint8) {
	i := c.head & c.mask
	b := c.ring[i*hw.DescSize : i*hw.DescSize+hw.DescSize]
	putDesc(b, d.Size, d.Ctl, d.Src, d.Dst)
	c.slots[i] = slot{tag: tag, opFirst: first, last: last, op: op}
	c.head++
}

// Submit hands every enqueued descriptor to the engine with one doorbell.
// The last one asks for a completion write-back (and an interrupt when
// enabled), so one write reports the whole batch.
func (c *Channel) Submit() {
	if c.head == c.submitted || c.closed || c.broken != nil {
		return
	}
	i := (c.head - 1) & c.mask
	b := c.ring[i*hw.DescSize:]
	ctl := loadCtl(b) | hw.CtlComplWrite
	if c.irq.Load() != nil {
		ctl |= hw.CtlIntEn
	}
	storeCtl(b, ctl)
	c.stats.Submitted += c.head - c.submitted
	if c.tail == c.submitted {
		c.stall = 0 // the watchdog's clock starts with this work
	}
	c.submitted = c.head
	// The doorbell store orders after the descriptor stores (x86 stores
	// are not reordered with other stores; the emulated register is an
	// atomic), so the engine never sees a half-written descriptor.
	c.ringTo(c.submitted)
}

// Poll reaps completed requests into out, in submission order, and returns
// how many it wrote. It reads the completion write-back word, not MMIO,
// except when the word has not moved for a while with work outstanding, to
// catch a channel that halted without writing back. When the engine
// reports an error, Poll fails that request, resets the channel and
// re-queues the requests behind it.
func (c *Channel) Poll(out []Completion) int {
	if c.closed {
		return c.deliver(out)
	}
	sts := load64(c.comp)
	if sts != c.lastSts {
		dmasync.Observe()
		c.lastSts = sts
		c.stall = 0
		c.advanceWB(hw.StatusAddr(sts))
		if hw.StatusState(sts) == hw.StateHalted {
			c.recover(causeHalted)
		}
	} else if c.tail < c.submitted {
		c.stall++
		if c.stall == 1 {
			c.stallAt = time.Now()
		}
		if c.stall&1023 == 0 || c.stall&63 == 0 && time.Since(c.stallAt) >= c.opts.Watchdog {
			c.checkStall()
		}
	} else {
		// Nothing outstanding: the next stall starts its clock afresh.
		c.stall = 0
	}
	return c.deliver(out)
}

// Why recover runs.
const (
	causeHalted  = iota // CHANSTS says HALTED
	causeErrBits        // CHANERR bits set, the channel not halted
	causeStalled        // no progress for the watchdog time
)

// checkStall looks at the registers when the write-back has not moved for
// a while with work outstanding: CHANSTS (a halt without write-back, or
// progress the write-back does not report), then CHANERR (an error that
// did not halt the channel), then the watchdog clock.
func (c *Channel) checkStall() {
	c.stats.StallChecks++
	mmio := c.read64(hw.ChanSts)
	dmasync.Observe()
	before := c.tail
	c.advance(hw.StatusAddr(mmio))
	switch {
	case hw.StatusState(mmio) == hw.StateHalted:
		c.recover(causeHalted)
	case c.tail != before:
		c.stallAt = time.Now()
	case c.regs.Read32(c.base+hw.ChanErr)&^c.sticky != 0:
		c.recover(causeErrBits)
	case time.Since(c.stallAt) >= c.opts.Watchdog:
		c.recover(causeStalled)
	}
}

// advance marks every descriptor up to the one at bus address addr, as
// CHANSTS names it, complete.
func (c *Channel) advance(addr uint64) {
	if addr == 0 || c.tail == c.submitted {
		return
	}
	if k, ok := c.indexOf(addr, c.tail-1); ok {
		c.complete(k)
	}
}

// advanceWB is advance for an address the completion write-back names. It
// may be older than tail (see Free); it still moves wbFloor.
func (c *Channel) advanceWB(addr uint64) {
	if addr == 0 {
		return
	}
	k, ok := c.indexOf(addr, c.wbFloor-1)
	if !ok {
		return
	}
	c.wbFloor = k + 1
	c.complete(k)
}

// complete marks every descriptor up to ring index k complete; k below
// tail changes nothing.
func (c *Channel) complete(k uint64) {
	if k < c.tail {
		return
	}
	c.stats.Completed += k + 1 - c.tail
	c.tail = k + 1
	c.failRun = 0
}

// indexOf converts a descriptor bus address to the ring index it names:
// the first one from index from on that sits in its slot, which must have
// been submitted. Free keeps every index a status can name within one lap
// of from, so the answer is unambiguous.
func (c *Channel) indexOf(addr, from uint64) (uint64, bool) {
	off, ok := c.memMap.Contains(addr, hw.DescSize)
	if !ok || off >= len(c.ring) {
		return 0, false
	}
	s := uint64(off / hw.DescSize)
	k := from + ((s - from) & c.mask)
	return k, k < c.submitted
}

// deliver reports completed requests from the ring.
func (c *Channel) deliver(out []Completion) int {
	n := 0
	for n < len(out) && c.reaped < c.tail {
		s := &c.slots[c.reaped&c.mask]
		c.reaped++
		if !s.last {
			continue
		}
		out[n] = Completion{Tag: s.tag, Err: s.failed}
		n++
		c.stats.Ops++
		if s.failed != nil {
			c.stats.Failed++
		}
	}
	return n
}

// recover handles a halted channel (spec §4.5): the descriptor after the
// last completed one failed. Its whole request fails with the CHANERR
// bits; the channel is reset and restarted at the next request, so the
// requests behind the failed one run again.
func (c *Channel) recover(cause int) {
	c.stats.Recoveries++
	mmio := c.read64(hw.ChanSts)
	dmasync.Observe()
	c.advance(hw.StatusAddr(mmio))
	if cause != causeHalted {
		// The channel is not halted: stop it before looking at what it
		// did, so nothing completes behind our back.
		c.regs.Write8(c.base+hw.ChanCmd, hw.CmdSuspend)
		_ = c.waitFor("CHANSTS (suspend)", 20*time.Millisecond, func() bool {
			s := c.state()
			return s != hw.StateActive && s != hw.StateIdle
		})
		mmio = c.read64(hw.ChanSts)
		dmasync.Observe()
		c.advance(hw.StatusAddr(mmio))
	}
	chanerr, chanerrInt, err := c.clearErrors()
	if err != nil {
		c.breakChannel(err)
		return
	}
	if chanerr&^c.sticky != 0 {
		// Bits that would not clear before say nothing of this error.
		chanerr &^= c.sticky
	}
	if c.tail < c.submitted {
		// Fail the request that holds the failed descriptor and skip the
		// rest of its descriptors.
		fs := &c.slots[c.tail&c.mask]
		opFirst := fs.opFirst
		cerr := &ChanError{Addr: c.info.Addr, Op: opNames[fs.op], ChanErr: chanerr, ChanErrInt: chanerrInt, Desc: c.slotIOVA[c.tail&c.mask]}
		var failed error = cerr
		switch {
		case cause == causeStalled && chanerr == 0:
			cerr.Stalled = true
			cerr.State = hw.StatusState(mmio)
			cerr.Waited = c.opts.Watchdog
			c.stats.Watchdogs++
		case chanerr == 0 && chanerrInt == 0:
			failed = opErr(c.info.Addr, "CHANSTS", fmt.Errorf("channel halted with no CHANERR bits (someone reset or aborted it)"))
		}
		for k := opFirst; k < c.submitted; k++ {
			s := &c.slots[k&c.mask]
			if k >= c.tail {
				s.failed = failed
			}
			if s.last {
				c.tail = k + 1
				break
			}
		}
		// Failing a request is progress: a run of bad requests never
		// breaks the channel.
		c.failRun = -1
	}
	c.failRun++
	if c.failRun > 8 {
		// Recovery after recovery failed nothing: the channel halts on
		// its own, with nothing of ours to blame.
		c.breakChannel(opErr(c.info.Addr, "recover", fmt.Errorf("%w: %d recoveries without progress (last CHANERR %s)", ErrChannelBroken, c.failRun, hw.ErrString(chanerr))))
		return
	}
	if err := c.reset(); err != nil {
		c.breakChannel(err)
		return
	}
	c.stats.Retried += c.submitted - c.tail
	if err := c.start(c.tail); err != nil {
		c.breakChannel(err)
	}
}

// breakChannel fails everything outstanding and refuses new work.
func (c *Channel) breakChannel(err error) {
	if !errors.Is(err, ErrChannelBroken) {
		err = opErr(c.info.Addr, "recover", fmt.Errorf("%w: %w", ErrChannelBroken, err))
	}
	c.broken = err
	_ = c.reset()
	c.failAll(err)
}

// failAll completes every outstanding descriptor with err.
func (c *Channel) failAll(err error) {
	for k := c.tail; k < c.head; k++ {
		c.slots[k&c.mask].failed = err
	}
	c.tail = c.head
	c.submitted = c.head
	c.wbFloor = c.head
}

// EnqueueCompare fails with pci.ErrNotSupported: CBDMA has no compare
// operation. A DSA work queue offers it (WQ.EnqueueCompare).
func (c *Channel) EnqueueCompare(a *pci.Mapping, aOff int, b *pci.Mapping, bOff, n int, tag uint64) error {
	return opErr(c.info.Addr, "compare", fmt.Errorf("%w: CBDMA has no compare operation; a DSA work queue whose OPCAP has compare (opcode 0x05) does", pci.ErrNotSupported))
}

// EnqueueCRC fails with pci.ErrNotSupported. Some CBDMA generations
// (Jasper Forest, Broadwell-DE) advertise CRC and move-CRC operations in
// DMACAPABILITY, but the driver does not use them; a DSA work queue
// whose OPCAP has CRC generation offers CRC-32C (WQ.EnqueueCRC).
func (c *Channel) EnqueueCRC(src *pci.Mapping, srcOff, n int, seed uint32, tag uint64) error {
	return opErr(c.info.Addr, "crc", fmt.Errorf("%w: the CBDMA driver offers no CRC generation; a DSA work queue whose OPCAP has CRC generation (opcode 0x10) does", pci.ErrNotSupported))
}
