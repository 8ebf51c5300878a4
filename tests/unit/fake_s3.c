/*
 * tests/unit/fake_s3.c - an in-memory S3 in place of the client's HTTP
 * exchange (prefetch/s3/s3_request.c), linked into unit tests instead of it
 * (see fake_s3.h for why at this seam).
 *
 * Implements what s3_request.c exports: s3_perform() for the client's
 * blocking requests (list pages, read-through GETs), with the real retry
 * policy but no sleeping, and the arming, concluding and freeing of the
 * transfers the engine drives through its curl multi handle (created by
 * the real s3_object.c). A transfer's easy handle fetches
 * file:///dev/null, so that curl reports it done at once; the answer is
 * made when the engine concludes it (s3_xfer_finish()).
 *
 * Answers follow S3: ListObjectsV2 with prefix, delimiter, start-after,
 * continuation-token and max-keys, keys in byte order; GETs with Range
 * and If-Match (412 PreconditionFailed on a changed object, 404 NoSuchKey
 * on a deleted one); errors as <Error> documents through the real
 * s3_errno()/s3_kind().
 */
#include "fake_s3.h"
#include "prefetch/s3/s3_internal.h"
#include "prefetch/s3/s3_xml.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fake_obj {
	char *key;
	char *data;
	size_t size;
	char etag[40];
	/* What a PUT gave as x-amz-meta-hintfs-*, "" if nothing. */
	char m_etag[128], m_sum[32], m_size[32], m_mac[72];
};

struct fake_fault {
	char what[256];
	long http;
	char code[64];
	int times;
};

static struct {
	pthread_mutex_t mu;
	struct fake_obj *objs; /* sorted by key */
	size_t n, cap;
	unsigned page_max;
	bool ignore_start_after;
	struct fake_fault faults[16];
	size_t n_faults;
	uint64_t gets, lists, puts, version;
} F = {.mu = PTHREAD_MUTEX_INITIALIZER, .page_max = 1000};

void fake_s3_reset(void)
{
	pthread_mutex_lock(&F.mu);
	for (size_t i = 0; i < F.n; i++) {
		free(F.objs[i].key);
		free(F.objs[i].data);
	}
	free(F.objs);
	F.objs = NULL;
	F.n = F.cap = 0;
	F.page_max = 1000;
	F.ignore_start_after = false;
	F.n_faults = 0;
	F.gets = F.lists = F.puts = 0;
	pthread_mutex_unlock(&F.mu);
}

/* The index of @key, or where it would go. F.mu held. */
static size_t find(const char *key, bool *found)
{
	size_t lo = 0, hi = F.n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(F.objs[mid].key, key);

		if (!c) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

int fake_s3_put(const char *key, const void *data, size_t len)
{
	struct fake_obj *o;
	bool found;
	size_t i;
	char *copy = malloc(len ? len : 1);

	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, len);
	pthread_mutex_lock(&F.mu);
	i = find(key, &found);
	if (!found) {
		if (F.n == F.cap) {
			size_t cap = F.cap ? F.cap * 2 : 64;
			struct fake_obj *no =
			    realloc(F.objs, cap * sizeof(*no));

			if (!no) {
				pthread_mutex_unlock(&F.mu);
				free(copy);
				return -ENOMEM;
			}
			F.objs = no;
			F.cap = cap;
		}
		memmove(&F.objs[i + 1], &F.objs[i],
			(F.n - i) * sizeof(*F.objs));
		F.n++;
		F.objs[i] = (struct fake_obj){.key = strdup(key)};
	}
	o = &F.objs[i];
	free(o->data);
	o->data = copy;
	o->size = len;
	o->m_etag[0] = o->m_sum[0] = o->m_size[0] = o->m_mac[0] = '\0';
	snprintf(o->etag, sizeof(o->etag), "\"v%llu-%zu\"",
		 (unsigned long long)++F.version, len);
	pthread_mutex_unlock(&F.mu);
	return 0;
}

const char *fake_s3_etag(const char *key)
{
	static __thread char etag[40];
	bool found;
	size_t i;

	pthread_mutex_lock(&F.mu);
	i = find(key, &found);
	snprintf(etag, sizeof(etag), "%s", found ? F.objs[i].etag : "");
	pthread_mutex_unlock(&F.mu);
	return etag;
}

void fake_s3_page_max(unsigned n)
{
	pthread_mutex_lock(&F.mu);
	F.page_max = n;
	pthread_mutex_unlock(&F.mu);
}

void fake_s3_ignore_start_after(bool on)
{
	pthread_mutex_lock(&F.mu);
	F.ignore_start_after = on;
	pthread_mutex_unlock(&F.mu);
}

void fake_s3_fail(const char *what, long http, const char *code, int times)
{
	pthread_mutex_lock(&F.mu);
	if (F.n_faults < sizeof(F.faults) / sizeof(F.faults[0])) {
		struct fake_fault *f = &F.faults[F.n_faults++];

		snprintf(f->what, sizeof(f->what), "%s", what);
		snprintf(f->code, sizeof(f->code), "%s", code ? code : "");
		f->http = http;
		f->times = times;
	}
	pthread_mutex_unlock(&F.mu);
}

uint64_t fake_s3_gets(void)
{
	pthread_mutex_lock(&F.mu);
	uint64_t n = F.gets;
	pthread_mutex_unlock(&F.mu);
	return n;
}

uint64_t fake_s3_puts(void)
{
	uint64_t n;

	pthread_mutex_lock(&F.mu);
	n = F.puts;
	pthread_mutex_unlock(&F.mu);
	return n;
}

uint64_t fake_s3_lists(void)
{
	pthread_mutex_lock(&F.mu);
	uint64_t n = F.lists;
	pthread_mutex_unlock(&F.mu);
	return n;
}

/* ---- answers ------------------------------------------------------------ */

/* Fills @st as the real exchange does for an answer of status @http (0: a
 * reset) with S3 code @code; returns the errno. */
static int answer_error(struct s3_status *st, long http, const char *code)
{
	int rc;

	memset(st, 0, sizeof(*st));
	if (!http) {
		s3_status_from_curl(st, CURLE_RECV_ERROR,
				    "fake: connection reset");
		rc = s3_errno(0, "", CURLE_RECV_ERROR);
	} else {
		st->http = http;
		snprintf(st->code, sizeof(st->code), "%s", code);
		snprintf(st->message, sizeof(st->message), "fake %s", code);
		rc = s3_errno(http, code, CURLE_OK);
	}
	st->kind = s3_kind(rc, st->http, st->code);
	return rc;
}

/* Whether a fault hits request @what; counts it down. F.mu held. */
static bool take_fault(const char *what, long *http, char *code, size_t cap)
{
	for (size_t i = 0; i < F.n_faults; i++) {
		struct fake_fault *f = &F.faults[i];

		if (f->times == 0 || strcmp(f->what, what))
			continue;
		if (f->times > 0)
			f->times--;
		*http = f->http;
		snprintf(code, cap, "%s", f->code);
		return true;
	}
	return false;
}

/* The value of query parameter @name, decoded (malloc'd), or NULL. */
static char *query_get(const char *q, const char *name)
{
	size_t nlen = strlen(name);

	for (const char *p = q; p && *p;) {
		const char *amp = strchr(p, '&');
		size_t len = amp ? (size_t)(amp - p) : strlen(p);

		if (len > nlen && !strncmp(p, name, nlen) && p[nlen] == '=') {
			size_t out_len;

			return s3_form_decode(p + nlen + 1, len - nlen - 1,
					      &out_len);
		}
		p = amp ? amp + 1 : NULL;
	}
	return NULL;
}

static int append(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

/* One ListObjectsV2 page for @query into @body. F.mu held. */
static int answer_list(const char *query, struct s3_body *body)
{
	char *prefix = query_get(query, "prefix");
	char *delim = query_get(query, "delimiter");
	char *token = query_get(query, "continuation-token");
	char *after = query_get(query, "start-after");
	char *mk = query_get(query, "max-keys");
	unsigned max = mk ? (unsigned)atoi(mk) : 1000;
	const char *from = token ? token : F.ignore_start_after ? NULL : after;
	size_t plen = prefix ? strlen(prefix) : 0;
	struct buf b = {0};
	char last[1024] = "", line[2048];
	unsigned count = 0;
	bool truncated = false;
	int rc = 0;

	if (max > F.page_max)
		max = F.page_max;
	append(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/"
		   "2006-03-01/\"><Name>b</Name>");
	for (size_t i = 0; i < F.n && !truncated; i++) {
		const char *k = F.objs[i].key;
		const char *rest, *slash;
		char cp[1024];

		if (strncmp(k, prefix ? prefix : "", plen))
			continue;
		if (from && strcmp(k, from) <= 0)
			continue;
		/* After a common prefix, its keys are done. */
		if (from && delim && *from && from[strlen(from) - 1] == '/' &&
		    !strncmp(k, from, strlen(from)))
			continue;
		rest = k + plen;
		slash = delim ? strchr(rest, '/') : NULL;
		if (slash) {
			snprintf(cp, sizeof(cp), "%.*s", (int)(slash - k + 1),
				 k);
			if (!strcmp(cp, last))
				continue;
		}
		if (count == max) {
			truncated = true;
			break;
		}
		count++;
		if (slash) {
			snprintf(line, sizeof(line),
				 "<CommonPrefixes><Prefix>%s</Prefix>"
				 "</CommonPrefixes>",
				 cp);
			snprintf(last, sizeof(last), "%s", cp);
		} else {
			snprintf(line, sizeof(line),
				 "<Contents><Key>%s</Key><LastModified>"
				 "2024-01-02T03:04:05.000Z</LastModified>"
				 "<ETag>%s</ETag><Size>%zu</Size></Contents>",
				 k, F.objs[i].etag, F.objs[i].size);
			snprintf(last, sizeof(last), "%s", k);
		}
		append(&b, line);
	}
	snprintf(line, sizeof(line),
		 "<KeyCount>%u</KeyCount><IsTruncated>%s"
		 "</IsTruncated>",
		 count, truncated ? "true" : "false");
	append(&b, line);
	if (truncated) {
		/* The token is the last entry given: opaque to the client. */
		snprintf(line, sizeof(line),
			 "<NextContinuationToken>%s"
			 "</NextContinuationToken>",
			 last);
		append(&b, line);
	}
	if (append(&b, "</ListBucketResult>"))
		rc = -ENOMEM;
	if (!rc && b.len > body->max)
		rc = -EPROTO;
	if (!rc) {
		buf_fini(&body->b);
		body->b = b;
	} else {
		buf_fini(&b);
	}
	free(prefix);
	free(delim);
	free(token);
	free(after);
	free(mk);
	return rc;
}

/* The key a GET's path names ("/bucket/key" or "/key", encoded), as a
 * malloc'd string, or NULL. */
static char *path_key(const struct s3_xfer *x)
{
	const char *p = x->rq.path + 1;
	size_t len;

	if (x->c->path_style)
		p += strlen(x->c->bucket) + 1;
	return s3_form_decode(p, strlen(p), &len);
}

/* A GET of object @key into the caller's buffer. F.mu held. */
static int answer_get(struct s3_xfer *x, const char *key, struct s3_status *st)
{
	bool found;
	size_t i = find(key, &found);
	const struct fake_obj *o = &F.objs[i];
	uint64_t from = x->off + x->body.b.len, to = x->off + x->body.max;

	if (!found)
		return answer_error(st, 404, "NoSuchKey");
	if (x->etag && strcmp(x->etag, o->etag))
		return answer_error(st, 412, "PreconditionFailed");
	/* The headers a server sends with the body. */
	memset(&x->meta, 0, sizeof(x->meta));
	if (x->want_meta) {
		char *end;

		snprintf(x->meta.origin_etag, sizeof(x->meta.origin_etag), "%s",
			 o->m_etag);
		snprintf(x->meta.sum, sizeof(x->meta.sum), "%s", o->m_sum);
		snprintf(x->meta.mac, sizeof(x->meta.mac), "%s", o->m_mac);
		x->meta.origin_size = strtoull(o->m_size, &end, 10);
		x->meta.has_origin_size = o->m_size[0] && !*end;
		x->meta.length = o->size;
		x->meta.has_length = true;
	}
	if (to > o->size)
		to = o->size;
	if (from < to) {
		memcpy(x->body.b.data + x->body.b.len, o->data + from,
		       (size_t)(to - from));
		x->body.b.len += (size_t)(to - from);
	}
	return 0;
}

/* A PUT of object @key with its metadata. F.mu held. */
static int answer_put(struct s3_xfer *x, const char *key)
{
	struct fake_obj *o;
	bool found;
	int rc;

	pthread_mutex_unlock(&F.mu);
	rc = fake_s3_put(key, x->put_data, x->put_len);
	pthread_mutex_lock(&F.mu);
	if (rc)
		return rc;
	o = &F.objs[find(key, &found)];
	for (size_t i = 0; i < x->n_meta; i++) {
		const char *n = x->meta_names[i], *v = x->meta_values[i];

		if (!strcmp(n, "x-amz-meta-hintfs-etag"))
			snprintf(o->m_etag, sizeof(o->m_etag), "%s", v);
		else if (!strcmp(n, "x-amz-meta-hintfs-xxh3"))
			snprintf(o->m_sum, sizeof(o->m_sum), "%s", v);
		else if (!strcmp(n, "x-amz-meta-hintfs-size"))
			snprintf(o->m_size, sizeof(o->m_size), "%s", v);
		else if (!strcmp(n, "x-amz-meta-hintfs-mac"))
			snprintf(o->m_mac, sizeof(o->m_mac), "%s", v);
	}
	return 0;
}

/* One attempt of @x: answers it. */
static int answer(struct s3_xfer *x, bool retry, struct s3_status *st)
{
	bool list = !strncmp(x->rq.query, "list-type=", 10);
	char *key = list ? NULL : path_key(x);
	char code[64];
	long http;
	int rc;

	memset(st, 0, sizeof(*st));
	if (!list && !key)
		return -ENOMEM;
	if (!retry || !x->ranged || x->body.b.len >= x->body.max)
		x->body.b.len = 0;
	pthread_mutex_lock(&F.mu);
	if (list)
		F.lists++;
	else if (x->put_data)
		F.puts++;
	else
		F.gets++;
	if (take_fault(list ? "LIST" : key, &http, code, sizeof(code)))
		rc = answer_error(st, http, code);
	else if (x->put_data)
		rc = answer_put(x, key);
	else if (list)
		rc = answer_list(x->rq.query, &x->body);
	else
		rc = answer_get(x, key, st);
	pthread_mutex_unlock(&F.mu);
	free(key);
	if (rc == -EPROTO || rc == -ENOMEM) {
		snprintf(st->message, sizeof(st->message), "fake: %s",
			 strerror(-rc));
		st->kind = S3_ERR_OTHER;
	}
	return rc;
}

/* ---- what s3_request.c exports ------------------------------------------ */

int s3_perform(struct s3_xfer *x, struct s3_status *st)
{
	const struct retry_policy *rp = &x->c->retry;
	struct s3_status local;
	int rc;

	if (!st)
		st = &local;
	/* The policy's attempts, without its waits: tests need no clock. */
	for (int attempt = 1;; attempt++) {
		rc = answer(x, attempt > 1, st);
		if (!rc || !s3_retryable(rc, st->http) ||
		    retry_give_up(rp, attempt, 0))
			break;
	}
	return rc;
}

void s3_xfer_destroy(struct s3_xfer *x)
{
	if (!x)
		return;
	if (x->h)
		curl_easy_cleanup(x->h);
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
	x->h = curl_easy_init();
	if (!x->h)
		return -ENOMEM;
	/* Done as soon as the multi handle looks at it. */
	curl_easy_setopt(x->h, CURLOPT_URL, "file:///dev/null");
	curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->h, CURLOPT_PRIVATE, x);
	/* The fake keeps the attempt's retry flag for s3_xfer_finish() in
	 * curl_err[0], which it has no other use for. */
	x->curl_err[0] = retry;
	*easy = x->h;
	return 0;
}

ssize_t s3_xfer_finish(struct s3_xfer *x, CURLcode cc, struct s3_status *st,
		       bool *retryable)
{
	int rc;

	curl_easy_cleanup(x->h);
	x->h = NULL;
	rc = cc == CURLE_OK ? answer(x, x->curl_err[0], st)
			    : answer_error(st, 0, "");
	*retryable = rc && s3_retryable(rc, st->http);
	return rc ? rc : (ssize_t)x->body.b.len;
}
