//go:build cabi && cgo

/*
 * The C side of libmyriexpress: every function myriexpress.h and
 * mx_extensions.h declare, with MX's exact signature. Each checks what
 * only C can check (NULL out-pointers, the handler restrictions), calls
 * the gomx_* function Go exports with handles and integers, and on
 * failure gives the error handler a message naming the call and the cause.
 * The error handlers and the unexpected handler are called here, on the
 * caller's thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include "shim.h"
#include "_cgo_export.h"


static mx_return_t errors_are_fatal(char *str, mx_return_t ret)
{
	fprintf(stderr, "libmyriexpress: %s (%s); aborting (MX_ERRORS_ARE_FATAL: set OMX_FATAL_ERRORS=0 or "
			"call mx_set_error_handler(MX_ERRORS_RETURN) to handle errors)\n",
		str, mx_strerror(ret));
	fflush(stderr);
	abort();
	return ret;
}

static mx_return_t errors_return(char *str, mx_return_t ret)
{
	(void)str;
	return ret;
}

const mx_error_handler_t MX_ERRORS_ARE_FATAL = errors_are_fatal;
const mx_error_handler_t MX_ERRORS_RETURN = errors_return;

/* The process's handler (set by mx_set_error_handler, else the default
 * mx_init reads from the environment) and the endpoints' own
 * (MX_PARAM_ERROR_HANDLER), by endpoint table index. */
static mx_error_handler_t global_handler;
static int handler_set;
static mx_error_handler_t ep_handlers[GOMX_MAX_EPS];
static pthread_mutex_t handler_mu = PTHREAD_MUTEX_INITIALIZER;

/* Nonzero while this thread runs an unexpected handler (shim.h). */
GOMX_TLS int gomx_in_handler;

static int ep_index(mx_endpoint_t ep)
{
	return gomx_ep_index((uintptr_t)ep);
}

static mx_error_handler_t handler_of(mx_endpoint_t ep)
{
	mx_error_handler_t h = NULL;
	int i = ep ? ep_index(ep) : -1;
	pthread_mutex_lock(&handler_mu);
	if (i >= 0)
		h = ep_handlers[i];
	if (h == NULL)
		h = global_handler;
	pthread_mutex_unlock(&handler_mu);
	return h ? h : MX_ERRORS_ARE_FATAL;
}

static mx_return_t fail(mx_endpoint_t ep, const char *fn, int ret, const char *msg)
{
	char str[GOMX_ERRLEN + 64];
	snprintf(str, sizeof str, "%s: %s", fn, msg);
	return handler_of(ep)(str, (mx_return_t)ret);
}

/* RET_CALL runs a gomx_* call given errbuf and returns its code, through
 * the error handler when it failed. */
#define RET_CALL(ep, fn, call)                                \
	do {                                                  \
		char errbuf[GOMX_ERRLEN];                     \
		int rc_;                                      \
		errbuf[0] = 0;                                \
		rc_ = (call);                                 \
		if (__builtin_expect(rc_ == MX_SUCCESS, 1))   \
			return MX_SUCCESS;                    \
		return fail(ep, fn, rc_, errbuf);             \
	} while (0)

#define NEED(ep, fn, cond, code, what)                        \
	do {                                                  \
		if (__builtin_expect(!(cond), 0))             \
			return fail(ep, fn, code, what);      \
	} while (0)

#define NOT_IN_HANDLER(ep, fn)                                                             \
	NEED(ep, fn, !gomx_in_handler, MX_CLOSE_IN_HANDLER,                                     \
	     "not allowed inside the unexpected handler (it must not block or close)")

int gomx_call_unexp(uintptr_t fn, uintptr_t ctx, uint64_t a0, uint64_t a1, uint64_t match,
		    uint32_t length, void *data, int deprecated)
{
	int act;
	gomx_in_handler++;
	if (deprecated) {
		((mx_matching_callback_t)fn)((void *)ctx, match, (int)length);
		act = MX_RECV_CONTINUE;
	} else {
		mx_endpoint_addr_t src;
		src.stuff[0] = a0;
		src.stuff[1] = a1;
		act = ((mx_unexp_handler_t)fn)((void *)ctx, src, match, length, data);
	}
	gomx_in_handler--;
	return act;
}

/* ---- library ---- */

mx_return_t mx__init_api(int api)
{
	char errbuf[GOMX_ERRLEN];
	int fatal = 1;
	int rc = gomx_init(api, &fatal, errbuf);
	if (rc == MX_SUCCESS) {
		pthread_mutex_lock(&handler_mu);
		if (!handler_set)
			global_handler = fatal ? MX_ERRORS_ARE_FATAL : MX_ERRORS_RETURN;
		pthread_mutex_unlock(&handler_mu);
		return MX_SUCCESS;
	}
	return fail(NULL, "mx_init", rc, errbuf);
}

mx_return_t mx_finalize(void)
{
	NOT_IN_HANDLER(NULL, "mx_finalize");
	RET_CALL(NULL, "mx_finalize", gomx_finalize(errbuf));
}

mx_error_handler_t mx_set_error_handler(mx_error_handler_t handler)
{
	mx_error_handler_t old;
	pthread_mutex_lock(&handler_mu);
	old = global_handler ? global_handler : MX_ERRORS_ARE_FATAL;
	global_handler = handler;
	handler_set = 1;
	pthread_mutex_unlock(&handler_mu);
	return old;
}

/* ---- endpoints ---- */

mx_return_t mx_open_endpoint(uint32_t board_number, uint32_t endpoint_id, uint32_t endpoint_key,
			     mx_param_t *params_array, uint32_t params_count, mx_endpoint_t *endpoint)
{
	static const char fn[] = "mx_open_endpoint";
	char errbuf[GOMX_ERRLEN];
	mx_error_handler_t eh = NULL;
	int bits = 0, shift = 0, rc, i;
	uintptr_t h = 0;
	uint32_t p;

	NEED(NULL, fn, endpoint != NULL, MX_BAD_INFO_VAL, "endpoint pointer is NULL");
	NEED(NULL, fn, params_count == 0 || params_array != NULL, MX_BAD_PARAM_LIST,
	     "params_array is NULL with a non-zero params_count");
	for (p = 0; p < params_count; p++) {
		switch (params_array[p].key) {
		case MX_PARAM_ERROR_HANDLER:
			eh = params_array[p].val.error_handler;
			break;
		case MX_PARAM_UNEXP_QUEUE_MAX:
			/* The unexpected queue is bounded per board (it never
			 * grows without bound); the per-endpoint hint is
			 * accepted and not needed. */
			break;
		case MX_PARAM_CONTEXT_ID:
			bits = params_array[p].val.context_id.bits;
			shift = params_array[p].val.context_id.shift;
			break;
		default: {
			char msg[96];
			snprintf(msg, sizeof msg, "unknown parameter key %d", (int)params_array[p].key);
			return fail(NULL, fn, MX_BAD_PARAM_NAME, msg);
		}
		}
	}
	rc = gomx_open_endpoint(board_number, endpoint_id, endpoint_key, bits, shift, &h, errbuf);
	if (rc != MX_SUCCESS)
		return fail(NULL, fn, rc, errbuf);
	i = ep_index((mx_endpoint_t)h);
	pthread_mutex_lock(&handler_mu);
	if (i >= 0)
		ep_handlers[i] = eh;
	pthread_mutex_unlock(&handler_mu);
	*endpoint = (mx_endpoint_t)h;
	return MX_SUCCESS;
}

mx_return_t mx_close_endpoint(mx_endpoint_t endpoint)
{
	char errbuf[GOMX_ERRLEN];
	int rc, i;
	NOT_IN_HANDLER(endpoint, "mx_close_endpoint");
	rc = gomx_close_endpoint((uintptr_t)endpoint, errbuf);
	if (rc != MX_SUCCESS)
		return fail(endpoint, "mx_close_endpoint", rc, errbuf);
	i = ep_index(endpoint);
	pthread_mutex_lock(&handler_mu);
	if (i >= 0)
		ep_handlers[i] = NULL;
	pthread_mutex_unlock(&handler_mu);
	return MX_SUCCESS;
}

mx_return_t mx_wakeup(mx_endpoint_t endpoint)
{
	RET_CALL(endpoint, "mx_wakeup", gomx_wakeup((uintptr_t)endpoint, errbuf));
}

mx_return_t mx_disable_progression(mx_endpoint_t endpoint)
{
	RET_CALL(endpoint, "mx_disable_progression", gomx_progression((uintptr_t)endpoint, 0, errbuf));
}

mx_return_t mx_reenable_progression(mx_endpoint_t endpoint)
{
	RET_CALL(endpoint, "mx_reenable_progression", gomx_progression((uintptr_t)endpoint, 1, errbuf));
}

mx_return_t mx_progress(mx_endpoint_t endpoint)
{
	RET_CALL(endpoint, "mx_progress", gomx_progress((uintptr_t)endpoint, errbuf));
}

mx_return_t mx_get_endpoint_addr(mx_endpoint_t endpoint, mx_endpoint_addr_t *endpoint_addr)
{
	NEED(endpoint, "mx_get_endpoint_addr", endpoint_addr != NULL, MX_BAD_INFO_VAL, "address pointer is NULL");
	RET_CALL(endpoint, "mx_get_endpoint_addr",
		 gomx_get_endpoint_addr((uintptr_t)endpoint, endpoint_addr, errbuf));
}

/* ---- communication ---- */

mx_return_t mx_isend(mx_endpoint_t endpoint, mx_segment_t *segments_list, uint32_t segments_count,
		     mx_endpoint_addr_t dest, uint64_t match_info, void *context, mx_request_t *request)
{
	NEED(endpoint, "mx_isend", request != NULL, MX_BAD_REQUEST, "request pointer is NULL");
	RET_CALL(endpoint, "mx_isend",
		 gomx_isend((uintptr_t)endpoint, segments_list, segments_count, dest.stuff[0], dest.stuff[1],
			    match_info, (uintptr_t)context, 0, (uintptr_t *)request, errbuf));
}

mx_return_t mx_issend(mx_endpoint_t endpoint, mx_segment_t *segments_list, uint32_t segments_count,
		      mx_endpoint_addr_t dest, uint64_t match_info, void *context, mx_request_t *request)
{
	NEED(endpoint, "mx_issend", request != NULL, MX_BAD_REQUEST, "request pointer is NULL");
	RET_CALL(endpoint, "mx_issend",
		 gomx_isend((uintptr_t)endpoint, segments_list, segments_count, dest.stuff[0], dest.stuff[1],
			    match_info, (uintptr_t)context, 1, (uintptr_t *)request, errbuf));
}

mx_return_t mx_irecv(mx_endpoint_t endpoint, mx_segment_t *segments_list, uint32_t segments_count,
		     uint64_t match_info, uint64_t match_mask, void *context, mx_request_t *request)
{
	NEED(endpoint, "mx_irecv", request != NULL, MX_BAD_REQUEST, "request pointer is NULL");
	RET_CALL(endpoint, "mx_irecv",
		 gomx_irecv((uintptr_t)endpoint, segments_list, segments_count, match_info, match_mask,
			    (uintptr_t)context, (uintptr_t *)request, errbuf));
}

mx_return_t mx_iconnect(mx_endpoint_t endpoint, uint64_t nic_id, uint32_t endpoint_id, uint32_t key,
			uint64_t match_info, void *context, mx_request_t *request)
{
	NEED(endpoint, "mx_iconnect", request != NULL, MX_BAD_REQUEST, "request pointer is NULL");
	RET_CALL(endpoint, "mx_iconnect",
		 gomx_iconnect((uintptr_t)endpoint, nic_id, endpoint_id, key, match_info, (uintptr_t)context,
			       (uintptr_t *)request, errbuf));
}

mx_return_t mx_connect(mx_endpoint_t endpoint, uint64_t nic_id, uint32_t endpoint_id, uint32_t key,
		       uint32_t timeout, mx_endpoint_addr_t *addr)
{
	NOT_IN_HANDLER(endpoint, "mx_connect");
	NEED(endpoint, "mx_connect", addr != NULL, MX_BAD_INFO_VAL, "address pointer is NULL");
	RET_CALL(endpoint, "mx_connect",
		 gomx_connect((uintptr_t)endpoint, nic_id, endpoint_id, key, timeout, addr, errbuf));
}

mx_return_t mx_disconnect(mx_endpoint_t endpoint, mx_endpoint_addr_t addr)
{
	RET_CALL(endpoint, "mx_disconnect",
		 gomx_disconnect((uintptr_t)endpoint, addr.stuff[0], addr.stuff[1], errbuf));
}

/* ---- completion ---- */

#define NEED_RESULT(ep, fn) NEED(ep, fn, result != NULL, MX_BAD_INFO_VAL, "result pointer is NULL")
#define NEED_REQUEST(ep, fn) NEED(ep, fn, request != NULL, MX_BAD_REQUEST, "request pointer is NULL")

mx_return_t mx_test(mx_endpoint_t endpoint, mx_request_t *request, mx_status_t *status, uint32_t *result)
{
	NEED_RESULT(endpoint, "mx_test");
	NEED_REQUEST(endpoint, "mx_test");
	RET_CALL(endpoint, "mx_test",
		 gomx_test((uintptr_t)endpoint, (uintptr_t *)request, status, result, errbuf));
}

mx_return_t mx_wait(mx_endpoint_t endpoint, mx_request_t *request, uint32_t timeout, mx_status_t *status,
		    uint32_t *result)
{
	NOT_IN_HANDLER(endpoint, "mx_wait");
	NEED_RESULT(endpoint, "mx_wait");
	NEED_REQUEST(endpoint, "mx_wait");
	RET_CALL(endpoint, "mx_wait",
		 gomx_wait((uintptr_t)endpoint, (uintptr_t *)request, timeout, status, result, errbuf));
}

mx_return_t mx_test_any(mx_endpoint_t endpoint, uint64_t match_info, uint64_t match_mask, mx_status_t *status,
			uint32_t *result)
{
	NEED_RESULT(endpoint, "mx_test_any");
	RET_CALL(endpoint, "mx_test_any",
		 gomx_test_any((uintptr_t)endpoint, match_info, match_mask, status, result, errbuf));
}

mx_return_t mx_wait_any(mx_endpoint_t endpoint, uint32_t timeout, uint64_t match_info, uint64_t match_mask,
			mx_status_t *status, uint32_t *result)
{
	NOT_IN_HANDLER(endpoint, "mx_wait_any");
	NEED_RESULT(endpoint, "mx_wait_any");
	RET_CALL(endpoint, "mx_wait_any",
		 gomx_wait_any((uintptr_t)endpoint, timeout, match_info, match_mask, status, result, errbuf));
}

mx_return_t mx_ipeek(mx_endpoint_t endpoint, mx_request_t *request, uint32_t *result)
{
	NEED_RESULT(endpoint, "mx_ipeek");
	NEED_REQUEST(endpoint, "mx_ipeek");
	RET_CALL(endpoint, "mx_ipeek", gomx_ipeek((uintptr_t)endpoint, (uintptr_t *)request, result, errbuf));
}

mx_return_t mx_peek(mx_endpoint_t endpoint, uint32_t timeout, mx_request_t *request, uint32_t *result)
{
	NOT_IN_HANDLER(endpoint, "mx_peek");
	NEED_RESULT(endpoint, "mx_peek");
	NEED_REQUEST(endpoint, "mx_peek");
	RET_CALL(endpoint, "mx_peek",
		 gomx_peek((uintptr_t)endpoint, timeout, (uintptr_t *)request, result, errbuf));
}

mx_return_t mx_iprobe(mx_endpoint_t endpoint, uint64_t match_info, uint64_t match_mask, mx_status_t *status,
		      uint32_t *result)
{
	NEED_RESULT(endpoint, "mx_iprobe");
	RET_CALL(endpoint, "mx_iprobe",
		 gomx_iprobe((uintptr_t)endpoint, match_info, match_mask, status, result, errbuf));
}

mx_return_t mx_probe(mx_endpoint_t endpoint, uint32_t timeout, uint64_t match_info, uint64_t match_mask,
		     mx_status_t *status, uint32_t *result)
{
	NOT_IN_HANDLER(endpoint, "mx_probe");
	NEED_RESULT(endpoint, "mx_probe");
	RET_CALL(endpoint, "mx_probe",
		 gomx_probe((uintptr_t)endpoint, timeout, match_info, match_mask, status, result, errbuf));
}

mx_return_t mx_cancel(mx_endpoint_t endpoint, mx_request_t *request, uint32_t *result)
{
	NEED_RESULT(endpoint, "mx_cancel");
	NEED_REQUEST(endpoint, "mx_cancel");
	RET_CALL(endpoint, "mx_cancel", gomx_cancel((uintptr_t)endpoint, (uintptr_t *)request, result, errbuf));
}

mx_return_t mx_forget(mx_endpoint_t endpoint, mx_request_t *request)
{
	NEED_REQUEST(endpoint, "mx_forget");
	RET_CALL(endpoint, "mx_forget", gomx_forget((uintptr_t)endpoint, (uintptr_t *)request, errbuf));
}

mx_return_t mx_ibuffered(mx_endpoint_t endpoint, mx_request_t *request, uint32_t *result)
{
	NEED_RESULT(endpoint, "mx_ibuffered");
	NEED_REQUEST(endpoint, "mx_ibuffered");
	RET_CALL(endpoint, "mx_ibuffered",
		 gomx_ibuffered((uintptr_t)endpoint, (uintptr_t *)request, result, errbuf));
}

mx_return_t mx_context(mx_request_t *request, void **context)
{
	NEED(NULL, "mx_context", context != NULL, MX_BAD_INFO_VAL, "context pointer is NULL");
	RET_CALL(NULL, "mx_context", gomx_context((uintptr_t *)request, (uintptr_t *)context, errbuf));
}

mx_return_t mx_set_request_timeout(mx_endpoint_t endpoint, mx_request_t request, uint32_t milli_seconds)
{
	RET_CALL(endpoint, "mx_set_request_timeout",
		 gomx_set_request_timeout((uintptr_t)endpoint, (uintptr_t)request, milli_seconds, errbuf));
}

/* ---- the unexpected handler ---- */

mx_return_t mx_register_unexp_handler(mx_endpoint_t endpoint, mx_unexp_handler_t handler, void *context)
{
	RET_CALL(endpoint, "mx_register_unexp_handler",
		 gomx_register_unexp((uintptr_t)endpoint, (uintptr_t)handler, (uintptr_t)context, 0, errbuf));
}

mx_return_t mx_register_unexp_callback(mx_endpoint_t endpoint, mx_matching_callback_t cb, void *context)
{
	RET_CALL(endpoint, "mx_register_unexp_callback",
		 gomx_register_unexp((uintptr_t)endpoint, (uintptr_t)cb, (uintptr_t)context, 1, errbuf));
}

/* ---- addresses ---- */

mx_return_t mx_decompose_endpoint_addr(mx_endpoint_addr_t endpoint_addr, uint64_t *nic_id, uint32_t *endpoint_id)
{
	NEED(NULL, "mx_decompose_endpoint_addr", nic_id != NULL && endpoint_id != NULL, MX_BAD_INFO_VAL,
	     "nic_id or endpoint_id pointer is NULL");
	*nic_id = endpoint_addr.stuff[0] & ((UINT64_C(1) << 48) - 1);
	*endpoint_id = (uint32_t)((endpoint_addr.stuff[0] >> 48) & 0xff);
	return MX_SUCCESS;
}

mx_return_t mx_decompose_endpoint_addr2(mx_endpoint_addr_t endpoint_addr, uint64_t *nic_id, uint32_t *endpoint_id,
					uint32_t *session_id)
{
	NEED(NULL, "mx_decompose_endpoint_addr2", nic_id != NULL && endpoint_id != NULL && session_id != NULL,
	     MX_BAD_INFO_VAL, "nic_id, endpoint_id or session_id pointer is NULL");
	*nic_id = endpoint_addr.stuff[0] & ((UINT64_C(1) << 48) - 1);
	*endpoint_id = (uint32_t)((endpoint_addr.stuff[0] >> 48) & 0xff);
	*session_id = (uint32_t)endpoint_addr.stuff[1];
	return MX_SUCCESS;
}

mx_return_t mx_set_endpoint_addr_context(mx_endpoint_addr_t endpoint_addr, void *context)
{
	RET_CALL(NULL, "mx_set_endpoint_addr_context",
		 gomx_set_addr_context(endpoint_addr.stuff[0], endpoint_addr.stuff[1], (uintptr_t)context, errbuf));
}

mx_return_t mx_get_endpoint_addr_context(mx_endpoint_addr_t endpoint_addr, void **context)
{
	NEED(NULL, "mx_get_endpoint_addr_context", context != NULL, MX_BAD_INFO_VAL, "context pointer is NULL");
	RET_CALL(NULL, "mx_get_endpoint_addr_context",
		 gomx_get_addr_context(endpoint_addr.stuff[0], endpoint_addr.stuff[1], (uintptr_t *)context,
				       errbuf));
}

/* ---- boards, names, info ---- */

mx_return_t mx_get_info(mx_endpoint_t endpoint, mx_get_info_key_t key, void *in_val, uint32_t in_len,
			void *out_val, uint32_t out_len)
{
	RET_CALL(endpoint, "mx_get_info",
		 gomx_get_info((uintptr_t)endpoint, (int)key, in_val, in_len, out_val, out_len, errbuf));
}

mx_return_t mx_hostname_to_nic_id(char *hostname, uint64_t *nic_id)
{
	NEED(NULL, "mx_hostname_to_nic_id", hostname != NULL && nic_id != NULL, MX_BAD_HOSTNAME_ARGS,
	     "hostname or nic_id pointer is NULL");
	RET_CALL(NULL, "mx_hostname_to_nic_id", gomx_hostname_to_nic_id(hostname, nic_id, errbuf));
}

mx_return_t mx_board_number_to_nic_id(uint32_t board_number, uint64_t *nic_id)
{
	NEED(NULL, "mx_board_number_to_nic_id", nic_id != NULL, MX_BAD_INFO_VAL, "nic_id pointer is NULL");
	RET_CALL(NULL, "mx_board_number_to_nic_id", gomx_board_number_to_nic_id(board_number, nic_id, errbuf));
}

mx_return_t mx_nic_id_to_board_number(uint64_t nic_id, uint32_t *board_number)
{
	NEED(NULL, "mx_nic_id_to_board_number", board_number != NULL, MX_BAD_INFO_VAL,
	     "board_number pointer is NULL");
	RET_CALL(NULL, "mx_nic_id_to_board_number", gomx_nic_id_to_board_number(nic_id, board_number, errbuf));
}

mx_return_t mx_nic_id_to_hostname(uint64_t nic_id, char *hostname)
{
	NEED(NULL, "mx_nic_id_to_hostname", hostname != NULL, MX_BAD_HOSTNAME_ARGS, "hostname pointer is NULL");
	RET_CALL(NULL, "mx_nic_id_to_hostname", gomx_nic_id_to_hostname(nic_id, hostname, errbuf));
}

/* ---- strings ---- */

const char *mx_strerror(mx_return_t code)
{
	switch (code) {
	case MX_SUCCESS: return "Success";
	case MX_BAD_BAD_BAD: return "Internal error";
	case MX_FAILURE: return "Failure";
	case MX_ALREADY_INITIALIZED: return "Already initialized";
	case MX_NOT_INITIALIZED: return "Not initialized";
	case MX_NO_DEV: return "No board could be opened";
	case MX_NO_DRIVER: return "No driver";
	case MX_NO_PERM: return "Permission denied";
	case MX_BOARD_UNKNOWN: return "Board unknown";
	case MX_BAD_ENDPOINT: return "Bad endpoint";
	case MX_BAD_SEG_LIST: return "Bad segment list";
	case MX_BAD_SEG_MEM: return "Bad segment memory";
	case MX_BAD_SEG_CNT: return "Bad segment count";
	case MX_BAD_REQUEST: return "Bad request";
	case MX_BAD_MATCH_MASK: return "Match info has bits outside the mask";
	case MX_NO_RESOURCES: return "No resources";
	case MX_BAD_ADDR_LIST: return "Bad address list";
	case MX_BAD_ADDR_COUNT: return "Bad address count";
	case MX_BAD_ROOT: return "Bad root";
	case MX_NOT_COMPLETED: return "Not completed";
	case MX_BUSY: return "Endpoint busy";
	case MX_BAD_INFO_KEY: return "Bad info key";
	case MX_BAD_INFO_VAL: return "Bad info value";
	case MX_BAD_NIC: return "Bad NIC id";
	case MX_BAD_PARAM_LIST: return "Bad parameter list";
	case MX_BAD_PARAM_NAME: return "Bad parameter name";
	case MX_BAD_PARAM_VAL: return "Bad parameter value";
	case MX_BAD_HOSTNAME_ARGS: return "Bad hostname arguments";
	case MX_HOST_NOT_FOUND: return "Host not found";
	case MX_REQUEST_PENDING: return "Request pending";
	case MX_TIMEOUT: return "Timeout";
	case MX_NO_MATCH: return "No match";
	case MX_BAD_ENDPOINT_ID: return "Bad endpoint id";
	case MX_CONNECTION_FAILED: return "Connection failed";
	case MX_BAD_CONNECTION_KEY: return "Bad connection key";
	case MX_BAD_INFO_LENGTH: return "Bad info length";
	case MX_NIC_NOT_FOUND: return "NIC not found";
	case MX_BAD_KERNEL_VERSION: return "Bad kernel version";
	case MX_BAD_LIB_VERSION: return "Bad library version";
	case MX_NIC_DEAD: return "NIC dead";
	case MX_CANCEL_NOT_SUPPORTED: return "Cancel not supported";
	case MX_CLOSE_IN_HANDLER: return "Not supported inside the unexpected handler";
	case MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK: return "Matching does not respect the context id mask";
	case MX_NOT_SUPPORTED_WITH_CONTEXT_ID: return "Not supported with context ids";
	}
	return "Unknown error";
}

const char *mx_strstatus(mx_status_code_t code)
{
	switch (code) {
	case MX_STATUS_SUCCESS: return "Success";
	case MX_STATUS_PENDING: return "Pending";
	case MX_STATUS_BUFFERED: return "Buffered";
	case MX_STATUS_REJECTED: return "Rejected";
	case MX_STATUS_TIMEOUT: return "Timeout";
	case MX_STATUS_TRUNCATED: return "Message truncated";
	case MX_STATUS_CANCELLED: return "Cancelled";
	case MX_STATUS_ENDPOINT_UNKNOWN: return "Remote endpoint unknown";
	case MX_STATUS_ENDPOINT_CLOSED: return "Remote endpoint closed";
	case MX_STATUS_ENDPOINT_UNREACHABLE: return "Remote endpoint unreachable";
	case MX_STATUS_BAD_SESSION: return "Bad session";
	case MX_STATUS_BAD_KEY: return "Bad connection key";
	case MX_STATUS_BAD_ENDPOINT: return "Bad remote endpoint";
	case MX_STATUS_BAD_RDMAWIN: return "Bad remote RDMA window";
	case MX_STATUS_ABORTED: return "Aborted";
	case MX_STATUS_EVENTQ_FULL: return "Event queue full";
	case MX_STATUS_NO_RESOURCES: return "No resources";
	}
	return "Unknown status";
}
