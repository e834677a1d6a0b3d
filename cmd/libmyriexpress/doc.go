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
// # One place for a request's state
//
// A request's completion lives in mx alone: every call on a request
// crosses into Go (a cgo callback, some 70-130 ns of the runtime's) and
// asks mx. The C half keeps no copy of any request's state, so the
// any-calls (test_any, wait_any, peek) and the calls on one request see
// the same completions in the same order, whatever threads make them.
// What decides a ping-pong's latency is the responder's turnaround (its
// wait returning to C, its send entering Go), which the C program's own
// calls put on the critical path; docs/c-api.md measures it.
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
//
// # Building and testing
//
// The library's files are built only with the cabi tag and cgo, so that a
// plain `go build ./...` or `go test ./...` needs no C compiler; without
// them the package holds this documentation and a main (nocabi.go) that
// says how to build the library. `make
// libmyriexpress` builds the library (go build -tags cabi
// -buildmode=c-shared, with the version script); `make test-cabi` runs
// its Go tests (go test -tags cabi -race ./cmd/libmyriexpress/) and the C
// programs against it (testdata/run.sh).
package main
