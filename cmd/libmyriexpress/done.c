//go:build cabi && cgo

/*
 * Requests completed before their post returned, answered in C.
 *
 * An eager send (every send up to the rendezvous threshold, over shared
 * memory and over UDP) completes inside mx.Endpoint.ISend, and a receive
 * whose message is already there completes inside IRecv. For such a
 * request the Go side does not hand a live request back: it consumes the
 * completion at once and writes the MX status into a record in C memory
 * that the C side lent it for the call (struct gomx_done). The request's
 * handle then names that record (bit 63 set), and mx_test, mx_wait,
 * mx_test_any, mx_wait_any, mx_ipeek, mx_peek, mx_cancel, mx_forget,
 * mx_ibuffered, mx_context and mx_set_request_timeout answer for it here,
 * without entering Go. A ping-pong's wait for its send is such a call:
 * one crossing into Go fewer per iteration and side.
 *
 * A record is held while its handle is in it; whoever reports the
 * completion (a test or wait of the handle, an any-call, mx_forget) takes
 * the record by swapping the handle out (compare-and-swap), copies the
 * status and gives the record back to the free stack. The handle carries
 * a generation, so a stale handle names no record.
 *
 * The any-calls (test_any, wait_any, ipeek, peek) look at the held records
 * first, then enter Go for the requests Go holds. Two things must hold.
 * Order: completions are reported in the order they happened, as Go's
 * done queue keeps them, and a record and a request of Go cannot be
 * ordered against each other. Visibility: a post that completes early
 * while a wait_any already sleeps in Go would never wake it, and Go's
 * TestAny could report a request whose post is still consuming it. So an
 * endpoint's posts complete early only until the application makes its
 * first any-call on it; from then on Go holds every request of the
 * endpoint, and the records made before (earlier than any request Go
 * completes afterwards) are reported first, oldest first. The switch is
 * Dekker-fashion with sequentially consistent atomics: a post announces
 * itself (posting) and completes early only if no any-call was made
 * (anyused); an any-call sets anyused, then waits for the announced posts
 * to publish their records before it looks. Whichever came second sees the
 * first, so either the post takes the ordinary path or the any-call sees
 * its record.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "shim.h"
#include "_cgo_export.h"

/* The records: enough for the completed and unreported requests of any
 * program we know; a post that finds none free takes the ordinary path. */
#define GOMX_DONES 16384
#define DONE_FLAG ((uintptr_t)1 << 63)

struct gomx_done {
	/* The request's handle while the record is held, 0 otherwise. */
	_Atomic uintptr_t handle;
	/* The endpoint's handle and the match info, read by the any-calls
	 * before they take the record (so atomic: the record may be taken
	 * and used again meanwhile). */
	_Atomic uintptr_t ep;
	_Atomic uint64_t match;
	_Atomic uint64_t seq; /* the endpoint's count of early completions: their order */
	uint32_t gen;  /* bumped at every use */
	uint32_t send; /* a send (for mx_ibuffered) */
	_Atomic uint32_t next; /* on the free stack: the record below's index+1 */
	mx_status_t status;
};

static struct gomx_done dones[GOMX_DONES];
/* Records ever used (a high-water mark the any-calls scan up to). */
static _Atomic uint32_t dones_made;
/* The free stack: a change count in the high 32 bits (against ABA), the
 * top record's index+1 in the low 32 bits. */
static _Atomic uint64_t dones_free;

/* Per endpoint (table index): posts that may complete early, and whether
 * an any-call was made. */
static _Atomic int posting[GOMX_MAX_EPS];
static _Atomic int anyused[GOMX_MAX_EPS];
/* Per endpoint: it holds no records. Once anyused, it makes no more, so
 * the first look that finds none sets this, and the any-calls stop
 * scanning for it. */
static _Atomic int heldnone[GOMX_MAX_EPS];
/* Per endpoint: early completions so far (the any-calls report them in
 * this order, as Go reports completions in theirs). */
static _Atomic uint64_t early_seq[GOMX_MAX_EPS];

/* Each thread keeps one free record aside, so a post that does not use
 * the record it was lent, and a wait that frees one, touch no shared
 * cache line; the thread's exit gives it back. */
static GOMX_TLS struct gomx_done *spare;
static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static GOMX_TLS int spare_keyed;

static void done_push(struct gomx_done *d);

static void spare_exit(void *arg)
{
	(void)arg;
	if (spare) {
		done_push(spare);
		spare = NULL;
	}
}

static void spare_init(void)
{
	pthread_key_create(&spare_key, spare_exit);
}

static struct gomx_done *done_pop(void);

static struct gomx_done *done_get(void)
{
	struct gomx_done *d = spare;
	if (d) {
		spare = NULL;
		return d;
	}
	return done_pop();
}

static void done_put(struct gomx_done *d)
{
	if (spare == NULL) {
		if (!spare_keyed) {
			/* Once per thread: the key's destructor gives the
			 * spare back when the thread exits. */
			pthread_once(&spare_once, spare_init);
			pthread_setspecific(spare_key, (void *)1);
			spare_keyed = 1;
		}
		spare = d;
		return;
	}
	done_push(d);
}

static struct gomx_done *done_pop(void)
{
	uint64_t h = atomic_load_explicit(&dones_free, memory_order_acquire);
	for (;;) {
		uint32_t top = (uint32_t)h;
		if (top == 0)
			break;
		uint32_t next = atomic_load_explicit(&dones[top - 1].next, memory_order_relaxed);
		uint64_t nh = ((h >> 32) + 1) << 32 | next;
		if (atomic_compare_exchange_weak_explicit(&dones_free, &h, nh, memory_order_acquire,
							  memory_order_acquire))
			return &dones[top - 1];
	}
	uint32_t n = atomic_load_explicit(&dones_made, memory_order_relaxed);
	while (n < GOMX_DONES) {
		if (atomic_compare_exchange_weak_explicit(&dones_made, &n, n + 1, memory_order_relaxed,
							  memory_order_relaxed))
			return &dones[n];
	}
	return NULL;
}

static void done_push(struct gomx_done *d)
{
	uint32_t idx = (uint32_t)(d - dones) + 1;
	uint64_t h = atomic_load_explicit(&dones_free, memory_order_relaxed);
	do {
		atomic_store_explicit(&d->next, (uint32_t)h, memory_order_relaxed);
	} while (!atomic_compare_exchange_weak_explicit(&dones_free, &h, ((h >> 32) + 1) << 32 | idx,
							memory_order_release, memory_order_relaxed));
}

/* done_of returns the record a handle names (held or not), or NULL when
 * the handle is not a record's. */
static struct gomx_done *done_of(uintptr_t h)
{
	uint32_t i = (uint32_t)h - 1;
	if (!(h & DONE_FLAG) || (uint32_t)h == 0 || i >= GOMX_DONES)
		return NULL;
	return &dones[i];
}

/* done_held returns the record handle h names if it is held for endpoint
 * ep, without taking it. */
static struct gomx_done *done_held(uintptr_t ep, uintptr_t h)
{
	struct gomx_done *d = done_of(h);
	if (d == NULL || atomic_load_explicit(&d->handle, memory_order_acquire) != h ||
	    atomic_load_explicit(&d->ep, memory_order_relaxed) != ep)
		return NULL;
	return d;
}

/* done_take takes the record handle h names for endpoint ep, copies its
 * status to dst (if not NULL) and frees it. It fails when the handle is
 * not held (reported already, or stale). */
static int done_take(struct gomx_done *d, uintptr_t h, mx_status_t *dst)
{
	uintptr_t want = h;
	if (!atomic_compare_exchange_strong_explicit(&d->handle, &want, 0, memory_order_acq_rel,
						     memory_order_relaxed))
		return 0;
	if (dst)
		*dst = d->status;
	done_put(d);
	return 1;
}

/* ---- posts ---- */

/* post_begin returns a record for a post on ep that may complete early,
 * or NULL (the endpoint has seen an any-call, or no record is free). */
static struct gomx_done *post_begin(uintptr_t ep)
{
	int i = gomx_ep_index(ep);
	if (i < 0)
		return NULL;
	atomic_fetch_add(&posting[i], 1);
	if (atomic_load(&anyused[i]) == 0) {
		struct gomx_done *d = done_get();
		if (d)
			return d;
	}
	atomic_fetch_sub(&posting[i], 1);
	return NULL;
}

/* post_end publishes d when the post completed early (or frees it), then
 * ends the post's announcement. */
static void post_end(uintptr_t ep, struct gomx_done *d, int rc, int early, int send, uintptr_t *out)
{
	if (rc == MX_SUCCESS && early) {
		d->gen++;
		atomic_store_explicit(&d->ep, ep, memory_order_relaxed);
		atomic_store_explicit(&d->match, d->status.match_info, memory_order_relaxed);
		atomic_store_explicit(&d->seq, atomic_fetch_add(&early_seq[gomx_ep_index(ep)], 1),
				      memory_order_relaxed);
		d->send = (uint32_t)send;
		uintptr_t h = DONE_FLAG | (uintptr_t)(d->gen & 0x7fffffff) << 32 | (uintptr_t)(d - dones + 1);
		*out = h;
		atomic_store_explicit(&d->handle, h, memory_order_release);
	} else {
		done_put(d);
	}
	atomic_fetch_sub(&posting[gomx_ep_index(ep)], 1);
}

int gomxc_isend(uintptr_t ep, mx_segment_t *segs, uint32_t n, uint64_t a0, uint64_t a1, uint64_t match,
		uintptr_t uctx, int sync, uintptr_t *out, char *errbuf)
{
	struct gomx_done *d = post_begin(ep);
	int early = 0;
	int rc = gomx_isend(ep, segs, n, a0, a1, match, uctx, sync, out, d ? &d->status : NULL, &early, errbuf);
	if (d)
		post_end(ep, d, rc, early, 1, out);
	return rc;
}

int gomxc_irecv(uintptr_t ep, mx_segment_t *segs, uint32_t n, uint64_t match, uint64_t mask, uintptr_t uctx,
		uintptr_t *out, char *errbuf)
{
	struct gomx_done *d = post_begin(ep);
	int early = 0;
	int rc = gomx_irecv(ep, segs, n, match, mask, uctx, out, d ? &d->status : NULL, &early, errbuf);
	if (d)
		post_end(ep, d, rc, early, 0, out);
	return rc;
}

/* ---- completions of one request ----
 *
 * A handle that names no held record of the endpoint goes to Go as any
 * other: Go answers for its own requests, and gives the errors (a closed
 * endpoint, a request reported already) with their usual codes and
 * messages. */

int gomxc_test(uintptr_t ep, uintptr_t *req, mx_status_t *st, uint32_t *result, char *errbuf)
{
	struct gomx_done *d = done_of(*req);
	if (d == NULL || atomic_load_explicit(&d->ep, memory_order_relaxed) != ep || !done_take(d, *req, st))
		return gomx_test(ep, req, st, result, errbuf);
	*req = 0;
	*result = 1;
	return MX_SUCCESS;
}

int gomxc_wait(uintptr_t ep, uintptr_t *req, uint32_t timeout, mx_status_t *st, uint32_t *result, char *errbuf)
{
	struct gomx_done *d = done_of(*req);
	if (d == NULL || atomic_load_explicit(&d->ep, memory_order_relaxed) != ep || !done_take(d, *req, st))
		return gomx_wait(ep, req, timeout, st, result, errbuf);
	*req = 0;
	*result = 1;
	return MX_SUCCESS;
}

int gomxc_cancel(uintptr_t ep, uintptr_t *req, uint32_t *result, char *errbuf)
{
	struct gomx_done *d = done_held(ep, *req);
	if (d == NULL)
		return gomx_cancel(ep, req, result, errbuf);
	if (d->send) {
		/* As for any send (mx.Endpoint.Cancel). */
		snprintf(errbuf, GOMX_ERRLEN, "sends cannot be cancelled");
		return MX_CANCEL_NOT_SUPPORTED;
	}
	*result = 0; /* a completed receive: nothing to cancel; it stays held */
	return MX_SUCCESS;
}

int gomxc_forget(uintptr_t ep, uintptr_t *req, char *errbuf)
{
	struct gomx_done *d = done_of(*req);
	if (d == NULL || atomic_load_explicit(&d->ep, memory_order_relaxed) != ep || !done_take(d, *req, NULL))
		return gomx_forget(ep, req, errbuf);
	*req = 0;
	return MX_SUCCESS;
}

int gomxc_ibuffered(uintptr_t ep, uintptr_t *req, uint32_t *result, char *errbuf)
{
	struct gomx_done *d = done_held(ep, *req);
	if (d == NULL || !d->send)
		return gomx_ibuffered(ep, req, result, errbuf);
	*result = 1; /* a completed send */
	return MX_SUCCESS;
}

int gomxc_context(uintptr_t *req, uintptr_t *uctx, char *errbuf)
{
	struct gomx_done *d = req ? done_of(*req) : NULL;
	if (d == NULL || atomic_load_explicit(&d->handle, memory_order_acquire) != *req)
		return gomx_context(req, uctx, errbuf);
	*uctx = (uintptr_t)d->status.context;
	return MX_SUCCESS;
}

int gomxc_set_request_timeout(uintptr_t ep, uintptr_t req, uint32_t ms, char *errbuf)
{
	if (done_held(ep, req) == NULL)
		return gomx_set_request_timeout(ep, req, ms, errbuf);
	return MX_SUCCESS; /* completed: no resends left to bound */
}

/* ---- any-calls ---- */

/* any_begin readies an any-call on ep: it returns ep's index, or -1. */
static int any_begin(uintptr_t ep)
{
	int i = gomx_ep_index(ep);
	if (i < 0)
		return -1;
	if (atomic_load_explicit(&anyused[i], memory_order_relaxed) == 0) {
		atomic_store(&anyused[i], 1);
		/* The posts announced before: each is inside one short call
		 * into Go (no wait) and publishes its record, if any, before
		 * it ends; the posts after see anyused. */
		while (atomic_load(&posting[i]) > 0)
			sched_yield();
	}
	return i;
}


/* any_find returns the earliest held record of ep (index i) whose match
 * info matches, taking it (and copying its status to dst) when take is
 * set; *h gets its handle. */
static struct gomx_done *any_find(uintptr_t ep, int i, int check, uint64_t match, uint64_t mask, int take,
				  mx_status_t *dst, uintptr_t *h)
{
	if (i < 0 || atomic_load_explicit(&heldnone[i], memory_order_relaxed))
		return NULL;
	for (;;) {
		int seen = 0;
		uint32_t n = atomic_load_explicit(&dones_made, memory_order_acquire);
		struct gomx_done *best = NULL;
		uintptr_t bh = 0;
		uint64_t bseq = 0;
		for (uint32_t k = 0; k < n; k++) {
			struct gomx_done *d = &dones[k];
			uintptr_t hd = atomic_load_explicit(&d->handle, memory_order_acquire);
			if (hd == 0 || atomic_load_explicit(&d->ep, memory_order_relaxed) != ep)
				continue;
			seen = 1;
			if (check && (atomic_load_explicit(&d->match, memory_order_relaxed) & mask) != match)
				continue;
			uint64_t seq = atomic_load_explicit(&d->seq, memory_order_relaxed);
			/* ep, match and seq were the record's under hd if hd is
			 * still in it (taking it checks that itself): the
			 * fence orders the loads above before the one below, as
			 * a seqlock's reader does. */
			atomic_thread_fence(memory_order_acquire);
			if (atomic_load_explicit(&d->handle, memory_order_relaxed) != hd)
				continue;
			if (best == NULL || seq < bseq)
				best = d, bh = hd, bseq = seq;
		}
		if (best == NULL) {
			if (!seen)
				atomic_store_explicit(&heldnone[i], 1, memory_order_relaxed);
			return NULL;
		}
		if (take && !done_take(best, bh, dst))
			continue; /* taken meanwhile: look again */
		*h = bh;
		return best;
	}
}

int gomxc_test_any(uintptr_t ep, uint64_t match, uint64_t mask, mx_status_t *st, uint32_t *result, char *errbuf)
{
	uintptr_t h;
	int i = any_begin(ep);
	if (any_find(ep, i, 1, match, mask, 1, st, &h)) {
		*result = 1;
		return MX_SUCCESS;
	}
	return gomx_test_any(ep, match, mask, st, result, errbuf);
}

int gomxc_wait_any(uintptr_t ep, uint32_t timeout, uint64_t match, uint64_t mask, mx_status_t *st,
		   uint32_t *result, char *errbuf)
{
	uintptr_t h;
	int i = any_begin(ep);
	if (any_find(ep, i, 1, match, mask, 1, st, &h)) {
		*result = 1;
		return MX_SUCCESS;
	}
	return gomx_wait_any(ep, timeout, match, mask, st, result, errbuf);
}

int gomxc_ipeek(uintptr_t ep, uintptr_t *req, uint32_t *result, char *errbuf)
{
	uintptr_t h;
	int i = any_begin(ep);
	if (any_find(ep, i, 0, 0, 0, 0, NULL, &h)) {
		*req = h;
		*result = 1;
		return MX_SUCCESS;
	}
	return gomx_ipeek(ep, req, result, errbuf);
}

int gomxc_peek(uintptr_t ep, uint32_t timeout, uintptr_t *req, uint32_t *result, char *errbuf)
{
	uintptr_t h;
	int i = any_begin(ep);
	if (any_find(ep, i, 0, 0, 0, 0, NULL, &h)) {
		*req = h;
		*result = 1;
		return MX_SUCCESS;
	}
	return gomx_peek(ep, timeout, req, result, errbuf);
}

/* ---- endpoints ---- */

void gomxc_drop_endpoint(uintptr_t ep)
{
	int e = gomx_ep_index(ep);
	/* The next endpoint of the index starts afresh. */
	if (e >= 0) {
		atomic_store(&anyused[e], 0);
		atomic_store(&heldnone[e], 0);
	} else if (ep == 0) {
		for (e = 0; e < GOMX_MAX_EPS; e++) {
			atomic_store(&anyused[e], 0);
			atomic_store(&heldnone[e], 0);
		}
	}
	uint32_t n = atomic_load_explicit(&dones_made, memory_order_acquire);
	for (uint32_t k = 0; k < n; k++) {
		struct gomx_done *d = &dones[k];
		uintptr_t hd = atomic_load_explicit(&d->handle, memory_order_acquire);
		if (hd != 0 && (ep == 0 || atomic_load_explicit(&d->ep, memory_order_relaxed) == ep))
			done_take(d, hd, NULL);
	}
}
