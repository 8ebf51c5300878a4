/*
 * tests/unit/fake_source.c - the engine's source (prefetch/source.h) in
 * memory, on a virtual clock: see fake_source.h.
 *
 * Several network threads: fake_source_create_n() makes one origin and
 * one tier sibling per thread (an *instance*); a GET ends through the
 * run() and next_done() of the instance it last started on, as a curl
 * transfer ends in its thread's multi handle.
 *
 * The tier's bucket is one in-memory store for the whole test (as a
 * bucket outlives the mounts that use it): the tier's PUTs write it, its
 * GETs read it, under its own mutex (a leaf; taken inside fs->mu).
 *
 * Invariant: the virtual clock moves only in fake_source_advance() (and
 * fake_source_jump(), with no engine), and only while every network
 * thread waits in run(); so which GETs have
 * ended between two settles depends on the test's calls alone, not on
 * how the threads were scheduled. One mutex guards everything; it is a
 * leaf (the engine calls wake() with its own mutex held, never the other
 * way).
 */
#include "fake_source.h"
#include "prefetch/s3/s3.h"
#include "common/clock.h"
#include "common/retry.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MS 1000000ull

/* The two sides one fake serves: the origin, and the shared cache tier
 * (a sibling that ends its GETs through the origin's run()). */
enum { SIDE_ORIGIN, SIDE_TIER, SIDES };

/* Instances (network threads) one fake serves at most. */
#define NETS 8

struct fside {
	struct pf_source base;
	struct fake_source *fs;
	int side;
	int net; /* the instance */
};

struct fget {
	struct pf_get *g;
	int side;
	int net; /* the instance it ends through */
	char *key;
	uint64_t due; /* virtual ns; UINT64_MAX: never */
	bool running;
	bool logged;		 /* the start log owns key */
	unsigned seq;		 /* start order: ties end in it */
	struct s3_obj_meta meta; /* the store's answer (tier_store) */
	bool has_meta;
};

struct fake_source {
	struct fside sides[NETS][SIDES];
	int nets; /* instances in use */
	pthread_mutex_t mu;
	pthread_cond_t cv;	/* the engine waits in run() */
	pthread_cond_t idle_cv; /* a test waits for the engine to wait */
	uint64_t now;
	uint64_t latency[SIDES];  /* ns, UINT64_MAX: never */
	uint64_t serve_ns;	  /* the origin's time per GET, 0: none */
	uint64_t server_free;	  /* when it is free for the next (virtual) */
	uint64_t run_until[NETS]; /* its wait ends then (virtual) */
	bool waiting[NETS];	  /* its thread waits in run() */
	bool woken[NETS];
	bool hold;	   /* wake-ups wait (fake_source_hold()) */
	struct fget **run; /* running GETs */
	unsigned n_run, cap_run, running_max, seq;
	struct {
		enum s3_err_kind kind; /* the next times origin answers fail */
		int err, times;
		bool retryable;
	} fail;
	char **log_key; /* every origin start, in order */
	uint64_t *log_off;
	unsigned n_log, cap_log;
	unsigned tier_starts;
	unsigned starts_on[NETS]; /* origin starts per instance */
	unsigned cancels[SIDES], taken_down;
	struct retry_policy retry; /* the default budget */
};

/* One object of the tier's bucket, with what its PUT gave as
 * x-amz-meta-hintfs-* ("" if nothing). */
struct fobj {
	char *name;
	unsigned char *data;
	size_t len;
	struct s3_obj_meta meta;
};

/* The tier's bucket: every fake's tier side, for the whole test. */
static struct {
	pthread_mutex_t mu;
	struct fobj *objs;
	unsigned n, cap;
	unsigned puts;
	struct {
		enum s3_err_kind kind; /* the next times PUTs fail */
		int err, times;
		long http; /* 0: no answer (a reset) */
	} fail;
} store = {.mu = PTHREAD_MUTEX_INITIALIZER};

static struct fake_source *fs_of(const struct pf_source *s)
{
	return ((const struct fside *)s)->fs;
}

static int side_of(const struct pf_source *s)
{
	return ((const struct fside *)s)->side;
}

static int net_of(const struct pf_source *s)
{
	return ((const struct fside *)s)->net;
}

unsigned char fake_source_byte(const char *key, uint64_t off)
{
	return (unsigned char)(off * 31 + strlen(key) + (unsigned char)key[0] +
			       (off >> 8));
}

static void run_remove(struct fake_source *fs, struct fget *fg)
{
	for (unsigned i = 0; i < fs->n_run; i++) {
		if (fs->run[i] == fg) {
			memmove(&fs->run[i], &fs->run[i + 1],
				(fs->n_run - i - 1) * sizeof(*fs->run));
			fs->n_run--;
			break;
		}
	}
	fg->running = false;
}

/* The running GET of instance @net (-1: any) due first (start order among
 * equals), or NULL. */
static struct fget *first_due(struct fake_source *fs, int net)
{
	struct fget *best = NULL;

	for (unsigned i = 0; i < fs->n_run; i++) {
		struct fget *fg = fs->run[i];

		if ((net < 0 || fg->net == net) && fg->due <= fs->now &&
		    (!best || fg->due < best->due ||
		     (fg->due == best->due && fg->seq < best->seq)))
			best = fg;
	}
	return best;
}

static int f_start(struct pf_source *s, struct pf_get *g, bool retry,
		   long timeout_ms)
{
	struct fake_source *fs = fs_of(s);
	struct fget *fg = g->h;
	int rc = 0;

	pthread_mutex_lock(&fs->mu);
	if (!fg) {
		fg = calloc(1, sizeof(*fg));
		if (fg)
			fg->key = strndup(g->key, g->key_len);
		if (!fg || !fg->key) {
			free(fg);
			rc = -ENOMEM;
			goto out;
		}
		fg->g = g;
		fg->side = side_of(s);
		g->h = fg;
	}
	/* A retry may start on another thread's sibling (source.h). */
	fg->net = net_of(s);
	if (fs->n_run == fs->cap_run) {
		unsigned cap = fs->cap_run ? 2 * fs->cap_run : 64;
		void *p = realloc(fs->run, cap * sizeof(*fs->run));

		if (!p) {
			rc = -ENOMEM;
			goto out;
		}
		fs->run = p;
		fs->cap_run = cap;
	}
	if (fs->n_log == fs->cap_log) {
		unsigned cap = fs->cap_log ? 2 * fs->cap_log : 256;
		void *k = realloc(fs->log_key, cap * sizeof(*fs->log_key));
		void *o =
		    k ? realloc(fs->log_off, cap * sizeof(*fs->log_off)) : NULL;

		if (k)
			fs->log_key = k;
		if (!o) {
			rc = -ENOMEM;
			goto out;
		}
		fs->log_off = o;
		fs->cap_log = cap;
	}
	if (fg->side == SIDE_ORIGIN) {
		fs->starts_on[fg->net]++;
		fs->log_key[fs->n_log] = fg->key;
		fg->logged = true;
		fs->log_off[fs->n_log++] = g->off;
	} else {
		fs->tier_starts++;
	}
	fg->due = fs->latency[fg->side] == UINT64_MAX
		      ? UINT64_MAX
		      : fs->now + fs->latency[fg->side];
	if (fg->side == SIDE_ORIGIN && fs->serve_ns && fg->due != UINT64_MAX) {
		/* Its turn at the server, then the way back. */
		if (fs->server_free < fs->now)
			fs->server_free = fs->now;
		fs->server_free += fs->serve_ns;
		fg->due = fs->server_free + fs->latency[SIDE_ORIGIN];
	}
	fg->running = true;
	fg->seq = fs->seq++;
	fs->run[fs->n_run++] = fg;
	if (fs->n_run > fs->running_max)
		fs->running_max = fs->n_run;
	/* As curl's does (its timer is due at once after an add): the
	 * next run() returns at once, so the loop looks at what it armed. */
	fs->woken[fg->net] = true;
out:
	pthread_mutex_unlock(&fs->mu);
	return rc;
}

static void f_cancel(struct pf_source *s, struct pf_get *g,
		     struct s3_status *st)
{
	struct fake_source *fs = fs_of(s);

	pthread_mutex_lock(&fs->mu);
	run_remove(fs, g->h);
	fs->cancels[side_of(s)]++;
	pthread_mutex_unlock(&fs->mu);
	*st = (struct s3_status){.kind = S3_ERR_NETWORK};
	strcpy(st->message, "cancelled");
}

static bool f_running(const struct pf_source *s, const struct pf_get *g)
{
	struct fake_source *fs = fs_of(s);
	bool r;

	pthread_mutex_lock(&fs->mu);
	r = g->h && ((struct fget *)g->h)->running;
	pthread_mutex_unlock(&fs->mu);
	return r;
}

static uint64_t f_run(struct pf_source *s, int timeout_ms, bool *timed_out)
{
	struct fake_source *fs = fs_of(s);
	int net = net_of(s);
	uint64_t t0 = mono_ns();

	*timed_out = false;
	pthread_mutex_lock(&fs->mu);
	fs->run_until[net] = fs->now + (uint64_t)timeout_ms * MS;
	for (;;) {
		if (fs->woken[net] && !fs->hold) {
			fs->woken[net] = false;
			break;
		}
		if (first_due(fs, net))
			break;
		if (fs->now >= fs->run_until[net]) {
			*timed_out = timeout_ms > 0;
			break;
		}
		fs->waiting[net] = true;
		pthread_cond_broadcast(&fs->idle_cv);
		pthread_cond_wait(&fs->cv, &fs->mu);
		fs->waiting[net] = false;
	}
	fs->run_until[net] = UINT64_MAX;
	pthread_mutex_unlock(&fs->mu);
	return mono_ns() - t0;
}

/* The object named @name in the store, or NULL. store.mu held. */
static struct fobj *store_find(const char *name, size_t name_len)
{
	for (unsigned i = 0; i < store.n; i++)
		if (strlen(store.objs[i].name) == name_len &&
		    !memcmp(store.objs[i].name, name, name_len))
			return &store.objs[i];
	return NULL;
}

/* The store's answer to @fg's whole GET, into its buffer, as the curl
 * source gives it: the bytes or a -errno with @st, and the metadata. */
static ssize_t store_get(struct fget *fg, struct s3_status *st)
{
	struct pf_get *g = fg->g;
	struct fobj *o;
	ssize_t got;

	pthread_mutex_lock(&store.mu);
	o = store_find(fg->key, strlen(fg->key));
	if (!o) {
		st->kind = S3_ERR_STALE;
		st->http = 404;
		snprintf(st->code, sizeof(st->code), "NoSuchKey");
		got = -ENOENT;
	} else if (o->len > g->len) {
		/* What s3_xfer says of a body longer than the buffer. */
		st->kind = S3_ERR_OTHER;
		snprintf(st->code, sizeof(st->code), "BodyTooLarge");
		got = -EPROTO;
	} else {
		memcpy(g->buf, o->data, o->len);
		fg->meta = o->meta;
		fg->meta.length = o->len;
		fg->meta.has_length = true;
		fg->has_meta = true;
		got = (ssize_t)o->len;
	}
	pthread_mutex_unlock(&store.mu);
	return got;
}

static struct pf_get *f_next_done(struct pf_source *s, ssize_t *got,
				  bool *retryable, struct s3_status *st)
{
	struct fake_source *fs = fs_of(s);
	struct fget *fg;
	struct pf_get *g;

	pthread_mutex_lock(&fs->mu);
	fg = first_due(fs, net_of(s));
	if (!fg) {
		pthread_mutex_unlock(&fs->mu);
		return NULL;
	}
	run_remove(fs, fg);
	g = fg->g;
	*st = (struct s3_status){.kind = S3_ERR_NONE};
	if (fg->side == SIDE_ORIGIN && fs->fail.times > 0) {
		fs->fail.times--;
		st->kind = fs->fail.kind;
		st->http = st->kind == S3_ERR_SLOWDOWN ? 503
			   : st->kind == S3_ERR_STALE  ? 404
						       : 500;
		*got = -fs->fail.err;
		*retryable = fs->fail.retryable;
	} else if (fg->side == SIDE_TIER) {
		*got = store_get(fg, st);
		*retryable = false;
	} else {
		unsigned char *b = g->buf;

		for (size_t i = 0; i < g->len; i++)
			b[i] = fake_source_byte(fg->key, g->off + i);
		*got = (ssize_t)g->len;
		*retryable = false;
	}
	pthread_mutex_unlock(&fs->mu);
	return g;
}

static const struct s3_obj_meta *f_meta(const struct pf_source *s,
					const struct pf_get *g)
{
	const struct fget *fg = g->h;

	return fg && fg->has_meta ? &fg->meta : NULL;
}

static void f_release(struct pf_source *s, struct pf_get *g)
{
	struct fake_source *fs = fs_of(s);
	struct fget *fg = g->h;

	if (!fg)
		return;
	pthread_mutex_lock(&fs->mu);
	if (fg->running) {
		run_remove(fs, fg);
		fs->taken_down++;
	}
	pthread_mutex_unlock(&fs->mu);
	if (!fg->logged)
		free(fg->key);
	free(fg);
}

static void f_wake(struct pf_source *s)
{
	struct fake_source *fs = fs_of(s);

	pthread_mutex_lock(&fs->mu);
	fs->woken[net_of(s)] = true;
	pthread_cond_broadcast(&fs->cv);
	pthread_mutex_unlock(&fs->mu);
}

static uint64_t f_now_ns(const struct pf_source *s)
{
	struct fake_source *fs = fs_of(s);
	uint64_t now;

	pthread_mutex_lock(&fs->mu);
	now = fs->now;
	pthread_mutex_unlock(&fs->mu);
	return now;
}

/* Stores (or replaces) object @name, with metadata @meta as the tier's
 * GETs give it back. store.mu held. */
static int store_set(const char *name, size_t name_len, const void *data,
		     size_t len, const struct s3_obj_meta *meta)
{
	struct fobj *o = store_find(name, name_len);
	unsigned char *d = malloc(len ? len : 1);

	if (!d)
		return -ENOMEM;
	memcpy(d, data, len);
	if (!o) {
		if (store.n == store.cap) {
			unsigned cap = store.cap ? 2 * store.cap : 64;
			void *p =
			    realloc(store.objs, cap * sizeof(*store.objs));

			if (!p) {
				free(d);
				return -ENOMEM;
			}
			store.objs = p;
			store.cap = cap;
		}
		o = &store.objs[store.n];
		o->name = strndup(name, name_len);
		if (!o->name) {
			free(d);
			return -ENOMEM;
		}
		store.n++;
	} else {
		free(o->data);
	}
	o->data = d;
	o->len = len;
	o->meta = *meta;
	return 0;
}

static int f_put(struct pf_source *s, const char *name, size_t name_len,
		 const void *data, size_t len,
		 const struct s3_meta_header *meta, size_t n_meta,
		 struct s3_status *st)
{
	struct s3_obj_meta m;
	int rc;

	memset(&m, 0, sizeof(m));
	*st = (struct s3_status){.kind = S3_ERR_NONE};
	for (size_t i = 0; i < n_meta; i++) {
		const char *n = meta[i].name, *v = meta[i].value;
		char *end;

		if (!strcmp(n, "hintfs-etag"))
			snprintf(m.origin_etag, sizeof(m.origin_etag), "%s", v);
		else if (!strcmp(n, "hintfs-xxh3"))
			snprintf(m.sum, sizeof(m.sum), "%s", v);
		else if (!strcmp(n, "hintfs-mac"))
			snprintf(m.mac, sizeof(m.mac), "%s", v);
		else if (!strcmp(n, "hintfs-size")) {
			m.origin_size = strtoull(v, &end, 10);
			m.has_origin_size = *v && !*end;
		}
	}
	pthread_mutex_lock(&store.mu);
	store.puts++;
	if (store.fail.times > 0) {
		store.fail.times--;
		st->kind = store.fail.kind;
		st->http = store.fail.http;
		rc = -store.fail.err;
	} else {
		rc = store_set(name, name_len, data, len, &m);
	}
	pthread_mutex_unlock(&store.mu);
	return rc;
}

static const struct retry_policy *f_retry(const struct pf_source *s)
{
	return &fs_of(s)->retry;
}

/* The engine does not own a test's source: fake_source_destroy() frees it. */
static void f_destroy(struct pf_source *s)
{
}

static const struct pf_source_ops f_ops = {
    .start = f_start,
    .cancel = f_cancel,
    .running = f_running,
    .run = f_run,
    .next_done = f_next_done,
    .meta = f_meta,
    .release = f_release,
    .wake = f_wake,
    .now_ns = f_now_ns,
    .put = f_put,
    .retry = f_retry,
    .destroy = f_destroy,
};

struct fake_source *fake_source_create(uint64_t latency_ms)
{
	return fake_source_create_n(latency_ms, 1);
}

struct fake_source *fake_source_create_n(uint64_t latency_ms, unsigned n)
{
	struct fake_source *fs = calloc(1, sizeof(*fs));

	if (!fs || !n || n > NETS) {
		free(fs);
		return NULL;
	}
	fs->nets = (int)n;
	for (int j = 0; j < NETS; j++) {
		for (int i = 0; i < SIDES; i++)
			fs->sides[j][i] = (struct fside){{&f_ops}, fs, i, j};
		fs->run_until[j] = UINT64_MAX;
	}
	pthread_mutex_init(&fs->mu, NULL);
	pthread_cond_init(&fs->cv, NULL);
	pthread_cond_init(&fs->idle_cv, NULL);
	/* Far from 0: the engine's "last SlowDown cut" starts at 0. */
	fs->now = 1000000 * MS;
	retry_policy_init(&fs->retry, 0, 0);
	fake_source_latency(fs, latency_ms);
	fake_source_tier_latency(fs, latency_ms);
	return fs;
}

void fake_source_destroy(struct fake_source *fs)
{
	if (!fs)
		return;
	/* The start log owns the keys it names (a GET's retries name the
	 * same one). */
	for (unsigned i = 0; i < fs->n_log; i++) {
		bool seen = false;

		for (unsigned j = 0; j < i && !seen; j++)
			seen = fs->log_key[j] == fs->log_key[i];
		if (!seen)
			free(fs->log_key[i]);
	}
	free(fs->log_key);
	free(fs->log_off);
	free(fs->run);
	pthread_cond_destroy(&fs->idle_cv);
	pthread_cond_destroy(&fs->cv);
	pthread_mutex_destroy(&fs->mu);
	free(fs);
}

struct pf_source *fake_source_base(struct fake_source *fs)
{
	return &fs->sides[0][SIDE_ORIGIN].base;
}

struct pf_source *fake_source_tier(struct fake_source *fs)
{
	return &fs->sides[0][SIDE_TIER].base;
}

struct pf_source *fake_source_base_n(struct fake_source *fs, unsigned i)
{
	return &fs->sides[i][SIDE_ORIGIN].base;
}

struct pf_source *fake_source_tier_n(struct fake_source *fs, unsigned i)
{
	return &fs->sides[i][SIDE_TIER].base;
}

/* Whether every instance's thread waits with nothing to do. fs->mu held. */
static bool all_idle(struct fake_source *fs)
{
	for (int j = 0; j < fs->nets; j++)
		if (!fs->waiting[j] || (fs->woken[j] && !fs->hold))
			return false;
	return !first_due(fs, -1);
}

static void set_latency(struct fake_source *fs, int side, uint64_t ms)
{
	pthread_mutex_lock(&fs->mu);
	fs->latency[side] = ms == UINT64_MAX ? UINT64_MAX : ms * MS;
	pthread_mutex_unlock(&fs->mu);
}

void fake_source_latency(struct fake_source *fs, uint64_t ms)
{
	set_latency(fs, SIDE_ORIGIN, ms);
}

void fake_source_capacity(struct fake_source *fs, unsigned per_s)
{
	pthread_mutex_lock(&fs->mu);
	fs->serve_ns = per_s ? 1000000000ull / per_s : 0;
	pthread_mutex_unlock(&fs->mu);
}

void fake_source_tier_latency(struct fake_source *fs, uint64_t ms)
{
	set_latency(fs, SIDE_TIER, ms);
}

void fake_source_fail(struct fake_source *fs, enum s3_err_kind kind, int err,
		      bool retryable, int times)
{
	pthread_mutex_lock(&fs->mu);
	fs->fail.kind = kind;
	fs->fail.err = err;
	fs->fail.retryable = retryable;
	fs->fail.times = times;
	pthread_mutex_unlock(&fs->mu);
}

void fake_source_store_reset(void)
{
	pthread_mutex_lock(&store.mu);
	for (unsigned i = 0; i < store.n; i++) {
		free(store.objs[i].name);
		free(store.objs[i].data);
	}
	free(store.objs);
	store.objs = NULL;
	store.n = store.cap = store.puts = 0;
	store.fail.times = 0;
	pthread_mutex_unlock(&store.mu);
}

int fake_source_store_put(const char *name, const void *data, size_t len)
{
	struct s3_obj_meta none;
	int rc;

	memset(&none, 0, sizeof(none));
	pthread_mutex_lock(&store.mu);
	rc = store_set(name, strlen(name), data, len, &none);
	pthread_mutex_unlock(&store.mu);
	return rc;
}

void fake_source_put_fail(enum s3_err_kind kind, int err, long http, int times)
{
	pthread_mutex_lock(&store.mu);
	store.fail.kind = kind;
	store.fail.err = err;
	store.fail.http = http;
	store.fail.times = times;
	pthread_mutex_unlock(&store.mu);
}

unsigned fake_source_puts(void)
{
	unsigned n;

	pthread_mutex_lock(&store.mu);
	n = store.puts;
	pthread_mutex_unlock(&store.mu);
	return n;
}

/* Until every thread waits with nothing to do, for 5 s at most (false
 * then). fs->mu held. */
static bool wait_idle(struct fake_source *fs)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	while (!all_idle(fs))
		if (pthread_cond_timedwait(&fs->idle_cv, &fs->mu, &ts))
			return false;
	return true;
}

bool fake_source_settle(struct fake_source *fs)
{
	bool ok;

	pthread_mutex_lock(&fs->mu);
	ok = wait_idle(fs);
	pthread_mutex_unlock(&fs->mu);
	return ok;
}

void fake_source_advance(struct fake_source *fs, uint64_t ms)
{
	uint64_t target;

	fake_source_settle(fs);
	pthread_mutex_lock(&fs->mu);
	target = fs->now + ms * MS;
	pthread_mutex_unlock(&fs->mu);
	for (;;) {
		uint64_t next = target;

		pthread_mutex_lock(&fs->mu);
		/* Idle again under the lock that moves the clock: a thread
		 * woken since the last settle (by the cache writer, whose
		 * commits run on real time) may have taken parts at the old
		 * time and not yet started them, and would start them at the
		 * new one: their GETs would look a step slower than they
		 * are. */
		wait_idle(fs);
		for (unsigned i = 0; i < fs->n_run; i++)
			if (fs->run[i]->due < next)
				next = fs->run[i]->due;
		for (int j = 0; j < fs->nets; j++)
			if (fs->run_until[j] > fs->now &&
			    fs->run_until[j] < next)
				next = fs->run_until[j];
		if (next > fs->now)
			fs->now = next;
		/* Not settled until every thread has looked at the new
		 * time (each sets waiting again when it waits again). */
		for (int j = 0; j < fs->nets; j++)
			fs->waiting[j] = false;
		pthread_cond_broadcast(&fs->cv);
		pthread_mutex_unlock(&fs->mu);
		fake_source_settle(fs);
		if (next >= target)
			break;
	}
}

void fake_source_jump(struct fake_source *fs, uint64_t ns)
{
	pthread_mutex_lock(&fs->mu);
	fs->now += ns;
	pthread_mutex_unlock(&fs->mu);
}

void fake_source_hold(struct fake_source *fs, bool on)
{
	pthread_mutex_lock(&fs->mu);
	fs->hold = on;
	pthread_cond_broadcast(&fs->cv);
	pthread_mutex_unlock(&fs->mu);
}

/* @field of @fs, read under its lock. */
static unsigned read_u(struct fake_source *fs, const unsigned *field)
{
	unsigned n;

	pthread_mutex_lock(&fs->mu);
	n = *field;
	pthread_mutex_unlock(&fs->mu);
	return n;
}

unsigned fake_source_running(struct fake_source *fs)
{
	return read_u(fs, &fs->n_run);
}

unsigned fake_source_running_max(struct fake_source *fs)
{
	return read_u(fs, &fs->running_max);
}

unsigned fake_source_starts(struct fake_source *fs)
{
	return read_u(fs, &fs->n_log);
}

const char *fake_source_started(struct fake_source *fs, unsigned i,
				uint64_t *off)
{
	const char *k = NULL;

	pthread_mutex_lock(&fs->mu);
	if (i < fs->n_log) {
		k = fs->log_key[i];
		if (off)
			*off = fs->log_off[i];
	}
	pthread_mutex_unlock(&fs->mu);
	return k;
}

unsigned fake_source_tier_starts(struct fake_source *fs)
{
	return read_u(fs, &fs->tier_starts);
}

unsigned fake_source_tier_cancels(struct fake_source *fs)
{
	return read_u(fs, &fs->cancels[SIDE_TIER]);
}

unsigned fake_source_taken_down(struct fake_source *fs)
{
	return read_u(fs, &fs->taken_down);
}

unsigned fake_source_starts_on(struct fake_source *fs, unsigned i)
{
	return read_u(fs, &fs->starts_on[i]);
}
