// Package mx is the MX message-passing layer of gomx: Open-MX's protocol and
// API in Go, over any [transport.Transport] (in-process loopback, kernel UDP
// sockets, AF_XDP, later VFIO NIC queues and shared memory).
//
// # Boards, endpoints, addresses
//
// A [Board] is one transport: one network attachment with a 48-bit NIC id.
// [NewBoard] takes ownership of the transport and starts the board's progress
// goroutine. A board offers 256 endpoint ids; [Board.OpenEndpoint] opens one
// (or [AnyEndpoint]) with a 32-bit key. Every open endpoint gets a random
// session id, so an [Addr] (NIC id, endpoint id, session) names one
// incarnation of an endpoint. [Endpoint.Connect] (blocking) and
// [Endpoint.IConnect] exchange sessions and initial sequence numbers with a
// peer endpoint and check its key (ErrBadKey). Board names ("host:0") map to
// NIC ids through a [Names] table; for UDP boards "host:port" also resolves
// through the system resolver.
//
// # Messages and matching
//
// [Endpoint.ISend], [Endpoint.ISSend] and [Endpoint.IRecv] take up to 256
// segments and 64-bit match information. A receive (match, mask) takes the
// first message m, in arrival order and in per-sender sequence order
// (non-overtaking), with m&mask == match. Posting a receive first scans the
// unexpected queue. A shorter receive buffer truncates (ErrTruncated in the
// status). Completion is reported through [Request.Test], [Request.Wait]
// (with a context), [Endpoint.TestAny] and [Endpoint.WaitAny] (with a match
// filter) and [Endpoint.IPeek]/[Endpoint.Peek]. [Endpoint.IProbe] and
// [Endpoint.Probe] look into the unexpected queue; the matched probe
// [Endpoint.IMProbe]/[Endpoint.MProbe] removes the message and returns a
// [Message] to receive it (MPI_Mprobe, which MX lacks). [Endpoint.Cancel]
// cancels unmatched receives and pending connects, [Request.Forget] drops a
// handle. An [UnexpectedHandler] sees messages that match no posted receive.
// The unexpected queue is bounded (BoardOptions.UnexpectedMaxMessages and
// UnexpectedMaxBytes): when it is full an arriving message is dropped
// without an ack and its sender's resend delivers it later, so a slow
// receiver costs bandwidth, never unbounded memory. (A message on the lean
// path, see Reliability, is held instead, with a bounded number behind it.)
//
// Errors are sentinels (ErrTruncated, ErrUnreachable, ErrBadKey, ...) usable
// with errors.Is; calls wrap them in *OpError. A request's final Status.Code
// is nil or one of them, and Wait returns it as its error.
//
// # Protocol
//
// The wire format is Open-MX's native one (package [wire]): a 2-byte peer
// index, then a typed header laid out as in Open-MX's omx_wire.h,
// big-endian or (BoardOptions.LittleEndian) little-endian, nothing kept in
// its pads. Messages come in four classes:
//
//   - tiny (0..32 bytes) and small (33..128): one TINY or SMALL packet;
//   - medium (up to the rendezvous threshold, 32 KiB by default): up to 32
//     MEDIUM fragments, fragment i at i times the stride, one sequence
//     number for the whole message; any fragment may arrive first. The
//     stride is Open-MX's rule (8192 bytes at MTU 9000) applied to
//     BoardOptions.OpenMXMTU for an Open-MX peer, or to the smaller MTU of
//     a gomx pair;
//   - large (above the threshold, and every ISSend): a sequenced RNDV names a
//     region holding the sender's segments; the receiver, once it matched,
//     pulls the data with PULL requests, each for a block of PullBlockFrames
//     PULL_REPLY frames, PullBlocks blocks in flight, in Open-MX's frame
//     geometry (frames aligned on the sender's region, so a message at a
//     region offset has a shorter first frame; the puller magic is the
//     endpoint index XOR 0x21071980). A frame that arrives more than three
//     frames past a missing one (of its block or an earlier-requested one)
//     makes the puller ask at once for exactly the missing run (RACK's
//     rule; RMPP's lesson: no bubble while the window waits); a silence of
//     the pull path's measured RTO (see Reliability) re-requests the oldest
//     unfinished block, whose replies are evidence for the rest.
//     The region owner's board answers pulls by itself and validates each
//     against the region it names (session, region id and generation, the
//     puller's address, bounds), so a PULL can never read outside the message
//     it was registered for; a bad one gets a NACK_MCP. When all frames are in,
//     the receiver completes and sends a sequenced NOTIFY; the sender
//     completes on it.
//
// Tiny and small messages take a short path when nothing is unusual
// (short.go; counters ShortSends and ShortRecvs): a send over a transport
// (a peer on the shared-memory rings takes the lean path, lean.go) to a
// connected peer with no send waiting ahead of
// it and the window open builds its frame in one function, byte for byte
// the general path's, and keeps the same state for a resend; a received
// frame that is the next of its partner's sequence and matches the first
// posted receive, which holds it whole in one segment, completes that
// receive in one function. Everything else (out of order, duplicates, no
// or another matching receive, truncation, several segments, an unexpected
// handler) takes the general path.
//
// # Reliability
//
// Each pair of endpoints (a partner) numbers its sequenced packets (TINY,
// SMALL, MEDIUM, RNDV, NOTIFY) with 16-bit sequence numbers: 14 bits of
// sequence and 2 session bits bumped when the partner is reset, so packets
// of an older incarnation are rejected. The receiver matches strictly in
// sequence order, keeps up to 255 early packets, drops duplicates (a
// fragment bitmap per medium) and answers an obsolete duplicate with an
// immediate ack. Acks ("everything below s") ride on every sequenced packet
// the other way; otherwise an explicit TRUC ack goes out after NotAckedMax
// messages or AckDelay. Tiny and small messages of a peer reached through
// shared-memory rings, which lose nothing while the peer lives, are acked
// less often: after 64, or after NotAckedMax once a receive finds the
// rings drained, and the rest after 1ms. The sender keeps every sequenced packet until
// acked, except on the lean path: between two gomx boards that both
// announce it (wire.ExtRingLean), an eager message of one frame (tiny,
// small, or medium up to the fragment stride) to a peer on
// the rings (unless BoardOptions.ZombieSends is negative: sends then
// complete on their ack) is complete once it is in the peer's ring, which loses nothing
// while the peer lives. ISend builds its frame from the application's
// segments, writes it into the ring and completes the request, with no
// copy kept, no resend timer and no clock read; its sequence number still
// orders it among the peer's other frames, and acks still come back, as a
// window: a send takes the lean path only while fewer than 255 sequence
// numbers are un-acked. A receiver never drops such a message: one it
// cannot take yet (unexpected queue full, progression disabled) is held
// and offered again on every tick, and the peer's next frames wait behind
// it. Counters LeanSends and LeanHeld count both (see lean.go). Tiny and
// small messages on the lean path take the lane (wire.ExtRingLane, unless
// LocalOptions.NoLane or GOMX_LANE=off), and so do mediums of one fragment
// where both boards announce wire.ExtRingLaneMedium: the sender writes a 24-byte lane
// record with the payload straight into the peer's ring, with no Open-MX
// header and no frame built first, and the receiver, when the record is
// the next of its peer's sequence and a posted receive matches it, copies
// the payload straight into that receive; every other case takes the
// general path as the TINY, SMALL or MEDIUM frame the record stands for (see
// lane.go; counters LaneSends and LaneRecvs). Each partner measures its round trip (RFC 6298 smoothing, Karn's
// rule: only requests sent once give samples; pulls keep their own
// estimate). Every timeout also allows for a peer the machine keeps
// descheduled: three times the longest time a waiter of the process was
// kept off its CPU, polling or waking up, in the last two to four seconds
// (descheduled.go), nothing on an idle machine. A receiver acks the tail
// of a burst RTOMin/4 after it (not AckDelay), so a paused stream's tail
// is acked before the sender would probe it. Between two gomx boards (ExtAsk), the newest
// request unacked for twice the smoothed round trip (or srtt + 4*rttvar; a busy-polling
// board's first question at most eight of its fastest round trips) plus RTOMin/8 (half a tail's
// ack delay; there its fastest round trip, if shorter), with no allowance (before the first sample ResendDelay
// plus the allowance, at most RTOMax), first makes the sender ask the peer
// what it holds (a TRUC flagged TrucAsk, answered at once): what the answer
// shows lost is resent then, so a lost ping or pong costs that wait and a
// round trip, while a peer that is only late answers when it runs and
// nothing is resent (ask.go). The newest request unacked for twice the smoothed
// round trip, srtt + 4*rttvar or srtt plus that allowance and the tail's
// ack delay, or any request unacked for srtt + max(4*rttvar, the
// allowance) (clamped to RTOMin..RTOMax; ResendDelay before the first
// sample), first triggers
// a tail-loss probe: the newest unacked request's last frame, which a
// receiver that has it answers with an immediate ack, and which completes
// a message whose last frame was lost. Go timers fire about a millisecond
// late on Linux (epoll_wait's timeout is in ms), so the probe's deadline
// (and a SACK hole's) is also set on a per-board timerfd in the Go
// netpoller (finetimer.go): a lost small frame costs about the probe
// timeout, not a millisecond. The netpoller is not consulted while
// busy-polling waiters hold every P, so whoever polls also looks at the
// board's earliest deadline (one clock reading per 16 looks, per 256 in
// busy-poll mode where the clock costs a system call) and runs the timers
// when it has passed, as DPDK's poll loops drive its timers. Full
// resends keep the board's ticks, so a stalled peer costs a probe, not a
// resent message. Between two gomx boards
// that both announce it (ExtSack, unless BoardOptions.NoSack), a receiver
// that gets a frame past a hole answers at once with a selective ack
// listing what it holds past its ack point, per message and medium
// fragment, and the sender resends just the holes (sack.go;
// docs/wire-extensions.md). A round trip later, what is still
// overdue is resent, each resend of a request doubling its timeout up to
// RTOMax. A request unacked for ResendDelay*(ResendMax+1) since its first
// send makes the peer unreachable, however the backoff went, and every
// request involving it fails with ErrUnreachable (sends to it fail until a
// new Connect). Counters FastRetransmits, TimerRetransmits, TailProbes,
// DupReceived and PullFramesRerequested show how losses were recovered. Eager
// sends complete to the application once copied (at most ZombieSends at a
// time) while resends continue in the background. A receiving board answers
// packets for a missing or closed endpoint, or with a wrong session, with a
// NACK_LIB. A NACK_LIB carries no session, so it fails only the one request
// it names (ErrBadEndpoint, ErrEndpointClosed or ErrBadSession), never the
// partner, and only when it nacks the resend it made the board send at once:
// a genuine nack comes back within a round trip, a blind forger's does not.
// An obsolete duplicate is acked at once only when it is the previous
// sequence number (Open-MX's rule), otherwise after AckDelay. The only
// frame that resets a partner is a CONNECT presenting the endpoint's key
// and a new session (a new incarnation of the peer, as in Open-MX); what a
// CONNECT says about the peer board is believed only from such a request or
// from the reply to a pending connect. Both ends may connect at once: a peer
// that knows this board from its own connect may send before it answers
// this board's, and a reply that comes after such messages leaves them
// received (it moves the receive sequence back only after a reset).
//
// No peer or pull is declared dead before the board has taken what its
// transports already hold (verdict.go): a descheduled receive loop, or an
// answer queued behind more than one batch, does not cost a healthy
// connection. Nor is a stall of the board itself (its process descheduled
// on a loaded node: its timers ran late) counted as the peer's silence: the
// budgets run on the board's own running time (liveness.go). A large send ends even when its pull cannot: the receiver
// notifies a failed pull too (ErrPullFailed between gomx boards), and a
// receiver that pulled and then went silent fails the send with
// ErrUnreachable after the notify timeout (largefail.go).
//
// # Resources
//
// Nothing is lost to exhaustion. A large send that finds no free region
// (BoardOptions.Regions) waits in the endpoint's resource queue, and every
// later send waits behind it, so per-peer order holds; a matched large
// receive that finds no free pull handle (BoardOptions.PullHandles), or
// the board's pulls over its transport already asking for as many replies
// as its NIC can hold (BoardOptions.PullFrames), waits in the pull queue.
// Both start as regions, handles and pulls are released. A full
// unexpected queue drops arriving messages un-acked, to be resent (or, on
// the lean path, holds them).
//
// # Checksum
//
// Open-MX trusts the Ethernet CRC. Software wires (and the loopback
// transport's fault injector) do not check one, so gomx boards add a
// CRC-32C trailer, a gomx extension: it is on between two gomx boards that
// both announce it in the gomx CONNECT extension (neither set
// BoardOptions.NoChecksum), and off otherwise, always with an Open-MX peer.
// Frames through shared-memory rings (shm boards, the host path) never
// carry it: a ring is memory, not a wire, and the CRC cost both sides of
// every message between processes of one host; the sender decides per
// frame by the transport it takes and the receiver by the source it read.
// A frame that fails it, or any header check, is dropped and counted, never
// a panic. Every counter is in [Counters], per endpoint and per board.
//
// # MX calls
//
// Beyond the calls above: [Endpoint.Disconnect], [Endpoint.SetAddrContext]
// and [Endpoint.AddrContext], [Endpoint.IBuffered],
// [Endpoint.SetRequestTimeout], [Endpoint.DisableProgression] and
// [Endpoint.ReenableProgression], [GetInfo], [BoardNumberToNICID],
// [NICIDToBoardNumber], [OpenEndpointOn] with [AnyNIC], on-the-wire
// discovery with [Board.QueryHostname] and raw frames with [Board.SendRaw]
// and [Board.RecvRaw]. [ReturnCodeOf] and [StatusCodeOf] give MX's numeric
// codes for any error, for code ported from C.
//
// # Progress
//
// Progress never depends on the application calling in: each board's
// progress goroutine receives frame batches, demultiplexes them to
// endpoints, matches, answers acks and pulls, resends on timers and
// completes requests. A wait first polls the shared-memory rings (a shm
// board's, or the host path's), an AF_XDP socket and a NIC queue's RX ring
// (a queued board's; any transport.Spinner: a look costs no system call)
// from the waiting goroutine for the endpoint's
// poll window, which starts at BoardOptions.Spin (GOMX_SPIN, default
// DefaultSpin) and tunes itself up to BoardOptions.SpinMax (GOMX_SPIN_MAX)
// as Linux's haltpoll governor does: it grows after a wait whose message
// came soon after it gave up, and shrinks after one that polled in vain. A
// look costs no system call; a waiter whose reply is late yields the CPU
// between looks. The progress goroutine steps aside (it keeps only the
// timers) while any waiter polls, so a message that comes meanwhile goes
// from the ring to completion in the waiting goroutine with no futex and no
// goroutine hop (a lane record that goes straight into a posted receive with
// no Recv at all: lane.go), and Test looks at the rings once too; an
// application that tests often keeps the progress goroutine away the same
// way (it looks every millisecond while the Tests come, instead of being
// woken per frame), and a large message the copy engine moves into a tested
// receive is started and finished by the Tests, with nobody woken
// (enginereap.go). A wait's first look comes before it counts itself among
// the pollers: a message already there ends it at once (pollWait's
// firstLook). A wait that runs out of budget sleeps on a per-request
// channel, and the progress goroutine takes the rings back and sleeps on
// their doorbell when nothing comes (see poll.go and Board.WaitStats); a
// batch of it that wakes a sleeping waiter hands the processor to that
// waiter before it looks at the rings again, so on a process with one P
// the waiter runs at once and its next wait finds the rings free to poll
// (WaitStats.LoopYields). With BoardOptions.SleepOnSources (GOMX_SLEEP=recv;
// libmyriexpress sets it, its waiters being C threads) a wait that runs out
// of budget instead takes the board's sources and sleeps in the kernel on
// them itself (ppoll on the socket and the rings' eventfd), receiving its
// message on its own thread with no hand-over (sleep.go). With
// BoardOptions.BusyPoll a waiting goroutine polls every source, the
// transport included, without a budget; a transport that costs a system call
// to look at (a UDP socket beside the host path's rings) only every 64 looks
// at the rings. One mutex per board guards all protocol state; the
// tiny-message path takes it once per call and allocates nothing once its
// request pool is warm.
//
// The progress goroutine, the engine copies and the timers are goroutines:
// they run on whatever threads the Go runtime schedules them on, and a
// process bound to one CPU runs them beside the application, which they
// then preempt at every frame and completion. An application that wants
// its CPU to itself while messages move, as MPI users give a library's
// progress thread a core of its own, locks its computing goroutine to its
// thread (runtime.LockOSThread) and binds the process's other threads to
// another CPU (sched_setaffinity per thread; threads the runtime starts
// later inherit the binding): mx then progresses there. mxbench overlap
// --progress-cpu does this for the availability benchmark.
//
// # Endpoints of one process
//
// Messages to an endpoint of the same process (the same endpoint, another
// endpoint of the board, or an endpoint of another board in this process)
// never become frames. The connect still crosses the transport, checking
// the key; after it, each message is handed to the receiving endpoint
// directly, with no sequence numbers, acks or checksum, and the same
// matching, truncation, probe, cancel and error semantics: a posted receive
// gets one copy straight from the sender's segments; an unmatched eager
// message is queued as on the wire; a larger one, an ISSend, or an eager one
// that finds the unexpected queue full waits as a reference to the sender's
// buffer, and the receive that matches it copies from there and completes
// the send (a full queue delays the sender, never drops). Counters count
// these as SendLocal and RecvLocal. BoardOptions.Local.Off (or GOMX_LOCAL=off)
// sends through the transport instead, as tests and benchmarks of a
// transport do. See local.go for the locking and ordering rules.
//
// A board whose transport reports host-unique NIC ids (transport.HostUnique:
// UDP, AF_XDP over UDP, the VFIO NIC), or any board with
// BoardOptions.Local.Shm (GOMX_SHM=on), also reaches boards of other
// processes of the same user on this host through shared memory (package
// transport/shm): it registers itself in the per-user endpoint directory
// under its own NIC id, and frames to a peer found there take the rings
// instead of the transport, with the same protocol; Local.NoShm
// (GOMX_SHM=off) turns this off, and so does Local.Off unless Local.Shm is
// set too. Between processes a message above
// Local.ShmEager (8 KiB) goes by rendezvous and the receiver copies it once
// from the sender's buffer with process_vm_readv, or pulls it through the
// rings where the kernel refuses (Local.Large chooses; see cma.go). A peer process
// that exits or crashes is seen at once (transport.PeerWatcher): requests
// involving it fail with ErrUnreachable, and a new process on the same
// board and endpoint can be connected to.
//
// A message sent from a buffer of the board's shared pool
// ([Endpoint.AllocShared]: memfd segments the transport passes to its peers
// with SCM_RIGHTS) is copied by the receiver straight out of its own mapping
// of the sender's segment, with no system call and no ptrace permission
// (see shmpool.go); with a [CopyEngine] in Local.Engine (an ioat.Engine,
// over VFIO or the emulated model) the receiver copies messages from
// Local.EngineMin (2 MiB) with the engine, mapping the buffers chunk by
// chunk while the engine copies and keeping the mappings in the engine's
// registration cache until the memory goes (see offload.go).
package mx
