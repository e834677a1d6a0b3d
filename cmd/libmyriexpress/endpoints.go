//go:build cabi && cgo

package main

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// The endpoints and their connections: open, close, wakeup, progression,
// addresses, connect and disconnect.

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
	putConnected(addr, a, e)
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
