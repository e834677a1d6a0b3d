//go:build cabi && cgo

package main

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/gomx-dev/gomx/mx"
	"github.com/gomx-dev/gomx/transport"
)

// Converters and information: address contexts, NIC ids, hostnames,
// board numbers and get_info.

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
