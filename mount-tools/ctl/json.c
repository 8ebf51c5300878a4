/*
 * mount-tools/ctl/json.c - the JSON reader of hintfs-ctl (see json.h).
 *
 * A recursive-descent parser over (text, length): it never reads past
 * the length and needs no terminating NUL. Invariant: a node is linked
 * into the tree as soon as it is allocated, so one json_free() of the
 * root releases everything on every error path.
 */
#include "json.h"
#include "common/buf.h"
#include "common/utf8.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	const char *s;
	size_t len;
	size_t pos;
	char *err;
	size_t err_len;
	int rc; /* first error: -EINVAL or -ENOMEM */
};

static int __attribute__((format(printf, 2, 3)))
bad(struct parser *p, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->rc)
		return p->rc;
	n = snprintf(p->err, p->err_len, "at byte %zu: ", p->pos);
	if (n >= 0 && (size_t)n < p->err_len) {
		va_start(ap, fmt);
		vsnprintf(p->err + n, p->err_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	p->rc = -EINVAL;
	return p->rc;
}

static int nomem(struct parser *p)
{
	if (!p->rc) {
		snprintf(p->err, p->err_len, "out of memory");
		p->rc = -ENOMEM;
	}
	return p->rc;
}

static void skip_ws(struct parser *p)
{
	while (p->pos < p->len) {
		char c = p->s[p->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			return;
		p->pos++;
	}
}

static bool at(struct parser *p, char c)
{
	return p->pos < p->len && p->s[p->pos] == c;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int buf_utf8(struct buf *b, uint32_t cp)
{
	char u[4];

	return buf_append(b, u, utf8_put(cp, u));
}

/* Four hex digits at the current position, or -1. */
static long hex4(struct parser *p)
{
	long v = 0;

	if (p->len - p->pos < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		char c = p->s[p->pos + (size_t)i];

		v <<= 4;
		if (is_digit(c))
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	p->pos += 4;
	return v;
}

/* A string at the opening quote; the decoded bytes go to *@out. */
static int parse_string(struct parser *p, char **out, size_t *out_len)
{
	struct buf b = {0};

	p->pos++; /* the quote */
	if (buf_append(&b, "", 0))
		return nomem(p);
	for (;;) {
		size_t start = p->pos;
		char c;

		while (p->pos < p->len && p->s[p->pos] != '"' &&
		       p->s[p->pos] != '\\' &&
		       (unsigned char)p->s[p->pos] >= 0x20)
			p->pos++;
		if (buf_append(&b, p->s + start, p->pos - start))
			goto oom;
		if (p->pos >= p->len) {
			bad(p, "unterminated string");
			goto fail;
		}
		c = p->s[p->pos++];
		if (c == '"')
			break;
		if (c != '\\') {
			p->pos--;
			bad(p, "control character in a string");
			goto fail;
		}
		if (p->pos >= p->len) {
			bad(p, "unterminated string");
			goto fail;
		}
		c = p->s[p->pos++];
		switch (c) {
		case '"':
		case '\\':
		case '/':
			if (buf_append(&b, &c, 1))
				goto oom;
			break;
		case 'b':
			if (buf_append(&b, "\b", 1))
				goto oom;
			break;
		case 'f':
			if (buf_append(&b, "\f", 1))
				goto oom;
			break;
		case 'n':
			if (buf_append(&b, "\n", 1))
				goto oom;
			break;
		case 'r':
			if (buf_append(&b, "\r", 1))
				goto oom;
			break;
		case 't':
			if (buf_append(&b, "\t", 1))
				goto oom;
			break;
		case 'u': {
			long cp = hex4(p);

			if (cp < 0) {
				bad(p, "bad \\u escape");
				goto fail;
			}
			/* A surrogate pair is one code point; a lone half
			 * becomes U+FFFD rather than invalid UTF-8. */
			if (cp >= 0xD800 && cp <= 0xDBFF &&
			    p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
			    p->s[p->pos + 1] == 'u') {
				size_t save = p->pos;
				long lo;

				p->pos += 2;
				lo = hex4(p);
				if (lo >= 0xDC00 && lo <= 0xDFFF)
					cp = 0x10000 + ((cp - 0xD800) << 10) +
					     (lo - 0xDC00);
				else
					p->pos = save;
			}
			if (cp >= 0xD800 && cp <= 0xDFFF)
				cp = 0xFFFD;
			if (buf_utf8(&b, (uint32_t)cp))
				goto oom;
			break;
		}
		default:
			p->pos--;
			bad(p, "bad escape '\\%c'", c);
			goto fail;
		}
	}
	*out = b.data;
	*out_len = b.len;
	return 0;
oom:
	nomem(p);
fail:
	buf_fini(&b);
	return p->rc;
}

static int parse_number(struct parser *p, struct json *v)
{
	size_t start = p->pos;

	if (at(p, '-'))
		p->pos++;
	if (at(p, '0')) {
		p->pos++;
	} else if (p->pos < p->len && is_digit(p->s[p->pos])) {
		while (p->pos < p->len && is_digit(p->s[p->pos]))
			p->pos++;
	} else {
		return bad(p, "bad number");
	}
	if (at(p, '.')) {
		p->pos++;
		if (p->pos >= p->len || !is_digit(p->s[p->pos]))
			return bad(p, "bad number: no digit after '.'");
		while (p->pos < p->len && is_digit(p->s[p->pos]))
			p->pos++;
	}
	if (at(p, 'e') || at(p, 'E')) {
		p->pos++;
		if (at(p, '+') || at(p, '-'))
			p->pos++;
		if (p->pos >= p->len || !is_digit(p->s[p->pos]))
			return bad(p, "bad number: no digit in the exponent");
		while (p->pos < p->len && is_digit(p->s[p->pos]))
			p->pos++;
	}
	v->str = strndup(p->s + start, p->pos - start);
	if (!v->str)
		return nomem(p);
	v->len = p->pos - start;
	v->num =
	    strtod(v->str, NULL); /* the grammar above is strtod's subset */
	return 0;
}

static bool literal(struct parser *p, const char *word)
{
	size_t n = strlen(word);

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
		return false;
	p->pos += n;
	return true;
}

static int parse_value(struct parser *p, struct json *v, int depth);

/* The members of an object or the elements of an array, after '{'/'['. */
static int parse_children(struct parser *p, struct json *v, int depth)
{
	bool obj = v->type == JSON_OBJECT;
	char close = obj ? '}' : ']';
	struct json **tail = &v->child;

	if (depth >= JSON_MAX_DEPTH)
		return bad(p, "nested deeper than %d", JSON_MAX_DEPTH);
	p->pos++;
	skip_ws(p);
	if (at(p, close)) {
		p->pos++;
		return 0;
	}
	for (;;) {
		struct json *c = calloc(1, sizeof(*c));

		if (!c)
			return nomem(p);
		*tail = c;
		tail = &c->next;
		v->n++;
		skip_ws(p);
		if (obj) {
			size_t klen;

			if (!at(p, '"'))
				return bad(p, "expected a member name");
			if (parse_string(p, &c->key, &klen))
				return p->rc;
			skip_ws(p);
			if (!at(p, ':'))
				return bad(p, "expected ':'");
			p->pos++;
		}
		if (parse_value(p, c, depth + 1))
			return p->rc;
		skip_ws(p);
		if (at(p, ',')) {
			p->pos++;
			continue;
		}
		if (at(p, close)) {
			p->pos++;
			return 0;
		}
		return bad(p, "expected ',' or '%c'", close);
	}
}

static int parse_value(struct parser *p, struct json *v, int depth)
{
	skip_ws(p);
	if (p->pos >= p->len)
		return bad(p, "unexpected end of text");
	switch (p->s[p->pos]) {
	case '{':
		v->type = JSON_OBJECT;
		return parse_children(p, v, depth);
	case '[':
		v->type = JSON_ARRAY;
		return parse_children(p, v, depth);
	case '"':
		v->type = JSON_STRING;
		return parse_string(p, &v->str, &v->len);
	case 't':
		v->type = JSON_TRUE;
		return literal(p, "true") ? 0 : bad(p, "bad literal");
	case 'f':
		v->type = JSON_FALSE;
		return literal(p, "false") ? 0 : bad(p, "bad literal");
	case 'n':
		v->type = JSON_NULL;
		return literal(p, "null") ? 0 : bad(p, "bad literal");
	default:
		if (p->s[p->pos] != '-' && !is_digit(p->s[p->pos]))
			return bad(p, "unexpected character");
		v->type = JSON_NUMBER;
		return parse_number(p, v);
	}
}

int json_parse(const char *text, size_t len, struct json **out, char *err,
	       size_t err_len)
{
	struct parser p = {
	    .s = text,
	    .len = len,
	    .err = err,
	    .err_len = err_len,
	};
	struct json *root = calloc(1, sizeof(*root));

	*out = NULL;
	if (!root)
		return nomem(&p);
	if (!parse_value(&p, root, 0)) {
		skip_ws(&p);
		if (p.pos < p.len)
			bad(&p, "text after the value");
	}
	if (p.rc) {
		json_free(root);
		return p.rc;
	}
	*out = root;
	return 0;
}

void json_free(struct json *v)
{
	/* Siblings iteratively, children by recursion (bounded by
	 * JSON_MAX_DEPTH), so a long array cannot exhaust the stack. */
	while (v) {
		struct json *next = v->next;

		json_free(v->child);
		free(v->key);
		free(v->str);
		free(v);
		v = next;
	}
}

const struct json *json_get(const struct json *v, const char *path)
{
	while (v && *path) {
		size_t n = strcspn(path, ".");
		const struct json *c;

		if (v->type != JSON_OBJECT)
			return NULL;
		for (c = v->child; c; c = c->next)
			if (strlen(c->key) == n && !memcmp(c->key, path, n))
				break;
		v = c;
		path += n;
		if (*path == '.')
			path++;
	}
	return v;
}

bool json_has_num(const struct json *v, const char *path, double *out)
{
	v = json_get(v, path);
	if (!v || v->type != JSON_NUMBER)
		return false;
	*out = v->num;
	return true;
}

double json_num(const struct json *v, const char *path, double dflt)
{
	double d;

	return json_has_num(v, path, &d) ? d : dflt;
}

const char *json_str(const struct json *v, const char *path)
{
	v = json_get(v, path);
	return v && v->type == JSON_STRING ? v->str : NULL;
}
