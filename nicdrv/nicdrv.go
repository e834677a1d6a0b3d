// Package nicdrv is the one batch-shaped interface every user-space NIC
// driver of gomx offers, and the packet-buffer pool the drivers share.
//
// # Shape
//
// A driver (package nicdrv/e1000e, the 82574L; nicdrv/ixgbe, the 82599) is
// opened on any implementation of the PCI device contract (package pci): a
// real function behind vfio-pci or an in-process model from package
// emulated. It never knows which. Opening brings the NIC up completely and
// returns a value that implements [NIC]. The interface is deliberately
// small and batch-shaped, in the manner of ixy's rx_batch/tx_batch and
// SPDK's build/flush/poll:
//
//   - [NIC.RxBatch] fills a caller-provided slice with received [Buffer]s
//     from one queue and gives the ring fresh buffers in their place, with
//     one tail-register write per call;
//   - [NIC.TxBatch] hands a slice of filled Buffers to one queue's ring with
//     one tail-register write, and reclaims the buffers of frames the NIC
//     has finished sending, giving them back to the pool.
//
// Neither allocates, and neither waits: a full TX ring takes fewer frames
// than offered and says how many; an empty RX ring returns 0.
//
// # Sending in place
//
// A frame need not be copied whole into a pool Buffer: [Buffer.Attach]
// hangs memory of the caller's, mapped for DMA in the pool's domain, after
// the Buffer's Data (typically the Ethernet header), and TxBatch points a
// second descriptor at it, as Linux and DPDK send multi-segment packets.
// The driver asks the NIC to report the frame's last descriptor done and,
// once it has, frees the Buffer, which calls the attachment's
// [Completion]: only then may the caller change that memory. A Buffer
// freed unsent (an error path, Close) completes its attachment too. A
// driver whose device cannot read the caller's memory (a USB function)
// copies the attachment into its own transfer instead and says so
// ([Info].TxAttachCopied).
//
// # Buffers and the pools
//
// Every packet lives in a [Buffer] of a [Pool]: a fixed set of equal buffers
// carved out of one hugepage region that is mapped for DMA once, so each
// buffer has a fixed IOVA the driver programs into descriptors. The Buffer
// headers are allocated once, when the pool is made, one 64-byte cache
// line each (what the fast path reads and writes per frame; a buffer's
// IOVA, memory and attachment sit in arrays of the pool); the fast path
// moves pointers to them and never allocates. A received Buffer belongs to the
// caller until it is transmitted or given back with [Pool.Free]. A
// transmitted Buffer belongs to the driver until the NIC has sent it; the
// driver then frees it. [Pool.Alloc] never waits: when every buffer is out it
// fails with [ErrPoolExhausted], so a program that leaks buffers sees an
// error, not a hang. A driver whose pool runs dry while refilling its RX ring
// leaves the slots empty, counts the event in [Stats].RxNoBuffer, and
// refills them on a later RxBatch.
//
// Each queue has a pool of its own ([NIC.Pool](q)): its RX ring is refilled
// from it, and frames built for its TX ring come from it, so the goroutine
// that serves a queue takes only that pool's lock, which no other queue's
// goroutine contends. A Buffer remembers its pool, and [Pool.Free] gives
// every buffer back to the pool it came from, whichever pool Free is called
// on: a frame received on one queue may be sent on another, or freed by
// any goroutine, and its buffers still go home (taking, then, the other
// queue's lock).
//
// # Header split
//
// A driver may offer header split receive, asked for at Open (the
// e1000e driver's Options.HeaderSplit; the 82599's SRRCTL header split
// fits the same shape). The NIC then writes the protocol headers of a frame
// it recognises into one buffer and the payload into another, so a
// protocol layer finds its headers in a small buffer of their own and the
// payload starts at the beginning of a buffer. RxBatch delivers such a frame
// as a chain of two Buffers: the first holds the headers, [Buffer].Next the
// rest. A NIC that writes unsplit frames into the payload buffer (the
// 82599) takes its header buffers from a per-queue pool of small (256-byte)
// buffers; one that writes them whole into the header buffer (the 82574)
// needs full-size header buffers from the queue's pool. What is split, by
// every driver that offers it:
//
//   - an unfragmented IPv4 or IPv6 TCP or UDP datagram: the first Buffer
//     holds the Ethernet, IP (with options or extension headers) and TCP
//     (with options) or UDP header, Next the bytes after them (nil when
//     nothing follows);
//   - a frame the NIC does not split (not IP, such as Open-MX's EtherType,
//     or an IP fragment) arrives whole in one Buffer, as without header
//     split. Other unfragmented IP datagrams may be split after the IP
//     header.
//
// [Buffer.AppendFrame] and [Buffer.FrameLen] read a chain whole, and
// [Pool.Free] frees it whole. [Info].HeaderSplit says whether the NIC was
// opened with it. A driver that cannot split refuses the option at Open
// with an error wrapping [ErrNotSupported]; it never ignores it.
//
// # Payload placement
//
// A driver may let the caller choose, frame by frame, where the payload of
// the next frames its RX queue receives lands ([Placer]): header split
// that always uses the header buffer, whatever the frame, so that the
// first [Info].PlaceHeader bytes of every frame go to a small header
// buffer of the driver's and the rest to a packet buffer. The caller posts
// packet buffers of its own ([Placement]: memory mapped for DMA in the
// NIC's domain, such as the pages a message is received into) with
// [Placer.PostRx]; the queue's descriptors take them in the order posted,
// and RxBatch delivers the frame that took one as its header Buffer with
// the placement's written bytes attached ([Buffer.Attached]). Frames that
// take no placement arrive in pool Buffers as ever.
//
// The NIC fills descriptors in arrival order, whatever frame arrives: a
// placement is consumed by the next frame the queue receives after every
// descriptor handed to the NIC before it, which need not be the frame the
// caller meant it for. [Placer.RxPlacement] says how many descriptors
// come first and how many placements were consumed, so a caller that
// posts for the frames it expects checks each one it gets and copies the
// ones that landed elsewhere. Placements are consumed strictly in the
// order they were posted, so the count of consumed ones names them: the
// NIC writes no more into their memory. Close consumes every placement
// still posted.
//
// A NIC may keep some queues for placement alone ([Info].PlaceOnly): the
// driver hands such a queue no buffer of its own, so every frame it
// receives takes what the caller posted (a placement, or a pool buffer
// posted as one), in order, and a frame that finds nothing posted is
// dropped. With a steering rule sending it only the frames a caller asked
// for (an EtherType of their own), nothing else takes their placements:
// several callers each expecting a run of frames from a peer get one such
// queue each. [Placer.CancelRx] takes back what such a queue did not use.
//
// # Control path
//
// Link state with a bounded wait ([NIC.WaitLink]), statistics (the NIC's
// own counters, accumulated across its clear-on-read registers, plus the
// driver's own drops and errors), promiscuous and multicast control, and
// steering rules.
//
// # Steering rules
//
// [NIC.AddRule] installs a [Rule] in the NIC's filters and returns its
// [RuleID]; [NIC.RemoveRule] takes it out again, and frames stop matching
// at once. [NIC.RuleCapacity] says how many rules of each [RuleKind] the
// NIC holds, so a caller can plan (an endpoint per rule) before it adds
// any. A rule the NIC cannot carry out in hardware is refused with an
// error wrapping [ErrNotSupported] — never accepted and ignored — so the
// caller knows to demultiplex in software; a rule whose table is full is
// refused with [ErrTableFull], naming the table. The NIC applies its rules
// in its own precedence (the driver's package doc gives it), and a
// received [Buffer] carries, in Rule, the ID of the rule that steered it
// when the NIC reports one. [RuleFlex] is the 82599's Flow Director flex
// word: 16 bits at one even offset in the first 64 bytes of IP frames, one
// offset per NIC.
//
// # Polling and interrupts
//
// Polling is the default and the fast path. With interrupts enabled in the
// driver's options, [NIC.WaitRx] sleeps on the MSI-X eventfds of the queues
// it is given (one, several, or all) until a frame arrives on one of them,
// ctx ends or the NIC closes, and says which queue; the driver programs the
// NIC's interrupt moderation so that a busy queue does not interrupt per
// frame, or, where its options turn moderation off (the 82599's
// NoModeration), lets the frame itself wake the sleeper at once. Either
// way WaitRx arms a vector only once it found the rings empty, so a busy
// receiver touches no interrupt register. A goroutine serving one queue
// waits on it alone; one serving several waits on them together with one
// call. A caller that waits with a timeout many times a millisecond gives
// it as WaitRx's deadline rather than in a context of its own per wait.
//
// # Close
//
// [NIC.Close] quiesces the NIC before it releases anything: receive and
// transmit are disabled, PCI bus mastering is turned off, and only then are
// the rings unmapped and the buffers given back. After Close returns the NIC
// performs no DMA. The driver does not close the pci.Device: the same
// device may be opened again (a restart without a reboot).
//
// A process that dies without Close (a signal, a crash) cannot quiesce
// anything itself. Through VFIO the kernel does it: releasing the device
// file turns PCI bus mastering off (and resets the function where it can),
// so a dead driver's NIC cannot DMA into memory that is being given back.
// The next Open quiesces the NIC again before it trusts any register, since
// a reset may not have cleared them (QEMU 7.2's does not).
package nicdrv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/internal/sentinel"
	"github.com/gomx-dev/gomx/pci"
)

// Sentinel errors. Drivers wrap them with the device and the detail; test
// with errors.Is. ErrNotSupported, ErrPoolExhausted, ErrClosed, ErrBadQueue,
// ErrTimeout and ErrNotPooled are the values every gomx package uses for
// these meanings (internal/sentinel): nicdrv.ErrClosed is pci.ErrClosed,
// transport.ErrClosed, ioat.ErrClosed; ErrNotSupported is
// pci.ErrNotSupported and xdp.ErrNotSupported; ErrBadQueue is xdp.ErrQueue;
// ErrPoolExhausted is hugepage.ErrExhausted.
var (
	// ErrNotSupported means the NIC cannot do what was asked in hardware
	// (a steering rule, a loopback mode, interrupts on this platform).
	ErrNotSupported = sentinel.ErrNotSupported
	// ErrPoolExhausted means every buffer of the pool is handed out.
	ErrPoolExhausted = sentinel.ErrExhausted
	// ErrClosed means the NIC or pool was closed.
	ErrClosed = sentinel.ErrClosed
	// ErrBadQueue means a queue index outside [0, Queues).
	ErrBadQueue = sentinel.ErrNoQueue
	// ErrTimeout means a register or the link did not reach the expected
	// state in time.
	ErrTimeout = sentinel.ErrTimeout
	// ErrNotNIC means the PCI function is not a NIC this driver knows.
	ErrNotNIC = errors.New("not a supported NIC")
	// ErrLinkDown means the operation needs the link up.
	ErrLinkDown = errors.New("link down")
	// ErrFrameSize means a frame is shorter than 14 bytes or longer than the
	// NIC's largest frame.
	ErrFrameSize = errors.New("bad frame size")
	// ErrTableFull means every entry of the NIC's table for a rule is in
	// use: remove a rule (RemoveRule) or demultiplex in software.
	ErrTableFull = errors.New("rule table full")
	// ErrNoRule means RemoveRule was given an ID the NIC does not hold
	// (never returned by AddRule, or removed already).
	ErrNoRule = errors.New("no such rule")
)

// Error is a failed driver operation: which NIC, which operation (a register
// name, a ring, a rule), and why.
type Error struct {
	// Addr is the NIC's PCI function.
	Addr pci.Address
	// Op names the operation or the register.
	Op string
	// Err is the cause, usually one of this package's sentinels.
	Err error
}

// Error gives the device, the operation and the cause.
func (e *Error) Error() string {
	return "nicdrv " + e.Addr.String() + ": " + e.Op + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// MAC is a 48-bit Ethernet address.
type MAC [6]byte

// String formats the address as "02:00:00:00:00:01".
func (m MAC) String() string {
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// IsMulticast reports whether the address is a group (multicast or
// broadcast) address.
func (m MAC) IsMulticast() bool { return m[0]&1 != 0 }

// Info describes an open NIC.
type Info struct {
	// Driver names the driver ("e1000e").
	Driver string
	// Model names the device ("82574L").
	Model string
	// Addr is the PCI function.
	Addr pci.Address
	// Queues is the number of RX and of TX queues in use.
	Queues int
	// RxRing and TxRing are the descriptor ring sizes of every queue.
	RxRing, TxRing int
	// MaxFrame is the largest frame, Ethernet header included and FCS
	// excluded, that TxBatch accepts and RxBatch delivers.
	MaxFrame int
	// Interrupts tells whether WaitRx sleeps on an interrupt (true) or
	// polls (false).
	Interrupts bool
	// HeaderSplit tells whether RxBatch delivers frames with header split
	// (see the package doc): headers in one Buffer, the payload in the
	// Buffer chained after it.
	HeaderSplit bool
	// TxAttachCopied tells that the driver copies memory attached to a
	// TX Buffer (Buffer.Attach) into a transfer buffer of its own, after
	// TxBatch returns, instead of having the device read it in place: a
	// USB function takes one bulk transfer per batch of frames (usbnet).
	// A caller gains nothing by attaching memory to such a NIC, and a
	// transport over it copies the frames it was asked to send in place,
	// and says so.
	TxAttachCopied bool
	// RSS describes how the NIC spreads IPv4 frames over its queues, so
	// that a caller can predict where a datagram lands (nil when the NIC
	// does not spread them, or does not say).
	RSS *RSS
	// PlaceHeader is, on a NIC opened to place payloads (the driver
	// implements [Placer] and was asked to), how many bytes of each frame
	// the NIC writes into the header buffer before the payload goes to a
	// placement; 0 when payloads are not placed.
	PlaceHeader int
	// PlaceMin is the least length of a Placement's memory: the most the
	// NIC may write into it. That is the largest frame less PlaceHeader
	// on a NIC that splits every frame there (the 82599), and less the
	// shortest header it splits off on one that splits IP frames at
	// their headers (the 82574L: Ethernet and IPv4, 34 bytes).
	PlaceMin int
	// PlaceOnly is how many RX queues, the last ones, take only what is
	// posted (see [Placer]): the driver hands them no buffer of its own,
	// and a frame that finds nothing posted is dropped. A caller steers
	// to each such queue (a rule) only the frames it posts for.
	PlaceOnly int
	// PlaceOnlyMin is PlaceMin on the PlaceOnly queues, when the NIC
	// writes less there (the 82599 strips their VLAN tags); 0 when it is
	// PlaceMin.
	PlaceOnlyMin int
}

// Placement is memory of the caller's posted to receive the payload of one
// frame (see [Placer]): it is mapped for DMA in the NIC's domain and
// IOVA-contiguous for len(Mem) bytes, from IOVA. A Placement without
// memory (Mem nil) posts a buffer of the queue's pool instead: the frame
// that takes it arrives whole in a pool Buffer, as an unposted one does,
// and it counts as posted and consumed as any placement.
type Placement struct {
	// Mem is where the payload may land, from Mem[0]; at least
	// Info().PlaceMin bytes, or nil for a pool buffer.
	Mem []byte
	// IOVA is where the NIC sees Mem[0].
	IOVA uint64
}

// PlacementState is one RX queue's placements (Placer.RxPlacement).
type PlacementState struct {
	// Ahead is how many descriptors come before a placement posted now:
	// those the NIC holds and has not written, which the next frames
	// that arrive take, and those it wrote whose frames RxBatch has not
	// delivered yet. A caller that counts the frames it expects until
	// it has handled them thus subtracts them all, whether or not the
	// NIC wrote them yet: a frame the NIC writes between the two reads
	// cannot move the count.
	Ahead int
	// Posted and Consumed count the placements posted since Open and
	// those a frame took (delivered or dropped), in posting order.
	Posted, Consumed uint64
}

// Placer is implemented by a NIC whose RX queues can receive payloads
// into placements (see the package doc). Its methods may be called
// while another goroutine calls RxBatch on queue q: the queue's lock
// orders them.
type Placer interface {
	// PostRx hands placements to RX queue q, in order, after every
	// descriptor the queue holds, and returns how many it took (fewer
	// when the ring is full). A placement shorter than Info().PlaceMin
	// is refused with ErrFrameSize, after the ones before it were taken;
	// a NIC not opened to place payloads refuses every one with
	// ErrNotSupported. While placements are posted and not consumed the
	// queue gets no pool buffers behind them, so that the placements
	// posted next follow them directly.
	PostRx(q int, p []Placement) (int, error)
	// RxPlacement reports queue q's placements.
	RxPlacement(q int) PlacementState
	// CancelRx takes back every placement of queue q, one of the
	// Info().PlaceOnly queues, that no frame took: the queue stops, its
	// unwritten descriptors and any frame it holds undelivered are
	// dropped and counted consumed, and it starts again with nothing
	// posted. The NIC writes no more into any placement posted before.
	// Another queue is refused with ErrNotSupported (stopping it would
	// drop the traffic it carries).
	CancelRx(q int) error
}

// Link is the state of the NIC's link.
type Link struct {
	// Up is true when the link is up.
	Up bool
	// SpeedMbps is the negotiated speed (10, 100, 1000, 10000); 0 when down.
	SpeedMbps int
	// FullDuplex is the negotiated duplex.
	FullDuplex bool
}

// String formats the link as "up 1000 Mb/s full duplex" or "down".
func (l Link) String() string {
	if !l.Up {
		return "down"
	}
	d := "half"
	if l.FullDuplex {
		d = "full"
	}
	return fmt.Sprintf("up %d Mb/s %s duplex", l.SpeedMbps, d)
}

// Stats are a NIC's counters since it was opened: the hardware's (read from
// clear-on-read registers and accumulated) and the driver's own.
type Stats struct {
	// RxFrames, RxBytes, TxFrames and TxBytes are good frames and their
	// octets as the NIC counts them (FCS included in the byte counts, as
	// the 82574 does).
	RxFrames, RxBytes, TxFrames, TxBytes uint64
	// RxMissed counts frames the NIC dropped for lack of room (MPC).
	RxMissed uint64
	// RxNoDescriptor counts times the NIC found no free RX descriptor
	// (RNBC).
	RxNoDescriptor uint64
	// RxErrors counts frames received with CRC, alignment, symbol or
	// length errors.
	RxErrors uint64
	// RxBroadcast and RxMulticast count good broadcast and multicast frames.
	RxBroadcast, RxMulticast uint64

	// RxNoBuffer counts, per RxBatch, the RX ring slots the driver could
	// not refill because the pool was exhausted (they are refilled later;
	// a slot that stays empty over several calls counts each time).
	RxNoBuffer uint64
	// RxDropped counts frames the driver dropped: reported in error by the
	// NIC, or spread over several descriptors.
	RxDropped uint64
	// TxRingFull counts TxBatch calls that could not take every frame.
	TxRingFull uint64
	// TxRejected counts frames TxBatch refused (bad size).
	TxRejected uint64
	// Interrupts counts interrupts the driver consumed in WaitRx.
	Interrupts uint64
}

// RuleKind is what a steering rule matches.
type RuleKind int

// Steering rule kinds (see [Rule]).
const (
	// RuleEtherType sends frames of one EtherType to a queue.
	RuleEtherType RuleKind = iota + 1
	// RuleDestMAC sends frames for one destination MAC to a queue.
	RuleDestMAC
	// RuleUDPDestPort sends IPv4/UDP datagrams for one destination port to
	// a queue.
	RuleUDPDestPort
	// RuleByte sends frames whose byte at Offset equals Value to a queue
	// (the Open-MX endpoint byte).
	RuleByte
	// RuleFlex sends IP frames whose 16-bit word at Offset equals Flex to
	// a queue: the 82599's Flow Director flex field. Offset is even and
	// below 64, and a NIC compares one offset at a time: a rule at another
	// offset is refused (ErrNotSupported) while a rule at the first one is
	// installed. Frames that are not IP never match.
	RuleFlex
)

// RuleKinds lists every rule kind, for a caller (or a test) that asks a
// NIC about each.
var RuleKinds = []RuleKind{RuleEtherType, RuleDestMAC, RuleUDPDestPort, RuleByte, RuleFlex}

// String names the rule kind.
func (k RuleKind) String() string {
	switch k {
	case RuleEtherType:
		return "EtherType"
	case RuleDestMAC:
		return "destination MAC"
	case RuleUDPDestPort:
		return "UDP destination port"
	case RuleByte:
		return "byte at offset"
	case RuleFlex:
		return "16-bit flex word"
	}
	return fmt.Sprintf("RuleKind(%d)", int(k))
}

// Rule is one steering rule: frames that match go to RX queue Queue.
type Rule struct {
	Kind      RuleKind
	EtherType uint16 // RuleEtherType
	MAC       MAC    // RuleDestMAC
	Port      uint16 // RuleUDPDestPort
	Offset    int    // RuleByte, RuleFlex: offset from the start of the frame
	Value     byte   // RuleByte
	Flex      uint16 // RuleFlex: the word at Offset, big-endian as on the wire
	Queue     int
}

// String describes the rule.
func (r Rule) String() string {
	switch r.Kind {
	case RuleEtherType:
		return fmt.Sprintf("EtherType %#04x to queue %d", r.EtherType, r.Queue)
	case RuleDestMAC:
		return fmt.Sprintf("destination MAC %v to queue %d", r.MAC, r.Queue)
	case RuleUDPDestPort:
		return fmt.Sprintf("UDP destination port %d to queue %d", r.Port, r.Queue)
	case RuleByte:
		return fmt.Sprintf("byte %d == %#02x to queue %d", r.Offset, r.Value, r.Queue)
	case RuleFlex:
		return fmt.Sprintf("IP frame word %d == %#04x to queue %d", r.Offset, r.Flex, r.Queue)
	}
	return r.Kind.String()
}

// Check reports what is wrong with the rule itself, whatever the NIC: an
// unknown kind, a negative queue, a byte offset outside the frame's first
// 64 bytes... It wraps ErrBadQueue for a negative queue. Drivers call it
// first; nil means the NIC decides.
func (r Rule) Check() error {
	switch {
	case r.Queue < 0:
		return fmt.Errorf("rule %v: queue %d: %w", r, r.Queue, ErrBadQueue)
	case r.Kind == RuleByte && (r.Offset < 0 || r.Offset >= 64):
		return fmt.Errorf("rule %v: offset %d: want 0..63", r, r.Offset)
	case r.Kind == RuleFlex && (r.Offset < 0 || r.Offset > 62 || r.Offset%2 != 0):
		return fmt.Errorf("rule %v: offset %d: the flex word is at an even offset from 0 to 62", r, r.Offset)
	case r.Kind < RuleEtherType || r.Kind > RuleFlex:
		return fmt.Errorf("rule %v: unknown kind", r)
	}
	return nil
}

// RuleID names an installed rule, for RemoveRule and in Buffer.Rule. The
// zero RuleID names no rule.
type RuleID uint32

// RxServer is implemented by drivers whose interrupt-mode WaitRx looks at
// a queue's ring a number of times before it arms the queue's vector
// (ixgbe; e1000e arms after its first look, with no looks to skip): a
// frame that comes within the looks costs no register write, interrupt or
// wake-up.
type RxServer interface {
	// RxServed says that queue q's frames were taken until now by looks
	// of the caller's own, outside WaitRx (an application serving its
	// queue while its receive thread stayed away): the next WaitRx on q
	// arms q's vector after its first look, as those looks were taken
	// already, unless a frame is taken from q first. Without interrupts
	// it does nothing.
	RxServed(q int)
}

// NIC is an open NIC, as every driver of this package family offers it.
//
// RxBatch and TxBatch of one queue must be called by one goroutine at a
// time (a queue is single-producer, single-consumer); different queues, and
// the control methods, may be used concurrently. Each queue has its own
// pool (Pool(q)) and its own lock, so queues served by different
// goroutines share no lock on the fast path.
type NIC interface {
	// Info describes the NIC as opened.
	Info() Info
	// MAC is the NIC's station address (receive address 0).
	MAC() MAC
	// Pool is the buffer pool RX queue q receives into; Alloc from it to
	// build frames for TxBatch on queue q. TxBatch takes a Buffer of any
	// of the NIC's pools on any queue, and gives it back to its own pool
	// once sent; only a queue's own pool keeps that queue's fast path
	// clear of other queues' locks. Pool returns nil for a queue outside
	// [0, Info().Queues).
	Pool(q int) *Pool
	// RxBatch moves up to len(bufs) received frames of queue q into bufs
	// and returns how many. It does not wait. The Buffers belong to the
	// caller: transmit them or Free them. With header split a frame may
	// be a chain of Buffers (Buffer.Next); bufs holds its first, which
	// for a split frame is a small header buffer of the queue's header
	// pool.
	RxBatch(q int, bufs []*Buffer) (int, error)
	// TxBatch queues bufs in order on TX queue q and returns how many it
	// took; those belong to the driver from now on. Fewer than len(bufs)
	// means the ring is full: retry the rest later. A frame of bad size,
	// or a chained Buffer (Next set), fails with ErrFrameSize after the
	// frames before it were taken. A Buffer with memory attached
	// (Buffer.Attach) is sent as Data followed by that memory, read in
	// place by the NIC. Every call first reclaims what the NIC has sent,
	// so an empty batch only reclaims: it frees those buffers and calls
	// the completions of their attachments.
	TxBatch(q int, bufs []*Buffer) (int, error)
	// WaitRx waits until one of the given RX queues (every queue when
	// none is given) has a frame and returns it; or until ctx ends (its
	// error), deadline passes (context.DeadlineExceeded, after a last
	// look at the queues; the zero Time: no deadline) or the NIC closes
	// (ErrClosed). A caller that waits with a timeout many times a
	// millisecond passes it as deadline, which costs no context and no
	// timer of its own per wait. With interrupts it sleeps on
	// the queues' vectors; without, it polls, yielding the processor
	// between looks. At most one WaitRx may wait on a queue at a time:
	// with interrupts, arming a queue clears its latched interrupt cause,
	// and on a real NIC a cause stays latched until the throttle (EITR)
	// lets its message out, so a second waiter's arming could clear the
	// cause of a frame whose message would have woken the first, which
	// then sleeps on.
	WaitRx(ctx context.Context, deadline time.Time, queues ...int) (int, error)
	// Link reads the link state now.
	Link() Link
	// WaitLink waits at most timeout for the link to be up (want true) or
	// down (want false) and returns the state it saw; ErrTimeout when the
	// link did not get there.
	WaitLink(want bool, timeout time.Duration) (Link, error)
	// Stats reads and accumulates the NIC's counters.
	Stats() (Stats, error)
	// SetPromiscuous makes the NIC accept every unicast and multicast
	// frame (on) or only its own and the subscribed ones (off).
	SetPromiscuous(on bool) error
	// SetMulticast subscribes exactly to the given group addresses; an
	// empty list unsubscribes from all (broadcast is always accepted).
	SetMulticast(groups []MAC) error
	// AddRule installs a steering rule in hardware and returns its ID. It
	// fails with an error wrapping ErrNotSupported when the NIC cannot
	// carry the rule out, ErrTableFull when the table that would hold it
	// is full, and ErrBadQueue for a queue the NIC does not have. Rules
	// apply in the NIC's own precedence (the driver's package doc says
	// which), whatever order they were added in.
	AddRule(r Rule) (RuleID, error)
	// RemoveRule uninstalls a rule AddRule returned: frames stop matching
	// it at once. An unknown ID fails with ErrNoRule.
	RemoveRule(id RuleID) error
	// RuleCapacity is how many rules of kind k the NIC holds at most when
	// no other rule is installed (0: it carries out none). Kinds that
	// share a table (the 82599's UDP port and flex rules in Flow
	// Director) take from one count.
	RuleCapacity(k RuleKind) int
	// Close quiesces the NIC (no DMA after it returns), releases its rings
	// and gives the buffers in them back to their pools. Pools the driver
	// made itself are closed too; one passed in by the caller stays open.
	// Close does not close the PCI device.
	Close() error
}
