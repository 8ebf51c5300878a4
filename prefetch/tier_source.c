/*
 * prefetch/tier_source.c - the tier source: a struct pf_source (source.h)
 * over two, the origin and the shared cache tier (tier.h), so that the
 * engine drives one source per network thread and never sees the tier.
 * It owns the routing (a GET that may use the tier reads it first while
 * the breaker lets it), the proof (tier_check() before a byte is
 * delivered), the fall-back to the origin (miss, mismatch, error,
 * timeout), the hedge to the origin of a tier GET a reader waited on past
 * tier_hedge_ns() within the hedge budget, the cut of every tier GET while
 * the breaker is open or the tier hung, and the PUT of what the origin
 * served after a miss, a mismatch or a bypass.
 *
 * Invariants. A GET delivers its bytes once, from the tier (a hit, proven)
 * or from the origin: a tier attempt's end is never reported to the
 * caller but as a hit, any other end starts the origin's GET at once, on
 * the same struct pf_get, so the caller counts the GET once in its limits
 * and sees one attempt end; a tier attempt costs the caller time, never a
 * retry (pf_get.fresh_ns restarts its budget). A GET is on its group's
 * run list exactly while its tier attempt runs. Only the thread that
 * drives the tier source that started a tier attempt (its owner) cancels
 * it: a hedge another thread grants it is marked (cut_hedge) and the
 * owner woken; the thread that sees the breaker open wakes the others to
 * cut their own.
 *
 * Threads. One tier source per network thread, all of one engine in one
 * group that shares the run list (its mutex, mu, held for the list and
 * the marks only: never across a source call but a wake-up). Each tier
 * source is driven by its thread as source.h says; the tier (tier.c) is
 * called from any of them.
 */
#include "prefetch/tier.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* A tier GET's one attempt ends after 2 s: an 8 MiB part from a near tier
 * (>= 100 MB/s) takes 80 ms, so 2 s is a tier in trouble; the origin then
 * has the whole retry budget. */
#define TIER_SOURCE_TIMEOUT_MS 2000

/* Where a GET stands. */
enum ts_phase {
	TS_NEW,	   /* never started */
	TS_TIER,   /* its attempt runs (or ran) on the tier */
	TS_ORIGIN, /* its attempts go to the origin */
};

struct ts_group;

/* One network thread's tier source. */
struct ts_src {
	struct pf_source base; /* first: a struct pf_source */
	struct ts_group *grp;
	struct pf_source *origin; /* not owned */
	struct pf_source *tier;	  /* the origin's sibling; not owned */
	uint64_t poll_ns;	  /* when its latest poll began */
	uint64_t polled_ns;	  /* when its latest poll whose answers
				     were all judged began (tier_hung()) */
	struct ts_get *done;	  /* GETs it ended itself (an origin GET
				     that did not start), for next_done */
};

/* The state a tier source keeps for one GET (source.h). */
struct ts_get {
	struct pf_get in;     /* the attempt on the origin or the tier */
	struct pf_get *outer; /* the caller's */
	struct ts_src *owner; /* the tier source that started it last */
	enum ts_phase phase;
	char *key; /* copies of the caller's request */
	char *etag;
	/* On the run list since start_ns (group's mu). hedge_denied: the
	 * budget refused its hedge, its reader waits. cut_hedge: another
	 * thread gave it the hedge; its owner cuts it. */
	bool on_run;
	bool hedge_denied;
	bool cut_hedge;
	uint64_t start_ns;
	struct ts_get *prev, *next;
	/* The origin's bytes are owed to the tier (tier_put_expect()). */
	bool put_owed;
	/* Ended by the tier source itself: on its owner's done list, with
	 * done_err. Also the link of the list ts_hedge() cuts (why: cut). */
	struct ts_get *done_next;
	int done_err;
	enum tier_cut cut;
	char name[TIER_NAME_MAX]; /* its tier object */
};

struct ts_group {
	pthread_mutex_t mu; /* run, run_tail and the GETs' run fields */
	struct tier *tier;
	unsigned int n, live;
	struct ts_src **srcs;
	struct ts_get *run, *run_tail; /* tier attempts running, oldest
					  first */
};

#define TS_SRC(s) ((struct ts_src *)(s))

static uint64_t ts_now(const struct ts_src *ts)
{
	return pf_source_now(ts->origin);
}

/* Whether a reader waits on @g, and since when (*@since). */
static bool ts_waited(const struct pf_get *g, uint64_t *since)
{
	uint64_t w = g->wait_ns ? atomic_load(g->wait_ns) : PF_GET_NO_WAIT;

	if (since)
		*since = w;
	return w != PF_GET_NO_WAIT;
}

/* Wakes every thread of the group but @ts's. */
static void ts_wake_others(struct ts_src *ts)
{
	for (unsigned int i = 0; i < ts->grp->n; i++)
		if (ts->grp->srcs[i] != ts)
			pf_source_wake(ts->grp->srcs[i]->origin);
}

static void run_add(struct ts_group *grp, struct ts_get *tg, uint64_t now)
{
	tg->on_run = true;
	tg->cut_hedge = false;
	tg->start_ns = now;
	tg->next = NULL;
	tg->prev = grp->run_tail;
	*(tg->prev ? &tg->prev->next : &grp->run) = tg;
	grp->run_tail = tg;
}

/* Takes @tg off the run list if on it. The group's mu held. */
static void run_remove(struct ts_group *grp, struct ts_get *tg)
{
	if (!tg->on_run)
		return;
	*(tg->prev ? &tg->prev->next : &grp->run) = tg->next;
	*(tg->next ? &tg->next->prev : &grp->run_tail) = tg->prev;
	tg->on_run = false;
	tg->cut_hedge = false;
	tg->prev = tg->next = NULL;
}

/* Starts an origin attempt of @tg on @ts's origin. */
static int ts_origin_start(struct ts_src *ts, struct ts_get *tg, bool retry,
			   long timeout_ms)
{
	const struct pf_get *g = tg->outer;

	if (!tg->in.src)
		tg->in = (struct pf_get){.key = tg->key,
					 .key_len = g->key_len,
					 .etag = tg->etag,
					 .off = g->off,
					 .len = g->len,
					 .buf = g->buf,
					 .whole = g->whole};
	tg->phase = TS_ORIGIN;
	return pf_source_start(ts->origin, &tg->in, retry, timeout_ms);
}

/* Ends @tg on @ts without an answer from a source (its origin GET did not
 * start): next_done reports it. */
static void ts_end_here(struct ts_src *ts, struct ts_get *tg, int err)
{
	tg->done_err = err;
	tg->done_next = ts->done;
	ts->done = tg;
}

/*
 * The tier attempt of @tg (ended, or cancelled) ended with @v: notes it;
 * anything but a hit starts the origin's GET with a fresh budget, and
 * after a miss, a mismatch or a cut by the breaker owes the tier the
 * origin's bytes. Returns 0, or the origin start's -errno. @ts's thread.
 */
static int ts_tier_ended(struct ts_src *ts, struct ts_get *tg,
			 enum tier_verdict v, enum tier_cut cut)
{
	struct ts_group *grp = ts->grp;
	struct tier *t = grp->tier;
	bool was_open = tier_open(t);
	uint64_t now = ts_now(ts);

	pthread_mutex_lock(&grp->mu);
	run_remove(grp, tg);
	pthread_mutex_unlock(&grp->mu);
	tier_note_verdict(t, v, cut, ts_waited(tg->outer, NULL), tg->start_ns);
	/* This answer opened the breaker: the other threads cut their tier
	 * GETs now (ts_hedge()), not at their next look (the hung time, or
	 * never), even when this one has none left to cut. */
	if (!was_open && tier_open(t))
		ts_wake_others(ts);
	if (v != TIER_ERROR)
		tier_note_answer_ns(t, now - tg->start_ns);
	if (v == TIER_HIT)
		return 0;
	/* After a miss or a mismatch the tier needs the object. After a
	 * hedge, a timeout or an error it most likely holds it (it was slow
	 * or failing, not empty): a PUT would only load a tier already too
	 * slow for its readers. Cut because the breaker opened: nobody
	 * knows, and the tier gets it once it answers again (tier_put()
	 * holds it till then), as a fetch the breaker bypassed does. */
	tg->put_owed =
	    v == TIER_MISS || v == TIER_MISMATCH || cut == TIER_CUT_BREAKER;
	if (tg->put_owed)
		tier_put_expect(t);
	/* The origin's GET is another request: new handle, If-Match, and
	 * the whole retry budget (the tier costs time, never a read). */
	pf_get_release(&tg->in);
	tg->outer->fresh_ns = now;
	return ts_origin_start(ts, tg, false,
			       (long)pf_source_retry(ts->origin)->max_time_ms);
}

/* Cuts @tg's tier attempt (running, @ts's) short: it goes to the origin. */
static void ts_cut(struct ts_src *ts, struct ts_get *tg, enum tier_cut cut)
{
	struct s3_status st;
	int rc;

	pf_source_cancel(&tg->in, &st);
	rc = ts_tier_ended(ts, tg, TIER_ERROR, cut);
	if (rc)
		ts_end_here(ts, tg, rc);
}

/*
 * Sends to the origin the tier GETs that should not wait on the tier any
 * longer: all of @ts's when the tier is hung or its breaker open (the
 * prefetches included, so that they keep their lead), and those a reader
 * has waited on past the hedge, within the hedge budget. @ts's thread;
 * lowers *@timeout_ms to the next check due.
 *
 * Only a GET's owner may cancel it, so each thread cuts its own. Whether
 * the tier hung is judged on @ts's GETs and polls (another thread's
 * answers say nothing of what this one has not yet read from its
 * sockets); when the breaker opens, every thread cuts its own, woken by
 * the one that saw it. The hedge's budget, though, goes in start order
 * whichever thread looks, as with one thread: a GET of another thread
 * that wins it is marked (cut_hedge) and its owner woken to cut it.
 */
static void ts_hedge(struct ts_src *ts, int *timeout_ms)
{
	struct ts_group *grp = ts->grp;
	struct tier *t = grp->tier;
	uint64_t hedge_ns = tier_hedge_ns(t);
	uint64_t now = ts_now(ts), due = UINT64_MAX;
	struct ts_get *tg, *next, *oldest = NULL, *cut = NULL,
				  **cut_tail = &cut;
	unsigned int running = 0;
	bool all = false;

	pthread_mutex_lock(&grp->mu);
	if (!grp->run) {
		pthread_mutex_unlock(&grp->mu);
		return;
	}
	/* The run list is in start order: the first of ours is our oldest. */
	for (tg = grp->run; tg; tg = tg->next) {
		if (tg->owner != ts)
			continue;
		if (!oldest)
			oldest = tg;
		running++;
	}
	if (oldest)
		all = tier_open(t) || tier_hung(t, oldest->start_ns, running,
						ts->polled_ns, &due);
	if (!all && due != UINT64_MAX) {
		/* Past due and not judged hung: the last poll began before
		 * due. Poll at once (it reads what the sockets hold), then
		 * ask again. */
		int ms = due > now ? (int)((due - now) / 1000000u) + 1 : 0;

		if (ms < *timeout_ms)
			*timeout_ms = ms;
	}
	for (tg = grp->run; tg; tg = next) {
		bool mine = tg->owner == ts;
		uint64_t since;

		next = tg->next;
		/* Its attempt ended, its end not yet read: next_done's. */
		if (mine && !pf_get_running(&tg->in))
			continue;
		if (mine && (all || tg->cut_hedge)) {
			/* Off the list now: nobody grants it a hedge while
			 * it is being cut. */
			enum tier_cut why =
			    all ? TIER_CUT_BREAKER : TIER_CUT_HEDGE;

			run_remove(grp, tg);
			tg->cut = why;
			*cut_tail = tg;
			cut_tail = &tg->done_next;
			continue;
		}
		if (!hedge_ns || tg->hedge_denied || tg->cut_hedge ||
		    !ts_waited(tg->outer, &since))
			continue;
		/* The reader's own wait: a prefetch that ran long before
		 * it came has not kept it waiting. */
		due = (since > tg->start_ns ? since : tg->start_ns) + hedge_ns;
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
		if (!tier_hedge_take(t)) {
			tg->hedge_denied = true;
			continue;
		}
		if (mine) {
			run_remove(grp, tg);
			tg->cut = TIER_CUT_HEDGE;
			*cut_tail = tg;
			cut_tail = &tg->done_next;
		} else {
			tg->cut_hedge = true;
			pf_source_wake(tg->owner->origin);
		}
	}
	*cut_tail = NULL;
	pthread_mutex_unlock(&grp->mu);
	/* The breaker opened (or the tier hung): the others' tier GETs go to
	 * the origin too, now rather than at their next poll's end. */
	if (all && cut)
		ts_wake_others(ts);
	for (tg = cut; tg; tg = next) {
		next = tg->done_next;
		ts_cut(ts, tg, tg->cut);
	}
}

static int ts_start(struct pf_source *s, struct pf_get *g, bool retry,
		    long timeout_ms)
{
	struct ts_src *ts = TS_SRC(s);
	struct ts_group *grp = ts->grp;
	struct ts_get *tg = g->h;
	size_t nlen;
	int rc;

	if (!tg) {
		tg = calloc(1, sizeof(*tg));
		if (!tg)
			return -ENOMEM;
		tg->key = strndup(g->key, g->key_len);
		tg->etag = g->etag ? strdup(g->etag) : NULL;
		if (!tg->key || (g->etag && !tg->etag)) {
			free(tg->key);
			free(tg->etag);
			free(tg);
			return -ENOMEM;
		}
		tg->outer = g;
		g->h = tg;
	}
	tg->owner = ts;
	if (tg->phase != TS_NEW)
		return ts_origin_start(ts, tg, retry, timeout_ms);
	tg->phase = TS_ORIGIN;
	if (!g->tier)
		return ts_origin_start(ts, tg, retry, timeout_ms);
	/* Whether it reads the tier is asked when its GET starts: the
	 * breaker may have opened or closed since the GET was queued. */
	if (!tier_use(grp->tier)) {
		/* The breaker is open: the origin's bytes are owed to the
		 * tier, which holds the PUT until it answers again, so that
		 * the object leaves the origin once for the cluster. */
		tg->put_owed = true;
		tier_put_expect(grp->tier);
		return ts_origin_start(ts, tg, retry, timeout_ms);
	}
	/* One attempt, no If-Match: the name says the origin's version. */
	nlen = tier_name(tier_prefix(grp->tier), tier_origin_bucket(grp->tier),
			 tg->key, g->key_len, tg->etag, tg->name,
			 sizeof(tg->name));
	tg->in = (struct pf_get){.key = tg->name,
				 .key_len = nlen,
				 .len = g->len,
				 .buf = g->buf,
				 .whole = true,
				 .want_meta = true};
	tg->phase = TS_TIER;
	tier_note_get(grp->tier);
	pthread_mutex_lock(&grp->mu);
	run_add(grp, tg, ts_now(ts));
	pthread_mutex_unlock(&grp->mu);
	rc = nlen ? pf_source_start(ts->tier, &tg->in, false,
				    timeout_ms < TIER_SOURCE_TIMEOUT_MS
					? timeout_ms
					: TIER_SOURCE_TIMEOUT_MS)
		  : -ENOMEM;
	if (rc)
		rc = ts_tier_ended(ts, tg, TIER_ERROR, TIER_CUT_NONE);
	return rc;
}

static void ts_cancel(struct pf_source *s, struct pf_get *g,
		      struct s3_status *st)
{
	struct ts_src *ts = TS_SRC(s);
	struct ts_get *tg = g->h;

	pf_source_cancel(&tg->in, st);
	pthread_mutex_lock(&ts->grp->mu);
	run_remove(ts->grp, tg);
	pthread_mutex_unlock(&ts->grp->mu);
}

static bool ts_running(const struct pf_source *s, const struct pf_get *g)
{
	const struct ts_get *tg = g->h;

	(void)s;
	return tg && pf_get_running(&tg->in);
}

static uint64_t ts_run(struct pf_source *s, int timeout_ms, bool *timed_out)
{
	struct ts_src *ts = TS_SRC(s);

	ts_hedge(ts, &timeout_ms);
	if (ts->done)
		timeout_ms = 0;
	ts->poll_ns = ts_now(ts);
	return pf_source_run(ts->origin, timeout_ms, timed_out);
}

static struct pf_get *ts_next_done(struct pf_source *s, ssize_t *got,
				   bool *retryable, struct s3_status *st)
{
	struct ts_src *ts = TS_SRC(s);
	struct tier *t = ts->grp->tier;

	for (;;) {
		struct ts_get *tg = ts->done;
		struct pf_get *in;
		int rc;

		if (tg) {
			ts->done = tg->done_next;
			*got = tg->done_err;
			*retryable = false;
			*st = (struct s3_status){.message =
						     "cannot start a transfer"};
			return tg->outer;
		}
		in = pf_source_next_done(ts->origin, got, retryable, st);
		if (!in) {
			/* Every answer that came before the poll has been
			 * judged. */
			ts->polled_ns = ts->poll_ns;
			return NULL;
		}
		tg =
		    (struct ts_get *)((char *)in - offsetof(struct ts_get, in));
		if (tg->phase == TS_ORIGIN) {
			/* What the origin served after the tier missed it
			 * goes to the tier, in the background. */
			if (tg->put_owed && *got == (ssize_t)tg->outer->len) {
				tg->put_owed = false;
				tier_put(t, tg->key, tg->outer->key_len,
					 tg->etag, tg->outer->len,
					 tg->outer->buf);
			}
			return tg->outer;
		}
		/* A tier answer: judged before a byte is delivered. */
		enum tier_verdict v = tier_check(
		    t, *got, st, pf_get_meta(in), tg->key, tg->outer->key_len,
		    tg->etag, tg->outer->len, tg->outer->buf);

		rc = ts_tier_ended(ts, tg, v, TIER_CUT_NONE);
		if (v == TIER_HIT) {
			*retryable = false;
			return tg->outer;
		}
		if (rc)
			ts_end_here(ts, tg, rc);
	}
}

static const struct s3_obj_meta *ts_meta(const struct pf_source *s,
					 const struct pf_get *g)
{
	const struct ts_get *tg = g->h;

	(void)s;
	return tg ? pf_get_meta(&tg->in) : NULL;
}

static void ts_release(struct pf_source *s, struct pf_get *g)
{
	struct ts_src *ts = TS_SRC(s);
	struct ts_get *tg = g->h;

	if (!tg)
		return;
	/* Ended here, its end never read (the engine stopped): off the
	 * list of the tier source that ended it. */
	for (struct ts_get **d = &tg->owner->done; *d; d = &(*d)->done_next)
		if (*d == tg) {
			*d = tg->done_next;
			break;
		}
	pthread_mutex_lock(&ts->grp->mu);
	run_remove(ts->grp, tg);
	pthread_mutex_unlock(&ts->grp->mu);
	pf_get_release(&tg->in);
	if (tg->put_owed)
		tier_put_forget(ts->grp->tier);
	free(tg->key);
	free(tg->etag);
	free(tg);
}

static void ts_wake(struct pf_source *s)
{
	pf_source_wake(TS_SRC(s)->origin);
}

static uint64_t ts_now_ns(const struct pf_source *s)
{
	return ts_now(TS_SRC(s));
}

/* A PUT goes to the origin, as the origin source's would: the tier's own
 * PUTs go through its side's source (tier_config.src). */
static int ts_put(struct pf_source *s, const char *name, size_t name_len,
		  const void *data, size_t len,
		  const struct s3_meta_header *meta, size_t n_meta,
		  struct s3_status *st)
{
	return pf_source_put(TS_SRC(s)->origin, name, name_len, data, len, meta,
			     n_meta, st);
}

static const struct retry_policy *ts_retry(const struct pf_source *s)
{
	return pf_source_retry(TS_SRC(s)->origin);
}

static void ts_destroy(struct pf_source *s)
{
	struct ts_src *ts = TS_SRC(s);
	struct ts_group *grp = ts->grp;

	free(ts);
	if (--grp->live)
		return;
	pthread_mutex_destroy(&grp->mu);
	free(grp->srcs);
	free(grp);
}

static const struct pf_source_ops ts_ops = {
    .start = ts_start,
    .cancel = ts_cancel,
    .running = ts_running,
    .run = ts_run,
    .next_done = ts_next_done,
    .meta = ts_meta,
    .release = ts_release,
    .wake = ts_wake,
    .now_ns = ts_now_ns,
    .put = ts_put,
    .retry = ts_retry,
    .destroy = ts_destroy,
};

int tier_source_create(struct tier *t, unsigned int n,
		       struct pf_source *const *origins,
		       struct pf_source *const *tiers, struct pf_source **out)
{
	struct ts_group *grp = calloc(1, sizeof(*grp));

	if (!grp)
		return -ENOMEM;
	grp->srcs = calloc(n, sizeof(*grp->srcs));
	if (!grp->srcs) {
		free(grp);
		return -ENOMEM;
	}
	pthread_mutex_init(&grp->mu, NULL);
	grp->tier = t;
	grp->n = n;
	for (unsigned int i = 0; i < n; i++) {
		struct ts_src *ts = calloc(1, sizeof(*ts));

		if (!ts) {
			for (unsigned int k = 0; k < i; k++)
				ts_destroy(out[k]);
			if (!i) {
				pthread_mutex_destroy(&grp->mu);
				free(grp->srcs);
				free(grp);
			}
			return -ENOMEM;
		}
		ts->base.ops = &ts_ops;
		ts->grp = grp;
		ts->origin = origins[i];
		ts->tier = tiers[i];
		grp->srcs[i] = ts;
		grp->live++;
		out[i] = &ts->base;
	}
	return 0;
}
