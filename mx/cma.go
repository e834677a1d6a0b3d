package mx

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Single-copy large messages between processes of one host (CMA).
//
// When a large message's RNDV came from a board reached through shared
// memory (a shm board, or a peer on the host path), the receiver copies the
// message straight from the sender's buffer with process_vm_readv instead
// of pulling it through the rings: one copy, by the receiver, in one system
// call, with no PULL or PULL_REPLY frames. The wire protocol is unchanged:
// the receiver still ends with the NOTIFY that completes the send.
//
// To find the sender's buffer without a new frame, every board that talks
// shared memory keeps, in its own memory, a table of its endpoints' large
// send buffers: cmaEps holds, per endpoint id, the address of that
// endpoint's table, which has one entry per region (the region's sequence
// number and up to cmaMaxSegs address/length pairs). The board publishes
// the address of cmaEps to every shm board it connects to
// (shm.Transport.Publish), and the receiver learns it, with the sender's
// process id, from its ring (shm.Transport.PeerProcess). The endpoint's
// table address, which lives as long as the sender's board, is read once
// per sender process and endpoint and cached, with the last region entry
// read from that endpoint. A pull then reads the region's entry and the
// data in one process_vm_readv call (counted in CMAReads): the entry
// first, the data from where the cached entry says the sender's buffer
// lies, when the two entries before named the same buffer (applications
// send from the same buffers over and over). The entry must carry the
// RNDV's region sequence number and cover the message; when it puts the
// message elsewhere than the call read it from, a second call reads it
// from there. The entry is written before the RNDV is sent and
// stays valid until the NOTIFY frees the region, so the data read after an
// entry that checks out is the message's. A call of its own for the entry
// would cost a system call per message, with its task lookup, ptrace
// check and page walk: 15% of the samples of an 8-rank 64 KiB alltoall
// (docs/intranode-scale.md).
//
// The data copy runs on the goroutine that matched the RNDV, right after
// it releases the board lock and the lock of the rings it received from
// (Board.release, runCopies), never on a goroutine of its own: starting
// one per message cost a thread wake-up and a wait for a CPU that the
// spinning processes hold, longer than the copy of anything below a
// megabyte. Before a copy that could come near the sender's
// retransmission timeout, the receiver acks the RNDV, so the sender does
// not take it for a lost frame (copyOutlasts).
//
// The kernel allows process_vm_readv only where ptrace would be allowed
// (same user, and with Yama's ptrace_scope 1 only for a tracer the sender
// named, e.g. by PR_SET_PTRACER); where it refuses (EPERM), or the sender's
// buffer has more than cmaMaxSegs segments, the receiver pulls through the
// rings, counting the refusal. Go's heap does not move, so the addresses of
// a send's segments stay good while the send holds them.

// LargeStrategy chooses how large messages move between processes of one
// host.
type LargeStrategy int

const (
	// LargeAuto copies with process_vm_readv where the kernel permits it and
	// pulls through the rings otherwise (after the first refusal, the board
	// stops trying).
	LargeAuto LargeStrategy = iota
	// LargeRings always pulls through the shared-memory rings (two copies).
	LargeRings
	// LargeCMA always tries process_vm_readv first; a refusal still falls
	// back to the rings for that message (counted in CMARefused), so a
	// forced strategy never fails a message.
	LargeCMA
	// LargeShared copies a message whose send buffer lies in the sender's
	// shared pool (Endpoint.AllocShared) with the CPU, straight out of the
	// sender's segment mapped here (shmpool.go), never with the engine;
	// other buffers go as with LargeAuto.
	LargeShared
	// LargeEngine copies a message whose send buffer lies in the sender's
	// shared pool with LocalOptions.Engine at any size above the eager
	// threshold (offload.go); other buffers go as with LargeAuto. The
	// board refuses it without an engine.
	LargeEngine
	// LargeStaged stages every large message that fits a staging buffer
	// through the sender's staging buffers (stage.go), whatever
	// LocalOptions.StageMin says, to peers that receive staged messages;
	// other messages go as with LargeAuto. LargeAuto stages messages of
	// StageMin bytes and more.
	LargeStaged
)

// String names the strategy as GOMX_SHM_LARGE spells it.
func (s LargeStrategy) String() string {
	switch s {
	case LargeAuto:
		return "auto"
	case LargeRings:
		return "rings"
	case LargeCMA:
		return "cma"
	case LargeShared:
		return "shared"
	case LargeEngine:
		return "engine"
	case LargeStaged:
		return "staged"
	}
	return fmt.Sprintf("LargeStrategy(%d)", int(s))
}

// ParseLargeStrategy parses auto, rings, cma, shared, engine or staged.
func ParseLargeStrategy(s string) (LargeStrategy, error) {
	switch strings.ToLower(s) {
	case "auto", "":
		return LargeAuto, nil
	case "rings", "pull":
		return LargeRings, nil
	case "cma":
		return LargeCMA, nil
	case "shared", "pool":
		return LargeShared, nil
	case "engine", "ioat":
		return LargeEngine, nil
	case "staged", "stage":
		return LargeStaged, nil
	}
	return 0, fmt.Errorf("%w: large-message strategy %q: want auto, rings, cma, shared, engine or staged", ErrBadOptions, s)
}

// DefaultShmEager is the default of LocalOptions.ShmEager: a message of
// one frame between ring peers (wire.LaneMediumMax, the widest medium
// fragment) goes eagerly, on the lane, and larger ones by rendezvous. Seed
// 003 (Table I) set 4 KiB, for eager copies that cost more than they do
// here since the lane takes mediums: mxbench pingpong --procs 2 --wait spin
// --bind, one-way at 4100 B, 6 KiB and 8 KiB, eager 0.42, 0.52 and 0.62 us
// against a single copy of 0.91-1.28, 0.93-1.59 and 1.0-1.6 us from the
// shared pool (--strategy shared) and 5.5-7.2 us with process_vm_readv
// (--strategy cma). At 9 KiB a message takes two fragments and the
// sequenced path, and the shared pool's single copy wins again: 1.05 us
// against 1.78 eager (12 KiB: 1.15 against 1.98).
const DefaultShmEager = 8192

const (
	cmaMaxSegs    = 4
	cmaEntryWords = 2 + 2*cmaMaxSegs // seq<<1|valid, nsegs, (addr, len)...
	cmaEntryBytes = cmaEntryWords * 8
)

// largeEnv applies GOMX_SHM_LARGE, GOMX_SHM_EAGER and GOMX_SHM_STAGE_MIN.
func (o *LocalOptions) largeEnv() error {
	if v := os.Getenv("GOMX_SHM_LARGE"); v != "" {
		s, err := ParseLargeStrategy(v)
		if err != nil {
			return fmt.Errorf("GOMX_SHM_LARGE: %w", err)
		}
		o.Large = s
	}
	if v := os.Getenv("GOMX_SHM_EAGER"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: GOMX_SHM_EAGER=%q: want a byte count (0 keeps the default %d)", ErrBadOptions, v, DefaultShmEager)
		}
		o.ShmEager = n
	}
	if o.Large < LargeAuto || o.Large > LargeStaged {
		return fmt.Errorf("%w: Local.Large %d: want LargeAuto, LargeRings, LargeCMA, LargeShared, LargeEngine or LargeStaged", ErrBadOptions, int(o.Large))
	}
	if err := o.engineEnv(); err != nil { // offload.go
		return err
	}
	if err := o.stageEnv(); err != nil { // stage.go
		return err
	}
	if o.ShmEager < 0 {
		return fmt.Errorf("%w: Local.ShmEager %d is negative", ErrBadOptions, o.ShmEager)
	}
	if o.ShmEager == 0 {
		o.ShmEager = DefaultShmEager
	}
	return nil
}

// cmaPublish publishes the board's endpoint-table address on its
// shared-memory transports (from NewBoard, before any frame is sent).
func (b *Board) cmaPublish() {
	addr := uint64(uintptr(unsafe.Pointer(&b.cmaEps[0])))
	if b.stages() {
		b.cmaEps[MaxEndpoints] = stageMagic // stage.go: this board receives staged messages
	}
	if tr, ok := b.tr.(*shm.Transport); ok {
		tr.Publish(addr)
	}
	if h := b.host; h != nil {
		h.tr.Publish(addr)
	}
	b.engineHook() // offload.go
}

// cmaOpen gives a new endpoint its region table when the board talks
// shared memory (b.mu held).
func (b *Board) cmaOpen(e *Endpoint) {
	if _, ok := b.tr.(*shm.Transport); !ok && b.host == nil {
		return
	}
	// The table outlives the endpoint (a reopened id reuses it): a peer
	// still reading an address it learned earlier reads cleared entries,
	// never freed memory.
	if b.cmaTabs[e.id] == nil {
		b.cmaTabs[e.id] = make([]uint64, b.opts.Regions*cmaEntryWords)
	}
	e.cmaTab = b.cmaTabs[e.id]
	clear(e.cmaTab)
	b.cmaEps[e.id] = uint64(uintptr(unsafe.Pointer(&e.cmaTab[0])))
}

// cmaClose withdraws a closing endpoint's table (b.mu held): its entries
// are cleared, so no peer copies from buffers the endpoint gave back.
func (b *Board) cmaClose(e *Endpoint) {
	if e.cmaTab != nil {
		clear(e.cmaTab)
		b.cmaEps[e.id] = 0
	}
}

// publishRegion writes region i's entry for r's segments (b.mu held; r.segs
// set). A send with too many segments gets an entry without any, which
// sends its receiver to the rings.
func (e *Endpoint) publishRegion(i int, r *Request) {
	if !e.publishShared(i, r) { // shmpool.go
		e.stageRegion(i, r) // stage.go
	}
	if e.cmaTab == nil {
		return
	}
	ent := e.cmaTab[i*cmaEntryWords : (i+1)*cmaEntryWords]
	ent[0] = 0
	n := 0
	for _, s := range r.segs {
		if len(s) == 0 {
			continue
		}
		if n == cmaMaxSegs {
			n = 0
			break
		}
		ent[2+2*n] = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s))))
		ent[3+2*n] = uint64(len(s))
		n++
	}
	ent[1] = uint64(n)
	ent[0] = uint64(e.regions[i].seq)<<1 | 1
}

// shmTo returns the shared-memory transport frames to nic go through, or
// nil (b.mu held).
func (b *Board) shmTo(nic transport.NICID) *shm.Transport {
	if b.rings != nil {
		return b.rings
	}
	if h := b.host; h != nil && b.txFor(nic) == transport.Transport(h.tr) {
		return h.tr
	}
	return nil
}

// cmaUsable reports whether large messages to or from nic may take the
// single copy (b.mu held).
func (b *Board) cmaUsable(nic transport.NICID) bool {
	switch b.opts.Local.Large {
	case LargeRings:
		return false
	case LargeAuto, LargeShared, LargeEngine, LargeStaged:
		if b.cmaRefused {
			return false
		}
	}
	return b.shmTo(nic) != nil
}

// shmRendezvous reports whether an n-byte send to p goes by rendezvous
// because it is above the shared-memory eager threshold and will be copied
// once by the receiver (b.mu held).
func (b *Board) shmRendezvous(p *partner, n int) bool {
	return n > b.opts.Local.ShmEager && (b.cmaUsable(p.nic) || b.sharedUsable(p.nic))
}

// errCMAShort is a process_vm_readv that copied less than asked.
var errCMAShort = errors.New("short process_vm_readv")

// pullCMA completes a matched large receive of total bytes by copying it
// from the sender's buffer, when the sender is a process of this host that
// published its table and the kernel allows it; it reports whether it took
// the receive over (otherwise the caller pulls). It reads the sender
// endpoint's table address once per sender process and endpoint (tables
// live as long as their board) and queues the copy, which whoever holds
// b.mu runs right after releasing it and any receive source's lock
// (Board.unlock, runCopies): one process_vm_readv for the region's entry
// and the whole message (cmaCopy), on the goroutine that handled the RNDV
// — a polling waiter, or the receive loop — with no hand-off to another
// goroutine, and without b.mu so other requests progress meanwhile. A copy
// the kernel fails, or whose entry does not describe the message, falls
// back to a pull through the rings. b.mu held.
func (e *Endpoint) pullCMA(r *Request, p *partner, match uint64, msgLen, total uint32, ref rndvRef) bool {
	if e.pullShared(r, p, match, msgLen, total, ref) { // shmpool.go: out of the sender's shared segment (or staged)
		return true
	}
	return e.pullCMAData(r, p, match, msgLen, total, ref)
}

// pullCMAData is pullCMA without the look at the sender's shared pool.
func (e *Endpoint) pullCMAData(r *Request, p *partner, match uint64, msgLen, total uint32, ref rndvRef) bool {
	b := e.b
	if !b.cmaUsable(p.nic) {
		return false
	}
	pid, tab, ok := b.shmTo(p.nic).PeerProcess(p.nic)
	if !ok || tab == 0 {
		return false
	}
	// The endpoint's table address, read once per sender endpoint and
	// cached with the last entry read from it.
	key := cmaKey{pid: pid, tab: tab, ep: p.epID, session: p.rsession}
	src := b.cmaTabAt[key]
	if src == nil {
		var w [1]uint64
		if !e.cmaStep(pid, u64Bytes(w[:]), uintptr(tab)+uintptr(p.epID)*8, 8) || w[0] == 0 {
			return false
		}
		if b.cmaTabAt == nil || len(b.cmaTabAt) >= cmaTabCache {
			b.cmaTabAt = make(map[cmaKey]*cmaSender) // bounded: forget, read again
		}
		src = &cmaSender{tab: w[0]}
		b.cmaTabAt[key] = src
	}
	c := b.newCopy()
	// The local side: the region's entry, then total bytes of the receive.
	c.local[0] = unix.Iovec{Base: (*byte)(unsafe.Pointer(&c.ent[0]))}
	c.local[0].SetLen(cmaEntryBytes)
	c.nl = 1
	need := int(total)
	for _, s := range r.segs {
		if need == 0 {
			break
		}
		if c.nl == len(c.local) {
			break
		}
		k := min(len(s), need)
		if k > 0 {
			c.local[c.nl] = unix.Iovec{Base: &s[0]}
			c.local[c.nl].SetLen(k)
			c.nl++
		}
		need -= k
	}
	if need > 0 {
		// The receive has more segments than one call takes.
		b.freeCopy(c)
		return false
	}
	// The remote side: the entry, and the message where the sender's last
	// entry says it lies, when that covers it. The entry read in the same
	// call (before the data: the kernel reads the remote vectors in order)
	// confirms it or sends the copy round again (cmaCopy.finish).
	c.remote[0] = unix.RemoteIovec{Base: uintptr(src.tab) + uintptr(ref.id)*cmaEntryBytes, Len: cmaEntryBytes}
	c.nr = 1
	if src.stable {
		c.nr += cmaSource(c.remote[1:], &src.last, ref.off, total)
	}
	c.src = src
	c.e, c.r, c.p, c.match, c.msgLen, c.total, c.ref, c.pid = e, r, p, match, msgLen, total, ref, pid
	b.queueCopy(c)
	return true
}

// queueCopy queues c for runCopies, counted in b.copies until it finishes
// (b.mu held).
func (b *Board) queueCopy(c *cmaCopy) {
	b.copies.Add(1)
	b.cmaq = append(b.cmaq, c)
	b.cmaQueued.Add(1)
}

// cutSegs appends to d the receive segments segs cut to their first total
// bytes, and returns it.
func cutSegs(d, segs [][]byte, total int) [][]byte {
	for _, s := range segs {
		if total == 0 {
			break
		}
		k := min(len(s), total)
		d = append(d, s[:k])
		total -= k
	}
	return d
}

// runCopies runs the queued single copies, if any, each without the lock
// (no lock held). It is inlined where it is called, a look at the rings
// after every message among them, and the lock is taken out of line
// (runQueued).
func (b *Board) runCopies() {
	if b.cmaQueued.Load() != 0 {
		b.runQueued()
	}
}

// runQueued is runCopies once copies are queued.
func (b *Board) runQueued() {
	b.mu.Lock()
	b.unlock()
}

// cmaTabCache bounds the cache of senders' table addresses (peers that
// come and go leave entries behind).
const cmaTabCache = 4096

// cmaKey names a sender endpoint's region table: the sender's process, the
// address of its board's endpoint list, the endpoint and its session. The
// session changes with every open, so a board closed and another opened
// at the same address in the same process (the Go heap reuses memory) is
// never served the old board's table address.
type cmaKey struct {
	pid     int
	tab     uint64
	ep      uint8
	session uint32
}

// cmaSender is what a receiving board keeps of a sender endpoint: the
// address of its region table and the last region entry read from it
// (seen once one was), whose buffer is where the next message from that
// endpoint most likely lies too (an application sends from the same
// buffers over and over). stable says the last two entries named the same
// buffer: only then is the next message read from it before its entry
// confirms it, so a sender that alternates between buffers (double
// buffering) costs the receiver two calls a message, never a copy read
// in vain.
type cmaSender struct {
	tab    uint64
	seen   bool
	stable bool
	last   [cmaEntryWords]uint64
}

// note records the region entry ent, checked, as the sender's last.
func (s *cmaSender) note(ent *[cmaEntryWords]uint64) {
	s.stable = s.seen && [cmaEntryWords - 1]uint64(s.last[1:]) == [cmaEntryWords - 1]uint64(ent[1:])
	s.last, s.seen = *ent, true
}

// cmaSource fills dst with where the message of total bytes at offset off
// of a region lies in the sender's memory, by the region entry ent, and
// returns how many vectors it took; 0 when ent is not a valid entry of 1
// to cmaMaxSegs segments or does not cover the message (its sequence
// number, word 0, is the caller's to check).
func cmaSource(dst []unix.RemoteIovec, ent *[cmaEntryWords]uint64, off uint16, total uint32) int {
	nsegs := ent[1]
	if nsegs < 1 || nsegs > cmaMaxSegs {
		return 0
	}
	n := 0
	skip, left := uint64(off), uint64(total)
	for i := 0; i < int(nsegs) && left > 0; i++ {
		addr, l := ent[2+2*i], ent[3+2*i]
		if skip >= l {
			skip -= l
			continue
		}
		k := min(l-skip, left)
		dst[n] = unix.RemoteIovec{Base: uintptr(addr + skip), Len: int(k)}
		n++
		skip, left = 0, left-k
	}
	if left > 0 {
		return 0
	}
	return n
}

// cmaCopy is a single copy queued or in flight: a matched large receive
// to fill with process_vm_readv outside the board lock. r belongs to it
// until it completes r. Copies are recycled (Board.cmaFree): a message
// costs no allocation.
//
// A copy first reads the region's entry into ent (local[0], remote[0])
// and, in the same call, the message from where the sender's last entry
// (src) put it; when the entry read says otherwise, it goes round again
// with the vectors the entry gives, without the entry (exact).
type cmaCopy struct {
	e             *Endpoint
	r             *Request
	p             *partner
	match         uint64
	msgLen, total uint32
	ref           rndvRef
	pid           int
	src           *cmaSender
	exact         bool
	n             int // bytes the call copied
	nl, nr        int
	local         [1 + MaxSegments]unix.Iovec
	remote        [1 + cmaMaxSegs]unix.RemoteIovec
	ent           [cmaEntryWords]uint64
	err           error
	st            *stageRecv // a staged receive (stage.go), run in place of the copy
}

// newCopy returns a cleared copy from the board's free list (b.mu held).
func (b *Board) newCopy() *cmaCopy {
	if n := len(b.cmaFree); n > 0 {
		c := b.cmaFree[n-1]
		b.cmaFree = b.cmaFree[:n-1]
		return c
	}
	return new(cmaCopy)
}

// freeCopy clears c and keeps it for the next message (b.mu held).
func (b *Board) freeCopy(c *cmaCopy) {
	*c = cmaCopy{}
	b.cmaFree = append(b.cmaFree, c)
}

// takeCopy removes the oldest queued copy (b.mu held), first acking what
// its partner sent. A copy whose endpoint closed meanwhile completes here,
// without copying.
func (b *Board) takeCopy() *cmaCopy {
	for len(b.cmaq) > 0 {
		c := b.cmaq[0]
		b.cmaQueued.Add(-1)
		n := copy(b.cmaq, b.cmaq[1:])
		b.cmaq[n] = nil
		b.cmaq = b.cmaq[:n]
		if !c.e.closed {
			if p := c.p; p.notAcked > 0 && !p.dead && copyOutlasts(c.total, p.rtoMin()) {
				// The copy may take a while beside the sender's
				// retransmission timeout: ack the RNDV (and what
				// came before it) now, so the sender does not take
				// the wait for a lost frame and resend it meanwhile.
				c.e.cnt[AcksImmediate]++
				p.sendAck()
			}
			return c
		}
		c.e.complete(c.r, ErrEndpointClosed)
		b.freeCopy(c)
		b.copies.Done()
	}
	return nil
}

// copySlowNs is the time per byte a single copy is assumed to take at
// worst when deciding whether to ack before it: 1 GB/s, well below what a
// loaded machine copies (several GB/s here), so a copy that could come
// near the sender's retransmission timeout is acked first.
const copySlowNs = 1

// copyOutlasts reports whether a single copy of n bytes may take a
// quarter of rto (ns) or more. Between processes of one host (the only
// place a single copy runs) the rings' retransmission floor is their
// FullWait, a second by default: no copy comes near it, and acking each
// RNDV before its copy only sent the sender a frame, and on an
// oversubscribed node a wake-up, that the NOTIFY following a few
// microseconds later makes useless (the NOTIFY carries the ack too).
// Over a transport whose floor is short it still acks first.
func copyOutlasts(n uint32, rto int64) bool {
	return int64(n)*copySlowNs >= rto/4
}

// cmaCopyHook, when set by a test, runs before each copy.
var cmaCopyHook func()

// copyData runs the copy itself: one process_vm_readv for the region's
// entry and the whole message, or, going round again, for the message
// alone (no lock held).
func (c *cmaCopy) copyData() {
	if cmaCopyHook != nil {
		cmaCopyHook()
	}
	if c.st != nil {
		c.st.run()
		return
	}
	lo := 0
	if c.exact {
		lo = 1 // local[0] and remote[0] are the entry, read already
	}
	c.n, c.err = cmaReadv(c.pid, c.local[lo:c.nl], c.remote[lo:c.nr])
}

// cmaRawMax is the most a single raw system call copies. A
// process_vm_readv copies without waiting for anything but the CPU when
// the sender's pages are resident (it has just written them) and the
// receive buffer is faulted in, so up to 256 KiB, some tens of µs, it
// holds the goroutine's P no longer than the same copy done by the CPU in
// Go would. Through Syscall, a copy that the kernel ran for 20 µs or more
// (as a 64 KiB copy on an oversubscribed CPU often is) had its P taken by
// the runtime's monitor thread and handed to another thread, which looked
// for work and went back to sleep, and kept the monitor polling every
// 20 µs (docs/intranode-scale.md, "What a 64 KiB message costs"); a
// 1 MiB message, copied so, took 2.7-3.3 ms a round of a 4-rank alltoall
// on 2 CPUs against 1.0-1.3 in raw calls (docs/alltoall.md). So a larger
// copy runs as raw calls of cmaRawMax each (cmaReadv): no call holds the P
// longer than a 256 KiB copy, even one that faults in a fresh receive
// buffer, and between two calls a preemption the runtime asked for (the
// monitor's, after 10 ms, or a stop-the-world collection's) takes effect.
// Nothing asks for one sooner, so the copy also yields its P every
// cmaYieldEvery bytes (runtime.Gosched).
const cmaRawMax = 256 << 10

// cmaYieldEvery is how many bytes a copy in raw calls copies between two
// yields of its P: where the process has one P (GOMAXPROCS=1), a 4-64 MiB
// copy would otherwise hold it for milliseconds while the receive loop,
// the timers (acks, retransmissions) and the application's goroutines
// wait. A yield costs well under a µs against the 100 µs or so a MiB
// takes to copy.
const cmaYieldEvery = 1 << 20

// cmaPieceHook, when set by a test, runs before each raw call of
// cmaReadv with the bytes it asks for.
var cmaPieceHook func(n int)

// cmaReadv reads the remote vectors of process pid into the local ones
// as one process_vm_readv would, in raw system calls of at most cmaRawMax
// bytes each, yielding the P every cmaYieldEvery bytes (see there). A call
// that copies less than it asked for (the sender's mapping ends there, or
// the receive buffer does) ends the copy, and an error is returned only
// when nothing was copied: the kernel reports a partial copy so.
func cmaReadv(pid int, local []unix.Iovec, remote []unix.RemoteIovec) (int, error) {
	total := 0
	for _, v := range remote {
		total += v.Len
	}
	if total <= cmaRawMax {
		if cmaPieceHook != nil {
			cmaPieceHook(total)
		}
		return rawProcessVMReadv(pid, local, remote)
	}
	var l [1 + MaxSegments]unix.Iovec
	var r [1 + cmaMaxSegs]unix.RemoteIovec
	done, yielded := 0, 0
	for done < total {
		nl, lb := cutLocal(l[:], local, done, cmaRawMax)
		nr, rb := cutRemote(r[:], remote, done, cmaRawMax)
		if nl == 0 || nr == 0 {
			break
		}
		if done-yielded >= cmaYieldEvery {
			runtime.Gosched()
			yielded = done
		}
		if cmaPieceHook != nil {
			cmaPieceHook(min(lb, rb))
		}
		n, err := rawProcessVMReadv(pid, l[:nl], r[:nr])
		if err != nil {
			if done == 0 {
				return 0, err
			}
			break
		}
		done += n
		if n < min(lb, rb) {
			break
		}
	}
	return done, nil
}

// cutLocal writes into dst the part of the vectors src that lies n bytes
// from off on (less where they end), and returns how many vectors it
// wrote and their bytes.
func cutLocal(dst, src []unix.Iovec, off, n int) (k, bytes int) {
	for _, v := range src {
		l := int(v.Len)
		if n == 0 || k == len(dst) {
			break
		}
		if off >= l {
			off -= l
			continue
		}
		m := min(l-off, n)
		dst[k] = unix.Iovec{Base: (*byte)(unsafe.Add(unsafe.Pointer(v.Base), off))}
		dst[k].SetLen(m)
		k, bytes = k+1, bytes+m
		off, n = 0, n-m
	}
	return k, bytes
}

// cutRemote is cutLocal for the remote vectors.
func cutRemote(dst, src []unix.RemoteIovec, off, n int) (k, bytes int) {
	for _, v := range src {
		if n == 0 || k == len(dst) {
			break
		}
		if off >= v.Len {
			off -= v.Len
			continue
		}
		m := min(v.Len-off, n)
		dst[k] = unix.RemoteIovec{Base: v.Base + uintptr(off), Len: m}
		k, bytes = k+1, bytes+m
		off, n = 0, n-m
	}
	return k, bytes
}

// rawProcessVMReadv is unix.ProcessVMReadv without telling the Go runtime
// that the goroutine enters a system call (see cmaRawMax).
func rawProcessVMReadv(pid int, local []unix.Iovec, remote []unix.RemoteIovec) (int, error) {
	n, _, errno := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid),
		uintptr(unsafe.Pointer(unsafe.SliceData(local))), uintptr(len(local)),
		uintptr(unsafe.Pointer(unsafe.SliceData(remote))), uintptr(len(remote)), 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// finish completes the receive and notifies the sender, sends the copy
// round again when the entry it read put the message elsewhere than it
// read it from, or pulls through the rings when the copy failed or the
// entry does not describe the message (b.mu held).
func (c *cmaCopy) finish() {
	e, b := c.e, c.e.b
	b.setNow()
	if c.st != nil {
		c.finishStaged() // stage.go
		return
	}
	e.cnt[CMAReads]++
	if !e.closed && c.err == nil && !c.exact {
		switch c.checkEntry() {
		case entryAgain:
			b.cmaq = append(b.cmaq, c) // still counted in b.copies
			b.cmaQueued.Add(1)
			return
		case entryBad:
			defer b.copies.Done()
			defer b.freeCopy(c)
			if c.p.dead {
				e.complete(c.r, ErrUnreachable)
				return
			}
			e.ringPull(c.r, c.p, c.match, c.msgLen, c.total, c.ref)
			return
		}
	}
	defer b.copies.Done()
	defer b.freeCopy(c)
	want := 0
	for _, v := range c.local[:c.nl] {
		want += int(v.Len)
	}
	if c.exact {
		want -= cmaEntryBytes
	}
	if c.err == nil && c.n != want {
		c.err = errCMAShort
	}
	switch {
	case e.closed:
		e.complete(c.r, ErrEndpointClosed)
	case c.err != nil:
		e.cmaFailed(c.err)
		if c.p.dead {
			e.complete(c.r, ErrUnreachable)
			return
		}
		e.ringPull(c.r, c.p, c.match, c.msgLen, c.total, c.ref)
	default:
		e.cnt[RecvCMA]++
		c.p.sendNotify(c.total, c.ref.id, c.ref.seq)
		e.finishRecv(c.r, c.p, c.match, c.msgLen, c.total)
	}
}

// What the entry a copy read says of the message.
const (
	entryRead  = iota // the message is where the copy read it from
	entryAgain        // it lies elsewhere: copy again, from there (exact)
	entryBad          // the entry is not the RNDV's, or does not cover the message
)

// checkEntry judges the region entry a first copy read with the message
// (b.mu held; c.err nil). A call too short to hold the entry leaves the
// short count for finish to report.
func (c *cmaCopy) checkEntry() int {
	if c.n < cmaEntryBytes {
		return entryRead
	}
	var exact [cmaMaxSegs]unix.RemoteIovec
	k := 0
	if c.ent[0] == uint64(c.ref.seq)<<1|1 {
		k = cmaSource(exact[:], &c.ent, c.ref.off, c.total)
	}
	if k == 0 {
		return entryBad
	}
	c.src.note(&c.ent)
	if k == c.nr-1 && [cmaMaxSegs]unix.RemoteIovec(c.remote[1:]) == exact {
		return entryRead
	}
	copy(c.remote[1:], exact[:k])
	c.nr = 1 + k
	c.exact = true
	return entryAgain
}

// cmaStep reads n bytes at addr in pid into dst, noting a refusal.
func (e *Endpoint) cmaStep(pid int, dst []byte, addr uintptr, n int) bool {
	e.cnt[CMAReads]++
	local := [1]unix.Iovec{{Base: &dst[0]}}
	local[0].SetLen(n)
	remote := [1]unix.RemoteIovec{{Base: addr, Len: n}}
	got, err := unix.ProcessVMReadv(pid, local[:], remote[:], 0)
	if err == nil && got != n {
		err = errCMAShort
	}
	if err != nil {
		e.cmaFailed(err)
		return false
	}
	return true
}

// cmaFailed counts a process_vm_readv that did not copy; a refusal by the
// kernel (EPERM: Yama or another user) turns LargeAuto off for the board.
func (e *Endpoint) cmaFailed(err error) {
	if errors.Is(err, unix.EPERM) {
		e.cnt[CMARefused]++
		e.b.cmaRefused = true
		return
	}
	e.cnt[CMAFailed]++
}

// u64Bytes views words as bytes.
func u64Bytes(w []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)
}
