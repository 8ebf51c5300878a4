/**
 * common/fileio.h - reading a whole file, for the daemon and hintfs-ctl.
 */
#ifndef HINTFS_COMMON_FILEIO_H
#define HINTFS_COMMON_FILEIO_H

#include <stddef.h>

/**
 * Reads @fd to its end into a malloc'd buffer, NUL-terminated (the NUL is
 * not counted in *@len). Returns 0, -EFBIG past @max bytes, -ENOMEM, or
 * the -errno of read(2). The caller owns *@out and closes @fd. Any thread.
 */
int read_fd_all(int fd, size_t max, char **out, size_t *len);

/** The same for the file at @path, opened and closed here. */
int read_file_all(const char *path, size_t max, char **out, size_t *len);

#endif /* HINTFS_COMMON_FILEIO_H */
