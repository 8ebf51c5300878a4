/**
 * prefetch/prefetch.h - the network side of hintfs (public header).
 *
 * The prefetch engine (pf_*): one thread that fetches objects into the
 * cache ahead of the readers along the hinted order, and serves reads that
 * miss, through S3 clients (s3_*, prefetch/s3/s3.h, included here for
 * them). With a shared cache tier (pf_config.tier_s3: a second client,
 * another bucket; or a test's tier_source) the engine reads an object there
 * before the origin and writes what the origin served back to it
 * (prefetch/tier.h).
 *
 * Errors are -errno values, as the S3 client (prefetch/s3/s3_error.c) or
 * the cache gave them.
 */
#ifndef HINTFS_PREFETCH_PREFETCH_H
#define HINTFS_PREFETCH_PREFETCH_H

#include "cache/cache.h"
#include "prefetch/s3/s3.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct cache;
struct pf_source;

/**
 * Makes a source (prefetch/source.h) over @client: with @origin NULL, a
 * network thread's origin source of @max_connects connections at most;
 * else a sibling of @origin that ends its GETs through it (the tier's).
 * Returns 0 or -errno; *@out is the engine's to destroy.
 */
typedef int (*pf_source_make_cb)(struct s3_client *client,
				 struct pf_source *origin, long max_connects,
				 struct pf_source **out);

/** The daemon's sources: curl's (prefetch/source_curl.c), the one part of
 *  prefetch that links libcurl. A pf_source_make_cb. */
int pf_source_curl_make(struct s3_client *client, struct pf_source *origin,
			long max_connects, struct pf_source **out);

/**
 * Objects are named by the caller's ids (0 .. n_ids-1; hintfs uses its
 * namespace's node indexes). The engine asks the caller what an id is.
 */
struct pf_object {
	const char *key; /**< full key; points into the describe buffer */
	size_t key_len;
	const char *etag; /**< as listed, quotes included; valid as long as
			       the caller's namespace */
	uint64_t size;
	/* The engine's own, for a block of a large object (engine_block.c):
	 * a describe callback leaves them 0. */
	uint64_t base;	 /**< where these bytes start in the object */
	size_t name_len; /**< bytes of key that name the S3 object (key
			      is the cache's: the name and the block) */
};

/**
 * The size of object @id, or 0 when @id is not a file (a directory, or
 * gone). Thread-safe and cheap: asked for every id at pf_start().
 */
typedef uint64_t (*pf_size_cb)(void *arg, uint32_t id);

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
 * The engine's configuration. Its GETs follow its origin source's retry
 * policy (the client's s3_config.max_attempts, retry_time_ms): one budget
 * per mount.
 */
struct pf_config {
	struct s3_client *s3; /**< the origin's client, that the sources
				   make_source makes run on (the daemon);
				   NULL with a test's sources; not owned */
	pf_source_make_cb make_source; /**< with s3: makes each network
					    thread's sources (the daemon:
					    pf_source_curl_make) */
	struct cache *cache;	       /**< not owned; its next-use callback is
					    the engine's from pf_start() to
					    pf_stop() */
	pf_describe_cb describe;
	pf_key_id_cb key_id;
	pf_size_cb size;	   /**< NULL: no object is cached by
					blocks (each above max_object_mem
					is read through) */
	void *arg;		   /**< for the callbacks */
	uint32_t n_ids;		   /**< ids are below this */
	unsigned int max_inflight; /**< GETs at once; 0 = default */
	uint32_t window_objects;   /**< hinted objects fetched ahead of the
					oldest unread one; 0 = default */
	uint32_t pace_ms;	   /**< within the window, fetch as far
					past the readers as they read in
					this long (at least PF_PACE_MIN
					entries); 0 = default (1,000 ms),
					PF_PACE_OFF: the whole window */
	uint64_t part_size;	   /**< bytes per ranged GET of large
					objects, and of a block; 0 =
					default (8 MiB) */
	uint64_t max_object_mem;   /**< objects above this are not fetched
					whole: cached by blocks of
					part_size (with a size callback),
					else read through; 0 = default
					(256 MiB, at most fetch_mem / 2) */
	uint64_t fetch_mem;	   /**< bytes of fetch buffers at most
					(-o fetch_mem); 0 = default
					(256 MiB per network thread,
					512 MiB at least); at least 2
					parts */
	/* The shared cache tier (-o shared_cache): objects that fit in one
	 * part are read from it first, and written to it after a miss. */
	struct s3_client *tier_s3;  /**< the tier's client (make_source's
					 siblings), or NULL; not owned */
	const char *tier_prefix;    /**< "" or ending in '/'; copied */
	const char *origin_bucket;  /**< names tier objects; copied */
	unsigned int tier_hedge_ms; /**< a reader waits this long on the
					 tier, then reads the origin; 0:
					 only the attempt's timeout */
	const char *tier_key;	    /**< -o shared_cache_key's bytes, or
					 NULL; copied */
	size_t tier_key_len;
	uint64_t tier_put_mem; /**< bytes queued for PUT to the tier
				    at most; 0: 256 MiB */
	/* What every object-store call runs on (prefetch/source.h): NULL,
	 * make_source's over s3 and tier_s3 (the daemon); a unit test's fake,
	 * then also the engine's clock and retry policy, and with a tier,
	 * tier_source (a sibling of source: its GETs end through source's)
	 * carries the tier's GETs and PUTs; no S3 client then. Not owned;
	 * they outlive pf_stop(). */
	struct pf_source *source;
	struct pf_source *tier_source;
	/* Network threads (-o net_threads): 0 = from the cores (half of
	 * them, 1 to 8). Each drives its own sources: curl's, or with a
	 * test's, sources[i] and tier_sources[i] for thread i (net_threads
	 * of each, siblings of one fake; source and tier_source are then
	 * ignored). Without sources, a test's source runs one thread. */
	unsigned int net_threads;
	struct pf_source *const *sources;
	struct pf_source *const *tier_sources;
};

struct pf;

/** Hint streams at once (ORDER_STREAMS_MAX, order.h: the reason). */
#define PF_STREAMS_MAX 64
/** A stream's name with its NUL: "rank5" or "pid:1234". */
#define PF_STREAM_NAME_MAX 40

/** One hint stream in pf_stats. */
struct pf_stream_stats {
	char name[PF_STREAM_NAME_MAX]; /**< "rank5", "pid:1234" */
	uint64_t pos;	   /**< oldest unread entry of its current hint */
	uint64_t len;	   /**< its length; 0 with no hint */
	int64_t epoch;	   /**< its epoch, -1 if unnamed or none */
	uint32_t queued;   /**< hints waiting behind it */
	uint64_t hints;	   /**< hints it received */
	uint64_t stalls;   /**< reads that waited, of objects whose
				open consumed this stream's entry */
	uint64_t stall_ns; /**< total time they waited */
	uint64_t pace;	   /**< entries its prefetch may run past the
				furthest one read (pf_config.pace_ms);
				0 when unpaced */
	pid_t owner;	   /**< the process that wrote its latest
				hint, 0: unknown */
	uint64_t idle_ns;  /**< since its latest hint or consumed open */
};

/** Streams of reclaimed ones that pf_stats shows, newest first. */
#define PF_RECLAIMED_RECENT 8

/** A stream whose slot was given to another (pf_hint()). */
struct pf_reclaimed {
	char name[PF_STREAM_NAME_MAX];
	pid_t owner;	 /**< its writer, 0: unknown */
	bool exited;	 /**< its writer had ended; else it was idle
			      for 10 minutes */
	uint64_t unread; /**< entries its hints still had to read */
};

/** The shared cache tier's counters: the PF_TIER_STAT rows of
 *  prefetch/stats.def, and its breaker's state. */
struct pf_tier_stats {
#define PF_TIER_STAT(type, name, help) type name;
#include "prefetch/stats.def"
	bool breaker_open; /**< open or half-open now */
};

/** Counters for .hintfs/stats; a snapshot. Its numbers are the PF_STAT
 *  rows of prefetch/stats.def; what is not one number is written here. */
struct pf_stats {
#define PF_STAT(type, name, help) type name;
#include "prefetch/stats.def"
	uint32_t n_streams;				/**< streams[] used */
	struct pf_stream_stats streams[PF_STREAMS_MAX]; /**< in slot order */
	uint32_t n_reclaimed;				/**< reclaimed[] used */
	struct pf_reclaimed reclaimed[PF_RECLAIMED_RECENT]; /**< the latest
				      reclaimed, newest first */
	bool tier;		      /**< a shared cache tier is configured */
	struct pf_tier_stats tier_st; /**< its counters (-o shared_cache) */
};

/** Creates the engine and starts its thread. Returns 0 or -errno. */
int pf_start(const struct pf_config *cfg, struct pf **out);

/**
 * Abandons every wait: readers waiting on the network return -EIO at once,
 * so do later reads, and the network threads stop starting transfers. For
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
ssize_t pf_read(struct pf *pf, uint32_t id, void *buf, size_t len,
		uint64_t off);

/**
 * pf_read() without a buffer: hands the bytes to @cb (cache.h's
 * cache_ref_cb) from where they lie while they are pinned: the cache's
 * file or map, or the buffer of the fetch they came in (no copy when one
 * part holds the range; counted in reads_zero_copy), and returns its
 * result. Returns 0 or a -errno, as pf_read() does, without calling @cb
 * (at or past the end, or a failure): the caller answers then. Any
 * thread; @cb must not call the engine or the cache.
 */
ssize_t pf_read_cb(struct pf *pf, uint32_t id, size_t len, uint64_t off,
		   cache_ref_cb cb, void *arg);

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
 * progress (@replace PF_QUEUE, or false), or replacing its current and
 * queued ones (PF_REPLACE, or true), or queued unless 16 are queued
 * already, then replacing them (PF_REPLACE_IF_FULL: the epochs queued
 * were read from the page cache, unseen; not a refusal); the other streams
 * keep theirs. @epoch is -1 when unnamed. Its memory is
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
enum pf_replace {
	PF_QUEUE = 0,	/**< behind the hints queued (false) */
	PF_REPLACE = 1, /**< in place of them (true) */
	PF_REPLACE_IF_FULL = 2,
};
int pf_hint(struct pf *pf, const char *stream, const uint32_t *ids, size_t n,
	    int64_t epoch, enum pf_replace replace, pid_t owner);

/**
 * Drops object @id from the cache (hintfs-ctl evict): its entry, or each
 * block of a large object (pf_hint_ranges()). Returns 0, or -ENOENT when
 * @id is not a file. Any thread, without the engine's lock.
 */
int pf_evict(struct pf *pf, uint32_t id);

/** pf_range.len: the whole object, whatever its size. */
#define PF_RANGE_WHOLE UINT64_MAX

/** One entry of a hint with byte ranges: bytes [off, off + len) of object
 *  @id (a member of a tar or zip, a record of a packed file). */
struct pf_range {
	uint32_t id;
	uint64_t off;
	uint64_t len; /**< > 0, or PF_RANGE_WHOLE */
};

/**
 * pf_hint() for entries that name byte ranges of objects (doc/design.md
 * 2.2): a range of an object fetched whole is that object (neighbours of
 * one object make one entry); a range of a large object (one cached by
 * blocks, above max_object_mem) is the blocks it covers, in order. A
 * range past the object's end is cut at it. Returns as pf_hint().
 */
int pf_hint_ranges(struct pf *pf, const char *stream, const struct pf_range *r,
		   size_t n, int64_t epoch, enum pf_replace replace,
		   pid_t owner);

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
 * readers (0: nothing further); a block of a large object (pf_hint_ranges())
 * is PF_NO_ID there. Any thread.
 */
size_t pf_hint_ahead(struct pf *pf, size_t *at, uint32_t *ids, size_t max);

/** Fills @st with a snapshot of the counters. Any thread. */
void pf_get_stats(struct pf *pf, struct pf_stats *st);

#endif /* HINTFS_PREFETCH_PREFETCH_H */
