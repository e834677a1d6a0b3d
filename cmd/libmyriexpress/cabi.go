//go:build cabi && cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../include -O2 -Wall
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gomx-dev/gomx/cmd/internal/mxenv"
	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// The library's process-wide state: the boards mx_init opened.
var lib struct {
	mu     sync.Mutex
	inited atomic.Bool
	boards []*mx.Board
	names  *mx.Names
}

// Return codes used here by name. MX's parameter errors (24-26) have no
// counterpart in package mx, which takes no parameter lists.
const (
	rcSuccess                 = C.int(mx.Success)
	badParamVal mx.ReturnCode = C.MX_BAD_PARAM_VAL
)

// setErr copies msg into the C side's GOMX_ERRLEN message buffer.
func setErr(errbuf *C.char, msg string) {
	if errbuf == nil {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(errbuf)), C.GOMX_ERRLEN)
	n := copy(b[:len(b)-1], msg)
	b[n] = 0
}

// fail reports err with code.
func fail(errbuf *C.char, code mx.ReturnCode, err error) C.int {
	setErr(errbuf, err.Error())
	return C.int(code)
}

// failErr reports err with the code MX would have returned for it.
func failErr(errbuf *C.char, err error) C.int {
	code := mx.ReturnCodeOf(err)
	if code == mx.Success {
		code = mx.Failure
	}
	return fail(errbuf, code, err)
}

// badEndpoint is the failure of a call given a handle that names no open
// endpoint.
func badEndpoint(errbuf *C.char, h C.uintptr_t) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	return fail(errbuf, mx.BadEndpoint, fmt.Errorf("endpoint handle %#x is not an open endpoint", uintptr(h)))
}

func badRequest(errbuf *C.char, h uintptr) C.int {
	return fail(errbuf, mx.BadRequest, fmt.Errorf("request handle %#x is not a request this process holds (completed, forgotten or never posted)", h))
}

// waitCtx returns the context of a wait of ms milliseconds (0: forever).
func waitCtx(ms C.uint32_t) (context.Context, context.CancelFunc) {
	if ms == 0 {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), time.Duration(ms)*time.Millisecond)
}

// ---- addresses ----
//
// An mx_endpoint_addr_t holds, in stuff[0], the peer's 48-bit NIC id and
// its endpoint id in bits 48-55; in stuff[1], the peer's session in the low
// 32 bits and the local endpoint's table index + 1 in bits 32-47, so that
// mx_set_endpoint_addr_context, which gets no endpoint, finds the one the
// address was made by.

const nicMask = 1<<48 - 1

func encodeAddr(a mx.Addr, e *endpoint) (C.uint64_t, C.uint64_t) {
	a0 := uint64(a.NIC)&nicMask | uint64(a.Endpoint)<<48
	a1 := uint64(a.Session)
	if e != nil {
		a1 |= uint64(e.idx+1) << 32
	}
	return C.uint64_t(a0), C.uint64_t(a1)
}

func putAddr(dst *C.mx_endpoint_addr_t, a mx.Addr, e *endpoint) {
	dst.stuff[0], dst.stuff[1] = encodeAddr(a, e)
}

func decodeAddr(a0, a1 C.uint64_t) (mx.Addr, *endpoint) {
	a := mx.Addr{NIC: transport.NICID(uint64(a0) & nicMask), Endpoint: uint8(a0 >> 48), Session: uint32(a1)}
	return a, endpointAt(int(uint16(a1>>32)) - 1)
}

// putStatus fills an mx_status_t from a completed request's status.
func putStatus(dst *C.mx_status_t, st *mx.Status, e *endpoint, uctx uintptr) {
	if dst == nil {
		return
	}
	dst.code = C.mx_status_code_t(mx.StatusCodeOf(st.Code))
	putAddr(&dst.source, st.Source, e)
	dst.match_info = C.uint64_t(st.Match)
	dst.msg_length = C.uint32_t(st.MsgLength)
	dst.xfer_length = C.uint32_t(st.XferLength)
	// The context is the application's pointer, kept as an integer here.
	*(*uintptr)(unsafe.Pointer(&dst.context)) = uctx
}

// segments appends the C segment list to segs as Go slices over the
// application's memory (C memory: mx may keep them until the request
// completes).
func segments(segs [][]byte, list *C.mx_segment_t, n C.uint32_t) ([][]byte, mx.ReturnCode, error) {
	if n == 0 {
		return segs, mx.Success, nil
	}
	if list == nil {
		return segs, mx.BadSegList, fmt.Errorf("segment list is NULL with %d segments", n)
	}
	if n > C.MX_MAX_SEGMENTS {
		return segs, mx.BadSegCnt, fmt.Errorf("%d segments, at most %d", n, C.MX_MAX_SEGMENTS)
	}
	for _, s := range unsafe.Slice(list, int(n)) {
		if s.segment_length == 0 {
			segs = append(segs, nil)
			continue
		}
		if s.segment_ptr == nil {
			return segs, mx.BadSegMem, fmt.Errorf("segment of %d bytes at NULL", s.segment_length)
		}
		segs = append(segs, unsafe.Slice((*byte)(s.segment_ptr), int(s.segment_length)))
	}
	return segs, mx.Success, nil
}

// ---- init ----

//export gomx_init
func gomx_init(api C.int, fatal *C.int, errbuf *C.char) C.int {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if lib.inited.Load() {
		return fail(errbuf, mx.AlreadyInitialized, errors.New("mx_init was already called"))
	}
	if api>>8 != C.MX_API>>8 {
		return fail(errbuf, mx.BadLibVersion, fmt.Errorf("program built for MX API %#x, this library implements %#x", int(api), C.MX_API))
	}
	cfg, err := mxenv.Load()
	if err != nil {
		return fail(errbuf, badParamVal, err)
	}
	if cfg.Fatal {
		*fatal = 1
	} else {
		*fatal = 0
	}
	names := mx.NewNames()
	bs, err := cfg.OpenBoards(names)
	if err != nil {
		return fail(errbuf, mx.NoDev, err)
	}
	lib.boards, lib.names = bs, names
	lib.inited.Store(true)
	return rcSuccess
}

//export gomx_finalize
func gomx_finalize(errbuf *C.char) C.int {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	for _, e := range allEndpoints() {
		e.ep.Close()
		dropEndpoint(e)
		freeSlotsOf(e)
	}
	mxenv.CloseBoards(lib.boards)
	lib.boards, lib.names = nil, nil
	lib.inited.Store(false)
	return rcSuccess
}

// ---- endpoints ----

//export gomx_open_endpoint
func gomx_open_endpoint(board, id, key C.uint32_t, ctxBits, ctxShift C.int, out *C.uintptr_t, errbuf *C.char) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	var ctxMask uint64
	if ctxBits > 0 {
		if ctxBits > C.MX_CONTEXT_ID_BITS_MAX || ctxShift < 0 || ctxBits+ctxShift > 64 {
			return fail(errbuf, badParamVal, fmt.Errorf("context id of %d bits at shift %d: want at most %d bits inside 64", int(ctxBits), int(ctxShift), C.MX_CONTEXT_ID_BITS_MAX))
		}
		ctxMask = (1<<uint(ctxBits) - 1) << uint(ctxShift)
	}
	b, eid := int(board), int(id)
	if board == C.MX_ANY_NIC {
		b = mx.AnyNIC
	}
	if id == C.MX_ANY_ENDPOINT {
		eid = mx.AnyEndpoint
	} else if id >= mx.MaxEndpoints {
		return fail(errbuf, mx.BadEndpointID, fmt.Errorf("endpoint id %d: want 0..%d or MX_ANY_ENDPOINT", uint32(id), mx.MaxEndpoints-1))
	}
	ep, err := mx.OpenEndpointOn(b, eid, uint32(key))
	if err != nil {
		return failErr(errbuf, err)
	}
	e, ok := addEndpoint(ep, uint32(key), ctxMask)
	if !ok {
		ep.Close()
		return fail(errbuf, mx.NoResources, fmt.Errorf("%d endpoints open in this process already", maxEndpoints))
	}
	*out = C.uintptr_t(e.handle)
	return rcSuccess
}

//export gomx_close_endpoint
func gomx_close_endpoint(h C.uintptr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if err := e.ep.Close(); err != nil {
		return failErr(errbuf, err)
	}
	dropEndpoint(e)
	freeSlotsOf(e)
	return rcSuccess
}

//export gomx_progress
func gomx_progress(h C.uintptr_t, errbuf *C.char) C.int {
	// Each board's progress goroutine runs all the time: nothing waits
	// for the application to call in.
	if endpointOf(uintptr(h)) == nil {
		return badEndpoint(errbuf, h)
	}
	return rcSuccess
}

//export gomx_wakeup
func gomx_wakeup(h C.uintptr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	e.ep.Wakeup()
	return rcSuccess
}

//export gomx_progression
func gomx_progression(h C.uintptr_t, on C.int, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if on == 0 {
		e.ep.DisableProgression()
		return rcSuccess
	}
	if err := e.ep.ReenableProgression(); err != nil {
		return failErr(errbuf, err)
	}
	return rcSuccess
}

//export gomx_get_endpoint_addr
func gomx_get_endpoint_addr(h C.uintptr_t, addr *C.mx_endpoint_addr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	putAddr(addr, e.ep.Addr(), e)
	return rcSuccess
}

// ---- communication ----

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
	dest, _ := decodeAddr(a0, a1)
	r, err := send(e, segs, dest, uint64(match), s, sync != 0)
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

//export gomx_iconnect
func gomx_iconnect(h C.uintptr_t, nic C.uint64_t, eid, key C.uint32_t, match C.uint64_t, uctx C.uintptr_t, out *C.uintptr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if eid >= mx.MaxEndpoints {
		return fail(errbuf, mx.BadEndpointID, fmt.Errorf("endpoint id %d: want 0..%d", uint32(eid), mx.MaxEndpoints-1))
	}
	s := newSlot(e, uintptr(uctx))
	if s == nil {
		return fail(errbuf, mx.NoResources, errors.New("too many requests held"))
	}
	r, err := e.ep.IConnect(transport.NICID(nic), uint8(eid), uint32(key), uint64(match), s)
	if err != nil {
		freeSlot(s, true)
		return failErr(errbuf, err)
	}
	*out = C.uintptr_t(s.handle)
	s.publish(r)
	return rcSuccess
}

//export gomx_connect
func gomx_connect(h C.uintptr_t, nic C.uint64_t, eid, key, timeout C.uint32_t, addr *C.mx_endpoint_addr_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if eid >= mx.MaxEndpoints {
		return fail(errbuf, mx.BadEndpointID, fmt.Errorf("endpoint id %d: want 0..%d", uint32(eid), mx.MaxEndpoints-1))
	}
	ctx, cancel := waitCtx(timeout)
	defer cancel()
	a, err := e.ep.Connect(ctx, transport.NICID(nic), uint8(eid), uint32(key))
	if err != nil {
		return failErr(errbuf, err)
	}
	putAddr(addr, a, e)
	return rcSuccess
}

//export gomx_disconnect
func gomx_disconnect(h C.uintptr_t, a0, a1 C.uint64_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	a, _ := decodeAddr(a0, a1)
	if err := e.ep.Disconnect(a); err != nil {
		return failErr(errbuf, err)
	}
	return rcSuccess
}

// ---- completion ----

// heldSlot returns the slot *req names for endpoint e.
func heldSlot(e *endpoint, req *C.uintptr_t) *slot {
	if req == nil {
		return nil
	}
	s := slotOf(uintptr(*req))
	if s == nil || s.e != e {
		return nil
	}
	return s
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
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	s := heldSlot(e, req)
	if s == nil {
		return badRequest(errbuf, uintptr(ptrOr0(req)))
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
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	s := heldSlot(e, req)
	if s == nil {
		return badRequest(errbuf, uintptr(ptrOr0(req)))
	}
	ctx, cancel := waitCtx(timeout)
	st, err := s.r.Wait(ctx)
	cancel()
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

//export gomx_ipeek
func gomx_ipeek(h C.uintptr_t, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	r, ok := e.ep.IPeek()
	return peeked(r, ok, nil, req, result, errbuf)
}

//export gomx_peek
func gomx_peek(h C.uintptr_t, timeout C.uint32_t, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	ctx, cancel := waitCtx(timeout)
	r, err := e.ep.Peek(ctx)
	cancel()
	return peeked(r, err == nil && r != nil, err, req, result, errbuf)
}

func peeked(r *mx.Request, ok bool, err error, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	if !ok {
		return waitEnded(err, result, errbuf)
	}
	s, _ := r.Context().(*slot)
	if s == nil {
		return waitEnded(err, result, errbuf)
	}
	*req = C.uintptr_t(s.handle)
	*result = 1
	return rcSuccess
}

//export gomx_iprobe
func gomx_iprobe(h C.uintptr_t, match, mask C.uint64_t, dst *C.mx_status_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if uint64(mask)&e.ctxMask != e.ctxMask {
		return fail(errbuf, mx.BadMatchingForContextIDMask, fmt.Errorf("mask %#x wildcards context id bits %#x", uint64(mask), e.ctxMask))
	}
	st, ok := e.ep.IProbe(uint64(match), uint64(mask))
	if !ok {
		*result = 0
		return rcSuccess
	}
	putStatus(dst, &st, e, 0)
	*result = 1
	return rcSuccess
}

//export gomx_probe
func gomx_probe(h C.uintptr_t, timeout C.uint32_t, match, mask C.uint64_t, dst *C.mx_status_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if uint64(mask)&e.ctxMask != e.ctxMask {
		return fail(errbuf, mx.BadMatchingForContextIDMask, fmt.Errorf("mask %#x wildcards context id bits %#x", uint64(mask), e.ctxMask))
	}
	ctx, cancel := waitCtx(timeout)
	st, err := e.ep.Probe(ctx, uint64(match), uint64(mask))
	cancel()
	if err != nil {
		return waitEnded(err, result, errbuf)
	}
	putStatus(dst, &st, e, 0)
	*result = 1
	return rcSuccess
}

//export gomx_cancel
func gomx_cancel(h C.uintptr_t, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	s := heldSlot(e, req)
	if s == nil {
		return badRequest(errbuf, uintptr(ptrOr0(req)))
	}
	ok, err := e.ep.Cancel(s.r)
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
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	s := heldSlot(e, req)
	if s == nil {
		return badRequest(errbuf, uintptr(ptrOr0(req)))
	}
	s.r.Forget()
	freeSlot(s, false) // mx may still read or write the segments
	*req = 0
	return rcSuccess
}

//export gomx_ibuffered
func gomx_ibuffered(h C.uintptr_t, req *C.uintptr_t, result *C.uint32_t, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	s := heldSlot(e, req)
	if s == nil {
		return badRequest(errbuf, uintptr(ptrOr0(req)))
	}
	ok, err := e.ep.IBuffered(s.r)
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

// ---- address contexts ----

//export gomx_set_addr_context
func gomx_set_addr_context(a0, a1 C.uint64_t, uctx C.uintptr_t, errbuf *C.char) C.int {
	a, e := decodeAddr(a0, a1)
	if e == nil {
		return fail(errbuf, mx.BadEndpoint, errors.New("the address belongs to no open endpoint"))
	}
	if err := e.ep.SetAddrContext(a, uintptr(uctx)); err != nil {
		return failErr(errbuf, err)
	}
	return rcSuccess
}

//export gomx_get_addr_context
func gomx_get_addr_context(a0, a1 C.uint64_t, uctx *C.uintptr_t, errbuf *C.char) C.int {
	a, e := decodeAddr(a0, a1)
	if e == nil {
		return fail(errbuf, mx.BadEndpoint, errors.New("the address belongs to no open endpoint"))
	}
	v, err := e.ep.AddrContext(a)
	if err != nil {
		return failErr(errbuf, err)
	}
	p, _ := v.(uintptr)
	*uctx = C.uintptr_t(p)
	return rcSuccess
}

// ---- the unexpected handler ----

//export gomx_register_unexp
func gomx_register_unexp(h, fn, uctx C.uintptr_t, deprecated C.int, errbuf *C.char) C.int {
	e := endpointOf(uintptr(h))
	if e == nil {
		return badEndpoint(errbuf, h)
	}
	if fn == 0 {
		e.ep.SetUnexpectedHandler(nil)
		return rcSuccess
	}
	e.ep.SetUnexpectedHandler(func(m mx.UnexpectedMessage) mx.HandlerResult {
		a0, a1 := encodeAddr(m.Source, e)
		var data unsafe.Pointer
		if len(m.Data) > 0 {
			data = unsafe.Pointer(&m.Data[0])
		}
		// The handler runs on this goroutine's thread, in C, without
		// the board's lock; it may call back in to post receives.
		act := C.gomx_call_unexp(fn, uctx, a0, a1, C.uint64_t(m.Match), C.uint32_t(m.Length), data, deprecated)
		if act == C.MX_RECV_FINISHED {
			return mx.Finished
		}
		return mx.Continue
	})
	return rcSuccess
}

// ---- boards, names, info ----

//export gomx_hostname_to_nic_id
func gomx_hostname_to_nic_id(name *C.char, nic *C.uint64_t, errbuf *C.char) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	s := C.GoString(name)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := lib.names.HostnameToNICID(ctx, s)
	if err != nil {
		return fail(errbuf, mx.HostNotFound, fmt.Errorf("%q: %w (gomx names a peer board by its UDP address, host:port, or by this process's own board names)", s, err))
	}
	*nic = C.uint64_t(id)
	return rcSuccess
}

//export gomx_nic_id_to_hostname
func gomx_nic_id_to_hostname(nic C.uint64_t, out *C.char, errbuf *C.char) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	id := transport.NICID(nic)
	name, err := lib.names.NICIDToHostname(id)
	if err != nil {
		// A peer's UDP board is named by its address, which
		// mx_hostname_to_nic_id takes back.
		if ap := id.UDPAddr(); ap.Addr().Is4() && ap.Port() != 0 {
			name = ap.String()
		} else {
			return fail(errbuf, mx.NICNotFound, fmt.Errorf("NIC id %v: no name known", id))
		}
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(out)), C.MX_MAX_HOSTNAME_LEN)
	n := copy(b[:len(b)-1], name)
	b[n] = 0
	return rcSuccess
}

//export gomx_board_number_to_nic_id
func gomx_board_number_to_nic_id(board C.uint32_t, nic *C.uint64_t, errbuf *C.char) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	id, err := mx.BoardNumberToNICID(int(board))
	if err != nil {
		return failErr(errbuf, err)
	}
	*nic = C.uint64_t(id)
	return rcSuccess
}

//export gomx_nic_id_to_board_number
func gomx_nic_id_to_board_number(nic C.uint64_t, board *C.uint32_t, errbuf *C.char) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	n, err := mx.NICIDToBoardNumber(transport.NICID(nic))
	if err != nil {
		return fail(errbuf, mx.NICNotFound, err)
	}
	*board = C.uint32_t(n)
	return rcSuccess
}

// boardCounters sums the counters of board n's open endpoints and the
// board's own (frames that reached no endpoint).
func boardCounters(n int) (mx.Counters, error) {
	nic, err := mx.BoardNumberToNICID(n)
	if err != nil {
		return mx.Counters{}, err
	}
	var sum mx.Counters
	for _, b := range lib.boards {
		if b.NICID() == nic {
			sum = b.Counters()
		}
	}
	for _, e := range allEndpoints() {
		if e.ep.Board().NICID() == nic {
			c := e.ep.Counters()
			for i := range sum {
				sum[i] += c[i]
			}
		}
	}
	return sum, nil
}

//export gomx_get_info
func gomx_get_info(h C.uintptr_t, key C.int, in unsafe.Pointer, inLen C.uint32_t, out unsafe.Pointer, outLen C.uint32_t, errbuf *C.char) C.int {
	if !lib.inited.Load() {
		return fail(errbuf, mx.NotInitialized, errors.New("mx_init has not been called"))
	}
	var e *endpoint
	if h != 0 {
		if e = endpointOf(uintptr(h)); e == nil {
			return badEndpoint(errbuf, h)
		}
	}
	if out == nil {
		return fail(errbuf, mx.BadInfoVal, errors.New("mx_get_info: out_val is NULL"))
	}
	o := unsafe.Slice((*byte)(out), int(outLen))
	need := func(n int) C.int {
		if len(o) < n {
			return fail(errbuf, mx.BadInfoLength, fmt.Errorf("mx_get_info key %d: out_len %d, want at least %d", int(key), len(o), n))
		}
		return rcSuccess
	}
	u32 := func(v uint32) C.int {
		if rc := need(4); rc != rcSuccess {
			return rc
		}
		binary.NativeEndian.PutUint32(o, v)
		return rcSuccess
	}
	str := func(s string) C.int {
		if rc := need(1); rc != rcSuccess {
			return rc
		}
		n := copy(o[:len(o)-1], s)
		o[n] = 0
		return rcSuccess
	}
	board := func() (int, C.int) { // the board in_val names (uint32), else board 0
		if in != nil && inLen >= 4 {
			return int(*(*uint32)(in)), rcSuccess
		}
		if e != nil {
			if n, err := mx.NICIDToBoardNumber(e.ep.Board().NICID()); err == nil {
				return n, rcSuccess
			}
		}
		return 0, rcSuccess
	}
	switch key {
	case C.MX_NIC_COUNT:
		return u32(uint32(mx.GetInfo().NICCount))
	case C.MX_NIC_IDS:
		ids := mx.GetInfo().NICIDs
		if rc := need(8 * (len(ids) + 1)); rc != rcSuccess {
			return rc
		}
		for i, id := range ids {
			binary.NativeEndian.PutUint64(o[8*i:], uint64(id))
		}
		binary.NativeEndian.PutUint64(o[8*len(ids):], 0)
		return rcSuccess
	case C.MX_MAX_NATIVE_ENDPOINTS:
		return u32(mx.MaxEndpoints)
	case C.MX_NATIVE_REQUESTS:
		return u32(slotChunk * slotChunks)
	case C.MX_COUNTERS_COUNT:
		return u32(uint32(mx.NumCounters))
	case C.MX_COUNTERS_LABELS:
		if rc := need(mx.NumCounters * C.MX_MAX_STR_LEN); rc != rcSuccess {
			return rc
		}
		for i := range mx.NumCounters {
			l := o[i*C.MX_MAX_STR_LEN : (i+1)*C.MX_MAX_STR_LEN]
			n := copy(l[:len(l)-1], mx.Counter(i).String())
			clear(l[n:])
		}
		return rcSuccess
	case C.MX_COUNTERS_VALUES:
		n, _ := board()
		c, err := boardCounters(n)
		if err != nil {
			return failErr(errbuf, err)
		}
		if rc := need(4 * mx.NumCounters); rc != rcSuccess {
			return rc
		}
		for i, v := range c {
			binary.NativeEndian.PutUint32(o[4*i:], uint32(min(v, 0xFFFFFFFF)))
		}
		return rcSuccess
	case C.MX_PRODUCT_CODE, C.MX_PART_NUMBER, C.MX_SERIAL_NUMBER:
		return str("N/A (gomx)")
	case C.MX_PORT_COUNT:
		return u32(1)
	case C.MX_PIO_SEND_MAX:
		return u32(128)
	case C.MX_COPY_SEND_MAX:
		n, _ := board()
		if n < 0 || n >= len(lib.boards) {
			return fail(errbuf, mx.BoardUnknown, fmt.Errorf("board %d of %d", n, len(lib.boards)))
		}
		return u32(uint32(lib.boards[n].RendezvousThreshold()))
	case C.MX_NUMA_NODE:
		return u32(0xFFFFFFFF) // a UDP board is attached to no one device
	case C.MX_NET_TYPE:
		return u32(C.MX_NET_ETHER)
	case C.MX_LINE_SPEED:
		return u32(C.MX_SPEED_OPEN_MX)
	}
	return fail(errbuf, mx.BadInfoKey, fmt.Errorf("mx_get_info: unknown key %d", int(key)))
}

// main is required by -buildmode=c-shared and never runs.
func main() {}
