/*
 * prefetch/engine.c - the prefetch engine: one thread driving many GETs
 * through a curl multi handle, fed by hints and by readers' misses.
 *
 * How it works. A *fetch* brings one whole object into memory as one or
 * more ranged GETs (*parts*); when every part has arrived, the engine
 * writes the object into the cache and drops the fetch. Readers that miss
 * the cache join the fetch of their object (never a second GET), or start
 * one at the front of the queue, and wait only for the parts they need.
 * Between misses the engine walks the current hint from the oldest entry
 * no reader has opened yet, up to a window of entries ahead, and fetches
 * what is not cached; a queued hint follows on directly, so epoch N+1
 * starts downloading while epoch N finishes.
 *
 * Readers do not follow the hint exactly (a DataLoader with W workers has
 * W batches open at once): which entries they have consumed, where the
 * window starts, and how soon an object is needed again is the hint
 * position index of prefetch/order.c; the engine feeds it opens and hints
 * and asks it for the next ids to fetch.
 *
 * Locking. One mutex (mu) guards the fetch table, the part queues, the
 * hints and the counters but those of the read path (atomic: a cache hit
 * takes no engine lock). Requests are signed outside it (arm_parts()).
 * Invariant: nobody calls the cache while holding mu, because the cache
 * calls back into pf_next_use() by object id, which takes mu.
 * A fetch leaves the table only after its object is committed to the
 * cache, so a reader that finds no fetch for a missing object and then
 * misses the cache again knows no GET is under way.
 *
 * Memory: an object in flight is held whole in memory, so the bytes in
 * flight are bounded by max_object_mem (objects above it are read through
 * with plain ranged GETs and never cached) and by PF_INFLIGHT_BYTES_MAX.
 */
#include "prefetch/prefetch.h"
#include "prefetch/order.h"
#include "prefetch/s3_xfer.h"
#include "cache/cache.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/retry.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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
/* 8 MiB parts: few enough requests for a large object, and each part
 * still long enough to amortize a round trip. */
#define PF_PART_DEFAULT (8ull << 20)
/* Objects up to 256 MiB are fetched whole (in parallel parts); larger
 * ones are not what a training sample is, and are read through. */
#define PF_OBJECT_MEM_DEFAULT (256ull << 20)
/* Prefetch stops adding objects while this much is in flight; a demand
 * fetch is never held back by it. */
#define PF_INFLIGHT_BYTES_MAX (512ull << 20)

struct pf_fetch;

/* One ranged GET of a fetch. */
struct pf_part {
	struct pf_fetch *f;
	uint64_t off;
	size_t len;
	struct s3_xfer *x;
	int attempts;
	uint64_t first_ns;      /* when the first attempt started */
	uint64_t due_ns;        /* when a retry may start */
	bool done;
	struct pf_part *next;   /* in a queue */
};

struct pf_fetch {
	uint32_t id;
	char *key;
	size_t key_len;
	char *etag;
	uint64_t size;
	char *buf;              /* the whole object */
	struct pf_part *parts;  /* n_parts of them */
	uint32_t n_parts;
	uint32_t parts_done;
	uint32_t parts_ended;   /* done or failed for good */
	int err;                /* first fatal error, 0 if none */
	enum s3_err_kind kind;  /* ... and its kind */
	bool demand;            /* a reader waits: parts go first */
	uint32_t warm_refs;     /* warm-list entries waiting on this fetch */
	int refs;               /* readers holding buf, + 1 for the table */
};

/* A fetch that failed for good, remembered for a moment (see pf_read). */
struct pf_failure {
	uint32_t id;
	int err;
	uint64_t until_ns;
};

/* NOTE(fuse): after a read fails, the kernel's page cache reads the same
 * page again (the readahead attempt, then the read itself): a failure
 * answers every read of its object for one second instead of spending a
 * second retry budget on the same verdict. */
#define PF_FAILS 64
#define PF_FAIL_HOLD_NS 1000000000ull

/* A FIFO of parts. */
struct pf_queue {
	struct pf_part *head;
	struct pf_part *tail;
};

struct pf {
	struct pf_config cfg;
	pthread_t thread;
	CURLM *multi;

	pthread_mutex_t mu;
	pthread_cond_t cv;         /* a part ended; waiters recheck */
	bool stop;
	struct pf_fetch **by_id;   /* n_ids entries: the fetch in flight */
	struct pf_queue demand;    /* parts of fetches readers wait on */
	struct pf_queue ahead;     /* parts of prefetches */
	struct pf_part *delayed;   /* retries waiting for their due time */
	uint32_t running;          /* parts in the multi handle */
	uint64_t inflight_bytes;   /* buffers of fetches in the table */
	double limit;              /* current in-flight limit (AIMD) */
	uint64_t last_cut_ns;      /* last SlowDown cut of the limit */
	struct order_queue hints;  /* current first, then the queue */
	struct pf_fetch **done;    /* fetches the engine must commit */
	size_t n_done, cap_done;
	uint32_t *open_count;      /* n_ids: readers with the object open */
	struct pf_failure fails[PF_FAILS];  /* recent definitive failures */
	unsigned int fail_next;    /* the slot the next failure takes */
	uint32_t *warm_ids;        /* the warm list: fetch all, no window */
	size_t warm_n, warm_cap;
	size_t warm_next;          /* next entry to look at */
	struct pf_stats st;        /* counters under mu, but for: */
	/* The read path's counters, atomic (relaxed) so that a cache hit
	 * takes no engine lock; pf_get_stats() adds them into its snapshot. */
	struct {
		_Atomic uint64_t reads, cache_hits, passthrough, stalls,
		    stall_ns, failed_reads, zero_copy;
	} rd;
};

/* Adds @n to a read-path counter; any thread, with or without mu. */
static inline void rd_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static void queue_push(struct pf_queue *q, struct pf_part *p, bool front)
{
	p->next = NULL;
	if (!q->head) {
		q->head = q->tail = p;
	} else if (front) {
		p->next = q->head;
		q->head = p;
	} else {
		q->tail->next = p;
		q->tail = p;
	}
}

static struct pf_part *queue_pop(struct pf_queue *q)
{
	struct pf_part *p = q->head;

	if (p) {
		q->head = p->next;
		if (!q->head)
			q->tail = NULL;
		p->next = NULL;
	}
	return p;
}

/* Puts all of @from, in its order, in front of @q. */
static void queue_prepend(struct pf_queue *q, struct pf_queue *from)
{
	if (!from->head)
		return;
	from->tail->next = q->head;
	q->head = from->head;
	if (!q->tail)
		q->tail = from->tail;
	from->head = from->tail = NULL;
}

/* Moves every part of @f from @q to the back of @to, keeping their order. */
static void queue_take_fetch(struct pf_queue *q, struct pf_fetch *f,
			     struct pf_queue *to)
{
	struct pf_part **pp = &q->head, *last = NULL;

	while (*pp) {
		struct pf_part *p = *pp;

		if (p->f == f) {
			*pp = p->next;
			queue_push(to, p, false);
		} else {
			last = p;
			pp = &p->next;
		}
	}
	q->tail = last;
}

/* ---- hints ---------------------------------------------------------------- */

void pf_note_open(struct pf *pf, uint32_t id)
{
	if (id >= pf->cfg.n_ids)
		return;
	pthread_mutex_lock(&pf->mu);
	pf->open_count[id]++;
	order_queue_note_open(&pf->hints, id);
	pthread_mutex_unlock(&pf->mu);
	curl_multi_wakeup(pf->multi);
}

void pf_note_close(struct pf *pf, uint32_t id)
{
	if (id >= pf->cfg.n_ids)
		return;
	pthread_mutex_lock(&pf->mu);
	if (pf->open_count[id])
		pf->open_count[id]--;
	pthread_mutex_unlock(&pf->mu);
}

int pf_hint(struct pf *pf, const uint32_t *ids, size_t n, int64_t epoch,
	    bool replace)
{
	struct order *h = order_create(ids, n, epoch, pf->cfg.n_ids);
	struct order *old;

	if (!h)
		return -ENOMEM;
	pthread_mutex_lock(&pf->mu);
	pf->st.hints_total++;
	if (!n && !replace) {
		/* Nothing to follow: queueing it would only stall the next. */
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return 0;
	}
	old = order_queue_add(&pf->hints, h, replace);
	pthread_mutex_unlock(&pf->mu);
	order_destroy(old);
	curl_multi_wakeup(pf->multi);
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
	best = pf->open_count[id] ? 0 : order_queue_next_use(&pf->hints, id);
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

static void fetch_free(struct pf_fetch *f)
{
	for (uint32_t i = 0; i < f->n_parts; i++)
		s3_xfer_destroy(f->parts[i].x);
	free(f->parts);
	free(f->buf);
	free(f->key);
	free(f->etag);
	free(f);
}

/* Drops a reference; frees the fetch with the last one. mu held. */
static void fetch_put(struct pf *pf, struct pf_fetch *f)
{
	if (--f->refs == 0)
		fetch_free(f);
}

/*
 * Creates the fetch of @o (id @id) with its parts queued. mu held; the
 * fetch enters the table with one reference for it.
 */
static struct pf_fetch *fetch_create(struct pf *pf, uint32_t id,
				     const struct pf_object *o, bool demand)
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
	f->buf = malloc(o->size ? o->size : 1);
	f->parts = calloc(f->n_parts ? f->n_parts : 1, sizeof(*f->parts));
	if (!f->key || !f->etag || !f->buf || !f->parts) {
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
		if (s3_xfer_create(pf->cfg.s3, f->key, f->key_len, f->etag, p->off,
				   p->len, f->buf + p->off, p, &p->x)) {
			fetch_free(f);
			return NULL;
		}
		if (f->n_parts == 1)
			s3_xfer_whole_object(p->x);
	}
	f->demand = demand;
	f->refs = 1;
	pf->by_id[id] = f;
	pf->inflight_bytes += o->size;
	if (demand) {
		/* At the front, first part first: the reader waits. */
		for (uint32_t i = f->n_parts; i-- > 0;)
			queue_push(&pf->demand, &f->parts[i], true);
	} else {
		/* Behind the others: prefetches keep the hint's order. */
		for (uint32_t i = 0; i < f->n_parts; i++)
			queue_push(&pf->ahead, &f->parts[i], false);
	}
	return f;
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

/* A part's fetch failed for good: wake its readers. mu held. */
static void part_fail(struct pf *pf, struct pf_part *p, int err,
		      enum s3_err_kind kind, const struct s3_status *st)
{
	struct pf_fetch *f = p->f;
	char why[512];

	if (!f->err) {
		f->err = err;
		f->kind = kind;
		s3_status_describe(st, err, why, sizeof(why));
		log_error("GET '%s' failed after %d attempt(s): %s", f->key,
			  p->attempts, why);
	}
	p->done = false;
	f->parts_ended++;
}

/* Handles the end of one attempt of @p. mu held. */
static void part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
		       bool retryable, const struct s3_status *st)
{
	struct pf_fetch *f = p->f;

	pf->running--;
	if (got == (ssize_t)p->len) {
		p->done = true;
		f->parts_done++;
		f->parts_ended++;
		pf->st.bytes += (uint64_t)got;
		if (pf->limit < pf->cfg.max_inflight)
			pf->limit += 1.0 / pf->limit;
	} else {
		/* A body shorter than asked for is a truncated transfer. */
		int err = got >= 0 ? -ECONNRESET : (int)got;
		enum s3_err_kind kind = got >= 0 ? S3_ERR_NETWORK : st->kind;
		const struct retry_policy *rp = s3_client_retry(pf->cfg.s3);
		uint64_t now = mono_ns();

		count_error(pf, kind);
		if (kind == S3_ERR_SLOWDOWN)
			cut_limit(pf);
		if ((got >= 0 || retryable) &&
		    !retry_give_up(rp, p->attempts,
				   (now - p->first_ns) / 1000000u)) {
			unsigned int seed = (unsigned int)now;

			p->due_ns = now + 1000000ull *
					      retry_delay_ms(rp, p->attempts, &seed);
			p->next = pf->delayed;
			pf->delayed = p;
			pf->st.retries++;
			return;
		}
		part_fail(pf, p, err, kind, st);
	}
	if (f->parts_ended == f->n_parts) {
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
		} else {
			/* No room to remember it: leave it uncached. */
			pf->st.warm_failed += f->warm_refs;
			pf->by_id[f->id] = NULL;
			pf->inflight_bytes -= f->size;
			fetch_put(pf, f);
		}
	}
	pthread_cond_broadcast(&pf->cv);
}

/*
 * Writes completed fetches into the cache and takes them out of the table.
 * Called by the engine thread without mu (the cache calls pf_next_use()).
 */
static void commit_done(struct pf *pf)
{
	for (;;) {
		struct pf_fetch *f;
		struct cache_put *put;
		bool stale, ok = false;
		uint64_t next;

		pthread_mutex_lock(&pf->mu);
		if (!pf->n_done) {
			pthread_mutex_unlock(&pf->mu);
			return;
		}
		f = pf->done[--pf->n_done];
		pthread_mutex_unlock(&pf->mu);

		stale = f->kind == S3_ERR_STALE;
		if (!f->err) {
			next = pf_next_use(pf, f->id);
			int rc = cache_put_begin(pf->cfg.cache, f->key, f->key_len,
						 f->etag, f->size, next, f->id,
						 &put);
			if (!rc) {
				rc = cache_put_write(put, 0, f->buf, f->size);
				if (rc)
					cache_put_abort(put);
				else
					rc = cache_put_commit(put);
			}
			ok = !rc || rc == -EEXIST;
		}
		if (stale)
			cache_invalidate(pf->cfg.cache, f->key, f->key_len, NULL);

		pthread_mutex_lock(&pf->mu);
		if (f->err && f->demand) {
			/* Only a verdict a reader waited for; a prefetch that
			 * failed leaves the next reader a full budget. */
			struct pf_failure *fl = &pf->fails[pf->fail_next++ % PF_FAILS];

			*fl = (struct pf_failure){ f->id, f->err,
						   mono_ns() + PF_FAIL_HOLD_NS };
		}
		if (!f->err && !ok)
			pf->st.cache_put_fail++;
		if (ok)
			pf->st.warm_done += f->warm_refs;
		else
			pf->st.warm_failed += f->warm_refs;
		pf->by_id[f->id] = NULL;
		pf->inflight_bytes -= f->size;
		fetch_put(pf, f);
		pthread_mutex_unlock(&pf->mu);
	}
}

/* Ids the prefetcher should look at next; filled under mu. */
struct pf_candidates {
	uint32_t ids[64];
	bool warm[64];  /* from the warm list, not a hint */
	size_t n;
};

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
	size_t got = order_queue_pick(&pf->hints, pf->cfg.window_objects,
				      in_flight, pf, c->ids + c->n, room - c->n);

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

		if (f) {
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

/* Starts fetches for hinted, then warm-listed, objects that are neither
 * cached nor in flight. Called without mu: it looks objects up in the
 * cache. */
static void schedule_prefetch(struct pf *pf)
{
	struct pf_candidates c;
	char key[4096];

	for (int round = 0; round < 64; round++) {
		size_t room;

		pthread_mutex_lock(&pf->mu);
		room = pf->ahead.head || pf->inflight_bytes >= PF_INFLIGHT_BYTES_MAX
			       ? 0 : (size_t)pf->limit;
		if (room > 64)
			room = 64;
		c.n = 0;
		pick_hinted(pf, &c, room);
		pick_warm(pf, &c, room);
		pthread_mutex_unlock(&pf->mu);
		if (!c.n)
			return;

		for (size_t i = 0; i < c.n; i++) {
			struct pf_object o;
			struct pf_fetch *f;
			int skip = 0; /* 1: nothing to fetch, 2: cannot be cached */

			if (pf->cfg.describe(pf->cfg.arg, c.ids[i], key, sizeof(key), &o))
				skip = 2;
			else if (o.size > pf->cfg.max_object_mem)
				skip = 2;
			else if (o.size == 0 ||
				 cache_contains(pf->cfg.cache, o.key, o.key_len, o.etag,
						 o.size))
				skip = 1;
			pthread_mutex_lock(&pf->mu);
			if (skip && c.warm[i]) {
				if (skip == 1)
					pf->st.warm_done++;
				else
					pf->st.warm_failed++;
			} else if (!skip) {
				f = pf->by_id[c.ids[i]];
				if (!f && (f = fetch_create(pf, c.ids[i], &o, false)))
					pf->st.prefetched++;
				if (!f && c.warm[i])
					pf->st.warm_failed++;
				else if (f && c.warm[i])
					f->warm_refs++;
			}
			pthread_mutex_unlock(&pf->mu);
		}
	}
}

int pf_warm(struct pf *pf, const uint32_t *ids, size_t n)
{
	int rc = 0;

	pthread_mutex_lock(&pf->mu);
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
	curl_multi_wakeup(pf->multi);
	return rc;
}

/*
 * Takes queued parts up to the limit, counted as running from now, and
 * returns them in order, chained by next, for arm_parts(). mu held.
 */
static struct pf_part *take_parts(struct pf *pf)
{
	struct pf_part *list = NULL, **tail = &list;
	uint64_t now = mono_ns();
	struct pf_part **pp = &pf->delayed;

	/* Retries whose time has come go first: someone waited longest. */
	while (*pp) {
		struct pf_part *p = *pp;

		if (p->due_ns <= now) {
			*pp = p->next;
			queue_push(p->f->demand ? &pf->demand : &pf->ahead, p, true);
		} else {
			pp = &p->next;
		}
	}
	while (pf->running < (uint32_t)pf->limit || pf->demand.head) {
		struct pf_part *p = queue_pop(&pf->demand);

		if (!p) {
			if (pf->running >= (uint32_t)pf->limit)
				break;
			p = queue_pop(&pf->ahead);
		}
		if (!p)
			break;
		if (!p->attempts++)
			p->first_ns = now;
		pf->st.requests++;
		pf->running++;
		*tail = p;
		tail = &p->next;
	}
	return list;
}

/*
 * Signs the parts taken and hands them to curl. Engine thread, without
 * mu: signing (an HMAC chain per request) is the costliest step of a
 * start, and readers and hints must not wait behind it. A part taken is in
 * no queue, so nobody else touches it meanwhile.
 */
static void arm_parts(struct pf *pf, struct pf_part *list)
{
	while (list) {
		struct pf_part *p = list;
		CURL *easy;

		list = p->next;
		p->next = NULL;
		/* A retry keeps what the broken attempt received. */
		if (s3_xfer_arm(p->x, p->attempts > 1, &easy) ||
		    curl_multi_add_handle(pf->multi, easy) != CURLM_OK) {
			struct s3_status st = { .message = "cannot start a transfer" };

			pthread_mutex_lock(&pf->mu);
			part_ended(pf, p, -ENOMEM, false, &st);
			pthread_mutex_unlock(&pf->mu);
		}
	}
}

/* Milliseconds until the earliest delayed retry, capped. mu held. */
static int poll_timeout_ms(struct pf *pf)
{
	uint64_t now = mono_ns(), best = 1000;

	for (struct pf_part *p = pf->delayed; p; p = p->next) {
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

	for (;;) {
		struct pf_part *taken;
		CURLMsg *msg;
		int still, left, timeout;
		bool ended;

		commit_done(pf);
		schedule_prefetch(pf);

		pthread_mutex_lock(&pf->mu);
		if (pf->stop) {
			/* pf_stop() takes the transfers still running down. */
			pthread_mutex_unlock(&pf->mu);
			break;
		}
		taken = take_parts(pf);
		timeout = poll_timeout_ms(pf);
		pthread_mutex_unlock(&pf->mu);
		arm_parts(pf, taken);

		curl_multi_perform(pf->multi, &still);
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
			pthread_mutex_lock(&pf->mu);
			part_ended(pf, s3_xfer_user(x), got, retryable, &st);
			pthread_mutex_unlock(&pf->mu);
			ended = true;
		}
		/* Something ended: commit it and start the next at once rather
		 * than after the poll's timeout. */
		curl_multi_poll(pf->multi, NULL, 0, ended ? 0 : timeout, NULL);
	}
	return NULL;
}

/* ---- readers ---------------------------------------------------------------- */

/* Whether every part of @f covering [off, off + len) has arrived. */
static bool range_ready(const struct pf_fetch *f, uint64_t off, size_t len,
			uint64_t part)
{
	for (uint64_t i = off / part; i * part < off + len && i < f->n_parts; i++)
		if (!f->parts[i].done)
			return false;
	return true;
}

/* Objects too large to hold: plain ranged GETs, as before the engine. */
static ssize_t read_through(struct pf *pf, const struct pf_object *o, void *buf,
			    size_t len, uint64_t off)
{
	struct s3_status st;
	ssize_t got = s3_get_range(pf->cfg.s3, o->key, o->key_len, o->etag, off,
				   len, buf, &st);
	char why[512];

	if (got == (ssize_t)len)
		return got;
	if (got >= 0) {
		log_error("read '%.*s': the server sent %zd of %zu bytes",
			  (int)o->key_len, o->key, got, len);
		return -EIO;
	}
	s3_status_describe(&st, (int)got, why, sizeof(why));
	log_error("read '%.*s' at offset %llu: %s", (int)o->key_len, o->key,
		  (unsigned long long)off, why);
	return got;
}

ssize_t pf_read(struct pf *pf, uint32_t id, void *buf, size_t len, uint64_t off)
{
	struct pf_object o;
	struct cache_obj co;
	struct pf_fetch *f;
	char key[4096];
	uint64_t t0 = 0;
	ssize_t n;

	if (id >= pf->cfg.n_ids || pf->cfg.describe(pf->cfg.arg, id, key, sizeof(key), &o))
		return -ENOENT;
	if (off >= o.size)
		return 0;
	if (len > o.size - off)
		len = (size_t)(o.size - off);

	rd_add(&pf->rd.reads, 1);

	if (o.size > pf->cfg.max_object_mem) {
		t0 = mono_ns();
		n = read_through(pf, &o, buf, len, off);
		rd_add(&pf->rd.passthrough, 1);
		rd_add(&pf->rd.stalls, 1);
		rd_add(&pf->rd.stall_ns, mono_ns() - t0);
		if (n < 0)
			rd_add(&pf->rd.failed_reads, 1);
		return n;
	}

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
		if (f || tries > 0)
			break;
		/* No fetch: either none ran, or it committed since our miss
		 * (fetches leave the table only after committing). Look again. */
		pthread_mutex_unlock(&pf->mu);
	}

	/* mu held. */
	if (!f) {
		uint64_t now = mono_ns();

		for (int i = 0; i < PF_FAILS; i++) {
			if (pf->fails[i].id == id && pf->fails[i].until_ns > now) {
				n = pf->fails[i].err;
				rd_add(&pf->rd.failed_reads, 1);
				pthread_mutex_unlock(&pf->mu);
				return n;
			}
		}
		f = fetch_create(pf, id, &o, true);
		if (!f) {
			rd_add(&pf->rd.failed_reads, 1);
			pthread_mutex_unlock(&pf->mu);
			return -ENOMEM;
		}
		pf->st.demand_fetches++;
	} else {
		pf->st.prefetch_joins++;
		if (!f->demand) {
			/* A reader waits for it now: its parts jump the queue. */
			struct pf_queue mine = { 0 };

			f->demand = true;
			queue_take_fetch(&pf->ahead, f, &mine);
			queue_prepend(&pf->demand, &mine);
		}
	}
	f->refs++;
	if (!range_ready(f, off, len, pf->cfg.part_size) && !f->err) {
		t0 = mono_ns();
		curl_multi_wakeup(pf->multi);
		while (!range_ready(f, off, len, pf->cfg.part_size) && !f->err)
			pthread_cond_wait(&pf->cv, &pf->mu);
		rd_add(&pf->rd.stalls, 1);
		rd_add(&pf->rd.stall_ns, mono_ns() - t0);
	}
	if (f->err && !range_ready(f, off, len, pf->cfg.part_size)) {
		n = f->err;
		rd_add(&pf->rd.failed_reads, 1);
		fetch_put(pf, f);
		pthread_mutex_unlock(&pf->mu);
		return n;
	}
	pthread_mutex_unlock(&pf->mu);

	/* The parts we need are done and never written again: copy freely. */
	memcpy(buf, f->buf + off, len);

	pthread_mutex_lock(&pf->mu);
	fetch_put(pf, f);
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

size_t pf_hint_ahead(struct pf *pf, size_t skip, uint32_t *ids, size_t max)
{
	size_t n;

	pthread_mutex_lock(&pf->mu);
	n = pf->hints.head ? order_ahead(pf->hints.head, pf->cfg.window_objects,
					 skip, ids, max)
			   : 0;
	pthread_mutex_unlock(&pf->mu);
	return n;
}

void pf_get_stats(struct pf *pf, struct pf_stats *st)
{
	struct order_queue_stats os;

	pthread_mutex_lock(&pf->mu);
	*st = pf->st;
	st->inflight = pf->running;
	st->inflight_limit = (uint32_t)pf->limit;
	st->reads = atomic_load(&pf->rd.reads);
	st->cache_hits = atomic_load(&pf->rd.cache_hits);
	st->passthrough = atomic_load(&pf->rd.passthrough);
	st->stalls = atomic_load(&pf->rd.stalls);
	st->stall_ns = atomic_load(&pf->rd.stall_ns);
	st->failed_reads = atomic_load(&pf->rd.failed_reads);
	st->reads_zero_copy = atomic_load(&pf->rd.zero_copy);
	order_queue_stats(&pf->hints, &os);
	st->hint_pos = os.pos;
	st->hint_len = os.len;
	st->hint_epoch = os.epoch;
	st->hints_queued = os.queued;
	pthread_mutex_unlock(&pf->mu);
}

/* ---- lifecycle ---------------------------------------------------------------- */

int pf_start(const struct pf_config *cfg, struct pf **out)
{
	struct pf *pf = calloc(1, sizeof(*pf));
	int rc;

	if (!pf)
		return -ENOMEM;
	pf->cfg = *cfg;
	if (!pf->cfg.max_inflight)
		pf->cfg.max_inflight = PF_INFLIGHT_DEFAULT;
	if (!pf->cfg.window_objects)
		pf->cfg.window_objects = PF_WINDOW_DEFAULT;
	if (!pf->cfg.part_size)
		pf->cfg.part_size = PF_PART_DEFAULT;
	if (!pf->cfg.max_object_mem)
		pf->cfg.max_object_mem = PF_OBJECT_MEM_DEFAULT;
	pf->limit = pf->cfg.max_inflight;
	pthread_mutex_init(&pf->mu, NULL);
	pthread_cond_init(&pf->cv, NULL);
	order_queue_init(&pf->hints);
	pf->by_id = calloc(cfg->n_ids ? cfg->n_ids : 1, sizeof(*pf->by_id));
	pf->open_count = calloc(cfg->n_ids ? cfg->n_ids : 1,
				sizeof(*pf->open_count));
	pf->multi = curl_multi_init();
	if (!pf->by_id || !pf->open_count || !pf->multi) {
		rc = -ENOMEM;
		goto fail;
	}
	/* Keep one connection per transfer alive between requests. */
	curl_multi_setopt(pf->multi, CURLMOPT_MAXCONNECTS,
			  (long)pf->cfg.max_inflight + 16);
	rc = -pthread_create(&pf->thread, NULL, engine_main, pf);
	if (rc)
		goto fail;
	cache_set_next_use(pf->cfg.cache, cache_next_use, pf);
	*out = pf;
	return 0;
fail:
	if (pf->multi)
		curl_multi_cleanup(pf->multi);
	free(pf->by_id);
	free(pf->open_count);
	pthread_cond_destroy(&pf->cv);
	pthread_mutex_destroy(&pf->mu);
	free(pf);
	return rc;
}

void pf_stop(struct pf *pf)
{
	if (!pf)
		return;
	cache_set_next_use(pf->cfg.cache, NULL, NULL);
	pthread_mutex_lock(&pf->mu);
	pf->stop = true;
	pthread_mutex_unlock(&pf->mu);
	curl_multi_wakeup(pf->multi);
	pthread_join(pf->thread, NULL);

	/* No reader is left (the session loop has ended): take down what is
	 * still in flight and free every fetch. */
	for (uint32_t i = 0; i < pf->cfg.n_ids; i++) {
		struct pf_fetch *f = pf->by_id[i];

		if (!f)
			continue;
		for (uint32_t k = 0; k < f->n_parts; k++) {
			CURL *easy = s3_xfer_easy(f->parts[k].x);

			if (easy)
				curl_multi_remove_handle(pf->multi, easy);
		}
		fetch_free(f);
	}
	order_queue_fini(&pf->hints);
	free(pf->done);
	free(pf->warm_ids);
	free(pf->open_count);
	free(pf->by_id);
	curl_multi_cleanup(pf->multi);
	pthread_cond_destroy(&pf->cv);
	pthread_mutex_destroy(&pf->mu);
	free(pf);
}
