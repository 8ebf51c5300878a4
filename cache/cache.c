/*
 * cache/cache.c - the cache as a whole: the read path, and dropping
 * objects (opening and closing it are cache/open.c's).
 *
 * Owns lookups and reads (by copy, by reference, and by a file handed
 * out: cache_open_file()), the checksum check on the first read of each
 * entry in a session, and the one way an object leaves the cache: out of
 * memory, then out of the index, then its blocks punched or its own file
 * unlinked (cache_unlink_locked(), idx_apply(), cache_finish_drop()).
 *
 * Invariants:
 * - Only correct bytes are returned. An entry's bytes are hashed whole
 *   before its first read in a session is served; a mismatch drops it.
 *   A read that raced with a drop (its blocks may be zeros by now) sees,
 *   after the copy, that its id left the table, and answers -ENODATA.
 *   A read by reference (cache_read_ref) cannot check afterwards, so it
 *   holds punch_lock instead: no extent is punched while it is handed out.
 *   A file of its own is never punched, only unlinked: a reader that
 *   opened it (its fd is opened per read, and by cache_open_file() for
 *   the caller to keep) reads the same bytes to the end, and one that
 *   comes after the unlink finds no file: a miss.
 * - Blocks are punched, and segments and own files unlinked, only after
 *   the index no longer refers to them: after a kill -9 at any point every
 *   indexed object is either intact or caught by its checksum.
 */
#include "cache/cache_internal.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/test_hook.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* Checksums of big blobs are computed 1 MiB at a time. */
#define CACHE_HASH_CHUNK (1u << 20)
/* Keys in log lines are cut here. */
#define CACHE_LOG_KEY 200

static bool cache_valid_name(const char *key, size_t key_len, const char *etag)
{
	return key && key_len && key_len <= CACHE_KEY_MAX &&
	       (!etag || strlen(etag) <= CACHE_ETAG_MAX);
}

/* Under c->lock: @e, checked ahead, is being read or leaves the cache: the
 * checker thread may go that much further ("checking ahead", below). */
static void ahead_read_locked(struct cache *c, struct cache_ent *e)
{
	if (!e->ahead_unread)
		return;
	e->ahead_unread = false;
	c->ahead_unread -=
	    e->size < c->ahead_unread ? e->size : c->ahead_unread;
	pthread_cond_signal(&c->ahead_cv);
}

/* ---- dropping entries ---- */

/*
 * Under c->lock: takes @e out of the table and the accounting, onto
 * *@victims. Its segment keeps a reference until cache_finish_drop().
 */
void cache_unlink_locked(struct cache *c, struct cache_ent *e,
			 struct cache_ent **victims)
{
	tab_remove(&c->tab, e);
	c->used -= e->size;
	ahead_read_locked(c, e);
	if (e->held) {
		/* A reader holds its file open: unlinked, it keeps its
		 * blocks until the release (cache_release_file()). */
		struct cache_hold *h = c->holds;

		while (h && h->id != e->id)
			h = h->next;
		if (h) {
			h->gone = true;
			c->held_bytes += h->size;
		}
	}
	if (e->seg) {
		e->seg->live_bytes -= e->size;
		e->seg->refs++;
	}
	e->hnext = *victims;
	*victims = e;
}

/*
 * After the index transaction that deleted @victims (or failed to):
 * punches their extents when @punch (only once the index no longer
 * refers to them), drops their segment references, which may unlink
 * empty segments, and frees them.
 */
void cache_finish_drop(struct cache *c, struct cache_ent *victims, bool punch)
{
	struct blob_seg *dead = NULL, *s;
	struct cache_ent *e, *next;

	/* A sealed, empty segment is about to be unlinked: no punching. */
	pthread_mutex_lock(&c->lock);
	for (e = victims; e; e = e->hnext)
		e->punch =
		    punch && e->seg && !(e->seg->sealed && !e->seg->live_bytes);
	pthread_mutex_unlock(&c->lock);
	/* Own files need no punch_lock: whoever has one open keeps its
	 * bytes. */
	for (e = victims; punch && e; e = e->hnext)
		if (e->file)
			blob_own_unlink(c, e->file);

	pthread_rwlock_wrlock(&c->punch_lock);
	for (e = victims; e; e = e->hnext)
		if (e->punch)
			blob_punch(e->seg, e->off, e->size);
	pthread_rwlock_unlock(&c->punch_lock);

	pthread_mutex_lock(&c->lock);
	for (e = victims; e; e = next) {
		next = e->hnext;
		if (e->seg && blob_seg_unref_locked(c, e->seg)) {
			e->seg->next = dead;
			dead = e->seg;
		}
		free(e);
	}
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	for (; dead; dead = s) {
		s = dead->next;
		blob_seg_destroy(c, dead);
	}
}

/*
 * Counts a failed put. A full disk also stops the cache growing: the
 * effective capacity drops to what is stored now, so later puts evict
 * instead of failing. One warning per cache, not one per object (until
 * cache_recheck_disk() finds room again).
 */
void cache_note_write_error(struct cache *c, int err)
{
	bool *warned = err == -ENOSPC ? &c->disk_full : &c->io_warned;
	bool first;

	pthread_mutex_lock(&c->lock);
	c->write_errors++;
	first = !*warned;
	*warned = true;
	if (err == -ENOSPC && c->capacity > c->used)
		c->capacity = c->used;
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	if (!first)
		return;
	if (err == -ENOSPC)
		log_warn("cache: %s: disk full; the cache stops growing at "
			 "%llu bytes",
			 c->dir, (unsigned long long)c->capacity);
	else
		log_warn("cache: %s: cannot write an object (%s); such "
			 "objects are not cached",
			 c->dir, strerror(-err));
}

/*
 * A capacity lowered by a full disk comes back when the disk has room
 * again. What filled it is often not the cache's to free: other files on
 * the disk, and the cache's own evicted files that a reader still holds
 * open (an fd handed out by cache_open_file(), a passthrough backing
 * file: unlinked, their blocks are freed only at the last close, which
 * the cache is not told of). So instead of guessing when those go, each
 * reservation while the capacity is lowered asks the file system
 * (fstatvfs: one system call, only while the disk was full) and lets the
 * cache grow into 7/8 of the room it finds, up to the configured size.
 * The eighth kept free is what the bytes written do not count: block
 * rounding (up to 4 KiB a file, a fifth of a 20 KB object) and the
 * index's growth. Raises only; an ENOSPC lowers again. Any thread, no
 * cache lock held.
 */
void cache_recheck_disk(struct cache *c)
{
	struct statvfs sv;
	uint64_t room, cap;
	bool back;

	pthread_mutex_lock(&c->lock);
	back = c->capacity < c->capacity_cfg;
	pthread_mutex_unlock(&c->lock);
	if (!back || fstatvfs(c->dir_fd, &sv) < 0)
		return;
	room = (uint64_t)sv.f_bavail * sv.f_frsize;
	room -= room / 8;
	pthread_mutex_lock(&c->lock);
	/* The held files' blocks are on the disk already, not in the room. */
	cap = c->used + c->held_bytes + room;
	if (cap > c->capacity_cfg || cap < room)
		cap = c->capacity_cfg;
	if (cap > c->capacity)
		c->capacity = cap;
	back = c->capacity == c->capacity_cfg && c->disk_full;
	if (back)
		c->disk_full = false; /* a new fill warns again */
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	if (back)
		log_info("cache: %s: the disk has room again; the cache may "
			 "grow to %llu bytes",
			 c->dir, (unsigned long long)c->capacity_cfg);
}

/* Drops entry @id because its bytes are wrong or unreadable (@why), with
 * one warning; @corrupt counts it as corrupt. */
static void cache_drop(struct cache *c, uint64_t id, const char *why,
		       bool corrupt)
{
	struct cache_ent *victims = NULL, *e;
	int rc = 0;

	pthread_mutex_lock(&c->wlock);
	pthread_mutex_lock(&c->lock);
	e = tab_by_id(&c->tab, id);
	if (e) {
		cache_unlink_locked(c, e, &victims);
		c->corrupt += corrupt;
	}
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	if (victims)
		rc = idx_apply(c->ix, NULL, NULL, victims);
	pthread_mutex_unlock(&c->wlock);
	if (!victims)
		return;
	log_warn("cache: dropped %.*s (etag %s): %s",
		 e->key_len < CACHE_LOG_KEY ? (int)e->key_len : CACHE_LOG_KEY,
		 e->name, e->name + e->key_len + 1, why);
	cache_finish_drop(c, victims, rc == 0);
}

/* ---- reading ---- */

/* What a read needs of an entry, copied under the lock. */
struct cache_pin {
	uint64_t id;
	uint64_t size, off, sum;
	struct blob_seg *seg; /* holds a reference; NULL when inline or in
				 its own file */
	uint32_t file;	      /* its own file's id, or 0 */
	int fd;		      /* where its bytes are: the segment's fd, or
				 its own file's opened by pin_open(); -1
				 when inline or that open failed */
	int open_err;	      /* why that open failed (-ENODATA: gone) */
	bool verified;
	size_t k_len; /* the LMDB key, for inline data */
	unsigned char k[IDX_KEY_MAX];
};

/*
 * Under c->lock: pins entry @e into @p, for a read (the checker thread's
 * own pins come before its check marks the entry); pin_open() must follow.
 */
static void pin_fill_locked(struct cache *c, struct cache_ent *e,
			    struct cache_pin *p)
{
	ahead_read_locked(c, e);
	p->id = e->id;
	p->size = e->size;
	p->off = e->off;
	p->sum = e->sum;
	p->seg = e->seg;
	p->file = e->file;
	p->fd = p->seg ? p->seg->fd : -1;
	p->open_err = 0;
	p->verified = e->verified;
	if (p->seg)
		p->seg->refs++;
	else if (!p->file)
		p->k_len = idx_key(e->name, e->key_len,
				   e->name + e->key_len + 1, e->etag_len, p->k);
}

/*
 * Outside the lock: opens the own file of a pinned entry (a failure is
 * kept in open_err, for the read to report). Opened per read rather than
 * held: a million files cannot each keep an fd.
 */
static void pin_open(struct cache *c, struct cache_pin *p)
{
	int fd;

	if (!p->file)
		return;
	fd = blob_own_open(c, p->file);
	if (fd >= 0)
		p->fd = fd;
	else
		p->open_err = fd;
}

/* Pins entry @id; copies its key into *@key_out (malloc'd) if asked. */
static int pin_get(struct cache *c, uint64_t id, struct cache_pin *p,
		   char **key_out, size_t *key_len)
{
	struct cache_ent *e;

	pthread_mutex_lock(&c->lock);
	e = tab_by_id(&c->tab, id);
	if (!e) {
		pthread_mutex_unlock(&c->lock);
		return -ENODATA;
	}
	if (key_out) {
		*key_out = malloc(e->key_len + 1);
		if (!*key_out) {
			pthread_mutex_unlock(&c->lock);
			return -ENOMEM;
		}
		memcpy(*key_out, e->name, e->key_len);
		*key_len = e->key_len;
	}
	pin_fill_locked(c, e, p);
	pthread_mutex_unlock(&c->lock);
	pin_open(c, p);
	return 0;
}

/*
 * Unpins; marks the entry verified if @verified. True when the entry is
 * still the one pinned, i.e. what was read was not dropped meanwhile.
 */
static bool pin_put(struct cache *c, struct cache_pin *p, bool verified)
{
	struct cache_ent *e;
	bool dead = false;

	pthread_mutex_lock(&c->lock);
	e = tab_by_id(&c->tab, p->id);
	if (e && verified)
		e->verified = true;
	if (verified && !p->verified)
		c->checked++; /* cache_read() hashed its copy */
	if (p->seg)
		dead = blob_seg_unref_locked(c, p->seg);
	pthread_mutex_unlock(&c->lock);
	if (dead)
		blob_seg_destroy(c, p->seg);
	if (p->file && p->fd >= 0)
		close(p->fd);
	return e != NULL;
}

/* A copy out of inline data, inside LMDB's read transaction. */
struct inline_copy {
	const struct cache_pin *p;
	void *buf; /* NULL: check only */
	size_t len;
	uint64_t off;
	bool check; /* hash the whole value first */
};

static int inline_copy_cb(void *arg, const void *data, size_t len)
{
	const struct inline_copy *ic = arg;

	if (len != ic->p->size)
		return -EBADMSG;
	if (ic->check && XXH3_64bits(data, len) != ic->p->sum)
		return -EBADMSG;
	if (ic->buf)
		memcpy(ic->buf, (const char *)data + ic->off, ic->len);
	return 0;
}

/* Hashes a whole blob in a file. 0, -EBADMSG (mismatch) or -errno. */
static int seg_check(const struct cache_pin *p)
{
	size_t chunk = p->size < CACHE_HASH_CHUNK ? p->size : CACHE_HASH_CHUNK;
	XXH3_state_t *st = XXH3_createState();
	void *buf = malloc(chunk);
	int ret = -ENOMEM;

	if (!st || !buf)
		goto out;
	XXH3_64bits_reset(st);
	ret = 0;
	for (uint64_t pos = 0; pos < p->size && !ret; pos += chunk) {
		size_t n = p->size - pos < chunk ? p->size - pos : chunk;

		ret = blob_io(p->fd, buf, n, p->off + pos, false);
		if (!ret)
			XXH3_64bits_update(st, buf, n);
	}
	if (!ret && XXH3_64bits_digest(st) != p->sum)
		ret = -EBADMSG;
out:
	free(buf);
	XXH3_freeState(st);
	return ret;
}

static bool pin_inline(const struct cache_pin *p)
{
	return !p->seg && !p->file;
}

/*
 * Whether the own file of a pinned entry is exactly the object's size:
 * the kernel reads such a file to its end, so bytes after the object are
 * as wrong as a flipped one. 0, -ENODATA (short), -EBADMSG or -errno.
 */
static int pin_own_size(const struct cache_pin *p)
{
	struct stat st;

	if (fstat(p->fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size == p->size)
		return 0;
	return (uint64_t)st.st_size < p->size ? -ENODATA : -EBADMSG;
}

/*
 * Checks (when @check) and copies @n bytes at @off of a pinned entry.
 * -EBADMSG or -ENODATA: the stored bytes are wrong or missing.
 */
static int pin_read(struct cache *c, const struct cache_pin *p, void *buf,
		    size_t n, uint64_t off, bool check)
{
	int ret;

	if (pin_inline(p)) {
		struct inline_copy ic = {p, buf, n, off, check};

		return idx_read_inline(c->ix, p->k, p->k_len, inline_copy_cb,
				       &ic);
	}
	if (p->fd < 0)
		return p->open_err;
	ret = check && p->file ? pin_own_size(p) : 0;
	if (ret)
		return ret;
	if (check && buf && off == 0 && n == p->size) {
		/* The read covers the object: hash what we copied. */
		ret = blob_io(p->fd, buf, n, p->off, false);
		if (!ret && XXH3_64bits(buf, n) != p->sum)
			ret = -EBADMSG;
		return ret;
	}
	if (check) {
		ret = seg_check(p);
		if (ret)
			return ret;
	}
	return buf ? blob_io(p->fd, buf, n, p->off + off, false) : 0;
}

/*
 * Checks pinned entry @p unless it was checked this session, one caller at
 * a time: a caller that finds the check running (the checker thread, or
 * another READ of the same object: the kernel sends a large file's first
 * READs several at once) waits for its end and takes its result, instead
 * of hashing the same bytes again. The checker thread (@ahead) passes
 * instead, to the next entry, and marks what it found good as checked and
 * unread. 0 once verified (or passed), -ENODATA when the entry left
 * meanwhile, else pin_read()'s error.
 */
static int pin_verify(struct cache *c, struct cache_pin *p, bool ahead)
{
	struct cache_ent *e;
	bool mine = false;
	int rc;

	if (p->verified)
		return 0;
	pthread_mutex_lock(&c->lock);
	while ((e = tab_by_id(&c->tab, p->id)) && e->verifying && !ahead)
		pthread_cond_wait(&c->verify_cv, &c->lock);
	/* A read that waited for the checker's check (it pinned before the
	 * check marked the entry) reads it now. */
	if (e && !ahead)
		ahead_read_locked(c, e);
	if (e && e->verified)
		p->verified = true;
	else if (e && !e->verifying)
		e->verifying = mine = true;
	rc = e ? 0 : -ENODATA;
	pthread_mutex_unlock(&c->lock);
	if (mine) {
		rc = pin_read(c, p, NULL, 0, 0, true);
		pthread_mutex_lock(&c->lock);
		e = tab_by_id(&c->tab, p->id);
		if (e) {
			e->verifying = false;
			e->verified = !rc;
		}
		/* Marked before the waiting reads wake (above). */
		if (e && ahead && !rc) {
			e->ahead_unread = true;
			c->ahead_unread += e->size;
			c->checked_ahead++;
		}
		c->checked++;
		cache_assert(cache_ok(c));
		pthread_cond_broadcast(&c->verify_cv);
		pthread_mutex_unlock(&c->lock);
		p->verified = !rc;
	}
	return rc;
}

/*
 * The test hooks (common/test_hook.h: a test build's only): with
 * HINTFS_FAULT_CACHE_READ=N[:ERRNO] in the environment at open, every Nth
 * cache_read() fails with ERRNO (EIO by default) before touching the disk, as a
 * bad sector or a full LMDB reader table would; with
 * HINTFS_FAULT_CACHE_WRITE=N[:ERRNO], every Nth blob write of cache_put_write()
 * fails so, as a failing disk would.
 */
int cache_fault_hit(struct cache_fault *f)
{
	if (!f->every)
		return 0;
	if ((atomic_fetch_add(&f->n, 1) + 1) % f->every)
		return 0;
	return -f->err;
}

void cache_fault_init(struct cache_fault *f, const char *name, const char *what)
{
	const char *v = test_hook_env(name);
	unsigned every = 0;
	int e = EIO;

	if (!v || sscanf(v, "%u:%d", &every, &e) < 1 || !every || e <= 0)
		return;
	f->every = every;
	f->err = e;
	log_warn("cache: %s=%s: one %s in %u fails with %s (a test hook)", name,
		 v, what, every, strerror(e));
}

/*
 * What a read of entry @id that failed with @rc returns: always a miss
 * (-ENODATA), for the server still has the object. Wrong or missing bytes
 * drop the entry as corrupt; other errors are counted, and an I/O error
 * drops it too (fetched again, to another place), while a busy index, a
 * lack of memory or of fds (an own file opened per read) passes.
 */
static ssize_t read_failed(struct cache *c, uint64_t id, int rc)
{
	if (rc == -EBADMSG || rc == -ENODATA) {
		cache_drop(c, id,
			   rc == -EBADMSG ? "checksum mismatch"
					  : "blob missing or short",
			   true);
		return -ENODATA;
	}
	pthread_mutex_lock(&c->lock);
	c->read_errors++;
	pthread_mutex_unlock(&c->lock);
	if (rc != -EAGAIN && rc != -ENOMEM && rc != -EMFILE && rc != -ENFILE)
		cache_drop(c, id, strerror(-rc), false);
	return -ENODATA;
}

int cache_lookup(struct cache *c, const char *key, size_t key_len,
		 const char *etag, uint64_t size, struct cache_obj *out)
{
	struct cache_ent *e = NULL;
	uint64_t wrong = 0;

	if (!etag || !cache_valid_name(key, key_len, etag))
		return -ENODATA;
	pthread_mutex_lock(&c->lock);
	e = tab_find(&c->tab, key, key_len, etag, strlen(etag));
	if (e && e->size != size) {
		wrong = e->id;
		e = NULL;
	}
	if (e) {
		e->tick = ++c->tick;
		out->size = e->size;
		out->id = e->id;
		c->hits++;
	} else {
		c->misses++;
	}
	pthread_mutex_unlock(&c->lock);
	/* Same key and ETag, another size: the ETag is no content hash, and
	 * these bytes are not the listed object's. */
	if (wrong)
		cache_drop(c, wrong, "its size differs from the listing's",
			   true);
	return e ? 0 : -ENODATA;
}

/* ---- checking ahead ---- */

/*
 * The checker thread: checks the entries cache_contains_ahead() queued, in
 * the order queued, one at a time (reading a blob sequentially is what the
 * disk does best; the readers' own checks still run beside it). A blob
 * that fails is dropped as a reader would drop it.
 */
static void ahead_check(struct cache *c, uint64_t id)
{
	struct cache_pin p;
	int rc;

	if (pin_get(c, id, &p, NULL, NULL))
		return; /* dropped since it was queued */
	rc = p.file && p.fd < 0 ? p.open_err : pin_verify(c, &p, true);
	if (!pin_put(c, &p, false))
		return; /* dropped under the check: nothing to say */
	if (rc)
		read_failed(c, id, rc);
}

/*
 * Under c->lock: waits while the checks ahead are ahead_bytes beyond the
 * reads, or until the stop. After CACHE_AHEAD_IDLE_S with no read of what
 * was checked, it takes all of it as read (the entries' marks stay; their
 * reads then give back no more than is counted). False at the stop.
 */
static bool ahead_pace_locked(struct cache *c)
{
	while (!c->ahead_stop && c->ahead_unread >= c->ahead_bytes) {
		uint64_t before = c->ahead_unread;
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += CACHE_AHEAD_IDLE_S;
		if (pthread_cond_timedwait(&c->ahead_cv, &c->lock, &ts) ==
			ETIMEDOUT &&
		    c->ahead_unread == before)
			c->ahead_unread = 0;
	}
	return !c->ahead_stop;
}

static void *ahead_main(void *arg)
{
	struct cache *c = arg;

	pthread_setname_np(pthread_self(), "hintfs-check");
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct cache_ent *e;
		uint64_t id;

		while (!c->ahead_stop && !c->ahead_n)
			pthread_cond_wait(&c->ahead_cv, &c->lock);
		if (!ahead_pace_locked(c))
			break;
		id = c->ahead_q[c->ahead_head];
		c->ahead_head = (c->ahead_head + 1) % CACHE_AHEAD_QUEUE;
		c->ahead_n--;
		if ((e = tab_by_id(&c->tab, id)))
			e->ahead = false;
		cache_assert(cache_ok(c));
		pthread_mutex_unlock(&c->lock);
		ahead_check(c, id);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Under c->lock: queues @e's check, starting the thread the first time.
 * Nothing happens when the queue is full or the thread cannot start: the
 * entry's first read checks it, as it would have anyway. */
static void ahead_queue_locked(struct cache *c, struct cache_ent *e)
{
	if (e->verified || e->verifying || e->ahead || c->ahead_stop ||
	    c->ahead_n == CACHE_AHEAD_QUEUE || e->size < CACHE_AHEAD_MIN)
		return;
	if (!c->ahead_started) {
		if (proc_thread_create(&c->ahead_thread, NULL, ahead_main, c))
			return;
		c->ahead_started = true;
	}
	c->ahead_q[(c->ahead_head + c->ahead_n) % CACHE_AHEAD_QUEUE] = e->id;
	c->ahead_n++;
	e->ahead = true;
	cache_assert(cache_ok(c));
	pthread_cond_signal(&c->ahead_cv);
}

/* Stops the checker thread: the check it is in ends first (a read of one
 * blob); those still queued are left to their first reads. */
void cache_ahead_stop(struct cache *c)
{
	bool started;

	pthread_mutex_lock(&c->lock);
	c->ahead_stop = true;
	started = c->ahead_started;
	pthread_cond_signal(&c->ahead_cv);
	pthread_mutex_unlock(&c->lock);
	if (started)
		pthread_join(c->ahead_thread, NULL);
}

static bool contains(struct cache *c, const char *key, size_t key_len,
		     const char *etag, uint64_t size, bool ahead)
{
	struct cache_ent *e;
	bool found;

	if (!etag || !cache_valid_name(key, key_len, etag))
		return false;
	pthread_mutex_lock(&c->lock);
	e = tab_find(&c->tab, key, key_len, etag, strlen(etag));
	found = e && e->size == size;
	if (found && ahead)
		ahead_queue_locked(c, e);
	pthread_mutex_unlock(&c->lock);
	return found;
}

bool cache_contains(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size)
{
	return contains(c, key, key_len, etag, size, false);
}

bool cache_contains_ahead(struct cache *c, const char *key, size_t key_len,
			  const char *etag, uint64_t size)
{
	return contains(c, key, key_len, etag, size, true);
}

bool cache_can_take(struct cache *c, size_t key_len, size_t etag_len,
		    uint64_t size)
{
	uint64_t cap;

	if (!key_len || key_len > CACHE_KEY_MAX || etag_len > CACHE_ETAG_MAX)
		return false;
	pthread_mutex_lock(&c->lock);
	cap = c->capacity;
	pthread_mutex_unlock(&c->lock);
	return size <= cap;
}

ssize_t cache_read(struct cache *c, const struct cache_obj *o, void *buf,
		   size_t len, uint64_t off)
{
	struct cache_pin p;
	size_t n;
	int ret;

	ret = pin_get(c, o->id, &p, NULL, NULL);
	if (ret)
		return -ENODATA;
	n = off >= p.size ? 0 : (p.size - off < len ? p.size - off : len);
	ret = n ? cache_fault_hit(&c->fault_read) : 0;
	if (!ret && n)
		ret = pin_read(c, &p, buf, n, off, !p.verified);
	if (!pin_put(c, &p, !ret && n))
		return -ENODATA; /* dropped under us: the copy may be wrong */
	return ret ? read_failed(c, p.id, ret) : (ssize_t)n;
}

/* A reference handed out of inline data, inside LMDB's read transaction. */
struct inline_ref {
	const struct cache_pin *p;
	size_t len;
	uint64_t off;
	cache_ref_cb cb;
	void *arg;
	ssize_t ret; /* cb's result; the transaction's is separate */
};

static int inline_ref_cb(void *arg, const void *data, size_t len)
{
	struct inline_ref *ir = arg;
	struct cache_ref ref = {
	    .mem = (const char *)data + ir->off,
	    .fd = -1,
	    .len = ir->len,
	};

	/* Verified already (below), and the snapshot cannot change while
	 * the transaction lives: only the length is worth a glance. */
	if (len != ir->p->size)
		return -EBADMSG;
	ir->ret = ir->cb(ir->arg, &ref);
	return 0;
}

ssize_t cache_read_ref(struct cache *c, const char *key, size_t key_len,
		       const char *etag, uint64_t size, size_t len,
		       uint64_t off, cache_ref_cb cb, void *arg)
{
	struct cache_pin p;
	struct cache_ent *e;
	ssize_t ret = 0;
	size_t n;
	int rc = 0;

	if (!etag || !cache_valid_name(key, key_len, etag))
		return -ENODATA;
	/* Before the lookup: an entry found in the table is not punched
	 * until this reference is given back. */
	pthread_rwlock_rdlock(&c->punch_lock);
	pthread_mutex_lock(&c->lock);
	e = tab_find(&c->tab, key, key_len, etag, strlen(etag));
	/* Another size than the listing's: left to cache_lookup() in the
	 * caller's fallback, which drops it. */
	if (e && e->size != size)
		e = NULL;
	if (e) {
		e->tick = ++c->tick;
		c->hits++;
		pin_fill_locked(c, e, &p);
	}
	pthread_mutex_unlock(&c->lock);
	if (!e) {
		pthread_rwlock_unlock(&c->punch_lock);
		return -ENODATA;
	}
	pin_open(c, &p);
	n = off >= p.size ? 0 : (p.size - off < len ? p.size - off : len);
	rc = n ? cache_fault_hit(&c->fault_read) : 0;
	if (!rc && p.file && p.fd < 0)
		rc = p.open_err;
	/* The first read in a session hashes the whole blob first. */
	if (!rc)
		rc = pin_verify(c, &p, false);
	if (!rc && pin_inline(&p)) {
		struct inline_ref ir = {&p, n, off, cb, arg, 0};

		rc = idx_read_inline(c->ix, p.k, p.k_len, inline_ref_cb, &ir);
		ret = ir.ret;
	} else if (!rc) {
		struct cache_ref ref = {
		    .fd = p.fd,
		    .fd_off = p.off + off,
		    .len = n,
		};

		ret = cb(arg, &ref);
	}
	pthread_rwlock_unlock(&c->punch_lock);
	/* Dropped under us (an own file unlinked before its open): a miss,
	 * not a missing blob. */
	if (!pin_put(c, &p, false) && rc)
		return -ENODATA;
	return rc ? read_failed(c, p.id, rc) : ret;
}

/*
 * cache_open_file(), and with @hold a hold on the file until
 * cache_release_file(): @spare is a record the caller allocated, used (and
 * then no longer the caller's) when the file has no hold yet.
 */
static int open_file(struct cache *c, const char *key, size_t key_len,
		     const char *etag, uint64_t size, uint64_t *hold,
		     struct cache_hold **spare)
{
	struct cache_pin p;
	struct cache_ent *e;
	int rc;

	if (!etag || !cache_valid_name(key, key_len, etag))
		return -ENODATA;
	pthread_mutex_lock(&c->lock);
	e = tab_find(&c->tab, key, key_len, etag, strlen(etag));
	/* Another size than the listing's: as in cache_read_ref(). */
	if (e && e->size != size)
		e = NULL;
	if (e && !e->file) {
		pthread_mutex_unlock(&c->lock);
		return -ENOTSUP;
	}
	if (e)
		pin_fill_locked(c, e, &p);
	pthread_mutex_unlock(&c->lock);
	if (!e)
		return -ENODATA;
	pin_open(c, &p);
	rc = p.fd < 0 ? p.open_err : cache_fault_hit(&c->fault_read);
	/* At every open, not only the first: the kernel will read the file
	 * to its end. */
	if (!rc)
		rc = pin_own_size(&p);
	if (!rc)
		rc = pin_verify(c, &p, false);
	if (!rc) {
		pthread_mutex_lock(&c->lock);
		e = tab_by_id(&c->tab, p.id);
		if (e) {
			e->tick = ++c->tick;
			c->hits++;
		}
		if (e && hold) {
			struct cache_hold *h = c->holds;

			while (h && h->id != e->id)
				h = h->next;
			if (!h) {
				h = *spare;
				*spare = NULL;
				*h = (struct cache_hold){.next = c->holds,
							 .id = e->id,
							 .size = e->size};
				c->holds = h;
				e->held = true;
			}
			h->n++;
			*hold = e->id;
		}
		cache_assert(cache_ok(c));
		pthread_mutex_unlock(&c->lock);
		/* Dropped since the lookup (evicted, or replaced by a new
		 * version): a miss, as a later caller would get. */
		if (e)
			return p.fd;
		close(p.fd);
		return -ENODATA;
	}
	if (!pin_put(c, &p, false))
		return -ENODATA;
	return (int)read_failed(c, p.id, rc);
}

int cache_open_file(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size)
{
	return open_file(c, key, key_len, etag, size, NULL, NULL);
}

int cache_open_file_held(struct cache *c, const char *key, size_t key_len,
			 const char *etag, uint64_t size, uint64_t *hold)
{
	/* Allocated outside the lock, freed if the file had a hold. */
	struct cache_hold *spare = malloc(sizeof(*spare));
	int fd;

	if (!spare)
		return -ENOMEM;
	fd = open_file(c, key, key_len, etag, size, hold, &spare);
	free(spare);
	return fd;
}

void cache_release_file(struct cache *c, uint64_t hold)
{
	struct cache_hold **pp, *h = NULL;
	struct cache_ent *e;

	pthread_mutex_lock(&c->lock);
	for (pp = &c->holds; *pp && (*pp)->id != hold; pp = &(*pp)->next)
		;
	if (*pp && !--(*pp)->n) {
		h = *pp;
		*pp = h->next;
		if (h->gone)
			c->held_bytes -= h->size;
		else if ((e = tab_by_id(&c->tab, h->id)))
			e->held = false;
	}
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	free(h);
}

/* ---- invalidate, clear, meta, stats, verify ---- */

int cache_invalidate(struct cache *c, const char *key, size_t key_len,
		     const char *etag)
{
	struct cache_ent *victims = NULL, *e;
	size_t etag_len = etag ? strlen(etag) : 0;
	int rc;

	if (!cache_valid_name(key, key_len, etag))
		return -ENODATA;
	pthread_mutex_lock(&c->wlock);
	pthread_mutex_lock(&c->lock);
	while ((e = etag ? tab_find(&c->tab, key, key_len, etag, etag_len)
			 : tab_first_version(&c->tab, key, key_len)))
		cache_unlink_locked(c, e, &victims);
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	if (!victims) {
		pthread_mutex_unlock(&c->wlock);
		return -ENODATA;
	}
	rc = idx_apply(c->ix, NULL, NULL, victims);
	pthread_mutex_unlock(&c->wlock);
	cache_finish_drop(c, victims, rc == 0);
	return rc;
}

int cache_clear(struct cache *c)
{
	struct cache_ent *victims = NULL;
	int rc;

	pthread_mutex_lock(&c->wlock);
	pthread_mutex_lock(&c->lock);
	for (uint32_t s = 0; s < c->tab.n_slots; s++)
		if (c->tab.slots[s])
			cache_unlink_locked(c, c->tab.slots[s], &victims);
	cache_assert(cache_ok(c) && !c->tab.n_ents && !c->used);
	pthread_mutex_unlock(&c->lock);
	rc = idx_clear(c->ix);
	pthread_mutex_unlock(&c->wlock);
	/* New objects go to a new segment, so every old one can go. */
	blob_seal_active(c);
	cache_finish_drop(c, victims, rc == 0);
	return rc;
}

int cache_meta_put(struct cache *c, const char *name, const void *blob,
		   size_t len)
{
	if (!name || (!blob && len))
		return -EINVAL;
	return idx_meta_put(c->ix, name, blob, len);
}

int cache_meta_get(struct cache *c, const char *name, void **out, size_t *len)
{
	if (!name)
		return -EINVAL;
	return idx_meta_get(c->ix, name, out, len);
}

int cache_meta_del(struct cache *c, const char *name)
{
	if (!name)
		return -EINVAL;
	return idx_meta_del(c->ix, name);
}

int cache_meta_read(struct cache *c, const char *name,
		    int (*fn)(void *arg, const void *blob, size_t len),
		    void *arg)
{
	if (!name || !fn)
		return -EINVAL;
	return idx_meta_read(c->ix, name, fn, arg);
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
	pthread_mutex_lock(&c->lock);
	out->objects = c->tab.n_ents;
	out->bytes = c->used;
	out->capacity = c->capacity;
	out->held_bytes = c->held_bytes;
	out->hits = c->hits;
	out->misses = c->misses;
	out->evictions = c->evictions;
	out->corrupt = c->corrupt;
	out->write_errors = c->write_errors;
	out->read_errors = c->read_errors;
	out->checked = c->checked;
	out->checked_ahead = c->checked_ahead;
	pthread_mutex_unlock(&c->lock);
}

int cache_verify(struct cache *c,
		 void (*cb)(void *arg, const char *key, size_t key_len,
			    bool ok),
		 void *arg)
{
	uint64_t *ids;
	size_t n = 0;
	int ret = 0;

	pthread_mutex_lock(&c->lock);
	ids = malloc((c->tab.n_ents + 1) * sizeof(*ids));
	for (uint32_t s = 0; ids && s < c->tab.n_slots; s++)
		if (c->tab.slots[s])
			ids[n++] = c->tab.slots[s]->id;
	pthread_mutex_unlock(&c->lock);
	if (!ids)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++) {
		struct cache_pin p;
		size_t key_len = 0;
		char *key = NULL;
		int rc;

		rc = pin_get(c, ids[i], &p, &key, &key_len);
		if (rc == -ENODATA)
			continue; /* dropped since the snapshot */
		if (rc) {
			ret = rc;
			break;
		}
		rc = pin_read(c, &p, NULL, 0, 0, true);
		if (!pin_put(c, &p, !rc)) {
			free(key);
			continue;
		}
		/* Out of memory or of fds (an object's own file is opened
		 * to be read) says nothing of the bytes: stop, drop nothing. */
		if (rc == -ENOMEM || rc == -EMFILE || rc == -ENFILE) {
			free(key);
			ret = rc;
			break;
		}
		/* An I/O error counts as bad too: the object is refetched. */
		if (rc)
			cache_drop(c, p.id,
				   rc == -EBADMSG ? "checksum mismatch"
						  : "unreadable",
				   true);
		if (cb)
			cb(arg, key, key_len, !rc);
		free(key);
	}
	free(ids);
	return ret;
}
