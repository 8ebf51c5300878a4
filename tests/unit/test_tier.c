/*
 * tests/unit/test_tier.c - the shared cache tier without a mount
 * (prefetch/tier.c): the names of tier objects, the judgement of what a
 * tier GET returned, and a PUT and its read back through the tier's source
 * (fake_source.c: a bucket in memory, a virtual clock, no S3 client): what
 * the tier holds is served only when it is the origin's version, byte for
 * byte; the budget, the breaker and the hung tier on that clock; the tier
 * source's routing (tier_source.c) over the fake's two sides.
 */
#include "fake_source.h"
#include "source_fail.h"
#include "prefetch/tier.h"
#include "check.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_name(void)
{
	char a[TIER_NAME_MAX], b[TIER_NAME_MAX], small[40];
	size_t n;

	/* prefix + scheme + hex SHA-256 of "bkt\0dir/a.jpg\0\"abc\"\0". */
	n = tier_name("p/", "bkt", "dir/a.jpg", 9, "\"abc\"", a, sizeof(a));
	CHECK(n == strlen(a));
	CHECK(!strcmp(a, "p/hintfs-v1/66b73cdb69c9865870af4acfbe986d69f93d2b08"
			 "2ae182b95e978e7dc827b7d5"));
	/* Fixed length after the prefix, whatever the key. */
	char longkey[1024];
	memset(longkey, 'k', sizeof(longkey));
	CHECK(tier_name("", "bkt", longkey, sizeof(longkey), "\"e\"", b,
			sizeof(b)) == 10 + 64);
	/* Each of bucket, key and ETag makes another name. */
	tier_name("p/", "bkt", "dir/a.jpg", 9, "\"abd\"", b, sizeof(b));
	CHECK(strcmp(a, b));
	tier_name("p/", "bkt2", "dir/a.jpg", 9, "\"abc\"", b, sizeof(b));
	CHECK(strcmp(a, b));
	tier_name("p/", "bkt", "dir/b.jpg", 9, "\"abc\"", b, sizeof(b));
	CHECK(strcmp(a, b));
	/* Where one field ends matters: ("ab", "c") is not ("a", "bc"). */
	tier_name("", "ab", "c", 1, "e", a, sizeof(a));
	tier_name("", "a", "bc", 2, "e", b, sizeof(b));
	CHECK(strcmp(a, b));
	/* No room: 0, nothing half written is used. */
	CHECK(tier_name("p/", "bkt", "k", 1, "e", small, sizeof(small)) == 0);
}

/* The quoted ETag S3 gives a single PUT of @len bytes at @data (@parts 0),
 * or a multipart upload of them in one part (@parts 1). */
static void etag_of(const void *data, size_t len, int parts, char out[48])
{
	unsigned char md[16];
	char *o = out;

	EVP_Digest(data, len, md, NULL, EVP_md5(), NULL);
	if (parts)
		EVP_Digest(md, sizeof(md), md, NULL, EVP_md5(), NULL);
	*o++ = '"';
	for (int i = 0; i < 16; i++)
		o += sprintf(o, "%02x", md[i]);
	sprintf(o, parts ? "-%d\"" : "\"", parts);
}

/* Headers as a tier object written by hintfs carries them: the listed
 * ETag and size, the xxh3 and (with a key in @w) the MAC of @data. */
static struct s3_obj_meta meta_of(const struct tier_want *w, const void *data)
{
	struct s3_obj_meta m = {0};

	snprintf(m.origin_etag, sizeof(m.origin_etag), "%s", w->etag);
	tier_sum_hex(data, w->size, m.sum);
	if (w->mac_key)
		CHECK(tier_mac_hex(w, data, m.mac));
	m.origin_size = w->size;
	m.has_origin_size = true;
	m.length = w->size;
	m.has_length = true;
	return m;
}

static const unsigned char KEY[] = "the cluster's 32-byte secret key";
static const unsigned char OTHER_KEY[] = "somebody else's 32-byte key!!!!!";

static void test_etag_kind(void)
{
	const char *md5 = "0123456789abcdef0123456789ABCDEF";
	char q[64];

	CHECK(tier_etag_kind(md5) == TIER_ETAG_MD5);
	snprintf(q, sizeof(q), "\"%s\"", md5);
	CHECK(tier_etag_kind(q) == TIER_ETAG_MD5);
	snprintf(q, sizeof(q), "\"%s-1\"", md5);
	CHECK(tier_etag_kind(q) == TIER_ETAG_MD5_1);
	/* Several parts: the part size is unknown, nothing binds. */
	snprintf(q, sizeof(q), "\"%s-2\"", md5);
	CHECK(tier_etag_kind(q) == TIER_ETAG_OPAQUE);
	snprintf(q, sizeof(q), "\"%s-10\"", md5);
	CHECK(tier_etag_kind(q) == TIER_ETAG_OPAQUE);
	/* Not 32 hex digits, or something after them. */
	CHECK(tier_etag_kind("\"v1\"") == TIER_ETAG_OPAQUE);
	CHECK(tier_etag_kind("\"0123456789abcdef0123456789abcdeg\"") ==
	      TIER_ETAG_OPAQUE);
	CHECK(tier_etag_kind("\"0123456789abcdef0123456789abcdef0\"") ==
	      TIER_ETAG_OPAQUE);
	CHECK(tier_etag_kind("\"0123456789abcdef\"") == TIER_ETAG_OPAQUE);
	CHECK(tier_etag_kind("") == TIER_ETAG_OPAQUE);
}

/* A forged tier object (right name, ETag and size in its headers, the
 * xxh3 of its own, other, bytes) is never a hit, whatever binds. */
static void check_forgery_refused(const struct tier_want *w, const char *body)
{
	struct s3_status ok = {0};
	char *other = malloc(w->size);
	struct s3_obj_meta m = meta_of(w, body), fm;

	CHECK(tier_judge((ssize_t)w->size, &ok, &m, w, body) == TIER_HIT);
	memcpy(other, body, w->size);
	other[3] ^= 1;
	fm = meta_of(w, other); /* self-consistent: its own xxh3 (and MAC) */
	if (w->mac_key) {
		/* The forger's MAC is under a key of its own. */
		struct tier_want fw = *w;

		fw.mac_key = OTHER_KEY;
		fm = meta_of(&fw, other);
	}
	CHECK(tier_judge((ssize_t)w->size, &ok, &fm, w, other) ==
	      TIER_MISMATCH);
	/* ... or carries the real object's MAC over other bytes. */
	fm.sum[0] = '\0';
	memcpy(fm.mac, m.mac, sizeof(fm.mac));
	CHECK(tier_judge((ssize_t)w->size, &ok, &fm, w, other) ==
	      TIER_MISMATCH);
	free(other);
}

static void test_forgeries(void)
{
	const char body[] = "the origin's bytes, all of them";
	size_t len = sizeof(body) - 1;
	char single[48], one_part[48], two_parts[48];
	struct s3_status ok = {0};
	struct tier_want w = {
	    .bucket = "bkt", .key = "dir/a.jpg", .key_len = 9, .size = len};
	struct s3_obj_meta m;

	etag_of(body, len, 0, single);
	etag_of(body, len, 1, one_part);
	/* A two-part ETag: the MD5 of part MD5s, whatever they were. */
	snprintf(two_parts, sizeof(two_parts), "%.33s-2\"", single);

	/* A plain MD5 ETag binds the bytes, no key needed. */
	w.etag = single;
	CHECK(tier_can_bind(&w));
	check_forgery_refused(&w, body);
	/* So does a multipart ETag of one part (MD5 of the MD5). */
	w.etag = one_part;
	CHECK(tier_can_bind(&w));
	check_forgery_refused(&w, body);
	/* Two parts, no key: nothing binds; even the right bytes with
	 * consistent headers are refused (and the engine never asks). */
	w.etag = two_parts;
	CHECK(!tier_can_bind(&w));
	m = meta_of(&w, body);
	CHECK(tier_judge((ssize_t)len, &ok, &m, &w, body) == TIER_MISMATCH);
	/* With the cluster key, its MAC binds them. */
	w.mac_key = KEY;
	w.mac_key_len = sizeof(KEY) - 1;
	CHECK(tier_can_bind(&w));
	check_forgery_refused(&w, body);
	/* An opaque ETag (SSE-C, another server) likewise. */
	w.etag = "\"v1\"";
	check_forgery_refused(&w, body);
	/* The MAC covers the name: the right bytes under another key's
	 * (or bucket's) name do not pass. */
	m = meta_of(&w, body);
	w.key = "dir/b.jpg";
	CHECK(tier_judge((ssize_t)len, &ok, &m, &w, body) == TIER_MISMATCH);
	w.key = "dir/a.jpg";
	w.bucket = "bkt2";
	CHECK(tier_judge((ssize_t)len, &ok, &m, &w, body) == TIER_MISMATCH);
}

static void test_judge(void)
{
	const char body[] = "the origin's bytes";
	size_t len = sizeof(body) - 1;
	char etag[48], etag2[48];
	struct s3_status ok = {0}, st = {0};
	struct tier_want w = {
	    .bucket = "b", .key = "k", .key_len = 1, .etag = etag, .size = len};
	struct tier_want w2 = w;
	struct s3_obj_meta m, bad;

	etag_of(body, len, 0, etag);
	etag_of("other", 5, 0, etag2);
	w2.etag = etag2;
	m = meta_of(&w, body);
	CHECK(tier_judge((ssize_t)len, &ok, &m, &w, body) == TIER_HIT);
	/* Another version of the key (the listing moved on). */
	CHECK(tier_judge((ssize_t)len, &ok, &m, &w2, body) == TIER_MISMATCH);
	/* No metadata at all (written by someone else). */
	bad = (struct s3_obj_meta){.length = len, .has_length = true};
	CHECK(tier_judge((ssize_t)len, &ok, &bad, &w, body) == TIER_MISMATCH);
	/* A size that is not the listed one. */
	bad = m;
	bad.origin_size = len + 1;
	CHECK(tier_judge((ssize_t)len, &ok, &bad, &w, body) == TIER_MISMATCH);
	/* A body cut short under the right headers: an error, not a
	 * mismatch (nothing is wrong with the object). */
	CHECK(tier_judge((ssize_t)len - 4, &ok, &m, &w, body) == TIER_ERROR);
	/* A body longer than the object (BodyTooLarge). */
	st = (struct s3_status){.kind = S3_ERR_OTHER, .code = "BodyTooLarge"};
	CHECK(tier_judge(-EPROTO, &st, &m, &w, body) == TIER_MISMATCH);
	/* Not there: NoSuchKey, or a bare 404. */
	st = (struct s3_status){.kind = S3_ERR_STALE, .http = 404};
	CHECK(tier_judge(-ESTALE, &st, &m, &w, body) == TIER_MISS);
	st = (struct s3_status){.kind = S3_ERR_OTHER, .http = 404};
	CHECK(tier_judge(-ENOENT, &st, &m, &w, body) == TIER_MISS);
	/* 503, reset, refused, timeout: errors. */
	st = (struct s3_status){.kind = S3_ERR_SLOWDOWN, .http = 503};
	CHECK(tier_judge(-EAGAIN, &st, &m, &w, body) == TIER_ERROR);
	st = (struct s3_status){.kind = S3_ERR_NETWORK};
	CHECK(tier_judge(-ECONNRESET, &st, &m, &w, body) == TIER_ERROR);
	CHECK(tier_judge(-ETIMEDOUT, &st, &m, &w, body) == TIER_ERROR);
}

/* The tier's source: the fake's tier side (its bucket, answering at once)
 * and clock, moved by the tests alone (jump()). */
static struct fake_source *F;
/* The fake's pair under a failure wrapper, for the GETs read back. */
static struct sf_plan plan;
static struct source_fail *W;

static struct pf_source *tier_src(void)
{
	return fake_source_tier(F);
}

/* The tier's clock now. */
static uint64_t now(void)
{
	return pf_source_now(tier_src());
}

/* Moves the tier's clock on by @ns. */
static void jump(uint64_t ns)
{
	fake_source_jump(F, ns);
}

/* Waits (5 s at most) for @t's queued PUTs to end; their stats in @ts. */
static void puts_settled(struct tier *t, struct pf_tier_stats *ts)
{
	for (int i = 0; i < 500; i++) {
		tier_get_stats(t, ts);
		if (!ts->put_pending)
			break;
		usleep(10000);
	}
	tier_get_stats(t, ts);
}

/* A whole GET of tier object @name as the engine sends it; its verdict
 * from tier @t, for object "k/1" version @etag. */
static enum tier_verdict get_back(struct tier *t, const char *name,
				  const char *etag, const void *want,
				  size_t len)
{
	char *buf = calloc(1, len);
	struct pf_get g = {.key = name,
			   .key_len = strlen(name),
			   .len = len,
			   .buf = buf,
			   .whole = true,
			   .want_meta = true};
	struct s3_status st = {0};
	enum tier_verdict v;
	bool retryable;
	ssize_t got = -EIO;

	CHECK(pf_source_start(source_fail_tier(W), &g, false, 2000) == 0);
	/* Due at once: it ends through the origin side's next_done(). */
	CHECK(pf_source_next_done(source_fail_origin(W), &got, &retryable,
				  &st) == &g);
	v = tier_check(t, got, &st, pf_get_meta(&g), "k/1", 3, etag, len, buf);
	if (v == TIER_HIT)
		CHECK(!memcmp(buf, want, len));
	pf_get_release(&g);
	free(buf);
	return v;
}

/* Queues a PUT of "k/1", version @etag, of @len bytes at @data to @t and
 * waits for it; the stats after it in @ts. */
static void put_settled(struct tier *t, const char *etag, const void *data,
			size_t len, struct pf_tier_stats *ts)
{
	tier_put_expect(t);
	CHECK(tier_put(t, "k/1", 3, etag, len, data) == 0);
	puts_settled(t, ts);
}

static void test_put_and_read_back(void)
{
	struct tier_config tc = {
	    .src = tier_src(), .origin_bucket = "origin", .prefix = "shared/"};
	struct pf_tier_stats ts;
	struct tier *t = NULL;
	char name[TIER_NAME_MAX], data[3000], etag[48];

	fake_source_store_reset();
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 7);
	etag_of(data, sizeof(data), 0, etag);
	tier_name("shared/", "origin", "k/1", 3, etag, name, sizeof(name));

	CHECK(tier_start(&tc, &t) == 0);
	CHECK(tier_wants(t, "k/1", 3, etag));
	/* Not there yet: a miss. */
	CHECK(get_back(t, name, etag, data, sizeof(data)) == TIER_MISS);
	put_settled(t, etag, data, sizeof(data), &ts);
	CHECK(ts.puts == 1 && ts.put_errors == 0 && fake_source_puts() == 1);
	/* Written under its name, with its metadata: read back, a hit. */
	CHECK(get_back(t, name, etag, data, sizeof(data)) == TIER_HIT);
	/* Someone overwrites it without hintfs's metadata: never served. */
	CHECK(fake_source_store_put(name, data, sizeof(data)) == 0);
	CHECK(get_back(t, name, etag, data, sizeof(data)) == TIER_MISMATCH);
	/* A tier that answers 503: an error (the engine reads the origin). */
	sf_plan_set(&plan, SF_TIER, sf_error(S3_ERR_SLOWDOWN, EAGAIN, 503, 0),
		    1, sf_pass());
	CHECK(get_back(t, name, etag, data, sizeof(data)) == TIER_ERROR);
	/* A PUT the tier refuses is counted, not retried for ever. */
	fake_source_put_fail(S3_ERR_SLOWDOWN, EAGAIN, 503, 1);
	put_settled(t, etag, data, sizeof(data), &ts);
	CHECK(ts.put_errors == 1);
	fake_source_store_reset();
	/* Without a key: an ETag that binds nothing keeps the object off the
	 * tier, and bytes that are not their MD5 ETag's (SSE-KMS) are never
	 * written. */
	CHECK(!tier_wants(t, "k/1", 3, "\"v1\""));
	data[0] ^= 1;
	put_settled(t, etag, data, sizeof(data), &ts);
	data[0] ^= 1;
	CHECK(ts.unbound == 2 && ts.puts == 1 && fake_source_puts() == 0);
	tier_stop(t);

	/* With the cluster's key, an opaque ETag is bound by the MAC the
	 * object carries; another node's key does not pass. */
	tc.mac_key = KEY;
	tc.mac_key_len = sizeof(KEY) - 1;
	CHECK(tier_start(&tc, &t) == 0);
	CHECK(tier_wants(t, "k/1", 3, "\"v1\""));
	tier_name("shared/", "origin", "k/1", 3, "\"v1\"", name, sizeof(name));
	put_settled(t, "\"v1\"", data, sizeof(data), &ts);
	CHECK(ts.puts == 1 && fake_source_puts() == 1);
	CHECK(get_back(t, name, "\"v1\"", data, sizeof(data)) == TIER_HIT);
	tier_stop(t);
	tc.mac_key = OTHER_KEY;
	CHECK(tier_start(&tc, &t) == 0);
	CHECK(get_back(t, name, "\"v1\"", data, sizeof(data)) == TIER_MISMATCH);
	tier_stop(t);
	/* A key shorter than 16 bytes is refused. */
	tc.mac_key_len = 15;
	CHECK(tier_start(&tc, &t) == -EINVAL);
	tc.mac_key = NULL;
	tc.mac_key_len = 0;

	/* The queue's bound is what a reader never waits for: an object
	 * past it is dropped and counted at once. */
	tc.put_mem = sizeof(data) - 1;
	CHECK(tier_start(&tc, &t) == 0);
	tier_put_expect(t);
	CHECK(tier_put(t, "k/1", 3, etag, sizeof(data), data) == -EBUSY);
	tier_get_stats(t, &ts);
	CHECK(ts.put_dropped == 1 && ts.put_pending == 0);
	tier_stop(t);
}

/* A tier to which nothing is PUT, hedging past @hedge_ms, on the fake's
 * clock: its budget, breaker and counters. */
static struct tier *bare_tier(unsigned int hedge_ms)
{
	struct tier_config tc = {.src = tier_src(),
				 .origin_bucket = "o",
				 .prefix = "",
				 .hedge_ms = hedge_ms};
	struct tier *t = NULL;

	CHECK(tier_start(&tc, &t) == 0);
	return t;
}

/* The hedge budget: none at the start, 1 per 200 tier GETs, 2 saved. */
static void test_hedge_budget(void)
{
	struct tier *t = bare_tier(100);
	struct pf_tier_stats ts;
	int taken = 0;

	CHECK(!tier_hedge_take(t));
	for (int i = 0; i < 199; i++)
		tier_note_get(t);
	CHECK(!tier_hedge_take(t));
	tier_note_get(t);
	CHECK(tier_hedge_take(t));
	CHECK(!tier_hedge_take(t));
	/* 5,000 GETs save 2 hedges, not 25. */
	for (int i = 0; i < 5000; i++)
		tier_note_get(t);
	while (tier_hedge_take(t))
		taken++;
	CHECK(taken == 2);
	tier_get_stats(t, &ts);
	CHECK(ts.hedge_denied == 4 && ts.gets == 5200);
	CHECK(ts.hedge_budget_pct == 0.5);
	tier_stop(t);
}

/* The breaker: errors and timeouts of GETs that saw no answer open it
 * (hedges never do); one probe at a time once the open period ends; the
 * probe's answer closes it. */
static void test_breaker(void)
{
	struct tier *t = bare_tier(100);
	struct pf_tier_stats ts;

	/* An answer between failures resets the count. */
	for (int i = 0; i < 7; i++)
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, false, now());
	tier_note_answer_ns(t, 1000000ull);
	tier_note_verdict(t, TIER_MISS, TIER_CUT_NONE, false, now());
	jump(1000000ull);
	CHECK(tier_use(t));
	/* Hedges are a reader's impatience: 8 errors in a row open it
	 * whatever hedges come between. */
	for (int i = 0; i < 8; i++) {
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_HEDGE, true, now());
		CHECK(!tier_open(t));
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, true, now());
	}
	CHECK(tier_open(t) && !tier_use(t));
	tier_get_stats(t, &ts);
	CHECK(ts.breaker_opens == 1 && ts.breaker_open && ts.bypassed == 1);
	CHECK(ts.hedged == 8 && ts.fallbacks == 15 && ts.reader_stalls == 16);
	/* Still open just before 1 s, half-open at 1 s: one probe, the
	 * others still bypass. */
	jump(999999999ull);
	CHECK(tier_open(t) && !tier_use(t));
	jump(1);
	CHECK(!tier_open(t));
	CHECK(tier_use(t));
	CHECK(!tier_use(t) && !tier_use(t));
	/* The probe's reader hedges for free (the budget is empty). */
	CHECK(tier_hedge_take(t));
	/* Its reader hedged it: no verdict on the tier, not reopened; the
	 * next fetch probes. */
	tier_note_verdict(t, TIER_ERROR, TIER_CUT_HEDGE, true, now());
	CHECK(!tier_open(t));
	tier_get_stats(t, &ts);
	CHECK(ts.breaker_opens == 1 && ts.breaker_open && ts.hedged == 9);
	CHECK(tier_use(t));
	CHECK(!tier_use(t));
	/* That probe failed on its own (an error, a timeout): open again,
	 * for 2 s now. */
	tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, false, now());
	CHECK(tier_open(t) && !tier_use(t));
	tier_get_stats(t, &ts);
	CHECK(ts.breaker_opens == 2);
	jump(1999999999ull);
	CHECK(tier_open(t));
	jump(1);
	CHECK(!tier_open(t) && tier_use(t));
	/* An answer closes it: every fetch uses the tier again. */
	tier_note_verdict(t, TIER_HIT, TIER_CUT_NONE, false, now());
	CHECK(!tier_open(t) && tier_use(t) && tier_use(t));
	tier_get_stats(t, &ts);
	CHECK(!ts.breaker_open);

	tier_stop(t);
}

/* Hung: 4 GETs or more, the oldest 500 ms old, no answer since it
 * started, as seen by a poll begun past that. */
static void test_hung(void)
{
	struct tier *t = bare_tier(100);
	uint64_t t0 = now(), due;

	jump(600000000ull);
	CHECK(!tier_hung(t, t0, 3, now(), &due));
	CHECK(!tier_hung(t, now() - 100000000ull, 64, now(), &due));
	CHECK(due == now() + 400000000ull);
	/* The engine thread stalled: its last poll began 100 ms after the
	 * GETs, 400 ms before due. Their answers may wait unread in the
	 * sockets: not hung yet, and due is past (poll at once). */
	CHECK(!tier_hung(t, t0, 64, t0 + 100000000ull, &due));
	CHECK(due == t0 + 500000000ull && !tier_open(t));
	/* That poll read an answer: not hung while these GETs run. */
	tier_note_answer_ns(t, 1000000ull);
	CHECK(!tier_hung(t, t0, 64, now(), &due));
	CHECK(due == UINT64_MAX && !tier_open(t));
	/* GETs started after it, and a poll begun past their due found
	 * them all silent: hung. */
	t0 = now() + 1000000ull;
	jump(t0 + 600000000ull - now());
	CHECK(!tier_hung(t, t0, 4, t0 + 499999999ull, &due));
	CHECK(tier_hung(t, t0, 4, t0 + 500000000ull, &due));
	CHECK(tier_open(t));
	tier_stop(t);
	/* With hedging off, readers wait for the timeout: never hung. */
	t = bare_tier(0);
	CHECK(!tier_hung(t, t0, 64, now(), &due));
	tier_stop(t);
}

/* A busy tier that answers, however slowly, is not failing: the tier
 * benchmark's 4 mounts on a busy single-process server opened the breaker, and
 * what it bypassed never reached the tier. Timeouts of GETs that saw an answer
 * (a GET's or a PUT's) during their life, and hedges, never open it; 8
 * failures of GETs that saw none do. */
static void test_slow_tier_stays_closed(void)
{
	struct tier *t = bare_tier(100);
	struct pf_tier_stats ts;
	uint64_t start = now();

	/* 64 GETs queue behind a busy server: one answers after 1.5 s, then
	 * 16 time out at 2 s in a row, and 16 are hedged in a row. */
	jump(1500000000ull);
	tier_note_answer_ns(t, 1500000000ull);
	tier_note_verdict(t, TIER_HIT, TIER_CUT_NONE, true, start);
	jump(500000000ull);
	for (int i = 0; i < 16; i++)
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, true, start);
	for (int i = 0; i < 16; i++)
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_HEDGE, true, start);
	CHECK(!tier_open(t) && tier_use(t));
	tier_get_stats(t, &ts);
	CHECK(ts.breaker_opens == 0 && ts.fallbacks == 16 && ts.hedged == 16);
	/* GETs started after the last answer, none answered since: 8
	 * timeouts open it. */
	jump(1000000ull);
	start = now();
	jump(2000000000ull);
	for (int i = 0; i < 7; i++)
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, false, start);
	CHECK(!tier_open(t));
	tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, false, start);
	CHECK(tier_open(t));
	tier_stop(t);
}

/* Reads back "k/1"'s bytes for a key-only held PUT (tier_config.load).
 * The PUT workers call it, two of them at once at times: the count is
 * atomic (ThreadSanitizer reported the race of a plain int in CI). */
static char held_data[3000];
static atomic_int held_loads;

static int load_held(void *arg, const char *key, size_t key_len,
		     const char *etag, uint64_t size, void *buf)
{
	held_loads++;
	if (size != sizeof(held_data))
		return -ENODATA;
	memcpy(buf, held_data, size);
	return 0;
}

/* Waits (5 s at most) until @t's stats satisfy @cond (re-read each 10
 * ms); the stats in @ts. */
#define WAIT_STATS(t, ts, cond)                                                \
	do {                                                                   \
		for (int i_ = 0; i_ < 500; i_++) {                             \
			tier_get_stats((t), (ts));                             \
			if (cond)                                              \
				break;                                         \
			usleep(10000);                                         \
		}                                                              \
	} while (0)

/* What the origin served while the breaker was open is held, not lost:
 * once the open period ends a PUT worker sends one as the probe (no
 * reader waits on it), its answer closes the breaker and the rest follow;
 * a probe the tier does not answer opens it again and stays owed. Bytes
 * past the queue's memory wait as the key and are read back. */
static void test_held_puts(void)
{
	struct tier_config tc = {.src = tier_src(),
				 .origin_bucket = "origin",
				 .prefix = "",
				 .hedge_ms = 100,
				 .put_mem = 2 * sizeof(held_data),
				 .load = load_held};
	char name[TIER_NAME_MAX], etag[48], key[8];
	struct pf_tier_stats ts;
	struct tier *t = NULL;

	fake_source_store_reset();
	for (size_t i = 0; i < sizeof(held_data); i++)
		held_data[i] = (char)(i * 13);
	etag_of(held_data, sizeof(held_data), 0, etag);
	CHECK(tier_start(&tc, &t) == 0);
	for (int i = 0; i < 8; i++)
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, false, now());
	CHECK(tier_open(t));

	/* Four objects read from the origin meanwhile: two fit the queue's
	 * memory, two wait as their keys. None is sent to a tier that
	 * fails. */
	for (int i = 0; i < 4; i++) {
		snprintf(key, sizeof(key), "k/%d", i);
		tier_put_expect(t);
		CHECK(tier_put(t, key, 3, etag, sizeof(held_data), held_data) ==
		      0);
	}
	usleep(150000); /* past a worker's look (TIER_HELD_POLL_MS) */
	tier_get_stats(t, &ts);
	CHECK(ts.put_deferred == 4 && ts.put_pending == 4 && ts.puts == 0);
	CHECK(ts.put_dropped == 0 && fake_source_puts() == 0);

	/* The period ends; the probe's PUT is refused by a tier that does
	 * not answer (a reset): open again, for 2 s, nothing lost. */
	tier_name("", "origin", "k/0", 3, etag, name, sizeof(name));
	fake_source_put_fail(S3_ERR_NETWORK, ECONNRESET, 0, 1);
	jump(1000000000ull);
	CHECK(!tier_use(t)); /* PUTs held: one of them probes */
	WAIT_STATS(t, &ts, ts.breaker_opens == 2);
	CHECK(ts.breaker_opens == 2 && tier_open(t));
	CHECK(ts.puts == 0 && ts.put_pending == 4);

	/* It answers again: the probe's PUT closes it, all four written,
	 * two with their bytes read back. */
	jump(2000000000ull);
	WAIT_STATS(t, &ts, !ts.put_pending);
	CHECK(ts.puts == 4 && ts.put_pending == 0 && !ts.breaker_open);
	CHECK(ts.put_reloaded == 2 && held_loads == 2);
	CHECK(get_back(t, name, etag, held_data, sizeof(held_data)) ==
	      TIER_HIT);
	CHECK(tier_use(t));
	tier_stop(t);
}

/* One attempt of a whole GET of "w/1" (100 bytes in the store) through
 * the failure wrapper under action @a: starts it, and (after @ms of the
 * clock, each run through the wrapper) returns how it ended in *@got,
 * or false if it has not. */
static bool wrapped_get(struct sf_action a, uint64_t ms, ssize_t *got,
			struct s3_status *st, bool cancel)
{
	unsigned char buf[100];
	struct pf_get g = {.key = "w/1",
			   .key_len = 3,
			   .len = sizeof(buf),
			   .buf = buf,
			   .whole = true,
			   .want_meta = true};
	bool retryable, timed_out, ended;

	sf_plan_set(&plan, SF_TIER, a, 1, sf_pass());
	CHECK(pf_source_start(source_fail_tier(W), &g, false, 2000) == 0);
	pf_source_run(source_fail_origin(W), 0, &timed_out);
	if (ms) {
		CHECK(!pf_source_next_done(source_fail_origin(W), got,
					   &retryable, st));
		jump(ms * 1000000ull);
		pf_source_run(source_fail_origin(W), 0, &timed_out);
	}
	ended = pf_source_next_done(source_fail_origin(W), got, &retryable,
				    st) == &g;
	if (!ended && cancel) {
		CHECK(pf_get_running(&g));
		pf_source_cancel(&g, st);
		CHECK(!pf_get_running(&g));
	}
	if (ended && *got == 100)
		CHECK(buf[99] == 99);
	pf_get_release(&g);
	return ended;
}

/* The failure wrapper (source_fail.h) on its own: each action does what
 * it says to an attempt, on the inner source's clock. */
static void test_fail_wrapper(void)
{
	unsigned char data[100];
	struct s3_status st;
	ssize_t got = 0;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (unsigned char)i;
	fake_source_store_reset();
	CHECK(fake_source_store_put("w/1", data, sizeof(data)) == 0);
	CHECK(wrapped_get(sf_pass(), 0, &got, &st, false) && got == 100);
	/* Delayed 50 ms: nothing before, the object after. */
	CHECK(wrapped_get((struct sf_action){.act = SF_DELAY, .delay_ms = 50},
			  50, &got, &st, false) &&
	      got == 100);
	/* An error 20 ms after the start. */
	CHECK(wrapped_get(sf_error(S3_ERR_SERVER, EIO, 500, 20), 20, &got, &st,
			  false) &&
	      got == -EIO && st.kind == S3_ERR_SERVER && st.http == 500);
	/* Cut short after 10 bytes: a reset, never the bytes. */
	CHECK(wrapped_get((struct sf_action){.act = SF_TRUNCATE, .keep = 10}, 0,
			  &got, &st, false) &&
	      got == -ECONNRESET && st.kind == S3_ERR_NETWORK);
	/* Hung: nothing ends it but a cancel, however long it waits. */
	CHECK(!wrapped_get(sf_hang(), 60000, &got, &st, true));
	fake_source_store_reset();
}

/* Object "k/1"'s 5,000 bytes at the fake origin. */
#define ROUTE_LEN 5000

/*
 * One GET of object "k/1" (version @etag) through tier source @ts as the
 * engine sends it, @tier as pf_get.tier: checks that it delivers the
 * origin's bytes, that it started @origin_gets GETs on the origin and
 * @tier_gets on the tier, and whether its origin attempts began after a
 * tier attempt (@fresh: pf_get.fresh_ns).
 */
static void routed(struct pf_source *ts, bool tier, const char *etag,
		   unsigned int origin_gets, unsigned int tier_gets, bool fresh)
{
	static _Atomic uint64_t no_wait = PF_GET_NO_WAIT;
	unsigned char buf[ROUTE_LEN] = {0};
	struct pf_get g = {.key = "k/1",
			   .key_len = 3,
			   .etag = etag,
			   .len = sizeof(buf),
			   .buf = buf,
			   .whole = true,
			   .tier = tier,
			   .wait_ns = &no_wait};
	unsigned int o0 = fake_source_starts(F);
	unsigned int t0 = fake_source_tier_starts(F);
	struct s3_status st = {0};
	bool retryable, same = true;
	ssize_t got = -EIO;

	CHECK(pf_source_start(ts, &g, false, 30000) == 0);
	/* Due at once: every attempt ends in this next_done(), once. */
	CHECK(pf_source_next_done(ts, &got, &retryable, &st) == &g);
	CHECK(got == (ssize_t)sizeof(buf));
	CHECK(!pf_source_next_done(ts, &got, &retryable, &st));
	for (size_t i = 0; i < sizeof(buf); i++)
		same = same && buf[i] == fake_source_byte("k/1", i);
	CHECK(same);
	CHECK((g.fresh_ns != 0) == fresh);
	CHECK(fake_source_starts(F) == o0 + origin_gets);
	CHECK(fake_source_tier_starts(F) == t0 + tier_gets);
	pf_get_release(&g);
}

/*
 * The tier source routes each GET: one the engine does not let use the
 * tier (pf_get.tier false: a block, a read-through) reads the origin
 * alone; one that may reads the tier first, and on a miss the origin,
 * whose bytes it PUTs to the tier; the next reads the tier alone (a hit,
 * proven) and the same bytes reach the caller; with the breaker open, the
 * origin alone, its bytes owed to the tier.
 */
static void test_tier_source_routes(void)
{
	struct tier_config tc = {
	    .src = tier_src(), .origin_bucket = "origin", .prefix = "shared/"};
	struct pf_source *origin = source_fail_origin(W);
	struct pf_source *tside = source_fail_tier(W);
	struct pf_source *ts = NULL;
	struct pf_tier_stats st;
	struct tier *t = NULL;
	unsigned char want[ROUTE_LEN];
	char etag[48];

	fake_source_store_reset();
	for (size_t i = 0; i < sizeof(want); i++)
		want[i] = fake_source_byte("k/1", i);
	etag_of(want, sizeof(want), 0, etag);
	CHECK(tier_start(&tc, &t) == 0);
	CHECK(tier_source_create(t, 1, &origin, &tside, &ts) == 0);

	/* Not for the tier: the origin alone, nothing owed to the tier. */
	routed(ts, false, etag, 1, 0, false);
	tier_get_stats(t, &st);
	CHECK(st.gets == 0 && st.put_pending == 0);

	/* For the tier, which misses it: the tier, then the origin (a fresh
	 * budget), whose bytes go to the tier. */
	routed(ts, true, etag, 1, 1, true);
	puts_settled(t, &st);
	CHECK(st.gets == 1 && st.misses == 1 && st.puts == 1);

	/* Now there: the tier alone, the origin's bytes. */
	routed(ts, true, etag, 0, 1, false);
	tier_get_stats(t, &st);
	CHECK(st.gets == 2 && st.hits == 1 && st.puts == 1);

	/* 8 failures with nothing answered open the breaker: the origin
	 * alone, and its bytes owed to the tier (held while it is open). */
	jump(1000000ull);
	for (int i = 0; i < 8; i++)
		tier_note_verdict(t, TIER_ERROR, TIER_CUT_NONE, false, now());
	CHECK(tier_open(t));
	routed(ts, true, etag, 1, 0, false);
	tier_get_stats(t, &st);
	CHECK(st.gets == 2 && st.bypassed == 1 && st.put_pending == 1);

	pf_source_destroy(ts);
	tier_stop(t);
}

int main(void)
{
	/* Its GETs answer at once (get_back()). */
	F = fake_source_create(0);
	CHECK(F != NULL);
	sf_plan_init(&plan);
	W = source_fail_create(fake_source_base(F), fake_source_tier(F),
			       sf_plan_rule, &plan);
	CHECK(W != NULL);
	test_name();
	test_etag_kind();
	test_judge();
	test_forgeries();
	test_put_and_read_back();
	test_hedge_budget();
	test_breaker();
	test_hung();
	test_slow_tier_stays_closed();
	test_held_puts();
	test_fail_wrapper();
	test_tier_source_routes();
	fake_source_store_reset();
	source_fail_destroy(W);
	fake_source_destroy(F);
	return check_done();
}
