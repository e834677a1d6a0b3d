// Package emulated holds in-process register models of the devices gomx
// drives, behind the same device contract (package pci) as real devices
// opened through VFIO. A driver cannot tell a model from hardware: it gets
// a pci.Device whose configuration space, BARs, DMA domain and interrupts
// behave as the device's do, so the driver's tests, examples and
// benchmarks run anywhere, and the same conformance suites run unchanged
// on hardware when it is there.
//
// # Shape of a model
//
// A platform (CBDMA is one) owns an IOMMU and a set of Functions. A
// Function is one PCI function: a 4 KiB configuration space with
// per-byte writable and write-1-to-clear masks, BAR0 as a register file
// in which every access is one call into the device model, MSI-X vectors
// as pci.Interrupts (local ones, pci.NewLocalInterrupt: the model's signal
// wakes a sleeping driver directly, not through Go's network poller, which
// a goroutine keeping the driver's one processor busy would hold back), and
// a function-level reset. The device model behind
// it implements a small internal interface: read and write at a BAR
// offset and width, react to configuration writes, reset, stop.
//
// The IOMMU is the platform's DMA domain. It hands out IOVAs for buffers
// (pci.DMA), never reuses them, leaves an unmapped guard page between
// mappings and, in scatter mode, gives every 4 KiB page its own segment,
// so a driver that runs past a buffer, uses an IOVA after Unmap or
// ignores IOVA discontinuities faults instead of silently touching other
// memory. Models reach memory only through it, as a device behind a real
// IOMMU does; a refused access is a recorded fault that the model turns
// into the device's own error (CBDMA: a read- or write-data CHANERR bit).
//
// Models are strict both ways: what the hardware refuses gets the
// hardware's error, and what the hardware accepts is accepted, so a
// driver that passes here is not merely passing a stricter or looser toy.
// Misprogramming the hardware would not honour and that has no error bit
// is counted as a violation (with a description of the latest), which the
// drivers' test suites require to stay at zero.
//
// # The CBDMA (I/OAT) model
//
// NewCBDMA builds a platform of CBDMA functions (Xeon "Crystal Beach"
// DMA, CB 3.2 to 3.4), each with CHANCNT channels whose register blocks
// sit at 0x80 x (n+1) in BAR0 (one channel per function on every Xeon;
// more on older parts). Registers, bits and the descriptor layout come
// from package ioat/hw, which the driver uses too. Each channel runs its
// descriptors on its own goroutine: it spins on the doorbell for a while
// after work, then parks until the doorbell kicks it, so an idle platform
// costs no CPU. Those goroutines belong to the process that drives the
// model, and take its CPUs; CBDMAOptions.CPUs gives them CPUs of their
// own instead (each locks its thread and binds it there), the nearest a
// model comes to a device's own silicon. Such a channel yields its CPU
// to the kernel while it spins (so a thread sharing that CPU runs) and
// parks on a futex the doorbell wakes directly, not through the Go
// scheduler: a doorbell starts it at once, as a doorbell write starts
// silicon.
//
// A channel follows the CB3 state machine: RESET leaves it HALTED;
// CHAINADDR arms it (ARMED, or IDLE with HideArmed for parts that do not
// report ARMED) and restarts its internal count; each DMACOUNT write
// announces descriptors up to that 16-bit count; it goes ACTIVE, runs the
// chain by its next links, writes CHANSTS back to CHANCMP when a
// descriptor asks for it (and on error with ERR_COMPLETION_EN), and goes
// IDLE when the count is reached. Errors latch CHANERR bits (and the
// CHANERR_INT mirror in configuration space below 3.3) and halt the
// channel, which accepts a new chain only once both are cleared. CHANSTS
// and its write-back change as one event; reading the low dword of
// CHANSTS latches the high one. On 3.4 (DMACAP.DPS) descriptors are
// fetched when the doorbell rings, up to CHWPREFLMT ahead (32 if unset);
// below, when they execute. Copies and fills move their data when the
// descriptor completes, after the modelled transfer time when a bandwidth
// cap is set. InjectError and InjectHang make a channel fail or stop at a
// chosen descriptor, for testing a driver's recovery and watchdog;
// CBDMAOptions.SlowClear makes chosen CHANERR bits keep reading set for a
// while after they are cleared (the error itself is gone, the channel
// arms and runs), as parts do whose error register lags its clear.
//
// # CBDMA misprogramming: what the model does and why
//
// LNX is Linux drivers/dma/ioat, SPDK lib/ioat with include/spdk/ioat_spec.h,
// DPDK drivers/dma/ioat, VST Linux's VFIO selftest CBDMA driver, and
// spec the project's notes (shared/spec/ioat.md) that restate them.
//
//	Misprogramming                          Model                                       Reference
//	64-bit CHANSTS/CHAINADDR/CHANCMP <3.3   accepted, full value                         SPDK mmio_read_8/write_8 and DPDK 64-bit register fields on all versions (BDX 0x6F20 is 3.2)
//	32-bit halves of CHANSTS                low read latches high                        LNX ioat_chansts_32: reading the low dword latches the high one
//	registers written while RESET is set    land (the reset took effect at once)         DPDK __ioat_recover: RESET, CHAINADDR, CHANCTRL, CHANCMP, no poll
//	CHAINADDR = 0                           accepted; faults only if a doorbell runs it  DPDK probe writes 0 on each iteration of its RESET wait
//	CHAINADDR misaligned or >=2^40 on JSF   halt, CHANERR bit 4 (chain address)          spec §4.5; JSF 40-bit (spec §5)
//	CHAINADDR while ACTIVE/IDLE             violation, halt, CHANERR bit 4               spec §4.1 (arm from HALTED/SUSPENDED/ARMED only)
//	CHAINADDR with CHANERR (or <3.3 INT)    violation, stays HALTED                      SPDK commit 9b172afd; spec §2 (CHANERR_INT)
//	DMACOUNT moved backwards                violation, halt, CHANERR bit 18 (count)      LNX names bit 18 descriptor-count error; spec §4.3 (count only grows)
//	DMACOUNT past the ring                  violation, halt, CHANERR bit 18              spec §4.3 (<= ring-1 outstanding); a self-linked descriptor may repeat (VST memcpy_storm)
//	doorbell before CHAINADDR after reset   violation; the count is dropped at arm       LNX, SPDK, DPDK all write CHAINADDR first (spec §4.2)
//	doorbell with bus mastering off         violation, halt, CHANERR bit 2               PCI: no DMA without COMMAND.BME
//	unknown op, reserved control bits       halt, CHANERR bit 10 (descriptor control)    LNX hw.h descriptor layouts; fill: bits 23:9, 6:5, 1 reserved (HINT too)
//	bundle bit                              halt, CHANERR bit 10                         no CRC/DIF ops here (spec §3.4)
//	page-break bits                         executed in two pieces (DMACAP bit 0)        spec §5 (one 2-page discontinuity per descriptor)
//	destination DCA bit                     accepted below 3.4, bit 10 on 3.4            LNX turns DCA off from 3.4 (spec §1); DMACAP says so
//	size 0 or > 2^XFERCAP                   halt, CHANERR bit 11 (length)                spec §5
//	next link not 64-byte aligned           halt, CHANERR bit 3                          spec §4.5
//	address with top 16 bits, or wrapping   halt, CHANERR bit 0/1                        FreeBSD rejects 48+-bit addresses (spec §5)
//	address >= 2^40 on Jasper Forest        halt, CHANERR bit 0/1/2                      spec §5 (JSF is 40-bit)
//	unmapped descriptor                     halt, CHANERR bit 4 (first) or 2 (next)      spec §4.5
//	unmapped source/destination             halt, CHANERR bit 8/9 (read/write data)      LNX: IOMMU faults are recoverable read/write errors
//	bad completion address                  halt, CHANERR bit 12                         spec §4.5
//	error masked by CHANERRMSK              violation; latched, not halted, completes    LNX masks only XOR/PQ validation bits, never copy errors
//	error without ANY_ERR_ABORT_EN          latched, channel stops without halting       LNX, SPDK, DPDK all set ANY_ERR_ABORT_EN (spec §2.2)
//	descriptor rewritten after doorbell     3.4: not seen (prefetched); below: seen      DMACAP.DPS, LNX DRSCTL/CHWPREFLMT (spec §1, §2)
//	destination read before completion     old bytes (data lands at completion)         spec §3.6 (complete means landed)
//	CHANCMD START/APPEND (CB1 commands)     violation, halt, CHANERR bit 5               spec §2.2 (CB3 starts with CHAINADDR)
//	XFERCAP option 32                       refused: the field has 5 bits                LNX masks XFERCAP with 0x1f
//	access to a register that is not there  violation                                    spec §2
//
// DCAOFFSET points past every channel block (0xE00), below the MSI-X
// table at 0x2000; the model does not implement the DCA registers there.
//
// # The DSA model
//
// NewDSA builds a platform of Data Streaming Accelerator functions (the
// copy engine of Xeons from Sapphire Rapids on), registers and layouts
// from package ioat/dsahw. BAR0 holds the capabilities (GENCAP, WQCAP,
// GRPCAP, ENGCAP, OPCAP), GENSTS, CMD and CMDSTS, SWERR and the GRPCFG and
// WQCFG tables; BAR2 holds one portal per WQ, which takes a descriptor as
// one 64-byte write (pci.Registers.WritePortal). One goroutine per
// function is its engines: it serves the enabled WQs in turn, executes
// no-op, drain, memory move, fill, compare, CRC generation and batches
// (each as OPCAP offers them), writes completion records status word last,
// and raises the WQ's MSI-X vector (the descriptor's interrupt handle,
// 1..WQs; vector 0 is for errors) on request.
//
// What the model checks:
//
//	Misprogramming                               Model                                     Reference
//	command while CMDSTS active                  violation, command ignored                 Linux idxd_cmd_exec polls active first
//	ENABLE_DEVICE with bus mastering off          CMDSTS 0x12, violation                     registers.h IDXD_CMDSTS_ERR_BUSMASTER_EN
//	WQ sizes adding up past total_wq_size         CMDSTS 0x14, violation                     ERR_WQ_SIZE_ERANGE
//	group with WQs and no engine                  CMDSTS 0x15, violation                     ERR_GRP_CONFIG
//	engine or WQ in two groups, or out of range   CMDSTS 0x16/0x17/0x18, violation           ERR_GRP_CONFIG2-4
//	ENABLE_WQ: size 0, priority 0, shared mode    CMDSTS 0x22/0x23/0x26, violation           ERR_WQ_SIZE, ERR_WQ_PRIOR, ERR_PASID_EN
//	  without PASID, limits over GENCAP's          CMDSTS 0x27/0x28, violation                ERR_MAX_BATCH_SIZE, ERR_MAX_XFER_SIZE
//	ENABLE_WQ with the device disabled            CMDSTS 0x20, violation                     ERR_DEV_NOTEN
//	GRPCFG/WQCFG/GENCFG written while enabled      violation, write ignored                   the tables lock when the device (WQ) is enabled
//	descriptor past a dedicated WQ's size          dropped, counted, violation                posted MOVDIR64B writes are dropped silently
//	descriptor to a disabled WQ, register-width    dropped, counted, violation                portals take 64-byte writes to enabled WQs only
//	  write to a portal
//	unknown opcode, opcode not in OPCAP            record status 0x10                         uapi idxd.h DSA_COMP_BAD_OPCODE
//	reserved flags, RCR without CRAV              record status 0x11                         DSA_COMP_INVALID_FLAGS
//	size 0 or over the WQ's max_xfer_shift         record status 0x13                         DSA_COMP_XFER_ERANGE
//	batch count <2 or over max_batch_shift        record status 0x14                         DSA_COMP_DESC_CNT_ERANGE
//	completion record not 32-byte aligned          SWERR code 0x1b, error interrupt          DSA_COMP_CRA_ALIGN
//	unmapped source or destination                 status 0x03, bytes done, fault address    DSA_COMP_PAGE_FAULT_NOBOF (partial)
//	failure in a batch                             member's record, batch status 0x05        DSA_COMP_BATCH_FAIL
//
// InjectStatus makes a chosen descriptor complete with a chosen status,
// for testing a driver's recovery. DSAOptions.Bandwidth (or SetBandwidth)
// caps a function's rate, its engines sharing it, as the CBDMA model's
// cap does a channel's; DSAOptions.IOMMU puts the functions behind
// another platform's IOMMU (a CBDMA model's), so one driver engine holds
// channels and work queues of different speeds in one DMA domain.
//
// With DSAOptions.SVA the platform is a DSA as the kernel's idxd driver
// leaves it for a process using its user work queues: ConfigureKernel
// programs groups and WQs (dedicated or shared, PASID enabled) through the
// registers as idxd does; UserPortal is a WQ's portal page as mapping
// /dev/dsa/wqD.Q gives it, not a BAR of a function the process owns:
// Write64B takes MOVDIR64B (dedicated WQs; anything else is dropped and
// recorded), Enqueue takes ENQCMD (shared WQs) and answers false, as ZF
// does, when the WQ is full or disabled; ENQCMD to a dedicated WQ is a
// violation. Descriptor addresses are the process's virtual addresses:
// the IOMMU maps a buffer at its own address, IOMMU.MarkNotPresent makes
// pages fault with partial completion (bytes done, fault address, the
// write bit; moves and fills alike) until IOMMU.Touch brings them in, as
// the process touching the page would.
//
// # The 82574L (e1000e) model
//
// NewE1000E builds a platform of Intel 82574L NICs (8086:10D3, the device
// QEMU 7.2 calls e1000e) for the user-space driver in nicdrv/e1000e, which
// shares its register package (nicdrv/e1000e/hw) with the model as the
// ioat driver shares ioat/hw. Ports are cabled in pairs (Cable) or joined
// by a hub (Hub); a frame a NIC transmits reaches the other end's receive
// ring on the TDT write, and SetLink pulls a cable. The model follows QEMU
// 7.2 where the datasheet and QEMU differ, since that is the device the
// VFIO tests drive: CTRL.RST resets almost nothing, RFCTL and the buffer
// size latch when RCTL is enabled, a queue transmits only with TARC bit 10
// set. What it checks, and counts as violations (E1000EStats), is listed
// on the E1000E type.
//
// # The 82599 (ixgbe) model
//
// NewIXGBE builds a platform of Intel 82599 10 GbE NICs (8086:10FB) for
// nicdrv/ixgbe, sharing nicdrv/ixgbe/hw with it: per-queue enable bits on
// up to 64 queue pairs, advanced descriptors, header split, jumbo frames,
// the receive filters in the chip's order (EtherType, 5-tuple, Flow
// Director perfect filters with the software-computed bucket hash checked,
// RSS), MSI-X per queue with EITR, clear-on-read statistics. Unlike QEMU's
// e1000e, CTRL.RST resets the registers. The IXGBE type lists what it
// checks. As on the chip, its queues share no lock on the data path: a
// queue's tail write and ring walk, its refill and a frame's delivery into
// it take the NIC's register lock only for reading, with the queue's own
// lock, so steered queues on different cores do not wait for each other
// (the locks are described on ixgbeNIC in ixgbe.go).
//
// Its DMA runs in one of two places. By default the goroutine that
// writes TDT does the transmit DMA, and a cabled peer's receive DMA,
// before the write returns: every frame is in the
// peer's RX ring when TxBatch returns, which is what a test that looks
// for a frame at once wants. With IXGBEOptions.AsyncDMA each NIC has DMA
// engines of its own, a transmit and a receive goroutine, as the chip's
// transmit and receive DMA run at once (one transmit engine per NIC, not
// per queue: the walk of a ring holds the NIC's transmit lock, so engines
// of two queues would take turns, and the 82599 has one transmit DMA
// arbitrating between its queues). A TDT write then records the tail,
// checks it and wakes the transmit engine through a one-slot channel; the
// engine fetches the descriptors, reads the frames through the IOMMU, puts
// them on the cable and writes the descriptors back, running the same
// walk as the synchronous path, so the order, the DD bits, the counters
// and the violations are the same. A frame off the wire waits in the NIC's
// packet buffer until its receive engine writes it into the RX rings, so
// each NIC writes its own host's memory. A tail write and a frame off the
// wire take the register lock only for reading, so neither waits for a
// delivery under way. Close, FLR and CTRL.RST stop the engines and wait
// for them, and a NIC in reset or closed takes no frame off the wire; a
// benchmark that measures the driver's and mx's CPU rather than the
// model's wants the engines (ixgbe_dma.go explains the rest).
//
// # The wire
//
// Every NIC model's ports plug into one model-neutral wire (wire.go): Port
// names a port of any platform, Cable and Hub join ports, of one platform
// or of several (an 82599 to an 82574L), and Connect may put transport/
// fault's seeded fault model on the cable. A frame gets an FCS as it enters
// a faulty line and the receiving model checks it, so a corrupted frame is
// counted in CRCERRS and dropped, as a NIC does.
//
// Both NIC models are built on one core (nicmodel.go) that holds what does
// not depend on the chip: the platform's ports, the lock order, the
// function's life cycle (configuration writes, FLR, close with no DMA
// after it), the link, the front of the receive path (bad FCS, the
// address filter, the hold that waits for descriptors) and the EITR
// throttle of MSI-X messages. Each model supplies its registers, reset
// values, filters, descriptor formats and interrupt causes through a small
// set of hooks, so a third NIC model adds only what its datasheet defines.
package emulated
