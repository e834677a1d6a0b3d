package mx

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomx-dev/gomx/transport"
)

// The local shortcut: messages between endpoints of one process (of one
// board, or of two boards in the same process) never become frames. The
// connect still travels the transport (it proves the peer is reachable and
// checks the key), but once a partner is known to be an endpoint of this
// process every message to it is handed over directly, with the same
// matching, truncation, counters and errors as on the wire:
//
//   - a matching receive is posted: the sender's segments are copied into
//     it at once (one copy) and both requests complete;
//   - none is: an eager message (up to the rendezvous threshold) is copied
//     into the unexpected queue and the send completes, as on the wire; a
//     larger one, an ISSend, or an eager one that finds the unexpected queue
//     full, is queued as a reference to the sender's segments (a local
//     rendezvous), and the receive that matches it later copies straight
//     from the sender's buffer and completes the send. Nothing is ever
//     dropped: a full queue makes the sender wait instead.
//
// Locking: each board has its own mutex. A send to an endpoint of the same
// board is delivered under that one lock. A send to another board releases
// its own board's lock before taking the receiver's, and completions of a
// sender's request found while holding the receiver's lock go to that board's
// outbox (Board.lout), which the unlocking goroutine runs after it released
// the lock; so no goroutine ever holds two board locks.
//
// Ordering: a partner switches to the shortcut only when it has no wire
// message in flight (none unacked or waiting), so a message sent locally can
// never overtake one sent earlier over the transport.

// LocalOptions configure the shortcut between endpoints of one process.
type LocalOptions struct {
	// Off sends to endpoints of this process through the transport and the
	// full wire protocol, as to any other peer. Tests and benchmarks of a
	// transport set it; GOMX_LOCAL=off in the environment sets it too.
	// Unless Shm is set as well, it also leaves the host path off, so that
	// frames to other processes of this host take the transport too; with
	// Shm they take the rings (a benchmark client whose peer is another
	// process sets both: no shortcut, the host path on).
	Off bool
	// Shm also reaches boards of other processes of this user on this host
	// through shared memory (transport/shm; see host.go): the board opens a
	// shared-memory transport named after its NIC id, and frames to a peer
	// that did the same take the rings. It is on by default for transports
	// that report host-unique NIC ids (transport.HostUnique: UDP, AF_XDP
	// over UDP, the VFIO NIC); Shm forces it on for others, which is right
	// only if their ids are unique on the host. GOMX_SHM=on sets it.
	Shm bool
	// NoShm turns the host path off (GOMX_SHM=off sets it).
	NoShm bool
	// NoLane sends tiny, small and one-fragment medium messages to ring
	// peers as Open-MX TINY, SMALL and MEDIUM frames on the lean path, not
	// as lane records (lane.go);
	// GOMX_LANE=off sets it. For measuring what the lane brings.
	NoLane bool
	// ShmDir is the endpoint directory (default: shm.DefaultDir()).
	ShmDir string
	// LaneIdle is how long a lane (a per-pair ring of the host path,
	// transport/shm) may go without a frame from this board before the
	// board's timers retire it, giving its memory back on both sides; the
	// pair goes back to the peer's receive queue, and gets a lane again
	// once it is busy again (shm.Options.LaneIdle). Default
	// $GOMX_SHM_LANE_IDLE (a Go duration), else shm.DefaultLaneIdle
	// (100 ms); negative: lanes stay until their peer goes away.
	LaneIdle time.Duration
	// Large is how large messages move between processes of this host
	// (cma.go): LargeAuto (default) stages messages of StageMin bytes and
	// more (stage.go) and copies the others once with process_vm_readv
	// where the kernel permits it, else pulls through the rings.
	// GOMX_SHM_LARGE (auto, rings, cma, shared, engine or staged) sets it.
	Large LargeStrategy
	// StageMin is the smallest message LargeAuto sends staged: from a
	// heap send buffer, up to a staging buffer's 4 MiB, to a peer process
	// that receives staged messages, the sender copies the message into a
	// staging buffer of its shared pool, 256 KiB at a time, while the
	// receiver copies it out (and reads chunks the sender has not started
	// with process_vm_readv). The first such send to a peer process
	// readies staging to it in the background and goes by the single
	// copy, as do those that follow until staging is ready (milliseconds;
	// ISend never waits for it). Default DefaultStageMin (1 MiB);
	// GOMX_SHM_STAGE_MIN sets it. LargeStaged ignores it.
	StageMin int
	// ShmEager is the largest message sent eagerly to a process of this
	// host when the single copy is in use; larger ones go by rendezvous
	// and are copied once by the receiver. Default DefaultShmEager (8 KiB);
	// GOMX_SHM_EAGER sets it. It never raises RendezvousThreshold.
	ShmEager int
	// Engine, when set, copies large messages whose send buffer lies in
	// the sender's shared pool (Endpoint.AllocShared) out of the sender's
	// segment: an ioat.Engine over VFIO or the emulated model (offload.go).
	Engine CopyEngine
	// EngineMin is the smallest message LargeAuto gives to the engine
	// (default DefaultEngineMin, 2 MiB: seed 003, Table I);
	// GOMX_SHM_ENGINE_MIN sets it. LargeEngine ignores it.
	EngineMin int
	// EngineNoOverlap maps a message's source for the engine in one piece
	// before any byte moves, instead of chunk by chunk while the engine
	// copies (for measuring what overlapped pinning brings).
	EngineNoOverlap bool
	// EngineNoCache drops the engine's mappings of a message's buffers
	// after each copy, so the next copy maps them again (for measuring what
	// the registration cache brings).
	EngineNoCache bool
	// PoolKeep is how many freed shared buffers of each size the pool
	// keeps for reuse (default 4; negative: none).
	PoolKeep int
}

// withEnv applies GOMX_LOCAL (off, 0 or false turn the shortcut off),
// GOMX_SHM (on or off: the host path) and GOMX_LANE (off: no lane records).
func (o LocalOptions) withEnv() LocalOptions {
	switch strings.ToLower(os.Getenv("GOMX_LOCAL")) {
	case "off", "0", "false", "no":
		o.Off = true
	}
	switch strings.ToLower(os.Getenv("GOMX_SHM")) {
	case "on", "1", "true", "yes":
		o.Shm, o.NoShm = true, false
	case "off", "0", "false", "no":
		o.Shm, o.NoShm = false, true
	}
	switch strings.ToLower(os.Getenv("GOMX_LANE")) {
	case "off", "0", "false", "no":
		o.NoLane = true
	}
	return o
}

// localKey names one incarnation of an endpoint: its board's NIC id, its id
// and its random session.
type localKey struct {
	nic     transport.NICID
	ep      uint8
	session uint32
}

// localDir is the process's directory of open endpoints that accept the
// shortcut. A partner resolves through it once per incarnation of the peer
// (the session is part of the key, so a stale entry can never be found for a
// reopened endpoint).
var localDir struct {
	mu sync.RWMutex
	m  map[localKey]*Endpoint
}

func registerLocal(e *Endpoint) {
	if e.b.opts.Local.Off {
		return
	}
	localDir.mu.Lock()
	if localDir.m == nil {
		localDir.m = make(map[localKey]*Endpoint)
	}
	localDir.m[localKey{e.b.nic, e.id, e.session}] = e
	localDir.mu.Unlock()
}

func unregisterLocal(e *Endpoint) {
	localDir.mu.Lock()
	delete(localDir.m, localKey{e.b.nic, e.id, e.session})
	localDir.mu.Unlock()
}

func lookupLocal(k localKey) *Endpoint {
	localDir.mu.RLock()
	e := localDir.m[k]
	localDir.mu.RUnlock()
	return e
}

// localState is an endpoint's shortcut bookkeeping, guarded by b.mu.
type localState struct {
	// sends are this endpoint's local rendezvous sends that wait in some
	// receiver's unexpected queue.
	sends map[*localSend]struct{}
	// lost are partners whose process the transport saw go (peerloss.go).
	lost map[*partner]struct{}
}

// localPeer is, for a partner (partner.local), which endpoint of this
// process it is (nil: not in this process) for its remote session session.
type localPeer struct {
	known   bool
	session uint32
	ep      *Endpoint
}

// States of a local rendezvous send. It moves from pending to claimed (a
// receive took it, or the receiving endpoint closed) under the receiver's
// lock, or from pending to withdrawn (the sending endpoint closed) under the
// sender's lock: the two locks differ, so the move is a compare-and-swap and
// exactly one side wins. finished is stored under the sender's lock once the
// send completed.
const (
	lsPending int32 = iota
	lsClaimed
	lsWithdrawn
	lsFinished
)

// localSend is a large (or deferred) local message waiting in a receiver's
// unexpected queue: a reference to the sender's segments. It is allocated
// per message and never pooled, so a receiver holding one can never see it
// reused.
type localSend struct {
	state atomic.Int32
	// code is why the send was withdrawn; written before the CAS to
	// lsWithdrawn, read by the receiver only after it saw that state.
	code error
	from *Endpoint
	r    *Request // the sender's request; untouched by the receiver
	segs [][]byte
}

// localDone is a completion of a local rendezvous send found by another
// board, run after that board's lock is released.
type localDone struct {
	ls   *localSend
	code error
	xfer uint32
}

// localMsg is one message on its way to a local endpoint.
type localMsg struct {
	from  *Endpoint
	r     *Request
	segs  [][]byte
	match uint64
	n     int
	eager bool
}

// localResult is what delivering a local message did.
type localResult struct {
	done   bool       // the send is over: complete it with code and xfer
	reset  bool       // the peer is gone: reset the partner (as a NACK would)
	code   error      // the send's status when done
	xfer   uint32     // bytes the receiver took
	queued *localSend // queued as a local rendezvous
}

// localPeer returns the endpoint of this process that p is, or nil. Called
// with b.mu held.
func (e *Endpoint) localPeer(p *partner) *Endpoint {
	if lp := &p.local; lp.known && lp.session == p.rsession {
		return lp.ep // inlined: asked by every send (never known with Local.Off)
	}
	return e.findLocalPeer(p)
}

// findLocalPeer is localPeer for a partner not looked up yet in its
// session.
func (e *Endpoint) findLocalPeer(p *partner) *Endpoint {
	if e.b.opts.Local.Off {
		return nil
	}
	if p.unacked.Len() > 0 || p.sendSeq != p.ackPoint || p.waitq.Len() > 0 || e.resq.Len() > 0 {
		// Wire messages are in flight (lean ones, lean.go, are in no
		// list: the peer's ack says when they are all in), or large
		// sends wait for a region: the next message must not overtake
		// them. Decide later.
		return nil
	}
	d := lookupLocal(localKey{p.nic, p.epID, p.rsession})
	p.local = localPeer{known: true, session: p.rsession, ep: d}
	return d
}

// isendLocal sends r (built by isend, b.mu held) to the local endpoint d and
// releases b.mu.
func (e *Endpoint) isendLocal(r *Request, d *Endpoint, segs [][]byte, n int, sync bool) (*Request, error) {
	b := e.b
	r.segs = append(r.segsBuf[:0], segs...)
	r.segsBuf = r.segs
	r.protoHeld = true
	e.cnt[SendLocal]++
	m := localMsg{from: e, r: r, segs: r.segs, match: r.match, n: n,
		eager: !sync && n <= b.opts.RendezvousThreshold}
	if d.b == b {
		res := d.deliverLocal(&m)
		e.afterDeliver(r, &res)
		b.unlock()
		return r, nil
	}
	// Another board: never hold two board locks.
	b.unlock()
	db := d.b
	db.mu.Lock()
	res := d.deliverLocal(&m)
	db.unlock()
	if res.done || res.queued != nil {
		b.mu.Lock()
		e.afterDeliver(r, &res)
		b.unlock()
	}
	return r, nil
}

// afterDeliver completes or tracks a local send once delivered (b.mu held).
func (e *Endpoint) afterDeliver(r *Request, res *localResult) {
	switch {
	case res.done:
		if res.reset && !r.p.dead {
			if res.code == ErrUnreachable {
				e.cnt[Unreachable]++
			}
			r.p.reset(res.code)
		}
		e.finishLocalSend(r, res.code, res.xfer)
	case res.queued != nil:
		e.adoptLocal(res.queued)
	}
}

// finishLocalSend completes a local send (b.mu held).
func (e *Endpoint) finishLocalSend(r *Request, code error, xfer uint32) {
	r.status.XferLength = xfer
	r.protoHeld = false
	e.complete(r, code)
	e.b.maybeFree(r)
}

// adoptLocal records a local rendezvous send so that closing the endpoint
// withdraws it (b.mu held).
func (e *Endpoint) adoptLocal(ls *localSend) {
	if ls.state.Load() == lsFinished {
		return // a receive took it before we got the lock back
	}
	if e.closed {
		e.withdrawLocal(ls, ErrEndpointClosed)
		return
	}
	if e.loc.sends == nil {
		e.loc.sends = make(map[*localSend]struct{})
	}
	e.loc.sends[ls] = struct{}{}
}

// withdrawLocal takes back a pending local rendezvous send: a receive that
// matches it later fails with peer (b.mu held).
func (e *Endpoint) withdrawLocal(ls *localSend, peer error) {
	ls.code = peer
	if ls.state.CompareAndSwap(lsPending, lsWithdrawn) {
		e.finishLocalSend(ls.r, ErrEndpointClosed, 0)
	}
	// Otherwise a receiver claimed it: its completion is on the way.
}

// closeLocal withdraws the endpoint's pending local sends and leaves the
// directory (from closeLocked).
func (e *Endpoint) closeLocal() {
	unregisterLocal(e)
	e.b.cmaClose(e)
	peer := ErrEndpointClosed
	if e.b.closed {
		peer = ErrUnreachable // as a pull from a vanished board ends
	}
	for ls := range e.loc.sends {
		e.withdrawLocal(ls, peer)
	}
	clear(e.loc.sends)
}

// finishLocal completes the local rendezvous send ls of this endpoint
// (b.mu held).
func (e *Endpoint) finishLocal(ls *localSend, code error, xfer uint32) {
	ls.state.Store(lsFinished)
	delete(e.loc.sends, ls)
	e.finishLocalSend(ls.r, code, xfer)
}

// localGone is the error a send to the closed endpoint d gets, as the wire
// would report it: unreachable when its board is gone, a bad session when the
// id was reopened, else closed.
func localGone(d *Endpoint) error {
	switch {
	case d.b.closed:
		return ErrUnreachable
	case d.b.eps[d.id] != nil:
		return ErrBadSession
	}
	return ErrEndpointClosed
}

// deliverLocal hands m to d: match, unexpected handler, unexpected queue or
// local rendezvous. Called with d.b.mu held.
func (d *Endpoint) deliverLocal(m *localMsg) localResult {
	if d.closed {
		return localResult{done: true, reset: true, code: localGone(d)}
	}
	src := m.from
	bp := d.partners[partnerKey{src.b.nic, src.id}]
	if bp == nil || !bp.rknown || bp.rsession != src.session {
		// d does not know this incarnation of the sender: on the wire its
		// packets would be dropped until the sender gave up.
		d.cnt[DropNoPartner]++
		return localResult{done: true, reset: true, code: ErrUnreachable}
	}
	d.cnt[RecvLocal]++
	eagerXfer := uint32(0)
	if m.eager {
		eagerXfer = uint32(m.n)
	}
	var data, scratch []byte
	if d.handler != nil && m.eager {
		if len(m.segs) == 1 {
			data = m.segs[0]
		} else {
			scratch = gather(d.b.getPayload(m.n)[:0], m.segs)
			data = scratch
		}
	}
	// With progression disabled the handler is not called (held): a local
	// message then goes to the unexpected queue (or waits as a local
	// rendezvous) for a later receive, where the wire would leave it unacked
	// for the sender's resend.
	r, consumed, _ := bp.matchOrHandle(m.match, uint32(m.n), data)
	if scratch != nil {
		d.b.putPayload(scratch)
	}
	if consumed {
		return localResult{done: true, xfer: eagerXfer}
	}
	if r != nil {
		k := copySegs(r.segs, m.segs) // the one copy
		d.finishRecv(r, bp, m.match, uint32(m.n), uint32(k))
		if !m.eager {
			eagerXfer = uint32(k) // a rendezvous reports what was taken
		}
		return localResult{done: true, xfer: eagerXfer}
	}
	if m.eager && d.unexpRoom(m.n) {
		u := d.b.getUnexp()
		*u = unexp{p: bp, match: m.match, length: uint32(m.n), complete: true, bytes: m.n}
		u.buf = d.b.getPayload(m.n)
		gatherAt(u.buf, m.segs, 0)
		d.queueUnexp(u)
		return localResult{done: true, xfer: eagerXfer}
	}
	// A local rendezvous: the receive that matches it copies from the
	// sender's segments. It costs the queue no payload bytes, so a full
	// queue delays the sender instead of dropping the message.
	ls := &localSend{from: src, r: m.r, segs: m.segs}
	u := d.b.getUnexp()
	*u = unexp{p: bp, match: m.match, length: uint32(m.n), complete: true, ls: ls}
	d.queueUnexp(u)
	return localResult{queued: ls}
}

// takeLocal gives the local rendezvous u (out of the queue) to receive r
// (b.mu held).
func (e *Endpoint) takeLocal(r *Request, u *unexp) {
	ls := u.ls
	if !ls.state.CompareAndSwap(lsPending, lsClaimed) {
		// The sender withdrew it (closed): fail as a pull from it would.
		r.status.Source = u.p.addr()
		r.status.Match = u.match
		r.status.MsgLength = u.length
		e.complete(r, ls.code)
		e.b.putUnexp(u)
		return
	}
	k := copySegs(r.segs, ls.segs) // the one copy, from the sender's buffer
	e.finishRecv(r, u.p, u.match, u.length, uint32(k))
	e.b.putUnexp(u)
	e.localDone(ls, nil, uint32(k))
}

// dropLocal fails the sender of a local rendezvous whose receiver dropped
// it (the receiving endpoint closed).
func (e *Endpoint) dropLocal(u *unexp) {
	ls := u.ls
	u.ls = nil
	if ls.state.CompareAndSwap(lsPending, lsClaimed) {
		e.localDone(ls, ErrEndpointClosed, 0)
	}
}

// localDone completes ls on its sender: at once on the same board, else
// through the outbox after this board's lock is released (b.mu held).
func (e *Endpoint) localDone(ls *localSend, code error, xfer uint32) {
	if ls.from.b == e.b {
		ls.from.finishLocal(ls, code, xfer)
		return
	}
	e.b.lout = append(e.b.lout, localDone{ls: ls, code: code, xfer: xfer})
}

// takeLocalOut removes the outbox (b.mu held).
func (b *Board) takeLocalOut() []localDone {
	if len(b.lout) == 0 {
		return nil
	}
	out := b.lout
	b.lout = nil
	return out
}

// runLocalOut completes other boards' sends; called with no lock held.
func runLocalOut(out []localDone) {
	for _, d := range out {
		e := d.ls.from
		e.b.mu.Lock()
		e.finishLocal(d.ls, d.code, d.xfer)
		e.b.unlock()
	}
}

// copySegs copies the concatenation of src into the concatenation of dst
// and returns the bytes copied (the shorter of the two totals).
func copySegs(dst, src [][]byte) int {
	if len(dst) == 1 && len(src) == 1 {
		return copy(dst[0], src[0])
	}
	n, i, j, di, sj := 0, 0, 0, 0, 0
	for i < len(dst) && j < len(src) {
		c := copy(dst[i][di:], src[j][sj:])
		n += c
		di += c
		sj += c
		if di == len(dst[i]) {
			i, di = i+1, 0
		}
		if sj == len(src[j]) {
			j, sj = j+1, 0
		}
	}
	return n
}
