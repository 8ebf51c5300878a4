/*
 * fs/passthrough.c - FUSE passthrough of cached objects (-o passthrough).
 *
 * Owns the backing files registered with the kernel, per inode: the count
 * of live opens and the mode they share, and the backing id while that
 * mode is passthrough. A cached object stored in a file of its own (the
 * cache's file_per_object layout: its bytes at offsets 0..size, nothing
 * after) is handed to the kernel at OPEN; the kernel then reads that file
 * itself, with no READ, no copy through the daemon and one page-cache copy
 * (the cache file's). Objects not cached yet, or stored inline, are read
 * through READs as with -o open_per_file.
 *
 * NOTE(fuse): the kernel keeps one I/O mode per inode (fs/fuse/iomode.c,
 * fuse_file_io_open()): while a file of the inode is open for cached I/O
 * an open answered FOPEN_PASSTHROUGH fails in the opener with EIO, the
 * reverse too, and every passthrough open of the inode must name the
 * same backing file. So the first open of an inode picks the mode, the
 * later ones follow it until the last release, and the backing id lives
 * from the first passthrough open to the last release: closing it right
 * after the reply would race the opener, which looks the id up after our
 * reply is written. The kernel ends its own mode before it sends RELEASE,
 * so a RELEASE that brings the count to 0 leaves the inode free.
 *
 * NOTE(fuse): FUSE_DEV_IOC_BACKING_OPEN needs CAP_SYS_ADMIN, and a cache
 * on a file system that is not stacked (overlayfs is: ELOOP). Such a
 * refusal is logged once and ends passthrough for the mount (the data path
 * is then "open per file"); another is counted, and that open reads
 * through the daemon.
 */
#include "fs/passthrough.h"
#include "fs/fs_internal.h"
#include "common/log.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HINTFS_HAVE_PASSTHROUGH

#include <fuse_kernel.h>
#include <fuse_lowlevel.h>
#include <sys/ioctl.h>

/* Opens of different inodes rarely meet: a lock is held for two counter
 * updates and at most one ioctl (a few microseconds), and 64 of them keep
 * the FUSE workers (max_threads, 64 by default) apart without a lock per
 * inode. */
#define PT_LOCKS 64

struct pt_node {
	_Atomic int32_t opens; /* > 0: passthrough opens; < 0: READ opens;
				  changed under the inode's lock */
	int32_t backing;       /* the backing id while opens > 0 */
	uint64_t hold;	       /* its cache file's hold, released with the
				  id: until then the file's blocks count
				  in the cache's capacity */
};

struct fs_pt {
	uint32_t files;
	struct pt_node *nodes; /* by inode - 1 */
	pthread_mutex_t locks[PT_LOCKS];
	_Atomic uint64_t opens, read_opens, failures;
	atomic_bool refused; /* the kernel refuses every backing file */
};

struct fs_pt *fs_pt_create(uint32_t files)
{
	struct fs_pt *pt = calloc(1, sizeof(*pt));

	if (!pt)
		return NULL;
	pt->files = files;
	pt->nodes = calloc(files ? files : 1, sizeof(*pt->nodes));
	if (!pt->nodes) {
		free(pt);
		return NULL;
	}
	for (int i = 0; i < PT_LOCKS; i++)
		pthread_mutex_init(&pt->locks[i], NULL);
	return pt;
}

void fs_pt_destroy(struct fs_pt *pt)
{
	if (!pt)
		return;
	for (int i = 0; i < PT_LOCKS; i++)
		pthread_mutex_destroy(&pt->locks[i]);
	free(pt->nodes);
	free(pt);
}

bool fs_pt_refused(const struct fs_pt *pt)
{
	return pt && atomic_load(&pt->refused);
}

static pthread_mutex_t *lock_of(struct fs_pt *pt, uint64_t ino)
{
	return &pt->locks[ino % PT_LOCKS];
}

/* Whether @err says no backing file will ever be taken on this mount:
 * no CAP_SYS_ADMIN (EPERM), the cache on a stacked file system (ELOOP),
 * no passthrough in the kernel (ENOTTY, EOPNOTSUPP). */
static bool refuses_all(int err)
{
	return err == EPERM || err == ELOOP || err == ENOTTY ||
	       err == EOPNOTSUPP;
}

/*
 * Registers @fd as a backing file: its id, or 0 (counted; logged once).
 * NOTE(fuse): the ioctl is made here rather than through libfuse's
 * fuse_passthrough_open(), which needs a live request (the release of an
 * interrupted open has none: fuse_reply_open() freed it) and logs an
 * error for every refusal.
 */
static int backing_open(struct fs *fs, struct fs_pt *pt, int fd)
{
	struct fuse_backing_map map = {.fd = fd};
	int id =
	    ioctl(fuse_session_fd(fs->se), FUSE_DEV_IOC_BACKING_OPEN, &map);
	int err = errno;

	if (id > 0)
		return id;
	atomic_fetch_add(&pt->failures, 1);
	if (refuses_all(err)) {
		if (!atomic_exchange(&pt->refused, true))
			log_warn(
			    "passthrough: the kernel refuses backing files "
			    "(%s%s): data path 'open per file'",
			    strerror(err),
			    err == EPERM ? ": needs CAP_SYS_ADMIN" : "");
	} else {
		log_debug("passthrough: backing file refused: %s",
			  strerror(id < 0 ? err : EIO));
	}
	return 0;
}

int fs_pt_open(struct fs *fs, struct fs_pt *pt, uint64_t ino)
{
	struct pt_node *n;
	int fd = -1, id = 0;
	uint64_t hold = 0;
	bool held = false;

	if (ino < 1 || ino > pt->files)
		return 0;
	n = &pt->nodes[ino - 1];
	/* The object's file is found, and verified the first time (a hash
	 * of all its bytes), before the lock: opens of other inodes under
	 * the same lock do not wait for it. Two first opens of one inode at
	 * once both look; one registers, the other's file is closed. */
	if (atomic_load(&n->opens) == 0 && !atomic_load(&pt->refused))
		fd = fs_cached_file(fs, ino, &hold);
	pthread_mutex_lock(lock_of(pt, ino));
	if (atomic_load(&n->opens) > 0) {
		atomic_fetch_add(&n->opens, 1);
		id = n->backing;
	} else if (atomic_load(&n->opens) == 0 && fd >= 0 &&
		   (id = backing_open(fs, pt, fd))) {
		n->backing = id;
		n->hold = hold;
		held = true;
		atomic_store(&n->opens, 1);
	} else {
		atomic_fetch_sub(&n->opens, 1);
	}
	pthread_mutex_unlock(lock_of(pt, ino));
	if (fd >= 0)
		close(fd);
	/* A file not registered (another open registered first, or the
	 * kernel refused it) is closed already: its hold ends. */
	if (fd >= 0 && !held)
		fs_cached_file_release(fs, hold);
	atomic_fetch_add(id ? &pt->opens : &pt->read_opens, 1);
	return id;
}

void fs_pt_release(struct fs *fs, struct fs_pt *pt, uint64_t ino)
{
	struct pt_node *n;
	uint64_t hold = 0;
	bool release = false;
	uint32_t id;

	if (ino < 1 || ino > pt->files)
		return;
	n = &pt->nodes[ino - 1];
	pthread_mutex_lock(lock_of(pt, ino));
	if (atomic_load(&n->opens) < 0) {
		atomic_fetch_add(&n->opens, 1);
	} else if (atomic_load(&n->opens) > 0 &&
		   atomic_fetch_sub(&n->opens, 1) == 1) {
		/* NOTE(fuse): a failed close leaves the id to the
		 * connection's end; nothing reads through it any more. */
		id = (uint32_t)n->backing;
		if (ioctl(fuse_session_fd(fs->se), FUSE_DEV_IOC_BACKING_CLOSE,
			  &id) < 0)
			log_debug("passthrough: closing backing id %u: %s", id,
				  strerror(errno));
		n->backing = 0;
		hold = n->hold;
		release = true;
	}
	pthread_mutex_unlock(lock_of(pt, ino));
	/* NOTE(fuse): the kernel drops the backing file at the id's close
	 * once no open file uses it (a RELEASE comes after the last one):
	 * its blocks go back now, if the cache unlinked it. */
	if (release)
		fs_cached_file_release(fs, hold);
}

void fs_pt_get_stats(const struct fs_pt *pt, struct fs_pt_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!pt)
		return;
	out->opens = atomic_load(&pt->opens);
	out->read_opens = atomic_load(&pt->read_opens);
	out->failures = atomic_load(&pt->failures);
}

#else /* !HINTFS_HAVE_PASSTHROUGH: libfuse 3.14 has no backing files */

struct fs_pt *fs_pt_create(uint32_t files)
{
	return NULL;
}

void fs_pt_destroy(struct fs_pt *pt)
{
}

bool fs_pt_refused(const struct fs_pt *pt)
{
	return false;
}

int fs_pt_open(struct fs *fs, struct fs_pt *pt, uint64_t ino)
{
	return 0;
}

void fs_pt_release(struct fs *fs, struct fs_pt *pt, uint64_t ino)
{
}

void fs_pt_get_stats(const struct fs_pt *pt, struct fs_pt_stats *out)
{
	memset(out, 0, sizeof(*out));
}

#endif
