/*
 * prefetch/s3/creds_http.c - the HTTP side of credentials: one blocking
 * exchange for every provider, the container endpoint (ECS task roles,
 * EKS Pod Identity) and EC2 instance metadata (IMDSv2).
 *
 * Owns the rules those two endpoints set: IMDSv2's session token (PUT with
 * a TTL header, then the token on each GET, v1 only when the PUT is
 * refused), the container endpoint's Authorization header re-read from
 * its file at each fetch, and which hosts a container URL may name.
 * Invariant: bodies are wiped before they are freed (they hold secrets);
 * messages quote URLs and statuses, never a body or a header.
 */
#include "prefetch/s3/creds_http.h"
#include "common/buf.h"
#include "common/fileio.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* Answers are a few KB; 64 KiB is a wrong server. */
#define CREDS_HTTP_MAX_BYTES (64u << 10)
/* The SDKs' metadata timeout: 1 s (AWS_METADATA_SERVICE_TIMEOUT), so a
 * machine that is not on EC2 fails the last provider quickly. */
#define CREDS_IMDS_TIMEOUT_MS 1000
/* The container endpoint: the SDKs give it 2 s (ECS answers in ms). */
#define CREDS_CONTAINER_TIMEOUT_MS 2000
/* IMDSv2 session token lifetime: the SDKs' 6 hours. */
#define CREDS_IMDS_TOKEN_TTL "21600"
/* A token file is under 4 KB (a JWT); 64 KiB is a wrong path. */
#define CREDS_FILE_MAX_BYTES (64u << 10)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_global_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* An answer: credentials, so a secret buffer. */
struct sink {
	struct buf b;
	bool overflow;
};

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb;

	if (s->b.len + n + 1 > CREDS_HTTP_MAX_BYTES) {
		s->overflow = true;
		return CURL_WRITEFUNC_ERROR;
	}
	if (buf_append(&s->b, ptr, n))
		return CURL_WRITEFUNC_ERROR;
	return n;
}

static int curl_errno(CURLcode cc)
{
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
		return -EHOSTUNREACH;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CACERT_BADFILE:
		return -EPROTO;
	default:
		return -EIO;
	}
}

int creds_http(const struct creds_http_req *rq, struct creds_http_resp *out,
	       char *err, size_t err_len)
{
	struct curl_slist *hl = NULL;
	struct sink s = {.b = {.secret = true}};
	char cerr[CURL_ERROR_SIZE] = "";
	CURLcode cc;
	CURL *h;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	pthread_once(&curl_once, curl_global_once);
	h = curl_easy_init();
	if (!h)
		return -ENOMEM;
	for (size_t i = 0; rq->headers && rq->headers[i]; i++) {
		struct curl_slist *nl = curl_slist_append(hl, rq->headers[i]);

		if (!nl) {
			rc = -ENOMEM;
			goto out;
		}
		hl = nl;
	}
	/* Every header on the wire is one we chose (as in s3_client.c). */
	{
		struct curl_slist *nl = curl_slist_append(hl, "Accept:");

		if (!nl) {
			rc = -ENOMEM;
			goto out;
		}
		hl = nl;
	}
	curl_easy_setopt(h, CURLOPT_URL, rq->url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)rq->timeout_ms);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "hintfs/" HINTFS_VERSION);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
	/* NOTE(s3): no proxy for credentials: IMDS and the container
	 * endpoint are link-local, and the SDKs bypass proxies for them. */
	curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	if (!strcmp(rq->method, "POST") || !strcmp(rq->method, "PUT")) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS,
				 rq->body ? rq->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)rq->body_len);
	}
	if (rq->net && rq->net->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (rq->net && rq->net->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, rq->net->ca_file);
	cc = curl_easy_perform(h);
	if (cc != CURLE_OK) {
		rc = s.overflow ? -EPROTO : curl_errno(cc);
		snprintf(err, err_len, "%s %s: %s", rq->method, rq->url,
			 s.overflow ? "answer larger than 64 KiB"
			 : cerr[0]  ? cerr
				    : curl_easy_strerror(cc));
		goto out;
	}
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &out->status);
	out->body = s.b.data ? s.b.data : strdup("");
	out->len = s.b.len;
	s.b = (struct buf){0};
	if (!out->body)
		rc = -ENOMEM;
out:
	buf_fini(&s.b);
	curl_slist_free_all(hl);
	curl_easy_cleanup(h);
	return rc;
}

void creds_http_resp_fini(struct creds_http_resp *r)
{
	if (r->body) {
		explicit_bzero(r->body, r->len);
		free(r->body);
	}
	memset(r, 0, sizeof(*r));
}

void creds_file_stamp(const char *path, char stamp[64])
{
	struct stat st;

	if (!path || stat(path, &st))
		snprintf(stamp, 64, "-");
	else
		snprintf(stamp, 64, "%llu:%lld:%lld.%ld",
			 (unsigned long long)st.st_ino, (long long)st.st_size,
			 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

int creds_read_file(const char *path, char **out, char stamp[64])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char *buf = NULL;
	size_t n = 0;
	int rc;

	if (fd < 0)
		return -errno;
	if (stamp)
		creds_file_stamp(path, stamp);
	rc = read_secret_fd(fd, CREDS_FILE_MAX_BYTES, &buf, &n);
	close(fd);
	if (rc)
		return rc;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' ||
		     buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	buf[n] = '\0';
	if (!n || memchr(buf, '\0', n)) {
		explicit_bzero(buf, n);
		free(buf);
		return -ENODATA;
	}
	*out = buf;
	return 0;
}

static char *file_error(const char *what, const char *path, int rc, char *err,
			size_t err_len)
{
	snprintf(err, err_len, "%s '%s': %s", what, path,
		 rc == -ENODATA ? "empty"
		 : rc == -EFBIG ? "larger than 64 KiB"
				: strerror(-rc));
	return err;
}

/* ---- the container endpoint ------------------------------------------------
 */

struct container_prov {
	struct creds_provider base;
	char *url;
	char *token;	  /* AWS_CONTAINER_AUTHORIZATION_TOKEN */
	char *token_file; /* AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE */
	char stamp[64];	  /* of token_file at the last fetch */
	struct creds_net net;
	char *ca_file;
};

static int container_fetch(struct creds_provider *p, struct creds_value *out,
			   char *err, size_t err_len)
{
	struct container_prov *cp = (struct container_prov *)p;
	struct creds_http_resp r;
	char *tok = NULL, *auth = NULL;
	const char *hdrs[2] = {NULL, NULL};
	char why[256];
	int rc;

	memset(out, 0, sizeof(*out));
	if (cp->token_file) {
		rc = creds_read_file(cp->token_file, &tok, cp->stamp);
		if (rc) {
			file_error("authorization token file", cp->token_file,
				   rc, err, err_len);
			return rc == -ENOMEM ? rc : -EACCES;
		}
	}
	if (tok || cp->token) {
		if (asprintf(&auth, "Authorization: %s",
			     tok ? tok : cp->token) < 0) {
			auth = NULL;
			rc = -ENOMEM;
			goto out;
		}
		hdrs[0] = auth;
	}
	rc = creds_http(
	    &(struct creds_http_req){
		.method = "GET",
		.url = cp->url,
		.headers = hdrs,
		.net = &cp->net,
		.timeout_ms = cp->net.timeout_ms ? cp->net.timeout_ms
						 : CREDS_CONTAINER_TIMEOUT_MS,
	    },
	    &r, err, err_len);
	if (rc)
		goto out;
	if (r.status != 200) {
		rc = r.status == 401 || r.status == 403 ? -EACCES : -EIO;
		snprintf(err, err_len, "GET %s: HTTP %ld", cp->url, r.status);
	} else {
		rc =
		    creds_parse_http_json(r.body, r.len, out, why, sizeof(why));
		if (rc)
			snprintf(err, err_len, "GET %s: %s", cp->url, why);
	}
	creds_http_resp_fini(&r);
out:
	creds_wipe_free(tok);
	creds_wipe_free(auth);
	return rc;
}

static bool container_changed(struct creds_provider *p)
{
	struct container_prov *cp = (struct container_prov *)p;
	char now[64];

	if (!cp->token_file)
		return false;
	creds_file_stamp(cp->token_file, now);
	return strcmp(now, cp->stamp) != 0;
}

static void container_destroy(struct creds_provider *p)
{
	struct container_prov *cp = (struct container_prov *)p;

	free(cp->url);
	creds_wipe_free(cp->token);
	free(cp->token_file);
	free(cp->ca_file);
	free(cp);
}

struct creds_provider *creds_container_create(const char *url,
					      const char *token,
					      const char *token_file,
					      const struct creds_net *net)
{
	struct container_prov *cp = calloc(1, sizeof(*cp));

	if (!cp)
		return NULL;
	cp->base = (struct creds_provider){
	    .name = "container credentials",
	    .fetch = container_fetch,
	    .changed = token_file ? container_changed : NULL,
	    .destroy = container_destroy,
	};
	cp->url = strdup(url);
	cp->token = token ? strdup(token) : NULL;
	cp->token_file = token_file ? strdup(token_file) : NULL;
	if (net) {
		cp->net = *net;
		cp->ca_file = net->ca_file ? strdup(net->ca_file) : NULL;
		cp->net.ca_file = cp->ca_file;
	}
	if (!cp->url || (token && !cp->token) ||
	    (token_file && !cp->token_file) ||
	    (net && net->ca_file && !cp->ca_file)) {
		container_destroy(&cp->base);
		return NULL;
	}
	return &cp->base;
}

/* ---- EC2 instance metadata -------------------------------------------------
 */

struct imds_prov {
	struct creds_provider base;
	char *endpoint; /* no trailing '/' */
	bool v1_disabled;
	struct creds_net net;
	char *ca_file;
};

static int imds_get(struct imds_prov *ip, const char *path, const char *token,
		    struct creds_http_resp *r, char *err, size_t err_len)
{
	char url[512], *hdr = NULL;
	const char *hdrs[2] = {NULL, NULL};
	int rc;

	snprintf(url, sizeof(url), "%s%s", ip->endpoint, path);
	if (token) {
		if (asprintf(&hdr, "X-aws-ec2-metadata-token: %s", token) < 0)
			return -ENOMEM;
		hdrs[0] = hdr;
	}
	rc = creds_http(
	    &(struct creds_http_req){
		.method = "GET",
		.url = url,
		.headers = hdrs,
		.net = &ip->net,
		.timeout_ms = ip->net.timeout_ms ? ip->net.timeout_ms
						 : CREDS_IMDS_TIMEOUT_MS,
	    },
	    r, err, err_len);
	creds_wipe_free(hdr);
	if (!rc && r->status != 200) {
		snprintf(err, err_len, "GET %s: HTTP %ld%s", url, r->status,
			 r->status == 404   ? " (no IAM role attached to the "
					      "instance?)"
			 : r->status == 401 ? " (the IMDSv2 token was refused)"
					    : "");
		rc = r->status == 404 ? -ENOENT : -EIO;
		creds_http_resp_fini(r);
	}
	return rc;
}

static int imds_fetch(struct creds_provider *p, struct creds_value *out,
		      char *err, size_t err_len)
{
	struct imds_prov *ip = (struct imds_prov *)p;
	static const char *const tok_hdrs[] = {
	    "X-aws-ec2-metadata-token-ttl-seconds: " CREDS_IMDS_TOKEN_TTL,
	    NULL};
	struct creds_http_resp r;
	char url[512], path[512], why[256], *token = NULL, *role, *nl;
	int rc;

	memset(out, 0, sizeof(*out));
	snprintf(url, sizeof(url), "%s/latest/api/token", ip->endpoint);
	rc = creds_http(
	    &(struct creds_http_req){
		.method = "PUT",
		.url = url,
		.headers = tok_hdrs,
		.net = &ip->net,
		.timeout_ms = ip->net.timeout_ms ? ip->net.timeout_ms
						 : CREDS_IMDS_TIMEOUT_MS,
	    },
	    &r, err, err_len);
	if (rc)
		return rc == -ENOMEM ? rc : -ENOENT; /* not on EC2 */
	if (r.status == 200 && r.len) {
		token = r.body;
		r.body = NULL;
		creds_http_resp_fini(&r);
	} else if ((r.status == 403 || r.status == 404 || r.status == 405) &&
		   !ip->v1_disabled) {
		/* NOTE(s3): an old IMDS or a proxy that refuses PUT: the SDKs
		 * go on with IMDSv1, as do we. */
		creds_http_resp_fini(&r);
	} else {
		snprintf(err, err_len, "PUT %s: HTTP %ld%s", url, r.status,
			 ip->v1_disabled ? " (and AWS_EC2_METADATA_V1_DISABLED "
					   "forbids IMDSv1)"
					 : "");
		creds_http_resp_fini(&r);
		return -EIO;
	}

	rc = imds_get(ip, "/latest/meta-data/iam/security-credentials/", token,
		      &r, err, err_len);
	if (rc)
		goto out;
	role = r.body;
	nl = strpbrk(role, "\r\n");
	if (nl)
		*nl = '\0';
	if (!*role || strchr(role, '/') || strlen(role) > 128) {
		snprintf(err, err_len,
			 "instance metadata names no usable IAM role");
		rc = -ENOENT;
		creds_http_resp_fini(&r);
		goto out;
	}
	snprintf(path, sizeof(path),
		 "/latest/meta-data/iam/security-credentials/%s", role);
	creds_http_resp_fini(&r);
	rc = imds_get(ip, path, token, &r, err, err_len);
	if (rc)
		goto out;
	rc = creds_parse_http_json(r.body, r.len, out, why, sizeof(why));
	if (rc)
		snprintf(err, err_len, "GET %s%s: %s", ip->endpoint, path, why);
	creds_http_resp_fini(&r);
out:
	creds_wipe_free(token);
	return rc;
}

static void imds_destroy(struct creds_provider *p)
{
	struct imds_prov *ip = (struct imds_prov *)p;

	free(ip->endpoint);
	free(ip->ca_file);
	free(ip);
}

struct creds_provider *creds_imds_create(const char *endpoint, bool v1_disabled,
					 const struct creds_net *net)
{
	struct imds_prov *ip = calloc(1, sizeof(*ip));
	size_t n;

	if (!ip)
		return NULL;
	ip->base = (struct creds_provider){
	    .name = "instance metadata",
	    .fetch = imds_fetch,
	    .destroy = imds_destroy,
	};
	ip->endpoint = strdup(endpoint);
	ip->v1_disabled = v1_disabled;
	if (net) {
		ip->net = *net;
		ip->ca_file = net->ca_file ? strdup(net->ca_file) : NULL;
		ip->net.ca_file = ip->ca_file;
	}
	if (!ip->endpoint || (net && net->ca_file && !ip->ca_file)) {
		imds_destroy(&ip->base);
		return NULL;
	}
	n = strlen(ip->endpoint);
	while (n && ip->endpoint[n - 1] == '/')
		ip->endpoint[--n] = '\0';
	return &ip->base;
}
