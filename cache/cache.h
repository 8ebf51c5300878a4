/**
 * cache/cache.h - the local side of hintfs: a persistent object cache
 * (public header of cache).
 *
 * One cache lives in one directory: an LMDB environment (the index, and
 * small objects inline) plus files for larger objects, written and read
 * with io_uring: either append-only segment files shared by many objects,
 * or (cache_config.file_per_object) one file per object holding exactly
 * its bytes, which the kernel can read itself (FUSE passthrough; see
 * cache_open_file()). A directory may hold both kinds: each object is
 * read from where it was written. It survives restarts and kill -9: an
 * object is visible only once its bytes are written and its index entry
 * committed, and every blob carries an xxh3-64 checksum verified the first
 * time it is read after the cache is opened; a blob that fails is dropped
 * (and reported as a miss), never served.
 *
 * Objects are identified by their S3 key and ETag: a lookup with another
 * ETag is a miss, so a changed object is never served from a stale entry.
 *
 * Writing an object is a three-step transaction, so that nothing of it is
 * visible before its bytes and its index entry are both written:
 *     cache_put_begin -> cache_put_write (parts in order) ->
 *     cache_put_commit or cache_put_abort.
 *
 * Eviction: when an insert would pass the capacity, the cache evicts the
 * entries whose next use is furthest away, as told by the caller's
 * next-use callback (Belady), then the least recently used among those no
 * hint mentions. Each step of an eviction weighs a random sample of 32
 * entries (all of them in a cache of up to 32), so its cost does not grow
 * with the cache. An object whose own next use is further than everything
 * weighed is not admitted (cache_put_begin returns -ENOSPC).
 *
 * cache_put_commit_many() commits many puts in one index transaction.
 *
 * Threads: every function may be called from any thread, except where
 * noted. Errors are 0 or -errno; a miss is -ENODATA.
 */
#ifndef HINTFS_CACHE_CACHE_H
#define HINTFS_CACHE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Next use of an object that no hint mentions. */
#define CACHE_NEVER UINT64_MAX

/** An entry whose caller's object id is not known (see cache_next_use_cb). */
#define CACHE_NO_ID UINT32_MAX

/**
 * Tells how far away (in hinted reads; smaller = sooner) the next use of
 * an object is, or CACHE_NEVER. *@id is the caller's id of the object, as
 * given to cache_put_begin(); for an entry put in an earlier session it is
 * CACHE_NO_ID, and the callback may find the id from @key (@key_len bytes)
 * and store it in *@id: the cache keeps it for the rest of the session, so
 * a key is resolved at most once. Called during eviction, from the thread
 * that inserts, with no cache lock held that the callback could need. Must
 * be thread-safe and must not call the cache.
 */
typedef uint64_t (*cache_next_use_cb)(void *arg, uint32_t *id, const char *key,
				      size_t key_len);

struct cache_config {
	const char *dir;   /**< created 0700 if missing; must be owned by
				the caller's uid (else -EPERM) */
	uint64_t capacity; /**< bytes of object data to keep, > 0 */
	size_t inline_max; /**< objects up to this size go inline in
				LMDB; 0 = the default (16 KiB) */
	cache_next_use_cb next_use; /**< may be NULL: LRU only (until
					 cache_set_next_use()) */
	void *next_use_arg;
	const char *source;   /**< where the objects come from (endpoint
				   and bucket, as shown to the user): a
				   directory that recorded another one is
				   refused (-EEXIST), one that recorded
				   none takes this one; NULL: no check */
	bool file_per_object; /**< objects above inline_max each get a file
				   of their own holding exactly their bytes
				   (so the kernel can read it: FUSE
				   passthrough); false: shared segments */
	uint64_t ahead_bytes; /**< how far the checker thread may run ahead
				   of the reads (cache_contains_ahead());
				   0 = the default (1 GiB) */
};

struct cache;

/**
 * Opens (creating if needed) the cache in cfg->dir. A lock file makes a
 * second open of the same directory (another daemon) fail with -EBUSY.
 * On failure writes one line for the user into @err (@err_len bytes).
 */
int cache_open(const struct cache_config *cfg, struct cache **out, char *err,
	       size_t err_len);

/** Flushes and closes @c after every other call has returned. Accepts NULL. */
void cache_close(struct cache *c);

/** A cached object found by cache_lookup(). Plain data; no release needed. */
struct cache_obj {
	uint64_t size;
	uint64_t id; /**< the entry's identity for cache_read() */
};

/**
 * Looks up @key + @etag of @size bytes (the listing's size). Returns 0 and
 * fills @out on a hit (and counts the access for LRU), -ENODATA on a miss
 * (absent, other ETag, or dropped as corrupt). An entry of another size
 * is not the listed object (an ETag that is not a content hash): it is
 * dropped, counted as corrupt, and missed.
 */
int cache_lookup(struct cache *c, const char *key, size_t key_len,
		 const char *etag, uint64_t size, struct cache_obj *out);

/**
 * Whether @key + @etag of @size bytes is cached, without counting a hit
 * or a miss and without touching its LRU position: for the prefetcher's
 * own checks.
 */
bool cache_contains(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size);

/**
 * cache_contains(), and when the entry is there, has not been checked this
 * session and has 1 MiB or more, queues its check on the cache's checker
 * thread: for what a hint names next, so that the first read of a large
 * object after a restart finds it checked and its bytes in the page cache
 * instead of hashing it whole before its first byte. A read that comes
 * while the check runs waits for it rather than hashing again. The thread
 * checks in the order queued and stays within ahead_bytes of the reads:
 * past it, it waits for a read of an object it checked (or for 10 s
 * without one, after which it takes what it checked as read).
 */
bool cache_contains_ahead(struct cache *c, const char *key, size_t key_len,
			  const char *etag, uint64_t size);

/**
 * Whether an object with a key of @key_len bytes, an ETag of @etag_len
 * bytes and @size bytes could be cached at all: the index holds its name
 * and it is not larger than the capacity (which drops while the disk is
 * full). False means a put would fail whatever is evicted.
 */
bool cache_can_take(struct cache *c, size_t key_len, size_t etag_len,
		    uint64_t size);

/**
 * Reads up to @len bytes at @off of the object found as @o into @buf.
 * Returns the bytes read (short only at the end of the object) or
 * -ENODATA: the entry was evicted or found corrupt since the lookup, or
 * the read failed (an I/O error, LMDB out of reader slots, no memory;
 * counted in read_errors). Either way the caller fetches it from the
 * server: a failing cache never fails a read.
 */
ssize_t cache_read(struct cache *c, const struct cache_obj *o, void *buf,
		   size_t len, uint64_t off);

/**
 * Sets (or, with NULL, clears) the eviction's next-use callback: the
 * prefetch engine registers itself once it has started, and clears it
 * before it stops. Any thread; an eviction under way may finish with the
 * callback it took at its start.
 */
void cache_set_next_use(struct cache *c, cache_next_use_cb cb, void *arg);

/**
 * Tells that the entry of the caller's object @id (as given to
 * cache_put_begin() or resolved by the next-use callback; never
 * CACHE_NO_ID) was evicted to make room. Called like the next-use
 * callback: from the thread that inserts, with no cache lock held that it
 * could need; thread-safe, and it must not call the cache.
 */
typedef void (*cache_evicted_cb)(void *arg, uint32_t id);

/**
 * Sets (or, with NULL, clears) the eviction notice: the prefetch engine,
 * so that an object it fetched ahead and that left before its read is
 * fetched ahead again. As cache_set_next_use() for threads.
 */
void cache_set_evicted(struct cache *c, cache_evicted_cb cb, void *arg);

/**
 * Where the bytes of a cached range are, for a reply that does not copy
 * them (cache_read_ref()). Exactly one of @mem and @fd is set.
 */
struct cache_ref {
	const void *mem; /**< the bytes of a small object, in LMDB's map */
	int fd;		 /**< -1 with @mem; else the file (a segment, or
			      the object's own) holding */
	uint64_t fd_off; /**<   the bytes at this offset */
	size_t len;	 /**< bytes of the range; 0 at or past the end */
};

/**
 * Takes the bytes @ref names (a FUSE reply, say) during the call only:
 * they are pinned until it returns. Returns what cache_read_ref() is to
 * return: the bytes taken (>= 0) or a -errno.
 */
typedef ssize_t (*cache_ref_cb)(void *arg, const struct cache_ref *ref);

/**
 * Finds @key + @etag and hands up to @len bytes at @off of it to @cb
 * without copying them: the way to serve a hit. The bytes are verified
 * first when this is the entry's first read in the session (as
 * cache_read() does), and while @cb runs they cannot be evicted or
 * punched. Counts a hit when @cb is called; a miss is not counted (the
 * caller's fallback, cache_lookup(), counts it).
 * @size is the listed size: an entry of another size is not served.
 * Returns @cb's result, or -ENODATA (@cb not called) when the object is
 * not cached or could not be read (counted and handled as cache_read()
 * does: the caller fetches it). Any thread; @cb must not
 * call the cache.
 */
ssize_t cache_read_ref(struct cache *c, const char *key, size_t key_len,
		       const char *etag, uint64_t size, size_t len,
		       uint64_t off, cache_ref_cb cb, void *arg);

/**
 * Opens the file that holds exactly the bytes of @key + @etag of @size
 * bytes (the listed size): offset 0 to @size, nothing after. Verifies the
 * object first when this is its first read in the session (as
 * cache_read_ref() does; a failure drops it: -ENODATA), and counts a hit.
 * Returns an fd the caller owns (O_RDONLY | O_CLOEXEC), -ENODATA on a miss
 * (absent, other ETag/size, dropped), -ENOTSUP when the object is inline
 * or shares a segment (written without file_per_object, or in an earlier
 * session), or another -errno (-EMFILE: the caller's fd limit). Evicting
 * the object later unlinks its file; an fd already handed out keeps
 * reading the same bytes. Like cache_read_ref(), counts no miss (the
 * caller's fallback does), and an entry of another size is only not
 * served. Any thread.
 */
int cache_open_file(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size);

/**
 * cache_open_file() for a caller that tells when it is done with the file:
 * *@hold (set on success) goes to cache_release_file() once every copy of
 * the fd is closed (a backing file registered with the kernel: once its
 * id is closed). Until then the object is not evicted, and should it leave
 * the cache otherwise (invalidated, a new version) its file's blocks,
 * still on disk, count against the capacity: files readers keep open take
 * the cache's disk no further than the capacity (the cache admits less
 * meanwhile). -ENOMEM besides cache_open_file()'s returns. Any thread.
 */
int cache_open_file_held(struct cache *c, const char *key, size_t key_len,
			 const char *etag, uint64_t size, uint64_t *hold);

/** Ends one hold of cache_open_file_held(). Any thread. */
void cache_release_file(struct cache *c, uint64_t hold);

/** An object being written. */
struct cache_put;

/**
 * Starts writing object @key + @etag of @size bytes, reserving space
 * (evicting as needed). @next_use is the object's own next use, so that it
 * is not admitted when everything cached is needed sooner (-ENOSPC); @id
 * is the caller's id of the object (or CACHE_NO_ID), handed back to the
 * next-use callback so that it need not resolve the key.
 * Returns -EEXIST when the object is already cached, -ENOSPC when it
 * cannot be admitted (larger than the capacity, or the disk is full),
 * -EIO. Stores the handle in *@out.
 */
int cache_put_begin(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size, uint64_t next_use,
		    uint32_t id, struct cache_put **out);

/**
 * Writes @len bytes at @off of the object. Parts come in order, one after
 * another (@off is where the previous one ended), so the checksum is taken
 * as they come. Returns 0, -EINVAL (outside the object, or not where the
 * previous part ended), -ENOSPC (disk full) or -EIO.
 */
int cache_put_write(struct cache_put *p, uint64_t off, const void *data,
		    size_t len);

/**
 * Commits the object: after this returns 0, lookups find it, including
 * after a restart. Frees @p in every case. -EIO when the index could not
 * be written (the object is then not cached).
 */
int cache_put_commit(struct cache_put *p);

/**
 * Commits the @n puts @ps as cache_put_commit() does each, in one index
 * transaction (one LMDB commit for the batch, not one per object), and
 * frees them all. @rcs[i] gets what cache_put_commit() would have
 * returned for @ps[i]. Returns 0, or the -errno of the transaction, in
 * which case no put of the batch is committed. Any thread.
 */
int cache_put_commit_many(struct cache_put **ps, size_t n, int *rcs);

/** Drops a write that will not complete. Frees @p. Accepts NULL. */
void cache_put_abort(struct cache_put *p);

/** Drops @key + @etag (any ETag when @etag is NULL). -ENODATA if absent. */
int cache_invalidate(struct cache *c, const char *key, size_t key_len,
		     const char *etag);

/** Drops every object. */
int cache_clear(struct cache *c);

/**
 * Saves @len bytes of @blob under the name @name (a listing snapshot,
 * counters). Replaces an earlier one. Not counted against the capacity.
 */
int cache_meta_put(struct cache *c, const char *name, const void *blob,
		   size_t len);

/**
 * Loads the blob saved under @name into a malloc'd buffer (*@out, owned by
 * the caller; length in *@len). -ENODATA when none is saved.
 */
int cache_meta_get(struct cache *c, const char *name, void **out, size_t *len);

/** Drops the blob saved under @name. -ENODATA when none is saved. */
int cache_meta_del(struct cache *c, const char *name);

/**
 * Calls @fn once with the blob saved under @name, in place: @blob is the
 * index's own mapping, read-only and valid only during the call, which
 * holds a read transaction (a writer may commit meanwhile; its pages are
 * not reused until the call returns). What @fn returns is returned.
 * -ENODATA when none is saved. For a blob too large to copy (a listing of
 * millions of keys): its pages leave the caller's memory afterwards.
 */
int cache_meta_read(struct cache *c, const char *name,
		    int (*fn)(void *arg, const void *blob, size_t len),
		    void *arg);

struct cache_stats {
	uint64_t objects; /**< committed objects */
	uint64_t bytes;	  /**< their bytes */
	uint64_t capacity;
	uint64_t held_bytes; /**< files held open that left the cache
				  (cache_open_file_held()): on disk, in
				  the capacity */
	uint64_t hits;
	uint64_t misses;
	uint64_t evictions;
	uint64_t corrupt;	/**< blobs dropped for a bad checksum */
	uint64_t write_errors;	/**< puts that failed (disk full, I/O) */
	uint64_t read_errors;	/**< reads that failed otherwise (I/O error,
				     LMDB busy) and were left to the server */
	uint64_t checked;	/**< entries hashed whole at their first
				     read or open this session (once each,
				     however many read at once) */
	uint64_t checked_ahead; /**< of those, found good before their
				     first read (cache_contains_ahead()) */
};

/** A snapshot of the counters. */
void cache_get_stats(struct cache *c, struct cache_stats *out);

/**
 * Walks every committed object, verifying its checksum (hintfs-ctl
 * verify). Calls @cb for each with its key and whether it is intact; bad
 * ones are dropped. Returns 0 or -errno.
 */
int cache_verify(struct cache *c,
		 void (*cb)(void *arg, const char *key, size_t key_len,
			    bool ok),
		 void *arg);

#endif /* HINTFS_CACHE_CACHE_H */
