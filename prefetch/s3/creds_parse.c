/*
 * prefetch/s3/creds_parse.c - the three formats credentials arrive in: the
 * JSON of credential_process, of instance metadata and of the container
 * endpoint; STS's XML; AWS's ISO 8601 times.
 *
 * Owns a small strict JSON reader for one flat object (nested values are
 * parsed and skipped) and the STS XML walk with expat. Invariant: a value
 * that is a secret is copied only into the struct creds_value, and every
 * scratch copy is wiped; error messages name fields, never values.
 */
#include "prefetch/s3/creds.h"

#include "common/utf8.h"

#include <errno.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Credentials answers are under 4 KB; 64 KiB of JSON or XML is a wrong
 * program or server, and bounds what we hold. */
#define CREDS_DOC_MAX_BYTES (64u << 10)

void creds_wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void creds_value_fini(struct creds_value *v)
{
	creds_wipe_free(v->access_key);
	creds_wipe_free(v->secret_key);
	creds_wipe_free(v->session_token);
	memset(v, 0, sizeof(*v));
}

/* Reasons end up in log lines: a control character a server or a helper
 * put in a message (a newline in an STS <Message>) becomes a space. */
static void one_line(char *s, size_t cap)
{
	for (size_t i = 0; i < cap && s[i]; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			s[i] = ' ';
}

/* ---- times --------------------------------------------------------------- */

static int digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return -EINVAL;
		v = v * 10 + (**p - '0');
	}
	*out = v;
	return 0;
}

int creds_parse_time(const char *s, int64_t *out)
{
	struct tm tm = {0};
	int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
	const char *p = s;

	if (!s || digits(&p, 4, &y) || *p++ != '-' || digits(&p, 2, &mo) ||
	    *p++ != '-' || digits(&p, 2, &d) ||
	    (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p++;
	if (digits(&p, 2, &h) || *p++ != ':' || digits(&p, 2, &mi) ||
	    *p++ != ':' || digits(&p, 2, &sec))
		return -EINVAL;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p++ == '+' ? 1 : -1;
		if (digits(&p, 2, &oh))
			return -EINVAL;
		if (*p == ':')
			p++;
		if (digits(&p, 2, &om))
			return -EINVAL;
	} else {
		return -EINVAL; /* NOTE(s3): a time without a zone is ambiguous
				 */
	}
	if (*p || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 ||
	    sec > 60 || oh > 23 || om > 59)
		return -EINVAL;
	tm.tm_year = y - 1900;
	tm.tm_mon = mo - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	*out = (int64_t)timegm(&tm) - sign * (int64_t)(oh * 3600 + om * 60);
	return 0;
}

/* ---- a strict JSON reader for one flat object ---------------------------- */

struct jp {
	const char *p, *end;
	const char *why; /* the first error */
};

/* The fields the callers want; others are skipped. */
enum jf {
	JF_VERSION,
	JF_ACCESS_KEY,
	JF_SECRET_KEY,
	JF_SESSION_TOKEN,
	JF_TOKEN,
	JF_EXPIRATION,
	JF_CODE,
	JF_COUNT
};

static const char *const jf_names[JF_COUNT] = {
    [JF_VERSION] = "Version",
    [JF_ACCESS_KEY] = "AccessKeyId",
    [JF_SECRET_KEY] = "SecretAccessKey",
    [JF_SESSION_TOKEN] = "SessionToken",
    [JF_TOKEN] = "Token",
    [JF_EXPIRATION] = "Expiration",
    [JF_CODE] = "Code",
};

struct jfields {
	char *str[JF_COUNT]; /* string values, malloc'd */
	bool present[JF_COUNT];
	bool is_string[JF_COUNT];
	double num[JF_COUNT]; /* number values */
};

static void jfields_fini(struct jfields *f)
{
	for (int i = 0; i < JF_COUNT; i++)
		creds_wipe_free(f->str[i]);
}

static void ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' ||
				 *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int jfail(struct jp *j, const char *why)
{
	if (!j->why)
		j->why = why;
	return -EINVAL;
}

static int hex4(struct jp *j, unsigned *out)
{
	unsigned v = 0;

	if (j->end - j->p < 4)
		return jfail(j, "a truncated \\u escape");
	for (int i = 0; i < 4; i++) {
		char c = *j->p++;

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return jfail(j, "a bad \\u escape");
	}
	*out = v;
	return 0;
}

/* Reads a string at j->p (on the '"'); stores it malloc'd in *@out unless
 * @out is NULL. Escapes are decoded; \u0000 is refused (C strings). */
static int jstring(struct jp *j, char **out)
{
	size_t cap = 64, n = 0;
	char *b = out ? malloc(cap) : NULL;
	int rc = 0;

	if (out && !b)
		return -ENOMEM;
	j->p++;
	for (;;) {
		char tmp[4];
		size_t tn = 1;
		unsigned char c;

		if (j->p >= j->end) {
			rc = jfail(j, "an unterminated string");
			break;
		}
		c = (unsigned char)*j->p++;
		if (c == '"')
			break;
		if (c < 0x20) {
			rc = jfail(j, "a control character in a string");
			break;
		}
		tmp[0] = (char)c;
		if (c == '\\') {
			if (j->p >= j->end) {
				rc = jfail(j, "an unterminated string");
				break;
			}
			c = (unsigned char)*j->p++;
			switch (c) {
			case '"':
			case '\\':
			case '/':
				tmp[0] = (char)c;
				break;
			case 'b':
				tmp[0] = '\b';
				break;
			case 'f':
				tmp[0] = '\f';
				break;
			case 'n':
				tmp[0] = '\n';
				break;
			case 'r':
				tmp[0] = '\r';
				break;
			case 't':
				tmp[0] = '\t';
				break;
			case 'u': {
				unsigned u, lo;

				rc = hex4(j, &u);
				if (rc)
					break;
				if (u >= 0xd800 && u < 0xdc00) {
					if (j->end - j->p < 6 ||
					    j->p[0] != '\\' || j->p[1] != 'u') {
						rc = jfail(j,
							   "a lone surrogate");
						break;
					}
					j->p += 2;
					rc = hex4(j, &lo);
					if (rc)
						break;
					if (lo < 0xdc00 || lo > 0xdfff) {
						rc = jfail(j,
							   "a lone surrogate");
						break;
					}
					u = 0x10000 + ((u - 0xd800) << 10) +
					    (lo - 0xdc00);
				} else if (u >= 0xdc00 && u < 0xe000) {
					rc = jfail(j, "a lone surrogate");
					break;
				}
				if (u == 0) {
					rc = jfail(j, "a NUL in a string");
					break;
				}
				tn = utf8_put(u, tmp);
				break;
			}
			default:
				rc = jfail(j, "a bad escape in a string");
			}
			if (rc)
				break;
		}
		if (!b)
			continue;
		if (n + tn + 1 > cap) {
			char *nb = malloc(cap * 2);

			if (!nb) {
				rc = -ENOMEM;
				break;
			}
			memcpy(nb, b, n);
			explicit_bzero(b, cap);
			free(b);
			b = nb;
			cap *= 2;
		}
		memcpy(b + n, tmp, tn);
		n += tn;
	}
	if (rc) {
		if (b) {
			explicit_bzero(b, cap);
			free(b);
		}
		return rc;
	}
	if (b) {
		b[n] = '\0';
		*out = b;
	}
	return 0;
}

static int jnumber(struct jp *j, double *out)
{
	const char *s = j->p;
	char buf[64];
	size_t n;

	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end || *j->p < '0' || *j->p > '9')
		return jfail(j, "a bad value");
	while (j->p < j->end &&
	       ((*j->p >= '0' && *j->p <= '9') || *j->p == '.' ||
		*j->p == 'e' || *j->p == 'E' || *j->p == '+' || *j->p == '-'))
		j->p++;
	n = (size_t)(j->p - s);
	if (n >= sizeof(buf))
		return jfail(j, "a number too long");
	memcpy(buf, s, n);
	buf[n] = '\0';
	{
		char *e;

		*out = strtod(buf, &e);
		if (*e)
			return jfail(j, "a bad number");
	}
	return 0;
}

static int jvalue_skip(struct jp *j, int depth);

static int jlit(struct jp *j, const char *lit)
{
	size_t n = strlen(lit);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, lit, n))
		return jfail(j, "a bad value");
	j->p += n;
	return 0;
}

/* Skips any value (nested ones up to a sane depth). */
static int jvalue_skip(struct jp *j, int depth)
{
	double d;

	if (depth > 32)
		return jfail(j, "nesting too deep");
	ws(j);
	if (j->p >= j->end)
		return jfail(j, "a missing value");
	switch (*j->p) {
	case '"':
		return jstring(j, NULL);
	case 't':
		return jlit(j, "true");
	case 'f':
		return jlit(j, "false");
	case 'n':
		return jlit(j, "null");
	case '{':
	case '[': {
		char close = *j->p == '{' ? '}' : ']';
		bool obj = close == '}';

		j->p++;
		ws(j);
		if (j->p < j->end && *j->p == close) {
			j->p++;
			return 0;
		}
		for (;;) {
			int rc;

			if (obj) {
				ws(j);
				if (j->p >= j->end || *j->p != '"')
					return jfail(j, "a bad member name");
				rc = jstring(j, NULL);
				if (rc)
					return rc;
				ws(j);
				if (j->p >= j->end || *j->p++ != ':')
					return jfail(j, "a missing ':'");
			}
			rc = jvalue_skip(j, depth + 1);
			if (rc)
				return rc;
			ws(j);
			if (j->p < j->end && *j->p == ',') {
				j->p++;
				continue;
			}
			if (j->p < j->end && *j->p == close) {
				j->p++;
				return 0;
			}
			return jfail(j, "a missing ',' or closing bracket");
		}
	}
	default:
		return jnumber(j, &d);
	}
}

/* Parses one JSON object (and nothing after it but white space). */
static int json_fields(const char *text, size_t len, struct jfields *f,
		       char *err, size_t err_len)
{
	struct jp j = {text, text + len, NULL};
	int rc = 0;

	memset(f, 0, sizeof(*f));
	if (len > CREDS_DOC_MAX_BYTES) {
		snprintf(err, err_len,
			 "more than 64 KiB of output: not credentials");
		return -EINVAL;
	}
	ws(&j);
	if (j.p >= j.end) {
		snprintf(err, err_len, "empty output, expected a JSON object");
		return -EINVAL;
	}
	if (*j.p != '{') {
		snprintf(err, err_len, "not a JSON object");
		return -EINVAL;
	}
	j.p++;
	ws(&j);
	if (j.p < j.end && *j.p == '}') {
		j.p++;
		goto tail;
	}
	for (;;) {
		char *name = NULL;
		int which = -1;

		ws(&j);
		if (j.p >= j.end || *j.p != '"') {
			rc = jfail(&j, "a bad member name");
			break;
		}
		rc = jstring(&j, &name);
		if (rc)
			break;
		for (int i = 0; i < JF_COUNT; i++)
			if (!strcmp(name, jf_names[i]))
				which = i;
		free(name);
		ws(&j);
		if (j.p >= j.end || *j.p++ != ':') {
			rc = jfail(&j, "a missing ':'");
			break;
		}
		ws(&j);
		if (which >= 0 && f->present[which]) {
			rc = jfail(&j, "a field given twice");
			break;
		}
		if (which >= 0 && j.p < j.end && *j.p == '"') {
			f->present[which] = f->is_string[which] = true;
			rc = jstring(&j, &f->str[which]);
		} else if (which >= 0 && j.p < j.end &&
			   (*j.p == '-' || (*j.p >= '0' && *j.p <= '9'))) {
			f->present[which] = true;
			rc = jnumber(&j, &f->num[which]);
		} else {
			if (which >= 0)
				f->present[which] = true;
			rc = jvalue_skip(&j, 1);
		}
		if (rc)
			break;
		ws(&j);
		if (j.p < j.end && *j.p == ',') {
			j.p++;
			continue;
		}
		if (j.p < j.end && *j.p == '}') {
			j.p++;
			break;
		}
		rc = jfail(&j, "a missing ',' or '}'");
		break;
	}
tail:
	if (!rc) {
		ws(&j);
		if (j.p != j.end)
			rc = jfail(&j, "text after the JSON object");
	}
	if (rc == -EINVAL)
		snprintf(err, err_len, "not valid JSON: %s at byte %zu", j.why,
			 (size_t)(j.p - text));
	if (rc)
		jfields_fini(f);
	return rc;
}

/* Moves the string field @k into *@dst; names it in @err when absent. */
static int take(struct jfields *f, enum jf k, char **dst, bool required,
		char *err, size_t err_len)
{
	if (!f->present[k] || (f->is_string[k] && !*f->str[k])) {
		if (!required)
			return 0;
		snprintf(err, err_len, "no %s", jf_names[k]);
		return -EINVAL;
	}
	if (!f->is_string[k]) {
		snprintf(err, err_len, "%s is not a string", jf_names[k]);
		return -EINVAL;
	}
	*dst = f->str[k];
	f->str[k] = NULL;
	return 0;
}

static int take_expiry(struct jfields *f, struct creds_value *out, char *err,
		       size_t err_len)
{
	if (!f->present[JF_EXPIRATION])
		return 0;
	if (!f->is_string[JF_EXPIRATION] ||
	    creds_parse_time(f->str[JF_EXPIRATION], &out->expires)) {
		snprintf(err, err_len,
			 "Expiration is not an ISO 8601 time with a zone");
		return -EINVAL;
	}
	return 0;
}

/* Moves the keys, the token (field @token: the two formats name it
 * differently) and the expiry into @out, unless @rc already failed; frees
 * @f. Returns the result. */
static int take_all(struct jfields *f, int rc, enum jf token,
		    struct creds_value *out, char *err, size_t err_len)
{
	if (!rc)
		rc = take(f, JF_ACCESS_KEY, &out->access_key, true, err,
			  err_len);
	if (!rc)
		rc = take(f, JF_SECRET_KEY, &out->secret_key, true, err,
			  err_len);
	if (!rc)
		rc = take(f, token, &out->session_token, false, err, err_len);
	if (!rc)
		rc = take_expiry(f, out, err, err_len);
	jfields_fini(f);
	if (rc) {
		creds_value_fini(out);
		one_line(err, err_len);
	}
	return rc;
}

int creds_parse_process_json(const char *text, size_t len,
			     struct creds_value *out, char *err, size_t err_len)
{
	struct jfields f;
	int rc;

	memset(out, 0, sizeof(*out));
	rc = json_fields(text, len, &f, err, err_len);
	if (rc)
		return rc;
	if (!f.present[JF_VERSION] || f.is_string[JF_VERSION] ||
	    f.num[JF_VERSION] != 1) {
		rc = -EINVAL;
		snprintf(err, err_len, "%s",
			 f.present[JF_VERSION] ? "Version is not 1"
					       : "no Version (must be 1)");
	}
	return take_all(&f, rc, JF_SESSION_TOKEN, out, err, err_len);
}

int creds_parse_http_json(const char *text, size_t len, struct creds_value *out,
			  char *err, size_t err_len)
{
	struct jfields f;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	rc = json_fields(text, len, &f, err, err_len);
	if (rc)
		return rc;
	/* NOTE(s3): IMDS says Code "Success"; anything else has no keys. */
	if (f.present[JF_CODE] &&
	    (!f.is_string[JF_CODE] || strcmp(f.str[JF_CODE], "Success"))) {
		rc = -EINVAL;
		snprintf(err, err_len, "Code is '%.40s', not Success",
			 f.is_string[JF_CODE] ? f.str[JF_CODE] : "?");
	}
	return take_all(&f, rc, JF_TOKEN, out, err, err_len);
}

/* ---- STS XML --------------------------------------------------------------
 */

enum sx_field { SX_NONE, SX_AK, SX_SK, SX_TOKEN, SX_EXP, SX_CODE, SX_MSG };

struct sx {
	XML_Parser xp;
	int depth;
	bool in_creds;	     /* inside <Credentials> */
	bool in_error;	     /* inside <Error> */
	bool is_sts;	     /* the root is one STS knows */
	enum sx_field field; /* the element whose text we collect */
	char *text[SX_MSG + 1];
	size_t text_len[SX_MSG + 1];
	bool oom;
};

static const char *local_name(const char *name)
{
	/* expat is created without namespace processing: strip "p:" */
	const char *c = strrchr(name, ':');

	return c ? c + 1 : name;
}

static void XMLCALL sx_start(void *arg, const char *name, const char **attrs)
{
	struct sx *s = arg;
	const char *n = local_name(name);

	(void)attrs;
	s->depth++;
	if (s->depth == 1)
		s->is_sts = strstr(n, "Response") != NULL;
	s->field = SX_NONE;
	if (!strcmp(n, "Credentials"))
		s->in_creds = true;
	else if (!strcmp(n, "Error"))
		s->in_error = true;
	else if (s->in_creds && !strcmp(n, "AccessKeyId"))
		s->field = SX_AK;
	else if (s->in_creds && !strcmp(n, "SecretAccessKey"))
		s->field = SX_SK;
	else if (s->in_creds && !strcmp(n, "SessionToken"))
		s->field = SX_TOKEN;
	else if (s->in_creds && !strcmp(n, "Expiration"))
		s->field = SX_EXP;
	else if (s->in_error && !strcmp(n, "Code"))
		s->field = SX_CODE;
	else if (s->in_error && !strcmp(n, "Message"))
		s->field = SX_MSG;
	if (s->field != SX_NONE && s->text[s->field]) {
		/* a second element of the same name: keep the last */
		explicit_bzero(s->text[s->field], s->text_len[s->field]);
		free(s->text[s->field]);
		s->text[s->field] = NULL;
		s->text_len[s->field] = 0;
	}
}

static void XMLCALL sx_end(void *arg, const char *name)
{
	struct sx *s = arg;
	const char *n = local_name(name);

	s->depth--;
	s->field = SX_NONE;
	if (!strcmp(n, "Credentials"))
		s->in_creds = false;
	else if (!strcmp(n, "Error"))
		s->in_error = false;
}

static void XMLCALL sx_text(void *arg, const char *t, int len)
{
	struct sx *s = arg;
	size_t n;
	char *nb;

	if (s->field == SX_NONE || len <= 0 || s->oom)
		return;
	n = s->text_len[s->field];
	nb = malloc(n + (size_t)len + 1);
	if (!nb) {
		s->oom = true;
		XML_StopParser(s->xp, XML_FALSE);
		return;
	}
	if (n)
		memcpy(nb, s->text[s->field], n);
	memcpy(nb + n, t, (size_t)len);
	nb[n + (size_t)len] = '\0';
	if (s->text[s->field]) {
		explicit_bzero(s->text[s->field], n);
		free(s->text[s->field]);
	}
	s->text[s->field] = nb;
	s->text_len[s->field] = n + (size_t)len;
}

/* Strips surrounding white space in place (pretty-printed XML). */
static void strip(char *s)
{
	size_t n, i = 0;

	if (!s)
		return;
	n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' ||
		     s[n - 1] == '\t'))
		s[--n] = '\0';
	while (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')
		i++;
	memmove(s, s + i, n - i + 1);
}

int creds_parse_sts_xml(const char *text, size_t len, struct creds_value *out,
			char *err, size_t err_len)
{
	struct sx s = {0};
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (len > CREDS_DOC_MAX_BYTES) {
		snprintf(err, err_len, "STS answer larger than 64 KiB");
		return -EINVAL;
	}
	s.xp = XML_ParserCreate(NULL);
	if (!s.xp)
		return -ENOMEM;
	XML_SetUserData(s.xp, &s);
	XML_SetElementHandler(s.xp, sx_start, sx_end);
	XML_SetCharacterDataHandler(s.xp, sx_text);
	if (XML_Parse(s.xp, text, (int)len, XML_TRUE) != XML_STATUS_OK) {
		rc = s.oom ? -ENOMEM : -EINVAL;
		if (!s.oom)
			snprintf(err, err_len,
				 "STS answer is not XML: %s at line %lu",
				 XML_ErrorString(XML_GetErrorCode(s.xp)),
				 (unsigned long)XML_GetCurrentLineNumber(s.xp));
		goto out;
	}
	for (int i = 0; i <= SX_MSG; i++)
		strip(s.text[i]);
	if (s.text[SX_CODE]) {
		/* A Code of white space says no more than none. */
		const char *code = *s.text[SX_CODE] ? s.text[SX_CODE]
						    : "an error without a Code";
		bool msg = s.text[SX_MSG] && *s.text[SX_MSG];

		rc = -EACCES;
		snprintf(err, err_len, "%.64s%s%.200s", code, msg ? ": " : "",
			 msg ? s.text[SX_MSG] : "");
		goto out;
	}
	if (!s.is_sts || !s.text[SX_AK] || !*s.text[SX_AK] || !s.text[SX_SK] ||
	    !*s.text[SX_SK]) {
		rc = -EINVAL;
		snprintf(err, err_len,
			 "STS answer has no Credentials with "
			 "AccessKeyId and SecretAccessKey");
		goto out;
	}
	if (s.text[SX_EXP] && creds_parse_time(s.text[SX_EXP], &out->expires)) {
		rc = -EINVAL;
		snprintf(err, err_len, "STS answer's Expiration is not a time");
		goto out;
	}
	out->access_key = s.text[SX_AK];
	out->secret_key = s.text[SX_SK];
	out->session_token =
	    s.text[SX_TOKEN] && *s.text[SX_TOKEN] ? s.text[SX_TOKEN] : NULL;
	if (!out->session_token && s.text[SX_TOKEN])
		free(s.text[SX_TOKEN]);
	s.text[SX_AK] = s.text[SX_SK] = s.text[SX_TOKEN] = NULL;
out:
	for (int i = 0; i <= SX_MSG; i++) {
		if (s.text[i]) {
			explicit_bzero(s.text[i], s.text_len[i]);
			free(s.text[i]);
		}
	}
	XML_ParserFree(s.xp);
	if (rc) {
		creds_value_fini(out);
		one_line(err, err_len);
	}
	return rc;
}
