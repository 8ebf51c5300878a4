/*
 * fs/store.c - the kernel's page cache filled ahead of opens (-o
 * store_ahead=BYTES).
 *
 * A warm read costs the daemon a FUSE round trip: the request, the lookup
 * in the cache, the reply. When the hint says which files come next and
 * they are in the local cache already, their bytes can be in the kernel's
 * page cache before the reader opens them (fuse_lowlevel_notify_store),
 * so the read never reaches the daemon. The kernel keeps the pages across
 * opens (keep_cache), and takes a store only for an inode it holds: so
 * this file counts the lookups the kernel holds (lookup, readdirplus,
 * forget) and pushes only to inodes it knows.
 *
 * NOTE(fuse): a store waits on the page lock of every page it fills, and a
 * page being read is locked until the daemon answers the READ. A store
 * that met a read could wait on a worker, and at shutdown, when the
 * workers are gone, forever (seen: a daemon stuck in D state). So a file
 * is pushed only while nobody has it open, and an open waits for a push
 * of its file to end: reads need an open file, and the kernel releases a
 * file only after its last read (readahead included) has been answered.
 *
 * Invariants: only bytes that a read would serve are pushed (they come
 * through cache_read_ref(), which verifies a blob before its first use), and
 * the bytes pushed for entries nobody has opened yet stay under the
 * budget: the thread walks the hint from the oldest unread entry and stops
 * at the budget, counting what it pushed earlier.
 *
 * This is the FUSE side (like fs_ops.c): the fs core knows nothing of it.
 */
#include "fs/fs_internal.h"
#include "fs/fs_ops.h"
#include "fs/store.h"
#include "common/log.h"
#include "common/proc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The hint is looked at 100 times a second while there is something to
 * push (a reader at 2,000 files/s moves 20 files between two looks, far
 * inside any useful budget), backing off to 6 times a second while there
 * is not (inodes the kernel does not hold, files not fetched yet). */
#define STORE_TICK_MS 10
#define STORE_IDLE_MS 160
/* Entries looked at per tick, at most: a walk costs a lookup each, and a
 * window of 4,096 entries walked 100 times a second would cost more than
 * the pushes it finds. */
#define STORE_SCAN_MAX 1024
/* Files not in the cache met per tick before it stops: as many as the
 * engine fetches at once by default, which complete out of order. */
#define STORE_UNCACHED_MAX 64
/* Objects above 8 MiB are left to the reader: one of them would take the
 * whole default budget, and a large file's reads are few anyway. */
#define STORE_OBJECT_MAX (8ull << 20)
/* Ids asked of the engine at once. */
#define STORE_BATCH 256
/* In use[]: the file is being pushed (the rest of the word counts opens). */
#define STORE_PUSHING (1u << 31)

struct fs_store {
	struct fs *fs;
	struct fuse_session *se;
	uint64_t budget;	   /* bytes pushed ahead of the readers */
	uint32_t n;		   /* inodes 1 .. n are counted */
	_Atomic uint64_t *nlookup; /* the kernel's lookup count per inode */
	_Atomic uint8_t *pushed;   /* pushed since the kernel learned it */
	_Atomic uint32_t *use;	   /* opens, | STORE_PUSHING while pushed */
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;	  /* wakes the thread to stop */
	pthread_cond_t pushed_cv; /* a push ended: opens waiting go on */
	bool stop;
	_Atomic uint64_t objects, bytes; /* pushed, for stats */
	_Atomic uint64_t failed;	 /* stores the kernel refused */
};

/* The inode's slot, or -1 when it is not one counted. */
static int64_t slot(const struct fs_store *s, uint64_t ino)
{
	return ino >= 1 && ino <= s->n ? (int64_t)(ino - 1) : -1;
}

/* The store and the slot of @ino in *@i, or NULL when there is no store
 * or the inode is not one it counts. */
static struct fs_store *store_of(struct fs *fs, uint64_t ino, int64_t *i)
{
	struct fs_store *s = atomic_load(&fs->store);

	*i = s ? slot(s, ino) : -1;
	return *i < 0 ? NULL : s;
}

void fs_store_note_lookup(struct fs *fs, uint64_t ino, uint64_t n)
{
	int64_t i;
	struct fs_store *s = store_of(fs, ino, &i);

	if (s)
		atomic_fetch_add(&s->nlookup[i], n);
}

void fs_store_note_forget(struct fs *fs, uint64_t ino, uint64_t n)
{
	int64_t i;
	struct fs_store *s = store_of(fs, ino, &i);
	uint64_t old;

	if (!s)
		return;
	old = atomic_load(&s->nlookup[i]);
	do {
		/* A lookup counted before the store started is not ours. */
		if (!old)
			return;
	} while (!atomic_compare_exchange_weak(&s->nlookup[i], &old,
					       old > n ? old - n : 0));
	/* The inode is gone, and its pages with it: push again next time. */
	if (old <= n)
		atomic_store(&s->pushed[i], 0);
}

void fs_store_note_open(struct fs *fs, uint64_t ino)
{
	int64_t i;
	struct fs_store *s = store_of(fs, ino, &i);
	uint32_t old;

	if (!s)
		return;
	old = atomic_load(&s->use[i]);
	for (;;) {
		if (old & STORE_PUSHING) {
			/* A push of this file is under way: a few tens of
			 * microseconds, that depend on no FUSE worker. */
			pthread_mutex_lock(&s->mu);
			while (atomic_load(&s->use[i]) & STORE_PUSHING)
				pthread_cond_wait(&s->pushed_cv, &s->mu);
			pthread_mutex_unlock(&s->mu);
			old = atomic_load(&s->use[i]);
		} else if (atomic_compare_exchange_weak(&s->use[i], &old,
							old + 1)) {
			return;
		}
	}
}

void fs_store_note_close(struct fs *fs, uint64_t ino)
{
	int64_t i;
	struct fs_store *s = store_of(fs, ino, &i);
	uint32_t old;

	if (!s)
		return;
	old = atomic_load(&s->use[i]);
	/* An open counted before the store started is not ours. */
	while ((old & ~STORE_PUSHING) &&
	       !atomic_compare_exchange_weak(&s->use[i], &old, old - 1))
		;
}

struct push {
	struct fs_store *s;
	uint64_t ino;
	int rc;
};

/* Hands the cached bytes (by reference: spliced or from the map) to the
 * kernel's page cache of the inode. */
static ssize_t push_cb(void *arg, const struct cache_ref *ref)
{
	struct push *p = arg;
	struct fuse_bufvec bv;

	fs_ref_bufvec(ref, &bv);
	p->rc = fuse_lowlevel_notify_store(p->s->se, p->ino, 0, &bv, 0);
	return (ssize_t)ref->len;
}

/* One look: pushes what the budget allows. Returns whether there is work
 * at this pace: something pushed, or the budget full (readers free it). */
static bool store_tick(struct fs_store *s)
{
	struct pf *pf = atomic_load(&s->fs->pf);
	uint32_t ids[STORE_BATCH];
	uint64_t ahead = 0;
	size_t skip = 0, n;
	unsigned pushed = 0, uncached = 0;
	bool more = true;

	if (!pf)
		return false;
	while (more && ahead < s->budget && skip < STORE_SCAN_MAX &&
	       (n = pf_hint_ahead(pf, &skip, ids, STORE_BATCH)) > 0) {
		for (size_t k = 0; k < n && more && ahead < s->budget; k++) {
			uint64_t ino = (uint64_t)ids[k] + 1;
			int64_t i = slot(s, ino);
			struct push p = {s, ino, 0};
			struct stat st;
			ssize_t got;

			if (i < 0 || fs_getattr(s->fs, ino, &st) ||
			    !S_ISREG(st.st_mode) || !st.st_size ||
			    (uint64_t)st.st_size > STORE_OBJECT_MAX)
				continue;
			if (atomic_load(&s->pushed[i])) {
				ahead += (uint64_t)st.st_size;
				continue;
			}
			if (!atomic_load(&s->nlookup[i]))
				continue;
			/* Only a file nobody has open (see the top). */
			if (!atomic_compare_exchange_strong(
				&s->use[i], &(uint32_t){0}, STORE_PUSHING))
				continue;
			got = fs_cached_ref(s->fs, ino, push_cb, &p);
			atomic_fetch_and(&s->use[i], ~STORE_PUSHING);
			pthread_mutex_lock(&s->mu);
			pthread_cond_broadcast(&s->pushed_cv);
			pthread_mutex_unlock(&s->mu);
			/* Not cached (yet): the engine fetches in hint order,
			 * so after a few of these what follows is not either;
			 * look again next tick. */
			if (got < 0) {
				more = ++uncached < STORE_UNCACHED_MAX;
				continue;
			}
			if (p.rc) {
				/* -ENOENT: the kernel does not hold the inode
				 * (forgotten just now, or a readdirplus reply
				 * that never arrived was counted): forget it
				 * until it is looked up again. */
				atomic_fetch_add(&s->failed, 1);
				if (p.rc == -ENOENT)
					atomic_store(&s->nlookup[i], 0);
				continue;
			}
			atomic_store(&s->pushed[i], 1);
			atomic_fetch_add(&s->objects, 1);
			atomic_fetch_add(&s->bytes, (uint64_t)got);
			ahead += (uint64_t)st.st_size;
			pushed++;
		}
	}
	return pushed || ahead >= s->budget;
}

static void *store_main(void *arg)
{
	struct fs_store *s = arg;

	pthread_setname_np(pthread_self(), "hintfs-store");
	long tick_ms = STORE_TICK_MS;

	pthread_mutex_lock(&s->mu);
	while (!s->stop) {
		struct timespec until;

		pthread_mutex_unlock(&s->mu);
		if (store_tick(s))
			tick_ms = STORE_TICK_MS;
		else if (tick_ms < STORE_IDLE_MS)
			tick_ms *= 2;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += tick_ms * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_mutex_lock(&s->mu);
		if (!s->stop)
			pthread_cond_timedwait(&s->cv, &s->mu, &until);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int fs_store_start(struct fs *fs, struct fuse_session *se, uint64_t budget)
{
	uint32_t n_inodes = tree_count(fs->tree);
	struct fs_store *s;
	int rc;

	if (!budget)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->fs = fs;
	s->se = se;
	s->budget = budget;
	s->n = n_inodes;
	s->nlookup = calloc(n_inodes ? n_inodes : 1, sizeof(*s->nlookup));
	s->pushed = calloc(n_inodes ? n_inodes : 1, sizeof(*s->pushed));
	s->use = calloc(n_inodes ? n_inodes : 1, sizeof(*s->use));
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	pthread_cond_init(&s->pushed_cv, NULL);
	rc = s->nlookup && s->pushed && s->use ? 0 : -ENOMEM;
	if (!rc)
		rc = -proc_thread_create(&s->thread, NULL, store_main, s);
	if (rc) {
		pthread_cond_destroy(&s->pushed_cv);
		pthread_cond_destroy(&s->cv);
		pthread_mutex_destroy(&s->mu);
		free(s->nlookup);
		free(s->pushed);
		free(s->use);
		free(s);
		return rc;
	}
	atomic_store(&fs->store, s);
	return 0;
}

void fs_store_stop(struct fs *fs)
{
	struct fs_store *s = atomic_exchange(&fs->store, NULL);

	if (!s)
		return;
	pthread_mutex_lock(&s->mu);
	s->stop = true;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	pthread_cond_destroy(&s->pushed_cv);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s->nlookup);
	free(s->pushed);
	free(s->use);
	free(s);
}

void fs_store_stats(struct fs *fs, uint64_t *objects, uint64_t *bytes,
		    uint64_t *failed)
{
	struct fs_store *s = atomic_load(&fs->store);

	*objects = s ? atomic_load(&s->objects) : 0;
	*bytes = s ? atomic_load(&s->bytes) : 0;
	*failed = s ? atomic_load(&s->failed) : 0;
}
