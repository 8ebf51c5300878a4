/*
 * tests/fuzz/fuzz_sigv4.c - libFuzzer target for SigV4 canonicalization
 * (prefetch/s3/sigv4.c): sigv4_uri_encode() of arbitrary key bytes and
 * sigv4_sign() of arbitrary requests.
 *
 * The input reads as a raw HTTP request, the shape of the .req files of
 * the shared SigV4 vectors that seed the corpus: "METHOD TARGET ...",
 * then "Name: value" lines up to a blank line. Anything goes: a line
 * without ':' is a header with an empty value, a missing method is GET.
 *
 * Checked on every input:
 * - uri_encode's output is only unreserved bytes, '/' (with keep_slash)
 *   and upper-case %XX, and decodes back to the input byte for byte, so
 *   two keys never sign the same and every key signs as S3 reads it;
 * - signing the encoded path succeeds (or -EINVAL for a bad query escape,
 *   a bad header name or a bad x-amz-date), gives 64 lower-case hex, a
 *   canonical request that starts "METHOD\nPATH\nQUERY\n" with a query
 *   of encoded pairs, lower-case signed header names, the same result
 *   twice, and never the secret key in any output;
 * - signing the raw target (not encoded) never crashes: it is refused
 *   with -EINVAL unless it already reads like an encoded path.
 */
#include "prefetch/s3/sigv4.h"
#include "fuzz.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#define MAX_HEADERS 32
#define SECRET	    "fuzz/SECRET+key=never-in-output"

static bool unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

static int upper_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Encodes @len bytes of @in and checks the result; returns it. */
static char *encode_checked(const char *in, size_t len, bool keep_slash)
{
	char *e = sigv4_uri_encode(in, len, keep_slash);
	size_t j = 0;

	FUZZ_CHECK(e != NULL);
	for (size_t i = 0; e[i]; i++) {
		unsigned char c = (unsigned char)e[i];

		FUZZ_CHECK(j < len);
		if (c == '%') {
			int hi = upper_hex(e[i + 1]);
			int lo = hi >= 0 ? upper_hex(e[i + 2]) : -1;

			FUZZ_CHECK(lo >= 0);
			FUZZ_CHECK((unsigned char)in[j] == (hi << 4 | lo));
			/* Nothing that may stay raw is escaped. */
			FUZZ_CHECK(!unreserved((unsigned char)in[j]) &&
				   !(keep_slash && in[j] == '/'));
			i += 2;
		} else {
			FUZZ_CHECK(unreserved(c) || (keep_slash && c == '/'));
			FUZZ_CHECK(in[j] == e[i]);
		}
		j++;
	}
	FUZZ_CHECK(j == len); /* every input byte, none more */
	return e;
}

struct parsed {
	char *method;
	char *target;
	char *names[MAX_HEADERS];
	char *values[MAX_HEADERS];
	size_t n;
	const char *date; /* an X-Amz-Date header's value, else NULL */
	bool has_secret;  /* the input itself holds SECRET */
};

static void parse_request(const char *in, size_t len, struct parsed *p)
{
	const char *end = in + len, *nl, *line = in;
	size_t llen;

	memset(p, 0, sizeof(*p));
	nl = memchr(line, '\n', len);
	llen = (size_t)((nl ? nl : end) - line);
	if (llen && line[llen - 1] == '\r')
		llen--;
	{
		const char *sp = memchr(line, ' ', llen);
		size_t mlen = sp ? (size_t)(sp - line) : 0;
		const char *t = sp ? sp + 1 : line;
		size_t tlen = llen - (size_t)(t - line);
		const char *sp2 = memchr(t, ' ', tlen);

		if (sp2)
			tlen = (size_t)(sp2 - t);
		p->method =
		    mlen ? fuzz_strndup(line, mlen) : fuzz_strndup("GET", 3);
		p->target = fuzz_strndup(t, tlen);
	}
	while (nl && p->n < MAX_HEADERS) {
		const char *colon;

		line = nl + 1;
		nl = memchr(line, '\n', (size_t)(end - line));
		llen = (size_t)((nl ? nl : end) - line);
		if (llen && line[llen - 1] == '\r')
			llen--;
		if (!llen)
			break;
		colon = memchr(line, ':', llen);
		if (colon) {
			p->names[p->n] =
			    fuzz_strndup(line, (size_t)(colon - line));
			p->values[p->n] = fuzz_strndup(
			    colon + 1, llen - (size_t)(colon + 1 - line));
		} else {
			p->names[p->n] = fuzz_strndup(line, llen);
			p->values[p->n] = fuzz_strndup("", 0);
		}
		if (!strcasecmp(p->names[p->n], "x-amz-date"))
			p->date = p->values[p->n];
		p->n++;
	}
}

static void parsed_free(struct parsed *p)
{
	free(p->method);
	free(p->target);
	for (size_t i = 0; i < p->n; i++) {
		free(p->names[i]);
		free(p->values[i]);
	}
}

static bool all_hex_lower(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[n] == '\0';
}

static int sign_checked(const struct parsed *p, const char *path,
			const char *query, const char *token)
{
	struct sigv4_header h[MAX_HEADERS + 1];
	struct sigv4_creds creds = {"AKIDFUZZ", SECRET, token};
	struct sigv4_request rq = {
	    .method = p->method,
	    .path = path,
	    .query = query,
	    .headers = h,
	    .n_headers = p->n,
	    .payload_hash = SIGV4_EMPTY_SHA256,
	    .amz_date = p->date ? p->date : "20150830T123600Z",
	    .region = "us-east-1",
	    .service = "s3",
	};
	struct sigv4_result r1, r2;
	int rc, rc2;

	for (size_t i = 0; i < p->n; i++)
		h[i] = (struct sigv4_header){p->names[i], p->values[i]};
	rc = sigv4_sign(&creds, &rq, &r1);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	rc2 = sigv4_sign(&creds, &rq, &r2);
	FUZZ_CHECK(rc2 == rc);
	if (rc) {
		FUZZ_CHECK(!r1.canonical_request && !r1.authorization);
		return rc;
	}
	FUZZ_CHECK(all_hex_lower(r1.signature, 64));
	FUZZ_CHECK(!strcmp(r1.signature, r2.signature));
	FUZZ_CHECK(!strcmp(r1.canonical_request, r2.canonical_request));
	FUZZ_CHECK(
	    !strncmp(r1.canonical_request, p->method, strlen(p->method)));
	{
		const char *c = r1.canonical_request + strlen(p->method);
		size_t plen = strlen(path);

		FUZZ_CHECK(c[0] == '\n' && !strncmp(c + 1, path, plen) &&
			   c[1 + plen] == '\n');
		/* The canonical query line: encoded pairs only. */
		for (c += 2 + plen; *c != '\n'; c++)
			FUZZ_CHECK(unreserved((unsigned char)*c) || *c == '%' ||
				   *c == '=' || *c == '&');
	}
	FUZZ_CHECK(!strncmp(r1.authorization,
			    "AWS4-HMAC-SHA256 Credential=AKIDFUZZ/", 37));
	FUZZ_CHECK(strstr(r1.authorization, r1.signature));
	/* (Unless the input carries it: libFuzzer learns strstr's needle.) */
	FUZZ_CHECK(p->has_secret || (!strstr(r1.canonical_request, SECRET) &&
				     !strstr(r1.string_to_sign, SECRET) &&
				     !strstr(r1.authorization, SECRET)));
	/* The signed header names are lower case and ';'-joined. */
	for (const char *s = r1.signed_headers; *s; s++)
		FUZZ_CHECK(!(*s >= 'A' && *s <= 'Z') && *s != ':' &&
			   *s != '\n');
	sigv4_result_fini(&r1);
	sigv4_result_fini(&r2);
	sigv4_result_fini(&r2); /* a zeroed result is accepted */
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data;
	struct parsed p;
	char *key_path, *path, *qmark, *enc_q;
	size_t plen;

	/* The whole input as an object key, both ways. */
	free(encode_checked(in, size, true));
	free(encode_checked(in, size, false));

	parse_request(in, size, &p);
	p.has_secret = memmem(in, size, SECRET, strlen(SECRET)) != NULL;
	qmark = strchr(p.target, '?');
	if (qmark)
		*qmark++ = '\0';
	/* As the client does it: '/' + encoded key, then the query. */
	key_path = encode_checked(p.target, strlen(p.target), true);
	plen = strlen(key_path);
	path = malloc(plen + 2);
	FUZZ_CHECK(path != NULL);
	path[0] = '/';
	memcpy(path + 1, key_path, plen + 1);
	sign_checked(&p, path, qmark, NULL);
	sign_checked(&p, path, qmark, "session/token+value==");
	/* A query of encoded pairs always signs, if the headers do. */
	enc_q = qmark ? encode_checked(qmark, strlen(qmark), false) : NULL;
	if (enc_q) {
		size_t n = strlen(enc_q);
		char *pair = malloc(n + 3);

		FUZZ_CHECK(pair != NULL);
		memcpy(pair, "k=", 2);
		memcpy(pair + 2, enc_q, n + 1);
		sign_checked(&p, path, pair, NULL);
		free(pair);
	}
	/* The raw target, unencoded: refused or signed, never a crash. */
	if (p.target[0] == '/')
		sign_checked(&p, p.target, qmark, NULL);
	free(enc_q);
	free(path);
	free(key_path);
	parsed_free(&p);
	return 0;
}
