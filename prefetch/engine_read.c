/*
 * prefetch/engine_read.c - the read path: pf_read() and pf_read_ref() on
 * a cache miss join or start a fetch, ask for the parts under the read
 * (first in the demand queue), and wait for them with a deadline.
 *
 * Invariant: a reader pins the parts it copies from, so their buffers
 * outlive its copy; it waits at most twice the retry budget plus
 * PF_WAIT_SLACK_MS, and pf_cancel() ends every wait.
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

/* ---- readers ----------------------------------------------------------------
 */

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
 * other parts follow behind other readers' parts, a read-through gets its
 * read-ahead and releases what lies behind. mu held.
 */
void pf_fetch_ask(struct pf *pf, struct pf_fetch *f, uint32_t a, uint32_t b)
{
	if (!f->demand)
		atomic_store(&f->wait_ns, pf_now(pf));
	if (!f->demand && !f->read_through) {
		/* A reader waits for it now: its parts leave the prefetch
		 * queue for the demand queue, in order. */
		for (uint32_t i = 0; i < f->n_parts; i++) {
			struct pf_part *p = &f->parts[i];

			if (p->q == &pf->ahead) {
				pf_queue_remove(p);
				pf_queue_push(&pf->demand, p, false);
			}
		}
	}
	f->demand = true;
	f->pos = a;
	for (uint32_t i = b + 1; i-- > a;) {
		struct pf_part *p = &f->parts[i];

		p->pins++;
		if (p->state == PART_QUEUED || p->state == PART_IDLE) {
			pf_queue_remove(p);
			p->state = PART_QUEUED;
			pf_queue_push(&pf->demand, p, true);
		}
	}
	if (!f->read_through)
		return;
	for (uint32_t i = b + 1; i <= b + PF_STREAM_AHEAD && i < f->n_parts;
	     i++) {
		struct pf_part *p = &f->parts[i];

		if (p->state == PART_IDLE) {
			p->state = PART_QUEUED;
			pf_queue_push(&pf->ahead, p, false);
		}
	}
	for (uint32_t i = 0; i + 1 < a; i++)
		if (f->parts[i].state == PART_DONE && !f->parts[i].pins)
			pf_read_through_release(pf, &f->parts[i]);
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
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
			      .tv_nsec = (long)(deadline_ns % 1000000000u)};

	if (mono_ns() >= deadline_ns)
		return false;
	pthread_cond_timedwait(&pf->cv, &pf->mu, &ts);
	rd_add(&pf->rd.wakeups, 1);
	return true;
}

/*
 * Until a part of @f ends, the stop, or @deadline_ns passes (false then).
 * mu held. Each fetch has a condition of its own: with one for all, every
 * part's end woke every waiting reader, and 8 readers waiting on 8
 * objects made 8 wake-ups (and as many sleeps) per object where one is
 * needed (cold_ir.py: 30.6 context switches per cold object, 21.7 futex
 * calls).
 */
static bool wait_parts(struct pf *pf, struct pf_fetch *f, uint64_t deadline_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
			      .tv_nsec = (long)(deadline_ns % 1000000000u)};

	if (mono_ns() >= deadline_ns)
		return false;
	if (!f->cv_ready) {
		pthread_condattr_t ca;

		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&f->cv, &ca);
		pthread_condattr_destroy(&ca);
		f->cv_ready = true;
	}
	f->waiters++;
	pthread_cond_timedwait(&f->cv, &pf->mu, &ts);
	f->waiters--;
	rd_add(&pf->rd.wakeups, 1);
	return true;
}

/* A reader is done with @f. mu held. */
static void reader_put(struct pf *pf, struct pf_fetch *f)
{
	if (f->range) {
		/* Its transfer, if one runs, frees it at its end. */
		f->refs--;
		pf_read_through_maybe_drop(pf, f);
		return;
	}
	if (--f->refs == 0) {
		pf_fetch_free(f);
		return;
	}
	pf_read_through_maybe_drop(pf, f);
	/* Unpinned parts may make room for others waiting. */
	if (pf->room_waiters)
		pthread_cond_broadcast(&pf->cv);
	if (pf->demand.head)
		pf_wake(pf);
}

/*
 * A reader stops waiting for memory. Prefetch leaves room to readers that
 * wait (pf_schedule_prefetch()): the last one to go wakes the network
 * threads, which would otherwise not look again until their polls ran out.
 * mu held.
 */
static void room_wait_end(struct pf *pf)
{
	if (!--pf->room_waiters) {
		pf->room_gen++;
		pf_wake(pf);
	}
}

/* Gives up after the reader's deadline: one line. Unlocks mu. */
static ssize_t read_timed_out(struct pf *pf, const struct pf_object *o,
			      uint64_t off, uint64_t t0)
{
	pthread_mutex_unlock(&pf->mu);
	rd_add(&pf->rd.failed_reads, 1);
	log_error("read of '%.*s' at offset %llu: no data after %llu s",
		  (int)(o->name_len ? o->name_len : o->key_len), o->key,
		  (unsigned long long)(o->base + off),
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

/* When a reader that began at @t0 gives up: twice the retry budget plus
 * PF_WAIT_SLACK_MS (its part may queue behind others for a budget). */
static uint64_t read_deadline(const struct pf *pf, uint64_t t0)
{
	return t0 + 1000000ull * (2ull * (uint64_t)pf_retry(pf)->max_time_ms +
				  PF_WAIT_SLACK_MS);
}

/* The error of a fetch of @id that failed for good a moment ago
 * (pf_note_failure()), or 0. mu held. */
static int recent_failure(const struct pf *pf, uint32_t id)
{
	uint64_t now = pf_now(pf);

	for (int i = 0; i < PF_FAILS; i++)
		if (pf->fails[i].id == id && pf->fails[i].until_ns > now)
			return pf->fails[i].err;
	return 0;
}

/* Counts a reader's wait on the network, to its stream too. */
static void count_stall(struct pf *pf, uint32_t slot, uint64_t t0)
{
	uint64_t ns = mono_ns() - t0;

	rd_add(&pf->rd.stalls, 1);
	rd_add(&pf->rd.stall_ns, ns);
	if (pf->opened_by[slot]) {
		struct order_stream *st = &pf->hints.s[pf->opened_by[slot] - 1];

		st->stalls++;
		st->stall_ns += ns;
	}
}

/* Copies [off, off + len) of @f's done, pinned parts into @buf. */
static void parts_copy(struct pf *pf, struct pf_fetch *f, char *buf, size_t len,
		       uint64_t off)
{
	for (uint64_t at = off, end = off + len; at < end;) {
		struct pf_part *p = &f->parts[at / pf->cfg.part_size];
		size_t k = (size_t)(p->off + p->len - at < end - at
					? p->off + p->len - at
					: end - at);

		memcpy(buf + (at - off), p->buf + (at - p->off), k);
		at += k;
	}
}

/*
 * Hands [off, off + len) of @f's done, pinned parts to @cb: by reference
 * when one part holds it (the common case: an object under part_size is
 * one part), else through a copy. Without mu.
 */
static ssize_t parts_to_cb(struct pf *pf, struct pf_fetch *f, size_t len,
			   uint64_t off, cache_ref_cb cb, void *arg)
{
	const struct pf_part *p = &f->parts[off / pf->cfg.part_size];
	struct cache_ref ref = {.fd = -1, .len = len};
	char *tmp;
	ssize_t n;

	if (off + len <= p->off + p->len) {
		ref.mem = p->buf + (off - p->off);
		rd_add(&pf->rd.zero_copy, 1);
		return cb(arg, &ref);
	}
	tmp = malloc(len);
	if (!tmp)
		return -ENOMEM;
	parts_copy(pf, f, tmp, len, off);
	ref.mem = tmp;
	n = cb(arg, &ref);
	free(tmp);
	return n;
}

ssize_t pf_read(struct pf *pf, uint32_t id, void *buf, size_t len, uint64_t off)
{
	struct pf_blocked *b = pf_blocked_of(pf, id);

	return b ? pf_block_read(pf, b, buf, len, off, NULL, NULL, false)
		 : pf_read_slot(pf, id, buf, len, off, NULL, NULL);
}

ssize_t pf_read_cb(struct pf *pf, uint32_t id, size_t len, uint64_t off,
		   cache_ref_cb cb, void *arg)
{
	struct pf_blocked *b = pf_blocked_of(pf, id);

	return b ? pf_block_read(pf, b, NULL, len, off, cb, arg, false)
		 : pf_read_slot(pf, id, NULL, len, off, cb, arg);
}

/*
 * pf_read() of slot @id (an object, or a block of one: engine_block.c)
 * into @buf, or with @cb (and no @buf) pf_read_cb(): the bytes go to @cb
 * from where they lie (the cache's file or map, the fetch's buffer) while
 * they are pinned.
 */
ssize_t pf_read_slot(struct pf *pf, uint32_t id, void *buf, size_t len,
		     uint64_t off, cache_ref_cb cb, void *arg)
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

	if (id >= pf->n_slots || pf_describe(pf, id, key, sizeof(key), &o))
		return -ENOENT;
	if (off >= o.size)
		return 0;
	if (len > o.size - off)
		len = (size_t)(o.size - off);
	deadline = read_deadline(pf, t0);
	whole = pf_fetch_whole(pf, id, &o);
	rd_add(&pf->rd.reads, 1);

again:
	for (int tries = 0;; tries++) {
		/* The cache first, without the engine's lock. */
		if (!cache_lookup(pf->cfg.cache, o.key, o.key_len, o.etag,
				  o.size, &co)) {
			n = cb ? cache_read_ref(pf->cfg.cache, o.key, o.key_len,
						o.etag, o.size, len, off, cb,
						arg)
			       : cache_read(pf->cfg.cache, &co, buf, len, off);
			if (n != -ENODATA) {
				rd_add(n >= 0 ? &pf->rd.cache_hits
					      : &pf->rd.failed_reads,
				       1);
				if (cb && n >= 0)
					rd_add(&pf->rd.zero_copy, 1);
				return n;
			}
		}
		pthread_mutex_lock(&pf->mu);
		f = pf->by_id[id];
		if (f || tries > 0 || !whole)
			break;
		/* No fetch: either none ran, or it committed since our miss
		 * (fetches leave the table only after committing). Look again.
		 */
		pthread_mutex_unlock(&pf->mu);
	}

	/* mu held. */
	if (pf->stop)
		return read_failed(pf, -ECANCELED);
	if (f) {
		if (f->read_through)
			rd_add(&pf->rd.read_through, 1);
		else
			pf->st.prefetch_joins++;
	} else {
		if ((err = recent_failure(pf, id)))
			return read_failed(pf, err);
		if (whole && pf->mem + o.size > pf->cfg.fetch_mem)
			pf_read_through_reclaim(pf, o.size);
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
		f = pf_fetch_create(pf, id, &o, true, !whole);
		if (!f)
			return read_failed(pf, -ENOMEM);
		if (whole)
			pf->st.demand_fetches++;
		else
			rd_add(&pf->rd.read_through, 1);
	}
	f->refs++;
	part_span(pf, off, len, &a, &b);
	pf_fetch_ask(pf, f, a, b);
	if (!parts_ready(f, a, b, &err) && !err) {
		waited = true;
		pf_wake(pf);
		while (!parts_ready(f, a, b, &err) && !err && !pf->stop)
			if (!wait_parts(pf, f, deadline))
				break;
	}
	if (waited)
		count_stall(pf, id, t0);
	if (!parts_ready(f, a, b, &err)) {
		fetch_unpin(f, a, b);
		reader_put(pf, f);
		if (err || pf->stop)
			return read_failed(pf, err ? err : -ECANCELED);
		return read_timed_out(pf, &o, off, t0);
	}
	pthread_mutex_unlock(&pf->mu);

	/* The parts we need are done, pinned and never written again: copy
	 * or hand out freely. */
	if (cb) {
		n = parts_to_cb(pf, f, len, off, cb, arg);
	} else {
		parts_copy(pf, f, buf, len, off);
		n = (ssize_t)len;
	}

	pthread_mutex_lock(&pf->mu);
	fetch_unpin(f, a, b);
	reader_put(pf, f);
	pthread_mutex_unlock(&pf->mu);
	return n;
}

/*
 * A read of [off, off + len) of block @slot by a reader that jumped there
 * (engine_block.c), the block neither cached, nor in flight, nor named by
 * a hint: one GET of the pages under the read (PF_RANGE_ALIGN), handed to
 * this reader alone and not cached, so that a random reader of a large
 * object fetches what it reads rather than a block per read. Returns
 * -EAGAIN when the block is to be read as a block after all (cached, in
 * flight or hinted), else as pf_read_slot().
 */
ssize_t pf_read_range(struct pf *pf, uint32_t slot, void *buf, size_t len,
		      uint64_t off, cache_ref_cb cb, void *arg)
{
	uint64_t t0 = mono_ns(), deadline, a, e;
	struct cache_obj co;
	struct pf_object o;
	struct pf_fetch *f;
	char key[4096];
	const char *src;
	int err = 0;
	ssize_t n;

	if (pf_describe(pf, slot, key, sizeof(key), &o))
		return -ENOENT;
	if (off >= o.size)
		return 0;
	if (len > o.size - off)
		len = (size_t)(o.size - off);
	if (!cache_lookup(pf->cfg.cache, o.key, o.key_len, o.etag, o.size, &co))
		return -EAGAIN;
	a = off & ~(PF_RANGE_ALIGN - 1);
	e = (off + len + PF_RANGE_ALIGN - 1) & ~(PF_RANGE_ALIGN - 1);
	if (e > o.size)
		e = o.size;
	deadline = read_deadline(pf, t0);
	pthread_mutex_lock(&pf->mu);
	if (pf->stop)
		return read_failed(pf, -ECANCELED);
	if (pf->by_id[slot] ||
	    order_streams_next_use(&pf->hints, slot) != UINT64_MAX) {
		pthread_mutex_unlock(&pf->mu);
		return -EAGAIN;
	}
	if ((err = recent_failure(pf, slot)))
		return read_failed(pf, err);
	f = pf_range_create(pf, slot, &o, a, (size_t)(e - a));
	if (!f)
		return read_failed(pf, -ENOMEM);
	rd_add(&pf->rd.reads, 1);
	rd_add(&pf->rd.read_through, 1);
	pf_fetch_ask(pf, f, 0, 0);
	pf_wake(pf);
	while (!parts_ready(f, 0, 0, &err) && !err && !pf->stop)
		if (!wait_parts(pf, f, deadline))
			break;
	count_stall(pf, slot, t0);
	if (!parts_ready(f, 0, 0, &err)) {
		fetch_unpin(f, 0, 0);
		reader_put(pf, f);
		if (err || pf->stop)
			return read_failed(pf, err ? err : -ECANCELED);
		return read_timed_out(pf, &o, off, t0);
	}
	pthread_mutex_unlock(&pf->mu);

	/* Done, pinned, never written again. */
	src = f->parts[0].buf + (off - a);
	if (cb) {
		struct cache_ref ref = {.fd = -1, .mem = src, .len = len};

		rd_add(&pf->rd.zero_copy, 1);
		n = cb(arg, &ref);
	} else {
		memcpy(buf, src, len);
		n = (ssize_t)len;
	}
	pthread_mutex_lock(&pf->mu);
	fetch_unpin(f, 0, 0);
	reader_put(pf, f);
	pthread_mutex_unlock(&pf->mu);
	return n;
}

ssize_t pf_read_ref(struct pf *pf, uint32_t id, size_t len, uint64_t off,
		    cache_ref_cb cb, void *arg)
{
	struct pf_blocked *b = pf_blocked_of(pf, id);
	struct pf_object o;
	char key[4096];
	ssize_t n;

	if (b)
		return pf_block_read(pf, b, NULL, len, off, cb, arg, true);
	if (id >= pf->cfg.n_ids || pf_describe(pf, id, key, sizeof(key), &o) ||
	    off >= o.size || o.size > pf->cfg.max_object_mem)
		return -ENODATA;
	if (len > o.size - off)
		len = (size_t)(o.size - off);
	n = cache_read_ref(pf->cfg.cache, o.key, o.key_len, o.etag, o.size, len,
			   off, cb, arg);
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
