/**
 * prefetch/source.h - the one seam between hintfs's engine and an object
 * store: a *source* starts a ranged GET into a caller's buffer, cancels it,
 * and reports its end with the bytes received or an error kind; it writes
 * an object (the shared cache tier's PUTs), gives the retry policy the GETs
 * follow, and keeps the clock (private to prefetch and its unit tests).
 * Every object-store call of the engine and of the tier (tier.c) goes
 * through one.
 *
 * Three implement it: the curl source (source_curl.c: s3_xfer transfers
 * in one curl multi handle driven by netloop.c, what the daemon runs),
 * the fake of tests/unit/fake_source.c (objects in memory, answers when a
 * test's virtual clock says so), on which the engine's policies are
 * unit-tested without a mount or a server, and the tier source
 * (tier_source.c), which wraps an origin source and its tier sibling and
 * decides where each GET goes (the shared cache tier, tier.h): with a
 * tier, the engine drives one tier source per network thread and sees
 * the tier no more. The engine's clock is its origin source's
 * (pf_source_now()): retry due times, the SlowDown cut, the hedge, the
 * hint pacing and the tier's breaker all run on it; so does its retry
 * policy (pf_source_retry()).
 *
 * Threads: pf_source_wake(), pf_source_now() and pf_source_retry() from
 * any thread; pf_source_put() from any thread but a network thread (the
 * tier's PUT workers call it, and it blocks for the whole request);
 * everything else from the one thread that drives the source (one of the
 * engine's network threads, each with its own source and tier sibling),
 * after its creation and before its destroy. A GET not running belongs to
 * no thread: its next attempt may start on another source of the same
 * kind and client (another network thread's), which takes over the GET's
 * state (curl: its easy handle, out of any multi handle between attempts;
 * the bytes a retry keeps).
 */
#ifndef HINTFS_PREFETCH_SOURCE_H
#define HINTFS_PREFETCH_SOURCE_H

#include "prefetch/s3/s3.h"
#include "common/retry.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct pf_source;

/* pf_get.wait_ns while no reader waits. */
#define PF_GET_NO_WAIT UINT64_MAX

/**
 * One ranged GET as the engine asks for it: bytes [off, off + len) of
 * key into buf. Caller-owned storage (the engine's part holds one); the
 * caller fills the request fields before the first pf_source_start() and
 * leaves src and h to the source until pf_get_release().
 */
struct pf_get {
	const char *key; /**< read at the first start only (a
			      source copies what it keeps) */
	size_t key_len;
	const char *etag; /**< If-Match, or NULL; as key */
	uint64_t off;
	size_t len;
	void *buf;	/**< len bytes; outlives the GET */
	bool whole;	/**< the range is the whole object */
	bool want_meta; /**< keep the answer's metadata (the tier) */
	/** May be read from the shared cache tier first: a whole object
	 *  the tier can prove (a tier source decides, tier.h; any other
	 *  source reads the origin). */
	bool tier;
	/** When a reader began to wait on it, PF_GET_NO_WAIT while none
	 *  has: the caller stores it (any thread), a tier source hedges on
	 *  it. NULL: no reader ever will. */
	const _Atomic uint64_t *wait_ns;
	/** Set by a source when the GET's origin attempts began after a try
	 *  that costs the caller no attempt (a tier source's tier GET): its
	 *  retry budget counts from then. The caller clears it. */
	uint64_t fresh_ns;
	struct pf_source *src; /**< the source it runs on; NULL: none yet */
	void *h;	       /**< the source's own state for it */
};

/** A source's operations; see the pf_source_* wrappers for each. */
struct pf_source_ops {
	int (*start)(struct pf_source *s, struct pf_get *g, bool retry,
		     long timeout_ms);
	void (*cancel)(struct pf_source *s, struct pf_get *g,
		       struct s3_status *st);
	bool (*running)(const struct pf_source *s, const struct pf_get *g);
	uint64_t (*run)(struct pf_source *s, int timeout_ms, bool *timed_out);
	struct pf_get *(*next_done)(struct pf_source *s, ssize_t *got,
				    bool *retryable, struct s3_status *st);
	const struct s3_obj_meta *(*meta)(const struct pf_source *s,
					  const struct pf_get *g);
	void (*release)(struct pf_source *s, struct pf_get *g);
	void (*wake)(struct pf_source *s);
	uint64_t (*now_ns)(const struct pf_source *s);
	int (*put)(struct pf_source *s, const char *name, size_t name_len,
		   const void *data, size_t len,
		   const struct s3_meta_header *meta, size_t n_meta,
		   struct s3_status *st);
	const struct retry_policy *(*retry)(const struct pf_source *s);
	void (*destroy)(struct pf_source *s);
};

/** The head of every source (implementations embed it first). */
struct pf_source {
	const struct pf_source_ops *ops;
};

/**
 * Starts one attempt of @g on @s, ending by itself after @timeout_ms. A
 * @retry keeps the bytes received so far and asks only for the rest.
 * Returns 0 (its end comes from pf_source_next_done() of the driving
 * source) or -errno (it did not start; nothing will come).
 */
static inline int pf_source_start(struct pf_source *s, struct pf_get *g,
				  bool retry, long timeout_ms)
{
	g->src = s;
	return s->ops->start(s, g, retry, timeout_ms);
}

/**
 * Cancels the running attempt of @g now: it ends as a transfer aborted
 * would (details in @st) and never comes from pf_source_next_done().
 */
static inline void pf_source_cancel(struct pf_get *g, struct s3_status *st)
{
	g->src->ops->cancel(g->src, g, st);
}

/** Whether an attempt of @g is running (started, not yet ended). */
static inline bool pf_get_running(const struct pf_get *g)
{
	return g->src && g->src->ops->running(g->src, g);
}

/**
 * Waits up to @timeout_ms (0: only looks) for GETs to progress or a
 * wake-up. Returns the nanoseconds spent waiting; *@timed_out says the
 * whole timeout ran out with nothing to wake it.
 */
static inline uint64_t pf_source_run(struct pf_source *s, int timeout_ms,
				     bool *timed_out)
{
	return s->ops->run(s, timeout_ms, timed_out);
}

/**
 * The next GET whose attempt ended, or NULL: *@got the bytes of the
 * range received (all attempts together) or a -errno, with the error's
 * kind in @st and *@retryable whether another attempt may succeed.
 */
static inline struct pf_get *pf_source_next_done(struct pf_source *s,
						 ssize_t *got, bool *retryable,
						 struct s3_status *st)
{
	return s->ops->next_done(s, got, retryable, st);
}

/** The metadata of @g's last answer (want_meta), or NULL if none. */
static inline const struct s3_obj_meta *pf_get_meta(const struct pf_get *g)
{
	return g->src ? g->src->ops->meta(g->src, g) : NULL;
}

/** Frees the source's state for @g (not running); another start may
 *  follow, on any source. Accepts a @g never started. */
static inline void pf_get_release(struct pf_get *g)
{
	if (g->src)
		g->src->ops->release(g->src, g);
	g->src = NULL;
	g->h = NULL;
}

/** Makes the current or next pf_source_run() return soon. Any thread. */
static inline void pf_source_wake(struct pf_source *s)
{
	s->ops->wake(s);
}

/** The source's clock, in nanoseconds (monotonic). Any thread. */
static inline uint64_t pf_source_now(const struct pf_source *s)
{
	return s->ops->now_ns(s);
}

/**
 * Writes @len bytes at @data as object @name (@name_len bytes) with the
 * x-amz-meta- headers @meta (@n_meta of them), within the retry policy;
 * returns when it is written or refused: 0, or -errno with the error's
 * kind in @st (st->http nonzero when the store answered). Blocks: any
 * thread but the one that drives @s (the tier's PUT workers).
 */
static inline int pf_source_put(struct pf_source *s, const char *name,
				size_t name_len, const void *data, size_t len,
				const struct s3_meta_header *meta,
				size_t n_meta, struct s3_status *st)
{
	return s->ops->put(s, name, name_len, data, len, meta, n_meta, st);
}

/** The retry policy of @s's requests: the mount's one budget of attempts
 *  and time (common/retry.h). Any thread. */
static inline const struct retry_policy *
pf_source_retry(const struct pf_source *s)
{
	return s->ops->retry(s);
}

/** Frees @s; every GET on it released first. Accepts NULL. */
static inline void pf_source_destroy(struct pf_source *s)
{
	if (s)
		s->ops->destroy(s);
}

/**
 * The curl source: GETs of @client as s3_xfer transfers (If-Match, Range,
 * a fresh connection per retry), driven by curl's multi interface through
 * netloop.c; its PUTs s3_put_object() of @client (blocking, on the
 * caller's thread), its retry policy @client's, its clock mono_ns().
 * @max_connects: connections open
 * at most, all of them kept alive between requests (with a sibling's).
 * Returns 0 or -errno; *@out is the caller's to destroy.
 */
int pf_source_curl_create(struct s3_client *client, long max_connects,
			  struct pf_source **out);

/**
 * A second curl source for @client that shares @origin's multi handle
 * (its GETs end through @origin's pf_source_run() and next_done; its PUTs
 * and retry policy are @client's). The engine's tier client runs on one.
 * Destroy it before @origin.
 */
int pf_source_curl_sibling(struct pf_source *origin, struct s3_client *client,
			   struct pf_source **out);

#endif /* HINTFS_PREFETCH_SOURCE_H */
