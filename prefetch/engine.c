/*
 * prefetch/engine.c - the prefetch engine: one thread driving many GETs
 * through a curl multi handle, fed by hints and by readers' misses.
 *
 * How it works. A *fetch* brings one object into memory as one or more
 * ranged GETs (*parts*), each with its own buffer, allocated when the part
 * starts. There are two kinds:
 * - a *whole* fetch (the object fits the cache) gets every part; once all
 *   have arrived the cache writer thread writes the object into the cache
 *   (many objects per index transaction) and drops the fetch: the network
 *   thread does no disk work. Readers that miss the cache join it (never a second GET), or
 *   start one whose parts covering their read go first, and wait only for
 *   those parts.
 * - a *stream* (the cache cannot take the object: larger than the cache or
 *   than the fetch memory, an ETag the index cannot hold, a put that failed
 *   for good) gets only the parts readers ask for, plus one part of
 *   read-ahead; parts behind the reader are released. It is never cached,
 *   and it leaves the table when the last reader closes the object.
 * Between misses the engine walks the current hint from the oldest entry
 * no reader has opened yet, up to a window of entries ahead, and fetches
 * what is not cached; a queued hint follows on directly, so epoch N+1
 * starts downloading while epoch N finishes. Each hint stream (a rank, or
 * a writing process) has its own hints, cursor and window; the streams
 * are merged by need (order.h): the next id comes from the stream whose
 * cursor is the fewest entries ahead of its readers.
 *
 * Limits. At most max_inflight GETs run (fewer after SlowDown): parts of
 * fetches a reader waits on (demand) start first, prefetches take what is
 * left. The memory of fetch buffers is bounded by fetch_mem: a whole fetch
 * reserves its object's size when created, a stream each part when it
 * starts. Prefetch stops at the bound; a demand fetch waits for room
 * (fetches that complete give theirs back, streams' unpinned parts are
 * released on demand). A stream part a reader waits on may pass the bound
 * when every byte under it is pinned by readers, one such part at a time,
 * so readers never wait on each other in a circle.
 *
 * Time. Each attempt of a part runs with a deadline taken from what is
 * left of the part's retry budget (as well as the stall timeout), so the
 * budget bounds the whole transfer, however slowly a server trickles. A
 * reader waits at most twice the budget plus PF_WAIT_SLACK_MS (queueing
 * behind other parts included), then fails with EIO. pf_cancel() ends
 * every wait at once.
 *
 * Readers do not follow the hint exactly (a DataLoader with W workers has
 * W batches open at once): which entries they have consumed, where the
 * window starts, and how soon an object is needed again is the hint
 * position index of prefetch/order.c; the engine feeds it opens and hints
 * and asks it for the next ids to fetch.
 *
 * The tier. With a shared cache tier (-o shared_cache, tier.h), a whole
 * fetch of an object that fits in one part, and whose ETag (or the
 * cluster key) can prove a copy, reads the tier first: one attempt, no
 * If-Match (the tier object is named by the origin ETag), its answer
 * judged by tier_check() before any reader sees a byte. Whether it tries
 * the tier is decided when its GET starts (the breaker, tier_use()). A hit
 * completes the fetch as an origin GET would; a miss, a mismatch, an
 * error or a timeout turns the part into an origin GET with the whole
 * retry budget (the tier costs time, never a read), and after a miss or a
 * mismatch the writer PUTs the origin's bytes to the tier in the
 * background. A tier GET whose reader has itself waited past the hedge
 * (tier_hedge_ns()) is cancelled and the origin read instead, within the
 * hedge budget (tier_hedge_take()); while the breaker is open, or the tier
 * hung (tier_hung()), every tier GET is cancelled, prefetches included, so
 * that the hint keeps its lead. Streams never use the tier. Hints drive
 * prefetches from the tier exactly as from the origin.
 *
 * Locking. One mutex (mu) guards the fetch table, the part queues, the
 * hints, the memory count and the counters but those of the read path
 * (atomic: a cache hit takes no engine lock). Requests are signed outside
 * it (arm_parts()). Invariant: nobody calls the cache while holding mu,
 * because the cache calls back into pf_next_use() by object id, which
 * takes mu. A whole fetch leaves the table only after its object is
 * committed to the cache, so a reader that finds no fetch for a missing
 * object and then misses the cache again knows no GET is under way. A part
 * buffer is freed only with no reader pinning it and no transfer writing
 * into it.
 */
#include "prefetch/prefetch.h"
#include "prefetch/engine_internal.h"
#include "prefetch/order.h"
#include "prefetch/s3/s3_xfer.h"
#include "cache/cache.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/retry.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* 64 GETs in flight: 2,000 objects/s at ~30 ms each (Little's law), with
 * room. The S3 per-prefix limit of ~5,500 GET/s is far above it. */
#define PF_INFLIGHT_DEFAULT 64
#define PF_INFLIGHT_MIN 4
/* 4,096 hinted objects ahead: two seconds of a fast reader at 2,000
 * objects/s, so the window never runs dry between two wake-ups. */
#define PF_WINDOW_DEFAULT 4096
/*
 * Pacing (order_streams_set_pace()): within the window, a stream's
 * prefetch runs as far past its readers' front as they read in the last
 * second, and at least 256 entries. A GPU-bound job that reads 256 files
 * a second then has a second of them fetched ahead, not its whole epoch
 * at once: on 2 cores shared with the S3 server (1.2-1.5 ms of its CPU per
 * GET), fetching a 2,000-file epoch in its first two seconds delayed the
 * first batch's decoding by 1.2-1.8 s. 256 covers the first batches a
 * DataLoader asks for before any file is open (4 workers x 64) and, at
 * 20-50 ms per GET, readers of up to 5,000 files/s while the pace is
 * measured.
 */
#define PF_PACE_DEFAULT_MS 1000
#define PF_PACE_MIN 256
/* 8 MiB parts: few enough requests for a large object, and each part
 * still long enough to amortize a round trip. */
#define PF_PART_DEFAULT (8ull << 20)
/* Objects up to 256 MiB are fetched whole (in parallel parts); larger
 * ones are not what a training sample is, and are streamed. */
#define PF_OBJECT_MEM_DEFAULT (256ull << 20)
/* 512 MiB of fetch buffers: 4,096 objects of ~110 KB (the window) with
 * room, or 64 parts of 8 MiB (one per GET in flight). */
#define PF_FETCH_MEM_DEFAULT (512ull << 20)
/* A streamed object reads one part ahead of its reader, and keeps the
 * part before the reader's for the kernel's out-of-order reads: three
 * parts (24 MiB) per open stream at most. */
#define PF_STREAM_AHEAD 1
/* A reader gives up after twice the budget plus 5 s: its part may queue
 * behind others for up to a budget before its own starts. */
#define PF_WAIT_SLACK_MS 5000
/* Hints queued behind the current one, per stream: an epoch's hint is
 * written once per epoch, so 16 is room for a trainer far ahead of its
 * reads; each holds about 9 bytes per entry. */
#define PF_HINTS_QUEUED_MAX 16
/* Warm-list entries pending: every object four times over (a few "warm
 * ." in a row), at least 64 Ki; 4 bytes each. */
#define PF_WARM_PER_OBJECT 4
#define PF_WARM_MIN 65536
/* Queued parts looked at per start for one that may start (a stream part
 * may wait for memory while the parts behind it could go). */
#define PF_SCAN_MAX 64
/* A tier GET's one attempt ends after 2 s: an 8 MiB part from a near tier
 * (>= 100 MB/s) takes 80 ms, so 2 s is a tier in trouble; the origin then
 * has the whole retry budget. */
#define PF_TIER_TIMEOUT_MS 2000

static void stream_maybe_drop(struct pf *pf, struct pf_fetch *f);

_Static_assert(PF_STREAMS_MAX == ORDER_STREAMS_MAX &&
		       PF_STREAM_NAME_MAX == ORDER_STREAM_NAME_MAX,
	       "pf_stats.streams mirrors order_streams");
_Static_assert(PF_RECLAIMED_RECENT == ORDER_RECLAIMED_RECENT,
	       "pf_stats.reclaimed mirrors order_streams.recent");
_Static_assert(ORDER_STREAMS_MAX < 256, "opened_by holds 1 + a stream in a byte");

static void queue_push(struct pf_queue *q, struct pf_part *p, bool front)
{
	p->q = q;
	p->prev = p->next = NULL;
	if (!q->head) {
		q->head = q->tail = p;
	} else if (front) {
		p->next = q->head;
		q->head->prev = p;
		q->head = p;
	} else {
		p->prev = q->tail;
		q->tail->next = p;
		q->tail = p;
	}
}

/* Takes @p out of the queue it is in (none: nothing to do). */
static void queue_remove(struct pf_part *p)
{
	struct pf_queue *q = p->q;

	if (!q)
		return;
	if (p->prev)
		p->prev->next = p->next;
	else
		q->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		q->tail = p->prev;
	p->q = NULL;
	p->prev = p->next = NULL;
}

/* ---- hints ---------------------------------------------------------------- */

void pf_note_open(struct pf *pf, uint32_t id)
{
	int who;

	if (id >= pf->cfg.n_ids)
		return;
	pthread_mutex_lock(&pf->mu);
	pf->open_count[id]++;
	who = order_streams_note_open(&pf->hints, id, mono_ns());
	if (who >= 0)
		pf->opened_by[id] = (uint8_t)(who + 1);
	pthread_mutex_unlock(&pf->mu);
	/* A window moved only if a stream expected this open. */
	if (who >= 0)
		netloop_wake(&pf->net);
}

void pf_note_close(struct pf *pf, uint32_t id)
{
	if (id >= pf->cfg.n_ids)
		return;
	pthread_mutex_lock(&pf->mu);
	if (pf->open_count[id] && !--pf->open_count[id] && pf->by_id[id])
		stream_maybe_drop(pf, pf->by_id[id]);
	pthread_mutex_unlock(&pf->mu);
}

/*
 * Whether the process that wrote a stream's hint still runs (order.h's
 * exit rule). NOTE(fuse): the pid is the one the kernel put in the request,
 * translated into our pid namespace; EPERM is a process of another user,
 * alive. A zombie counts as alive until its parent reaps it.
 */
static bool writer_alive(void *arg, pid_t pid)
{
	(void)arg;
	return kill(pid, 0) == 0 || errno != ESRCH;
}

int pf_hint(struct pf *pf, const char *stream, const uint32_t *ids, size_t n,
	    int64_t epoch, bool replace, pid_t owner)
{
	struct order *h = order_create(ids, n, epoch, pf->cfg.n_ids);
	struct order_queue_stats os;
	struct order *old;
	int i;

	if (!h)
		return -ENOMEM;
	/* The writer's process: a hint written by a thread that then ends
	 * must not look like a process that has ended (proc_tgid()). */
	if (owner > 0)
		owner = proc_tgid(owner) ?: owner;
	pthread_mutex_lock(&pf->mu);
	pf->st.hints_total++;
	if (!n && !replace) {
		/* Nothing to follow: queueing it would only stall the next. */
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return 0;
	}
	i = order_streams_get(&pf->hints, stream, owner, mono_ns());
	if (i < 0) {
		/* PF_STREAMS_MAX streams with hints still to read. */
		pf->st.hints_refused++;
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return i;
	}
	order_queue_stats(&pf->hints.s[i].q, &os);
	if (!replace && os.len && os.queued >= PF_HINTS_QUEUED_MAX) {
		/* Each queued hint holds its entries: a writer that never
		 * waits for an epoch to pass must not fill the memory. */
		pf->st.hints_refused++;
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return -EBUSY;
	}
	old = order_streams_add(&pf->hints, i, h, replace);
	pthread_mutex_unlock(&pf->mu);
	order_destroy(old);
	netloop_wake(&pf->net);
	return 0;
}

uint64_t pf_next_use(struct pf *pf, uint32_t id)
{
	uint64_t best;

	if (id >= pf->cfg.n_ids)
		return UINT64_MAX;
	pthread_mutex_lock(&pf->mu);
	/* Open right now: its reads may not have reached us yet (the open
	 * consumed its hint entry already), so it is needed at once. */
	best = pf->open_count[id] ? 0 : order_streams_next_use(&pf->hints, id);
	pthread_mutex_unlock(&pf->mu);
	return best;
}

/*
 * The cache's eviction callback, registered by pf_start(): the cache hands
 * back the id it was given with the object; an entry of an earlier session
 * comes without one, and is resolved from its key once (the cache keeps
 * the id).
 */
static uint64_t cache_next_use(void *arg, uint32_t *id, const char *key,
			       size_t key_len)
{
	struct pf *pf = arg;

	if (*id == CACHE_NO_ID)
		*id = pf->cfg.key_id(pf->cfg.arg, key, key_len);
	return pf_next_use(pf, *id);
}

/* ---- fetches -------------------------------------------------------------- */

static void part_release_buf(struct pf_part *p)
{
	s3_xfer_destroy(p->x);
	p->x = NULL;
	free(p->buf);
	p->buf = NULL;
}

static void fetch_free(struct pf_fetch *f)
{
	for (uint32_t i = 0; i < f->n_parts; i++)
		part_release_buf(&f->parts[i]);
	free(f->parts);
	free(f->key);
	free(f->etag);
	free(f);
}

/* Drops a reference; frees the fetch with the last one. mu held. */
static void fetch_put(struct pf *pf, struct pf_fetch *f)
{
	(void)pf;
	if (--f->refs == 0)
		fetch_free(f);
}

static void mem_add(struct pf *pf, struct pf_fetch *f, uint64_t n)
{
	pf->mem += n;
	f->mem += n;
	if (pf->mem > pf->mem_peak)
		pf->mem_peak = pf->mem;
}

/*
 * Gives @n bytes of @f's memory back. mu held; any thread. Whoever waits
 * for room hears of it: a reader (cv), and the network thread, whose
 * prefetch may have stopped at the bound with nothing in flight to wake
 * it (the cache writer gives a committed fetch's memory back off that
 * thread: without the wake-up the next prefetch waited out a whole poll).
 */
static void mem_sub(struct pf *pf, struct pf_fetch *f, uint64_t n)
{
	if (!n)
		return;
	pf->mem -= n;
	f->mem -= n;
	pf->room_gen++;
	pthread_cond_broadcast(&pf->cv);
	netloop_wake(&pf->net);
}

/* See engine_internal.h. */
void pf_fetch_leave(struct pf *pf, struct pf_fetch *f)
{
	if (f->stream) {
		*(f->sprev ? &f->sprev->snext : &pf->streams) = f->snext;
		if (f->snext)
			f->snext->sprev = f->sprev;
	}
	for (uint32_t i = 0; i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		queue_remove(p);
		if (p->state == PART_QUEUED || p->state == PART_DELAYED)
			p->state = PART_IDLE;
	}
	pf->by_id[f->id] = NULL;
	f->in_table = false;
	mem_sub(pf, f, f->mem);
	fetch_put(pf, f);
}

/*
 * Creates the fetch of @o (id @id), in the table with one reference for
 * it. A whole fetch reserves the object's memory and queues every part; a
 * stream queues nothing (readers ask for parts). mu held.
 */
static struct pf_fetch *fetch_create(struct pf *pf, uint32_t id,
				     const struct pf_object *o, bool demand,
				     bool stream)
{
	uint64_t part = pf->cfg.part_size;
	struct pf_fetch *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->id = id;
	f->size = o->size;
	f->n_parts = (uint32_t)((o->size + part - 1) / part);
	f->key = malloc(o->key_len + 1);
	f->etag = strdup(o->etag);
	f->parts = calloc(f->n_parts ? f->n_parts : 1, sizeof(*f->parts));
	if (!f->key || !f->etag || !f->parts) {
		fetch_free(f);
		return NULL;
	}
	memcpy(f->key, o->key, o->key_len);
	f->key[o->key_len] = '\0';
	f->key_len = o->key_len;
	for (uint32_t i = 0; i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		p->f = f;
		p->off = (uint64_t)i * part;
		p->len = (size_t)(o->size - p->off < part ? o->size - p->off : part);
	}
	f->stream = stream;
	f->demand = demand;
	f->refs = 1;
	f->in_table = true;
	pf->by_id[id] = f;
	if (stream) {
		f->snext = pf->streams;
		if (f->snext)
			f->snext->sprev = f;
		pf->streams = f;
		return f;
	}
	mem_add(pf, f, o->size);
	/* Whether it reads the tier is asked again when its GET starts
	 * (part_take(): the breaker may open or close meanwhile). */
	f->tier = pf->tier && f->n_parts == 1 &&
		  tier_wants(pf->tier, f->key, f->key_len, f->etag);
	if (demand)
		f->wait_ns = mono_ns();
	/* Readers move the parts they need to the front (fetch_ask); the
	 * rest keep the object's order, behind other readers' parts. */
	for (uint32_t i = 0; i < f->n_parts; i++) {
		f->parts[i].state = PART_QUEUED;
		queue_push(demand ? &pf->demand : &pf->ahead, &f->parts[i],
			   false);
	}
	return f;
}

/*
 * Drops a stream nobody uses any more (no reader, no transfer), or one
 * that failed, once idle. mu held.
 */
static void stream_maybe_drop(struct pf *pf, struct pf_fetch *f)
{
	if (!f->stream || !f->in_table || f->refs > 1 || f->running)
		return;
	if (pf->open_count[f->id] && !f->err)
		return;
	pf_fetch_leave(pf, f);
}

/* Frees the buffer of done part @p of a stream. mu held; not pinned. */
static void stream_release(struct pf *pf, struct pf_part *p)
{
	mem_sub(pf, p->f, p->len);
	part_release_buf(p);
	p->state = PART_IDLE;
	p->attempts = 0;
}

/*
 * Releases unpinned done parts of streams until @need bytes more fit in
 * fetch_mem: first those behind their readers, then any. mu held.
 */
static void stream_reclaim(struct pf *pf, uint64_t need)
{
	for (int pass = 0; pass < 2; pass++) {
		for (struct pf_fetch *f = pf->streams; f; f = f->snext) {
			for (uint32_t i = 0; i < f->n_parts; i++) {
				struct pf_part *p = &f->parts[i];

				if (pf->mem + need <= pf->cfg.fetch_mem)
					return;
				if (p->state == PART_DONE && !p->pins &&
				    (pass || i < f->pos))
					stream_release(pf, p);
			}
		}
	}
}

/* ---- the engine thread ---------------------------------------------------- */

static void cut_limit(struct pf *pf)
{
	uint64_t now = mono_ns();

	/* One cut per 100 ms: a burst of 503s is one signal, not many. */
	if (now - pf->last_cut_ns < 100000000u)
		return;
	pf->last_cut_ns = now;
	pf->limit /= 2;
	if (pf->limit < PF_INFLIGHT_MIN)
		pf->limit = PF_INFLIGHT_MIN;
}

static void count_error(struct pf *pf, enum s3_err_kind kind)
{
	switch (kind) {
	case S3_ERR_SLOWDOWN:
		pf->st.err_slowdown++;
		break;
	case S3_ERR_SERVER:
		pf->st.err_server++;
		break;
	case S3_ERR_STALE:
		pf->st.err_stale++;
		break;
	case S3_ERR_NETWORK:
		pf->st.err_network++;
		break;
	default:
		pf->st.err_other++;
		break;
	}
}

/* See engine_internal.h. */
void pf_note_failure(struct pf *pf, uint32_t id, int err)
{
	struct pf_failure *fl = &pf->fails[pf->fail_next++ % PF_FAILS];

	*fl = (struct pf_failure){ id, err, mono_ns() + PF_FAIL_HOLD_NS };
}

/* Queues the fetch of a whole object for the commit. mu held. */
static void whole_complete(struct pf *pf, struct pf_fetch *f)
{
	if (pf->n_done == pf->cap_done) {
		size_t cap = pf->cap_done ? pf->cap_done * 2 : 64;
		struct pf_fetch **nd = realloc(pf->done, cap * sizeof(*nd));

		if (nd) {
			pf->done = nd;
			pf->cap_done = cap;
		}
	}
	if (pf->n_done < pf->cap_done) {
		pf->done[pf->n_done++] = f;
		pthread_cond_signal(&pf->wcv);
	} else {
		/* No room to remember it: leave it uncached (and unwritten to
		 * the tier). */
		if (f->tier_put)
			tier_put_forget(pf->tier);
		pf->st.warm_failed += f->warm_refs;
		pf_fetch_leave(pf, f);
	}
}

/*
 * Fetch @f failed for good with @err: parts not yet running will not run.
 * The first failure is logged (once per fetch). mu held.
 */
static void fetch_fail(struct pf *pf, struct pf_fetch *f, int err,
		       enum s3_err_kind kind, int attempts,
		       const struct s3_status *st)
{
	char why[512];

	if (!f->err) {
		f->err = err;
		f->kind = kind;
		s3_status_describe(st, err, why, sizeof(why));
		log_error("GET '%s' failed after %d attempt(s): %s", f->key,
			  attempts, why);
		if (f->demand && f->stream)
			pf_note_failure(pf, f->id, err);
	}
	for (uint32_t i = 0; i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		if (p->state == PART_QUEUED || p->state == PART_DELAYED ||
		    (f->stream && p->state == PART_IDLE)) {
			queue_remove(p);
			p->state = PART_FAILED;
			f->parts_failed++;
		}
	}
}

/* The mount's one retry budget (common/retry.h). */
static const struct retry_policy *pf_retry(const struct pf *pf)
{
	return s3_client_retry(pf->cfg.s3);
}

/* ---- the tier --------------------------------------------------------------- */

static void tier_run_add(struct pf *pf, struct pf_part *p, uint64_t now)
{
	p->on_tier = true;
	p->start_ns = now;
	p->tnext = NULL;
	p->tprev = pf->tier_run_tail;
	*(p->tprev ? &p->tprev->tnext : &pf->tier_run) = p;
	pf->tier_run_tail = p;
}

static void tier_run_remove(struct pf *pf, struct pf_part *p)
{
	if (!p->on_tier)
		return;
	*(p->tprev ? &p->tprev->tnext : &pf->tier_run) = p->tnext;
	*(p->tnext ? &p->tnext->tprev : &pf->tier_run_tail) = p->tprev;
	p->on_tier = false;
	p->tprev = p->tnext = NULL;
}

/*
 * The tier attempt of @p (running, its handle out of the multi handle)
 * ended with @v: a hit completes the part as an origin GET would; anything
 * else makes it an origin GET, first in its queue, with a fresh budget.
 * mu held.
 */
static void part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
		       bool retryable, const struct s3_status *st);

static void tier_part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
			    enum tier_verdict v, enum tier_cut cut,
			    const struct s3_status *st)
{
	struct pf_fetch *f = p->f;

	tier_run_remove(pf, p);
	tier_note_verdict(pf->tier, v, cut, f->demand);
	if (v != TIER_ERROR)
		tier_note_answer_ns(pf->tier, mono_ns() - p->start_ns);
	if (v == TIER_HIT) {
		part_ended(pf, p, got, false, st);
		return;
	}
	pf->running--;
	f->running--;
	f->tier = false;
	/* After a miss or a mismatch the tier needs the object. After a
	 * hedge, a timeout or an error it most likely holds it (it was slow
	 * or failing, not empty): a PUT would only load a tier already too
	 * slow for its readers. */
	f->tier_put = v == TIER_MISS || v == TIER_MISMATCH;
	if (f->tier_put)
		tier_put_expect(pf->tier);
	/* The origin's GET is another request: new handle, If-Match. */
	s3_xfer_destroy(p->x);
	p->x = NULL;
	p->attempts = 0;
	p->state = PART_QUEUED;
	queue_push(f->demand ? &pf->demand : &pf->ahead, p, true);
}

/* Cuts tier GET @p (running, armed) short: it goes to the origin. Engine
 * thread, mu held. */
static void tier_cut_part(struct pf *pf, struct pf_part *p,
			  enum tier_cut cut)
{
	struct s3_status st;
	bool retryable;

	curl_multi_remove_handle(pf->multi, s3_xfer_easy(p->x));
	s3_xfer_finish(p->x, CURLE_ABORTED_BY_CALLBACK, &st, &retryable);
	tier_part_ended(pf, p, -ETIMEDOUT, TIER_ERROR, cut, &st);
}

/*
 * Sends to the origin the tier GETs that should not wait on the tier any
 * longer: all of them when the tier is hung or its breaker open (the
 * hint's prefetches included, so that they keep their lead), and those a
 * reader has waited on past the hedge, within the hedge budget. Engine
 * thread (it owns the multi handle), mu held. Returns whether it cut any,
 * and lowers *@timeout_ms to the next check due.
 */
static bool tier_hedge(struct pf *pf, int *timeout_ms)
{
	uint64_t hedge_ns = tier_hedge_ns(pf->tier);
	uint64_t now = mono_ns(), due = UINT64_MAX;
	struct pf_part *p, *next;
	unsigned int running = 0;
	bool any = false, all;

	if (!pf->tier_run)
		return false;
	for (p = pf->tier_run; p; p = p->tnext)
		running++;
	/* tier_run is in start order: its head is the oldest GET. */
	all = tier_open(pf->tier) ||
	      tier_hung(pf->tier, pf->tier_run->start_ns, running,
			pf->polled_ns, &due);
	if (!all && due != UINT64_MAX) {
		/* Past due and not judged hung: the last poll began before
		 * due. Poll at once (it reads what the sockets hold), then
		 * ask again. */
		int ms = due > now ? (int)((due - now) / 1000000u) + 1 : 0;

		if (ms < *timeout_ms)
			*timeout_ms = ms;
	}
	for (p = pf->tier_run; p; p = next) {
		struct pf_fetch *f = p->f;

		next = p->tnext;
		if (!p->x || !s3_xfer_easy(p->x))
			continue; /* not armed yet: arm_parts() is on it */
		if (all) {
			tier_cut_part(pf, p, TIER_CUT_BREAKER);
			any = true;
			continue;
		}
		if (!hedge_ns || !f->demand || p->hedge_denied)
			continue;
		/* The reader's own wait: a prefetch that ran long before
		 * it came has not kept it waiting. */
		due = (f->wait_ns > p->start_ns ? f->wait_ns : p->start_ns) +
		      hedge_ns;
		if (now < due) {
			int ms = (int)((due - now) / 1000000u) + 1;

			if (ms < *timeout_ms)
				*timeout_ms = ms;
			continue;
		}
		/* NOTE: a race would keep both answers; for an object of one
		 * part, the tier answering after the hedge is a tier in
		 * trouble, and the origin's GET alone is the cheaper bet. */
		if (!tier_hedge_take(pf->tier)) {
			p->hedge_denied = true;
			continue;
		}
		tier_cut_part(pf, p, TIER_CUT_HEDGE);
		any = true;
	}
	return any;
}

/* Handles the end of one attempt of @p. mu held. */
static void part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
		       bool retryable, const struct s3_status *st)
{
	struct pf_fetch *f = p->f;

	tier_run_remove(pf, p);
	pf->running--;
	f->running--;
	if (p->over) {
		p->over = false;
		pf->over--;
	}
	if (got == (ssize_t)p->len) {
		p->state = PART_DONE;
		f->parts_done++;
		pf->st.bytes += (uint64_t)got;
		if (pf->limit < pf->cfg.max_inflight)
			pf->limit += 1.0 / pf->limit;
	} else {
		/* A body shorter than asked for is a truncated transfer. */
		int err = got >= 0 ? -ECONNRESET : (int)got;
		enum s3_err_kind kind = got >= 0 ? S3_ERR_NETWORK : st->kind;
		const struct retry_policy *rp = pf_retry(pf);
		uint64_t now = mono_ns(), due;
		unsigned int seed = (unsigned int)now;

		count_error(pf, kind);
		if (kind == S3_ERR_SLOWDOWN)
			cut_limit(pf);
		due = now + 1000000ull * retry_delay_ms(rp, p->attempts, &seed);
		/* Given up when the retry would start past the budget, not
		 * only when this attempt ended past it. */
		if ((got >= 0 || retryable) && !f->err &&
		    !retry_give_up(rp, p->attempts,
				   (due - p->first_ns) / 1000000u)) {
			p->due_ns = due;
			p->state = PART_DELAYED;
			queue_push(&pf->delayed, p, false);
			pf->st.retries++;
			return;
		}
		f->parts_failed++;
		p->state = PART_FAILED;
		fetch_fail(pf, f, f->err ? f->err : err, f->err ? f->kind : kind,
			   p->attempts, st);
	}
	pthread_cond_broadcast(&pf->cv);
	if (f->stream)
		stream_maybe_drop(pf, f);
	else if (f->parts_done + f->parts_failed == f->n_parts)
		whole_complete(pf, f);
}

static bool is_nocache(const struct pf *pf, uint32_t id)
{
	return pf->nocache[id / 8] & (1u << (id % 8));
}

/*
 * Whether object @o (id @id) is fetched whole and cached, rather than
 * streamed. Without mu (asks the cache).
 */
static bool fetch_whole(struct pf *pf, uint32_t id, const struct pf_object *o)
{
	bool nocache;

	pthread_mutex_lock(&pf->mu);
	nocache = is_nocache(pf, id);
	pthread_mutex_unlock(&pf->mu);
	return !nocache && o->size <= pf->cfg.max_object_mem &&
	       cache_can_take(pf->cfg.cache, o->key_len, strlen(o->etag),
			      o->size);
}

/* Whether the prefetcher passes over @id: its fetch is in flight. mu held. */
static bool in_flight(void *arg, uint32_t id)
{
	const struct pf *pf = arg;

	return pf->by_id[id] != NULL;
}

/*
 * Picks up to @room hinted ids ahead of the readers that have no fetch in
 * flight, advancing the hints' cursors. mu held.
 */
static void pick_hinted(struct pf *pf, struct pf_candidates *c, size_t room)
{
	size_t got = order_streams_pick(&pf->hints, pf->cfg.window_objects,
					mono_ns(), in_flight, pf,
					c->ids + c->n, room - c->n);

	for (size_t i = 0; i < got; i++)
		c->warm[c->n + i] = false;
	c->n += got;
}

/*
 * Picks ids of the warm list (no window: the user asked for all of them).
 * One already in flight is counted when that fetch ends. mu held.
 */
static void pick_warm(struct pf *pf, struct pf_candidates *c, size_t room)
{
	while (pf->warm_next < pf->warm_n && c->n < room) {
		uint32_t id = pf->warm_ids[pf->warm_next++];
		struct pf_fetch *f = pf->by_id[id];

		if (f && !f->stream) {
			f->warm_refs++;
			continue;
		}
		c->warm[c->n] = true;
		c->ids[c->n++] = id;
	}
	if (pf->warm_next == pf->warm_n) {
		free(pf->warm_ids);
		pf->warm_ids = NULL;
		pf->warm_n = pf->warm_cap = pf->warm_next = 0;
	}
}

/*
 * Starts fetches for hinted, then warm-listed, objects that are neither
 * cached nor in flight, while fetch memory lasts; a candidate that does
 * not fit waits in pf->carry. Returns true when one waits so: only memory
 * given back (mem_sub()) or a reader done waiting for it lets it go on.
 * Called without mu: it looks objects up in the cache.
 */
static bool schedule_prefetch(struct pf *pf)
{
	struct pf_candidates *c = &pf->carry;
	char key[4096];

	for (int round = 0; round < 64; round++) {
		pthread_mutex_lock(&pf->mu);
		if (c->first < c->n &&
		    (pf->room_waiters || pf->mem >= pf->cfg.fetch_mem)) {
			pthread_mutex_unlock(&pf->mu);
			return true;
		}
		if (c->first == c->n) {
			size_t room = pf->ahead.head || pf->room_waiters ||
					      pf->mem >= pf->cfg.fetch_mem
				      ? 0 : (size_t)pf->limit;

			if (room > 64)
				room = 64;
			c->n = c->first = 0;
			pick_hinted(pf, c, room);
			pick_warm(pf, c, room);
		}
		pthread_mutex_unlock(&pf->mu);
		if (c->first == c->n)
			return false;

		while (c->first < c->n) {
			uint32_t id = c->ids[c->first];
			bool warm = c->warm[c->first];
			struct pf_object o;
			struct pf_fetch *f;
			int skip = 0; /* 1: nothing to fetch, 2: cannot be cached */

			if (pf->cfg.describe(pf->cfg.arg, id, key, sizeof(key), &o))
				skip = 2;
			else if (o.size == 0 ||
				 cache_contains(pf->cfg.cache, o.key, o.key_len, o.etag,
						 o.size))
				skip = 1;
			else if (!fetch_whole(pf, id, &o))
				skip = 2;
			pthread_mutex_lock(&pf->mu);
			if (!skip && !pf->by_id[id] &&
			    (pf->room_waiters ||
			     pf->mem + o.size > pf->cfg.fetch_mem)) {
				/* Prefetch stops at the bound (and leaves room
				 * to a reader waiting for it). */
				pthread_mutex_unlock(&pf->mu);
				return true;
			}
			c->first++;
			if (skip && warm) {
				if (skip == 1)
					pf->st.warm_done++;
				else
					pf->st.warm_failed++;
			} else if (!skip) {
				f = pf->by_id[id];
				if (!f && (f = fetch_create(pf, id, &o, false, false)))
					pf->st.prefetched++;
				if ((!f || f->stream) && warm)
					pf->st.warm_failed++;
				else if (f && warm)
					f->warm_refs++;
			}
			pthread_mutex_unlock(&pf->mu);
		}
	}
	return false;
}

int pf_warm(struct pf *pf, const uint32_t *ids, size_t n)
{
	uint64_t max = (uint64_t)pf->cfg.n_ids * PF_WARM_PER_OBJECT;
	int rc = 0;

	if (max < PF_WARM_MIN)
		max = PF_WARM_MIN;
	pthread_mutex_lock(&pf->mu);
	if (pf->warm_n - pf->warm_next + n > max) {
		pf->st.warm_refused += n;
		rc = -EBUSY;
		goto out;
	}
	/* Entries already looked at go: the list holds what is pending. */
	if (pf->warm_next) {
		pf->warm_n -= pf->warm_next;
		memmove(pf->warm_ids, pf->warm_ids + pf->warm_next,
			pf->warm_n * sizeof(*pf->warm_ids));
		pf->warm_next = 0;
	}
	if (pf->warm_n + n > pf->warm_cap) {
		size_t cap = pf->warm_cap ? pf->warm_cap : 1024;
		uint32_t *nw;

		while (cap < pf->warm_n + n)
			cap *= 2;
		nw = realloc(pf->warm_ids, cap * sizeof(*nw));
		if (!nw) {
			rc = -ENOMEM;
			goto out;
		}
		pf->warm_ids = nw;
		pf->warm_cap = cap;
	}
	memcpy(pf->warm_ids + pf->warm_n, ids, n * sizeof(*ids));
	pf->warm_n += n;
	pf->st.warm_queued += n;
out:
	pthread_mutex_unlock(&pf->mu);
	netloop_wake(&pf->net);
	return rc;
}

/*
 * Whether queued part @p may start now. A whole fetch's parts have their
 * memory; a stream part needs room in fetch_mem, which a part a reader
 * waits on may make by releasing other streams' parts. mu held.
 */
static bool part_may_start(struct pf *pf, struct pf_part *p, bool demand)
{
	if (!p->f->stream || p->buf)
		return true;
	if (pf->mem + p->len <= pf->cfg.fetch_mem)
		return true;
	if (!demand || !p->pins)
		return false;
	stream_reclaim(pf, p->len);
	if (pf->mem + p->len <= pf->cfg.fetch_mem)
		return true;
	/* Every byte is held by fetches that will finish or by readers:
	 * one part at a time may pass the bound, so that they do. */
	if (pf->over)
		return false;
	p->over = true;
	pf->over++;
	return true;
}

/* The first part of @q that may start, looking at PF_SCAN_MAX at most. */
static struct pf_part *queue_pick(struct pf *pf, struct pf_queue *q,
				  bool demand)
{
	int n = 0;

	for (struct pf_part *p = q->head; p && n < PF_SCAN_MAX; p = p->next, n++)
		if (part_may_start(pf, p, demand))
			return p;
	return NULL;
}

/*
 * Takes @p out of its queue for an attempt, counted as running from now,
 * with its buffer (a stream's counted in fetch_mem). mu held.
 */
static void part_take(struct pf *pf, struct pf_part *p, uint64_t now)
{
	struct pf_fetch *f = p->f;

	queue_remove(p);
	if (!p->buf) {
		p->buf = malloc(p->len);
		if (p->buf && f->stream)
			mem_add(pf, f, p->len);
	}
	if (!p->attempts++) {
		p->first_ns = now;
		if (f->tier && !tier_use(pf->tier))
			f->tier = false; /* the breaker is open */
	}
	p->state = PART_RUNNING;
	if (++pf->running > pf->st.inflight_peak)
		pf->st.inflight_peak = pf->running;
	f->running++;
	pf->st.requests++;
	if (f->tier) {
		tier_note_get(pf->tier);
		tier_run_add(pf, p, now);
	}
}

/*
 * Takes queued parts up to the limit, demand first, and returns them in
 * order, chained by next, for arm_parts(). mu held.
 */
static struct pf_part *take_parts(struct pf *pf)
{
	struct pf_part *list = NULL, **tail = &list, *p, *next;
	uint64_t now = mono_ns();

	/* Retries whose time has come go first: someone waited longest. */
	for (p = pf->delayed.head; p; p = next) {
		next = p->next;
		if (p->due_ns <= now) {
			queue_remove(p);
			p->state = PART_QUEUED;
			queue_push(p->f->demand ? &pf->demand : &pf->ahead, p, true);
		}
	}
	while (pf->running < (uint32_t)pf->limit) {
		p = queue_pick(pf, &pf->demand, true);
		if (!p)
			p = queue_pick(pf, &pf->ahead, false);
		if (!p)
			break;
		part_take(pf, p, now);
		*tail = p;
		tail = &p->next;
	}
	return list;
}

/*
 * Signs the parts taken and hands them to curl, each attempt with a
 * deadline: what is left of its part's budget. Engine thread, without mu:
 * signing (an HMAC chain per request) is the costliest step of a start,
 * and readers and hints must not wait behind it. A part taken is running:
 * nobody else touches its transfer, and its fetch stays in the table.
 */
static void arm_parts(struct pf *pf, struct pf_part *list)
{
	uint64_t budget_ns = 1000000ull * (uint64_t)pf_retry(pf)->max_time_ms;

	while (list) {
		struct pf_part *p = list;
		struct pf_fetch *f = p->f;
		uint64_t now = mono_ns();
		long left_ms;
		CURL *easy;
		int rc = p->buf ? 0 : -ENOMEM;

		list = p->next;
		p->next = NULL;
		/* f->tier changes only on this thread (tier_part_ended()). */
		if (!rc && !p->x && f->tier) {
			char name[TIER_NAME_MAX];
			size_t nlen = tier_name(tier_prefix(pf->tier),
						tier_origin_bucket(pf->tier),
						f->key, f->key_len, f->etag,
						name, sizeof(name));

			rc = nlen ? s3_xfer_create(tier_client(pf->tier), name,
						   nlen, NULL, 0, p->len, p->buf,
						   p, &p->x)
				  : -ENOMEM;
			if (!rc) {
				s3_xfer_whole_object(p->x);
				s3_xfer_want_meta(p->x);
			}
		} else if (!rc && !p->x) {
			rc = s3_xfer_create(pf->cfg.s3, f->key, f->key_len,
					    f->etag, p->off, p->len, p->buf, p,
					    &p->x);
			if (!rc && f->n_parts == 1)
				s3_xfer_whole_object(p->x);
		}
		/* A retry keeps what the broken attempt received. */
		if (!rc)
			rc = s3_xfer_arm(p->x, p->attempts > 1, &easy);
		if (!rc) {
			/* The attempt ends with the budget, however slowly the
			 * server sends: the stall timeout alone lets a trickle
			 * (a byte a second) run for ever. */
			left_ms = p->first_ns + budget_ns > now
					  ? (long)((p->first_ns + budget_ns - now) /
						   1000000u)
					  : 0;
			if (f->tier && left_ms > PF_TIER_TIMEOUT_MS)
				left_ms = PF_TIER_TIMEOUT_MS;
			curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
					 left_ms > 0 ? left_ms : 1L);
			if (curl_multi_add_handle(pf->multi, easy) != CURLM_OK)
				rc = -ENOMEM;
		}
		if (rc) {
			struct s3_status st = { .message = "cannot start a transfer" };

			pthread_mutex_lock(&pf->mu);
			if (f->tier)
				tier_part_ended(pf, p, rc, TIER_ERROR,
						TIER_CUT_NONE, &st);
			else
				part_ended(pf, p, rc, false, &st);
			pthread_mutex_unlock(&pf->mu);
		}
	}
}

/* Milliseconds until the earliest delayed retry, capped. mu held. */
static int poll_timeout_ms(struct pf *pf)
{
	uint64_t now = mono_ns(), best = 1000;

	for (struct pf_part *p = pf->delayed.head; p; p = p->next) {
		uint64_t ms = p->due_ns > now ? (p->due_ns - now) / 1000000u + 1 : 0;

		if (ms < best)
			best = ms;
	}
	return (int)best;
}

static void *engine_main(void *arg)
{
	struct pf *pf = arg;

	/* Named so that per-thread CPU (top -H, /proc/PID/task) tells the
	 * network thread from the FUSE workers. */
	pthread_setname_np(pthread_self(), "hintfs-engine");

	bool ended = false;

	for (;;) {
		uint64_t busy0 = mono_ns(), busy, waited, timeouts, poll0;
		uint64_t gen;
		struct pf_part *taken;
		CURLMsg *msg;
		int left, timeout;
		bool held = schedule_prefetch(pf), idle;

		pthread_mutex_lock(&pf->mu);
		if (pf->stop) {
			/* pf_stop() takes the transfers still running down. */
			pthread_mutex_unlock(&pf->mu);
			break;
		}
		taken = take_parts(pf);
		timeout = poll_timeout_ms(pf);
		/* A hedge put a part back in a queue: start it at once. */
		if (pf->tier && tier_hedge(pf, &timeout))
			ended = true;
		/* Prefetch waits for memory with nothing in flight: whoever
		 * gives memory back must wake us (mem_sub()). */
		idle = held && !taken && !pf->running;
		gen = pf->room_gen;
		pthread_mutex_unlock(&pf->mu);
		arm_parts(pf, taken);

		/* Something ended last round: start the next at once rather
		 * than after the timeout. */
		timeouts = pf->net.timeouts;
		poll0 = mono_ns();
		waited = netloop_run(&pf->net, ended ? 0 : timeout);
		/* Room came back during a wait that still ran out: its
		 * wake-up was lost. A wait that runs out while a commit takes
		 * its time is no loss. (Room given back in the instant
		 * between the wait's end and this look counts one that was
		 * not: rare, and never 0 where a wake-up is really lost.) */
		pthread_mutex_lock(&pf->mu);
		if (idle && pf->net.timeouts != timeouts && pf->room_gen != gen)
			pf->st.lost_wakeups++;
		pthread_mutex_unlock(&pf->mu);
		ended = false;
		while ((msg = curl_multi_info_read(pf->multi, &left))) {
			struct s3_xfer *x = NULL;
			struct s3_status st;
			bool retryable;
			ssize_t got;

			if (msg->msg != CURLMSG_DONE)
				continue;
			CURL *easy = msg->easy_handle;
			CURLcode cc = msg->data.result;

			curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
			curl_multi_remove_handle(pf->multi, easy);
			got = s3_xfer_finish(x, cc, &st, &retryable);
			struct pf_part *p = s3_xfer_user(x);
			struct pf_fetch *f = p->f;

			if (f->tier) {
				/* Judged before mu: hashing the bytes may take
				 * a while, and nobody else touches a running
				 * part. */
				enum tier_verdict v = tier_check(
				    pf->tier, got, &st, s3_xfer_meta(x), f->key,
				    f->key_len, f->etag, f->size, p->buf);

				pthread_mutex_lock(&pf->mu);
				tier_part_ended(pf, p, got, v, TIER_CUT_NONE,
						&st);
			} else {
				pthread_mutex_lock(&pf->mu);
				part_ended(pf, p, got, retryable, &st);
			}
			pthread_mutex_unlock(&pf->mu);
			ended = true;
		}
		/* How long transfers waited on this thread's other work. */
		busy = mono_ns() - busy0 - waited;
		/* Every answer that came before poll0 has been judged. */
		pf->polled_ns = poll0;
		pthread_mutex_lock(&pf->mu);
		pf->st.engine_busy_ns += busy;
		if (busy > pf->st.engine_busy_max_ns)
			pf->st.engine_busy_max_ns = busy;
		pthread_mutex_unlock(&pf->mu);
	}
	return NULL;
}

/* ---- readers ---------------------------------------------------------------- */

/* The parts [*first, *last] of @f covering [off, off + len); len > 0. */
static void part_span(const struct pf *pf, uint64_t off, size_t len,
		      uint32_t *first, uint32_t *last)
{
	*first = (uint32_t)(off / pf->cfg.part_size);
	*last = (uint32_t)((off + len - 1) / pf->cfg.part_size);
}

/*
 * A reader needs parts [a, b] of @f: pins them and puts those not yet
 * running at the front of the demand queue, in order; a whole fetch's
 * other parts follow behind other readers' parts, a stream gets its
 * read-ahead and releases what lies behind. mu held.
 */
static void fetch_ask(struct pf *pf, struct pf_fetch *f, uint32_t a, uint32_t b)
{
	if (!f->demand)
		f->wait_ns = mono_ns();
	if (!f->demand && !f->stream) {
		/* A reader waits for it now: its parts leave the prefetch
		 * queue for the demand queue, in order. */
		for (uint32_t i = 0; i < f->n_parts; i++) {
			struct pf_part *p = &f->parts[i];

			if (p->q == &pf->ahead) {
				queue_remove(p);
				queue_push(&pf->demand, p, false);
			}
		}
	}
	f->demand = true;
	f->pos = a;
	for (uint32_t i = b + 1; i-- > a;) {
		struct pf_part *p = &f->parts[i];

		p->pins++;
		if (p->state == PART_QUEUED || p->state == PART_IDLE) {
			queue_remove(p);
			p->state = PART_QUEUED;
			queue_push(&pf->demand, p, true);
		}
	}
	if (!f->stream)
		return;
	for (uint32_t i = b + 1; i <= b + PF_STREAM_AHEAD && i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		if (p->state == PART_IDLE) {
			p->state = PART_QUEUED;
			queue_push(&pf->ahead, p, false);
		}
	}
	for (uint32_t i = 0; i + 1 < a; i++)
		if (f->parts[i].state == PART_DONE && !f->parts[i].pins)
			stream_release(pf, &f->parts[i]);
}

static void fetch_unpin(struct pf_fetch *f, uint32_t a, uint32_t b)
{
	for (uint32_t i = a; i <= b; i++)
		f->parts[i].pins--;
}

/* Whether parts [a, b] of @f have arrived; *err gets a failure. */
static bool parts_ready(const struct pf_fetch *f, uint32_t a, uint32_t b,
			int *err)
{
	for (uint32_t i = a; i <= b; i++) {
		if (f->parts[i].state == PART_FAILED) {
			*err = f->err ? f->err : -EIO;
			return false;
		}
		if (f->parts[i].state != PART_DONE)
			return false;
	}
	return true;
}

/* Until @deadline_ns passes; false then. mu held. */
static bool wait_until(struct pf *pf, uint64_t deadline_ns)
{
	struct timespec ts = { .tv_sec = (time_t)(deadline_ns / 1000000000u),
			       .tv_nsec = (long)(deadline_ns % 1000000000u) };

	if (mono_ns() >= deadline_ns)
		return false;
	pthread_cond_timedwait(&pf->cv, &pf->mu, &ts);
	return true;
}

/* A reader is done with @f. mu held. */
static void reader_put(struct pf *pf, struct pf_fetch *f)
{
	if (--f->refs == 0) {
		fetch_free(f);
		return;
	}
	stream_maybe_drop(pf, f);
	/* Unpinned parts may make room for others waiting. */
	if (pf->room_waiters)
		pthread_cond_broadcast(&pf->cv);
	if (pf->demand.head)
		netloop_wake(&pf->net);
}

/*
 * A reader stops waiting for memory. Prefetch leaves room to readers that
 * wait (schedule_prefetch()): the last one to go wakes the network thread,
 * which would otherwise not look again until its poll ran out. mu held.
 */
static void room_wait_end(struct pf *pf)
{
	if (!--pf->room_waiters) {
		pf->room_gen++;
		netloop_wake(&pf->net);
	}
}

/* Gives up after the reader's deadline: one line. Unlocks mu. */
static ssize_t read_timed_out(struct pf *pf, const struct pf_object *o,
			      uint64_t off, uint64_t t0)
{
	pthread_mutex_unlock(&pf->mu);
	rd_add(&pf->rd.failed_reads, 1);
	log_error("read of '%.*s' at offset %llu: no data after %llu s",
		  (int)o->key_len, o->key, (unsigned long long)off,
		  (unsigned long long)((mono_ns() - t0) / 1000000000u));
	return -ETIMEDOUT;
}

/* The read failed with @err. Unlocks mu. */
static ssize_t read_failed(struct pf *pf, ssize_t err)
{
	pthread_mutex_unlock(&pf->mu);
	rd_add(&pf->rd.failed_reads, 1);
	return err;
}

ssize_t pf_read(struct pf *pf, uint32_t id, void *buf, size_t len, uint64_t off)
{
	struct pf_object o;
	struct cache_obj co;
	struct pf_fetch *f;
	char key[4096];
	uint64_t t0 = mono_ns(), deadline;
	uint32_t a, b;
	bool whole, waited = false;
	int err = 0;
	ssize_t n;

	if (id >= pf->cfg.n_ids || pf->cfg.describe(pf->cfg.arg, id, key, sizeof(key), &o))
		return -ENOENT;
	if (off >= o.size)
		return 0;
	if (len > o.size - off)
		len = (size_t)(o.size - off);
	deadline = t0 + 1000000ull * (2ull * (uint64_t)pf_retry(pf)->max_time_ms +
				      PF_WAIT_SLACK_MS);
	whole = fetch_whole(pf, id, &o);
	rd_add(&pf->rd.reads, 1);

again:
	for (int tries = 0;; tries++) {
		/* The cache first, without the engine's lock. */
		if (!cache_lookup(pf->cfg.cache, o.key, o.key_len, o.etag,
				  o.size, &co)) {
			n = cache_read(pf->cfg.cache, &co, buf, len, off);
			if (n != -ENODATA) {
				rd_add(n >= 0 ? &pf->rd.cache_hits
					      : &pf->rd.failed_reads, 1);
				return n;
			}
		}
		pthread_mutex_lock(&pf->mu);
		f = pf->by_id[id];
		if (f || tries > 0 || !whole)
			break;
		/* No fetch: either none ran, or it committed since our miss
		 * (fetches leave the table only after committing). Look again. */
		pthread_mutex_unlock(&pf->mu);
	}

	/* mu held. */
	if (pf->stop)
		return read_failed(pf, -ECANCELED);
	if (f) {
		if (f->stream)
			rd_add(&pf->rd.passthrough, 1);
		else
			pf->st.prefetch_joins++;
	} else {
		uint64_t now = mono_ns();

		for (int i = 0; i < PF_FAILS; i++) {
			if (pf->fails[i].id == id && pf->fails[i].until_ns > now)
				return read_failed(pf, pf->fails[i].err);
		}
		if (whole && pf->mem + o.size > pf->cfg.fetch_mem)
			stream_reclaim(pf, o.size);
		if (whole && pf->mem + o.size > pf->cfg.fetch_mem) {
			/* Demand waits for room rather than pass the bound:
			 * fetches in the table finish and give theirs back.
			 * Then look again from the cache: it may be there. */
			pf->room_waiters++;
			waited = true;
			if (!wait_until(pf, deadline)) {
				room_wait_end(pf);
				return read_timed_out(pf, &o, off, t0);
			}
			room_wait_end(pf);
			pthread_mutex_unlock(&pf->mu);
			goto again;
		}
		f = fetch_create(pf, id, &o, true, !whole);
		if (!f)
			return read_failed(pf, -ENOMEM);
		if (whole)
			pf->st.demand_fetches++;
		else
			rd_add(&pf->rd.passthrough, 1);
	}
	f->refs++;
	part_span(pf, off, len, &a, &b);
	fetch_ask(pf, f, a, b);
	if (!parts_ready(f, a, b, &err) && !err) {
		waited = true;
		netloop_wake(&pf->net);
		while (!parts_ready(f, a, b, &err) && !err && !pf->stop)
			if (!wait_until(pf, deadline))
				break;
	}
	if (waited) {
		uint64_t ns = mono_ns() - t0;

		rd_add(&pf->rd.stalls, 1);
		rd_add(&pf->rd.stall_ns, ns);
		if (pf->opened_by[id]) {
			struct order_stream *st =
				&pf->hints.s[pf->opened_by[id] - 1];

			st->stalls++;
			st->stall_ns += ns;
		}
	}
	if (!parts_ready(f, a, b, &err)) {
		fetch_unpin(f, a, b);
		reader_put(pf, f);
		if (err || pf->stop)
			return read_failed(pf, err ? err : -ECANCELED);
		return read_timed_out(pf, &o, off, t0);
	}
	pthread_mutex_unlock(&pf->mu);

	/* The parts we need are done, pinned and never written again: copy
	 * freely. */
	for (uint64_t at = off, end = off + len; at < end;) {
		struct pf_part *p = &f->parts[at / pf->cfg.part_size];
		size_t k = (size_t)(p->off + p->len - at < end - at
					    ? p->off + p->len - at
					    : end - at);

		memcpy((char *)buf + (at - off), p->buf + (at - p->off), k);
		at += k;
	}

	pthread_mutex_lock(&pf->mu);
	fetch_unpin(f, a, b);
	reader_put(pf, f);
	pthread_mutex_unlock(&pf->mu);
	return (ssize_t)len;
}

ssize_t pf_read_ref(struct pf *pf, uint32_t id, size_t len, uint64_t off,
		    cache_ref_cb cb, void *arg)
{
	struct pf_object o;
	char key[4096];
	ssize_t n;

	if (id >= pf->cfg.n_ids ||
	    pf->cfg.describe(pf->cfg.arg, id, key, sizeof(key), &o) ||
	    off >= o.size || o.size > pf->cfg.max_object_mem)
		return -ENODATA;
	if (len > o.size - off)
		len = (size_t)(o.size - off);
	n = cache_read_ref(pf->cfg.cache, o.key, o.key_len, o.etag, o.size,
			   len, off, cb, arg);
	if (n == -ENODATA)
		return n;
	rd_add(&pf->rd.reads, 1);
	if (n >= 0) {
		rd_add(&pf->rd.cache_hits, 1);
		rd_add(&pf->rd.zero_copy, 1);
	} else {
		rd_add(&pf->rd.failed_reads, 1);
	}
	return n;
}

size_t pf_hint_ahead(struct pf *pf, size_t *at, uint32_t *ids, size_t max)
{
	size_t n;

	pthread_mutex_lock(&pf->mu);
	n = order_streams_ahead(&pf->hints, pf->cfg.window_objects, at, ids,
				max);
	pthread_mutex_unlock(&pf->mu);
	return n;
}

void pf_get_stats(struct pf *pf, struct pf_stats *st)
{
	struct order_queue_stats os;
	uint64_t now = mono_ns();

	pthread_mutex_lock(&pf->mu);
	*st = pf->st;
	st->inflight = pf->running;
	st->inflight_limit = (uint32_t)pf->limit;
	st->fetch_mem = pf->mem;
	st->fetch_mem_peak = pf->mem_peak;
	st->fetch_mem_limit = pf->cfg.fetch_mem;
	st->reads = atomic_load(&pf->rd.reads);
	st->cache_hits = atomic_load(&pf->rd.cache_hits);
	st->passthrough = atomic_load(&pf->rd.passthrough);
	st->stalls = atomic_load(&pf->rd.stalls);
	st->stall_ns = atomic_load(&pf->rd.stall_ns);
	st->failed_reads = atomic_load(&pf->rd.failed_reads);
	st->reads_zero_copy = atomic_load(&pf->rd.zero_copy);
	/* The top-level hint fields add up the streams (one stream: its
	 * own), the epoch being the one of the stream hinted last. */
	st->hint_epoch = -1;
	st->n_streams = 0;
	for (int i = 0; i < ORDER_STREAMS_MAX; i++) {
		const struct order_stream *hs = &pf->hints.s[i];
		struct pf_stream_stats *ss = &st->streams[st->n_streams];
		size_t pace;

		if (!order_stream_used(&pf->hints, i))
			continue;
		pace = order_streams_pace(&pf->hints, i, now);
		ss->pace = pace == SIZE_MAX ? 0 : pace;
		order_queue_stats(&hs->q, &os);
		memcpy(ss->name, hs->name, sizeof(ss->name));
		ss->pos = os.pos;
		ss->len = os.len;
		ss->epoch = os.epoch;
		ss->queued = os.queued;
		ss->hints = hs->hints;
		ss->stalls = hs->stalls;
		ss->stall_ns = hs->stall_ns;
		ss->owner = hs->owner;
		ss->idle_ns = now > hs->active_ns ? now - hs->active_ns : 0;
		st->n_streams++;
		st->hint_pos += os.pos;
		st->hint_len += os.len;
		st->hints_queued += os.queued;
		if (i == pf->hints.latest)
			st->hint_epoch = os.epoch;
	}
	st->reclaimed_exited = pf->hints.reclaimed_exited;
	st->reclaimed_idle = pf->hints.reclaimed_idle;
	st->n_reclaimed = 0;
	for (uint64_t k = st->reclaimed_exited + st->reclaimed_idle, j = 0;
	     k > 0 && j < ORDER_RECLAIMED_RECENT; k--, j++) {
		const struct order_reclaimed *r =
			&pf->hints.recent[(k - 1) % ORDER_RECLAIMED_RECENT];
		struct pf_reclaimed *o = &st->reclaimed[st->n_reclaimed++];

		memcpy(o->name, r->name, sizeof(o->name));
		o->owner = r->owner;
		o->exited = r->why == ORDER_RECLAIM_EXITED;
		o->unread = r->unread;
	}
	pthread_mutex_unlock(&pf->mu);
	if (pf->tier) {
		struct tier_stats ts;

		tier_get_stats(pf->tier, &ts);
		st->tier = true;
		st->tier_st.gets = ts.gets;
		st->tier_st.hits = ts.hits;
		st->tier_st.misses = ts.misses;
		st->tier_st.mismatches = ts.mismatches;
		st->tier_st.unbound = ts.unbound;
		st->tier_st.fallbacks = ts.fallbacks;
		st->tier_st.hedged = ts.hedged;
		st->tier_st.hedge_denied = ts.hedge_denied;
		st->tier_st.hedge_budget_pct = ts.hedge_budget_pct;
		st->tier_st.bypassed = ts.bypassed;
		st->tier_st.reader_stalls = ts.reader_stalls;
		st->tier_st.breaker_opens = ts.breaker_opens;
		st->tier_st.breaker_open = ts.breaker_open;
		st->tier_st.puts = ts.puts;
		st->tier_st.put_errors = ts.put_errors;
		st->tier_st.put_dropped = ts.put_dropped;
		st->tier_st.put_pending = ts.put_pending;
	}
}

/* ---- lifecycle ---------------------------------------------------------------- */

/* Ends the cache writer once it has committed every completed fetch. */
static void stop_writer(struct pf *pf)
{
	pthread_mutex_lock(&pf->mu);
	pf->writer_stop = true;
	pthread_cond_signal(&pf->wcv);
	pthread_mutex_unlock(&pf->mu);
	pthread_join(pf->writer, NULL);
}

int pf_start(const struct pf_config *cfg, struct pf **out)
{
	struct pf *pf = calloc(1, sizeof(*pf));
	pthread_condattr_t ca;
	bool net_ok = false;
	int rc;

	if (!pf)
		return -ENOMEM;
	pf->cfg = *cfg;
	if (!pf->cfg.max_inflight)
		pf->cfg.max_inflight = PF_INFLIGHT_DEFAULT;
	if (!pf->cfg.window_objects)
		pf->cfg.window_objects = PF_WINDOW_DEFAULT;
	if (!pf->cfg.pace_ms)
		pf->cfg.pace_ms = PF_PACE_DEFAULT_MS;
	if (!pf->cfg.part_size)
		pf->cfg.part_size = PF_PART_DEFAULT;
	if (!pf->cfg.fetch_mem)
		pf->cfg.fetch_mem = PF_FETCH_MEM_DEFAULT;
	/* Room for a part a reader waits on and one of read-ahead. */
	if (pf->cfg.fetch_mem < 2 * pf->cfg.part_size)
		pf->cfg.fetch_mem = 2 * pf->cfg.part_size;
	if (!pf->cfg.max_object_mem)
		pf->cfg.max_object_mem = PF_OBJECT_MEM_DEFAULT;
	/* Two whole objects fit at once: a larger one is streamed. */
	if (pf->cfg.max_object_mem > pf->cfg.fetch_mem / 2)
		pf->cfg.max_object_mem = pf->cfg.fetch_mem / 2;
	pf->limit = pf->cfg.max_inflight;
	pthread_mutex_init(&pf->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pf->cv, &ca);
	pthread_cond_init(&pf->wcv, NULL);
	pthread_condattr_destroy(&ca);
	order_streams_init(&pf->hints);
	order_streams_set_alive(&pf->hints, writer_alive, NULL);
	if (pf->cfg.pace_ms != PF_PACE_OFF)
		order_streams_set_pace(&pf->hints,
				       (uint64_t)pf->cfg.pace_ms * 1000000u,
				       PF_PACE_MIN);
	pf->by_id = calloc(cfg->n_ids ? cfg->n_ids : 1, sizeof(*pf->by_id));
	pf->open_count = calloc(cfg->n_ids ? cfg->n_ids : 1,
				sizeof(*pf->open_count));
	pf->opened_by = calloc(cfg->n_ids ? cfg->n_ids : 1, 1);
	pf->nocache = calloc(cfg->n_ids / 8 + 1, 1);
	pf->multi = curl_multi_init();
	if (!pf->by_id || !pf->open_count || !pf->opened_by || !pf->nocache ||
	    !pf->multi) {
		rc = -ENOMEM;
		goto fail;
	}
	/* Keep one connection per transfer alive between requests: to the
	 * tier as well as to the origin when there is one (a fetch moves
	 * from one to the other, so both sides have max_inflight in use). */
	curl_multi_setopt(pf->multi, CURLMOPT_MAXCONNECTS,
			  (long)pf->cfg.max_inflight * (cfg->tier_s3 ? 2 : 1) + 16);
	rc = netloop_init(&pf->net, pf->multi);
	if (rc)
		goto fail;
	net_ok = true;
	if (cfg->tier_s3) {
		struct tier_config tc = {
			.s3 = cfg->tier_s3,
			.origin_bucket = cfg->origin_bucket ? cfg->origin_bucket : "",
			.prefix = cfg->tier_prefix ? cfg->tier_prefix : "",
			.hedge_ms = cfg->tier_hedge_ms,
			.put_mem = cfg->tier_put_mem,
			.mac_key = (const unsigned char *)cfg->tier_key,
			.mac_key_len = cfg->tier_key_len,
		};

		rc = tier_start(&tc, &pf->tier);
		if (rc)
			goto fail;
	}
	rc = -pthread_create(&pf->writer, NULL, pf_writer_main, pf);
	if (rc)
		goto fail;
	pf->writer_started = true;
	rc = -pthread_create(&pf->thread, NULL, engine_main, pf);
	if (rc)
		goto fail;
	cache_set_next_use(pf->cfg.cache, cache_next_use, pf);
	*out = pf;
	return 0;
fail:
	if (pf->writer_started)
		stop_writer(pf);
	tier_stop(pf->tier);
	order_streams_fini(&pf->hints);
	if (pf->multi)
		curl_multi_cleanup(pf->multi);
	if (net_ok)
		netloop_fini(&pf->net);
	free(pf->by_id);
	free(pf->open_count);
	free(pf->opened_by);
	free(pf->nocache);
	pthread_cond_destroy(&pf->wcv);
	pthread_cond_destroy(&pf->cv);
	pthread_mutex_destroy(&pf->mu);
	free(pf);
	return rc;
}

void pf_cancel(struct pf *pf)
{
	if (!pf)
		return;
	pthread_mutex_lock(&pf->mu);
	pf->stop = true;
	pthread_cond_broadcast(&pf->cv);
	pthread_cond_signal(&pf->wcv);
	pthread_mutex_unlock(&pf->mu);
	netloop_wake(&pf->net);
}

void pf_stop(struct pf *pf)
{
	if (!pf)
		return;
	cache_set_next_use(pf->cfg.cache, NULL, NULL);
	pf_cancel(pf);
	pthread_join(pf->thread, NULL);
	/* The network thread completes no more fetches: the writer commits
	 * those done (disk writes, never the network), then ends. */
	stop_writer(pf);
	/* Its PUTs under way end (within the tier client's budget); the
	 * queued ones are dropped. */
	tier_stop(pf->tier);

	/* No reader is left (the session loop has ended): take down what is
	 * still in flight and free every fetch. */
	for (uint32_t i = 0; i < pf->cfg.n_ids; i++) {
		struct pf_fetch *f = pf->by_id[i];

		if (!f)
			continue;
		for (uint32_t k = 0; k < f->n_parts; k++) {
			CURL *easy = f->parts[k].x ? s3_xfer_easy(f->parts[k].x)
						   : NULL;

			if (easy)
				curl_multi_remove_handle(pf->multi, easy);
		}
		fetch_free(f);
	}
	order_streams_fini(&pf->hints);
	free(pf->done);
	free(pf->warm_ids);
	free(pf->open_count);
	free(pf->opened_by);
	free(pf->nocache);
	free(pf->by_id);
	curl_multi_cleanup(pf->multi);
	netloop_fini(&pf->net);
	pthread_cond_destroy(&pf->wcv);
	pthread_cond_destroy(&pf->cv);
	pthread_mutex_destroy(&pf->mu);
	free(pf);
}
