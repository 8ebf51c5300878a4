/*
 * common/hint_format.c - the C writer of the hint format v1: the header
 * and the entries.
 *
 * Invariant: every header written here is one fs/hint.c reads back with the
 * same epoch, stream and replace flag, and every entry the same path and
 * range (tests/data/hints/ holds the proof).
 */
#include "common/hint_format.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

bool hint_stream_ok(const char *s, size_t len)
{
	size_t n = 0;

	if (!len || len > HINT_STREAM_MAX)
		return false;
	while (n < len &&
	       ((s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= 'a' && s[n] <= 'z') ||
		(s[n] >= '0' && s[n] <= '9') || s[n] == '.' || s[n] == '_' ||
		s[n] == '-'))
		n++;
	return n == len;
}

int hint_format_header(char *buf, size_t size, int64_t epoch,
		       const char *stream, bool replace)
{
	char e[32] = "";
	int n;

	if (stream && !hint_stream_ok(stream, strlen(stream)))
		return -EINVAL;
	if (epoch >= 0)
		snprintf(e, sizeof(e), " epoch=%" PRId64, epoch);
	n = snprintf(buf, size, "%s%s%s%s%s\n", HINT_TAG, e,
		     stream ? " stream=" : "", stream ? stream : "",
		     replace ? " replace" : "");
	if (n < 0 || (size_t)n >= size) {
		if (size)
			buf[0] = '\0';
		return -ENOSPC;
	}
	return n;
}

int hint_format_entry(char *buf, size_t size, const char *path, size_t path_len,
		      uint64_t off, uint64_t len)
{
	int n;

	if (!path_len || memchr(path, '\n', path_len) ||
	    memchr(path, '\0', path_len) || path_len > INT_MAX)
		return -EINVAL;
	/* A range's end is at most 2^64 - 1: the reader refuses more. */
	if (len != HINT_WHOLE && (len == 0 || off > UINT64_MAX - len))
		return -EINVAL;
	if (len == HINT_WHOLE)
		n = snprintf(buf, size, "%.*s\n", (int)path_len, path);
	else
		n = snprintf(buf, size, "%.*s\t%" PRIu64 "\t%" PRIu64 "\n",
			     (int)path_len, path, off, len);
	if (n < 0 || (size_t)n >= size) {
		if (size)
			buf[0] = '\0';
		return -ENOSPC;
	}
	return n;
}
