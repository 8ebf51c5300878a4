/*
 * common/buf.c - the growable byte buffer (buf.h).
 *
 * Invariant: cap == 0 and data == NULL, or len < cap and data[len] == 0.
 */
#include "common/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* 64 bytes first: most buffers hold a line or a name; larger ones double
 * to their size in a few steps, or reserve it up front. */
#define BUF_MIN 64

int buf_reserve(struct buf *b, size_t n)
{
	size_t need, cap;
	char *p;

	if (n > SIZE_MAX - 1 - b->len)
		return -ENOMEM;
	need = b->len + n + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : BUF_MIN;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (b->secret) {
		/* realloc may move the bytes and leave the old copy. */
		p = malloc(cap);
		if (!p)
			return -ENOMEM;
		if (b->data) {
			memcpy(p, b->data, b->len + 1);
			explicit_bzero(b->data, b->cap);
			free(b->data);
		}
	} else {
		p = realloc(b->data, cap);
		if (!p)
			return -ENOMEM;
	}
	if (!b->data)
		p[0] = '\0';
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
	int rc = buf_reserve(b, n);

	if (rc)
		return rc;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

void buf_fini(struct buf *b)
{
	bool secret = b->secret;

	if (secret && b->data)
		explicit_bzero(b->data, b->cap);
	free(b->data);
	*b = (struct buf){.secret = secret};
}
