/**
 * prefetch/s3/sigv4.h - AWS Signature Version 4, under S3's rules (private).
 *
 * S3 differs from the generic SigV4 rules in two ways that matter here:
 * the path is URI-encoded once (never twice) and never normalized ("a/./b"
 * and "a//b" are distinct keys), and the payload hash is sent in
 * x-amz-content-sha256 and signed.
 *
 * Nothing here allocates behind the caller's back except where a function
 * says it returns malloc'd memory. All functions are pure and thread-safe.
 */
#ifndef HINTFS_PREFETCH_S3_SIGV4_H
#define HINTFS_PREFETCH_S3_SIGV4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** SHA-256 of the empty payload, hex: the payload hash of every GET. */
#define SIGV4_EMPTY_SHA256                                                     \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

struct sigv4_header {
	const char *name;  /**< any case; canonicalized to lower case */
	const char *value; /**< trimmed, inner runs of spaces folded */
};

struct sigv4_creds {
	const char *access_key;
	const char *secret_key;
	const char *session_token; /**< NULL when none; then not signed */
};

struct sigv4_request {
	const char *method; /**< "GET", "HEAD", ... */
	const char *path;   /**< as sent on the wire: already URI-encoded
				 once (see sigv4_uri_encode), begins '/' */
	const char *query;  /**< as sent on the wire, without '?'; may be
				 "" or NULL; pairs are re-canonicalized
				 (decoded, re-encoded, sorted) */
	const struct sigv4_header *headers; /**< all headers to sign, "host"
					       included (with ":port" when
					       not the scheme's default) */
	size_t n_headers;
	const char *payload_hash; /**< hex SHA-256, or SIGV4_UNSIGNED_PAYLOAD */
	const char *amz_date;	  /**< "YYYYMMDDTHHMMSSZ", the x-amz-date */
	const char *region;	  /**< "us-east-1" */
	const char *service;	  /**< "s3" */
};

struct sigv4_result {
	char *canonical_request; /**< malloc'd */
	char *string_to_sign;	 /**< malloc'd */
	char *signed_headers;	 /**< malloc'd, "host;x-amz-date" */
	char *authorization;	 /**< malloc'd, the Authorization value */
	char signature[65];	 /**< hex, NUL-terminated */
};

/**
 * Signs @req with @creds. Fills @out; its strings are malloc'd and owned by
 * the caller, released with sigv4_result_fini() (also after an error).
 * Returns 0, -EINVAL for a malformed request (bad date, bad percent escape
 * in the query), or -ENOMEM.
 */
int sigv4_sign(const struct sigv4_creds *creds, const struct sigv4_request *req,
	       struct sigv4_result *out);

/**
 * The signing key of one day, region, service and secret, derived once (four
 * chained HMACs) and reused by every request of that day. Owned by the
 * caller; zero-initialize it, use it from one thread at a time (or under the
 * caller's lock), and wipe it with sigv4_key_fini(). It holds no copy of the
 * secret, only its SHA-256, so a rotated secret is noticed and the key
 * derived again.
 */
struct sigv4_key {
	char scope[96];		      /**< "date8/region/service", or "" */
	unsigned char secret_sum[32]; /**< SHA-256 of the secret it is of */
	unsigned char key[32];	      /**< the derived signing key */
	uint64_t derived;	      /**< times derived: a count for tests */
};

/**
 * sigv4_sign(), with the signing key taken from @key when it is for the
 * same day, region, service and secret, else derived and stored there.
 * @key may be NULL (then it is sigv4_sign()). Same returns and ownership.
 */
int sigv4_sign_key(const struct sigv4_creds *creds,
		   const struct sigv4_request *req, struct sigv4_key *key,
		   struct sigv4_result *out);

/** Wipes @key (its derived key is as good as the secret for a day). */
void sigv4_key_fini(struct sigv4_key *key);

/** Frees what sigv4_sign() stored in @res and zeroes it. Accepts a zeroed one.
 */
void sigv4_result_fini(struct sigv4_result *res);

/**
 * URI-encodes @len bytes of @in the S3 way: unreserved characters
 * (A-Z a-z 0-9 - . _ ~) stay, every other byte becomes %XX (upper-case
 * hex); '/' stays when @keep_slash (object key in a path) and becomes %2F
 * otherwise (query names and values). Returns a malloc'd NUL-terminated
 * string owned by the caller, or NULL when out of memory.
 */
char *sigv4_uri_encode(const char *in, size_t len, bool keep_slash);

/**
 * Formats @t (seconds since the epoch, UTC) as the x-amz-date
 * "YYYYMMDDTHHMMSSZ" into @buf, which must hold 17 bytes.
 */
void sigv4_format_date(long long t, char buf[17]);

#endif /* HINTFS_PREFETCH_S3_SIGV4_H */
