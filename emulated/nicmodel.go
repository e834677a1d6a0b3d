package emulated

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/pci"
)

// What the two NIC models (the 82574L of e1000e*.go and the 82599 of
// ixgbe*.go) share, because it does not depend on the NIC: the platform of
// ports on one IOMMU, the locks and the order they are taken in, the
// function's life cycle (configuration writes, FLR, close), the link as the
// cable and the MAC's own link setting make it, the front of the receive
// path (bad FCS, the receive filter, the hold that waits for descriptors)
// and the EITR throttle of MSI-X messages. Each model supplies what its
// datasheet defines through nicHooks: its registers, reset values, filter,
// descriptor formats and interrupt causes.

// nicPlatform is the ports of one emulated NIC platform and the IOMMU their
// DMA goes through. N is the model's NIC type.
type nicPlatform[N nicPort] struct {
	platform
	nics    []N
	regName func(off int) string // the model's register names, for Accesses
}

// nicOptions checks and defaults what both NIC models' options hold
// alike: ports (1 to 32, default 2), pending (not negative, default
// defPending) and clock (default the wall clock). name is the model's
// package, for the error.
func nicOptions(name string, ports, pending *int, defPending int, clock *Clock) error {
	if *ports == 0 {
		*ports = 2
	}
	if *pending == 0 {
		*pending = defPending
	}
	if *ports < 1 || *ports > 32 {
		return fmt.Errorf("emulated %s: %d ports: want 1..32", name, *ports)
	}
	if *pending < 0 {
		return fmt.Errorf("emulated %s: negative Pending %d", name, *pending)
	}
	if *clock == nil {
		*clock = wallClock{}
	}
	return nil
}

// newNICFunction is a NIC model's PCI function on bus, in the IOMMU
// domain dom: a PCIe function (the extended configuration space answers)
// with vectors MSI-X vectors, a BAR 0 of barSize bytes, and the
// configuration space initConfig writes.
func newNICFunction(bus uint8, dom *IOMMU, vectors, barSize int, initConfig func(*Function)) *Function {
	f := &Function{
		addr:    pci.Address{Bus: bus, Device: 0, Function: 0},
		dom:     dom,
		nIRQ:    vectors,
		cfgSize: 4096,
	}
	f.bar = &bar{f: f, size: barSize}
	initConfig(f)
	return f
}

// matchRAR reports whether dst is one of the receive addresses in regs, a
// model's register file: entries RAL/RAH pairs from offset ral on, RAL(i)
// at ral+8i and RAH(i) 4 bytes after it, as both NICs lay them out. An
// entry counts when its Address Valid bit (RAH bit 31) is set.
func matchRAR(regs []uint32, ral, entries int, dst [6]byte) bool {
	lo := uint32(dst[0]) | uint32(dst[1])<<8 | uint32(dst[2])<<16 | uint32(dst[3])<<24
	hi := uint32(dst[4]) | uint32(dst[5])<<8
	for i := 0; i < entries; i++ {
		off := (ral + 8*i) / 4
		if rah := regs[off+1]; rah&(1<<31) != 0 && regs[off] == lo && rah&0xFFFF == hi {
			return true
		}
	}
	return false
}

// cablePairs cables port 0 to port 1, 2 to 3, and so on (a model's
// Options.Cabled).
func (p *nicPlatform[N]) cablePairs() error {
	for i := 0; i+1 < len(p.nics); i += 2 {
		if err := Cable(p.Port(i), p.Port(i+1)); err != nil {
			return err
		}
	}
	return nil
}

// nicPort is a NIC model: a PCI function's model on the wire, with its
// shared core.
type nicPort interface {
	model
	wireEnd
	core() *nicCore
}

// add makes f's model n and adds the port.
func (p *nicPlatform[N]) add(f *Function, n N) {
	f.m = n
	p.fns = append(p.fns, f)
	p.nics = append(p.nics, n)
}

// MAC returns the address port i loads from its NVM into RAL0/RAH0.
func (p *nicPlatform[N]) MAC(i int) [6]byte { return p.nics[i].core().mac }

// Accesses returns what port i's driver has done to it since the platform
// was made or since ResetAccesses.
func (p *nicPlatform[N]) Accesses(i int) NICAccesses {
	c := p.nics[i].core()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m.foldLocked()
	return c.acc.named(p.regName)
}

// ResetAccesses sets port i's access counts to zero, so that a test can
// count one phase (a steady stream after the bring-up).
func (p *nicPlatform[N]) ResetAccesses(i int) {
	c := p.nics[i].core()
	c.mu.Lock()
	c.m.foldLocked()
	c.acc = regAccesses{}
	c.mu.Unlock()
}

// Port returns port i for the wire (Cable, Hub, Connect), which may join
// it to a port of another platform.
func (p *nicPlatform[N]) Port(i int) Port { return Port{end: p.nics[i]} }

// SetLink plugs (up) or unplugs the cable at port i, which raises the
// NIC's link status change cause. On a cable both ends see the change; on
// a hub of more, only port i does (as QEMU's set_link on one hubport).
func (p *nicPlatform[N]) SetLink(i int, up bool) { setLink(p.nics[i], up) }

// HoldGIOMaster makes port i keep STATUS's GIO master enable bit set while
// PCI bus mastering is on, even after CTRL asks it to stop mastering: a NIC
// whose outstanding DMA never drains. A driver waiting for the bit times
// out; only turning bus mastering off in configuration space then stops
// the NIC's DMA.
func (p *nicPlatform[N]) HoldGIOMaster(i int, hold bool) { p.nics[i].core().holdGIO.Store(hold) }

// Close stops every NIC and takes its ports off the wire; no DMA happens
// after it returns.
func (p *nicPlatform[N]) Close() error {
	wireMu.Lock()
	for _, n := range p.nics {
		detachLocked(n)
	}
	wireMu.Unlock()
	return p.platform.Close()
}

// nicHooks is what a NIC model defines for the shared core. The Locked
// methods run under nicCore.mu (held for writing, unless the model says
// otherwise).
type nicHooks interface {
	// powerOn sets the registers' power-on values; under txMu and mu.
	powerOn()
	// linkUp reports the link as STATUS/LINKS shows it.
	linkUp() bool
	// lscLocked raises the link status change cause.
	lscLocked()
	// rxOnLocked reports whether the receiver is enabled.
	rxOnLocked() bool
	// acceptLocked is the address filter; a frame it refuses it counts.
	acceptLocked(fr []byte) bool
	// deliverLocked writes fr into the RX ring the NIC steers it to.
	deliverLocked(fr []byte) rxResult
	// crcErrorLocked and missedLocked count a frame with a bad FCS and
	// one missed for want of room in the registers that count them.
	crcErrorLocked()
	missedLocked()
	// eitrLocked is the shortest time between two messages of vector
	// vec (its EITR interval).
	eitrLocked(vec int) time.Duration
	// foldLocked adds what the model counted outside mu (statistics,
	// register accesses) to the registers and acc.
	foldLocked()
}

// nicCore is the state both NIC models keep the same way. Register
// accesses arrive on the driver's goroutines and are serialised by mu;
// transmission runs under txMu, on the goroutine that writes TDT (or, for
// an 82599 with AsyncDMA, on the NIC's DMA engine, which also receives the
// frames its packet buffer took off the wire), and hands frames to
// the wire after releasing mu, so two cabled NICs transmitting at
// each other cannot deadlock (lock order: txMu, then mu or a peer's mu,
// never two mu at once). The 82574L's transmission holds txMu; the
// 82599's holds it for reading and its queue's own lock, so its queues
// transmit at once, as the chip's do (ixgbe_tx.go); what stops or
// reprograms transmission holds it for writing.
//
// mu is held for writing by every access of the 82574L and by the
// 82599's control path. The 82599's data path (a queue's tail write and
// ring walk, its RDT write, a frame's delivery into its ring) holds it for
// reading and the queue's own lock, so its queues do not wait for each
// other (ixgbe.go says what each lock guards); what such a holder changes
// besides its queue's state is atomic (the counters, the hold's length)
// or under holdMu (the hold) or the lock of the vector it raises (that
// vector's state: irqVector), and foldLocked gathers it under mu for
// writing.
type nicCore struct {
	m    nicHooks
	f    *Function
	mac  [6]byte
	port int

	plug jack // the wire (wire.go)
	// holdGIO keeps the GIO master enable bit set while bus mastering is
	// on (nicPlatform.HoldGIOMaster).
	holdGIO atomic.Bool

	txMu  queueLock // one shard, or the queues' (newNICCore)
	out   [][]byte  // frames of the TDT write being processed, to deliver (82574L)
	spare [][]byte  // free frame buffers (82574L)

	mu     queueLock  // one shard, or the queues' (newNICCore)
	holdMu sync.Mutex // hold, under mu held for reading
	closed bool
	hold   rxHold // frames waiting for RX descriptors
	lastLU bool
	vecs   []irqVector // each MSI-X vector's state
	clock  Clock
	hint   int
	acc    regAccesses

	nTx, nRx, nDrop, nBadFCS, nViol atomic.Uint64 // nTx, nRx: the 82574L's (an 82599's queues count their own)
	lastViol                        atomic.Pointer[string]
}

// newNICCore is the core of port of a model with vectors MSI-X vectors,
// whose txMu and mu have shards shards (queueLock).
func newNICCore(m nicHooks, f *Function, port, vectors, pending, shards int, clock Clock, mac [6]byte) nicCore {
	return nicCore{m: m, f: f, port: port, mac: mac, clock: clock, hold: rxHold{max: pending},
		txMu: newQueueLock(shards), mu: newQueueLock(shards),
		vecs: make([]irqVector, vectors)}
}

// irqVector is one MSI-X vector's state, on cache lines no other vector's
// shares, so that two queues raising their own vectors at once on two
// CPUs take no lock and write no line in common, as the chip's queues
// signal their vectors apart. Its mu guards the rest, taken with mu (the
// register lock) held for reading; mu held for writing excludes every
// holder of a vector's lock as well, so the control path may also read
// and change a vector's state under mu for writing alone.
type irqVector struct {
	mu sync.Mutex
	// cause is the vector's interrupt cause, pending until read or
	// cleared (the 82599's EICR bit of the vector), and enabled its
	// mask bit (the 82599's EIMS bit); a model whose causes are not per
	// vector (the 82574L) leaves both false.
	cause, enabled bool
	next           time.Time     // when the vector may send again (EITR)
	tmr            func() bool   // stops its deferred message
	sent           atomic.Uint64 // messages delivered (the Stats' Interrupts)
	_              [64]byte      // apart from the next vector's
}

// interrupts is the MSI-X messages the vectors delivered.
func (c *nicCore) interrupts() uint64 {
	var s uint64
	for i := range c.vecs {
		s += c.vecs[i].sent.Load()
	}
	return s
}

func (c *nicCore) core() *nicCore { return c }

// violation records a programming error.
func (c *nicCore) violation(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	c.nViol.Add(1)
	c.lastViol.Store(&s)
}

func (c *nicCore) jack() *jack { return &c.plug }

func (c *nicCore) setCable(up bool) {
	c.plug.cable.Store(up)
	c.mu.Lock()
	c.linkChangedLocked()
	c.mu.Unlock()
}

// linkChangedLocked raises LSC when the link changed, and lets frames held
// while it was down in once it is up.
func (c *nicCore) linkChangedLocked() {
	if lu := c.m.linkUp(); lu != c.lastLU {
		c.lastLU = lu
		c.m.lscLocked()
		if lu {
			c.flushPendingLocked()
		}
	}
}

// fromWire implements wireEnd: a frame with a bad FCS is counted and
// dropped, as the MAC drops it.
func (c *nicCore) fromWire(fr []byte, badFCS bool) {
	if badFCS {
		c.mu.Lock()
		c.m.crcErrorLocked()
		c.mu.Unlock()
		c.nBadFCS.Add(1)
		c.nDrop.Add(1)
		return
	}
	c.receive(fr)
}

// receive takes a frame from the wire or the loopback. The frame buffer is
// the caller's: it is copied into the ring or the hold.
func (c *nicCore) receive(fr []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.m.rxOnLocked() || !c.lastLU {
		c.nDrop.Add(1)
		return
	}
	if !c.m.acceptLocked(fr) {
		return
	}
	if !c.hold.offer(fr, c.m.deliverLocked) {
		c.nDrop.Add(1)
		c.m.missedLocked()
	}
}

// flushPendingLocked moves held frames into the rings while they have room.
func (c *nicCore) flushPendingLocked() {
	if !c.m.rxOnLocked() || !c.lastLU || c.closed {
		return
	}
	c.hold.flush(c.m.deliverLocked)
}

// messageLocked sends MSI-X vector vec, no sooner than its EITR allows.
// Under mu held for writing, or for reading with the vector's lock.
func (c *nicCore) messageLocked(vec int) {
	iv := &c.vecs[vec]
	now := c.clock.Now()
	if now.Before(iv.next) {
		if iv.tmr == nil {
			iv.tmr = c.clock.AfterFunc(iv.next.Sub(now), func() {
				c.mu.queue(vec).RLock()
				defer c.mu.queue(vec).RUnlock()
				iv.mu.Lock()
				defer iv.mu.Unlock()
				iv.tmr = nil
				if !c.closed {
					c.sendLocked(vec, c.clock.Now())
				}
			})
		}
		return
	}
	c.sendLocked(vec, now)
}

func (c *nicCore) sendLocked(vec int, now time.Time) {
	iv := &c.vecs[vec]
	iv.next = now.Add(c.m.eitrLocked(vec))
	if c.f.raise(vec) {
		iv.sent.Add(1)
	}
}

// configWrite implements model: turning bus mastering on flushes held
// frames at once (as QEMU does).
func (c *nicCore) configWrite(off, ln int) {
	if off <= pci.ConfigCommand+1 && off+ln > pci.ConfigCommand {
		c.mu.Lock()
		c.flushPendingLocked()
		c.mu.Unlock()
	}
}

// flr implements model.
func (c *nicCore) flr() {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopTimersLocked()
	c.m.powerOn()
}

func (c *nicCore) stopTimersLocked() {
	for i := range c.vecs {
		if iv := &c.vecs[i]; iv.tmr != nil {
			iv.tmr()
			iv.tmr = nil
		}
	}
}

// close implements model. Taking txMu and mu waits out a transmission or
// reception in flight: no DMA after close returns.
func (c *nicCore) close() {
	c.txMu.Lock()
	defer c.txMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.stopTimersLocked()
	c.hold.drop()
}
