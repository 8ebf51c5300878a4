/*
 * common/hint_format.c - the writer of the hint header (format v1).
 *
 * Invariant: every header written here is one fs/hint.c reads back with the
 * same epoch, stream and replace flag (tests/data/hints/ holds the proof).
 */
#include "common/hint_format.h"

#include <errno.h>
#include <inttypes.h>
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
