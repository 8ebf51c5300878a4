/*
 * prefetch/engine_hedge.c - the engine's side of the shared cache tier
 * (tier.h): the list of running tier GETs, what a tier attempt's end
 * makes of its part, and the hedge that sends a waited-on tier GET to the
 * origin.
 *
 * Invariant: a part is on pf->tier_run exactly while its tier GET runs;
 * a tier GET costs a reader time, never a read (any end but a hit turns
 * the part into an origin GET with a fresh budget). mu held. Only the
 * network thread that owns a running tier GET (p->net) cancels it: each
 * thread hedges its own, and one that cuts every GET because the breaker
 * opened wakes the others to cut theirs.
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

/* ---- the tier ---------------------------------------------------------------
 */

void pf_tier_run_add(struct pf *pf, struct pf_part *p, uint64_t now)
{
	p->on_tier = true;
	p->cut_hedge = false;
	p->start_ns = now;
	p->tnext = NULL;
	p->tprev = pf->tier_run_tail;
	*(p->tprev ? &p->tprev->tnext : &pf->tier_run) = p;
	pf->tier_run_tail = p;
}

void pf_tier_run_remove(struct pf *pf, struct pf_part *p)
{
	if (!p->on_tier)
		return;
	*(p->tprev ? &p->tprev->tnext : &pf->tier_run) = p->tnext;
	*(p->tnext ? &p->tnext->tprev : &pf->tier_run_tail) = p->tprev;
	p->on_tier = false;
	p->cut_hedge = false;
	p->tprev = p->tnext = NULL;
}

/*
 * The tier attempt of @p (running, its handle out of the multi handle)
 * ended with @v: a hit completes the part as an origin GET would; anything
 * else makes it an origin GET, first in its queue, with a fresh budget.
 * mu held.
 */
void pf_tier_part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
			enum tier_verdict v, enum tier_cut cut,
			const struct s3_status *st)
{
	struct pf_fetch *f = p->f;
	bool was_open = tier_open(pf->tier);

	pf_tier_run_remove(pf, p);
	tier_note_verdict(pf->tier, v, cut, f->demand, p->start_ns);
	/* This answer opened the breaker: the other threads cut their tier
	 * GETs now (pf_tier_hedge()), not at their next look (the hung
	 * time, or never), even when this one has none left to cut. */
	if (!was_open && tier_open(pf->tier))
		pf_wake_others(pf, &pf->nets[p->net]);
	if (v != TIER_ERROR)
		tier_note_answer_ns(pf->tier, pf_now(pf) - p->start_ns);
	if (v == TIER_HIT) {
		pf_part_ended(pf, p, got, false, st);
		return;
	}
	pf->running--;
	pf->nets[p->net].running--;
	f->running--;
	f->tier = false;
	/* After a miss or a mismatch the tier needs the object. After a
	 * hedge, a timeout or an error it most likely holds it (it was slow
	 * or failing, not empty): a PUT would only load a tier already too
	 * slow for its readers. Cut because the breaker opened: nobody
	 * knows, and the tier gets it once it answers again (tier_put()
	 * holds it till then), as a fetch the breaker bypassed does. */
	f->tier_put =
	    v == TIER_MISS || v == TIER_MISMATCH || cut == TIER_CUT_BREAKER;
	if (f->tier_put)
		tier_put_expect(pf->tier);
	/* The origin's GET is another request: new handle, If-Match. */
	pf_get_release(&p->get);
	p->attempts = 0;
	p->state = PART_QUEUED;
	pf_queue_push(f->demand ? &pf->demand : &pf->ahead, p, true);
}

/* Cuts tier GET @p (running, armed) short: it goes to the origin. Its
 * network thread, mu held. */
static void tier_cut_part(struct pf *pf, struct pf_part *p, enum tier_cut cut)
{
	struct s3_status st;

	pf_source_cancel(&p->get, &st);
	pf_tier_part_ended(pf, p, -ETIMEDOUT, TIER_ERROR, cut, &st);
}

/*
 * Sends to the origin the tier GETs that should not wait on the tier any
 * longer: all of @net's when the tier is hung or its breaker open (the
 * hint's prefetches included, so that they keep their lead), and those a
 * reader has waited on past the hedge, within the hedge budget. @net's
 * thread, mu held.
 *
 * Several threads. Only a GET's own thread may cancel it (p->net), so
 * each cuts its own. Whether the tier hung is judged on @net's GETs and
 * polls (another thread's answers say nothing of what this one has not
 * yet read from its sockets); when the breaker opens, every thread cuts
 * its own, woken by the one that saw it. The hedge's budget, though, goes
 * in start order whichever thread looks, as with one thread: a GET of
 * another thread that wins it is marked (cut_hedge) and its thread woken
 * to cut it. Returns whether it cut any, and lowers *@timeout_ms to the
 * next check due.
 */
bool pf_tier_hedge(struct pf *pf, struct pf_net *net, int *timeout_ms)
{
	uint64_t hedge_ns = tier_hedge_ns(pf->tier);
	uint64_t now = pf_now(pf), due = UINT64_MAX;
	struct pf_part *p, *next, *oldest = NULL;
	unsigned int running = 0;
	bool any = false, all = false;

	if (!pf->tier_run)
		return false;
	/* tier_run is in start order: the first of ours is our oldest. */
	for (p = pf->tier_run; p; p = p->tnext) {
		if (p->net != net->idx)
			continue;
		if (!oldest)
			oldest = p;
		running++;
	}
	if (oldest)
		all = tier_open(pf->tier) ||
		      tier_hung(pf->tier, oldest->start_ns, running,
				net->polled_ns, &due);
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
		bool mine = p->net == net->idx;

		next = p->tnext;
		if (mine && !pf_get_running(&p->get))
			continue; /* not armed yet: pf_arm_parts() is on it */
		if (mine && (all || p->cut_hedge)) {
			tier_cut_part(pf, p,
				      all ? TIER_CUT_BREAKER : TIER_CUT_HEDGE);
			any = true;
			continue;
		}
		if (!hedge_ns || !f->demand || p->hedge_denied || p->cut_hedge)
			continue;
		/* The reader's own wait: a prefetch that ran long before
		 * it came has not kept it waiting. */
		due = (f->wait_ns > p->start_ns ? f->wait_ns : p->start_ns) +
		      hedge_ns;
		if (now < due) {
			int ms = (int)((due - now) / 1000000u) + 1;

			/* Its own thread looks then. */
			if (mine && ms < *timeout_ms)
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
		if (mine) {
			tier_cut_part(pf, p, TIER_CUT_HEDGE);
			any = true;
		} else {
			p->cut_hedge = true;
			pf_source_wake(pf->nets[p->net].src);
		}
	}
	/* The breaker opened (or the tier hung): the others' tier GETs go to
	 * the origin too, now rather than at their next poll's end. */
	if (all && any)
		pf_wake_others(pf, net);
	return any;
}
