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
 * NOTE(fuse): FUSE_DEV_IOC_BACKING_OPEN needs CAP_SYS_ADMIN; a refusal is
 * counted and logged once, and the open reads through the daemon.
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

/* Opens of different inodes rarely meet; 64 locks keep those that do
 * apart without a lock per inode. The backing-file ioctl runs under the
 * inode's lock (the mode must not change while it is decided). */
#define PT_LOCKS 64

struct pt_node {
	int32_t opens;	 /* > 0: passthrough opens; < 0: READ opens */
	int32_t backing; /* the backing id while opens > 0 */
};

struct fs_pt {
	uint32_t files;
	struct pt_node *nodes; /* by inode - 1 */
	pthread_mutex_t locks[PT_LOCKS];
	_Atomic uint64_t opens, read_opens, failures;
	atomic_bool refused_logged;
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

static pthread_mutex_t *lock_of(struct fs_pt *pt, uint64_t ino)
{
	return &pt->locks[ino % PT_LOCKS];
}

/* A backing id for @ino's cache file, or 0 (not a file of its own, or
 * refused). Under the inode's lock. */
static int backing_open(struct fs *fs, struct fs_pt *pt, fuse_req_t req,
			uint64_t ino)
{
	int fd = fs_cached_file(fs, ino);
	int id;

	if (fd < 0)
		return 0;
	errno = 0;
	id = fuse_passthrough_open(req, fd);
	if (id <= 0) {
		int err = errno;

		atomic_fetch_add(&pt->failures, 1);
		if (!atomic_exchange(&pt->refused_logged, true))
			log_warn("passthrough: the kernel refused a backing "
				 "file (%s); such opens are read through the "
				 "daemon",
				 strerror(err ? err : EIO));
		id = 0;
	}
	close(fd);
	return id;
}

int fs_pt_open(struct fs *fs, struct fs_pt *pt, fuse_req_t req, uint64_t ino)
{
	struct pt_node *n;
	int id = 0;

	if (ino < 1 || ino > pt->files)
		return 0;
	n = &pt->nodes[ino - 1];
	pthread_mutex_lock(lock_of(pt, ino));
	if (n->opens > 0) {
		n->opens++;
		id = n->backing;
	} else if (n->opens == 0 && (id = backing_open(fs, pt, req, ino))) {
		n->opens = 1;
		n->backing = id;
	} else {
		n->opens--;
	}
	pthread_mutex_unlock(lock_of(pt, ino));
	atomic_fetch_add(id ? &pt->opens : &pt->read_opens, 1);
	return id;
}

void fs_pt_release(struct fs_pt *pt, fuse_req_t req, uint64_t ino)
{
	struct pt_node *n;

	if (ino < 1 || ino > pt->files)
		return;
	n = &pt->nodes[ino - 1];
	pthread_mutex_lock(lock_of(pt, ino));
	if (n->opens < 0) {
		n->opens++;
	} else if (n->opens > 0 && --n->opens == 0) {
		/* NOTE(fuse): a failed close leaves the id to the
		 * connection's end; nothing reads through it any more. */
		fuse_passthrough_close(req, n->backing);
		n->backing = 0;
	}
	pthread_mutex_unlock(lock_of(pt, ino));
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

int fs_pt_open(struct fs *fs, struct fs_pt *pt, fuse_req_t req, uint64_t ino)
{
	return 0;
}

void fs_pt_release(struct fs_pt *pt, fuse_req_t req, uint64_t ino)
{
}

void fs_pt_get_stats(const struct fs_pt *pt, struct fs_pt_stats *out)
{
	memset(out, 0, sizeof(*out));
}

#endif
