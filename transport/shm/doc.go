// Package shm is a transport between processes of one host through shared
// memory: lock-free single-producer rings in memfd segments (on 2 MiB
// hugepages when there are free ones), found through a per-user endpoint
// directory, with no system call on the fast path.
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
// # Rings
//
// The first frame to a peer connects to its socket and hands over, with
// SCM_RIGHTS, a memfd holding a ring written only by the sender and read
// only by the receiver; the receiver answers with the memfd of its doorbell.
// Both descriptors are closed once mapped, so a live transport holds
// mappings, not descriptors. Each direction of a pair has its own ring.
//
// A ring has a producer cursor (tail) and a consumer cursor (head) on cache
// lines of their own, and records of a length and a frame, 8-byte aligned,
// never wrapping (a pad record skips the end). The producer caches the
// consumer's head and reloads it only when the ring looks full; it writes a
// batch of records, then publishes them with one release store of the tail.
// The consumer loads the tail (acquire), hands out frames that point into
// the ring, and publishes its head only at the next Recv, when the frames
// are no longer in use. Every length read from a ring is checked against the
// ring before use; a ring that breaks the layout is dropped and counted.
//
// # Sleeping and waking
//
// Recv polls for a short spin, then announces that it sleeps (a flag in its
// doorbell), polls once more, and waits on the doorbell's futex word.
// A producer, after publishing, wakes the futex only if the flag is set. The
// flag store and the re-check on one side, the tail store and the flag load
// on the other, are sequentially consistent, so a wake-up is never lost and a
// busy receiver costs its producers no system call. Options.Spin (or
// GOMX_SHM_SPIN) sets the spin. Wake asks a Recv to return by the same
// handshake: a flag, and a futex wake only while the Recv sleeps, so the
// layer above can take Recv over from a spinning receive loop cheaply. The
// counters say how often the receiver slept and how many wake-ups the
// producers sent.
//
// # Peers that go away
//
// The unix connection of each ring stays open: when a process exits or
// crashes the kernel closes it, and the other side marks the ring dead. The
// receiver unmaps a dead ring at its next Recv; a sender reconnects on its
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
// See pool.go.
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
// # Design note: one cache-line transfer per small message
//
// Not done yet; recorded for whoever takes issue 10 up. A small message
// costs the consumer two cache-line transfers: the line holding the tail,
// then the line holding the record. Open MPI's vader fast boxes cost one:
// the receiver polls a flag inside the line that also holds the header and
// the payload. The ring can do the same without a new process protocol:
//
//   - Use the record header's 4 reserved bytes as a sequence word, the last
//     thing the producer writes (an atomic store, so it releases the length
//     and frame). Its expected value follows from the cursor alone, for
//     instance uint32(cursor/8)+1. Beware: the word's place may hold a
//     previous lap's frame bytes (or a skipped pad area), which can equal
//     the expected value, so stale bytes must be made impossible (the
//     producer zeroing the next record's word, or 64-byte slots that are
//     always whole records) before this is safe. The consumer
//     polls the word at its own cursor (an atomic load, which acquires)
//     instead of the tail; pad records carry the word too.
//   - Align records to 64 bytes, so the header and up to 56 bytes of frame
//     (an mx TINY frame of 8 bytes is about 34-48 bytes) share a line. This
//     costs ring space: a 64 KiB ring holds 1024 small records.
//   - The head side is already lazy: the consumer stores its head only at
//     the next Recv, and the producer reloads it only when the ring looks
//     full, so the head line does not bounce per message.
//   - Sleeping stays a Dekker handshake, with the sequence-word store
//     taking the place of the tail store: the producer stores the word,
//     then loads sleeping; the receiver stores sleeping, then re-loads the
//     word at its cursor. Go's atomics are sequentially consistent, so
//     either the receiver sees the record or the producer sees the flag.
//     The tail can stay as a batch summary for Hold and the dead-ring
//     drain, or go.
//   - parseRecord then reads a length only after the sequence word matched,
//     and must still bound every length by the ring and the MTU; its fuzz
//     target needs a new oracle that builds rings record by record.
//
// The gain to expect is about one line transfer per message off the floor
// ping-pong (l10spin measured 0.66 us one-way p50, bound, under load).
package shm
