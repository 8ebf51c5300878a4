/**
 * prefetch/prefetch.h - the network side of hintfs (public header).
 *
 * For now this is the S3 client: one object per mounted bucket, shared by
 * all threads, that lists a prefix and reads byte ranges of objects. Every
 * call is blocking and thread-safe; concurrent calls run on separate
 * connections from a pool, so readers of different files never wait on
 * each other.
 *
 * Errors are -errno values. The mapping from HTTP statuses, S3 error codes
 * and curl codes to errno happens in one function of s3_client.c; callers
 * that need to tell the user more (mount-time errors) get the details in a
 * struct s3_status.
 */
#ifndef HINTFS_PREFETCH_PREFETCH_H
#define HINTFS_PREFETCH_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** Where and how to reach the bucket. All strings are copied by create. */
struct s3_config {
	const char *bucket;        /**< "my-bucket" */
	const char *endpoint;      /**< "https://host[:port]", no path */
	const char *region;        /**< signing region, "us-east-1" */
	bool path_style;           /**< /bucket/key instead of bucket.host/key */
	bool no_sign;              /**< anonymous requests, no Authorization */
	bool insecure;             /**< skip TLS verification (-o insecure) */
	const char *ca_file;       /**< extra CA bundle, or NULL */
	const char *access_key;    /**< NULL with no_sign */
	const char *secret_key;
	const char *session_token; /**< NULL when none */
	int max_attempts;          /**< tries per request, >= 1 */
};

/** What the server or the connection said when a request failed. */
struct s3_status {
	long http;         /**< HTTP status, 0 when no response came */
	char code[64];     /**< S3 error code ("NoSuchBucket"), or curl's
			        reason when no response came; "" if none */
	char message[256]; /**< server's <Message> or curl's text */
};

/** One listed object, passed to an s3_list_cb. */
struct s3_object {
	const char *key;  /**< full key (prefix included), decoded; may
			       hold any byte but NUL */
	size_t key_len;
	uint64_t size;
	int64_t mtime;    /**< LastModified, seconds since the epoch */
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
 * ListObjectsV2 (encoding-type=url), calling @cb for each. Returns 0, the
 * first non-zero result of @cb, or a -errno for the request that failed
 * after its retries, with details in @st (may be NULL).
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

/**
 * Writes a one-line description of a failed request into @buf: the S3
 * code and message, or the connection problem, with a hint at the usual
 * cause ("check AWS_SECRET_ACCESS_KEY"). Never includes credentials.
 */
void s3_status_describe(const struct s3_status *st, int err, char *buf,
			size_t len);

/* ---- hint files (DESIGN.md 2.2) ------------------------------------------ */

/** What resolving a path gives when the path is not in the listing. */
#define HINT_NO_ID UINT32_MAX

/**
 * Resolves @path (@len bytes, relative to the mount root, normalized: no
 * empty, "." or ".." components, no leading '/') to the caller's object id,
 * or HINT_NO_ID when it is not a file of the listing.
 */
typedef uint32_t (*hint_resolve_cb)(void *arg, const char *path, size_t len);

/** What a hint held besides its entries; all counted, none fatal. */
struct hint_report {
	uint64_t lines;       /**< lines read */
	uint64_t entries;     /**< entries resolved to objects */
	uint64_t unknown;     /**< paths not in the listing */
	uint64_t too_long;    /**< lines over HINT_LINE_MAX bytes */
	uint64_t bad_utf8;    /**< lines that are not UTF-8 */
	uint64_t dotdot;      /**< paths with a ".." component */
	uint64_t outside;     /**< absolute paths not under the mount point */
	int64_t epoch;        /**< from "#hintfs v1 epoch=N", else -1 */
	char first_bad[160];  /**< the first refused line, printable, with why */
};

/** Longest line taken as an entry (DESIGN.md 2.2). */
#define HINT_LINE_MAX 4096

/**
 * Parses a hint file of @len bytes. @mountpoint (absolute, no trailing
 * '/') is stripped from absolute entries. Stores the resolved ids, in file
 * order and with duplicates, in a malloc'd array *@ids (owned by the
 * caller; *@n of them; NULL when empty) and fills @rep. Returns 0 or
 * -ENOMEM; bad lines are counted in @rep, never fatal. Thread-safe.
 */
int hint_parse(const char *text, size_t len, const char *mountpoint,
	       hint_resolve_cb resolve, void *arg, uint32_t **ids, size_t *n,
	       struct hint_report *rep);

#endif /* HINTFS_PREFETCH_PREFETCH_H */
