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

#endif
