/*
 * tests/unit/test_s3_list.c - ListObjectsV2 as the client runs it
 * (prefetch/s3/s3_list.c): page by page and in parallel ranges, against an
 * in-memory S3 (fake_s3.c): every key exactly once, whatever the paging,
 * a server that ignores start-after, failures retried or reported by kind.
 */
#include "fake_s3.h"
#include "prefetch/prefetch.h"
#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_KEYS 2500

struct seen {
	pthread_mutex_t mu; /* the callback is called one at a time; the
			       lock checks that claim under TSan/ASan too */
	int count[N_KEYS];
	int foreign, total;
};

/* Key i: spread over top-level "directories" so that splits exist. */
static void key_of(int i, char *buf, size_t cap)
{
	snprintf(buf, cap, "data/c%02d/img%05d.jpg", i % 23, i);
}

static int on_object(void *arg, const struct s3_object *o)
{
	struct seen *s = arg;
	unsigned c, i;

	pthread_mutex_lock(&s->mu);
	s->total++;
	if (sscanf(o->key, "data/c%02u/img%05u.jpg", &c, &i) == 2 &&
	    i < N_KEYS && o->size == i % 50 + 1)
		s->count[i]++;
	else
		s->foreign++;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static void fill(void)
{
	char key[64], data[64];

	fake_s3_reset();
	memset(data, 'x', sizeof(data));
	for (int i = 0; i < N_KEYS; i++) {
		key_of(i, key, sizeof(key));
		fake_s3_put(key, data, (size_t)(i % 50 + 1));
	}
	fake_s3_put("other/zzz", data, 1); /* outside the prefix */
}

static struct s3_client *client(int workers, int attempts)
{
	struct s3_config cfg = {
	    .bucket = "b",
	    .endpoint = "http://127.0.0.1:9",
	    .region = "us-east-1",
	    .path_style = true,
	    .no_sign = true,
	    .list_workers = workers,
	    .max_attempts = attempts,
	};
	struct s3_client *c = NULL;
	char err[256];

	CHECK(s3_client_create(&cfg, &c, err, sizeof(err)) == 0);
	return c;
}

/* Lists "data/" and checks every key came once; returns s3_list's rc. */
static int list_all(struct s3_client *c, struct s3_status *st, bool want_all)
{
	struct seen *s = calloc(1, sizeof(*s));
	int rc, missing = 0, twice = 0;

	pthread_mutex_init(&s->mu, NULL);
	rc = s3_list(c, "data/", on_object, s, st);
	for (int i = 0; i < N_KEYS; i++) {
		missing += s->count[i] == 0;
		twice += s->count[i] > 1;
	}
	CHECK(twice == 0 && s->foreign == 0);
	if (want_all)
		CHECK(missing == 0 && s->total == N_KEYS);
	pthread_mutex_destroy(&s->mu);
	free(s);
	return rc;
}

static void test_serial_and_parallel(void)
{
	struct s3_status st;
	struct s3_client *c;

	fill();
	/* Pages of 100: 25 pages one after another. */
	fake_s3_page_max(100);
	c = client(1, 0);
	CHECK(list_all(c, &st, true) == 0);
	CHECK(fake_s3_lists() == 25);
	s3_client_destroy(c);

	/* In parallel: the same keys, once each, more requests in flight
	 * (delimiter pages to find split points, ranges read past). */
	for (int workers = 2; workers <= 32; workers *= 4) {
		fill();
		fake_s3_page_max(100);
		c = client(workers, 0);
		CHECK(list_all(c, &st, true) == 0);
		CHECK(fake_s3_lists() > 25);
		s3_client_destroy(c);
	}

	/* Pages of 1,000: the first page, then ranges of the rest. */
	fill();
	c = client(16, 0);
	CHECK(list_all(c, &st, true) == 0);
	s3_client_destroy(c);
}

/* A server that ignores start-after repeats keys before a range: each is
 * still delivered once. */
static void test_ignores_start_after(void)
{
	struct s3_status st;
	struct s3_client *c;

	fill();
	fake_s3_page_max(200);
	fake_s3_ignore_start_after(true);
	c = client(8, 0);
	CHECK(list_all(c, &st, true) == 0);
	s3_client_destroy(c);
}

static int stop_at_500(void *arg, const struct s3_object *o)
{
	int *calls = arg;

	(void)o;
	return ++*calls == 500 ? -ECANCELED : 0;
}

static void test_failures(void)
{
	struct s3_status st;
	struct s3_client *c;

	/* Throttled and reset pages are retried: the listing is whole. */
	fill();
	fake_s3_page_max(100);
	fake_s3_fail("LIST", 503, "SlowDown", 3);
	fake_s3_fail("LIST", 0, "", 2);
	c = client(8, 0);
	CHECK(list_all(c, &st, true) == 0);
	s3_client_destroy(c);

	/* A server error past the budget: -EIO, of kind server, said once. */
	fill();
	fake_s3_page_max(100);
	fake_s3_fail("LIST", 500, "InternalError", -1);
	c = client(8, 3);
	CHECK(list_all(c, &st, false) == -EIO);
	CHECK(st.kind == S3_ERR_SERVER && st.http == 500);
	CHECK(fake_s3_lists() == 3);
	s3_client_destroy(c);

	/* Refused credentials are not retried. */
	fill();
	fake_s3_fail("LIST", 403, "SignatureDoesNotMatch", -1);
	c = client(8, 0);
	CHECK(list_all(c, &st, false) == -EACCES);
	CHECK(st.kind == S3_ERR_DENIED && fake_s3_lists() == 1);
	s3_client_destroy(c);

	/* A callback's error stops the listing and is its result. */
	fill();
	fake_s3_page_max(100);
	c = client(8, 0);
	int calls = 0;
	CHECK(s3_list(c, "data/", stop_at_500, &calls, &st) == -ECANCELED);
	CHECK(calls == 500);
	s3_client_destroy(c);
}

int main(void)
{
	test_serial_and_parallel();
	test_ignores_start_after();
	test_failures();
	fake_s3_reset();
	return check_done();
}
