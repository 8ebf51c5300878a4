/*
 * common/fileio.c - reads whole files (hints, control files, lists), and
 * creates directories with their parents.
 *
 * Invariant: on success the buffer holds exactly the bytes read plus a
 * NUL; on failure nothing is left allocated.
 */
#include "common/fileio.h"
#include "common/buf.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads of 64 KiB: a hint of 100,000 paths takes a hundred or so. */
#define FILEIO_READ_CHUNK 65536

static int read_all(int fd, size_t max, bool secret, char **out, size_t *len)
{
	struct buf b = {.secret = secret};
	int rc = 0;

	for (;;) {
		ssize_t r;

		rc = buf_reserve(&b, FILEIO_READ_CHUNK);
		if (rc)
			break;
		r = read(fd, b.data + b.len, b.cap - b.len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			break;
		}
		if (r == 0)
			break;
		b.len += (size_t)r;
		if (b.len > max) {
			rc = -EFBIG;
			break;
		}
	}
	if (rc) {
		buf_fini(&b);
		return rc;
	}
	b.data[b.len] = '\0';
	*out = b.data;
	*len = b.len;
	return 0;
}

int read_fd_all(int fd, size_t max, char **out, size_t *len)
{
	return read_all(fd, max, false, out, len);
}

int read_secret_fd(int fd, size_t max, char **out, size_t *len)
{
	return read_all(fd, max, true, out, len);
}

int read_file_all(const char *path, size_t max, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	int rc;

	if (fd < 0)
		return -errno;
	rc = read_fd_all(fd, max, out, len);
	close(fd);
	return rc;
}

int mkdir_p(const char *path, mode_t mode)
{
	char *p = strdup(path);
	int parent_err = 0, rc = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST && !parent_err)
			parent_err = -errno;
		*s = '/';
	}
	if (mkdir(p, mode) < 0 && errno != EEXIST)
		rc = errno == ENOENT && parent_err ? parent_err : -errno;
	free(p);
	return rc;
}
