/**
 * prefetch/s3/s3_internal.h - what the files of the S3 client share (private
 * to prefetch/s3/: s3_client.c, s3_error.c, s3_request.c, s3_object.c,
 * s3_list.c).
 *
 * The client is one object split by concern: s3_client.c parses the
 * endpoint and owns the client's life; s3_error.c is the one place where
 * HTTP statuses, S3 error codes and curl codes become errno and an error
 * kind; s3_request.c builds, signs and performs one exchange (the handle
 * pool, the sinks, the retries of the blocking path) and arms and
 * concludes the engine's transfers (s3_xfer.h); s3_object.c reads objects
 * on top of it; s3_list.c is ListObjectsV2, serial and parallel. Nothing
 * outside these files sees the structs below.
 */
#ifndef HINTFS_PREFETCH_S3_S3_INTERNAL_H
#define HINTFS_PREFETCH_S3_S3_INTERNAL_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "prefetch/s3/s3.h"
#include "prefetch/s3/s3_xfer.h"
#include "common/buf.h"
#include "common/retry.h"
#include "prefetch/s3/sigv4.h"

/* A list page of 1,000 keys is ~300 KB; 16 MiB means a broken server. */
#define S3_LIST_BODY_MAX (16u << 20)
/* Error documents are small; keep enough for a long <Message>. */
#define S3_ERROR_BODY_MAX (64u << 10)
/* Idle handles kept for reuse: more than the FUSE threads that read at
 * once, fewer than would hold sockets open for nothing. */
#define S3_POOL_MAX 64
/* curl's receive buffer per handle (s3_request.c says why). */
#define S3_RECV_BUFFER_BYTES 65536L
/* Connect within 10 s, or the endpoint is down. */
#define S3_CONNECT_TIMEOUT_MS 10000L
/* A transfer that moves nothing for 5 s is stalled: abandon it and retry
 * on a fresh connection (a 10 s stall costs 5 s, not a whole read). */
#define S3_STALL_DEFAULT_S 5
/* A listing past its first page: 16 requests in flight by default, one
 * range each (10,000 keys at 20 ms: 64 ranges took 434 ms, slower than
 * page by page, 287 ms; 16 ranges 174-199 ms); at most 16 delimiter pages
 * spent finding the split points. */
#define S3_LIST_WORKERS_DEFAULT	  16
#define S3_LIST_RANGES_PER_WORKER 1
#define S3_LIST_DISCOVERY	  16
struct s3_client {
	char *bucket;
	char *scheme;	   /* "http" or "https" */
	char *host;	   /* host part of the endpoint, no port */
	char *host_header; /* what we send and sign as Host */
	char *base_url;	   /* scheme://host[:port], bucket host if vhost */
	char *region;
	struct creds *creds; /* NULL with no_sign */
	bool own_creds;	     /* made from cfg's fixed keys */
	char *ca_file;
	bool path_style;
	bool no_sign;
	bool insecure;
	struct retry_policy retry; /* the mount's one retry budget */
	int stall_timeout_s;
	int list_workers;

	_Atomic uint64_t n_lists;    /* ListObjectsV2 attempts sent */
	_Atomic uint64_t n_gets;     /* object GET attempts sent */
	_Atomic uint64_t n_puts;     /* object PUT attempts sent */
	_Atomic uint64_t n_connects; /* connections opened (a reused one
					counts 0): CURLINFO_NUM_CONNECTS */

	/* The day's SigV4 signing key, derived once per day, region and
	 * secret instead of on every request (four HMACs). */
	pthread_mutex_t sign_lock;
	struct sigv4_key sign_key;

	pthread_mutex_t pool_lock; /* guards pool[] and n_pool */
	CURL *pool[S3_POOL_MAX];
	int n_pool;
};

/*
 * Where a response body goes: the caller's buffer of a ranged GET (fixed:
 * b.data is the caller's, max bytes, and is never handed to buf_*), or a
 * buffer of ours that grows up to max (list pages, error documents).
 */
struct s3_body {
	struct buf b;
	size_t max; /* more than this is a protocol error */
	bool fixed; /* b.data is the caller's buffer */
	bool overflow;
};

/* One request's description, before signing. */
struct s3_req {
	const char *method;
	char *path;  /* encoded, begins '/' */
	char *query; /* encoded, may be "" */
	char range[64];
	const char *if_match; /* NULL: none */
};

/* A PUT's user metadata: at most this many x-amz-meta-* headers. */
#define S3_META_MAX 8

/*
 * The body of a 2xx answer goes to the caller's sink; any other body is an
 * error document and goes to a side buffer, so it never lands in a read
 * buffer as if it were file data.
 */
struct s3_sink {
	CURL *h;
	struct s3_body *ok;
	struct s3_body *err;
};

/*
 * One exchange in progress: the request, its curl handle and its sinks.
 * Used synchronously by s3_perform_once() and asynchronously by the
 * engine's multi handle through the s3_xfer_* functions (s3_xfer.h).
 */
struct s3_xfer {
	struct s3_client *c;
	struct s3_req rq;	/* owns rq.path and rq.query */
	struct s3_body body;	/* where a 2xx body goes */
	struct s3_body errbody; /* where any other body goes */
	struct s3_sink sink;
	struct curl_slist *hdrs;
	char *url;
	CURL *h;     /* from the pool while armed, else NULL */
	char *etag;  /* If-Match value, owned */
	bool ranged; /* a GET of [off, off + body.max) */
	bool whole;  /* ... which is the whole object */
	uint64_t off;
	char curl_err[CURL_ERROR_SIZE];
	void *user;	    /* the caller's, see s3_xfer_user() */
	uint64_t creds_gen; /* the credentials this attempt signed with */
	int64_t creds_expires;
	bool auth_retry; /* "expired": the last attempt earned a retry */
	/* A PUT: its body (the caller's, outlives the exchange), how far
	 * curl has read it in this attempt, and its x-amz-meta-* headers
	 * ("x-amz-meta-NAME", value; owned). */
	const char *put_data;
	size_t put_len, put_off;
	char *meta_names[S3_META_MAX], *meta_values[S3_META_MAX];
	size_t n_meta;
	/* A GET whose answer's headers are kept (s3_xfer_want_meta()). */
	bool want_meta;
	struct s3_obj_meta meta;
};

/* ---- s3_error.c -----------------------------------------------------------
 */

/** The errno of an answer: HTTP status @http with S3 code @code, or curl's
 *  @cc when no answer came (then @http and @code are ignored). */
int s3_errno(long http, const char *code, CURLcode cc);

/** The kind of a failure that gave @err, with HTTP status @http (0: no
 *  answer) and S3 code @code ("" when none). */
enum s3_err_kind s3_kind(int err, long http, const char *code);

/** Whether another attempt may succeed where one that failed with @err
 *  (and HTTP status @http, 0 when none) did. */
bool s3_retryable(int err, long http);

/** Fills @st for a transfer that got no answer: curl's code and text. */
void s3_status_from_curl(struct s3_status *st, CURLcode cc,
			 const char *curl_err);

/* ---- s3_request.c ---------------------------------------------------------
 */

/**
 * Performs @x in the calling thread with retries, within the client's
 * budget of attempts and time; a broken ranged GET resumes after its last
 * good byte. Returns 0 or -errno with details in @st (may be NULL).
 */
int s3_perform(struct s3_xfer *x, struct s3_status *st);

#endif /* HINTFS_PREFETCH_S3_S3_INTERNAL_H */
