/*
 * tests/unit/test_engine.c - the engine's policies (prefetch/engine.c's
 * top comment) on the fake source of fake_source.c: a real cache in a
 * temporary directory, the real engine and its threads, GETs answered in
 * memory on a virtual clock. No server, no mount; each test runs in
 * milliseconds and would fail with its policy broken:
 * - a reader's miss starts before the hint's prefetches queued before it;
 * - fetch buffers stay within fetch_mem, however wide the window; without
 *   one asked for, it follows the network threads;
 * - the in-flight limit halves on SlowDown (once for a burst);
 * - GETs in flight follow the work (engine_limit.c): readers needing
 *   2,000 objects/s get them at 100 ms as at 20 ms; a cold start runs 64
 *   and ramps up; SlowDown cuts a grown limit and slows its growth; the
 *   limit never passes max_inflight nor what fetch_mem holds; a server
 *   that queues instead of answering SlowDown does not get the cap's
 *   worth of GETs (the latency brake);
 * - the hint's prefetch is paced by its readers (PF_PACE_MIN at least);
 * - a reader waiting on the shared cache tier goes to the origin at the
 *   hedge, within the hedge budget;
 * - a hung tier (GETs taken, never answered) is read around at the hung
 *   time, every running tier GET cut; 8 failures open the breaker, cut
 *   what runs, bypass the tier while open, and the tier is probed and
 *   used again once the open period ends;
 * - pf_cancel() ends a reader's wait at once, and pf_stop() takes down
 *   the GETs still running;
 * - what the origin served while the tier's breaker was open reaches the
 *   tier once it answers again, and another node reads it from there;
 * - an object above max_object_mem is cached by blocks (engine_block.c):
 *   a read fetches the blocks under it as ranges of the object, a
 *   sequential reader gets blocks ahead, range hints fetch the blocks
 *   they cover in their order (neighbours merged), eviction picks the
 *   block of furthest next use, a changed object reads ESTALE in a block
 *   not yet cached, and a new engine over the same cache reads the blocks
 *   with no GET.
 */
#include "fake_source.h"
#include "source_fail.h"
#include "check.h"
#include "prefetch/prefetch.h"
#include "cache/cache.h"
#include "common/test_hook.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KIB	   1024ull
#define MIB	   (1024ull * KIB)
#define LATENCY_MS 10
/* Network threads of the engines env_start() makes: main() runs the
 * policies' tests again with several. */
#define NETS_MAX 8
static unsigned env_nets = 1;

struct env {
	struct fake_source *fs;
	/* Each network thread's pair of the fake's sources under a failure
	 * wrapper (source_fail.h), all on the one plan: passes by default. */
	struct sf_plan plan;
	struct source_fail *sf[NETS_MAX];
	struct pf_source *srcs[NETS_MAX], *tier_srcs[NETS_MAX];
	struct cache *cache;
	struct pf *pf;
	char dir[64];
	uint32_t n;
	uint64_t size;
	uint32_t big_id;   /* with big_size: the one object of that size */
	uint64_t big_size; /* 0: none */
};

static int describe(void *arg, uint32_t id, char *keybuf, size_t cap,
		    struct pf_object *o)
{
	struct env *e = arg;
	int n = snprintf(keybuf, cap, "obj/%05u", id);

	if (id >= e->n || n < 0 || (size_t)n >= cap)
		return -ENOENT;
	o->key = keybuf;
	o->key_len = (size_t)n;
	/* An MD5's shape: the tier can bind a copy to it. */
	o->etag = "\"0123456789abcdef0123456789abcdef\"";
	o->size = e->big_size && id == e->big_id ? e->big_size : e->size;
	return 0;
}

static uint64_t size_of(void *arg, uint32_t id)
{
	struct env *e = arg;

	return id >= e->n			? 0
	       : e->big_size && id == e->big_id ? e->big_size
						: e->size;
}

/* The next engine's cache capacity; 0: 1 GiB. */
static uint64_t cache_cap;

static uint32_t key_id(void *arg, const char *key, size_t key_len)
{
	return PF_NO_ID;
}

/* @cfg's sources: the fake's, one instance per network thread (env_nets),
 * each pair under its failure wrapper; with a hedge set
 * (cfg->tier_hedge_ms), a tier on the fake's tier side (its GETs and
 * PUTs). */
static void env_sources(struct env *e, struct pf_config *cfg)
{
	bool tier = cfg->tier_hedge_ms != 0;

	for (unsigned i = 0; i < env_nets; i++) {
		if (!e->sf[i])
			e->sf[i] = source_fail_create(
			    fake_source_base_n(e->fs, i),
			    tier ? fake_source_tier_n(e->fs, i) : NULL,
			    sf_plan_rule, &e->plan);
		CHECK(e->sf[i] != NULL);
		e->srcs[i] = source_fail_origin(e->sf[i]);
		e->tier_srcs[i] = source_fail_tier(e->sf[i]);
	}
	cfg->source = e->srcs[0];
	cfg->tier_source = e->tier_srcs[0];
	if (env_nets == 1)
		return;
	cfg->net_threads = env_nets;
	cfg->sources = e->srcs;
	if (cfg->tier_hedge_ms)
		cfg->tier_sources = e->tier_srcs;
}

/* An engine over @n objects of @size bytes on a fake source; @cfg's
 * limits as given (the rest filled here). */
static void env_start_big(struct env *e, uint32_t n, uint64_t size,
			  struct pf_config cfg, uint32_t big_id,
			  uint64_t big_size)
{
	char err[256];

	memset(e, 0, sizeof(*e));
	e->n = n;
	e->size = size;
	e->big_id = big_id;
	e->big_size = big_size;
	e->fs = fake_source_create_n(LATENCY_MS, env_nets);
	CHECK(e->fs != NULL);
	sf_plan_init(&e->plan);
	strcpy(e->dir, "/tmp/hintfs-test-engine-XXXXXX");
	CHECK(mkdtemp(e->dir) != NULL);
	struct cache_config cc = {
	    .dir = e->dir, .capacity = cache_cap ? cache_cap : 1024 * MIB};
	CHECK(cache_open(&cc, &e->cache, err, sizeof(err)) == 0);
	cfg.cache = e->cache;
	cfg.describe = describe;
	cfg.key_id = key_id;
	cfg.size = big_size ? size_of : NULL;
	cfg.arg = e;
	cfg.n_ids = n;
	env_sources(e, &cfg);
	if (cfg.tier_hedge_ms)
		cfg.origin_bucket = "b";
	CHECK(pf_start(&cfg, &e->pf) == 0);
}

static void env_start(struct env *e, uint32_t n, uint64_t size,
		      struct pf_config cfg)
{
	env_start_big(e, n, size, cfg, 0, 0);
}

/* Stops it all; returns how many GETs pf_stop() took down running. */
static unsigned env_stop(struct env *e)
{
	char cmd[128];
	unsigned down;

	pf_stop(e->pf);
	down = fake_source_taken_down(e->fs);
	for (unsigned i = 0; i < NETS_MAX; i++)
		source_fail_destroy(e->sf[i]);
	pthread_mutex_destroy(&e->plan.mu);
	cache_close(e->cache);
	fake_source_destroy(e->fs);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
	if (system(cmd))
		fprintf(stderr, "cannot remove %s\n", e->dir);
	return down;
}

/* Hints ids [0, n) to stream "rank0". */
static void hint_all(struct env *e, uint32_t n)
{
	uint32_t *ids = malloc(n * sizeof(*ids));

	for (uint32_t i = 0; i < n; i++)
		ids[i] = i;
	CHECK(pf_hint(e->pf, "rank0", ids, n, 0, false, 0) == 0);
	free(ids);
}

static bool started_is(struct env *e, unsigned i, uint32_t id)
{
	char want[32];
	const char *k = fake_source_started(e->fs, i, NULL);

	snprintf(want, sizeof(want), "obj/%05u", id);
	return k && !strcmp(k, want);
}

struct reader {
	struct env *e;
	uint32_t id;
	size_t len;
	ssize_t rc;
	unsigned char buf[4096];
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;

	r->rc = pf_read(r->e->pf, r->id, r->buf, r->len, 0);
	return NULL;
}

/* Reads that started or joined a fetch. */
static uint64_t fetch_reads(struct env *e)
{
	struct pf_stats st;

	pf_get_stats(e->pf, &st);
	return st.demand_fetches + st.prefetch_joins;
}

/*
 * Starts a reader of @id and returns once its miss is queued and the
 * engine has seen it: the counter moves under the engine's lock in the
 * same hold as the reader's parts are queued and the engine woken.
 */
static void reader_start(struct env *e, struct reader *r, pthread_t *t,
			 uint32_t id)
{
	uint64_t n = fetch_reads(e);

	*r = (struct reader){.e = e, .id = id, .len = sizeof(r->buf)};
	CHECK(pthread_create(t, NULL, reader_main, r) == 0);
	for (int i = 0; i < 5000 && fetch_reads(e) == n; i++)
		usleep(1000);
	CHECK(fake_source_settle(e->fs));
}

/* Waits (5 s at most) until the cache writer has committed @n objects
 * in all, and the engine has seen the memory come back. */
static void committed(struct env *e, uint64_t n)
{
	struct pf_stats st;

	for (int i = 0; i < 5000; i++) {
		pf_get_stats(e->pf, &st);
		if (st.commit_objects >= n)
			break;
		usleep(1000);
	}
	CHECK(st.commit_objects >= n);
	if (st.commit_objects < n)
		fprintf(stderr, "committed %llu of %llu (put failures %llu)\n",
			(unsigned long long)st.commit_objects,
			(unsigned long long)n,
			(unsigned long long)st.not_cached);
	CHECK(fake_source_settle(e->fs));
}

static bool bytes_ok(const struct reader *r)
{
	char key[32];

	snprintf(key, sizeof(key), "obj/%05u", r->id);
	for (size_t i = 0; i < r->len; i++)
		if (r->buf[i] != fake_source_byte(key, i))
			return false;
	return true;
}

/* The hint fills the in-flight limit; a reader's miss of an object far
 * down the hint is the first GET to start when one ends. */
static void test_demand_first(void)
{
	struct env e;
	struct reader r;
	pthread_t t;

	env_start(
	    &e, 100, 64 * KIB,
	    (struct pf_config){.max_inflight = 4, .pace_ms = PF_PACE_OFF});
	hint_all(&e, 100);
	CHECK(fake_source_settle(e.fs));
	CHECK(fake_source_running(e.fs) == 4);
	/* Several threads arm what they took in any order. */
	CHECK(env_nets > 1 || (started_is(&e, 0, 0) && started_is(&e, 3, 3)));
	reader_start(&e, &r, &t, 50);
	CHECK(fake_source_starts(e.fs) == 4); /* the limit holds it */
	fake_source_advance(e.fs, LATENCY_MS);
	if (env_nets == 1) {
		CHECK(started_is(&e, 4, 50));
		CHECK(started_is(&e, 5, 4));
	} else {
		/* The four slots that freed went to 50 and prefetches 4-6,
		 * armed by several threads in any order: 7 still waits. */
		bool miss = false, late = false;

		for (unsigned i = 4; i < 8; i++) {
			miss |= started_is(&e, i, 50);
			late |= started_is(&e, i, 7);
		}
		CHECK(miss && !late);
	}
	fake_source_advance(e.fs, LATENCY_MS);
	pthread_join(t, NULL);
	CHECK(r.rc == (ssize_t)r.len);
	CHECK(bytes_ok(&r));
	env_stop(&e);
}

/*
 * A reader waiting on the network wakes when its own fetch ends, not when
 * another reader's does: reader 1 waits through object 0's end and commit
 * and wakes once, at its own (with one wake-up for all, 8 readers on 8
 * objects woke 8 times per object).
 */
static void test_wake_own_fetch(void)
{
	struct env e;
	struct reader r[2];
	pthread_t t[2];
	struct pf_stats st;

	env_start(&e, 10, 4 * KIB, (struct pf_config){.pace_ms = PF_PACE_OFF});
	reader_start(&e, &r[0], &t[0], 0);
	fake_source_advance(e.fs, LATENCY_MS / 2);
	reader_start(&e, &r[1], &t[1], 1);
	fake_source_advance(e.fs, LATENCY_MS / 2); /* object 0 ends */
	pthread_join(t[0], NULL);
	committed(&e, 1);
	CHECK(r[0].rc == (ssize_t)r[0].len && bytes_ok(&r[0]));
	fake_source_advance(e.fs, LATENCY_MS / 2); /* object 1 ends */
	pthread_join(t[1], NULL);
	CHECK(r[1].rc == (ssize_t)r[1].len && bytes_ok(&r[1]));
	pf_get_stats(e.pf, &st);
	CHECK(st.stalls == 2);
	CHECK(st.read_wakeups == 2);
	env_stop(&e);
}

/* A window of 40 objects of 1 MiB with 4 MiB of fetch memory: never more
 * than 4 GETs at once, and every object still comes. */
static void test_fetch_mem_bound(void)
{
	struct pf_stats st;
	struct env e;

	env_start(&e, 40, 1 * MIB,
		  (struct pf_config){.max_inflight = 64,
				     .pace_ms = PF_PACE_OFF,
				     .part_size = 1 * MIB,
				     .fetch_mem = 4 * MIB});
	hint_all(&e, 40);
	CHECK(fake_source_settle(e.fs));
	CHECK(fake_source_running(e.fs) == 4);
	for (int i = 0; i < 200 && fake_source_starts(e.fs) < 40; i++) {
		fake_source_advance(e.fs, LATENCY_MS);
		usleep(1000); /* the writer commits, memory comes back */
	}
	CHECK(fake_source_starts(e.fs) == 40);
	CHECK(fake_source_running_max(e.fs) == 4);
	pf_get_stats(e.pf, &st);
	CHECK(st.fetch_mem_peak <= 4 * MIB);
	env_stop(&e);
}

/* 32 GETs answered SlowDown at once: the limit halves, once. */
static void test_slowdown_halves(void)
{
	struct pf_stats st;
	struct env e;

	env_start(
	    &e, 64, 16 * KIB,
	    (struct pf_config){.max_inflight = 32, .pace_ms = PF_PACE_OFF});
	hint_all(&e, 64);
	CHECK(fake_source_settle(e.fs));
	CHECK(fake_source_running(e.fs) == 32);
	pf_get_stats(e.pf, &st);
	CHECK(st.inflight_limit == 32);
	fake_source_fail(e.fs, S3_ERR_SLOWDOWN, EAGAIN, true, 32);
	fake_source_advance(e.fs, LATENCY_MS);
	pf_get_stats(e.pf, &st);
	CHECK(st.inflight_limit == 16);
	CHECK(st.retries == 32);
	/* The retries start at most 16 at a time. */
	fake_source_advance(e.fs, 2000);
	CHECK(fake_source_starts(e.fs) > 32);
	env_stop(&e);
}

/* No read yet: the prefetch runs PF_PACE_MIN (256) entries ahead, not the
 * whole window; readers that consumed 400 entries in the last second
 * take it 400 past the newest read. */
static void test_pacing(void)
{
	struct env e;
	unsigned n0, n1;

	env_start(&e, 2000, 4 * KIB,
		  (struct pf_config){.max_inflight = 64, .pace_ms = 1000});
	hint_all(&e, 2000);
	fake_source_advance(e.fs, 500);
	n0 = fake_source_starts(e.fs);
	CHECK(n0 >= 256 && n0 <= 258);
	/* Entries 257-399 are read before the engine looks: readers fetch
	 * them, the prefetch goes on from 400. */
	fake_source_hold(e.fs, true);
	for (uint32_t i = 0; i < 400; i++)
		pf_note_open(e.pf, i);
	fake_source_hold(e.fs, false);
	fake_source_advance(e.fs, 500);
	n1 = fake_source_starts(e.fs) - n0;
	CHECK(n1 == 400);
	if (n0 < 256 || n0 > 258 || n1 != 400)
		fprintf(stderr, "pacing: %u then %u GETs\n", n0, n1);
	env_stop(&e);
}

/* Whether object @id (of the env's size) is in the cache. */
static bool obj_cached(struct env *e, uint32_t id)
{
	char key[32];

	snprintf(key, sizeof(key), "obj/%05u", id);
	return cache_contains(e->cache, key, strlen(key),
			      "\"0123456789abcdef0123456789abcdef\"", e->size);
}

/* Ends every GET the engine starts, and waits until each ended in the
 * cache or was refused by it (what follows from that started too). */
static void drain(struct env *e)
{
	struct pf_stats st;

	for (int round = 0; round < 1000; round++) {
		CHECK(fake_source_settle(e->fs));
		if (fake_source_running(e->fs)) {
			fake_source_advance(e->fs, LATENCY_MS);
			continue;
		}
		for (int i = 0; i < 5000; i++) {
			pf_get_stats(e->pf, &st);
			if (st.commit_objects + st.not_cached >=
			    fake_source_starts(e->fs))
				break;
			usleep(1000);
		}
		CHECK(fake_source_settle(e->fs));
		if (!fake_source_running(e->fs))
			return;
	}
	CHECK(!"the engine's GETs came to an end");
}

/*
 * Reads hinted objects @from .. @to - 1 in order, as a trainer does (open,
 * read, close), the engine's GETs ended between reads; returns how many
 * were not in the cache when their reader came (each a GET it waits for:
 * not read here, as the virtual clock would not move).
 */
static unsigned read_in_order(struct env *e, uint32_t from, uint32_t to)
{
	unsigned char buf[64];
	unsigned missed = 0;

	for (uint32_t i = from; i < to; i++) {
		pf_note_open(e->pf, i);
		drain(e);
		if (obj_cached(e, i))
			CHECK(pf_read(e->pf, i, buf, sizeof(buf), 0) ==
			      (ssize_t)sizeof(buf));
		else
			missed++;
		pf_note_close(e->pf, i);
	}
	return missed;
}

/* The most GETs started for one object. */
static unsigned most_gets_of_one(struct env *e)
{
	unsigned most = 0, n = fake_source_starts(e->fs);

	for (unsigned i = 0; i < n; i++) {
		const char *k = fake_source_started(e->fs, i, NULL);
		unsigned same = 0;

		for (unsigned j = 0; j < n; j++)
			same += !strcmp(k, fake_source_started(e->fs, j, NULL));
		most = same > most ? same : most;
	}
	return most;
}

/*
 * A hint of 100 objects and a cache of 16 (PF_LEAD_MARGIN): the prefetch
 * runs 14 ahead, 7/8 of the cache, not the whole window (all 100 fetched at
 * once: 16 cached, 84 refused and fetched again at their reads), and goes
 * on one object per read; every read is a hit, each object fetched once.
 */
static void test_lead_within_cache(void)
{
	struct pf_stats st;
	struct env e;
	unsigned missed;

	cache_cap = 16 * 64 * KIB;
	env_start(
	    &e, 100, 64 * KIB,
	    (struct pf_config){.max_inflight = 64, .pace_ms = PF_PACE_OFF});
	cache_cap = 0;
	hint_all(&e, 100);
	drain(&e);
	CHECK(fake_source_starts(e.fs) == 14);
	missed = read_in_order(&e, 0, 100);
	CHECK(missed == 0);
	CHECK(fake_source_starts(e.fs) == 100);
	pf_get_stats(e.pf, &st);
	CHECK(st.not_cached == 0);
	CHECK(st.cache_hits == 100);
	CHECK(most_gets_of_one(&e) == 1);
	if (missed || fake_source_starts(e.fs) != 100)
		fprintf(stderr, "lead within cache: %u misses, %u GETs\n",
			missed, fake_source_starts(e.fs));
	env_stop(&e);
}

/*
 * Objects fetched ahead that the cache refuses (or evicts) before their
 * read are fetched ahead again, once reads made room, never at once. Four
 * of a cache of 16 are held open (next use 0), which the lead's bound does
 * not see: of the 14 objects it fetches, 12 fit, and the others leave. No
 * churn: with no read, nothing more is fetched however long the engine
 * waits (the refused ones fetched at once would be refused again, and
 * again). Then every read is a hit (without the second fetch, the reads
 * of the refused ones each wait for a GET), and no object is fetched more
 * than twice: the lead's bound learned from the cache holds until
 * PF_LEAD_RELEARN leads were read.
 */
static void test_refused_fetched_again(void)
{
	struct pf_stats st;
	struct reader r[4];
	pthread_t t[4];
	struct env e;
	unsigned missed, n0;

	cache_cap = 16 * 64 * KIB;
	env_start(
	    &e, 104, 64 * KIB,
	    (struct pf_config){.max_inflight = 64, .pace_ms = PF_PACE_OFF});
	cache_cap = 0;
	for (uint32_t k = 0; k < 4; k++) {
		pf_note_open(e.pf, 100 + k);
		reader_start(&e, &r[k], &t[k], 100 + k);
	}
	fake_source_advance(e.fs, LATENCY_MS);
	for (int k = 0; k < 4; k++) {
		pthread_join(t[k], NULL);
		CHECK(r[k].rc == (ssize_t)r[k].len);
	}
	drain(&e);
	hint_all(&e, 100);
	drain(&e);
	n0 = fake_source_starts(e.fs);
	CHECK(n0 == 4 + 14);
	pf_get_stats(e.pf, &st);
	CHECK(st.not_cached + st.requeued >= 2);
	CHECK(st.requeued >= 1);
	/* No churn: nothing read, nothing fetched again. */
	fake_source_advance(e.fs, 1000);
	drain(&e);
	CHECK(fake_source_starts(e.fs) == n0);
	missed = read_in_order(&e, 0, 100);
	CHECK(missed == 0);
	/* Each object once, but for the few refused. */
	CHECK(fake_source_starts(e.fs) <= 4 + 100 + 4);
	CHECK(most_gets_of_one(&e) <= 2);
	if (missed || fake_source_starts(e.fs) > 4 + 100 + 4)
		fprintf(stderr, "refused fetched again: %u misses, %u GETs\n",
			missed, fake_source_starts(e.fs));
	for (uint32_t k = 0; k < 4; k++)
		pf_note_close(e.pf, 100 + k);
	env_stop(&e);
}

/* A GET that never answers: pf_cancel() ends its reader's wait with
 * ECANCELED at once, not at the read deadline, and pf_stop() takes the
 * GET down (twice the 60 s budget plus
 * 5 s: the join's 10 s guard is no timing, only a hang cut short). */
static void test_cancel(void)
{
	struct env e;
	struct reader r;
	pthread_t t;

	env_start(
	    &e, 10, 64 * KIB,
	    (struct pf_config){.max_inflight = 4, .pace_ms = PF_PACE_OFF});
	fake_source_latency(e.fs, UINT64_MAX);
	reader_start(&e, &r, &t, 3);
	CHECK(fake_source_running(e.fs) == 1);
	pf_cancel(e.pf);
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	if (pthread_timedjoin_np(t, NULL, &ts)) {
		CHECK(!"pf_cancel() ended the reader's wait");
		exit(check_done()); /* the reader still uses the engine */
	}
	CHECK(r.rc == -ECANCELED);
	CHECK(env_stop(&e) == 1);
}

/*
 * The tier's hedge and its budget (1 hedge per 200 tier GETs, 2 saved at
 * most): with none earned, a reader waits on for the tier past the hedge;
 * after 400 tier GETs (misses, then read from the origin), of three
 * readers waiting on a tier that does not answer, two are sent to the
 * origin at the hedge and get their bytes, the third waits on.
 */
static void test_hedge_budget(void)
{
	struct reader r[4];
	struct pf_stats st;
	pthread_t t[4];
	struct env e;
	uint32_t ids[400];

	env_start(&e, 500, 16 * KIB,
		  (struct pf_config){.max_inflight = 64,
				     .pace_ms = PF_PACE_OFF,
				     .tier_hedge_ms = 50});
	fake_source_tier_latency(e.fs, UINT64_MAX);
	reader_start(&e, &r[0], &t[0], 0);
	CHECK(fake_source_tier_starts(e.fs) == 1);
	fake_source_advance(e.fs, 250);
	CHECK(fake_source_tier_cancels(e.fs) == 0);
	CHECK(fake_source_starts(e.fs) == 0);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.hedge_denied == 1);

	/* 400 prefetches: each a tier miss (nothing there), then the
	 * origin. */
	fake_source_tier_latency(e.fs, LATENCY_MS);
	for (uint32_t i = 0; i < 400; i++)
		ids[i] = 1 + i;
	CHECK(pf_hint(e.pf, "rank0", ids, 400, 0, false, 0) == 0);
	for (int i = 0; i < 100 && fake_source_starts(e.fs) < 400; i++)
		fake_source_advance(e.fs, LATENCY_MS);
	fake_source_advance(e.fs, 2 * LATENCY_MS); /* the last answers */
	CHECK(fake_source_tier_starts(e.fs) == 401);
	CHECK(fake_source_starts(e.fs) == 400);
	committed(&e, 400);

	fake_source_tier_latency(e.fs, UINT64_MAX);
	for (int i = 1; i < 4; i++)
		reader_start(&e, &r[i], &t[i], 400 + (uint32_t)i);
	CHECK(fake_source_tier_starts(e.fs) == 404);
	fake_source_advance(e.fs, 250);
	CHECK(fake_source_tier_cancels(e.fs) == 2);
	CHECK(fake_source_starts(e.fs) == 402);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.hedged == 2);
	CHECK(st.tier_st.hedge_denied == 2);
	if (st.tier_st.hedged != 2)
		pf_cancel(
		    e.pf); /* else readers 1 and 2 wait for the deadline */
	for (int i = 1; i < 3; i++) {
		pthread_join(t[i], NULL);
		CHECK(r[i].rc == (ssize_t)r[i].len && bytes_ok(&r[i]));
	}
	pf_cancel(e.pf);
	pthread_join(t[0], NULL);
	pthread_join(t[3], NULL);
	CHECK(r[0].rc == -ECANCELED && r[3].rc == -ECANCELED);
	env_stop(&e);
}

/* Waits (5 s of real time at most) until no PUT to the tier is pending;
 * the engine's stats in @st. */
static void tier_puts_settled(struct env *e, struct pf_stats *st)
{
	for (int i = 0; i < 500; i++) {
		pf_get_stats(e->pf, st);
		if (!st->tier_st.put_pending)
			break;
		usleep(10000);
	}
}

/* Hints all @n objects (of @e->size bytes) and moves the clock until each
 * is committed; after each step the cache writer catches up first, so
 * that the virtual clock never runs ahead of it (the tier's breaker and
 * PUTs see the time the engine does). */
static void epoch(struct env *e, uint32_t n)
{
	struct pf_stats st;

	hint_all(e, n);
	for (int i = 0; i < 400; i++) {
		pf_get_stats(e->pf, &st);
		if (st.commit_objects >= n)
			break;
		fake_source_advance(e->fs, LATENCY_MS);
		pf_get_stats(e->pf, &st);
		committed(e, st.bytes / e->size);
	}
	committed(e, n);
}

/*
 * The tier hangs in epoch 1, the breaker opens and every
 * object is read from the origin (its tier GET cut, or bypassed). Once the
 * open period ends and the tier answers again, all of them are written to
 * it; a second node (its own empty cache) then reads every object from the
 * tier and none from the origin. Before, nothing bypassed was ever PUT and
 * the second node read all of them from the origin again.
 */
static void test_tier_owed_puts(void)
{
	const uint32_t n = 100;
	struct pf_config cfg = {.max_inflight = 64,
				.pace_ms = PF_PACE_OFF,
				.tier_hedge_ms = 50,
				.tier_key = "the cluster's 32-byte secret key",
				.tier_key_len = 32};
	struct pf_stats st;
	struct env e;

	fake_source_store_reset();
	env_start(&e, n, 16 * KIB, cfg);
	/* Epoch 1: the tier accepts GETs and never answers. */
	fake_source_tier_latency(e.fs, UINT64_MAX);
	epoch(&e, n);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.breaker_opens == 1 && st.tier_st.hits == 0);
	CHECK(fake_source_starts(e.fs) == n);
	CHECK(st.tier_st.puts == 0 && fake_source_puts() == 0);
	/* It answers again; the open period (1 s) ends. */
	fake_source_tier_latency(e.fs, LATENCY_MS);
	fake_source_advance(e.fs, 1000);
	tier_puts_settled(&e, &st);
	CHECK(st.tier_st.put_pending == 0 && !st.tier_st.breaker_open);
	CHECK(st.tier_st.puts == n && st.tier_st.put_dropped == 0);
	if (st.tier_st.puts != n)
		fprintf(stderr, "tier: %llu PUT of %u, %llu bypassed\n",
			(unsigned long long)st.tier_st.puts, n,
			(unsigned long long)st.tier_st.bypassed);
	env_stop(&e);

	/* Another node, its local cache empty: all from the tier. */
	env_start(&e, n, 16 * KIB, cfg);
	epoch(&e, n);
	pf_get_stats(e.pf, &st);
	CHECK(fake_source_starts(e.fs) == 0);
	CHECK(st.tier_st.hits == n && st.tier_st.puts == 0);
	env_stop(&e);
}

/* Hints ids [@from, @from + @n) to stream @stream, queued behind its
 * hints (another stream's fetches keep running). */
static void hint_ids(struct env *e, const char *stream, uint32_t from,
		     uint32_t n)
{
	uint32_t *ids = malloc(n * sizeof(*ids));

	for (uint32_t i = 0; i < n; i++)
		ids[i] = from + i;
	CHECK(pf_hint(e->pf, stream, ids, n, 0, false, 0) == 0);
	free(ids);
	CHECK(fake_source_settle(e->fs));
}

/* Joins reader @t, which must have ended by now: the virtual clock stands
 * still, so nothing more would end its wait (10 s of real time at most;
 * past that it is cancelled and the check fails). */
static void reader_ended(struct env *e, pthread_t t)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	if (pthread_timedjoin_np(t, NULL, &ts)) {
		CHECK(!"the reader had its bytes by now");
		pf_cancel(e->pf);
		pthread_join(t, NULL);
	}
}

/*
 * A tier that takes GETs and never answers (hung): when the oldest has
 * waited the hung time (500 ms) and nothing answered, the breaker opens
 * and every tier GET still running is cut and read from the origin, the
 * hint's prefetches with the reader's. The reader (its hedge denied: no
 * budget earned yet) has its bytes by 500 ms and the origin's latency,
 * not at the attempt's timeout (2 s) nor never; nothing goes to the
 * origin before.
 */
static void test_tier_hung(void)
{
	const uint32_t n = 64;
	struct pf_stats st;
	struct reader r;
	pthread_t t;
	struct env e;

	env_start(&e, n, 16 * KIB,
		  (struct pf_config){.max_inflight = 64,
				     .pace_ms = PF_PACE_OFF,
				     .tier_hedge_ms = 50});
	sf_plan_set(&e.plan, SF_TIER, sf_hang(), 0, sf_hang());
	hint_ids(&e, "rank0", 0, n - 1);
	reader_start(&e, &r, &t, n - 1);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.gets == n);
	fake_source_advance(e.fs, 490);
	pf_get_stats(e.pf, &st);
	CHECK(fake_source_starts(e.fs) == 0 && !st.tier_st.breaker_open);
	CHECK(st.tier_st.bypassed == 0);
	/* 500 ms: hung; the origin answers 10 ms later. */
	fake_source_advance(e.fs, 10 + 2 * LATENCY_MS);
	reader_ended(&e, t);
	CHECK(r.rc == (ssize_t)r.len && bytes_ok(&r));
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.breaker_opens == 1 && st.tier_st.breaker_open);
	/* Every one cut by the breaker (counted as bypassed). */
	CHECK(st.tier_st.bypassed == n && st.tier_st.hits == 0);
	CHECK(fake_source_starts(e.fs) == n);
	committed(&e, n);
	env_stop(&e);
}

/*
 * The breaker: 8 tier GETs that fail with nothing answered between open
 * it, and the tier GETs still running are cut at once and read from the
 * origin; while it is open every fetch bypasses the tier; once the open
 * period (1 s) ends the tier is probed again (a PUT owed meanwhile), and
 * answering, it is used again by the next fetches.
 */
static void test_tier_breaker(void)
{
	struct pf_stats st;
	struct env e;

	fake_source_store_reset();
	/* A key: the fake's bytes are not their ETag's MD5, and only what
	 * is bound is PUT. */
	env_start(
	    &e, 40, 16 * KIB,
	    (struct pf_config){.max_inflight = 64,
			       .pace_ms = PF_PACE_OFF,
			       .tier_hedge_ms = 50,
			       .tier_key = "the cluster's 32-byte secret key",
			       .tier_key_len = 32});
	/* 8 tier GETs that fail (500) at 10 ms, 8 that never answer. */
	sf_plan_set(&e.plan, SF_TIER,
		    sf_error(S3_ERR_SERVER, EIO, 500, LATENCY_MS), 8,
		    sf_hang());
	hint_ids(&e, "rank0", 0, 8);
	hint_ids(&e, "rank1", 8, 8);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.gets == 16);
	CHECK(fake_source_starts(e.fs) == 0);
	fake_source_advance(e.fs, LATENCY_MS);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.breaker_opens == 1 && st.tier_st.breaker_open);
	CHECK(st.tier_st.fallbacks == 8);
	/* The 8 running were cut then (by the breaker: counted as
	 * bypassed), not at the hung time. */
	CHECK(st.tier_st.bypassed == 8);
	CHECK(fake_source_starts(e.fs) == 16);
	fake_source_advance(e.fs, LATENCY_MS);
	committed(&e, 16);

	/* Open: the next fetches go straight to the origin. The tier
	 * answers again from now on. */
	sf_plan_set(&e.plan, SF_TIER, sf_pass(), 0, sf_pass());
	hint_ids(&e, "rank2", 16, 8);
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 24);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.gets == 16);
	CHECK(fake_source_starts(e.fs) == 24 && st.tier_st.bypassed == 16);
	CHECK(st.tier_st.puts == 0 && st.tier_st.breaker_open);

	/* The period ends: a held PUT probes, the tier answers, the breaker
	 * closes and what was owed is written. */
	fake_source_advance(e.fs, 1000);
	tier_puts_settled(&e, &st);
	CHECK(!st.tier_st.breaker_open && st.tier_st.puts == 16);
	/* The next fetches use the tier again. */
	hint_ids(&e, "rank3", 24, 8);
	pf_get_stats(e.pf, &st);
	CHECK(st.tier_st.gets == 24 && fake_source_tier_starts(e.fs) == 8);
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 32);
	CHECK(fake_source_starts(e.fs) == 32); /* misses: read there */
	env_stop(&e);
}

/* GETs of the fake that ended (started and no longer running). */
static unsigned gets_done(struct env *e)
{
	return fake_source_starts(e->fs) - fake_source_running(e->fs);
}

static uint32_t inflight_limit(struct env *e)
{
	struct pf_stats st;

	pf_get_stats(e->pf, &st);
	return st.inflight_limit;
}

/*
 * Readers consuming @rate objects/s (opens along the hint, 10 ms steps,
 * paced prefetch as the daemon runs it) for 3 s of virtual time, GETs
 * taking @latency_ms: returns the GETs that ended in the last 2 s (the
 * first is the ramp), and the limit at the end in *@limit.
 */
static unsigned paced_gets(uint64_t latency_ms, unsigned rate, uint32_t *limit)
{
	const unsigned per_step = rate / 100;
	struct env e;
	unsigned d0 = 0, d;
	uint32_t next = 0;

	env_start(&e, 8000, 4 * KIB, (struct pf_config){.pace_ms = 1000});
	fake_source_latency(e.fs, latency_ms);
	hint_all(&e, 8000);
	for (int step = 0; step < 300; step++) {
		if (step == 100)
			d0 = gets_done(&e);
		fake_source_hold(e.fs, true);
		for (unsigned k = 0; k < per_step; k++, next++) {
			pf_note_open(e.pf, next);
			pf_note_close(e.pf, next);
		}
		fake_source_hold(e.fs, false);
		fake_source_advance(e.fs, 10);
	}
	d = gets_done(&e) - d0;
	*limit = inflight_limit(&e);
	env_stop(&e);
	return d;
}

/*
 * Readers needing 2,000 objects/s get as many GETs at
 * 100 ms as at 20 ms (within 10%), because the limit grows with the
 * latency (Little's law: 200 in flight, not 40). With 64 in flight fixed,
 * 100 ms carried 640 objects/s: a third.
 */
static void test_latency_scaling(void)
{
	uint32_t lim20, lim100;
	unsigned d20 = paced_gets(20, 2000, &lim20);
	unsigned d100 = paced_gets(100, 2000, &lim100);

	CHECK(d20 >= 3600); /* 2 s of 2,000/s, 10% off at most */
	CHECK((uint64_t)d100 * 10 >= (uint64_t)d20 * 9);
	CHECK(lim100 >= 200 && lim100 > 2 * lim20);
	if (d20 < 3600 || (uint64_t)d100 * 10 < (uint64_t)d20 * 9 ||
	    lim100 < 200 || lim100 <= 2 * lim20)
		fprintf(stderr,
			"scaling: %u GETs in 2 s at 20 ms (limit %u), %u at "
			"100 ms (limit %u)\n",
			d20, lim20, d100, lim100);
}

/*
 * A server that serves 1,000 GETs a second and queues the rest, answering
 * no SlowDown (its latency grows with its queue): with a whole window of
 * work waiting, the limit would double up to the cap, 2,048 GETs queued
 * at the server and 2 s of it before every read. The brake undoes the
 * growths that bought no bytes: in flight stays within 256, and the
 * server is still kept busy (90% of its 1,000 a second).
 */
static void test_latency_brake(void)
{
	struct pf_stats st;
	unsigned d0, d;
	struct env e;

	env_start(
	    &e, 8000, 4 * KIB,
	    (struct pf_config){.pace_ms = PF_PACE_OFF, .window_objects = 8000});
	fake_source_latency(e.fs, 20);
	fake_source_capacity(e.fs, 1000);
	hint_all(&e, 8000);
	fake_source_advance(e.fs, 1000);
	d0 = gets_done(&e);
	fake_source_advance(e.fs, 2000);
	d = gets_done(&e) - d0;
	pf_get_stats(e.pf, &st);
	CHECK(d >= 1800);
	CHECK(st.inflight_limit <= 256);
	CHECK(fake_source_running(e.fs) <= 256);
	CHECK(st.inflight_brakes >= 1);
	if (d < 1800 || st.inflight_limit > 256)
		fprintf(stderr,
			"brake: %u GETs in 2 s, limit %u, %u running, %llu "
			"brakes\n",
			d, st.inflight_limit, fake_source_running(e.fs),
			(unsigned long long)st.inflight_brakes);
	env_stop(&e);
}

/*
 * A cold start with a whole window of work (no pacing) runs 64 GETs, not
 * the cap's 2,048 at once, and doubles each tick while work waits for a
 * slot: past 1,024 within a second at 100 ms, never past the cap.
 */
static void test_cold_start_ramp(void)
{
	struct env e;

	env_start(&e, 4000, 4 * KIB,
		  (struct pf_config){.pace_ms = PF_PACE_OFF});
	fake_source_latency(e.fs, 100);
	hint_all(&e, 4000);
	CHECK(fake_source_settle(e.fs));
	CHECK(fake_source_running(e.fs) == 64);
	CHECK(inflight_limit(&e) == 64);
	fake_source_advance(e.fs, 1000);
	CHECK(fake_source_running_max(e.fs) >= 1024);
	CHECK(fake_source_running_max(e.fs) <= 2048);
	CHECK(inflight_limit(&e) <= 2048);
	if (fake_source_running_max(e.fs) < 1024)
		fprintf(stderr, "ramp: %u in flight at most after 1 s\n",
			fake_source_running_max(e.fs));
	env_stop(&e);
}

/*
 * A server that accepts GETs and never answers (a hung tier, an overloaded
 * origin): work waits for slots, but no GET ends, so the limit does not
 * grow. Doubling there would only park more GETs on the silent server
 * (every object of a hint, where 64 were enough to learn it is silent).
 */
static void test_hung_server_grows_nothing(void)
{
	struct env e;

	env_start(&e, 4000, 4 * KIB,
		  (struct pf_config){.pace_ms = PF_PACE_OFF});
	fake_source_latency(e.fs, 3600 * 1000); /* an hour: never, here */
	hint_all(&e, 4000);
	CHECK(fake_source_settle(e.fs));
	fake_source_advance(e.fs, 1000);
	CHECK(fake_source_running_max(e.fs) <= 64);
	CHECK(inflight_limit(&e) <= 64);
	if (fake_source_running_max(e.fs) > 64)
		fprintf(stderr, "hung: %u in flight at most after 1 s\n",
			fake_source_running_max(e.fs));
	env_stop(&e);
}

/*
 * A grown limit halves on SlowDown, and grows back by an eighth a tick,
 * not twice: the server said where its limit is.
 */
static void test_slowdown_cuts_grown(void)
{
	struct env e;
	uint32_t grown, cut, after;

	env_start(&e, 6000, 4 * KIB,
		  (struct pf_config){.pace_ms = PF_PACE_OFF});
	fake_source_latency(e.fs, 100);
	hint_all(&e, 6000);
	fake_source_advance(e.fs, 450);
	grown = inflight_limit(&e);
	CHECK(grown >= 512);
	fake_source_fail(e.fs, S3_ERR_SLOWDOWN, EAGAIN, true, 10000);
	fake_source_advance(e.fs, 50); /* one burst of answers: one cut */
	cut = inflight_limit(&e);
	CHECK(cut <= grown / 2 && cut >= 4);
	fake_source_fail(e.fs, S3_ERR_SLOWDOWN, EAGAIN, true, 0);
	fake_source_advance(e.fs, 150); /* a tick or so, work waiting */
	after = inflight_limit(&e);
	CHECK(after <= cut + cut / 8 + 1);
	if (grown < 512 || cut > grown / 2 || after > cut + cut / 8 + 1)
		fprintf(stderr, "slowdown: %u, cut to %u, then %u\n", grown,
			cut, after);
	env_stop(&e);
}

/*
 * However much work waits, the GETs in flight stay within max_inflight
 * (256 here, reached) and within what fetch_mem holds (32 objects of
 * 1 MiB in 32 MiB), and the limit shown says so.
 */
static void test_limit_bounds(void)
{
	struct pf_stats st;
	struct env e;

	env_start(
	    &e, 4000, 4 * KIB,
	    (struct pf_config){.max_inflight = 256, .pace_ms = PF_PACE_OFF});
	fake_source_latency(e.fs, 100);
	hint_all(&e, 4000);
	fake_source_advance(e.fs, 1000);
	CHECK(fake_source_running_max(e.fs) == 256);
	pf_get_stats(e.pf, &st);
	CHECK(st.inflight_limit <= 256 && st.inflight_cap == 256);
	env_stop(&e);

	env_start(&e, 100, 1 * MIB,
		  (struct pf_config){.pace_ms = PF_PACE_OFF,
				     .part_size = 1 * MIB,
				     .fetch_mem = 32 * MIB});
	fake_source_latency(e.fs, 100);
	hint_all(&e, 100);
	for (int i = 0; i < 100 && fake_source_starts(e.fs) < 100; i++) {
		fake_source_advance(e.fs, 100);
		usleep(2000); /* the writer commits, memory comes back */
	}
	CHECK(fake_source_starts(e.fs) == 100);
	CHECK(fake_source_running_max(e.fs) <= 32);
	pf_get_stats(e.pf, &st);
	CHECK(st.fetch_mem_peak <= 32 * MIB);
	CHECK(st.inflight_limit <= 32);
	/* 100 ms a GET; a little more where a sanitizer's slowness made a
	 * settle run out before the engine saw an end (a step late). */
	CHECK(st.get_latency_ns >= 99000000 && st.get_latency_ns <= 110000000);
	env_stop(&e);
}

/* ---- objects cached by blocks ------------------------------------------ */

/* Object 1: 20 MiB + 5 KiB, blocks of 4 MiB (max_object_mem is 8 MiB:
 * half of fetch_mem), so 6 blocks, the last of 5 KiB. */
#define BIG_ID	 1u
#define BIG_SIZE (20 * MIB + 5 * KIB)
#define BLOCK	 (4 * MIB)
/* A range of half a block: a hint of it names the block (not sparse). */
#define HALF (BLOCK / 2)

static const struct pf_config big_cfg = {
    .pace_ms = PF_PACE_OFF, .part_size = BLOCK, .fetch_mem = 16 * MIB};

struct big_reader {
	struct env *e;
	uint64_t off;
	size_t len;
	ssize_t rc;
	unsigned char *buf;
};

static void *big_reader_main(void *arg)
{
	struct big_reader *r = arg;

	r->rc = pf_read(r->e->pf, BIG_ID, r->buf, r->len, r->off);
	return NULL;
}

/* Reads [off, off + len) of the big object on a thread, moving the
 * virtual clock until it is answered; returns its result. */
static ssize_t big_read(struct env *e, uint64_t off, size_t len,
			unsigned char *buf)
{
	struct big_reader r = {e, off, len, 0, buf};
	pthread_t t;

	CHECK(pthread_create(&t, NULL, big_reader_main, &r) == 0);
	for (int i = 0; i < 100; i++) {
		usleep(2000);
		CHECK(fake_source_settle(e->fs));
		fake_source_advance(e->fs, LATENCY_MS);
		if (pthread_tryjoin_np(t, NULL) == 0)
			return r.rc;
	}
	pthread_join(t, NULL);
	return r.rc;
}

static bool big_bytes_ok(const unsigned char *buf, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != fake_source_byte("obj/00001", off + i))
			return false;
	return true;
}

/* The offsets of the GETs started from @from on, all of object 1. */
static unsigned big_starts(struct env *e, unsigned from, uint64_t *offs,
			   unsigned max)
{
	unsigned n = 0;

	for (unsigned i = from; i < fake_source_starts(e->fs) && n < max; i++) {
		const char *k = fake_source_started(e->fs, i, &offs[n]);

		CHECK(k && !strcmp(k, "obj/00001"));
		n++;
	}
	return n;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Whether the first @n GETs of the big object (of @all GETs started) are
 * at the @n offsets @want (ascending), each once, in any order. */
static bool big_starts_are(struct env *e, unsigned all, const uint64_t *want,
			   unsigned n)
{
	uint64_t offs[64];
	unsigned k = 0;

	for (unsigned i = 0; i < all && k < 64; i++) {
		const char *key = fake_source_started(e->fs, i, &offs[k]);

		if (key && !strcmp(key, "obj/00001"))
			k++;
	}
	if (k != n)
		return false;
	qsort(offs, k, sizeof(*offs), u64_cmp);
	return !memcmp(offs, want, n * sizeof(*want));
}

/* A read across blocks 0 and 1 fetches those two blocks as ranges of the
 * object and gets the object's bytes; once committed, reading them again
 * makes no GET; a read past the end is cut at it. */
static void test_block_read(void)
{
	unsigned char *buf = malloc(64 * KIB);
	uint64_t offs[16];
	struct env e;
	unsigned n, m;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(big_read(&e, BLOCK - 32 * KIB, 64 * KIB, buf) ==
	      (ssize_t)(64 * KIB));
	CHECK(big_bytes_ok(buf, BLOCK - 32 * KIB, 64 * KIB));
	n = big_starts(&e, 0, offs, 16);
	CHECK(n >= 2 && offs[0] == 0 && offs[1] == BLOCK);
	committed(&e, n);
	m = fake_source_starts(e.fs);
	CHECK(big_read(&e, BLOCK - 32 * KIB, 64 * KIB, buf) ==
	      (ssize_t)(64 * KIB));
	CHECK(big_bytes_ok(buf, BLOCK - 32 * KIB, 64 * KIB));
	/* Going on from there asks blocks ahead, never 0 or 1 again. */
	n = big_starts(&e, m, offs, 16);
	for (unsigned i = 0; i < n; i++)
		CHECK(offs[i] >= 2 * BLOCK);
	/* The last block: 5 KiB, cut at the end. */
	CHECK(big_read(&e, BIG_SIZE - 4 * KIB, 64 * KIB, buf) ==
	      (ssize_t)(4 * KIB));
	CHECK(big_bytes_ok(buf, BIG_SIZE - 4 * KIB, 4 * KIB));
	CHECK(big_read(&e, BIG_SIZE, 16, buf) == 0);
	env_stop(&e);
	free(buf);
}

/* A reader that goes on from its last read has the blocks ahead of it
 * fetched before it asks; one that jumps around has none. */
static void test_block_read_ahead(void)
{
	unsigned char *buf = malloc(MIB);
	uint64_t offs[16];
	struct env e;
	unsigned n;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(big_read(&e, 0, MIB, buf) == (ssize_t)MIB);
	CHECK(big_read(&e, MIB, MIB, buf) == (ssize_t)MIB);
	CHECK(big_bytes_ok(buf, MIB, MIB));
	CHECK(fake_source_settle(e.fs));
	n = big_starts(&e, 0, offs, 16);
	/* Block 0 on demand, 1 and 2 ahead (PF_BLOCK_AHEAD), in whatever
	 * order the reader's and the network thread's turns gave. */
	CHECK(n == 3);
	CHECK(offs[0] + offs[1] + offs[2] == 3 * BLOCK);
	CHECK(offs[0] != offs[1] && offs[1] != offs[2] && offs[0] != offs[2]);
	env_stop(&e);
	free(buf);
}

/* Whether block @k of the big object is in the cache. */
static bool block_cached(struct env *e, unsigned k)
{
	char key[64];
	int n = snprintf(key, sizeof(key),
			 "obj/00001\xff"
			 "B%llu:%u",
			 (unsigned long long)BLOCK, k);
	uint64_t size =
	    BIG_SIZE - k * BLOCK < BLOCK ? BIG_SIZE - k * BLOCK : BLOCK;

	return cache_contains(e->cache, key, (size_t)n,
			      "\"0123456789abcdef0123456789abcdef\"", size);
}

/* Eviction by next use across blocks: a cache of three blocks and a half
 * (the lead takes 7/8 of it: three blocks) holds 0, 2 and 4 (hinted in
 * that order); the next hint, of blocks 1, 2, 0, brings block 1 in, and
 * the block it does not name (4) goes, not the least recently used (0). */
static void test_block_eviction_next_use(void)
{
	const struct pf_range r[] = {
	    {BIG_ID, BLOCK + 10, HALF},
	    {BIG_ID, 2 * BLOCK + 10, HALF},
	    {BIG_ID, 10, HALF},
	};
	const struct pf_range first[] = {
	    {BIG_ID, 10, HALF},
	    {BIG_ID, 2 * BLOCK + 10, HALF},
	    {BIG_ID, 4 * BLOCK + 10, HALF},
	};
	struct env e;

	cache_cap = 3 * BLOCK + BLOCK / 2;
	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	cache_cap = 0;
	CHECK(pf_hint_ranges(e.pf, "rank0", first, 3, 0, PF_QUEUE, 0) == 0);
	CHECK(fake_source_settle(e.fs));
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 3);
	CHECK(fake_source_starts(e.fs) == 3);
	CHECK(block_cached(&e, 0) && block_cached(&e, 2) &&
	      block_cached(&e, 4));
	/* The next epoch's order replaces this one's. */
	CHECK(pf_hint_ranges(e.pf, "rank0", r, 3, 1, PF_REPLACE, 0) == 0);
	CHECK(fake_source_settle(e.fs));
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 4);
	CHECK(block_cached(&e, 1));
	CHECK(block_cached(&e, 0) && block_cached(&e, 2));
	CHECK(!block_cached(&e, 4));
	env_stop(&e);
}

/* Readers that jump around a large object with no hint fetch the pages
 * they read (one GET each, not cached), not a block per read; a block a
 * hint names, or one cached, is read as a block. */
static void test_block_jumps_read_pages(void)
{
	const struct pf_range r = {BIG_ID, 3 * BLOCK + 10, HALF};
	unsigned char buf[8192];
	uint64_t offs[16];
	struct pf_stats st;
	struct env e;
	unsigned n;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(big_read(&e, 2 * BLOCK + 5000, 4096, buf) == 4096);
	CHECK(big_bytes_ok(buf, 2 * BLOCK + 5000, 4096));
	/* 5000..9096 lies in pages 1 and 2: 8 KiB from 4096. */
	n = big_starts(&e, 0, offs, 16);
	CHECK(n == 1 && offs[0] == 2 * BLOCK + 4096);
	CHECK(big_read(&e, 4 * BLOCK + 8192, 100, buf) == 100);
	CHECK(big_bytes_ok(buf, 4 * BLOCK + 8192, 100));
	n = big_starts(&e, 0, offs, 16);
	CHECK(n == 2 && offs[1] == 4 * BLOCK + 8192);
	pf_get_stats(e.pf, &st);
	CHECK(st.commit_objects == 0);
	/* Hinted: the block itself comes, and the jump reads it. */
	CHECK(pf_hint_ranges(e.pf, "rank0", &r, 1, 0, PF_QUEUE, 0) == 0);
	CHECK(fake_source_settle(e.fs));
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 1);
	n = big_starts(&e, 0, offs, 16);
	CHECK(n == 3 && offs[2] == 3 * BLOCK);
	CHECK(big_read(&e, 3 * BLOCK + 9000, 100, buf) == 100);
	CHECK(big_bytes_ok(buf, 3 * BLOCK + 9000, 100));
	CHECK(fake_source_starts(e.fs) == 3);
	env_stop(&e);
}

/* A sequential reader keeps its read-ahead while another jumps around
 * the same object between its reads (each jump fetches only its block). */
static void test_block_mixed_readers(void)
{
	unsigned char *buf = malloc(MIB);
	uint64_t offs[32];
	bool ahead = false;
	struct env e;
	unsigned n;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	for (uint64_t at = 0; at < BLOCK + MIB; at += MIB) {
		CHECK(big_read(&e, at, MIB, buf) == (ssize_t)MIB);
		CHECK(big_bytes_ok(buf, at, MIB));
		/* Block 4, a page further back each time. */
		CHECK(big_read(&e, 5 * BLOCK - (at / MIB + 1) * 4096, 100,
			       buf) == 100);
	}
	CHECK(fake_source_settle(e.fs));
	n = big_starts(&e, 0, offs, 32);
	for (unsigned i = 0; i < n; i++)
		ahead |= offs[i] == 3 * BLOCK;
	CHECK(ahead);
	env_stop(&e);
	free(buf);
}

/* Range hints: the blocks they cover are fetched in the hint's order, a
 * range in the block of the one before it adds no entry, and the reads
 * that follow are cache hits (no demand fetch). */
static void test_block_range_hint(void)
{
	const struct pf_range r[] = {
	    {BIG_ID, 4 * BLOCK + 10, HALF},	   /* block 4 */
	    {BIG_ID, 10, BLOCK / 16},		   /* block 0 */
	    {BIG_ID, HALF, BLOCK / 16},		   /* block 0 again: merged */
	    {BIG_ID, 2 * BLOCK - BLOCK / 4, HALF}, /* blocks 1 and 2 */
	    {0, 0, PF_RANGE_WHOLE},		   /* a small object: itself */
	};
	unsigned char *buf = malloc(HALF);
	uint64_t offs[16];
	struct pf_stats st;
	const char *k;
	struct env e;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(pf_hint_ranges(e.pf, "rank0", r, 5, 0, PF_QUEUE, 0) == 0);
	CHECK(fake_source_settle(e.fs));
	/* One step on one thread; on several, a thread's share of the
	 * limit may leave a GET to the next step. */
	for (int step = 0; step < 4 && fake_source_starts(e.fs) < 5; step++) {
		fake_source_advance(e.fs, LATENCY_MS);
		CHECK(fake_source_settle(e.fs));
		CHECK(env_nets > 1 || step == 0);
	}
	CHECK(fake_source_starts(e.fs) == 5);
	if (env_nets == 1) {
		CHECK(big_starts(&e, 0, offs, 4) == 4);
		CHECK(offs[0] == 4 * BLOCK && offs[1] == 0 &&
		      offs[2] == BLOCK && offs[3] == 2 * BLOCK);
		k = fake_source_started(e.fs, 4, NULL);
		CHECK(k && !strcmp(k, "obj/00000"));
	} else {
		/* Several threads arm what they took in any order: the
		 * same GETs, each once. */
		const uint64_t want[] = {0, BLOCK, 2 * BLOCK, 4 * BLOCK};

		CHECK(big_starts_are(&e, 5, want, 4));
	}
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 5);
	for (int i = 0; i < 4; i++) {
		CHECK(big_read(&e, r[i].off, (size_t)r[i].len, buf) ==
		      (ssize_t)r[i].len);
		CHECK(big_bytes_ok(buf, r[i].off, (size_t)r[i].len));
	}
	CHECK(fake_source_starts(e.fs) == 5);
	pf_get_stats(e.pf, &st);
	CHECK(st.demand_fetches == 0);
	CHECK(st.cache_hits >= 4);
	env_stop(&e);
	free(buf);
}

/* Sparse ranges (pages of blocks 1 and 3, far under an eighth of each):
 * no block is fetched ahead for them, and their reads fetch their pages,
 * not 4 MiB each. */
static void test_block_sparse_ranges(void)
{
	const struct pf_range r[] = {
	    {BIG_ID, BLOCK + 8192, 4096},
	    {BIG_ID, 3 * BLOCK + 40960, 4096},
	    {BIG_ID, BLOCK + 81920, 4096},
	};
	unsigned char buf[4096];
	uint64_t offs[16];
	struct env e;
	unsigned n;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(pf_hint_ranges(e.pf, "rank0", r, 3, 0, PF_QUEUE, 0) == 0);
	CHECK(fake_source_settle(e.fs));
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	CHECK(fake_source_starts(e.fs) == 0);
	for (int i = 0; i < 3; i++) {
		CHECK(big_read(&e, r[i].off, 4096, buf) == 4096);
		CHECK(big_bytes_ok(buf, r[i].off, 4096));
	}
	n = big_starts(&e, 0, offs, 16);
	CHECK(n == 3);
	for (unsigned i = 0; i < n; i++)
		CHECK(offs[i] == r[i].off);
	env_stop(&e);
}

/* The object changed since the listing: a block not yet cached reads
 * ESTALE (its GET carries the listing's ETag as If-Match), a block cached
 * before still reads the listed version's bytes. */
static void test_block_stale(void)
{
	unsigned char buf[256];
	struct env e;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	/* From 0: block 0, and 1 and 2 ahead. */
	CHECK(big_read(&e, 0, 256, buf) == 256);
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 3);
	fake_source_fail(e.fs, S3_ERR_STALE, ESTALE, false, 8);
	/* A jump (one GET of its page) and a block's GET alike. */
	CHECK(big_read(&e, 4 * BLOCK + 100, 256, buf) == -ESTALE);
	CHECK(big_read(&e, 3 * BLOCK - 100, 256, buf) == -ESTALE);
	CHECK(big_read(&e, 100, 256, buf) == 256);
	CHECK(big_bytes_ok(buf, 100, 256));
	env_stop(&e);
}

/* A new engine over the same cache (a remount) reads committed blocks
 * with no GET. */
static void test_block_restart(void)
{
	const struct pf_range r = {BIG_ID, 2 * BLOCK + 7, HALF};
	struct pf_config cfg = big_cfg;
	unsigned char buf[256];
	struct env e;
	unsigned n;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(pf_hint_ranges(e.pf, "rank0", &r, 1, 0, PF_QUEUE, 0) == 0);
	CHECK(fake_source_settle(e.fs));
	fake_source_advance(e.fs, 2 * LATENCY_MS);
	committed(&e, 1);
	pf_stop(e.pf);
	cfg.cache = e.cache;
	cfg.describe = describe;
	cfg.key_id = key_id;
	cfg.size = size_of;
	cfg.arg = &e;
	cfg.n_ids = e.n;
	env_sources(&e, &cfg);
	CHECK(pf_start(&cfg, &e.pf) == 0);
	CHECK(fake_source_settle(e.fs));
	n = fake_source_starts(e.fs);
	CHECK(big_read(&e, 2 * BLOCK + 7, 256, buf) == 256);
	CHECK(big_bytes_ok(buf, 2 * BLOCK + 7, 256));
	CHECK(fake_source_starts(e.fs) == n);
	env_stop(&e);
}

/*
 * A large object on the network threads (main() runs it on 4): a jump
 * into a block fetches its pages alone, out of the table; a reader that
 * then reads the whole object in 3 MiB reads, most across two blocks,
 * gets every byte right, with the blocks ahead of it fetched before it
 * asks; each block is fetched exactly once, nothing is retried, and
 * every block but the jump's pages is cached, so a second jump makes no
 * GET.
 */
static void test_block_threads(void)
{
	const size_t step = 3 * MIB;
	const uint64_t jump = 4 * BLOCK + 8192 + 100;
	const uint64_t want[] = {0,	    BLOCK,     2 * BLOCK,
				 3 * BLOCK, 4 * BLOCK, 4 * BLOCK + 8192,
				 5 * BLOCK};
	unsigned char *buf = malloc(step);
	struct pf_stats st;
	bool bytes = true;
	struct env e;
	ssize_t n;

	env_start_big(&e, 4, 4 * KIB, big_cfg, BIG_ID, BIG_SIZE);
	CHECK(big_read(&e, jump, 100, buf) == 100);
	CHECK(big_bytes_ok(buf, jump, 100));
	CHECK(big_starts_are(&e, fake_source_starts(e.fs), want + 5, 1));
	for (uint64_t at = 0; at < BIG_SIZE; at += step) {
		size_t len = BIG_SIZE - at < step ? BIG_SIZE - at : step;

		n = big_read(&e, at, step, buf);
		CHECK(n == (ssize_t)len);
		bytes =
		    bytes && n == (ssize_t)len && big_bytes_ok(buf, at, len);
	}
	CHECK(bytes);
	CHECK(fake_source_settle(e.fs));
	committed(&e, 6);
	CHECK(fake_source_starts(e.fs) == 7);
	CHECK(big_starts_are(&e, 7, want, 7));
	/* Each block's fetch made once, by the reader or ahead of it (the
	 * first read, at 0, asks blocks 1 and 2 ahead). */
	pf_get_stats(e.pf, &st);
	CHECK(st.retries == 0 && st.commit_objects == 6);
	CHECK(st.demand_fetches + st.prefetched == 6 && st.prefetched >= 2);
	/* A jump into a cached block reads it. */
	CHECK(big_read(&e, jump - BLOCK, 100, buf) == 100);
	CHECK(big_bytes_ok(buf, jump - BLOCK, 100));
	CHECK(fake_source_starts(e.fs) == 7);
	env_stop(&e);
	free(buf);
}

/*
 * Steps the fake's clock until the writers have committed all @n objects
 * of @size bytes (a bound on a hang, not a timing), then reads each back:
 * whether every byte is the fake's.
 */
static bool all_committed_right(struct env *e, uint32_t n, uint64_t size)
{
	unsigned char *buf = malloc(size);
	struct pf_stats st;
	char key[32];
	bool bytes = buf != NULL;

	for (int i = 0; i < 4000; i++) {
		pf_get_stats(e->pf, &st);
		if (st.commit_objects >= n)
			break;
		fake_source_advance(e->fs, LATENCY_MS);
		usleep(1000); /* the writers commit, memory comes back */
	}
	committed(e, n);
	for (uint32_t id = 0; id < n && bytes; id++) {
		snprintf(key, sizeof(key), "obj/%05u", id);
		CHECK(pf_read(e->pf, id, buf, size, 0) == (ssize_t)size);
		for (uint64_t i = 0; i < size && bytes; i++)
			bytes = buf[i] == fake_source_byte(key, i);
	}
	free(buf);
	return bytes;
}

/*
 * Several network threads (4): every part of every object (3 parts each)
 * is fetched exactly once, each thread runs some of them, and every
 * object's bytes read back whole and right.
 */
static void test_threads_each_once(void)
{
	const uint32_t n = 200;
	const uint64_t size = 40 * KIB;
	struct pf_stats st;
	struct env e;
	bool dup = false;

	env_start(
	    &e, n, size,
	    (struct pf_config){.pace_ms = PF_PACE_OFF, .part_size = 16 * KIB});
	hint_all(&e, n);
	CHECK(all_committed_right(&e, n, size));
	CHECK(fake_source_starts(e.fs) == 3 * n);
	for (unsigned i = 0; i < fake_source_starts(e.fs); i++) {
		uint64_t oi, oj;
		const char *ki = fake_source_started(e.fs, i, &oi);

		for (unsigned j = 0; j < i && !dup; j++) {
			const char *kj = fake_source_started(e.fs, j, &oj);

			dup = oi == oj && !strcmp(ki, kj);
		}
	}
	CHECK(!dup);
	for (unsigned i = 0; i < env_nets; i++)
		CHECK(fake_source_starts_on(e.fs, i) > 0);
	pf_get_stats(e.pf, &st);
	CHECK(st.retries == 0 && st.cache_hits == n);
	env_stop(&e);
}

/* Without -o fetch_mem the bound follows the network threads (256 MiB
 * each, 512 MiB at least): on many threads, readers waited for room. */
static void test_fetch_mem_default(void)
{
	uint64_t want = (uint64_t)env_nets * 256 * MIB;
	struct pf_stats st;
	struct env e;

	env_start(&e, 4, 16 * KIB, (struct pf_config){.pace_ms = PF_PACE_OFF});
	pf_get_stats(e.pf, &st);
	CHECK(st.fetch_mem_limit == (want < 512 * MIB ? 512 * MIB : want));
	env_stop(&e);
	/* Asked for, it is what was asked for. */
	env_start(
	    &e, 4, 16 * KIB,
	    (struct pf_config){.pace_ms = PF_PACE_OFF, .fetch_mem = 64 * MIB});
	pf_get_stats(e.pf, &st);
	CHECK(st.fetch_mem_limit == 64 * MIB);
	env_stop(&e);
}

/*
 * The cache writers: one per network thread, and they write at once. Each
 * commit is held 200 ms (the test hook, a slow disk) while GETs keep
 * ending every step: with one writer, every object would wait behind the
 * one commit under way; with env_nets, the next batch goes to a writer
 * that is free. Every object is committed, its bytes right. Needs the test
 * hooks (skipped in a build without them).
 */
static void test_writers_in_parallel(void)
{
	const uint32_t n = 64;
	struct pf_stats st;
	struct env e;

	if (!TEST_HOOKS_BUILT) {
		printf("# test_writers_in_parallel: skipped (no test hooks)\n");
		return;
	}
	setenv("HINTFS_FAULT_COMMIT_DELAY_MS", "200", 1);
	env_start(
	    &e, n, 16 * KIB,
	    (struct pf_config){.pace_ms = PF_PACE_OFF, .max_inflight = 4});
	unsetenv("HINTFS_FAULT_COMMIT_DELAY_MS");
	hint_all(&e, n);
	CHECK(all_committed_right(&e, n, 16 * KIB));
	pf_get_stats(e.pf, &st);
	CHECK(st.writers == env_nets);
	/* 64 objects, 4 GETs a step, each commit held 200 ms (a step is
	 * ~1 ms): a free writer takes the next batch while another holds
	 * its own. */
	CHECK(st.writers_busy_peak >= 2);
	CHECK(st.writers_busy_peak <= env_nets);
	env_stop(&e);
}

/* Stopped with 64 GETs in flight on every thread: pf_stop() joins them
 * all and takes every GET down (nothing leaks: the sanitizers say so). */
static void test_stop_in_flight(void)
{
	struct env e;

	env_start(&e, 100, 16 * KIB,
		  (struct pf_config){.pace_ms = PF_PACE_OFF});
	fake_source_latency(e.fs, UINT64_MAX);
	hint_all(&e, 100);
	CHECK(fake_source_settle(e.fs));
	CHECK(fake_source_running(e.fs) == 64);
	for (unsigned i = 0; i < env_nets; i++)
		CHECK(fake_source_starts_on(e.fs, i) == 64 / env_nets);
	CHECK(env_stop(&e) == 64);
}

/* The tests of objects cached by blocks, on env_nets threads. */
static void block_tests(void)
{
	test_block_read();
	test_block_read_ahead();
	test_block_jumps_read_pages();
	test_block_mixed_readers();
	test_block_range_hint();
	test_block_sparse_ranges();
	test_block_stale();
	test_block_eviction_next_use();
	test_block_restart();
	test_block_threads();
}

int main(void)
{
	test_demand_first();
	test_wake_own_fetch();
	test_fetch_mem_bound();
	test_fetch_mem_default();
	test_slowdown_halves();
	test_pacing();
	test_lead_within_cache();
	test_refused_fetched_again();
	test_cancel();
	test_hedge_budget();
	test_tier_owed_puts();
	test_tier_hung();
	test_tier_breaker();
	test_latency_scaling();
	test_latency_brake();
	test_cold_start_ramp();
	test_hung_server_grows_nothing();
	test_slowdown_cuts_grown();
	test_limit_bounds();
	block_tests();
	test_stop_in_flight();

	/* The network path on 4 threads: the same policies hold. */
	env_nets = 4;
	test_threads_each_once();
	test_fetch_mem_default();
	test_writers_in_parallel();
	test_stop_in_flight();
	test_demand_first();
	test_fetch_mem_bound();
	test_slowdown_halves();
	test_cancel();
	test_hedge_budget();
	test_tier_owed_puts();
	test_tier_hung();
	test_tier_breaker();
	test_cold_start_ramp();
	test_latency_brake();
	test_limit_bounds();
	block_tests();
	return check_done();
}
