/*
 * prefetch/s3/s3_object.c - reading an object, built on the exchange: the
 * transfer of a range (s3_xfer_create() and what the engine asks of the
 * transfers it drives) and the blocking ranged GET (s3_get_range()).
 *
 * Nothing here knows HTTP: it is kept apart from s3_request.c so that the
 * unit tests' in-memory S3 (tests/unit/fake_s3.c), which replaces the
 * exchange, runs this code as it is.
 */
#include "prefetch/s3/s3_internal.h"
#include "prefetch/s3/sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The request path of @key (encoded once, NOTE(s3): never normalized). */
static char *object_path(struct s3_client *c, const char *key, size_t key_len)
{
	char *enc = sigv4_uri_encode(key, key_len, true);
	char *path = NULL;

	if (!enc)
		return NULL;
	if (c->path_style) {
		if (asprintf(&path, "/%s/%s", c->bucket, enc) < 0)
			path = NULL;
	} else {
		if (asprintf(&path, "/%s", enc) < 0)
			path = NULL;
	}
	free(enc);
	return path;
}

/* ---- ranged GETs, synchronous and for the engine ------------------------ */

int s3_xfer_create(struct s3_client *c, const char *key, size_t key_len,
		   const char *etag, uint64_t off, size_t len, void *buf,
		   void *user, struct s3_xfer **out)
{
	struct s3_xfer *x;

	if (len == 0)
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->c = c;
	x->user = user;
	x->rq.method = "GET";
	x->rq.if_match = NULL;
	x->body = (struct s3_body){
	    .b = {.data = buf, .cap = len}, .max = len, .fixed = true};
	x->errbody = (struct s3_body){.max = S3_ERROR_BODY_MAX};
	x->ranged = true;
	x->off = off;
	x->rq.path = object_path(c, key, key_len);
	x->rq.query = strdup("");
	x->etag = etag ? strdup(etag) : NULL;
	x->rq.if_match = x->etag;
	if (!x->rq.path || !x->rq.query || (etag && !x->etag)) {
		s3_xfer_destroy(x);
		return -ENOMEM;
	}
	*out = x;
	return 0;
}

CURL *s3_xfer_easy(const struct s3_xfer *x)
{
	return x->h;
}

void s3_xfer_whole_object(struct s3_xfer *x)
{
	x->whole = x->off == 0;
}

void *s3_xfer_user(const struct s3_xfer *x)
{
	return x->user;
}

ssize_t s3_get_range(struct s3_client *c, const char *key, size_t key_len,
		     const char *etag, uint64_t off, size_t len, void *buf,
		     struct s3_status *st)
{
	struct s3_xfer *x;
	ssize_t rc;

	if (len == 0)
		return 0;
	rc = s3_xfer_create(c, key, key_len, etag, off, len, buf, NULL, &x);
	if (rc)
		return rc;
	rc = s3_perform(x, st);
	if (!rc)
		rc = (ssize_t)x->body.b.len;
	s3_xfer_destroy(x);
	return rc;
}

void s3_xfer_want_meta(struct s3_xfer *x)
{
	x->want_meta = true;
}

const struct s3_obj_meta *s3_xfer_meta(const struct s3_xfer *x)
{
	return &x->meta;
}

/* ---- PUT ------------------------------------------------------------------
 */

int s3_put_object(struct s3_client *c, const char *key, size_t key_len,
		  const void *data, size_t len,
		  const struct s3_meta_header *meta, size_t n_meta,
		  struct s3_status *st)
{
	struct s3_xfer *x;
	int rc = -ENOMEM;

	if (n_meta > S3_META_MAX)
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->c = c;
	x->rq.method = "PUT";
	/* The answer to a PUT is empty or an error document. */
	x->body = (struct s3_body){.max = S3_ERROR_BODY_MAX};
	x->errbody = (struct s3_body){.max = S3_ERROR_BODY_MAX};
	x->put_data = data;
	x->put_len = len;
	x->rq.path = object_path(c, key, key_len);
	x->rq.query = strdup("");
	for (size_t i = 0; i < n_meta; i++) {
		if (asprintf(&x->meta_names[i], "x-amz-meta-%s", meta[i].name) <
		    0) {
			x->meta_names[i] = NULL;
			goto out;
		}
		x->meta_values[i] = strdup(meta[i].value);
		x->n_meta = i + 1;
		if (!x->meta_values[i])
			goto out;
	}
	if (!x->rq.path || !x->rq.query)
		goto out;
	rc = s3_perform(x, st);
out:
	buf_fini(&x->body.b);
	s3_xfer_destroy(x);
	return rc;
}
