/**
 * prefetch/s3/creds.h - where the S3 client's keys come from, and how they
 * stay fresh (part of prefetch's public interface, via prefetch.h).
 *
 * A struct creds_provider knows one way to get credentials: fixed keys,
 * a credential_process, STS (AssumeRole, AssumeRoleWithWebIdentity),
 * the container endpoint, EC2 instance metadata. fs/ builds the list in
 * the SDKs' order from the environment and the profile; creds_start()
 * asks each in turn at mount, keeps the first that answers, and from then
 * on a thread of its own fetches again well before the credentials
 * expire, or when the provider's files change, or when the server
 * said the credentials in use have expired. Signing takes a snapshot with
 * creds_get(), which never waits on the network.
 *
 * Nothing here logs a secret: messages name the provider, the files and
 * the URLs, and at most the last four characters of an access key id.
 */
#ifndef HINTFS_PREFETCH_S3_CREDS_H
#define HINTFS_PREFETCH_S3_CREDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** One set of credentials. Strings malloc'd; wiped by creds_value_fini. */
struct creds_value {
	char *access_key;
	char *secret_key;
	char *session_token; /**< NULL when none */
	int64_t expires;     /**< seconds since the epoch; 0: never */
};

/** Wipes and frees the strings of @v and zeroes it. Accepts a zeroed one. */
void creds_value_fini(struct creds_value *v);

/** Wipes the NUL-terminated @s (a secret, a token, a header holding one)
 *  and frees it. Accepts NULL. */
void creds_wipe_free(char *s);

/**
 * One source of credentials. Embedded first in each provider's own struct.
 * fetch() may block (network, a child process) and is called from one
 * thread at a time: creds_start()'s caller, then the refresh thread.
 */
struct creds_provider {
	/** For messages and stats: "environment", "web identity", ... */
	const char *name;
	/**
	 * Fills @out. Returns 0; -ENOENT when this provider is not set up
	 * here (the chain goes on to the next); any other -errno when it is
	 * and failed. Either way a reason of one line, no secret, in @err.
	 */
	int (*fetch)(struct creds_provider *p, struct creds_value *out,
		     char *err, size_t err_len);
	/** Whether a file it reads changed since its last fetch (a sidecar
	 *  rotated it). NULL: nothing to watch. Cheap (stat). */
	bool (*changed)(struct creds_provider *p);
	/** Frees the provider. */
	void (*destroy)(struct creds_provider *p);
};

/** Destroys @p through its destroy(). Accepts NULL. */
void creds_provider_destroy(struct creds_provider *p);

/** Network settings the HTTP providers share (copied by each create). */
struct creds_net {
	const char *ca_file; /**< extra CA bundle, or NULL */
	bool insecure;	     /**< no TLS verification (-o insecure) */
	int timeout_ms;	     /**< per request; 0: the provider's default */
};

/* ---- providers (each returns NULL when out of memory) ------------------ */

/** Fixed keys (the environment, -o keys, a test). @name is copied. */
struct creds_provider *creds_static_create(const char *name,
					   const char *access_key,
					   const char *secret_key,
					   const char *session_token);

/**
 * A provider that is never set up: fetch() says -ENOENT with @reason, so
 * the chain's error names it ("environment: AWS_ACCESS_KEY_ID not set").
 * A non-zero @err makes it a failure instead (a half-configured source).
 */
struct creds_provider *creds_absent_create(const char *name, int err,
					   const char *reason);

/**
 * credential_process: runs @command with /bin/sh -c, with a timeout of
 * @timeout_ms (0: 60 s), and parses its stdout (credential_process JSON,
 * Version 1). The child gets our environment minus the AWS secrets it does
 * not need (AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, ...).
 */
struct creds_provider *
creds_process_create(const char *name, const char *command, int timeout_ms);

/** Where and how to call STS. */
struct creds_sts_config {
	const char *endpoint; /**< "https://sts.us-east-1.amazonaws.com" */
	const char *region;   /**< signing region */
	struct creds_net net;
};

/**
 * AssumeRoleWithWebIdentity with the token read from @token_file at each
 * fetch (the file is watched for changes). @session_name may be NULL.
 */
struct creds_provider *
creds_web_identity_create(const char *name, const struct creds_sts_config *sts,
			  const char *role_arn, const char *token_file,
			  const char *session_name);

/**
 * AssumeRole signed with the credentials of @source (owned from here on,
 * also when this returns NULL). @external_id and @session_name may be
 * NULL; @duration_s 0 lets STS choose.
 */
struct creds_provider *
creds_assume_role_create(const char *name, const struct creds_sts_config *sts,
			 struct creds_provider *source, const char *role_arn,
			 const char *session_name, const char *external_id,
			 int duration_s);

/**
 * The container credentials endpoint (ECS task role, EKS Pod Identity):
 * GET @url, with an Authorization header read from @token_file at each
 * fetch, else @token (either may be NULL).
 */
struct creds_provider *creds_container_create(const char *url,
					      const char *token,
					      const char *token_file,
					      const struct creds_net *net);

/**
 * EC2 instance metadata at @endpoint ("http://169.254.169.254"): IMDSv2
 * (a session token from PUT /latest/api/token), falling back to IMDSv1
 * when the PUT is refused (403, 404, 405) unless @v1_disabled.
 */
struct creds_provider *creds_imds_create(const char *endpoint, bool v1_disabled,
					 const struct creds_net *net);

/* ---- the credentials of one mount -------------------------------------- */

struct creds;

/** What signing uses: immutable, reference-counted. */
struct creds_snap {
	const char *access_key;
	const char *secret_key;
	const char *session_token; /**< NULL when none */
	int64_t expires;	   /**< 0: never */
	uint64_t gen;		   /**< bumps at each change */
};

/**
 * Asks the @n providers of @chain in turn (blocking) and keeps the first
 * that gives credentials; the others are destroyed. When the credentials
 * expire or the provider watches files, starts the refresh thread.
 * Takes ownership of every provider in @chain, whatever the result.
 * Returns 0 and stores the object in *@out, or the first failure that was
 * not "not set up here" (else -ENOENT), with one line in @err naming each
 * provider tried and why it gave nothing. Call from one thread.
 */
int creds_start(struct creds_provider **chain, size_t n, struct creds **out,
		char *err, size_t err_len);

/** Stops the thread and frees everything, wiping secrets. NULL ok. */
void creds_stop(struct creds *c);

/**
 * The current credentials; release with creds_put(). Never blocks on the
 * network (a mutex held for a pointer copy). Any thread.
 */
const struct creds_snap *creds_get(struct creds *c);

/** Releases a snapshot of creds_get(). Accepts NULL. Any thread. */
void creds_put(const struct creds_snap *s);

/**
 * The server refused snapshot generation @gen as expired: refresh now,
 * once per generation, however many requests say so. Returns true when a
 * refresh can help (the provider issues new credentials, or newer ones
 * are already there). Any thread; does not block.
 */
bool creds_expired(struct creds *c, uint64_t gen);

/**
 * Waits up to @timeout_ms for credentials newer than @gen (after
 * creds_expired()). Returns true when they came. Blocks: for threads
 * that may wait (a FUSE reader), never the engine's loop.
 */
bool creds_wait_newer(struct creds *c, uint64_t gen, int timeout_ms);

/** For stats and hintfs-ctl info: a snapshot, no secret in it. */
struct creds_info {
	char provider[64];  /**< the provider in use */
	char key_tail[5];   /**< last four characters of the key id */
	int64_t expires;    /**< 0: never */
	uint64_t refreshes; /**< successful fetches after the first */
	uint64_t refresh_failures;
	int64_t last_refresh; /**< seconds since the epoch; 0: none yet */
};

/** Fills @out. Any thread. */
void creds_get_info(struct creds *c, struct creds_info *out);

/**
 * A stamp of @path (inode, size, mtime; "-" when missing) for a provider's
 * changed(): equal stamps, same file. Thread-safe.
 */
void creds_file_stamp(const char *path, char stamp[64]);

/* ---- parsers, for the providers and the unit tests ---------------------- */

/**
 * Parses an ISO 8601 time as AWS writes them ("2026-11-25T01:02:03Z",
 * with optional fractional seconds, 'Z' or a +HH:MM / -HH:MM offset) into
 * seconds since the epoch. Returns 0 or -EINVAL.
 */
int creds_parse_time(const char *s, int64_t *out);

/**
 * Parses credential_process output (@len bytes): a JSON object with
 * Version 1, AccessKeyId, SecretAccessKey, optional SessionToken and
 * Expiration. Returns 0, -EINVAL with a reason in @err, or -ENOMEM.
 */
int creds_parse_process_json(const char *text, size_t len,
			     struct creds_value *out, char *err,
			     size_t err_len);

/**
 * Parses the JSON of instance metadata or the container endpoint
 * (AccessKeyId, SecretAccessKey, Token, Expiration; IMDS's Code must be
 * "Success" when present). Returns 0, -EINVAL with @err, or -ENOMEM.
 */
int creds_parse_http_json(const char *text, size_t len, struct creds_value *out,
			  char *err, size_t err_len);

/**
 * Parses an STS answer (AssumeRoleResponse or
 * AssumeRoleWithWebIdentityResponse): its Credentials on success, or the
 * ErrorResponse's Code and Message into @err (returning -EACCES).
 * Returns 0, -EACCES, -EINVAL (not STS XML; reason in @err), -ENOMEM.
 */
int creds_parse_sts_xml(const char *text, size_t len, struct creds_value *out,
			char *err, size_t err_len);

#endif /* HINTFS_PREFETCH_S3_CREDS_H */
