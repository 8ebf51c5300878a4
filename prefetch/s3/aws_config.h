/**
 * prefetch/s3/aws_config.h - credentials, region and endpoint the way the
 * AWS CLI finds them (for fs's options).
 *
 * Sources, first found wins for each value:
 *   credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+
 *                AWS_SESSION_TOKEN), unless a profile was named explicitly
 *                (-o profile= / --profile), then the profile's
 *                aws_access_key_id / aws_secret_access_key /
 *                aws_session_token from the credentials file, then from the
 *                config file;
 *   region:      AWS_REGION, AWS_DEFAULT_REGION, the profile's region;
 *   endpoint:    AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's
 *                "s3 =" sub-section endpoint_url, its endpoint_url
 *                (none of these when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS
 *                is true).
 * The profile is -o profile=, else AWS_PROFILE, else AWS_DEFAULT_PROFILE,
 * else "default". The files are -o credentials_file= / config_file=, else
 * AWS_SHARED_CREDENTIALS_FILE / AWS_CONFIG_FILE, else ~/.aws/credentials
 * and ~/.aws/config, where ~ is $HOME or, when HOME is unset, the user's
 * home from the password database. An -o option of the daemon itself
 * (endpoint=, region=) beats all of these; options.c applies that.
 *
 * Nothing here logs; error messages name files and profiles, never keys.
 */
#ifndef HINTFS_PREFETCH_S3_AWS_CONFIG_H
#define HINTFS_PREFETCH_S3_AWS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

/** What the caller already knows (all may be NULL / false). */
struct aws_config_req {
	const char *profile;	      /**< named explicitly (-o profile=) */
	const char *credentials_file; /**< -o credentials_file= */
	const char *config_file;      /**< -o config_file= */
	bool need_credentials;	      /**< false with -o no_sign */
};

/** The result; every string malloc'd (NULL when not found). */
struct aws_config {
	char *profile; /**< the profile that was read */
	char *access_key;
	char *secret_key;
	char *session_token;
	char *region;
	char *endpoint;
	/** Where the keys came from, for messages: "environment",
	 *  "credentials file", "config file" (static), or NULL. */
	const char *creds_from;
	char *credentials_path; /**< the credentials file looked at */
	char *config_path;	/**< the config file looked at */
};

/**
 * Resolves @req against the environment and the two files into @c
 * (zeroed by the call). Returns 0; -ENOENT when a profile named explicitly
 * (by @req or AWS_PROFILE) is in neither file; -EINVAL when credentials are
 * needed and none were found, or the profile holds only a kind of
 * credentials hintfs cannot use (role_arn, sso_*, credential_process);
 * -ENOMEM. On error one line for the user is in @err (@err_len bytes).
 * Release @c with aws_config_fini() in every case. Not thread-safe
 * (getenv, getpwuid).
 */
int aws_config_load(const struct aws_config_req *req, struct aws_config *c,
		    char *err, size_t err_len);

/** Frees what aws_config_load() allocated, wiping the secrets. */
void aws_config_fini(struct aws_config *c);

/**
 * Called by aws_ini_parse() at each section header with @key and @value
 * NULL, then for each "key = value" of the section. @section is the name
 * between the brackets, trimmed; @key is lower case, and for a line of a
 * nested sub-section ("s3 =" followed by indented lines) it is
 * "s3.endpoint_url". Return non-zero to stop; aws_ini_parse() returns it.
 */
typedef int (*aws_ini_cb)(void *arg, const char *section, const char *key,
			  const char *value);

/**
 * Parses INI text of @len bytes as the AWS CLI reads its files: comments
 * start with '#' or ';' (at the start of a line, or after white space in a
 * value), '=' or ':' separate a key from its value, CRLF line ends are
 * fine, lines outside a section and lines that are not "key = value" are
 * skipped, lines may be of any length. Returns 0, -ENOMEM, or what @cb
 * returned. Thread-safe.
 */
int aws_ini_parse(const char *text, size_t len, aws_ini_cb cb, void *arg);

/**
 * The user's home directory: $HOME, else the password database's entry
 * (mount.fuse3 and boot-time mounts may run without HOME). NULL if none.
 * Not thread-safe (getpwuid).
 */
const char *aws_home_dir(void);

/** The profile keys hintfs reads (aws_profile_read()). */
enum aws_pkey {
	AWS_PK_ACCESS_KEY,
	AWS_PK_SECRET_KEY,
	AWS_PK_TOKEN,
	AWS_PK_REGION,
	AWS_PK_ENDPOINT,
	AWS_PK_S3_ENDPOINT,
	AWS_PK_ROLE_ARN,
	AWS_PK_CRED_PROCESS,
	AWS_PK_SSO,
	AWS_PK_WEB_IDENTITY,
	AWS_PK_SOURCE_PROFILE,
	AWS_PK_CRED_SOURCE,
	AWS_PK_SESSION_NAME,
	AWS_PK_EXTERNAL_ID,
	AWS_PK_DURATION,
	AWS_PK_STS_REGIONAL,
	AWS_PK_STS_ENDPOINT,
	AWS_PK_IMDS_ENDPOINT,
	AWS_PK_IMDS_V1_DISABLED,
	AWS_PK_COUNT
};

/** What the two files say about one profile; values malloc'd or NULL. */
struct aws_profile {
	bool found;		  /**< a section for it in either file */
	char *cred[AWS_PK_COUNT]; /**< from the credentials file */
	char *conf[AWS_PK_COUNT]; /**< from the config file */
};

/**
 * Reads profile @name from @cred_path and @conf_path (either may be NULL
 * or missing). Returns 0, -ENOMEM, or -errno for a file that exists but
 * cannot be read (reason in @err). Release @out with aws_profile_fini()
 * in every case. Thread-safe.
 */
int aws_profile_read(const char *cred_path, const char *conf_path,
		     const char *name, struct aws_profile *out, char *err,
		     size_t err_len);

/** Wipes and frees what aws_profile_read() stored. */
void aws_profile_fini(struct aws_profile *p);

/** Key @k of @p, the credentials file's value first; NULL if unset or
 *  empty. Valid until aws_profile_fini(). */
const char *aws_profile_get(const struct aws_profile *p, enum aws_pkey k);

#endif /* HINTFS_PREFETCH_S3_AWS_CONFIG_H */
