/**
 * prefetch/s3/s3_xfer.h - one ranged GET as a curl easy handle, for the
 * curl source's multi handle (private to prefetch: the engine itself
 * links no curl). Includers: prefetch/s3/, prefetch/source_curl.c.
 *
 * The S3 client builds, signs and interprets the request; the caller only
 * drives the transfer: s3_xfer_arm() gives an easy handle to add to a
 * multi handle, and once curl reports it done, s3_xfer_finish() says what
 * happened and takes the handle back. A retry is another arm/finish pair:
 * each arm signs anew and empties the body, so a retried transfer never
 * appends to a broken one's bytes. An s3_xfer belongs to one thread at a
 * time.
 */
#ifndef HINTFS_PREFETCH_S3_S3_XFER_H
#define HINTFS_PREFETCH_S3_S3_XFER_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "prefetch/s3/s3.h"
#include "common/retry.h"

struct s3_xfer;

/**
 * Describes a GET of bytes [@off, @off + @len) of @key into @buf (which
 * must hold @len bytes and outlive the transfer), with If-Match @etag when
 * not NULL. @user is the caller's, returned by s3_xfer_user(); curl's
 * CURLINFO_PRIVATE of the armed handle is the s3_xfer. Returns 0, -EINVAL
 * (@len 0) or -ENOMEM.
 */
int s3_xfer_create(struct s3_client *c, const char *key, size_t key_len,
		   const char *etag, uint64_t off, size_t len, void *buf,
		   void *user, struct s3_xfer **out);

/**
 * Readies one attempt; stores the easy handle to run in *@easy. A @retry
 * uses a fresh connection, keeps the bytes received so far and asks only
 * for the rest of the range.
 */
int s3_xfer_arm(struct s3_xfer *x, bool retry, CURL **easy);

/**
 * Concludes the attempt whose curl result is @cc (remove the handle from
 * the multi handle first). Returns the bytes of the range received so far
 * (all attempts together), or a -errno with
 * details in @st; *@retryable says whether another attempt may succeed.
 */
ssize_t s3_xfer_finish(struct s3_xfer *x, CURLcode cc, struct s3_status *st,
		       bool *retryable);

/** The easy handle of an armed transfer, or NULL when not armed. */
CURL *s3_xfer_easy(const struct s3_xfer *x);

/**
 * Says that the range of @x is its whole object (offset 0, the listed
 * size): an attempt that has received nothing yet is then a plain GET, no
 * Range header. Ceph RGW spends about 15% less CPU on it (0.77 against
 * 0.90 ms per 110 KB GET, If-Match in both), and a server that ignores
 * If-Match cannot hand back a changed object's bytes as a silent 206: a
 * larger body overflows the buffer (-EPROTO). Retries that resume keep
 * asking for the rest by Range.
 */
void s3_xfer_whole_object(struct s3_xfer *x);

/**
 * The client's retry policy, the mount's one budget: the engine retries
 * its transfers by it as s3_perform() does. Valid while @c lives.
 */
const struct retry_policy *s3_client_retry(const struct s3_client *c);

/** Asks @x to keep its answers' headers (s3_xfer_meta()). */
void s3_xfer_want_meta(struct s3_xfer *x);

/** The headers the last attempt of @x received (see s3_obj_meta). */
const struct s3_obj_meta *s3_xfer_meta(const struct s3_xfer *x);

/** The @user given to s3_xfer_create(). */
void *s3_xfer_user(const struct s3_xfer *x);

/** Frees @x (and gives back a handle still armed). Accepts NULL. */
void s3_xfer_destroy(struct s3_xfer *x);

#endif /* HINTFS_PREFETCH_S3_S3_XFER_H */
