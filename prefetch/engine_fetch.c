/*
 * prefetch/engine_fetch.c - the fetch table: creating fetches, the memory
 * of their buffers (fetch_mem), streams' release of parts behind their
 * readers, and how a fetch ends
 * (complete, failed).
 *
 * Invariant: pf->mem is the sum of what live fetches reserved (a whole
 * fetch its object's size, a read-through each started part), and a buffer is
 * freed only with no reader pinning it and no transfer writing into it.
 * mu held throughout (engine.c's top comment).
 */
#include "prefetch/prefetch.h"
#include "prefetch/engine_internal.h"
#include "prefetch/order.h"
#include "cache/cache.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/retry.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- fetches --------------------------------------------------------------
 */

static void part_release_buf(struct pf_part *p)
{
	pf_get_release(&p->get);
	free(p->buf);
	p->buf = NULL;
}

void pf_fetch_free(struct pf_fetch *f)
{
	for (uint32_t i = 0; i < f->n_parts; i++)
		part_release_buf(&f->parts[i]);
	free(f->parts);
	free(f->key);
	free(f->etag);
	if (f->cv_ready)
		pthread_cond_destroy(&f->cv);
	free(f);
}

/* See engine_internal.h. */
void pf_fetch_wake(struct pf_fetch *f)
{
	if (f->waiters)
		pthread_cond_broadcast(&f->cv);
}

/* Drops a reference; frees the fetch with the last one. mu held. */
static void fetch_put(struct pf *pf, struct pf_fetch *f)
{
	(void)pf;
	if (--f->refs == 0)
		pf_fetch_free(f);
}

void pf_mem_add(struct pf *pf, struct pf_fetch *f, uint64_t n)
{
	pf->mem += n;
	f->mem += n;
	if (pf->mem > pf->mem_peak)
		pf->mem_peak = pf->mem;
}

/*
 * Gives @n bytes of @f's memory back. mu held; any thread. Whoever waits
 * for room hears of it: a reader (cv), and the network threads, whose
 * prefetch may have stopped at the bound with nothing in flight to wake
 * them (the cache writer gives a committed fetch's memory back off those
 * threads: without the wake-up the next prefetch waited out a whole poll).
 */
void pf_mem_sub(struct pf *pf, struct pf_fetch *f, uint64_t n)
{
	if (!n)
		return;
	pf->mem -= n;
	f->mem -= n;
	pf->room_gen++;
	/* Only readers waiting for room care: one waiting for parts is woken
	 * by its own fetch (pf_fetch_wake()), not by every commit. */
	if (pf->room_waiters)
		pthread_cond_broadcast(&pf->cv);
	pf_wake(pf);
}

/* See engine_internal.h. */
void pf_fetch_leave(struct pf *pf, struct pf_fetch *f)
{
	if (f->read_through) {
		*(f->rt_prev ? &f->rt_prev->rt_next : &pf->read_throughs) =
		    f->rt_next;
		if (f->rt_next)
			f->rt_next->rt_prev = f->rt_prev;
	}
	for (uint32_t i = 0; i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		pf_queue_remove(p);
		if (p->state == PART_QUEUED || p->state == PART_DELAYED)
			p->state = PART_IDLE;
	}
	pf->by_id[f->id] = NULL;
	f->in_table = false;
	pf_mem_sub(pf, f, f->mem);
	fetch_put(pf, f);
}

/*
 * Creates the fetch of @o (id @id), in the table with one reference for
 * it. A whole fetch reserves the object's memory and queues every part; a
 * read-through queues nothing (readers ask for parts). mu held.
 */
/*
 * A fetch of @size bytes of @o from @off on (slot @id), in @part bytes a
 * part, with its key and ETag copied; in no table yet.
 */
static struct pf_fetch *fetch_alloc(uint32_t id, const struct pf_object *o,
				    uint64_t off, uint64_t size, uint64_t part)
{
	struct pf_fetch *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->id = id;
	f->size = size;
	f->n_parts = (uint32_t)((size + part - 1) / part);
	atomic_init(&f->wait_ns, PF_GET_NO_WAIT);
	f->key = malloc(o->key_len + 1);
	f->etag = strdup(o->etag);
	f->parts = calloc(f->n_parts ? f->n_parts : 1, sizeof(*f->parts));
	if (!f->key || !f->etag || !f->parts) {
		pf_fetch_free(f);
		return NULL;
	}
	memcpy(f->key, o->key, o->key_len);
	f->key[o->key_len] = '\0';
	f->key_len = o->key_len;
	f->name_len = o->name_len ? o->name_len : o->key_len;
	f->base = o->base + off;
	for (uint32_t i = 0; i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		p->f = f;
		p->off = (uint64_t)i * part;
		p->len = (size_t)(size - p->off < part ? size - p->off : part);
	}
	return f;
}

struct pf_fetch *pf_fetch_create(struct pf *pf, uint32_t id,
				 const struct pf_object *o, bool demand,
				 bool read_through)
{
	struct pf_fetch *f = fetch_alloc(id, o, 0, o->size, pf->cfg.part_size);

	if (!f)
		return NULL;
	f->read_through = read_through;
	f->demand = demand;
	f->refs = 1;
	f->in_table = true;
	pf->by_id[id] = f;
	if (read_through) {
		f->rt_next = pf->read_throughs;
		if (f->rt_next)
			f->rt_next->rt_prev = f;
		pf->read_throughs = f;
		return f;
	}
	pf_mem_add(pf, f, o->size);
	/* Whether it reads the tier is asked again when its GET starts
	 * (the tier source: the breaker may open or close meanwhile). A
	 * block is not an object of the tier's (it names whole ones). */
	f->tier = pf->tier && f->n_parts == 1 && f->name_len == f->key_len &&
		  tier_wants(pf->tier, f->key, f->key_len, f->etag);
	atomic_store(&f->wait_ns, demand ? pf_now(pf) : PF_GET_NO_WAIT);
	/* Readers move the parts they need to the front (pf_fetch_ask); the
	 * rest keep the object's order, behind other readers' parts. */
	for (uint32_t i = 0; i < f->n_parts; i++) {
		f->parts[i].state = PART_QUEUED;
		pf_queue_push(demand ? &pf->demand : &pf->ahead, &f->parts[i],
			      false);
	}
	return f;
}

/*
 * The fetch of [off, off + len) of block @slot (@o) for one reader that
 * jumped there: a read-through of one part, never in the table (another
 * reader of the block finds no fetch of it), in pf->ranges so that
 * pf_cancel() wakes its reader and pf_stop() frees it; its reference is
 * the reader's. Its part runs on whichever network thread takes it from
 * the demand queue (p->net), as any part. mu held.
 */
struct pf_fetch *pf_range_create(struct pf *pf, uint32_t slot,
				 const struct pf_object *o, uint64_t off,
				 size_t len)
{
	struct pf_fetch *f = fetch_alloc(slot, o, off, len, len);

	if (!f)
		return NULL;
	f->read_through = f->range = f->demand = true;
	f->refs = 1;
	f->rt_next = pf->ranges;
	if (f->rt_next)
		f->rt_next->rt_prev = f;
	pf->ranges = f;
	return f;
}

/* Frees range fetch @f once neither its reader nor a transfer holds it.
 * mu held. */
static void range_maybe_free(struct pf *pf, struct pf_fetch *f)
{
	if (f->refs || f->running)
		return;
	pf_queue_remove(&f->parts[0]);
	*(f->rt_prev ? &f->rt_prev->rt_next : &pf->ranges) = f->rt_next;
	if (f->rt_next)
		f->rt_next->rt_prev = f->rt_prev;
	pf_mem_sub(pf, f, f->mem);
	pf_fetch_free(f);
}

/*
 * Drops a read-through nobody uses any more (no reader, no transfer), or one
 * that failed, once idle. mu held.
 */
void pf_read_through_maybe_drop(struct pf *pf, struct pf_fetch *f)
{
	if (f->range) {
		range_maybe_free(pf, f);
		return;
	}
	if (!f->read_through || !f->in_table || f->refs > 1 || f->running)
		return;
	if (pf->open_count[f->id] && !f->err)
		return;
	pf_fetch_leave(pf, f);
}

/* Frees the buffer of done part @p of a read-through. mu held; not pinned. */
void pf_read_through_release(struct pf *pf, struct pf_part *p)
{
	pf_mem_sub(pf, p->f, p->len);
	part_release_buf(p);
	p->state = PART_IDLE;
	p->attempts = 0;
}

/*
 * Releases unpinned done parts of streams until @need bytes more fit in
 * fetch_mem: first those behind their readers, then any. mu held.
 */
void pf_read_through_reclaim(struct pf *pf, uint64_t need)
{
	for (int pass = 0; pass < 2; pass++) {
		for (struct pf_fetch *f = pf->read_throughs; f;
		     f = f->rt_next) {
			for (uint32_t i = 0; i < f->n_parts; i++) {
				struct pf_part *p = &f->parts[i];

				if (pf->mem + need <= pf->cfg.fetch_mem)
					return;
				if (p->state == PART_DONE && !p->pins &&
				    (pass || i < f->pos))
					pf_read_through_release(pf, p);
			}
		}
	}
}

/* ---- the engine thread ----------------------------------------------------
 */

void pf_count_error(struct pf *pf, enum s3_err_kind kind)
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

	*fl = (struct pf_failure){id, err, pf_now(pf) + PF_FAIL_HOLD_NS};
}

/* Queues the fetch of a whole object for the commit. mu held. */
void pf_whole_complete(struct pf *pf, struct pf_fetch *f)
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
		/* No room to remember it: leave it uncached. */
		pf->st.warm_failed += f->warm_refs;
		pf_fetch_leave(pf, f);
	}
}

/*
 * Fetch @f failed for good with @err: parts not yet running will not run.
 * The first failure is logged (once per fetch). mu held.
 */
void pf_fetch_fail(struct pf *pf, struct pf_fetch *f, int err,
		   enum s3_err_kind kind, int attempts,
		   const struct s3_status *st)
{
	char why[512], what[64] = "";

	if (!f->err) {
		f->err = err;
		f->kind = kind;
		s3_status_describe(st, err, why, sizeof(why));
		if (f->name_len != f->key_len)
			snprintf(what, sizeof(what), " (block at byte %llu)",
				 (unsigned long long)f->base);
		log_error("GET '%.*s'%s failed after %d attempt(s): %s",
			  (int)f->name_len, f->key, what, attempts, why);
		if (f->demand && f->read_through)
			pf_note_failure(pf, f->id, err);
	}
	for (uint32_t i = 0; i < f->n_parts; i++) {
		struct pf_part *p = &f->parts[i];

		if (p->state == PART_QUEUED || p->state == PART_DELAYED ||
		    (f->read_through && p->state == PART_IDLE)) {
			pf_queue_remove(p);
			p->state = PART_FAILED;
			f->parts_failed++;
		}
	}
}

/* The mount's one retry budget (common/retry.h): the origin source's. */
const struct retry_policy *pf_retry(const struct pf *pf)
{
	return pf_source_retry(pf->src);
}
