// Package drv holds what the gomx PCI NIC drivers (nicdrv/e1000e,
// nicdrv/ixgbe) share below the nicdrv interface and above their
// registers: attaching to the PCI function and waiting on its registers
// (Device), the memory of the descriptor rings (Rings), the refill of an
// RX ring and the slots of a TX ring (RxFill, TxSlots), the per-queue
// buffer pools (Pools), the waits on several queues (RxWaiter), posting
// payload placements and keeping their record (PostSlots, Placements),
// the IPv4 pseudo-header sum that checksum offload is seeded with
// (PseudoSum), the NIC-wide calls that take a queue (CheckQueue, Close,
// RxPlacement), and the control path (Control: the control lock, the
// closed flag, Stats over the statistics registers both NICs keep and
// the queues' counters, SetMulticast, Teardown). It is internal: its
// types are the drivers' private state, and a user sees them only through
// nicdrv.NIC. What differs between the NICs, the descriptor formats and
// the registers, stays in each driver.
//
// # Pools per queue
//
// Each RX queue receives into a pool of its own, and each TX queue's
// reclaim gives buffers back to the pools they came from, so a queue served
// by one goroutine takes only its own pool's lock, never contended by the
// goroutines of other queues. A driver that header-splits into small
// buffers (the 82599) gives each queue a second pool of HeaderBufferSize
// buffers for the headers. A caller that passes one pool for every queue
// (the drivers' Options.Pool) gets that: one pool, one lock, shared.
//
// # Shared code, and no call on the fast path
//
// The shared code works on concrete state (an RxFill, a TxSlots, a
// PostSlots the driver fills in from its queue), never through an
// interface or a function value per frame: a descriptor format is the
// driver's, so the shared step does the bookkeeping of a run of slots
// (buffers taken and given back, the tail advanced) and returns, and the
// driver then writes that run's descriptors in a loop of its own, where
// the compiler keeps the ring in registers. So folded, posting placements
// measured the same as each driver's loop of its own had: by cachegrind,
// on the 82599's BenchmarkPlace (a placement posted and its frame received
// per frame, 576 000 frames, three runs each), 672.8 to 673.3
// instructions per frame against 673.2 to 673.6.
//
// RxBatch and TxBatch share only the queue check (CheckQueue); the call
// to the queue's batch stays in each driver, where it is a direct call.
// A generic Batch over the driver's queue type was measured: Go compiles
// one body for every pointer type argument (its GC shape), so the batch
// call inside it goes through the shape's dictionary, an indirect call per
// batch besides the call to the shared body. By cachegrind, on the
// 82599's BenchmarkDriver (batches of 32, 576 000 frames, three runs each),
// it cost 349.9 to 350.2 instructions per frame against 349.2 to 349.6 for
// the driver's own call, about 0.6 more (0.2%); the CheckQueue form
// measured 349.3 to 349.6, the same as the driver's own. Timed on the
// shared 2-core VM (load 10 to 20), neither difference could be told from
// the run-to-run spread, which was 35 to 40%. The cost is small, but
// nothing is gained for it, so the fast path keeps its direct call. Close,
// Teardown and RxPlacement are generic: they are control calls, and their
// calls through the dictionary cost nothing a caller would notice.
//
// The control path's state is shared the same way: each queue keeps its
// counters (RxCounters, TxCounters) and its record of placements
// (Placements) as fields of its own, embedded, so the fast path counts a
// drop or reads a slot's placement as before, with no call; Stats and
// RxPlacement read them through the Control and the queue's lock. Folded
// so, the drivers' fast paths make the same calls as before (the same
// call instructions in every receive, refill and transmit function), and
// by cachegrind (GOGC=off, GOMAXPROCS=1, 100 000 against 300 000 frames)
// the e1000e's BenchmarkDriver ran 633.6 to 634.4 instructions a frame
// against 635.2 to 635.5, and the 82599's BenchmarkPlace 675.5 to 676.2
// against 671.8 to 674.2, the difference there the alignment padding
// (NOPs) of the receive batch's loops.
package drv
