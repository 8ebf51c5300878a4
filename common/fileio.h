/**
 * common/fileio.h - reading a whole file, and mkdir -p, for the daemon
 * and hintfs-ctl.
 */
#ifndef HINTFS_COMMON_FILEIO_H
#define HINTFS_COMMON_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

/**
 * Reads @fd to its end into a malloc'd buffer, NUL-terminated (the NUL is
 * not counted in *@len). Returns 0, -EFBIG past @max bytes, -ENOMEM, or
 * the -errno of read(2). The caller owns *@out and closes @fd. Any thread.
 */
int read_fd_all(int fd, size_t max, char **out, size_t *len);

/** The same for the file at @path, opened and closed here. */
int read_file_all(const char *path, size_t max, char **out, size_t *len);

/**
 * read_fd_all() for a file that holds a secret (credentials, a token):
 * no copy of its bytes is left in freed memory (a secret struct buf). The
 * caller wipes *@out before freeing it.
 */
int read_secret_fd(int fd, size_t max, char **out, size_t *len);

/**
 * mkdir -p: creates directory @path and its missing parents with @mode
 * (an existing @path is fine: the caller's open(O_DIRECTORY) checks it). A
 * parent that cannot be created is left for the final mkdir to report, so a
 * path through an existing read-only or unreadable parent still works; when the
 * final mkdir then fails for want of a parent, the parent's error is returned,
 * which says why. Returns 0, -ENOMEM or a -errno of mkdir(2). Any thread.
 */
int mkdir_p(const char *path, mode_t mode);

#endif /* HINTFS_COMMON_FILEIO_H */
