// Package transport is the one small interface between the mx message layer
// and whatever moves its frames: an in-process loopback wire, kernel UDP
// sockets, AF_XDP sockets, and later VFIO NIC queues and shared memory.
//
// # What a transport carries
//
// A transport moves opaque frames between boards. A board is a network
// attachment with a 48-bit address, its NIC id ([NICID]), exactly as Open-MX
// names a board by its MAC address. The frame's Data is everything the
// Open-MX common head carries after the Ethernet header: the 2-byte peer
// index followed by the packet-type header and payload. The transport adds and
// strips its own link framing:
//
//   - raw Ethernet framing (Open-MX compatible): a 14-byte Ethernet header with
//     EtherType [EtherType]; the NIC id is the MAC address. Frames shorter than
//     the Ethernet minimum are padded on the wire, so a receiver may see Data
//     longer than what was sent: the mx headers carry their own lengths and
//     the message layer never trusts the frame length alone.
//   - IPv4/UDP framing: the same Data as the UDP payload; the NIC id is the
//     IPv4 address and UDP port packed as ip<<16 | port (see [UDPAddr]), so
//     NIC receive-side scaling and ntuple rules can steer by port.
//
// # Contract
//
// Send may be called from several goroutines at once; Recv is called by one
// goroutine at a time (the endpoint's progress goroutine). Data passed to Send
// is copied or transmitted before Send returns, so the caller may reuse it.
// Data returned by Recv points into transport-owned buffers that stay valid
// until the next call to Recv or Close. Frames may be lost, duplicated,
// reordered or corrupted by the wire: reliability belongs to the layer above.
// Close makes a blocked Recv return [ErrClosed] and releases every buffer,
// socket and mapping the transport owns.
//
// # In-place frames
//
// Copies cost what a fast wire gives: a caller that moves large messages
// wants to keep a received frame where it landed until it (or a DMA copy
// engine) has moved the bytes out, and to send from its own memory without
// a copy. Every transport implements both halves of one extension of the
// contract, so the caller has one way to ask whatever the wire:
//
//   - Receive in place. Recv sets each frame's Ref. Before its next Recv,
//     the receiving goroutine may Hold a frame: its Data then stays valid
//     and unchanged past later Recvs until Release (from any goroutine).
//     A transport lends the receive buffer itself where it can (the slot of
//     the loopback ring, the UDP receive buffer, the NIC's packet buffer)
//     and puts a fresh buffer in its place; the buffers it lends at once
//     are bounded, and past that bound Hold copies Data into a fresh buffer
//     instead, so holding many frames never starves the receive ring, loses
//     a frame or blocks. [HoldInfo] says which happened, and where the held
//     Data lies in long-lived DMA-able memory (the NIC's hugepage pool),
//     which memory that is, so a copy engine can map it once. Each
//     transport's documentation says when it lends and when it copies, and
//     its [Stats] count both (held_lent, held_copied, held_now). Close
//     ends every hold: Release after Close does nothing, and the memory of
//     frames still held must no longer be read.
//   - Send in place. Register declares memory the caller owns as a
//     [Region]. A frame whose Region is set and whose Data lies in that
//     memory ([Region.Frame] builds one) is sent by reference where the
//     transport can ([Region.InPlace]): the caller leaves its bytes
//     unchanged until [Region.Pending] drops to zero, which is the
//     completion: a frame completes once the device or kernel has read
//     it (the NIC wrote its descriptor back, the AF_XDP completion ring
//     returned it, the receiver is done with it), and Pending itself
//     looks for completions, so polling it needs no other call. A transport that cannot avoid the copy (a kernel socket,
//     a ring it must write into) copies during Send, exactly as for any
//     other frame, and says so: InPlace is false, Pending stays zero and
//     [Region.CopiedSends] counts the copies. Frames without a Region are
//     sent as before, copied before Send returns.
//   - A header in front. A region whose transport can put a few copied
//     bytes in front of in-place Data (a NIC that sends one frame from
//     two descriptors) says so ([Region.TakesHead]); a frame of it may
//     carry its header in Frame.Head, so a message layer sends its own
//     header and the application's payload as one frame without copying
//     the payload. A region that copies may take a head too (the
//     transport then copies Head and Data into its buffer together, one
//     copy where the caller would have made two); where no region takes
//     heads, such a caller copies.
//
// Callers that neither hold nor register see the contract above unchanged.
package transport

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/gomx-dev/gomx/internal/sentinel"
)

// EtherType is the Open-MX EtherType used by raw Ethernet framing.
const EtherType = 0x86DF

// MaxLanes is the most receive lanes a transport offers ([Placer]).
const MaxLanes = 8

// LaneEtherType is the EtherType of raw Ethernet frames sent to receive
// lane lane (1..MaxLanes) of a peer's transport ([Frame].Lane):
// EtherType+lane, 0x86E0 to 0x86E7, unregistered as Open-MX's own is. A
// frame of one of these EtherTypes is an Open-MX frame like any other; it
// is sent only to a peer that asked for it (mx negotiates it), and
// receivers take it on any queue.
func LaneEtherType(lane int) uint16 { return EtherType + uint16(lane) }

// NICID is a 48-bit board address: a MAC address for Ethernet framing, or an
// IPv4 address and UDP port (ip<<16 | port) for UDP framing.
type NICID uint64

// NICIDMask keeps the 48 bits a NICID may use.
const NICIDMask = 1<<48 - 1

// MACNICID returns the NIC id of a 6-byte MAC address.
func MACNICID(mac [6]byte) NICID {
	// Written out (no loop): every received frame's source becomes one.
	return NICID(mac[0])<<40 | NICID(mac[1])<<32 | NICID(mac[2])<<24 |
		NICID(mac[3])<<16 | NICID(mac[4])<<8 | NICID(mac[5])
}

// MAC returns the NIC id as a MAC address.
func (id NICID) MAC() [6]byte {
	// Written out (no loop): every sent frame's destination is one.
	return [6]byte{byte(id >> 40), byte(id >> 32), byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
}

// UDPAddr returns the NIC id as an IPv4 address and UDP port.
func (id NICID) UDPAddr() netip.AddrPort {
	ip := uint32(id >> 16)
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), uint16(id))
}

// UDPNICID returns the NIC id of an IPv4 address and port. It fails for an
// IPv6 address, which does not fit in 48 bits.
func UDPNICID(ap netip.AddrPort) (NICID, error) {
	addr := ap.Addr().Unmap()
	if !addr.Is4() {
		return 0, fmt.Errorf("transport: %v is not an IPv4 address: UDP framing packs IPv4 and port into a 48-bit NIC id", ap)
	}
	b := addr.As4()
	ip := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return NICID(ip)<<16 | NICID(ap.Port()), nil
}

// String formats the NIC id as a MAC address, the way Open-MX prints boards.
func (id NICID) String() string {
	m := id.MAC()
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// Frame is one frame on its way out or in. On Send, Peer is the destination
// board; on Recv, Peer is the board that sent it.
type Frame struct {
	Peer NICID  // the destination on Send, the sender on Recv
	Data []byte // what follows the Ethernet header: peer index, packet header, payload
	// Ref is set by Recv: it names the transport's buffer holding Data,
	// for Hold. Hold changes it to name the hold, for Release. It is
	// ignored on Send.
	Ref uint64
	// Region, on Send, says that Data lies in memory registered with this
	// transport, to be sent in place where the transport can. Recv leaves
	// it nil.
	Region *Region
	// Head, on Send of a frame whose Region takes heads
	// ([Region.TakesHead]), is bytes the frame carries before Data: the
	// transport copies them (a message layer's header) and sends Data
	// from the region behind them, so the frame is Head followed by Data
	// and len(Head)+len(Data) must fit the MTU. A frame of any other
	// region is refused when it carries one ([Region.Check]); frames
	// without a Region leave it nil. Recv leaves it nil.
	Head []byte
	// Placed is set by Recv on a frame that took memory posted with
	// [Placer.Post]: the NIC wrote the frame's first bytes into Data and
	// the rest here, in the posted memory, so the frame is Data followed
	// by Placed. It is non-nil (possibly empty) whenever the frame took a
	// posting, whatever frame it is; nil otherwise. Send ignores it.
	Placed []byte
	// Lane, on Send, is the receive lane (1..MaxLanes; 0 for none) of
	// the peer's transport the frame is meant for ([Placer]): a
	// transport whose PlaceInfo says SendsLanes marks the frame so that
	// the peer's NIC steers it there (raw Ethernet framing: the
	// EtherType LaneEtherType(Lane)); any other ignores it, and the frame
	// arrives as any other. On Recv, a transport with lanes sets it to
	// the lane the frame arrived on, so a caller that posts on a lane
	// can tell the frames of a batch that took that lane's postings from
	// the others; 0 for any other frame, and on every other transport.
	Lane uint8
}

// Transport moves batches of frames between boards. See the package
// documentation for the concurrency and buffer-ownership rules.
type Transport interface {
	// Addr returns the local board's NIC id.
	Addr() NICID
	// MTU returns the largest Data length one frame may carry.
	MTU() int
	// Send transmits frames in order. It returns how many were handed to the
	// wire; when that is fewer than len(frames), err says why frames[n]
	// could not be sent (for example ErrTooBig or ErrClosed). A transport
	// whose queue is momentarily full waits briefly rather than failing.
	Send(frames []Frame) (n int, err error)
	// Recv fills frames with up to len(frames) received frames and returns
	// how many. It waits at most timeout for the first one; a timeout of 0
	// polls without waiting, and a negative timeout waits until a frame
	// arrives or the transport is closed. It returns 0, nil on timeout.
	Recv(frames []Frame, timeout time.Duration) (n int, err error)
	// Hold keeps the Data of *f, a frame the latest Recv returned, valid
	// and unchanged until Release(f), however many Recvs come first. It is
	// called by the goroutine that called Recv, before its next Recv. It
	// lends the receive buffer or copies Data into a fresh one (then f.Data
	// points at the copy), never blocks, and fails (wrapping
	// ErrNotHoldable) only for a frame it cannot name: one of an earlier
	// Recv, held already, or built by the caller.
	Hold(f *Frame) (HoldInfo, error)
	// Release ends the hold of a frame Hold kept and gives its buffer
	// back; f's Data and Ref are cleared. It may be called from any
	// goroutine, once per Hold; it does nothing for a frame not held and
	// after Close.
	Release(f *Frame)
	// Register declares mem, which the caller keeps alive and unmoved
	// until the region is closed, as memory frames may be sent from in
	// place (see the package documentation). A transport that cannot send
	// in place still registers it, and copies.
	Register(mem []byte) (*Region, error)
	// Close releases the transport. Blocked and later calls return
	// ErrClosed. It ends every hold and completes every pending in-place
	// send.
	Close() error
}

// Counter is one named statistic a transport may expose.
type Counter struct {
	Name  string
	Value uint64
}

// Stats is implemented by transports that count what they drop or see, for
// the per-endpoint counters the message layer reports.
type Stats interface {
	Counters() []Counter
}

// PeerWatcher is implemented by transports that learn when a peer board went
// away (for shared memory: its process exited or crashed), so the message
// layer can fail what involves that peer at once rather than after its
// resend limit.
type PeerWatcher interface {
	// LostPeers appends to dst the peers lost since the last call and
	// returns it.
	LostPeers(dst []NICID) []NICID
}

// Sleeper is implemented by transports whose receiver can sleep in the
// kernel on a file descriptor, on its own thread, instead of inside Recv
// (where a transport parks its goroutine in the Go runtime's poller). A
// thread of a C program waiting in a library built on the message layer
// is woken by the kernel directly that way, where a goroutine parked in
// the poller is woken by whichever thread polls and then handed to its
// own; and one thread can sleep on several transports at once (ppoll).
// The caller has the right to call Recv (no Recv runs meanwhile) from
// ArmSleep until EndSleep.
type Sleeper interface {
	// ArmSleep prepares a sleep: from now on a frame that arrives makes
	// fd readable (POLLIN), and a frame that waits already either keeps
	// it readable or makes sleep false (the caller then calls EndSleep
	// and receives).
	ArmSleep() (fd int, sleep bool)
	// EndSleep ends the sleep ArmSleep prepared; readable says whether
	// the caller's poll found fd readable.
	EndSleep(readable bool)
	Waker
}

// Waker is implemented by transports whose waiting Recv another goroutine
// can end early. A receiver over such a transport may wait in Recv as
// long as it has nothing else to do (an idle board, until its next
// stretched tick) and still hand Recv over, or close the transport, at
// once; over one that is not a Waker it must keep each wait short.
type Waker interface {
	// Wake makes a Recv that is waiting (or the next one that would
	// wait) return soon, with 0, nil when no frame has come, so another
	// goroutine can take the transport's Recv over. It may be called
	// from any goroutine, at any time, and costs a Recv that finds
	// frames nothing.
	Wake()
}

// Served is implemented by transports whose Recv wait looks for frames a
// while before it sleeps on an interrupt (transport/nic's queues over a
// NIC in interrupt mode): a frame that comes within the looks costs no
// interrupt and no wake-up. A receiver whose frames were taken by looks of
// its own while its receive loop stayed out of Recv (mx's application
// serving its queue) says so with Served before the loop waits in Recv
// again: that wait sleeps at its first empty look, as the looks it would
// take were taken already.
type Served interface {
	// Served makes the next Recv wait sleep at its first empty look,
	// unless a frame is taken before it. It may be called from any
	// goroutine.
	Served()
}

// Spinner is implemented by transports whose Recv with a zero timeout
// looks for frames in memory that the kernel or the peer writes (an AF_XDP
// socket's RX ring, shared-memory rings) and makes no system call when
// none has come. A receiver that expects a frame soon may poll such a
// transport for a while before it sleeps, at the cost of memory loads
// alone, and so take the frame without a wake-up; over a transport whose
// every look is a system call (a UDP socket) it would pay one per look.
type Spinner interface {
	// SpinCheap reports whether an empty look costs no system call.
	SpinCheap() bool
}

// Kicker is implemented by transports whose Send ends with a system call
// that only tells the kernel to take what was put on a transmit ring
// (AF_XDP's sendto when the ring asks for a wake-up). A caller that sends
// while holding a lock that other goroutines wait for queues its frames
// under the lock and kicks after releasing it, so that nobody waits on
// the lock for the length of a system call and the waiter the unlock
// hands the lock to needs no wake-up from the kernel. Frames queued by
// several senders leave in the order they were queued.
type Kicker interface {
	// Queue is Send without the kick: frames are copied (or described in
	// place) and put on the transmit queue in order before it returns,
	// and leave the host at the next Kick or Send. It kicks anyway when
	// it must wait for transmit buffers or ring room.
	Queue(frames []Frame) (n int, err error)
	// Kick tells the kernel to transmit what Queue queued, if anything
	// waits and the kernel asked to be told. It may run alongside Send,
	// Queue and Close; it does nothing once the transport is closed.
	Kick() error
}

// Queued is implemented by transports whose device has several receive
// and transmit queues, so that the layer above can serve each queue from
// its own goroutine (on its own core) with nothing shared between them:
// each queue is a Transport of its own, with its own NIC id, whose Send
// and Recv use only that queue and take no lock another queue's take.
// Frames sent to a queue's NIC id arrive on that queue: the transport
// steers them there, by a rule in the NIC where the NIC has one, and by
// demultiplexing in software otherwise. While queues are open, the
// Queued transport itself only opens and closes them (its own Send and
// Recv fail); its Close closes them too.
type Queued interface {
	// Queues is how many queues there are: OpenQueue takes 0 to
	// Queues()-1.
	Queues() int
	// OpenQueue returns queue q's transport. Its Close removes the
	// queue's steering.
	OpenQueue(q int) (Transport, error)
}

// Placer is implemented by transports whose NIC can write the payload of
// a received frame straight into memory the caller registered (header
// split into a small buffer of the transport's and the caller's memory:
// the 82599's, nicdrv.Placer), so that a message layer that knows which
// frames come next has each one's payload written once, by the NIC. The
// caller posts spans of a registered [Region], one a frame, in the order
// it expects the frames, on a lane:
//
//   - lane 0 is where the transport receives every frame: the NIC gives
//     its postings to the frames that arrive in that order, whatever they
//     are, after those that take the descriptors ahead
//     ([PlaceState].Ahead), so the caller checks each frame's Placed
//     against what it posted there and copies the frames that landed
//     elsewhere (a nil span posts a buffer of the transport's there too:
//     a spare descriptor for a frame the caller expects before the
//     spans that follow it);
//   - lanes 1 to [PlaceInfo].Lanes each receive only the frames a peer
//     sent to that lane ([Frame].Lane), so a caller that has a peer send
//     a run of frames to a lane it alone posts on meets no other frame
//     there. A lane takes only what is posted: a frame that finds nothing
//     is dropped, and a nil span posts a buffer of the transport's (the
//     frame then arrives whole in Data, as an unposted one does).
//
// Postings are consumed in the order posted, lane by lane (Consumed
// counts them): the NIC writes no more into a consumed span, and the
// caller must not give a region's memory back while spans of it are
// posted and not consumed. Cancel takes back what a lane did not use;
// Close consumes every posting.
type Placer interface {
	// PlaceInfo says how the transport places; Head 0 means it cannot
	// (its NIC was not opened to, or it receives on several queues).
	PlaceInfo() PlaceInfo
	// Post posts spans, each lying in r's memory (or nil for a buffer
	// of the transport's: a frame that takes it arrives whole, in Data,
	// and it counts as posted and consumed), for the next frames of
	// lane after the ones already posted, and returns how many it took
	// (fewer when the receive ring is full). A span shorter than Min,
	// outside r or not contiguous for the NIC is refused, naming it,
	// after the ones before it were taken.
	Post(lane int, r *Region, spans [][]byte) (int, error)
	// Placement reports lane's postings.
	Placement(lane int) PlaceState
	// Cancel takes back every posting of lane (1..Lanes) no frame took,
	// counting them consumed, and drops the frames the lane received and
	// Recv did not deliver yet: afterwards the NIC writes into none of
	// the lane's spans. It is for a lane whose frames stopped coming (a
	// message given up, a peer that did not use the lane).
	Cancel(lane int) error
}

// PlaceInfo says how a [Placer] places.
type PlaceInfo struct {
	// Head is how many bytes of a placed frame's Data arrive in Data,
	// the rest in Placed; 0 when the transport cannot place.
	Head int
	// Min is the least span: the most the NIC may write into one.
	Min int
	// LaneMin is Min on lanes 1..Lanes, which may take less (the 82599's
	// strip VLAN tags): a lane of MTU-sized frames can then take spans
	// exactly one full frame's payload long.
	LaneMin int
	// Lanes is how many lanes, 1..Lanes, receive only what their peers
	// send to them (0: none). A transport with lanes places nothing on
	// lane 0, which keeps its receive ring full of the transport's own
	// buffers for the frames sent to no lane.
	Lanes int
	// SendsLanes says that Send honours Frame.Lane, so a peer's lanes
	// can be used for frames this transport sends.
	SendsLanes bool
}

// PlaceState is a lane's postings ([Placer.Placement]).
type PlaceState struct {
	// Ahead is how many frames come before the next span posted takes
	// one: those Recv has not returned yet that the NIC received, and
	// the receive descriptors it holds and has not filled, spans posted
	// and not consumed among them.
	Ahead int
	// Posted and Consumed count the spans posted and those a frame took,
	// in posting order.
	Posted, Consumed uint64
}

// IRQCPU is implemented by transports that receive on one queue of a NIC
// whose interrupt the kernel services on a CPU it names (an AF_XDP
// socket's rx queue: the affinity of the queue's MSI-X vector), where
// the kernel's receive processing of the transport's frames runs. The
// message layer reports that CPU as the one serving its endpoints when it
// binds no thread of its own.
type IRQCPU interface {
	// IRQCPU returns that CPU, or -1 when it is not known: the transport
	// receives on several queues, or its queue has no interrupt of its
	// own (a virtual device) or one named otherwise.
	IRQCPU() int
}

// HostUnique is implemented by transports that know whether their NIC id
// names this board alone among the boards of the host (within its network
// namespace): true for a UDP address, or the MAC of a device one process
// owns; false for in-process networks, whose ids repeat in every process.
// The message layer reaches boards with host-unique ids through shared
// memory when they are on the same host.
type HostUnique interface {
	HostUniqueNIC() bool
}

// Errors a transport returns; implementations wrap them with detail.
// ErrClosed and ErrTooBig are the values every gomx package uses for these
// meanings (internal/sentinel): a transport closed because its NIC was
// closed returns an error that is both transport.ErrClosed and
// nicdrv.ErrClosed, and xdp.ErrTooBig is ErrTooBig.
var (
	// ErrClosed is returned by calls on a closed transport.
	ErrClosed = sentinel.ErrClosed
	// ErrTooBig is returned for a frame whose Data exceeds MTU().
	ErrTooBig = sentinel.ErrTooBig
	// ErrUnreachable is returned for a peer the transport cannot address
	// (for example a NIC id that is not a valid address for its framing).
	ErrUnreachable = errors.New("transport: peer address not reachable by this transport")
)
