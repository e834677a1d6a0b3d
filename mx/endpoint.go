package mx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/gomx-dev/gomx/mx/wire"
	"github.com/gomx-dev/gomx/transport"
)

// Endpoint is an open MX endpoint: a board, an endpoint id, a key and a
// session id. All its methods are safe for concurrent use.
type Endpoint struct {
	// The fields an 8-byte message reads and writes come first, on four
	// cache lines with lanes' fast-path counts on one of their own
	// (TestHotLines). b, session, key and id are set once at open.
	b       *Board
	session uint32
	key     uint32
	id      uint8
	// Guarded by b.mu, down to the end but engCopies, wakeGen,
	// closedAtom and the atomic copy counts.
	closed bool
	// engCopies counts the copy-engine copies in flight that fill its
	// requests: a wait for any of them steps aside (poll.go).
	engCopies  atomic.Int32
	zombies    int
	evWaiters  int
	unexpBytes int
	progOff    int       // DisableProgression depth
	lanes      laneTally // the lane path's counts, apart from cnt
	handler    UnexpectedHandler
	posted     reqList
	doneq      doneList
	resq       reqList // sends waiting for a region (and those behind them)
	unexp      uxList

	partners    map[partnerKey]*partner
	pcache      [pcacheLen]*partner // partners found before (partnerAt)
	plist       []*partner
	regions     [256]region
	regionsUsed int // regions with used set: the timers scan regions only when some are (largefail.go)
	// stageHeld counts the staged sends withdrawn while copiers were at
	// work on them (stage.go); stageIdle, made as it leaves 0, is closed
	// as it comes back to 0, for Close to wait on.
	stageHeld   int
	stageIdle   chan struct{}
	cmaTab      []uint64 // large-send buffers, read by processes that copy them (cma.go)
	regionHint  int
	pulls       []*pull
	pullFree    []int
	pullq       reqList // matched large receives waiting for a pull handle
	resendMax   int     // SetRequestTimeout(nil, d): default resends; 0: ResendMax
	cnt         Counters
	wake        chan struct{} // closed by Wakeup and Close, then replaced
	ev          chan struct{} // closed on completions and arrivals when evWaiters > 0
	wakeGen     atomic.Uint64
	spin        spinGovernor // its waits' poll window (spin.go)
	closedAtom  atomic.Bool
	handlerBusy int
	loc         localState // the in-process shortcut (local.go)
	copies      copyCounts // payload bytes copied (copystats.go)
}

type partnerKey struct {
	nic transport.NICID
	ep  uint8
}

func newEndpoint(b *Board, id uint8, key uint32) *Endpoint {
	e := &Endpoint{
		b:        b,
		id:       id,
		key:      key,
		session:  randSession(),
		partners: make(map[partnerKey]*partner),
		wake:     make(chan struct{}),
		ev:       make(chan struct{}),
	}
	e.spin.window.Store(int64(max(b.opts.Spin, 0)))
	return e
}

// ID returns the endpoint id.
func (e *Endpoint) ID() uint8 { return e.id }

// Board returns the board the endpoint is open on.
func (e *Endpoint) Board() *Board { return e.b }

// Addr returns the endpoint's own address.
func (e *Endpoint) Addr() Addr { return Addr{NIC: e.b.nic, Endpoint: e.id, Session: e.session} }

// Counters returns a snapshot of the endpoint's counters.
func (e *Endpoint) Counters() Counters {
	e.b.mu.Lock()
	defer e.b.unlockKick()
	c := e.cnt
	e.lanes.addTo(&c)
	return c
}

// Close closes the endpoint: pending requests complete with
// ErrEndpointClosed, blocked waits return, and peers that send to it get
// ErrEndpointClosed. It must not be called from the unexpected handler.
// A staged send (stage.go) that a copier is copying a chunk of completes
// as the copier leaves that chunk: Close waits for it, without the board
// lock, so no send buffer is read after Close returns.
func (e *Endpoint) Close() error {
	b := e.b
	b.mu.Lock()
	if e.handlerBusy > 0 {
		b.unlock()
		return &OpError{Op: "close endpoint", Endpoint: e.id, Err: ErrNotInHandler}
	}
	e.closeLocked()
	idle := e.stageIdle // nil when no copier is at work on a withdrawn send
	b.unlock()
	if idle != nil {
		<-idle // each copier is on at most one chunk (stageLeave)
	}
	return nil
}

func (e *Endpoint) closeLocked() {
	if e.closed {
		return
	}
	e.closed = true
	e.closedAtom.Store(true)
	e.closeLocal()
	b := e.b
	for r := e.posted.pop(); r != nil; r = e.posted.pop() {
		e.complete(r, ErrEndpointClosed)
	}
	for _, p := range e.plist {
		p.failAll(ErrEndpointClosed)
		for r := p.connecting.pop(); r != nil; r = p.connecting.pop() {
			e.complete(r, ErrEndpointClosed)
		}
	}
	for r := e.pullq.pop(); r != nil; r = e.pullq.pop() {
		e.complete(r, ErrEndpointClosed)
	}
	for r := e.resq.pop(); r != nil; r = e.resq.pop() {
		r.p.failSend(r, ErrEndpointClosed)
	}
	for _, pl := range e.pulls {
		if pl != nil {
			e.endPull(pl, ErrEndpointClosed)
		}
	}
	for u := e.unexp.Front(); u != nil; u = e.unexp.Front() {
		e.dropUnexp(u)
	}
	if b.eps[e.id] == e {
		b.eps[e.id] = nil
		if i := slices.Index(b.epl, e); i >= 0 {
			b.epl = slices.Delete(b.epl, i, i+1)
		}
	}
	e.wakeupLocked()
}

// Wakeup makes every goroutine blocked in a wait on this endpoint return
// ErrWokenUp.
func (e *Endpoint) Wakeup() {
	e.b.mu.Lock()
	e.wakeupLocked()
	e.b.unlockKick()
}

func (e *Endpoint) wakeupLocked() {
	e.wakeGen.Add(1)
	close(e.wake)
	e.wake = make(chan struct{})
	e.b.ringSleeper() // sleep.go
}

// signalEvent wakes WaitAny, Peek and Probe waiters, and the owner asleep
// on the sources (sleep.go: it may wait for r, or for an event). Inlined
// into every completion (complete): most find nobody to wake.
func (e *Endpoint) signalEvent() {
	if e.b.sleep.armed.Load() || e.evWaiters > 0 {
		e.wakeEvents()
	}
}

// wakeEvents is signalEvent's work when someone may wait.
func (e *Endpoint) wakeEvents() {
	e.b.ringSleeper()
	if e.evWaiters > 0 {
		e.b.wokeOne()
		close(e.ev)
		e.ev = make(chan struct{})
	}
}

// complete finishes r with code (nil for success).
func (e *Endpoint) complete(r *Request, code error) {
	if r.done.Load() {
		return
	}
	r.status.Code = code
	r.done.Store(true)
	if r.kind == kindNotify {
		return
	}
	if r.forgotten {
		r.userHeld = false
		e.b.maybeFree(r)
		return
	}
	e.doneq.push(r)
	if r.waiters > 0 {
		select {
		case r.ch <- struct{}{}:
			r.signaled = true
			r.wokeAt = e.b.clock() // descheduled.go
			r.narrow = false       // wokeAt is reqCold's
			e.b.wokeOne()
		default:
		}
	}
	e.signalEvent()
}

func (e *Endpoint) opErr(op string, err error) error {
	return &OpError{Op: op, Endpoint: e.id, Err: err}
}

func segLen(segs [][]byte) (int, error) {
	if len(segs) > MaxSegments {
		return 0, ErrBadSegCount
	}
	n := 0
	for _, s := range segs {
		n += len(s)
	}
	if n > math.MaxUint32 {
		return 0, ErrMessageTooLong
	}
	return n, nil
}

// Connect connects to endpoint epID on board nic presenting key, and
// returns the peer's address. It blocks until the peer answers, ctx is done
// (ErrTimeout), or the resend limit is hit (ErrUnreachable). A wrong key
// fails with ErrBadKey, a missing endpoint with ErrBadEndpoint or
// ErrEndpointClosed. Over shared-memory rings, a connection that this
// process's or the peer's RLIMIT_NOFILE stops fails it at the next timer
// run with ErrNoResources wrapping shm.ErrFDLimit, naming the process
// (fdlimit.go).
func (e *Endpoint) Connect(ctx context.Context, nic transport.NICID, epID uint8, key uint32) (Addr, error) {
	r, err := e.IConnect(nic, epID, key, 0, nil)
	if err != nil {
		return Addr{}, err
	}
	st, err := r.Wait(ctx)
	if errors.Is(err, ErrTimeout) || errors.Is(err, ErrWokenUp) {
		// Still pending: withdraw it (it may have completed meanwhile).
		e.Cancel(r)
		r.Forget()
	}
	if err != nil {
		return Addr{}, e.opErr("connect", err)
	}
	return st.Source, nil
}

// IConnect starts a connect; the request completes with the peer's address
// in Status.Source. match is reported in Status.Match (for TestAny filters).
func (e *Endpoint) IConnect(nic transport.NICID, epID uint8, key uint32, match uint64, ctx any) (*Request, error) {
	b := e.b
	b.mu.Lock()
	defer b.unlock()
	if e.closed {
		return nil, e.opErr("iconnect", ErrEndpointClosed)
	}
	p := e.partner(nic, epID, true)
	e.forgetLost(p) // a new process may have the board now (peerloss.go)
	r := b.getReq(e, kindConnect)
	r.userHeld = true
	r.p = p
	r.key = key
	p.connAttempt++
	r.attempt = p.connAttempt
	r.match = match
	r.status = Status{Match: match, Context: ctx, Source: Addr{NIC: nic, Endpoint: epID}}
	p.connecting.push(r)
	b.wakeTicks() // progress.go
	b.setNow()
	p.sendConnect(r)
	return r, nil
}

// ISend starts sending the concatenation of segs to dest with match info.
// Messages up to the rendezvous threshold are copied and sent eagerly and
// may complete before the receiver has them; longer ones are pulled by the
// receiver from segs, which must not change until the request completes.
// A large send that finds every region (BoardOptions.Regions) taken waits
// for one, and sends posted after it wait behind it, so nothing fails for
// lack of resources and per-peer order holds.
func (e *Endpoint) ISend(segs [][]byte, dest Addr, match uint64, ctx any) (*Request, error) {
	r, err := e.isend(segs, dest, match, ctx, false)
	if b := e.b; b.serveSends.Load() {
		b.serveSource(b.src) // rxsource.go
	}
	return r, err
}

// ISSend is a synchronous send: it always uses the rendezvous protocol and
// completes only when the receiver has matched the message and taken the
// data.
func (e *Endpoint) ISSend(segs [][]byte, dest Addr, match uint64, ctx any) (*Request, error) {
	r, err := e.isend(segs, dest, match, ctx, true)
	if b := e.b; b.serveSends.Load() {
		b.serveSource(b.src) // rxsource.go
	}
	return r, err
}

func (e *Endpoint) isend(segs [][]byte, dest Addr, match uint64, ctx any, sync bool) (*Request, error) {
	n, err := segLen(segs)
	if err != nil {
		return nil, e.opErr("isend", err)
	}
	b := e.b
	b.mu.Lock()
	if e.closed {
		b.unlockKick()
		return nil, e.opErr("isend", ErrEndpointClosed)
	}
	p := dest.p
	if p == nil || p.ep != e {
		p = e.partners[partnerKey{dest.NIC, dest.Endpoint}]
	}
	if p == nil || !p.rknown {
		b.unlockKick()
		return nil, e.opErr("isend", fmt.Errorf("%w: %v is not connected", ErrBadEndpoint, dest))
	}
	if dest.Session != 0 && dest.Session != p.rsession {
		b.unlockKick()
		return nil, e.opErr("isend", ErrBadSession)
	}
	var d *Endpoint // an endpoint of this process (local.go)
	if !p.dead {
		d = e.localPeer(p)
	}
	class := b.sendClass(p, n, sync)
	wait := e.resq.Len() > 0 // keep per-peer order behind waiting sends
	// A peer on the rings may take the lean path, one through the
	// transport the short path: asked once here, not by each.
	if rings := p.rings(); rings != nil {
		if !p.dead && d == nil && !wait && e.sendLean(p, rings, class, match, segs, n) {
			// In the peer's ring (lean.go): the request is made only
			// now, once the frame is on its way, and completes at once.
			r := e.newSend(p, match, n, ctx, class)
			r.status.XferLength = uint32(n)
			r.narrow = true // nothing of reqCold: recycle clears reqHot alone
			e.complete(r, nil)
			b.unlock()
			return r, nil
		}
	} else if e.shortSend(p, class, d, wait) {
		r := e.sendShort(p, class, match, segs, n, ctx) // short.go
		late := r.kickHeld
		b.unlock()
		if late {
			b.stampAfterKick(r) // short.go
		}
		return r, nil
	}
	r := e.newSend(p, match, n, ctx, class)
	if p.dead {
		e.complete(r, ErrUnreachable)
		b.unlock()
		return r, nil
	}
	if d != nil {
		return e.isendLocal(r, d, segs, n, sync)
	}
	e.copies.locked.sent += uint64(n)
	if class == classLarge {
		r.segs = append(r.segsBuf[:0], segs...) // before allocRegion publishes them (cma.go)
		r.segsBuf = r.segs
		if !wait {
			rid, ok := e.allocRegion(r)
			if ok {
				r.region = rid
			} else {
				wait = true
			}
		}
	}
	if r.class != classLarge {
		r.buf = gather(r.buf[:0], segs)
		e.copies.locked.gather += uint64(n)
		r.status.XferLength = uint32(n)
	}
	r.protoHeld = true
	b.setNow()
	if wait {
		e.queueSend(r)
	} else {
		p.enqueue(r)
	}
	if r.class != classLarge && e.zombies < b.opts.ZombieSends {
		r.zombie = true
		e.zombies++
		e.complete(r, nil)
	}
	b.unlock()
	return r, nil
}

// newSend returns a new send request of n bytes to p (b.mu held).
func (e *Endpoint) newSend(p *partner, match uint64, n int, ctx any, class msgClass) *Request {
	r := e.b.getReq(e, kindSend)
	r.userHeld = true
	r.p = p
	r.match = match
	r.length = uint32(n)
	r.class = class
	// A large send over the wire: its pull's requests come as frames
	// of the transport (sleep.go).
	r.bulk = class == classLarge && p.rings() == nil
	// Field by field into the zeroed status (getReq): a composite
	// literal is built on the stack and copied over, and a nil context
	// needs no store (nor its write barrier).
	r.status.Source = p.addr()
	r.status.Match = match
	r.status.MsgLength = uint32(n)
	if ctx != nil {
		r.status.Context = ctx
	}
	return r
}

// sendClass returns the protocol that carries a send of n bytes to p:
// rendezvous (large) when sync asks for it or the message is too long to
// go eagerly, else tiny, small or medium by its length.
func (b *Board) sendClass(p *partner, n int, sync bool) msgClass {
	switch {
	case sync || n > b.opts.RendezvousThreshold || n > p.stride*wire.MaxMediumFrag ||
		n > b.opts.Local.ShmEager && b.shmRendezvous(p, n): // (its first test, without a call per small send)
		return classLarge
	case n <= 32:
		return classTiny
	case n <= 128:
		return classSmall
	default:
		return classMedium
	}
}

// IRecv posts a receive into segs for the first message, in per-sender
// order, whose match info m satisfies m&mask == match. Bits of match outside
// mask are an error (ErrBadMatchMask). A message longer than segs is
// truncated: Status.Code is ErrTruncated.
func (e *Endpoint) IRecv(segs [][]byte, match, mask uint64, ctx any) (*Request, error) {
	if match&^mask != 0 {
		return nil, e.opErr("irecv", ErrBadMatchMask)
	}
	if len(segs) > MaxSegments {
		return nil, e.opErr("irecv", ErrBadSegCount)
	}
	b := e.b
	// The unlocks are written out rather than deferred: this runs once
	// per message, and a defer costs a closure and its call.
	b.mu.Lock()
	if e.closed {
		b.unlock()
		return nil, e.opErr("irecv", ErrEndpointClosed)
	}
	r := b.getReq(e, kindRecv)
	r.userHeld = true
	r.match = match
	r.mask = mask
	if len(segs) == 1 {
		// The common case, one store instead of a typed slice copy.
		r.segs = append(r.segsBuf[:0], segs[0])
	} else {
		r.segs = append(r.segsBuf[:0], segs...)
	}
	r.segsBuf = r.segs
	r.status.Context = ctx
	for u := e.unexp.Front(); u != nil; u = u.q.Next() {
		if u.match&mask == match {
			e.unexp.remove(u)
			e.takeUnexp(r, u)
			b.unlock()
			return r, nil
		}
	}
	e.posted.push(r)
	b.unlock()
	return r, nil
}

// Cancel cancels a posted receive that has not matched yet or a pending
// connect: it completes with ErrCancelled and Cancel returns true. It
// returns false for a request that already completed or matched, and
// ErrCancelNotSupported for sends.
func (e *Endpoint) Cancel(r *Request) (bool, error) {
	b := e.b
	b.mu.Lock()
	defer b.unlock()
	if r == nil || r.ep != e || !r.userHeld {
		return false, e.opErr("cancel", ErrBadRequest)
	}
	if r.kind == kindSend {
		return false, e.opErr("cancel", ErrCancelNotSupported)
	}
	if r.done.Load() {
		return false, nil
	}
	switch r.kind {
	case kindRecv:
		if !e.posted.has(r) {
			return false, nil
		}
		e.posted.remove(r)
		e.complete(r, ErrCancelled)
		return true, nil
	case kindConnect:
		r.p.connecting.remove(r)
		e.complete(r, ErrCancelled)
		return true, nil
	}
	return false, nil
}

// Forget releases the application's hold on r: the endpoint recycles it
// when it completes, and it never appears in TestAny, WaitAny or Peek.
func (r *Request) Forget() {
	if r == nil || r.ep == nil {
		return
	}
	b := r.ep.b
	b.mu.Lock()
	defer b.unlockKick()
	if !r.userHeld {
		return
	}
	r.forgotten = true
	if r.done.Load() {
		r.ep.doneq.remove(r)
		r.userHeld = false
		b.maybeFree(r)
	}
}

// Forget is the MX spelling of r.Forget.
func (e *Endpoint) Forget(r *Request) { r.Forget() }

// Test is the MX spelling of r.Test.
func (e *Endpoint) Test(r *Request) (Status, bool) { return r.Test() }

// Wait is the MX spelling of r.Wait.
func (e *Endpoint) Wait(ctx context.Context, r *Request) (Status, error) { return r.Wait(ctx) }

// TestAny completes and returns the status of the oldest completed request
// whose match info m satisfies m&mask == match.
func (e *Endpoint) TestAny(match, mask uint64) (Status, bool) {
	e.b.mu.Lock()
	defer e.b.unlockKick()
	return e.testAnyLocked(match, mask)
}

// WaitAny blocks until TestAny(match, mask) succeeds, ctx is done
// (ErrTimeout) or the endpoint is woken up (ErrWokenUp). Status.Code of the
// request is returned as the error.
func (e *Endpoint) WaitAny(ctx context.Context, match, mask uint64) (Status, error) {
	var st Status
	err := e.waitEvent(ctx, func() bool {
		var ok bool
		st, ok = e.testAnyLocked(match, mask)
		return ok
	})
	if err != nil {
		return Status{}, err
	}
	return st, st.Code
}

func (e *Endpoint) testAnyLocked(match, mask uint64) (Status, bool) {
	for r := e.doneq.Front(); r != nil; r = r.d.Next() {
		if r.status.Match&mask == match {
			var st Status
			r.consumeLocked(&st)
			return st, true
		}
	}
	return Status{}, false
}

// IPeek returns the oldest completed request without completing it.
func (e *Endpoint) IPeek() (*Request, bool) {
	e.b.mu.Lock()
	defer e.b.unlockKick()
	r := e.doneq.Front()
	return r, r != nil
}

// Peek blocks until some request has completed and returns it without
// completing it.
func (e *Endpoint) Peek(ctx context.Context) (*Request, error) {
	var r *Request
	err := e.waitEvent(ctx, func() bool { r = e.doneq.Front(); return r != nil })
	return r, err
}

// IProbe reports whether a message matching (match, mask) waits in the
// unexpected queue, and its status, without receiving it.
func (e *Endpoint) IProbe(match, mask uint64) (Status, bool) {
	e.b.mu.Lock()
	defer e.b.unlockKick()
	if u := e.findUnexp(match, mask); u != nil {
		return u.statusOf(), true
	}
	return Status{}, false
}

// Probe blocks until IProbe would succeed.
func (e *Endpoint) Probe(ctx context.Context, match, mask uint64) (Status, error) {
	var st Status
	err := e.waitEvent(ctx, func() bool {
		u := e.findUnexp(match, mask)
		if u != nil {
			st = u.statusOf()
		}
		return u != nil
	})
	return st, err
}

// Message is an unexpected message removed from the queue by a matched
// probe; receive it with Recv or IRecv (once).
type Message struct {
	e  *Endpoint
	u  *unexp
	st Status
}

// Status returns the message's source, match info and length.
func (m *Message) Status() Status { return m.st }

// IMProbe removes the first unexpected message matching (match, mask) from
// the queue and returns a handle to receive it: no other receive can match
// it any more (MPI_Improbe).
func (e *Endpoint) IMProbe(match, mask uint64) (*Message, bool) {
	e.b.mu.Lock()
	defer e.b.unlockKick()
	return e.mprobeLocked(match, mask)
}

func (e *Endpoint) mprobeLocked(match, mask uint64) (*Message, bool) {
	u := e.findUnexp(match, mask)
	if u == nil {
		return nil, false
	}
	e.unexp.remove(u)
	return &Message{e: e, u: u, st: u.statusOf()}, true
}

// MProbe blocks until IMProbe would succeed.
func (e *Endpoint) MProbe(ctx context.Context, match, mask uint64) (*Message, error) {
	var m *Message
	err := e.waitEvent(ctx, func() bool {
		var ok bool
		m, ok = e.mprobeLocked(match, mask)
		return ok
	})
	return m, err
}

// IRecv receives the message into segs.
func (m *Message) IRecv(segs [][]byte, ctx any) (*Request, error) {
	e := m.e
	if len(segs) > MaxSegments {
		return nil, e.opErr("message irecv", ErrBadSegCount)
	}
	b := e.b
	b.mu.Lock()
	defer b.unlock()
	if m.u == nil {
		return nil, e.opErr("message irecv", ErrBadRequest)
	}
	if e.closed {
		return nil, e.opErr("message irecv", ErrEndpointClosed)
	}
	r := b.getReq(e, kindRecv)
	r.userHeld = true
	r.match = m.st.Match
	r.mask = ^uint64(0)
	r.segs = append(r.segsBuf[:0], segs...)
	r.segsBuf = r.segs
	r.status.Context = ctx
	u := m.u
	m.u = nil
	e.takeUnexp(r, u)
	return r, nil
}

// Recv receives the message into segs and waits for completion.
func (m *Message) Recv(ctx context.Context, segs [][]byte) (Status, error) {
	r, err := m.IRecv(segs, nil)
	if err != nil {
		return Status{}, err
	}
	return r.Wait(ctx)
}

// waitEvent evaluates cond under the lock until it holds, waiting for
// endpoint events in between.
func (e *Endpoint) waitEvent(ctx context.Context, cond func() bool) error {
	b := e.b
	ok := false
	locked := func() bool {
		b.mu.Lock()
		ok = cond()
		b.unlockKick()
		return ok || e.closedAtom.Load()
	}
	gen := e.wakeGen.Load()
	kernel := !b.opts.BusyPoll && b.canSleepOnSources() // sleep.go
	if b.opts.BusyPoll || len(b.waitSources()) > 0 {
		budget := b.waitBudget(e)
		out, _, err := b.pollWait(ctx, nil, locked, budget, e, gen, kernel)
		if err != nil {
			return err
		}
		if out == pollHeld {
			if !ok {
				return ErrEndpointClosed
			}
			return nil
		}
		kernel = kernel && out == pollSpent
	}
	if kernel {
		out, err := b.sleepOnSources(ctx, nil, locked, e, gen)
		switch out {
		case sleepErr:
			return err
		case sleepHeld:
			if !ok {
				return ErrEndpointClosed
			}
			return nil
		}
	}
	b.mu.Lock()
	for {
		if cond() {
			b.unlockKick()
			return nil
		}
		if e.closed {
			b.unlockKick()
			return ErrEndpointClosed
		}
		e.evWaiters++
		ev, wake := e.ev, e.wake
		b.unlockKick()
		err := b.sleepOnChan(ctx, ev, wake)
		b.mu.Lock()
		e.evWaiters--
		if err != nil {
			if cond() {
				err = nil
			}
			b.unlockKick()
			return err
		}
	}
}

// HandlerResult is what an unexpected handler returns.
type HandlerResult int

const (
	// Continue: match again (the handler may have posted a receive), else
	// queue the message as unexpected.
	Continue HandlerResult = iota
	// Finished: the handler consumed the message; it is dropped (a large
	// message is answered with an empty notify so its sender completes).
	Finished
)

// UnexpectedMessage describes a message that matched no posted receive.
type UnexpectedMessage struct {
	Source Addr   // the sending endpoint
	Match  uint64 // the sender's match information
	Length uint32 // the whole message's length in bytes
	// Data is the whole payload when it arrived in one frame (tiny, small
	// or a one-fragment medium), else nil. It is valid only during the call.
	Data []byte
}

// UnexpectedHandler is called from the progress engine, without the
// endpoint lock held, for every message that matches no posted receive. It
// may post receives, but must not block or close the endpoint.
type UnexpectedHandler func(m UnexpectedMessage) HandlerResult

// SetUnexpectedHandler installs h (nil removes it).
func (e *Endpoint) SetUnexpectedHandler(h UnexpectedHandler) {
	if h != nil {
		e.b.handlers.Store(true) // sends stop serving the queue (rxsource.go)
	}
	e.b.mu.Lock()
	e.handler = h
	e.b.unlockKick()
}
