/*
 * tests/unit/fake_s3.h - an in-memory S3 bucket with injected failures,
 * for unit tests of the listing, the engine and the fs core without a
 * server (the model: mountpoint-s3's mock and failure clients).
 *
 * fake_s3.c replaces prefetch/s3/s3_request.c, the client's HTTP exchange, at
 * link time: everything above it (s3_client.c, s3_list.c, s3_error.c, the
 * XML parser, the engine, fs) is the real code, and sees answers as a
 * server would give them: XML list pages, ranged bodies, error documents
 * with their HTTP status, or a connection reset. The bucket is global and
 * guarded by a mutex: any thread.
 */
#ifndef HINTFS_TESTS_FAKE_S3_H
#define HINTFS_TESTS_FAKE_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Empties the bucket, the faults and the counters; pages of 1,000. */
void fake_s3_reset(void);

/** Stores (or replaces, with a new ETag) object @key. 0 or -ENOMEM. */
int fake_s3_put(const char *key, const void *data, size_t len);

/** The ETag object @key has now ("" when absent). */
const char *fake_s3_etag(const char *key);

/** List pages hold at most @n entries, whatever max-keys asks. */
void fake_s3_page_max(unsigned n);

/** The server ignores start-after, as some do (lists from the start). */
void fake_s3_ignore_start_after(bool on);

/**
 * The next @times requests that match @what fail: @what is an object key
 * (its GETs) or "LIST" (any list page). @http 0 is a connection reset;
 * otherwise that status, with S3 error code @code (may be "").
 * @times < 0: every such request, for ever.
 */
void fake_s3_fail(const char *what, long http, const char *code, int times);

/** Requests answered (each attempt counts): GETs of objects, list pages. */
uint64_t fake_s3_gets(void);
uint64_t fake_s3_lists(void);
/** PUTs answered (s3_put_object(); each attempt counts). */
uint64_t fake_s3_puts(void);

#endif /* HINTFS_TESTS_FAKE_S3_H */
