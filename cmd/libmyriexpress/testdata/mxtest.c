/*
 * mxtest: gomx's C tests of libmyriexpress, written against MX's API only
 * (myriexpress.h, mx_extensions.h). Every MX call's return code is
 * checked; any failure prints the call, the line and the code, and exits 1.
 * One file (about 1,000 lines) on purpose: the tests build with one gcc
 * command per binary, and each mode below is a few self-contained checks.
 *
 *   mxtest local                      one process: completion calls,
 *                                     probe, handler, wakeup, errors
 *   mxtest pair [rounds]              two processes (this one spawns the
 *                                     other): ping-pong of every class of
 *                                     size, then a random message loop
 *   mxtest bench SIZE ITERS           two processes: ping-pong timing
 *                                     (MXTEST_BIND=1: each process on its
 *                                     own CPU, as mxbench --bind)
 *   mxtest mxbench-client HOST:PORT   the client of `mxbench serve`
 *   mxtest mxbench-server             the server of `mxbench pingpong
 *                                     --peer`, for one client
 *   mxtest crossing [N]               the cost of one call into the library
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "myriexpress.h"
#include "mx_extensions.h"

extern char **environ;

#define KEY 0x12345678
#define TAG_HELLO 0x100
#define TAG_DATA 0x200
#define TAG_ACK 0x300
#define TAG_BYE 0x400

static const char *prog = "mxtest";

/* MX(call) checks a call returned MX_SUCCESS. */
#define MX(call) mx_check((call), #call, __LINE__)
/* EXPECT(call, code) checks a call returned code. */
#define EXPECT(call, code) mx_expect((call), (code), #call, __LINE__)
#define REQUIRE(cond)                                                                     \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s: line %d: %s is false\n", prog, __LINE__, #cond); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

static void mx_check(mx_return_t rc, const char *call, int line)
{
	if (rc != MX_SUCCESS) {
		fprintf(stderr, "%s: line %d: %s returned %d (%s)\n", prog, line, call, rc, mx_strerror(rc));
		exit(1);
	}
}

static void mx_expect(mx_return_t rc, mx_return_t want, const char *call, int line)
{
	if (rc != want) {
		fprintf(stderr, "%s: line %d: %s returned %d (%s), want %d (%s)\n", prog, line, call, rc,
			mx_strerror(rc), want, mx_strerror(want));
		exit(1);
	}
}

/* The byte pattern of message msg of len bytes (mxbench's, so --verify
 * runs check both ways). */
static void pattern(uint8_t *b, size_t len, uint32_t msg)
{
	uint32_t x = msg * 2654435761u + (uint32_t)len;
	for (size_t i = 0; i < len; i++) {
		x = x * 1664525u + 1013904223u;
		b[i] = (uint8_t)(x >> 24);
	}
}

static long check(const uint8_t *b, size_t len, uint32_t msg)
{
	uint32_t x = msg * 2654435761u + (uint32_t)len;
	for (size_t i = 0; i < len; i++) {
		x = x * 1664525u + 1013904223u;
		if (b[i] != (uint8_t)(x >> 24))
			return (long)i;
	}
	return -1;
}

/* cpu_us is this thread's CPU time: what a call costs on a loaded
 * machine, where wall time also counts the time the thread waited for a
 * CPU. */
static double cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* wait1 waits for one request and checks it succeeded. */
static void wait1(mx_endpoint_t ep, mx_request_t *r, mx_status_t *st, int line)
{
	uint32_t result = 0;
	mx_status_t tmp;
	if (!st)
		st = &tmp;
	mx_check(mx_wait(ep, r, MX_INFINITE, st, &result), "mx_wait", line);
	if (result != 1 || st->code != MX_STATUS_SUCCESS) {
		fprintf(stderr, "%s: line %d: mx_wait: result %u, status %d (%s)\n", prog, line, result, st->code,
			mx_strstatus(st->code));
		exit(1);
	}
}
#define WAIT(ep, r, st) wait1((ep), (r), (st), __LINE__)

static mx_request_t send1(mx_endpoint_t ep, void *buf, uint32_t len, mx_endpoint_addr_t dest, uint64_t match)
{
	mx_segment_t seg = {buf, len};
	mx_request_t r;
	MX(mx_isend(ep, &seg, 1, dest, match, NULL, &r));
	return r;
}

static mx_request_t recv1(mx_endpoint_t ep, void *buf, uint32_t len, uint64_t match)
{
	mx_segment_t seg = {buf, len};
	mx_request_t r;
	MX(mx_irecv(ep, &seg, 1, match, MX_MATCH_MASK_NONE, NULL, &r));
	return r;
}

/* ---------------- local: one process, two endpoints ---------------- */

static int handler_errors;
static mx_return_t counting_handler(char *str, mx_return_t ret)
{
	(void)str;
	handler_errors++;
	return ret;
}

struct unexp_state {
	mx_endpoint_t ep;
	int seen, finished, posted;
	uint8_t buf[64];
	mx_request_t r;
	uint8_t first;
	uint32_t len;
};

static mx_unexp_handler_action_t unexp_handler(void *ctx, mx_endpoint_addr_t src, uint64_t match, uint32_t length,
					       void *data)
{
	struct unexp_state *u = ctx;
	(void)src;
	u->seen++;
	u->len = length;
	if (data && length > 0)
		u->first = ((uint8_t *)data)[0];
	if (match == 0xF1) /* dropped by the handler */
		return (u->finished++, MX_RECV_FINISHED);
	if (match == 0xF2) { /* the handler posts its receive, then continues */
		mx_segment_t seg = {u->buf, sizeof u->buf};
		MX(mx_irecv(u->ep, &seg, 1, 0xF2, MX_MATCH_MASK_NONE, NULL, &u->r));
		u->posted++;
		/* Blocking calls are refused inside the handler. */
		uint32_t result;
		mx_status_t st;
		EXPECT(mx_wait(u->ep, &u->r, 1, &st, &result), MX_CLOSE_IN_HANDLER);
		EXPECT(mx_close_endpoint(u->ep), MX_CLOSE_IN_HANDLER);
	}
	return MX_RECV_CONTINUE;
}

struct waker {
	mx_endpoint_t ep;
	mx_request_t r;
	atomic_int started, done;
	uint32_t result;
	mx_return_t rc;
};

static void *wait_thread(void *arg)
{
	struct waker *w = arg;
	mx_status_t st;
	atomic_store(&w->started, 1);
	w->rc = mx_wait(w->ep, &w->r, MX_INFINITE, &st, &w->result);
	atomic_store(&w->done, 1);
	return NULL;
}

/* A completer thread: wait_any on another thread reaps sends as they are
 * posted, often before mx_isend has returned their handle. */
struct completer {
	mx_endpoint_t ep;
	int want, got, bad;
};

static void *complete_thread(void *arg)
{
	struct completer *c = arg;
	mx_status_t st;
	uint32_t result;
	while (c->got < c->want) {
		mx_return_t rc = mx_wait_any(c->ep, 10000, 0xD00, MX_MATCH_MASK_NONE, &st, &result);
		if (rc != MX_SUCCESS || result == 0 || st.code != MX_STATUS_SUCCESS ||
		    (uintptr_t)st.context != (uintptr_t)c->got + 1) {
			c->bad++;
			break;
		}
		c->got++;
	}
	return NULL;
}

/* A poster thread: eager sends (complete when their post returns), each
 * waited for by its handle, while another thread reports other requests
 * of the same endpoint with test_any. */
struct poster {
	mx_endpoint_t ep;
	mx_endpoint_addr_t dest;
	int n, bad;
};

static void *post_thread(void *arg)
{
	struct poster *p = arg;
	uint8_t one = 1;
	for (int i = 0; i < p->n; i++) {
		mx_segment_t s1 = {&one, 1};
		mx_request_t sr;
		mx_status_t st;
		uint32_t result = 0;
		if (mx_isend(p->ep, &s1, 1, p->dest, 0xE00, (void *)(uintptr_t)(i + 1), &sr) != MX_SUCCESS ||
		    mx_wait(p->ep, &sr, MX_INFINITE, &st, &result) != MX_SUCCESS || result != 1 ||
		    st.code != MX_STATUS_SUCCESS || (uintptr_t)st.context != (uintptr_t)i + 1 || sr != 0) {
			p->bad++;
			break;
		}
	}
	return NULL;
}

static void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static int run_local(void)
{
	mx_endpoint_t a, b, c;
	mx_endpoint_addr_t aa, ba, a_to_b, b_to_a;
	uint64_t nic, nic2;
	uint32_t eid, eid2, session, result, board;
	mx_status_t st;
	mx_request_t r, rs[3];
	char host[MX_MAX_HOSTNAME_LEN];
	uint8_t small[200], big[300000], rbig[300000];

	mx_set_error_handler(MX_ERRORS_RETURN);
	EXPECT(mx_open_endpoint(0, 0, KEY, NULL, 0, &a), MX_NOT_INITIALIZED);
	MX(mx_init());
	EXPECT(mx_init(), MX_ALREADY_INITIALIZED);

	/* Boards and names. */
	MX(mx_get_info(NULL, MX_NIC_COUNT, NULL, 0, &result, sizeof result));
	REQUIRE(result >= 1);
	uint64_t ids[8];
	MX(mx_get_info(NULL, MX_NIC_IDS, NULL, 0, ids, sizeof ids));
	EXPECT(mx_get_info(NULL, MX_NIC_IDS, NULL, 0, ids, 8), MX_BAD_INFO_LENGTH);
	EXPECT(mx_get_info(NULL, (mx_get_info_key_t)99, NULL, 0, &result, sizeof result), MX_BAD_INFO_KEY);
	MX(mx_board_number_to_nic_id(0, &nic));
	REQUIRE(nic == ids[0] && nic != 0);
	MX(mx_nic_id_to_board_number(nic, &board));
	REQUIRE(board == 0);
	EXPECT(mx_board_number_to_nic_id(77, &nic2), MX_BOARD_UNKNOWN);
	MX(mx_nic_id_to_hostname(nic, host));
	MX(mx_hostname_to_nic_id(host, &nic2));
	REQUIRE(nic2 == nic);
	EXPECT(mx_hostname_to_nic_id("no.such.host.invalid:7", &nic2), MX_HOST_NOT_FOUND);

	/* Endpoints: one with a context id, one busy. */
	mx_param_t ctxid = {.key = MX_PARAM_CONTEXT_ID, .val.context_id = {4, 60}};
	MX(mx_open_endpoint(0, 3, KEY, NULL, 0, &a));
	MX(mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, KEY, &ctxid, 1, &b));
	EXPECT(mx_open_endpoint(0, 3, KEY, NULL, 0, &c), MX_BUSY);
	EXPECT(mx_open_endpoint(0, 300, KEY, NULL, 0, &c), MX_BAD_ENDPOINT_ID);
	EXPECT(mx_open_endpoint(0, 4, KEY, NULL, 1, &c), MX_BAD_PARAM_LIST);
	MX(mx_get_endpoint_addr(a, &aa));
	MX(mx_get_endpoint_addr(b, &ba));
	MX(mx_decompose_endpoint_addr(aa, &nic2, &eid));
	REQUIRE(nic2 == nic && eid == 3);
	MX(mx_decompose_endpoint_addr2(ba, &nic2, &eid2, &session));
	REQUIRE(nic2 == nic && eid2 != 3);

	/* A send to the endpoint's own address needs no connect (MX's rule). */
	{
		uint8_t m = 0x5A, got = 0;
		mx_request_t rr = recv1(a, &got, 1, 0x50);
		mx_request_t ss = send1(a, &m, 1, aa, 0x50);
		WAIT(a, &ss, NULL);
		WAIT(a, &rr, &st);
		REQUIRE(got == 0x5A && st.xfer_length == 1);
	}

	/* Connects: a wrong key, then iconnect and connect. */
	EXPECT(mx_connect(a, nic, eid2, KEY + 1, 5000, &a_to_b), MX_BAD_CONNECTION_KEY);
	MX(mx_iconnect(a, nic, eid2, KEY, 0x77, (void *)0x77, &r));
	WAIT(a, &r, &st);
	REQUIRE(st.match_info == 0x77 && st.context == (void *)0x77);
	a_to_b = st.source;
	MX(mx_connect(b, nic, eid, KEY, 5000, &b_to_a));
	MX(mx_decompose_endpoint_addr2(a_to_b, &nic2, &eid, &session));
	REQUIRE(eid == eid2 && session != 0);

	/* Address contexts. */
	void *p = (void *)1;
	MX(mx_get_endpoint_addr_context(a_to_b, &p));
	REQUIRE(p == NULL);
	MX(mx_set_endpoint_addr_context(a_to_b, (void *)0xABC));
	MX(mx_get_endpoint_addr_context(a_to_b, &p));
	REQUIRE(p == (void *)0xABC);

	/* Context ids: a receive must not wildcard the reserved bits. */
	mx_segment_t seg = {small, sizeof small};
	EXPECT(mx_irecv(b, &seg, 1, 0, 0, NULL, &r), MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);
	EXPECT(mx_irecv(a, &seg, 1, 0xF0, 0x0F, NULL, &r), MX_BAD_MATCH_MASK);
	mx_segment_t many[MX_MAX_SEGMENTS + 1];
	for (int i = 0; i <= MX_MAX_SEGMENTS; i++)
		many[i] = (mx_segment_t){small, 0};
	EXPECT(mx_irecv(a, many, MX_MAX_SEGMENTS + 1, 0, MX_MATCH_MASK_NONE, NULL, &r), MX_BAD_SEG_CNT);
	EXPECT(mx_irecv(a, NULL, 2, 0, MX_MATCH_MASK_NONE, NULL, &r), MX_BAD_SEG_LIST);
	mx_segment_t nullseg = {NULL, 8}; /* one segment, the common case's path */
	EXPECT(mx_irecv(a, &nullseg, 1, 0, MX_MATCH_MASK_NONE, NULL, &r), MX_BAD_SEG_MEM);

	/* wait_any and test_any with a match filter, contexts, mx_context. */
	for (int i = 0; i < 3; i++) {
		mx_segment_t s = {small + 10 * i, 10};
		MX(mx_irecv(b, &s, 1, 0x500 + i, MX_MATCH_MASK_NONE, (void *)(uintptr_t)(i + 1), &rs[i]));
	}
	void *ctx;
	MX(mx_context(&rs[1], &ctx));
	REQUIRE(ctx == (void *)2);
	MX(mx_test_any(b, 0, 0, &st, &result));
	REQUIRE(result == 0);
	for (int i = 2; i >= 0; i--) {
		uint8_t m[10];
		memset(m, 0xA0 + i, sizeof m);
		r = send1(a, m, sizeof m, a_to_b, 0x500 + i);
		WAIT(a, &r, NULL); /* eager: the data is copied */
	}
	MX(mx_wait_any(b, 5000, 0x501, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 1 && st.context == (void *)2 && st.match_info == 0x501 && st.xfer_length == 10);
	REQUIRE(small[10] == 0xA1);
	int got = 0;
	for (int tries = 0; got < 2 && tries < 100000; tries++) {
		MX(mx_test_any(b, 0x500, ~(uint64_t)3, &st, &result));
		if (result) {
			REQUIRE(st.context == (void *)1 || st.context == (void *)3);
			got++;
		}
	}
	if (got < 2)
		MX(mx_wait_any(b, 5000, 0x500, ~(uint64_t)3, &st, &result)), got += result;
	if (got < 2)
		MX(mx_wait_any(b, 5000, 0x500, ~(uint64_t)3, &st, &result)), got += result;
	REQUIRE(got == 2);
	EXPECT(mx_test(b, &rs[0], &st, &result), MX_BAD_REQUEST); /* completed by test_any */

	/* Probe: a message nobody waits for stays unexpected. */
	MX(mx_iprobe(b, 0x600, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 0);
	memset(small, 7, 33);
	r = send1(a, small, 33, a_to_b, 0x600);
	WAIT(a, &r, NULL);
	MX(mx_probe(b, 5000, 0x600, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 1 && st.msg_length == 33 && st.match_info == 0x600);
	MX(mx_iprobe(b, 0x600, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 1);
	MX(mx_probe(b, 1, 0x601, MX_MATCH_MASK_NONE, &st, &result)); /* 1 ms, nothing */
	REQUIRE(result == 0);
	/* Receive it, truncated: the status says so. */
	r = recv1(b, small + 100, 10, 0x600);
	MX(mx_wait(b, &r, MX_INFINITE, &st, &result));
	REQUIRE(result == 1 && st.code == MX_STATUS_TRUNCATED && st.msg_length == 33 && st.xfer_length == 10);
	REQUIRE(small[100] == 7);

	/* Peek returns a completed request without completing it. */
	r = recv1(b, small, 8, 0x650);
	MX(mx_ipeek(b, &rs[0], &result));
	REQUIRE(result == 0);
	mx_request_t sr = send1(a, small + 50, 8, a_to_b, 0x650);
	WAIT(a, &sr, NULL);
	MX(mx_peek(b, 5000, &rs[0], &result));
	REQUIRE(result == 1 && rs[0] == r);
	MX(mx_test(b, &r, &st, &result));
	REQUIRE(result == 1 && st.code == MX_STATUS_SUCCESS);

	/* Cancel: a posted receive yes, a send no. */
	r = recv1(b, small, 8, 0x700);
	MX(mx_cancel(b, &r, &result));
	REQUIRE(result == 1);
	r = recv1(b, small, 8, 0x701);
	sr = send1(a, small, 8, a_to_b, 0x701);
	EXPECT(mx_cancel(a, &sr, &result), MX_CANCEL_NOT_SUPPORTED);
	WAIT(a, &sr, NULL);
	WAIT(b, &r, NULL);

	/* A large send: not buffered until the receiver pulled it; issend. */
	pattern(big, sizeof big, 9);
	sr = send1(a, big, sizeof big, a_to_b, 0x800);
	MX(mx_ibuffered(a, &sr, &result));
	r = recv1(b, rbig, sizeof rbig, 0x800);
	WAIT(b, &r, &st);
	REQUIRE(st.xfer_length == sizeof big && check(rbig, sizeof big, 9) < 0);
	WAIT(a, &sr, NULL);
	{
		mx_segment_t s = {small, 16};
		MX(mx_issend(a, &s, 1, a_to_b, 0x801, NULL, &sr));
	}
	MX(mx_test(a, &sr, &st, &result));
	REQUIRE(result == 0); /* nobody received it yet */
	r = recv1(b, small + 100, 16, 0x801);
	WAIT(b, &r, NULL);
	WAIT(a, &sr, NULL);

	/* Segments: a message gathered from three, scattered into two. */
	{
		uint8_t src[300], dst[300];
		pattern(src, sizeof src, 5);
		mx_segment_t ss[3] = {{src, 100}, {src + 100, 0}, {src + 100, 200}};
		mx_segment_t ds[2] = {{dst, 7}, {dst + 7, 293}};
		MX(mx_irecv(b, ds, 2, 0x900, MX_MATCH_MASK_NONE, NULL, &r));
		MX(mx_isend(a, ss, 3, a_to_b, 0x900, NULL, &sr));
		WAIT(b, &r, &st);
		WAIT(a, &sr, NULL);
		REQUIRE(st.xfer_length == 300 && check(dst, sizeof dst, 5) < 0);
	}

	/* Forget: the request completes unseen; test_any never reports it. */
	r = recv1(b, small, 8, 0xA00);
	MX(mx_forget(b, &r));
	sr = send1(a, small, 8, a_to_b, 0xA00);
	WAIT(a, &sr, NULL);
	MX(mx_test_any(b, 0xA00, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 0);

	/* Request timeouts: endpoint default and per request. */
	MX(mx_set_request_timeout(a, NULL, 60000));
	sr = send1(a, small, 8, a_to_b, 0xB00);
	MX(mx_set_request_timeout(a, sr, 60000));
	r = recv1(b, small, 8, 0xB00);
	WAIT(b, &r, NULL);
	WAIT(a, &sr, NULL);

	/* The unexpected handler: drops one, posts for another, leaves a third. */
	struct unexp_state u = {.ep = b};
	MX(mx_register_unexp_handler(b, unexp_handler, &u));
	small[0] = 0x42;
	sr = send1(a, small, 5, a_to_b, 0xF1);
	WAIT(a, &sr, NULL);
	sr = send1(a, small, 6, a_to_b, 0xF2);
	WAIT(a, &sr, NULL);
	sr = send1(a, small, 7, a_to_b, 0xF3);
	WAIT(a, &sr, NULL);
	MX(mx_probe(b, 5000, 0xF3, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 1);
	REQUIRE(u.seen == 3 && u.finished == 1 && u.posted == 1 && u.first == 0x42);
	WAIT(b, &u.r, &st);
	REQUIRE(st.xfer_length == 6 && u.buf[0] == 0x42);
	MX(mx_iprobe(b, 0xF1, MX_MATCH_MASK_NONE, &st, &result));
	REQUIRE(result == 0); /* the handler consumed it */
	r = recv1(b, small, 8, 0xF3);
	WAIT(b, &r, &st);
	REQUIRE(st.xfer_length == 7);
	MX(mx_register_unexp_handler(b, NULL, NULL));
	/* With progression disabled the handler does not run. */
	MX(mx_disable_progression(b));
	MX(mx_reenable_progression(b));
	EXPECT(mx_reenable_progression(b), MX_BAD_REQUEST);
	MX(mx_progress(b));

	/* Wakeup from another thread ends a wait with nothing completed. */
	struct waker w = {.ep = b};
	w.r = recv1(b, small, 8, 0xC00);
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, wait_thread, &w) == 0);
	for (int i = 0; i < 100000 && !atomic_load(&w.started); i++)
		sleep_us(100);
	for (int i = 0; i < 100000 && !atomic_load(&w.done); i++) {
		MX(mx_wakeup(b));
		sleep_us(100);
	}
	REQUIRE(atomic_load(&w.done));
	pthread_join(th, NULL);
	MX(w.rc);
	REQUIRE(w.result == 0);
	MX(mx_cancel(b, &w.r, &result));
	REQUIRE(result == 1);

	/* Sends posted on this thread, completed on another. */
	{
		struct completer cm = {.ep = a, .want = 2000};
		pthread_t ct;
		uint8_t one = 1;
		REQUIRE(pthread_create(&ct, NULL, complete_thread, &cm) == 0);
		for (int i = 0; i < cm.want; i++) {
			mx_segment_t s1 = {&one, 1};
			MX(mx_isend(a, &s1, 1, a_to_b, 0xD00, (void *)(uintptr_t)(i + 1), &sr));
			/* sr may be completed already: the completer owns it. */
		}
		pthread_join(ct, NULL);
		REQUIRE(cm.bad == 0 && cm.got == cm.want);
		for (int i = 0; i < cm.want; i++) {
			r = recv1(b, small, 8, 0xD00);
			WAIT(b, &r, &st);
		}
	}

	/* Requests complete when their post returns (an eager send; a
	 * receive whose message is there): every call that takes a request
	 * answers for them as for any other, and the any-calls report them
	 * in the order they completed. Each part runs on a fresh endpoint
	 * that sends to itself. */
	{
		uint8_t m[8] = "early", got[8] = {0};
		mx_request_t s1, s2, s3, kept;
		mx_endpoint_t e1;
		mx_endpoint_addr_t self;
		void *ctx;
		MX(mx_open_endpoint(0, MX_ANY_ENDPOINT, KEY, NULL, 0, &e1));
		MX(mx_get_endpoint_addr(e1, &self));
		/* A send: context, ibuffered, cancel, timeout, then test. */
		MX(mx_isend(e1, &(mx_segment_t){m, 6}, 1, self, 0xE10, (void *)0xE1, &s1));
		MX(mx_context(&s1, &ctx));
		REQUIRE(ctx == (void *)0xE1);
		MX(mx_ibuffered(e1, &s1, &result));
		REQUIRE(result == 1);
		EXPECT(mx_cancel(e1, &s1, &result), MX_CANCEL_NOT_SUPPORTED);
		MX(mx_set_request_timeout(e1, s1, 1000));
		EXPECT(mx_test(b, &s1, &st, &result), MX_BAD_REQUEST); /* another endpoint's */
		kept = s1;
		MX(mx_test(e1, &s1, &st, &result));
		REQUIRE(result == 1 && s1 == 0 && st.code == MX_STATUS_SUCCESS && st.xfer_length == 6 &&
			st.match_info == 0xE10 && st.context == (void *)0xE1);
		EXPECT(mx_test(e1, &kept, &st, &result), MX_BAD_REQUEST); /* reported already */
		EXPECT(mx_wait(e1, &kept, MX_INFINITE, &st, &result), MX_BAD_REQUEST);
		EXPECT(mx_context(&kept, &ctx), MX_BAD_REQUEST);
		/* A receive whose message is there: not cancellable, then wait. */
		for (int i = 0; i < 100000; i++) {
			MX(mx_iprobe(e1, 0xE10, MX_MATCH_MASK_NONE, &st, &result));
			if (result)
				break;
			sleep_us(100);
		}
		REQUIRE(result == 1);
		MX(mx_irecv(e1, &(mx_segment_t){got, sizeof got}, 1, 0xE10, MX_MATCH_MASK_NONE, (void *)0xE2, &r));
		EXPECT(mx_ibuffered(e1, &r, &result), MX_BAD_REQUEST); /* not a send */
		MX(mx_cancel(e1, &r, &result));
		REQUIRE(result == 0); /* completed: still held */
		MX(mx_wait(e1, &r, MX_INFINITE, &st, &result));
		REQUIRE(result == 1 && st.xfer_length == 6 && st.context == (void *)0xE2 && memcmp(got, "early", 6) == 0);
		/* forget drops one; ipeek, peek, test_any and wait_any see the
		 * others, oldest first. */
		MX(mx_isend(e1, &(mx_segment_t){m, 1}, 1, self, 0xE11, (void *)0x11, &s1));
		MX(mx_isend(e1, &(mx_segment_t){m, 2}, 1, self, 0xE12, (void *)0x12, &s2));
		MX(mx_isend(e1, &(mx_segment_t){m, 3}, 1, self, 0xE13, (void *)0x13, &s3));
		MX(mx_isend(e1, &(mx_segment_t){m, 4}, 1, self, 0xE14, (void *)0x14, &kept));
		MX(mx_forget(e1, &kept));
		REQUIRE(kept == 0);
		mx_request_t pk = 0;
		MX(mx_ipeek(e1, &pk, &result));
		REQUIRE(result == 1 && pk == s1);
		MX(mx_peek(e1, 1000, &pk, &result));
		REQUIRE(result == 1 && pk == s1);
		MX(mx_test_any(e1, 0xE12, MX_MATCH_MASK_NONE, &st, &result));
		REQUIRE(result == 1 && st.context == (void *)0x12 && st.xfer_length == 2);
		EXPECT(mx_test(e1, &s2, &st, &result), MX_BAD_REQUEST);
		MX(mx_wait_any(e1, 1000, 0xE00, 0xFF00, &st, &result));
		REQUIRE(result == 1 && st.context == (void *)0x11);
		MX(mx_wait(e1, &s3, MX_INFINITE, &st, &result));
		REQUIRE(result == 1 && st.context == (void *)0x13);
		MX(mx_test_any(e1, 0xE00, 0xFF00, &st, &result));
		REQUIRE(result == 0);
		MX(mx_isend(e1, &(mx_segment_t){m, 1}, 1, self, 0xE15, NULL, &s1));
		WAIT(e1, &s1, NULL);
		for (int i = 0; i < 5; i++) {
			r = recv1(e1, got, sizeof got, 0xE11 + (uint64_t)i);
			WAIT(e1, &r, &st);
			REQUIRE(st.xfer_length == (uint32_t)(i < 4 ? i + 1 : 1));
		}
		MX(mx_close_endpoint(e1));

		/* Under concurrency: one thread posts and waits by handle while
		 * another posts its own sends and makes the endpoint's
		 * any-calls (test_any, wait_any): each sees its own
		 * completions, once each and in order. */
		for (int round = 0; round < 20; round++) {
			MX(mx_open_endpoint(0, MX_ANY_ENDPOINT, KEY, NULL, 0, &e1));
			MX(mx_get_endpoint_addr(e1, &self));
			struct poster ps = {.ep = e1, .dest = self, .n = 200};
			pthread_t pt;
			int mine = 0, reported = 0;
			REQUIRE(pthread_create(&pt, NULL, post_thread, &ps) == 0);
			for (int i = 0; i < 1000000 && reported < 50; i++) {
				if (mine < 50) {
					MX(mx_isend(e1, &(mx_segment_t){m, 1}, 1, self, 0xE01, (void *)(uintptr_t)(mine + 1), &s1));
					mine++;
				}
				if (round % 2)
					MX(mx_test_any(e1, 0xE01, MX_MATCH_MASK_NONE, &st, &result));
				else
					MX(mx_wait_any(e1, 1000, 0xE01, MX_MATCH_MASK_NONE, &st, &result));
				if (result) {
					REQUIRE(st.code == MX_STATUS_SUCCESS && st.match_info == 0xE01);
					REQUIRE((uintptr_t)st.context == (uintptr_t)reported + 1);
					reported++;
				}
			}
			pthread_join(pt, NULL);
			REQUIRE(ps.bad == 0 && reported == 50);
			for (int i = 0; i < 250; i++) {
				r = recv1(e1, got, sizeof got, i < 200 ? 0xE00 : 0xE01);
				WAIT(e1, &r, &st);
			}
			MX(mx_close_endpoint(e1));
		}
	}

	/* The error handler: a custom one sees failures and chooses the code. */
	mx_error_handler_t old = mx_set_error_handler(counting_handler);
	REQUIRE(old == MX_ERRORS_RETURN);
	mx_request_t bogus = (mx_request_t)(uintptr_t)0x999;
	EXPECT(mx_test(b, &bogus, &st, &result), MX_BAD_REQUEST);
	REQUIRE(handler_errors == 1);
	mx_set_error_handler(MX_ERRORS_RETURN);
	EXPECT(mx_test((mx_endpoint_t)(uintptr_t)0x7777, &bogus, &st, &result), MX_BAD_ENDPOINT);
	REQUIRE(strcmp(mx_strstatus(MX_STATUS_TRUNCATED), "") != 0 && strcmp(mx_strerror(MX_TIMEOUT), "") != 0);

	/* Disconnect, then sends to the peer fail. */
	MX(mx_disconnect(a, a_to_b));
	{
		mx_segment_t s = {small, 1};
		EXPECT(mx_isend(a, &s, 1, a_to_b, 1, NULL, &sr), MX_BAD_ENDPOINT_ID);
	}

	/* Counters. */
	MX(mx_get_info(a, MX_COUNTERS_COUNT, NULL, 0, &result, sizeof result));
	REQUIRE(result > 10);
	{
		uint32_t n = result;
		char *labels = calloc(n, MX_MAX_STR_LEN);
		uint32_t *vals = calloc(n, sizeof *vals);
		uint32_t zero = 0;
		MX(mx_get_info(a, MX_COUNTERS_LABELS, NULL, 0, labels, n * MX_MAX_STR_LEN));
		MX(mx_get_info(a, MX_COUNTERS_VALUES, &zero, sizeof zero, vals, n * sizeof *vals));
		REQUIRE(labels[0] != 0);
		free(labels);
		free(vals);
	}

	/* Closing an endpoint releases its completed, unreported requests. */
	{
		uint8_t m = 1;
		mx_request_t held = send1(a, &m, 1, aa, 0xF00);
		MX(mx_close_endpoint(a));
		EXPECT(mx_test(a, &held, &st, &result), MX_BAD_ENDPOINT);
	}
	EXPECT(mx_close_endpoint(a), MX_BAD_ENDPOINT);
	MX(mx_close_endpoint(b));
	MX(mx_finalize());
	EXPECT(mx_finalize(), MX_NOT_INITIALIZED);
	printf("local: ok\n");
	return 0;
}

/* ---------------- pair: two processes ---------------- */

static pid_t spawn_self(char *const argv[])
{
	pid_t pid;
	int err = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ);
	if (err) {
		fprintf(stderr, "%s: posix_spawn: %s\n", prog, strerror(err));
		exit(1);
	}
	return pid;
}

static void reap(pid_t pid)
{
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: peer process failed (status %#x)\n", prog, status);
		exit(1);
	}
}

/* open_and_spawn opens the endpoint and starts the peer process, which
 * connects and says hello; returns the address of the peer. */
static mx_endpoint_addr_t open_and_spawn(mx_endpoint_t *ep, const char *role, const char *arg, pid_t *pid)
{
	mx_endpoint_addr_t me, peer;
	uint64_t nic;
	uint32_t eid;
	mx_status_t st;
	mx_request_t r;
	char nicbuf[32], eidbuf[16];

	MX(mx_init());
	MX(mx_open_endpoint(0, MX_ANY_ENDPOINT, KEY, NULL, 0, ep));
	MX(mx_get_endpoint_addr(*ep, &me));
	MX(mx_decompose_endpoint_addr(me, &nic, &eid));
	snprintf(nicbuf, sizeof nicbuf, "%" PRIx64, nic);
	snprintf(eidbuf, sizeof eidbuf, "%u", eid);
	char *argv[] = {(char *)prog, (char *)role, nicbuf, eidbuf, (char *)arg, NULL};
	*pid = spawn_self(argv);
	r = recv1(*ep, NULL, 0, TAG_HELLO);
	WAIT(*ep, &r, &st);
	/* Connect back, which also checks the key. */
	MX(mx_decompose_endpoint_addr(st.source, &nic, &eid));
	MX(mx_connect(*ep, nic, eid, KEY, 60000, &peer));
	return peer;
}

/* peer_connect is the spawned side: connect to the parent, say hello. */
static mx_endpoint_addr_t peer_connect(mx_endpoint_t *ep, const char *nicstr, const char *eidstr)
{
	mx_endpoint_addr_t parent;
	mx_request_t r;
	MX(mx_init());
	MX(mx_open_endpoint(0, MX_ANY_ENDPOINT, KEY, NULL, 0, ep));
	MX(mx_connect(*ep, strtoull(nicstr, NULL, 16), (uint32_t)atoi(eidstr), KEY, 60000, &parent));
	r = send1(*ep, NULL, 0, parent, TAG_HELLO);
	WAIT(*ep, &r, NULL);
	return parent;
}

static const uint32_t pp_sizes[] = {0, 1, 8, 32, 33, 128, 129, 4000, 8192, 9000, 32768, 32769, 70000, 1 << 20};
#define NSIZES (sizeof pp_sizes / sizeof pp_sizes[0])

/* The random loop's messages: match info = TAG_DATA<<32 | seq, length
 * from the sender's generator; the receiver checks order and bytes. */
static uint32_t rnd(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return (uint32_t)(*s >> 33);
}

static int run_pair(int rounds)
{
	mx_endpoint_t ep;
	pid_t pid;
	char rbuf[16];
	snprintf(rbuf, sizeof rbuf, "%d", rounds);
	mx_endpoint_addr_t peer = open_and_spawn(&ep, "pair-peer", rbuf, &pid);
	uint8_t *sbuf = malloc(1 << 20), *rb = malloc(1 << 20);
	mx_status_t st;
	uint32_t msg = 0;

	/* Ping-pong of every size class: tiny, small, medium, large. */
	for (size_t k = 0; k < NSIZES; k++) {
		for (int i = 0; i < 5; i++, msg++) {
			uint32_t n = pp_sizes[k];
			pattern(sbuf, n, msg);
			mx_request_t rr = recv1(ep, rb, n, TAG_DATA);
			mx_request_t sr = send1(ep, sbuf, n, peer, TAG_DATA);
			WAIT(ep, &sr, NULL);
			WAIT(ep, &rr, &st);
			REQUIRE(st.xfer_length == n && st.msg_length == n);
			REQUIRE(check(rb, n, msg + 1000000) < 0);
		}
	}
	/* The random loop: batches of 1..8 messages of random length split
	 * into random segments, each batch acknowledged. */
	uint64_t seed = 42;
	uint32_t seq = 0;
	for (int round = 0; round < rounds; round++) {
		int nmsg = 1 + rnd(&seed) % 8;
		mx_request_t reqs[8];
		uint8_t *bufs[8];
		for (int m = 0; m < nmsg; m++, seq++) {
			uint32_t len = rnd(&seed) % 4 == 0 ? rnd(&seed) % 200000 : rnd(&seed) % 2000;
			bufs[m] = malloc(len + 1);
			pattern(bufs[m], len, seq);
			mx_segment_t segs[4];
			uint32_t nseg = 1 + rnd(&seed) % 4, off = 0;
			for (uint32_t s = 0; s < nseg; s++) {
				uint32_t l = s + 1 == nseg ? len - off : (len - off) / 2;
				segs[s] = (mx_segment_t){bufs[m] + off, l};
				off += l;
			}
			uint64_t match = (uint64_t)TAG_DATA << 32 | seq;
			if (rnd(&seed) % 5 == 0)
				MX(mx_issend(ep, segs, nseg, peer, match, bufs[m], &reqs[m]));
			else
				MX(mx_isend(ep, segs, nseg, peer, match, bufs[m], &reqs[m]));
		}
		for (int m = 0; m < nmsg; m++) {
			WAIT(ep, &reqs[m], &st);
			REQUIRE(st.context == bufs[m]);
			free(bufs[m]);
		}
		uint32_t ack = 0;
		mx_request_t ar = recv1(ep, &ack, sizeof ack, TAG_ACK);
		WAIT(ep, &ar, &st);
		REQUIRE(ack == seq);
	}
	mx_request_t br = send1(ep, NULL, 0, peer, TAG_BYE);
	WAIT(ep, &br, NULL);
	reap(pid);
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	free(sbuf);
	free(rb);
	printf("pair: ok: %zu sizes ping-ponged, %d random rounds (%u messages)\n", NSIZES, rounds, seq);
	return 0;
}

static int run_pair_peer(const char *nicstr, const char *eidstr, int rounds)
{
	mx_endpoint_t ep;
	mx_endpoint_addr_t parent = peer_connect(&ep, nicstr, eidstr);
	uint8_t *buf = malloc(1 << 20), *sbuf = malloc(1 << 20);
	mx_status_t st;
	uint32_t msg = 0;
	for (size_t k = 0; k < NSIZES; k++) {
		for (int i = 0; i < 5; i++, msg++) {
			uint32_t n = pp_sizes[k];
			mx_request_t rr = recv1(ep, buf, n, TAG_DATA);
			WAIT(ep, &rr, &st);
			REQUIRE(st.xfer_length == n && check(buf, n, msg) < 0);
			pattern(sbuf, n, msg + 1000000);
			mx_request_t sr = send1(ep, sbuf, n, parent, TAG_DATA);
			WAIT(ep, &sr, NULL);
		}
	}
	uint64_t seed = 42;
	uint32_t seq = 0;
	for (int round = 0; round < rounds; round++) {
		/* Replay the sender's generator for the batch size only; the
		 * lengths come from the statuses. */
		int nmsg = 1 + rnd(&seed) % 8;
		for (int m = 0; m < nmsg; m++) {
			uint32_t len = rnd(&seed) % 4 == 0 ? rnd(&seed) % 200000 : rnd(&seed) % 2000;
			uint32_t nseg = 1 + rnd(&seed) % 4;
			rnd(&seed); /* issend or isend */
			(void)nseg;
			/* Any message of the loop: receives must see them in order. */
			mx_segment_t segs[2] = {{buf, 1000}, {buf + 1000, 200000}};
			mx_request_t rr;
			MX(mx_irecv(ep, segs, 2, (uint64_t)TAG_DATA << 32, ~(uint64_t)0xFFFFFFFF, NULL, &rr));
			WAIT(ep, &rr, &st);
			REQUIRE((uint32_t)st.match_info == seq);
			REQUIRE(st.xfer_length == len && check(buf, len, seq) < 0);
			seq++;
		}
		mx_request_t ar = send1(ep, &seq, sizeof seq, parent, TAG_ACK);
		WAIT(ep, &ar, NULL);
	}
	mx_request_t br = recv1(ep, NULL, 0, TAG_BYE);
	WAIT(ep, &br, NULL);
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	free(buf);
	free(sbuf);
	return 0;
}

/* ---------------- bench: ping-pong timing ---------------- */

/* bind_to binds this process to CPU cpu (modulo the CPUs) when
 * MXTEST_BIND=1, as mxbench --bind binds its ranks: it sets the affinity
 * and runs itself again, so the library's Go runtime starts on that one
 * CPU, its threads bound with it and GOMAXPROCS 1 as in a bound mxbench
 * rank. */
static void bind_to(int cpu, char **argv)
{
	const char *v = getenv("MXTEST_BIND");
	if (!v || strcmp(v, "1") != 0)
		return;
	cpu_set_t want, have;
	CPU_ZERO(&want);
	CPU_SET(cpu % (int)sysconf(_SC_NPROCESSORS_ONLN), &want);
	REQUIRE(sched_getaffinity(0, sizeof have, &have) == 0);
	if (CPU_EQUAL(&want, &have))
		return;
	if (sched_setaffinity(0, sizeof want, &want) != 0) {
		fprintf(stderr, "%s: sched_setaffinity: %s\n", prog, strerror(errno));
		exit(1);
	}
	execv("/proc/self/exe", argv);
	fprintf(stderr, "%s: execv /proc/self/exe: %s\n", prog, strerror(errno));
	exit(1);
}

/* bench_buf returns size bytes as a Go program gets a buffer of a page or
 * more from make: zeroed, page-aligned, fresh from the kernel and never
 * written (mxbench writes its buffers only with --verify). */
static uint8_t *bench_buf(uint32_t size)
{
	void *p = mmap(NULL, size + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "%s: mmap of %u bytes: %s\n", prog, size + 1, strerror(errno));
		exit(1);
	}
	return p;
}

/* The round trips are mxbench's (cmd/mxbench/bench.go, pingOnce and
 * pong): the initiator sends, then posts the receive for the reply (off
 * the critical path: the reply cannot come before the peer has the
 * message), then waits for both; the responder waits for the message,
 * replies, posts its next receive, then waits for the reply's send. */
static int run_bench(uint32_t size, int iters, char **argv)
{
	mx_endpoint_t ep;
	pid_t pid;
	char arg[64];
	bind_to(0, argv);
	snprintf(arg, sizeof arg, "%u:%d", size, iters);
	mx_endpoint_addr_t peer = open_and_spawn(&ep, "bench-peer", arg, &pid);
	uint8_t *sbuf = bench_buf(size), *rbuf = bench_buf(size);
	int warm = iters / 10 + 10;
	double t0 = 0;
	for (int i = 0; i < warm + iters; i++) {
		if (i == warm)
			t0 = now_us();
		mx_request_t sr = send1(ep, sbuf, size, peer, TAG_DATA);
		mx_request_t rr = recv1(ep, rbuf, size, TAG_DATA);
		WAIT(ep, &sr, NULL);
		WAIT(ep, &rr, NULL);
	}
	double el = now_us() - t0;
	printf("bench: %u B: %.3f us one-way, %.1f MB/s (%d round trips)\n", size, el / iters / 2,
	       2.0 * size * iters / el, iters);
	reap(pid);
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	munmap(sbuf, size + 1);
	munmap(rbuf, size + 1);
	return 0;
}

static int run_bench_peer(const char *nicstr, const char *eidstr, const char *arg, char **argv)
{
	mx_endpoint_t ep;
	uint32_t size;
	int iters;
	REQUIRE(sscanf(arg, "%u:%d", &size, &iters) == 2);
	bind_to(1, argv);
	mx_endpoint_addr_t parent = peer_connect(&ep, nicstr, eidstr);
	uint8_t *sbuf = bench_buf(size), *rbuf = bench_buf(size);
	int warm = iters / 10 + 10;
	mx_request_t rr = recv1(ep, rbuf, size, TAG_DATA);
	for (int i = 0; i < warm + iters; i++) {
		WAIT(ep, &rr, NULL);
		mx_request_t sr = send1(ep, sbuf, size, parent, TAG_DATA);
		if (i + 1 < warm + iters)
			rr = recv1(ep, rbuf, size, TAG_DATA);
		WAIT(ep, &sr, NULL);
	}
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	munmap(sbuf, size + 1);
	munmap(rbuf, size + 1);
	return 0;
}

/* ---------------- mxbench interplay ---------------- */

/* mxbench's session (cmd/mxbench/serve.go): the client sends its
 * parameters (tag PARAMS), the server connects back and answers READY,
 * then each size is warmup+iterations round trips of DATA messages
 * numbered from 0, filled with pattern() when verify is on. */
#define MXB_KEY 0x6d786265u
#define MXB_DATA 0x6d780001ull
#define MXB_PARAMS 0x6d780003ull
#define MXB_READY 0x6d780004ull

static void be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const uint32_t mxb_sizes[] = {0, 8, 4096, 65536, 1 << 20};
#define MXB_NSIZES (sizeof mxb_sizes / sizeof mxb_sizes[0])

static int run_mxbench_client(const char *server, int iters)
{
	mx_endpoint_t ep;
	mx_endpoint_addr_t peer;
	uint64_t nic;
	uint8_t params[20 + 8 * MXB_NSIZES];
	const int warmup = 10;

	MX(mx_init());
	MX(mx_open_endpoint(0, MX_ANY_ENDPOINT, MXB_KEY, NULL, 0, &ep));
	MX(mx_hostname_to_nic_id((char *)server, &nic));
	MX(mx_connect(ep, nic, 0, MXB_KEY, 60000, &peer));
	memcpy(params, "MXB1", 4);
	params[4] = 1; /* pingpong */
	params[5] = 4; /* verify */
	params[6] = params[7] = 0;
	be32(params + 8, warmup);
	be32(params + 12, 1);
	be32(params + 16, MXB_NSIZES);
	for (size_t i = 0; i < MXB_NSIZES; i++) {
		be32(params + 20 + 8 * i, mxb_sizes[i]);
		be32(params + 24 + 8 * i, iters);
	}
	mx_request_t ready = recv1(ep, NULL, 0, MXB_READY);
	mx_request_t pr = send1(ep, params, sizeof params, peer, MXB_PARAMS);
	WAIT(ep, &pr, NULL);
	WAIT(ep, &ready, NULL);
	uint8_t *sbuf = malloc(1 << 20), *rbuf = malloc(1 << 20);
	mx_status_t st;
	for (size_t k = 0; k < MXB_NSIZES; k++) {
		uint32_t n = mxb_sizes[k];
		double t0 = 0;
		for (int i = 0; i < warmup + iters; i++) {
			if (i == warmup)
				t0 = now_us();
			pattern(sbuf, n, i);
			mx_request_t sr = send1(ep, sbuf, n, peer, MXB_DATA);
			mx_request_t rr = recv1(ep, rbuf, n, MXB_DATA);
			WAIT(ep, &sr, NULL);
			WAIT(ep, &rr, &st);
			REQUIRE(st.xfer_length == n);
			if (check(rbuf, n, i) >= 0) {
				fprintf(stderr, "%s: size %u message %d: bytes differ from mxbench's pattern\n", prog, n, i);
				return 1;
			}
		}
		printf("mxbench-client: %u B: %.2f us one-way\n", n, (now_us() - t0) / iters / 2);
	}
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	printf("mxbench-client: ok\n");
	return 0;
}

static int run_mxbench_server(void)
{
	mx_endpoint_t ep;
	mx_endpoint_addr_t me, back;
	uint64_t nic;
	uint32_t eid;
	mx_status_t st;
	uint8_t params[20 + 8 * 256];
	char host[MX_MAX_HOSTNAME_LEN];

	MX(mx_init());
	MX(mx_open_endpoint(0, 0, MXB_KEY, NULL, 0, &ep));
	MX(mx_get_endpoint_addr(ep, &me));
	MX(mx_decompose_endpoint_addr(me, &nic, &eid));
	MX(mx_nic_id_to_hostname(nic, host));
	printf("mxbench-server: listening, nic %" PRIx64 " (%s) endpoint %u\n", nic, host, eid);
	fflush(stdout);
	mx_request_t pr = recv1(ep, params, sizeof params, MXB_PARAMS);
	WAIT(ep, &pr, &st);
	REQUIRE(st.xfer_length >= 20 && memcmp(params, "MXB1", 4) == 0 && params[4] == 1);
	int verify = params[5] & 4, unidir = params[5] & 1;
	uint32_t warmup = get32(params + 8), count = get32(params + 16);
	REQUIRE(st.xfer_length == 20 + 8 * count);
	MX(mx_decompose_endpoint_addr(st.source, &nic, &eid));
	MX(mx_connect(ep, nic, eid, MXB_KEY, 60000, &back));
	mx_request_t rr = send1(ep, NULL, 0, back, MXB_READY);
	WAIT(ep, &rr, NULL);
	uint8_t *buf = malloc(1 << 20), *sbuf = malloc(1 << 20);
	for (uint32_t k = 0; k < count; k++) {
		uint32_t size = get32(params + 20 + 8 * k), n = warmup + get32(params + 24 + 8 * k);
		uint32_t reply = unidir ? 0 : size;
		REQUIRE(size <= (1 << 20));
		for (uint32_t i = 0; i < n; i++) {
			mx_request_t r = recv1(ep, buf, size, MXB_DATA);
			WAIT(ep, &r, &st);
			REQUIRE(st.xfer_length == size);
			if (verify && check(buf, size, i) >= 0) {
				fprintf(stderr, "%s: size %u message %u: bytes differ from mxbench's pattern\n", prog, size, i);
				return 1;
			}
			if (verify)
				pattern(sbuf, reply, i);
			mx_request_t s = send1(ep, sbuf, reply, back, MXB_DATA);
			WAIT(ep, &s, NULL);
		}
	}
	printf("mxbench-server: served %u sizes: ok\n", count);
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	return 0;
}

/* ---------------- crossing: the cost of a call ---------------- */

static int run_crossing(int n)
{
	mx_endpoint_t ep;
	mx_request_t r;
	mx_status_t st;
	uint32_t result;
	uint8_t b[8];
	volatile const char *sink;
	MX(mx_init());
	MX(mx_open_endpoint(0, MX_ANY_ENDPOINT, KEY, NULL, 0, &ep));
	mx_endpoint_addr_t me, self;
	uint64_t nic;
	uint32_t eid;
	MX(mx_get_endpoint_addr(ep, &me));
	MX(mx_decompose_endpoint_addr(me, &nic, &eid));
	MX(mx_connect(ep, nic, eid, KEY, 10000, &self)); /* as a program names a peer */
	r = recv1(ep, b, sizeof b, 0xDEAD);
	for (int round = 0; round < 3; round++) {
		double t0 = cpu_us();
		for (int i = 0; i < n; i++)
			sink = mx_strerror(MX_TIMEOUT); /* C only: the floor */
		double t1 = cpu_us();
		for (int i = 0; i < n; i++)
			MX(mx_progress(ep)); /* into Go and back, no work */
		double t2 = cpu_us();
		for (int i = 0; i < n; i++)
			MX(mx_test(ep, &r, &st, &result)); /* a test of a pending receive */
		double t3 = cpu_us();
		for (int i = 0; i < n; i++) { /* a request's post and release */
			mx_request_t c = recv1(ep, b, sizeof b, 0xBEEF);
			MX(mx_cancel(ep, &c, &result));
			REQUIRE(result == 1);
		}
		double t4 = cpu_us();
		for (int i = 0; i < n; i++) { /* a ping-pong's iteration, to itself */
			mx_request_t c = recv1(ep, b, sizeof b, 0xF00D);
			mx_request_t s1 = send1(ep, b, sizeof b, self, 0xF00D);
			WAIT(ep, &s1, NULL);
			WAIT(ep, &c, NULL);
		}
		double t5 = cpu_us();
		printf("crossing (thread CPU time per call): C call %.1f ns, mx_progress %.1f ns, mx_test (pending) %.1f ns, "
		       "mx_irecv + mx_cancel %.1f ns, mx_irecv + mx_isend (8 B) + 2 mx_wait %.1f ns\n",
		       (t1 - t0) * 1e3 / n, (t2 - t1) * 1e3 / n, (t3 - t2) * 1e3 / n, (t4 - t3) * 1e3 / n,
		       (t5 - t4) * 1e3 / n);
	}
	(void)sink;
	MX(mx_cancel(ep, &r, &result));
	MX(mx_close_endpoint(ep));
	MX(mx_finalize());
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";
	if (strcmp(cmd, "local") == 0)
		return run_local();
	if (strcmp(cmd, "pair") == 0)
		return run_pair(argc > 2 ? atoi(argv[2]) : 300);
	if (strcmp(cmd, "pair-peer") == 0 && argc > 4)
		return run_pair_peer(argv[2], argv[3], atoi(argv[4]));
	if (strcmp(cmd, "bench") == 0 && argc > 3)
		return run_bench((uint32_t)atoi(argv[2]), atoi(argv[3]), argv);
	if (strcmp(cmd, "bench-peer") == 0 && argc > 4)
		return run_bench_peer(argv[2], argv[3], argv[4], argv);
	if (strcmp(cmd, "mxbench-client") == 0 && argc > 2)
		return run_mxbench_client(argv[2], argc > 3 ? atoi(argv[3]) : 200);
	if (strcmp(cmd, "mxbench-server") == 0)
		return run_mxbench_server();
	if (strcmp(cmd, "crossing") == 0)
		return run_crossing(argc > 2 ? atoi(argv[2]) : 1000000);
	fprintf(stderr, "usage: %s local | pair [rounds] | bench SIZE ITERS | mxbench-client HOST:PORT [iters] | "
			"mxbench-server | crossing [N]\n",
		prog);
	return 2;
}
