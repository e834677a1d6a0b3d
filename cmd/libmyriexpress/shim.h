/*
 * The seam between the C API (shim.c) and its Go implementation
 * (cabi.go): shim.c defines every mx_* function with MX's exact signature
 * and calls the gomx_* functions Go exports, passing handles and
 * integers only; Go calls back into C only through gomx_call_unexp.
 */
#ifndef GOMX_SHIM_H
#define GOMX_SHIM_H

#include <stddef.h>
#include <stdint.h>
#include "myriexpress.h"
#include "mx_extensions.h"

/* Size of the message buffer a failing gomx_* call fills. */
#define GOMX_ERRLEN 256

/* Calls the application's unexpected handler (or, for the deprecated
 * callback, cb with its arguments) and returns its action. */
int gomx_call_unexp(uintptr_t fn, uintptr_t ctx, uint64_t a0, uint64_t a1, uint64_t match,
		    uint32_t length, void *data, int deprecated);

/* Nonzero while this thread runs an unexpected handler: blocking calls
 * and closing fail there (shim.c, omx.c). Every blocking call reads it,
 * so it is in the static TLS block (initial-exec, one load from %fs)
 * rather than found through __tls_get_addr; the Go runtime's own TLS in
 * this library is initial-exec too, so a dlopen already relies on the
 * static TLS space glibc keeps for such libraries. */
#define GOMX_TLS __thread __attribute__((tls_model("initial-exec")))
extern GOMX_TLS int gomx_in_handler;

/* The endpoint table index of a handle (handles.go), or -1. */
#define GOMX_MAX_EPS 4096 /* maxEndpoints in handles.go */
static inline int gomx_ep_index(uintptr_t h)
{
	int i = (int)(h & 0xffff) - 1;
	return (i >= 0 && i < GOMX_MAX_EPS) ? i : -1;
}

/* done.c: the calls on requests, answering in C for requests that
 * completed before their post returned and calling the gomx_* function
 * of the same name otherwise. shim.c and omx.c call these. */
int gomxc_isend(uintptr_t ep, mx_segment_t *segs, uint32_t n, uint64_t a0, uint64_t a1, uint64_t match,
		uintptr_t uctx, int sync, uintptr_t *out, char *errbuf);
int gomxc_irecv(uintptr_t ep, mx_segment_t *segs, uint32_t n, uint64_t match, uint64_t mask, uintptr_t uctx,
		uintptr_t *out, char *errbuf);
int gomxc_test(uintptr_t ep, uintptr_t *req, mx_status_t *st, uint32_t *result, char *errbuf);
int gomxc_wait(uintptr_t ep, uintptr_t *req, uint32_t timeout, mx_status_t *st, uint32_t *result, char *errbuf);
int gomxc_test_any(uintptr_t ep, uint64_t match, uint64_t mask, mx_status_t *st, uint32_t *result, char *errbuf);
int gomxc_wait_any(uintptr_t ep, uint32_t timeout, uint64_t match, uint64_t mask, mx_status_t *st,
		   uint32_t *result, char *errbuf);
int gomxc_ipeek(uintptr_t ep, uintptr_t *req, uint32_t *result, char *errbuf);
int gomxc_peek(uintptr_t ep, uint32_t timeout, uintptr_t *req, uint32_t *result, char *errbuf);
int gomxc_cancel(uintptr_t ep, uintptr_t *req, uint32_t *result, char *errbuf);
int gomxc_forget(uintptr_t ep, uintptr_t *req, char *errbuf);
int gomxc_ibuffered(uintptr_t ep, uintptr_t *req, uint32_t *result, char *errbuf);
int gomxc_context(uintptr_t *req, uintptr_t *uctx, char *errbuf);
int gomxc_set_request_timeout(uintptr_t ep, uintptr_t req, uint32_t ms, char *errbuf);
/* Releases the records of endpoint ep's requests (every endpoint's when ep
 * is 0), once the endpoint is closed. */
void gomxc_drop_endpoint(uintptr_t ep);

#endif
