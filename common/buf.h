/**
 * common/buf.h - the one growable byte buffer of hintfs.
 *
 * A struct buf is caller-owned storage (zero it, or = { 0 }, to start
 * empty; buf_fini() to free). Appends keep the bytes NUL-terminated, one
 * byte past len, so a buffer of text is a C string at every moment. The
 * capacity doubles, so n appends cost O(n) copies in all. Not thread-safe:
 * one buffer belongs to one thread at a time.
 *
 * A *secret* buffer (secret set before the first append: credentials, a
 * token file) never leaves a copy of its bytes behind: growing it copies
 * them to a new allocation and wipes the old one (realloc may not), and
 * buf_fini() wipes them before freeing.
 */
#ifndef HINTFS_COMMON_BUF_H
#define HINTFS_COMMON_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct buf {
	char *data;  /**< NULL until the first reserve; NUL at data[len] */
	size_t len;  /**< bytes held */
	size_t cap;  /**< bytes allocated */
	bool secret; /**< wipe what is given back (see above) */
};

/**
 * Makes room for @n more bytes and the NUL after them, without changing
 * len. Returns 0 or -ENOMEM (nothing changed). Pointers into data are
 * invalid after a call that grew it.
 */
int buf_reserve(struct buf *b, size_t n);

/** Appends @n bytes of @p (may be NULL when @n is 0). 0 or -ENOMEM. */
int buf_append(struct buf *b, const void *p, size_t n);

/** Frees the bytes (wiped first if secret) and leaves @b empty, its
 *  secret flag kept. */
void buf_fini(struct buf *b);

#endif /* HINTFS_COMMON_BUF_H */
