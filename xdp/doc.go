// Package xdp moves frames between gomx and any network interface Linux
// drives, through AF_XDP sockets and an eBPF steering program, while the
// kernel keeps the interface for everything else (IP keeps working).
//
// It is built on golang.org/x/sys/unix for the sockets and rings and on
// github.com/cilium/ebpf for the program, its maps and its attachment; no
// cgo, no libbpf or libxdp, no clang at build or run time.
//
// # Queues are the steering unit
//
// An AF_XDP socket is bound to one rx/tx queue of one interface, and the
// kernel delivers to it only frames that arrived on that queue: a frame
// redirected to a socket of another queue is dropped without any counter
// saying so. So the design is one socket (or one group of sockets sharing a
// UMEM) per queue that can receive our frames. Which queue a frame lands on
// is the NIC's choice: RSS spreads IP flows, a custom EtherType usually
// lands on one default queue, and ethtool ntuple rules can pin an EtherType,
// a destination MAC or a UDP port to a queue. [Steer] opens sockets on every
// queue that can receive an endpoint's frames and installs such rules where
// the NIC has them, reporting which queue serves which endpoint and which
// CPU services that queue, so that a process can be bound there (Open-MX
// style).
//
// # The program
//
// [Attach] loads a small program, written with cilium/ebpf's asm package
// (65 to about 100 instructions, so no compiler is needed and the EtherType, UDP
// port range and slot count are set at run time), and attaches it through a
// bpf_link: in driver (native) mode first and generic mode as a fallback.
// The link is the only reference to the program, so it is detached by
// [Program.Close] and by the kernel when the process dies, even by SIGKILL.
// The program passes every frame that is not ours to the kernel. Ours are
// the Open-MX EtherType 0x86DF, and IPv4/UDP frames (no IP options, not
// fragmented) to a configured port range. It redirects them to the XSKMAP
// entry of the rx queue they arrived on, queue*Slots+slot, where slot comes
// from the frame's destination endpoint byte through a 256-entry table
// ([Program.SetEndpoint]); an empty entry passes the frame to the kernel.
// Per queue it counts frames redirected, unclaimed (ours, but no socket)
// and passed ([Program.Counters]).
//
// # UMEM and rings
//
// A socket that owns its UMEM maps Options.Frames frames of
// Options.FrameSize bytes of hugepage memory (package hugepage) and
// registers it with the kernel. The kernel and the process share four
// single-producer single-consumer rings per socket, each a power-of-two
// array with a producer index, a consumer index and a flags word in a
// mapping of the socket:
//
//   - fill: the process gives the kernel frames to receive into;
//   - RX: the kernel hands back received frames (address and length);
//   - TX: the process gives the kernel frames to send;
//   - completion: the kernel hands back frames it has sent.
//
// The indices are typed atomics into the mapping. Each side caches the
// other's index and re-reads it only when the cache says the ring is full
// (producer) or empty (consumer); entries are written before the producer
// index is stored (a release) and read after it is loaded (an acquire);
// consumed entries are released by one store of the consumer index per
// batch. The kernel is kicked with a syscall only when it sets
// XDP_RING_NEED_WAKEUP in the ring's flags: always for TX in copy mode,
// where one sendto sends at most the TX budget (32 by default). The kick
// can be made apart from the ring's entries: [Socket.Post] puts frames on
// the TX ring and [Socket.Flush] kicks, so a sender that holds a lock
// posts under it and makes the system call after releasing it
// ([Transport.Queue] and [Transport.Kick], transport.Kicker).
//
// Frames are owned by exactly one party at a time. The UMEM's free list
// holds frames nobody uses; [Socket.Receive] hands received frames to the
// caller until [Socket.Release] gives them back to the fill ring;
// [Socket.Alloc] hands out free frames to write into and
// [Socket.Transmit] gives them to the kernel, which returns them on the
// completion ring, from where Alloc and Receive reap them back into the
// free list. Half of the frames start on the fill ring and half stay free
// for sending. None of these calls allocates; they take the UMEM's mutex
// once per batch, which is uncontended unless sockets share a queue.
//
// Sockets on the same queue share the owner's UMEM, fill and completion
// rings (XDP_SHARED_UMEM, [OpenShared]); they have their own RX and TX
// rings. Each socket's receive side and transmit side may be driven by
// different goroutines, each side by one goroutine at a time.
//
// # Copy and zero-copy
//
// With AutoCopy the kernel binds in zero-copy mode when the driver supports
// it and in copy mode otherwise; [Socket.ZeroCopy] says which, and Mode
// ZeroCopy turns a driver without it into an error. veth has copy mode
// only. In copy mode the sender's CPU does the work of the whole path on
// veth (skb, veth, the peer's XDP and the copy into the peer's UMEM).
//
// # Transport
//
// [NewTransport] wraps a program and one socket per queue as a
// transport.Transport for the mx message layer: raw Ethernet framing (NIC
// id = MAC address) or IPv4/UDP framing (NIC id = ip<<16|port).
//
// A Recv that waits polls the RX rings for TransportOptions.Spin (20 µs),
// then sleeps in ppoll(2) on the sockets and an eventfd on its own thread
// (not in the Go runtime's poller). On veth in copy mode the frame reaches
// the peer's RX ring inside the sender's sendto, so a receiver that polls
// the ring takes it with no wake-up, and one asleep in ppoll costs a
// thread wake-up per frame. So the transport is a transport.Spinner (a
// look that finds nothing makes no system call: mx's blocking waiters
// poll it themselves before they sleep) and a transport.Waker
// ([Transport.Wake] ends a waiting Recv: a flag its spin sees, and an
// eventfd write only when it sleeps). The kernel's own busy polling
// (Options.BusyPoll: SO_BUSY_POLL, SO_PREFER_BUSY_POLL) does not shorten
// poll(2) on an AF_XDP socket by itself: poll busy-loops only where the
// net.core.busy_poll sysctl is set, machine-wide, and it would then spin
// on the receiving veth's NAPI, which the sender's softirq has already
// run; recvfrom and sendto on a socket with SO_BUSY_POLL run one NAPI
// poll each.
//
// # Queue transports
//
// With UDP framing the transport is also a transport.Queued: OpenQueue(k)
// returns the socket of its k-th queue as a transport of its own, NIC id
// the transport's address with UDP port Port+k (the program claims one
// port per queue), with that socket's UMEM, fill, completion, RX and TX
// rings, held frames and region frames to itself, so a queue's receive,
// refill and completion take no lock another queue's take and mx's
// QueuedBoard serves each queue from its own thread. [Transport.Steer]
// puts a port's frames on its queue: an ethtool ntuple rule (udp4
// dst-port to the queue's rx queue) where the driver has one, and in any
// case an entry in a software table by which the queue a frame did land
// on copies it into the owning queue's inbox and wakes it, since a socket
// can only receive from its own rx queue. On veth (no ntuple) a frame
// lands on the rx queue of the sender's tx queue, so queue k talking to
// queue k of the peer needs no hand-over.
//
// # Sending in place
//
// Options.RegionFrames adds frames to the UMEM, after the ones the socket
// receives into and sends from, that belong to the caller: the socket
// never hands them out, and their transmit completions go to whoever sent
// from them instead of its free list. The socket then binds with
// XDP_USE_SG (Linux 6.6), so a frame may be several TX descriptors
// (Desc.More sets XDP_PKT_CONTD on all but the last), each within one
// UMEM frame. The transport uses that to send a frame of a registered
// region without copying it: [Transport.RegionMemory] carves memory out of
// the region frames (whole frames, first fit; [Transport.ReleaseRegionMemory]
// gives them back, and a frame with an in-place send still in flight is
// handed out again only once the kernel completed it), Register accepts it
// as an in-place region, and Send
// writes only the Ethernet (or Ethernet/IP/UDP) headers, and the frame's
// Head (transport.Frame.Head: every region takes one, so mx's pull replies
// carry their header there), into a frame of its own and points the next
// descriptors at the Data where it lies, cut at UMEM frame edges. Each such descriptor is one in-place send of the
// region (Region.InPlaceSends, Pending) until the completion ring returns
// its address; Region.Pending reaps the ring itself. Memory outside the
// region frames, and Data short enough to need padding, is copied and
// counted (Region.CopiedSends, xdp_tx_region_copied). In copy mode the
// kernel still copies the frame into an skb; what is saved is the copy
// into the UMEM, and in zero-copy mode (a driver with multi-buffer AF_XDP)
// every copy.
//
// # Errors
//
// Failures are [*OpError] values naming the operation, the interface and
// the queue, with a fix where one is known, wrapping one of [ErrNotSupported],
// [ErrPermission], [ErrQueue], [ErrInterface], [ErrBusy], [ErrClosed],
// [ErrConfig] or [ErrTooBig] together with the errno; use errors.Is. Every
// setup step is undone when a later one fails, and Close releases every
// descriptor, mapping and program.
//
// # Privileges
//
// Opening sockets needs CAP_NET_RAW; loading and attaching the program
// CAP_BPF and CAP_NET_ADMIN. The tests create their own network namespaces
// and veth pairs and need root; they skip, saying so, without it, and fail
// instead when GOMX_REQUIRE_XDP=1.
package xdp
