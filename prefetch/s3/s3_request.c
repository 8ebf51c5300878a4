/*
 * prefetch/s3/s3_request.c - one S3 exchange: building, signing, sending,
 * interpreting; synchronously (s3_perform(), with retries) or as an
 * engine's transfer (s3_xfer.h).
 *
 * Owns the pool of curl easy handles and the sinks bodies land in.
 *
 * Invariants:
 * - A curl easy handle is used by one thread at a time: it is taken from
 *   the pool for one request and given back after it (libcurl-thread(3)).
 *   Each handle keeps its connections open, so the pool is also the
 *   connection cache.
 * - The path curl sends is the path we signed: CURLOPT_PATH_AS_IS stops curl
 *   from squashing "/./" or "//", which are legal in S3 keys, and the Host
 *   header is set by us to the value we signed.
 * - Credentials go into headers only; nothing here logs a header. Each
 *   attempt signs with the snapshot creds_get() gives at that moment and
 *   remembers its generation: an answer that says "expired" asks creds.c
 *   for one refresh and earns the request a retry (auth_expired()).
 */
#include "prefetch/s3/s3_internal.h"
#include "prefetch/s3/s3_xml.h"
#include "prefetch/s3/sigv4.h"
#include "common/clock.h"
#include "common/log.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* How long a reader waits for the refresh an "expired" answer asked for:
 * STS and IMDS answer in ms, a credential_process in seconds. */
#define S3_AUTH_WAIT_MS 10000

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

/* ---- one HTTP exchange -------------------------------------------------- */

static size_t body_append(struct s3_body *b, const char *ptr, size_t n)
{
	if (b->b.len + n > b->max) {
		b->overflow = true;
		return CURL_WRITEFUNC_ERROR;
	}
	if (b->fixed) {
		memcpy(b->b.data + b->b.len, ptr, n);
		b->b.len += n;
		return n;
	}
	/* 16 KiB first: an error document fits, a list page doubles to
	 * its ~300 KB in a few steps. */
	if (!b->b.cap && buf_reserve(&b->b, 16384))
		return CURL_WRITEFUNC_ERROR;
	return buf_append(&b->b, ptr, n) ? CURL_WRITEFUNC_ERROR : n;
}

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

/* Builds the header list of @rq, signed with @cr unless it is NULL (an
 * anonymous mount). */
static int build_headers(struct s3_client *c, const struct s3_xfer *x,
			 const struct creds_snap *cr, struct curl_slist **out)
{
	const struct s3_req *rq = &x->rq;
	const char *payload =
	    x->put_data ? SIGV4_UNSIGNED_PAYLOAD : SIGV4_EMPTY_SHA256;
	struct sigv4_header hdrs[8 + S3_META_MAX];
	struct sigv4_result sig = {0};
	struct curl_slist *l = NULL;
	char date[17];
	size_t n = 0;
	bool ok = true;
	int rc = 0;

	sigv4_format_date((long long)time(NULL), date);
	hdrs[n++] = (struct sigv4_header){"Host", c->host_header};
	hdrs[n++] = (struct sigv4_header){"x-amz-content-sha256", payload};
	hdrs[n++] = (struct sigv4_header){"x-amz-date", date};
	if (cr && cr->session_token)
		hdrs[n++] = (struct sigv4_header){"x-amz-security-token",
						  cr->session_token};
	if (rq->range[0])
		hdrs[n++] = (struct sigv4_header){"Range", rq->range};
	if (rq->if_match)
		hdrs[n++] = (struct sigv4_header){"If-Match", rq->if_match};
	/* NOTE(s3): every x-amz-* header sent must be signed. */
	for (size_t i = 0; i < x->n_meta; i++)
		hdrs[n++] =
		    (struct sigv4_header){x->meta_names[i], x->meta_values[i]};

	for (size_t i = 0; i < n; i++)
		l = append_header(l, &ok, hdrs[i].name, hdrs[i].value);
	if (cr && ok) {
		struct sigv4_creds sc = {cr->access_key, cr->secret_key,
					 cr->session_token};
		struct sigv4_request sr = {
		    .method = rq->method,
		    .path = rq->path,
		    .query = rq->query,
		    .headers = hdrs,
		    .n_headers = n,
		    .payload_hash = payload,
		    .amz_date = date,
		    .region = c->region,
		    .service = "s3",
		};
		/* The creds snapshot may differ from the last request's (a
		 * refresh): sigv4_sign_key() notices the secret changed. */
		pthread_mutex_lock(&c->sign_lock);
		rc = sigv4_sign_key(&sc, &sr, &c->sign_key, &sig);
		pthread_mutex_unlock(&c->sign_lock);
		if (!rc)
			l = append_header(l, &ok, "Authorization",
					  sig.authorization);
		sigv4_result_fini(&sig);
	}
	/* curl adds an "Accept: any" header on its own; "Accept:" removes it,
	 * so every header on the wire is one we chose. */
	if (ok) {
		struct curl_slist *nl = curl_slist_append(l, "Accept:");

		if (nl)
			l = nl;
		else
			ok = false;
	}
	/* A PUT's body goes at once: waiting for "100 Continue" costs a
	 * round trip (or curl's one-second wait) per object. */
	if (ok && x->put_data) {
		struct curl_slist *nl = curl_slist_append(l, "Expect:");

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

/* Feeds a PUT's body to curl; each attempt starts again at its start. */
static size_t put_read(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct s3_xfer *x = arg;
	size_t n = x->put_len - x->put_off;

	if (n > size * nmemb)
		n = size * nmemb;
	memcpy(ptr, x->put_data + x->put_off, n);
	x->put_off += n;
	return n;
}

/* Copies header value @v (@n bytes, CRLF and spaces trimmed) into @dst. */
static void header_value(char *dst, size_t cap, const char *v, size_t n)
{
	while (n && (*v == ' ' || *v == '\t')) {
		v++;
		n--;
	}
	while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1; /* too long to match anything we wrote */
	memcpy(dst, v, n);
	dst[n] = '\0';
}

/* Whether header line @line (@n bytes) is @name: and where its value is. */
static bool header_is(const char *line, size_t n, const char *name,
		      const char **val, size_t *vlen)
{
	size_t k = strlen(name);

	if (n <= k || line[k] != ':' || strncasecmp(line, name, k))
		return false;
	*val = line + k + 1;
	*vlen = n - k - 1;
	return true;
}

/*
 * Keeps the headers s3_obj_meta describes. NOTE(s3): a response to a
 * retried or redirected request starts a new header block; the status
 * line resets what an earlier block said.
 */
static size_t header_line(char *line, size_t size, size_t nmemb, void *arg)
{
	struct s3_xfer *x = arg;
	struct s3_obj_meta *m = &x->meta;
	size_t n = size * nmemb, vlen;
	const char *v;
	char num[32];

	if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
		memset(m, 0, sizeof(*m));
	} else if (header_is(line, n, "x-amz-meta-hintfs-etag", &v, &vlen)) {
		header_value(m->origin_etag, sizeof(m->origin_etag), v, vlen);
	} else if (header_is(line, n, "x-amz-meta-hintfs-xxh3", &v, &vlen)) {
		header_value(m->sum, sizeof(m->sum), v, vlen);
	} else if (header_is(line, n, "x-amz-meta-hintfs-mac", &v, &vlen)) {
		header_value(m->mac, sizeof(m->mac), v, vlen);
	} else if (header_is(line, n, "x-amz-meta-hintfs-size", &v, &vlen)) {
		char *end;

		header_value(num, sizeof(num), v, vlen);
		m->origin_size = strtoull(num, &end, 10);
		m->has_origin_size = num[0] && !*end;
	} else if (header_is(line, n, "content-length", &v, &vlen)) {
		char *end;

		header_value(num, sizeof(num), v, vlen);
		m->length = strtoull(num, &end, 10);
		m->has_length = num[0] && !*end;
	}
	return n;
}

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
	buf_fini(&x->errbody.b);
	x->errbody = (struct s3_body){.max = S3_ERROR_BODY_MAX};
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
	if (!retry || !x->ranged || x->body.b.len >= x->body.max)
		x->body.b.len = 0;
	x->rq.range[0] = '\0';
	if (x->ranged && !(x->whole && x->body.b.len == 0))
		snprintf(x->rq.range, sizeof(x->rq.range), "bytes=%llu-%llu",
			 (unsigned long long)(x->off + x->body.b.len),
			 (unsigned long long)(x->off + x->body.max - 1));
	x->body.overflow = false;
	x->curl_err[0] = '\0';
	x->auth_retry = false;
	if (c->creds) {
		const struct creds_snap *cr = creds_get(c->creds);

		x->creds_gen = cr->gen;
		x->creds_expires = cr->expires;
		rc = build_headers(c, x, cr, &x->hdrs);
		creds_put(cr);
	} else {
		rc = build_headers(c, x, NULL, &x->hdrs);
	}
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
	atomic_fetch_add(x->put_data ? &c->n_puts
			 : x->ranged ? &c->n_gets
				     : &c->n_lists,
			 1);
	x->put_off = 0;
	memset(&x->meta, 0, sizeof(x->meta));
	x->sink = (struct s3_sink){h, &x->body, &x->errbody};
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
	/* 64 KiB, not curl's 16: a ~100 KB object arrives in 2 recv calls
	 * and 2 write callbacks instead of 7 (probe.py: system calls per
	 * cold object 32-42 -> 24). At most S3_POOL_MAX idle handles and
	 * the ones in flight keep one each: a few MB at the default limit. */
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, S3_RECV_BUFFER_BYTES);
	if (retry)
		curl_easy_setopt(h, CURLOPT_FRESH_CONNECT, 1L);
	if (x->want_meta) {
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_line);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
	}
	if (x->put_data) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, put_read);
		curl_easy_setopt(h, CURLOPT_READDATA, x);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)x->put_len);
	}
	if (c->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
	return 0;
}

/*
 * Whether the server refused @x's attempt because its credentials expired:
 * it says so (ExpiredToken), or it refused them (403, 400) when they are
 * past the expiry they came with (a server whose clock runs ahead).
 */
static bool auth_expired(const struct s3_xfer *x, long http, const char *code)
{
	if (!x->c->creds)
		return false;
	if (!strcmp(code, "ExpiredToken") ||
	    !strcmp(code, "TokenRefreshRequired"))
		return true;
	return (http == 403 || http == 400) && x->creds_expires &&
	       x->creds_expires <= (int64_t)time(NULL);
}

/*
 * Interprets the end of an attempt whose curl result is @cc, fills @st and
 * gives the handle back. Returns 0 or the -errno of s3_errno(); *@http
 * gets the status (0 when no answer came).
 */
static int xfer_conclude(struct s3_xfer *x, CURLcode cc, struct s3_status *st,
			 long *http)
{
	long connects = 0;
	int rc = 0;

	*http = 0;
	memset(st, 0, sizeof(*st));
	curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, http);
	if (curl_easy_getinfo(x->h, CURLINFO_NUM_CONNECTS, &connects) ==
		CURLE_OK &&
	    connects > 0)
		atomic_fetch_add(&x->c->n_connects, (uint64_t)connects);
	if (cc == CURLE_WRITE_ERROR &&
	    (x->body.overflow || x->errbody.overflow)) {
		st->http = *http;
		snprintf(st->code, sizeof(st->code), "BodyTooLarge");
		snprintf(st->message, sizeof(st->message),
			 "response body larger than expected");
		rc = -EPROTO;
	} else if (cc != CURLE_OK) {
		s3_status_from_curl(st, cc, x->curl_err);
		*http = 0;
		rc = s3_errno(0, "", cc);
	} else if (*http / 100 != 2) {
		struct s3_error_doc doc;

		s3_error_parse(x->errbody.b.data, x->errbody.b.len, &doc);
		st->http = *http;
		snprintf(st->code, sizeof(st->code), "%s", doc.code);
		snprintf(st->message, sizeof(st->message), "%s", doc.message);
		rc = s3_errno(*http, doc.code, CURLE_OK);
		/* A reader waits for the refresh this asks for, then
		 * retries once; the engine retries after its backoff, until
		 * the new credentials are there or its budget is spent. */
		if (auth_expired(x, *http, doc.code) &&
		    creds_expired(x->c->creds, x->creds_gen))
			x->auth_retry = true;
	}
	if (rc)
		st->kind = s3_kind(rc, *http, st->code);
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

/* Performs @x with retries, within the client's budget of attempts and
 * time; a broken ranged GET resumes after its last good byte. */
int s3_perform(struct s3_xfer *x, struct s3_status *st)
{
	const struct retry_policy *rp = &x->c->retry;
	uint64_t t0 = mono_ms();
	unsigned int seed = (unsigned int)(uintptr_t)x ^ (unsigned int)t0;
	struct s3_status local;
	long http = 0;
	int rc;

	if (!st)
		st = &local;
	for (int attempt = 1;; attempt++) {
		rc = s3_perform_once(x, attempt > 1, st, &http);
		if (!rc || (!s3_retryable(rc, http) && !x->auth_retry))
			break;
		log_debug("s3: %s %s: attempt %d failed: %s %s", x->rq.method,
			  x->rq.path, attempt, st->code, st->message);
		if (retry_give_up(rp, attempt, mono_ms() - t0))
			break;
		/* "Expired": the refresh was asked for; wait for it rather
		 * than spend the retry before it lands. */
		if (x->auth_retry) {
			if (!creds_wait_newer(x->c->creds, x->creds_gen,
					      S3_AUTH_WAIT_MS))
				break;
			continue;
		}
		usleep(1000u * retry_delay_ms(rp, attempt, &seed));
	}
	return rc;
}

/* ---- the engine's transfers (s3_xfer.h) ------------------------------- */

void s3_xfer_destroy(struct s3_xfer *x)
{
	if (!x)
		return;
	xfer_disarm(x, false);
	buf_fini(&x->errbody.b);
	free(x->rq.path);
	free(x->rq.query);
	free(x->etag);
	for (size_t i = 0; i < x->n_meta; i++) {
		free(x->meta_names[i]);
		free(x->meta_values[i]);
	}
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

	*retryable = rc && (s3_retryable(rc, http) || x->auth_retry);
	return rc ? rc : (ssize_t)x->body.b.len;
}
