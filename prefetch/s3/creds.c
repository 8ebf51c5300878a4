/*
 * prefetch/s3/creds.c - the credentials of one mount: the provider chain at
 * mount, the current value, and the thread that keeps it fresh.
 *
 * Owns the choice of provider (the first in the chain that answers) and
 * the refresh policy:
 * - temporary credentials are fetched again at 5 minutes before they
 *   expire, or at half their life when they live less than 10 minutes
 *   (STS's shortest is 15 minutes, IMDS hands out 6 hours, a test 10 s);
 * - a provider that reads files (profile, web identity token, the
 *   container's token) is asked again when one of them changes;
 * - a server that says "expired" triggers one refresh per generation;
 * - a failed refresh keeps the current credentials, logs one line and
 *   tries again with capped exponential backoff.
 * Invariant: signers only ever see a complete snapshot (key, secret and
 * token of one fetch together), reached by one pointer swap under c->mu;
 * old snapshots live until their last signer puts them back. Secrets are
 * wiped when freed and never logged.
 */
#include "prefetch/s3/creds.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/retry.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Refresh 5 minutes ahead, as the SDKs do (botocore's advisory window is
 * 15 min, its mandatory 10; the Rust SDK's buffer 5 min): a GET's whole
 * retry budget is 60 s, so 5 min covers a few failed refreshes. */
#define CREDS_AHEAD_S 300
/* Files are checked this often: a sidecar that rotates a token file is
 * seen within 5 s, at the cost of two stat() calls. */
#define CREDS_WATCH_MS 5000
/* After a failed refresh, the project's backoff (common/retry.h) on a
 * longer scale: 1-2 s first, doubling, at most 30-60 s apart, so a
 * provider down for an hour costs about 80 log lines, not 3,600. Renewal
 * never gives up: old credentials may still be valid, and a provider
 * that comes back must be found again. */
#define CREDS_BACKOFF_BASE_MS 1000
#define CREDS_BACKOFF_CAP_MS  60000
/* Never two fetches within 1 s: a server that keeps saying "expired"
 * (a skewed clock) must not make us hammer STS. */
#define CREDS_MIN_GAP_MS 1000

struct snap {
	struct creds_snap pub; /* first: creds_put() casts back */
	atomic_int ref;
	struct creds_value v;
};

struct creds {
	struct creds_provider *p;
	pthread_mutex_t mu;   /* guards everything below */
	pthread_cond_t wake;  /* the refresh thread waits on it */
	pthread_cond_t newer; /* creds_wait_newer() waits on it */
	struct snap *cur;
	uint64_t gen;
	uint64_t kicked_gen; /* the generation creds_expired() named */
	bool kick;	     /* refresh now */
	bool stop;
	bool thread; /* the refresh thread runs */
	pthread_t th;
	uint64_t refreshes;
	uint64_t failures;
	int64_t last_refresh;
	uint64_t last_fetch_ms; /* monotonic */
	char key_tail[5];
};

void creds_provider_destroy(struct creds_provider *p)
{
	if (p)
		p->destroy(p);
}

/* ---- fixed and absent providers ------------------------------------------ */

struct static_prov {
	struct creds_provider base;
	char *name;
	struct creds_value v;
};

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static int static_fetch(struct creds_provider *p, struct creds_value *out,
			char *err, size_t err_len)
{
	struct static_prov *s = (struct static_prov *)p;

	memset(out, 0, sizeof(*out));
	out->access_key = strdup(s->v.access_key);
	out->secret_key = strdup(s->v.secret_key);
	out->session_token = dup_or_null(s->v.session_token);
	if (!out->access_key || !out->secret_key ||
	    (s->v.session_token && !out->session_token)) {
		creds_value_fini(out);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static void static_destroy(struct creds_provider *p)
{
	struct static_prov *s = (struct static_prov *)p;

	creds_value_fini(&s->v);
	free(s->name);
	free(s);
}

struct creds_provider *creds_static_create(const char *name,
					   const char *access_key,
					   const char *secret_key,
					   const char *session_token)
{
	struct static_prov *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->base = (struct creds_provider){.fetch = static_fetch,
					  .destroy = static_destroy};
	s->name = strdup(name);
	s->v.access_key = dup_or_null(access_key);
	s->v.secret_key = dup_or_null(secret_key);
	s->v.session_token =
	    session_token && *session_token ? strdup(session_token) : NULL;
	s->base.name = s->name;
	if (!s->name || !s->v.access_key || !s->v.secret_key ||
	    (session_token && *session_token && !s->v.session_token)) {
		static_destroy(&s->base);
		return NULL;
	}
	return &s->base;
}

struct absent_prov {
	struct creds_provider base;
	char *name;
	char *reason;
	int err;
};

static int absent_fetch(struct creds_provider *p, struct creds_value *out,
			char *err, size_t err_len)
{
	struct absent_prov *a = (struct absent_prov *)p;

	memset(out, 0, sizeof(*out));
	snprintf(err, err_len, "%s", a->reason);
	return a->err ? a->err : -ENOENT;
}

static void absent_destroy(struct creds_provider *p)
{
	struct absent_prov *a = (struct absent_prov *)p;

	free(a->name);
	free(a->reason);
	free(a);
}

struct creds_provider *creds_absent_create(const char *name, int err,
					   const char *reason)
{
	struct absent_prov *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->base = (struct creds_provider){.fetch = absent_fetch,
					  .destroy = absent_destroy};
	a->name = strdup(name);
	a->reason = strdup(reason);
	a->err = err;
	a->base.name = a->name;
	if (!a->name || !a->reason) {
		absent_destroy(&a->base);
		return NULL;
	}
	return &a->base;
}

/* ---- snapshots ------------------------------------------------------------
 */

static struct snap *snap_new(struct creds_value *v, uint64_t gen)
{
	struct snap *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->v = *v;
	memset(v, 0, sizeof(*v));
	atomic_init(&s->ref, 1);
	s->pub = (struct creds_snap){
	    .access_key = s->v.access_key,
	    .secret_key = s->v.secret_key,
	    .session_token = s->v.session_token,
	    .expires = s->v.expires,
	    .gen = gen,
	};
	return s;
}

void creds_put(const struct creds_snap *cs)
{
	struct snap *s = (struct snap *)cs;

	if (s && atomic_fetch_sub(&s->ref, 1) == 1) {
		creds_value_fini(&s->v);
		free(s);
	}
}

const struct creds_snap *creds_get(struct creds *c)
{
	struct snap *s;

	pthread_mutex_lock(&c->mu);
	s = c->cur;
	atomic_fetch_add(&s->ref, 1);
	pthread_mutex_unlock(&c->mu);
	return &s->pub;
}

/* Installs @v as the current value. mu held. */
static int install(struct creds *c, struct creds_value *v)
{
	struct snap *s = snap_new(v, c->gen + 1), *old = c->cur;
	size_t n;

	if (!s)
		return -ENOMEM;
	c->gen++;
	c->cur = s;
	n = strlen(s->v.access_key);
	snprintf(c->key_tail, sizeof(c->key_tail), "%s",
		 s->v.access_key + (n > 4 ? n - 4 : 0));
	pthread_cond_broadcast(&c->newer);
	creds_put(old ? &old->pub : NULL);
	return 0;
}

/* ---- refresh --------------------------------------------------------------
 */

/* When, in monotonic ms, the value fetched at @fetched_ms that expires
 * at @expires (epoch s) is due for a refresh; UINT64_MAX: never. */
static uint64_t due_ms(uint64_t fetched_ms, int64_t fetched_at, int64_t expires)
{
	int64_t life, ahead;

	if (!expires)
		return UINT64_MAX;
	life = expires - fetched_at;
	if (life <= 0)
		return fetched_ms;
	ahead = life / 2 < CREDS_AHEAD_S ? life / 2 : CREDS_AHEAD_S;
	return fetched_ms + (uint64_t)(life - ahead) * 1000;
}

static void fmt_time(int64_t t, char *buf, size_t len)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (!t || !gmtime_r(&tt, &tm) ||
	    !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, len, "never");
}

static void *refresh_main(void *arg)
{
	struct creds *c = arg;
	const struct retry_policy backoff = {
	    .base_ms = CREDS_BACKOFF_BASE_MS,
	    .cap_ms = CREDS_BACKOFF_CAP_MS,
	};
	unsigned int seed = (unsigned int)mono_ns();
	uint64_t due, backoff_ms;
	int failed = 0;
	bool retry = false;

	pthread_mutex_lock(&c->mu);
	due = due_ms(c->last_fetch_ms, c->last_refresh, c->cur->pub.expires);
	while (!c->stop) {
		uint64_t now = mono_ms(), wait_ms = CREDS_WATCH_MS;
		bool go = false, changed = false;
		struct creds_value v;
		char err[512];
		int rc;

		if (c->kick && c->kicked_gen == c->gen &&
		    c->last_fetch_ms + CREDS_MIN_GAP_MS < due)
			due = c->last_fetch_ms + CREDS_MIN_GAP_MS;
		c->kick = false;
		if (now >= due)
			go = true;
		if (!go && c->p->changed) {
			pthread_mutex_unlock(&c->mu);
			changed = c->p->changed(c->p);
			pthread_mutex_lock(&c->mu);
			go = changed;
		}
		if (!go) {
			struct timespec ts;

			if (due - now < wait_ms)
				wait_ms = due - now;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += (time_t)(wait_ms / 1000);
			ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			if (!c->kick && !c->stop)
				pthread_cond_timedwait(&c->wake, &c->mu, &ts);
			continue;
		}

		pthread_mutex_unlock(&c->mu);
		err[0] = '\0';
		rc = c->p->fetch(c->p, &v, err, sizeof(err));
		if (!rc && v.expires && v.expires <= time(NULL)) {
			creds_value_fini(&v);
			rc = -EKEYEXPIRED;
			snprintf(err, sizeof(err),
				 "it gave credentials that "
				 "have already expired (check the clock)");
		}
		pthread_mutex_lock(&c->mu);
		now = mono_ms();
		c->last_fetch_ms = now;
		if (!rc)
			rc = install(c, &v);
		if (!rc) {
			char when[32];

			c->refreshes++;
			c->last_refresh = (int64_t)time(NULL);
			due = due_ms(now, c->last_refresh, c->cur->pub.expires);
			fmt_time(c->cur->pub.expires, when, sizeof(when));
			if (retry)
				log_info("credentials: %s works again (key "
					 "...%s, until %s)",
					 c->p->name, c->key_tail, when);
			else
				log_debug("credentials: refreshed from %s "
					  "(key ...%s, until %s)",
					  c->p->name, c->key_tail, when);
			retry = false;
			failed = 0;
			continue;
		}
		c->failures++;
		if (failed < 64)
			failed++;
		backoff_ms = retry_delay_ms(&backoff, failed, &seed);
		due = now + backoff_ms;
		retry = true;
		{
			char when[32];
			int64_t exp = c->cur->pub.expires;
			bool valid = !exp || exp > (int64_t)time(NULL);

			fmt_time(exp, when, sizeof(when));
			log_warn("credentials: refresh from %s failed: %s; %s "
				 "%s; next try in %llu s",
				 c->p->name, err,
				 valid ? "keeping the current ones, valid until"
				       : "the current ones expired at",
				 when, (unsigned long long)(backoff_ms / 1000));
		}
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

bool creds_expired(struct creds *c, uint64_t gen)
{
	bool can;

	pthread_mutex_lock(&c->mu);
	can = c->thread || c->gen != gen;
	if (c->thread && c->gen == gen && c->kicked_gen != gen) {
		c->kicked_gen = gen;
		c->kick = true;
		pthread_cond_signal(&c->wake);
	}
	pthread_mutex_unlock(&c->mu);
	return can;
}

bool creds_wait_newer(struct creds *c, uint64_t gen, int timeout_ms)
{
	struct timespec ts;
	bool got;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&c->mu);
	while (c->gen == gen && c->thread && !c->stop)
		if (pthread_cond_timedwait(&c->newer, &c->mu, &ts))
			break;
	got = c->gen != gen;
	pthread_mutex_unlock(&c->mu);
	return got;
}

void creds_get_info(struct creds *c, struct creds_info *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&c->mu);
	snprintf(out->provider, sizeof(out->provider), "%s", c->p->name);
	memcpy(out->key_tail, c->key_tail, sizeof(out->key_tail));
	out->expires = c->cur->pub.expires;
	out->refreshes = c->refreshes;
	out->refresh_failures = c->failures;
	out->last_refresh = c->last_refresh;
	pthread_mutex_unlock(&c->mu);
}

/* ---- the chain ------------------------------------------------------------
 */

/* Appends "@name: @reason" to the one-line report in @buf. */
static void report_add(char *buf, size_t len, const char *name,
		       const char *reason)
{
	size_t n = strlen(buf);

	if (n + 1 >= len)
		return;
	snprintf(buf + n, len - n, "%s%s: %s", n ? "; " : "", name,
		 reason[0] ? reason : "no reason given");
}

int creds_start(struct creds_provider **chain, size_t n, struct creds **out,
		char *err, size_t err_len)
{
	struct creds *c = NULL;
	struct creds_value v = {0};
	char report[1024] = "", why[512];
	size_t chosen = n;
	int rc = -ENOENT;

	for (size_t i = 0; i < n; i++) {
		if (!chain[i]) {
			rc = -ENOMEM;
			break;
		}
	}
	for (size_t i = 0; rc != -ENOMEM && i < n; i++) {
		why[0] = '\0';
		rc = chain[i]->fetch(chain[i], &v, why, sizeof(why));
		if (!rc && v.expires && v.expires <= time(NULL)) {
			creds_value_fini(&v);
			rc = -EKEYEXPIRED;
			snprintf(why, sizeof(why),
				 "it gave credentials that "
				 "have already expired (check the clock)");
		}
		if (!rc) {
			chosen = i;
			break;
		}
		report_add(report, sizeof(report), chain[i]->name, why);
		if (rc != -ENOENT)
			break;
	}
	if (!rc) {
		c = calloc(1, sizeof(*c));
		if (!c)
			rc = -ENOMEM;
	}
	if (!rc) {
		pthread_condattr_t ca;

		c->p = chain[chosen];
		chain[chosen] = NULL;
		pthread_mutex_init(&c->mu, NULL);
		pthread_condattr_init(&ca);
		pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		pthread_cond_init(&c->wake, &ca);
		pthread_cond_init(&c->newer, &ca);
		pthread_condattr_destroy(&ca);
		c->last_fetch_ms = mono_ms();
		c->last_refresh = (int64_t)time(NULL);
		rc = install(c, &v);
		if (rc) {
			creds_value_fini(&v);
			creds_stop(c);
			c = NULL;
		}
	}
	for (size_t i = 0; i < n; i++)
		creds_provider_destroy(chain[i]);
	if (rc == -ENOMEM)
		snprintf(err, err_len, "credentials: out of memory");
	else if (rc)
		snprintf(err, err_len, "%s credentials (%s)",
			 rc == -ENOENT ? "no" : "cannot get", report);
	if (rc)
		return rc;
	/* A refresh thread only where something can change. */
	if (c->cur->pub.expires || c->p->changed) {
		if (proc_thread_create(&c->th, NULL, refresh_main, c)) {
			log_warn("credentials: no refresh thread; the "
				 "credentials of %s will not be renewed",
				 c->p->name);
		} else {
			c->thread = true;
		}
	}
	*out = c;
	return 0;
}

void creds_stop(struct creds *c)
{
	if (!c)
		return;
	if (c->thread) {
		pthread_mutex_lock(&c->mu);
		c->stop = true;
		pthread_cond_broadcast(&c->wake);
		pthread_cond_broadcast(&c->newer);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->th, NULL);
	}
	creds_put(c->cur ? &c->cur->pub : NULL);
	creds_provider_destroy(c->p);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->newer);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
