package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/hugepage"
	"github.com/gomx-dev/gomx/internal/rollback"
)

// CopyMode says how frames move between the NIC and the UMEM.
type CopyMode int

const (
	// AutoCopy lets the kernel use zero-copy when the driver supports it
	// and copy mode otherwise; Socket.ZeroCopy reports which it chose.
	AutoCopy CopyMode = iota
	// ZeroCopy requires zero-copy: Open fails with ErrNotSupported on a
	// driver without it (veth, for one).
	ZeroCopy
	// Copy forces copy mode.
	Copy
)

// String names the mode.
func (m CopyMode) String() string {
	switch m {
	case AutoCopy:
		return "auto"
	case ZeroCopy:
		return "zero-copy"
	case Copy:
		return "copy"
	}
	return "CopyMode(" + strconv.Itoa(int(m)) + ")"
}

// Options configures a socket and, for a socket that owns it, its UMEM.
// The zero value means DefaultOptions.
type Options struct {
	// FrameSize is the size of one UMEM frame: a power of two from 2048 to
	// 4096. A frame holds one Ethernet frame; 2048 when zero.
	FrameSize int
	// Frames is the number of UMEM frames, a power of two; 8192 when zero.
	// Half go to the fill ring at start, half are kept for transmitting.
	Frames int
	// RingSize is the number of entries of each of the four rings, a power
	// of two; Frames/2 when zero. The fill ring should be deep: a consumer
	// descheduled for a few hundred microseconds otherwise loses frames.
	RingSize int
	// Mode chooses zero-copy or copy mode; AutoCopy when zero.
	Mode CopyMode
	// BusyPoll, when positive, sets SO_BUSY_POLL (microseconds of busy
	// polling in the kernel per poll/recvfrom) and SO_PREFER_BUSY_POLL, and
	// BusyPollBudget (64 when zero) as SO_BUSY_POLL_BUDGET.
	BusyPoll       time.Duration
	BusyPollBudget int
	// TxBudget, when positive, sets XDP_MAX_TX_SKB_BUDGET: how many
	// descriptors one copy-mode transmit syscall may send (the kernel's
	// default is 32).
	TxBudget int
	// Memory says where the UMEM comes from; 2 MiB hugepages (falling back
	// to locked 4 KiB pages, see Socket.Degraded) when zero.
	Memory hugepage.Options
	// RegionFrames adds that many frames to the UMEM, after the Frames,
	// that the socket never receives into or hands out: memory for the
	// caller to send from in place (Socket.RegionMemory,
	// Transport.RegionMemory). The socket then binds with XDP_USE_SG
	// (Linux 6.6), so one frame may be several descriptors (Desc.More):
	// headers in a frame of the socket's, the payload in place. Its
	// completions never return to the free list. 0 by default; shared
	// sockets use the owner's.
	RegionFrames int
}

// DefaultOptions returns 8192 frames of 2048 bytes, rings of 4096 entries,
// automatic zero-copy, no busy polling.
func DefaultOptions() Options {
	return Options{FrameSize: 2048, Frames: 8192, RingSize: 4096, Mode: AutoCopy}
}

// withDefaults fills in zero fields and validates, before any syscall.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.FrameSize == 0 {
		o.FrameSize = d.FrameSize
	}
	if o.Frames == 0 {
		o.Frames = d.Frames
	}
	if o.RingSize == 0 {
		o.RingSize = o.Frames / 2
	}
	pow2 := func(n int) bool { return n > 0 && n&(n-1) == 0 }
	switch {
	case !pow2(o.FrameSize) || o.FrameSize < 2048 || o.FrameSize > 4096:
		return o, configErr("options", fmt.Sprintf("FrameSize %d: want 2048 or 4096", o.FrameSize))
	case !pow2(o.Frames) || o.Frames < 64 || o.Frames > 1<<20:
		return o, configErr("options", fmt.Sprintf("Frames %d: want a power of two from 64 to 1048576", o.Frames))
	case !pow2(o.RingSize) || o.RingSize > o.Frames:
		return o, configErr("options", fmt.Sprintf("RingSize %d: want a power of two no larger than Frames (%d)", o.RingSize, o.Frames))
	case o.Mode < AutoCopy || o.Mode > Copy:
		return o, configErr("options", fmt.Sprintf("unknown %v", o.Mode))
	case o.BusyPoll < 0 || o.BusyPollBudget < 0 || o.TxBudget < 0:
		return o, configErr("options", "BusyPoll, BusyPollBudget and TxBudget must not be negative")
	case o.RegionFrames < 0 || o.RegionFrames > 1<<20:
		return o, configErr("options", fmt.Sprintf("RegionFrames %d: want 0 to 1048576", o.RegionFrames))
	}
	if o.BusyPoll > 0 && o.BusyPollBudget == 0 {
		o.BusyPollBudget = 64
	}
	return o, nil
}

// Desc is one frame in the UMEM: its offset (the kernel's "address") and
// its length. Receive hands out descriptors of received frames, Alloc of
// free frames to transmit from; the frame's bytes are Socket.Frame(d).
type Desc struct {
	Addr uint64 // offset of the frame's first byte in the UMEM
	Len  uint32 // length of the frame
	// More says, on transmit, that the frame goes on in the next
	// descriptor (XDP_PKT_CONTD); it needs Options.RegionFrames, which
	// binds the socket for multi-buffer frames. Every descriptor lies
	// within one UMEM frame.
	More bool
}

// umem is the frame memory of one (interface, queue) and the rings that
// feed it: the fill ring (frames the kernel may receive into) and the
// completion ring (frames the kernel has transmitted). Every socket bound to
// the queue shares it; mu serialises their use of the shared rings and of
// the free list, once per batch.
type umem struct {
	mu        sync.Mutex
	region    *hugepage.Region
	mem       []byte
	frameSize uint32
	fill      prodRing[uint64]
	comp      consRing[uint64]
	free      frameStack // frames nobody owns
	refs      int        // open sockets using this UMEM
	keep      int        // frames refill leaves on the free list for transmitting

	// regionBase is where the frames of Options.RegionFrames start (the
	// UMEM's end without any). Their completions go to regionDone, not
	// to the free list.
	regionBase uint64
	regionDone func(addr uint64)

	// spare: the free list held more than keep frames when the lock was
	// last released, so refill has frames to move (refillDue). Stored
	// only when it changes: in a steady exchange it stays false, and the
	// receiver's empty polls read a line nobody writes.
	spare atomic.Bool
}

// refillDue reports, without the lock, whether refill would find work: a
// transmission completed (the completion ring holds entries) or the free
// list holds frames beyond keep. The fill ring loses entries only to
// received frames, which go back through Release (which refills), and
// completed frames come back only through the completion ring, so a poll
// that sees neither has nothing to top up. Both indices are loaded
// atomically (the consumer is ours, stored under u.mu).
func (u *umem) refillDue() bool {
	return u.spare.Load() || u.comp.producer.Load() != u.comp.consumer.Load()
}

// noteSpare records whether the free list holds frames beyond keep
// (u.mu held).
func (u *umem) noteSpare() {
	if v := u.free.len() > u.keep; u.spare.Load() != v {
		u.spare.Store(v)
	}
}

// frameStart is the start of the UMEM frame that holds address a. Frame
// sizes are powers of two (Options), so it is a mask, not a division: the
// receive and transmit paths take it for every frame.
func (u *umem) frameStart(a uint64) uint64 { return a &^ uint64(u.frameSize-1) }

// release frees the UMEM's rings and memory; the sockets are closed.
func (u *umem) release() error {
	err := errors.Join(unmapRing(&u.fill.ringMap), unmapRing(&u.comp.ringMap))
	if u.region != nil {
		err = errors.Join(err, u.region.Close())
		u.region = nil
	}
	u.mem = nil
	return err
}

// reap moves completed transmissions to the free list. u.mu is held.
func (u *umem) reap() {
	n := u.comp.avail(uint32(u.comp.size))
	for i := range n {
		// A frame sent from an offset (a received frame sent back) comes
		// back with that offset: keep the frame's start.
		a := u.comp.at(i)
		if a >= u.regionBase {
			if u.regionDone != nil {
				u.regionDone(a)
			}
			continue
		}
		u.free.push(u.frameStart(a))
	}
	if n > 0 {
		u.comp.release(n)
		u.noteSpare()
	}
}

// frameStack is the free list: a stack of frame addresses whose top holds
// the transmit frames completed last, which this CPU wrote and the kernel
// only read, and whose bottom the frames that lay unused longest and the
// received frames given back (Release). A sender takes from the top
// (Alloc), and refill feeds the fill ring from the bottom. A received
// frame was written by the kernel on whichever CPU delivered it (in a
// ping-pong between two threads, the peer's, inside its sendto), so a
// send that wrote into it would take its lines from that CPU; and a frame
// fed to the fill ring, a queue as deep as a quarter of the UMEM or more,
// comes back only after all the frames ahead of it, out of every cache.
// So a ping-pong sends from the one frame it sent from last time, and the
// store that publishes the TX ring's producer index (a locked
// instruction, which waits for the earlier stores into the frame) does
// not wait for cache misses.
type frameStack struct {
	buf    []uint64 // power-of-two length, at least the UMEM's frames
	lo, hi uint     // the bottom and one past the top, free-running
}

func newFrameStack(frames int) frameStack {
	n := 1
	for n < frames {
		n <<= 1
	}
	return frameStack{buf: make([]uint64, n)}
}

// len is the number of frames on the stack.
func (f *frameStack) len() int { return int(f.hi - f.lo) }

// push puts a frame on top. The stack holds every UMEM frame at most
// once, so it never grows, but a frame released twice (a caller's bug)
// does not overwrite another.
func (f *frameStack) push(a uint64) {
	f.room()
	f.buf[f.hi&uint(len(f.buf)-1)] = a
	f.hi++
}

// pushCold puts a frame at the bottom, as push does at the top.
func (f *frameStack) pushCold(a uint64) {
	f.room()
	f.lo--
	f.buf[f.lo&uint(len(f.buf)-1)] = a
}

// room makes room for one more frame when the buffer is full.
func (f *frameStack) room() {
	if f.len() < len(f.buf) {
		return
	}
	nb := make([]uint64, 2*len(f.buf))
	for i := range f.len() {
		nb[i] = f.buf[(f.lo+uint(i))&uint(len(f.buf)-1)]
	}
	f.buf, f.lo, f.hi = nb, 0, uint(len(f.buf))
}

// top is the i-th frame from the top (0: the top); i < len.
func (f *frameStack) top(i int) uint64 { return f.buf[(f.hi-1-uint(i))&uint(len(f.buf)-1)] }

// drop takes n frames off the top; n <= len.
func (f *frameStack) drop(n int) { f.hi -= uint(n) }

// popCold takes the bottom frame; the stack is not empty.
func (f *frameStack) popCold() uint64 {
	a := f.buf[f.lo&uint(len(f.buf)-1)]
	f.lo++
	return a
}

// refill moves free frames onto the fill ring, keeping keep frames back for
// transmitting. Completed transmissions are reaped first, so that frames
// parked on the completion ring count as free. u.mu is held.
func (u *umem) refill(keep int) {
	u.reap()
	defer u.noteSpare()
	avail := u.free.len() - keep
	if avail <= 0 {
		return
	}
	n := u.fill.free(uint32(avail))
	n = min(n, uint32(avail))
	if n == 0 {
		return
	}
	for i := range n {
		*u.fill.slot(i) = u.free.popCold()
	}
	u.fill.produce(n)
	u.fill.commit()
}

// Socket is an AF_XDP socket bound to one rx/tx queue of an interface. It
// receives the frames the XDP program redirects to it (see Program) and
// transmits on its queue. Its receive side (Receive, Release, Wait) and its
// transmit side (Alloc, Transmit, Flush) may be used by two goroutines at
// once, each side by one goroutine at a time; sockets sharing a queue
// (OpenShared) may be used by different goroutines. Close must not race
// with either side.
//
// The receive side's cursors (rx) and the transmit side's (tx) lie on
// cache lines of their own: a receiver spinning on an empty ring writes
// its cached producer index at every poll, and a sender writes its cached
// producer index at every post; on one line, each write would take the
// line from the other goroutine's CPU. The receiver's look at the TX ring (is
// anything left for it to kick?) goes through txProd and txCons, copies of
// the ring's index pointers kept with the fields nobody writes.
type Socket struct {
	fd       int
	iface    string
	ifindex  int
	queue    int
	zeroCopy bool
	opts     Options
	u        *umem
	// txProd and txCons are tx's shared producer and consumer indices,
	// for the receive side (Receive's idle kick).
	txProd, txCons *atomic.Uint32

	rx consRing[xdpDesc]
	_  cpu.CacheLinePad
	tx prodRing[xdpDesc]

	closed  atomic.Bool
	closeMu sync.RWMutex
}

// Open opens an AF_XDP socket on queue of the interface named iface (in the
// calling thread's network namespace), with its own UMEM of hugepage
// memory, and binds it. The socket receives nothing until a Program on the
// interface redirects frames to it (Program.Register).
//
// Errors wrap ErrInterface (no such interface, or it is down), ErrQueue
// (the interface has no such queue), ErrPermission (no CAP_NET_RAW),
// ErrNotSupported (no AF_XDP, or Mode ZeroCopy on a driver without it),
// ErrBusy (another socket holds the queue) or ErrConfig. A failed Open
// undoes every step.
func Open(iface string, queue int, o Options) (*Socket, error) {
	return open(iface, queue, o, nil)
}

// OpenShared opens another socket on s's interface and queue sharing s's
// UMEM (XDP_SHARED_UMEM), so that a Program can spread the queue's frames
// among several sockets by endpoint. o's RX/TX ring sizes, busy polling and
// TX budget apply to the new socket; its UMEM geometry and copy mode are
// s's.
func OpenShared(s *Socket, o Options) (*Socket, error) {
	if s.closed.Load() {
		return nil, &OpError{Op: "open shared socket", Iface: s.iface, Queue: s.queue, Err: ErrClosed}
	}
	return open(s.iface, s.queue, o, s)
}

func open(iface string, queue int, o Options, share *Socket) (_ *Socket, err error) {
	if share != nil {
		// The UMEM is the owner's; so are the ring sizes unless asked.
		o.FrameSize, o.Frames, o.RegionFrames = share.opts.FrameSize, share.opts.Frames, share.opts.RegionFrames
		if o.RingSize == 0 {
			o.RingSize = share.opts.RingSize
		}
	}
	o, err = o.withDefaults()
	if err != nil {
		return nil, err
	}
	ifi, err := usableInterface(iface)
	if err != nil {
		return nil, err
	}
	if queue < 0 {
		return nil, &OpError{Op: "open", Iface: iface, Queue: queue, Err: ErrQueue}
	}
	if n, qerr := RxQueues(iface); qerr == nil && queue >= n {
		return nil, &OpError{Op: "open", Iface: iface, Queue: queue, Err: ErrQueue,
			Fix: fmt.Sprintf("%s has %d rx queues (0..%d); add channels with `ethtool -L %s combined N`", iface, n, n-1, iface)}
	}
	fail := func(op string, e error) *OpError { return opErr(op, iface, queue, e) }

	var undo rollback.Stack
	defer func() {
		if err != nil {
			undo.Run()
		}
	}()

	fd, err := unix.Socket(afXDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fail("socket(AF_XDP)", err)
	}
	undo = append(undo, func() { unix.Close(fd) })
	s := &Socket{fd: fd, iface: iface, ifindex: ifi.Index, queue: queue, opts: o}
	ring := uint32(o.RingSize)

	if share == nil {
		mem := o.Memory
		if mem.Name == "" {
			mem.Name = "gomx-xdp-umem"
		}
		size := o.FrameSize * (o.Frames + o.RegionFrames)
		region, err := hugepage.Alloc(size, mem)
		if err != nil {
			return nil, &OpError{Op: "allocate UMEM", Iface: iface, Queue: queue, Err: err}
		}
		u := &umem{region: region, mem: region.Bytes()[:size], frameSize: uint32(o.FrameSize), regionBase: uint64(o.FrameSize * o.Frames)}
		undo = append(undo, func() { u.release() })
		reg := umemReg{Addr: addrOf(u.mem), Len: uint64(len(u.mem)), ChunkSize: uint32(o.FrameSize)}
		if err := setsockoptUmemReg(fd, &reg); err != nil {
			return nil, fail("setsockopt XDP_UMEM_REG", err)
		}
		s.u = u
	} else {
		s.u = share.u
	}
	// Every socket of a queue needs a fill and completion ring of its own
	// only when it owns the UMEM; sharers on the same queue use the owner's.
	if share == nil {
		for _, opt := range []int{optFillRing, optCompRing} {
			if err := unix.SetsockoptInt(fd, solXDP, opt, int(ring)); err != nil {
				return nil, fail("setsockopt XDP_UMEM_FILL/COMPLETION_RING", err)
			}
		}
	}
	for _, opt := range []int{optRxRing, optTxRing} {
		if err := unix.SetsockoptInt(fd, solXDP, opt, int(ring)); err != nil {
			return nil, fail("setsockopt XDP_RX/TX_RING", err)
		}
	}
	off, err := getsockoptMmapOffsets(fd)
	if err != nil {
		return nil, fail("getsockopt XDP_MMAP_OFFSETS", err)
	}
	if share == nil {
		s.u.fill.ringMap, s.u.fill.desc, err = mapRing[uint64](fd, off.Fill, pgoffFillRing, ring)
		if err != nil {
			return nil, fail("mmap fill ring", err)
		}
		s.u.comp.ringMap, s.u.comp.desc, err = mapRing[uint64](fd, off.Comp, pgoffCompRing, ring)
		if err != nil {
			return nil, fail("mmap completion ring", err)
		}
	}
	s.rx.ringMap, s.rx.desc, err = mapRing[xdpDesc](fd, off.Rx, pgoffRxRing, ring)
	if err != nil {
		return nil, fail("mmap rx ring", err)
	}
	undo = append(undo, func() { unmapRing(&s.rx.ringMap) })
	s.tx.ringMap, s.tx.desc, err = mapRing[xdpDesc](fd, off.Tx, pgoffTxRing, ring)
	if err != nil {
		return nil, fail("mmap tx ring", err)
	}
	undo = append(undo, func() { unmapRing(&s.tx.ringMap) })
	s.rx.init()
	s.tx.init()
	s.txProd, s.txCons = s.tx.producer, s.tx.consumer

	sa := sockaddrXDP{Family: afXDP, Flags: bindNeedWakeup, Ifindex: uint32(ifi.Index), QueueID: uint32(queue)}
	switch {
	case share != nil:
		sa.Flags |= bindSharedUmem
		sa.SharedUmemFD = uint32(share.fd)
		sa.Flags &^= bindNeedWakeup // the kernel takes the flags from the owner
	case o.Mode == ZeroCopy:
		sa.Flags |= bindZeroCopy
	case o.Mode == Copy:
		sa.Flags |= bindCopy
	}
	if share == nil && o.RegionFrames > 0 {
		sa.Flags |= bindUseSG
	}
	err = bindXDP(fd, &sa)
	// The kernel lets go of a closed socket's queue in a deferred work
	// item, so a queue closed a moment ago may still be busy: retry for a
	// bounded time before calling it taken.
	for try := 0; errors.Is(err, unix.EBUSY) && try < 100; try++ {
		time.Sleep(2 * time.Millisecond)
		err = bindXDP(fd, &sa)
	}
	if err != nil {
		oe := fail("bind", err)
		switch {
		case errors.Is(err, unix.EINVAL) && sa.Flags&bindUseSG != 0:
			oe.Fix = "multi-buffer AF_XDP (XDP_USE_SG, for RegionFrames) needs Linux 6.6; use RegionFrames 0"
		case errors.Is(err, unix.EINVAL):
			oe.Err = &wrapped{ErrQueue, err}
			oe.Fix = "the queue may not exist, or the interface may be down"
		case errors.Is(err, unix.EOPNOTSUPP) && o.Mode == ZeroCopy && sa.Flags&bindUseSG != 0:
			oe.Fix = "the driver has no AF_XDP zero-copy, or none for multi-buffer frames (RegionFrames); use Mode AutoCopy or Copy, or RegionFrames 0"
		case errors.Is(err, unix.EOPNOTSUPP) && o.Mode == ZeroCopy:
			oe.Fix = "the driver has no AF_XDP zero-copy; use Mode AutoCopy or Copy"
		case errors.Is(err, unix.EBUSY):
			oe.Fix = "another AF_XDP socket is bound to this queue; share its UMEM with OpenShared or close it"
		}
		return nil, oe
	}
	xo, err := getsockoptOptions(fd)
	if err != nil {
		return nil, fail("getsockopt XDP_OPTIONS", err)
	}
	s.zeroCopy = xo.Flags&optionsZeroCopy != 0

	if o.BusyPoll > 0 {
		us := int(o.BusyPoll / time.Microsecond)
		for _, kv := range [][2]int{{soPreferBusyPoll, 1}, {soBusyPoll, max(us, 1)}, {soBusyPollBudget, o.BusyPollBudget}} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, kv[0], kv[1]); err != nil {
				oe := fail("setsockopt SO_BUSY_POLL/SO_PREFER_BUSY_POLL/SO_BUSY_POLL_BUDGET", err)
				if errors.Is(err, unix.ENOPROTOOPT) || errors.Is(err, unix.EINVAL) {
					oe.Err = &wrapped{ErrNotSupported, err}
					oe.Fix = "busy polling needs Linux 5.11 and CONFIG_NET_RX_BUSY_POLL"
				}
				return nil, oe
			}
		}
	}
	if o.TxBudget > 0 {
		if err := unix.SetsockoptInt(fd, solXDP, optMaxTxSkbBudge, o.TxBudget); err != nil {
			oe := fail("setsockopt XDP_MAX_TX_SKB_BUDGET", err)
			if errors.Is(err, unix.ENOPROTOOPT) {
				oe.Err = &wrapped{ErrNotSupported, err}
				oe.Fix = "XDP_MAX_TX_SKB_BUDGET needs Linux 6.13"
			}
			return nil, oe
		}
	}

	u := s.u
	u.mu.Lock()
	if share == nil {
		u.fill.init()
		u.comp.init()
		u.free = newFrameStack(o.Frames)
		for i := o.Frames - 1; i >= 0; i-- {
			u.free.push(uint64(i * o.FrameSize))
		}
	}
	u.refs++
	u.keep = o.Frames / 2
	u.refill(u.keep)
	u.mu.Unlock()
	return s, nil
}

// usableInterface looks iface up and checks it is up.
func usableInterface(iface string) (*net.Interface, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, &OpError{Op: "look up interface", Iface: iface, Queue: -1, Err: &wrapped{ErrInterface, err},
			Fix: "no such interface in this network namespace (ip link show)"}
	}
	if ifi.Flags&net.FlagUp == 0 {
		return nil, &OpError{Op: "check interface", Iface: iface, Queue: -1, Err: &wrapped{ErrInterface, errors.New("interface is down")},
			Fix: "bring it up with `ip link set dev " + iface + " up`"}
	}
	return ifi, nil
}

// RxQueues returns how many rx queues the interface has in use, as the
// network namespace of the calling thread sees it: rx plus combined
// channels from ETHTOOL_GCHANNELS, or, for drivers without it, the
// interface's IFLA_NUM_RX_QUEUES from rtnetlink.
func RxQueues(iface string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, opErr("socket", iface, -1, err)
	}
	defer unix.Close(fd)
	ch, err := ethtoolChannelsOf(fd, iface)
	if err == nil && ch.RxCount+ch.CombinedCount > 0 {
		return int(ch.RxCount + ch.CombinedCount), nil
	}
	if errors.Is(err, unix.ENODEV) {
		return 0, opErr("ETHTOOL_GCHANNELS", iface, -1, err)
	}
	return numRxQueues(iface)
}

// numRxQueues reads IFLA_NUM_RX_QUEUES of iface over rtnetlink.
func numRxQueues(iface string) (int, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return 0, &OpError{Op: "look up interface", Iface: iface, Queue: -1, Err: &wrapped{ErrInterface, err}}
	}
	rib, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return 0, opErr("RTM_GETLINK", iface, -1, err)
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return 0, opErr("RTM_GETLINK", iface, -1, err)
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWLINK || len(m.Data) < unix.SizeofIfInfomsg {
			continue
		}
		index := int32(binary.NativeEndian.Uint32(m.Data[4:8]))
		if int(index) != ifi.Index {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return 0, opErr("RTM_GETLINK", iface, -1, err)
		}
		for _, a := range attrs {
			if a.Attr.Type == unix.IFLA_NUM_RX_QUEUES && len(a.Value) >= 4 {
				return int(binary.NativeEndian.Uint32(a.Value)), nil
			}
		}
	}
	return 0, &OpError{Op: "RTM_GETLINK", Iface: iface, Queue: -1, Err: &wrapped{ErrNotSupported, errors.New("no IFLA_NUM_RX_QUEUES")}}
}

// Interface is the name of the socket's interface.
func (s *Socket) Interface() string { return s.iface }

// Queue is the queue the socket is bound to.
func (s *Socket) Queue() int { return s.queue }

// FD is the socket's file descriptor, for Program.Register and poll(2).
func (s *Socket) FD() int { return s.fd }

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode;
// false means copy mode (every frame is copied between the driver's
// buffers and the UMEM).
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// Degraded is "" when the UMEM is backed by hugepages; otherwise it says why
// it is not and how to fix that (see hugepage.Region.Degraded).
func (s *Socket) Degraded() string {
	if s.u.region == nil {
		return ""
	}
	return s.u.region.Degraded()
}

// UMEM returns the socket's UMEM: every frame's memory, hugepage-backed
// when hugepages were free, valid until the last socket sharing it closes.
func (s *Socket) UMEM() []byte { return s.u.mem }

// RegionMemory returns the UMEM frames Options.RegionFrames reserved for
// sending in place (nil without any): the socket never receives into
// them, and their transmit completions do not free them.
func (s *Socket) RegionMemory() []byte { return s.u.mem[s.u.regionBase:] }

// FrameSize is the size of one UMEM frame: the largest frame Receive can
// return and Transmit can send.
func (s *Socket) FrameSize() int { return int(s.u.frameSize) }

// Stats is what the kernel counts for one socket (XDP_STATISTICS).
type Stats struct {
	// RxDropped counts frames dropped for any reason other than an
	// invalid descriptor: no fill ring entry, a full RX ring, a frame too
	// big for a UMEM frame.
	RxDropped uint64
	// RxInvalidDescs and TxInvalidDescs count descriptors the kernel
	// rejected (bad address or length).
	RxInvalidDescs uint64
	TxInvalidDescs uint64
	// RxRingFull counts frames dropped because the RX ring was full: the
	// consumer fell behind.
	RxRingFull uint64
	// RxFillRingEmpty counts times the kernel found the fill ring empty:
	// frames were not given back (Release) fast enough.
	RxFillRingEmpty uint64
	// TxRingEmpty counts times the kernel found the TX ring empty when
	// kicked.
	TxRingEmpty uint64
}

// Stats reads the socket's kernel counters.
func (s *Socket) Stats() (Stats, error) {
	if s.closed.Load() {
		return Stats{}, &OpError{Op: "statistics", Iface: s.iface, Queue: s.queue, Err: ErrClosed}
	}
	st, err := getsockoptStatistics(s.fd)
	if err != nil {
		return Stats{}, opErr("getsockopt XDP_STATISTICS", s.iface, s.queue, err)
	}
	return Stats{
		RxDropped: st.RxDropped, RxInvalidDescs: st.RxInvalidDescs, TxInvalidDescs: st.TxInvalidDescs,
		RxRingFull: st.RxRingFull, RxFillRingEmpty: st.RxFillRingEmptyDescs, TxRingEmpty: st.TxRingEmptyDescs,
	}, nil
}

// Close closes the socket and unmaps its rings; the last socket of a UMEM
// also unmaps the fill and completion rings and frees the UMEM memory. The
// socket is closed before any memory it used is unmapped. Closing twice
// returns nil. Frames the caller still holds must not be used after Close.
func (s *Socket) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	err := unix.Close(s.fd)
	err = errors.Join(err, unmapRing(&s.rx.ringMap), unmapRing(&s.tx.ringMap))
	s.txProd, s.txCons = nil, nil
	u := s.u
	u.mu.Lock()
	u.refs--
	if u.refs == 0 {
		// Under the lock: a transport's Region.Pending may be reaping the
		// completion ring from another goroutine.
		err = errors.Join(err, u.release())
	}
	u.mu.Unlock()
	if err != nil {
		return &OpError{Op: "close", Iface: s.iface, Queue: s.queue, Err: err}
	}
	return nil
}
