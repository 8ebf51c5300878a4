/*
 * prefetch/engine_stats.c - pf_get_stats(): one consistent snapshot of the
 * engine's counters, its limits and its hint streams, under mu (the read
 * path's counters are atomic and read without it).
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

void pf_get_stats(struct pf *pf, struct pf_stats *st)
{
	struct order_queue_stats os;
	uint64_t now = pf_now(pf);

	pthread_mutex_lock(&pf->mu);
	*st = pf->st;
	st->inflight = pf->running;
	st->inflight_limit = pf->limit;
	st->inflight_cap = pf->cap;
	st->inflight_brakes = pf->brakes;
	st->writers = pf->n_writers;
	st->get_latency_ns = pf->lat_ns;
	st->get_rate = pf->rate;
	st->fetch_mem = pf->mem;
	st->fetch_mem_peak = pf->mem_peak;
	st->fetch_mem_limit = pf->cfg.fetch_mem;
	st->reads = atomic_load(&pf->rd.reads);
	st->cache_hits = atomic_load(&pf->rd.cache_hits);
	st->read_through = atomic_load(&pf->rd.read_through);
	st->stalls = atomic_load(&pf->rd.stalls);
	st->stall_ns = atomic_load(&pf->rd.stall_ns);
	st->failed_reads = atomic_load(&pf->rd.failed_reads);
	st->reads_zero_copy = atomic_load(&pf->rd.zero_copy);
	st->read_wakeups = atomic_load(&pf->rd.wakeups);
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
		st->tier = true;
		tier_get_stats(pf->tier, &st->tier_st);
	}
}
