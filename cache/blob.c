/*
 * cache/blob.c - the files that hold objects' bytes, and the io_uring that
 * moves them.
 *
 * Owns the files DIR/seg-XXXXXXXX.dat (id in hex): creating them,
 * finding them at open, handing out extents, punching the extents of
 * dropped objects, unlinking empty ones; the files DIR/obj-XXXXXXXX.dat
 * (file_per_object), each holding exactly one object's bytes from offset
 * 0, created per put and unlinked when their object leaves; and one
 * io_uring per thread that does cache I/O (created on its first use, torn
 * down when the thread exits or when the last cache closes).
 *
 * The two kinds share one id space (c->next_seg_id). A segment keeps an
 * fd for its life, since it serves many objects (a few thousand in a 1 TB
 * cache). A per-object file keeps none: a cache of a million of them
 * would pass any fd limit, so it is opened by whoever reads it, for as
 * long as it reads (an open costs a few microseconds: measured by
 * tests/unit/bench_cache.c), and is found at open by its name alone,
 * without an open or a stat.
 *
 * Invariants:
 * - A segment only grows: extents are handed out at its tail and never
 *   reused, so a hole punched for a dropped object can never destroy the
 *   bytes of a newer one.
 * - A segment is unlinked and its fd closed only when it is sealed (no
 *   more extents will be handed out), holds no live bytes, and no reader
 *   holds a reference: an fd is never closed (and its number reused)
 *   under an I/O.
 * - blob_io() returns only after every request it submitted completed:
 *   the kernel never touches a buffer the caller has taken back.
 */
#include "cache/cache_internal.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 32 entries: a 1 MiB chunk each keeps 32 MiB moving at once, more than
 * an NVMe drive needs to reach full speed; most calls use one. */
#define BLOB_RING_DEPTH	 32
#define BLOB_CHUNK_BYTES (1u << 20)
#define BLOB_NAME_LEN	 sizeof("seg-00000000.dat")
#define BLOB_SEG_PREFIX	 "seg-"
#define BLOB_OWN_PREFIX	 "obj-"
/* Ids tried when a create finds its name taken (after the ids wrapped). */
#define BLOB_CREATE_TRIES 16

#define ALIGN_UP(x) (((x) + CACHE_ALIGN - 1) & ~(CACHE_ALIGN - 1))

/* One thread's ring. */
struct blob_ring {
	struct io_uring ring;	  /* used by its thread only */
	struct blob_ring *next;	  /* ring_list, under ring_lock */
	struct blob_ring **pprev; /* the pointer to this one, for unlinking */
	atomic_bool live;	  /* set up and in ring_list */
	bool failed;		  /* setup failed: this thread uses pread */
};

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static struct blob_ring *ring_list; /* every live ring */
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
static pthread_key_t ring_key; /* runs blob_ring_free at thread exit */
static bool ring_key_ok;
static __thread struct blob_ring *tls_ring;
static atomic_bool ring_warned;
static atomic_bool punch_warned;

/* Under ring_lock. */
static void blob_ring_exit_locked(struct blob_ring *r)
{
	*r->pprev = r->next;
	if (r->next)
		r->next->pprev = r->pprev;
	io_uring_queue_exit(&r->ring);
	atomic_store_explicit(&r->live, false, memory_order_release);
}

static void blob_ring_free(void *arg)
{
	struct blob_ring *r = arg;

	pthread_mutex_lock(&ring_lock);
	if (atomic_load(&r->live))
		blob_ring_exit_locked(r);
	pthread_mutex_unlock(&ring_lock);
	if (tls_ring == r)
		tls_ring = NULL;
	free(r);
}

/*
 * NOTE: a forked child shares the parent's rings (same kernel instance).
 * The child must never submit on them: it drops its mappings and makes
 * fresh rings on first use.
 */
static void blob_fork_prepare(void)
{
	pthread_mutex_lock(&ring_lock);
}

static void blob_fork_parent(void)
{
	pthread_mutex_unlock(&ring_lock);
}

static void blob_fork_child(void)
{
	while (ring_list)
		blob_ring_exit_locked(ring_list);
	pthread_mutex_unlock(&ring_lock);
}

static void blob_ring_once(void)
{
	ring_key_ok = pthread_key_create(&ring_key, blob_ring_free) == 0;
	pthread_atfork(blob_fork_prepare, blob_fork_parent, blob_fork_child);
}

static int blob_ring_setup(struct blob_ring *r)
{
	int ret = io_uring_queue_init(BLOB_RING_DEPTH, &r->ring, 0);

	if (ret < 0) {
		/* Containers often forbid io_uring; the cache still works. */
		r->failed = true;
		if (!atomic_exchange(&ring_warned, true))
			log_warn("cache: io_uring unavailable (%s), using "
				 "pread/pwrite",
				 strerror(-ret));
		return ret;
	}
	pthread_mutex_lock(&ring_lock);
	r->next = ring_list;
	r->pprev = &ring_list;
	if (ring_list)
		ring_list->pprev = &r->next;
	ring_list = r;
	atomic_store_explicit(&r->live, true, memory_order_release);
	pthread_mutex_unlock(&ring_lock);
	return 0;
}

/* The calling thread's ring, or NULL to fall back to pread/pwrite. */
static struct blob_ring *blob_ring_get(void)
{
	struct blob_ring *r = tls_ring;

	if (r && atomic_load_explicit(&r->live, memory_order_acquire))
		return r;
	if (r && r->failed)
		return NULL;
	pthread_once(&ring_once, blob_ring_once);
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return NULL;
		tls_ring = r;
		if (ring_key_ok)
			pthread_setspecific(ring_key, r);
	}
	return blob_ring_setup(r) ? NULL : r;
}

/* Called when the last cache closes: no cache I/O is in flight. */
void blob_rings_release(void)
{
	pthread_mutex_lock(&ring_lock);
	while (ring_list)
		blob_ring_exit_locked(ring_list);
	pthread_mutex_unlock(&ring_lock);
}

/* A part of a transfer: one SQE in flight at a time. */
struct blob_op {
	size_t pos; /* where in the caller's buffer */
	size_t len; /* bytes still to move */
};

static void blob_queue(struct io_uring *ring, struct blob_op *op, int fd,
		       char *buf, uint64_t off, bool write)
{
	/* Never NULL: at most BLOB_RING_DEPTH ops exist, one SQE each. */
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (write)
		io_uring_prep_write(sqe, fd, buf + op->pos, op->len,
				    off + op->pos);
	else
		io_uring_prep_read(sqe, fd, buf + op->pos, op->len,
				   off + op->pos);
	io_uring_sqe_set_data(sqe, op);
}

/*
 * The transfer as chunks, up to BLOB_RING_DEPTH in flight. A short
 * transfer is not an error: the rest of the chunk is queued again.
 */
static int blob_io_ring(struct blob_ring *r, int fd, char *buf, size_t len,
			uint64_t off, bool write)
{
	struct blob_op ops[BLOB_RING_DEPTH], *spare[BLOB_RING_DEPTH];
	unsigned n_spare = 0, queued = 0, inflight = 0;
	struct io_uring_cqe *cqe;
	bool broken = false;
	size_t next = 0;
	int err = 0, ret;

	for (unsigned i = 0; i < BLOB_RING_DEPTH; i++)
		spare[n_spare++] = &ops[i];
	for (;;) {
		struct blob_op *op;
		int res;

		while (!err && next < len && n_spare) {
			op = spare[--n_spare];
			op->pos = next;
			op->len = len - next < BLOB_CHUNK_BYTES
				      ? len - next
				      : BLOB_CHUNK_BYTES;
			next += op->len;
			blob_queue(&r->ring, op, fd, buf, off, write);
			queued++;
		}
		if (queued && !broken) {
			ret = io_uring_submit(&r->ring);
			if (ret > 0) {
				queued -= ret;
				inflight += ret;
			} else if (!inflight ||
				   (ret != -EINTR && ret != -EAGAIN &&
				    ret != -EBUSY)) {
				/* Nothing in flight will make room: give up,
				 * and reset the ring below so that what is
				 * queued is never submitted. */
				broken = true;
				if (!err)
					err = ret < 0 ? ret : -EIO;
			}
		}
		if (!inflight)
			break;
		ret = io_uring_wait_cqe(&r->ring, &cqe);
		if (ret == -EINTR)
			continue;
		if (ret < 0) {
			/* Cannot happen on a valid ring. */
			broken = true;
			err = err ? err : ret;
			break;
		}
		op = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&r->ring, cqe);
		inflight--;
		if (res > 0) {
			op->pos += (size_t)res;
			op->len -= (size_t)res;
		} else if (res == 0 && !err) {
			/* End of file inside an extent: the file was cut. */
			err = write ? -EIO : -ENODATA;
		} else if (res != -EINTR && res != -EAGAIN && !err) {
			err = res;
		}
		/* The rest of a short (or interrupted) part goes again. */
		if (op->len && !err) {
			blob_queue(&r->ring, op, fd, buf, off, write);
			queued++;
		} else {
			spare[n_spare++] = op;
		}
	}
	if (broken) {
		pthread_mutex_lock(&ring_lock);
		blob_ring_exit_locked(r);
		pthread_mutex_unlock(&ring_lock);
		blob_ring_setup(r);
	}
	return err;
}

static int blob_io_sync(int fd, char *buf, size_t len, uint64_t off, bool write)
{
	while (len) {
		ssize_t n = write ? pwrite(fd, buf, len, (off_t)off)
				  : pread(fd, buf, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return write ? -EIO : -ENODATA;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/*
 * Moves exactly @len bytes between @buf and @fd at @off. Returns 0 or
 * -errno; -ENODATA when a read meets the end of the file.
 */
int blob_io(int fd, void *buf, size_t len, uint64_t off, bool write)
{
	struct blob_ring *r;

	if (!len)
		return 0;
	/*
	 * One chunk is one request in flight either way, and the ring only
	 * adds to it: a buffered write to ext4 cannot complete without
	 * blocking, so io_uring hands it to an io-wq worker thread and
	 * wakes us when that is done. Measured on the cold path of 2,000
	 * objects of ~103 KB: a third of the daemon's CPU samples were in
	 * such workers. The ring pays when chunks can move side by side.
	 */
	if (len <= BLOB_CHUNK_BYTES)
		return blob_io_sync(fd, buf, len, off, write);
	r = blob_ring_get();
	if (!r)
		return blob_io_sync(fd, buf, len, off, write);
	return blob_io_ring(r, fd, buf, len, off, write);
}

static void blob_name(uint32_t id, char buf[BLOB_NAME_LEN])
{
	snprintf(buf, BLOB_NAME_LEN, BLOB_SEG_PREFIX "%08x.dat", id);
}

static void blob_own_name(uint32_t id, char buf[BLOB_NAME_LEN])
{
	snprintf(buf, BLOB_NAME_LEN, BLOB_OWN_PREFIX "%08x.dat", id);
}

/*
 * The id in @name when it is exactly @prefix, 8 lowercase hex digits and
 * ".dat" (as blob_name() writes it), else 0. By hand, not sscanf: the
 * scan at open reads a million names.
 */
static uint32_t blob_parse_name(const char *name, const char *prefix)
{
	uint32_t id = 0;

	if (strncmp(name, prefix, 4) != 0)
		return 0;
	for (int i = 4; i < 12; i++) {
		char ch = name[i];

		if (ch >= '0' && ch <= '9')
			id = id << 4 | (uint32_t)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			id = id << 4 | (uint32_t)(ch - 'a' + 10);
		else
			return 0;
	}
	return strcmp(name + 12, ".dat") == 0 ? id : 0;
}

static int blob_cmp_id(const void *a, const void *b)
{
	const struct blob_seg *x = *(struct blob_seg *const *)a;
	const struct blob_seg *y = *(struct blob_seg *const *)b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int blob_cmp_own(const void *a, const void *b)
{
	uint32_t x = (uint32_t) * (const uint64_t *)a;
	uint32_t y = (uint32_t) * (const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Notes a per-object file found by the scan. 0 or -ENOMEM. */
static int blob_found_own(struct blob_found *f, size_t *cap, uint32_t id)
{
	if (f->n_own == *cap) {
		size_t n = *cap ? *cap * 2 : 1024;
		void *p = realloc(f->own, n * sizeof(*f->own));

		if (!p)
			return -ENOMEM;
		f->own = p;
		*cap = n;
	}
	f->own[f->n_own++] = id;
	return 0;
}

/*
 * Opens every segment file of the directory and lists its per-object
 * files (at cache_open, one thread). Segments are all sealed: a new
 * session appends to a new one. Fills @f (sorted by id; free with
 * blob_found_fini()) for blob_find() and blob_own_find().
 */
int blob_scan(struct cache *c, struct blob_found *f)
{
	struct blob_seg **arr = NULL;
	size_t n = 0, cap = 0, cap_own = 0;
	struct dirent *d;
	uint32_t max_id = 0;
	int dfd, ret = 0;
	DIR *dir;

	memset(f, 0, sizeof(*f));

	dfd = dup(c->dir_fd);
	if (dfd < 0)
		return -errno;
	dir = fdopendir(dfd);
	if (!dir) {
		close(dfd);
		return -errno;
	}
	while ((d = readdir(dir))) {
		uint32_t id = blob_parse_name(d->d_name, BLOB_SEG_PREFIX);
		uint32_t own = blob_parse_name(d->d_name, BLOB_OWN_PREFIX);
		struct blob_seg *s;
		struct stat st;
		int fd;

		if (own > max_id)
			max_id = own;
		if (own) {
			/* Neither opened nor stat'ed: a file cut short is
			 * caught by its first read (checksum, size). */
			ret = blob_found_own(f, &cap_own, own);
			if (ret)
				break;
			continue;
		}
		if (!id)
			continue;
		if (id > max_id)
			max_id = id;
		fd = openat(c->dir_fd, d->d_name,
			    O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
			/* Not the file's fault: do not drop its objects. */
			ret = -errno;
			break;
		}
		if (fd < 0 || fstat(fd, &st) < 0) {
			/* Its objects will be dropped as missing. */
			log_warn("cache: cannot open %s/%s: %s", c->dir,
				 d->d_name, strerror(errno));
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (n == cap) {
			void *p;

			cap = cap ? cap * 2 : 64;
			p = realloc(arr, cap * sizeof(*arr));
			if (!p) {
				close(fd);
				ret = -ENOMEM;
				break;
			}
			arr = p;
		}
		s = calloc(1, sizeof(*s));
		if (!s) {
			close(fd);
			ret = -ENOMEM;
			break;
		}
		s->id = id;
		s->fd = fd;
		s->file_bytes = (uint64_t)st.st_size;
		s->sealed = true;
		s->next = c->segs;
		c->segs = s;
		arr[n++] = s;
	}
	closedir(dir);
	c->next_seg_id = max_id + 1;
	f->segs = arr;
	f->n_segs = n;
	if (ret) {
		blob_found_fini(f);
		return ret;
	}
	if (n)
		qsort(arr, n, sizeof(*arr), blob_cmp_id);
	if (f->n_own)
		qsort(f->own, f->n_own, sizeof(*f->own), blob_cmp_own);
	return 0;
}

/* Frees the lists of @f (the segments stay in c->segs). */
void blob_found_fini(struct blob_found *f)
{
	free(f->segs);
	free(f->own);
	memset(f, 0, sizeof(*f));
}

struct blob_seg *blob_find(const struct blob_found *f, uint32_t id)
{
	size_t lo = 0, hi = f->n_segs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (f->segs[mid]->id == id)
			return f->segs[mid];
		if (f->segs[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The scan's word for per-object file @id (to mark BLOB_OWN_USED), or
 * NULL when there is no such file. */
uint64_t *blob_own_find(const struct blob_found *f, uint32_t id)
{
	size_t lo = 0, hi = f->n_own;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t got = (uint32_t)f->own[mid];

		if (got == id)
			return &f->own[mid];
		if (got < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * At open, after loading the index: removes the per-object files no
 * record refers to (a put killed before its commit, or records dropped).
 */
void blob_own_reap(struct cache *c, const struct blob_found *f)
{
	size_t n = 0;

	for (size_t i = 0; i < f->n_own; i++) {
		if (f->own[i] & BLOB_OWN_USED)
			continue;
		blob_own_unlink(c, (uint32_t)f->own[i]);
		n++;
	}
	if (n)
		log_info("cache: %s: removed %zu object files no index "
			 "record refers to",
			 c->dir, n);
}

/*
 * Creates a new per-object file, empty, and returns its fd (open for
 * writing) with its id in *@id; -errno (-EIO: no free name found).
 */
int blob_own_create(struct cache *c, uint32_t *id)
{
	char name[BLOB_NAME_LEN];

	/* EEXIST: ids wrapped onto a file still in use; take the next. */
	for (int tries = 0; tries < BLOB_CREATE_TRIES; tries++) {
		int fd;

		pthread_mutex_lock(&c->seg_lock);
		if (!c->next_seg_id)
			c->next_seg_id = 1;
		*id = c->next_seg_id++;
		pthread_mutex_unlock(&c->seg_lock);
		blob_own_name(*id, name);
		fd = openat(c->dir_fd, name,
			    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0) {
			atomic_store(&c->own_fresh, true);
			return fd;
		}
		if (errno != EEXIST)
			return -errno;
	}
	return -EIO;
}

/*
 * Opens per-object file @id for reading: an fd the caller closes, or
 * -errno (-ENODATA: the file is gone).
 */
int blob_own_open(struct cache *c, uint32_t id)
{
	char name[BLOB_NAME_LEN];
	int fd;

	blob_own_name(id, name);
	fd = openat(c->dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	return errno == ENOENT ? -ENODATA : -errno;
}

/* Unlinks per-object file @id; an fd open on it still reads its bytes. */
void blob_own_unlink(struct cache *c, uint32_t id)
{
	char name[BLOB_NAME_LEN];

	blob_own_name(id, name);
	if (unlinkat(c->dir_fd, name, 0) < 0 && errno != ENOENT)
		log_warn("cache: cannot remove %s/%s: %s", c->dir, name,
			 strerror(errno));
}

/* Under c->lock: takes an empty, sealed, unused @s out of c->segs. */
static bool blob_seg_take_if_dead(struct cache *c, struct blob_seg *s)
{
	struct blob_seg **pp;

	if (s->refs || !s->sealed || s->live_bytes)
		return false;
	for (pp = &c->segs; *pp != s; pp = &(*pp)->next)
		;
	*pp = s->next;
	s->next = NULL;
	return true;
}

/*
 * Under c->lock: drops a reference. True when @s is now dead: the caller
 * must blob_seg_destroy() it after unlocking.
 */
bool blob_seg_unref_locked(struct cache *c, struct blob_seg *s)
{
	s->refs--;
	return blob_seg_take_if_dead(c, s);
}

/* Unlinks and frees a segment taken out of c->segs. No lock needed. */
void blob_seg_destroy(struct cache *c, struct blob_seg *s)
{
	char name[BLOB_NAME_LEN];

	blob_name(s->id, name);
	if (unlinkat(c->dir_fd, name, 0) < 0 && errno != ENOENT)
		log_warn("cache: cannot remove %s/%s: %s", c->dir, name,
			 strerror(errno));
	close(s->fd);
	free(s);
}

/* Seals @s (no more extents); destroys it if it is already empty. */
static void blob_seal(struct cache *c, struct blob_seg *s)
{
	bool dead;

	pthread_mutex_lock(&c->lock);
	s->sealed = true;
	dead = blob_seg_take_if_dead(c, s);
	pthread_mutex_unlock(&c->lock);
	if (dead)
		blob_seg_destroy(c, s);
}

/* Under seg_lock: a new, empty, unsealed segment file, linked in. */
static int blob_seg_create(struct cache *c, struct blob_seg **out)
{
	char name[BLOB_NAME_LEN];
	struct blob_seg *s;
	int fd = -1;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* EEXIST: a file appeared that the scan did not see; skip its id. */
	for (int tries = 0; fd < 0 && tries < BLOB_CREATE_TRIES; tries++) {
		if (!c->next_seg_id)
			c->next_seg_id = 1;
		s->id = c->next_seg_id++;
		blob_name(s->id, name);
		fd = openat(c->dir_fd, name,
			    O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 && errno != EEXIST)
			break;
	}
	if (fd < 0) {
		int ret = errno == EEXIST ? -EIO : -errno;

		free(s);
		return ret;
	}
	s->fd = fd;
	s->fresh = true;
	pthread_mutex_lock(&c->lock);
	s->next = c->segs;
	c->segs = s;
	pthread_mutex_unlock(&c->lock);
	*out = s;
	return 0;
}

/*
 * Hands out an extent of @size bytes: at the tail of the active segment,
 * in a new one when it is full, or in a segment of its own when @size is
 * more than a segment. The extent counts as live until it is committed
 * and dropped, or aborted. 0 or -errno (-ENOSPC: no room for a file).
 */
int blob_reserve(struct cache *c, uint64_t size, struct blob_seg **seg,
		 uint64_t *off)
{
	struct blob_seg *s, *old = NULL;
	bool own = size > CACHE_SEG_BYTES;
	int ret = 0;

	pthread_mutex_lock(&c->seg_lock);
	s = c->active;
	if (own || !s || s->tail + size > CACHE_SEG_BYTES) {
		ret = blob_seg_create(c, &s);
		if (ret)
			goto out;
		if (!own) {
			old = c->active;
			c->active = s;
		}
	}
	*off = s->tail;
	s->tail = ALIGN_UP(s->tail + size);
	pthread_mutex_lock(&c->lock);
	s->live_bytes += size;
	if (own)
		s->sealed = true;
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	*seg = s;
out:
	pthread_mutex_unlock(&c->seg_lock);
	if (old)
		blob_seal(c, old);
	return ret;
}

/* Retires the active segment (cache_clear): new extents go to a new one. */
void blob_seal_active(struct cache *c)
{
	struct blob_seg *old;

	pthread_mutex_lock(&c->seg_lock);
	old = c->active;
	c->active = NULL;
	pthread_mutex_unlock(&c->seg_lock);
	if (old)
		blob_seal(c, old);
}

/*
 * Gives the blocks of a dropped extent back to the filesystem. A failure
 * only costs space until the segment is unlinked, so it is logged once.
 */
void blob_punch(struct blob_seg *s, uint64_t off, uint64_t size)
{
	if (!size)
		return;
	if (fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)ALIGN_UP(size)) == 0)
		return;
	if (!atomic_exchange(&punch_warned, true))
		log_warn("cache: cannot punch holes in segment files (%s); "
			 "space comes back when a segment empties",
			 strerror(errno));
}

/* At open, after loading the index: removes segments nothing refers to. */
void blob_reap(struct cache *c)
{
	struct blob_seg *s, *next, *dead = NULL;

	pthread_mutex_lock(&c->lock);
	for (s = c->segs; s; s = next) {
		next = s->next;
		if (blob_seg_take_if_dead(c, s)) {
			s->next = dead;
			dead = s;
		}
	}
	pthread_mutex_unlock(&c->lock);
	for (; dead; dead = next) {
		next = dead->next;
		blob_seg_destroy(c, dead);
	}
}

/*
 * At close: segments and per-object files written this session reach the
 * disk before the index is synced, so a clean shutdown keeps every object
 * through a power loss. Then closes and frees the segments (files stay).
 */
void blob_close_all(struct cache *c)
{
	struct blob_seg *s, *next;

	/* One syncfs for however many per-object files, not an fdatasync
	 * (and an open) each: the files hold no fd to sync by. */
	if (atomic_exchange(&c->own_fresh, false) && c->dir_fd >= 0 &&
	    syncfs(c->dir_fd) < 0)
		log_warn("cache: syncfs %s: %s", c->dir, strerror(errno));
	for (s = c->segs; s; s = s->next)
		if (s->fresh && fdatasync(s->fd) < 0)
			log_warn("cache: fdatasync segment %08x: %s", s->id,
				 strerror(errno));
	for (s = c->segs; s; s = next) {
		next = s->next;
		close(s->fd);
		free(s);
	}
	c->segs = NULL;
	c->active = NULL;
}
