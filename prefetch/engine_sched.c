/*
 * prefetch/engine_sched.c - the engine's scheduler: which part starts next.
 * Owns the part queues (demand, ahead, delayed), the choice of hinted and
 * warm ids to prefetch within the window, fetch_mem and what the cache
 * holds (the lead's bound in bytes, and the hinted objects that left the
 * cache before their read, fetched ahead again), and the taking of queued
 * parts up to the in-flight limit.
 *
 * Invariant: parts of fetches a reader waits on (demand) start before any
 * prefetch; a prefetch never takes memory past fetch_mem, and at most
 * pf->limit parts run (engine_limit.c sets it; this file only obeys it). All of
 * it under pf->mu (engine.c's top comment).
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

void pf_queue_push(struct pf_queue *q, struct pf_part *p, bool front)
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
void pf_queue_remove(struct pf_part *p)
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

/* ---- hints ----------------------------------------------------------------
 */
static bool is_nocache(const struct pf *pf, uint32_t id)
{
	return pf->nocache[id / 8] & (1u << (id % 8));
}

/*
 * Whether object @o (id @id) is fetched whole and cached, rather than
 * read through. Without mu (asks the cache).
 */
bool pf_fetch_whole(struct pf *pf, uint32_t id, const struct pf_object *o)
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
 * The bytes the prefetch's lead may take (PF_LEAD_MARGIN): the cache's
 * capacity less the files held open and the margin. Without mu (asks the
 * cache).
 */
static uint64_t lead_room(struct pf *pf)
{
	struct cache_stats cs;
	uint64_t room;

	cache_get_stats(pf->cfg.cache, &cs);
	room = cs.capacity > cs.held_bytes ? cs.capacity - cs.held_bytes : 0;
	return room - room / PF_LEAD_MARGIN;
}

/*
 * A reader consumed hinted slot @slot: its bytes count towards lifting
 * the lead's learned bound (pf->lead_cap). mu held.
 */
void pf_lead_note_read(struct pf *pf, uint32_t slot)
{
	uint64_t n;

	if (pf->lead_cap == UINT64_MAX)
		return;
	n = pf_slot_size(pf, slot);
	if (n < pf->lead_cap_left) {
		pf->lead_cap_left -= n;
	} else {
		/* The lead that did not fit has been read, PF_LEAD_RELEARN
		 * times: the bound is the capacity's again. */
		pf->lead_cap = UINT64_MAX;
		pf->lead_cap_left = 0;
	}
}

/*
 * Slot @slot left the cache (evicted, or refused at its commit): if the
 * prefetcher had passed it and no reader has read it yet, it is offered
 * again (order_streams_requeue()). The cache did not hold the lead and
 * the open objects (next use 0, never evicted), so what they took without
 * it bounds them from now on (pf->lead_cap) until PF_LEAD_RELEARN times the
 * bytes the lead held were read: the object is fetched again only once
 * reads made room (an object read and closed), never at once to be
 * evicted again. mu held.
 */
void pf_requeue(struct pf *pf, uint32_t slot)
{
	uint64_t before = order_streams_lead_bytes(&pf->hints), after;

	if (!order_streams_requeue(&pf->hints, slot))
		return;
	pf->st.requeued++;
	after = order_streams_lead_bytes(&pf->hints) + pf->open_bytes;
	if (after < pf->lead_cap)
		pf->lead_cap = after;
	if (before * PF_LEAD_RELEARN > pf->lead_cap_left)
		pf->lead_cap_left = before * PF_LEAD_RELEARN;
}

/*
 * Picks up to @room hinted ids ahead of the readers that have no fetch in
 * flight, advancing the hints' cursors, within @max_bytes of lead
 * (lead_room()) and the bound learned (pf->lead_cap). mu held.
 */
static void pick_hinted(struct pf *pf, struct pf_candidates *c, size_t room,
			uint64_t max_bytes)
{
	uint64_t learned =
	    pf->lead_cap > pf->open_bytes ? pf->lead_cap - pf->open_bytes : 0;
	size_t got = order_streams_pick(
	    &pf->hints, pf->cfg.window_objects,
	    max_bytes < learned ? max_bytes : learned, pf_now(pf), in_flight,
	    pf, c->ids + c->n, room - c->n);

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

		if (f && !f->read_through) {
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
 * Whether @o is cached. A hinted or read-ahead candidate that is has its
 * checksum check queued ahead of its first read (cache_contains_ahead());
 * a warm-listed one not: a warm list may name the whole dataset, and it
 * asks for the objects to be cached, not read.
 */
static bool cached(struct pf *pf, const struct pf_object *o, bool warm)
{
	if (warm)
		return cache_contains(pf->cfg.cache, o->key, o->key_len,
				      o->etag, o->size);
	return cache_contains_ahead(pf->cfg.cache, o->key, o->key_len, o->etag,
				    o->size);
}

/*
 * Starts fetches for the blocks readers' read-ahead asked for, then
 * hinted, then warm-listed objects that are neither cached nor in flight, while
 * fetch memory lasts; a candidate that does not fit waits in pf->carry. Returns
 * true when one waits so: only memory given back (pf_mem_sub()) or a reader
 * done waiting for it lets it go on. sched_mu held, mu not: it looks objects up
 * in the cache.
 */
static bool schedule_prefetch(struct pf *pf)
{
	struct pf_candidates *c = &pf->carry;
	uint64_t max_bytes = lead_room(pf);
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
					  ? 0
					  : (size_t)pf->limit;

			if (room > 64)
				room = 64;
			c->n = c->first = 0;
			c->n = pf_pick_read_ahead(pf, c->ids, room);
			for (size_t i = 0; i < c->n; i++)
				c->warm[i] = false;
			pick_hinted(pf, c, room, max_bytes);
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
			int skip =
			    0; /* 1: nothing to fetch, 2: cannot be cached */

			if (pf_describe(pf, id, key, sizeof(key), &o))
				skip = 2;
			else if (o.size == 0 || cached(pf, &o, warm))
				skip = 1;
			else if (!pf_fetch_whole(pf, id, &o))
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
				if (!f && (f = pf_fetch_create(pf, id, &o,
							       false, false)))
					pf->st.prefetched++;
				if ((!f || f->read_through) && warm)
					pf->st.warm_failed++;
				else if (f && warm)
					f->warm_refs++;
			}
			pthread_mutex_unlock(&pf->mu);
		}
	}
	return false;
}

/*
 * schedule_prefetch() on one network thread at a time: the others pass
 * (the picking and the cache look-ups are one job, and carry is its
 * state), but each asks for a round first, so that what woke it (a hint,
 * memory back) is looked at after it came, by whichever thread holds the
 * job then. Returns whether a candidate waits for memory; false on a
 * thread that passed. Any network thread, without mu.
 */
bool pf_schedule_prefetch(struct pf *pf)
{
	bool held = false;

	for (;;) {
		atomic_store(&pf->sched_want, true);
		if (pthread_mutex_trylock(&pf->sched_mu))
			return false;
		while (atomic_exchange(&pf->sched_want, false))
			held = schedule_prefetch(pf);
		pthread_mutex_unlock(&pf->sched_mu);
		/* A thread that passed between our last look and the unlock
		 * asked for a round nobody ran. */
		if (!atomic_load(&pf->sched_want))
			return held;
	}
}

/* pf_warm() of slots: objects, and blocks of large ones. */
static int warm_slots(struct pf *pf, const uint32_t *ids, size_t n)
{
	uint64_t max = (uint64_t)pf->n_slots * PF_WARM_PER_OBJECT;
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
	pf_wake(pf);
	return rc;
}

/*
 * Whether queued part @p may start now. A whole fetch's parts have their
 * memory; a read-through part needs room in fetch_mem, which a part a reader
 * waits on may make by releasing other streams' parts. mu held.
 */
static bool part_may_start(struct pf *pf, struct pf_part *p, bool demand)
{
	if (!p->f->read_through || p->buf)
		return true;
	if (pf->mem + p->len <= pf->cfg.fetch_mem)
		return true;
	if (!demand || !p->pins)
		return false;
	pf_read_through_reclaim(pf, p->len);
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

	for (struct pf_part *p = q->head; p && n < PF_SCAN_MAX;
	     p = p->next, n++)
		if (part_may_start(pf, p, demand))
			return p;
	return NULL;
}

/*
 * Takes @p out of its queue for an attempt, counted as running from now,
 * with its buffer (a read-through's counted in fetch_mem). mu held.
 */
void pf_part_take(struct pf *pf, struct pf_part *p, uint64_t now)
{
	struct pf_fetch *f = p->f;

	pf_queue_remove(p);
	if (!p->buf) {
		p->buf = malloc(p->len);
		if (p->buf && f->read_through)
			pf_mem_add(pf, f, p->len);
	}
	if (!p->attempts++)
		p->first_ns = now;
	p->att_ns = now;
	p->state = PART_RUNNING;
	if (++pf->running > pf->st.inflight_peak)
		pf->st.inflight_peak = pf->running;
	f->running++;
}

/*
 * Takes queued parts for network thread @net, demand first, and returns
 * them in order, chained by next, for pf_arm_parts(). It takes up to the
 * limit, and up to its share of it: the limit over the threads, rounded
 * up, so that the GETs (and their CPU) spread over the threads rather
 * than pile on whichever looked first; what is left for the others wakes
 * them. mu held.
 */
struct pf_part *pf_take_parts(struct pf *pf, struct pf_net *net)
{
	struct pf_part *list = NULL, **tail = &list, *p, *next;
	uint64_t now = pf_now(pf);
	uint32_t share = (pf->limit + pf->n_nets - 1) / pf->n_nets;
	bool full = false;

	/* Retries whose time has come go first: someone waited longest. */
	for (p = pf->delayed.head; p; p = next) {
		next = p->next;
		if (p->due_ns <= now) {
			pf_queue_remove(p);
			p->state = PART_QUEUED;
			pf_queue_push(p->f->demand ? &pf->demand : &pf->ahead,
				      p, true);
		}
	}
	while (pf->running < pf->limit && !(full = net->running >= share)) {
		p = queue_pick(pf, &pf->demand, true);
		if (!p)
			p = queue_pick(pf, &pf->ahead, false);
		if (!p)
			break;
		pf_part_take(pf, p, now);
		p->net = (uint16_t)net->idx;
		net->running++;
		*tail = p;
		tail = &p->next;
	}
	if (pf->demand.head || pf->ahead.head) {
		/* Work waits for a slot: GETs are the bottleneck
		 * (engine_limit.c). */
		if (pf->running >= pf->limit)
			pf->tick_bound = true;
		else if (full)
			pf_wake_others(pf, net); /* their shares */
	}
	return list;
}

int pf_warm(struct pf *pf, const uint32_t *ids, size_t n)
{
	uint32_t *slots;
	size_t k;
	int rc;

	if (!pf->n_blocked)
		return warm_slots(pf, ids, n);
	/* A large object is warmed block by block. */
	slots = pf_ids_to_slots(pf, ids, n, &k);
	if (!slots)
		return -ENOMEM;
	rc = warm_slots(pf, slots, k);
	free(slots);
	return rc;
}
