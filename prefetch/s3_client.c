/*
 * prefetch/s3_client.c - the S3 client: addressing, signing, HTTP, errors.
 *
 * Owns the pool of curl easy handles and the one table that turns HTTP
 * statuses, S3 error codes and curl codes into errno (s3_errno()). No other
 * code in hintfs knows an HTTP status.
 *
 * Invariants:
 * - A curl easy handle is used by one thread at a time: it is taken from
 *   the pool for one request and given back after it (libcurl-thread(3)).
 *   Each handle keeps its connections open, so the pool is also the
 *   connection cache.
 * - The path curl sends is the path we signed: CURLOPT_PATH_AS_IS stops curl
 *   from squashing "/./" or "//", which are legal in S3 keys, and the Host
 *   header is set by us to the value we signed.
 * - Credentials go into headers only; nothing here logs a header.
 */
#include "prefetch/prefetch.h"
#include "prefetch/s3_xfer.h"
#include "prefetch/s3_xml.h"
#include "prefetch/sigv4.h"
#include "common/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A list page of 1,000 keys is ~300 KB; 16 MiB means a broken server. */
#define S3_LIST_BODY_MAX (16u << 20)
/* Error documents are small; keep enough for a long <Message>. */
#define S3_ERROR_BODY_MAX (64u << 10)
/* Idle handles kept for reuse: more than the FUSE threads that read at
 * once, fewer than would hold sockets open for nothing. */
#define S3_POOL_MAX 64
/* Connect within 10 s, or the endpoint is down. */
#define S3_CONNECT_TIMEOUT_MS 10000L
/* A transfer that moves nothing for 5 s is stalled: abandon it and retry
 * on a fresh connection (a 10 s stall costs 5 s, not a whole read). */
#define S3_STALL_DEFAULT_S 5
/* A listing past its first page: 16 requests in flight by default, one
 * range each (10,000 keys at 20 ms: 64 ranges took 434 ms, slower than
 * page by page, 287 ms; 16 ranges 174-199 ms); at most 16 delimiter pages
 * spent finding the split points. */
#define S3_LIST_WORKERS_DEFAULT	  16
#define S3_LIST_RANGES_PER_WORKER 1
#define S3_LIST_DISCOVERY	  16
/* The retry budget of one request (DESIGN.md 2.6). */
#define S3_ATTEMPTS_DEFAULT 10
#define S3_RETRY_TIME_DEFAULT_MS 60000
/* First retry after 50 ms, doubling, capped at 2 s, with jitter. */
#define S3_BACKOFF_BASE_MS 50
#define S3_BACKOFF_CAP_MS 2000

struct s3_client {
	char *bucket;
	char *scheme;      /* "http" or "https" */
	char *host;        /* host part of the endpoint, no port */
	char *host_header; /* what we send and sign as Host */
	char *base_url;    /* scheme://host[:port], bucket host if vhost */
	char *region;
	char *access_key;
	char *secret_key;
	char *session_token;
	char *ca_file;
	bool path_style;
	bool no_sign;
	bool insecure;
	int max_attempts;
	int retry_time_ms;
	int stall_timeout_s;
	int list_workers;

	_Atomic uint64_t n_lists;  /* ListObjectsV2 attempts sent */
	_Atomic uint64_t n_gets;   /* object GET attempts sent */

	pthread_mutex_t pool_lock; /* guards pool[] and n_pool */
	CURL *pool[S3_POOL_MAX];
	int n_pool;
};

/* Where a response body goes: a caller's buffer, or a growing one. */
struct s3_body {
	char *buf;
	size_t len;
	size_t cap;
	size_t max;     /* more than this is a protocol error */
	bool growable;  /* realloc up to max (lists, errors) */
	bool overflow;
};

/* One request's description, before signing. */
struct s3_req {
	const char *method;
	char *path;  /* encoded, begins '/' */
	char *query; /* encoded, may be "" */
	char range[64];
	const char *if_match; /* NULL: none */
};

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
		return fail_einval(
		    err, err_len,
		    "endpoint '%s' is not an http:// or https:// URL", ep);
	}
	end = hp + strcspn(hp, "/?#");
	if (*end && strcmp(end, "/"))
		return fail_einval(err, err_len,
				   "endpoint '%s' must not have a path", ep);
	if (*hp == '[') {
		colon = memchr(hp, ']', end - hp);
		if (!colon)
			return fail_einval(err, err_len,
					   "endpoint '%s': bad IPv6 address",
					   ep);
		colon++;
		if (colon < end && *colon != ':')
			return fail_einval(err, err_len,
					   "endpoint '%s': bad port", ep);
	} else {
		colon = memchr(hp, ':', end - hp);
		if (!colon)
			colon = end;
	}
	hlen = colon - hp;
	if (hlen == 0)
		return fail_einval(err, err_len, "endpoint '%s' has no host",
				   ep);
	if (colon < end) {
		char *pend;

		port = strtol(colon + 1, &pend, 10);
		if (pend != end || port <= 0 || port > 65535)
			return fail_einval(err, err_len,
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
	if (asprintf(&c->host_header, "%s%s%s%s", bkt, dot, c->host, portpart) < 0 ||
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
		return fail_einval(err, err_len, "no bucket given");
	if (!cfg->no_sign && (!cfg->access_key || !cfg->secret_key))
		return fail_einval(
		    err, err_len,
		    "no credentials: set AWS_ACCESS_KEY_ID "
		    "and AWS_SECRET_ACCESS_KEY, or use -o no_sign");

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->pool_lock, NULL);
	c->path_style = cfg->path_style;
	c->no_sign = cfg->no_sign;
	c->insecure = cfg->insecure;
	c->max_attempts = cfg->max_attempts > 0 ? cfg->max_attempts
						 : S3_ATTEMPTS_DEFAULT;
	c->retry_time_ms = cfg->retry_time_ms > 0 ? cfg->retry_time_ms
						  : S3_RETRY_TIME_DEFAULT_MS;
	c->stall_timeout_s = cfg->stall_timeout_s > 0 ? cfg->stall_timeout_s
						      : S3_STALL_DEFAULT_S;
	c->list_workers =
	    cfg->list_workers > 0 ? cfg->list_workers : S3_LIST_WORKERS_DEFAULT;
	c->bucket = strdup(cfg->bucket);
	c->region = strdup(cfg->region ? cfg->region : "us-east-1");
	c->access_key = dup_or_null(cfg->access_key);
	c->secret_key = dup_or_null(cfg->secret_key);
	c->session_token = dup_or_null(cfg->session_token);
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

static void free_secret(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void s3_client_destroy(struct s3_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->n_pool; i++)
		curl_easy_cleanup(c->pool[i]);
	pthread_mutex_destroy(&c->pool_lock);
	free(c->bucket);
	free(c->scheme);
	free(c->host);
	free(c->host_header);
	free(c->base_url);
	free(c->region);
	free(c->access_key);
	free_secret(c->secret_key);
	free_secret(c->session_token);
	free(c->ca_file);
	free(c);
}

/* ---- the handle pool -------------------------------------------------- */

static CURL *pool_get(struct s3_client *c)
{
	CURL *h = NULL;

	pthread_mutex_lock(&c->pool_lock);
	if (c->n_pool > 0)
		h = c->pool[--c->n_pool];
	pthread_mutex_unlock(&c->pool_lock);
	return h ? h : curl_easy_init();
}

static void pool_put(struct s3_client *c, CURL *h, bool healthy)
{
	if (healthy) {
		pthread_mutex_lock(&c->pool_lock);
		if (c->n_pool < S3_POOL_MAX) {
			c->pool[c->n_pool++] = h;
			h = NULL;
		}
		pthread_mutex_unlock(&c->pool_lock);
	}
	/* A handle whose transfer broke may hold a half-dead connection: a
	 * retry must start on a fresh one. */
	if (h)
		curl_easy_cleanup(h);
}

/* ---- errors: the one place foreign codes become errno ----------------- */

struct s3_code_map {
	const char *code;
	int err;
};

static const struct s3_code_map s3_codes[] = {
	{ "NoSuchBucket", -ENOENT },
	{ "NoSuchKey", -ESTALE },         /* deleted since the listing */
	{ "PreconditionFailed", -ESTALE }, /* If-Match: changed since */
	{ "AccessDenied", -EACCES },
	{ "SignatureDoesNotMatch", -EACCES },
	{ "InvalidAccessKeyId", -EACCES },
	{ "ExpiredToken", -EACCES },
	{ "InvalidToken", -EACCES },
	{ "RequestTimeTooSkewed", -EACCES },
	{ "InvalidBucketName", -EINVAL },
	{ "SlowDown", -EAGAIN },
	{ "RequestTimeout", -ETIMEDOUT },
	{ "InternalError", -EIO },
	{ "ServiceUnavailable", -EAGAIN },
};

static int s3_errno(long http, const char *code, CURLcode cc)
{
	if (cc != CURLE_OK) {
		switch (cc) {
		case CURLE_COULDNT_RESOLVE_HOST:
		case CURLE_COULDNT_RESOLVE_PROXY:
			return -EHOSTUNREACH;
		case CURLE_COULDNT_CONNECT:
			return -ECONNREFUSED;
		case CURLE_OPERATION_TIMEDOUT:
			return -ETIMEDOUT;
		case CURLE_PEER_FAILED_VERIFICATION:
		case CURLE_SSL_CONNECT_ERROR:
		case CURLE_SSL_CERTPROBLEM:
		case CURLE_SSL_CACERT_BADFILE:
			return -EPROTO;
		case CURLE_WRITE_ERROR: /* our sink refused: body too large */
			return -EPROTO;
		case CURLE_OUT_OF_MEMORY:
			return -ENOMEM;
		default: /* resets, truncated bodies, empty replies */
			return -ECONNRESET;
		}
	}
	for (size_t i = 0; i < sizeof(s3_codes) / sizeof(s3_codes[0]); i++)
		if (!strcmp(code, s3_codes[i].code))
			return s3_codes[i].err;
	if (http == 404)
		return -ENOENT;
	if (http == 403 || http == 401)
		return -EACCES;
	if (http == 412)
		return -ESTALE;
	if (http == 408 || http == 429 || http == 503)
		return -EAGAIN;
	return -EIO;
}

/* Whether another attempt may succeed where this one failed. */
static bool s3_retryable(int err, long http)
{
	switch (err) {
	case -EAGAIN:
	case -ETIMEDOUT:
	case -ECONNRESET:
	case -ECONNREFUSED:
		return true;
	case -EIO:
		return http >= 500 || http == 0;
	default:
		return false;
	}
}

void s3_status_describe(const struct s3_status *st, int err, char *buf,
			size_t len)
{
	const char *hint = "";

	switch (err) {
	case -EACCES:
		if (!strcmp(st->code, "SignatureDoesNotMatch"))
			hint = " (check AWS_SECRET_ACCESS_KEY)";
		else if (!strcmp(st->code, "InvalidAccessKeyId"))
			hint = " (check AWS_ACCESS_KEY_ID)";
		else if (!strcmp(st->code, "RequestTimeTooSkewed"))
			hint = " (check the system clock)";
		break;
	case -ECONNREFUSED:
	case -EHOSTUNREACH:
		hint = " (is the endpoint right and the server up?)";
		break;
	default:
		break;
	}
	if (st->http)
		snprintf(buf, len, "%s%s%s (HTTP %ld)%s",
			 st->code[0] ? st->code : "error",
			 st->message[0] ? ": " : "", st->message, st->http, hint);
	else
		snprintf(buf, len, "%s%s", st->message[0] ? st->message : strerror(-err),
			 hint);
}

/* ---- one HTTP exchange -------------------------------------------------- */

static size_t body_append(struct s3_body *b, const char *ptr, size_t n)
{
	if (b->len + n > b->max) {
		b->overflow = true;
		return CURL_WRITEFUNC_ERROR;
	}
	if (b->len + n > b->cap) {
		size_t ncap = b->cap ? b->cap : 16384;
		char *nb;

		if (!b->growable) {
			b->overflow = true;
			return CURL_WRITEFUNC_ERROR;
		}
		while (ncap < b->len + n)
			ncap *= 2;
		if (ncap > b->max)
			ncap = b->max;
		nb = realloc(b->buf, ncap);
		if (!nb)
			return CURL_WRITEFUNC_ERROR;
		b->buf = nb;
		b->cap = ncap;
	}
	memcpy(b->buf + b->len, ptr, n);
	b->len += n;
	return n;
}

/*
 * The body of a 2xx answer goes to the caller's sink; any other body is an
 * error document and goes to a side buffer, so it never lands in a read
 * buffer as if it were file data.
 */
struct s3_sink {
	CURL *h;
	struct s3_body *ok;
	struct s3_body *err;
};

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct s3_sink *s = arg;
	long code = 0;

	curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
	return body_append(code / 100 == 2 ? s->ok : s->err, ptr, size * nmemb);
}

static struct curl_slist *append_header(struct curl_slist *l, bool *ok,
					const char *name, const char *value)
{
	struct curl_slist *nl;
	char *line;

	if (!*ok)
		return l;
	if (asprintf(&line, "%s: %s", name, value) < 0) {
		*ok = false;
		return l;
	}
	nl = curl_slist_append(l, line);
	explicit_bzero(line, strlen(line));
	free(line);
	if (!nl) {
		*ok = false;
		return l;
	}
	return nl;
}

/* Builds the header list of @rq, signed unless the mount is anonymous. */
static int build_headers(struct s3_client *c, const struct s3_req *rq,
			 struct curl_slist **out)
{
	struct sigv4_header hdrs[8];
	struct sigv4_result sig = { 0 };
	struct curl_slist *l = NULL;
	char date[17];
	size_t n = 0;
	bool ok = true;
	int rc = 0;

	sigv4_format_date((long long)time(NULL), date);
	hdrs[n++] = (struct sigv4_header){ "Host", c->host_header };
	hdrs[n++] = (struct sigv4_header){ "x-amz-content-sha256", SIGV4_EMPTY_SHA256 };
	hdrs[n++] = (struct sigv4_header){ "x-amz-date", date };
	if (c->session_token)
		hdrs[n++] = (struct sigv4_header){ "x-amz-security-token",
						   c->session_token };
	if (rq->range[0])
		hdrs[n++] = (struct sigv4_header){ "Range", rq->range };
	if (rq->if_match)
		hdrs[n++] = (struct sigv4_header){ "If-Match", rq->if_match };

	for (size_t i = 0; i < n; i++)
		l = append_header(l, &ok, hdrs[i].name, hdrs[i].value);
	if (!c->no_sign && ok) {
		struct sigv4_creds cr = { c->access_key, c->secret_key,
					  c->session_token };
		struct sigv4_request sr = {
			.method = rq->method, .path = rq->path, .query = rq->query,
			.headers = hdrs, .n_headers = n,
			.payload_hash = SIGV4_EMPTY_SHA256, .amz_date = date,
			.region = c->region, .service = "s3",
		};
		rc = sigv4_sign(&cr, &sr, &sig);
		if (!rc)
			l = append_header(l, &ok, "Authorization", sig.authorization);
		sigv4_result_fini(&sig);
	}
	/* curl adds an "Accept: any" header on its own; "Accept:" removes it, so every
	 * header on the wire is one we chose. */
	if (ok) {
		struct curl_slist *nl = curl_slist_append(l, "Accept:");

		if (nl)
			l = nl;
		else
			ok = false;
	}
	if (!ok && !rc)
		rc = -ENOMEM;
	if (rc) {
		curl_slist_free_all(l);
		return rc;
	}
	*out = l;
	return 0;
}

static void status_from_curl(struct s3_status *st, CURLcode cc,
			     const char *curl_err)
{
	st->http = 0;
	snprintf(st->code, sizeof(st->code), "curl-%d", (int)cc);
	snprintf(st->message, sizeof(st->message), "%s",
		 curl_err[0] ? curl_err : curl_easy_strerror(cc));
}

/*
 * One exchange in progress: the request, its curl handle and its sinks.
 * Used synchronously by s3_perform_once() and asynchronously by the
 * engine's multi handle through the s3_xfer_* functions (s3_xfer.h).
 */
struct s3_xfer {
	struct s3_client *c;
	struct s3_req rq;        /* owns rq.path and rq.query */
	struct s3_body body;     /* where a 2xx body goes */
	struct s3_body errbody;  /* where any other body goes */
	struct s3_sink sink;
	struct curl_slist *hdrs;
	char *url;
	CURL *h;                 /* from the pool while armed, else NULL */
	char *etag;              /* If-Match value, owned */
	bool ranged;             /* a GET of [off, off + body.max) */
	bool whole;              /* ... which is the whole object */
	uint64_t off;
	char curl_err[CURL_ERROR_SIZE];
	void *user;              /* the caller's, see s3_xfer_user() */
};

/* Gives the handle back and frees what one attempt built. */
static void xfer_disarm(struct s3_xfer *x, bool healthy)
{
	if (x->h)
		pool_put(x->c, x->h, healthy);
	x->h = NULL;
	curl_slist_free_all(x->hdrs);
	x->hdrs = NULL;
	free(x->url);
	x->url = NULL;
	free(x->errbody.buf);
	x->errbody = (struct s3_body){ .max = S3_ERROR_BODY_MAX, .growable = true };
}

/*
 * Readies @x for one attempt: signs it now (a retry gets a fresh date),
 * takes a handle from the pool and sets it up. A @retry goes out on a fresh
 * connection (the old one may be what failed: a server that throttles or
 * resets one connection), and a ranged GET keeps the bytes an earlier
 * attempt received and asks only for the rest: If-Match guarantees they
 * are of the same version. Otherwise the 2xx sink starts empty, so a retry
 * never appends to a broken attempt's bytes.
 */
static int xfer_arm(struct s3_xfer *x, bool retry)
{
	struct s3_client *c = x->c;
	CURL *h;
	int rc;

	xfer_disarm(x, true);
	if (!retry || !x->ranged || x->body.len >= x->body.max)
		x->body.len = 0;
	x->rq.range[0] = '\0';
	if (x->ranged && !(x->whole && x->body.len == 0))
		snprintf(x->rq.range, sizeof(x->rq.range), "bytes=%llu-%llu",
			 (unsigned long long)(x->off + x->body.len),
			 (unsigned long long)(x->off + x->body.max - 1));
	x->body.overflow = false;
	x->curl_err[0] = '\0';
	rc = build_headers(c, &x->rq, &x->hdrs);
	if (rc)
		return rc;
	if (asprintf(&x->url, "%s%s%s%s", c->base_url, x->rq.path,
		     x->rq.query[0] ? "?" : "", x->rq.query) < 0) {
		x->url = NULL;
		return -ENOMEM;
	}
	h = x->h = pool_get(c);
	if (!h)
		return -ENOMEM;
	atomic_fetch_add(x->ranged ? &c->n_gets : &c->n_lists, 1);
	x->sink = (struct s3_sink){ h, &x->body, &x->errbody };
	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, x->url);
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->hdrs);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, S3_CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)c->stall_timeout_s);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "hintfs/" HINTFS_VERSION);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curl_err);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x->sink);
	curl_easy_setopt(h, CURLOPT_PRIVATE, x);
	if (retry)
		curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
	if (c->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	return 0;
}

/*
 * Interprets the end of an attempt whose curl result is @cc, fills @st and
 * gives the handle back. Returns 0 or the -errno of s3_errno(); *@http
 * gets the status (0 when no answer came).
 */
static int xfer_conclude(struct s3_xfer *x, CURLcode cc, struct s3_status *st,
			 long *http)
{
	int rc = 0;

	*http = 0;
	memset(st, 0, sizeof(*st));
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, http);
	if (cc == CURLE_WRITE_ERROR && (x->body.overflow || x->errbody.overflow)) {
		st->http = *http;
		snprintf(st->code, sizeof(st->code), "BodyTooLarge");
		snprintf(st->message, sizeof(st->message),
			 "response body larger than expected");
		rc = -EPROTO;
	} else if (cc != CURLE_OK) {
		status_from_curl(st, cc, x->curl_err);
		*http = 0;
		rc = s3_errno(0, "", cc);
	} else if (*http / 100 != 2) {
		struct s3_error_doc doc;

		s3_error_parse(x->errbody.buf, x->errbody.len, &doc);
		st->http = *http;
		snprintf(st->code, sizeof(st->code), "%s", doc.code);
		snprintf(st->message, sizeof(st->message), "%s", doc.message);
		rc = s3_errno(*http, doc.code, CURLE_OK);
	}
	xfer_disarm(x, cc == CURLE_OK);
	return rc;
}

/* Performs one attempt of @x in the calling thread. */
static int s3_perform_once(struct s3_xfer *x, bool retry, struct s3_status *st,
			   long *http)
{
	int rc = xfer_arm(x, retry);

	if (rc) {
		*http = 0;
		memset(st, 0, sizeof(*st));
		snprintf(st->message, sizeof(st->message), "%s", strerror(-rc));
		return rc;
	}
	return xfer_conclude(x, curl_easy_perform(x->h), st, http);
}

/* Sleeps before attempt @attempt (1-based, > 1): capped exponential
 * backoff with full jitter, so retrying readers spread out. */
static void backoff_sleep(int attempt)
{
	unsigned int cap = S3_BACKOFF_BASE_MS << (attempt < 8 ? attempt - 1 : 7);
	unsigned int seed = (unsigned int)(uintptr_t)&attempt ^ (unsigned int)time(NULL);

	if (cap > S3_BACKOFF_CAP_MS)
		cap = S3_BACKOFF_CAP_MS;
	usleep(1000u * (cap / 2 + rand_r(&seed) % (cap / 2 + 1)));
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Performs @x with retries, within the client's budget of attempts and
 * time; a broken ranged GET resumes after its last good byte. */
static int s3_perform(struct s3_xfer *x, struct s3_status *st)
{
	uint64_t t0 = mono_ms();
	struct s3_status local;
	long http = 0;
	int rc = -EIO;

	if (!st)
		st = &local;
	for (int attempt = 1; attempt <= x->c->max_attempts; attempt++) {
		if (attempt > 1) {
			if (mono_ms() - t0 > (uint64_t)x->c->retry_time_ms)
				break;
			backoff_sleep(attempt);
		}
		rc = s3_perform_once(x, attempt > 1, st, &http);
		if (!rc || !s3_retryable(rc, http))
			break;
		log_debug("s3: %s %s: attempt %d failed: %s %s", x->rq.method,
			  x->rq.path, attempt, st->code, st->message);
	}
	return rc;
}

/* ---- operations --------------------------------------------------------- */

/* The request path of @key (encoded once, NOTE(s3): never normalized). */
static char *object_path(struct s3_client *c, const char *key, size_t key_len)
{
	char *enc = sigv4_uri_encode(key, key_len, true);
	char *path = NULL;

	if (!enc)
		return NULL;
	if (c->path_style) {
		if (asprintf(&path, "/%s/%s", c->bucket, enc) < 0)
			path = NULL;
	} else {
		if (asprintf(&path, "/%s", enc) < 0)
			path = NULL;
	}
	free(enc);
	return path;
}

static char *bucket_path(struct s3_client *c)
{
	char *path = NULL;

	if (c->path_style) {
		if (asprintf(&path, "/%s", c->bucket) < 0)
			path = NULL;
	} else {
		path = strdup("/");
	}
	return path;
}

/* One ListObjectsV2 request: under @prefix, after @start (@start_len
 * bytes; NULL: from the first key), grouped by '/' with @delimiter. */
struct list_rq {
	const char *prefix;
	const char *start;
	size_t start_len;
	bool delimiter;
	const char *token; /* NULL on a listing's first page */
};

/* NOTE(s3): query pairs go on the wire already encoded; the signer
 * re-canonicalizes them, so their order here does not matter. start-after
 * is dropped with a continuation token (which already says where). */
static char *list_query(const struct list_rq *r)
{
	char *p = sigv4_uri_encode(r->prefix, strlen(r->prefix), false);
	char *t = r->token ? sigv4_uri_encode(r->token, strlen(r->token), false)
			   : NULL;
	char *a = r->start && !r->token
		      ? sigv4_uri_encode(r->start, r->start_len, false)
		      : NULL;
	char *q = NULL;

	if (p && (!r->token || t) && (!r->start || r->token || a)) {
		if (asprintf(&q,
			     "list-type=2&encoding-type=url&max-keys=1000"
			     "&prefix=%s%s%s%s%s%s",
			     p, r->delimiter ? "&delimiter=%2F" : "",
			     t ? "&continuation-token=" : "", t ? t : "",
			     a ? "&start-after=" : "", a ? a : "") < 0)
			q = NULL;
	}
	free(p);
	free(t);
	free(a);
	return q;
}

/* Fetches the page @r names into @page (the caller frees it). @x carries
 * the path and the body buffer from page to page. */
static int list_page(struct s3_xfer *x, const struct list_rq *r,
		     struct s3_list_page *page, struct s3_status *st)
{
	int rc;

	memset(page, 0, sizeof(*page));
	free(x->rq.query);
	x->rq.query = list_query(r);
	if (!x->rq.query)
		return -ENOMEM;
	rc = s3_perform(x, st);
	if (rc)
		return rc;
	rc = s3_list_parse(x->body.buf, x->body.len, page, st->message,
			   sizeof(st->message));
	if (rc) {
		snprintf(st->code, sizeof(st->code), "MalformedListing");
		st->http = 200;
		return rc;
	}
	if (page->truncated && (!page->next_token || !page->next_token[0])) {
		s3_list_page_fini(page);
		snprintf(st->code, sizeof(st->code), "MalformedListing");
		snprintf(st->message, sizeof(st->message),
			 "truncated listing without NextContinuationToken");
		return -EPROTO;
	}
	return 0;
}

static int list_xfer_init(struct s3_client *c, struct s3_xfer *x)
{
	memset(x, 0, sizeof(*x));
	x->c = c;
	x->rq.method = "GET";
	x->body = (struct s3_body){.max = S3_LIST_BODY_MAX, .growable = true};
	x->rq.path = bucket_path(c);
	return x->rq.path ? 0 : -ENOMEM;
}

static void list_xfer_fini(struct s3_xfer *x)
{
	free(x->rq.path);
	free(x->rq.query);
	free(x->body.buf);
}

/* Byte order of keys, S3's order (UTF-8 code units). */
static int key_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
	int d = memcmp(a, b, alen < blen ? alen : blen);

	return d ? d : (alen > blen) - (alen < blen);
}

/*
 * A parallel listing: the key space after the first page, cut at split
 * points b_0 < b_1 < ... < b_n (b_0 the first page's last key) into the
 * ranges (b_i, b_i+1] and (b_n, end). Each range is listed with
 * start-after=b_i and stops at its first key past b_i+1: every key once,
 * at most one page per range read in vain.
 */
struct plist {
	struct s3_client *c;
	const char *prefix;
	s3_list_cb cb;
	void *arg;
	char **bounds;
	size_t *bound_lens;
	size_t n_bounds;
	pthread_mutex_t lock; /* cb calls, next, rc, st */
	size_t next;	      /* next range to list */
	int rc;		      /* first failure: the others stop */
	struct s3_status st;
};

/* Calls the callback for @e under the lock; false once anything failed. */
static bool plist_deliver(struct plist *pl, const struct s3_list_entry *e)
{
	struct s3_object o = {
	    .key = e->key,
	    .key_len = e->key_len,
	    .size = e->size,
	    .mtime = e->mtime,
	    .etag = e->etag,
	};
	bool go;

	pthread_mutex_lock(&pl->lock);
	if (!pl->rc)
		pl->rc = pl->cb(pl->arg, &o);
	go = !pl->rc;
	pthread_mutex_unlock(&pl->lock);
	return go;
}

static void plist_fail(struct plist *pl, int rc, const struct s3_status *st)
{
	pthread_mutex_lock(&pl->lock);
	if (!pl->rc) {
		pl->rc = rc;
		pl->st = *st;
	}
	pthread_mutex_unlock(&pl->lock);
}

/* Lists range @i. */
static void plist_range(struct plist *pl, struct s3_xfer *x, size_t i)
{
	const char *hi = i + 1 < pl->n_bounds ? pl->bounds[i + 1] : NULL;
	size_t hi_len = hi ? pl->bound_lens[i + 1] : 0;
	struct list_rq r = {.prefix = pl->prefix,
			    .start = pl->bounds[i],
			    .start_len = pl->bound_lens[i]};
	struct s3_status st = {0};
	char *token = NULL;
	bool done = false;

	while (!done) {
		struct s3_list_page page;
		int rc;

		r.token = token;
		rc = list_page(x, &r, &page, &st);
		if (rc) {
			plist_fail(pl, rc, &st);
			break;
		}
		for (size_t k = 0; k < page.n_entries && !done; k++) {
			const struct s3_list_entry *e = &page.entries[k];

			/* A server that ignores start-after would send the
			 * keys before the range again: never twice. */
			if (key_cmp(e->key, e->key_len, r.start, r.start_len) <=
			    0)
				continue;
			if (hi && key_cmp(e->key, e->key_len, hi, hi_len) > 0)
				done = true;
			else if (!plist_deliver(pl, e))
				done = true;
		}
		free(token);
		token = NULL;
		if (page.truncated && !done) {
			token = page.next_token;
			page.next_token = NULL;
		} else {
			done = true;
		}
		s3_list_page_fini(&page);
	}
	free(token);
}

static void *plist_worker(void *arg)
{
	struct plist *pl = arg;
	struct s3_xfer x;

	if (list_xfer_init(pl->c, &x)) {
		struct s3_status st = {0};

		snprintf(st.message, sizeof(st.message), "out of memory");
		plist_fail(pl, -ENOMEM, &st);
		return NULL;
	}
	for (;;) {
		size_t i;

		pthread_mutex_lock(&pl->lock);
		i = pl->rc ? pl->n_bounds : pl->next++;
		pthread_mutex_unlock(&pl->lock);
		if (i >= pl->n_bounds)
			break;
		plist_range(pl, &x, i);
	}
	list_xfer_fini(&x);
	return NULL;
}

/* Split points: sorted distinct strings, kept in @pl (bounds[0] is set by
 * the caller). */
static int bounds_add(struct plist *pl, size_t *cap, const char *s, size_t len)
{
	if (pl->n_bounds == *cap) {
		size_t n = *cap ? *cap * 2 : 64;
		char **b = reallocarray(pl->bounds, n, sizeof(*b));
		size_t *l =
		    b ? reallocarray(pl->bound_lens, n, sizeof(*l)) : NULL;

		if (b)
			pl->bounds = b;
		if (!l)
			return -ENOMEM;
		pl->bound_lens = l;
		*cap = n;
	}
	/* Keys are bytes: a decoded %00 is kept, so no strndup. */
	pl->bounds[pl->n_bounds] = malloc(len + 1);
	if (!pl->bounds[pl->n_bounds])
		return -ENOMEM;
	memcpy(pl->bounds[pl->n_bounds], s, len);
	pl->bounds[pl->n_bounds][len] = '\0';
	pl->bound_lens[pl->n_bounds++] = len;
	return 0;
}

static int cmp_bound(const void *a, const void *b, void *arg)
{
	const struct plist *pl = arg;
	size_t i = *(const size_t *)a, j = *(const size_t *)b;

	return key_cmp(pl->bounds[i], pl->bound_lens[i], pl->bounds[j],
		       pl->bound_lens[j]);
}

/*
 * Finds split points past @first (the first page's last key): the common
 * prefixes of delimiter pages (first page of each), one level at a time,
 * until there are @want of them or S3_LIST_DISCOVERY requests were made.
 * Then keeps @want of them, evenly spaced. Returns 0 or -errno with @st.
 */
static int plist_split(struct plist *pl, struct s3_xfer *x, size_t want,
		       struct s3_status *st)
{
	size_t cap = pl->n_bounds, level_start = 0, level_end, requests = 0;
	struct plist cand = {0};
	size_t cand_cap = 0, *order = NULL;
	int rc;

	/* Level 0 is the listing's own prefix. */
	rc = bounds_add(&cand, &cand_cap, pl->prefix, strlen(pl->prefix));
	level_end = cand.n_bounds;
	while (!rc && level_start < level_end && cand.n_bounds < want + 1) {
		for (size_t i = level_start; i < level_end && !rc; i++) {
			struct list_rq r = {.prefix = cand.bounds[i],
					    .delimiter = true};
			struct s3_list_page page;

			if (requests++ >= S3_LIST_DISCOVERY)
				break;
			rc = list_page(x, &r, &page, st);
			if (rc)
				break;
			for (size_t k = 0; !rc && k < page.n_prefixes; k++)
				rc = bounds_add(&cand, &cand_cap,
						page.prefixes[k].prefix,
						page.prefixes[k].len);
			s3_list_page_fini(&page);
		}
		level_start = level_end;
		level_end = cand.n_bounds;
		if (requests >= S3_LIST_DISCOVERY)
			break;
	}
	/* Candidates past the first page, sorted, evenly picked. */
	order = rc ? NULL
		   : calloc(cand.n_bounds ? cand.n_bounds : 1, sizeof(*order));
	if (!rc && !order)
		rc = -ENOMEM;
	if (!rc) {
		size_t n = 0, last = SIZE_MAX;

		for (size_t i = 1; i < cand.n_bounds; i++)
			if (key_cmp(cand.bounds[i], cand.bound_lens[i],
				    pl->bounds[0], pl->bound_lens[0]) > 0)
				order[n++] = i;
		qsort_r(order, n, sizeof(*order), cmp_bound, &cand);
		for (size_t k = 0; k < want && k < n && !rc; k++) {
			size_t pick = order[k * n / (want < n ? want : n)];

			if (last != SIZE_MAX && !cmp_bound(&last, &pick, &cand))
				continue;
			last = pick;
			rc = bounds_add(pl, &cap, cand.bounds[pick],
					cand.bound_lens[pick]);
		}
	}
	if (rc == -ENOMEM && !st->message[0])
		snprintf(st->message, sizeof(st->message), "out of memory");
	free(order);
	for (size_t i = 0; i < cand.n_bounds; i++)
		free(cand.bounds[i]);
	free(cand.bounds);
	free(cand.bound_lens);
	return rc;
}

/* Lists the rest of a listing whose first page ended at @last (@last_len
 * bytes), with up to c->list_workers threads. */
static int list_rest_parallel(struct s3_client *c, struct s3_xfer *x,
			      const char *prefix, const char *last,
			      size_t last_len, s3_list_cb cb, void *arg,
			      struct s3_status *st)
{
	struct plist pl = {.c = c, .prefix = prefix, .cb = cb, .arg = arg};
	size_t cap = 0, workers = (size_t)c->list_workers;
	pthread_t *th = NULL;
	size_t started = 0;
	int rc;

	pthread_mutex_init(&pl.lock, NULL);
	rc = bounds_add(&pl, &cap, last, last_len);
	if (!rc)
		rc = plist_split(&pl, x, workers * S3_LIST_RANGES_PER_WORKER,
				 st);
	if (!rc) {
		th = calloc(workers, sizeof(*th));
		if (!th)
			rc = -ENOMEM;
	}
	for (size_t i = 0; !rc && i < workers && i < pl.n_bounds; i++) {
		if (pthread_create(&th[i], NULL, plist_worker, &pl))
			break;
		started++;
	}
	if (!rc && !started)
		plist_worker(&pl); /* no thread: this one lists it all */
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	if (!rc && pl.rc) {
		rc = pl.rc;
		*st = pl.st;
	}
	free(th);
	for (size_t i = 0; i < pl.n_bounds; i++)
		free(pl.bounds[i]);
	free(pl.bounds);
	free(pl.bound_lens);
	pthread_mutex_destroy(&pl.lock);
	return rc;
}

int s3_list(struct s3_client *c, const char *prefix, s3_list_cb cb, void *arg,
	    struct s3_status *st)
{
	struct list_rq r = {.prefix = prefix};
	struct s3_status local;
	struct s3_xfer x;
	char *token = NULL;
	bool ordered = true; /* the first page's keys ascend */
	unsigned pages = 0;
	int rc;

	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	rc = list_xfer_init(c, &x);
	while (!rc) {
		struct s3_list_page page;
		const struct s3_list_entry *last = NULL;

		r.token = token;
		rc = list_page(&x, &r, &page, st);
		if (rc)
			break;
		pages++;
		for (size_t i = 0; i < page.n_entries && !rc; i++) {
			const struct s3_list_entry *e = &page.entries[i];
			struct s3_object o = {
				.key = e->key, .key_len = e->key_len,
				.size = e->size, .mtime = e->mtime, .etag = e->etag,
			};

			/* NOTE(s3): ranges rely on S3's byte order of keys;
			 * a server that sorts otherwise is listed page by
			 * page. */
			if (last && key_cmp(last->key, last->key_len, e->key,
					    e->key_len) >= 0)
				ordered = false;
			last = e;
			rc = cb(arg, &o);
		}
		free(token);
		token = NULL;
		if (!rc && page.truncated && pages == 1 && ordered && last &&
		    c->list_workers > 1) {
			rc = list_rest_parallel(c, &x, prefix, last->key,
						last->key_len, cb, arg, st);
			s3_list_page_fini(&page);
			break;
		}
		if (!rc && page.truncated) {
			token = page.next_token;
			page.next_token = NULL;
		}
		s3_list_page_fini(&page);
		if (!token)
			break;
	}
	free(token);
	list_xfer_fini(&x);
	return rc;
}

/* ---- ranged GETs, synchronous and for the engine ------------------------ */

int s3_xfer_create(struct s3_client *c, const char *key, size_t key_len,
		   const char *etag, uint64_t off, size_t len, void *buf,
		   void *user, struct s3_xfer **out)
{
	struct s3_xfer *x;

	if (len == 0)
		return -EINVAL;
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->c = c;
	x->user = user;
	x->rq.method = "GET";
	x->rq.if_match = NULL;
	x->body = (struct s3_body){ .buf = buf, .cap = len, .max = len };
	x->errbody = (struct s3_body){ .max = S3_ERROR_BODY_MAX, .growable = true };
	x->ranged = true;
	x->off = off;
	x->rq.path = object_path(c, key, key_len);
	x->rq.query = strdup("");
	x->etag = etag ? strdup(etag) : NULL;
	x->rq.if_match = x->etag;
	if (!x->rq.path || !x->rq.query || (etag && !x->etag)) {
		s3_xfer_destroy(x);
		return -ENOMEM;
	}
	*out = x;
	return 0;
}

void s3_xfer_destroy(struct s3_xfer *x)
{
	if (!x)
		return;
	xfer_disarm(x, false);
	free(x->errbody.buf);
	free(x->rq.path);
	free(x->rq.query);
	free(x->etag);
	free(x);
}

int s3_xfer_arm(struct s3_xfer *x, bool retry, CURL **easy)
{
	int rc = xfer_arm(x, retry);

	*easy = rc ? NULL : x->h;
	return rc;
}

ssize_t s3_xfer_finish(struct s3_xfer *x, CURLcode cc, struct s3_status *st,
		       bool *retryable)
{
	long http;
	int rc = xfer_conclude(x, cc, st, &http);

	*retryable = rc && s3_retryable(rc, http);
	return rc ? rc : (ssize_t)x->body.len;
}

void s3_client_counts(struct s3_client *c, uint64_t *lists, uint64_t *gets)
{
	*lists = atomic_load(&c->n_lists);
	*gets = atomic_load(&c->n_gets);
}

CURL *s3_xfer_easy(const struct s3_xfer *x)
{
	return x->h;
}

void s3_xfer_whole_object(struct s3_xfer *x)
{
	x->whole = x->off == 0;
}

void *s3_xfer_user(const struct s3_xfer *x)
{
	return x->user;
}

ssize_t s3_get_range(struct s3_client *c, const char *key, size_t key_len,
		     const char *etag, uint64_t off, size_t len, void *buf,
		     struct s3_status *st)
{
	struct s3_xfer *x;
	ssize_t rc;

	if (len == 0)
		return 0;
	rc = s3_xfer_create(c, key, key_len, etag, off, len, buf, NULL, &x);
	if (rc)
		return rc;
	rc = s3_perform(x, st);
	if (!rc)
		rc = (ssize_t)x->body.len;
	s3_xfer_destroy(x);
	return rc;
}
