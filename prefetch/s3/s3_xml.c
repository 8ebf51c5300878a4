/*
 * prefetch/s3/s3_xml.c - S3's XML bodies turned into C structs, with expat.
 *
 * Owns the two document parsers the S3 client needs (ListObjectsV2 pages
 * and <Error> documents), the ISO 8601 time parser and the form-decoder
 * for keys of pages that say <EncodingType>url.
 *
 * Invariants:
 * - A parse fills the caller's struct completely or leaves it empty; no
 *   partial page ever escapes (the caller would list a directory short).
 * - Character data is kept only for the few leaf elements we read, only at
 *   the exact path where S3 puts them (ListBucketResult/Contents/Key, ...),
 *   in one buffer of fixed size. Everything else, however large, streams
 *   through expat without being kept.
 * - A DOCTYPE stops the parser before any entity can be declared: S3 never
 *   sends one, and refusing it closes entity expansion ("billion laughs")
 *   and external entities outright instead of relying on expat's limits.
 * - Element names are compared by local name: real S3 puts its list in the
 *   2006-03-01 namespace, error documents and some servers use none.
 */
#include "prefetch/s3/s3_xml.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <expat.h>

/* A key is at most 1,024 bytes in S3 and up to 3x that once %-encoded; a
 * continuation token is ~100. 64 KiB leaves room for servers with looser
 * limits and still bounds what a hostile body can make us keep. */
#define XML_TEXT_MAX (64u << 10)
/* Error text is cut to fit struct s3_error_doc; 4 KiB is enough to trim
 * pretty-printing whitespace around it first. */
#define XML_ERROR_TEXT_MAX 4096u
/* S3 documents nest 4 deep (ListBucketResult/Contents/Owner/ID); anything
 * past 16 is not S3, and stopping early keeps expat's tag stack small. */
#define XML_DEPTH_MAX 16
/* XML_Parse takes an int length; larger bodies go in pieces. */
#define XML_CHUNK_BYTES (1 << 30)
/* How much of a key or value a one-line reason quotes. */
#define QUOTE_BYTES 48

/* State shared by both parsers; the first member of each parser's context
 * so that expat's user data can be cast either way. */
struct xml_base {
	XML_Parser parser;
	const char *what; /* prefix of reasons: "ListObjectsV2", ... */
	char *err;	  /* caller's reason buffer, may be NULL */
	size_t err_len;
	int depth;	  /* of the element being parsed, root = 1 */
	bool in_parse;	  /* XML_StopParser() is only legal inside a handler */
	bool failed;	  /* first failure wins; later handlers do nothing */
	int rc;		  /* -EPROTO or -ENOMEM once failed */
	const char *leaf; /* static name of the leaf being captured, or NULL */
	bool text_cut;	  /* error docs: keep the head of over-long text */
	size_t text_max;  /* capturing more fails (or, with text_cut, cuts) */
	char *text;	  /* text_max + 1 bytes; captured text, NUL-ended */
	size_t text_len;
};

/* A value quoted for a reason, returned by value so that it can be used
 * straight in an argument list. */
struct quote {
	char s[QUOTE_BYTES + 4];
};

__attribute__((format(printf, 3, 4))) static void
xml_fail(struct xml_base *b, int rc, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->failed)
		return;
	b->failed = true;
	b->rc = rc;
	if (b->in_parse)
		XML_StopParser(b->parser, XML_FALSE);
	if (!b->err || !b->err_len)
		return;
	n = snprintf(b->err, b->err_len, "%s: ", b->what);
	if (n < 0 || (size_t)n >= b->err_len)
		return;
	va_start(ap, fmt);
	vsnprintf(b->err + n, b->err_len - n, fmt, ap);
	va_end(ap);
}

/* The head of @s, cut on a UTF-8 boundary, with bytes that would break a
 * one-line log message shown as '?'. */
static struct quote quote(const char *s, size_t len)
{
	struct quote q;
	size_t n = len < QUOTE_BYTES ? len : QUOTE_BYTES;

	while (n < len && n && ((unsigned char)s[n] & 0xc0) == 0x80)
		n--;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];

		q.s[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	strcpy(q.s + n, n < len ? "..." : "");
	return q;
}

/* The name without any "prefix:", so "s3:Key" and "Key" compare equal. */
static const char *local_name(const XML_Char *name)
{
	const char *colon = strrchr(name, ':');

	return colon ? colon + 1 : name;
}

static void xml_capture_begin(struct xml_base *b, const char *leaf)
{
	b->leaf = leaf;
	b->text_len = 0;
	b->text[0] = '\0';
}

static void XMLCALL on_text(void *ud, const XML_Char *s, int len)
{
	struct xml_base *b = ud;
	size_t n = (size_t)len;

	if (b->failed || !b->leaf || len <= 0)
		return;
	if (n > b->text_max - b->text_len) {
		if (!b->text_cut) {
			xml_fail(b, -EPROTO, "<%s> text longer than %zu bytes",
				 b->leaf, b->text_max);
			return;
		}
		n = b->text_max - b->text_len;
	}
	memcpy(b->text + b->text_len, s, n);
	b->text_len += n;
	b->text[b->text_len] = '\0';
}

/* NOTE(s3): S3 never sends a DTD. Stopping at its start means no entity is
 * ever declared, so none can be expanded or fetched. */
static void XMLCALL on_doctype(void *ud, const XML_Char *name,
			       const XML_Char *sysid, const XML_Char *pubid,
			       int has_internal_subset)
{
	(void)name, (void)sysid, (void)pubid, (void)has_internal_subset;
	xml_fail(ud, -EPROTO, "DOCTYPE not allowed");
}

/* Unreachable while on_doctype stops first; kept so that a change there
 * cannot quietly let entity declarations through. */
static void XMLCALL on_entity_decl(void *ud, const XML_Char *name, int is_pe,
				   const XML_Char *value, int value_len,
				   const XML_Char *base, const XML_Char *sysid,
				   const XML_Char *pubid,
				   const XML_Char *notation)
{
	(void)name, (void)is_pe, (void)value, (void)value_len, (void)base;
	(void)sysid, (void)pubid, (void)notation;
	xml_fail(ud, -EPROTO, "entity declarations not allowed");
}

static int xml_init(struct xml_base *b, const char *what, size_t text_max,
		    XML_StartElementHandler start, XML_EndElementHandler end)
{
	b->what = what;
	b->text_max = text_max;
	b->text = malloc(text_max + 1);
	b->parser = XML_ParserCreate(NULL);
	if (!b->text || !b->parser) {
		xml_fail(b, -ENOMEM, "out of memory");
		return -ENOMEM;
	}
	XML_SetUserData(b->parser, b);
	XML_SetElementHandler(b->parser, start, end);
	XML_SetCharacterDataHandler(b->parser, on_text);
	XML_SetStartDoctypeDeclHandler(b->parser, on_doctype);
	XML_SetEntityDeclHandler(b->parser, on_entity_decl);
	XML_SetParamEntityParsing(b->parser, XML_PARAM_ENTITY_PARSING_NEVER);
	return 0;
}

static void xml_fini(struct xml_base *b)
{
	if (b->parser)
		XML_ParserFree(b->parser);
	free(b->text);
}

/* Runs the whole body through the parser. Returns 0 or the first failure,
 * a handler's or expat's own (not well-formed, truncated, ...). */
static int xml_run(struct xml_base *b, const char *body, size_t len)
{
	enum XML_Status st;

	if (!body)
		body = ""; /* an empty body; NULL + 0 is undefined in C */
	b->in_parse = true;
	do {
		int n = len > XML_CHUNK_BYTES ? XML_CHUNK_BYTES : (int)len;

		st = XML_Parse(b->parser, body, n, (size_t)n == len);
		body += n;
		len -= (size_t)n;
	} while (st == XML_STATUS_OK && !b->failed && len);
	b->in_parse = false;
	if (st != XML_STATUS_OK && !b->failed) {
		enum XML_Error e = XML_GetErrorCode(b->parser);

		xml_fail(b, e == XML_ERROR_NO_MEMORY ? -ENOMEM : -EPROTO,
			 "not well-formed XML at line %lu column %lu: %s",
			 (unsigned long)XML_GetCurrentLineNumber(b->parser),
			 (unsigned long)XML_GetCurrentColumnNumber(b->parser),
			 XML_ErrorString(e));
	}
	return b->failed ? b->rc : 0;
}

/* Checks common to every start tag. Returns false when parsing must end. */
static bool xml_enter(struct xml_base *b, const char *name)
{
	if (b->failed)
		return false;
	if (++b->depth > XML_DEPTH_MAX)
		xml_fail(b, -EPROTO, "elements nested deeper than %d",
			 XML_DEPTH_MAX);
	else if (b->leaf)
		xml_fail(b, -EPROTO, "unexpected element <%.64s> inside <%s>",
			 name, b->leaf);
	return !b->failed;
}

static bool is_xml_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n';
}

/* The captured text without the whitespace around it (not a copy). */
static const char *xml_text_trimmed(struct xml_base *b, size_t *len)
{
	const char *s = b->text;
	size_t n = b->text_len;

	while (n && is_xml_space(s[n - 1]))
		n--;
	while (n && is_xml_space(*s))
		s++, n--;
	*len = n;
	return s;
}

/* ---- ListObjectsV2 ---- */

enum list_field {
	LF_NONE,
	LF_IS_TRUNCATED, /* children of the root */
	LF_NEXT_TOKEN,
	LF_ENCODING_TYPE,
	LF_KEY, /* children of <Contents> */
	LF_SIZE,
	LF_MTIME,
	LF_ETAG,
};

static const char *const list_field_names[] = {
    [LF_IS_TRUNCATED] = "IsTruncated",
    [LF_NEXT_TOKEN] = "NextContinuationToken",
    [LF_ENCODING_TYPE] = "EncodingType",
    [LF_KEY] = "Key",
    [LF_SIZE] = "Size",
    [LF_MTIME] = "LastModified",
    [LF_ETAG] = "ETag",
};

#define LF_BIT(f) (1u << (f))
#define LF_ENTRY_BITS                                                          \
	(LF_BIT(LF_KEY) | LF_BIT(LF_SIZE) | LF_BIT(LF_MTIME) | LF_BIT(LF_ETAG))

struct list_ctx {
	struct xml_base b;     /* first: expat's user data is a list_ctx */
	bool url_encoded;      /* <EncodingType>url: keys are decoded at the
				  end (the element may follow them) */
	bool in_contents;      /* at ListBucketResult/Contents or below */
	bool in_common;	       /* at ListBucketResult/CommonPrefixes */
	bool capture_cp;       /* capturing CommonPrefixes/Prefix */
	enum list_field field; /* leaf being captured, or LF_NONE */
	unsigned int seen;     /* LF_BIT()s of the root's and cur's fields */
	struct s3_list_entry cur;
	struct s3_list_page page;
	size_t entries_cap;
	size_t prefixes_cap;
};

/* Names the entry being parsed in a reason: by its key once seen, else by
 * its position (S3 does not promise the order of fields). */
struct entry_name {
	char s[QUOTE_BYTES + 32];
};

static struct entry_name entry_name(const struct list_ctx *c)
{
	struct entry_name e;

	if (c->cur.key)
		snprintf(e.s, sizeof(e.s), "key '%s'",
			 quote(c->cur.key, c->cur.key_len).s);
	else
		snprintf(e.s, sizeof(e.s), "<Contents> #%zu",
			 c->page.n_entries + 1);
	return e;
}

static enum list_field list_field_of(const char *name, bool in_contents)
{
	int f = in_contents ? LF_KEY : LF_IS_TRUNCATED;
	int last = in_contents ? LF_ETAG : LF_ENCODING_TYPE;

	for (; f <= last; f++)
		if (!strcmp(name, list_field_names[f]))
			return (enum list_field)f;
	return LF_NONE;
}

static void XMLCALL list_start(void *ud, const XML_Char *qname,
			       const XML_Char **attrs)
{
	struct list_ctx *c = ud;
	const char *name = local_name(qname);

	(void)attrs;
	if (!xml_enter(&c->b, name))
		return;
	if (c->b.depth == 1) {
		if (strcmp(name, "ListBucketResult"))
			xml_fail(&c->b, -EPROTO,
				 "root element is <%.64s>, "
				 "not <ListBucketResult>",
				 name);
		return;
	}
	if (c->b.depth == 2 && !strcmp(name, "Contents")) {
		c->in_contents = true;
		c->seen &= ~LF_ENTRY_BITS;
		return;
	}
	if (c->b.depth == 2 && !strcmp(name, "CommonPrefixes")) {
		c->in_common = true;
		return;
	}
	if (c->in_common) {
		if (c->b.depth == 3 && !strcmp(name, "Prefix")) {
			c->capture_cp = true;
			xml_capture_begin(&c->b, "Prefix");
		}
		return;
	}
	/* NOTE(s3): v1 and v2 share the root name; only v1 has markers. We
	 * send list-type=2, so a v1 page means a server that ignored it, and
	 * paging it with continuation tokens would go wrong. */
	if (c->b.depth == 2 &&
	    (!strcmp(name, "Marker") || !strcmp(name, "NextMarker"))) {
		xml_fail(&c->b, -EPROTO,
			 "<%s> found: a ListObjects v1 page, not v2", name);
		return;
	}
	if (c->b.depth != (c->in_contents ? 3 : 2))
		return;
	c->field = list_field_of(name, c->in_contents);
	if (c->field == LF_NONE)
		return;
	if (c->seen & LF_BIT(c->field)) {
		xml_fail(&c->b, -EPROTO, "duplicate <%s> in %s", name,
			 c->in_contents ? entry_name(c).s
					: "<ListBucketResult>");
		return;
	}
	c->seen |= LF_BIT(c->field);
	xml_capture_begin(&c->b, list_field_names[c->field]);
}

/* Digits only: no sign, no spaces, no hex. -EINVAL or -ERANGE. */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (!len)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned int d = (unsigned int)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

static void list_take_key(struct list_ctx *c)
{
	struct xml_base *b = &c->b;

	if (!b->text_len) {
		xml_fail(b, -EPROTO, "empty <Key> in %s", entry_name(c).s);
		return;
	}
	/* As sent; decoded once the page is known to be url-encoded. XML
	 * text holds no NUL (expat refuses &#0;). */
	c->cur.key = strndup(b->text, b->text_len);
	c->cur.key_len = b->text_len;
	if (!c->cur.key)
		xml_fail(b, -ENOMEM, "out of memory");
}

/* Stores the captured text of one <CommonPrefixes><Prefix>, as sent. */
static void list_common_prefix(struct list_ctx *c)
{
	struct s3_list_page *p = &c->page;
	struct xml_base *b = &c->b;

	if (p->n_prefixes == c->prefixes_cap) {
		size_t cap = c->prefixes_cap ? 2 * c->prefixes_cap : 64;
		struct s3_list_prefix *e;

		e = reallocarray(p->prefixes, cap, sizeof(*e));
		if (!e) {
			xml_fail(b, -ENOMEM, "out of memory");
			return;
		}
		p->prefixes = e;
		c->prefixes_cap = cap;
	}
	p->prefixes[p->n_prefixes].prefix = strndup(b->text, b->text_len);
	p->prefixes[p->n_prefixes].len = b->text_len;
	if (!p->prefixes[p->n_prefixes].prefix)
		xml_fail(b, -ENOMEM, "out of memory");
	else
		p->n_prefixes++;
}

/* Form-decodes @s (@len bytes) in place of itself; false (with the reason
 * set) on a bad escape. */
static bool decode_in_place(struct list_ctx *c, char **s, size_t *len,
			    const char *what)
{
	size_t n;
	char *d;

	errno = EINVAL;
	d = s3_form_decode(*s, *len, &n);
	if (!d) {
		xml_fail(&c->b, errno == ENOMEM ? -ENOMEM : -EPROTO,
			 "<%s> '%s' has a bad %%-escape", what,
			 quote(*s, *len).s);
		return false;
	}
	free(*s);
	*s = d;
	*len = n;
	return true;
}

/* Form-decodes every key and common prefix of a page that says
 * <EncodingType>url. */
static void list_decode_keys(struct list_ctx *c)
{
	for (size_t i = 0; i < c->page.n_prefixes && !c->b.failed; i++)
		decode_in_place(c, &c->page.prefixes[i].prefix,
				&c->page.prefixes[i].len, "Prefix");
	for (size_t i = 0; i < c->page.n_entries && !c->b.failed; i++)
		decode_in_place(c, &c->page.entries[i].key,
				&c->page.entries[i].key_len, "Key");
}

/* Stores the captured text of one leaf of <Contents>. */
static void list_entry_field(struct list_ctx *c, enum list_field f)
{
	struct xml_base *b = &c->b;
	char t[48]; /* a time, with room for a fraction past milliseconds */
	size_t len;
	const char *s = xml_text_trimmed(b, &len);
	int rc = -EINVAL;

	if (f == LF_KEY) {
		list_take_key(c);
	} else if (f == LF_SIZE) {
		rc = parse_u64(s, len, &c->cur.size);
		if (!rc && c->cur.size > INT64_MAX)
			rc = -ERANGE; /* it must fit st_size (off_t) */
		if (rc)
			xml_fail(b, -EPROTO, "<Size> of %s is %s: '%s'",
				 entry_name(c).s,
				 rc == -EINVAL ? "not a number"
					       : "out of range",
				 quote(s, len).s);
	} else if (f == LF_MTIME) {
		if (len < sizeof(t)) {
			memcpy(t, s, len);
			t[len] = '\0';
			rc = s3_parse_time(t, &c->cur.mtime);
		}
		if (rc)
			xml_fail(b, -EPROTO,
				 "<LastModified> of %s is not a time: '%s'",
				 entry_name(c).s, quote(s, len).s);
	} else if (f == LF_ETAG) {
		/* Untrimmed, exactly as sent: the cache compares it with the
		 * ETag header of later GETs, quotes included. */
		if (!b->text_len)
			xml_fail(b, -EPROTO, "empty <ETag> in %s",
				 entry_name(c).s);
		else if (!(c->cur.etag = strndup(b->text, b->text_len)))
			xml_fail(b, -ENOMEM, "out of memory");
	}
}

static void list_root_field(struct list_ctx *c, enum list_field f)
{
	struct xml_base *b = &c->b;
	size_t len;
	const char *s = xml_text_trimmed(b, &len);

	if (f == LF_IS_TRUNCATED) {
		if (len == 4 && !memcmp(s, "true", 4))
			c->page.truncated = true;
		else if (len != 5 || memcmp(s, "false", 5))
			xml_fail(b, -EPROTO, "<IsTruncated> is '%s'",
				 quote(s, len).s);
	} else if (f == LF_NEXT_TOKEN) {
		/* Opaque: kept raw, the caller percent-encodes it to send. */
		c->page.next_token = strndup(b->text, b->text_len);
		if (!c->page.next_token)
			xml_fail(b, -ENOMEM, "out of memory");
	} else if (f == LF_ENCODING_TYPE) {
		/* NOTE(s3): the page, not the request, says whether keys are
		 * encoded: a server that ignores encoding-type=url (s3rver,
		 * doc/ceph-rgw.md) sends them as they are and no
		 * <EncodingType>. "url" is the only encoding S3 defines. */
		if (len == 3 && !memcmp(s, "url", 3))
			c->url_encoded = true;
		else
			xml_fail(b, -EPROTO,
				 "<EncodingType> is '%s', not 'url'",
				 quote(s, len).s);
	}
}

/* Moves a complete <Contents> into the page. */
static void list_entry_done(struct list_ctx *c)
{
	struct s3_list_page *p = &c->page;
	unsigned int missing = LF_ENTRY_BITS & ~c->seen;

	c->in_contents = false;
	if (missing) {
		xml_fail(&c->b, -EPROTO, "%s has no <%s>", entry_name(c).s,
			 list_field_names[__builtin_ctz(missing)]);
		return;
	}
	if (p->n_entries == c->entries_cap) {
		size_t cap = c->entries_cap ? 2 * c->entries_cap : 64;
		struct s3_list_entry *e;

		e = reallocarray(p->entries, cap, sizeof(*e));
		if (!e) {
			xml_fail(&c->b, -ENOMEM, "out of memory");
			return;
		}
		p->entries = e;
		c->entries_cap = cap;
	}
	p->entries[p->n_entries++] = c->cur;
	memset(&c->cur, 0, sizeof(c->cur));
}

static void XMLCALL list_end(void *ud, const XML_Char *qname)
{
	struct list_ctx *c = ud;

	(void)qname;
	if (c->b.failed)
		return;
	if (c->capture_cp) {
		c->b.leaf = NULL;
		c->capture_cp = false;
		list_common_prefix(c);
	} else if (c->in_common && c->b.depth == 2) {
		c->in_common = false;
	} else if (c->field != LF_NONE) {
		/* Captured leaves have no children, so this ends the leaf. */
		c->b.leaf = NULL;
		if (c->in_contents)
			list_entry_field(c, c->field);
		else
			list_root_field(c, c->field);
		c->field = LF_NONE;
	} else if (c->in_contents && c->b.depth == 2) {
		list_entry_done(c);
	}
	c->b.depth--;
}

static void list_entry_free(struct s3_list_entry *e)
{
	free(e->key);
	free(e->etag);
	memset(e, 0, sizeof(*e));
}

void s3_list_page_fini(struct s3_list_page *page)
{
	if (!page)
		return;
	for (size_t i = 0; i < page->n_entries; i++)
		list_entry_free(&page->entries[i]);
	free(page->entries);
	for (size_t i = 0; i < page->n_prefixes; i++)
		free(page->prefixes[i].prefix);
	free(page->prefixes);
	free(page->next_token);
	memset(page, 0, sizeof(*page));
}

int s3_list_parse(const char *body, size_t len, struct s3_list_page *out,
		  char *err, size_t err_len)
{
	struct list_ctx c = {0};
	int rc;

	memset(out, 0, sizeof(*out));
	if (err && err_len)
		err[0] = '\0';
	c.b.err = err;
	c.b.err_len = err_len;
	rc =
	    xml_init(&c.b, "ListObjectsV2", XML_TEXT_MAX, list_start, list_end);
	if (!rc)
		rc = xml_run(&c.b, body, len);
	if (!rc && c.page.truncated && !c.page.next_token) {
		xml_fail(&c.b, -EPROTO,
			 "<IsTruncated> is true but no "
			 "<NextContinuationToken>");
		rc = c.b.rc;
	}
	if (!rc && c.url_encoded) {
		list_decode_keys(&c);
		rc = c.b.rc;
	}
	list_entry_free(&c.cur);
	if (rc)
		s3_list_page_fini(&c.page);
	else
		*out = c.page;
	xml_fini(&c.b);
	return rc;
}

/* ---- <Error> documents ---- */

struct error_ctx {
	struct xml_base b; /* first: expat's user data is an error_ctx */
	int error_depth;   /* depth of <Error>: 1, or 2 when wrapped */
	char *field;	   /* out->code or out->message being captured */
	size_t field_size;
	struct s3_error_doc *out;
};

static void XMLCALL error_start(void *ud, const XML_Char *qname,
				const XML_Char **attrs)
{
	struct error_ctx *c = ud;
	const char *name = local_name(qname);

	(void)attrs;
	if (!xml_enter(&c->b, name))
		return;
	/* NOTE(s3): S3 sends a bare <Error>; some gateways wrap it in
	 * <ErrorResponse> like the query-protocol AWS services do. */
	if (c->b.depth == 1) {
		if (!strcmp(name, "Error"))
			c->error_depth = 1;
		else if (strcmp(name, "ErrorResponse"))
			xml_fail(&c->b, -EPROTO, "root is not <Error>");
		return;
	}
	if (c->b.depth == 2 && !c->error_depth && !strcmp(name, "Error"))
		c->error_depth = 2;
	if (!c->error_depth || c->b.depth != c->error_depth + 1)
		return;
	if (!strcmp(name, "Code")) {
		c->field = c->out->code;
		c->field_size = sizeof(c->out->code);
		xml_capture_begin(&c->b, "Code");
	} else if (!strcmp(name, "Message")) {
		c->field = c->out->message;
		c->field_size = sizeof(c->out->message);
		xml_capture_begin(&c->b, "Message");
	}
}

/* Copies the trimmed text into the field, cut to fit on a UTF-8 boundary
 * and with control characters made spaces: it ends up in one log line. */
static void error_store(struct error_ctx *c)
{
	size_t len;
	const char *s = xml_text_trimmed(&c->b, &len);

	if (len >= c->field_size) {
		len = c->field_size - 1;
		while (len && ((unsigned char)s[len] & 0xc0) == 0x80)
			len--;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		c->field[i] = ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
	}
	c->field[len] = '\0';
}

static void XMLCALL error_end(void *ud, const XML_Char *qname)
{
	struct error_ctx *c = ud;

	(void)qname;
	if (c->b.failed)
		return;
	if (c->field) {
		c->b.leaf = NULL;
		error_store(c);
		c->field = NULL;
	}
	c->b.depth--;
}

int s3_error_parse(const char *body, size_t len, struct s3_error_doc *out)
{
	struct error_ctx c = {.out = out};
	int rc;

	memset(out, 0, sizeof(*out));
	c.b.text_cut = true;
	rc = xml_init(&c.b, "error document", XML_ERROR_TEXT_MAX, error_start,
		      error_end);
	if (!rc)
		rc = xml_run(&c.b, body, len);
	if (!rc && !c.error_depth)
		rc = -EPROTO; /* <ErrorResponse> without <Error> */
	if (rc)
		memset(out, 0, sizeof(*out));
	xml_fini(&c.b);
	return rc;
}

/* ---- times and keys ---- */

/* Reads exactly @n digits at *@s and moves past them. */
static bool read_digits(const char **s, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++, (*s)++) {
		if (**s < '0' || **s > '9')
			return false;
		v = v * 10 + (**s - '0');
	}
	*out = v;
	return true;
}

static bool is_leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Leap days in the years 1 .. y-1 of the proleptic Gregorian calendar. */
static int64_t leap_days_before(int y)
{
	y--;
	return y / 4 - y / 100 + y / 400;
}

int s3_parse_time(const char *s, int64_t *out)
{
	static const int mdays[12] = {31, 28, 31, 30, 31, 30,
				      31, 31, 30, 31, 30, 31};
	static const int before[12] = {0,   31,	 59,  90,  120, 151,
				       181, 212, 243, 273, 304, 334};
	int y, mo, d, h, mi, sec;
	int64_t days;

	if (!s || !read_digits(&s, 4, &y) || *s++ != '-' ||
	    !read_digits(&s, 2, &mo) || *s++ != '-' ||
	    !read_digits(&s, 2, &d) || *s++ != 'T' || !read_digits(&s, 2, &h) ||
	    *s++ != ':' || !read_digits(&s, 2, &mi) || *s++ != ':' ||
	    !read_digits(&s, 2, &sec))
		return -EINVAL;
	if (*s == '.') {
		/* Whole seconds are all st_mtime and the cache use. */
		if (*++s < '0' || *s > '9')
			return -EINVAL;
		while (*s >= '0' && *s <= '9')
			s++;
	}
	if (*s++ != 'Z' || *s)
		return -EINVAL;
	/* sec 60 is a leap second; it reads as the next minute's 0, as
	 * timegm() would have it. */
	if (y < 1 || mo < 1 || mo > 12 || d < 1 ||
	    d > mdays[mo - 1] + (mo == 2 && is_leap(y)) || h > 23 || mi > 59 ||
	    sec > 60)
		return -EINVAL;
	days = 365 * (int64_t)(y - 1970) + leap_days_before(y) -
	       leap_days_before(1970) + before[mo - 1] +
	       (mo > 2 && is_leap(y)) + d - 1;
	*out = days * 86400 + h * 3600 + mi * 60 + sec;
	return 0;
}

static int hex_value(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* NOTE(s3): AWS encodes a space as '+' and a '+' as %2B; Ceph RGW sends
 * %20 and also encodes '/' (%2F). Both decode the same way here. */
char *s3_form_decode(const char *in, size_t len, size_t *out_len)
{
	char *out = malloc(len + 1);
	size_t n = 0;

	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < len; i++) {
		char ch = in[i];

		if (ch == '+') {
			ch = ' ';
		} else if (ch == '%') {
			int hi = len - i >= 3 ? hex_value(in[i + 1]) : -1;
			int lo = hi >= 0 ? hex_value(in[i + 2]) : -1;

			if (lo < 0)
				goto bad;
			ch = (char)(hi << 4 | lo);
			i += 2;
		}
		out[n++] = ch;
	}
	out[n] = '\0';
	if (out_len)
		*out_len = n;
	return out;
bad:
	free(out);
	errno = EINVAL;
	return NULL;
}
