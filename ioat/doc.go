// Package ioat drives Intel's memory-copy engines from user space: I/OAT
// "Crystal Beach" DMA channels (CBDMA, CB 3.2 to 3.4) and the work queues
// of the Data Streaming Accelerator (DSA) that replaces them from Sapphire
// Rapids on, through the device contract of package pci: a real device
// bound to vfio-pci or an in-process model from package emulated, which
// the driver cannot tell apart. On top of them it offers the asynchronous
// memory-copy API of the paper the project follows: Copy, ICopy, Check
// and Wait, with Fill, Compare and CRC32C beside it.
//
// # Layers
//
// Package ioat/hw names the hardware: registers, bits, the descriptor
// layout. A Channel owns one hardware channel and is not safe for
// concurrent use, like a DPDK dmadev queue: its owner enqueues
// descriptors (EnqueueCopy, EnqueueFill, EnqueueNull), rings the doorbell
// once per batch (Submit) and reaps completions into a slice (Poll). An
// Engine opens every channel of a set of functions and every work queue
// it configures on a DSA (or those EngineOptions.ChannelMask picks),
// adds locking, spreads
// requests by a Policy (Adaptive: by each queue's measured completion
// rate and bytes outstanding, for channels and work queues of different
// speeds in one Engine), copies small or overlapping requests on the CPU,
// and maps arbitrary []byte for DMA through a registration cache. Its
// Wait polls briefly, then, with Options.Interrupts, sleeps on the
// channel's MSI-X vector (each channel has its own: a function with
// several channels has a vector per channel, enabled together when the
// first of them opens with interrupts and disabled when the last
// closes): one waiter per channel sleeps on the eventfd
// and wakes the others when it wakes, so one interrupt that completes
// several requests wakes all their waiters, as an interrupt handler
// wakes its wait queue. Stats.BoundWakes counts the sleeps that lasted
// their bound (a millisecond) instead: a wake-up lost or held back.
//
// # One Engine, two kinds of queue
//
// An Engine drives Queues: a *Channel (one CBDMA channel) or a *WQ (one
// dedicated work queue of a DSA, opened by OpenDSA). Both have one owner
// who enqueues, submits once per batch and polls completions into a
// slice; the Engine's locking, policies, waits, registration cache and CPU
// threshold are the same for both, and NewEngine picks the driver by PCI
// ID. Where a channel chains descriptors and writes back one status word,
// a WQ posts each batch of descriptors to its portal as one batch
// descriptor with a 64-byte write (pci.Registers.WritePortal, MOVDIR64B)
// and reads a 32-byte completion record per posting; it keeps no more
// postings outstanding than the WQ's size, since the device drops one
// past that without a trace. Where OPCAP has them, a WQ also compares
// two buffers and generates CRC-32C, the result in the Completion
// (Differ, Offset; CRC); Engine.Compare and Engine.CRC32C run them on
// a work queue that can, or on the CPU when none can (CBDMA has
// neither). docs/dsa.md describes the DSA driver and how to configure a
// real DSA.
//
// # A channel's life
//
// Open checks the IDs and CBVER, enables memory decoding and bus
// mastering, claims the channel with the read-to-claim CHANCTRL.IN_USE
// semaphore (refusing one someone else holds unless Options.TakeOver),
// quiesces and resets it, clears CHANERR (and below CB 3.3 the
// CHANERR_INT mirror in configuration space, going on without it where
// that space cannot be read), maps a ring of pre-linked descriptors and an
// 8-byte completion word, programs CHANCTRL, CHANCMP and CHAINADDR, and
// runs a null descriptor to prove the channel works. It does not wait for
// the ARMED state: Linux's registers do not define it and SPDK never waits
// for it. Every step is undone if a later one fails. Close suspends and
// resets the channel and waits for the reset before it frees the ring, so
// no DMA lands after it.
//
// The fast path reads no register. Submit sets COMPL_WRITE on the last
// descriptor of the batch and writes the 16-bit DMACOUNT once; Poll reads
// the completion word the engine writes back, turns the descriptor
// address it names into a ring index, and delivers the requests up to it
// in order. Only when the word has not moved for a while with work
// outstanding does Poll read CHANSTS (progress the write-back does not
// report, or a halt without one) and CHANERR (error bits set without the
// channel halting).
//
// # Errors and recovery
//
// When the channel halts, the request holding the failed descriptor fails
// with a *ChanError carrying CHANERR (errors.Is matches ErrDMAFault or
// ErrDescriptor by its bits); the channel is reset and restarted at the
// next request, which runs again, as Linux's and DPDK's recovery do.
// Restarting clears the CHANERR bits it reads and carries on, as Linux,
// SPDK and DPDK do: a bit that still reads set after a second clear is
// one the part is slow to clear, logged once (Options.Logger), reported
// in Info.StickyChanErr and ignored; only bits that programming the
// channel raises refuse it, with an error naming them. Any
// run of failed requests is survived: only recoveries that fail nothing
// count towards giving up (ErrChannelBroken). A channel that makes no
// progress for Options.Watchdog with work outstanding, or that flags
// errors without halting, gets the same treatment, its request failing
// with ErrStalled or its CHANERR bits, so no wait is unbounded. The
// waits for a register (reset, suspend) and for the start-up null
// descriptor count the time the waiting goroutine ran: a stall of the
// whole process on a loaded machine, during which an emulated channel
// could not run either, does not use up Options.ResetTimeout or
// Options.StartTimeout.
//
// # What real channels need, and where it comes from
//
//	Behaviour                                      Reference
//	64-bit registers as two 32-bit accesses <3.3   LNX (ioat_chansts_32); SKX 0x2021 forced to 3.2 (LNX)
//	CHANERR_INT cleared below 3.3                  SPDK commit 9b172afd, LNX ioat_reset_hw
//	tolerate unreadable CHANERR_INT                spdk#484 (FreeBSD UIO path); Linux goes on
//	no wait for ARMED after CHAINADDR              LNX registers.h (no ARMED), SPDK ioat_channel_start
//	every channel of a function, 0x80 x (n+1)      LNX ioat_enumerate_channels reads CHANCNT
//	IN_USE claim refused unless taken over         CB3 CHANCTRL bit 8 semaphore; DPDK force-clears it
//	one MSI-X vector per channel of a function     LNX ioat_dma_setup_interrupts (INTRCTRL MSI-X vector control)
//	CHANERR cleared and carried on, not re-checked LNX ioat_reset_hw, SPDK ioat_reset_hw, DPDK __ioat_recover
//	addresses below 2^40 on Jasper Forest          spec §5, FreeBSD allocates descriptors below 2^40
//	v3.4 LTR active/idle and DRSCTL ring size      LNX ioat_alloc_chan_resources, ioat_alloc_ring
//	doorbell in steps below 2^15                   the 16-bit count must never look as if it went back
//	watchdog on a channel that stops completing    LNX ioat_timer_event (reset after no progress)
//	fail one request, reset, restart after it      LNX ioat_eh, DPDK __ioat_recover
//
// (LNX: Linux drivers/dma/ioat; SPDK: lib/ioat; DPDK: drivers/dma/ioat;
// spec: shared/spec/ioat.md, the project's restatement of them.)
//
// The conformance suite in this package's tests runs on every variant of
// the emulated model, on models first driven the way Linux, SPDK and DPDK
// drive them, and on real channels bound to vfio-pci when there are any
// (GOMX_IOAT_DEVICES, GOMX_REQUIRE_IOAT).
package ioat
