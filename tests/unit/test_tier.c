/*
 * tests/unit/test_tier.c - the shared cache tier without a mount
 * (prefetch/tier.c): the names of tier objects, the judgement of what a
 * tier GET returned, and a PUT and its read back through the S3 client
 * over the in-memory S3 (fake_s3.c): what the tier holds is served only
 * when it is the origin's version, byte for byte.
 */
#include "fake_s3.h"
#include "prefetch/s3_internal.h"
#include "prefetch/tier.h"
#include "check.h"

#include <errno.h>
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

/* Headers as a tier object written by hintfs carries them. */
static struct s3_obj_meta meta_of(const char *etag, const void *data,
				  size_t len)
{
	struct s3_obj_meta m = { 0 };

	snprintf(m.origin_etag, sizeof(m.origin_etag), "%s", etag);
	tier_sum_hex(data, len, m.sum);
	m.origin_size = len;
	m.has_origin_size = true;
	m.length = len;
	m.has_length = true;
	return m;
}

static void test_judge(void)
{
	const char body[] = "the origin's bytes";
	size_t len = sizeof(body) - 1;
	struct s3_status ok = { 0 }, st = { 0 };
	struct s3_obj_meta m = meta_of("\"v1\"", body, len), bad;
	char other[sizeof(body)];

	CHECK(tier_judge((ssize_t)len, &ok, &m, "\"v1\"", len, body) == TIER_HIT);
	/* Another version of the key (the listing moved on). */
	CHECK(tier_judge((ssize_t)len, &ok, &m, "\"v2\"", len, body) ==
	      TIER_MISMATCH);
	/* Other bytes under the right headers. */
	memcpy(other, body, sizeof(body));
	other[3] ^= 1;
	CHECK(tier_judge((ssize_t)len, &ok, &m, "\"v1\"", len, other) ==
	      TIER_MISMATCH);
	/* No metadata at all (written by someone else). */
	bad = (struct s3_obj_meta){ .length = len, .has_length = true };
	CHECK(tier_judge((ssize_t)len, &ok, &bad, "\"v1\"", len, body) ==
	      TIER_MISMATCH);
	/* A size that is not the listed one. */
	bad = m;
	bad.origin_size = len + 1;
	CHECK(tier_judge((ssize_t)len, &ok, &bad, "\"v1\"", len, body) ==
	      TIER_MISMATCH);
	/* A body cut short under the right headers: an error, not a
	 * mismatch (nothing is wrong with the object). */
	CHECK(tier_judge((ssize_t)len - 4, &ok, &m, "\"v1\"", len, body) ==
	      TIER_ERROR);
	/* A body longer than the object (BodyTooLarge). */
	st = (struct s3_status){ .kind = S3_ERR_OTHER, .code = "BodyTooLarge" };
	CHECK(tier_judge(-EPROTO, &st, &m, "\"v1\"", len, body) ==
	      TIER_MISMATCH);
	/* Not there: NoSuchKey, or a bare 404. */
	st = (struct s3_status){ .kind = S3_ERR_STALE, .http = 404 };
	CHECK(tier_judge(-ESTALE, &st, &m, "\"v1\"", len, body) == TIER_MISS);
	st = (struct s3_status){ .kind = S3_ERR_OTHER, .http = 404 };
	CHECK(tier_judge(-ENOENT, &st, &m, "\"v1\"", len, body) == TIER_MISS);
	/* 503, reset, refused, timeout: errors. */
	st = (struct s3_status){ .kind = S3_ERR_SLOWDOWN, .http = 503 };
	CHECK(tier_judge(-EAGAIN, &st, &m, "\"v1\"", len, body) == TIER_ERROR);
	st = (struct s3_status){ .kind = S3_ERR_NETWORK };
	CHECK(tier_judge(-ECONNRESET, &st, &m, "\"v1\"", len, body) ==
	      TIER_ERROR);
	CHECK(tier_judge(-ETIMEDOUT, &st, &m, "\"v1\"", len, body) ==
	      TIER_ERROR);
}

static struct s3_client *client(void)
{
	struct s3_config cfg = {
		.bucket = "tier", .endpoint = "http://127.0.0.1:9",
		.region = "us-east-1", .path_style = true, .no_sign = true,
		.max_attempts = 2,
	};
	struct s3_client *c = NULL;
	char err[256];

	CHECK(s3_client_create(&cfg, &c, err, sizeof(err)) == 0);
	return c;
}

/* Waits (5 s at most) for @t's queued PUTs to end; their stats in @ts. */
static void puts_settled(struct tier *t, struct tier_stats *ts)
{
	for (int i = 0; i < 500; i++) {
		tier_get_stats(t, ts);
		if (!ts->put_pending)
			break;
		usleep(10000);
	}
	tier_get_stats(t, ts);
}

/* A whole GET of tier object @name as the engine sends it; its verdict. */
static enum tier_verdict get_back(struct s3_client *c, const char *name,
				  const char *etag, const void *want, size_t len)
{
	char *buf = calloc(1, len);
	struct s3_status st = { 0 };
	struct s3_xfer *x = NULL;
	enum tier_verdict v;
	ssize_t got;
	int rc;

	CHECK(s3_xfer_create(c, name, strlen(name), NULL, 0, len, buf, NULL,
			     &x) == 0);
	s3_xfer_whole_object(x);
	s3_xfer_want_meta(x);
	rc = s3_perform(x, &st);
	got = rc ? rc : (ssize_t)x->body.b.len;
	v = tier_judge(got, &st, s3_xfer_meta(x), etag, len, buf);
	if (v == TIER_HIT)
		CHECK(!memcmp(buf, want, len));
	s3_xfer_destroy(x);
	free(buf);
	return v;
}

static void test_put_and_read_back(void)
{
	struct s3_client *c = client();
	struct tier_config tc = { .s3 = c, .origin_bucket = "origin",
				  .prefix = "shared/" };
	struct tier_stats ts;
	struct tier *t = NULL;
	char name[TIER_NAME_MAX], data[3000];

	fake_s3_reset();
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 7);
	tier_name("shared/", "origin", "k/1", 3, "\"e1\"", name, sizeof(name));

	CHECK(tier_start(&tc, &t) == 0);
	/* Not there yet: a miss. */
	CHECK(get_back(c, name, "\"e1\"", data, sizeof(data)) == TIER_MISS);
	tier_put_expect(t);
	CHECK(tier_put(t, "k/1", 3, "\"e1\"", sizeof(data), data) == 0);
	puts_settled(t, &ts);
	CHECK(ts.puts == 1 && ts.put_errors == 0 && fake_s3_puts() == 1);
	/* Written under its name, with its metadata: read back, a hit. */
	CHECK(get_back(c, name, "\"e1\"", data, sizeof(data)) == TIER_HIT);
	/* Someone overwrites it without hintfs's metadata: never served. */
	CHECK(fake_s3_put(name, data, sizeof(data)) == 0);
	CHECK(get_back(c, name, "\"e1\"", data, sizeof(data)) == TIER_MISMATCH);
	/* A tier that answers 503: an error (the engine reads the origin). */
	fake_s3_fail(name, 503, "SlowDown", -1);
	CHECK(get_back(c, name, "\"e1\"", data, sizeof(data)) == TIER_ERROR);
	/* A PUT the tier refuses is counted, not retried for ever. */
	tier_put_expect(t);
	CHECK(tier_put(t, "k/1", 3, "\"e1\"", sizeof(data), data) == 0);
	puts_settled(t, &ts);
	CHECK(ts.put_errors == 1);
	tier_stop(t);

	/* The queue's bound is what a reader never waits for: an object
	 * past it is dropped and counted at once. */
	tc.put_mem = sizeof(data) - 1;
	CHECK(tier_start(&tc, &t) == 0);
	tier_put_expect(t);
	CHECK(tier_put(t, "k/1", 3, "\"e1\"", sizeof(data), data) == -EBUSY);
	tier_get_stats(t, &ts);
	CHECK(ts.put_dropped == 1 && ts.put_pending == 0);
	tier_stop(t);
	s3_client_destroy(c);
}

int main(void)
{
	test_name();
	test_judge();
	test_put_and_read_back();
	return check_done();
}
