/*
 * myriexpress.h: the Myrinet Express (MX) API, version 0x301, as gomx's
 * libmyriexpress implements it.
 *
 * Written for gomx from MX's documented interface: the names, types,
 * constants and numeric values are MX's, so a program written for MX or
 * Open-MX compiles against this file unchanged and runs on gomx's
 * library (libmyriexpress.so, also installed as libopen-mx.so). See
 * docs/c-api.md for what each call does on gomx and how the library is
 * configured.
 */
#ifndef MYRIEXPRESS_H
#define MYRIEXPRESS_H

#include <stdint.h>
#include <inttypes.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The API version mx_init passes to mx__init_api. */
#define MX_API 0x301

/* Longest string mx_get_info returns per entry (counter labels). */
#define MX_MAX_STR_LEN 128

/* An open endpoint: an opaque handle, never dereferenced by the caller. */
typedef struct mx_endpoint *mx_endpoint_t;

/* An endpoint address: 16 opaque bytes naming one incarnation of a peer
 * endpoint as seen from one local endpoint. Copy it by value. */
#define MX_SIZEOF_ADDR 16
typedef struct {
	uint64_t stuff[MX_SIZEOF_ADDR / sizeof(uint64_t)];
} mx_endpoint_addr_t;

/* Wildcards of mx_open_endpoint. */
#define MX_ANY_NIC 0xffffffffU
#define MX_ANY_ENDPOINT 0xffffffffU

/* An outstanding send, receive or connect: an opaque handle. */
typedef union mx_request *mx_request_t;

/* One piece of a message: the bytes at segment_ptr, segment_length long. */
typedef void *mx_segment_ptr_t;
typedef struct {
	mx_segment_ptr_t segment_ptr;
	uint32_t segment_length;
} mx_segment_t;

/* A timeout (in milliseconds) of 0 waits forever. */
#define MX_INFINITE 0

/* What every call returns. */
enum mx_return_code {
	MX_SUCCESS = 0,                 /* done */
	MX_BAD_BAD_BAD = 1,             /* internal failure */
	MX_FAILURE = 2,                 /* failed, no more precise code */
	MX_ALREADY_INITIALIZED = 3,     /* mx_init called twice */
	MX_NOT_INITIALIZED = 4,         /* mx_init not called */
	MX_NO_DEV = 5,                  /* no board could be opened */
	MX_NO_DRIVER = 6,               /* the transport is missing */
	MX_NO_PERM = 7,                 /* permission denied */
	MX_BOARD_UNKNOWN = 8,           /* no board with that number */
	MX_BAD_ENDPOINT = 9,            /* not an open endpoint */
	MX_BAD_SEG_LIST = 10,           /* NULL segment list with a count */
	MX_BAD_SEG_MEM = 11,            /* a segment's memory is invalid */
	MX_BAD_SEG_CNT = 12,            /* more than MX_MAX_SEGMENTS */
	MX_BAD_REQUEST = 13,            /* not a valid request handle */
	MX_BAD_MATCH_MASK = 14,         /* match bits outside the mask */
	MX_NO_RESOURCES = 15,           /* out of endpoints, memory, ... */
	MX_BAD_ADDR_LIST = 16,          /* (MX collectives, unused) */
	MX_BAD_ADDR_COUNT = 17,         /* (MX collectives, unused) */
	MX_BAD_ROOT = 18,               /* (MX collectives, unused) */
	MX_NOT_COMPLETED = 19,          /* operations still pending */
	MX_BUSY = 20,                   /* the endpoint id is in use */
	MX_BAD_INFO_KEY = 21,           /* unknown mx_get_info key */
	MX_BAD_INFO_VAL = 22,           /* bad mx_get_info buffer */
	MX_BAD_NIC = 23,                /* not a valid NIC id */
	MX_BAD_PARAM_LIST = 24,         /* NULL params with a count */
	MX_BAD_PARAM_NAME = 25,         /* unknown parameter key */
	MX_BAD_PARAM_VAL = 26,          /* bad parameter value */
	MX_BAD_HOSTNAME_ARGS = 27,      /* bad mx_hostname_to_nic_id args */
	MX_HOST_NOT_FOUND = 28,         /* no such host */
	MX_REQUEST_PENDING = 29,        /* the request has not completed */
	MX_TIMEOUT = 30,                /* the timeout expired */
	MX_NO_MATCH = 31,               /* no message matches */
	MX_BAD_ENDPOINT_ID = 32,        /* endpoint id out of range */
	MX_CONNECTION_FAILED = 33,      /* no peer answered */
	MX_BAD_CONNECTION_KEY = 34,     /* the peer refused the key */
	MX_BAD_INFO_LENGTH = 35,        /* mx_get_info buffer too short */
	MX_NIC_NOT_FOUND = 36,          /* NIC id unknown */
	MX_BAD_KERNEL_VERSION = 37,     /* library and driver disagree */
	MX_BAD_LIB_VERSION = 38,        /* program and library disagree */
	MX_NIC_DEAD = 39,               /* the board is closed */
	MX_CANCEL_NOT_SUPPORTED = 40,   /* sends cannot be cancelled */
	MX_CLOSE_IN_HANDLER = 41,       /* not allowed in the handler */
	MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK = 42, /* mask hides context id bits */
	MX_NOT_SUPPORTED_WITH_CONTEXT_ID = 43     /* not with context ids */
};
typedef enum mx_return_code mx_return_t;

/* Keys of mx_open_endpoint's parameters. */
enum mx_param_key {
	MX_PARAM_ERROR_HANDLER = 0,
	MX_PARAM_UNEXP_QUEUE_MAX = 1,
	MX_PARAM_CONTEXT_ID = 2
};
typedef enum mx_param_key mx_param_key_t;

/* An error handler gets a message and the code; what it returns is what
 * the failed call returns. */
typedef mx_return_t (*mx_error_handler_t)(char *str, mx_return_t ret);

typedef struct {
	mx_param_key_t key;
	union {
		mx_error_handler_t error_handler;
		uint32_t unexp_queue_max;
		struct {
			uint8_t bits;
			uint8_t shift;
		} context_id;
	} val;
} mx_param_t;

#define MX_CONTEXT_ID_BITS_MAX 16

/* How a request completed. */
enum mx_status_code {
	MX_STATUS_SUCCESS = 0,
	MX_STATUS_PENDING = 1,
	MX_STATUS_BUFFERED = 2,
	MX_STATUS_REJECTED = 3,
	MX_STATUS_TIMEOUT = 4,
	MX_STATUS_TRUNCATED = 5,          /* receive buffer shorter than the message */
	MX_STATUS_CANCELLED = 6,
	MX_STATUS_ENDPOINT_UNKNOWN = 7,
	MX_STATUS_ENDPOINT_CLOSED = 8,
	MX_STATUS_ENDPOINT_UNREACHABLE = 9, /* the peer stopped answering */
	MX_STATUS_BAD_SESSION = 10,       /* the peer was reopened: connect again */
	MX_STATUS_BAD_KEY = 11,
	MX_STATUS_BAD_ENDPOINT = 12,
	MX_STATUS_BAD_RDMAWIN = 13,
	MX_STATUS_ABORTED = 14,
	MX_STATUS_EVENTQ_FULL = 15,
	MX_STATUS_NO_RESOURCES = 16
};
typedef enum mx_status_code mx_status_code_t;

/* A completed request. For a receive, source is the sender and xfer_length
 * the bytes delivered; for a send, xfer_length does not reflect the
 * receiver's truncation. context is the value given when it was posted. */
typedef struct mx_status {
	mx_status_code_t code;
	mx_endpoint_addr_t source;
	uint64_t match_info;
	uint32_t msg_length;
	uint32_t xfer_length;
	void *context;
} mx_status_t;

#define mx_init() mx__init_api(MX_API)
extern mx_return_t mx__init_api(int api);
extern mx_return_t mx_finalize(void);

/* The two built-in error handlers: print and abort (the default), or
 * return the code to the caller. */
extern const mx_error_handler_t MX_ERRORS_ARE_FATAL;
extern const mx_error_handler_t MX_ERRORS_RETURN;
extern mx_error_handler_t mx_set_error_handler(mx_error_handler_t handler);

extern mx_return_t mx_open_endpoint(uint32_t board_number, uint32_t endpoint_id,
				    uint32_t endpoint_key, mx_param_t *params_array,
				    uint32_t params_count, mx_endpoint_t *endpoint);
extern mx_return_t mx_close_endpoint(mx_endpoint_t endpoint);
extern mx_return_t mx_wakeup(mx_endpoint_t endpoint);

/* The callback of the deprecated mx_register_unexp_callback. */
typedef void (*mx_matching_callback_t)(void *context, uint64_t match_value, int length);

extern mx_return_t mx_disable_progression(mx_endpoint_t endpoint);
extern mx_return_t mx_reenable_progression(mx_endpoint_t endpoint);

#define MX_MAX_SEGMENTS 256

extern mx_return_t mx_isend(mx_endpoint_t endpoint, mx_segment_t *segments_list,
			    uint32_t segments_count, mx_endpoint_addr_t dest_endpoint,
			    uint64_t match_info, void *context, mx_request_t *request);
extern mx_return_t mx_issend(mx_endpoint_t endpoint, mx_segment_t *segments_list,
			     uint32_t segments_count, mx_endpoint_addr_t dest_endpoint,
			     uint64_t match_info, void *context, mx_request_t *request);
extern mx_return_t mx_irecv(mx_endpoint_t endpoint, mx_segment_t *segments_list,
			    uint32_t segments_count, uint64_t match_info,
			    uint64_t match_mask, void *context, mx_request_t *request);

/* The mask that matches every bit exactly. */
#define MX_MATCH_MASK_NONE (~(uint64_t)0)

extern mx_return_t mx_cancel(mx_endpoint_t endpoint, mx_request_t *request, uint32_t *result);
extern mx_return_t mx_test(mx_endpoint_t endpoint, mx_request_t *request,
			   mx_status_t *status, uint32_t *result);
extern mx_return_t mx_wait(mx_endpoint_t endpoint, mx_request_t *request, uint32_t timeout,
			   mx_status_t *status, uint32_t *result);
extern mx_return_t mx_test_any(mx_endpoint_t endpoint, uint64_t match_info, uint64_t match_mask,
			       mx_status_t *status, uint32_t *result);
extern mx_return_t mx_wait_any(mx_endpoint_t endpoint, uint32_t timeout, uint64_t match_info,
			       uint64_t match_mask, mx_status_t *status, uint32_t *result);
extern mx_return_t mx_ipeek(mx_endpoint_t endpoint, mx_request_t *request, uint32_t *result);
extern mx_return_t mx_peek(mx_endpoint_t endpoint, uint32_t timeout, mx_request_t *request,
			   uint32_t *result);
extern mx_return_t mx_iprobe(mx_endpoint_t endpoint, uint64_t match_info, uint64_t match_mask,
			     mx_status_t *status, uint32_t *result);
extern mx_return_t mx_probe(mx_endpoint_t endpoint, uint32_t timeout, uint64_t match_info,
			    uint64_t match_mask, mx_status_t *status, uint32_t *result);
extern mx_return_t mx_ibuffered(mx_endpoint_t endpoint, mx_request_t *request, uint32_t *result);
extern mx_return_t mx_context(mx_request_t *request, void **context);

typedef enum mx_line_speed {
	MX_SPEED_2G,
	MX_SPEED_10G,
	MX_SPEED_OPEN_MX
} mx_line_speed_t;

enum mx_net_type {
	MX_NET_MYRI,
	MX_NET_ETHER
};

/* Keys of mx_get_info. */
enum mx_get_info_key {
	MX_NIC_COUNT = 1,            /* uint32_t: boards open */
	MX_NIC_IDS = 2,              /* uint64_t[count+1]: NIC ids, then 0 */
	MX_MAX_NATIVE_ENDPOINTS = 3, /* uint32_t: endpoints per board */
	MX_NATIVE_REQUESTS = 4,      /* uint32_t: requests per endpoint */
	MX_COUNTERS_COUNT = 5,       /* uint32_t (in: board number) */
	MX_COUNTERS_LABELS = 6,      /* char[count][MX_MAX_STR_LEN] */
	MX_COUNTERS_VALUES = 7,      /* uint32_t[count] */
	MX_PRODUCT_CODE = 8,         /* string */
	MX_PART_NUMBER = 9,          /* string */
	MX_SERIAL_NUMBER = 10,       /* string */
	MX_PORT_COUNT = 11,          /* uint32_t */
	MX_PIO_SEND_MAX = 12,        /* uint32_t */
	MX_COPY_SEND_MAX = 13,       /* uint32_t */
	MX_NUMA_NODE = 14,           /* uint32_t */
#define MX_HAS_NET_TYPE
	MX_NET_TYPE = 15,            /* uint32_t: enum mx_net_type */
	MX_LINE_SPEED = 16           /* uint32_t: mx_line_speed_t */
};
typedef enum mx_get_info_key mx_get_info_key_t;

extern mx_return_t mx_get_info(mx_endpoint_t endpoint, mx_get_info_key_t key, void *in_val,
			       uint32_t in_len, void *out_val, uint32_t out_len);

/* Print a uint64_t as two 32-bit halves. */
#define MX_U32(x) ((sizeof(x) == 8) ? ((uint32_t)((uint64_t)(x) >> 32)) : ((void)(x), 0))
#define MX_L32(x) ((uint32_t)(x))

#define MX_MAX_HOSTNAME_LEN 80

extern mx_return_t mx_hostname_to_nic_id(char *hostname, uint64_t *nic_id);
extern mx_return_t mx_board_number_to_nic_id(uint32_t board_number, uint64_t *nic_id);
extern mx_return_t mx_nic_id_to_board_number(uint64_t nic_id, uint32_t *board_number);
extern mx_return_t mx_nic_id_to_hostname(uint64_t nic_id, char *hostname);

extern mx_return_t mx_connect(mx_endpoint_t endpoint, uint64_t nic_id, uint32_t endpoint_id,
			      uint32_t key, uint32_t timeout, mx_endpoint_addr_t *addr);
extern mx_return_t mx_decompose_endpoint_addr(mx_endpoint_addr_t endpoint_addr, uint64_t *nic_id,
					      uint32_t *endpoint_id);
extern mx_return_t mx_get_endpoint_addr(mx_endpoint_t endpoint, mx_endpoint_addr_t *endpoint_addr);

extern const char *mx_strerror(mx_return_t return_code);
extern const char *mx_strstatus(mx_status_code_t status);

/* Deprecated by mx_register_unexp_handler (mx_extensions.h): cb sees each
 * unexpected message's match information and length. */
extern mx_return_t mx_register_unexp_callback(mx_endpoint_t endpoint, mx_matching_callback_t cb,
					      void *context);

#ifdef __cplusplus
}
#endif

#endif /* MYRIEXPRESS_H */
