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

#endif
