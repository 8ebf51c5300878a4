/*
 * common/fileio.c - reads whole files (hints, control files, lists).
 *
 * Invariant: on success the buffer holds exactly the bytes read plus a
 * NUL; on failure nothing is left allocated.
 */
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

int read_fd_all(int fd, size_t max, char **out, size_t *len)
{
	size_t n = 0, cap = 65536;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			char *nb;

			if (cap > max)
				goto fail_rc_efbig;
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int rc = -errno;

			free(buf);
			return rc;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max)
			goto fail_rc_efbig;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
fail_rc_efbig:
	free(buf);
	return -EFBIG;
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
