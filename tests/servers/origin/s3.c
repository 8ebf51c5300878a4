/*
 * tests/servers/origin/s3.c - the S3 API of the fast origin: object
 * GET (whole, one byte range, If-Match) and HEAD, bucket HEAD,
 * ListObjectsV2, and S3's XML errors.
 *
 * Owns the mapping from a request to a response: a head (with any XML
 * body) built in memory and, for object bodies, a file range that the
 * event loop sends with sendfile(2). Answers only from the store, which
 * never changes, so no request waits on another.
 * NOTE(s3): the Authorization header (SigV4 or anything else) is accepted
 * as sent and never verified: this is a test server on loopback, and a
 * check would cost the CPU it exists to save. Path-style URLs only.
 * Invariant: every answer carries a Content-Length, so the connection
 * stays open for the next request unless the client asked to close it.
 */
#include "s3.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* S3's longest key is 1,024 bytes; a decoded path holds a bucket name
 * (63 at most), two slashes and a key, with room. */
#define S3_PATH_MAX 1200
/* A continuation token: a type letter and a key, in hex. */
#define S3_TOKEN_MAX (2 * (1 + 1024))
/* ListObjectsV2 answers at most 1,000 keys a page, whatever max-keys. */
#define S3_LIST_PAGE_MAX 1000

/* ------------------------------------------------------------ strings */

static void sb_reserve(struct sbuf *b, size_t more)
{
	size_t cap;
	char *p;

	if (b->oom || b->len + more + 1 <= b->cap)
		return;
	cap = b->cap ? b->cap : 1024;
	while (cap < b->len + more + 1)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p) {
		b->oom = true;
		return;
	}
	b->data = p;
	b->cap = cap;
}

static void sb_add(struct sbuf *b, const char *s, size_t len)
{
	sb_reserve(b, len);
	if (b->oom)
		return;
	memcpy(b->data + b->len, s, len);
	b->len += len;
	b->data[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
	sb_add(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void
sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true;
		return;
	}
	sb_reserve(b, (size_t)n);
	if (b->oom)
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void sbuf_fini(struct sbuf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* Appends @s as XML character data; with @url, percent-encoded first as
 * encoding-type=url asks (all but unreserved characters and '/'), which
 * also keeps bytes XML cannot carry out of the document. */
static void sb_text(struct sbuf *b, const char *s, size_t len, bool url)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		char pct[3] = {'%', hex[c >> 4], hex[c & 15]};

		if (url) {
			if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			    (c >= '0' && c <= '9') || strchr("-_.~/", c))
				sb_add(b, s + i, 1);
			else
				sb_add(b, pct, 3);
		} else if (c == '&') {
			sb_str(b, "&amp;");
		} else if (c == '<') {
			sb_str(b, "&lt;");
		} else if (c == '>') {
			sb_str(b, "&gt;");
		} else if (c == '"') {
			sb_str(b, "&quot;");
		} else if (c == '\'') {
			sb_str(b, "&apos;");
		} else {
			sb_add(b, s + i, 1);
		}
	}
}

/* Decodes %XX escapes of @s (@len bytes) into @out (@cap bytes, NUL
 * added). '+' stays '+': S3 clients encode a space as %20. Returns the
 * length, or -EINVAL (bad escape, or too long). */
static ssize_t pct_decode(const char *s, size_t len, char *out, size_t cap)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= len)
				return -EINVAL;
			hi = http_hex_value(s[i + 1]);
			lo = http_hex_value(s[i + 2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			c = (char)(hi * 16 + lo);
			i += 2;
		}
		if (n + 1 >= cap)
			return -EINVAL;
		out[n++] = c;
	}
	out[n] = '\0';
	return (ssize_t)n;
}

static bool has_prefix(const struct store_obj *o, const char *p, size_t len)
{
	return o->key_len >= len && !memcmp(o->key, p, len);
}

/* ------------------------------------------------------------ answers */

static void http_date(time_t t, char out[32])
{
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, 32, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

/* The status line and the headers every answer has. */
static void head_begin(struct s3_resp *r, int status, const char *reason)
{
	static _Thread_local uint64_t seq;

	r->head.len = 0;
	sb_printf(&r->head,
		  "HTTP/1.1 %d %s\r\nServer: hintfs-origin\r\n"
		  "x-amz-request-id: %d-%" PRIu64 "\r\n",
		  status, reason, (int)gettid(), ++seq);
}

static void head_end(struct s3_resp *r)
{
	if (r->close)
		sb_str(&r->head, "Connection: close\r\n");
	sb_str(&r->head, "\r\n");
}

/* An XML body of @len bytes at @xml (the head's own size is unknown until
 * then, so the body is built first, apart). */
static void answer_xml(struct s3_resp *r, bool head_only, int status,
		       const char *reason, const struct sbuf *xml,
		       const char *extra)
{
	head_begin(r, status, reason);
	sb_printf(&r->head,
		  "Content-Type: application/xml\r\nContent-Length: %zu\r\n%s",
		  head_only ? 0 : xml->len, extra ? extra : "");
	head_end(r);
	if (!head_only)
		sb_add(&r->head, xml->data, xml->len);
	if (xml->oom)
		r->head.oom = true;
}

static void answer_error(struct s3_resp *r, bool head_only, int status,
			 const char *reason, const char *code,
			 const char *message, const char *extra,
			 struct s3_stats *st)
{
	struct sbuf x = {0};

	sb_printf(&x,
		  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		  "<Error><Code>%s</Code><Message>%s</Message></Error>",
		  code, message);
	answer_xml(r, head_only, status, reason, &x, extra);
	sbuf_fini(&x);
	st->errors++;
}

/* True if the If-Match value @v (@len bytes), a list of entity tags or
 * "*", names @etag (quoted). Weak tags never match (RFC 9110 13.1.1). */
static bool if_match_ok(const char *v, size_t len, const char *etag)
{
	size_t i = 0;

	while (i < len) {
		size_t a = i, b;

		while (i < len && v[i] != ',')
			i++;
		b = i++;
		while (a < b && (v[a] == ' ' || v[a] == '\t'))
			a++;
		while (b > a && (v[b - 1] == ' ' || v[b - 1] == '\t'))
			b--;
		if ((b - a == 1 && v[a] == '*') ||
		    (b - a == strlen(etag) && !memcmp(v + a, etag, b - a)))
			return true;
	}
	return false;
}

static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t n = 0;

	if (len == 0 || len > 19)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		n = n * 10 + (uint64_t)(s[i] - '0');
	}
	*out = n;
	return 0;
}

/* Resolves the Range value @v (@len bytes) against @size into [*first,
 * *last]. Returns 1 for a range to send, 0 to send the whole object (a
 * header that is not one byte range: RFC 9110 lets a server ignore it),
 * -ERANGE if no byte of it exists (416). */
static int parse_range(const char *v, size_t len, uint64_t size,
		       uint64_t *first, uint64_t *last)
{
	const char *dash;
	uint64_t a, b;

	if (len < 7 || strncasecmp(v, "bytes=", 6) || memchr(v, ',', len))
		return 0;
	v += 6;
	len -= 6;
	dash = memchr(v, '-', len);
	if (!dash)
		return 0;
	if (dash == v) { /* "-N": the last N bytes */
		if (parse_u64(v + 1, len - 1, &b) < 0)
			return 0;
		if (b == 0 || size == 0)
			return -ERANGE;
		*first = size - (b < size ? b : size);
		*last = size - 1;
		return 1;
	}
	if (parse_u64(v, (size_t)(dash - v), &a) < 0)
		return 0;
	if (dash == v + len - 1) {
		b = UINT64_MAX;
	} else if (parse_u64(dash + 1, len - (size_t)(dash - v) - 1, &b) < 0 ||
		   b < a) {
		return 0;
	}
	if (a >= size)
		return -ERANGE;
	*first = a;
	*last = b < size ? b : size - 1;
	return 1;
}

static void answer_object(const struct store_bucket *b,
			  const struct store_obj *o, const struct http_msg *m,
			  bool head_only, struct s3_resp *r,
			  struct s3_stats *st)
{
	uint64_t first = 0, last = o->size ? o->size - 1 : 0, len = o->size;
	char date[32], extra[64];
	int rng = 0;

	if (m->if_match &&
	    !if_match_ok(m->if_match, m->if_match_len, o->etag)) {
		answer_error(r, head_only, 412, "Precondition Failed",
			     "PreconditionFailed",
			     "At least one of the pre-conditions you "
			     "specified did not hold",
			     NULL, st);
		return;
	}
	if (m->range)
		rng =
		    parse_range(m->range, m->range_len, o->size, &first, &last);
	if (rng < 0) {
		snprintf(extra, sizeof(extra),
			 "Content-Range: bytes */%" PRIu64 "\r\n", o->size);
		answer_error(r, head_only, 416,
			     "Requested Range Not Satisfiable", "InvalidRange",
			     "The requested range is not satisfiable", extra,
			     st);
		return;
	}
	if (rng > 0)
		len = last - first + 1;
	if (!head_only && len > 0) {
		r->body_fd = openat(b->dir_fd, o->key, O_RDONLY | O_CLOEXEC);
		if (r->body_fd < 0) {
			answer_error(r, false, 500, "Internal Server Error",
				     "InternalError",
				     "The object's file cannot be opened", NULL,
				     st);
			return;
		}
		r->body_off = first;
		r->body_len = len;
	}
	http_date(o->mtime, date);
	if (rng > 0)
		head_begin(r, 206, "Partial Content");
	else
		head_begin(r, 200, "OK");
	sb_printf(&r->head,
		  "Content-Type: application/octet-stream\r\n"
		  "Content-Length: %" PRIu64 "\r\nETag: %s\r\n"
		  "Last-Modified: %s\r\nAccept-Ranges: bytes\r\n",
		  len, o->etag, date);
	if (rng > 0)
		sb_printf(&r->head,
			  "Content-Range: bytes %" PRIu64 "-%" PRIu64
			  "/%" PRIu64 "\r\n",
			  first, last, o->size);
	head_end(r);
	if (head_only) {
		st->heads++;
	} else {
		st->gets++;
		st->bytes += len;
	}
}

/* ------------------------------------------------------------ listing */

/* The decoded parameters of a ListObjectsV2 request. */
struct list_q {
	char prefix[S3_PATH_MAX];
	size_t prefix_len;
	char delim[64];
	size_t delim_len;		  /* 0: no grouping */
	char token[S3_TOKEN_MAX / 2 + 1]; /* decoded: type letter, key */
	size_t token_len;		  /* 0: first page */
	char token_raw[S3_TOKEN_MAX + 1]; /* as sent, echoed back */
	char start_after[S3_PATH_MAX];
	size_t start_after_len;
	uint64_t max_keys;
	bool url; /* encoding-type=url */
};

/* Decodes @value into the named field of @q. Returns 0 or -EINVAL. */
static int list_param(struct list_q *q, const char *name, size_t nlen,
		      const char *val, size_t vlen)
{
	char tmp[S3_TOKEN_MAX + 1];
	ssize_t n = pct_decode(val, vlen, tmp, sizeof(tmp));

	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= S3_PATH_MAX &&
	    !http_token_is(name, nlen, "continuation-token"))
		return -EINVAL;
	if (http_token_is(name, nlen, "prefix")) {
		memcpy(q->prefix, tmp, (size_t)n + 1);
		q->prefix_len = (size_t)n;
	} else if (http_token_is(name, nlen, "delimiter")) {
		if ((size_t)n >= sizeof(q->delim))
			return -EINVAL;
		memcpy(q->delim, tmp, (size_t)n + 1);
		q->delim_len = (size_t)n;
	} else if (http_token_is(name, nlen, "start-after")) {
		memcpy(q->start_after, tmp, (size_t)n + 1);
		q->start_after_len = (size_t)n;
	} else if (http_token_is(name, nlen, "max-keys")) {
		if (parse_u64(tmp, (size_t)n, &q->max_keys) < 0)
			return -EINVAL;
	} else if (http_token_is(name, nlen, "encoding-type")) {
		q->url = n == 3 && !strcasecmp(tmp, "url");
	} else if (http_token_is(name, nlen, "continuation-token")) {
		size_t k = 0;

		if ((size_t)n % 2 || (size_t)n / 2 >= sizeof(q->token) ||
		    (size_t)n < 2)
			return -EINVAL;
		memcpy(q->token_raw, tmp, (size_t)n + 1);
		for (; k < (size_t)n / 2; k++) {
			int hi = http_hex_value(tmp[2 * k]);
			int lo = http_hex_value(tmp[2 * k + 1]);

			if (hi < 0 || lo < 0)
				return -EINVAL;
			q->token[k] = (char)(hi * 16 + lo);
		}
		if (q->token[0] != 'K' && q->token[0] != 'P')
			return -EINVAL;
		q->token_len = k;
	}
	return 0; /* list-type, fetch-owner and the rest: ignored */
}

static int list_parse(const char *query, size_t len, struct list_q *q)
{
	size_t i = 0;

	memset(q, 0, sizeof(*q));
	q->max_keys = S3_LIST_PAGE_MAX;
	while (i < len) {
		size_t a = i, eq;

		while (i < len && query[i] != '&')
			i++;
		eq = a;
		while (eq < i && query[eq] != '=')
			eq++;
		if (list_param(q, query + a, eq - a, query + eq + (eq < i),
			       i - eq - (eq < i)) < 0)
			return -EINVAL;
		i++;
	}
	if (q->max_keys > S3_LIST_PAGE_MAX)
		q->max_keys = S3_LIST_PAGE_MAX;
	return 0;
}

/* The index of the first object after @i whose key does not start with
 * @p (@len bytes); the objects from @i on that start with it are
 * contiguous, so a binary search finds the end of the run. */
static size_t skip_prefix(const struct store_bucket *b, size_t i, const char *p,
			  size_t len)
{
	size_t hi = b->n_objs;

	while (i < hi) {
		size_t mid = i + (hi - i) / 2;

		if (has_prefix(&b->objs[mid], p, len))
			i = mid + 1;
		else
			hi = mid;
	}
	return i;
}

/* Where a page starts: after start-after and after the token's item. */
static size_t list_start(const struct store_bucket *b, const struct list_q *q)
{
	size_t i = store_lower_bound(b, q->prefix, q->prefix_len);
	const char *t = q->token + 1;
	size_t tl = q->token_len ? q->token_len - 1 : 0, j;

	if (q->start_after_len && !q->token_len) {
		j = store_lower_bound(b, q->start_after, q->start_after_len);
		if (j < b->n_objs && b->objs[j].key_len == q->start_after_len &&
		    !memcmp(b->objs[j].key, q->start_after, q->start_after_len))
			j++;
		i = j > i ? j : i;
	}
	if (q->token_len) {
		j = store_lower_bound(b, t, tl);
		if (q->token[0] == 'P')
			j = skip_prefix(b, j, t, tl);
		else if (j < b->n_objs && b->objs[j].key_len == tl &&
			 !memcmp(b->objs[j].key, t, tl))
			j++;
		i = j > i ? j : i;
	}
	return i;
}

static void xml_elem(struct sbuf *x, const char *name, const char *s,
		     size_t len, bool url)
{
	sb_printf(x, "<%s>", name);
	sb_text(x, s, len, url);
	sb_printf(x, "</%s>", name);
}

static void answer_list(const struct store_bucket *b, const char *query,
			size_t qlen, struct s3_resp *r, struct s3_stats *st)
{
	static const char hex[] = "0123456789abcdef";
	struct sbuf x = {0}, items = {0}, prefixes = {0};
	struct list_q q;
	const char *last = NULL;
	size_t last_len = 0, count = 0, i;
	char last_type = 0;
	bool truncated = false;

	if (list_parse(query, qlen, &q) < 0) {
		answer_error(r, false, 400, "Bad Request", "InvalidArgument",
			     "Bad ListObjectsV2 parameter", NULL, st);
		return;
	}
	for (i = list_start(b, &q);
	     i < b->n_objs &&
	     has_prefix(&b->objs[i], q.prefix, q.prefix_len);) {
		const struct store_obj *o = &b->objs[i];
		const char *d = NULL;
		char date[32];
		struct tm tm;

		if (q.delim_len)
			d = memmem(o->key + q.prefix_len,
				   o->key_len - q.prefix_len, q.delim,
				   q.delim_len);
		if (count == q.max_keys) {
			truncated = count > 0;
			break;
		}
		count++;
		if (d) { /* rolled up into a common prefix */
			last_type = 'P';
			last = o->key;
			last_len = (size_t)(d - o->key) + q.delim_len;
			sb_str(&prefixes, "<CommonPrefixes>");
			xml_elem(&prefixes, "Prefix", last, last_len, q.url);
			sb_str(&prefixes, "</CommonPrefixes>");
			i = skip_prefix(b, i, last, last_len);
			continue;
		}
		last_type = 'K';
		last = o->key;
		last_len = o->key_len;
		gmtime_r(&o->mtime, &tm);
		strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
		sb_str(&items, "<Contents>");
		xml_elem(&items, "Key", o->key, o->key_len, q.url);
		sb_printf(&items,
			  "<LastModified>%s</LastModified>"
			  "<ETag>&quot;%.32s&quot;</ETag><Size>%" PRIu64
			  "</Size><StorageClass>STANDARD</StorageClass>"
			  "</Contents>",
			  date, o->etag + 1, o->size);
		i++;
	}

	sb_str(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<ListBucketResult "
		   "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
	xml_elem(&x, "Name", b->name, strlen(b->name), false);
	xml_elem(&x, "Prefix", q.prefix, q.prefix_len, q.url);
	if (q.delim_len)
		xml_elem(&x, "Delimiter", q.delim, q.delim_len, q.url);
	if (q.start_after_len)
		xml_elem(&x, "StartAfter", q.start_after, q.start_after_len,
			 q.url);
	if (q.url)
		sb_str(&x, "<EncodingType>url</EncodingType>");
	sb_printf(&x,
		  "<MaxKeys>%" PRIu64 "</MaxKeys><KeyCount>%zu</KeyCount>"
		  "<IsTruncated>%s</IsTruncated>",
		  q.max_keys, count, truncated ? "true" : "false");
	if (q.token_len)
		xml_elem(&x, "ContinuationToken", q.token_raw,
			 strlen(q.token_raw), false);
	if (truncated) {
		/* The token names the page's last item, so that the next
		 * page starts after it whatever was added since (nothing,
		 * here) and after the whole run of a common prefix. */
		sb_str(&x, "<NextContinuationToken>");
		sb_printf(&x, "%02x", (unsigned char)last_type);
		for (size_t k = 0; k < last_len; k++) {
			unsigned char c = (unsigned char)last[k];
			char h[2] = {hex[c >> 4], hex[c & 15]};

			sb_add(&x, h, 2);
		}
		sb_str(&x, "</NextContinuationToken>");
	}
	sb_add(&x, items.data ? items.data : "", items.len);
	sb_add(&x, prefixes.data ? prefixes.data : "", prefixes.len);
	sb_str(&x, "</ListBucketResult>");
	if (items.oom || prefixes.oom)
		x.oom = true;
	answer_xml(r, false, 200, "OK", &x, NULL);
	sbuf_fini(&x);
	sbuf_fini(&items);
	sbuf_fini(&prefixes);
	st->lists++;
}

/* ------------------------------------------------------------ dispatch */

void s3_answer(const struct store *s, const struct http_msg *m,
	       struct s3_resp *r, struct s3_stats *st)
{
	bool head_only = http_token_is(m->method, m->method_len, "HEAD");
	bool get = http_token_is(m->method, m->method_len, "GET");
	const char *q = memchr(m->target, '?', m->target_len);
	size_t plen = q ? (size_t)(q - m->target) : m->target_len;
	const struct store_bucket *b;
	const struct store_obj *o;
	char path[S3_PATH_MAX];
	const char *slash;
	ssize_t n;

	r->head.len = 0;
	r->head.oom = false;
	r->body_fd = -1;
	r->body_len = 0;
	r->close = m->conn_close || (m->http10 && !m->keep_alive);
	if (m->chunked || m->content_length > 0 || (!get && !head_only)) {
		/* No request bodies: close rather than read past one. */
		r->close = r->close || m->chunked || m->content_length > 0;
		answer_error(
		    r, head_only, 501, "Not Implemented", "NotImplemented",
		    "The test origin answers GET and HEAD only", NULL, st);
		return;
	}
	n = pct_decode(m->target, plen, path, sizeof(path));
	if (n < 1 || path[0] != '/') {
		answer_error(r, head_only, 400, "Bad Request", "InvalidURI",
			     "Bad request target", NULL, st);
		return;
	}
	slash = memchr(path + 1, '/', (size_t)n - 1);
	b = store_bucket(s, path + 1,
			 slash ? (size_t)(slash - path - 1) : (size_t)n - 1);
	if (!b) {
		answer_error(r, head_only, 404, "Not Found", "NoSuchBucket",
			     "The specified bucket does not exist", NULL, st);
		return;
	}
	if (!slash || slash == path + n - 1) { /* the bucket itself */
		if (head_only) {
			head_begin(r, 200, "OK");
			sb_str(&r->head, "Content-Length: 0\r\n");
			head_end(r);
			st->heads++;
			return;
		}
		answer_list(b, q ? q + 1 : "", q ? m->target_len - plen - 1 : 0,
			    r, st);
		return;
	}
	o = store_find(b, slash + 1, (size_t)(path + n - slash - 1));
	if (!o) {
		answer_error(r, head_only, 404, "Not Found", "NoSuchKey",
			     "The specified key does not exist.", NULL, st);
		return;
	}
	answer_object(b, o, m, head_only, r, st);
}
