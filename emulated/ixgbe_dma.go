package emulated

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// The 82599 model's DMA engines (IXGBEOptions.AsyncDMA): the goroutines
// that do a NIC's transmit and receive DMA when the goroutine writing TDT
// should not.
//
// A real NIC's DMA runs beside the CPU: a TDT write is a posted write the
// CPU forgets at once, and the NIC fetches the descriptors, reads the
// buffers, puts the frames on the wire and writes the descriptors back on
// its own. With AsyncDMA the model does the same. The TDT write records
// the tail and checks it (a tail outside the ring, a queue not enabled,
// bus mastering off: the same violations as the synchronous path), marks
// the queue in the transmit engine's pending set and wakes that engine;
// the engine then runs txQueue, the same walk the synchronous path runs,
// for every queue marked, until none is. The descriptor fetches, the IOMMU
// translations, the write-backs with their DD bits and their order, the
// counters and the violations are therefore the synchronous path's; what
// differs is only which goroutine runs them and when: the driver learns
// that a frame went out from the write-back, as from a NIC.
//
// A second engine is the NIC's receive DMA. A frame coming off the wire
// goes into the NIC's packet buffer (wireIn, as the MAC stores it): from
// a peer 82599 on a perfect cable the buffer the sender's engine gathered
// it in, which the packet buffer keeps, giving a spent one back
// (takeFromWire; the copy a cable makes costs nothing the chips do), from
// anything else a copy, and the receive engine, woken as the transmit
// engine is for a tail, takes it through the receive path the synchronous
// mode runs on the sender's goroutine: the address filter, the steering,
// the RX ring writes (header buffer, packet buffer or the caller's
// placement), the write-back and the interrupt. So each NIC writes its
// own host's memory on its own engine, as two NICs on a cable do: the
// sender's engine reads the sender's memory, the receiver's writes the
// receiver's, and a frame crosses on neither driver's goroutine. The
// packet buffer holds up to IXGBEOptions.Pending frames waiting for the
// engine (beyond it a frame is missed: MPC) besides those waiting for
// descriptors (rxHold).
//
// # Two engines per NIC
//
// The 82599's transmit and receive DMA are separate units that run at
// once, so a NIC has a transmit engine and a receive engine: a frame that
// arrives while the NIC sends a long burst (a PULL while the replies to
// the last one leave) is received at once, not after the burst, and a
// frame to send waits for no delivery. Each is one goroutine, not one per
// queue, as the 82599 has one transmit DMA that arbitrates between its
// queues: a transmit pass holds the NIC's txMu for writing and walks the
// marked queues one after the other (each under its own walk lock,
// ixgbe_tx.go). Within a queue frames leave in ring order, as
// synchronously; across queues the engine serves the marked queues lowest
// first on each pass, where the synchronous path follows the order of the
// tail writes (the 82599 arbitrates round robin: no order across queues is
// promised either way). Frames off the wire are received in the order they
// came. The two engines share the locks a synchronous sender's walk and a
// peer's delivery into the same NIC share.
//
// # Waking, stopping
//
// An engine sleeps on a channel of one slot (kick), never polls: a tail
// write that finds the slot full has its queue's bit in pending already
// seen by the pass to come. The transmit engine is started by the first
// tail write that has work for it, the receive engine by the first frame
// off the wire, and both are stopped, and waited for, by Close, a
// function-level reset and CTRL.RST (stopEngine): the pass in flight ends
// first, then the goroutine returns, and a queue marked but not yet served
// is forgotten, its descriptors unread, as a reset aborts a NIC's DMA; so
// are the frames in the packet buffer. From the start of the reset to its
// end (powerOn) the NIC takes no frame off the wire, as a chip in reset
// receives nothing (counted in RxDropped, as the reset clears MPC), and no
// engine starts, so the receive engine of before the reset delivers the
// rest of its batch alone, and one engine per NIC delivers at any time.
// After the reset the next tail write or frame starts a new engine; after
// Close none starts and no frame is taken (a cable to a port powered
// off), so no DMA happens after Close returns.

// The engines of a NIC (ixgbeNIC.dma).
const (
	txEngine = iota // transmit DMA: TDT writes (kick)
	rxEngine        // receive DMA: frames off the wire (kickRx)
)

// dmaEngine is one of a NIC's DMA goroutines.
type dmaEngine struct {
	pending atomic.Uint64 // TX queues whose tail moved, bit q for queue q
	rx      atomic.Bool   // frames wait in the packet buffer (wireIn)
	wake    chan struct{} // one slot: a pass is due
	stop    chan struct{} // closed by stopEngine
	done    chan struct{} // closed when the goroutine returns
}

// kick marks TX queue q as having descriptors to fetch and wakes the
// engine.
func (e *dmaEngine) kick(q int) {
	e.pending.Or(1 << uint(q))
	select {
	case e.wake <- struct{}{}:
	default: // a pass is due already; it will see q's bit
	}
}

// kickRx wakes the engine for frames in the packet buffer. Only the
// frame that raises rx wakes it: rx already up means a wake is in the
// slot, or the pass to come has yet to lower rx and will take this frame.
func (e *dmaEngine) kickRx() {
	if e.rx.Swap(true) {
		return
	}
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// wireIn is an 82599's packet buffer of frames off the wire waiting for
// its engine (AsyncDMA). Its own lock, never held with another: the
// sender's engine appends under it, this NIC's engine swaps the frames
// out under it.
type wireIn struct {
	mu     sync.Mutex
	frames []wireFrame
	spare  []wireFrame  // the engine's batch, emptied, to swap back in
	free   [][]byte     // frame buffers to reuse
	queued atomic.Int64 // frames in frames or in the engine's batch
	// off is set while the NIC is in reset (from stopEngine to powerOn)
	// and after Close: the packet buffer takes no frame, and no engine
	// starts (engine), so the engine of before the reset, which
	// stopEngine waits out, is the only one that delivers until it ends.
	off atomic.Bool
}

type wireFrame struct {
	b      []byte
	badFCS bool
}

// fromWire implements wireEnd: synchronously the frame goes through the
// receive path at once; with AsyncDMA it waits in the packet buffer for
// the engine.
func (n *ixgbeNIC) fromWire(fr []byte, badFCS bool) {
	if !n.async {
		n.fromFrame(fr, badFCS)
		return
	}
	w := &n.in
	w.mu.Lock()
	if w.off.Load() {
		// A port in reset or powered off (Close) takes nothing off
		// the wire: the frame is lost, as on a real cable, and
		// counted nowhere but here (the reset clears MPC).
		w.mu.Unlock()
		n.nDrop.Add(1)
		return
	}
	if len(w.frames) >= n.hold.max {
		w.mu.Unlock()
		// For reading: a writer would wait out the delivery in
		// progress, and hold up the tail writes behind it.
		n.mu.RLock()
		n.missedLocked()
		n.mu.RUnlock()
		n.nDrop.Add(1)
		return
	}
	var b []byte
	if k := len(w.free); k > 0 {
		b = w.free[k-1]
		w.free = w.free[:k-1]
	}
	w.frames = append(w.frames, wireFrame{b: append(b[:0], fr...), badFCS: badFCS})
	w.queued.Add(1)
	w.mu.Unlock()
	n.kickAfterWire()
}

// takeFromWire implements wireTaker: with AsyncDMA the packet buffer
// keeps fr itself, and the sender gets a spent frame buffer of this NIC's
// in its place, so a frame crosses the cable without a copy. A full
// packet buffer, a NIC in reset or closed, or the synchronous model,
// takes nothing (fromWire then counts the miss or the drop, or receives
// the frame at once).
func (n *ixgbeNIC) takeFromWire(fr []byte) ([]byte, bool) {
	if !n.async {
		return nil, false
	}
	w := &n.in
	w.mu.Lock()
	if w.off.Load() || len(w.frames) >= n.hold.max {
		w.mu.Unlock()
		return nil, false
	}
	var back []byte
	if k := len(w.free); k > 0 {
		back = w.free[k-1][:0]
		w.free[k-1] = nil
		w.free = w.free[:k-1]
	}
	w.frames = append(w.frames, wireFrame{b: fr})
	w.queued.Add(1)
	w.mu.Unlock()
	n.kickAfterWire()
	return back, true
}

// kickAfterWire wakes the engine for a frame put in the packet buffer.
func (n *ixgbeNIC) kickAfterWire() {
	if e := n.engine(rxEngine); e != nil {
		e.kickRx()
	}
}

// engine returns the NIC's DMA engine k (txEngine, rxEngine), started if
// it was not running, or nil during a reset and after Close. It takes mu
// only for reading, and only to start one: a frame off the wire comes
// from the peer's engine, once a frame, and a tail write from the driver,
// and mu held for writing there would wait for this NIC's receive, which
// holds mu for reading while it writes a frame into the host's memory, so
// the two NICs' engines would take turns at every frame where two NICs'
// DMA run at once. An engine loaded before stopEngine cleared it is one
// stopEngine then stops: what the caller did before the load (a frame put
// in the packet buffer, a tail write) came before stopEngine's reset,
// which drops that frame and aborts that DMA, as a reset does; what comes
// after stopEngine cleared it loads nil and starts no engine until the
// reset is over (in.off), so the engine stopEngine waits out is the NIC's
// only deliverer until it returns, and frames stay in the order they
// came; after the reset the next engine starts here (none after Close).
func (n *ixgbeNIC) engine(k int) *dmaEngine {
	if e := n.dma[k].Load(); e != nil {
		return e
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed || n.in.off.Load() {
		return nil
	}
	// stopEngine sets in.off and then clears dma under mu held for
	// writing, so here starters race only with each other, and the one
	// whose store lands starts it.
	e := &dmaEngine{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if !n.dma[k].CompareAndSwap(nil, e) {
		return n.dma[k].Load()
	}
	go n.runEngine(e)
	return e
}

// receiveWire takes the frames in the packet buffer through the receive
// path. On the engine.
func (n *ixgbeNIC) receiveWire() {
	w := &n.in
	w.mu.Lock()
	batch := w.frames
	w.frames = w.spare
	w.spare = nil
	w.mu.Unlock()
	for _, f := range batch {
		if n.holdHook != nil {
			n.holdHook(holdWireFrame)
		}
		n.fromFrame(f.b, f.badFCS)
	}
	w.mu.Lock()
	for i := range batch {
		w.free = append(w.free, batch[i].b)
		batch[i].b = nil
	}
	w.spare = batch[:0]
	w.queued.Add(-int64(len(batch)))
	w.mu.Unlock()
}

// dropWire empties the packet buffer (reset, Close).
func (n *ixgbeNIC) dropWire() {
	w := &n.in
	w.mu.Lock()
	for _, f := range w.frames {
		w.free = append(w.free, f.b)
	}
	w.queued.Add(-int64(len(w.frames)))
	w.frames = w.frames[:0]
	w.mu.Unlock()
}

// runEngine is the engine's goroutine: it waits for a kick, then serves
// every marked queue, until stopped.
func (n *ixgbeNIC) runEngine(e *dmaEngine) {
	defer close(e.done)
	if n.cpuTime {
		// ModelTime in thread CPU time reads this thread's clock.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	for {
		select {
		case <-e.stop:
			return
		case <-e.wake:
		}
		// Each pass takes the queues marked since the last; a tail
		// write during the pass marks its queue again and fills the
		// wake slot, so the loop ends when the driver stops writing.
		for {
			p, rx := e.pending.Swap(0), e.rx.Swap(false)
			if p == 0 && !rx {
				break
			}
			select {
			case <-e.stop:
				return
			default:
			}
			var t0 int64
			if n.cpuTime {
				t0 = threadCPUNanos()
			}
			if rx {
				n.receiveWire()
			}
			if p != 0 {
				n.txMu.Lock()
				for ; p != 0; p &= p - 1 {
					n.txQueue(bits.TrailingZeros64(p), nil)
				}
				n.txMu.Unlock()
			}
			if n.cpuTime {
				n.modelTimeSince(t0)
			}
		}
	}
}

// stopEngine puts the NIC in reset (in.off: the packet buffer takes no
// frame and no engine starts until powerOn ends the reset), stops the
// NIC's DMA engines, those that run, waits for their goroutines to
// return and empties the packet buffer. It takes mu and then no lock
// while it waits, so it must be called holding neither txMu nor mu (the
// engines take both).
func (n *ixgbeNIC) stopEngine() {
	var es [len(n.dma)]*dmaEngine
	n.in.off.Store(true)
	n.mu.Lock()
	for k := range n.dma {
		es[k] = n.dma[k].Swap(nil)
	}
	n.mu.Unlock()
	for _, e := range es {
		if e != nil {
			close(e.stop)
		}
	}
	for _, e := range es {
		if e != nil {
			<-e.done
		}
	}
	n.dropWire()
}

// flr implements model: the engine stops before the reset.
func (n *ixgbeNIC) flr() {
	n.stopEngine()
	n.nicCore.flr()
}

// close implements model: the NIC closes (waiting out a pass in flight,
// which holds txMu) and then its engine stops, so no engine starts or
// moves a byte after close returns.
func (n *ixgbeNIC) close() {
	n.nicCore.close()
	n.stopEngine()
}
