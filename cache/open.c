/*
 * cache/open.c - opening and closing the cache: the directory (DIR 0700,
 * DIR/lock held with flock while open), the checks of the index files,
 * the clean-close mark, the load of the index into memory at open, and
 * then the removal of the files no record names (segments emptied, and
 * per-object files of puts killed before their commit).
 *
 * Invariant: LMDB opens an index file only after it was either closed
 * cleanly by us (index.clean still matches it) or checked by a child
 * process (damage would crash LMDB); a damaged index is started afresh.
 * The last close in a process tears the io_uring rings down.
 */
#include "cache/cache_internal.h"
#include "common/fileio.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

/* The LMDB map is address space, not disk: room for every object inline
 * twice over (copy-on-write) plus 4 GiB for the records and a listing
 * snapshot, capped well inside a 47-bit address space. */
#define CACHE_MAP_EXTRA (4ull << 30)
#define CACHE_MAP_MAX	(16ull << 40)
/* Segment files each keep an fd open (per-object files do not); besides
 * them, 1,024 for FUSE, the engine's sockets and the rest of the daemon. */
#define CACHE_FD_HEADROOM 1024

/* Open caches in this process: the last close tears the rings down. */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned open_count;

/* ---- open and close ---- */

/* Opens the directory, which must be ours: objects are private data. */
static int cache_open_dir(struct cache *c, char *err, size_t err_len)
{
	struct stat st;
	int ret;

	ret = mkdir_p(c->dir, 0700);
	if (ret) {
		snprintf(err, err_len, "cache dir %s: cannot create: %s",
			 c->dir, strerror(-ret));
		return ret;
	}
	c->dir_fd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dir_fd < 0 || fstat(c->dir_fd, &st) < 0) {
		ret = -errno;
		snprintf(err, err_len, "cache dir %s: %s", c->dir,
			 strerror(-ret));
		return ret;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, err_len,
			 "cache dir %s belongs to uid %u, not to this user "
			 "(uid %u): choose another cache_dir",
			 c->dir, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	/* Another user who may write here could swap a segment or plant a
	 * link where the index goes: only the owner may write. */
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, err_len,
			 "cache dir %s is writable by group or others (mode "
			 "%03o): chmod 700 it or choose another cache_dir",
			 c->dir, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Every segment keeps an fd open (capacity / 256 MiB of them, and more
 * while emptied segments wait for their last object), which passes the
 * usual soft limit of 1,024 from about 200 GB. Raise the soft limit
 * toward the hard one, as systemd asks of programs that need more.
 */
static void cache_raise_fd_limit(const struct cache *c)
{
	uint64_t want =
	    c->capacity_cfg / CACHE_SEG_BYTES * 2 + CACHE_FD_HEADROOM;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
			  ? want
			  : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
		log_warn("cache: %s: the open-file limit (%llu) may be too "
			 "low for %llu bytes of segments; raise ulimit -n",
			 c->dir, (unsigned long long)rl.rlim_cur,
			 (unsigned long long)c->capacity_cfg);
}

/* One daemon per directory: flock on DIR/lock, released by close/exit. */
static int cache_lock_dir(struct cache *c, char *err, size_t err_len)
{
	int ret;

	c->lock_fd = openat(c->dir_fd, "lock",
			    O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (c->lock_fd < 0) {
		ret = -errno;
		snprintf(err, err_len, "cache dir %s: lock file: %s", c->dir,
			 strerror(-ret));
		return ret;
	}
	if (flock(c->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		ret = errno == EWOULDBLOCK ? -EBUSY : -errno;
		snprintf(err, err_len,
			 ret == -EBUSY ? "cache dir %s is in use by another "
					 "hintfs (%s/lock is held)"
				       : "cache dir %s: cannot lock %s/lock",
			 c->dir, c->dir);
		return ret;
	}
	return 0;
}

/*
 * The index's two files, if present, must be our own regular files: LMDB
 * opens them by name, with O_CREAT and without O_NOFOLLOW, and would
 * write through a symlink. Checked with lstat semantics here; nobody else
 * can plant one between this check and mdb_env_open(), since the
 * directory is writable by its owner only (cache_open_dir()), and LMDB
 * is given the path through our open fd of that directory, so a parent
 * renamed meanwhile changes nothing.
 */
static int cache_check_index_files(struct cache *c, char *err, size_t err_len)
{
	static const char *const names[] = {"index.mdb", "index.mdb-lock"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct stat st;

		if (fstatat(c->dir_fd, names[i], &st, AT_SYMLINK_NOFOLLOW) <
		    0) {
			if (errno == ENOENT)
				continue;
			snprintf(err, err_len, "cache dir %s: %s: %s", c->dir,
				 names[i], strerror(errno));
			return -errno;
		}
		if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
			snprintf(err, err_len,
				 "cache dir %s: %s is not a regular file of "
				 "this user (a symlink?): remove it",
				 c->dir, names[i]);
			return -EPERM;
		}
	}
	return 0;
}

/*
 * DIR/index.clean, written by cache_close() after the index was synced
 * and closed: the size, ctime and inode of index.mdb then. While they
 * still match, the file is as LMDB left it and needs no check; a kill,
 * a power loss or a write by anything else leaves it stale or missing
 * (ctime, unlike mtime, cannot be set back).
 */
#define CACHE_CLEAN_NAME "index.clean"

static int cache_clean_line(struct cache *c, char *buf, size_t len)
{
	struct stat st;

	if (fstatat(c->dir_fd, "index.mdb", &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	snprintf(buf, len, "%llu %lld.%09ld %llu\n",
		 (unsigned long long)st.st_size, (long long)st.st_ctim.tv_sec,
		 st.st_ctim.tv_nsec, (unsigned long long)st.st_ino);
	return 0;
}

/* Whether the marker matches; it is removed either way, before any
 * write to the index can make it wrong. */
static bool cache_closed_cleanly(struct cache *c)
{
	char want[128], got[128];
	ssize_t n = -1;
	int fd;

	fd = openat(c->dir_fd, CACHE_CLEAN_NAME,
		    O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, got, sizeof(got) - 1);
	close(fd);
	unlinkat(c->dir_fd, CACHE_CLEAN_NAME, 0);
	if (n <= 0 || cache_clean_line(c, want, sizeof(want)))
		return false;
	got[n] = '\0';
	return !strcmp(got, want);
}

static void cache_mark_clean(struct cache *c)
{
	char line[128];
	int fd;

	if (cache_clean_line(c, line, sizeof(line)))
		return;
	fd =
	    openat(c->dir_fd, CACHE_CLEAN_NAME,
		   O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (write(fd, line, strlen(line)) != (ssize_t)strlen(line) ||
	    fsync(fd) < 0) {
		close(fd);
		unlinkat(c->dir_fd, CACHE_CLEAN_NAME, 0);
		return;
	}
	close(fd);
}

/* Records for which the table is sized at load at most: 64 Mi objects,
 * 7 TB of ~110 KB samples; a larger count grows the table as it loads. */
#define CACHE_PRESIZE_MAX (64u << 20)

/* What the load of the index needs: the files found, by id. */
struct cache_loader {
	struct cache *c;
	struct blob_found *found;
};

/* One index record at open: keep it (0), drop it (1), or fail (< 0). */
static int cache_load_rec(void *arg, const struct idx_rec *r)
{
	struct cache_loader *ld = arg;
	struct cache *c = ld->c;
	struct blob_seg *s = NULL;
	uint64_t *own = NULL;
	struct cache_ent *e;

	if (r->own) {
		/* Its size is checked at its first read, not here: a stat
		 * each would make opening a million of them slow. */
		own = blob_own_find(ld->found, r->seg);
		if (!own)
			return 1;
	} else if (!r->is_inline) {
		s = blob_find(ld->found, r->seg);
		/* Bytes are written before their record: a missing or cut
		 * file means the bytes are gone. */
		if (!s || r->off % CACHE_ALIGN || r->off > s->file_bytes ||
		    r->size > s->file_bytes - r->off)
			return 1;
	}
	e = cache_ent_new(r->key, r->key_len, r->etag, r->etag_len);
	if (!e || tab_reserve(&c->tab, 1)) {
		free(e);
		return -ENOMEM;
	}
	if (tab_find_hashed(&c->tab, e->khash, r->key, r->key_len, r->etag,
			    r->etag_len)) {
		free(e);
		return 1;
	}
	e->seg = s;
	e->file = own ? r->seg : 0;
	e->size = r->size;
	e->off = r->off;
	e->sum = r->sum;
	/* LRU across restarts: older inserts go first. */
	e->tick = r->time_s;
	if (c->tick < r->time_s)
		c->tick = r->time_s;
	tab_insert(&c->tab, e);
	c->used += r->size;
	if (s)
		s->live_bytes += r->size;
	if (own)
		*own |= BLOB_OWN_USED;
	return 0;
}

/* Forgets a partial load, to start over with an empty index. */
static int cache_unload(struct cache *c, struct blob_found *f)
{
	tab_fini(&c->tab);
	for (struct blob_seg *s = c->segs; s; s = s->next)
		s->live_bytes = 0;
	for (size_t i = 0; i < f->n_own; i++)
		f->own[i] &= ~BLOB_OWN_USED;
	c->used = 0;
	c->tick = 0;
	return tab_init(&c->tab);
}

/*
 * Opens the index and loads it, against the files on disk (found into
 * @found, which the caller frees). A damaged index is a cache miss for
 * everything, not a failed mount: it is removed and started afresh (its
 * files are then unreferenced and removed by blob_reap() and
 * blob_own_reap()).
 */
static int cache_load(struct cache *c, struct blob_found *found, char *err,
		      size_t err_len)
{
	struct cache_loader ld = {.c = c, .found = found};
	uint64_t map = CACHE_MAP_MAX;
	size_t dropped = 0;
	char *path = NULL, *via_fd = NULL;
	bool clean;
	int ret;

	ret = blob_scan(c, found);
	if (ret) {
		snprintf(err, err_len,
			 "cache dir %s: cannot open its segment files: %s%s",
			 c->dir, strerror(-ret),
			 ret == -EMFILE ? " (raise ulimit -n)" : "");
		return ret;
	}
	if (c->capacity_cfg < (CACHE_MAP_MAX - CACHE_MAP_EXTRA) / 2)
		map = c->capacity_cfg * 2 + CACHE_MAP_EXTRA;
	if (asprintf(&path, "%s/index.mdb", c->dir) < 0 ||
	    asprintf(&via_fd, "/proc/self/fd/%d/index.mdb", c->dir_fd) < 0) {
		free(path);
		return -ENOMEM;
	}
	/* Without /proc (a bare chroot) the name is all there is. */
	if (access("/proc/self/fd", X_OK) < 0) {
		free(via_fd);
		via_fd = NULL;
	}
	clean = cache_closed_cleanly(c);
	for (int attempt = 0;; attempt++) {
		ret = cache_check_index_files(c, err, err_len);
		if (ret)
			break;
		/* Not closed by us since it last changed: LMDB would crash
		 * on damage, so a child looks at it first. */
		ret = attempt || clean ||
			      faccessat(c->dir_fd, "index.mdb", F_OK,
					AT_SYMLINK_NOFOLLOW) < 0
			  ? 0
			  : idx_check(via_fd ? via_fd : path, map);
		if (!ret)
			ret = idx_open(via_fd ? via_fd : path, path, map,
				       &c->ix, err, err_len);
		if (!ret) {
			size_t n = 0;

			/* One table of the right size, not twenty doublings
			 * (a failure here only costs those); a count past
			 * any real cache's is not trusted with memory. */
			if (!idx_count(c->ix, &n) && n <= CACHE_PRESIZE_MAX)
				(void)tab_presize(&c->tab, n);
			ret = idx_load(c->ix, cache_load_rec, &ld, &dropped);
			if (ret) {
				idx_close(c->ix);
				c->ix = NULL;
				snprintf(err, err_len, "cache index %s: %s",
					 path, strerror(-ret));
				if (cache_unload(c, found))
					ret = -ENOMEM;
			}
		}
		if (ret != -EUCLEAN || attempt)
			break;
		log_warn("cache: index %s is damaged; starting with an empty "
			 "cache",
			 path);
		unlinkat(c->dir_fd, "index.mdb", 0);
		unlinkat(c->dir_fd, "index.mdb-lock", 0);
	}
	if (!ret && dropped)
		log_info("cache: %s: dropped %zu objects whose bytes were "
			 "missing or unreadable",
			 c->dir, dropped);
	free(path);
	free(via_fd);
	return ret;
}

/* The meta record naming the source of the cached objects. */
#define CACHE_META_SOURCE "source"

/*
 * Keys and ETags name objects only within one bucket: the same key in
 * another bucket, with an ETag that is no content hash (some stores,
 * SSE-KMS), could be served this one's bytes. So a directory serves one
 * source; a directory from before sources were recorded takes the first.
 */
static int cache_check_source(struct cache *c, const char *source, char *err,
			      size_t err_len)
{
	size_t len = strlen(source), got_len = 0;
	void *got = NULL;
	int ret;

	ret = idx_meta_get(c->ix, CACHE_META_SOURCE, &got, &got_len);
	if (ret == -ENODATA)
		ret = idx_meta_put(c->ix, CACHE_META_SOURCE, source, len);
	else if (!ret && (got_len != len || memcmp(got, source, len)))
		ret = -EEXIST;
	if (ret == -EEXIST)
		snprintf(err, err_len,
			 "cache dir %s holds the objects of %.*s, not of %s: "
			 "choose another cache_dir (or empty this one)",
			 c->dir, (int)(got_len < 512 ? got_len : 512),
			 (const char *)got, source);
	else if (ret)
		snprintf(err, err_len,
			 "cache dir %s: cannot record its source: "
			 "%s",
			 c->dir, strerror(-ret));
	free(got);
	return ret;
}

/* Frees @c, open or half-open. */
static void cache_free(struct cache *c)
{
	blob_close_all(c);
	idx_close(c->ix);
	tab_fini(&c->tab);
	free(c->ev_cand);
	while (c->holds) {
		struct cache_hold *h = c->holds;

		c->holds = h->next;
		free(h);
	}
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	if (c->dir_fd >= 0)
		close(c->dir_fd);
	pthread_rwlock_destroy(&c->punch_lock);
	pthread_cond_destroy(&c->ahead_cv);
	pthread_cond_destroy(&c->verify_cv);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->seg_lock);
	pthread_mutex_destroy(&c->wlock);
	pthread_mutex_destroy(&c->evict_lock);
	free(c->dir);
	free(c);
}

int cache_open(const struct cache_config *cfg, struct cache **out, char *err,
	       size_t err_len)
{
	struct blob_found found = {0};
	pthread_rwlockattr_t rwa;
	pthread_condattr_t ca;
	struct cache *c;
	int ret;

	*out = NULL;
	if (err_len)
		err[0] = '\0';
	if (!cfg || !cfg->dir || !cfg->dir[0] || !cfg->capacity) {
		snprintf(err, err_len,
			 "cache: needs a directory and a capacity above 0");
		return -EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->dir_fd = -1;
	c->lock_fd = -1;
	c->capacity_cfg = cfg->capacity;
	c->capacity = cfg->capacity;
	c->inline_max =
	    cfg->inline_max ? cfg->inline_max : CACHE_INLINE_DEFAULT;
	c->file_per_object = cfg->file_per_object;
	c->ahead_bytes =
	    cfg->ahead_bytes ? cfg->ahead_bytes : CACHE_AHEAD_BYTES_DEFAULT;
	c->next_use = cfg->next_use;
	c->next_use_arg = cfg->next_use_arg;
	cache_fault_init(&c->fault_read, "HINTFS_FAULT_CACHE_READ", "read");
	cache_fault_init(&c->fault_write, "HINTFS_FAULT_CACHE_WRITE",
			 "blob write");
	pthread_mutex_init(&c->evict_lock, NULL);
	pthread_mutex_init(&c->wlock, NULL);
	pthread_mutex_init(&c->seg_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->verify_cv, NULL);
	/* The checker thread's idle wait counts on the monotonic clock. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->ahead_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_rwlockattr_init(&rwa);
	pthread_rwlockattr_setkind_np(
	    &rwa, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&c->punch_lock, &rwa);
	pthread_rwlockattr_destroy(&rwa);
	c->dir = strdup(cfg->dir);
	ret = c->dir ? tab_init(&c->tab) : -ENOMEM;
	if (ret)
		goto fail;
	ret = cache_open_dir(c, err, err_len);
	if (!ret)
		ret = cache_lock_dir(c, err, err_len);
	if (!ret) {
		cache_raise_fd_limit(c);
		ret = cache_load(c, &found, err, err_len);
	}
	if (!ret && cfg->source)
		ret = cache_check_source(c, cfg->source, err, err_len);
	if (ret)
		goto fail;
	blob_reap(c);
	blob_own_reap(c, &found);
	blob_found_fini(&found);
	/* No other thread has it yet: no lock. */
	cache_assert(cache_ok(c));

	pthread_mutex_lock(&open_lock);
	open_count++;
	pthread_mutex_unlock(&open_lock);
	*out = c;
	return 0;

fail:
	blob_found_fini(&found);
	if (ret == -ENOMEM && err_len && !err[0])
		snprintf(err, err_len, "cache: out of memory");
	cache_free(c);
	return ret;
}

void cache_close(struct cache *c)
{
	unsigned puts;
	int rc;

	if (!c)
		return;
	cache_ahead_stop(c);
	puts = atomic_load(&c->n_puts);
	/* The caller's threads are done with it: no lock. With every put
	 * finished, nothing is reserved. */
	cache_assert(cache_ok(c) && (puts || !c->reserved));
	if (puts)
		log_warn("cache: %s closed with %u puts unfinished", c->dir,
			 puts);
	/* Segments first, then the index that points into them. */
	blob_close_all(c);
	rc = c->ix ? idx_sync(c->ix) : -ENODATA;
	if (rc && rc != -ENODATA)
		log_warn("cache: %s: cannot sync the index: %s", c->dir,
			 strerror(-rc));
	idx_close(c->ix);
	c->ix = NULL;
	if (!rc)
		cache_mark_clean(c);
	cache_free(c);

	pthread_mutex_lock(&open_lock);
	if (--open_count == 0)
		blob_rings_release();
	pthread_mutex_unlock(&open_lock);
}

void cache_set_next_use(struct cache *c, cache_next_use_cb cb, void *arg)
{
	pthread_mutex_lock(&c->lock);
	c->next_use = cb;
	c->next_use_arg = arg;
	pthread_mutex_unlock(&c->lock);
}

void cache_set_evicted(struct cache *c, cache_evicted_cb cb, void *arg)
{
	pthread_mutex_lock(&c->lock);
	c->evicted = cb;
	c->evicted_arg = arg;
	pthread_mutex_unlock(&c->lock);
}
