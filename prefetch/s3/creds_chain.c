/*
 * prefetch/s3/creds_chain.c - turns the environment and the profile into
 * the list of credential providers, in the AWS SDKs' order (see
 * creds_chain.h).
 *
 * Owns which variables and profile keys select which provider, the STS
 * endpoint and region, and the provider of a profile's static keys, which
 * re-reads the files when they change (a sidecar rotating them). The
 * network and process providers themselves live in prefetch/creds*.c.
 * Invariant: every source the SDKs would ask gets a slot in the chain,
 * either a real provider or one that says why it is not set up, so the
 * mount-time error names them all; no reason quotes a value that could
 * be a secret.
 */
#include "prefetch/s3/creds_chain.h"

#include "common/log.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A source_profile chain deeper than this is a loop (the SDKs stop too). */
#define CHAIN_MAX_DEPTH 4
/* The ECS agent's address: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is a
 * path on it. */
#define CONTAINER_HOST	 "http://169.254.170.2"
#define IMDS_ENDPOINT	 "http://169.254.169.254"
#define IMDS_ENDPOINT_V6 "http://[fd00:ec2::254]"

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static bool is_true(const char *v)
{
	return v && !strcasecmp(v, "true");
}

struct ctx {
	const struct creds_chain_req *rq;
	struct creds_sts_config sts;
	char sts_endpoint[512];
	struct creds_net net;
};

/* ---- a profile's static keys, re-read when the files change -------------- */

struct profile_prov {
	struct creds_provider base;
	char *name;
	char *profile;
	char *cred_path;
	char *conf_path;
	char stamp[2][64];
};

static int profile_fetch(struct creds_provider *p, struct creds_value *out,
			 char *err, size_t err_len)
{
	struct profile_prov *pp = (struct profile_prov *)p;
	struct aws_profile prof;
	char *const *vals = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	creds_file_stamp(pp->cred_path, pp->stamp[0]);
	creds_file_stamp(pp->conf_path, pp->stamp[1]);
	rc = aws_profile_read(pp->cred_path, pp->conf_path, pp->profile, &prof,
			      err, err_len);
	if (rc) {
		aws_profile_fini(&prof);
		return rc == -ENOMEM ? rc : -EACCES;
	}
	/* NOTE(s3): the credentials file's pair beats the config file's. */
	if (prof.cred[AWS_PK_ACCESS_KEY] && prof.cred[AWS_PK_SECRET_KEY]) {
		vals = prof.cred;
	} else if (prof.conf[AWS_PK_ACCESS_KEY] &&
		   prof.conf[AWS_PK_SECRET_KEY]) {
		vals = prof.conf;
	}
	if (!vals || !*vals[AWS_PK_ACCESS_KEY] || !*vals[AWS_PK_SECRET_KEY]) {
		snprintf(err, err_len,
			 "profile '%s' no longer has "
			 "aws_access_key_id and aws_secret_access_key",
			 pp->profile);
		aws_profile_fini(&prof);
		return -EACCES;
	}
	out->access_key = strdup(vals[AWS_PK_ACCESS_KEY]);
	out->secret_key = strdup(vals[AWS_PK_SECRET_KEY]);
	out->session_token = vals[AWS_PK_TOKEN] && *vals[AWS_PK_TOKEN]
				 ? strdup(vals[AWS_PK_TOKEN])
				 : NULL;
	if (!out->access_key || !out->secret_key ||
	    (vals[AWS_PK_TOKEN] && *vals[AWS_PK_TOKEN] &&
	     !out->session_token)) {
		creds_value_fini(out);
		rc = -ENOMEM;
	}
	aws_profile_fini(&prof);
	return rc;
}

static bool profile_changed(struct creds_provider *p)
{
	struct profile_prov *pp = (struct profile_prov *)p;
	char a[64], b[64];

	creds_file_stamp(pp->cred_path, a);
	creds_file_stamp(pp->conf_path, b);
	return strcmp(a, pp->stamp[0]) || strcmp(b, pp->stamp[1]);
}

static void profile_destroy(struct creds_provider *p)
{
	struct profile_prov *pp = (struct profile_prov *)p;

	free(pp->name);
	free(pp->profile);
	free(pp->cred_path);
	free(pp->conf_path);
	free(pp);
}

static struct creds_provider *profile_create(const struct aws_config *aws,
					     const char *profile)
{
	struct profile_prov *pp = calloc(1, sizeof(*pp));

	if (!pp)
		return NULL;
	pp->base = (struct creds_provider){.fetch = profile_fetch,
					   .changed = profile_changed,
					   .destroy = profile_destroy};
	if (asprintf(&pp->name, "profile '%s'", profile) < 0)
		pp->name = NULL;
	pp->profile = strdup(profile);
	pp->cred_path =
	    aws->credentials_path ? strdup(aws->credentials_path) : NULL;
	pp->conf_path = aws->config_path ? strdup(aws->config_path) : NULL;
	pp->base.name = pp->name;
	if (!pp->name || !pp->profile ||
	    (aws->credentials_path && !pp->cred_path) ||
	    (aws->config_path && !pp->conf_path)) {
		profile_destroy(&pp->base);
		return NULL;
	}
	return &pp->base;
}

/* ---- STS -------------------------------------------------------------------
 */

/* NOTE(s3): the regions whose "legacy" STS endpoint is the global one
 * (botocore's _LEGACY_GLOBAL_STS_REGIONS). */
static bool legacy_global(const char *r)
{
	static const char *const g[] = {
	    "ap-northeast-1", "ap-south-1", "ap-southeast-1",
	    "ap-southeast-2", "aws-global", "ca-central-1",
	    "eu-central-1",   "eu-north-1", "eu-west-1",
	    "eu-west-2",      "eu-west-3",  "sa-east-1",
	    "us-east-1",      "us-east-2",  "us-west-1",
	    "us-west-2",
	};

	for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++)
		if (!strcmp(r, g[i]))
			return true;
	return false;
}

static void sts_setup(struct ctx *x, const struct aws_profile *prof)
{
	const struct aws_config *aws = x->rq->aws;
	const char *e = env("AWS_ENDPOINT_URL_STS");
	const char *mode = env("AWS_STS_REGIONAL_ENDPOINTS");
	const char *region = aws->region ? aws->region : NULL;

	if (is_true(env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")))
		e = NULL;
	else if (!e)
		e = env("AWS_ENDPOINT_URL");
	if (!e && !is_true(env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")))
		e = aws_profile_get(prof, AWS_PK_STS_ENDPOINT);
	if (!e && !is_true(env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")))
		e = aws_profile_get(prof, AWS_PK_ENDPOINT);
	if (!mode)
		mode = aws_profile_get(prof, AWS_PK_STS_REGIONAL);
	if (e) {
		snprintf(x->sts_endpoint, sizeof(x->sts_endpoint), "%s", e);
	} else if (!region || (mode && !strcasecmp(mode, "legacy") &&
			       legacy_global(region))) {
		snprintf(x->sts_endpoint, sizeof(x->sts_endpoint),
			 "https://sts.amazonaws.com");
		region = "us-east-1";
	} else {
		snprintf(x->sts_endpoint, sizeof(x->sts_endpoint),
			 "https://sts.%s.amazonaws.com%s", region,
			 strncmp(region, "cn-", 3) ? "" : ".cn");
	}
	x->net = (struct creds_net){.ca_file = x->rq->ca_file,
				    .insecure = x->rq->insecure};
	x->sts = (struct creds_sts_config){
	    .endpoint = x->sts_endpoint,
	    .region = region ? region : "us-east-1",
	    .net = x->net,
	};
}

/* ---- sources --------------------------------------------------------------
 */

static struct creds_provider *env_provider(void)
{
	const char *ak = env("AWS_ACCESS_KEY_ID"),
		   *sk = env("AWS_SECRET_ACCESS_KEY");

	if (ak && sk)
		return creds_static_create("environment", ak, sk,
					   env("AWS_SESSION_TOKEN"));
	if (ak || sk)
		return creds_absent_create("environment", -EINVAL,
					   ak ? "AWS_ACCESS_KEY_ID is set but "
						"not AWS_SECRET_ACCESS_KEY"
					      : "AWS_SECRET_ACCESS_KEY is set "
						"but not AWS_ACCESS_KEY_ID");
	return creds_absent_create("environment", 0,
				   "AWS_ACCESS_KEY_ID not set");
}

/* Quotes @url into @out for an error line: control characters become
 * '?', and whatever precedes the last '@' of the authority becomes "***"
 * (user info can hold a password; the host after it is what matters). */
static void quote_url(const char *url, char *out, size_t out_len)
{
	const char *auth = strstr(url, "://");
	const char *at = NULL;
	size_t k = 0;

	auth = auth ? auth + 3 : url;
	for (const char *q = auth; *q && *q != '/' && *q != '?' && *q != '#';
	     q++)
		if (*q == '@')
			at = q;
	for (const char *q = url; *q && k + 4 < out_len; q++) {
		if (at && q == auth) {
			memcpy(out + k, "***", 3);
			k += 3;
			q = at;
		}
		out[k++] = (unsigned char)*q < 0x20 || *q == 0x7f ? '?' : *q;
	}
	out[k] = '\0';
}

/* Whether @host (as libcurl's URL API gives it: IPv4 normalised, IPv6 in
 * brackets) is one the SDKs let a plain http container URL name: the
 * loopback (127.0.0.0/8, ::1, localhost), the ECS agent (169.254.170.2)
 * or the EKS Pod Identity agent (169.254.170.23, fd00:ec2::23). Addresses
 * are compared as addresses, names exactly: a prefix would let
 * "127.0.0.1.evil.example" through. */
static bool container_host_ok(const char *host)
{
	static const char *const agents6[] = {"::1", "fd00:ec2::23"};
	struct in6_addr a6, b6;
	struct in_addr a;
	char bare[INET6_ADDRSTRLEN];
	size_t len = strlen(host);

	if (!strcasecmp(host, "localhost"))
		return true;
	if (inet_pton(AF_INET, host, &a) == 1)
		return (ntohl(a.s_addr) >> 24) == 127 ||
		       !strcmp(host, "169.254.170.2") ||
		       !strcmp(host, "169.254.170.23");
	if (len < 3 || len - 2 >= sizeof(bare) || host[0] != '[' ||
	    host[len - 1] != ']')
		return false;
	memcpy(bare, host + 1, len - 2);
	bare[len - 2] = '\0';
	if (inet_pton(AF_INET6, bare, &a6) != 1)
		return false;
	for (size_t i = 0; i < sizeof(agents6) / sizeof(agents6[0]); i++)
		if (inet_pton(AF_INET6, agents6[i], &b6) == 1 &&
		    !memcmp(&a6, &b6, sizeof(a6)))
			return true;
	return false;
}

int creds_container_url_check(const char *url, char **out, char *why,
			      size_t why_len)
{
	static const CURLUPart userinfo[] = {
	    CURLUPART_USER,
	    CURLUPART_PASSWORD,
	    CURLUPART_OPTIONS,
	};
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *part = NULL;
	char q[420];
	CURLUcode uc;
	int rc = -EINVAL;

	*out = NULL;
	if (!u)
		return -ENOMEM;
	quote_url(url, q, sizeof(q));
	uc = curl_url_set(u, CURLUPART_URL, url, 0);
	if (uc) {
		snprintf(why, why_len,
			 "AWS_CONTAINER_CREDENTIALS_FULL_URI '%s' "
			 "is not a URL (%s)",
			 q, curl_url_strerror(uc));
		goto out;
	}
	if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0) ||
	    (strcasecmp(scheme, "http") && strcasecmp(scheme, "https"))) {
		snprintf(why, why_len,
			 "AWS_CONTAINER_CREDENTIALS_FULL_URI '%s' "
			 "is not an http or https URL with a host",
			 q);
		goto out;
	}
	/* user:password@ would go to the host as Basic auth, and fools a
	 * reader into taking what precedes '@' for the host: refused in any
	 * scheme, and nothing before the '@' is quoted. */
	for (size_t i = 0; i < sizeof(userinfo) / sizeof(userinfo[0]); i++) {
		if (curl_url_get(u, userinfo[i], &part, 0) == CURLUE_OK) {
			curl_free(part);
			snprintf(why, why_len,
				 "AWS_CONTAINER_CREDENTIALS_FULL_URI '%s' has "
				 "user info before '@' (its host is '%.200s')",
				 q, host);
			goto out;
		}
	}
	/* NOTE(s3): the SDKs send the authorization token to any https
	 * host, and over plain http only to the loopback or the agents. */
	if (strcasecmp(scheme, "https") && !container_host_ok(host)) {
		snprintf(why, why_len,
			 "AWS_CONTAINER_CREDENTIALS_FULL_URI '%s' "
			 "is plain http to a host other than the loopback or "
			 "the ECS/EKS agent",
			 q);
		goto out;
	}
	/* The URL as checked is the URL fetched: libcurl's own spelling, so
	 * the transfer cannot read it another way. */
	if (curl_url_get(u, CURLUPART_URL, &part, 0)) {
		rc = -ENOMEM;
		goto out;
	}
	*out = strdup(part);
	curl_free(part);
	rc = *out ? 0 : -ENOMEM;
out:
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

static struct creds_provider *container_provider(const struct ctx *x)
{
	const char *rel = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *tok = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	const char *tok_file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	struct creds_provider *p;
	char *url = NULL;

	if (rel) {
		if (asprintf(&url, "%s%s%s", CONTAINER_HOST,
			     rel[0] == '/' ? "" : "/", rel) < 0)
			return NULL;
	} else if (full) {
		char why[700];
		int rc =
		    creds_container_url_check(full, &url, why, sizeof(why));

		if (rc == -ENOMEM)
			return NULL;
		if (rc)
			return creds_absent_create("container credentials", rc,
						   why);
	} else {
		return creds_absent_create("container credentials", 0,
					   "AWS_CONTAINER_CREDENTIALS_RELATIVE_"
					   "URI and _FULL_URI not set");
	}
	p = creds_container_create(url, tok_file ? NULL : tok, tok_file,
				   &x->net);
	free(url);
	return p;
}

static struct creds_provider *imds_provider(const struct ctx *x,
					    const struct aws_profile *prof)
{
	const char *ep = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *mode = env("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
	const char *v1 = env("AWS_EC2_METADATA_V1_DISABLED");

	if (is_true(env("AWS_EC2_METADATA_DISABLED")))
		return creds_absent_create("instance metadata", 0,
					   "AWS_EC2_METADATA_DISABLED is true");
	if (!ep)
		ep = aws_profile_get(prof, AWS_PK_IMDS_ENDPOINT);
	if (!ep)
		ep = mode && !strcasecmp(mode, "IPv6") ? IMDS_ENDPOINT_V6
						       : IMDS_ENDPOINT;
	if (!v1)
		v1 = aws_profile_get(prof, AWS_PK_IMDS_V1_DISABLED);
	return creds_imds_create(ep, is_true(v1), &x->net);
}

static struct creds_provider *web_identity(const struct ctx *x,
					   const char *name, const char *role,
					   const char *file,
					   const char *session)
{
	return creds_web_identity_create(name, &x->sts, role, file, session);
}

/* A configuration mistake in the profile: a provider that fails with it. */
static struct creds_provider *bad(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static struct creds_provider *bad(const char *name, const char *fmt, ...)
{
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return creds_absent_create(name, -EINVAL, why);
}

/*
 * The provider of profile @name: what its role_arn, static keys or
 * credential_process say. @depth counts source_profile hops.
 */
static struct creds_provider *profile_provider(const struct ctx *x,
					       const char *name, int depth)
{
	const struct aws_config *aws = x->rq->aws;
	struct creds_provider *p = NULL, *src = NULL;
	struct aws_profile prof;
	char label[300], why[512];
	const char *role, *sp, *cs, *wif;
	int rc;

	snprintf(label, sizeof(label), "profile '%s'", name);
	rc = aws_profile_read(aws->credentials_path, aws->config_path, name,
			      &prof, why, sizeof(why));
	if (rc) {
		aws_profile_fini(&prof);
		return rc == -ENOMEM ? NULL
				     : creds_absent_create(label, rc, why);
	}
	if (!prof.found) {
		p = depth
			? bad(label,
			      "source_profile '%s' is in neither %s "
			      "nor %s",
			      name,
			      aws->credentials_path ? aws->credentials_path
						    : "?",
			      aws->config_path ? aws->config_path : "?")
			: creds_absent_create(label, 0,
					      "no such profile in "
					      "the credentials or config file");
		goto out;
	}
	role = aws_profile_get(&prof, AWS_PK_ROLE_ARN);
	sp = aws_profile_get(&prof, AWS_PK_SOURCE_PROFILE);
	cs = aws_profile_get(&prof, AWS_PK_CRED_SOURCE);
	wif = aws_profile_get(&prof, AWS_PK_WEB_IDENTITY);
	if (role && wif && !sp && !cs) {
		snprintf(label, sizeof(label), "web identity (profile '%s')",
			 name);
		p = web_identity(x, label, role, wif,
				 aws_profile_get(&prof, AWS_PK_SESSION_NAME));
		goto out;
	}
	if (role) {
		const char *dur = aws_profile_get(&prof, AWS_PK_DURATION);
		int dur_s = 0;

		if (sp && cs) {
			p = bad(label, "has both source_profile and "
				       "credential_source; keep one");
			goto out;
		}
		if (dur) {
			char *end;
			long v = strtol(dur, &end, 10);

			if (*end || v < 900 || v > 43200) {
				p = bad(label,
					"duration_seconds '%.20s' is not "
					"900 to 43200",
					dur);
				goto out;
			}
			dur_s = (int)v;
		}
		if (sp && !strcmp(sp, name)) {
			/* NOTE(s3): a profile that sources itself signs with
			 * its own static keys (botocore does the same). */
			src = profile_create(aws, name);
		} else if (sp) {
			if (depth >= CHAIN_MAX_DEPTH) {
				p = bad(label,
					"source_profile chain deeper than "
					"%d (a loop?)",
					CHAIN_MAX_DEPTH);
				goto out;
			}
			src = profile_provider(x, sp, depth + 1);
		} else if (cs && !strcmp(cs, "Environment")) {
			src = env_provider();
		} else if (cs && !strcmp(cs, "Ec2InstanceMetadata")) {
			src = imds_provider(x, &prof);
		} else if (cs && !strcmp(cs, "EcsContainer")) {
			src = container_provider(x);
		} else if (cs) {
			p = bad(label,
				"credential_source '%.40s' is not "
				"Environment, Ec2InstanceMetadata or "
				"EcsContainer",
				cs);
			goto out;
		} else {
			p = bad(label,
				"role_arn needs source_profile, "
				"credential_source or web_identity_token_file");
			goto out;
		}
		snprintf(label, sizeof(label), "assume role (profile '%s')",
			 name);
		p = creds_assume_role_create(
		    label, &x->sts, src, role,
		    aws_profile_get(&prof, AWS_PK_SESSION_NAME),
		    aws_profile_get(&prof, AWS_PK_EXTERNAL_ID), dur_s);
		goto out;
	}
	if (prof.cred[AWS_PK_ACCESS_KEY] || prof.cred[AWS_PK_SECRET_KEY]) {
		p = profile_create(aws, name);
	} else if (aws_profile_get(&prof, AWS_PK_CRED_PROCESS)) {
		snprintf(label, sizeof(label),
			 "credential_process (profile '%s')", name);
		p = creds_process_create(
		    label, aws_profile_get(&prof, AWS_PK_CRED_PROCESS),
		    x->rq->process_timeout_ms);
	} else if (prof.conf[AWS_PK_ACCESS_KEY] ||
		   prof.conf[AWS_PK_SECRET_KEY]) {
		p = profile_create(aws, name);
	} else if (aws_profile_get(&prof, AWS_PK_SSO)) {
		p = bad(label, "IAM Identity Center (sso_*) is not supported: "
			       "use credential_process with 'aws configure "
			       "export-credentials', or static keys");
	} else {
		p = depth
			? bad(label, "source_profile has no credentials")
			: creds_absent_create(label, 0, "no credentials in it");
	}
out:
	aws_profile_fini(&prof);
	return p;
}

int creds_chain_build(const struct creds_chain_req *rq,
		      struct creds_provider **chain, size_t *n)
{
	const struct aws_config *aws = rq->aws;
	struct ctx x = {.rq = rq};
	struct aws_profile prof;
	const char *role = env("AWS_ROLE_ARN"),
		   *wif = env("AWS_WEB_IDENTITY_TOKEN_FILE");
	char why[512];
	size_t k = 0;
	int rc;

	rc = aws_profile_read(aws->credentials_path, aws->config_path,
			      aws->profile, &prof, why, sizeof(why));
	if (rc == -ENOMEM) {
		aws_profile_fini(&prof);
		return rc;
	}
	sts_setup(&x, &prof);

	/* 1. NOTE(s3): a profile named on the command line replaces the
	 * environment's keys, as --profile does for the AWS CLI. */
	chain[k++] = rq->profile_named
			 ? creds_absent_create("environment", 0,
					       "skipped: -o profile= names a "
					       "profile")
			 : env_provider();
	/* 2. */
	if (role && wif)
		chain[k++] = web_identity(&x, "web identity", role, wif,
					  env("AWS_ROLE_SESSION_NAME"));
	else if (role || wif)
		chain[k++] =
		    creds_absent_create("web identity", -EINVAL,
					role ? "AWS_ROLE_ARN is set but not "
					       "AWS_WEB_IDENTITY_TOKEN_FILE"
					     : "AWS_WEB_IDENTITY_TOKEN_FILE is "
					       "set but not AWS_ROLE_ARN");
	else
		chain[k++] = creds_absent_create("web identity", 0,
						 "AWS_ROLE_ARN not set");
	/* 3. */
	chain[k++] = profile_provider(&x, aws->profile, 0);
	/* 4. */
	chain[k++] = container_provider(&x);
	/* 5. */
	chain[k++] = imds_provider(&x, &prof);
	aws_profile_fini(&prof);
	for (size_t i = 0; i < k; i++) {
		if (!chain[i]) {
			for (size_t j = 0; j < k; j++)
				creds_provider_destroy(chain[j]);
			return -ENOMEM;
		}
	}
	*n = k;
	return 0;
}
