package emulated

import (
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/ioat/hw"
)

// The CBDMA model's control path, per channel: its register block and how
// reads and writes of it act (CHANCTRL, CHANCMD's reset, suspend and abort,
// the chain address, the doorbell), the channel's state machine (arm,
// halt, stop) and its interrupt. The function-level registers are in
// cbfunction.go; the platform and the channel's state in cbdma.go; how a
// channel fetches, executes and completes descriptors in cbdma_exec.go.

func (c *cbChannel) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if len(c.fn.chans) > 1 {
		s = fmt.Sprintf("channel %d: %s", c.idx, s)
	}
	c.nViol.Add(1)
	c.lastViol.Store(&s)
}

func (c *cbChannel) inReset() bool {
	return !c.resetUntil.IsZero() && time.Now().Before(c.resetUntil)
}

func (c *cbChannel) dps() bool { return c.caps&hw.CapDPS != 0 }

// read serves a read at channel offset r.
func (c *cbChannel) read(r, w int) uint64 {
	switch {
	case r == hw.ChanSts && w == 8:
		return c.loadSts()
	case r == hw.ChanSts && w == 4:
		// Reading the low dword latches the high one, so a driver that
		// reads the halves low first never pairs two different values.
		c.stsMu.Lock()
		v := c.sts.Load()
		c.stsHi, c.stsLatched = uint32(v>>32), true
		c.stsMu.Unlock()
		return v & 0xFFFFFFFF
	case r == hw.ChanSts+4 && w == 4:
		c.stsMu.Lock()
		defer c.stsMu.Unlock()
		if c.stsLatched {
			c.stsLatched = false
			return uint64(c.stsHi)
		}
		return c.sts.Load() >> 32
	case r == hw.ChanErr && w == 4:
		return uint64(c.chanerr.Load() | c.readGhost())
	case r == hw.ChanDMACount && w == 2:
		return uint64(c.dmacount.Load() & 0xFFFF)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r == hw.ChanCtrl && w == 2:
		v := c.ctrl
		if c.inUse {
			v |= hw.CtrlInUse
		}
		c.inUse = true // read-to-claim semaphore
		return uint64(v)
	case r == hw.ChanDMAComp && w == 2:
		return 0x3 // compatible with v1 and v2 software interfaces
	case r == hw.ChanCmd && w == 1:
		if c.inReset() {
			return hw.CmdReset
		}
		return 0
	case r == hw.ChanChainAddr && w == 8:
		return c.chain
	case r == hw.ChanChainAddr && w == 4:
		return c.chain & 0xFFFFFFFF
	case r == hw.ChanChainAddr+4 && w == 4:
		return c.chain >> 32
	case r == hw.ChanCmp && w == 8:
		return c.cmp
	case r == hw.ChanCmp && w == 4:
		return c.cmp & 0xFFFFFFFF
	case r == hw.ChanCmp+4 && w == 4:
		return c.cmp >> 32
	case r == hw.ChanCDAR && w == 8:
		return c.next
	case r == hw.ChanErrMask && w == 4:
		return uint64(c.errMask)
	case r == hw.ChanDCACtrl && w == 4:
		return uint64(c.dcaCtrl)
	case r == hw.ChanDRSCtl && w == 2 && c.ver >= hw.Ver34:
		return uint64(c.drsctl)
	case r == hw.ChanLTRSwSel && w == 1 && c.ver >= hw.Ver34:
		return uint64(c.ltrSel)
	case r == hw.ChanLTRActive && w == 4 && c.ver >= hw.Ver34:
		return uint64(c.ltrActive)
	case r == hw.ChanLTRIdle && w == 4 && c.ver >= hw.Ver34:
		return uint64(c.ltrIdle)
	}
	c.violation("read of %d bytes at channel offset %#x: no such register", w, r)
	return 0
}

// readGhost returns the cleared SlowClear bits CHANERR still reads as
// set, and counts the read against them.
func (c *cbChannel) readGhost() uint32 {
	if c.slowClear == 0 {
		return 0
	}
	c.ghostMu.Lock()
	defer c.ghostMu.Unlock()
	g := c.ghost
	if g != 0 && c.ghostLeft > 0 {
		c.ghostLeft--
		if c.ghostLeft == 0 {
			c.ghost = 0
		}
	}
	return g
}

// loadSts reads CHANSTS for a register read (see stsMu).
func (c *cbChannel) loadSts() uint64 {
	c.stsMu.Lock()
	defer c.stsMu.Unlock()
	return c.sts.Load()
}

// write serves a write at channel offset r. Writes made while RESET is
// still set land as well (DPDK writes CHAINADDR, CHANCTRL and CHANCMP
// right after RESET without polling it): the model's reset takes effect
// at once, only the bit's self-clearing is delayed.
func (c *cbChannel) write(r, w int, v uint64) {
	// The doorbell is the fast path: no lock.
	if r == hw.ChanDMACount && w == 2 {
		c.doorbell(uint32(v & 0xFFFF))
		return
	}
	if r == hw.ChanErr && w == 4 {
		old := c.chanerr.And(^uint32(v))
		if slow := old & uint32(v) & c.slowClear; slow != 0 {
			c.ghostMu.Lock()
			c.ghost |= slow
			c.ghostLeft = c.slowReads
			c.ghostMu.Unlock()
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r == hw.ChanCtrl && w == 2:
		c.ctrl = uint16(v) &^ hw.CtrlInUse
		c.inUse = v&hw.CtrlInUse != 0
		if c.ctrl&hw.CtrlIntRearm != 0 && c.irqPending {
			c.irqPending = false
			c.interruptLocked()
		}
	case r == hw.ChanCmd && w == 1:
		c.command(uint8(v))
	case r == hw.ChanChainAddr && w == 8:
		c.arm(v)
	case r == hw.ChanChainAddr && w == 4:
		c.chainLo = uint32(v)
	case r == hw.ChanChainAddr+4 && w == 4:
		c.arm(v<<32 | uint64(c.chainLo))
	case r == hw.ChanCmp && w == 8:
		c.cmp = v
	case r == hw.ChanCmp && w == 4:
		c.cmpLo = uint32(v)
		c.cmp = c.cmp&^0xFFFFFFFF | v
	case r == hw.ChanCmp+4 && w == 4:
		c.cmp = v<<32 | uint64(c.cmpLo)
	case r == hw.ChanErrMask && w == 4:
		c.errMask = uint32(v)
	case r == hw.ChanDCACtrl && w == 4:
		c.dcaCtrl = uint32(v)
	case r == hw.ChanDRSCtl && w == 2 && c.ver >= hw.Ver34:
		c.drsctl = uint16(v)
	case r == hw.ChanLTRSwSel && w == 1 && c.ver >= hw.Ver34:
		c.ltrSel = uint8(v)
	case r == hw.ChanLTRActive && w == 4 && c.ver >= hw.Ver34:
		c.ltrActive = uint32(v)
	case r == hw.ChanLTRIdle && w == 4 && c.ver >= hw.Ver34:
		c.ltrIdle = uint32(v)
	default:
		c.violation("write of %d bytes at channel offset %#x: no such writable register", w, r)
	}
}

// doorbell takes a DMACOUNT write. A value behind the previous one (by
// 32768 or more, mod 2^16) moves the count backwards: the engine halts
// with the descriptor-count error instead of running ~65535 stray
// descriptors.
func (c *cbChannel) doorbell(v uint32) {
	// The doorbell count moves first: an engine that sees the new DMACOUNT
	// must also see a new window (execOne).
	c.dbSeq.Add(1)
	c.dmacount.Store(v)
	prev := c.lastDB.Swap(v)
	if prev&dbNone == 0 && (v-prev)&0xFFFF >= 0x8000 {
		c.dbBack.Store(true)
	}
	if c.unarmed.Load() {
		c.violation("doorbell (DMACOUNT=%d) rung before CHAINADDR after a reset: write CHAINADDR first; the count is dropped when the chain is armed", v)
	}
	if c.dps() && c.armedPub.Load() {
		c.pfMu.Lock()
		c.prefetchLocked(uint16(v))
		c.pfMu.Unlock()
	}
	c.kick()
}

// command executes a CHANCMD write. Called with mu held, so it happens
// between two descriptors.
func (c *cbChannel) command(v uint8) {
	if v&(hw.CmdStart|hw.CmdAppend) != 0 {
		c.violation("CHANCMD START/APPEND are CB1 commands; CB3 starts a chain with CHAINADDR and DMACOUNT")
		c.haltLocked(hw.ErrChanCmd)
		return
	}
	switch {
	case v&hw.CmdReset != 0:
		c.resetLocked()
		c.resetUntil = time.Now().Add(c.resetDelay)
	case v&hw.CmdAbort != 0:
		c.setState(hw.StateHalted)
	case v&hw.CmdSuspend != 0:
		if c.state == hw.StateActive || c.state == hw.StateIdle {
			c.stuck = false
			c.setState(hw.StateSuspended)
		}
	case v&hw.CmdResume != 0:
		if c.state == hw.StateSuspended {
			c.setState(hw.StateIdle)
			c.kick()
		}
	}
}

// resetLocked returns the channel to HALTED with an empty chain. CHANERR is
// kept: drivers clear it themselves, and below CB 3.3 so must CHANERR_INT.
func (c *cbChannel) resetLocked() {
	c.gen++
	c.ctrl = 0
	c.chain, c.chainLo, c.cmp, c.cmpLo = 0, 0, 0, 0
	c.cnt, c.next, c.lastDone = 0, 0, 0
	c.cntPub.Store(0)
	c.dmacount.Store(0)
	c.lastDB.Store(dbNone)
	c.dbBack.Store(false)
	c.unarmed.Store(true)
	c.irqPending = false
	c.stuck = false
	c.winSeq = ^uint64(0)
	c.drsctl = 0
	c.clearPrefetch(0)
	c.setState(hw.StateHalted)
	c.sts.Store(uint64(hw.StateHalted))
	if c.wipeOnReset {
		c.f.wipeInterrupts()
	}
}

func (c *cbChannel) setState(s hw.State) {
	c.state = s
	c.armedPub.Store(!c.stuck && (s == hw.StateArmed || s == hw.StateActive || s == hw.StateIdle))
	if s == hw.StateArmed && c.hideArmed {
		s = hw.StateIdle
	}
	c.sts.Store(c.lastDone | uint64(s))
}

// arm takes a new chain address. A channel accepts one only when halted,
// suspended or armed, with no error outstanding. Zero is accepted (DPDK's
// probe writes it while waiting for RESET to clear): the chain faults
// only if a doorbell runs it. The internal count restarts at 0 and the
// doorbell register with it, so nothing runs until DMACOUNT is written.
func (c *cbChannel) arm(addr uint64) {
	switch {
	case c.state == hw.StateActive || c.state == hw.StateIdle:
		c.violation("CHAINADDR written while the channel is %v (suspend or reset it first)", c.state)
		c.haltLocked(hw.ErrChainAddr)
		return
	case c.chanerr.Load() != 0:
		c.violation("CHAINADDR written with CHANERR=%s outstanding: the channel stays HALTED", hw.ErrString(c.chanerr.Load()))
		return
	case c.ver < hw.Ver33 && c.f.hasConfig(hw.CfgChanErrInt) && c.f.config32(hw.CfgChanErrInt) != 0:
		c.violation("CHAINADDR written with CHANERR_INT (config 0x180) not cleared: below CB 3.3 the channel stays HALTED")
		return
	case addr&(hw.DescSize-1) != 0 || c.addr40 && addr >= 1<<40:
		c.haltLocked(hw.ErrChainAddr)
		return
	}
	c.gen++
	c.chain = addr
	c.next = addr
	c.first = true
	c.cnt = 0
	c.cntPub.Store(0)
	c.dmacount.Store(0)
	c.lastDB.Store(dbNone)
	c.dbBack.Store(false)
	c.unarmed.Store(false)
	c.stuck = false
	c.winSeq = ^uint64(0)
	c.lastDone = 0
	c.clearPrefetch(addr)
	c.setState(hw.StateArmed)
	c.kick()
}

// latch records error bits in CHANERR and, below CB 3.3, in CHANERR_INT.
func (c *cbChannel) latch(bits uint32) {
	c.chanerr.Or(bits)
	if c.ver < hw.Ver33 && c.f.hasConfig(hw.CfgChanErrInt) {
		c.f.orConfig32(hw.CfgChanErrInt, bits)
	}
}

// haltLocked stops the channel on an error. The status write-back lands
// before CHANSTS changes, so whoever sees HALTED in CHANSTS also sees the
// write-back.
func (c *cbChannel) haltLocked(bits uint32) {
	c.latch(bits)
	c.nErr.Add(1)
	v := c.lastDone | uint64(hw.StateHalted)
	c.stsMu.Lock()
	if c.ctrl&hw.CtrlErrCmplEn != 0 {
		c.writeCompletion(v)
	}
	c.setState(hw.StateHalted)
	c.stsMu.Unlock()
	if c.ctrl&hw.CtrlErrIntEn != 0 {
		c.interruptLocked()
	}
}

// stopLocked stops the channel without halting it: it stays in its state
// and runs nothing until reset or re-armed.
func (c *cbChannel) stopLocked() {
	c.stuck = true
	c.armedPub.Store(false)
}

// interruptLocked raises the channel's interrupt, or leaves it pending
// until software re-arms it with CHANCTRL.INT_REARM.
func (c *cbChannel) interruptLocked() {
	vec, ok := c.fn.interrupt(c.idx)
	if !ok {
		return
	}
	if c.ctrl&hw.CtrlIntRearm == 0 {
		c.irqPending = true
		return
	}
	c.ctrl &^= hw.CtrlIntRearm
	if c.f.raise(vec) {
		c.nIRQ.Add(1)
	}
}
