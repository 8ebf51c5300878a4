/*
 * prefetch/s3/s3_list.c - ListObjectsV2: paginated, and past the first page
 * in parallel over disjoint key ranges.
 *
 * Invariant: every key under the prefix reaches the caller's callback
 * exactly once, one call at a time, even from a server that ignores
 * start-after or answers out of order (then page by page).
 */
#include "prefetch/s3/s3_internal.h"
#include "prefetch/s3/s3_xml.h"
#include "prefetch/s3/sigv4.h"
#include "common/proc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *bucket_path(struct s3_client *c)
{
	char *path = NULL;

	if (c->path_style) {
		if (asprintf(&path, "/%s", c->bucket) < 0)
			path = NULL;
	} else {
		path = strdup("/");
	}
	return path;
}

/* One ListObjectsV2 request: under @prefix, after @start (@start_len
 * bytes; NULL: from the first key), grouped by '/' with @delimiter. */
struct list_rq {
	const char *prefix;
	const char *start;
	size_t start_len;
	bool delimiter;
	const char *token; /* NULL on a listing's first page */
};

/* NOTE(s3): query pairs go on the wire already encoded; the signer
 * re-canonicalizes them, so their order here does not matter. start-after
 * is dropped with a continuation token (which already says where). */
static char *list_query(const struct list_rq *r)
{
	char *p = sigv4_uri_encode(r->prefix, strlen(r->prefix), false);
	char *t = r->token ? sigv4_uri_encode(r->token, strlen(r->token), false)
			   : NULL;
	char *a = r->start && !r->token
		      ? sigv4_uri_encode(r->start, r->start_len, false)
		      : NULL;
	char *q = NULL;

	if (p && (!r->token || t) && (!r->start || r->token || a)) {
		if (asprintf(&q,
			     "list-type=2&encoding-type=url&max-keys=1000"
			     "&prefix=%s%s%s%s%s%s",
			     p, r->delimiter ? "&delimiter=%2F" : "",
			     t ? "&continuation-token=" : "", t ? t : "",
			     a ? "&start-after=" : "", a ? a : "") < 0)
			q = NULL;
	}
	free(p);
	free(t);
	free(a);
	return q;
}

/* Fetches the page @r names into @page (the caller frees it). @x carries
 * the path and the body buffer from page to page. */
static int list_page(struct s3_xfer *x, const struct list_rq *r,
		     struct s3_list_page *page, struct s3_status *st)
{
	int rc;

	memset(page, 0, sizeof(*page));
	free(x->rq.query);
	x->rq.query = list_query(r);
	if (!x->rq.query)
		return -ENOMEM;
	rc = s3_perform(x, st);
	if (rc)
		return rc;
	rc = s3_list_parse(x->body.b.data, x->body.b.len, page, st->message,
			   sizeof(st->message));
	if (rc) {
		snprintf(st->code, sizeof(st->code), "MalformedListing");
		st->http = 200;
		st->kind = S3_ERR_OTHER;
		return rc;
	}
	if (page->truncated && (!page->next_token || !page->next_token[0])) {
		s3_list_page_fini(page);
		snprintf(st->code, sizeof(st->code), "MalformedListing");
		snprintf(st->message, sizeof(st->message),
			 "truncated listing without NextContinuationToken");
		st->kind = S3_ERR_OTHER;
		return -EPROTO;
	}
	return 0;
}

static int list_xfer_init(struct s3_client *c, struct s3_xfer *x)
{
	memset(x, 0, sizeof(*x));
	x->c = c;
	x->rq.method = "GET";
	x->body = (struct s3_body){.max = S3_LIST_BODY_MAX};
	x->rq.path = bucket_path(c);
	return x->rq.path ? 0 : -ENOMEM;
}

static void list_xfer_fini(struct s3_xfer *x)
{
	free(x->rq.path);
	free(x->rq.query);
	buf_fini(&x->body.b);
}

/* Byte order of keys, S3's order (UTF-8 code units). */
static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int d = memcmp(a, b, alen < blen ? alen : blen);

	return d ? d : (alen > blen) - (alen < blen);
}

/*
 * A parallel listing: the key space after the first page, cut at split
 * points b_0 < b_1 < ... < b_n (b_0 the first page's last key) into the
 * ranges (b_i, b_i+1] and (b_n, end). Each range is listed with
 * start-after=b_i and stops at its first key past b_i+1: every key once,
 * at most one page per range read in vain.
 */
struct plist {
	struct s3_client *c;
	const char *prefix;
	s3_list_cb cb;
	void *arg;
	char **bounds;
	size_t *bound_lens;
	size_t n_bounds;
	pthread_mutex_t lock; /* cb calls, next, rc, st */
	size_t next;	      /* next range to list */
	int rc;		      /* first failure: the others stop */
	struct s3_status st;
};

/* Calls the callback for @e under the lock; false once anything failed. */
static bool plist_deliver(struct plist *pl, const struct s3_list_entry *e)
{
	struct s3_object o = {
	    .key = e->key,
	    .key_len = e->key_len,
	    .size = e->size,
	    .mtime = e->mtime,
	    .etag = e->etag,
	};
	bool go;

	pthread_mutex_lock(&pl->lock);
	if (!pl->rc)
		pl->rc = pl->cb(pl->arg, &o);
	go = !pl->rc;
	pthread_mutex_unlock(&pl->lock);
	return go;
}

static void plist_fail(struct plist *pl, int rc, const struct s3_status *st)
{
	pthread_mutex_lock(&pl->lock);
	if (!pl->rc) {
		pl->rc = rc;
		pl->st = *st;
	}
	pthread_mutex_unlock(&pl->lock);
}

/* Lists range @i. */
static void plist_range(struct plist *pl, struct s3_xfer *x, size_t i)
{
	const char *hi = i + 1 < pl->n_bounds ? pl->bounds[i + 1] : NULL;
	size_t hi_len = hi ? pl->bound_lens[i + 1] : 0;
	struct list_rq r = {.prefix = pl->prefix,
			    .start = pl->bounds[i],
			    .start_len = pl->bound_lens[i]};
	struct s3_status st = {0};
	char *token = NULL;
	bool done = false;

	while (!done) {
		struct s3_list_page page;
		int rc;

		r.token = token;
		rc = list_page(x, &r, &page, &st);
		if (rc) {
			plist_fail(pl, rc, &st);
			break;
		}
		for (size_t k = 0; k < page.n_entries && !done; k++) {
			const struct s3_list_entry *e = &page.entries[k];

			/* A server that ignores start-after would send the
			 * keys before the range again: never twice. */
			if (key_cmp(e->key, e->key_len, r.start, r.start_len) <=
			    0)
				continue;
			if (hi && key_cmp(e->key, e->key_len, hi, hi_len) > 0)
				done = true;
			else if (!plist_deliver(pl, e))
				done = true;
		}
		free(token);
		token = NULL;
		if (page.truncated && !done) {
			token = page.next_token;
			page.next_token = NULL;
		} else {
			done = true;
		}
		s3_list_page_fini(&page);
	}
	free(token);
}

static void *plist_worker(void *arg)
{
	struct plist *pl = arg;
	struct s3_xfer x;

	if (list_xfer_init(pl->c, &x)) {
		struct s3_status st = {0};

		snprintf(st.message, sizeof(st.message), "out of memory");
		plist_fail(pl, -ENOMEM, &st);
		return NULL;
	}
	for (;;) {
		size_t i;

		pthread_mutex_lock(&pl->lock);
		i = pl->rc ? pl->n_bounds : pl->next++;
		pthread_mutex_unlock(&pl->lock);
		if (i >= pl->n_bounds)
			break;
		plist_range(pl, &x, i);
	}
	list_xfer_fini(&x);
	return NULL;
}

/* Split points: sorted distinct strings, kept in @pl (bounds[0] is set by
 * the caller). */
static int bounds_add(struct plist *pl, size_t *cap, const char *s, size_t len)
{
	if (pl->n_bounds == *cap) {
		size_t n = *cap ? *cap * 2 : 64;
		char **b = reallocarray(pl->bounds, n, sizeof(*b));
		size_t *l =
		    b ? reallocarray(pl->bound_lens, n, sizeof(*l)) : NULL;

		if (b)
			pl->bounds = b;
		if (!l)
			return -ENOMEM;
		pl->bound_lens = l;
		*cap = n;
	}
	/* Keys are bytes: a decoded %00 is kept, so no strndup. */
	pl->bounds[pl->n_bounds] = malloc(len + 1);
	if (!pl->bounds[pl->n_bounds])
		return -ENOMEM;
	memcpy(pl->bounds[pl->n_bounds], s, len);
	pl->bounds[pl->n_bounds][len] = '\0';
	pl->bound_lens[pl->n_bounds++] = len;
	return 0;
}

static int cmp_bound(const void *a, const void *b, void *arg)
{
	const struct plist *pl = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;

	return key_cmp(pl->bounds[i], pl->bound_lens[i], pl->bounds[j],
		       pl->bound_lens[j]);
}

/*
 * Finds split points past @first (the first page's last key): the common
 * prefixes of delimiter pages (first page of each), one level at a time,
 * until there are @want of them or S3_LIST_DISCOVERY requests were made.
 * Then keeps @want of them, evenly spaced. Returns 0 or -errno with @st.
 */
static int plist_split(struct plist *pl, struct s3_xfer *x, size_t want,
		       struct s3_status *st)
{
	size_t cap = pl->n_bounds, level_start = 0, level_end, requests = 0;
	struct plist cand = {0};
	size_t cand_cap = 0, *order = NULL;
	int rc;

	/* Level 0 is the listing's own prefix. */
	rc = bounds_add(&cand, &cand_cap, pl->prefix, strlen(pl->prefix));
	level_end = cand.n_bounds;
	while (!rc && level_start < level_end && cand.n_bounds < want + 1) {
		for (size_t i = level_start; i < level_end && !rc; i++) {
			struct list_rq r = {.prefix = cand.bounds[i],
					    .delimiter = true};
			struct s3_list_page page;

			if (requests++ >= S3_LIST_DISCOVERY)
				break;
			rc = list_page(x, &r, &page, st);
			if (rc)
				break;
			for (size_t k = 0; !rc && k < page.n_prefixes; k++)
				rc = bounds_add(&cand, &cand_cap,
						page.prefixes[k].prefix,
						page.prefixes[k].len);
			s3_list_page_fini(&page);
		}
		level_start = level_end;
		level_end = cand.n_bounds;
		if (requests >= S3_LIST_DISCOVERY)
			break;
	}
	/* Candidates past the first page, sorted, evenly picked. */
	order = rc ? NULL
		   : calloc(cand.n_bounds ? cand.n_bounds : 1, sizeof(*order));
	if (!rc && !order)
		rc = -ENOMEM;
	if (!rc) {
		size_t n = 0, last = SIZE_MAX;

		for (size_t i = 1; i < cand.n_bounds; i++)
			if (key_cmp(cand.bounds[i], cand.bound_lens[i],
				    pl->bounds[0], pl->bound_lens[0]) > 0)
				order[n++] = i;
		qsort_r(order, n, sizeof(*order), cmp_bound, &cand);
		for (size_t k = 0; k < want && k < n && !rc; k++) {
			size_t pick = order[k * n / (want < n ? want : n)];

			if (last != SIZE_MAX && !cmp_bound(&last, &pick, &cand))
				continue;
			last = pick;
			rc = bounds_add(pl, &cap, cand.bounds[pick],
					cand.bound_lens[pick]);
		}
	}
	if (rc == -ENOMEM && !st->message[0])
		snprintf(st->message, sizeof(st->message), "out of memory");
	free(order);
	for (size_t i = 0; i < cand.n_bounds; i++)
		free(cand.bounds[i]);
	free(cand.bounds);
	free(cand.bound_lens);
	return rc;
}

/* Lists the rest of a listing whose first page ended at @last (@last_len
 * bytes), with up to c->list_workers threads. */
static int list_rest_parallel(struct s3_client *c, struct s3_xfer *x,
			      const char *prefix, const char *last,
			      size_t last_len, s3_list_cb cb, void *arg,
			      struct s3_status *st)
{
	struct plist pl = {.c = c, .prefix = prefix, .cb = cb, .arg = arg};
	size_t cap = 0, workers = (size_t)c->list_workers;
	pthread_t *th = NULL;
	size_t started = 0;
	int rc;

	pthread_mutex_init(&pl.lock, NULL);
	rc = bounds_add(&pl, &cap, last, last_len);
	if (!rc)
		rc = plist_split(&pl, x, workers * S3_LIST_RANGES_PER_WORKER,
				 st);
	if (!rc) {
		th = calloc(workers, sizeof(*th));
		if (!th)
			rc = -ENOMEM;
	}
	for (size_t i = 0; !rc && i < workers && i < pl.n_bounds; i++) {
		if (proc_thread_create(&th[i], NULL, plist_worker, &pl))
			break;
		started++;
	}
	if (!rc && !started)
		plist_worker(&pl); /* no thread: this one lists it all */
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (!rc && pl.rc) {
		rc = pl.rc;
		*st = pl.st;
	}
	free(th);
	for (size_t i = 0; i < pl.n_bounds; i++)
		free(pl.bounds[i]);
	free(pl.bounds);
	free(pl.bound_lens);
	pthread_mutex_destroy(&pl.lock);
	return rc;
}

int s3_list(struct s3_client *c, const char *prefix, s3_list_cb cb, void *arg,
	    struct s3_status *st)
{
	struct list_rq r = {.prefix = prefix};
	struct s3_status local;
	struct s3_xfer x;
	char *token = NULL;
	bool ordered = true; /* the first page's keys ascend */
	unsigned pages = 0;
	int rc;

	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	rc = list_xfer_init(c, &x);
	while (!rc) {
		struct s3_list_page page;
		const struct s3_list_entry *last = NULL;

		r.token = token;
		rc = list_page(&x, &r, &page, st);
		if (rc)
			break;
		pages++;
		for (size_t i = 0; i < page.n_entries && !rc; i++) {
			const struct s3_list_entry *e = &page.entries[i];
			struct s3_object o = {
			    .key = e->key,
			    .key_len = e->key_len,
			    .size = e->size,
			    .mtime = e->mtime,
			    .etag = e->etag,
			};

			/* NOTE(s3): ranges rely on S3's byte order of keys;
			 * a server that sorts otherwise is listed page by
			 * page. */
			if (last && key_cmp(last->key, last->key_len, e->key,
					    e->key_len) >= 0)
				ordered = false;
			last = e;
			rc = cb(arg, &o);
		}
		free(token);
		token = NULL;
		if (!rc && page.truncated && pages == 1 && ordered && last &&
		    c->list_workers > 1) {
			rc = list_rest_parallel(c, &x, prefix, last->key,
						last->key_len, cb, arg, st);
			s3_list_page_fini(&page);
			break;
		}
		if (!rc && page.truncated) {
			token = page.next_token;
			page.next_token = NULL;
		}
		s3_list_page_fini(&page);
		if (!token)
			break;
	}
	free(token);
	list_xfer_fini(&x);
	return rc;
}
