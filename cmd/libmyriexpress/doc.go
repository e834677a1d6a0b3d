//go:build cabi && cgo

// Command libmyriexpress is gomx behind MX's C API: built with
// -buildmode=c-shared (make libmyriexpress), it is the shared library
// libopen-mx.so.0 (also libmyriexpress.so) that C, C++ and Fortran programs
// written for Myricom's MX or Open-MX link to, with the headers
// include/myriexpress.h and include/mx_extensions.h. docs/c-api.md is the
// user's guide; this is the design.
//
// # Two halves
//
// shim.c defines every function the headers declare, with MX's exact
// signature, and is the only code a program calls. Each function checks
// what only C can (NULL out-pointers, the unexpected handler's
// restrictions), calls one gomx_* function the Go half exports (cabi.go)
// with integers, handles and C pointers only, and turns a failure into a
// call of the error handler (MX_ERRORS_ARE_FATAL, MX_ERRORS_RETURN, the
// application's, or the endpoint's own from MX_PARAM_ERROR_HANDLER) with
// a message naming the call and the cause; the handler's return value is
// what the call returns. The Go half maps the call onto package mx and
// MX's return and status codes (mx.ReturnCodeOf, mx.StatusCodeOf). The
// linker version script (libmyriexpress.version) exports the mx_* symbols
// with Open-MX's versions (MX_0.9, MX_0.91, MX_0.92 on the symbols Open-MX
// versions, MX_0.0 on the others) and keeps everything else local: the Go
// runtime and the gomx_* seam are invisible to programs.
//
// # Handles, not pointers
//
// cgo forbids C from keeping Go pointers, so endpoints and requests cross
// as handles (handles.go): a table index plus a generation, stored in the
// pointer-sized mx_endpoint_t and mx_request_t. A request's record (slot)
// is the context of its mx.Request, so completions reported without the
// request (test_any, wait_any, peek) find their handle and the
// application's context pointer again. Lookups take no lock, and slots
// are taken and given back through a lock-free stack, so threads posting
// and completing at once do not serialize and no call allocates. Message
// buffers are the
// application's C memory: the Go half wraps them in slices that mx may keep
// until the request completes (C memory is not moved or collected), and
// never stores a Go pointer into C memory; the tests run the library built
// with GOEXPERIMENT=cgocheck2, which checks every such store. Endpoint
// addresses (mx_endpoint_addr_t, 16 bytes) carry the peer's NIC id,
// endpoint id and session, and the index of the local endpoint that made
// them, since mx_set_endpoint_addr_context takes no endpoint; one that
// mx_connect returned also carries the index of that endpoint's record of
// the peer (peers.go), so a send through it finds mx's partner without a
// map lookup, as a Go Addr from Connect does.
//
// # Requests completed in their post
//
// Each call into Go costs a cgo crossing (some 70-120 ns), so what C can
// answer alone it does (done.c). An eager send, and a receive whose message
// is already there, complete inside the post; the Go half then consumes
// the completion at once and writes the MX status into a record of C
// memory that shim.c lent it for the call, and the application gets a
// handle naming that record (bit 63 set). mx_test, mx_wait and the other
// calls on such a handle answer in C, so a ping-pong's wait for its send
// does not cross. Records are taken and given back with atomics in C (a
// free stack, one spare per thread); Go writes only the status, before
// the C side publishes the record. Any-calls (test_any, wait_any, peek)
// look at an endpoint's records first, oldest first; an endpoint's posts
// stop completing into records at its first any-call, so completions keep
// their order and a wait_any asleep in Go never misses one (done.c says
// how the switch is made safe against posts on other threads).
//
// # Threads and callbacks
//
// Every call runs on the caller's thread; a blocking wait blocks that
// thread in Go (polling shared memory first, as any mx wait does), and
// mx_wakeup from another thread ends it. The boards' progress goroutines
// run on the library's own threads, so nothing waits for the application
// to call in. The unexpected handler is called on such a thread, through
// gomx_call_unexp in shim.c, without the library's lock; it may post
// receives, and shim.c refuses blocking calls and mx_close_endpoint inside
// it (MX_CLOSE_IN_HANDLER).
//
// # Configuration
//
// mx_init opens the boards and options the environment names (package
// cmd/internal/mxenv: GOMX_BOARDS and Open-MX's OMX_* variables), the same
// ones cmd/omx_info lists.
package main
