/*
 * prefetch/s3/s3_error.c - the one place where foreign codes become ours:
 * HTTP statuses, S3 error codes and curl codes become an errno (s3_errno())
 * and an error kind (s3_kind()); whether a failure is worth another
 * attempt (the one-line description a user reads is s3_status.c's). No
 * code outside the S3 client knows an HTTP status.
 */
#include "prefetch/s3/s3_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

struct s3_code_map {
	const char *code;
	int err;
};

static const struct s3_code_map s3_codes[] = {
    {"NoSuchBucket", -ENOENT},
    {"NoSuchKey", -ESTALE},	     /* deleted since the listing */
    {"PreconditionFailed", -ESTALE}, /* If-Match: changed since */
    {"AccessDenied", -EACCES},
    {"SignatureDoesNotMatch", -EACCES},
    {"InvalidAccessKeyId", -EACCES},
    {"ExpiredToken", -EACCES},
    {"InvalidToken", -EACCES},
    {"RequestTimeTooSkewed", -EACCES},
    {"InvalidBucketName", -EINVAL},
    {"SlowDown", -EAGAIN},
    {"RequestTimeout", -ETIMEDOUT},
    {"InternalError", -EIO},
    {"ServiceUnavailable", -EAGAIN},
};

int s3_errno(long http, const char *code, CURLcode cc)
{
	if (cc != CURLE_OK) {
		switch (cc) {
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			return -EHOSTUNREACH;
		case CURLE_COULDNT_CONNECT:
			return -ECONNREFUSED;
		case CURLE_OPERATION_TIMEDOUT:
			return -ETIMEDOUT;
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CACERT_BADFILE:
			return -EPROTO;
		case CURLE_WRITE_ERROR: /* our sink refused: body too large */
			return -EPROTO;
		case CURLE_OUT_OF_MEMORY:
			return -ENOMEM;
		default: /* resets, truncated bodies, empty replies */
			return -ECONNRESET;
		}
	}
	for (size_t i = 0; i < sizeof(s3_codes) / sizeof(s3_codes[0]); i++)
		if (!strcmp(code, s3_codes[i].code))
			return s3_codes[i].err;
	if (http == 404)
		return -ENOENT;
	if (http == 403 || http == 401)
		return -EACCES;
	if (http == 412)
		return -ESTALE;
	if (http == 408 || http == 429 || http == 503)
		return -EAGAIN;
	return -EIO;
}

enum s3_err_kind s3_kind(int err, long http, const char *code)
{
	if (err == -EAGAIN &&
	    (http == 503 || http == 429 || !strcmp(code, "SlowDown")))
		return S3_ERR_SLOWDOWN;
	if (http >= 500)
		return S3_ERR_SERVER;
	if (err == -ESTALE)
		return S3_ERR_STALE;
	if (http == 0)
		return S3_ERR_NETWORK;
	if (err == -EACCES)
		return S3_ERR_DENIED;
	return S3_ERR_OTHER;
}

/* Whether another attempt may succeed where this one failed. */
bool s3_retryable(int err, long http)
{
	switch (err) {
	case -EAGAIN:
	case -ETIMEDOUT:
	case -ECONNRESET:
	case -ECONNREFUSED:
		return true;
	case -EIO:
		return http >= 500 || http == 0;
	default:
		return false;
	}
}

void s3_status_from_curl(struct s3_status *st, CURLcode cc,
			 const char *curl_err)
{
	st->http = 0;
	snprintf(st->code, sizeof(st->code), "curl-%d", (int)cc);
	snprintf(st->message, sizeof(st->message), "%s",
		 curl_err[0] ? curl_err : curl_easy_strerror(cc));
}
