package emulated

import (
	"math/bits"
	"runtime"
	"time"

	"github.com/gomx-dev/gomx/internal/dmasync"
	"github.com/gomx-dev/gomx/ioat/hw"
	"golang.org/x/sys/unix"
)

// The CBDMA model's execution: each channel's goroutine, how it parks
// and is woken, paces itself to the configured bandwidth, fetches
// descriptors (at the doorbell into a prefetch queue with DMACAP.DPS),
// executes them (copies and fills, with their address checks), writes the
// completion and raises the interrupt a descriptor asks for. Registers are
// in cbdma_regs.go; the platform and the channel's state in cbdma.go.

// fetched is a descriptor as the engine read it from memory.
type fetched struct {
	addr  uint64
	d     hw.Descriptor
	ok    bool // the read succeeded
	first bool // the chain's first descriptor
}

func (c *cbChannel) kick() {
	if c.parked.Load() {
		c.unpark()
	}
}

// unpark wakes the channel's goroutine from its park: a pinned channel's
// thread through its futex, without the Go scheduler; any other through
// its wake channel.
func (c *cbChannel) unpark() {
	if c.pinned {
		c.bell.Add(1)
		futexWake(&c.bell)
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// clearPrefetch empties the prefetch queue; the next fetch starts at addr.
func (c *cbChannel) clearPrefetch(addr uint64) {
	c.pfMu.Lock()
	c.pfHead, c.pfLen, c.pfNext, c.pfCount, c.pfFirst, c.pfStop = 0, 0, addr, 0, true, false
	c.pfMu.Unlock()
}

// descError handles an error found while executing a descriptor, as
// CHANERRMSK and CHANCTRL.ANY_ERR_ABORT_EN say, and reports whether the
// descriptor completes all the same (a masked error).
func (c *cbChannel) descError(bits uint32) bool {
	if bits&^c.errMask == 0 {
		c.latch(bits)
		c.violation("CHANERR %s masked by CHANERRMSK: the descriptor moved no data yet completes (no reference driver masks copy errors)", hw.ErrString(bits))
		return true
	}
	if c.ctrl&hw.CtrlAnyErrAbortEn == 0 {
		// Without abort-on-error the channel does not halt: it latches
		// the error and stops where it is.
		c.latch(bits)
		c.nErr.Add(1)
		c.stopLocked()
		if c.ctrl&hw.CtrlErrIntEn != 0 {
			c.interruptLocked()
		}
		return false
	}
	c.haltLocked(bits)
	return false
}

// writeCompletion writes status v to the CHANCMP address; a failure halts
// the channel with a completion address error.
func (c *cbChannel) writeCompletion(v uint64) bool {
	if c.cmp&7 != 0 || c.cmp == 0 || !c.f.busMaster() || c.addr40 && c.cmp >= 1<<40 {
		c.failCompletion()
		return false
	}
	c.f.dom.rlock()
	b, ok := c.f.dom.translate(c.cmp, 8, true, &c.hint)
	if ok {
		dmasync.Publish()
		store64(b, v)
	}
	c.f.dom.runlock()
	if !ok {
		c.failCompletion()
	}
	return ok
}

func (c *cbChannel) failCompletion() {
	c.latch(hw.ErrCmplAddr)
	if c.state != hw.StateHalted {
		c.nErr.Add(1)
	}
	c.setState(hw.StateHalted)
}

// runnable reports whether the channel has descriptors to execute (or a
// doorbell error to raise).
func (c *cbChannel) runnable() bool {
	switch c.state {
	case hw.StateArmed, hw.StateActive, hw.StateIdle:
		return !c.stuck && (c.dbBack.Load() || uint16(c.dmacount.Load()) != c.cnt)
	}
	return false
}

// run is the channel's engine: it waits for the doorbell and executes
// descriptors in order. With cpus, it first binds its own thread to them
// for good (the thread is never unlocked, so it exits with the goroutine
// and no other goroutine inherits the binding); it reports on started
// whether it could, and runs only if so.
func (c *cbChannel) run(cpus *unix.CPUSet, started chan<- error) {
	defer close(c.done)
	if cpus != nil {
		runtime.LockOSThread()
		if err := unix.SchedSetaffinity(0, cpus); err != nil {
			c.stopping.Store(true)
			started <- err
			return
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &got); err != nil {
			c.stopping.Store(true)
			started <- err
			return
		}
		c.cpus = cpuList(&got)
		c.pinned = true
	}
	started <- nil
	for !c.stopping.Load() {
		c.mu.Lock()
		work := c.runnable()
		if work {
			c.execBatch()
		}
		c.mu.Unlock()
		if !work {
			c.idle()
		}
	}
}

// idle polls for the doorbell for the spin time, then parks until kicked.
// A channel bound to CPUs of its own (CBDMAOptions.CPUs) polls without
// giving its P back between looks, as silicon would: its goroutine is
// locked to its thread, and every runtime.Gosched would hand the P over
// and wake another thread to take it back, futex calls and
// inter-processor wake-ups charged to the driving process's CPUs. It
// yields its CPU to the kernel instead (sched_yield, keeping the P), so a
// thread that shares that CPU with it (on a small machine, the process
// the engine's interrupt just woke) runs at once rather than after the
// spin; and it parks on a futex the doorbell wakes directly.
func (c *cbChannel) idle() {
	deadline := time.Now().Add(c.spin)
	for i := 0; ; i++ {
		if c.stopping.Load() {
			return
		}
		if c.peekWork() {
			return
		}
		if i&63 == 63 {
			if time.Now().After(deadline) {
				break
			}
			if c.pinned {
				osYield()
			} else {
				runtime.Gosched()
			}
		}
	}
	c.parked.Store(true)
	bell := c.bell.Load()
	// Re-check after announcing we park: a doorbell between the check and
	// the store would otherwise be missed.
	c.mu.Lock()
	work := c.runnable()
	c.mu.Unlock()
	// A bounded sleep: state changes that do not kick (a config write
	// racing the park) are still picked up.
	parkMax := time.Duration(c.parkMax.Load())
	switch {
	case work || c.stopping.Load():
	case c.pinned:
		c.parks.Add(1)
		// The thread sleeps in the kernel and the doorbell's futex wake
		// runs it at once on its own CPU. Parked in the Go scheduler
		// instead, the locked goroutine was readied onto the ringing
		// goroutine's P and started only when that P scheduled, then
		// handed its P over to this thread: hundreds of microseconds on
		// a loaded machine between a doorbell and its first descriptor,
		// and two wake-ups on the application's CPU. A kick after the
		// bell was read changes the word, and the wait returns at once.
		futexWait(&c.bell, bell, parkMax)
	default:
		c.parks.Add(1)
		select {
		case <-c.wake:
		case <-time.After(parkMax):
		}
	}
	c.parked.Store(false)
}

// unpinnedSpin is the default Spin of channels without CPUs of their own
// (see CBDMAOptions.Spin): long enough for the next chunk's doorbell of a
// driver that submits a message chunk by chunk, short beside the wake-ups
// a longer poll on the application's Ps holds back.
const unpinnedSpin = 20 * time.Microsecond

// defaultParkMax bounds one park of an idle channel.
const defaultParkMax = 10 * time.Millisecond

// peekWork tells, without the lock, whether the channel seems to have
// work (for the spin loop; a stale answer costs one more loop).
func (c *cbChannel) peekWork() bool {
	return c.armedPub.Load() && (uint16(c.dmacount.Load()) != uint16(c.cntPub.Load()) || c.dbBack.Load())
}

// pace holds a descriptor of n bytes until the channel's bandwidth cap
// says its transfer is over; the data lands after it, so a driver that
// reads the destination before the completion sees the old bytes. It
// releases mu while it sleeps, so register writes (a RESET) go through; it
// reports false when the channel was reset or stopped meanwhile, and the
// descriptor must not complete.
func (c *cbChannel) pace(n int) bool {
	limit := c.bwLimit.Load()
	if limit == 0 {
		limit = c.bandwidth
	}
	if limit <= 0 {
		return true
	}
	now := time.Now()
	due := c.bw.next(n, limit, now)
	if !due.After(now) {
		return true
	}
	gen := c.gen
	c.mu.Unlock()
	sleepUntil(due, &c.stopping)
	c.mu.Lock()
	return gen == c.gen && c.state == hw.StateActive && !c.stuck && !c.stopping.Load()
}

// execBatch executes descriptors up to the doorbell, at most 64 before it
// lets register writers in. Called with mu held.
func (c *cbChannel) execBatch() {
	if !c.f.busMaster() {
		// DMA with bus mastering off never reaches memory: the fetch fails.
		c.violation("doorbell rung with PCI bus mastering disabled (set COMMAND.BME)")
		c.haltLocked(hw.ErrNextAddr)
		return
	}
	if c.dbBack.Swap(false) {
		c.violation("DMACOUNT moved backwards (to %d): it only ever grows, mod 2^16, by the descriptors added", c.dmacount.Load())
		c.haltLocked(hw.ErrDescCount)
		return
	}
	if c.state != hw.StateActive {
		c.setState(hw.StateActive)
	}
	for i := 0; i < 64 && c.state == hw.StateActive && !c.stuck; i++ {
		target := uint16(c.dmacount.Load())
		if target == c.cnt {
			break
		}
		c.execOne(target)
	}
	if c.state == hw.StateActive && !c.stuck && uint16(c.dmacount.Load()) == c.cnt {
		c.setState(hw.StateIdle)
	}
}

// prefetchLocked fetches descriptors ahead of execution, up to the
// prefetch limit and the doorbell count target. Called with pfMu held.
// The target may be stale: the engine reads DMACOUNT before it fetches,
// and a doorbell in between may already have fetched past that value.
// Only a target ahead of what was fetched (a 16-bit distance below 2^15,
// as drivers ring it) fetches more; anything else would read ring slots
// the driver has not written yet.
func (c *cbChannel) prefetchLocked(target uint16) {
	limit := c.fn.prefetchLimit()
	dom := c.f.dom
	for c.pfLen < limit && ahead(target, c.pfCount) && !c.pfStop && c.f.busMaster() {
		e := &c.pf[(c.pfHead+c.pfLen)%len(c.pf)]
		*e = fetched{addr: c.pfNext, first: c.pfFirst}
		dom.rlock()
		raw, ok := dom.translate(e.addr, hw.DescSize, false, &c.pfHint)
		if ok {
			e.d.Decode(raw)
		}
		dom.runlock()
		e.ok = ok
		c.pfLen++
		c.pfCount++
		c.pfFirst = false
		if !ok {
			c.pfStop = true
			return
		}
		c.pfNext = e.d.Next
	}
}

// ahead reports whether the 16-bit doorbell count target lies ahead of
// count.
func ahead(target, count uint16) bool {
	d := target - count
	return d != 0 && d < 0x8000
}

// fetch reads the next descriptor: from the prefetch queue with DPS, else
// from memory now.
func (c *cbChannel) fetch(target uint16) fetched {
	if c.dps() {
		c.pfMu.Lock()
		defer c.pfMu.Unlock()
		if c.pfLen == 0 {
			c.prefetchLocked(target)
		}
		if c.pfLen == 0 {
			return fetched{addr: c.pfNext, first: c.pfFirst}
		}
		e := c.pf[c.pfHead]
		c.pfHead = (c.pfHead + 1) % len(c.pf)
		c.pfLen--
		// The engine keeps fetching ahead while it executes.
		c.prefetchLocked(target)
		return e
	}
	e := fetched{addr: c.next, first: c.first}
	dom := c.f.dom
	dom.rlock()
	raw, ok := dom.translate(e.addr, hw.DescSize, false, &c.hint)
	if ok {
		e.d.Decode(raw)
	}
	dom.runlock()
	e.ok = ok
	return e
}

// execOne fetches, checks and executes the next descriptor.
func (c *cbChannel) execOne(target uint16) {
	e := c.fetch(target)
	if !e.ok {
		if e.first {
			c.haltLocked(hw.ErrChainAddr)
		} else {
			c.haltLocked(hw.ErrNextAddr)
		}
		return
	}
	c.first = false
	addr, d := e.addr, &e.d
	// A ring run past its end comes back to where the doorbell's window
	// began before a new doorbell arrives. A self-linked descriptor is
	// exempt: repeating it is legal (Linux's VFIO selftest does so).
	if seq := c.dbSeq.Load(); seq != c.winSeq {
		c.winSeq, c.winStart, c.winLen = seq, addr, 0
	} else if addr == c.winStart && c.winLen > 1 {
		c.violation("DMACOUNT ran past the ring: descriptor %#x came round again after %d descriptors within one doorbell", addr, c.winLen)
		c.haltLocked(hw.ErrDescCount)
		return
	}
	c.winLen++
	if bits := d.Validate(c.xferCap, c.caps) | c.addrCheck(d); bits != 0 {
		if c.descError(bits) {
			c.completeOne(addr, d, target)
		}
		return
	}
	if len(c.inject) > 0 && c.inject[0].at == c.executed {
		in := c.inject[0]
		c.inject = c.inject[1:]
		c.executed++
		if in.hang {
			if in.bits != 0 {
				c.latch(in.bits)
				c.nErr.Add(1)
				if c.ctrl&hw.CtrlErrIntEn != 0 {
					c.interruptLocked()
				}
			}
			c.stopLocked()
			return
		}
		if c.descError(in.bits) {
			c.completeOne(addr, d, target)
		}
		return
	}
	c.executed++
	if d.Ctl&hw.CtlNull == 0 {
		if !c.pace(int(d.Size)) {
			return
		}
		bits, ok := c.transferUnlocked(d)
		if !ok {
			return
		}
		if bits != 0 {
			if c.descError(bits) {
				c.completeOne(addr, d, target)
			}
			return
		}
		c.nBytes.Add(uint64(d.Size))
	}
	c.completeOne(addr, d, target)
}

// completeOne records descriptor d at addr as done: CHANSTS, the
// write-back if asked for, the interrupt if asked for.
func (c *cbChannel) completeOne(addr uint64, d *hw.Descriptor, target uint16) {
	c.nDesc.Add(1)
	c.cnt++
	c.cntPub.Store(uint32(c.cnt))
	c.lastDone = addr
	c.next = d.Next
	st := hw.StateActive
	if c.cnt == target {
		st = hw.StateIdle
	}
	v := addr | uint64(st)
	// The write-back and CHANSTS change together (see stsMu).
	c.stsMu.Lock()
	if d.Ctl&hw.CtlComplWrite != 0 {
		if !c.writeCompletion(v) {
			c.stsMu.Unlock()
			return
		}
	}
	dmasync.Publish()
	c.sts.Store(v)
	c.stsMu.Unlock()
	if d.Ctl&hw.CtlIntEn != 0 {
		c.interruptLocked()
	}
}

// transferUnlocked runs transfer with mu released, as pace sleeps: the
// copy is the silicon at work, and the registers stay live meanwhile. A
// driver that re-armed the interrupt (a CHANCTRL write) while a large
// descriptor was being copied waited for the whole copy, spinning then
// sleeping on the lock on the application's CPU, and was woken again when
// the copy let go: two wake-ups per re-arm that no device costs. It
// reports false, and the descriptor must not complete, when the channel
// was reset, re-armed or stopped meanwhile (a real engine aborts it).
// Only the channel's goroutine runs descriptors, so the translation hint
// transfer uses is its own. Called with mu held.
func (c *cbChannel) transferUnlocked(d *hw.Descriptor) (uint32, bool) {
	gen := c.gen
	c.mu.Unlock()
	bits := c.transfer(d)
	c.mu.Lock()
	return bits, gen == c.gen && c.state == hw.StateActive && !c.stuck && !c.stopping.Load()
}

// addrCheck refuses addresses beyond a Jasper Forest channel's 40 bits.
func (c *cbChannel) addrCheck(d *hw.Descriptor) uint32 {
	if !c.addr40 {
		return 0
	}
	const lim = 1 << 40
	switch {
	case d.Next >= lim:
		return hw.ErrNextAddr
	case d.Ctl&hw.CtlNull != 0:
		return 0
	case d.Op() == hw.OpCopy && (d.Src+uint64(d.Size) > lim || d.Ctl&hw.CtlSrcPageBreak != 0 && d.NextSrc >= lim):
		return hw.ErrSrcAddr
	case d.Dst+uint64(d.Size) > lim || d.Ctl&hw.CtlDstPageBreak != 0 && d.NextDst >= lim:
		return hw.ErrDstAddr
	}
	return 0
}

// transfer moves the data of a copy or fill descriptor through the IOMMU,
// in up to two pieces per side when the page-break bits say so.
func (c *cbChannel) transfer(d *hw.Descriptor) uint32 {
	dom := c.f.dom
	n := d.Size
	dom.rlock()
	defer dom.runlock()
	var src [2][]byte
	if d.Op() == hw.OpCopy {
		l, next := hw.Pieces(d.Src, d.NextSrc, n, d.Ctl&hw.CtlSrcPageBreak != 0)
		var ok bool
		if src[0], ok = dom.translate(d.Src, int(l), false, &c.hint); !ok {
			return hw.ErrReadData // the engine reads before it writes
		}
		if l < n {
			if src[1], ok = dom.translate(next, int(n-l), false, &c.hint); !ok {
				return hw.ErrReadData
			}
		}
	}
	var dst [2][]byte
	l, next := hw.Pieces(d.Dst, d.NextDst, n, d.Ctl&hw.CtlDstPageBreak != 0)
	var ok bool
	if dst[0], ok = dom.translate(d.Dst, int(l), true, &c.hint); !ok {
		return hw.ErrWriteData
	}
	if l < n {
		if dst[1], ok = dom.translate(next, int(n-l), true, &c.hint); !ok {
			return hw.ErrWriteData
		}
	}
	if d.Op() == hw.OpFill {
		hw.FillPattern(dst[0], d.Src)
		if dst[1] != nil {
			hw.FillPattern(dst[1], bits.RotateLeft64(d.Src, -8*int(l%8)))
		}
		return 0
	}
	if src[1] == nil && dst[1] == nil {
		copy(dst[0], src[0])
		return 0
	}
	// Two pieces on either side: copy piece by piece.
	si, so := 0, 0
	for di := 0; di < 2; di++ {
		for do := 0; do < len(dst[di]); {
			k := copy(dst[di][do:], src[si][so:])
			do += k
			so += k
			if so == len(src[si]) {
				si, so = si+1, 0
			}
		}
	}
	return 0
}
