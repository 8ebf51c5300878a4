/*
 * cache/cache_internal.h - what the files of cache/ share.
 *
 * Includers: cache/, tests/unit/.
 *
 *   cache.c   lookup and read, invalidate, clear, meta, stats, verify;
 *             dropping entries (memory, then index, then blocks); the
 *             checker thread that checks hinted entries ahead of reads
 *   open.c    open/close: the directory, its lock, loading the index
 *   put.c     the put transaction: begin, write, read, commit, abort
 *   table.c   the in-memory table of committed entries (hash and slots)
 *   idx.c     the LMDB index: the only file that calls LMDB
 *   blob.c    segment files, per-object files, and the per-thread
 *             io_uring that moves bytes
 *   evict.c   making room: Belady by next use, then LRU
 *   check.c   the invariants, checked by cache_assert()
 *
 * Locks, always taken in this order (any may be skipped):
 *   evict_lock -> wlock -> seg_lock -> lock
 * - evict_lock: one eviction at a time, and the victim queue; held
 *   across next-use callbacks, so nothing a reader does may need it.
 * - wlock: every change to the set of committed objects. Under it, the
 *   change is made in memory, then in one LMDB write transaction, so that
 *   memory and LMDB agree whenever wlock is free. LMDB has one writer at a
 *   time anyway, so this costs no parallelism.
 * - seg_lock: the active segment and its tail, creating segment files,
 *   and handing out file ids (segments and per-object files share them).
 * - lock: the entry table, segment accounting, the byte counters and the
 *   stats. Held only for memory work, never across disk I/O or a callback.
 */
#ifndef HINTFS_CACHE_INTERNAL_H
#define HINTFS_CACHE_INTERNAL_H

#include "cache/cache.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* S3 allows 1,024 bytes; 4 KiB leaves room for other stores and still
 * fits the 16-bit length in an entry. */
#define CACHE_KEY_MAX 4096
/* S3 ETags are 34 bytes, multipart ones ~40; 255 is an 8-bit length. */
#define CACHE_ETAG_MAX 255
/* 16 KiB: small objects cost one LMDB overflow run instead of a segment
 * extent padded to 4 KiB, and are served straight from the mmap. */
#define CACHE_INLINE_DEFAULT (16u << 10)
/* 256 MiB: a 1 TB cache is ~4,000 files, and a segment empties (and is
 * unlinked) after a few percent of churn rather than never. */
#define CACHE_SEG_BYTES (256ull << 20)
/* Punching frees whole blocks only: extents start on 4 KiB so that an
 * evicted object gives back every block it used. */
#define CACHE_ALIGN 4096ull
/* Entries waiting for the checker thread, at most: the prefetcher's window
 * (PF_WINDOW_DEFAULT), which offers each hinted entry once; one offered
 * when the queue is full is checked by its first read instead. */
#define CACHE_AHEAD_QUEUE 4096
/* How far the checker runs ahead of the reads by default, in bytes checked
 * and not read yet: 5 objects of 200 MiB, enough to hide the next check of
 * a few readers, small against a training node's memory; further ahead,
 * what the checks put in the page cache could be pushed out before it is
 * read, and be read from disk twice. */
#define CACHE_AHEAD_BYTES_DEFAULT (1ull << 30)
/* Readers that have read nothing the checker checked for this long have
 * left it (a new hint, the end of a run): it takes those bytes as read,
 * rather than wait for good. */
#define CACHE_AHEAD_IDLE_S 10
/* Entries checked ahead are those of 1 MiB and more: there a first read
 * waits for the whole entry's check (all its bytes from disk) before its
 * first byte, then reads them again from the page cache, one after the
 * other (12 objects of 100 MiB after a remount, 2 readers in hint order:
 * 1.12-1.42x faster checked ahead); below, a check is one small read,
 * which the READ after it repeats from the page cache. */
#define CACHE_AHEAD_MIN (1ull << 20)
/* Longest LMDB key we build: LMDB's default MDB_MAXKEYSIZE is 511. */
#define IDX_KEY_MAX 511

struct idx;

/* An entry as an eviction sample saw it (evict.c). */
struct evict_cand;

/*
 * One committed object in memory. Immutable after insertion except where
 * noted.
 */
struct cache_ent {
	struct cache_ent *hnext; /* hash chain; once removed, the list of
				    entries being dropped */
	struct blob_seg *seg;	 /* its segment, or NULL when inline or in
				    a file of its own */
	uint64_t id;		 /* (sequence << 32) | slot: cache_obj.id */
	uint64_t size;		 /* object bytes */
	uint64_t off;		 /* extent start in seg (0 when inline) */
	uint64_t sum;		 /* xxh3-64 of the object */
	uint64_t khash;		 /* xxh3-64 of the key alone: every version
				    of a key shares a chain */
	uint64_t tick;		 /* last lookup, for LRU (under lock) */
	_Atomic uint32_t oid;	 /* the caller's object id, CACHE_NO_ID
				    until put or resolved this session */
	uint32_t file;		 /* id of its own file obj-XXXXXXXX.dat,
				    which holds exactly its bytes; 0 when
				    inline or in a segment */
	uint16_t key_len;	 /* bytes of key in name[] */
	uint8_t etag_len;	 /* bytes of etag in name[] */
	bool verified;		 /* checksum checked this session (lock) */
	bool verifying;		 /* being checked by one caller; the others
				    wait on verify_cv (lock) */
	bool ahead;		 /* queued for the checker thread (lock) */
	bool ahead_unread;	 /* checked by it, not read since (lock) */
	bool punch;		 /* being dropped: punch its extent */
	bool held;		 /* its file is held open (a cache_hold
				    names it): never a victim (lock) */
	char name[];		 /* key, '\0', etag, '\0' */
};

/* The entry table: lookup by key and ETag, and by id. Under c->lock. */
struct tab {
	struct cache_ent **buckets; /* chains by khash */
	size_t n_buckets;	    /* a power of two */
	size_t n_ents;		    /* entries in the table */
	struct cache_ent **slots;   /* slot -> entry or NULL */
	uint32_t n_slots;	    /* slots ever used (high water) */
	uint32_t cap_slots;	    /* allocated slots and free_slots */
	uint32_t *free_slots;	    /* stack of NULL slots below n_slots */
	uint32_t n_free;	    /* entries on that stack */
	uint32_t seq;		    /* last id sequence handed out */
};

/* A test hook: every Nth call fails with err (cache_fault_hit()). */
struct cache_fault {
	unsigned every; /* 0: off */
	int err;	/* positive errno */
	atomic_uint n;	/* calls so far */
};

/* A file of its own handed out by cache_open_file_held() and not yet
 * released: while its entry is in the cache the entry is not evicted;
 * once the entry left (invalidated, replaced), its blocks, still on
 * disk, count in c->held_bytes. Under c->lock. */
struct cache_hold {
	struct cache_hold *next; /* c->holds */
	uint64_t id;		 /* the entry's id: the caller's token */
	uint64_t size;		 /* the object's bytes */
	uint32_t n;		 /* holds not yet released */
	bool gone;		 /* the entry left; size is in held_bytes */
};

/* One segment file, seg-XXXXXXXX.dat (id in hex). */
struct blob_seg {
	struct blob_seg *next; /* c->segs (under lock); once removed, the
				  list of segments to destroy */
	uint32_t id;	       /* names the file; never reused in a session */
	int fd;		       /* open while the struct lives */
	uint64_t tail;	       /* next free offset (active segment only;
				  under seg_lock) */
	uint64_t file_bytes;   /* size found at open, to check extents */
	uint64_t live_bytes;   /* committed extents plus reservations, i.e.
				  bytes that must stay readable (lock) */
	uint32_t refs;	       /* readers and droppers using fd (lock) */
	bool sealed;	       /* never appended to again (lock) */
	bool fresh;	       /* created this session: fdatasync at close */
};

struct cache {
	char *dir;		    /* as configured, for messages */
	int dir_fd;		    /* segments are opened relative to it */
	int lock_fd;		    /* holds the flock while open */
	struct idx *ix;		    /* the LMDB index */
	uint64_t capacity_cfg;	    /* as configured */
	size_t inline_max;	    /* objects up to this go inline */
	bool file_per_object;	    /* larger ones each get a file */
	atomic_bool own_fresh;	    /* a per-object file was created this
				       session: syncfs at close */
	cache_next_use_cb next_use; /* may be NULL: LRU only (lock) */
	void *next_use_arg;	    /* its argument (lock) */
	cache_evicted_cb evicted;   /* may be NULL: nobody told (lock) */
	void *evicted_arg;	    /* its argument (lock) */

	/* The four locks, in the order they are taken (see the top). */
	pthread_mutex_t evict_lock;
	pthread_mutex_t wlock;
	pthread_mutex_t seg_lock;
	pthread_mutex_t lock;
	/* Read-held by cache_read_ref() while a caller holds a reference to
	 * an extent, write-held around punching: a reply by reference never
	 * sends zeros of an extent evicted under it. Prefers the writer, so
	 * a steady stream of readers cannot hold eviction back. A reader
	 * takes it before any of the four locks above and holds none of
	 * them meanwhile except briefly `lock`; the punching writer may hold
	 * evict_lock. */
	pthread_rwlock_t punch_lock;

	/* under evict_lock */
	struct evict_cand *ev_cand; /* the current sample's entries */
	uint64_t ev_rng;	    /* where samples are drawn */

	/* under seg_lock */
	struct blob_seg *active; /* segment taking small extents, or NULL */
	uint32_t next_seg_id;	 /* above every id on disk at open; for
				    per-object files too */

	/* under lock */
	struct tab tab;		  /* the committed entries */
	struct blob_seg *segs;	  /* every open segment */
	uint64_t used;		  /* bytes of committed objects */
	uint64_t reserved;	  /* bytes of puts in progress */
	struct cache_hold *holds; /* files held open (cache_hold) */
	uint64_t held_bytes;	  /* of those, the bytes of entries that
				     left the cache: on disk, counted
				     against the capacity */
	uint64_t capacity;	  /* effective: lowered when the disk fills,
				     raised again when it has room
				     (cache_recheck_disk()) */
	uint64_t tick;		  /* LRU clock */
	bool disk_full;		  /* ENOSPC seen; its warning logged */
	bool io_warned;		  /* other write error seen and logged */
	uint64_t hits, misses, evictions, corrupt, write_errors; /* stats */
	uint64_t read_errors;	  /* reads failed other than by checksum */
	uint64_t checked;	  /* entries hashed whole by pin_verify() */
	uint64_t checked_ahead;	  /* of those, found good by the checker */
	pthread_cond_t verify_cv; /* an entry's check ended */

	/* The checker thread (cache.c, "checking ahead"), started at the
	 * first entry queued; under lock. */
	uint64_t ahead_q[CACHE_AHEAD_QUEUE]; /* ids, a ring */
	unsigned ahead_head, ahead_n;
	uint64_t ahead_bytes;  /* the bound on ahead_unread (config) */
	uint64_t ahead_unread; /* bytes of ahead_unread entries (at most) */
	bool ahead_started, ahead_stop;
	pthread_cond_t ahead_cv; /* an id queued, or the stop */
	pthread_t ahead_thread;
	atomic_uint n_puts; /* puts begun and not yet finished */
	uint64_t n_checks;  /* cache_ok() calls (check.c; lock) */

	/* Test hooks HINTFS_FAULT_CACHE_READ and _WRITE=N[:ERRNO]
	 * (cache_read(), cache_put_write()). */
	struct cache_fault fault_read, fault_write;
};

/* An object being written (the cache_put of cache.h). */
struct cache_put {
	struct cache *c;      /* the cache it is written to */
	struct blob_seg *seg; /* NULL when inline or in its own file */
	uint64_t off;	      /* extent start in seg (0 otherwise) */
	uint32_t file;	      /* its own file's id, or 0 */
	int fd;		      /* that file, open for writing until the
				 put ends; -1 otherwise */
	uint64_t size;	      /* object bytes (and the reservation) */
	unsigned char *buf;   /* inline: the bytes until commit */
	uint32_t oid;	      /* the caller's object id, for the entry */
	pthread_mutex_t lock; /* guards the fields below */
	void *hstate;	      /* XXH3 state over bytes [0, written) */
	uint64_t written;     /* bytes written: parts come in order, so
				 the next starts here and written == size
				 means complete */
	int err;	      /* first write error, sticky */
	uint16_t key_len;     /* bytes of key in name[] */
	uint8_t etag_len;     /* bytes of etag in name[] */
	char name[];	      /* key, '\0', etag, '\0' */
};

/* ---- table.c ---- */
int tab_init(struct tab *t);
void tab_fini(struct tab *t);
struct cache_ent *cache_ent_new(const char *key, size_t key_len,
				const char *etag, size_t etag_len);
uint64_t tab_hash_key(const char *key, size_t key_len);
struct cache_ent *tab_find(const struct tab *t, const char *key, size_t key_len,
			   const char *etag, size_t etag_len);
/* tab_find() with the key's tab_hash_key() already at hand. */
struct cache_ent *tab_find_hashed(const struct tab *t, uint64_t khash,
				  const char *key, size_t key_len,
				  const char *etag, size_t etag_len);
struct cache_ent *tab_first_version(const struct tab *t, const char *key,
				    size_t key_len);
struct cache_ent *tab_by_id(const struct tab *t, uint64_t id);
int tab_reserve(struct tab *t, size_t n);
int tab_presize(struct tab *t, size_t n);
void tab_insert(struct tab *t, struct cache_ent *e);
void tab_remove(struct tab *t, struct cache_ent *e);

/* ---- cache.c: test hooks ---- */
/* 0, or the hook's -errno when this is the Nth call of @f. */
int cache_fault_hit(struct cache_fault *f);
/* Arms @f from environment variable @name at open (cache.c). */
void cache_fault_init(struct cache_fault *f, const char *name,
		      const char *what);

/* ---- cache.c: dropping entries ---- */
void cache_unlink_locked(struct cache *c, struct cache_ent *e,
			 struct cache_ent **victims);
void cache_finish_drop(struct cache *c, struct cache_ent *victims, bool punch);
void cache_note_write_error(struct cache *c, int err);
void cache_recheck_disk(struct cache *c);

/* ---- cache.c: the checker thread ---- */
/* Stops it, if it started (cache_close(), before anything is freed). */
void cache_ahead_stop(struct cache *c);

/* ---- idx.c ---- */
/* One object's record, decoded; key and etag point into LMDB or the
 * caller's memory, valid for the call they are passed to. */
struct idx_rec {
	const char *key;
	size_t key_len;
	const char *etag;
	size_t etag_len;
	bool is_inline;	 /* bytes in the inline db, not in a segment */
	bool own;	 /* bytes in a file of their own, obj-<seg> */
	uint32_t seg;	 /* segment or own file id (0 when inline) */
	uint64_t size;	 /* object bytes */
	uint64_t off;	 /* extent start in the segment */
	uint64_t sum;	 /* xxh3-64 of the object */
	uint64_t time_s; /* insert time, unix seconds */
};

/* 0 keeps the record, 1 drops it (deleted from LMDB), < 0 stops. */
typedef int (*idx_load_cb)(void *arg, const struct idx_rec *r);
/* Sees inline data inside the read transaction; returns the result. */
typedef int (*idx_inline_cb)(void *arg, const void *data, size_t len);

int idx_errno(int mdb_rc);
/* Opens the environment at @path (@shown names it in @err). */
int idx_open(const char *path, const char *shown, uint64_t map_bytes,
	     struct idx **out, char *err, size_t err_len);
void idx_close(struct idx *ix);
/* Opens the environment at @path in a child process and walks all of
 * it: 0 when sound, -EUCLEAN when damaged (LMDB would crash on it). */
int idx_check(const char *path, uint64_t map_bytes);
int idx_sync(struct idx *ix);
size_t idx_key(const char *key, size_t key_len, const char *etag,
	       size_t etag_len, unsigned char *buf);
int idx_load(struct idx *ix, idx_load_cb cb, void *arg, size_t *dropped);
/* The records of the index, in *@n. 0 or -errno. */
int idx_count(struct idx *ix, size_t *n);
int idx_apply(struct idx *ix, const struct idx_rec *put, const void *data,
	      const struct cache_ent *dels);
int idx_apply_many(struct idx *ix, const struct idx_rec *puts,
		   const void *const *datas, size_t n,
		   const struct cache_ent *dels);
int idx_clear(struct idx *ix);
int idx_read_inline(struct idx *ix, const unsigned char *k, size_t k_len,
		    idx_inline_cb cb, void *arg);
int idx_meta_put(struct idx *ix, const char *name, const void *blob,
		 size_t len);
int idx_meta_get(struct idx *ix, const char *name, void **out, size_t *len);
int idx_meta_del(struct idx *ix, const char *name);
int idx_meta_read(struct idx *ix, const char *name,
		  int (*fn)(void *arg, const void *blob, size_t len),
		  void *arg);

/* ---- blob.c ---- */
/* The files blob_scan() found at open: what the index load checks its
 * records against. */
struct blob_found {
	struct blob_seg **segs; /* segments, by id */
	size_t n_segs;
	uint64_t *own; /* per-object files: id in the low 32 bits, sorted;
			  BLOB_OWN_USED once a record refers to it */
	size_t n_own;
};
#define BLOB_OWN_USED (1ull << 32)

int blob_io(int fd, void *buf, size_t len, uint64_t off, bool write);
int blob_scan(struct cache *c, struct blob_found *f);
void blob_found_fini(struct blob_found *f);
struct blob_seg *blob_find(const struct blob_found *f, uint32_t id);
uint64_t *blob_own_find(const struct blob_found *f, uint32_t id);
void blob_own_reap(struct cache *c, const struct blob_found *f);
int blob_own_create(struct cache *c, uint32_t *id);
int blob_own_open(struct cache *c, uint32_t id);
void blob_own_unlink(struct cache *c, uint32_t id);
int blob_reserve(struct cache *c, uint64_t size, struct blob_seg **seg,
		 uint64_t *off);
void blob_seal_active(struct cache *c);
void blob_punch(struct blob_seg *s, uint64_t off, uint64_t size);
bool blob_seg_unref_locked(struct cache *c, struct blob_seg *s);
void blob_seg_destroy(struct cache *c, struct blob_seg *s);
void blob_reap(struct cache *c);
void blob_close_all(struct cache *c);
void blob_rings_release(void);

/* ---- evict.c ---- */
int evict_reserve(struct cache *c, uint64_t size, uint64_t next_use);
void evict_unreserve(struct cache *c, uint64_t size);

/* ---- check.c ---- */
/*
 * cache_assert(X): assert(X) in a build configured with -Dinvariants=true
 * (HINTFS_INVARIANTS: mount-tools/test.sh's builds, unit and integration,
 * sanitizers included), nothing elsewhere. X is an invariant check of
 * check.c, which walks the whole table: fine at every change in a test,
 * too slow for a million objects in production, so a shipped build
 * neither evaluates nor calls it (sizeof keeps it compiled and used).
 */
#ifdef HINTFS_INVARIANTS
#define cache_assert(x) assert(x)
#else
#define cache_assert(x) ((void)sizeof(x))
#endif
/* Under c->lock: false when an invariant of the table is broken. */
bool tab_ok(const struct tab *t);
/* Under c->lock: false when an invariant of the cache is broken. */
bool cache_ok(struct cache *c);

#endif /* HINTFS_CACHE_INTERNAL_H */
