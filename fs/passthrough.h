/**
 * fs/passthrough.h - FUSE passthrough of cached objects (fs/passthrough.c):
 * the kernel reads a cached object's own cache file itself, with no READ.
 *
 * Part of the FUSE adapter: it registers backing files on the session's
 * /dev/fuse (fs_ops_set_session() before the first request). Built with
 * libfuse 3.17+ (HINTFS_HAVE_PASSTHROUGH); without it fs_pt_create() returns
 * NULL and nothing else is called.
 */
#ifndef HINTFS_FS_PASSTHROUGH_H
#define HINTFS_FS_PASSTHROUGH_H

#include <stdbool.h>
#include <stdint.h>

struct fs;
struct fs_pt;

/** What passthrough did so far, for stats. */
struct fs_pt_stats {
	uint64_t opens;	     /**< opens the kernel reads by itself */
	uint64_t read_opens; /**< data opens answered for READs instead */
	uint64_t failures;   /**< backing files the kernel refused */
};

/** The state for a listing of @files files; NULL: no memory, or a build
 *  without passthrough. */
struct fs_pt *fs_pt_create(uint32_t files);

/** Frees @pt (NULL ok) once no request runs. Backing ids still open go
 *  with the connection. */
void fs_pt_destroy(struct fs_pt *pt);

/**
 * How the open of data file @ino (a node of the listing) is answered:
 * a backing id > 0 for fi->backing_id (the kernel reads the object's
 * cache file itself), or 0: the daemon answers its READs, because the
 * object is not cached in a file of its own yet, or opens of @ino in that
 * mode are still live (the kernel keeps one I/O mode per inode), or the
 * kernel refused the file (counted, logged once). Never fails. Pair each
 * call with one fs_pt_release().
 */
int fs_pt_open(struct fs *fs, struct fs_pt *pt, uint64_t ino);

/** The RELEASE of an open of @ino that fs_pt_open() answered (or whose
 *  reply failed): the last passthrough one closes the backing id. */
void fs_pt_release(struct fs *fs, struct fs_pt *pt, uint64_t ino);

/** Whether the kernel refused backing files for good (no CAP_SYS_ADMIN,
 *  a stacked cache file system): every open then reads through the
 *  daemon. False for NULL. */
bool fs_pt_refused(const struct fs_pt *pt);

void fs_pt_get_stats(const struct fs_pt *pt, struct fs_pt_stats *out);

#endif
