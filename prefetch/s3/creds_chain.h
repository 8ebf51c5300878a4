/**
 * prefetch/s3/creds_chain.h - the AWS SDKs' default credential chain, built
 * from the environment and the profile files (for fs's options).
 *
 * Order (first that answers wins, as in the SDKs):
 *   1. environment: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY
 *      (+ AWS_SESSION_TOKEN); skipped when -o profile= names a profile;
 *   2. web identity: AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE
 *      (+ AWS_ROLE_SESSION_NAME), STS AssumeRoleWithWebIdentity;
 *   3. the profile: role_arn with source_profile, credential_source or
 *      web_identity_token_file (STS AssumeRole...); else static keys of
 *      the credentials file; else credential_process; else static keys
 *      of the config file;
 *   4. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
 *      (on 169.254.170.2) or AWS_CONTAINER_CREDENTIALS_FULL_URI, with
 *      AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE or _TOKEN;
 *   5. EC2 instance metadata (IMDSv2), unless AWS_EC2_METADATA_DISABLED;
 *      AWS_EC2_METADATA_SERVICE_ENDPOINT moves it.
 * STS is reached at AWS_ENDPOINT_URL_STS, else AWS_ENDPOINT_URL, else the
 * profile's "sts =" endpoint_url or endpoint_url, else the regional
 * endpoint of the profile's region (the global one under
 * sts_regional_endpoints = legacy).
 */
#ifndef HINTFS_PREFETCH_S3_CREDS_CHAIN_H
#define HINTFS_PREFETCH_S3_CREDS_CHAIN_H

#include "prefetch/s3/aws_config.h"
#include "prefetch/s3/s3.h"

#include <stdbool.h>
#include <stddef.h>

/** At most this many providers in a chain. */
#define CREDS_CHAIN_MAX 5

struct creds_chain_req {
	const struct aws_config *aws; /**< resolved profile, files, region */
	bool profile_named;	      /**< -o profile= given */
	const char *ca_file;	      /**< for https STS / container URLs */
	bool insecure;
	int process_timeout_ms; /**< credential_process; 0: default */
};

/**
 * Fills @chain (CREDS_CHAIN_MAX slots) with the providers in order and
 * their number in *@n; a source that is not set up here becomes a
 * provider that says why (for the one-line error of creds_start()).
 * Returns 0 or -ENOMEM (then nothing is left in @chain). Not thread-safe
 * (getenv): call while parsing options.
 */
int creds_chain_build(const struct creds_chain_req *rq,
		      struct creds_provider **chain, size_t *n);

/**
 * Checks @url, the value of AWS_CONTAINER_CREDENTIALS_FULL_URI, as the
 * SDKs do before they send it the authorization token: parsed with
 * libcurl's URL API, http or https, no user info, and over plain http a
 * host that is exactly the loopback or the ECS/EKS agent.
 * Returns 0 with the URL in libcurl's spelling in *@out (malloc'd, the
 * caller frees it; fetch that one), -EINVAL with a one-line reason in
 * @why that quotes the URL without its user info, or -ENOMEM. Any thread.
 */
int creds_container_url_check(const char *url, char **out, char *why,
			      size_t why_len);

#endif /* HINTFS_PREFETCH_S3_CREDS_CHAIN_H */
