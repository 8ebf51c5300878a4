/*
 * tests/unit/source_fail.c - a failure wrapper over any source: see
 * source_fail.h.
 *
 * Each GET of the engine (the outer pf_get) has one of ours (struct
 * sf_get), which carries the inner pf_get the inner sources see: an
 * attempt passed on runs as that inner GET, and its end, read from the
 * inner origin's next_done(), leads back to the outer one. An attempt the
 * wrapper runs itself (delayed, failed, hung) is on the wrapper's list
 * until it ends: a failed one ends at the next next_done(), a delayed one
 * starts on the inner source when run() finds it due on the inner clock.
 *
 * Invariant: an sf_get is on its wrapper's list exactly while it is
 * delayed or failed and not yet reported (own_run, with @due); a hung one
 * is own_run and on no list. One mutex per wrapper guards the list and
 * the flags; it is taken before an inner source's (a leaf), never after.
 */
#include "source_fail.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MS 1000000ull

struct sf_half {
	struct pf_source base;
	struct source_fail *sf;
	enum sf_side side;
	struct pf_source *inner;
};

struct source_fail {
	struct sf_half sides[2];
	sf_rule_cb rule;
	void *arg;
	pthread_mutex_t mu;
	struct sf_get *list; /* delayed or failed, not yet ended */
};

struct sf_get {
	struct pf_get in; /* first: the inner sources' GET */
	struct pf_get *out;
	struct source_fail *sf; /* the wrapper of its latest attempt */
	char *key, *etag;	/* copies: the outer ones may go */
	struct sf_action a;	/* its latest attempt's */
	bool own_run;		/* the wrapper runs that attempt */
	bool inner;		/* it runs on an inner source */
	struct pf_source *dst;	/* a delayed start's inner source */
	bool retry;		/* and its arguments */
	long timeout_ms;
	uint64_t due; /* a delayed start's time, on the inner clock */
	struct sf_get *next;
};

static struct sf_half *side_of(const struct pf_source *s)
{
	return (struct sf_half *)s;
}

static struct source_fail *sf_of(const struct pf_source *s)
{
	return side_of(s)->sf;
}

/* Takes @wg off its wrapper's list, if it is on it. sf->mu held. */
static void list_remove(struct source_fail *sf, struct sf_get *wg)
{
	for (struct sf_get **pp = &sf->list; *pp; pp = &(*pp)->next) {
		if (*pp == wg) {
			*pp = wg->next;
			break;
		}
	}
	wg->next = NULL;
}

/* The per-GET state of @g, created at its first start. */
static struct sf_get *get_of(struct pf_get *g)
{
	struct sf_get *wg = g->h;

	if (wg)
		return wg;
	wg = calloc(1, sizeof(*wg));
	if (!wg)
		return NULL;
	wg->key = strndup(g->key, g->key_len);
	wg->etag = g->etag ? strdup(g->etag) : NULL;
	if (!wg->key || (g->etag && !wg->etag)) {
		free(wg->key);
		free(wg->etag);
		free(wg);
		return NULL;
	}
	wg->out = g;
	wg->in = (struct pf_get){.key = wg->key,
				 .key_len = g->key_len,
				 .etag = wg->etag,
				 .off = g->off,
				 .len = g->len,
				 .buf = g->buf,
				 .whole = g->whole,
				 .want_meta = g->want_meta};
	g->h = wg;
	return wg;
}

static int sf_start(struct pf_source *s, struct pf_get *g, bool retry,
		    long timeout_ms)
{
	struct sf_half *sd = side_of(s);
	struct source_fail *sf = sd->sf;
	struct sf_get *wg = get_of(g);
	struct sf_action a;

	if (!wg)
		return -ENOMEM;
	a = sf->rule(sf->arg, sd->side, g);
	pthread_mutex_lock(&sf->mu);
	wg->sf = sf;
	wg->a = a;
	wg->inner = a.act == SF_PASS || a.act == SF_TRUNCATE;
	wg->own_run = !wg->inner;
	if (a.act == SF_DELAY || a.act == SF_ERROR) {
		wg->dst = sd->inner;
		wg->retry = retry;
		wg->timeout_ms = timeout_ms;
		wg->due = pf_source_now(sd->inner) + a.delay_ms * MS;
		wg->next = sf->list;
		sf->list = wg;
	}
	pthread_mutex_unlock(&sf->mu);
	if (wg->inner)
		return pf_source_start(sd->inner, &wg->in, retry, timeout_ms);
	/* Its driving thread looks at what it armed (as curl's does). */
	pf_source_wake(sf->sides[SF_ORIGIN].inner);
	return 0;
}

static void sf_cancel(struct pf_source *s, struct pf_get *g,
		      struct s3_status *st)
{
	struct sf_get *wg = g->h;
	struct source_fail *sf = wg->sf;

	if (wg->inner) {
		pf_source_cancel(&wg->in, st);
		return;
	}
	pthread_mutex_lock(&sf->mu);
	list_remove(sf, wg);
	wg->own_run = false;
	pthread_mutex_unlock(&sf->mu);
	*st = (struct s3_status){.kind = S3_ERR_NETWORK};
	strcpy(st->message, "cancelled");
}

static bool sf_running(const struct pf_source *s, const struct pf_get *g)
{
	struct sf_get *wg = g->h;
	bool r;

	if (!wg)
		return false;
	pthread_mutex_lock(&wg->sf->mu);
	r = wg->own_run;
	pthread_mutex_unlock(&wg->sf->mu);
	return r || (wg->inner && pf_get_running(&wg->in));
}

static uint64_t sf_run(struct pf_source *s, int timeout_ms, bool *timed_out)
{
	struct source_fail *sf = sf_of(s);
	struct pf_source *inner = sf->sides[SF_ORIGIN].inner;
	uint64_t now = pf_source_now(inner);
	struct sf_get **pp = &sf->list;

	pthread_mutex_lock(&sf->mu);
	while (*pp) {
		struct sf_get *wg = *pp;

		if (wg->due <= now && wg->a.act == SF_ERROR) {
			timeout_ms = 0; /* ends at the next next_done() */
		} else if (wg->due <= now) {
			/* Due: it starts on the inner source now. */
			*pp = wg->next;
			wg->next = NULL;
			wg->own_run = false;
			wg->inner = true;
			if (pf_source_start(wg->dst, &wg->in, wg->retry,
					    wg->timeout_ms)) {
				/* It could not start: it fails instead. */
				wg->inner = false;
				wg->own_run = true;
				wg->a.act = SF_ERROR;
				wg->a.kind = S3_ERR_NETWORK;
				wg->a.err = ENOMEM;
				wg->due = now;
				wg->next = sf->list;
				sf->list = wg;
				timeout_ms = 0;
			}
			continue;
		} else {
			uint64_t ms = (wg->due - now + MS - 1) / MS;

			if (ms < (uint64_t)timeout_ms)
				timeout_ms = (int)ms;
		}
		pp = &wg->next;
	}
	pthread_mutex_unlock(&sf->mu);
	return pf_source_run(inner, timeout_ms, timed_out);
}

static struct pf_get *sf_next_done(struct pf_source *s, ssize_t *got,
				   bool *retryable, struct s3_status *st)
{
	struct source_fail *sf = sf_of(s);
	uint64_t now = pf_source_now(sf->sides[SF_ORIGIN].inner);
	struct sf_get *wg = NULL;
	struct pf_get *in;

	/* The oldest failure due (the list is newest first). */
	pthread_mutex_lock(&sf->mu);
	for (struct sf_get *p = sf->list; p; p = p->next)
		if (p->a.act == SF_ERROR && p->due <= now)
			wg = p;
	if (wg) {
		list_remove(sf, wg);
		wg->own_run = false;
	}
	pthread_mutex_unlock(&sf->mu);
	if (wg) {
		*st =
		    (struct s3_status){.kind = wg->a.kind, .http = wg->a.http};
		strcpy(st->message, "failed by the test's rule");
		*got = -wg->a.err;
		*retryable = wg->a.retryable;
		return wg->out;
	}
	in =
	    pf_source_next_done(sf->sides[SF_ORIGIN].inner, got, retryable, st);
	if (!in)
		return NULL;
	wg = (struct sf_get *)in;
	if (wg->a.act == SF_TRUNCATE && *got > (ssize_t)wg->a.keep) {
		/* The connection reset past @keep bytes: no answer. */
		*st = (struct s3_status){.kind = S3_ERR_NETWORK};
		strcpy(st->message, "connection reset by the test's rule");
		*got = -ECONNRESET;
		*retryable = true;
	}
	return wg->out;
}

static const struct s3_obj_meta *sf_meta(const struct pf_source *s,
					 const struct pf_get *g)
{
	struct sf_get *wg = g->h;

	return wg && wg->inner ? pf_get_meta(&wg->in) : NULL;
}

static void sf_release(struct pf_source *s, struct pf_get *g)
{
	struct sf_get *wg = g->h;

	if (!wg)
		return;
	pthread_mutex_lock(&wg->sf->mu);
	list_remove(wg->sf, wg);
	pthread_mutex_unlock(&wg->sf->mu);
	pf_get_release(&wg->in);
	free(wg->key);
	free(wg->etag);
	free(wg);
}

static void sf_wake(struct pf_source *s)
{
	pf_source_wake(sf_of(s)->sides[SF_ORIGIN].inner);
}

static uint64_t sf_now_ns(const struct pf_source *s)
{
	return pf_source_now(side_of(s)->inner);
}

static int sf_put(struct pf_source *s, const char *name, size_t name_len,
		  const void *data, size_t len,
		  const struct s3_meta_header *meta, size_t n_meta,
		  struct s3_status *st)
{
	return pf_source_put(side_of(s)->inner, name, name_len, data, len, meta,
			     n_meta, st);
}

static const struct retry_policy *sf_retry(const struct pf_source *s)
{
	return pf_source_retry(side_of(s)->inner);
}

/* The test owns the wrapper: source_fail_destroy() frees it. */
static void sf_destroy(struct pf_source *s)
{
}

static const struct pf_source_ops sf_ops = {
    .start = sf_start,
    .cancel = sf_cancel,
    .running = sf_running,
    .run = sf_run,
    .next_done = sf_next_done,
    .meta = sf_meta,
    .release = sf_release,
    .wake = sf_wake,
    .now_ns = sf_now_ns,
    .put = sf_put,
    .retry = sf_retry,
    .destroy = sf_destroy,
};

struct source_fail *source_fail_create(struct pf_source *origin,
				       struct pf_source *tier, sf_rule_cb rule,
				       void *arg)
{
	struct source_fail *sf = calloc(1, sizeof(*sf));

	if (!sf)
		return NULL;
	sf->sides[SF_ORIGIN] =
	    (struct sf_half){{&sf_ops}, sf, SF_ORIGIN, origin};
	sf->sides[SF_TIER] = (struct sf_half){{&sf_ops}, sf, SF_TIER, tier};
	sf->rule = rule;
	sf->arg = arg;
	pthread_mutex_init(&sf->mu, NULL);
	return sf;
}

void source_fail_destroy(struct source_fail *sf)
{
	if (!sf)
		return;
	pthread_mutex_destroy(&sf->mu);
	free(sf);
}

struct pf_source *source_fail_origin(struct source_fail *sf)
{
	return &sf->sides[SF_ORIGIN].base;
}

struct pf_source *source_fail_tier(struct source_fail *sf)
{
	return sf->sides[SF_TIER].inner ? &sf->sides[SF_TIER].base : NULL;
}

void sf_plan_init(struct sf_plan *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->mu, NULL);
}

void sf_plan_set(struct sf_plan *p, enum sf_side side, struct sf_action act,
		 int times, struct sf_action then)
{
	pthread_mutex_lock(&p->mu);
	p->side[side].act = act;
	p->side[side].times = times;
	p->side[side].then = then;
	pthread_mutex_unlock(&p->mu);
}

struct sf_action sf_plan_rule(void *arg, enum sf_side side,
			      const struct pf_get *g)
{
	struct sf_plan *p = arg;
	struct sf_action a;

	pthread_mutex_lock(&p->mu);
	if (p->side[side].times > 0) {
		p->side[side].times--;
		a = p->side[side].act;
	} else {
		a = p->side[side].then;
	}
	pthread_mutex_unlock(&p->mu);
	return a;
}
