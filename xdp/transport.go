package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/internal/owned"
	"github.com/gomx-dev/gomx/internal/queueset"
	"github.com/gomx-dev/gomx/transport"
)

var _ transport.Transport = (*Transport)(nil)
var _ transport.Stats = (*Transport)(nil)
var _ transport.Waker = (*Transport)(nil)
var _ transport.Spinner = (*Transport)(nil)

// errClosed is what calls on a closed Transport return: transport.ErrClosed,
// which is also xdp.ErrClosed.
var errClosed = fmt.Errorf("xdp: transport %w", transport.ErrClosed)

// TransportOptions configures NewTransport.
type TransportOptions struct {
	// Interface is the network interface to serve, in the calling thread's
	// network namespace.
	Interface string
	// Queues lists the rx/tx queues to open sockets on; every rx queue of
	// the interface when empty, since without ntuple rules any queue may
	// receive our frames. Send uses the first.
	Queues []int
	// UDP, when valid, selects IPv4/UDP framing from this local address
	// (the interface's IPv4 address and a UDP port); the zero value selects
	// raw Ethernet framing with EtherType 0x86DF. The XDP program claims
	// one port per served queue, from this port up, for the queue
	// transports (OpenQueue).
	UDP netip.AddrPort
	// Neighbors gives the MAC address of IPv4 peers for UDP framing. Peers
	// not listed are looked up in the kernel's neighbour table of the
	// namespace, or learnt from the frames they send.
	Neighbors map[netip.Addr][6]byte
	// Socket configures the sockets; Attach the program's attach mode.
	Socket Options
	Attach AttachMode
	// LittleEndianWire says the mx boards on this transport write
	// little-endian headers (mx BoardOptions.LittleEndian), so the steering
	// program finds the puller magic's low byte of PULL_REPLY frames, which
	// carry no endpoint byte, where it is (see PullReplyRule).
	LittleEndianWire bool
	// Spin is how long Recv polls the rings before it sleeps in poll(2):
	// spinning costs a CPU but saves the wake-up latency (tens of
	// microseconds in a VM). 20µs when zero; negative means never spin.
	Spin time.Duration
}

// Transport carries mx frames over AF_XDP sockets on some queues of one
// interface: raw Ethernet framing (NIC id = MAC address, EtherType 0x86DF,
// Data = the bytes after the 14-byte Ethernet header) or IPv4/UDP framing
// (NIC id = ip<<16|port, Data = the UDP payload). It owns the steering
// program of the interface. It implements transport.Transport and
// transport.Stats.
type Transport struct {
	opts   TransportOptions
	prog   *Program
	socks  []*Socket
	fds    []unix.PollFd
	wake   int // eventfd that Close writes to end a blocked Recv
	nl     int // rtnetlink socket in the interface's namespace, for neighbours
	nlMu   *sync.Mutex
	ctl    int // AF_INET socket in the interface's namespace, for ethtool
	mac    [6]byte
	ifMTU  int
	addr   transport.NICID
	udp    bool
	ip     [4]byte
	port   uint16
	closed atomic.Bool

	// The receive side's fields (rxMu to next, rxFrames) and the send
	// side's (txMu to lookup, txFrames) lie on cache lines of their own, so
	// that a goroutine spinning in Recv does not take the sender's lines
	// from its CPU at every poll, nor the sender the receiver's.
	_ cpu.CacheLinePad

	rxMu  sync.Mutex                  // Recv is one goroutine at a time; Close waits for it
	lends *transport.Lends[lentFrame] // held frames lent to the caller (Hold)
	rxAt  []lentFrame                 // where each frame of the last Recv lies
	// lentNow: Hold marked frames of the last Recv as lent (rxMu).
	lentNow  bool
	held     [][]Desc // per socket: frames handed out by the last Recv
	rxDesc   []Desc
	next     int         // socket Recv starts with, for fairness
	rxFrames owned.Count // frames received, counted under rxMu
	// wakeAsked: Wake asked the Recv that waits (or the next one that
	// would) to return; asleep: a Recv sleeps in ppoll, so Wake writes
	// the eventfd wake to end it (transport_recv.go).
	wakeAsked, asleep atomic.Bool
	// wakeMu orders Wake's eventfd write against release's close of
	// that eventfd (wakeShut): a Wake racing Close must not write to a
	// descriptor number the process may already have reused.
	wakeMu   sync.Mutex
	wakeShut bool

	_ cpu.CacheLinePad

	txMu   sync.Mutex
	txDesc []Desc
	txOut  []Desc // the descriptors of a batch: headers, payloads in place
	neigh  map[[4]byte][6]byte
	lookup time.Time // last neighbour table dump
	// txFrames counts the frames sent, under txMu.
	txFrames owned.Count

	_ cpu.CacheLinePad

	// Regions (Register) in the first socket's region frames.
	regMu   sync.RWMutex
	regions []*region
	// frames hands out the region frames (regionmem.go).
	frames *regionFrames

	rxBad, txUnreach          atomic.Uint64
	txInPlace, txRegionCopied atomic.Uint64

	// queues are the transport's queue transports (queued.go); queue is
	// set on a queue transport instead.
	queues *queueset.Set[Transport]
	queue  *queueLink
}

// region is a Region registered in the UMEM's region frames: UMEM
// addresses [lo, hi), and its descriptors the kernel has not completed.
type region struct {
	r        *transport.Region
	lo, hi   uint64
	inflight atomic.Int64
}

// NewTransport attaches the steering program to the interface, opens and
// registers a socket on each queue and returns the transport. It must run
// in the interface's network namespace. Errors are those of Attach and Open,
// and ErrConfig for bad options; a failed NewTransport undoes every step.
func NewTransport(o TransportOptions) (_ *Transport, err error) {
	ifi, err := usableInterface(o.Interface)
	if err != nil {
		return nil, err
	}
	t := &Transport{opts: o, wake: -1, nl: -1, ctl: -1, nlMu: &sync.Mutex{}, ifMTU: ifi.MTU, neigh: make(map[[4]byte][6]byte), lends: transport.NewLends[lentFrame](0)}
	copy(t.mac[:], ifi.HardwareAddr)
	defer func() {
		if err != nil {
			t.release()
		}
	}()
	po := ProgramOptions{Mode: o.Attach}
	po.PullReplyType, po.PullReplyOffset, po.PullReplyXOR = PullReplyRule(o.LittleEndianWire)
	if o.UDP.IsValid() {
		a := o.UDP.Addr().Unmap()
		if !a.Is4() || o.UDP.Port() == 0 {
			return nil, configErr("new transport", fmt.Sprintf("UDP address %v: want an IPv4 address and a non-zero port", o.UDP))
		}
		t.udp, t.ip, t.port = true, a.As4(), o.UDP.Port()
		t.addr, _ = transport.UDPNICID(netip.AddrPortFrom(a, t.port))
		po.NoEtherType, po.UDPPortLow = true, t.port
		for ip, mac := range o.Neighbors {
			if ip.Unmap().Is4() {
				t.neigh[ip.Unmap().As4()] = mac
			}
		}
		if t.nl, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE); err != nil {
			return nil, opErr("socket(AF_NETLINK)", o.Interface, -1, err)
		}
		if t.ctl, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return nil, opErr("socket(AF_INET)", o.Interface, -1, err)
		}
	} else {
		t.addr = transport.MACNICID(t.mac)
	}
	queues := o.Queues
	if len(queues) == 0 {
		n, err := RxQueues(o.Interface)
		if err != nil {
			return nil, err
		}
		for q := range n {
			queues = append(queues, q)
		}
		po.Queues = n
	} else {
		for _, q := range queues {
			po.Queues = max(po.Queues, q+1)
		}
	}
	if t.udp {
		// One port per queue, for the queue transports.
		hi := int(t.port) + len(queues) - 1
		if hi > 0xFFFF {
			return nil, configErr("new transport", fmt.Sprintf("UDP port %d and %d queues: the queues' ports would pass 65535: choose a port below %d", t.port, len(queues), 0x10000-len(queues)))
		}
		po.UDPPortHigh = uint16(hi)
	}
	if t.prog, err = Attach(o.Interface, po); err != nil {
		return nil, err
	}
	for _, q := range queues {
		s, err := Open(o.Interface, q, o.Socket)
		if err != nil {
			return nil, err
		}
		// Every socket has its region frames: each queue transport
		// sends from its own.
		t.socks = append(t.socks, s)
		if err := t.prog.Register(s, 0); err != nil {
			return nil, err
		}
		t.fds = append(t.fds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	if t.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, opErr("eventfd", o.Interface, -1, err)
	}
	t.fds = append(t.fds, unix.PollFd{Fd: int32(t.wake), Events: unix.POLLIN})
	t.held = make([][]Desc, len(t.socks))
	for i := range t.held {
		t.held[i] = make([]Desc, 0, 256)
	}
	t.rxDesc = make([]Desc, 256)
	t.lends = transport.NewLends[lentFrame](max(1, len(t.socks[0].UMEM())/t.socks[0].FrameSize()/4))
	t.txDesc = make([]Desc, 64)
	t.txOut = make([]Desc, 0, 3*64)
	u := t.socks[0].u
	fs := t.socks[0].FrameSize()
	t.frames = newRegionFrames(len(t.socks[0].RegionMemory())/fs, fs, u.regionBase)
	u.mu.Lock()
	u.regionDone = t.regionDone
	u.mu.Unlock()
	t.queues = queueset.New[Transport](len(t.socks))
	return t, nil
}

// release closes whatever NewTransport opened.
func (t *Transport) release() error {
	var err error
	for _, s := range t.socks {
		err = errors.Join(err, s.Close())
	}
	if t.prog != nil {
		err = errors.Join(err, t.prog.Close())
	}
	t.wakeMu.Lock()
	t.wakeShut = true
	t.wakeMu.Unlock()
	for _, fd := range []int{t.wake, t.nl, t.ctl} {
		if fd >= 0 {
			err = errors.Join(err, unix.Close(fd))
		}
	}
	return err
}

// Addr returns the local board's NIC id: the interface's MAC address, or
// its UDP address packed as ip<<16|port.
func (t *Transport) Addr() transport.NICID { return t.addr }

// HostUniqueNIC reports whether the NIC id belongs to this board alone on
// the host: an IPv4 address and port does; the interface's MAC does not,
// as processes bound to other queues of the interface share it (see
// transport.HostUnique).
func (t *Transport) HostUniqueNIC() bool { return t.udp }

// headers is the framing overhead in front of the Data.
func (t *Transport) headers() int {
	if t.udp {
		return UDPHeadersLen
	}
	return EthHeaderLen
}

// MTU is the largest Data one frame carries: the interface MTU less the IP
// and UDP headers for UDP framing, bounded by what a UMEM frame holds after
// the kernel's receive headroom.
func (t *Transport) MTU() int {
	mtu := t.ifMTU
	if t.udp {
		mtu -= UDPHeadersLen - EthHeaderLen
	}
	return min(mtu, t.socks[0].FrameSize()-xdpPacketHeadroom-t.headers())
}

// xdpPacketHeadroom is XDP_PACKET_HEADROOM: what the kernel keeps in front
// of a received frame in its UMEM frame.
const xdpPacketHeadroom = 256

// Send transmits frames from the first queue's socket, copying each into a
// UMEM frame, or, for a frame of a region in the UMEM's region frames
// (Register), writing only its headers (and its Head) there and pointing
// the next descriptors at the frame's Data in place. It waits up to a second for
// transmit frames to complete when all are in flight.
func (t *Transport) Send(frames []transport.Frame) (int, error) {
	return t.send(frames, true)
}

// Queue is Send without the system call that tells the kernel (the TX
// kick): the frames are copied (or described in place) and put on the TX
// ring in order, as Send does, and leave when the next Kick, Send or
// idle Recv makes it. It kicks only when it must wait for transmit
// frames or ring room. See transport.Kicker.
func (t *Transport) Queue(frames []transport.Frame) (int, error) {
	return t.send(frames, false)
}

// Kick tells the kernel to transmit what Queue left on the TX ring, when
// frames wait there and the kernel asked to be told (NEED_WAKEUP). It
// takes no lock of Send's, so it runs alongside senders; a kick finds the
// ring empty (and makes no system call) when another kick sent its frames.
func (t *Transport) Kick() error {
	if t.closed.Load() || len(t.socks) == 0 {
		return nil
	}
	if _, err := t.socks[0].Flush(); err != nil && !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// send is Send, or Queue without kick.
func (t *Transport) send(frames []transport.Frame, kick bool) (int, error) {
	t.txMu.Lock()
	defer t.txMu.Unlock()
	if t.closed.Load() {
		return 0, errClosed
	}
	if err := t.queuesOpen(); err != nil {
		return 0, err
	}
	s := t.socks[0]
	mtu, hdr := t.MTU(), t.headers()
	sent := 0
	var deadline time.Time
	for sent < len(frames) {
		want := min(len(frames)-sent, len(t.txDesc))
		n := s.Alloc(t.txDesc[:want])
		if n == 0 {
			if deadline.IsZero() {
				deadline = time.Now().Add(time.Second)
			} else if time.Now().After(deadline) {
				return sent, fmt.Errorf("xdp: send on %s: no transmit frame completed for 1s", t.opts.Interface)
			}
			if _, err := s.Flush(); err != nil {
				return sent, err
			}
			time.Sleep(10 * time.Microsecond)
			continue
		}
		deadline = time.Time{}
		// Build up to n frames; stop at the first that cannot be sent.
		built := 0
		out := t.txOut[:0]
		var ferr error
		for i := range n {
			f := &frames[sent+i]
			if len(f.Head)+len(f.Data) > mtu {
				ferr = fmt.Errorf("xdp: %d bytes of Head and Data, MTU %d: %w", len(f.Head)+len(f.Data), mtu, transport.ErrTooBig)
				break
			}
			var x *region
			if r := f.Region; r != nil {
				if err := r.Check(t, f); err != nil {
					ferr = fmt.Errorf("xdp: %w", err)
					break
				}
				// In place when the Data needs no padding after it.
				if x = t.regionOf(r); x == nil || hdr+len(f.Head)+len(f.Data) < minFrame {
					x = nil
					r.Copied()
					t.txRegionCopied.Add(1)
				}
			}
			b := s.Frame(t.txDesc[i])
			if t.udp {
				ap := f.Peer.UDPAddr()
				dst := ap.Addr().As4()
				mac, ok := t.neighbour(dst)
				if !ok {
					t.txUnreach.Add(1)
					ferr = fmt.Errorf("xdp: no MAC address known for %v: add a neighbour entry (ip neigh replace %v lladdr MAC dev %s) or TransportOptions.Neighbors: %w",
						ap.Addr(), ap.Addr(), t.opts.Interface, transport.ErrUnreachable)
					break
				}
				PutUDPHeaders(b, UDPHeader{Eth: EthHeader{Dst: mac, Src: t.mac}, SrcIP: t.ip, DstIP: dst, SrcPort: t.port, DstPort: ap.Port()}, len(f.Head)+len(f.Data))
			} else {
				PutEthHeader(b, EthHeader{Dst: f.Peer.MAC(), Src: t.mac, EtherType: EtherTypeOpenMX})
			}
			if x != nil {
				out = t.inPlace(out, Desc{Addr: t.txDesc[i].Addr, Len: uint32(hdr + copy(b[hdr:], f.Head))}, x, f)
				built++
				continue
			}
			l := hdr + copy(b[hdr:], f.Head)
			l += copy(b[l:], f.Data)
			if l < minFrame {
				clear(b[l:minFrame])
				l = minFrame
			}
			out = append(out, Desc{Addr: t.txDesc[i].Addr, Len: uint32(l)})
			built++
		}
		if built < n {
			s.Release(t.txDesc[built:n])
		}
		for off := 0; off < len(out); {
			var m int
			var err error
			if kick {
				m, err = s.Transmit(out[off:])
			} else if m, err = s.Post(out[off:]); m == 0 && err == nil {
				_, err = s.Flush() // the ring is full: let the kernel take some
			}
			if err != nil {
				t.unsent(s, out[off:])
				done := frameCount(out[:off])
				t.txFrames.Add(uint64(done))
				return sent + done, err
			}
			off += m
			if m == 0 {
				time.Sleep(time.Microsecond)
			}
		}
		sent += built
		t.txFrames.Add(uint64(built))
		if ferr != nil {
			return sent, ferr
		}
	}
	return sent, nil
}

// inPlace appends to out the descriptors of frame f of region x: head,
// the headers in a UMEM frame of the socket's, then f.Data where it lies,
// cut at UMEM frame edges (a descriptor lies in one frame). Each
// descriptor of the Data is one in-place send of the region until the
// kernel completes it.
func (t *Transport) inPlace(out []Desc, head Desc, x *region, f *transport.Frame) []Desc {
	head.More = true
	out = append(out, head)
	fs := uint64(t.socks[0].FrameSize())
	addr := x.lo + uint64(x.r.Offset(f.Data))
	for left := uint64(len(f.Data)); left > 0; {
		k := min(left, fs-(addr&(fs-1))) // frame sizes are powers of two
		left -= k
		out = append(out, Desc{Addr: addr, Len: uint32(k), More: left > 0})
		x.r.Begin()
		x.inflight.Add(1)
		t.frames.begin(addr)
		addr += k
	}
	t.txInPlace.Add(1)
	return out
}

// unsent gives back the frames of descriptors Transmit did not take: the
// socket's frames to its free list, the region's sends completed at once.
func (t *Transport) unsent(s *Socket, descs []Desc) {
	s.Release(descs)
	for _, d := range descs {
		if d.Addr >= s.u.regionBase {
			t.regionDone(d.Addr)
		}
	}
}

// frameCount is the number of frames descs hold: those whose last
// descriptor is among them.
func frameCount(descs []Desc) int {
	n := 0
	for _, d := range descs {
		if !d.More {
			n++
		}
	}
	return n
}

// neighbour returns the MAC address of an IPv4 peer: from the cache, else
// from the kernel's neighbour table (dumped at most every 100ms). txMu is
// held.
func (t *Transport) neighbour(ip [4]byte) ([6]byte, bool) {
	if mac, ok := t.neigh[ip]; ok {
		return mac, true
	}
	if time.Since(t.lookup) < 100*time.Millisecond {
		return [6]byte{}, false
	}
	t.lookup = time.Now()
	// Queue transports share the transport's rtnetlink socket (made in the
	// interface's namespace): one dump at a time.
	t.nlMu.Lock()
	dumpNeighbours(t.nl, t.neigh)
	t.nlMu.Unlock()
	mac, ok := t.neigh[ip]
	return mac, ok
}

// dumpNeighbours reads the IPv4 neighbour table over the rtnetlink socket
// fd (whose namespace is the one it was created in) into m.
func dumpNeighbours(fd int, m map[[4]byte][6]byte) {
	req := make([]byte, unix.SizeofNlMsghdr+12)
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], unix.RTM_GETNEIGH)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	req[unix.SizeofNlMsghdr] = unix.AF_INET // ndmsg.ndm_family
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return
	}
	buf := make([]byte, 1<<16)
	for range 64 {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return
		}
		msgs, err := syscallParseNetlink(buf[:n])
		if err != nil {
			return
		}
		for _, msg := range msgs {
			switch msg.typ {
			case unix.NLMSG_DONE, unix.NLMSG_ERROR:
				return
			case unix.RTM_NEWNEIGH:
				ip, mac, ok := parseNeighbour(msg.data)
				if ok {
					m[ip] = mac
				}
			}
		}
	}
}

// reap collects the first socket's transmit completions (Region.Pending's
// poll), unless the transport is closed.
func (t *Transport) reap() {
	u := t.socks[0].u
	if !u.mu.TryLock() {
		return
	}
	defer u.mu.Unlock()
	if !t.closed.Load() {
		u.reap()
	}
}

// Counters reports frames received, sent and dropped by the transport,
// and the kernel's and the program's counts, summed over the queues.
func (t *Transport) Counters() []transport.Counter {
	c := []transport.Counter{
		{Name: "xdp_rx_frames", Value: t.rxFrames.Load()},
		{Name: "xdp_tx_frames", Value: t.txFrames.Load()},
		{Name: "xdp_rx_not_ours", Value: t.rxBad.Load()},
		{Name: "xdp_tx_unreachable", Value: t.txUnreach.Load()},
		{Name: "xdp_tx_in_place", Value: t.txInPlace.Load()},
		{Name: "xdp_tx_region_copied", Value: t.txRegionCopied.Load()},
	}
	c = append(c, t.lends.Counters("xdp_")...)
	c = t.queueCounters(c)
	var sum Stats
	for _, s := range t.socks {
		st, err := s.Stats()
		if err != nil {
			continue
		}
		sum.RxDropped += st.RxDropped
		sum.RxRingFull += st.RxRingFull
		sum.RxFillRingEmpty += st.RxFillRingEmpty
		sum.RxInvalidDescs += st.RxInvalidDescs
		sum.TxInvalidDescs += st.TxInvalidDescs
	}
	c = append(c,
		transport.Counter{Name: "xdp_rx_dropped", Value: sum.RxDropped},
		transport.Counter{Name: "xdp_rx_ring_full", Value: sum.RxRingFull},
		transport.Counter{Name: "xdp_rx_fill_ring_empty", Value: sum.RxFillRingEmpty},
		transport.Counter{Name: "xdp_invalid_descs", Value: sum.RxInvalidDescs + sum.TxInvalidDescs},
	)
	if qs, err := t.prog.Counters(); err == nil {
		var red, unc uint64
		for _, q := range qs {
			if t.queue != nil && q.Queue != t.socks[0].Queue() {
				continue
			}
			red += q.Redirected
			unc += q.Unclaimed
		}
		c = append(c, transport.Counter{Name: "xdp_prog_redirected", Value: red}, transport.Counter{Name: "xdp_prog_unclaimed", Value: unc})
	}
	return c
}

// Program is the steering program the transport attached, for its
// counters and for SetEndpoint.
func (t *Transport) Program() *Program { return t.prog }

// Sockets are the transport's sockets, one per served queue.
func (t *Transport) Sockets() []*Socket { return t.socks }

// Close ends a blocked Recv with transport.ErrClosed, waits for Recv and
// Send to return, then closes the sockets and detaches the program.
// It closes the queue transports first. A queue transport's Close ends its
// blocked Recv likewise, removes its steering, gives its frames back to
// its socket and the socket back to the transport.
// Closing twice returns nil.
func (t *Transport) Close() error {
	if t.queue != nil {
		return t.closeQueue()
	}
	if t.closed.Swap(true) {
		return nil
	}
	var one [8]byte
	one[0] = 1
	unix.Write(t.wake, one[:])
	err := t.closeQueues()
	t.rxMu.Lock()
	t.txMu.Lock()
	defer t.txMu.Unlock()
	defer t.rxMu.Unlock()
	t.lends.Close()
	err = errors.Join(err, t.release())
	// The sockets are gone, and with them whatever the kernel still held:
	// complete the in-place sends it will never report.
	t.regMu.Lock()
	defer t.regMu.Unlock()
	for _, x := range t.regions {
		for ; x.inflight.Load() > 0; x.inflight.Add(-1) {
			x.r.Done()
		}
	}
	return err
}
