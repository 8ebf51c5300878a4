/*
 * prefetch/s3/sigv4.c - AWS Signature Version 4 header signing, S3's rules.
 *
 * Owns the canonical request, the string to sign, the signing-key
 * derivation and the Authorization value. It does not choose the headers
 * or encode the key: the caller does both and hands over what it will send.
 *
 * Invariant: the bytes hashed are exactly out->canonical_request and
 * out->string_to_sign, each built once; what the tests compare with the
 * published vectors is what S3 recomputes on its side.
 *
 * S3 against the generic SigV4 rules (the AWS test suite's "service"):
 * - NOTE(s3): the path is used as given, encoded once by sigv4_uri_encode().
 *   Generic services normalize it ("/a/./b/.." -> "/a") and encode it a
 *   second time; S3 does neither, as "a//b", "a/./b" and "a/b" are three
 *   different keys.
 * - NOTE(s3): the payload hash travels in x-amz-content-sha256, which the
 *   caller lists among the signed headers; the same hash ends the canonical
 *   request. Generic services need not send it.
 * - Query strings and headers canonicalize the same way under both.
 *
 * The secret and every key derived from it are wiped before return, except
 * the day's signing key in a caller's struct sigv4_key (sigv4_sign_key):
 * deriving it is four of the five HMACs of a signature.
 */
#include "prefetch/s3/sigv4.h"
#include "common/buf.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIGV4_ALGORITHM "AWS4-HMAC-SHA256"
#define SHA256_LEN	32

static const char hex_upper[] = "0123456789ABCDEF";

/* A growing NUL-terminated string. The first failed allocation sticks, so
 * a builder appends freely and checks once, at the end. */
struct sv_buf {
	struct buf s;
	bool oom;
};

static void buf_add(struct sv_buf *b, const char *s, size_t n)
{
	if (!b->oom && buf_append(&b->s, s, n))
		b->oom = true;
}

/* Appends each string of the NULL-terminated list. */
__attribute__((sentinel)) static void buf_cat(struct sv_buf *b, ...)
{
	va_list ap;

	va_start(ap, b);
	for (const char *s; (s = va_arg(ap, const char *));)
		buf_add(b, s, strlen(s));
	va_end(ap);
}

/* Hands the string over, "" when empty; NULL after an allocation failure. */
static char *buf_take(struct sv_buf *b)
{
	char *p;

	buf_add(b, "", 0);
	p = b->oom ? NULL : b->s.data;
	if (!p)
		buf_fini(&b->s);
	*b = (struct sv_buf){0};
	return p;
}

static bool is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

static bool is_upper_hex(char c)
{
	return c && strchr(hex_upper, c);
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
		return (c | 0x20) - 'a' + 10;
	return -1;
}

static void buf_encode(struct sv_buf *b, const char *in, size_t len,
		       bool keep_slash)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		char esc[3] = {'%', hex_upper[c >> 4], hex_upper[c & 15]};

		if (is_unreserved(c) || (c == '/' && keep_slash))
			buf_add(b, in + i, 1);
		else
			buf_add(b, esc, 3);
	}
}

char *sigv4_uri_encode(const char *in, size_t len, bool keep_slash)
{
	struct sv_buf b = {0};

	buf_encode(&b, in, len, keep_slash);
	return buf_take(&b);
}

/* Appends the decoding of @len bytes of @in; -EINVAL on a bad escape. */
static int buf_decode(struct sv_buf *b, const char *in, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		int hi, lo;

		/* '+' stays a '+' (a space only in HTML forms) and comes out
		 * as %2B. Our client never sends one: it encodes it. */
		if (in[i] != '%') {
			buf_add(b, in + i, 1);
			continue;
		}
		if (len - i < 3)
			return -EINVAL;
		hi = hex_val(in[i + 1]);
		lo = hex_val(in[i + 2]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		buf_add(b, &(char){(char)(hi << 4 | lo)}, 1);
		i += 2;
	}
	return 0;
}

/*
 * The path must read like sigv4_uri_encode(key, true) output: unreserved
 * bytes, '/', %XX in upper-case hex. Anything else (a raw space or '$')
 * means the caller forgot to encode, and S3 would canonicalize a different
 * path: better -EINVAL here than a 403 SignatureDoesNotMatch later.
 */
static bool path_ok(const char *p)
{
	if (*p != '/')
		return false;
	for (; *p; p++) {
		if (*p == '%' && is_upper_hex(p[1]) && is_upper_hex(p[2]))
			p += 2;
		else if (*p != '/' && !is_unreserved((unsigned char)*p))
			return false;
	}
	return true;
}

/* "YYYYMMDDTHHMMSSZ": digits where digits belong. */
static bool date_ok(const char *d)
{
	if (!d || strlen(d) != 16)
		return false;
	for (int i = 0; i < 16; i++) {
		char want = i == 8 ? 'T' : i == 15 ? 'Z' : 0;

		if (want ? d[i] != want : (d[i] < '0' || d[i] > '9'))
			return false;
	}
	return true;
}

/* Query pairs are held as "name\0value", both encoded. Names compare as
 * whole strings: "a" sorts before "a-b" although '=' > '-'. */
static int pair_cmp(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	int c = strcmp(x, y);

	return c ? c : strcmp(x + strlen(x) + 1, y + strlen(y) + 1);
}

/* Returns "name\0value" for one "name[=value]" of @len bytes, or NULL. */
static char *encode_pair(const char *s, size_t len, int *rc)
{
	const char *eq = memchr(s, '=', len);
	size_t nlen = eq ? (size_t)(eq - s) : len;
	struct sv_buf tmp = {0}, out = {0};

	*rc = buf_decode(&tmp, s, nlen);
	buf_encode(&out, tmp.s.data, tmp.s.len, false);
	buf_add(&out, "", 1);
	tmp.s.len = 0;
	if (!*rc && eq)
		*rc = buf_decode(&tmp, eq + 1, len - nlen - 1);
	buf_encode(&out, tmp.s.data, tmp.s.len, false);
	buf_fini(&tmp.s);
	if (!*rc && (tmp.oom || out.oom))
		*rc = -ENOMEM;
	return buf_take(&out);
}

/*
 * Appends the canonical query: each pair decoded then re-encoded (so "%2f",
 * "%2F" and a raw UTF-8 byte come out one way), a missing '=' read as an
 * empty value ("?lifecycle" -> "lifecycle="), sorted by name then value.
 * Empty segments ("a=1&&b=2") carry no parameter and are dropped; our
 * client never sends them.
 */
static int canonical_query(struct sv_buf *out, const char *q)
{
	size_t n = 0, max = 1;
	char **pairs;
	int rc = 0;

	if (!q || !*q)
		return 0;
	for (const char *s = q; *s; s++)
		max += *s == '&';
	pairs = calloc(max, sizeof(*pairs));
	if (!pairs)
		return -ENOMEM;
	for (size_t len; *q && !rc; q += len + (q[len] == '&')) {
		len = strcspn(q, "&");
		if (len)
			pairs[n++] = encode_pair(q, len, &rc);
	}
	if (!rc)
		qsort(pairs, n, sizeof(*pairs), pair_cmp);
	for (size_t i = 0; i < n; i++) {
		if (!rc)
			buf_cat(out, i ? "&" : "", pairs[i], "=",
				pairs[i] + strlen(pairs[i]) + 1, NULL);
		free(pairs[i]);
	}
	free(pairs);
	return rc;
}

/* One header, canonical: name and value share one allocation. */
struct sv_hdr {
	char *name;   /* lower case */
	char *value;  /* trimmed, inner whitespace runs folded to one ' ' */
	size_t order; /* position given: duplicates keep it through qsort */
};

static int hdr_cmp(const void *a, const void *b)
{
	const struct sv_hdr *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->order > y->order) - (x->order < y->order);
}

static int hdr_init(struct sv_hdr *h, const char *name, const char *value,
		    size_t order)
{
	size_t nlen, o = 0;
	bool gap = false;

	/* A ':' or a blank in a name would forge canonical lines. */
	if (!name || !value || !*name || name[strcspn(name, ": \t\r\n")])
		return -EINVAL;
	nlen = strlen(name);
	h->name = malloc(nlen + strlen(value) + 2);
	if (!h->name)
		return -ENOMEM;
	for (size_t i = 0; i <= nlen; i++) {
		char c = name[i];

		h->name[i] = c >= 'A' && c <= 'Z' ? (char)(c + 'a' - 'A') : c;
	}
	h->value = h->name + nlen + 1;
	/* Also turns an obs-folded "a\n  b" into "a b". */
	for (; *value; value++) {
		if (strchr(" \t\r\n", *value)) {
			gap = o > 0;
			continue;
		}
		if (gap)
			h->value[o++] = ' ';
		gap = false;
		h->value[o++] = *value;
	}
	h->value[o] = '\0';
	h->order = order;
	return 0;
}

/*
 * Appends the canonical header lines to @creq and the ';'-joined names to
 * @names. A repeated name becomes one line, its values ','-joined in the
 * order given, as HTTP lets a receiver combine them.
 *
 * NOTE(s3): with temporary credentials x-amz-security-token must be
 * signed. It is added from @token unless the caller lists it already (our
 * S3 client does, as it must send it anyway); a listed value that differs
 * from @token is a caller bug: -EINVAL.
 */
static int canonical_headers(struct sv_buf *creq, struct sv_buf *names,
			     const struct sigv4_request *req, const char *token)
{
	size_t n = req->n_headers, total = n;
	struct sv_hdr *h = calloc(n + 1, sizeof(*h));
	int rc = 0;

	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n && !rc; i++)
		rc = hdr_init(&h[i], req->headers[i].name,
			      req->headers[i].value, i);
	if (!rc && token) {
		rc = hdr_init(&h[n], "x-amz-security-token", token, n);
		total = n + 1;
		for (size_t i = 0; i < n && !rc; i++) {
			if (strcmp(h[i].name, h[n].name))
				continue;
			if (strcmp(h[i].value, h[n].value))
				rc = -EINVAL;
			total = n;
		}
	}
	if (!rc)
		qsort(h, total, sizeof(*h), hdr_cmp);
	for (size_t i = 0; i < total && !rc; i++) {
		if (i && !strcmp(h[i].name, h[i - 1].name)) {
			buf_cat(creq, ",", h[i].value, NULL);
			continue;
		}
		buf_cat(creq, i ? "\n" : "", h[i].name, ":", h[i].value, NULL);
		buf_cat(names, i ? ";" : "", h[i].name, NULL);
	}
	if (!rc && total)
		buf_add(creq, "\n", 1);
	for (size_t i = 0; i <= n; i++)
		free(h[i].name);
	free(h);
	return rc;
}

static void hex_lower(const unsigned char *in, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * len] = '\0';
}

/* HMAC's implementation, fetched once: a fetch per request took a lock and a
 * lookup in libcrypto's tables, about a third of signing's cost. SHA-256's
 * too: EVP_sha256() is fetched again at each EVP_Digest() (two a request:
 * 6,800 instructions of a cold object's 452,000, cold_ir.py). */
static EVP_MAC *hmac_impl;
static EVP_MD *sha256_impl;
static pthread_once_t hmac_once = PTHREAD_ONCE_INIT;

static void hmac_fetch(void)
{
	hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL);
	sha256_impl = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* SHA-256 of @len bytes at @data into @md; 0, or -ENOMEM. */
static int sha256(const void *data, size_t len, unsigned char md[SHA256_LEN])
{
	pthread_once(&hmac_once, hmac_fetch);
	return EVP_Digest(data, len, md, NULL,
			  sha256_impl ? sha256_impl : EVP_sha256(), NULL)
		   ? 0
		   : -ENOMEM;
}

/* HMAC-SHA256 of @msg (@mlen bytes) keyed with @k (@klen bytes) into @out. */
static int hmac_sha256(EVP_MAC_CTX *ctx, const void *k, size_t klen,
		       const void *msg, size_t mlen,
		       unsigned char out[SHA256_LEN])
{
	OSSL_PARAM params[] = {
	    OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256",
					     0),
	    OSSL_PARAM_construct_end(),
	};
	size_t out_len;

	if (!EVP_MAC_init(ctx, k, klen, params) ||
	    !EVP_MAC_update(ctx, msg, mlen) ||
	    !EVP_MAC_final(ctx, out, &out_len, SHA256_LEN))
		return -ENOMEM;
	return 0;
}

/*
 * The signing key: HMAC-SHA256 chained from "AWS4" + secret through the
 * date, region, service and "aws4_request", each step keyed with the last
 * output.
 */
static int derive_key(EVP_MAC_CTX *ctx, const char *secret, const char *date8,
		      const struct sigv4_request *req,
		      unsigned char key[SHA256_LEN])
{
	const char *msg[] = {date8, req->region, req->service, "aws4_request"};
	size_t secret_len = strlen(secret);
	char *k0 = malloc(secret_len + 5);
	int rc = k0 ? 0 : -ENOMEM;

	if (k0) {
		memcpy(k0, "AWS4", 4);
		memcpy(k0 + 4, secret, secret_len + 1);
	}
	for (size_t i = 0; i < 4 && !rc; i++)
		rc = hmac_sha256(ctx, i ? (const void *)key : k0,
				 i ? SHA256_LEN : secret_len + 4, msg[i],
				 strlen(msg[i]), key);
	if (k0)
		OPENSSL_cleanse(k0, secret_len + 4);
	free(k0);
	return rc;
}

/*
 * The signature: the signing key (from @cache when it is for this day,
 * region, service and secret) over the string to sign. libcrypto fails
 * here only when it cannot allocate (or has no HMAC at all), so any
 * failure reads -ENOMEM.
 */
static int compute_signature(const char *secret, const char *date8,
			     const struct sigv4_request *req,
			     const struct sv_buf *sts, struct sigv4_key *cache,
			     char sig[65])
{
	unsigned char key[SHA256_LEN], sum[SHA256_LEN], out[SHA256_LEN];
	char scope[sizeof(cache->scope)];
	EVP_MAC_CTX *ctx;
	bool hit = false;
	int rc, n;

	pthread_once(&hmac_once, hmac_fetch);
	ctx = hmac_impl ? EVP_MAC_CTX_new(hmac_impl) : NULL;
	if (!ctx)
		return -ENOMEM;
	n = snprintf(scope, sizeof(scope), "%s/%s/%s", date8, req->region,
		     req->service);
	if (cache && n > 0 && (size_t)n < sizeof(scope)) {
		if (sha256(secret, strlen(secret), sum)) {
			EVP_MAC_CTX_free(ctx);
			return -ENOMEM;
		}
		hit = !strcmp(cache->scope, scope) &&
		      !memcmp(cache->secret_sum, sum, sizeof(sum));
	} else {
		cache = NULL; /* a scope too long to keep: derive each time */
	}
	if (hit) {
		memcpy(key, cache->key, sizeof(key));
		rc = 0;
	} else {
		rc = derive_key(ctx, secret, date8, req, key);
		if (!rc && cache) {
			memcpy(cache->scope, scope, (size_t)n + 1);
			memcpy(cache->secret_sum, sum, sizeof(sum));
			memcpy(cache->key, key, sizeof(key));
			cache->derived++;
		}
	}
	if (!rc)
		rc = hmac_sha256(ctx, key, sizeof(key), sts->s.data, sts->s.len,
				 out);
	if (!rc)
		hex_lower(out, SHA256_LEN, sig);
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(out, sizeof(out));
	EVP_MAC_CTX_free(ctx);
	return rc;
}

void sigv4_key_fini(struct sigv4_key *key)
{
	if (key)
		OPENSSL_cleanse(key, sizeof(*key));
}

static bool nonempty(const char *s)
{
	return s && *s;
}

int sigv4_sign(const struct sigv4_creds *creds, const struct sigv4_request *req,
	       struct sigv4_result *out)
{
	return sigv4_sign_key(creds, req, NULL, out);
}

int sigv4_sign_key(const struct sigv4_creds *creds,
		   const struct sigv4_request *req, struct sigv4_key *key,
		   struct sigv4_result *out)
{
	struct sv_buf creq = {0}, names = {0}, sts = {0}, auth = {0};
	struct sv_buf scope = {0};
	unsigned char md[SHA256_LEN];
	char md_hex[2 * SHA256_LEN + 1], date8[9];
	const char *token;
	int rc;

	memset(out, 0, sizeof(*out));
	if (!creds || !req || !nonempty(creds->access_key) ||
	    !nonempty(creds->secret_key) || !nonempty(req->method) ||
	    !req->path || !path_ok(req->path) || !nonempty(req->payload_hash) ||
	    !date_ok(req->amz_date) || !nonempty(req->region) ||
	    !nonempty(req->service) || (req->n_headers && !req->headers))
		return -EINVAL;
	/* The scope's day is x-amz-date's, whatever the local clock says. */
	memcpy(date8, req->amz_date, 8);
	date8[8] = '\0';
	token = nonempty(creds->session_token) ? creds->session_token : NULL;

	buf_cat(&creq, req->method, "\n", req->path, "\n", NULL);
	rc = canonical_query(&creq, req->query);
	buf_add(&creq, "\n", 1);
	buf_add(&names, "", 0); /* non-NULL from here on, even if empty */
	if (!rc)
		rc = canonical_headers(&creq, &names, req, token);
	buf_add(&creq, "\n", 1);
	buf_add(&creq, names.s.data, names.s.len);
	buf_cat(&creq, "\n", req->payload_hash, NULL);
	if (!rc && (creq.oom || names.oom))
		rc = -ENOMEM;
	if (!rc)
		rc = sha256(creq.s.data, creq.s.len, md);
	if (rc)
		goto out;
	hex_lower(md, SHA256_LEN, md_hex);

	buf_cat(&scope, date8, "/", req->region, "/", req->service,
		"/aws4_request", NULL);
	buf_cat(&sts, SIGV4_ALGORITHM "\n", req->amz_date, "\n", NULL);
	buf_add(&sts, scope.s.data, scope.s.len);
	buf_cat(&sts, "\n", md_hex, NULL);
	rc = sts.oom || scope.oom
		 ? -ENOMEM
		 : compute_signature(creds->secret_key, date8, req, &sts, key,
				     out->signature);
	if (rc)
		goto out;

	/* ", " between fields as the SDKs send it; S3 takes "," as well. */
	buf_cat(&auth, SIGV4_ALGORITHM " Credential=", creds->access_key, "/",
		scope.s.data, ", SignedHeaders=", names.s.data,
		", Signature=", out->signature, NULL);
	out->canonical_request = buf_take(&creq);
	out->string_to_sign = buf_take(&sts);
	out->signed_headers = buf_take(&names);
	out->authorization = buf_take(&auth);
	if (!out->canonical_request || !out->string_to_sign ||
	    !out->signed_headers || !out->authorization)
		rc = -ENOMEM;
out:
	buf_fini(&creq.s);
	buf_fini(&names.s);
	buf_fini(&sts.s);
	buf_fini(&auth.s);
	buf_fini(&scope.s);
	if (rc)
		sigv4_result_fini(out);
	return rc;
}

void sigv4_result_fini(struct sigv4_result *res)
{
	if (!res)
		return;
	free(res->canonical_request);
	free(res->string_to_sign);
	free(res->signed_headers);
	free(res->authorization);
	memset(res, 0, sizeof(*res));
}

/*
 * Writes "" when @t falls outside years 1000-9999 (S3 takes no other):
 * sigv4_sign() then refuses the date rather than sign a malformed one.
 */
void sigv4_format_date(long long t, char buf[17])
{
	time_t tt = (time_t)t;
	struct tm tm;

	buf[0] = '\0';
	if ((long long)tt != t || !gmtime_r(&tt, &tm) ||
	    tm.tm_year < 1000 - 1900 || tm.tm_year > 9999 - 1900)
		return;
	if (strftime(buf, 17, "%Y%m%dT%H%M%SZ", &tm) != 16)
		buf[0] = '\0';
}
