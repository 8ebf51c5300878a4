/*
 * prefetch/tier.c - the shared cache tier: naming, the check of what it
 * answers, the background PUTs and the breaker (tier.h says what each is
 * for; engine.c routes the GETs).
 *
 * Invariants:
 * - A tier object is served only when its bytes are proven to be the
 *   origin's version: their MD5 is the origin's ETag (a single-part
 *   upload, or a multipart upload of one part), or their HMAC-SHA256
 *   under the cluster's key (-o shared_cache_key) is the one the object
 *   carries. Its headers (ETag, size, xxh3) are written by whoever writes
 *   the object, and prove nothing on their own. Whoever else writes to
 *   the bucket, a reader gets the origin's bytes or a fallback.
 * - An object whose ETag binds nothing (SSE-C, SSE-KMS, a multipart
 *   upload of several parts, other servers' ETags) uses the tier only with
 *   a cluster key; without one it is neither read from nor written to it.
 * - Only objects fetched whole from the origin (If-Match on the listed
 *   ETag) are PUT, under the name of that ETag.
 * - A PUT never delays a read: tier_put() copies into a bounded queue or
 *   drops; the workers own the network side. Nothing here deletes.
 */
#include "prefetch/tier.h"
#include "common/log.h"
#include "common/proc.h"

#include <errno.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* 256 MiB of objects waiting for their PUT: an epoch-1 burst of ~2,400
 * objects of 110 KB (a mount fetches ~2,000/s from a 30 ms origin, the
 * workers write ~1,000/s to a near tier), as much as the default fetch
 * memory holds in flight. */
#define TIER_PUT_MEM_DEFAULT (256ull << 20)
/* 8 PUTs at once: a near tier takes a 110 KB PUT in ~5-8 ms (RGW on this
 * machine), so 8 keep up with the origin's ~1,000-2,000 objects/s. */
#define TIER_PUT_WORKERS 8
/* The breaker: 8 tier failures in a row (errors, timeouts, hedges; no
 * answer between) open it: fetches go straight to the origin for 1 s,
 * then one fetch probes (half-open) while the others still go to the
 * origin. The probe's answer closes it; its failure opens it again for
 * twice as long, up to 30 s. A tier that is down then costs 8 failed GETs,
 * then one every 1-30 s, not one per object. */
#define TIER_BREAK_AFTER  8
#define TIER_BREAK_NS	  1000000000ull
#define TIER_BREAK_MAX_NS 30000000000ull
/* A probe that never reports (its fetch dropped) frees the half-open state
 * after 3 s: past the 2 s a tier attempt may take (engine_net.c). */
#define TIER_PROBE_NS 3000000000ull
/* A PUT worker waiting for the breaker's open period to end looks again
 * at least this often (ms of real time): the period is on the tier's
 * clock, which a test moves by itself, and a fetch that finds the period
 * over wakes the workers anyway (tier_use()). */
#define TIER_HELD_POLL_MS 100
/* PUTs owed while the queue's bytes are full wait as their key alone,
 * their bytes read back from the local cache when sent: within a 16th of
 * the queue's memory (16 MiB by default: ~65,000 keys of ~250 bytes with
 * their job), so that an open breaker through a whole epoch of a large
 * data set still owes the tier all of it, and memory stays bounded. */
#define TIER_KEYS_SHARE 16
/* Hung: GETs have run for 500 ms (or 8 times the usual answer time, if
 * longer) and none answered since the oldest started. A near tier answers
 * in milliseconds, a busy one in 100-200 ms (4 mounts x 64 GETs on this
 * 2-core machine); 500 ms of silence from all of them is a tier that
 * accepted the connections and stopped, and waiting for the 2 s timeout
 * would stall the readers for 2 s and the hint's lead with them. */
#define TIER_HUNG_NS   500000000ull
#define TIER_HUNG_TAIL 8
/* ... and at least 4 GETs wait: one or two slow ones alone at the end of
 * an epoch (the rest answered before they started) are a slow tail, not a
 * hung tier; a hung tier under a hint has its whole window waiting. */
#define TIER_HUNG_MIN_GETS 4
/* The hedge waits at least 4 times the tier's usual answer time (an
 * average over the last ~16 answers): a hedge is for the tail, a request
 * stuck behind a slow disk or a lost packet, not for a tier that is
 * merely busy, where the origin would be no faster and every hedge an
 * origin GET (on this project's 2-core machine 4 mounts x 64 GETs in
 * flight make a 1 ms tier answer in 100-200 ms: a fixed 100 ms hedged
 * 30% of the reads). */
#define TIER_HEDGE_TAIL 4
/* The hedge budget: 1 hedge per 200 tier GETs (0.5%), as hedged-request
 * designs bound the extra load; up to 2 saved (a window of ~400 GETs),
 * none at the start. The operator's target is <= 1% of an epoch's objects
 * read from the origin once the tier holds them: measured with 4 mounts
 * and a tier answering 30% of GETs 1 s late, 1 per 100 with 10 saved let
 * 22 hedges into an epoch of 1,508 tier GETs (1.1% of the 2,000 objects,
 * the saved ones included); half the rate and a fifth of the savings
 * leave room for the objects an epoch-1 hedge kept out of the tier. */
#define TIER_HEDGE_PER	 200
#define TIER_HEDGE_BURST 2
/* Longest prefix accepted: room in TIER_NAME_MAX. */
#define TIER_PREFIX_MAX 512

#define TIER_SCHEME "hintfs-v1/"
/* A MAC key's length: at least 16 bytes (128 bits, HMAC's security is
 * bounded by the key); at most 1 KiB (a key file, not a data file). */
#define TIER_KEY_MIN 16
#define TIER_KEY_MAX 1024

/* One object waiting for its PUT. */
struct tier_job {
	char *name;
	char *key; /* the origin key, key_len bytes (for the MAC) */
	size_t key_len;
	char *etag;
	uint64_t size;
	char *data;    /* NULL: the bytes are read back from the local cache
			  (tier_config.load) when the PUT is sent */
	uint64_t foot; /* what it counts in keys_bytes (key-only jobs) */
	struct tier_job *next;
};

struct tier {
	struct tier_config cfg;
	char *prefix, *bucket;
	unsigned char *mac_key; /* cfg.mac_key's copy, or NULL */
	pthread_t workers[TIER_PUT_WORKERS];
	unsigned int n_workers;

	pthread_mutex_t mu; /* guards the queue, the held list and stop */
	pthread_cond_t cv;  /* a job came, a probe is due, or stop */
	struct tier_job *head, *tail;
	/* PUTs that wait for the breaker to close (tier_put() while it is
	 * open): a tier that fails or hangs is not loaded with writes; the
	 * first PUT worker to see the open period over sends one as the
	 * probe, and breaker_close() moves them all to the queue. */
	struct tier_job *held_head, *held_tail;
	uint64_t queued_bytes; /* data of queued, held and running jobs */
	uint64_t keys_bytes;   /* foot of key-only jobs, same three */
	bool stop;

	_Atomic uint64_t answer_ns;   /* average time to an answer (EWMA,
					 1/16 per answer), 0: none yet */
	_Atomic uint64_t last_answer; /* now_ns() of the latest answer: a
					 GET's hit, miss or mismatch, or a
					 PUT's (the tier makes progress) */
	_Atomic uint64_t hedge_gets;  /* the budget: tier GETs not yet
					 spent on a hedge, at most
					 TIER_HEDGE_PER x TIER_HEDGE_BURST */
	_Atomic uint32_t fail_streak; /* failures since the last answer */
	/* The breaker: closed while open_until is 0; open until open_until;
	 * past it half-open, one probe at a time (probe_until: when a probe
	 * under way is given up on). open_ns: the next open period. */
	_Atomic uint64_t open_until;
	_Atomic uint64_t probe_until;
	_Atomic uint64_t open_ns;
	struct {
		_Atomic uint64_t gets, hits, misses, mismatches, unbound,
		    fallbacks, hedged, hedge_denied, bypassed, reader_stalls,
		    breaker_opens, puts, put_errors, put_dropped, put_pending,
		    put_deferred, put_reloaded;
	} n;
};

static void add(_Atomic uint64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static struct tier_want tier_want_of(const struct tier *t, const char *key,
				     size_t key_len, const char *etag,
				     uint64_t size)
{
	return (struct tier_want){
	    .bucket = t->bucket,
	    .key = key,
	    .key_len = key_len,
	    .etag = etag,
	    .size = size,
	    .mac_key = t->mac_key,
	    .mac_key_len = t->cfg.mac_key_len,
	};
}

/* ---- naming and checking (pure) ------------------------------------------ */

size_t tier_name(const char *prefix, const char *bucket, const char *key,
		 size_t key_len, const char *etag, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[32];
	unsigned int mdlen = 0;
	size_t plen = strlen(prefix), slen = strlen(TIER_SCHEME);
	size_t len = plen + slen + 64;
	EVP_MD_CTX *ctx;
	bool ok;

	if (len + 1 > cap)
		return 0;
	ctx = EVP_MD_CTX_new();
	/* Each part NUL-terminated: ("a", "b\0c") and ("a\0b", "c") differ. */
	ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(ctx, bucket, strlen(bucket) + 1) &&
	     EVP_DigestUpdate(ctx, key, key_len) &&
	     EVP_DigestUpdate(ctx, "", 1) &&
	     EVP_DigestUpdate(ctx, etag, strlen(etag) + 1) &&
	     EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return 0;
	memcpy(out, prefix, plen);
	memcpy(out + plen, TIER_SCHEME, slen);
	for (int i = 0; i < 32; i++) {
		out[plen + slen + 2 * i] = hex[md[i] >> 4];
		out[plen + slen + 2 * i + 1] = hex[md[i] & 15];
	}
	out[len] = '\0';
	return len;
}

void tier_sum_hex(const void *data, size_t len, char out[17])
{
	snprintf(out, 17, "%016" PRIx64, (uint64_t)XXH3_64bits(data, len));
}

/* The 16 bytes an MD5 ETag of kind @k spells, from its 32 hex digits. */
static bool etag_md5(const char *etag, unsigned char out[16])
{
	const char *h = etag + (*etag == '"');

	for (int i = 0; i < 32; i++) {
		int c = h[i], v = c >= '0' && c <= '9'	 ? c - '0'
				  : c >= 'a' && c <= 'f' ? c - 'a' + 10
				  : c >= 'A' && c <= 'F' ? c - 'A' + 10
							 : -1;

		if (v < 0)
			return false;
		if (i & 1)
			out[i / 2] |= (unsigned char)v;
		else
			out[i / 2] = (unsigned char)(v << 4);
	}
	return true;
}

enum tier_etag tier_etag_kind(const char *etag)
{
	unsigned char md[16];
	bool quoted = *etag == '"';
	const char *rest = etag + quoted + 32;
	size_t len = strlen(etag);

	/* NOTE(s3): S3 and RGW quote the ETag; the 32 hex digits are the
	 * MD5 of the bytes for a single PUT without SSE-KMS or SSE-C. An
	 * SSE-KMS object has an MD5-shaped ETag that is not its bytes' MD5:
	 * the check below then refuses every copy (a mismatch, the origin
	 * served) and the writer, which checks before it PUTs, never
	 * writes one. */
	if (len < (size_t)quoted + 32 || !etag_md5(etag, md))
		return TIER_ETAG_OPAQUE;
	if (quoted ? !strcmp(rest, "\"") : !*rest)
		return TIER_ETAG_MD5;
	/* NOTE(s3): a multipart upload's ETag is the MD5 of its parts'
	 * MD5s, "-N" after it. The part size is in no listing: with one
	 * part it is the object, and the ETag is the MD5 of the bytes' MD5.
	 * With more (an object of at most one 8 MiB part of ours uploaded in
	 * parts of 5 MiB or more: two parts, the split anywhere past 5 MiB)
	 * the layout could only come from a HEAD ?partNumber=1 at the origin
	 * per object, a request per object that the tier exists to save:
	 * such objects need the cluster key. */
	if (quoted ? !strcmp(rest, "-1\"") : !strcmp(rest, "-1"))
		return TIER_ETAG_MD5_1;
	return TIER_ETAG_OPAQUE;
}

bool tier_can_bind(const struct tier_want *w)
{
	return w->mac_key || tier_etag_kind(w->etag) != TIER_ETAG_OPAQUE;
}

/* HMAC's implementation, fetched once (a fetch takes a lock). */
static EVP_MAC *hmac_impl;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
	hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL);
}

bool tier_mac_hex(const struct tier_want *w, const void *data, char out[65])
{
	static const char hex[] = "0123456789abcdef";
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_utf8_string("digest", digest, 0),
	    OSSL_PARAM_construct_end(),
	};
	unsigned char md[32];
	size_t mdlen = 0;
	char size[24];
	EVP_MAC_CTX *ctx;
	bool ok;

	if (!w->mac_key)
		return false;
	pthread_once(&hmac_once, hmac_fetch);
	if (!hmac_impl)
		return false;
	snprintf(size, sizeof(size), "%" PRIu64, w->size);
	/* Every field NUL-terminated, as in tier_name(); the scheme first,
	 * so that a MAC of this layout is never one of another's. */
	ctx = EVP_MAC_CTX_new(hmac_impl);
	ok = ctx && EVP_MAC_init(ctx, w->mac_key, w->mac_key_len, params) &&
	     EVP_MAC_update(ctx, (const unsigned char *)TIER_SCHEME,
			    sizeof(TIER_SCHEME)) &&
	     EVP_MAC_update(ctx, (const unsigned char *)w->bucket,
			    strlen(w->bucket) + 1) &&
	     EVP_MAC_update(ctx, (const unsigned char *)w->key, w->key_len) &&
	     EVP_MAC_update(ctx, (const unsigned char *)"", 1) &&
	     EVP_MAC_update(ctx, (const unsigned char *)w->etag,
			    strlen(w->etag) + 1) &&
	     EVP_MAC_update(ctx, (const unsigned char *)size,
			    strlen(size) + 1) &&
	     EVP_MAC_update(ctx, data, w->size) &&
	     EVP_MAC_final(ctx, md, &mdlen, sizeof(md)) && mdlen == 32;
	EVP_MAC_CTX_free(ctx);
	if (!ok)
		return false;
	for (int i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 15];
	}
	out[64] = '\0';
	return true;
}

bool tier_bytes_bound(const struct tier_want *w, const void *data,
		      const char *mac_hex)
{
	enum tier_etag k = tier_etag_kind(w->etag);
	unsigned char want[16], md[16], md2[16];
	char mac[65];

	if (k != TIER_ETAG_OPAQUE && etag_md5(w->etag, want) &&
	    EVP_Digest(data, w->size, md, NULL, EVP_md5(), NULL) &&
	    (k == TIER_ETAG_MD5
		 ? !memcmp(md, want, sizeof(md))
		 : EVP_Digest(md, sizeof(md), md2, NULL, EVP_md5(), NULL) &&
		       !memcmp(md2, want, sizeof(md2))))
		return true;
	/* The MAC: compared in constant time, the key is a secret. */
	return mac_hex && strlen(mac_hex) == 64 && tier_mac_hex(w, data, mac) &&
	       !CRYPTO_memcmp(mac, mac_hex, 64);
}

enum tier_verdict tier_judge(ssize_t got, const struct s3_status *st,
			     const struct s3_obj_meta *m,
			     const struct tier_want *w, const void *body)
{
	if (got < 0) {
		/* NoSuchKey (STALE) or a bare 404 (-ENOENT): not there. */
		if (st->kind == S3_ERR_STALE || got == -ENOENT)
			return TIER_MISS;
		/* A body longer than the origin's object. */
		if (got == -EPROTO && !strcmp(st->code, "BodyTooLarge"))
			return TIER_MISMATCH;
		return TIER_ERROR;
	}
	/* The headers first: they came whole even when the body did not,
	 * and a wrong version is told apart from a truncated body. */
	if (strcmp(m->origin_etag, w->etag) || !m->has_origin_size ||
	    m->origin_size != w->size ||
	    (m->has_length && m->length != w->size))
		return TIER_MISMATCH;
	if ((uint64_t)got != w->size)
		return TIER_ERROR; /* cut short: a truncated body */
	return tier_bytes_bound(w, body, m->mac) ? TIER_HIT : TIER_MISMATCH;
}

/* ---- the breaker and the counters ---------------------------------------- */

/* The tier's clock: its source's (tier_config.src). */
static uint64_t now_ns(const struct tier *t)
{
	return pf_source_now(t->cfg.src);
}

/* Opens the breaker for the next open period (doubling up to 30 s while
 * the probes fail), ending any probe. */
static void breaker_open(struct tier *t, const char *why)
{
	uint64_t period = atomic_load(&t->open_ns);
	uint64_t next =
	    period * 2 < TIER_BREAK_MAX_NS ? period * 2 : TIER_BREAK_MAX_NS;

	atomic_store(&t->open_until, now_ns(t) + period);
	atomic_store(&t->open_ns, next);
	atomic_store(&t->probe_until, 0);
	atomic_store(&t->fail_streak, 0);
	add(&t->n.breaker_opens);
	log_warn("shared cache: %s; reading from the origin for %llu ms", why,
		 (unsigned long long)(period / 1000000u));
}

/* Closes the breaker: the tier answered. The PUTs held while it was open
 * go to the queue (after open_until is 0, so that a tier_put() that takes
 * mu after this one queues, and one before is moved here). */
static void breaker_close(struct tier *t)
{
	atomic_store(&t->fail_streak, 0);
	if (!atomic_load(&t->open_until))
		return;
	atomic_store(&t->open_until, 0);
	atomic_store(&t->probe_until, 0);
	atomic_store(&t->open_ns, TIER_BREAK_NS);
	pthread_mutex_lock(&t->mu);
	if (t->held_head) {
		*(t->tail ? &t->tail->next : &t->head) = t->held_head;
		t->tail = t->held_tail;
		t->held_head = t->held_tail = NULL;
		pthread_cond_broadcast(&t->cv);
	}
	pthread_mutex_unlock(&t->mu);
	log_info("shared cache: the tier answers again");
}

/* Takes the half-open breaker's one probe at @now: true for one caller
 * until its verdict (or TIER_PROBE_NS). */
static bool probe_take(struct tier *t, uint64_t now)
{
	uint64_t until = atomic_load(&t->open_until);
	uint64_t probe = atomic_load(&t->probe_until);

	return until && now >= until && probe <= now &&
	       atomic_compare_exchange_strong(&t->probe_until, &probe,
					      now + TIER_PROBE_NS);
}

bool tier_use(struct tier *t)
{
	uint64_t until = atomic_load(&t->open_until), now;
	bool held;

	if (!until)
		return true;
	now = now_ns(t);
	if (now >= until) {
		/* Half-open. With PUTs held, one of them probes: a PUT
		 * worker sends it, however slowly the tier answers, where a
		 * fetch's probe would be hedged away by its reader with no
		 * verdict, again and again, and the breaker would never
		 * close on a tier that is only slow. */
		pthread_mutex_lock(&t->mu);
		held = t->held_head != NULL;
		if (held)
			pthread_cond_signal(&t->cv);
		pthread_mutex_unlock(&t->mu);
		/* Else one fetch probes, the others keep to the origin
		 * until its answer. */
		if (!held && probe_take(t, now))
			return true;
	}
	add(&t->n.bypassed);
	return false;
}

bool tier_open(const struct tier *t)
{
	uint64_t until = atomic_load(&t->open_until);

	return until && now_ns(t) < until;
}

void tier_note_get(struct tier *t)
{
	uint64_t have = atomic_load(&t->hedge_gets);

	add(&t->n.gets);
	/* Racy cap: a GET lost to a race costs 1/TIER_HEDGE_PER of a
	 * hedge. */
	if (have < TIER_HEDGE_PER * TIER_HEDGE_BURST)
		atomic_fetch_add(&t->hedge_gets, 1);
}

bool tier_hedge_take(struct tier *t)
{
	uint64_t have = atomic_load(&t->hedge_gets);

	/* Half-open: the one GET running is the probe of a tier that just
	 * failed; its reader does not wait for the probe's timeout. */
	if (atomic_load(&t->open_until))
		return true;
	while (have >= TIER_HEDGE_PER)
		if (atomic_compare_exchange_weak(&t->hedge_gets, &have,
						 have - TIER_HEDGE_PER))
			return true;
	add(&t->n.hedge_denied);
	return false;
}

void tier_note_answer_ns(struct tier *t, uint64_t ns)
{
	uint64_t avg = atomic_load(&t->answer_ns);

	atomic_store(&t->last_answer, now_ns(t));
	/* Racy read-modify-write: a lost sample among many is fine. */
	atomic_store(&t->answer_ns, avg ? avg - avg / 16 + ns / 16 : ns);
}

uint64_t tier_hedge_ns(const struct tier *t)
{
	uint64_t floor = 1000000ull * t->cfg.hedge_ms;
	uint64_t avg = atomic_load(&t->answer_ns);
	/* No answer yet (a mount's first GETs all start at once): the tail
	 * is not known, so the hedge waits 4 times its floor. */
	uint64_t tail = TIER_HEDGE_TAIL * (avg ? avg : floor);

	if (!floor)
		return 0;
	return tail > floor ? tail : floor;
}

bool tier_hung(struct tier *t, uint64_t oldest_ns, unsigned int running,
	       uint64_t polled_ns, uint64_t *due_ns)
{
	uint64_t tail = TIER_HUNG_TAIL * atomic_load(&t->answer_ns);
	uint64_t wait = tail > TIER_HUNG_NS ? tail : TIER_HUNG_NS;

	*due_ns = UINT64_MAX;
	/* Hedging off: readers wait on the tier for the attempt's timeout,
	 * whatever it does (the timeouts still open the breaker). */
	if (!t->cfg.hedge_ms || running < TIER_HUNG_MIN_GETS)
		return false;
	/* An answer since the oldest started: not hung while it runs. */
	if (atomic_load(&t->last_answer) >= oldest_ns)
		return false;
	*due_ns = oldest_ns + wait;
	/* Silent past due, as seen by a poll that began past due: an answer
	 * that came before that poll was read and judged by it (last_answer
	 * above). Until then the silence may be the engine thread's (a
	 * stall on a loaded machine), with answers buffered unread. */
	if (polled_ns < *due_ns)
		return false;
	breaker_open(t, "no answer for 500 ms or more");
	return true;
}

void tier_note_verdict(struct tier *t, enum tier_verdict v, enum tier_cut cut,
		       bool waited, uint64_t start_ns)
{
	switch (v) {
	case TIER_HIT:
		add(&t->n.hits);
		break;
	case TIER_MISS:
		add(&t->n.misses);
		break;
	case TIER_MISMATCH:
		add(&t->n.mismatches);
		break;
	case TIER_ERROR:
		add(cut == TIER_CUT_HEDGE     ? &t->n.hedged
		    : cut == TIER_CUT_BREAKER ? &t->n.bypassed
					      : &t->n.fallbacks);
		if (waited)
			add(&t->n.reader_stalls);
		break;
	}
	if (v != TIER_ERROR) {
		breaker_close(t);
		return;
	}
	/* Cut because the breaker opened: already counted. */
	if (cut == TIER_CUT_BREAKER)
		return;
	/* A failed probe opens the breaker again at once; a probe a reader
	 * hedged (for free, tier_hedge_take()) says only that the reader
	 * would not wait the hedge: no verdict, the next fetch probes (or a
	 * held PUT, tier_use()). */
	if (atomic_load(&t->open_until) && !tier_open(t)) {
		if (cut == TIER_CUT_HEDGE)
			atomic_store(&t->probe_until, 0);
		else
			breaker_open(t, "the probe failed");
		return;
	}
	/* What opens it is a tier that makes no progress, not one that is
	 * slow: a hedge is a reader's impatience (4 mounts on a busy
	 * single-process server hedged and timed out enough in a row to
	 * open it, and what it then bypassed never reached the tier), and
	 * an error or timeout counts only when nothing (no GET, no PUT)
	 * answered since this GET started. 8 of those in a row: the tier
	 * answers nobody. */
	if (cut == TIER_CUT_HEDGE || atomic_load(&t->last_answer) >= start_ns)
		return;
	if (atomic_fetch_add(&t->fail_streak, 1) + 1 >= TIER_BREAK_AFTER &&
	    !tier_open(t))
		breaker_open(t, "8 failures in a row, nothing answered");
}

void tier_get_stats(struct tier *t, struct pf_tier_stats *st)
{
	st->gets = atomic_load(&t->n.gets);
	st->hits = atomic_load(&t->n.hits);
	st->misses = atomic_load(&t->n.misses);
	st->mismatches = atomic_load(&t->n.mismatches);
	st->unbound = atomic_load(&t->n.unbound);
	st->fallbacks = atomic_load(&t->n.fallbacks);
	st->hedged = atomic_load(&t->n.hedged);
	st->hedge_denied = atomic_load(&t->n.hedge_denied);
	st->hedge_budget_pct = 100.0 / TIER_HEDGE_PER;
	st->bypassed = atomic_load(&t->n.bypassed);
	st->reader_stalls = atomic_load(&t->n.reader_stalls);
	st->breaker_opens = atomic_load(&t->n.breaker_opens);
	st->breaker_open = atomic_load(&t->open_until) != 0;
	st->puts = atomic_load(&t->n.puts);
	st->put_errors = atomic_load(&t->n.put_errors);
	st->put_dropped = atomic_load(&t->n.put_dropped);
	st->put_pending = atomic_load(&t->n.put_pending);
	st->put_deferred = atomic_load(&t->n.put_deferred);
	st->put_reloaded = atomic_load(&t->n.put_reloaded);
}

/* ---- PUTs ------------------------------------------------------------------
 */

static void job_free(struct tier_job *j)
{
	if (!j)
		return;
	free(j->name);
	free(j->key);
	free(j->etag);
	free(j->data);
	free(j);
}

void tier_put_expect(struct tier *t)
{
	add(&t->n.put_pending);
}

void tier_put_forget(struct tier *t)
{
	atomic_fetch_sub(&t->n.put_pending, 1);
}

/* Appends @j to the queue, or to the held list while the breaker is open
 * (decided under mu: see breaker_close()). mu held. */
static void job_add(struct tier *t, struct tier_job *j)
{
	if (atomic_load(&t->open_until)) {
		add(&t->n.put_deferred);
		*(t->held_tail ? &t->held_tail->next : &t->held_head) = j;
		t->held_tail = j;
		/* A worker then waits for the period's end (job_next()). */
		pthread_cond_signal(&t->cv);
		return;
	}
	*(t->tail ? &t->tail->next : &t->head) = j;
	t->tail = j;
	pthread_cond_signal(&t->cv);
}

int tier_put(struct tier *t, const char *key, size_t key_len, const char *etag,
	     uint64_t size, const void *data)
{
	char name[TIER_NAME_MAX];
	struct tier_job *j;
	uint64_t limit = t->cfg.put_mem ? t->cfg.put_mem : TIER_PUT_MEM_DEFAULT;
	size_t nlen = tier_name(t->prefix, t->bucket, key, key_len, etag, name,
				sizeof(name));
	/* A key-only job's memory: the job, its name, key and ETag. */
	uint64_t foot = sizeof(*j) + nlen + 1 + key_len + strlen(etag) + 1;
	bool keep_bytes = true;

	if (!nlen) {
		tier_put_forget(t);
		return -ENOMEM;
	}
	pthread_mutex_lock(&t->mu);
	if (!t->stop && t->queued_bytes + size > limit && t->cfg.load &&
	    t->keys_bytes + foot <= limit / TIER_KEYS_SHARE)
		keep_bytes = false;
	if (t->stop || (keep_bytes && t->queued_bytes + size > limit)) {
		pthread_mutex_unlock(&t->mu);
		add(&t->n.put_dropped);
		tier_put_forget(t);
		return -EBUSY;
	}
	/* Reserved before the copy. */
	if (keep_bytes)
		t->queued_bytes += size;
	else
		t->keys_bytes += foot;
	pthread_mutex_unlock(&t->mu);

	j = calloc(1, sizeof(*j));
	if (j) {
		j->name = strdup(name);
		j->key = malloc(key_len ? key_len : 1);
		j->key_len = key_len;
		j->etag = strdup(etag);
		j->size = size;
		j->foot = keep_bytes ? 0 : foot;
		j->data = keep_bytes ? malloc(size ? size : 1) : NULL;
	}
	pthread_mutex_lock(&t->mu);
	if (!j || !j->name || !j->key || !j->etag || (keep_bytes && !j->data)) {
		if (keep_bytes)
			t->queued_bytes -= size;
		else
			t->keys_bytes -= foot;
		pthread_mutex_unlock(&t->mu);
		job_free(j);
		add(&t->n.put_dropped);
		tier_put_forget(t);
		return -ENOMEM;
	}
	if (keep_bytes)
		memcpy(j->data, data, size);
	memcpy(j->key, key, key_len);
	job_add(t, j);
	pthread_mutex_unlock(&t->mu);
	return 0;
}

/* How a PUT ended, for the breaker. */
enum put_end {
	PUT_DONE,     /* written */
	PUT_ANSWERED, /* refused by an answer (403, 400...): the tier is up */
	PUT_SILENT,   /* no answer, a 5xx or SlowDown: failing, or too busy */
	PUT_SKIPPED,  /* not sent: its bytes are gone, or bind nothing */
};

/* Writes one object with its metadata. Worker thread, without mu. */
static enum put_end put_one(struct tier *t, struct tier_job *j)
{
	char sum[17], size[24], mac[65], why[512];
	struct tier_want w =
	    tier_want_of(t, j->key, j->key_len, j->etag, j->size);
	struct s3_status st;
	int rc;

	if (!j->data) {
		/* Owed while the queue was full: the bytes from the local
		 * cache, if it still holds them. */
		j->data = malloc(j->size ? j->size : 1);
		if (!j->data || t->cfg.load(t->cfg.load_arg, j->key, j->key_len,
					    j->etag, j->size, j->data)) {
			add(&t->n.put_dropped);
			return PUT_SKIPPED;
		}
		add(&t->n.put_reloaded);
	}
	/* Without a key, only bytes the ETag binds are worth writing: an
	 * MD5-shaped ETag that is not their MD5 (SSE-KMS) would make every
	 * read back a mismatch. */
	if (!w.mac_key && !tier_bytes_bound(&w, j->data, NULL)) {
		add(&t->n.unbound);
		return PUT_SKIPPED;
	}
	tier_sum_hex(j->data, j->size, sum);
	snprintf(size, sizeof(size), "%" PRIu64, j->size);
	const struct s3_meta_header meta[] = {
	    {"hintfs-etag", j->etag},
	    {"hintfs-size", size},
	    {"hintfs-xxh3", sum},
	    {"hintfs-mac", mac},
	};
	size_t n_meta = sizeof(meta) / sizeof(meta[0]);

	if (!tier_mac_hex(&w, j->data, mac))
		n_meta--; /* no key: no MAC header */
	rc = pf_source_put(t->cfg.src, j->name, strlen(j->name), j->data,
			   j->size, meta, n_meta, &st);
	if (!rc || st.http) {
		/* Any answer is the tier making progress (tier_hung(),
		 * tier_note_verdict()). */
		atomic_store(&t->last_answer, now_ns(t));
	}
	if (!rc) {
		add(&t->n.puts);
		return PUT_DONE;
	}
	add(&t->n.put_errors);
	s3_status_describe(&st, rc, why, sizeof(why));
	/* Warning, not error: the object is cached here and at the origin;
	 * the next node to miss it reads the origin. */
	log_warn("shared cache: PUT '%s' failed: %s", j->name, why);
	return st.kind == S3_ERR_DENIED || st.kind == S3_ERR_OTHER ||
		       st.kind == S3_ERR_STALE
		   ? PUT_ANSWERED
		   : PUT_SILENT;
}

/* The job a worker is to send next, or NULL to wait (*@wait_ms: how long
 * at most; -1 until signalled): the queue's head, or, the breaker
 * half-open and PUTs held, the first of those as the probe (*@probe).
 * mu held. */
static struct tier_job *job_next(struct tier *t, bool *probe, long *wait_ms)
{
	struct tier_job *j = t->head;
	uint64_t until, now;

	*probe = false;
	*wait_ms = -1;
	if (j) {
		t->head = j->next;
		if (!t->head)
			t->tail = NULL;
		return j;
	}
	if (!t->held_head)
		return NULL;
	until = atomic_load(&t->open_until);
	now = now_ns(t);
	if (!probe_take(t, now)) {
		/* Open (or another probe runs): look again when the period
		 * ends, or sooner (TIER_HELD_POLL_MS). */
		uint64_t ms = until > now ? (until - now) / 1000000u + 1 : 0;

		*wait_ms =
		    ms < TIER_HELD_POLL_MS ? (long)ms : TIER_HELD_POLL_MS;
		if (!*wait_ms)
			*wait_ms = 1;
		return NULL;
	}
	j = t->held_head;
	t->held_head = j->next;
	if (!t->held_head)
		t->held_tail = NULL;
	*probe = true;
	return j;
}

/* Gives back the memory of job @j (sent or dropped). mu held. */
static void job_done(struct tier *t, struct tier_job *j)
{
	if (j->foot)
		t->keys_bytes -= j->foot;
	else
		t->queued_bytes -= j->size;
	atomic_fetch_sub(&t->n.put_pending, 1);
	job_free(j);
}

static void *put_worker(void *arg)
{
	struct tier *t = arg;

	pthread_setname_np(pthread_self(), "hintfs-tierput");
	pthread_mutex_lock(&t->mu);
	for (;;) {
		struct tier_job *j;
		enum put_end end;
		struct timespec ts;
		bool probe;
		long wait_ms;

		if (t->stop)
			break;
		j = job_next(t, &probe, &wait_ms);
		if (!j) {
			if (wait_ms < 0) {
				pthread_cond_wait(&t->cv, &t->mu);
				continue;
			}
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += wait_ms / 1000;
			ts.tv_nsec += wait_ms % 1000 * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&t->cv, &t->mu, &ts);
			continue;
		}
		pthread_mutex_unlock(&t->mu);
		end = put_one(t, j);
		if (probe) {
			/* The probe's verdict: any answer closes the breaker
			 * (and queues what is held); silence opens it again.
			 * One not sent says nothing: the next held PUT
			 * probes. */
			if (end == PUT_DONE || end == PUT_ANSWERED)
				breaker_close(t);
			else if (end == PUT_SILENT &&
				 atomic_load(&t->open_until))
				breaker_open(t, "a PUT probe failed");
			else
				atomic_store(&t->probe_until, 0);
		}
		pthread_mutex_lock(&t->mu);
		if (probe && end == PUT_SILENT && !t->stop) {
			/* Still owed, its bytes (if read back) let go again:
			 * first in line for the next probe, or queued if an
			 * answer to a fetch closed the breaker meanwhile. */
			if (j->foot) {
				free(j->data);
				j->data = NULL;
			}
			if (atomic_load(&t->open_until)) {
				j->next = t->held_head;
				t->held_head = j;
				if (!t->held_tail)
					t->held_tail = j;
			} else {
				j->next = NULL;
				job_add(t, j);
			}
			continue;
		}
		job_done(t, j);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

/* ---- life
 * -------------------------------------------------------------------- */

int tier_start(const struct tier_config *cfg, struct tier **out)
{
	pthread_condattr_t ca;
	struct tier *t;
	int rc = 0;

	if (strlen(cfg->prefix) > TIER_PREFIX_MAX ||
	    (cfg->mac_key && (cfg->mac_key_len < TIER_KEY_MIN ||
			      cfg->mac_key_len > TIER_KEY_MAX)))
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->cfg = *cfg;
	atomic_store(&t->open_ns, TIER_BREAK_NS);
	t->prefix = strdup(cfg->prefix);
	t->bucket = strdup(cfg->origin_bucket);
	if (cfg->mac_key) {
		t->mac_key = malloc(cfg->mac_key_len);
		if (t->mac_key)
			memcpy(t->mac_key, cfg->mac_key, cfg->mac_key_len);
	}
	t->cfg.mac_key = t->mac_key;
	pthread_mutex_init(&t->mu, NULL);
	/* The workers' timed waits (job_next()) on the monotonic clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (!t->prefix || !t->bucket || (cfg->mac_key && !t->mac_key)) {
		tier_stop(t);
		return -ENOMEM;
	}
	for (; t->n_workers < TIER_PUT_WORKERS; t->n_workers++) {
		rc = -proc_thread_create(&t->workers[t->n_workers], NULL,
					 put_worker, t);
		if (rc)
			break;
	}
	if (!t->n_workers) {
		tier_stop(t);
		return rc;
	}
	*out = t;
	return 0;
}

void tier_stop(struct tier *t)
{
	struct tier_job *j;

	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = true;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->mu);
	for (unsigned int i = 0; i < t->n_workers; i++)
		pthread_join(t->workers[i], NULL);
	while ((j = t->head)) {
		t->head = j->next;
		job_free(j);
	}
	/* Held PUTs die with the mount: the next node to miss those objects
	 * reads the origin and writes them. */
	while ((j = t->held_head)) {
		t->held_head = j->next;
		job_free(j);
	}
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t->prefix);
	free(t->bucket);
	if (t->mac_key)
		OPENSSL_cleanse(t->mac_key, t->cfg.mac_key_len);
	free(t->mac_key);
	free(t);
}

const char *tier_prefix(const struct tier *t)
{
	return t->prefix;
}

const char *tier_origin_bucket(const struct tier *t)
{
	return t->bucket;
}

bool tier_wants(struct tier *t, const char *key, size_t key_len,
		const char *etag)
{
	struct tier_want w = tier_want_of(t, key, key_len, etag, 0);

	if (tier_can_bind(&w))
		return true;
	add(&t->n.unbound);
	return false;
}

enum tier_verdict tier_check(const struct tier *t, ssize_t got,
			     const struct s3_status *st,
			     const struct s3_obj_meta *m, const char *key,
			     size_t key_len, const char *etag, uint64_t size,
			     const void *body)
{
	struct tier_want w = tier_want_of(t, key, key_len, etag, size);

	return tier_judge(got, st, m, &w, body);
}
