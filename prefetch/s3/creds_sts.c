/*
 * prefetch/s3/creds_sts.c - credentials from STS: AssumeRoleWithWebIdentity
 * (EKS IRSA, any OIDC token file) and AssumeRole (a profile's role_arn
 * with source_profile or credential_source).
 *
 * Owns the two Query API calls: a form-encoded POST to the STS endpoint,
 * unsigned for web identity (the token is the proof), SigV4-signed with
 * the source credentials (service "sts") for AssumeRole. The answer's XML
 * is parsed by creds_parse_sts_xml(). Invariant: the form body holds a
 * token and is wiped after the call; messages name the role and the
 * endpoint, never the token.
 */
#include "prefetch/s3/creds_http.h"
#include "prefetch/s3/sigv4.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* STS answers in tens of ms; 10 s covers a slow regional endpoint while
 * the current credentials, refreshed 5 min ahead, are still good. */
#define CREDS_STS_TIMEOUT_MS 10000
#define STS_API_VERSION	     "2011-06-15"

struct sts_prov {
	struct creds_provider base;
	char *name;
	char *endpoint;
	char *region;
	char *ca_file;
	struct creds_net net;
	char *role_arn;
	char *session_name;
	/* web identity */
	char *token_file;
	char stamp[64];
	/* AssumeRole */
	struct creds_provider *source;
	char *external_id;
	int duration_s;
};

/* Appends "&name=value" (value form-encoded) to the malloc'd *@body. */
static int form_add(char **body, const char *name, const char *value)
{
	char *enc = sigv4_uri_encode(value, strlen(value), false);
	char *nb = NULL;
	int rc = 0;

	if (!enc)
		return -ENOMEM;
	if (asprintf(&nb, "%s%s%s=%s", *body ? *body : "", *body ? "&" : "",
		     name, enc) < 0) {
		nb = NULL;
		rc = -ENOMEM;
	}
	creds_wipe_free(enc);
	creds_wipe_free(*body);
	*body = nb;
	return rc;
}

/* The fields both calls send: the action, the API version, the role and
 * the session's name (the profile's, else "hintfs-TIME" as botocore
 * names its "botocore-session-TIME"). */
static int form_start(const struct sts_prov *sp, const char *action,
		      char **body)
{
	char sess[128];
	int rc;

	if (sp->session_name && *sp->session_name)
		snprintf(sess, sizeof(sess), "%s", sp->session_name);
	else
		snprintf(sess, sizeof(sess), "hintfs-%lld",
			 (long long)time(NULL));
	rc = form_add(body, "Action", action);
	if (!rc)
		rc = form_add(body, "Version", STS_API_VERSION);
	if (!rc)
		rc = form_add(body, "RoleArn", sp->role_arn);
	if (!rc)
		rc = form_add(body, "RoleSessionName", sess);
	return rc;
}

/* Host[:port] of @url, as the Host header will carry it. */
static int host_of(const char *url, char *buf, size_t len)
{
	CURLU *u = curl_url();
	char *host = NULL, *port = NULL;
	int rc = -EINVAL;

	if (!u)
		return -ENOMEM;
	if (!curl_url_set(u, CURLUPART_URL, url, 0) &&
	    !curl_url_get(u, CURLUPART_HOST, &host, 0)) {
		rc = 0;
		if (!curl_url_get(u, CURLUPART_PORT, &port, 0))
			snprintf(buf, len, "%s:%s", host, port);
		else
			snprintf(buf, len, "%s", host);
	}
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return rc;
}

/* POSTs @body to STS (signed with @src unless NULL) and parses the answer. */
static int sts_call(struct sts_prov *sp, const char *action, const char *body,
		    const struct creds_value *src, struct creds_value *out,
		    char *err, size_t err_len)
{
	const char *hdrs[6] = {
	    "Content-Type: application/x-www-form-urlencoded; "
	    "charset=utf-8",
	    NULL};
	char host[300], date[17], why[400], *auth = NULL, *tok = NULL,
					    *date_h = NULL, *url = NULL;
	struct sigv4_result sig = {0};
	struct creds_http_resp r;
	size_t nh = 1;
	int rc;

	memset(out, 0, sizeof(*out));
	/* The Query API takes POST on "/"; sts_new() cut trailing '/'. */
	if (asprintf(&url, "%s/", sp->endpoint) < 0)
		return -ENOMEM;
	if (src) {
		unsigned char md[32];
		char hex[65];
		struct sigv4_header sh[3];
		size_t n = 0;

		rc = host_of(sp->endpoint, host, sizeof(host));
		if (rc) {
			snprintf(err, err_len, "STS endpoint '%s' is not a URL",
				 sp->endpoint);
			goto out;
		}
		if (!EVP_Digest(body, strlen(body), md, NULL, EVP_sha256(),
				NULL)) {
			rc = -ENOMEM;
			goto out;
		}
		for (int i = 0; i < 32; i++)
			snprintf(hex + 2 * i, 3, "%02x", md[i]);
		sigv4_format_date((long long)time(NULL), date);
		sh[n++] = (struct sigv4_header){"Host", host};
		sh[n++] = (struct sigv4_header){
		    "Content-Type",
		    "application/x-www-form-urlencoded; charset=utf-8"};
		sh[n++] = (struct sigv4_header){"X-Amz-Date", date};
		rc = sigv4_sign(&(struct sigv4_creds){src->access_key,
						      src->secret_key,
						      src->session_token},
				&(struct sigv4_request){.method = "POST",
							.path = "/",
							.query = "",
							.headers = sh,
							.n_headers = n,
							.payload_hash = hex,
							.amz_date = date,
							.region = sp->region,
							.service = "sts"},
				&sig);
		if (rc) {
			snprintf(err, err_len, "cannot sign AssumeRole: %s",
				 strerror(-rc));
			goto out;
		}
		if (asprintf(&auth, "Authorization: %s", sig.authorization) <
			0 ||
		    asprintf(&date_h, "X-Amz-Date: %s", date) < 0 ||
		    (src->session_token &&
		     asprintf(&tok, "X-Amz-Security-Token: %s",
			      src->session_token) < 0)) {
			rc = -ENOMEM;
			goto out;
		}
		hdrs[nh++] = auth;
		hdrs[nh++] = date_h;
		if (tok)
			hdrs[nh++] = tok;
	}
	rc = creds_http(
	    &(struct creds_http_req){
		.method = "POST",
		.url = url,
		.headers = hdrs,
		.body = body,
		.body_len = strlen(body),
		.net = &sp->net,
		.timeout_ms = sp->net.timeout_ms ? sp->net.timeout_ms
						 : CREDS_STS_TIMEOUT_MS,
	    },
	    &r, err, err_len);
	if (rc)
		goto out;
	rc = creds_parse_sts_xml(r.body, r.len, out, why, sizeof(why));
	if (rc == -EINVAL && r.status != 200)
		snprintf(err, err_len, "%s of %s at %s: HTTP %ld", action,
			 sp->role_arn, sp->endpoint, r.status);
	else if (rc)
		snprintf(err, err_len, "%s of %s at %s: %s", action,
			 sp->role_arn, sp->endpoint, why);
	creds_http_resp_fini(&r);
out:
	sigv4_result_fini(&sig);
	creds_wipe_free(auth);
	creds_wipe_free(tok);
	free(date_h);
	free(url);
	return rc;
}

static int web_identity_fetch(struct creds_provider *p, struct creds_value *out,
			      char *err, size_t err_len)
{
	struct sts_prov *sp = (struct sts_prov *)p;
	char *token = NULL, *body = NULL;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = creds_read_file(sp->token_file, &token, sp->stamp);
	if (rc) {
		snprintf(err, err_len, "token file '%s': %s", sp->token_file,
			 rc == -ENODATA ? "empty"
			 : rc == -EFBIG ? "larger than 64 KiB"
					: strerror(-rc));
		return rc == -ENOMEM ? rc : -EACCES;
	}
	rc = form_start(sp, "AssumeRoleWithWebIdentity", &body);
	if (!rc)
		rc = form_add(&body, "WebIdentityToken", token);
	if (!rc)
		rc = sts_call(sp, "AssumeRoleWithWebIdentity", body, NULL, out,
			      err, err_len);
	creds_wipe_free(token);
	creds_wipe_free(body);
	return rc;
}

static bool web_identity_changed(struct creds_provider *p)
{
	struct sts_prov *sp = (struct sts_prov *)p;
	char now[64];

	creds_file_stamp(sp->token_file, now);
	return strcmp(now, sp->stamp) != 0;
}

static int assume_role_fetch(struct creds_provider *p, struct creds_value *out,
			     char *err, size_t err_len)
{
	struct sts_prov *sp = (struct sts_prov *)p;
	struct creds_value src = {0};
	char *body = NULL, why[400], dur[16];
	int rc;

	memset(out, 0, sizeof(*out));
	rc = sp->source->fetch(sp->source, &src, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "source credentials (%s): %s",
			 sp->source->name, why);
		return rc == -ENOENT ? -EACCES : rc;
	}
	rc = form_start(sp, "AssumeRole", &body);
	if (!rc && sp->external_id)
		rc = form_add(&body, "ExternalId", sp->external_id);
	if (!rc && sp->duration_s > 0) {
		snprintf(dur, sizeof(dur), "%d", sp->duration_s);
		rc = form_add(&body, "DurationSeconds", dur);
	}
	if (!rc)
		rc = sts_call(sp, "AssumeRole", body, &src, out, err, err_len);
	creds_value_fini(&src);
	creds_wipe_free(body);
	return rc;
}

static bool assume_role_changed(struct creds_provider *p)
{
	struct sts_prov *sp = (struct sts_prov *)p;

	return sp->source->changed && sp->source->changed(sp->source);
}

static void sts_destroy(struct creds_provider *p)
{
	struct sts_prov *sp = (struct sts_prov *)p;

	free(sp->name);
	free(sp->endpoint);
	free(sp->region);
	free(sp->ca_file);
	free(sp->role_arn);
	free(sp->session_name);
	free(sp->token_file);
	free(sp->external_id);
	creds_provider_destroy(sp->source);
	free(sp);
}

static struct sts_prov *sts_new(const char *name,
				const struct creds_sts_config *sts,
				const char *role_arn, const char *session_name)
{
	struct sts_prov *sp = calloc(1, sizeof(*sp));

	if (!sp)
		return NULL;
	sp->base.destroy = sts_destroy;
	sp->name = strdup(name);
	sp->endpoint = strdup(sts->endpoint);
	sp->region = strdup(sts->region ? sts->region : "us-east-1");
	sp->role_arn = strdup(role_arn);
	sp->session_name = session_name ? strdup(session_name) : NULL;
	sp->net = sts->net;
	sp->ca_file = sts->net.ca_file ? strdup(sts->net.ca_file) : NULL;
	sp->net.ca_file = sp->ca_file;
	sp->base.name = sp->name;
	if (sp->endpoint) {
		size_t n = strlen(sp->endpoint);

		while (n && sp->endpoint[n - 1] == '/')
			sp->endpoint[--n] = '\0';
	}
	if (!sp->name || !sp->endpoint || !sp->region || !sp->role_arn ||
	    (session_name && !sp->session_name) ||
	    (sts->net.ca_file && !sp->ca_file)) {
		sts_destroy(&sp->base);
		return NULL;
	}
	return sp;
}

struct creds_provider *
creds_web_identity_create(const char *name, const struct creds_sts_config *sts,
			  const char *role_arn, const char *token_file,
			  const char *session_name)
{
	struct sts_prov *sp = sts_new(name, sts, role_arn, session_name);

	if (!sp)
		return NULL;
	sp->base.fetch = web_identity_fetch;
	sp->base.changed = web_identity_changed;
	sp->token_file = strdup(token_file);
	if (!sp->token_file) {
		sts_destroy(&sp->base);
		return NULL;
	}
	return &sp->base;
}

struct creds_provider *
creds_assume_role_create(const char *name, const struct creds_sts_config *sts,
			 struct creds_provider *source, const char *role_arn,
			 const char *session_name, const char *external_id,
			 int duration_s)
{
	struct sts_prov *sp =
	    source ? sts_new(name, sts, role_arn, session_name) : NULL;

	if (!sp) {
		creds_provider_destroy(source);
		return NULL;
	}
	sp->base.fetch = assume_role_fetch;
	sp->base.changed = assume_role_changed;
	sp->source = source;
	sp->duration_s = duration_s;
	sp->external_id = external_id ? strdup(external_id) : NULL;
	if (external_id && !sp->external_id) {
		sts_destroy(&sp->base);
		return NULL;
	}
	return &sp->base;
}
