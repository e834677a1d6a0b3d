package mx

import (
	"errors"
	"math/rand/v2"
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
// bytes (after a header of stageHdr bytes) in its shared pool; a message
// uses one. A message larger than one, from several segments, or a send
// that finds both in use, goes by the single copy. The first large send
// to a peer process that would be staged starts readying staging to it
// in the background (stageStart, a stagePrepare goroutine per peer): the
// buffers are allocated (with the pool, if the board has none yet), the
// peer's capability is read, and the pool's segments are passed to it
// (shm.Transport.ShareSegments, which waits for the peer's
// acknowledgement). That send, and every send to that peer until it is
// done, goes by the single copy; none waits for it. Board.Close waits for
// the preparations after closing the transports, which ends their waits
// for a peer. The region's
// entry in the pool's table (shmpool.go) names the staging buffer instead
// of the send buffer, with stageFlag in its segment word and the
// message's generation in its length word: a receiver that does not know
// the flag sees an impossible segment and takes the single copy, which
// the sender's CMA entry still allows.
//
// The header holds, in words: the message's 64-bit generation (a counter
// of the sending board from a random base, so a board that takes over
// the NIC id of one that went away gives none that board gave), the
// claim word, the address and length of the
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
// freed (the NOTIFY, a failure, Close) and no copier is at work on it:
// freeing the region withdraws the message (no copier starts on it any
// more) and completes the send at once when none is at work; otherwise
// the last copier to leave, each on at most one chunk, completes it and
// gives the staging buffer back, taking the board lock to do so. Nobody
// waits for a copier under the board lock, and copiers hold no lock while
// they copy: neither the staging buffer nor the send buffer is touched
// once the request completed, and a descheduled copier delays its own
// send alone (Board.Close waits for it with the other copies, and
// Endpoint.Close for those of its endpoint's sends). The
// receiver holds its mapping of the sender's segment for a step at a
// time (a chunk copied out, a claim, the check after a read), never while
// it waits for the sender's chunks or reads the sender's buffer, and
// never while it takes the board lock: the peer's segment table changes
// meanwhile, and each step checks the buffer still holds the message.
//
// The sender stages only to a peer that advertised it can receive staged:
// the word after the endpoint tables (cmaEps) holds stageMagic, read once
// per peer process with process_vm_readv as staging to it is readied, so
// a peer that has not connected back yet, or an older one, gets the
// single copy. A receiver
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
	mu       sync.Mutex
	jobs     []*stageSend // messages with chunks left to claim
	pending  atomic.Int32 // len(jobs), read by waiters without mu
	bufs     []*stageBuf  // under b.mu
	gen      uint64       // the last generation given, from a random base (b.mu)
	started  bool         // the stager goroutine runs (b.mu)
	kick     chan struct{}
	stop     chan struct{}
	caps     sync.Map                 // transport.NICID -> stageCap
	prepping map[transport.NICID]bool // peers a stagePrepare runs for (b.mu)
	prep     sync.WaitGroup           // the stagePrepare goroutines (Board.Close waits)
	allocMu  sync.Mutex               // one stageAlloc at a time
	ready    atomic.Bool              // the staging buffers are allocated
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
	e   *Endpoint // its sender
	buf *stageBuf
	gen uint64
	src []byte
	// state counts the copiers at work on it, plus stageWithdrawn once its
	// region was freed (copy nothing more). A copier joins only while the
	// message is listed in stageState.jobs (under its mu), and stageEnd
	// unlists it before it adds stageWithdrawn: from then on the count
	// only falls, and whoever brings state to exactly stageWithdrawn (the
	// withdrawal itself, or the last copier to leave) releases it.
	state  atomic.Int64
	copied atomic.Int32 // chunks the sender copied
	// How the send completes once the last copier left (stageHold; b.mu).
	r    *Request
	zs   *zcSend
	code error
}

// stageWithdrawn is stageSend.state's withdrawn mark, above any count of
// copiers.
const stageWithdrawn = 1 << 32

// Test hooks: stageClaimHook, when set, runs before a copier of the
// sender claims a chunk, and false makes it claim none (a sender that
// never copies); stageCopyHook runs after it claimed chunk i, before it
// copies it (a sender descheduled there); stageReadHook runs before the
// receiver reads chunk i from the sender's buffer; stagePrepHook runs as
// a stagePrepare begins (a preparation that takes long).
var (
	stageClaimHook func() bool
	stageCopyHook  func(i int)
	stageReadHook  func(i int)
	stagePrepHook  func()
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

// stageStart starts readying staging to the board at nic, whose process
// pid published its endpoint tables at tab, in the background (b.mu
// held): a stagePrepare goroutine, unless one runs for nic already. Sends
// meanwhile take the single copy.
func (b *Board) stageStart(nic transport.NICID, tr *shm.Transport, pid int, tab uint64) {
	s := &b.stage
	if b.closed || tab == 0 || s.prepping[nic] {
		return
	}
	if s.prepping == nil {
		s.prepping = make(map[transport.NICID]bool)
	}
	s.prepping[nic] = true
	s.prep.Add(1)
	go b.stagePrepare(nic, tr, pid, tab)
}

// stagePrepare readies staging to the board at nic (no lock held): it
// allocates the staging buffers if the board has none yet, learns whether
// the peer process pid receives staged messages (the word after its
// endpoint tables at tab), and passes it the pool's segments, which may
// wait for the peer's acknowledgement (shm.Transport.ShareSegments: until
// the transport closes, at most its handshake time). It records what it
// learned in s.caps.
func (b *Board) stagePrepare(nic transport.NICID, tr *shm.Transport, pid int, tab uint64) {
	s := &b.stage
	defer s.prep.Done()
	capable := false
	defer func() {
		s.caps.Store(nic, stageCap{pid: pid, ok: capable})
		b.mu.Lock()
		delete(s.prepping, nic)
		b.unlockKick()
	}()
	if stagePrepHook != nil {
		stagePrepHook()
	}
	if !s.ready.Load() {
		if b.stageAlloc() != nil {
			return
		}
	}
	var w [1]uint64
	local := [1]unix.Iovec{{Base: &u64Bytes(w[:])[0]}}
	local[0].SetLen(8)
	remote := [1]unix.RemoteIovec{{Base: uintptr(tab) + MaxEndpoints*8, Len: 8}}
	got, err := unix.ProcessVMReadv(pid, local[:], remote[:], 0)
	capable = err == nil && got == 8 && w[0] == stageMagic && tr.ShareSegments(nic) == nil
}

// stageAlloc allocates the board's staging buffers in its shared pool,
// unless they are already (no lock held).
func (b *Board) stageAlloc() error {
	b.stage.allocMu.Lock()
	defer b.stage.allocMu.Unlock()
	if b.stage.ready.Load() {
		return nil
	}
	sp, err := b.sharedPool()
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
// did (b.mu held; r.segs set). A send to a peer process staging is not
// ready for yet starts readying it (stageStart) and takes the single copy.
func (e *Endpoint) stageRegion(i int, r *Request) bool {
	b := e.b
	if r.p == nil || !b.stageWanted(int(r.length)) || !b.stages() {
		return false
	}
	tr := b.shmTo(r.p.nic)
	if tr == nil || tr != b.sharedTransport() {
		return false
	}
	pid, tab, ok := tr.PeerProcess(r.p.nic)
	if !ok {
		return false
	}
	v, ok := b.stage.caps.Load(r.p.nic)
	if !ok || v.(stageCap).pid != pid {
		b.stageStart(r.p.nic, tr, pid, tab)
		return false
	}
	sp := b.shared
	if !v.(stageCap).ok || sp == nil || !b.stage.ready.Load() {
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
	if b.stage.gen == 0 {
		// A random base: a board that took over a NIC id from one that
		// went away does not give the generations it gave, which a
		// stale receive of the old board's message may still compare.
		b.stage.gen = rand.Uint64()
	}
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
	j := &stageSend{e: e, buf: sb, gen: gen, src: src}
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
	j.state.Add(1) // while j is listed: a withdrawal unlists it first (stageEnd)
	s.mu.Unlock()
	defer b.stageLeave(j)
	if j.state.Load() >= stageWithdrawn {
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
// held): no copier starts on it any more, and a receiver still at it (its
// send failed) sees another generation, in the claim word too (one whose
// low half no message has). It returns j when copiers are still at work
// on it, each on at most one chunk, for stageHold: the last of them
// releases it (stageLeave). Otherwise j is released already and it
// returns nil.
func (b *Board) stageEnd(j *stageSend) *stageSend {
	b.stage.drop(j)
	stageWord(j.buf.mem, stageWordClaim).Store(0)
	stageWord(j.buf.mem, stageWordGen).Store(0)
	if j.state.Add(stageWithdrawn) != stageWithdrawn {
		// Board.Close and Endpoint.Close wait for the release
		// (stageLeave).
		b.copies.Add(1)
		if j.e.stageHeld == 0 {
			j.e.stageIdle = make(chan struct{})
		}
		j.e.stageHeld++
		return j
	}
	b.stageFree(j)
	return nil
}

// stageHold is called as a large send r ends with code, its region freed
// (zs is what it registered, for zcHold): it reports false when r may
// complete now, and true when j, its staged message, still has copiers at
// work (stageEnd returned it), r then completing as the last one leaves
// (b.mu held, as since stageEnd).
func (b *Board) stageHold(j *stageSend, r *Request, zs *zcSend, code error) bool {
	if j == nil {
		return false
	}
	j.r, j.zs, j.code = r, zs, code
	return true
}

// stageLeave ends a copier's work on j (no lock held). The last copier of
// a withdrawn message releases it: its staging buffer goes back and its
// send completes, as freeing the region would have done (stageHold).
func (b *Board) stageLeave(j *stageSend) {
	if j.state.Add(-1) != stageWithdrawn {
		return
	}
	b.mu.Lock()
	b.stageFree(j)
	e, r := j.e, j.r
	if r != nil && !b.zcHold(e, r, j.zs, j.code) { // zerocopy.go
		r.protoHeld = false
		e.complete(r, j.code)
		b.maybeFree(r)
	}
	j.r, j.zs = nil, nil
	if e.stageHeld--; e.stageHeld == 0 {
		close(e.stageIdle) // a waiting Endpoint.Close returns
		e.stageIdle = nil
	}
	b.unlock()
	// After the unlock, which runs the frames and copies it queued:
	// Board.Close goes on only once they ran.
	b.copies.Done()
}

// stageFree gives j's staging buffer back once no copier writes it (b.mu
// held).
func (b *Board) stageFree(j *stageSend) {
	j.e.cnt[StagedChunks] += uint64(j.copied.Load())
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

// What a step of a staged receive did, or leaves to do (stageRecv.step).
const (
	stepCopied = iota // it copied a chunk the sender staged
	stepRead          // it claimed a chunk to read from the sender's buffer
	stepSkip          // it claimed a chunk past a truncated receive's end
	stepWait          // every chunk left is the sender's and not in yet
	stepGone          // the buffer no longer holds the message
)

// run receives the staged message (no lock held). It holds the sender's
// segment (shm.Transport.PeerSegment) for one step at a time — a chunk
// copied out of the staging buffer, a claim, the check after a read —
// and never while it waits for the sender's chunks or reads the sender's
// buffer, so the peer's segment table may change meanwhile (a segment
// passed or released); every hold checks that the buffer still holds the
// message.
func (st *stageRecv) run() {
	var addr uint64
	ok := false
	held := st.tr.PeerSegment(st.nic, st.seg, func(mem []byte) {
		m, fits := stageView(mem, st.off)
		if !fits || stageWord(m, stageWordGen).Load() != st.gen {
			return
		}
		addr = stageWord(m, stageWordAddr).Load()
		n := int(stageWord(m, stageWordLen).Load())
		ok = n >= st.total && n <= stageBufSize
	})
	if !held || !ok {
		st.fallback = true
		return
	}
	need := (st.total + stageChunk - 1) / stageChunk
	var handled uint32 // chunks in the receive buffer
	all := uint32(1)<<need - 1
	var since [stageChunks]time.Time
	for handled != all {
		what, i := stepGone, 0
		st.tr.PeerSegment(st.nic, st.seg, func(mem []byte) { what, i = st.step(mem, handled, need) })
		switch what {
		case stepGone:
			st.err = errStageGone
			return
		case stepCopied:
			handled |= 1 << i
			continue
		case stepSkip:
			continue
		case stepRead:
			if !st.read(i, addr) {
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
				if !st.read(i, addr) {
					return
				}
				handled |= 1 << i
			}
		}
		runtime.Gosched()
	}
}

// stageView returns the staging buffer at offset off of the sender's
// segment mem, header and data, and whether the segment holds it.
func stageView(mem []byte, off uint64) ([]byte, bool) {
	if off > uint64(len(mem)) || uint64(len(mem))-off < stageHdr+stageBufSize {
		return nil, false
	}
	return mem[off : off+stageHdr+stageBufSize], true
}

// step takes the receive one step on, with the sender's segment mem held
// (handled: the chunks in the receive buffer, need: the chunks it takes):
// it copies out one chunk the sender staged, or claims one from the top,
// and reports which (stepCopied, stepRead, stepSkip) and the chunk;
// stepWait when every chunk left is the sender's and not in yet, stepGone
// when the buffer no longer holds the message.
func (st *stageRecv) step(mem []byte, handled uint32, need int) (what, chunk int) {
	m, ok := stageView(mem, st.off)
	gen := st.gen
	if !ok || stageWord(m, stageWordGen).Load() != gen {
		return stepGone, 0
	}
	for i := range need {
		if handled&(1<<i) == 0 && stageWord(m, stageWordDone+i).Load() == gen {
			lo := i * stageChunk
			hi := min(lo+stageChunk, st.total)
			copyAt(st.dst, lo, m[stageHdr+lo:stageHdr+hi])
			if !stageHeld(m, gen) {
				return stepGone, 0
			}
			return stepCopied, i
		}
	}
	switch i := stageClaim(m, gen, true); {
	case i == -2:
		return stepGone, 0
	case i >= need:
		return stepSkip, 0
	case i >= 0:
		return stepRead, i
	}
	return stepWait, 0
}

// read copies chunk i from the sender's buffer at addr with
// process_vm_readv (the sender's segment not held); false when it failed:
// the sender went away or withdrew the message (st.err set), or the kernel
// refused (st.refused set: the rings carry the message, over what was
// copied).
func (st *stageRecv) read(i int, addr uint64) bool {
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
	held := false
	st.tr.PeerSegment(st.nic, st.seg, func(mem []byte) {
		m, ok := stageView(mem, st.off)
		held = ok && stageHeld(m, st.gen)
	})
	if !held {
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
