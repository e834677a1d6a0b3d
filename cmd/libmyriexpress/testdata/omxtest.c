/*
 * omxtest: gomx's C tests of Open-MX's native API (open-mx.h) in
 * libopen-mx. Every call's return code is checked against Open-MX's
 * values; any failure prints the call, the line and the code, and exits 1.
 *
 *   omxtest local          one process: sends and receives of every
 *                          completion call, probe, peek, cancel, forget,
 *                          contexts, the unexpected handler, wakeup,
 *                          get_info, the converters and error codes
 *   omxtest pair [rounds]  two processes (this one spawns the other):
 *                          ping-pong of every class of size up to 1 MiB
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "open-mx.h"

extern char **environ;

#define KEY 0x0badcafe
static const char *prog = "omxtest";

#define OMX(call) expect((call), OMX_SUCCESS, #call, __LINE__)
#define EXPECT(call, code) expect((call), (code), #call, __LINE__)
#define REQUIRE(cond)                                                                     \
	do {                                                                              \
		if (!(cond)) {                                                            \
			fprintf(stderr, "%s: line %d: %s is false\n", prog, __LINE__, #cond); \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

static void expect(omx_return_t rc, omx_return_t want, const char *call, int line)
{
	if (rc != want) {
		fprintf(stderr, "%s: line %d: %s returned %d (%s), want %d (%s)\n", prog, line, call, rc,
			omx_strerror(rc), want, omx_strerror(want));
		exit(1);
	}
}

static void pattern(uint8_t *b, uint32_t n, uint32_t key)
{
	for (uint32_t i = 0; i < n; i++)
		b[i] = (uint8_t)(i * 7 + key * 13 + 1);
}

static int same(const uint8_t *b, uint32_t n, uint32_t key)
{
	for (uint32_t i = 0; i < n; i++)
		if (b[i] != (uint8_t)(i * 7 + key * 13 + 1))
			return 0;
	return 1;
}

/* wait1 waits for r without bound and checks it completed. */
static omx_status_t wait1(omx_endpoint_t ep, omx_request_t *r)
{
	omx_status_t st;
	uint32_t result = 0;
	OMX(omx_wait(ep, r, &st, &result, OMX_TIMEOUT_INFINITE));
	REQUIRE(result == 1);
	return st;
}

static int unexp_calls;
static omx_unexp_handler_action_t on_unexp(void *ctx, omx_endpoint_addr_t src, uint64_t match, uint32_t len,
					   void *data)
{
	(void)src;
	(void)data;
	REQUIRE(ctx == &unexp_calls);
	unexp_calls++;
	/* Consume only the message meant for the handler. */
	return match == 0x77 && len == 5 ? OMX_UNEXP_HANDLER_RECV_FINISHED : OMX_UNEXP_HANDLER_RECV_CONTINUE;
}

static void *waker(void *arg)
{
	usleep(20000); /* the wait below may have started: either way it ends */
	OMX(omx_wakeup((omx_endpoint_t)arg));
	return NULL;
}

static int run_local(void)
{
	omx_endpoint_t ep;
	omx_endpoint_addr_t me, self;
	omx_request_t s, r;
	omx_status_t st;
	uint64_t nic, nic2;
	uint32_t eid, sess, result, board, u32;
	uint8_t out[64], in[64];
	void *ctx;
	char name[OMX_HOSTNAMELEN_MAX];

	REQUIRE(omx_set_error_handler(NULL, OMX_ERRORS_RETURN) == OMX_ERRORS_ARE_FATAL);
	EXPECT(omx_finalize(), OMX_NOT_INITIALIZED);
	OMX(omx_init());
	EXPECT(omx_init(), OMX_ALREADY_INITIALIZED);
	OMX(omx_open_endpoint(0, OMX_ANY_ENDPOINT, KEY, NULL, 0, &ep));
	OMX(omx_get_endpoint_addr(ep, &me));
	OMX(omx_decompose_endpoint_addr_with_session(me, &nic, &eid, &sess));
	OMX(omx_decompose_endpoint_addr(me, &nic2, &u32));
	REQUIRE(nic2 == nic && u32 == eid);
	OMX(omx_board_number_to_nic_id(0, &nic2));
	REQUIRE(nic2 == nic);
	OMX(omx_nic_id_to_board_number(nic, &board));
	REQUIRE(board == 0);
	OMX(omx_nic_id_to_hostname(nic, name));
	OMX(omx_hostname_to_nic_id(name, &nic2));
	REQUIRE(nic2 == nic);
	EXPECT(omx_hostname_to_nic_id("no-such-host.invalid:1", &nic2), OMX_PEER_NOT_FOUND);
	OMX(omx_connect(ep, nic, eid, KEY, 10000, &self));
	EXPECT(omx_connect(ep, nic, eid, KEY + 1, 1000, &self), OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY);
	OMX(omx_connect(ep, nic, eid, KEY, OMX_TIMEOUT_INFINITE, &self));

	/* A buffer-and-length message, the status in Open-MX's terms. */
	pattern(out, 40, 1);
	OMX(omx_irecv(ep, in, sizeof in, 0x10, ~0ull, &ctx, &r));
	OMX(omx_isend(ep, out, 40, self, 0x10, NULL, &s));
	OMX(omx_ibuffered(ep, &s, &result));
	st = wait1(ep, &s);
	REQUIRE(st.code == OMX_SUCCESS);
	st = wait1(ep, &r);
	REQUIRE(st.code == OMX_SUCCESS && st.xfer_length == 40 && st.msg_length == 40 && st.match_info == 0x10 &&
		st.context == &ctx && same(in, 40, 1));

	/* Segments, issend, test until done, truncation. */
	omx_seg_t segs[2] = {{out, 10}, {out + 10, 30}};
	OMX(omx_irecv(ep, in, 16, 0x11, ~0ull, NULL, &r));
	OMX(omx_issendv(ep, segs, 2, self, 0x11, NULL, &s));
	result = 0;
	for (int i = 0; !result && i < 1000000; i++)
		OMX(omx_test(ep, &r, &st, &result));
	REQUIRE(result == 1 && st.code == OMX_MESSAGE_TRUNCATED && st.xfer_length == 16 && st.msg_length == 40);
	st = wait1(ep, &s);

	/* Timeouts: 0 does not wait, a bounded wait ends with result 0. */
	OMX(omx_irecv(ep, in, sizeof in, 0x12, ~0ull, NULL, &r));
	OMX(omx_wait(ep, &r, &st, &result, 0));
	REQUIRE(result == 0);
	OMX(omx_wait(ep, &r, &st, &result, 5));
	REQUIRE(result == 0);
	/* Cancel: the receive goes, the request is released. */
	OMX(omx_cancel(ep, &r, &result));
	REQUIRE(result == 1);
	EXPECT(omx_test(ep, &r, &st, &result), OMX_BAD_REQUEST);

	/* test_any, wait_any, iprobe, probe, ipeek, peek, context. */
	OMX(omx_iprobe(ep, 0x13, ~0ull, &st, &result));
	REQUIRE(result == 0);
	OMX(omx_isend(ep, out, 8, self, 0x13, NULL, &s));
	OMX(omx_probe(ep, 0x13, ~0ull, &st, &result, OMX_TIMEOUT_INFINITE));
	REQUIRE(result == 1 && st.msg_length == 8 && st.code == OMX_SUCCESS);
	OMX(omx_irecv(ep, in, sizeof in, 0x13, ~0ull, &unexp_calls, &r));
	OMX(omx_peek(ep, &r, &result, OMX_TIMEOUT_INFINITE));
	REQUIRE(result == 1);
	OMX(omx_context(&r, &ctx));
	st = wait1(ep, &r);
	REQUIRE(ctx == st.context);
	OMX(omx_wait_any(ep, 0, 0, &st, &result, OMX_TIMEOUT_INFINITE));
	REQUIRE(result == 1); /* the send */
	OMX(omx_test_any(ep, 0, 0, &st, &result));
	REQUIRE(result == 0);
	OMX(omx_ipeek(ep, &r, &result));
	REQUIRE(result == 0);

	/* Forget: its completion is never reported. */
	OMX(omx_irecv(ep, in, sizeof in, 0x14, ~0ull, NULL, &r));
	OMX(omx_isend(ep, out, 8, self, 0x14, NULL, &s));
	OMX(omx_forget(ep, &r));
	wait1(ep, &s);
	OMX(omx_set_request_timeout(ep, NULL, 1000));

	/* The unexpected handler consumes one message, lets another be queued. */
	OMX(omx_register_unexp_handler(ep, on_unexp, &unexp_calls));
	OMX(omx_isend(ep, out, 5, self, 0x77, NULL, &s));
	wait1(ep, &s);
	OMX(omx_isend(ep, out, 6, self, 0x78, NULL, &s));
	wait1(ep, &s);
	OMX(omx_probe(ep, 0x78, ~0ull, &st, &result, OMX_TIMEOUT_INFINITE));
	REQUIRE(result == 1 && st.msg_length == 6 && unexp_calls == 2);
	OMX(omx_iprobe(ep, 0x77, ~0ull, &st, &result));
	REQUIRE(result == 0);
	OMX(omx_register_unexp_handler(ep, NULL, NULL));
	OMX(omx_irecv(ep, in, sizeof in, 0x78, ~0ull, NULL, &r));
	wait1(ep, &r);

	/* Address contexts. */
	OMX(omx_set_endpoint_addr_context(self, out));
	OMX(omx_get_endpoint_addr_context(self, &ctx));
	REQUIRE(ctx == out);

	/* Wakeup from another thread ends a wait with result 0. */
	pthread_t th;
	OMX(omx_irecv(ep, in, sizeof in, 0x15, ~0ull, NULL, &r));
	REQUIRE(pthread_create(&th, NULL, waker, ep) == 0);
	OMX(omx_wait(ep, &r, &st, &result, 60000));
	REQUIRE(result == 0);
	REQUIRE(pthread_join(th, NULL) == 0);
	OMX(omx_cancel(ep, &r, &result));

	/* get_info, with Open-MX's keys. */
	uint64_t ids[17];
	OMX(omx_get_info(NULL, OMX_INFO_BOARD_MAX, NULL, 0, &u32, sizeof u32));
	REQUIRE(u32 >= 1);
	OMX(omx_get_info(NULL, OMX_INFO_ENDPOINT_MAX, NULL, 0, &u32, sizeof u32));
	REQUIRE(u32 == 256);
	OMX(omx_get_info(NULL, OMX_INFO_BOARD_COUNT, NULL, 0, &u32, sizeof u32));
	REQUIRE(u32 == 1);
	OMX(omx_get_info(NULL, OMX_INFO_BOARD_IDS, NULL, 0, ids, sizeof ids));
	REQUIRE(ids[0] == nic && ids[1] == 0);
	uint8_t b0 = 0;
	OMX(omx_get_info(NULL, OMX_INFO_BOARD_HOSTNAME, &b0, 1, name, sizeof name));
	REQUIRE(name[0] != 0);
	OMX(omx_get_info(ep, OMX_INFO_BOARD_IFACENAME, NULL, 0, name, sizeof name));
	REQUIRE(strncmp(name, "udp:", 4) == 0);
	OMX(omx_get_info(ep, OMX_INFO_BOARD_NUMA_NODE, NULL, 0, &u32, sizeof u32));
	OMX(omx_get_info(ep, OMX_INFO_COUNTER_MAX, NULL, 0, &u32, sizeof u32));
	REQUIRE(u32 > 0);
	uint32_t *vals = calloc(u32, sizeof *vals);
	OMX(omx_get_info(ep, OMX_INFO_COUNTER_VALUES, NULL, 0, vals, u32 * sizeof *vals));
	free(vals);
	OMX(omx_get_info(ep, OMX_INFO_COUNTER_LABEL, &b0, 1, name, sizeof name));
	REQUIRE(name[0] != 0);
	EXPECT(omx_get_info(ep, OMX_INFO_BOARD_COUNT, NULL, 0, &u32, 2), OMX_BAD_INFO_LENGTH);
	EXPECT(omx_get_info(ep, (omx_info_key_t)99, NULL, 0, &u32, sizeof u32), OMX_BAD_INFO_KEY);

	/* Error codes are Open-MX's; an endpoint's own handler is called. */
	EXPECT(omx_open_endpoint(7, OMX_ANY_ENDPOINT, KEY, NULL, 0, &ep), OMX_BOARD_NOT_FOUND);
	omx_endpoint_t ep2;
	EXPECT(omx_open_endpoint(0, eid, KEY, NULL, 0, &ep2), OMX_BUSY);
	EXPECT(omx_test(ep, NULL, &st, &result), OMX_BAD_REQUEST);
	EXPECT(omx_irecv(ep, in, 8, 0x1, 0x0, NULL, &r), OMX_BAD_MATCH_MASK);
	REQUIRE(omx_set_error_handler(ep, OMX_ERRORS_RETURN) == OMX_ERRORS_RETURN);
	/* Context ids: a mask that hides their bits is refused. */
	omx_endpoint_param_t params[1];
	params[0].key = OMX_ENDPOINT_PARAM_CONTEXT_ID;
	params[0].val.context_id.bits = 4;
	params[0].val.context_id.shift = 60;
	OMX(omx_open_endpoint(0, OMX_ANY_ENDPOINT, KEY, params, 1, &ep2));
	EXPECT(omx_irecv(ep2, in, 8, 0, 0, NULL, &r), OMX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);
	params[0].key = (omx_endpoint_param_key_t)9;
	EXPECT(omx_open_endpoint(0, OMX_ANY_ENDPOINT, KEY, params, 1, &ep2), OMX_ENDPOINT_PARAM_BAD_KEY);
	REQUIRE(strcmp(omx_strerror(OMX_MESSAGE_TRUNCATED), omx_strerror(OMX_SUCCESS)) != 0);

	OMX(omx_disconnect(ep, self));
	OMX(omx_close_endpoint(ep));
	EXPECT(omx_close_endpoint(ep), OMX_BAD_ENDPOINT);
	OMX(omx_finalize());
	printf("omxtest local: ok\n");
	return 0;
}

static const uint32_t sizes[] = {0, 8, 128, 4000, 9000, 32769, 70000, 1 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static int run_pair(int rounds)
{
	omx_endpoint_t ep;
	omx_endpoint_addr_t me, peer;
	omx_request_t r, s;
	omx_status_t st;
	uint64_t nic;
	uint32_t eid;
	char nicbuf[32], eidbuf[16], rbuf[16];
	pid_t pid;
	uint8_t *sb = malloc(1 << 20), *rb = malloc(1 << 20);

	OMX(omx_init());
	OMX(omx_open_endpoint(0, OMX_ANY_ENDPOINT, KEY, NULL, 0, &ep));
	OMX(omx_get_endpoint_addr(ep, &me));
	OMX(omx_decompose_endpoint_addr(me, &nic, &eid));
	snprintf(nicbuf, sizeof nicbuf, "%" PRIx64, nic);
	snprintf(eidbuf, sizeof eidbuf, "%u", eid);
	snprintf(rbuf, sizeof rbuf, "%d", rounds);
	char *argv[] = {(char *)prog, "pair-peer", nicbuf, eidbuf, rbuf, NULL};
	REQUIRE(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) == 0);
	/* The peer says hello; connect back to where it came from. */
	OMX(omx_irecv(ep, NULL, 0, 1, ~0ull, NULL, &r));
	st = wait1(ep, &r);
	OMX(omx_decompose_endpoint_addr(st.addr, &nic, &eid));
	OMX(omx_connect(ep, nic, eid, KEY, 60000, &peer));
	uint32_t msg = 0;
	for (int k = 0; k < rounds; k++) {
		for (size_t i = 0; i < NSIZES; i++, msg++) {
			uint32_t n = sizes[i];
			pattern(sb, n, msg);
			OMX(omx_irecv(ep, rb, n, 2, ~0ull, NULL, &r));
			OMX(omx_isend(ep, sb, n, peer, 2, NULL, &s));
			wait1(ep, &s);
			st = wait1(ep, &r);
			REQUIRE(st.code == OMX_SUCCESS && st.xfer_length == n && same(rb, n, msg + 1));
		}
	}
	int status;
	REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
	OMX(omx_close_endpoint(ep));
	OMX(omx_finalize());
	printf("omxtest pair: %u messages each way: ok\n", msg);
	return 0;
}

static int run_pair_peer(const char *nicstr, const char *eidstr, int rounds)
{
	omx_endpoint_t ep;
	omx_endpoint_addr_t parent;
	omx_request_t r, s;
	omx_status_t st;
	uint8_t *b = malloc(1 << 20);

	prog = "omxtest peer";
	OMX(omx_init());
	OMX(omx_open_endpoint(0, OMX_ANY_ENDPOINT, KEY, NULL, 0, &ep));
	OMX(omx_connect(ep, strtoull(nicstr, NULL, 16), (uint32_t)atoi(eidstr), KEY, 60000, &parent));
	OMX(omx_isend(ep, NULL, 0, parent, 1, NULL, &s));
	wait1(ep, &s);
	uint32_t msg = 0;
	for (int k = 0; k < rounds; k++) {
		for (size_t i = 0; i < NSIZES; i++, msg++) {
			uint32_t n = sizes[i];
			OMX(omx_irecv(ep, b, n, 2, ~0ull, NULL, &r));
			st = wait1(ep, &r);
			REQUIRE(st.xfer_length == n && same(b, n, msg));
			pattern(b, n, msg + 1);
			OMX(omx_isend(ep, b, n, parent, 2, NULL, &s));
			wait1(ep, &s);
		}
	}
	OMX(omx_close_endpoint(ep));
	OMX(omx_finalize());
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "local";
	if (strcmp(cmd, "local") == 0)
		return run_local();
	if (strcmp(cmd, "pair") == 0)
		return run_pair(argc > 2 ? atoi(argv[2]) : 3);
	if (strcmp(cmd, "pair-peer") == 0 && argc > 4)
		return run_pair_peer(argv[2], argv[3], atoi(argv[4]));
	fprintf(stderr, "usage: %s local | pair [rounds]\n", prog);
	return 2;
}
