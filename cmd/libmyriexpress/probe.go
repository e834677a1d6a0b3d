//go:build cabi && cgo

package main

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gomx-dev/gomx/mx"
)

// Looking without receiving: peek, probe and the unexpected handler.

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
