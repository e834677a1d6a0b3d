package mx

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gomx-dev/gomx/transport"
	"github.com/gomx-dev/gomx/transport/shm"
)

// Staged large messages: a pipelined two-copy between processes of one
// host, from ordinary (heap) send buffers.
//
// The single copy by process_vm_readv (cma.go) runs on the receiver alone,
// through the kernel's page walk of the sender's buffer; a copy out of the
// sender's shared pool (shmpool.go) is faster but needs the application to
// send from Endpoint.AllocShared. A staged message takes two copies that
// run at the same time on both ends: the sender copies its buffer, chunk
// by chunk, into a staging buffer of its shared pool, and the receiver
// copies each chunk out of its mapping of that buffer as soon as the
// chunk is in.
//
// Every board that stages has stageBufs staging buffers of stageBufSize
// bytes (after a header of stageHdr bytes), allocated in its shared pool
// before its first staged send and passed to the peer as pool segments
// are (shm.Transport.ShareSegments), outside the board lock; a message
// uses one. A message larger than one, from several segments, or a send
// that finds both in use, goes by the single copy as before. The region's
// entry in the pool's table (shmpool.go) names the staging buffer instead
// of the send buffer, with stageFlag in its segment word and the
// message's generation in its length word: a receiver that does not know
// the flag sees an impossible segment and takes the single copy, which
// the sender's CMA entry still allows.
//
// The header holds, in words: the message's 64-bit generation (a counter
// of the sending board), the claim word, the address and length of the
// sender's buffer, and one done word per chunk (stageChunk bytes). The
// claim word packs the generation's low 32 bits with lo and hi, the bounds
// of the chunks nobody claimed yet: the sender claims chunks from the
// bottom (lo up), copies each into the staging buffer and stores the full
// generation in its done word; the receiver claims from the top (hi down)
// and reads those chunks with process_vm_readv straight from the sender's
// buffer into its own, so the two ends meet in the middle. The receiver
// copies a sender's chunk out once its done word holds the message's
// generation; a done word left from an earlier message holds an older
// generation and never counts. A chunk the sender claimed but has not
// finished within stageTakeover (the sender was descheduled) the receiver
// reads by process_vm_readv too. When every chunk is in, the receiver
// sends the NOTIFY, which completes the send as on every path.
//
// The sender's copies never run in ISend: the board's stager goroutine,
// started at its first staged send, copies chunks of the messages that
// have some unclaimed, and so does every waiter of the board polling in
// Wait or Test between its looks (poll.go), so a waiting application
// thread moves its own message. A send completes only once its region is
// freed (the NOTIFY, a failure, Close): the message is withdrawn, and the
// completion waits for its copiers still at work, each on at most one
// chunk, so neither the staging buffer nor the send buffer is touched
// once the request completed. That wait runs under the board lock;
// copiers hold no lock while they copy, and the receiver holds only its
// mapping of the sender's segment (never while it takes the board lock).
//
// The sender stages only to a peer that advertised it can receive staged:
// the word after the endpoint tables (cmaEps) holds stageMagic, read once
// per peer process with process_vm_readv, so a peer that has not
// connected back yet, or an older one, gets the single copy. A receiver
// whose sender goes away fails the receive with ErrUnreachable when a
// read of the sender's buffer fails or the sender withdrew the message; a
// sender whose receiver goes away fails the send as every large send
// does, and the region's release frees the staging buffer. Where the
// kernel refuses process_vm_readv, the receiver pulls the message through
// the rings.

// DefaultStageMin is the default of LocalOptions.StageMin: from 1 MiB,
// LargeAuto stages messages to peers that can receive them.
const DefaultStageMin = 1 << 20

const (
	stageChunk     = 256 << 10 // bytes a claim covers
	stageBufSize   = 4 << 20   // a staging buffer's data
	stageChunks    = stageBufSize / stageChunk
	stageHdr       = 4096                  // the header before the data
	stageBufs      = 2                     // staging buffers per board
	stageMagic     = 0x6d78_5354_4147_4531 // "mxSTAGE1": the capability word
	stageFlag      = 1 << 40               // in a pool entry's segment word: a staging buffer
	stageTakeover  = 500 * time.Microsecond
	stageWordGen   = 0 // header words
	stageWordClaim = 1
	stageWordAddr  = 2
	stageWordLen   = 3
	stageWordDone  = 8 // the first done word
)

// stageState is a board's staging: its buffers, the messages being
// staged, and what it learned of its peers. mu guards jobs and is taken
// after b.mu, never before it; copiers hold it only to pick a message.
type stageState struct {
	mu      sync.Mutex
	jobs    []*stageSend // messages with chunks left to claim
	pending atomic.Int32 // len(jobs), read by waiters without mu
	bufs    []*stageBuf  // under b.mu
	gen     uint64       // the last generation given (b.mu)
	started bool         // the stager goroutine runs (b.mu)
	kick    chan struct{}
	stop    chan struct{}
	caps    sync.Map   // transport.NICID -> stageCap
	prepMu  sync.Mutex // one stagePrepare at a time
	ready   atomic.Bool
}

// stageCap is what a board learned of a peer process: whether it
// receives staged messages and has the staging buffers mapped.
type stageCap struct {
	pid int
	ok  bool
}

// stageBuf is one staging buffer: its header and data in the pool's
// segment seg at offset off.
type stageBuf struct {
	mem  []byte
	seg  uint32
	off  int
	busy bool // a message uses it (b.mu)
}

// stageSend is a message being staged.
type stageSend struct {
	buf       *stageBuf
	gen       uint64
	src       []byte
	active    atomic.Int32 // copiers at work on it
	withdrawn atomic.Bool  // its region was freed: copy nothing more
	copied    atomic.Int32 // chunks the sender copied
}

// Test hooks: stageClaimHook, when set, runs before a copier of the
// sender claims a chunk, and false makes it claim none (a sender that
// never copies); stageCopyHook runs after it claimed chunk i, before it
// copies it (a sender descheduled there).
var (
	stageClaimHook func() bool
	stageCopyHook  func(i int)
	stageReadHook  func(i int)
)

// stageEnv applies GOMX_SHM_STAGE_MIN and checks StageMin.
func (o *LocalOptions) stageEnv() error {
	return sizeOption(&o.StageMin, "GOMX_SHM_STAGE_MIN", "Local.StageMin", DefaultStageMin)
}

// stages reports whether the board stages messages and advertises that
// it receives them: its strategy is LargeAuto or LargeStaged and it
// talks shared memory.
func (b *Board) stages() bool {
	l := b.opts.Local.Large
	return (l == LargeAuto || l == LargeStaged) && b.sharedTransport() != nil
}

// stageWanted reports whether an n-byte large send is one to stage.
func (b *Board) stageWanted(n int) bool {
	if n > stageBufSize {
		return false
	}
	switch b.opts.Local.Large {
	case LargeStaged:
		return true
	case LargeAuto:
		return n >= b.opts.Local.StageMin
	}
	return false
}

// stagePrepare readies staging to the board at nic before an n-byte send
// (no lock held): it allocates the staging buffers, learns whether the
// peer receives staged messages, and passes it the pool's segments. It
// does nothing once it knows the peer process, and nothing until the peer
// connected back (its process is known from its ring).
func (b *Board) stagePrepare(nic transport.NICID, n int) {
	if !b.stageWanted(n) || !b.stages() {
		return
	}
	s := &b.stage
	tr := b.sharedTransport()
	pid, tab, ok := tr.PeerProcess(nic)
	if !ok || tab == 0 {
		return
	}
	if v, ok := s.caps.Load(nic); ok && v.(stageCap).pid == pid {
		return
	}
	s.prepMu.Lock()
	defer s.prepMu.Unlock()
	if !s.ready.Load() {
		if err := b.stageAlloc(); err != nil {
			s.caps.Store(nic, stageCap{pid: pid})
			return
		}
	}
	var w [1]uint64
	local := [1]unix.Iovec{{Base: &u64Bytes(w[:])[0]}}
	local[0].SetLen(8)
	remote := [1]unix.RemoteIovec{{Base: uintptr(tab) + MaxEndpoints*8, Len: 8}}
	got, err := unix.ProcessVMReadv(pid, local[:], remote[:], 0)
	capable := err == nil && got == 8 && w[0] == stageMagic
	if capable && tr.ShareSegments(nic) != nil {
		capable = false
	}
	s.caps.Store(nic, stageCap{pid: pid, ok: capable})
}

// stageAlloc allocates the board's staging buffers in its shared pool
// (s.prepMu held, b.mu not).
func (b *Board) stageAlloc() error {
	b.mu.Lock()
	sp, err := b.sharedPoolLocked()
	b.unlockKick()
	if err != nil {
		return err
	}
	var bufs []*stageBuf
	for range stageBufs {
		mem, err := sp.pool.Alloc(stageHdr + stageBufSize)
		if err == nil {
			seg, off, ok := sp.pool.Locate(mem)
			if ok {
				bufs = append(bufs, &stageBuf{mem: mem, seg: seg, off: off})
				continue
			}
			err = errors.New("staging buffer outside the pool")
		}
		for _, sb := range bufs {
			sp.pool.Free(sb.mem)
		}
		return err
	}
	b.mu.Lock()
	if b.closed {
		// Closed while the buffers were allocated: they go back.
		b.unlockKick()
		for _, sb := range bufs {
			sp.pool.Free(sb.mem)
		}
		return ErrBoardClosed
	}
	b.stage.bufs = bufs
	b.unlockKick()
	b.stage.ready.Store(true)
	return nil
}

// stageRegion stages the large send r of region i when it is one to
// stage, the peer receives staged messages and a staging buffer is free:
// it writes the header and the region's pool entry, and hands the copies
// to the stager goroutine and the board's waiters. It reports whether it
// did (b.mu held; r.segs set).
func (e *Endpoint) stageRegion(i int, r *Request) bool {
	b := e.b
	sp := b.shared
	if sp == nil || r.p == nil || !b.stage.ready.Load() || !b.stageWanted(int(r.length)) || b.shmTo(r.p.nic) != sp.tr {
		return false
	}
	var src []byte
	for _, s := range r.segs {
		if len(s) == 0 {
			continue
		}
		if src != nil {
			return false // several segments: the single copy takes them
		}
		src = s
	}
	if src == nil {
		return false
	}
	v, ok := b.stage.caps.Load(r.p.nic)
	if !ok || !v.(stageCap).ok {
		return false
	}
	if pid, _, ok := sp.tr.PeerProcess(r.p.nic); !ok || pid != v.(stageCap).pid {
		return false
	}
	var sb *stageBuf
	for _, c := range b.stage.bufs {
		if !c.busy {
			sb = c
			break
		}
	}
	if sb == nil {
		return false
	}
	sb.busy = true
	b.stage.gen++
	if uint32(b.stage.gen) == 0 {
		// The claim word holds the low half: never 0, which a buffer
		// no message holds reads as (stageEnd).
		b.stage.gen++
	}
	gen := b.stage.gen
	n := (len(src) + stageChunk - 1) / stageChunk
	// The header before the entry: the receiver reads it only after the
	// entry, which the RNDV following through the ring orders.
	stageWord(sb.mem, stageWordGen).Store(gen)
	stageWord(sb.mem, stageWordAddr).Store(addrOf(src))
	stageWord(sb.mem, stageWordLen).Store(uint64(len(src)))
	stageWord(sb.mem, stageWordClaim).Store(uint64(uint32(gen))<<32 | uint64(n))
	j := &stageSend{buf: sb, gen: gen, src: src}
	e.regions[i].st = j
	idx := sharedIndex(e.id, uint8(i))
	sp.pool.StoreWord(idx+1, uint64(sb.seg)|stageFlag)
	sp.pool.StoreWord(idx+2, uint64(sb.off))
	sp.pool.StoreWord(idx+3, gen)
	sp.pool.StoreWord(idx, uint64(e.regions[i].seq)<<1|1)
	e.cnt[StagedSends]++
	s := &b.stage
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.pending.Store(int32(len(s.jobs)))
	s.mu.Unlock()
	if !s.started {
		s.started = true
		s.kick = make(chan struct{}, 1)
		s.stop = make(chan struct{})
		go b.stager(s.kick, s.stop)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return true
}

// stager is the board's stager goroutine: it copies chunks while any
// message has some left to claim, and waits for the next otherwise.
func (b *Board) stager(kick, stop chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-kick:
		}
		for b.stageHelp() {
		}
	}
}

// stageHelp copies one chunk of a message being staged, and reports
// whether any message had chunks left (no lock held). Waiters call it
// between their looks (poll.go).
func (b *Board) stageHelp() bool {
	s := &b.stage
	if s.pending.Load() == 0 {
		return false
	}
	s.mu.Lock()
	if len(s.jobs) == 0 {
		s.mu.Unlock()
		return false
	}
	j := s.jobs[0]
	j.active.Add(1) // before withdrawn is looked at: stageEnd waits for it
	s.mu.Unlock()
	defer j.active.Add(-1)
	if j.withdrawn.Load() {
		s.drop(j)
		return true
	}
	if stageClaimHook != nil && !stageClaimHook() {
		return false
	}
	i := stageClaim(j.buf.mem, j.gen, false)
	if i < 0 {
		s.drop(j) // every chunk is claimed
		return true
	}
	if stageCopyHook != nil {
		stageCopyHook(i)
	}
	lo := i * stageChunk
	hi := min(lo+stageChunk, len(j.src))
	copy(j.buf.mem[stageHdr+lo:stageHdr+hi], j.src[lo:hi])
	// After the data: the receiver reads the chunk once it sees this.
	stageWord(j.buf.mem, stageWordDone+i).Store(j.gen)
	j.copied.Add(1)
	return true
}

// drop removes j from the messages with chunks left.
func (s *stageState) drop(j *stageSend) {
	s.mu.Lock()
	for k, o := range s.jobs {
		if o == j {
			s.jobs = append(s.jobs[:k], s.jobs[k+1:]...)
			break
		}
	}
	s.pending.Store(int32(len(s.jobs)))
	s.mu.Unlock()
}

// stageClaim claims a chunk of the message of generation gen in the
// staging buffer mem: the lowest unclaimed (the sender) or the highest
// (the receiver, top). It returns its index; -1 when none is left, -2
// when the buffer no longer holds the message.
func stageClaim(mem []byte, gen uint64, top bool) int {
	w := stageWord(mem, stageWordClaim)
	for {
		c := w.Load()
		if uint32(c>>32) != uint32(gen) {
			return -2
		}
		lo, hi := int(c>>16&0xffff), int(c&0xffff)
		if lo >= hi {
			return -1
		}
		if top {
			if w.CompareAndSwap(c, c-1) {
				return hi - 1
			}
		} else if w.CompareAndSwap(c, c+1<<16) {
			return lo
		}
	}
}

// stageEnd withdraws the staged message j as its region is freed (b.mu
// held): no copier starts on it any more, and the call waits for those
// at work, each on at most one chunk, before the staging buffer goes back
// and the request may complete.
func (b *Board) stageEnd(e *Endpoint, j *stageSend) {
	j.withdrawn.Store(true)
	b.stage.drop(j)
	for j.active.Load() != 0 {
		runtime.Gosched()
	}
	// A receiver still at it (its send failed) sees another generation,
	// in the claim word too: one whose low half no message has.
	stageWord(j.buf.mem, stageWordClaim).Store(0)
	stageWord(j.buf.mem, stageWordGen).Store(0)
	e.cnt[StagedChunks] += uint64(j.copied.Load())
	j.buf.busy = false
}

// stageStop ends the stager goroutine (Board.Close, after every endpoint
// closed and so every staged message was withdrawn; b.mu held).
func (b *Board) stageStop() {
	if b.stage.started {
		close(b.stage.stop)
		b.stage.started = false
	}
}

// stageRecv is the receiving side of a staged message, run as a queued
// copy (cma.go) without the board lock.
type stageRecv struct {
	tr        *shm.Transport
	nic       transport.NICID
	pid       int
	seg       uint32
	off       uint64
	gen       uint64
	dst       [][]byte // the receive's segments, cut to the message
	total     int
	fallback  bool  // the staging buffer could not be used: another path takes the message
	refused   bool  // the kernel refused process_vm_readv: the rings take it
	err       error // the sender went away
	cmaChunks int
}

// errStageGone: the sender withdrew a staged message before the receiver
// had it all (its send failed).
var errStageGone = errors.New("staged message withdrawn by its sender")

// pullStaged queues the receive of a staged message whose pool entry ent
// the sender wrote; it reports false, for the single copy, when the
// message cannot be received so (b.mu held).
func (e *Endpoint) pullStaged(r *Request, p *partner, match uint64, msgLen, total uint32, ref rndvRef, tr *shm.Transport, ent *[sharedEntryWords]uint64) bool {
	b := e.b
	if ref.off != 0 || b.cmaRefused {
		return false
	}
	pid, _, ok := tr.PeerProcess(p.nic)
	if !ok {
		return false
	}
	st := &stageRecv{tr: tr, nic: p.nic, pid: pid, seg: uint32(ent[1]), off: ent[2], gen: ent[3], total: int(total)}
	st.dst = cutSegs(nil, r.segs, int(total))
	c := b.newCopy()
	c.st = st
	c.e, c.r, c.p, c.match, c.msgLen, c.total, c.ref, c.pid = e, r, p, match, msgLen, total, ref, pid
	b.queueCopy(c)
	return true
}

// run receives the staged message (no lock held but the hold of the
// sender's segment, released before it returns).
func (st *stageRecv) run() {
	mem, release, ok := st.tr.HoldPeerSegment(st.nic, st.seg)
	if !ok {
		st.fallback = true
		return
	}
	defer release()
	if st.off > uint64(len(mem)) || uint64(len(mem))-st.off < stageHdr+stageBufSize {
		st.fallback = true
		return
	}
	m := mem[st.off : st.off+stageHdr+stageBufSize]
	gen := st.gen
	addr, n := stageWord(m, stageWordAddr).Load(), int(stageWord(m, stageWordLen).Load())
	if stageWord(m, stageWordGen).Load() != gen || n < st.total || n > stageBufSize {
		st.fallback = true
		return
	}
	need := (st.total + stageChunk - 1) / stageChunk
	var handled uint32 // chunks in the receive buffer
	all := uint32(1)<<need - 1
	var since [stageChunks]time.Time
	for handled != all {
		progress := false
		for i := range need {
			if handled&(1<<i) == 0 && stageWord(m, stageWordDone+i).Load() == gen {
				lo := i * stageChunk
				hi := min(lo+stageChunk, st.total)
				copyAt(st.dst, lo, m[stageHdr+lo:stageHdr+hi])
				if !stageHeld(m, gen) {
					st.err = errStageGone
					return
				}
				handled |= 1 << i
				progress = true
			}
		}
		if progress {
			continue
		}
		switch i := stageClaim(m, gen, true); {
		case i == -2:
			st.err = errStageGone
			return
		case i >= need:
			continue // past a truncated receive's end
		case i >= 0:
			if !st.read(m, i, addr) {
				return
			}
			handled |= 1 << i
			continue
		}
		// Every chunk left is the sender's and not in yet.
		now := time.Now()
		for i := range need {
			if handled&(1<<i) != 0 {
				continue
			}
			if since[i].IsZero() {
				since[i] = now
			} else if now.Sub(since[i]) >= stageTakeover {
				// The sender stalls on it: read it from its buffer.
				if !st.read(m, i, addr) {
					return
				}
				handled |= 1 << i
			}
		}
		runtime.Gosched()
	}
}

// read copies chunk i from the sender's buffer at addr with
// process_vm_readv; false when it failed: the sender went away or
// withdrew the message (st.err set), or the kernel refused (st.refused set: the rings carry the
// message, over what was copied).
func (st *stageRecv) read(m []byte, i int, addr uint64) bool {
	lo := i * stageChunk
	hi := min(lo+stageChunk, st.total)
	var local [MaxSegments]unix.Iovec
	nl := iovecsAt(local[:], st.dst, lo, hi-lo)
	remote := [1]unix.RemoteIovec{{Base: uintptr(addr) + uintptr(lo), Len: hi - lo}}
	if stageReadHook != nil {
		stageReadHook(i)
	}
	got, err := cmaReadv(st.pid, local[:nl], remote[:])
	if err == nil && got != hi-lo {
		err = errCMAShort
	}
	if errors.Is(err, unix.EPERM) {
		st.refused = true
		return false
	}
	if err != nil {
		st.err = err
		return false
	}
	// The send may have completed (failed, or its endpoint closed) while
	// the read ran, and its buffer been written again since: the bytes
	// count only if the message was still staged after they were read.
	if !stageHeld(m, st.gen) {
		st.err = errStageGone
		return false
	}
	st.cmaChunks++
	return true
}

// stageHeld reports whether the staging buffer whose header is at the
// start of m still holds the message of generation gen, after every
// load before it: a compare-and-swap, whose release half keeps the
// loads of the data copied before it from completing after it on any
// CPU (a plain atomic load would order them only on x86).
func stageHeld(m []byte, gen uint64) bool {
	return stageWord(m, stageWordGen).CompareAndSwap(gen, gen)
}

// finishStaged completes a staged receive (b.mu held): with the NOTIFY
// that completes the send, with ErrUnreachable when the sender went away,
// or by the single copy or the rings when the staging buffer could not be
// used.
func (c *cmaCopy) finishStaged() {
	e, b, st := c.e, c.e.b, c.st
	defer b.copies.Done()
	defer b.freeCopy(c)
	switch {
	case e.closed:
		e.complete(c.r, ErrEndpointClosed)
	case st.refused && !c.p.dead:
		e.cmaFailed(unix.EPERM)
		e.ringPull(c.r, c.p, c.match, c.msgLen, c.total, c.ref)
	case st.fallback && !c.p.dead:
		if !e.pullCMAData(c.r, c.p, c.match, c.msgLen, c.total, c.ref) {
			e.ringPull(c.r, c.p, c.match, c.msgLen, c.total, c.ref)
		}
	case st.err != nil || st.refused || st.fallback || c.p.dead:
		e.cnt[CMAFailed]++
		e.complete(c.r, ErrUnreachable)
	default:
		e.cnt[StagedRecvs]++
		e.cnt[StagedCMAChunks] += uint64(st.cmaChunks)
		c.p.sendNotify(c.total, c.ref.id, c.ref.seq)
		e.finishRecv(c.r, c.p, c.match, c.msgLen, c.total)
	}
}

// copyAt copies src into the concatenation of dst from byte off.
func copyAt(dst [][]byte, off int, src []byte) {
	for _, d := range dst {
		if off >= len(d) {
			off -= len(d)
			continue
		}
		k := copy(d[off:], src)
		src, off = src[k:], 0
		if len(src) == 0 {
			return
		}
	}
}
