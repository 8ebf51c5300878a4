/*
 * prefetch/s3/s3_client.c - the S3 client's life: configuration, endpoint
 * parsing (addressing), creation and destruction.
 *
 * Invariants:
 * - The Host we sign is the Host curl sends (path-style or virtual-host,
 *   ":port" only when not the scheme's default).
 * - Secrets are wiped from memory when the client is destroyed.
 *
 * The rest of the client lives beside it (s3_internal.h says which file
 * owns what).
 */
#include "prefetch/s3/s3_internal.h"
#include "common/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_global_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/*
 * Splits "scheme://host[:port][/]" and fills the client's addressing. An
 * IPv6 literal keeps its brackets in host, as URLs and Host headers want.
 */
static int parse_endpoint(struct s3_client *c, const char *ep, char *err,
			  size_t err_len)
{
	const char *hp, *end, *colon;
	size_t hlen;
	long port = 0;

	if (!strncmp(ep, "https://", 8)) {
		c->scheme = strdup("https");
		hp = ep + 8;
	} else if (!strncmp(ep, "http://", 7)) {
		c->scheme = strdup("http");
		hp = ep + 7;
	} else {
		return log_fail_einval(
		    err, err_len,
		    "endpoint '%s' is not an http:// or https:// URL", ep);
	}
	end = hp + strcspn(hp, "/?#");
	if (*end && strcmp(end, "/"))
		return log_fail_einval(
		    err, err_len, "endpoint '%s' must not have a path", ep);
	if (*hp == '[') {
		colon = memchr(hp, ']', end - hp);
		if (!colon)
			return log_fail_einval(
			    err, err_len, "endpoint '%s': bad IPv6 address",
			    ep);
		colon++;
		if (colon < end && *colon != ':')
			return log_fail_einval(err, err_len,
					       "endpoint '%s': bad port", ep);
	} else {
		colon = memchr(hp, ':', end - hp);
		if (!colon)
			colon = end;
	}
	hlen = colon - hp;
	if (hlen == 0)
		return log_fail_einval(err, err_len,
				       "endpoint '%s' has no host", ep);
	if (colon < end) {
		char *pend;

		port = strtol(colon + 1, &pend, 10);
		if (pend != end || port <= 0 || port > 65535)
			return log_fail_einval(err, err_len,
					       "endpoint '%s': bad port", ep);
	}
	c->host = strndup(hp, hlen);
	if (!c->scheme || !c->host)
		return -ENOMEM;

	/* NOTE(s3): the signed Host carries ":port" only when it is not the
	 * scheme's default, exactly as curl would send it. */
	bool dflt = port == 0 || (port == 80 && !strcmp(c->scheme, "http")) ||
		    (port == 443 && !strcmp(c->scheme, "https"));
	char portpart[16] = "";
	if (!dflt)
		snprintf(portpart, sizeof(portpart), ":%ld", port);

	const char *bkt = c->path_style ? "" : c->bucket;
	const char *dot = c->path_style ? "" : ".";
	if (asprintf(&c->host_header, "%s%s%s%s", bkt, dot, c->host, portpart) <
		0 ||
	    asprintf(&c->base_url, "%s://%s", c->scheme, c->host_header) < 0) {
		c->host_header = c->base_url = NULL;
		return -ENOMEM;
	}
	return 0;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int s3_client_create(const struct s3_config *cfg, struct s3_client **out,
		     char *err, size_t err_len)
{
	struct s3_client *c;
	int rc;

	pthread_once(&curl_once, curl_global_once);
	if (curl_init_rc != CURLE_OK)
		return -ENOMEM;
	if (!cfg->bucket || !*cfg->bucket)
		return log_fail_einval(err, err_len, "no bucket given");
	if (!cfg->no_sign && !cfg->creds &&
	    (!cfg->access_key || !cfg->secret_key))
		return log_fail_einval(
		    err, err_len,
		    "no credentials: set AWS_ACCESS_KEY_ID "
		    "and AWS_SECRET_ACCESS_KEY, or use -o no_sign");

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->pool_lock, NULL);
	pthread_mutex_init(&c->sign_lock, NULL);
	pthread_mutex_init(&c->sign_lock, NULL);
	c->path_style = cfg->path_style;
	c->no_sign = cfg->no_sign;
	c->insecure = cfg->insecure;
	retry_policy_init(&c->retry, cfg->max_attempts, cfg->retry_time_ms);
	c->stall_timeout_s = cfg->stall_timeout_s > 0 ? cfg->stall_timeout_s
						      : S3_STALL_DEFAULT_S;
	c->list_workers =
	    cfg->list_workers > 0 ? cfg->list_workers : S3_LIST_WORKERS_DEFAULT;
	c->bucket = strdup(cfg->bucket);
	c->region = strdup(cfg->region ? cfg->region : "us-east-1");
	c->creds = cfg->no_sign ? NULL : cfg->creds;
	if (!cfg->no_sign && !cfg->creds) {
		struct creds_provider *p =
		    creds_static_create("options", cfg->access_key,
					cfg->secret_key, cfg->session_token);

		rc = creds_start(&p, 1, &c->creds, err, err_len);
		if (rc)
			goto fail;
		c->own_creds = true;
	}
	c->ca_file = dup_or_null(cfg->ca_file);
	if (!c->bucket || !c->region) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = parse_endpoint(c, cfg->endpoint, err, err_len);
	if (rc)
		goto fail;
	*out = c;
	return 0;
fail:
	s3_client_destroy(c);
	return rc;
}

void s3_client_destroy(struct s3_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_pool; i++)
		curl_easy_cleanup(c->pool[i]);
	pthread_mutex_destroy(&c->pool_lock);
	sigv4_key_fini(&c->sign_key);
	pthread_mutex_destroy(&c->sign_lock);
	sigv4_key_fini(&c->sign_key);
	pthread_mutex_destroy(&c->sign_lock);
	free(c->bucket);
	free(c->scheme);
	free(c->host);
	free(c->host_header);
	free(c->base_url);
	free(c->region);
	if (c->own_creds)
		creds_stop(c->creds);
	free(c->ca_file);
	free(c);
}

void s3_client_counts(struct s3_client *c, uint64_t *lists, uint64_t *gets)
{
	*lists = atomic_load(&c->n_lists);
	*gets = atomic_load(&c->n_gets);
}

uint64_t s3_client_puts(struct s3_client *c)
{
	return atomic_load(&c->n_puts);
}

uint64_t s3_client_connects(struct s3_client *c)
{
	return atomic_load(&c->n_connects);
}

const struct retry_policy *s3_client_retry(const struct s3_client *c)
{
	return &c->retry;
}

struct creds *s3_client_creds(struct s3_client *c)
{
	return c->creds;
}
