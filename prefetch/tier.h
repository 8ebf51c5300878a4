/*
 * prefetch/tier.h - the shared cache tier (private to prefetch): a second
 * S3 bucket, near the readers, that holds copies of origin objects so that
 * N nodes read each object from the origin once between them.
 *
 * Tier objects are named by the origin bucket, key and ETag (tier_name()),
 * so two versions of a key never mix, and carry the origin ETag and size
 * (and, with a cluster key, a MAC) as x-amz-meta-hintfs-* headers. Whoever
 * can PUT to the tier can write those headers, so a read back is served
 * only when something the writer cannot forge binds its bytes to the
 * origin's version (tier_judge()): the origin's ETag where it is an MD5,
 * else an HMAC under a key only the cluster holds; anything else is a
 * mismatch, never served, and an object nothing can bind skips the tier. The
 * tier source (tier_source.c, tier_source_create()) decides where a GET goes
 * and what its answer means, under the engine, which sees one source per
 * network thread; this file (tier.c) owns the naming, the check, the background
 * PUTs of objects the origin served after a tier miss (a bounded queue: full
 * drops and counts, a reader never waits on it), the hedge budget, the breaker
 * that sends fetches straight to the origin while the tier fails or hangs, and
 * the counters. hintfs never deletes on the tier: its lifecycle rules evict.
 */
#ifndef HINTFS_PREFETCH_TIER_H
#define HINTFS_PREFETCH_TIER_H

#include "prefetch/prefetch.h"
#include "prefetch/source.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The longest tier object name: the prefix (at most 512 bytes, checked by
 * tier_start()), "hintfs-v1/" and 64 hex digits. */
#define TIER_NAME_MAX 600

/** What the answer to a tier GET means. */
enum tier_verdict {
	TIER_HIT,      /**< the object, checked: serve it */
	TIER_MISS,     /**< not there (NoSuchKey): origin, then PUT */
	TIER_MISMATCH, /**< there, but its size, ETag or bytes are not the
			    origin's: origin, then PUT the right one */
	TIER_ERROR,    /**< no good answer (5xx, reset, truncated, timeout,
			    refused): origin, no PUT */
};

/**
 * Writes into @out (@cap bytes) the tier name of version @etag of key
 * @key (@key_len bytes) of origin bucket @bucket, under @prefix ("" or
 * ending in '/'): prefix + "hintfs-v1/" + hex SHA-256 of bucket, key and
 * ETag, each followed by a NUL. Fixed length after the prefix, whatever
 * the key holds. Returns the length, or 0 when @cap is too small. Pure.
 */
size_t tier_name(const char *prefix, const char *bucket, const char *key,
		 size_t key_len, const char *etag, char *out, size_t cap);

/** The x-amz-meta-hintfs-xxh3 value of @len bytes at @data (16 hex): still
 *  written, for readers of older versions; it proves nothing (whoever
 *  forges the bytes computes it), so it is never checked. */
void tier_sum_hex(const void *data, size_t len, char out[17]);

/** What an origin ETag says about the bytes (tier_etag_kind()). */
enum tier_etag {
	TIER_ETAG_OPAQUE, /**< nothing known: SSE-C, most multipart, other
			       servers' formats */
	TIER_ETAG_MD5,	  /**< 32 hex digits: the MD5 of the bytes (a
			       single-part upload without SSE-KMS/SSE-C) */
	TIER_ETAG_MD5_1,  /**< "<32 hex>-1": a multipart upload of one part,
			       the MD5 of the bytes' MD5 */
};

/** The kind of @etag (quotes around it allowed). Pure. */
enum tier_etag tier_etag_kind(const char *etag);

/** What a tier object must be to be served: the origin's listing of it,
 *  and the cluster's key (see tier_judge()). */
struct tier_want {
	const char *bucket; /**< the origin bucket */
	const char *key;    /**< the object key, @key_len bytes */
	size_t key_len;
	const char *etag;	      /**< as listed, quotes included */
	uint64_t size;		      /**< as listed */
	const unsigned char *mac_key; /**< -o shared_cache_key, or NULL */
	size_t mac_key_len;
};

/** Whether a tier object of @w can be proven to be the origin's: its ETag
 *  is an MD5 (tier_etag_kind()) or a MAC key is set. Pure. */
bool tier_can_bind(const struct tier_want *w);

/**
 * The x-amz-meta-hintfs-mac value of the bytes @data (@w->size of them):
 * hex HMAC-SHA256 under @w->mac_key of the scheme, bucket, key, ETag and
 * size (each NUL-terminated) and the bytes. Returns false when @w has no
 * key or OpenSSL fails. Pure.
 */
bool tier_mac_hex(const struct tier_want *w, const void *data, char out[65]);

/**
 * Whether @data (@w->size bytes) is proven to be the origin's version of
 * @w: its MD5 matches an MD5 ETag, or its MAC matches @mac_hex (the
 * object's header, NULL or "" when it has none) under the cluster key.
 * Pure.
 */
bool tier_bytes_bound(const struct tier_want *w, const void *data,
		      const char *mac_hex);

/**
 * Judges the end of a tier GET of the object @w: @got is what
 * s3_xfer_finish() returned (bytes, or a -errno with @st), @m the answer's
 * headers, @body the bytes. A hit needs the listed ETag and size in the
 * headers and tier_bytes_bound(): the headers alone prove nothing. Pure.
 */
enum tier_verdict tier_judge(ssize_t got, const struct s3_status *st,
			     const struct s3_obj_meta *m,
			     const struct tier_want *w, const void *body);

struct tier_config {
	/** The tier's source (prefetch/source.h): its PUTs go through it
	 *  (from the PUT workers), and it is the breaker's and tier_hung()'s
	 *  clock: the engine's tier source, whose clock is its origin
	 *  source's (the one a unit test moves), so that the start times the
	 *  engine passes and the answers' times are on one clock. Not owned;
	 *  it outlives tier_stop(). */
	struct pf_source *src;
	const char *origin_bucket;    /**< names tier objects */
	const char *prefix;	      /**< "" or ending in '/' */
	unsigned int hedge_ms;	      /**< see tier_hedge_ms() */
	uint64_t put_mem;	      /**< bytes queued for PUT at most;
					   0: default */
	const unsigned char *mac_key; /**< -o shared_cache_key's bytes, or
					   NULL; copied */
	size_t mac_key_len;
	/** Reads object @key, version @etag, @size bytes, into @buf from
	 *  the local cache (called with @load_arg by a PUT worker, without
	 *  any of the tier's locks): 0, or -ENODATA when the cache no longer
	 *  holds it. Lets a PUT owed while the queue's memory was full wait
	 *  as its key alone. NULL: such a PUT is dropped. */
	int (*load)(void *arg, const char *key, size_t key_len,
		    const char *etag, uint64_t size, void *buf);
	void *load_arg;
};

struct tier;

/**
 * Starts the tier's PUT workers. Returns 0, -EINVAL (prefix too long) or
 * -ENOMEM. Call from one thread.
 */
int tier_start(const struct tier_config *cfg, struct tier **out);

/** Stops the workers (a PUT under way ends first) and frees @t, dropping
 *  what is still queued. NULL ok. */
void tier_stop(struct tier *t);

/** The tier's bucket naming inputs, for tier_name(). */
const char *tier_prefix(const struct tier *t);
const char *tier_origin_bucket(const struct tier *t);

/**
 * Whether object @key (@key_len bytes), version @etag, may use the tier:
 * tier_can_bind() with this tier's key; false counts it in unbound. Any
 * thread.
 */
bool tier_wants(struct tier *t, const char *key, size_t key_len,
		const char *etag);

/** tier_judge() of object @key, version @etag, @size bytes, with this
 *  tier's origin bucket and key. Any thread. */
enum tier_verdict tier_check(const struct tier *t, ssize_t got,
			     const struct s3_status *st,
			     const struct s3_obj_meta *m, const char *key,
			     size_t key_len, const char *etag, uint64_t size,
			     const void *body);

/**
 * How long a reader waits on a tier GET before its object is read from the
 * origin instead, in ns, counted from when the reader began to wait (not
 * from the GET's start: a prefetch may have run long before): the
 * configured hedge_ms, or 4 times the tier's recent answer time when that
 * is longer; 0: never (the attempt's own timeout). Any thread.
 */
uint64_t tier_hedge_ns(const struct tier *t);

/**
 * Takes one hedge from the budget (1 per 200 tier GETs, 2 saved at
 * most): true, or false (counted in hedge_denied) when it is spent and
 * the reader waits on for the tier. Free while the breaker is half-open
 * (the GET is its probe: its cut ends the probe without a verdict, see
 * tier_note_verdict()). Any thread.
 */
bool tier_hedge_take(struct tier *t);

/** Feeds the time a tier GET took to its answer (hit, miss or mismatch)
 *  to tier_hedge_ns() and tier_hung(). Any thread. */
void tier_note_answer_ns(struct tier *t, uint64_t ns);

/**
 * Whether the tier is hung: @running GETs (4 at least) run, the oldest,
 * started at @oldest_ns, has waited past the hung time (500 ms, or 8 times
 * the usual answer time: its due time) and no GET answered since it
 * started, as seen by a poll that began at @polled_ns, past the due time
 * (the latest poll of the sockets whose answers were all judged since:
 * answers buffered unread while the caller's thread stalled are not
 * silence); never with hedging off. True opens the breaker (the caller
 * then cuts the GETs running). *@due_ns: the due time, UINT64_MAX when
 * the question need not be asked again while these GETs run; a due time
 * past and a false answer want a poll at once. Times on the tier's clock.
 * Any thread.
 */
bool tier_hung(struct tier *t, uint64_t oldest_ns, unsigned int running,
	       uint64_t polled_ns, uint64_t *due_ns);

/**
 * Whether a fetch should try the tier now: true while the breaker is
 * closed, and for one fetch at a time (the probe) once an open period
 * ended, unless PUTs are held (tier_put()): then one of them is the probe
 * (a PUT worker sends it; no reader waits on it or hedges it away). Else
 * false, counted in bypassed: the fetch reads the origin and owes the
 * tier a PUT. Call once per fetch, when its GET starts. Any thread.
 */
bool tier_use(struct tier *t);

/** Whether the breaker is open (not half-open): GETs still running on
 *  the tier are better read from the origin. Any thread. */
bool tier_open(const struct tier *t);

/** Why a tier GET ended without an answer, if it was cut. */
enum tier_cut {
	TIER_CUT_NONE,	  /**< not cut: its own answer, error or timeout */
	TIER_CUT_HEDGE,	  /**< a reader waited past the hedge */
	TIER_CUT_BREAKER, /**< the breaker opened while it ran */
};

/** Counts a tier GET's start (and feeds the hedge budget), and feeds its
 *  verdict to the stats and the breaker: an error or a timeout counts
 *  towards opening it only when the tier answered nothing (no GET, no
 *  PUT) since this GET started at @start_ns (tier clock): a tier that
 *  answers others, however slowly, is busy, not failing. A hedge is a
 *  reader's impatience and never counts. Any answer closes it; a
 *  half-open probe's error or timeout opens it again, its hedge ends the
 *  probe without a verdict. @waited: a reader waited on it. Any thread. */
void tier_note_get(struct tier *t);
void tier_note_verdict(struct tier *t, enum tier_verdict v, enum tier_cut cut,
		       bool waited, uint64_t start_ns);

/**
 * Says a PUT will follow (the object is being read from the origin): it
 * counts in put_pending from now, so that a reader of the stats who sees
 * no PUT pending knows every object read so far is in the tier or was
 * dropped. Each expectation ends in one tier_put() or tier_put_forget().
 * Any thread.
 */
void tier_put_expect(struct tier *t);
void tier_put_forget(struct tier *t);

/**
 * Queues a PUT of object @key (@key_len bytes), version @etag, @size bytes
 * at @data (copied) to the tier, ending one tier_put_expect(). While the
 * breaker is open (or half-open) the PUT is held (put_deferred) and sent
 * once the tier answers again: a PUT worker's probe or a fetch's answer
 * closes the breaker. Bytes that do not fit the queue's memory are not
 * kept when the config has a load callback: the key waits alone (within a
 * 16th of that memory) and the bytes are read back from the local cache
 * when the PUT is sent (put_reloaded). Returns 0, or -EBUSY when neither
 * fits (counted in put_dropped) or -ENOMEM. Any thread; never blocks on
 * the network.
 */
int tier_put(struct tier *t, const char *key, size_t key_len, const char *etag,
	     uint64_t size, const void *data);

/** Fills @st. Any thread. */
void tier_get_stats(struct tier *t, struct pf_tier_stats *st);

/**
 * The tier source: @n sources (into @out), one per network thread, the
 * i-th over origin source @origins[i] and its tier sibling @tiers[i] (its
 * GETs end through @origins[i]'s next_done), all over tier @t. A GET with
 * pf_get.tier reads the tier first while tier_use() lets it (one attempt
 * of 2 s at most), its answer proven by tier_check() before it is
 * delivered; a miss, a mismatch, an error or a timeout starts its origin
 * GET at once (pf_get.fresh_ns: the whole retry budget), as do the hedge
 * (a reader waited past tier_hedge_ns(), within the budget), the breaker
 * opening and the tier hanging, which cut the tier attempt; what the
 * origin serves after a miss, a mismatch or a bypass is queued for PUT.
 * Its clock, retry policy and PUTs are @origins[i]'s. Each is destroyed
 * with pf_source_destroy() (the inner sources are not owned: destroy them
 * after, and @t after every GET is released). Returns 0 or -ENOMEM. One
 * thread; each source then as source.h says.
 */
int tier_source_create(struct tier *t, unsigned int n,
		       struct pf_source *const *origins,
		       struct pf_source *const *tiers, struct pf_source **out);

#endif /* HINTFS_PREFETCH_TIER_H */
