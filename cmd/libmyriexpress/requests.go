//go:build cabi && cgo

package main

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomx-dev/gomx/mx"
)

// Requests: posting sends and receives, and completing them (test,
// wait, the any forms, cancel, forget, contexts, timeouts).

// ---- communication ----

// gomx_isend and gomx_irecv post a request and give the application its
// slot's handle.

//export gomx_isend
func gomx_isend(h C.uintptr_t, list *C.mx_segment_t, n C.uint32_t, a0, a1, match C.uint64_t, uctx C.uintptr_t, sync C.int, out *C.uintptr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	s := newSlot(e, uintptr(uctx))
	if s == nil {
		return fail(errbuf, mx.NoResources, errors.New("too many requests held"))
	}
	segs, code, err := segments(s.segs, list, n)
	s.segs = segs
	if err != nil {
		freeSlot(s, true)
		return fail(errbuf, code, err)
	}
	dest := destOf(e, a0, a1)
	// The first try calls mx directly: a call through send, on the way
	// to the ring, cost a frame and the arguments' copies.
	var r *mx.Request
	if sync == 0 {
		r, err = e.ep.ISend(segs, dest, uint64(match), s)
	} else {
		r, err = e.ep.ISSend(segs, dest, uint64(match), s)
	}
	if err != nil && errors.Is(err, mx.ErrBadEndpoint) && dest == e.ep.Addr() {
		// A send to the endpoint's own address, which MX allows
		// without a connect: connect to itself once, then send.
		if err = e.connectSelf(); err == nil {
			r, err = send(e, segs, dest, uint64(match), s, sync != 0)
		}
	}
	if err != nil {
		freeSlot(s, true)
		return failErr(errbuf, err)
	}
	*out = C.uintptr_t(s.handle)
	s.publish(r)
	return rcSuccess
}

func send(e *endpoint, segs [][]byte, dest mx.Addr, match uint64, s *slot, sync bool) (*mx.Request, error) {
	if sync {
		return e.ep.ISSend(segs, dest, match, s)
	}
	return e.ep.ISend(segs, dest, match, s)
}

// connectSelf connects e to itself, once.
func (e *endpoint) connectSelf() error {
	e.selfOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a := e.ep.Addr()
		_, e.selfErr = e.ep.Connect(ctx, a.NIC, a.Endpoint, e.key)
	})
	return e.selfErr
}

//export gomx_irecv
func gomx_irecv(h C.uintptr_t, list *C.mx_segment_t, n C.uint32_t, match, mask C.uint64_t, uctx C.uintptr_t, out *C.uintptr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if uint64(mask)&e.ctxMask != e.ctxMask {
		return fail(errbuf, mx.BadMatchingForContextIDMask, fmt.Errorf("mask %#x wildcards context id bits %#x", uint64(mask), e.ctxMask))
	}
	s := newSlot(e, uintptr(uctx))
	if s == nil {
		return fail(errbuf, mx.NoResources, errors.New("too many requests held"))
	}
	segs, code, err := segments(s.segs, list, n)
	s.segs = segs
	if err != nil {
		freeSlot(s, true)
		return fail(errbuf, code, err)
	}
	r, err := e.ep.IRecv(segs, uint64(match), uint64(mask), s)
	if err != nil {
		freeSlot(s, true)
		return failErr(errbuf, err)
	}
	*out = C.uintptr_t(s.handle)
	s.publish(r)
	return rcSuccess
}

// ---- completion ----

// heldSlot returns the slot *req names on the open endpoint h, or nil and
// the failure MX returns when h names no open endpoint (MX_BAD_ENDPOINT,
// MX_NOT_INITIALIZED) or *req no request that endpoint holds
// (MX_BAD_REQUEST).
func heldSlot(h C.uintptr_t, req *C.uintptr_t, errbuf *C.char) (*slot, C.int) {
	e := endpointOf(uintptr(h))
	if e == nil {
		return nil, badEndpoint(errbuf, h)
	}
	var s *slot
	if req != nil {
		s = slotOf(uintptr(*req))
	}
	if s == nil || s.e != e {
		return nil, badRequest(errbuf, uintptr(ptrOr0(req)))
	}
	return s, rcSuccess
}

// complete reports a completed request: the status to the application,
// the slot back to the free list, the handle cleared.
func complete(s *slot, st *mx.Status, dst *C.mx_status_t, req *C.uintptr_t) {
	putStatus(dst, st, s.e, s.uctx)
	s.release()
	if req != nil {
		*req = 0
	}
}

//export gomx_test
func gomx_test(h C.uintptr_t, req *C.uintptr_t, dst *C.mx_status_t, result *C.uint32_t, errbuf *C.char) C.int {
	s, rc := heldSlot(h, req, errbuf)
	if s == nil {
		return rc
	}
	st, ok := s.r.Test()
	if !ok {
		*result = 0
		return rcSuccess
	}
	complete(s, &st, dst, req)
	*result = 1
	return rcSuccess
}

func ptrOr0(p *C.uintptr_t) C.uintptr_t {
	if p == nil {
		return 0
	}
	return *p
}

// waitEnded reports the end of a wait that did not complete anything:
// a timeout or a wakeup leave result 0 (MX_SUCCESS); anything else fails.
func waitEnded(err error, result *C.uint32_t, errbuf *C.char) C.int {
	*result = 0
	if err == nil || errors.Is(err, mx.ErrTimeout) || errors.Is(err, mx.ErrWokenUp) {
		return rcSuccess
	}
	return failErr(errbuf, err)
}

//export gomx_wait
func gomx_wait(h C.uintptr_t, req *C.uintptr_t, timeout C.uint32_t, dst *C.mx_status_t, result *C.uint32_t, errbuf *C.char) C.int {
	s, rc := heldSlot(h, req, errbuf)
	if s == nil {
		return rc
	}
	// A wait without a timeout, the common one, makes no context and
	// calls no cancel on its way out (the way to the reply's send).
	var st mx.Status
	var err error
	if timeout == 0 {
		st, err = s.r.Wait(context.Background())
	} else {
		ctx, cancel := waitCtx(timeout)
		st, err = s.r.Wait(ctx)
		cancel()
	}
	if slotOfStatus(&st) == nil {
		return waitEnded(err, result, errbuf)
	}
	complete(s, &st, dst, req)
	*result = 1
	return rcSuccess
}

//export gomx_test_any
func gomx_test_any(h C.uintptr_t, match, mask C.uint64_t, dst *C.mx_status_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	st, ok := e.ep.TestAny(uint64(match), uint64(mask))
	s := slotOfStatus(&st)
	if !ok || s == nil {
		*result = 0
		return rcSuccess
	}
	complete(s, &st, dst, nil)
	*result = 1
	return rcSuccess
}

//export gomx_wait_any
func gomx_wait_any(h C.uintptr_t, timeout C.uint32_t, match, mask C.uint64_t, dst *C.mx_status_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	ctx, cancel := waitCtx(timeout)
	st, err := e.ep.WaitAny(ctx, uint64(match), uint64(mask))
	cancel()
	s := slotOfStatus(&st)
	if s == nil {
		return waitEnded(err, result, errbuf)
	}
	complete(s, &st, dst, nil)
	*result = 1
	return rcSuccess
}

//export gomx_cancel
func gomx_cancel(h C.uintptr_t, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	s, rc := heldSlot(h, req, errbuf)
	if s == nil {
		return rc
	}
	ok, err := s.e.ep.Cancel(s.r)
	if err != nil {
		return failErr(errbuf, err)
	}
	if !ok {
		*result = 0
		return rcSuccess
	}
	// A cancelled request is released, as in MX: the application does
	// not test it.
	s.r.Test()
	freeSlot(s, true)
	*req = 0
	*result = 1
	return rcSuccess
}

//export gomx_forget
func gomx_forget(h C.uintptr_t, req *C.uintptr_t, errbuf *C.char) C.int {
	s, rc := heldSlot(h, req, errbuf)
	if s == nil {
		return rc
	}
	s.r.Forget()
	freeSlot(s, false) // mx may still read or write the segments
	*req = 0
	return rcSuccess
}

//export gomx_ibuffered
func gomx_ibuffered(h C.uintptr_t, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	s, rc := heldSlot(h, req, errbuf)
	if s == nil {
		return rc
	}
	ok, err := s.e.ep.IBuffered(s.r)
	if err != nil {
		return failErr(errbuf, err)
	}
	*result = 0
	if ok {
		*result = 1
	}
	return rcSuccess
}

//export gomx_context
func gomx_context(req *C.uintptr_t, uctx *C.uintptr_t, errbuf *C.char) C.int {
	if req == nil {
		return badRequest(errbuf, 0)
	}
	s := slotOf(uintptr(*req))
	if s == nil {
		return badRequest(errbuf, uintptr(*req))
	}
	*uctx = C.uintptr_t(s.uctx)
	return rcSuccess
}

//export gomx_set_request_timeout
func gomx_set_request_timeout(h, req C.uintptr_t, ms C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	var r *mx.Request
	if req != 0 {
		s := slotOf(uintptr(req))
		if s == nil || s.e != e {
			return badRequest(errbuf, uintptr(req))
		}
		r = s.r
	}
	if err := e.ep.SetRequestTimeout(r, time.Duration(ms)*time.Millisecond); err != nil {
		return failErr(errbuf, err)
	}
	return rcSuccess
}
