/**
 * prefetch/s3/creds_http.h - one blocking HTTP exchange for the credential
 * providers (private to prefetch/s3).
 *
 * The providers run on the mount thread or the refresh thread, never on a
 * read's path, so a blocking easy handle per call is simple and enough.
 */
#ifndef HINTFS_PREFETCH_S3_CREDS_HTTP_H
#define HINTFS_PREFETCH_S3_CREDS_HTTP_H

#include "prefetch/s3/creds.h"

#include <stddef.h>

struct creds_http_req {
	const char *method; /**< "GET", "PUT", "POST" */
	const char *url;
	const char *const *headers; /**< "Name: value" lines, NULL-ended */
	const char *body;	    /**< POST/PUT body, or NULL */
	size_t body_len;
	const struct creds_net *net;
	int timeout_ms; /**< whole exchange */
};

struct creds_http_resp {
	long status; /**< 0 when no answer came */
	char *body;  /**< malloc'd, NUL-terminated; wipe it (secrets) */
	size_t len;
};

/**
 * Performs @rq. Returns 0 when an answer came (any status: see
 * @out->status), or -errno (-ETIMEDOUT, -ECONNREFUSED, -EPROTO, ...) with
 * curl's reason in @err. Free @out with creds_http_resp_fini().
 */
int creds_http(const struct creds_http_req *rq, struct creds_http_resp *out,
	       char *err, size_t err_len);

/** Wipes and frees @r's body. */
void creds_http_resp_fini(struct creds_http_resp *r);

/**
 * Reads a small file (a token) whole into a malloc'd NUL-terminated
 * string with trailing white space cut, and its change stamp into *@stamp
 * (may be NULL). Returns 0 or -errno.
 */
int creds_read_file(const char *path, char **out, char stamp[64]);

#endif /* HINTFS_PREFETCH_S3_CREDS_HTTP_H */
