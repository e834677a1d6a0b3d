//go:build cabi && cgo

package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../include -O2 -Wall
#include "shim.h"
*/
import "C"

import (
	"context"
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
// address was made by; in bits 48-63, for an address mx_connect returned,
// the index + 1 of that endpoint's record of the peer (peers.go).

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
	if n == 1 && list != nil && list.segment_ptr != nil && list.segment_length != 0 && cap(segs) > 0 {
		// The common case, one segment in a reused slot: no loop and no
		// append.
		segs = segs[:1]
		segs[0] = unsafe.Slice((*byte)(list.segment_ptr), int(list.segment_length))
		return segs, mx.Success, nil
	}
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
	// The waiters are C threads: a completion handed over from a receive
	// loop costs a thread switch, so a blocking waiter sleeps on the
	// board's sources and receives itself (mx's sleep.go; GOMX_SLEEP=loop
	// turns it off).
	cfg.Options.SleepOnSources = true
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

// main is required by -buildmode=c-shared and never runs.
func main() {}
