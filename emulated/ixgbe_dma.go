package emulated

import (
	"math/bits"
	"runtime"
	"sync/atomic"
)

// The 82599 model's DMA engine (IXGBEOptions.AsyncDMA): the goroutine
// that does a NIC's transmit DMA when the goroutine writing TDT should not.
//
// A real NIC's DMA runs beside the CPU: a TDT write is a posted write the
// CPU forgets at once, and the NIC fetches the descriptors, reads the
// buffers, puts the frames on the wire and writes the descriptors back on
// its own. With AsyncDMA the model does the same. The TDT write records
// the tail and checks it (a tail outside the ring, a queue not enabled,
// bus mastering off: the same violations as the synchronous path), marks
// the queue in the engine's pending set and wakes the engine; the engine
// then runs txQueue, the same walk the synchronous path runs, for every
// queue marked, until none is. The descriptor fetches, the IOMMU
// translations, the write-backs with their DD bits and their order, the
// counters and the violations are therefore the synchronous path's; what
// differs is only which goroutine runs them and when: the driver learns
// that a frame went out from the write-back, as from a NIC.
//
// # One engine per NIC
//
// The engine is one goroutine per NIC, not one per TX queue. The walk of
// a ring holds the NIC's txMu (the frame buffers, the context descriptors
// and the order in which frames reach the wire are the NIC's, not a
// queue's), so engines of two queues of one NIC would take turns on it and
// gain nothing over one; the 82599 itself has one transmit DMA that
// arbitrates between its queues. Within a queue frames leave in ring
// order, as synchronously; across queues the engine serves the marked
// queues lowest first on each pass, where the synchronous path follows the
// order of the tail writes (the 82599 arbitrates round robin: no order
// across queues is promised either way). The engine also carries each
// frame onto the cable, so the peer's receive DMA (its RX ring writes)
// runs on this NIC's engine, as it runs on the writer of TDT without it:
// a frame travels from one NIC's memory into the other's on neither
// driver's goroutine.
//
// # Waking, stopping
//
// The engine sleeps on a channel of one slot (kick), never polls: a tail
// write that finds the slot full has its queue's bit in pending already
// seen by the pass to come. It is started by the first tail write that
// has work for it and stopped, and waited for, by Close, a function-level
// reset and CTRL.RST (stopEngine): the pass in flight ends first (it holds
// txMu, which those take), then the goroutine returns, and a queue marked
// but not yet served is forgotten, its descriptors unread, as a reset
// aborts a NIC's DMA. A reset's next tail write starts a new engine; after
// Close none starts, so no DMA happens after Close returns.

// dmaEngine is a NIC's transmit DMA goroutine.
type dmaEngine struct {
	pending atomic.Uint64 // TX queues whose tail moved, bit q for queue q
	wake    chan struct{} // one slot: a pass is due
	stop    chan struct{} // closed by stopEngine
	done    chan struct{} // closed when the goroutine returns
}

// engineLocked returns the NIC's DMA engine, started if it was not
// running. Under mu.
func (n *ixgbeNIC) engineLocked() *dmaEngine {
	if n.dma == nil {
		e := &dmaEngine{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
		n.dma = e
		go n.runEngine(e)
	}
	return n.dma
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
		for p := e.pending.Swap(0); p != 0; p = e.pending.Swap(0) {
			select {
			case <-e.stop:
				return
			default:
			}
			t0 := n.clockNS()
			n.txMu.Lock()
			for ; p != 0; p &= p - 1 {
				n.txQueue(bits.TrailingZeros64(p))
			}
			n.txMu.Unlock()
			n.modelNS.Add(n.clockNS() - t0)
		}
	}
}

// stopEngine stops the NIC's DMA engine, if one runs, and waits for its
// goroutine to return. It takes mu and then no lock while it waits, so it
// must be called holding neither txMu nor mu (the engine takes both).
func (n *ixgbeNIC) stopEngine() {
	n.mu.Lock()
	e := n.dma
	n.dma = nil
	n.mu.Unlock()
	if e != nil {
		close(e.stop)
		<-e.done
	}
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
