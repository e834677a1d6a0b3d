package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// AttachMode says how the XDP program is attached to the interface.
type AttachMode int

const (
	// AutoAttach tries driver (native) mode and falls back to generic mode.
	AutoAttach AttachMode = iota
	// DriverMode runs the program in the driver's receive path (native
	// XDP); it fails with ErrNotSupported on a driver without XDP.
	DriverMode
	// GenericMode runs the program on the skb path (SKB mode): slower, but
	// every driver has it.
	GenericMode
)

// String names the mode.
func (m AttachMode) String() string {
	switch m {
	case AutoAttach:
		return "auto"
	case DriverMode:
		return "driver"
	case GenericMode:
		return "generic"
	}
	return "AttachMode(" + strconv.Itoa(int(m)) + ")"
}

// ProgramOptions configures the XDP program of one interface.
type ProgramOptions struct {
	// Queues is how many rx queues the program serves, 0..Queues-1; the
	// interface's rx queue count when zero. Frames arriving on other
	// queues go to the kernel.
	Queues int
	// Slots is how many sockets may share one queue, a power of two up to
	// 64; 1 when zero. With more than one, the program picks the socket by
	// the frame's destination endpoint byte (see SetEndpoint).
	Slots int
	// EtherType is the EtherType of raw frames to redirect; 0x86DF
	// (Open-MX) when zero. NoEtherType turns raw framing off.
	EtherType   uint16
	NoEtherType bool
	// UDPPortLow..UDPPortHigh, when UDPPortLow is not zero, is the range of
	// UDP destination ports (IPv4, no IP options, unfragmented) whose
	// frames are ours.
	UDPPortLow, UDPPortHigh uint16
	// EndpointOffset is the offset, counted from the start of the
	// transport Data (after the Ethernet header, or the UDP header), of
	// the destination endpoint byte; 3 when zero (Open-MX: 2-byte peer
	// index, 1-byte packet type, then the destination endpoint).
	EndpointOffset int
	// PullReplyType, when not zero, is the packet type (the byte at Data
	// offset 2) of frames that carry no destination endpoint byte (Open-MX
	// PULL_REPLY, 0x2A): for them the endpoint is the byte at Data offset
	// PullReplyOffset XORed with PullReplyXOR (Open-MX: the low byte of the
	// puller magic, which is the endpoint index XOR a constant).
	PullReplyType   uint8
	PullReplyOffset int
	PullReplyXOR    uint8
	// Mode says how to attach; AutoAttach when zero.
	Mode AttachMode
}

// typeOffset is the offset in the Data of the Open-MX packet type byte,
// after the 2-byte peer index.
const typeOffset = 2

// PullReplyRule returns the ProgramOptions PullReplyType, PullReplyOffset
// and PullReplyXOR that steer Open-MX PULL_REPLY frames (type 0x2A) to the
// socket of the endpoint that pulls: they carry no endpoint byte, only the
// puller magic, which Open-MX (and mx) make the endpoint index XOR
// 0x21071980, at offset 12 of the PULL_REPLY header (Data offset 14). Its
// low byte is the endpoint XOR 0x80, the magic's last byte in big-endian
// headers (Data offset 17) and its first in little-endian ones (offset 14).
func PullReplyRule(littleEndian bool) (typ uint8, offset int, xor uint8) {
	const magicAt = typeOffset + 12
	if littleEndian {
		return 0x2A, magicAt, 0x80
	}
	return 0x2A, magicAt + 3, 0x80
}

// Counter indices per queue in the counters map.
const (
	countRedirected = iota // ours, handed to a socket's slot
	countUnclaimed         // ours, but no socket in the slot: passed to the kernel
	countPassed            // not ours: passed to the kernel
	countersPerQueue
)

// Program is the XDP program of one interface with its maps: an XSKMAP of
// Queues×Slots sockets, per-queue counters and the endpoint-to-slot table.
// It passes every frame that is not ours to the kernel, so IP traffic on
// the interface keeps working, and redirects ours to the socket registered
// for the rx queue the frame arrived on. It is detached by Close and, being
// held by a bpf_link, when the process dies.
type Program struct {
	iface   string
	ifindex int
	opts    ProgramOptions
	mode    AttachMode

	mu        sync.Mutex
	coll      *ebpf.Collection
	xsks      *ebpf.Map
	counters  *ebpf.Map
	endpoints *ebpf.Map
	link      link.Link
}

// withDefaults fills in zero fields and validates.
func (o ProgramOptions) withDefaults(iface string) (ProgramOptions, error) {
	if o.Queues == 0 {
		n, err := RxQueues(iface)
		if err != nil {
			return o, err
		}
		o.Queues = n
	}
	if o.Slots == 0 {
		o.Slots = 1
	}
	if o.EtherType == 0 {
		o.EtherType = 0x86DF
	}
	if o.EndpointOffset == 0 {
		o.EndpointOffset = 3
	}
	if o.UDPPortLow != 0 && o.UDPPortHigh == 0 {
		o.UDPPortHigh = o.UDPPortLow
	}
	switch {
	case o.Queues < 1 || o.Queues > 1024:
		return o, configErr("program options", fmt.Sprintf("Queues %d: want 1..1024", o.Queues))
	case o.Slots < 1 || o.Slots > 64 || o.Slots&(o.Slots-1) != 0:
		return o, configErr("program options", fmt.Sprintf("Slots %d: want a power of two up to 64", o.Slots))
	case o.UDPPortLow != 0 && o.UDPPortHigh < o.UDPPortLow:
		return o, configErr("program options", fmt.Sprintf("UDP port range %d..%d is empty", o.UDPPortLow, o.UDPPortHigh))
	case o.NoEtherType && o.UDPPortLow == 0:
		return o, configErr("program options", "neither raw EtherType nor UDP framing selected: the program would redirect nothing")
	case o.EndpointOffset < 0 || o.EndpointOffset > 256:
		return o, configErr("program options", fmt.Sprintf("EndpointOffset %d: want 0..256", o.EndpointOffset))
	case o.PullReplyType != 0 && (o.PullReplyOffset < 0 || o.PullReplyOffset > 256):
		return o, configErr("program options", fmt.Sprintf("PullReplyOffset %d: want 0..256", o.PullReplyOffset))
	case o.Mode < AutoAttach || o.Mode > GenericMode:
		return o, configErr("program options", fmt.Sprintf("unknown %v", o.Mode))
	}
	return o, nil
}

// wire16 is a 16-bit big-endian header field as a native-order load of its
// two bytes gives it: what the program compares a Half load against.
func wire16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// instructions builds the program. Registers: R6 the context, R7 the rx
// queue, R8 packet start, R9 packet end, R5 the offset of the transport
// Data in the frame.
func (o ProgramOptions) instructions() asm.Instructions {
	const (
		ethLen  = 14
		udpData = 14 + 20 + 8
	)
	// count emits: counters[R7*countersPerQueue+which] += 1. Clobbers R0-R5.
	count := func(which int32) asm.Instructions {
		skip := "count_done_" + strconv.Itoa(int(which))
		return asm.Instructions{
			asm.Mov.Reg(asm.R1, asm.R7),
			asm.Mul.Imm(asm.R1, countersPerQueue),
			asm.Add.Imm(asm.R1, which),
			asm.StoreMem(asm.RFP, -8, asm.R1, asm.Word),
			asm.LoadMapPtr(asm.R1, 0).WithReference("counters"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -8),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, skip),
			asm.Mov.Imm(asm.R1, 1),
			asm.AddAtomic.Mem(asm.R0, asm.R1, asm.DWord, 0),
			asm.Mov.Imm(asm.R0, 0).WithSymbol(skip),
		}
	}
	in := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, mdRxQueueIndex, asm.Word),
		asm.JGE.Imm(asm.R7, int32(o.Queues), "pass"),
		asm.LoadMem(asm.R8, asm.R6, mdData, asm.Word),
		asm.LoadMem(asm.R9, asm.R6, mdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R8),
		asm.Add.Imm(asm.R1, ethLen),
		asm.JGT.Reg(asm.R1, asm.R9, "other"),
		asm.LoadMem(asm.R1, asm.R8, 12, asm.Half),
	}
	if !o.NoEtherType {
		in = append(in, asm.JEq.Imm(asm.R1, wire16(o.EtherType), "raw"))
	}
	if o.UDPPortLow != 0 {
		in = append(in, asm.JEq.Imm(asm.R1, wire16(0x0800), "ipv4"))
	}
	in = append(in, asm.Ja.Label("other"))
	if !o.NoEtherType {
		in = append(in,
			asm.Mov.Imm(asm.R5, ethLen).WithSymbol("raw"),
			asm.Ja.Label("ours"),
		)
	}
	if o.UDPPortLow != 0 {
		in = append(in,
			asm.Mov.Reg(asm.R1, asm.R8).WithSymbol("ipv4"),
			asm.Add.Imm(asm.R1, udpData),
			asm.JGT.Reg(asm.R1, asm.R9, "other"),
			// Version 4, header length 5 words: no options.
			asm.LoadMem(asm.R1, asm.R8, 14, asm.Byte),
			asm.JNE.Imm(asm.R1, 0x45, "other"),
			asm.LoadMem(asm.R1, asm.R8, 14+9, asm.Byte),
			asm.JNE.Imm(asm.R1, unix.IPPROTO_UDP, "other"),
			// Not a fragment: MF flag and fragment offset are zero.
			asm.LoadMem(asm.R1, asm.R8, 14+6, asm.Half),
			asm.And.Imm(asm.R1, wire16(0x3fff)),
			asm.JNE.Imm(asm.R1, 0, "other"),
			asm.LoadMem(asm.R1, asm.R8, 14+20+2, asm.Half),
			asm.HostTo(asm.BE, asm.R1, asm.Half),
			asm.JLT.Imm(asm.R1, int32(o.UDPPortLow), "other"),
			asm.JGT.Imm(asm.R1, int32(o.UDPPortHigh), "other"),
			asm.Mov.Imm(asm.R5, udpData),
		)
	}
	// ours: R5 = offset of the Data. Pick the slot into R3.
	if o.Slots == 1 {
		in = append(in, asm.Mov.Imm(asm.R3, 0).WithSymbol("ours"))
	} else {
		// Bound-check the furthest byte read once; R1 = start of the Data.
		end := o.EndpointOffset
		if o.PullReplyType != 0 {
			end = max(end, typeOffset, o.PullReplyOffset)
		}
		in = append(in,
			asm.Mov.Imm(asm.R3, 0).WithSymbol("ours"),
			asm.Mov.Reg(asm.R1, asm.R8),
			asm.Add.Reg(asm.R1, asm.R5),
			asm.Add.Imm(asm.R1, int32(end)+1),
			asm.JGT.Reg(asm.R1, asm.R9, "slot"),
			asm.Add.Imm(asm.R1, -int32(end)-1),
		)
		if o.PullReplyType != 0 {
			in = append(in,
				asm.LoadMem(asm.R2, asm.R1, typeOffset, asm.Byte),
				asm.JNE.Imm(asm.R2, int32(o.PullReplyType), "endpoint"),
				asm.LoadMem(asm.R2, asm.R1, int16(o.PullReplyOffset), asm.Byte),
				asm.Xor.Imm(asm.R2, int32(o.PullReplyXOR)),
				asm.Ja.Label("lookup"),
			)
		}
		in = append(in,
			asm.LoadMem(asm.R2, asm.R1, int16(o.EndpointOffset), asm.Byte).WithSymbol("endpoint"),
			asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word).WithSymbol("lookup"),
			asm.LoadMapPtr(asm.R1, 0).WithReference("endpoints"),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.Mov.Imm(asm.R3, 0),
			asm.JEq.Imm(asm.R0, 0, "slot"),
			asm.LoadMem(asm.R3, asm.R0, 0, asm.Word),
			asm.And.Imm(asm.R3, int32(o.Slots-1)),
		)
	}
	// slot: key = R7*Slots + R3; redirect, falling back to XDP_PASS when
	// the slot holds no socket.
	in = append(in,
		asm.Mov.Reg(asm.R2, asm.R7).WithSymbol("slot"),
		asm.Mul.Imm(asm.R2, int32(o.Slots)),
		asm.Add.Reg(asm.R2, asm.R3),
		asm.LoadMapPtr(asm.R1, 0).WithReference("xsks"),
		asm.Mov.Imm(asm.R3, actionPass),
		asm.FnRedirectMap.Call(),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.JEq.Imm(asm.R9, actionPass, "unclaimed"),
	)
	in = append(in, count(countRedirected)...)
	in = append(in,
		asm.Mov.Reg(asm.R0, asm.R9),
		asm.Return(),
	)
	in = append(in, asm.Mov.Imm(asm.R0, 0).WithSymbol("unclaimed"))
	in = append(in, count(countUnclaimed)...)
	in = append(in, asm.Ja.Label("pass"))
	in = append(in, asm.Mov.Imm(asm.R0, 0).WithSymbol("other"))
	in = append(in, count(countPassed)...)
	in = append(in,
		asm.Mov.Imm(asm.R0, actionPass).WithSymbol("pass"),
		asm.Return(),
	)
	return in
}

// collectionSpec is the program and its maps, not yet loaded.
func (o ProgramOptions) collectionSpec() *ebpf.CollectionSpec {
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"xsks":      {Name: "gomx_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(o.Queues * o.Slots)},
			"counters":  {Name: "gomx_counters", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(o.Queues * countersPerQueue)},
			"endpoints": {Name: "gomx_endpoints", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 256},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"steer": {Name: "gomx_steer", Type: ebpf.XDP, License: "Dual BSD/GPL", Instructions: o.instructions()},
		},
	}
}

// Attach loads the steering program and its maps and attaches it to the
// interface (in the calling thread's network namespace): driver mode first
// and generic mode as fallback for AutoAttach. Nothing is redirected until
// sockets are registered.
//
// Errors wrap ErrInterface, ErrPermission (CAP_BPF and CAP_NET_ADMIN are
// needed), ErrNotSupported (no XDP in the asked mode), ErrBusy (another XDP
// program is attached) or ErrConfig. A failed Attach leaves nothing loaded.
func Attach(iface string, o ProgramOptions) (*Program, error) {
	ifi, err := usableInterface(iface)
	if err != nil {
		return nil, err
	}
	o, err = o.withDefaults(iface)
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(o.collectionSpec())
	if err != nil {
		oe := opErr("load XDP program", iface, -1, err)
		if errors.Is(err, unix.EPERM) {
			oe.Fix = "loading BPF programs needs CAP_BPF and CAP_NET_ADMIN (or root)"
		}
		return nil, oe
	}
	p := &Program{iface: iface, ifindex: ifi.Index, opts: o, coll: coll,
		xsks: coll.Maps["xsks"], counters: coll.Maps["counters"], endpoints: coll.Maps["endpoints"]}
	prog := coll.Programs["steer"]
	try := []AttachMode{o.Mode}
	if o.Mode == AutoAttach {
		try = []AttachMode{DriverMode, GenericMode}
	}
	var errs []error
	for _, m := range try {
		flags := link.XDPDriverMode
		if m == GenericMode {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifi.Index, Flags: flags})
		if err == nil {
			p.link, p.mode = l, m
			return p, nil
		}
		errs = append(errs, fmt.Errorf("%v mode: %w", m, err))
	}
	coll.Close()
	err = errors.Join(errs...)
	oe := opErr("attach XDP program", iface, -1, err)
	switch {
	case errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST):
		oe.Fix = "another XDP program is attached; see `ip link show dev " + iface + "` and detach it with `ip link set dev " + iface + " xdp off`"
	case errors.Is(err, unix.EPERM):
		oe.Fix = "attaching XDP needs CAP_NET_ADMIN and CAP_BPF (or root)"
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL):
		oe.Err = &wrapped{ErrNotSupported, err}
		oe.Fix = "the driver has no XDP in this mode: use AutoAttach or GenericMode; Linux 5.9 or later is needed for bpf_link"
	}
	return nil, oe
}

// Mode is the mode the program was attached in: DriverMode or GenericMode.
func (p *Program) Mode() AttachMode { return p.mode }

// Interface is the name of the interface the program is attached to.
func (p *Program) Interface() string { return p.iface }

// Options returns the program's options with defaults filled in.
func (p *Program) Options() ProgramOptions { return p.opts }

// Register puts s in slot of its queue: frames of ours arriving on that
// queue (and, with several slots, for endpoints mapped to slot) go to s.
// A socket only receives frames of the queue it is bound to: the kernel
// drops, without counting, a frame redirected to a socket of another queue.
func (p *Program) Register(s *Socket, slot int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return &OpError{Op: "register socket", Iface: p.iface, Queue: s.queue, Err: ErrClosed}
	}
	if s.ifindex != p.ifindex {
		return &OpError{Op: "register socket", Iface: p.iface, Queue: s.queue, Err: &wrapped{ErrConfig, fmt.Errorf("socket is bound to %s, not %s", s.iface, p.iface)}}
	}
	if s.queue >= p.opts.Queues {
		return &OpError{Op: "register socket", Iface: p.iface, Queue: s.queue, Err: ErrQueue,
			Fix: fmt.Sprintf("the program serves queues 0..%d; attach it with ProgramOptions.Queues > %d", p.opts.Queues-1, s.queue)}
	}
	if slot < 0 || slot >= p.opts.Slots {
		return &OpError{Op: "register socket", Iface: p.iface, Queue: s.queue, Err: &wrapped{ErrConfig, fmt.Errorf("slot %d: the program has %d slots per queue", slot, p.opts.Slots)}}
	}
	if err := p.xsks.Update(uint32(s.queue*p.opts.Slots+slot), uint32(s.fd), ebpf.UpdateAny); err != nil {
		return opErr("update XSKMAP", p.iface, s.queue, err)
	}
	return nil
}

// Unregister empties slot of queue: its frames go to the kernel again.
func (p *Program) Unregister(queue, slot int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return &OpError{Op: "unregister socket", Iface: p.iface, Queue: queue, Err: ErrClosed}
	}
	if queue < 0 || queue >= p.opts.Queues || slot < 0 || slot >= p.opts.Slots {
		return &OpError{Op: "unregister socket", Iface: p.iface, Queue: queue, Err: ErrQueue}
	}
	if err := p.xsks.Delete(uint32(queue*p.opts.Slots + slot)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return opErr("delete from XSKMAP", p.iface, queue, err)
	}
	return nil
}

// SetEndpoint sends frames whose destination endpoint byte is ep to the
// socket in slot of whatever queue they arrive on. Endpoints not set go to
// slot 0.
func (p *Program) SetEndpoint(ep uint8, slot int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return &OpError{Op: "set endpoint", Iface: p.iface, Queue: -1, Err: ErrClosed}
	}
	if slot < 0 || slot >= p.opts.Slots {
		return &OpError{Op: "set endpoint", Iface: p.iface, Queue: -1, Err: &wrapped{ErrConfig, fmt.Errorf("slot %d: the program has %d slots per queue", slot, p.opts.Slots)}}
	}
	if err := p.endpoints.Update(uint32(ep), uint32(slot), ebpf.UpdateAny); err != nil {
		return opErr("update endpoint map", p.iface, -1, err)
	}
	return nil
}

// QueueCounters is what the program counted on one rx queue.
type QueueCounters struct {
	// Queue is the rx queue counted.
	Queue int
	// Redirected counts our frames handed to a socket. A frame redirected
	// to a socket of another queue is dropped by the kernel after this
	// count; compare with the sockets' receive counts.
	Redirected uint64
	// Unclaimed counts our frames for a slot without a socket; they were
	// passed to the kernel, which drops them.
	Unclaimed uint64
	// Passed counts frames that are not ours, passed to the kernel.
	Passed uint64
}

// Counters reads the per-queue counters.
func (p *Program) Counters() ([]QueueCounters, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return nil, &OpError{Op: "read counters", Iface: p.iface, Queue: -1, Err: ErrClosed}
	}
	out := make([]QueueCounters, p.opts.Queues)
	for q := range out {
		var v [countersPerQueue]uint64
		for i := range v {
			if err := p.counters.Lookup(uint32(q*countersPerQueue+i), &v[i]); err != nil {
				return nil, opErr("read counters", p.iface, q, err)
			}
		}
		out[q] = QueueCounters{Queue: q, Redirected: v[countRedirected], Unclaimed: v[countUnclaimed], Passed: v[countPassed]}
	}
	return out, nil
}

// Close detaches the program and frees it and its maps. Sockets are not
// closed. Closing twice returns nil.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.coll == nil {
		return nil
	}
	err := p.link.Close()
	p.coll.Close()
	p.coll, p.link = nil, nil
	if err != nil {
		return opErr("detach XDP program", p.iface, -1, err)
	}
	return nil
}
