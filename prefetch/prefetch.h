/**
 * prefetch/prefetch.h - the network side of hintfs (public header).
 *
 * Two objects. The S3 client (s3_*): one per mounted bucket, shared by all
 * threads, that lists a prefix and reads byte ranges of objects; every
 * call is blocking and thread-safe, and concurrent calls run on separate
 * connections from a pool, so readers of different files never wait on
 * each other. The prefetch engine (pf_*): one thread that fetches objects
 * into the cache ahead of the readers along the hinted order, and serves
 * reads that miss. With a shared cache tier (pf_config.tier_s3: a second
 * client, another bucket) the engine reads an object there before the
 * origin and writes what the origin served back to it (prefetch/tier.h).
 *
 * Errors are -errno values. The mapping from HTTP statuses, S3 error codes
 * and curl codes happens once, in the S3 client (s3_error.c); callers that
 * need to tell the user more (mount-time errors) get the details in a
 * struct s3_status.
 */
#ifndef HINTFS_PREFETCH_PREFETCH_H
#define HINTFS_PREFETCH_PREFETCH_H

#include "cache/cache.h"
#include "prefetch/creds.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Where and how to reach the bucket. All strings are copied by create. */
struct s3_config {
	const char *bucket;        /**< "my-bucket" */
	const char *endpoint;      /**< "https://host[:port]", no path */
	const char *region;        /**< signing region, "us-east-1" */
	bool path_style;           /**< /bucket/key instead of bucket.host/key */
	bool no_sign;              /**< anonymous requests, no Authorization */
	bool insecure;             /**< skip TLS verification (-o insecure) */
	const char *ca_file;       /**< extra CA bundle, or NULL */
	struct creds *creds;       /**< not owned, outlives the client; NULL:
				        fixed keys from the three below */
	const char *access_key;    /**< NULL with no_sign or creds */
	const char *secret_key;
	const char *session_token; /**< NULL when none */
	int max_attempts;          /**< tries per request; 0 = default (10);
				        the one budget: the engine's GETs
				        follow it too (common/retry.h) */
	int retry_time_ms;         /**< give up retrying after this long;
				        0 = default (60 s) */
	int stall_timeout_s;       /**< abandon an attempt that moves no byte
				        for this long; 0 = default (5 s) */
	int list_workers;          /**< ListObjectsV2 requests in flight for
				        a listing of more than one page;
				        0 = default (16), 1 = one page after
				        another */
};

/**
 * What kind of failure a request met, decided once, in the S3 client, from
 * the HTTP status, the S3 error code and the curl code. Callers count and
 * decide by it (the engine halves its in-flight limit on SLOWDOWN, fs
 * invalidates on STALE) and never look at a status themselves.
 */
enum s3_err_kind {
	S3_ERR_NONE = 0,  /**< no request failed (a local error, or none) */
	S3_ERR_SLOWDOWN,  /**< throttled: 503 SlowDown, 429; back off */
	S3_ERR_SERVER,    /**< any other 5xx */
	S3_ERR_NETWORK,   /**< no answer: reset, timeout, refused, TLS,
			       truncated body */
	S3_ERR_STALE,     /**< the object changed or went since the listing
			       (412 on If-Match, NoSuchKey) */
	S3_ERR_DENIED,    /**< credentials or signature refused (401/403) */
	S3_ERR_OTHER,     /**< anything else: another 4xx, a malformed
			       answer */
};

/** What the server or the connection said when a request failed. */
struct s3_status {
	enum s3_err_kind kind; /**< S3_ERR_NONE when no request failed */
	long http;         /**< HTTP status, 0 when no response came; for
			        messages (s3_status_describe()) only */
	char code[64];     /**< S3 error code ("NoSuchBucket"), or curl's
			        reason when no response came; "" if none */
	char message[256]; /**< server's <Message> or curl's text */
};

/** One listed object, passed to an s3_list_cb. */
struct s3_object {
	const char *key;  /**< full key (prefix included), decoded; may
			       hold any byte but NUL */
	size_t key_len;
	uint64_t size;
	int64_t mtime;    /**< LastModified, seconds since the epoch */
	const char *etag; /**< as sent, quotes included */
};

/**
 * Called once per listed object, in key order. The strings are valid only
 * during the call. Return 0 to go on, or a -errno that stops the listing
 * and becomes s3_list()'s result.
 */
typedef int (*s3_list_cb)(void *arg, const struct s3_object *obj);

struct s3_client;

/**
 * Creates a client for @cfg. Returns 0 and stores it in *@out, -EINVAL
 * for a bad endpoint (message in @err of @err_len bytes), or -ENOMEM.
 * Call from one thread; the client may then be used from any thread.
 */
int s3_client_create(const struct s3_config *cfg, struct s3_client **out,
		     char *err, size_t err_len);

/** Destroys @c after every call on it has returned. Accepts NULL. */
void s3_client_destroy(struct s3_client *c);

/**
 * Lists every object under @prefix (may be "") with paginated
 * ListObjectsV2 (encoding-type=url), calling @cb for each, exactly once.
 * A listing longer than one page runs up to cfg.list_workers requests at
 * once over disjoint key ranges (found with a few delimiter pages); @cb is
 * then called from those threads, one call at a time, in no set order.
 * Returns 0, the first non-zero result of @cb, or a -errno for the request
 * that failed after its retries, with details in @st (may be NULL).
 */
int s3_list(struct s3_client *c, const char *prefix, s3_list_cb cb, void *arg,
	    struct s3_status *st);

/**
 * Reads @len bytes at @off of object @key (@key_len bytes) into @buf. When
 * @etag is not NULL the request carries If-Match, so a changed object
 * fails with -ESTALE instead of returning bytes of another version. The
 * caller keeps @off + @len within the object's listed size. Returns the
 * number of bytes read (== @len unless the object is now shorter), or a
 * -errno with details in @st (may be NULL): -ESTALE (changed or deleted
 * object), -EACCES, -EIO, -ETIMEDOUT, ...
 */
ssize_t s3_get_range(struct s3_client *c, const char *key, size_t key_len,
		     const char *etag, uint64_t off, size_t len, void *buf,
		     struct s3_status *st);

/** One x-amz-meta-NAME header of a PUT: @name without the prefix. */
struct s3_meta_header {
	const char *name;  /**< "hintfs-etag": lower case, [a-z0-9-] */
	const char *value; /**< printable ASCII */
};

/**
 * Writes @len bytes at @data as object @key (@key_len bytes) with the
 * user metadata @meta (@n_meta headers, at most 8), in one PUT, retried
 * within the client's budget. The body is not signed (UNSIGNED-PAYLOAD):
 * what protects it is the checksum the caller puts in @meta. Returns 0 or
 * a -errno with details in @st (may be NULL). Any thread; blocks.
 */
int s3_put_object(struct s3_client *c, const char *key, size_t key_len,
		  const void *data, size_t len, const struct s3_meta_header *meta,
		  size_t n_meta, struct s3_status *st);

/**
 * The requests sent so far (attempts, retries included): ListObjectsV2
 * pages in *@lists, GETs of objects in *@gets. Any thread.
 */
void s3_client_counts(struct s3_client *c, uint64_t *lists, uint64_t *gets);

/** PUTs sent so far (attempts, retries included). Any thread. */
uint64_t s3_client_puts(struct s3_client *c);

/** The client's credentials (for stats), or NULL with no_sign. */
struct creds *s3_client_creds(struct s3_client *c);

/**
 * Connections opened so far (a request on a kept-alive connection opens
 * none): with s3_client_counts(), how well connections are reused. Any
 * thread.
 */
uint64_t s3_client_connects(struct s3_client *c);

/**
 * Writes a one-line description of a failed request into @buf: the S3
 * code and message, or the connection problem, with a hint at the usual
 * cause ("check AWS_SECRET_ACCESS_KEY"). Never includes credentials.
 */
void s3_status_describe(const struct s3_status *st, int err, char *buf,
			size_t len);

/* ---- the prefetch engine -------------------------------------------------- */

struct cache;

/**
 * Objects are named by the caller's ids (0 .. n_ids-1; hintfs uses its
 * namespace's node indexes). The engine asks the caller what an id is.
 */
struct pf_object {
	const char *key;  /**< full key; points into the describe buffer */
	size_t key_len;
	const char *etag; /**< as listed, quotes included; valid as long as
			       the caller's namespace */
	uint64_t size;
};

/**
 * Describes object @id into @o; the key is written into @keybuf (@cap
 * bytes). Returns 0, or -ENOENT when @id is not a file. Thread-safe.
 */
typedef int (*pf_describe_cb)(void *arg, uint32_t id, char *keybuf, size_t cap,
			      struct pf_object *o);

/**
 * The id of the object with key @key, or PF_NO_ID. Thread-safe. Asked
 * only for cache entries of an earlier session, once per entry.
 */
typedef uint32_t (*pf_key_id_cb)(void *arg, const char *key, size_t key_len);

/** No object: what an id lookup gives for a key or path not in the listing. */
#define PF_NO_ID UINT32_MAX

/** pf_config.pace_ms: no pacing, the whole window is fetched at once. */
#define PF_PACE_OFF UINT32_MAX

/**
 * The engine's configuration. Its GETs follow the client's retry policy
 * (s3_config.max_attempts, retry_time_ms): one budget per mount.
 */
struct pf_config {
	struct s3_client *s3;     /**< not owned */
	struct cache *cache;      /**< not owned; its next-use callback is
				       the engine's from pf_start() to
				       pf_stop() */
	pf_describe_cb describe;
	pf_key_id_cb key_id;
	void *arg;                /**< for both callbacks */
	uint32_t n_ids;           /**< ids are below this */
	unsigned int max_inflight;   /**< GETs at once; 0 = default */
	uint32_t window_objects;     /**< hinted objects fetched ahead of the
					  oldest unread one; 0 = default */
	uint32_t pace_ms;            /**< within the window, fetch as far
					  past the readers as they read in
					  this long (at least PF_PACE_MIN
					  entries); 0 = default (1,000 ms),
					  PF_PACE_OFF: the whole window */
	uint64_t part_size;          /**< bytes per ranged GET of large
					  objects; 0 = default (8 MiB) */
	uint64_t max_object_mem;     /**< objects above this are streamed,
					  not fetched whole; 0 = default
					  (256 MiB, at most fetch_mem / 2) */
	uint64_t fetch_mem;          /**< bytes of fetch buffers at most
					  (-o fetch_mem); 0 = default
					  (512 MiB); at least 2 parts */
	/* The shared cache tier (-o shared_cache): objects that fit in one
	 * part are read from it first, and written to it after a miss. */
	struct s3_client *tier_s3;   /**< NULL: no tier; not owned */
	const char *tier_prefix;     /**< "" or ending in '/'; copied */
	const char *origin_bucket;   /**< names tier objects; copied */
	unsigned int tier_hedge_ms;  /**< a reader waits this long on the
					  tier, then reads the origin; 0:
					  only the attempt's timeout */
	const char *tier_key;        /**< -o shared_cache_key's bytes, or
					  NULL; copied */
	size_t tier_key_len;
	uint64_t tier_put_mem;       /**< bytes queued for PUT to the tier
					  at most; 0: 256 MiB */
};

struct pf;

/** Hint streams at once (ORDER_STREAMS_MAX, order.h: the reason). */
#define PF_STREAMS_MAX 64
/** A stream's name with its NUL: "rank5" or "pid:1234". */
#define PF_STREAM_NAME_MAX 40

/** One hint stream in pf_stats. */
struct pf_stream_stats {
	char name[PF_STREAM_NAME_MAX]; /**< "rank5", "pid:1234" */
	uint64_t pos;            /**< oldest unread entry of its current hint */
	uint64_t len;            /**< its length; 0 with no hint */
	int64_t epoch;           /**< its epoch, -1 if unnamed or none */
	uint32_t queued;         /**< hints waiting behind it */
	uint64_t hints;          /**< hints it received */
	uint64_t stalls;         /**< reads that waited, of objects whose
				      open consumed this stream's entry */
	uint64_t stall_ns;       /**< total time they waited */
	uint64_t pace;           /**< entries its prefetch may run past the
				      furthest one read (pf_config.pace_ms);
				      0 when unpaced */
	pid_t owner;             /**< the process that wrote its latest
				      hint, 0: unknown */
	uint64_t idle_ns;        /**< since its latest hint or consumed open */
};

/** Streams of reclaimed ones that pf_stats shows, newest first. */
#define PF_RECLAIMED_RECENT 8

/** A stream whose slot was given to another (pf_hint()). */
struct pf_reclaimed {
	char name[PF_STREAM_NAME_MAX];
	pid_t owner;             /**< its writer, 0: unknown */
	bool exited;             /**< its writer had ended; else it was idle
				      for 10 minutes */
	uint64_t unread;         /**< entries its hints still had to read */
};

/** Counters for .hintfs/stats; a snapshot. */
struct pf_stats {
	uint64_t reads;          /**< pf_read calls */
	uint64_t cache_hits;     /**< reads served by the local cache */
	uint64_t reads_zero_copy; /**< of those, replied by reference
				       (pf_read_ref), not copied */
	uint64_t prefetch_joins; /**< reads that joined a prefetch in flight */
	uint64_t demand_fetches; /**< reads that had to start a GET */
	uint64_t passthrough;    /**< reads of objects the cache cannot take,
				      served by ranged GETs (streams) */
	uint64_t stalls;         /**< reads that waited on the network */
	uint64_t stall_ns;       /**< total time they waited */
	uint64_t requests;       /**< GETs sent, retries included */
	uint64_t bytes;          /**< body bytes received */
	uint64_t retries;
	uint64_t prefetched;     /**< objects fetched ahead by the hint */
	uint64_t err_slowdown;   /**< failed attempts by s3_err_kind: */
	uint64_t err_server;
	uint64_t err_network;
	uint64_t err_stale;
	uint64_t err_other;      /**< S3_ERR_DENIED, S3_ERR_OTHER and local
				      failures to start a transfer */
	uint64_t failed_reads;   /**< reads that returned an error */
	uint64_t cache_put_fail; /**< fetched objects not admitted or not
				      written to the cache */
	uint32_t inflight;       /**< GETs in flight now */
	uint32_t inflight_limit; /**< current limit (lowered on SlowDown) */
	uint32_t inflight_peak;  /**< the most GETs in flight at once */
	uint64_t fetch_mem;      /**< bytes of fetch buffers held now */
	uint64_t fetch_mem_peak; /**< the most held at once since mount */
	uint64_t fetch_mem_limit;/**< the bound (pf_config.fetch_mem) */
	uint64_t commit_ns;      /**< time spent writing fetched objects into
				      the cache (blobs, index, eviction) */
	uint64_t commit_batches; /**< index transactions for them */
	uint64_t commit_objects; /**< objects in those transactions */
	uint64_t engine_busy_ns; /**< the network thread's time between two
				      polls: what transfers wait behind */
	uint64_t engine_busy_max_ns; /**< its longest single stretch */
	uint64_t lost_wakeups;   /**< the network thread's waits that ran
				      their whole timeout with no GET running
				      while prefetch was held back by
				      fetch_mem, though memory came back
				      during them: a wake-up lost (0 unless
				      something is wrong) */
	uint64_t hint_pos;       /**< the streams' hint_pos added up */
	uint64_t hint_len;       /**< their current hints' lengths added up */
	int64_t hint_epoch;      /**< the epoch of the stream hinted last, -1
				      if unnamed */
	uint32_t hints_queued;   /**< hints waiting, over all streams */
	uint64_t hints_total;    /**< hints received since mount */
	uint64_t warm_queued;    /**< objects asked for by pf_warm() */
	uint64_t warm_done;      /**< of those, now cached */
	uint64_t warm_failed;    /**< of those, not fetched or not cached */
	uint64_t warm_refused;   /**< objects pf_warm() refused: list full */
	uint64_t hints_refused;  /**< hints pf_hint() refused: queue full or
				      too many streams */
	uint32_t n_streams;      /**< streams[] used */
	struct pf_stream_stats streams[PF_STREAMS_MAX]; /**< in slot order */
	uint64_t reclaimed_exited; /**< streams reclaimed: writer ended */
	uint64_t reclaimed_idle;   /**< streams reclaimed: idle 10 minutes */
	uint32_t n_reclaimed;    /**< reclaimed[] used */
	struct pf_reclaimed reclaimed[PF_RECLAIMED_RECENT]; /**< the latest
				      reclaimed, newest first */
	bool tier;               /**< a shared cache tier is configured */
	struct {                 /**< its counters (see -o shared_cache) */
		uint64_t gets;        /**< GETs sent to the tier */
		uint64_t hits;        /**< answered, checked, served */
		uint64_t misses;      /**< not there: origin, then PUT */
		uint64_t mismatches;  /**< there, but not proven the
					   origin's version: not served */
		uint64_t unbound;     /**< skipped the tier: nothing binds
					   its ETag to its bytes */
		uint64_t fallbacks;   /**< errors: read from the origin */
		uint64_t hedged;      /**< too slow for a waiting reader:
					   cancelled, read from the origin */
		uint64_t hedge_denied; /**< hedges over the budget: the
					    reader waited on the tier */
		double hedge_budget_pct; /**< hedges allowed per 100 tier
					      GETs */
		uint64_t bypassed;    /**< fetches sent to the origin while
					   the tier was failing */
		uint64_t reader_stalls; /**< tier GETs a reader waited on
					     that ended without an answer */
		uint64_t breaker_opens; /**< times the breaker opened */
		bool breaker_open;    /**< open or half-open now */
		uint64_t puts;        /**< objects written to the tier */
		uint64_t put_errors;  /**< PUTs failed after retries */
		uint64_t put_dropped; /**< PUTs not queued: queue full */
		uint64_t put_pending; /**< PUTs queued or running now */
	} tier_st;
};

/** Creates the engine and starts its thread. Returns 0 or -errno. */
int pf_start(const struct pf_config *cfg, struct pf **out);

/**
 * Abandons every wait: readers waiting on the network return -EIO at once,
 * so do later reads, and the engine thread stops starting transfers. For
 * the daemon's stop, before the FUSE loop joins its workers. Any thread;
 * NULL ok.
 */
void pf_cancel(struct pf *pf);

/**
 * Cancels (pf_cancel), stops the thread, takes down the transfers still
 * running and frees @pf; no other call may be in progress. NULL ok.
 */
void pf_stop(struct pf *pf);

/**
 * Reads up to @len bytes at @off of object @id into @buf: from the cache,
 * else by joining the fetch in flight, else by a fetch whose parts
 * covering the read go first. Blocks until those parts are there: at most
 * twice the retry budget plus 5 s (then -ETIMEDOUT and one log line),
 * less after pf_cancel() (then -ECANCELED). Returns the bytes read (0 at
 * or past the end) or the -errno of the failure as the S3 client or the
 * cache gave it (-ESTALE: changed since the listing; -EACCES; -ENOMEM;
 * -ECONNRESET, -ETIMEDOUT, -EIO ... after the retries): which errno the
 * kernel sees is fs's choice. Any thread.
 */
ssize_t pf_read(struct pf *pf, uint32_t id, void *buf, size_t len, uint64_t off);

/**
 * Serves a read of object @id from the cache without copying: hands up to
 * @len bytes at @off to @cb (cache.h's cache_ref_cb) while they are pinned,
 * and returns its result. -ENODATA when the object is not cached (or is
 * read through, or @off is at or past its end): the caller then calls
 * pf_read(), which fetches it. Counted in pf_stats.reads, cache_hits and
 * reads_zero_copy only when @cb was called. Any thread.
 */
ssize_t pf_read_ref(struct pf *pf, uint32_t id, size_t len, uint64_t off,
		    cache_ref_cb cb, void *arg);

/**
 * Tells the engine a reader opened object @id, so the hint's window moves
 * on past it. Any thread; cheap.
 */
void pf_note_open(struct pf *pf, uint32_t id);

/**
 * Tells the engine the last reader of object @id closed it; until then the
 * object counts as needed at once and is not evicted. Any thread.
 */
void pf_note_close(struct pf *pf, uint32_t id);

/**
 * Installs a hint of stream @stream (a NUL-terminated name: "rank5" from
 * the hint's header, or "pid:1234" for an unnamed writer), written by
 * process @owner (in the daemon's pid namespace; 0: unknown): @n ids
 * (copied) in the order of reading, queued behind that stream's hint in
 * progress, or replacing its current and queued ones when @replace; the
 * other streams keep theirs. @epoch is -1 when unnamed. Its memory is
 * about 9 bytes per entry and 32 per distinct object, whatever the
 * listing's size. A new stream with no slot free reclaims the slot of a
 * stream whose writer has ended, or else of one idle for 10 minutes
 * (order.h: ORDER_STREAM_IDLE_NS; counted in pf_stats.reclaimed_*).
 * Returns 0, -EBUSY when 16 hints are queued in the stream already (a
 * replace is always taken), -ENOSPC when 64 other streams still have
 * hints to read and none can be reclaimed (both counted in
 * pf_stats.hints_refused), -EINVAL for a name of 40 bytes or more, or
 * -ENOMEM. Any thread.
 */
int pf_hint(struct pf *pf, const char *stream, const uint32_t *ids, size_t n,
	    int64_t epoch, bool replace, pid_t owner);

/**
 * Queues @n objects (ids, copied) to be fetched into the cache whatever the
 * hint window (hintfs-ctl warm); progress in pf_stats.warm_*. Returns 0,
 * -EBUSY when the entries pending would pass 4 per listed object (at
 * least 64 Ki; counted in pf_stats.warm_refused), or -ENOMEM. Any thread.
 */
int pf_warm(struct pf *pf, const uint32_t *ids, size_t n);

/**
 * The next use of object @id, in hinted reads from now (smaller is
 * sooner), or UINT64_MAX when no hint names it: what the cache's eviction
 * asks (pf_start() registers the engine with the cache). Any thread; must
 * not be called with the engine's lock held (it is not exposed, so this
 * holds by construction).
 */
uint64_t pf_next_use(struct pf *pf, uint32_t id);

/**
 * Copies into @ids up to @max ids that no reader has opened yet and that
 * are inside the prefetch window, in hint order per stream and the
 * streams taken in turn (entry k of each, then k + 1 ...), from merged
 * position *@at on; moves *@at past what it looked at (start at 0).
 * Returns how many: what fills the kernel's page cache ahead of the
 * readers (0: nothing further). Any thread.
 */
size_t pf_hint_ahead(struct pf *pf, size_t *at, uint32_t *ids, size_t max);

/** Fills @st with a snapshot of the counters. Any thread. */
void pf_get_stats(struct pf *pf, struct pf_stats *st);

#endif /* HINTFS_PREFETCH_PREFETCH_H */
