// Package shm is a transport between processes of one host through shared
// memory: one lock-free multi-producer receive queue per process, and
// single-producer rings (lanes) for the pairs that talk most, in memfd
// segments (on 2 MiB hugepages when there are free ones), found through a
// per-user endpoint directory, with no system call on the fast path.
//
// # Boards and the endpoint directory
//
// A [Transport] is one board: [Open] binds a SOCK_SEQPACKET unix socket
// named after its board number in the endpoint directory
// (/dev/shm/gomx-<uid> by default, or GOMX_SHM_DIR). The directory is
// created mode 0700 and refused when it belongs to someone else or is open
// to others, and each side of a connection checks with SO_PEERCRED that the
// other runs as the same user, so only the user's own processes can attach.
// A board's NIC id is [NICBase] | board number. A board number left behind
// by a crashed process (its socket file remains, nobody answers) is taken
// over by the next Open that asks for it, and every Open first removes the
// socket files of boards whose process is gone (no socket is bound to the
// name, and a connect is refused; see stale.go), so the directory does not
// collect the names of killed processes.
//
// # The receive queue and lanes
//
// The first frame to a peer connects to its socket; the receiver answers,
// with SCM_RIGHTS, with the memfd of its doorbell, which holds its receive
// queue, and its eventfd (see Sleeping and waking), and gives the producer
// an id in the queue. A peer's memfd is closed once mapped; a transport
// keeps its own doorbell's memfd open until Close, to pass it to each
// peer. So a live transport holds, besides mappings, its doorbell memfd,
// its two eventfds (doorbell and room bell) and, per peer both ways, two
// sockets (the connection it dialled to send, the one it accepted to
// receive) and two eventfds (the peer's doorbell, and the room bell the
// peer passed with its hello); its pool's segments and its spare lanes
// keep a memfd each while they last.
//
// The receive queue (queue.go) is one per receiver, written by every
// producer: 64-byte cells, each with a word that names its lap, claimed
// with a compare-and-swap on that word, so producers never take the same
// cells and a producer killed between its claim and its publish leaves a
// claimed record that the receiver skips once the producer's connection
// has closed. A pair's first frames go through it. A pair that keeps
// sending (Options.LaneAfter frames within Options.LaneIdle) gets a lane:
// a ring of its own (below), passed over the pair's connection, at most
// Options.Lanes written and read by each transport. The producer waits neither for the ring
// (mapping it populated is milliseconds of zeroing on a loaded host: a
// transport makes spare rings when it dials its peers, spare.go, and
// without one a goroutine makes it), nor for the answer: its frames go on
// through the queue until the lane is made and accepted, and its
// first record in the lane comes after the gate, the queue cursor past its
// last queue record, written into the lane's header; the receiver reads
// the lane only once its queue cursor has passed the gate, so a pair's
// frames stay in order across the hand-over (lane.go). A lane its producer
// wrote nothing on for Options.LaneIdle is retired (RetireIdle, which mx
// calls from its board's timers) by the hand-over the other way: a closing
// record, which the receiver reads, with the lane's records before it,
// before the pair's next frame through the queue, then unmaps the lane and
// says so; the pair gets a lane again once it is busy again, so the lanes
// go to the pairs busy now. A receiver that reads as many lanes as it
// takes, with a pair busy on its queue, asks the producer of the lane it
// used least recently to retire it, and keeps the lane freed for the busy
// pair (askback.go). A receiver thus polls its
// queue and its few lanes, and a process maps its own queue, the queues of
// the peers it sends to and at most 2·Lanes rings, however large the job.
//
// A queue is far smaller than one frame of every peer at once (64 peers
// of a 4 KiB frame each fill 4,096 cells), so it fills; a sender that
// finds it (or its lane) full does not wait, since it may hold a lock its
// own receive loop needs while the peer's sender waits for room in its
// queue in turn. The frame is copied into the pair's backlog, in private
// memory, and the pair's later frames go behind it; the next send and a
// flusher goroutine move the backlog into the queue or lane, in order, as
// the receiver frees room. The flusher does not poll: a producer with a
// backlog sets its bit in the queue's header (or the lane's wait word),
// and the receiver, once it has published the room it freed, writes that
// producer's room bell, an eventfd the producer passed with its hello, on
// which the flusher sleeps (the doorbell's handshake, below, the other
// way round). Past 16 MiB of backlogs a sender waits for room.
//
// # Rings
//
// A lane is a ring written only by the sender and read only by the
// receiver.
//
// A ring has a consumer cursor (head) on a cache line of its own, and
// records of a length, a record word and a frame, each starting on a 64-byte
// line, never wrapping (a pad record skips the end). There is no shared
// producer cursor: a record announces itself through its record word, which
// the producer stores last, atomically, and the consumer polls at its own
// cursor. The producer caches the consumer's head and reloads it only when
// the ring looks full. The consumer hands out frames that point into the
// ring, and publishes its head only at a later Recv, when the frames are
// no longer in use, and then only every 64 KiB (an eighth of a small ring)
// or at once after a reference record or while the producer's backlog
// waits (see commit in recv.go): a small message costs the consumer no
// store to the shared head, and a producer that finds the ring full still
// finds the head moving. A frame that finds the ring full waits in the
// pair's backlog (lane.go), in the sender's memory, and the send goes on;
// only once the transport's backlogs reach their bound (16 MiB) does a
// sender wait, and if the consumer takes nothing for Options.FullWait of
// that wait, the frame is dropped: Send counts it, as a lossy wire would
// lose it, and SendStrict also fails with ErrRingFull, for a caller that
// keeps no copy to resend. SendParts is
// SendStrict for one frame given as a head and parts (mx's lane: a short
// header and the application's segments), written straight into the
// record with no buffer of the caller's between. Every
// length read from a ring is checked against the ring and the MTU before
// use; a ring that breaks the layout is dropped and counted.
//
// # Many peers
//
// A process of a job talks to every other; what it maps and polls grows
// by one receive queue (256 KiB by default) per peer it sends to, not by
// two rings. A lane's size is Options.RingBudget (8 MiB) divided among the
// lanes a transport may write, within RingSize and a floor of three frames
// of the MTU (ringSize, footprint.go). A receiver polls its queue, at most
// eight hot lanes directly, and the cold ones through a 64-bit summary
// word in its doorbell that their producers set after publishing, so an
// empty look costs a few loads whatever the number of peers (notify.go).
// Footprint counts the shared memory a transport maps and owns, from its
// own tables; the counters carry it.
//
// # Sleeping and waking
//
// Recv polls for a short spin, then announces that it sleeps (a flag in its
// doorbell), polls once more, and reads the doorbell's eventfd. A producer,
// after publishing, writes the eventfd only if the flag is set. The flag
// store and the re-check of the record word on one side, the record word's
// store and the flag load on the other, are sequentially consistent (Go's
// atomics), so either the receiver sees the record or the producer sees the
// flag and writes. The eventfd's count stays up until it is read, so a write
// that comes between the receiver's last look and its read makes the read
// return at once: a wake-up is never lost, and a busy receiver costs its
// producers no system call. A write that comes after the receiver has woken
// (the producer saw the flag just before it fell) costs the next sleep one
// extra look, nothing more. Options.Spin (or GOMX_SHM_SPIN) sets the spin.
// Wake asks a Recv to return by the same handshake: a flag, and a write only
// while the Recv sleeps, so the layer above can take Recv over from a
// spinning receive loop cheaply; a peer that goes away, and Close, write it
// too. The counters say how often the receiver slept and how many wake-ups
// the producers sent. Beside the flag the layer above counts its waiters
// blocked in a wait (AddBlocked), and as it wakes the receiver adds to a
// total the time it slept while one was, and it writes when such a sleep
// began (CLOCK_MONOTONIC ns, before the flag goes up; 0 for a sleep with
// no waiter blocked); PeerSleeps reads them, which tells a producer how
// much of the time since its last look its consumer's process waited, a
// sleep still going on included (mx counts only the processes that did
// not as competing for a CPU; a receive loop asleep while its application
// computes does).
//
// The eventfd, not a futex in the doorbell, because of where the sleeper
// waits: the eventfd is non-blocking and read through the runtime's poller
// (an os.File's RawConn, which unlike os.File.Read allocates nothing when a
// deadline passes), so the sleeping goroutine parks there and its P goes to
// other goroutines. A futex wait is a system call that keeps the P: when the
// application's goroutines hold every other P, the runtime's sysmon retakes
// it again and again, and polls every 20 µs while it does, preempting the
// application (thousands of wake-ups a second on a computing CPU).
// The consumer passes the eventfd to each producer with the doorbell's memfd
// in its welcome (SCM_RIGHTS); the producer checks that it is an eventfd,
// makes it non-blocking, and keeps it, one descriptor per ring it writes,
// until the ring closes.
//
// # Peers that go away
//
// The unix connection of each ring stays open: when a process exits or
// crashes the kernel closes it, and the other side marks the ring dead. The
// receiver still delivers every frame the producer published before it went
// (its last message, an acknowledgement, are often just that), then unmaps
// the ring and the pool segments it shared; a sender reconnects on its
// next frame (a new process may have taken the board number) or fails with
// transport.ErrUnreachable. Close unmaps everything and removes the socket
// file; nothing is left in /dev/shm. A process killed before Close leaves
// only its socket file (rings and pools are memfds), which the next Open of
// the directory removes.
//
// # Shared pools
//
// A [Pool] (Transport.NewPool) is memory the user allocates for its own
// buffers, in memfd segments that Transport.ShareSegments passes to a peer
// over the ring's connection (SCM_RIGHTS after the SO_PEERCRED check; the
// peer acknowledges each once mapped), so the peer can copy straight out of
// them; segment 0 is a table of words the owner writes and peers read
// (PeerWords). A released segment is unmapped by the peers that had it, and
// a peer that goes away takes the segments it passed with it, after a hook
// (OnSegmentUnmap) lets a copy engine drop its mappings of that memory.
// Shares to one peer take turns; their wait for the acknowledgements holds
// no lock a release or a connection to another peer takes. See pool.go.
//
// # Sending in place
//
// Register on memory of the transport's Pool returns a region sent in
// place (Region.InPlace): Send does not copy such a frame into the ring but
// writes a 16-byte reference record (a length word of its own, refMark,
// in ring.go) naming the pool segment, offset and length, after making
// sure the peer has the segment mapped (ShareSegments, a no-op once it
// has them all). The receiver's Recv returns a frame whose Data points
// into its mapping of that segment; it is valid until the next Recv, like
// a frame in the ring, and Hold copies it. The send completes
// (Region.Pending falls) once the receiver's head has passed the record,
// that is at its next Recv; a receiver that goes away, or the sender's
// Close, completes the rest. A reference to a segment the receiver was
// not given, or outside it, or over the MTU, is dropped and counted. Other
// memory registered is copied into the ring as before. The pool memory of
// a region must not be freed while the region is open.
//
// # One cache-line transfer per small message
//
// A small message costs the consumer one cache-line transfer, as Open MPI's
// vader fast boxes do: the line holding the record's header, its record
// word and up to 56 bytes of frame (an mx TINY message of 8 bytes fits). The
// consumer polls the record word at its cursor instead of a tail on a line
// of its own, which cost a second transfer per message. The price is ring
// space: a record takes at least 64 bytes, so the smallest ring (64 KiB)
// holds 1024 small records.
//
// A word polled inside the records is safe only if nothing but the record
// it belongs to can put the expected value there: an earlier lap's frame
// bytes, or an area a pad record skipped, may hold any value at that place
// (a first version, fa8d2c9, trusted a cursor-derived word and was reverted
// for that). Here stale bytes cannot reach the consumer, by construction:
//
//   - Before the producer stores a record's word, the word of the header
//     that follows it is 0 (producer.put zeroes it, unless clearAhead
//     already did), and the producer never fills the ring up to that
//     header (reserve keeps its 8 bytes free), so the 0 never lands on a
//     record the consumer has yet to read. A pad record zeroes the word at
//     the start of the data area in the same way.
//   - The consumer reaches a cursor only by consuming the record before it,
//     through an atomic load of that record's word that acquires every
//     store the producer made before it, the 0 included. After the 0, the
//     only store to that word is the record's own word: the producer
//     cannot come round to that line again before the consumer's head has
//     passed it. A fresh ring is all zeroes.
//
// So the consumer finds 0 (nothing yet) or its record's word (recWord, odd,
// from the cursor) and nothing else; any other value is a broken producer,
// and the ring is dropped. TestStaleWordsNeverAccepted writes earlier laps
// whose frame bytes hold, at every place a later record word can fall, the
// value the consumer will wait for there, and shows the consumer never takes
// them (through Send and Recv too: TestTransportIgnoresStaleWords);
// TestRingMatchesOracle and FuzzRingOracle check the producer byte for byte
// against an oracle that builds rings record by record.
//
// Zeroing the next header just before a record's word would put a line last
// touched a lap ago, often out of cache, in front of that store, which made
// the floor ping-pong slower than the tail design (0.42 against 0.37 us
// one-way p50). The producer therefore keeps the words of the next 16 lines
// zeroed (clearAhead, after a batch is published, within the room the
// consumer has freed, with plain stores: no load races with them), and a
// small record finds its successor's word already 0. It prefetches each
// such line 16 records before it zeroes it: a zero store to a line not in
// the cache made the next locked instruction of the layer above wait for
// memory (an 8-rank 8 B alltoall, perf-sampled: the sender's CPU per
// message 247-301 -> 108-243 ns in 4 of 5 pairs alternated with the zero
// without a prefetch, 2026-11-30 18:15-18:22 UTC, load 40-46; the command
// and table in docs/intranode-scale.md, "Cache lines a message waits for").
//
// The floor ping-pong (BenchmarkFloorPingPong, two processes bound to a CPU
// each, 200 000 round trips, 8 runs alternated with the tail design on a
// host shared with other work, load average 18-22): one-way p50 0.15 ->
// 0.135 us (medians). The host has a slower regime too (other work on the
// bound CPUs, or another placement of them): there, 0.37-0.39 -> 0.32 us,
// and in a later set of 6 alternated runs (load average 10-12), 0.375 ->
// 0.315 us. 0.13 us is what NetPIPE over Open MPI's vader measured on this
// host in the same hour: the fast-box floor. BenchmarkTransportPingPong
// bounces an mx-sized frame through the calls mx makes (a one-frame Send,
// Recv(rx, 0) polled) and measures the same as the floor, so the
// Transport API costs nothing measurable above the rings: the per-record
// path does no division (the producer keeps its lap, the consumer its
// offset), no defer, no call for an empty look, and the consumer no store
// to shared memory per message. What mx costs above it is mx's own. A
// caller that serializes its Recv calls itself (mx's receive sources)
// may look with Pending first, which takes neither Recv's lock nor its
// bookkeeping: mx's polling waiters do, between the messages. Such a
// caller may also see the next frame with Peek and consume it with Take,
// with no batch and no lending (a frame it leaves is the next Recv's):
// mx's waiters take the lane records they can deliver at once that way,
// and learn from the same Peek, which says when Pending would report
// nothing, that an empty look needs no Recv. On the producer's side, a
// caller that serializes its sends itself (mx's boards, under their lock)
// says so once with SerialSends, and SendParts then writes the record
// without the ring's lock: no locked instruction before the record's
// word, which is the one store that must be one (the consumer's sleep
// depends on its order with the doorbell's flag). The counts of frames
// sent and received are bumped by their serialized writers with a plain
// load and store (internal/owned), not with an atomic, which on amd64 is
// locked even as a store.
package shm
