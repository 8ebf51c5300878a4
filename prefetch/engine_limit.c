/*
 * prefetch/engine_limit.c - the in-flight controller: how many parts may
 * run at once (pf->limit, which pf_take_parts() obeys). It is the only code
 * that sets the limit.
 *
 * Why not a constant. A GET occupies its slot for one round trip, so N
 * slots carry N / latency objects a second (Little's law): 64 slots at
 * 100 ms are 640 objects/s, whatever the readers need and the server
 * could give. The limit follows the work instead:
 * - each tick (PF_TICK_NS, or one GET's latency if longer) measures the
 *   parts that ended well and their time in flight (an EWMA), and sets the
 *   goal to PF_HEADROOM x rate x latency: twice the in-flight count that
 *   carried the tick;
 * - the readers' need reaches the engine as queued work (the hint's pace
 *   lets the prefetch run as far ahead as the readers read in the last
 *   second; a reader's miss is a demand part): when a queued part waited
 *   for a slot during a tick in which GETs ended, GETs are the bottleneck
 *   and the limit doubles (an eighth after a SlowDown: past ssthresh), so
 *   a cold start at PF_INFLIGHT_START reaches 2,048 in five ticks; a tick
 *   in which no GET ended (a server or tier that hangs) grows nothing;
 * - with no part waiting, the limit moves toward the goal: up by the same
 *   steps, down by an eighth a tick, no lower than PF_INFLIGHT_START (a
 *   burst after an idle spell starts where a cold start does);
 * - SlowDown halves it (pf_limit_cut(), once per PF_CUT_GAP_NS) and sets
 *   ssthresh there: the server said where its limit is, so growth past it
 *   probes by an eighth a tick, and none while SlowDowns keep coming;
 * - each growth is judged two ticks on (the brake, PF_BRAKE_*): if the
 *   bytes a second did not follow it and the latency did, the server only
 *   queued the extra GETs (one that answers no SlowDown), and every read
 *   would wait behind that queue, so the limit goes back to where it was
 *   before that growth and holds a while before it probes again;
 * - it never passes the cap (max_inflight) nor fetch_mem over the average
 *   part's length (whole fetches reserve their memory before their parts
 *   queue, so memory bounds the GETs anyway; this keeps the target honest).
 * Connections follow: curl opens one per running transfer and keeps up to
 * the cap's worth alive (pf_start()).
 *
 * All of it under pf->mu, on the engine's clock (the fake's virtual one in
 * test_engine).
 */
#include "prefetch/engine_internal.h"

#include <string.h>

/* The cap that memory allows: fetch_mem over the average part, or the
 * configured cap before any part has ended. mu held. */
static uint32_t limit_cap(const struct pf *pf)
{
	uint64_t by_mem;

	if (!pf->len_avg)
		return pf->cap;
	by_mem = pf->cfg.fetch_mem / pf->len_avg;
	if (by_mem < PF_INFLIGHT_MIN)
		by_mem = PF_INFLIGHT_MIN;
	return by_mem < pf->cap ? (uint32_t)by_mem : pf->cap;
}

/* The floor of the decay: the cold start's limit, within the cap. */
static uint32_t limit_floor(const struct pf *pf)
{
	uint32_t cap = limit_cap(pf);

	return cap < PF_INFLIGHT_START ? cap : PF_INFLIGHT_START;
}

/* The least it may be cut to: PF_INFLIGHT_MIN, within the cap (a cut
 * must never raise a cap of 1). */
static uint32_t limit_min(const struct pf *pf)
{
	uint32_t cap = limit_cap(pf);

	return cap < PF_INFLIGHT_MIN ? cap : PF_INFLIGHT_MIN;
}

void pf_limit_init(struct pf *pf, uint64_t now)
{
	pf->cap = pf->cfg.max_inflight;
	pf->ssthresh = UINT32_MAX;
	pf->limit = limit_floor(pf);
	pf->tick_ns = now;
}

/* Part @p's attempt ended with all its bytes at @now. mu held. */
void pf_limit_note_done(struct pf *pf, const struct pf_part *p, uint64_t now)
{
	uint64_t ns = now > p->att_ns ? now - p->att_ns : 0;

	pf->tick_done++;
	pf->tick_bytes += p->len;
	/* EWMA, 1/8 per sample: a few ticks' worth of GETs, so one slow
	 * GET moves it little and a real change shows within a tick. */
	if (!pf->lat_ns) {
		pf->lat_ns = ns ? ns : 1;
		pf->len_avg = p->len;
	} else {
		pf->lat_ns = pf->lat_ns - pf->lat_ns / 8 + ns / 8;
		pf->len_avg = pf->len_avg - pf->len_avg / 8 + p->len / 8;
	}
	if (!pf->lat_ns)
		pf->lat_ns = 1;
	if (!pf->len_avg)
		pf->len_avg = 1;
}

/*
 * The server answered SlowDown (or 503): halve, and start the tick
 * afresh, so that the limit grows only after a whole tick without one.
 * mu held.
 */
void pf_limit_cut(struct pf *pf)
{
	uint64_t now = pf_now(pf);

	pf->tick_ns = now;
	pf->tick_done = 0;
	pf->tick_bytes = 0;
	pf->tick_bound = false;
	/* The SlowDown rules take over from the brake's judgement. */
	memset(pf->past, 0, sizeof(pf->past));
	if (now - pf->last_cut_ns < PF_CUT_GAP_NS)
		return;
	pf->last_cut_ns = now;
	pf->limit /= 2;
	if (pf->limit < limit_min(pf))
		pf->limit = limit_min(pf);
	pf->ssthresh = pf->limit;
}

/*
 * The brake's part of the next limit, at the end of a tick that carried
 * @bps bytes a second: judges the growth made PF_BRAKE_JUDGE ticks ago
 * (undone if the bytes a second did not follow while the latency did),
 * holds after an undo, and notes this tick's growth to @up when
 * @want_up. Returns the limit it sets, or 0 to leave the tick to the other
 * rules. mu held.
 */
static uint64_t brake(struct pf *pf, bool want_up, uint64_t up, uint64_t bps)
{
	struct pf_limit_past *old = &pf->past[pf->past_i];
	uint64_t next = 0;

	if (pf->hold)
		pf->hold--;
	if (old->grew_from && bps < old->bps + old->bps / PF_BRAKE_GAIN &&
	    pf->lat_ns >= old->lat_ns + old->lat_ns / PF_BRAKE_LAT) {
		next = old->grew_from;
		pf->brakes++;
		pf->hold = PF_BRAKE_HOLD;
		if (pf->ssthresh > next)
			pf->ssthresh = (uint32_t)next;
		memset(pf->past, 0, sizeof(pf->past));
	} else if (want_up) {
		next = pf->hold ? pf->limit : up;
	}
	old = &pf->past[pf->past_i];
	old->grew_from = next > pf->limit ? pf->limit : 0;
	old->bps = bps;
	old->lat_ns = pf->lat_ns;
	pf->past_i = (pf->past_i + 1) % PF_BRAKE_JUDGE;
	return next;
}

/*
 * Ends the tick if its time has come and sets the next limit (the top
 * comment's rule). Any network thread, each round, mu held.
 */
void pf_limit_tick(struct pf *pf, uint64_t now)
{
	uint64_t len = pf->lat_ns > PF_TICK_NS ? pf->lat_ns : PF_TICK_NS;
	uint64_t span = now - pf->tick_ns, goal, up, next, braked;
	uint32_t cap = limit_cap(pf), floor = limit_floor(pf);

	if (now < pf->tick_ns || span < len)
		return;
	pf->rate = (uint32_t)((uint64_t)pf->tick_done * 1000000000u / span);
	/* rate x latency: the parts in flight on average (Little's law). */
	goal = (uint64_t)pf->tick_done * pf->lat_ns * PF_HEADROOM / span;
	up = pf->limit < pf->ssthresh ? (uint64_t)pf->limit * 2
				      : pf->limit + (pf->limit / 8 ?: 1);
	if (up > cap)
		up = cap;
	/* Waiting work grows the limit only when GETs are ending: a tick
	 * in which none ended (a hung server or tier) says more of them
	 * would only wait too, and the limit decays instead. */
	/* In double: a long tick of many 8 MiB parts (16 GiB in one of 1 s)
	 * times 10^9 passes 64 bits. */
	braked = brake(pf, pf->tick_bound && pf->tick_done, up,
		       (uint64_t)((double)pf->tick_bytes * 1e9 / (double)span));
	if (braked)
		next = braked;
	else if (goal > pf->limit)
		next = goal < up ? goal : up;
	else if (pf->limit > floor)
		next = goal > pf->limit - pf->limit / 8
			   ? goal
			   : pf->limit - pf->limit / 8;
	else
		next = pf->limit;
	if (next < floor && pf->limit >= floor)
		next = floor;
	if (next > cap)
		next = cap;
	if (next < limit_min(pf))
		next = limit_min(pf);
	pf->limit = (uint32_t)next;
	pf->tick_ns = now;
	pf->tick_done = 0;
	pf->tick_bytes = 0;
	pf->tick_bound = false;
}
