/**
 * fs/store.h - the kernel's page cache filled ahead of opens (private to
 * fs; see store.c). The FUSE adapter reports the lookups the kernel holds,
 * main.c starts and stops the pushing thread around the session loop.
 */
#ifndef HINTFS_FS_STORE_H
#define HINTFS_FS_STORE_H

#include <stdint.h>

#include <fuse_lowlevel.h>

struct fs;

/**
 * Starts pushing the next hinted, cached objects into the kernel's page
 * cache, at most @budget bytes ahead of the readers. @budget 0 starts
 * nothing. Call once the session exists and before its loop; returns 0 or
 * -errno.
 */
int fs_store_start(struct fs *fs, struct fuse_session *se, uint64_t budget);

/** Stops it once the session loop has returned (no FUSE callback runs). */
void fs_store_stop(struct fs *fs);

/** The kernel took @n more lookups of @ino (lookup, readdirplus). Any
 *  FUSE thread; a no-op without a store. */
void fs_store_note_lookup(struct fs *fs, uint64_t ino, uint64_t n);

/** The kernel forgot @n lookups of @ino. Any FUSE thread. */
void fs_store_note_forget(struct fs *fs, uint64_t ino, uint64_t n);

/** A file of @ino is being opened: waits for a push of it to end, and
 *  keeps it from being pushed until fs_store_note_close(). Any FUSE
 *  thread, before the open is answered. */
void fs_store_note_open(struct fs *fs, uint64_t ino);

/** A file of @ino was released (its last read answered). */
void fs_store_note_close(struct fs *fs, uint64_t ino);

/** Objects and bytes pushed so far, and stores the kernel refused. */
void fs_store_stats(struct fs *fs, uint64_t *objects, uint64_t *bytes,
		    uint64_t *failed);

#endif /* HINTFS_FS_STORE_H */
