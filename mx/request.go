package mx

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gomx-dev/gomx/mx/internal/ilist"
	"github.com/gomx-dev/gomx/transport"
)

// Addr is the address of an endpoint: the board's NIC id, the endpoint id and
// the endpoint's session id (random at every open, so an Addr names one
// incarnation of an endpoint). Connect returns the Addr of a peer endpoint;
// receive statuses carry the sender's Addr in Source, and a reply may be
// sent to it without connecting back. Addr values are comparable.
type Addr struct {
	NIC      transport.NICID
	Endpoint uint8
	Session  uint32
	p        *partner // the local endpoint's record of this peer, if any
}

// String formats the address as nic:endpoint.
func (a Addr) String() string { return fmt.Sprintf("%v:%d", a.NIC, a.Endpoint) }

// Status describes a completed request.
type Status struct {
	// Code is nil on success, otherwise one of the package's errors
	// (ErrTruncated, ErrCancelled, ErrUnreachable, ErrBadKey, ...).
	Code error
	// Source is the peer: the sender for a receive, the destination for a
	// send, the connected endpoint for a connect.
	Source Addr
	// Match is the message's match information.
	Match uint64
	// MsgLength is the sender's message length.
	MsgLength uint32
	// XferLength is the number of bytes delivered: min(MsgLength, receive
	// buffer) for a receive, the bytes the receiver pulled for a large send,
	// and MsgLength for an eager send.
	XferLength uint32
	// Context is the value given when the request was posted.
	Context any
}

type reqKind uint8

const (
	kindSend reqKind = iota + 1
	kindRecv
	kindConnect
	kindNotify // internal: a NOTIFY being delivered reliably
)

type msgClass uint8

const (
	classTiny msgClass = iota
	classSmall
	classMedium
	classLarge
	classNotify
)

// Request is an outstanding operation: a send, a receive or a connect. It
// is completed by the stack's progress engine; the application learns about
// completion with Test, Wait, TestAny, WaitAny or Peek. Once a Test or Wait
// has reported completion (or Forget was called), the request is recycled by
// the endpoint and must not be used again, as in MX.
//
// One goroutine at a time may wait on a given request.
type Request struct {
	// reqHot is what a use of the request leaves behind on the paths of
	// an eager message (a lean send, a receive a lane record or the
	// short path fills), cleared for the next use (Board.recycle);
	// reqCold the rest, cleared only after a use that may have set it
	// (narrow false).
	reqHot

	// Links for the lists a request is on (package ilist): q for one
	// reqList (posted, unacked, waitq, connecting, resq, pullq), d for the
	// endpoint's doneList. A request is on no list when it is recycled,
	// and a list's Remove clears the node: nothing to clear.
	q, d ilist.Node[Request]
	// Kept for the next use, emptied: the backing array of segs
	// (segsBuf, its pointers cleared), the completion channel (ch,
	// drained), and a sequenced send's copy of its payload (buf, with
	// reqCold: a narrow use sets neither).
	segsBuf [][]byte
	ch      chan struct{}
	buf     []byte

	reqCold
}

// reqHot is the part of a Request's state for one use that every use
// may set: a recycled request is cleared by one store of its zero value.
// With the links, segsBuf and ch that follow it in Request it takes the
// request's first four cache lines (TestHotLines), all an eager
// message's request touches: spread over the six, they cost an 8-byte
// message through a lane two more lines each side, on a CPU that other
// ranks' turns share (an oversubscribed alltoall), where each is a miss.
type reqHot struct {
	done atomic.Bool // completed: status is final
	// engine counts the copy-engine copies in flight that fill it
	// (offload.go, pulloffload.go): its waiters step aside (poll.go).
	engine atomic.Int32
	// tested: the application has tested it (Test); an engine copy into
	// it is then finished by the Tests (enginereap.go).
	tested atomic.Bool

	kind      reqKind
	userHeld  bool // the application may still Test/Wait it
	protoHeld bool // the protocol still references it (unacked, region, pull)
	// kickHeld: isend still holds it between its kick and its clock
	// reading (stampAfterKick), when another goroutine may ack, complete
	// and consume it; maybeFree leaves it to stampAfterKick.
	kickHeld  bool
	forgotten bool
	signaled  bool     // complete sent on ch (maybeFree drains it)
	class     msgClass // send
	bulk      bool     // a large send over the transport, not rings (sleep.go)
	// narrow: nothing of reqCold was set in this use, so recycle clears
	// reqHot alone. Set by the paths whose uses are known to stay here:
	// a lean send (isend) and a receive a lane record or a short frame
	// filled (laneFast, recvShort); cleared by what could set reqCold
	// after them (complete's wokeAt, SetRequestTimeout).
	narrow  bool
	ep      *Endpoint
	length  uint32 // send
	waiters int32
	p       *partner // send
	match   uint64
	mask    uint64 // recv
	segs    [][]byte
	status  Status
}

// reqCold is the rest of a Request's state for one use: sequenced,
// large, notify and connect requests set it, as do complete (wokeAt,
// for a request with a sleeping waiter) and SetRequestTimeout on any
// send, both of which clear narrow. recycle clears it after every use
// not marked narrow, and leaves region at -1 (none).
type reqCold struct {
	zombie  bool  // an eager send completed before its ack
	acked   bool  // send
	nacked  bool  // a NACK_LIB came; the next one (after the resend it caused) fails it
	attempt uint8 // connect
	// notify (internal)
	nRegionID, nRegionSq uint8
	nFailed              uint8 // wire.NotifyPullFailed: the pull failed (largefail.go)
	seq                  uint16
	// toldRecv (connect) is the NextRecvSeq the latest attempt
	// announced: the peer numbers its sends from it once it replies.
	toldRecv  uint16
	pulled    uint32
	wokeAt    int64 // when complete woke a sleeping waiter (board clock): its wake-up is timed (descheduled.go)
	lastSend  int64
	firstSend int64 // when the request first went out: the unreachable verdict counts from it
	resends   int
	resendMax int // SetRequestTimeout: resends before failure; 0: the endpoint's
	// What the receiver's latest selective ack said of it (sack.go): the
	// fragments it holds, and those it shows lost (sent before a frame
	// the receiver holds, and missing: the holes to resend).
	sackHeld uint32
	sackLost uint32
	region   int // -1: none
	// recv
	pl   *pull
	rref rndvRef // a matched large receive waiting for a pull handle
	// connect
	key uint32
}

// reqList is a queue of requests linked through their q node: an
// endpoint's posted receives and the queues of sends and receives waiting
// for something, a partner's unacknowledged, waiting and connecting sends.
type reqList struct{ ilist.List[Request] }

func (l *reqList) push(r *Request)     { l.PushBack(&r.q, r) }
func (l *reqList) remove(r *Request)   { l.Remove(&r.q) }
func (l *reqList) pop() *Request       { return l.PopFront() }
func (l *reqList) has(r *Request) bool { return r.q.On(&l.List) }

// doneList is the endpoint's list of completed, unconsumed requests,
// linked through their d node.
type doneList struct{ ilist.List[Request] }

func (l *doneList) push(r *Request)   { l.PushBack(&r.d, r) }
func (l *doneList) remove(r *Request) { l.Remove(&r.d) }

// Context returns the context value given when the request was posted.
func (r *Request) Context() any { return r.status.Context }

// Done reports whether the request has completed, without looking for
// its message or consuming it: when it reports true, Test returns the
// final status at once. An eager send that went out at once (into a
// shared-memory ring, or within BoardOptions.ZombieSends) is done when
// ISend returns.
func (r *Request) Done() bool { return r != nil && r.done.Load() }

// Test reports whether the request has completed. If it has, it returns the
// final status and recycles the request. Status.Code tells success or
// failure. A request whose message already waits in shared memory
// completes in Test itself: it looks at the rings once when nobody else is
// receiving from them.
func (r *Request) Test() (st Status, ok bool) {
	if r == nil || r.ep == nil {
		return Status{}, false
	}
	b := r.ep.b
	if !r.done.Load() {
		if b.reaper != nil && !r.tested.Load() {
			// Only a board with a reaper reads it (offload.go): an
			// atomic store is a locked instruction.
			r.tested.Store(true)
		}
		if r.engine.Load() > 0 {
			b.reapTested() // enginereap.go
		}
		b.beginTest()
		for _, s := range b.waitSources() {
			b.testSource(s) // rxsource.go
		}
		b.endTest()
		if !r.done.Load() {
			return Status{}, false
		}
	}
	b.mu.Lock()
	ok = r.consumeLocked(&st)
	b.unlockKick()
	return st, ok
}

// Wait blocks until the request completes, ctx is done (ErrTimeout, wrapping
// the context's error) or the endpoint is woken up (ErrWokenUp) or closed.
// When the request completed, Wait returns its status and Status.Code as the
// error (nil on success; ErrTruncated for a truncated receive, ...), and the
// request is recycled. Otherwise the request stays pending and Wait returns
// a zero Status. Before it sleeps, the waiting goroutine polls the
// sources that cost no system call to look at (shared-memory rings, an
// AF_XDP socket) itself for its endpoint's poll window (between 0 and
// BoardOptions.SpinMax, tuned by how the endpoint's waits end; see
// Endpoint.SpinWindow), and a message found there completes the request
// without a wake-up; in busy-poll mode
// (BoardOptions.BusyPoll) it polls every source until the request
// completes.
func (r *Request) Wait(ctx context.Context) (st Status, err error) {
	if r == nil || r.ep == nil {
		return Status{}, ErrBadRequest
	}
	e := r.ep
	b := e.b
	if r.done.Load() {
		err = r.finish(&st) // not in the return: st could be read before the call
		return st, err
	}
	start, polled, handed := int64(-1), false, false
	gen := e.wakeGen.Load()
	srcs := b.waitSources()
	var w waiterReq
	if len(srcs) > 0 && (b.opts.BusyPoll || r.engine.Load() == 0) {
		// The first look (firstLook), made here rather than in pollWait,
		// whose setup (its deferred accounting, the budget) a message
		// already there does not need: in a ping-pong the reply is
		// mostly there at once. An adaptive waiter whose request waits
		// for the copy engine does not look (pollWait says so).
		w.r = r
		mixed := len(b.spinSrcs) > 0 && len(b.spinSrcs) < len(srcs)
		done, idle := b.firstLook(&w, srcs, mixed)
		if done {
			if w.ok {
				w.st.copyTo(&st) // consumed by the look
				return st, st.Code
			}
			err = r.finish(&st)
			return st, err
		}
		w.looked, w.idle = true, idle
	}
	// sleep.go; not for a large send over the transport, whose pull
	// requests come as a stream of frames the receive loop takes better
	// (see there). r.bulk was set when the posting goroutine posted r.
	kernel := !b.opts.BusyPoll && !r.bulk && b.canSleepOnSources()
	if b.opts.BusyPoll || len(srcs) > 0 {
		w.r = r
		out, t, err := b.pollWait(ctx, &w, nil, b.waitBudget(e), e, gen, kernel)
		if w.ok {
			// Consumed by the poll that completed it. Field by field:
			// w.st was just written so (copyTo).
			w.st.copyTo(&st)
			return st, st.Code
		}
		if err != nil {
			return Status{}, err
		}
		if out == pollHeld {
			err = r.finish(&st)
			return st, err
		}
		// A wait handed over to the receive loop (pollHandOver) did not
		// poll, but a message later than SpinMax says that polling would
		// not have caught it either: it halves the window
		// (spinGovernor.tune). An idle rank of a job whose ranks have
		// one P each hands over most of its waits, and its window
		// stayed at Spin, which a yielding board lifts to SpinMax
		// (waitBudget).
		start, polled, handed = t, out == pollSpent, out == pollHandOver
		kernel = kernel && polled
	}
	if kernel {
		// Sleep on the board's sources, receiving on this thread
		// (sleep.go).
		w := waiterReq{r: r}
		out, err := b.sleepOnSources(ctx, &w, nil, e, gen)
		switch {
		case w.ok:
			w.st.copyTo(&st)
			e.spin.tune(b, start, polled, handed)
			return st, st.Code
		case out == sleepErr:
			return Status{}, err
		case out == sleepHeld:
			e.spin.tune(b, start, polled, handed)
			err = r.finish(&st)
			return st, err
		}
	}
	b.mu.Lock()
	for !r.done.Load() {
		if !r.userHeld {
			b.unlockKick()
			return Status{}, ErrBadRequest
		}
		r.waiters++
		wake := e.wake
		b.unlockKick()
		err := b.sleepOnChan(ctx, r.ch, wake)
		b.mu.Lock()
		r.waiters--
		if r.wokeAt != 0 {
			// How long the machine took to run the woken waiter: the
			// peer's waiters wait as long (descheduled.go).
			descheduling.observe(b.clock() - r.wokeAt)
			r.wokeAt = 0
		}
		if err != nil && !r.done.Load() {
			b.unlockKick()
			return Status{}, err
		}
	}
	// It polled its window in vain and slept: when the message came
	// tells the endpoint's window how long to poll next time (as
	// haltpoll's block_ns, the time includes the wake-up).
	e.spin.tune(b, start, polled, handed)
	ok := r.consumeLocked(&st)
	b.unlockKick()
	if !ok {
		return Status{}, ErrBadRequest
	}
	return st, st.Code
}

// finish consumes the completed request into *st and returns its
// Status.Code, or ErrBadRequest when it was consumed already (*st is left
// alone then). The status goes straight into the caller's result: returned
// by value it was copied once more, with wide loads of the narrow stores
// that had just written it (a store-forwarding stall per Wait).
func (r *Request) finish(st *Status) error {
	b := r.ep.b
	b.mu.Lock()
	ok := r.consumeLocked(st)
	b.unlockKick()
	if !ok {
		return ErrBadRequest
	}
	return st.Code
}

// copyTo writes s into *d field by field. The request's status was just
// written so, by narrow stores (newSend, finishRecv, complete): a struct
// copy reads it with 16-byte loads, which the CPU cannot forward from
// those stores, and waits for them to reach the cache (perf annotate:
// half of consumeLocked's samples on its first load).
func (s *Status) copyTo(d *Status) {
	d.Code = s.Code
	d.Source.NIC = s.Source.NIC
	d.Source.Endpoint = s.Source.Endpoint
	d.Source.Session = s.Source.Session
	d.Source.p = s.Source.p
	d.Match = s.Match
	d.MsgLength = s.MsgLength
	d.XferLength = s.XferLength
	d.Context = s.Context
}

// consumeLocked hands the final status to the application, in *st, and
// recycles the request once the protocol is done with it. It writes *st
// only when it reports true. The status goes straight to the caller's
// variable: copied through return values it was copied three times per
// message.
func (r *Request) consumeLocked(st *Status) bool {
	if !r.done.Load() || !r.userHeld {
		return false
	}
	r.status.copyTo(st)
	r.ep.doneq.remove(r)
	r.userHeld = false
	if !r.protoHeld {
		// An eager send completed before its ack (a zombie) stays with
		// the protocol: no call to find that out.
		r.ep.b.maybeFree(r)
	}
	return true
}
