//go:build cabi && cgo

/*
 * Open-MX's native API (include/open-mx.h) over the same gomx_* calls the
 * MX API of shim.c makes: each omx_* function checks what only C can
 * check, calls the Go side with handles and integers, and translates what
 * differs between the two APIs: return and status codes (MX's values to
 * Open-MX's), timeouts (OMX_TIMEOUT_INFINITE is MX's 0, and Open-MX's 0
 * means "do not wait": the non-blocking call), buffer-and-length sends,
 * get_info's keys, and error handlers, which Open-MX keeps per endpoint
 * beside the process's. Open-MX's statuses and segments have MX's layout,
 * so the Go side fills them in place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "shim.h"
#include "open-mx.h"
#include "_cgo_export.h"

/* ---- codes ---- */

/* omx_code maps an MX return code to Open-MX's (its translation headers'
 * correspondence; codes Open-MX lacks become OMX_BAD_ERROR). */
static omx_return_t omx_code(int mx)
{
	switch (mx) {
	case MX_SUCCESS: return OMX_SUCCESS;
	case MX_ALREADY_INITIALIZED: return OMX_ALREADY_INITIALIZED;
	case MX_NOT_INITIALIZED: return OMX_NOT_INITIALIZED;
	case MX_NO_DEV: return OMX_NO_DEVICE_FILE;
	case MX_NO_DRIVER: return OMX_NO_DRIVER;
	case MX_NO_PERM: return OMX_ACCESS_DENIED;
	case MX_BOARD_UNKNOWN: return OMX_BOARD_NOT_FOUND;
	case MX_BAD_ENDPOINT: return OMX_BAD_ENDPOINT;
	case MX_BAD_SEG_LIST:
	case MX_BAD_SEG_MEM:
	case MX_BAD_SEG_CNT: return OMX_SEGMENTS_BAD_COUNT;
	case MX_BAD_REQUEST:
	case MX_REQUEST_PENDING:
	case MX_CANCEL_NOT_SUPPORTED: return OMX_BAD_REQUEST;
	case MX_BAD_MATCH_MASK: return OMX_BAD_MATCH_MASK;
	case MX_NO_RESOURCES: return OMX_NO_RESOURCES;
	case MX_BUSY: return OMX_BUSY;
	case MX_BAD_INFO_KEY: return OMX_BAD_INFO_KEY;
	case MX_BAD_INFO_VAL: return OMX_BAD_INFO_ADDRESS;
	case MX_BAD_NIC:
	case MX_NIC_NOT_FOUND: return OMX_NIC_ID_NOT_FOUND;
	case MX_BAD_PARAM_LIST: return OMX_ENDPOINT_PARAMS_BAD_LIST;
	case MX_BAD_PARAM_NAME: return OMX_ENDPOINT_PARAM_BAD_KEY;
	case MX_BAD_PARAM_VAL: return OMX_ENDPOINT_PARAM_BAD_VALUE;
	case MX_BAD_HOSTNAME_ARGS:
	case MX_HOST_NOT_FOUND: return OMX_PEER_NOT_FOUND;
	case MX_TIMEOUT: return OMX_TIMEOUT;
	case MX_BAD_ENDPOINT_ID: return OMX_REMOTE_ENDPOINT_BAD_ID;
	case MX_CONNECTION_FAILED: return OMX_REMOTE_ENDPOINT_CLOSED;
	case MX_BAD_CONNECTION_KEY: return OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY;
	case MX_BAD_INFO_LENGTH: return OMX_BAD_INFO_LENGTH;
	case MX_BAD_KERNEL_VERSION: return OMX_BAD_KERNEL_ABI;
	case MX_BAD_LIB_VERSION: return OMX_BAD_LIB_ABI;
	case MX_CLOSE_IN_HANDLER: return OMX_NOT_SUPPORTED_IN_HANDLER;
	case MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK: return OMX_BAD_MATCHING_FOR_CONTEXT_ID_MASK;
	default: return OMX_BAD_ERROR;
	}
}

/* omx_status_code maps an MX status code to Open-MX's. */
static omx_return_t omx_status_code(int mx)
{
	switch (mx) {
	case MX_STATUS_SUCCESS: return OMX_SUCCESS;
	case MX_STATUS_TIMEOUT: return OMX_TIMEOUT;
	case MX_STATUS_TRUNCATED: return OMX_MESSAGE_TRUNCATED;
	case MX_STATUS_CANCELLED: return OMX_CANCELLED;
	case MX_STATUS_ENDPOINT_CLOSED: return OMX_REMOTE_ENDPOINT_CLOSED;
	case MX_STATUS_ENDPOINT_UNREACHABLE: return OMX_REMOTE_ENDPOINT_UNREACHABLE;
	case MX_STATUS_BAD_SESSION: return OMX_REMOTE_ENDPOINT_BAD_SESSION;
	case MX_STATUS_BAD_KEY: return OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY;
	case MX_STATUS_BAD_ENDPOINT: return OMX_REMOTE_ENDPOINT_BAD_ID;
	case MX_STATUS_BAD_RDMAWIN: return OMX_REMOTE_RDMA_WINDOW_BAD_ID;
	case MX_STATUS_ABORTED: return OMX_MESSAGE_ABORTED;
	case MX_STATUS_NO_RESOURCES: return OMX_NO_RESOURCES;
	default: return OMX_BAD_ERROR;
	}
}

/* The statuses have one layout (open-mx.h, myriexpress.h). */
_Static_assert(sizeof(omx_status_t) == sizeof(mx_status_t), "status layouts differ");
_Static_assert(offsetof(omx_status_t, context) == offsetof(mx_status_t, context), "status layouts differ");
_Static_assert(sizeof(omx_seg_t) == sizeof(mx_segment_t), "segment layouts differ");
_Static_assert(sizeof(omx_endpoint_param_t) == sizeof(mx_param_t), "parameter layouts differ");

/* done translates a status the Go side filled, when the call reports one. */
static void done(omx_status_t *st, uint32_t *result)
{
	if (st != NULL && result != NULL && *result)
		st->code = omx_status_code((int)st->code);
}

/* mx_timeout: Open-MX's timeout as MX's (0: none). The callers handle
 * Open-MX's 0 with the non-blocking call. */
static uint32_t mx_timeout(uint32_t ms)
{
	return ms == OMX_TIMEOUT_INFINITE ? MX_INFINITE : ms;
}

/* ---- error handlers ---- */

static omx_return_t omx_errors_are_fatal(char *str, omx_return_t ret)
{
	fprintf(stderr, "libopen-mx: %s (%s); aborting (OMX_ERRORS_ARE_FATAL: set OMX_FATAL_ERRORS=0 or "
			"call omx_set_error_handler(NULL, OMX_ERRORS_RETURN) to handle errors)\n",
		str, omx_strerror(ret));
	fflush(stderr);
	abort();
	return ret;
}

static omx_return_t omx_errors_return(char *str, omx_return_t ret)
{
	(void)str;
	return ret;
}

const omx_error_handler_t OMX_ERRORS_ARE_FATAL = omx_errors_are_fatal;
const omx_error_handler_t OMX_ERRORS_RETURN = omx_errors_return;

/* The process's handler (omx_set_error_handler(NULL, ...), else the
 * default omx_init reads from the environment) and the endpoints' own. */
static omx_error_handler_t omx_global;
static int omx_global_set;
static omx_error_handler_t omx_ep_handlers[GOMX_MAX_EPS];
static pthread_mutex_t omx_mu = PTHREAD_MUTEX_INITIALIZER;

static omx_error_handler_t omx_handler_of(omx_endpoint_t ep)
{
	omx_error_handler_t h = NULL;
	int i = ep ? gomx_ep_index((uintptr_t)ep) : -1;
	pthread_mutex_lock(&omx_mu);
	if (i >= 0)
		h = omx_ep_handlers[i];
	if (h == NULL)
		h = omx_global;
	pthread_mutex_unlock(&omx_mu);
	return h ? h : OMX_ERRORS_ARE_FATAL;
}

/* omx_fail gives the handler of ep the failure of fn (code: Open-MX's). */
static omx_return_t omx_fail(omx_endpoint_t ep, const char *fn, omx_return_t code, const char *msg)
{
	char str[GOMX_ERRLEN + 64];
	snprintf(str, sizeof str, "%s: %s", fn, msg);
	return omx_handler_of(ep)(str, code);
}

/* OMX_CALL runs a gomx_* call given errbuf and returns its code as
 * Open-MX's, through the error handler when it failed. */
#define OMX_CALL(ep, fn, call)                                          \
	do {                                                            \
		char errbuf[GOMX_ERRLEN];                               \
		int rc_;                                                \
		errbuf[0] = 0;                                          \
		rc_ = (call);                                           \
		if (__builtin_expect(rc_ == MX_SUCCESS, 1))             \
			return OMX_SUCCESS;                             \
		return omx_fail(ep, fn, omx_code(rc_), errbuf);         \
	} while (0)

/* OMX_DONE is OMX_CALL for a call that fills a status and a result. */
#define OMX_DONE(ep, fn, call, st, result)                              \
	do {                                                            \
		char errbuf[GOMX_ERRLEN];                               \
		int rc_;                                                \
		errbuf[0] = 0;                                          \
		rc_ = (call);                                           \
		if (__builtin_expect(rc_ == MX_SUCCESS, 1)) {           \
			done(st, result);                               \
			return OMX_SUCCESS;                             \
		}                                                       \
		return omx_fail(ep, fn, omx_code(rc_), errbuf);         \
	} while (0)

#define OMX_NEED(ep, fn, cond, code, what)                    \
	do {                                                  \
		if (__builtin_expect(!(cond), 0))             \
			return omx_fail(ep, fn, code, what);  \
	} while (0)

#define OMX_NOT_IN_HANDLER(ep, fn)                                                 \
	OMX_NEED(ep, fn, !gomx_in_handler, OMX_NOT_SUPPORTED_IN_HANDLER,           \
		 "not allowed inside the unexpected handler (it must not block or close)")
#define OMX_NEED_RESULT(ep, fn) \
	OMX_NEED(ep, fn, result != NULL, OMX_BAD_INFO_ADDRESS, "result pointer is NULL")
#define OMX_NEED_REQUEST(ep, fn) \
	OMX_NEED(ep, fn, request != NULL, OMX_BAD_REQUEST, "request pointer is NULL")

#define EP(ep) ((uintptr_t)(ep))
#define REQ(r) ((uintptr_t *)(r))
#define MXST(st) ((mx_status_t *)(void *)(st))

/* ---- library ---- */

omx_return_t omx__init_api(int api)
{
	char errbuf[GOMX_ERRLEN];
	int fatal = 1;
	int rc = gomx_init(api, &fatal, errbuf);
	if (rc != MX_SUCCESS)
		return omx_fail(NULL, "omx_init", omx_code(rc), errbuf);
	pthread_mutex_lock(&omx_mu);
	if (!omx_global_set)
		omx_global = fatal ? OMX_ERRORS_ARE_FATAL : OMX_ERRORS_RETURN;
	pthread_mutex_unlock(&omx_mu);
	return OMX_SUCCESS;
}

omx_return_t omx_finalize(void)
{
	OMX_NOT_IN_HANDLER(NULL, "omx_finalize");
	OMX_CALL(NULL, "omx_finalize", gomx_finalize(errbuf));
}

omx_error_handler_t omx_set_error_handler(omx_endpoint_t ep, omx_error_handler_t handler)
{
	omx_error_handler_t old;
	int i = ep ? gomx_ep_index((uintptr_t)ep) : -1;
	pthread_mutex_lock(&omx_mu);
	if (i >= 0) {
		old = omx_ep_handlers[i] ? omx_ep_handlers[i] : (omx_global ? omx_global : OMX_ERRORS_ARE_FATAL);
		omx_ep_handlers[i] = handler;
	} else {
		old = omx_global ? omx_global : OMX_ERRORS_ARE_FATAL;
		omx_global = handler;
		omx_global_set = 1;
	}
	pthread_mutex_unlock(&omx_mu);
	return old;
}

/* ---- endpoints ---- */

omx_return_t omx_open_endpoint(uint32_t board_index, uint32_t endpoint_index, uint32_t key,
			       omx_endpoint_param_t *param_array, uint32_t param_count, omx_endpoint_t *epp)
{
	static const char fn[] = "omx_open_endpoint";
	char errbuf[GOMX_ERRLEN];
	omx_error_handler_t eh = NULL;
	int bits = 0, shift = 0, rc, i;
	uintptr_t h = 0;
	uint32_t p;

	OMX_NEED(NULL, fn, epp != NULL, OMX_BAD_INFO_ADDRESS, "endpoint pointer is NULL");
	OMX_NEED(NULL, fn, param_count == 0 || param_array != NULL, OMX_ENDPOINT_PARAMS_BAD_LIST,
		 "param_array is NULL with a non-zero param_count");
	for (p = 0; p < param_count; p++) {
		switch (param_array[p].key) {
		case OMX_ENDPOINT_PARAM_ERROR_HANDLER:
			eh = param_array[p].val.error_handler;
			break;
		case OMX_ENDPOINT_PARAM_UNEXP_QUEUE_MAX:
			break; /* bounded per board (docs/c-api.md) */
		case OMX_ENDPOINT_PARAM_CONTEXT_ID:
			bits = param_array[p].val.context_id.bits;
			shift = param_array[p].val.context_id.shift;
			break;
		default: {
			char msg[96];
			snprintf(msg, sizeof msg, "unknown parameter key %d", (int)param_array[p].key);
			return omx_fail(NULL, fn, OMX_ENDPOINT_PARAM_BAD_KEY, msg);
		}
		}
	}
	rc = gomx_open_endpoint(board_index, endpoint_index, key, bits, shift, &h, errbuf);
	if (rc != MX_SUCCESS)
		return omx_fail(NULL, fn, omx_code(rc), errbuf);
	i = gomx_ep_index(h);
	pthread_mutex_lock(&omx_mu);
	if (i >= 0)
		omx_ep_handlers[i] = eh;
	pthread_mutex_unlock(&omx_mu);
	*epp = (omx_endpoint_t)h;
	return OMX_SUCCESS;
}

omx_return_t omx_close_endpoint(omx_endpoint_t ep)
{
	char errbuf[GOMX_ERRLEN];
	int rc, i;
	OMX_NOT_IN_HANDLER(ep, "omx_close_endpoint");
	rc = gomx_close_endpoint(EP(ep), errbuf);
	if (rc != MX_SUCCESS)
		return omx_fail(ep, "omx_close_endpoint", omx_code(rc), errbuf);
	i = gomx_ep_index(EP(ep));
	pthread_mutex_lock(&omx_mu);
	if (i >= 0)
		omx_ep_handlers[i] = NULL;
	pthread_mutex_unlock(&omx_mu);
	return OMX_SUCCESS;
}

omx_return_t omx_wakeup(omx_endpoint_t ep)
{
	OMX_CALL(ep, "omx_wakeup", gomx_wakeup(EP(ep), errbuf));
}

omx_return_t omx_disable_progression(omx_endpoint_t ep)
{
	OMX_CALL(ep, "omx_disable_progression", gomx_progression(EP(ep), 0, errbuf));
}

omx_return_t omx_reenable_progression(omx_endpoint_t ep)
{
	OMX_CALL(ep, "omx_reenable_progression", gomx_progression(EP(ep), 1, errbuf));
}

omx_return_t omx_progress(omx_endpoint_t ep)
{
	OMX_CALL(ep, "omx_progress", gomx_progress(EP(ep), errbuf));
}

omx_return_t omx_get_endpoint_addr(omx_endpoint_t ep, omx_endpoint_addr_t *endpoint_addr)
{
	OMX_NEED(ep, "omx_get_endpoint_addr", endpoint_addr != NULL, OMX_BAD_INFO_ADDRESS, "address pointer is NULL");
	OMX_CALL(ep, "omx_get_endpoint_addr",
		 gomx_get_endpoint_addr(EP(ep), (mx_endpoint_addr_t *)(void *)endpoint_addr, errbuf));
}

/* ---- connections and addresses ---- */

omx_return_t omx_connect(omx_endpoint_t ep, uint64_t nic_id, uint32_t endpoint_id, uint32_t key, uint32_t timeout,
			 omx_endpoint_addr_t *addr)
{
	OMX_NOT_IN_HANDLER(ep, "omx_connect");
	OMX_NEED(ep, "omx_connect", addr != NULL, OMX_BAD_INFO_ADDRESS, "address pointer is NULL");
	/* A connect cannot be left half done: "do not wait" waits 1 ms. */
	OMX_CALL(ep, "omx_connect",
		 gomx_connect(EP(ep), nic_id, endpoint_id, key, timeout == 0 ? 1 : mx_timeout(timeout),
			      (mx_endpoint_addr_t *)(void *)addr, errbuf));
}

omx_return_t omx_iconnect(omx_endpoint_t ep, uint64_t nic_id, uint32_t endpoint_id, uint32_t key,
			  uint64_t match_info, void *context, omx_request_t *request)
{
	OMX_NEED_REQUEST(ep, "omx_iconnect");
	OMX_CALL(ep, "omx_iconnect",
		 gomx_iconnect(EP(ep), nic_id, endpoint_id, key, match_info, (uintptr_t)context, REQ(request), errbuf));
}

omx_return_t omx_disconnect(omx_endpoint_t ep, omx_endpoint_addr_t addr)
{
	OMX_CALL(ep, "omx_disconnect", gomx_disconnect(EP(ep), addr.data[0], addr.data[1], errbuf));
}

omx_return_t omx_decompose_endpoint_addr(omx_endpoint_addr_t endpoint_addr, uint64_t *nic_id, uint32_t *endpoint_id)
{
	uint32_t session;
	return omx_decompose_endpoint_addr_with_session(endpoint_addr, nic_id, endpoint_id, &session);
}

omx_return_t omx_decompose_endpoint_addr_with_session(omx_endpoint_addr_t endpoint_addr, uint64_t *nic_id,
						      uint32_t *endpoint_id, uint32_t *session_id)
{
	mx_endpoint_addr_t a;
	OMX_NEED(NULL, "omx_decompose_endpoint_addr", nic_id != NULL && endpoint_id != NULL && session_id != NULL,
		 OMX_BAD_INFO_ADDRESS, "nic_id, endpoint_id or session_id pointer is NULL");
	memcpy(&a, &endpoint_addr, sizeof a);
	return omx_code(mx_decompose_endpoint_addr2(a, nic_id, endpoint_id, session_id));
}

omx_return_t omx_set_endpoint_addr_context(omx_endpoint_addr_t endpoint_addr, void *context)
{
	OMX_CALL(NULL, "omx_set_endpoint_addr_context",
		 gomx_set_addr_context(endpoint_addr.data[0], endpoint_addr.data[1], (uintptr_t)context, errbuf));
}

omx_return_t omx_get_endpoint_addr_context(omx_endpoint_addr_t endpoint_addr, void **context)
{
	OMX_NEED(NULL, "omx_get_endpoint_addr_context", context != NULL, OMX_BAD_INFO_ADDRESS,
		 "context pointer is NULL");
	OMX_CALL(NULL, "omx_get_endpoint_addr_context",
		 gomx_get_addr_context(endpoint_addr.data[0], endpoint_addr.data[1], (uintptr_t *)context, errbuf));
}

/* ---- communication ---- */

static omx_return_t omx_send(const char *fn, omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg,
			     omx_endpoint_addr_t dest, uint64_t match_info, void *context, omx_request_t *request,
			     int sync)
{
	OMX_NEED_REQUEST(ep, fn);
	OMX_CALL(ep, fn,
		 gomx_isend(EP(ep), (mx_segment_t *)(void *)segs, nseg, dest.data[0], dest.data[1], match_info,
			    (uintptr_t)context, sync, REQ(request), errbuf));
}

/* one makes the single segment of a buffer-and-length call. */
static int one(omx_seg_t *seg, void *buffer, size_t length)
{
	seg->ptr = buffer;
	seg->len = (uint32_t)length;
	return length <= UINT32_MAX;
}

omx_return_t omx_isend(omx_endpoint_t ep, void *buffer, size_t length, omx_endpoint_addr_t dest,
		       uint64_t match_info, void *context, omx_request_t *request)
{
	omx_seg_t seg;
	OMX_NEED(ep, "omx_isend", one(&seg, buffer, length), OMX_SEGMENTS_BAD_COUNT, "length over 4 GiB");
	return omx_send("omx_isend", ep, &seg, 1, dest, match_info, context, request, 0);
}

omx_return_t omx_issend(omx_endpoint_t ep, void *buffer, size_t length, omx_endpoint_addr_t dest,
			uint64_t match_info, void *context, omx_request_t *request)
{
	omx_seg_t seg;
	OMX_NEED(ep, "omx_issend", one(&seg, buffer, length), OMX_SEGMENTS_BAD_COUNT, "length over 4 GiB");
	return omx_send("omx_issend", ep, &seg, 1, dest, match_info, context, request, 1);
}

omx_return_t omx_isendv(omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg, omx_endpoint_addr_t dest,
			uint64_t match_info, void *context, omx_request_t *request)
{
	return omx_send("omx_isendv", ep, segs, nseg, dest, match_info, context, request, 0);
}

omx_return_t omx_issendv(omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg, omx_endpoint_addr_t dest,
			 uint64_t match_info, void *context, omx_request_t *request)
{
	return omx_send("omx_issendv", ep, segs, nseg, dest, match_info, context, request, 1);
}

omx_return_t omx_irecvv(omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg, uint64_t match_info,
			uint64_t match_mask, void *context, omx_request_t *request)
{
	OMX_NEED_REQUEST(ep, "omx_irecv");
	OMX_CALL(ep, "omx_irecv",
		 gomx_irecv(EP(ep), (mx_segment_t *)(void *)segs, nseg, match_info, match_mask, (uintptr_t)context,
			    REQ(request), errbuf));
}

omx_return_t omx_irecv(omx_endpoint_t ep, void *buffer, size_t length, uint64_t match_info, uint64_t match_mask,
		       void *context, omx_request_t *request)
{
	omx_seg_t seg;
	OMX_NEED(ep, "omx_irecv", one(&seg, buffer, length), OMX_SEGMENTS_BAD_COUNT, "length over 4 GiB");
	return omx_irecvv(ep, &seg, 1, match_info, match_mask, context, request);
}

omx_return_t omx_context(omx_request_t *request, void **context)
{
	OMX_NEED(NULL, "omx_context", context != NULL, OMX_BAD_INFO_ADDRESS, "context pointer is NULL");
	OMX_CALL(NULL, "omx_context", gomx_context(REQ(request), (uintptr_t *)context, errbuf));
}

/* ---- completion ---- */

omx_return_t omx_test(omx_endpoint_t ep, omx_request_t *request, omx_status_t *status, uint32_t *result)
{
	OMX_NEED_RESULT(ep, "omx_test");
	OMX_NEED_REQUEST(ep, "omx_test");
	OMX_DONE(ep, "omx_test", gomx_test(EP(ep), REQ(request), MXST(status), result, errbuf), status, result);
}

omx_return_t omx_wait(omx_endpoint_t ep, omx_request_t *request, omx_status_t *status, uint32_t *result,
		      uint32_t timeout)
{
	if (timeout == 0)
		return omx_test(ep, request, status, result);
	OMX_NOT_IN_HANDLER(ep, "omx_wait");
	OMX_NEED_RESULT(ep, "omx_wait");
	OMX_NEED_REQUEST(ep, "omx_wait");
	OMX_DONE(ep, "omx_wait", gomx_wait(EP(ep), REQ(request), mx_timeout(timeout), MXST(status), result, errbuf),
		 status, result);
}

omx_return_t omx_test_any(omx_endpoint_t ep, uint64_t match_info, uint64_t match_mask, omx_status_t *status,
			  uint32_t *result)
{
	OMX_NEED_RESULT(ep, "omx_test_any");
	OMX_DONE(ep, "omx_test_any", gomx_test_any(EP(ep), match_info, match_mask, MXST(status), result, errbuf),
		 status, result);
}

omx_return_t omx_wait_any(omx_endpoint_t ep, uint64_t match_info, uint64_t match_mask, omx_status_t *status,
			  uint32_t *result, uint32_t timeout)
{
	if (timeout == 0)
		return omx_test_any(ep, match_info, match_mask, status, result);
	OMX_NOT_IN_HANDLER(ep, "omx_wait_any");
	OMX_NEED_RESULT(ep, "omx_wait_any");
	OMX_DONE(ep, "omx_wait_any",
		 gomx_wait_any(EP(ep), mx_timeout(timeout), match_info, match_mask, MXST(status), result, errbuf),
		 status, result);
}

omx_return_t omx_ipeek(omx_endpoint_t ep, omx_request_t *request, uint32_t *result)
{
	OMX_NEED_RESULT(ep, "omx_ipeek");
	OMX_NEED_REQUEST(ep, "omx_ipeek");
	OMX_CALL(ep, "omx_ipeek", gomx_ipeek(EP(ep), REQ(request), result, errbuf));
}

omx_return_t omx_peek(omx_endpoint_t ep, omx_request_t *request, uint32_t *result, uint32_t timeout)
{
	if (timeout == 0)
		return omx_ipeek(ep, request, result);
	OMX_NOT_IN_HANDLER(ep, "omx_peek");
	OMX_NEED_RESULT(ep, "omx_peek");
	OMX_NEED_REQUEST(ep, "omx_peek");
	OMX_CALL(ep, "omx_peek", gomx_peek(EP(ep), mx_timeout(timeout), REQ(request), result, errbuf));
}

omx_return_t omx_iprobe(omx_endpoint_t ep, uint64_t match_info, uint64_t match_mask, omx_status_t *status,
			uint32_t *result)
{
	OMX_NEED_RESULT(ep, "omx_iprobe");
	OMX_DONE(ep, "omx_iprobe", gomx_iprobe(EP(ep), match_info, match_mask, MXST(status), result, errbuf),
		 status, result);
}

omx_return_t omx_probe(omx_endpoint_t ep, uint64_t match_info, uint64_t match_mask, omx_status_t *status,
		       uint32_t *result, uint32_t timeout)
{
	if (timeout == 0)
		return omx_iprobe(ep, match_info, match_mask, status, result);
	OMX_NOT_IN_HANDLER(ep, "omx_probe");
	OMX_NEED_RESULT(ep, "omx_probe");
	OMX_DONE(ep, "omx_probe",
		 gomx_probe(EP(ep), mx_timeout(timeout), match_info, match_mask, MXST(status), result, errbuf),
		 status, result);
}

omx_return_t omx_ibuffered(omx_endpoint_t ep, omx_request_t *request, uint32_t *result)
{
	OMX_NEED_RESULT(ep, "omx_ibuffered");
	OMX_NEED_REQUEST(ep, "omx_ibuffered");
	OMX_CALL(ep, "omx_ibuffered", gomx_ibuffered(EP(ep), REQ(request), result, errbuf));
}

omx_return_t omx_cancel(omx_endpoint_t ep, omx_request_t *request, uint32_t *result)
{
	OMX_NEED_RESULT(ep, "omx_cancel");
	OMX_NEED_REQUEST(ep, "omx_cancel");
	OMX_CALL(ep, "omx_cancel", gomx_cancel(EP(ep), REQ(request), result, errbuf));
}

omx_return_t omx_forget(omx_endpoint_t ep, omx_request_t *request)
{
	OMX_NEED_REQUEST(ep, "omx_forget");
	OMX_CALL(ep, "omx_forget", gomx_forget(EP(ep), REQ(request), errbuf));
}

omx_return_t omx_set_request_timeout(omx_endpoint_t ep, omx_request_t request, uint32_t milliseconds)
{
	OMX_CALL(ep, "omx_set_request_timeout",
		 gomx_set_request_timeout(EP(ep), (uintptr_t)request, mx_timeout(milliseconds), errbuf));
}

omx_return_t omx_register_unexp_handler(omx_endpoint_t ep, omx_unexp_handler_t handler, void *context)
{
	/* Open-MX's handler has MX's signature and action values. */
	OMX_CALL(ep, "omx_register_unexp_handler",
		 gomx_register_unexp(EP(ep), (uintptr_t)handler, (uintptr_t)context, 0, errbuf));
}

/* ---- boards, names, info ---- */

omx_return_t omx_board_number_to_nic_id(uint32_t board_number, uint64_t *nic_id)
{
	OMX_NEED(NULL, "omx_board_number_to_nic_id", nic_id != NULL, OMX_BAD_INFO_ADDRESS, "nic_id pointer is NULL");
	OMX_CALL(NULL, "omx_board_number_to_nic_id", gomx_board_number_to_nic_id(board_number, nic_id, errbuf));
}

omx_return_t omx_nic_id_to_board_number(uint64_t nic_id, uint32_t *board_number)
{
	OMX_NEED(NULL, "omx_nic_id_to_board_number", board_number != NULL, OMX_BAD_INFO_ADDRESS,
		 "board_number pointer is NULL");
	OMX_CALL(NULL, "omx_nic_id_to_board_number", gomx_nic_id_to_board_number(nic_id, board_number, errbuf));
}

omx_return_t omx_hostname_to_nic_id(char *hostname, uint64_t *board_addr)
{
	OMX_NEED(NULL, "omx_hostname_to_nic_id", hostname != NULL && board_addr != NULL, OMX_BAD_INFO_ADDRESS,
		 "hostname or board_addr pointer is NULL");
	OMX_CALL(NULL, "omx_hostname_to_nic_id", gomx_hostname_to_nic_id(hostname, board_addr, errbuf));
}

omx_return_t omx_nic_id_to_hostname(uint64_t board_addr, char *hostname)
{
	OMX_NEED(NULL, "omx_nic_id_to_hostname", hostname != NULL, OMX_BAD_INFO_ADDRESS, "hostname pointer is NULL");
	OMX_CALL(NULL, "omx_nic_id_to_hostname", gomx_nic_id_to_hostname(board_addr, hostname, errbuf));
}

/* info_board: the board get_info's board keys name: ep's, else the index
 * at in_val. */
static omx_return_t info_board(omx_endpoint_t ep, const void *in_val, uint32_t in_len, uint32_t *board)
{
	if (ep != NULL) {
		char errbuf[GOMX_ERRLEN];
		mx_endpoint_addr_t a;
		uint64_t nic;
		uint32_t eid;
		int rc = gomx_get_endpoint_addr(EP(ep), &a, errbuf);
		if (rc == MX_SUCCESS) {
			mx_decompose_endpoint_addr(a, &nic, &eid);
			rc = gomx_nic_id_to_board_number(nic, board, errbuf);
		}
		return rc == MX_SUCCESS ? OMX_SUCCESS : omx_fail(ep, "omx_get_info", omx_code(rc), errbuf);
	}
	OMX_NEED(NULL, "omx_get_info", in_val != NULL, OMX_BAD_INFO_ADDRESS, "no endpoint and no board index at in_val");
	OMX_NEED(NULL, "omx_get_info", in_len >= 1, OMX_BAD_INFO_LENGTH, "board index of 0 bytes");
	*board = *(const uint8_t *)in_val;
	return OMX_SUCCESS;
}

#define OMX_GOMX_BOARD_MAX 16 /* mxenv.MaxBoards */

omx_return_t omx_get_info(omx_endpoint_t ep, omx_info_key_t key, const void *in_val, uint32_t in_len, void *out_val,
			  uint32_t out_len)
{
	static const char fn[] = "omx_get_info";
	char errbuf[GOMX_ERRLEN];
	uint32_t board = 0, n;
	uint64_t nic;
	omx_return_t ret;
	int rc = MX_SUCCESS;

	OMX_NEED(ep, fn, out_val != NULL, OMX_BAD_INFO_ADDRESS, "out_val is NULL");
	errbuf[0] = 0;
	switch (key) {
	case OMX_INFO_BOARD_MAX:
		OMX_NEED(ep, fn, out_len >= sizeof(uint32_t), OMX_BAD_INFO_LENGTH, "out_len below 4");
		*(uint32_t *)out_val = OMX_GOMX_BOARD_MAX;
		return OMX_SUCCESS;
	case OMX_INFO_ENDPOINT_MAX:
		rc = gomx_get_info(EP(ep), MX_MAX_NATIVE_ENDPOINTS, NULL, 0, out_val, out_len, errbuf);
		break;
	case OMX_INFO_BOARD_COUNT:
		rc = gomx_get_info(EP(ep), MX_NIC_COUNT, NULL, 0, out_val, out_len, errbuf);
		break;
	case OMX_INFO_BOARD_IDS:
		rc = gomx_get_info(EP(ep), MX_NIC_IDS, NULL, 0, out_val, out_len, errbuf);
		break;
	case OMX_INFO_BOARD_HOSTNAME:
	case OMX_INFO_BOARD_IFACENAME: {
		char name[MX_MAX_HOSTNAME_LEN];
		if ((ret = info_board(ep, in_val, in_len, &board)) != OMX_SUCCESS)
			return ret;
		rc = gomx_board_number_to_nic_id(board, &nic, errbuf);
		if (rc != MX_SUCCESS)
			break;
		if (key == OMX_INFO_BOARD_HOSTNAME) {
			rc = gomx_nic_id_to_hostname(nic, name, errbuf);
			if (rc != MX_SUCCESS)
				break;
		} else {
			/* The board's interface is its UDP socket. */
			snprintf(name, sizeof name, "udp:%u.%u.%u.%u:%u", (unsigned)(nic >> 40) & 0xff,
				 (unsigned)(nic >> 32) & 0xff, (unsigned)(nic >> 24) & 0xff,
				 (unsigned)(nic >> 16) & 0xff, (unsigned)nic & 0xffff);
		}
		if (out_len > 0) {
			strncpy(out_val, name, out_len);
			((char *)out_val)[out_len - 1] = 0;
		}
		return OMX_SUCCESS;
	}
	case OMX_INFO_BOARD_NUMA_NODE:
		if ((ret = info_board(ep, in_val, in_len, &board)) != OMX_SUCCESS)
			return ret;
		rc = gomx_get_info(0, MX_NUMA_NODE, &board, sizeof board, out_val, out_len, errbuf);
		break;
	case OMX_INFO_COUNTER_MAX:
		rc = gomx_get_info(0, MX_COUNTERS_COUNT, &board, sizeof board, out_val, out_len, errbuf);
		break;
	case OMX_INFO_COUNTER_VALUES:
		if ((ret = info_board(ep, in_val, in_len, &board)) != OMX_SUCCESS)
			return ret;
		rc = gomx_get_info(0, MX_COUNTERS_VALUES, &board, sizeof board, out_val, out_len, errbuf);
		break;
	case OMX_INFO_COUNTER_LABEL: {
		char *labels;
		uint32_t idx;
		OMX_NEED(ep, fn, in_val != NULL && in_len >= 1, OMX_BAD_INFO_ADDRESS, "no counter index at in_val");
		idx = *(const uint8_t *)in_val;
		rc = gomx_get_info(0, MX_COUNTERS_COUNT, &board, sizeof board, &n, sizeof n, errbuf);
		if (rc != MX_SUCCESS)
			break;
		OMX_NEED(ep, fn, idx < n, OMX_BAD_INFO_KEY, "counter index out of range (see OMX_INFO_COUNTER_MAX)");
		labels = calloc(n, MX_MAX_STR_LEN);
		OMX_NEED(ep, fn, labels != NULL, OMX_NO_SYSTEM_RESOURCES, "out of memory");
		rc = gomx_get_info(0, MX_COUNTERS_LABELS, &board, sizeof board, labels, n * MX_MAX_STR_LEN, errbuf);
		if (rc == MX_SUCCESS && out_len > 0) {
			strncpy(out_val, labels + (size_t)idx * MX_MAX_STR_LEN, out_len);
			((char *)out_val)[out_len - 1] = 0;
		}
		free(labels);
		break;
	}
	default: {
		char msg[64];
		snprintf(msg, sizeof msg, "unknown key %d", (int)key);
		return omx_fail(ep, fn, OMX_BAD_INFO_KEY, msg);
	}
	}
	if (rc != MX_SUCCESS)
		return omx_fail(ep, fn, omx_code(rc), errbuf);
	return OMX_SUCCESS;
}

/* ---- strings ---- */

const char *omx_strerror(omx_return_t ret)
{
	switch (ret) {
	case OMX_SUCCESS: return "Success";
	case OMX_BAD_ERROR: return "Internal error";
	case OMX_ALREADY_INITIALIZED: return "Already initialized";
	case OMX_NOT_INITIALIZED: return "Not initialized";
	case OMX_NO_DEVICE_FILE: return "No board could be opened";
	case OMX_NO_DRIVER: return "No transport";
	case OMX_ACCESS_DENIED: return "Access denied";
	case OMX_BOARD_NOT_FOUND: return "No such board";
	case OMX_BAD_ENDPOINT: return "Invalid endpoint";
	case OMX_SEGMENTS_BAD_COUNT: return "Invalid segment list or count";
	case OMX_BAD_REQUEST: return "Invalid request";
	case OMX_BAD_MATCH_MASK: return "Match info outside the match mask";
	case OMX_NO_RESOURCES: return "Out of resources";
	case OMX_BUSY: return "Endpoint id in use";
	case OMX_BAD_INFO_KEY: return "Invalid info key";
	case OMX_BAD_INFO_ADDRESS: return "Invalid info address";
	case OMX_ENDPOINT_PARAMS_BAD_LIST: return "Invalid endpoint parameter list";
	case OMX_ENDPOINT_PARAM_BAD_KEY: return "Invalid endpoint parameter key";
	case OMX_ENDPOINT_PARAM_BAD_VALUE: return "Invalid endpoint parameter value";
	case OMX_PEER_NOT_FOUND: return "Peer not found";
	case OMX_TIMEOUT: return "Timeout";
	case OMX_REMOTE_ENDPOINT_BAD_ID: return "Remote endpoint id out of range";
	case OMX_REMOTE_ENDPOINT_CLOSED: return "Remote endpoint closed";
	case OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY: return "Remote endpoint refused the connection key";
	case OMX_BAD_INFO_LENGTH: return "Info buffer too short";
	case OMX_NIC_ID_NOT_FOUND: return "NIC id not found";
	case OMX_BAD_KERNEL_ABI: return "Library and driver disagree";
	case OMX_BAD_LIB_ABI: return "Program and library disagree";
	case OMX_BAD_MATCHING_FOR_CONTEXT_ID_MASK: return "Match mask hides context id bits";
	case OMX_CANCELLED: return "Cancelled";
	case OMX_REMOTE_RDMA_WINDOW_BAD_ID: return "Remote RDMA window unknown";
	case OMX_REMOTE_ENDPOINT_UNREACHABLE: return "Remote endpoint unreachable";
	case OMX_REMOTE_ENDPOINT_BAD_SESSION: return "Remote endpoint reopened (bad session)";
	case OMX_MESSAGE_ABORTED: return "Message aborted";
	case OMX_MESSAGE_TRUNCATED: return "Message truncated";
	case OMX_NOT_SUPPORTED_IN_HANDLER: return "Not allowed in the unexpected handler";
	case OMX_NO_SYSTEM_RESOURCES: return "Out of system resources";
	case OMX_NOT_IMPLEMENTED: return "Not implemented";
	default: return "Unknown error code";
	}
}
