/**
 * fs/fs_ops.h - the FUSE low-level adapter (private to fs).
 */
#ifndef HINTFS_FS_FS_OPS_H
#define HINTFS_FS_FS_OPS_H

#include <fuse_lowlevel.h>

/**
 * The operations table. The session's userdata must point to the struct
 * fs * the operations act on, which must be set before the session is
 * mounted: so the session (and its option checks) can come before the
 * listing. The table is static; callers must not modify it.
 */
extern const struct fuse_lowlevel_ops fs_ll_ops;

struct cache_ref;
struct fs;

/**
 * Tells the adapter the session @fs is served on, for the notifications
 * it sends (a control file's dentry dropped after its lookup). Call once,
 * before the session loop.
 */
void fs_ops_set_session(struct fs *fs, struct fuse_session *se);

/**
 * Fills @bv with the one buffer a cache reference names: memory, or a file
 * descriptor and offset libfuse splices from (a reply, or a store into the
 * kernel's page cache). Valid as long as the reference.
 */
void fs_ref_bufvec(const struct cache_ref *ref, struct fuse_bufvec *bv);

#endif /* HINTFS_FS_FS_OPS_H */
