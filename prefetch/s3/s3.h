/**
 * prefetch/s3/s3.h - the S3 client (public header of prefetch/s3/).
 *
 * One client per mounted bucket, shared by all threads, that lists a
 * prefix and reads byte ranges of objects; every call is blocking and
 * thread-safe, and concurrent calls run on separate connections from a
 * pool, so readers of different files never wait on each other. The
 * folder holds everything the client needs to sign a request: SigV4, the
 * credential providers (creds.h) and, for the daemon's options, the AWS
 * configuration files (aws_config.h) and the SDKs' credential chain
 * (creds_chain.h). The engine drives its own transfers through s3_xfer.h.
 * Nothing here knows the engine or the cache.
 *
 * Errors are -errno values. The mapping from HTTP statuses, S3 error codes
 * and curl codes happens once, in the S3 client (s3_error.c); callers that
 * need to tell the user more (mount-time errors) get the details in a
 * struct s3_status.
 */
#ifndef HINTFS_PREFETCH_S3_S3_H
#define HINTFS_PREFETCH_S3_S3_H

#include "prefetch/s3/creds.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Where and how to reach the bucket. All strings are copied by create. */
struct s3_config {
	const char *bucket;	/**< "my-bucket" */
	const char *endpoint;	/**< "https://host[:port]", no path */
	const char *region;	/**< signing region, "us-east-1" */
	bool path_style;	/**< /bucket/key instead of bucket.host/key */
	bool no_sign;		/**< anonymous requests, no Authorization */
	bool insecure;		/**< skip TLS verification (-o insecure) */
	const char *ca_file;	/**< extra CA bundle, or NULL */
	struct creds *creds;	/**< not owned, outlives the client; NULL:
				     fixed keys from the three below */
	const char *access_key; /**< NULL with no_sign or creds */
	const char *secret_key;
	const char *session_token; /**< NULL when none */
	int max_attempts;	   /**< tries per request; 0 = default (10);
					the one budget: the engine's GETs
					follow it too (common/retry.h) */
	int retry_time_ms;	   /**< give up retrying after this long;
					0 = default (60 s) */
	int stall_timeout_s;	   /**< abandon an attempt that moves no byte
					for this long; 0 = default (5 s) */
	int list_workers;	   /**< ListObjectsV2 requests in flight for
					a listing of more than one page;
					0 = default (16), 1 = one page after
					another */
};

/**
 * What kind of failure a request met, decided once, in the S3 client, from
 * the HTTP status, the S3 error code and the curl code. Callers count and
 * decide by it (the engine halves its in-flight limit on SLOWDOWN, fs
 * invalidates on STALE) and never look at a status themselves.
 */
enum s3_err_kind {
	S3_ERR_NONE = 0, /**< no request failed (a local error, or none) */
	S3_ERR_SLOWDOWN, /**< throttled: 503 SlowDown, 429; back off */
	S3_ERR_SERVER,	 /**< any other 5xx */
	S3_ERR_NETWORK,	 /**< no answer: reset, timeout, refused, TLS,
			      truncated body */
	S3_ERR_STALE,	 /**< the object changed or went since the listing
			      (412 on If-Match, NoSuchKey) */
	S3_ERR_DENIED,	 /**< credentials or signature refused (401/403) */
	S3_ERR_OTHER,	 /**< anything else: another 4xx, a malformed
			      answer */
};

/**
 * What a GET's answer said about its object, from its headers: filled
 * after s3_xfer_want_meta() (s3_xfer.h), reset by each attempt. The
 * x-amz-meta-hintfs-* fields are those a shared cache tier's objects carry
 * (prefetch/tier.h);
 * "" or has_* false when the answer did not carry them.
 */
struct s3_obj_meta {
	char origin_etag[128]; /**< x-amz-meta-hintfs-etag */
	char sum[32];	       /**< x-amz-meta-hintfs-xxh3, hex */
	char mac[72];	       /**< x-amz-meta-hintfs-mac, hex (64) */
	uint64_t origin_size;  /**< x-amz-meta-hintfs-size */
	bool has_origin_size;
	uint64_t length; /**< Content-Length of a 2xx answer */
	bool has_length;
};

/** What the server or the connection said when a request failed. */
struct s3_status {
	enum s3_err_kind kind; /**< S3_ERR_NONE when no request failed */
	long http;	       /**< HTTP status, 0 when no response came; for
				    messages (s3_status_describe()) only */
	char code[64];	       /**< S3 error code ("NoSuchBucket"), or curl's
				    reason when no response came; "" if none */
	char message[256];     /**< server's <Message> or curl's text */
};

/** One listed object, passed to an s3_list_cb. */
struct s3_object {
	const char *key; /**< full key (prefix included), decoded; may
			      hold any byte but NUL */
	size_t key_len;
	uint64_t size;
	int64_t mtime;	  /**< LastModified, seconds since the epoch */
	const char *etag; /**< as sent, quotes included */
};

/**
 * Called once per listed object, in key order. The strings are valid only
 * during the call. Return 0 to go on, or a -errno that stops the listing
 * and becomes s3_list()'s result.
 */
typedef int (*s3_list_cb)(void *arg, const struct s3_object *obj);

struct s3_client;

/**
 * Creates a client for @cfg. Returns 0 and stores it in *@out, -EINVAL
 * for a bad endpoint (message in @err of @err_len bytes), or -ENOMEM.
 * Call from one thread; the client may then be used from any thread.
 */
int s3_client_create(const struct s3_config *cfg, struct s3_client **out,
		     char *err, size_t err_len);

/** Destroys @c after every call on it has returned. Accepts NULL. */
void s3_client_destroy(struct s3_client *c);

/**
 * Lists every object under @prefix (may be "") with paginated
 * ListObjectsV2 (encoding-type=url), calling @cb for each, exactly once.
 * A listing longer than one page runs up to cfg.list_workers requests at
 * once over disjoint key ranges (found with a few delimiter pages); @cb is
 * then called from those threads, one call at a time, in no set order.
 * Returns 0, the first non-zero result of @cb, or a -errno for the request
 * that failed after its retries, with details in @st (may be NULL).
 */
int s3_list(struct s3_client *c, const char *prefix, s3_list_cb cb, void *arg,
	    struct s3_status *st);

/**
 * Reads @len bytes at @off of object @key (@key_len bytes) into @buf. When
 * @etag is not NULL the request carries If-Match, so a changed object
 * fails with -ESTALE instead of returning bytes of another version. The
 * caller keeps @off + @len within the object's listed size. Returns the
 * number of bytes read (== @len unless the object is now shorter), or a
 * -errno with details in @st (may be NULL): -ESTALE (changed or deleted
 * object), -EACCES, -EIO, -ETIMEDOUT, ...
 */
ssize_t s3_get_range(struct s3_client *c, const char *key, size_t key_len,
		     const char *etag, uint64_t off, size_t len, void *buf,
		     struct s3_status *st);

/** One x-amz-meta-NAME header of a PUT: @name without the prefix. */
struct s3_meta_header {
	const char *name;  /**< "hintfs-etag": lower case, [a-z0-9-] */
	const char *value; /**< printable ASCII */
};

/**
 * Writes @len bytes at @data as object @key (@key_len bytes) with the
 * user metadata @meta (@n_meta headers, at most 8), in one PUT, retried
 * within the client's budget. The body is not signed (UNSIGNED-PAYLOAD):
 * what protects it is the checksum the caller puts in @meta. Returns 0 or
 * a -errno with details in @st (may be NULL). Any thread; blocks.
 */
int s3_put_object(struct s3_client *c, const char *key, size_t key_len,
		  const void *data, size_t len,
		  const struct s3_meta_header *meta, size_t n_meta,
		  struct s3_status *st);

/**
 * The requests sent so far (attempts, retries included): ListObjectsV2
 * pages in *@lists, GETs of objects in *@gets. Any thread.
 */
void s3_client_counts(struct s3_client *c, uint64_t *lists, uint64_t *gets);

/** PUTs sent so far (attempts, retries included). Any thread. */
uint64_t s3_client_puts(struct s3_client *c);

/** The client's credentials (for stats), or NULL with no_sign. */
struct creds *s3_client_creds(struct s3_client *c);

/**
 * Connections opened so far (a request on a kept-alive connection opens
 * none): with s3_client_counts(), how well connections are reused. Any
 * thread.
 */
uint64_t s3_client_connects(struct s3_client *c);

/**
 * Writes a one-line description of a failed request into @buf: the S3
 * code and message, or the connection problem, with a hint at the usual
 * cause ("check AWS_SECRET_ACCESS_KEY"). Never includes credentials.
 */
void s3_status_describe(const struct s3_status *st, int err, char *buf,
			size_t len);

#endif /* HINTFS_PREFETCH_S3_S3_H */
