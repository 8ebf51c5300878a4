/*
 * tests/unit/test_s3_xml.c - the S3 XML parsers against real and hostile
 * bodies.
 *
 * Owns no production code. Samples come from $HINTFS_TESTDATA/s3xml, else
 * the tests/data/s3xml meson compiled in (see its SOURCE.md); a missing
 * folder is a failure. Hostile bodies are built here. The invariant checked
 * throughout: a parse either returns everything the document says or
 * -EPROTO with an empty result and a one-line reason, and never leaks or
 * touches memory it should not (run under ASan/UBSan).
 *
 * Exit 0 pass, 1 fail.
 */
#include "prefetch/s3/s3_xml.h"
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- test data ---- */

#ifndef HINTFS_TESTDATA_DIR
#define HINTFS_TESTDATA_DIR "tests/data"
#endif

static char s3xml_dir[4096];

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, f) == (size_t)n) {
			buf[n] = '\0';
			*len = (size_t)n;
		} else {
			free(buf);
			buf = NULL;
		}
	}
	fclose(f);
	return buf;
}

/* Reads a sample by its path under s3xml/; a missing one is a failure of
 * the current group (the folder itself was found). */
static char *load(const char *rel, size_t *len)
{
	char path[8192];
	char *buf;

	snprintf(path, sizeof(path), "%s/%s", s3xml_dir, rel);
	buf = read_file(path, len);
	CHECKF(buf != NULL, "cannot read %s: %s", path, strerror(errno));
	return buf;
}

/* ---- helpers for list pages ---- */

struct want {
	const char *key;
	uint64_t size;
	int64_t mtime;
	const char *etag;
};

static bool page_is_empty(const struct s3_list_page *p)
{
	return !p->entries && !p->n_entries && !p->truncated && !p->next_token;
}

static bool one_line(const char *s)
{
	return s[0] && !strchr(s, '\n') && !strchr(s, '\r');
}

static void check_page(const struct s3_list_page *p, const struct want *w,
		       size_t n, bool truncated, const char *token)
{
	CHECKF(p->n_entries == n, "n_entries %zu, want %zu", p->n_entries, n);
	CHECK(p->truncated == truncated);
	if (token)
		CHECKF(p->next_token && !strcmp(p->next_token, token),
		       "next_token '%s', want '%s'",
		       p->next_token ? p->next_token : "(null)", token);
	else
		CHECK(p->next_token == NULL);
	for (size_t i = 0; i < n && i < p->n_entries; i++) {
		const struct s3_list_entry *e = &p->entries[i];

		CHECKF(e->key_len == strlen(w[i].key) &&
			   !memcmp(e->key, w[i].key, e->key_len) &&
			   e->key[e->key_len] == '\0',
		       "entry %zu: key '%s' (%zu bytes), want '%s'", i, e->key,
		       e->key_len, w[i].key);
		CHECKF(e->size == w[i].size, "entry %zu: size %" PRIu64, i,
		       e->size);
		CHECKF(e->mtime == w[i].mtime, "entry %zu: mtime %" PRId64, i,
		       e->mtime);
		CHECKF(e->etag && !strcmp(e->etag, w[i].etag),
		       "entry %zu: etag %s", i, e->etag ? e->etag : "(null)");
	}
}

/* Parses @body, expecting success; returns the rc for chaining. */
static int parse_ok(const char *body, size_t len, struct s3_list_page *p)
{
	char err[256] = "unset";
	int rc = s3_list_parse(body, len, p, err, sizeof(err));

	CHECKF(rc == 0, "s3_list_parse: %d (%s)", rc, err);
	return rc;
}

/* Parses @body expecting -EPROTO, an empty page and a one-line reason
 * containing @reason_part. */
static void expect_reject(const char *body, size_t len, const char *reason_part)
{
	struct s3_list_page p;
	char err[256] = "";
	int rc;

	memset(&p, 0xa5, sizeof(p)); /* must be cleared even on failure */
	rc = s3_list_parse(body, len, &p, err, sizeof(err));
	CHECKF(rc == -EPROTO, "rc %d, want -EPROTO (err '%s')", rc, err);
	CHECK(page_is_empty(&p));
	CHECKF(one_line(err), "reason not one line: '%s'", err);
	if (reason_part)
		CHECKF(strstr(err, reason_part) != NULL,
		       "reason '%s' lacks '%s'", err, reason_part);
	if (rc == 0)
		s3_list_page_fini(&p);
}

static void expect_reject_str(const char *body, const char *reason_part)
{
	expect_reject(body, strlen(body), reason_part);
}

#define XML_DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define NS	 "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
#define MTIME	 "2024-01-15T10:00:00.000Z"
#define ETAG	 "\"0cc175b9c0f1b6a831c399e269772661\""
#define ETAG_X	 "&quot;0cc175b9c0f1b6a831c399e269772661&quot;"

/* A list page whose root holds @inner (malloc'd); with @url, saying
 * <EncodingType>url, as a server that honours encoding-type=url does. */
static char *list_doc(const char *inner, bool url)
{
	char *s;

	if (asprintf(&s,
		     XML_DECL "<ListBucketResult " NS "><Name>b</Name>"
			      "<KeyCount>1</KeyCount>%s"
			      "<IsTruncated>false</IsTruncated>%s"
			      "</ListBucketResult>",
		     url ? "<EncodingType>url</EncodingType>" : "", inner) < 0)
		abort();
	return s;
}

/* A list page with one <Contents> holding @key_xml and @size_xml. */
static char *entry_doc(const char *key_xml, const char *size_xml, bool url)
{
	char *inner, *s;

	if (asprintf(&inner,
		     "<Contents><Key>%s</Key><LastModified>" MTIME
		     "</LastModified><ETag>" ETAG_X "</ETag><Size>%s</Size>"
		     "<StorageClass>STANDARD</StorageClass></Contents>",
		     key_xml, size_xml) < 0)
		abort();
	s = list_doc(inner, url);
	free(inner);
	return s;
}

static void expect_entry_reject(const char *key_xml, const char *size_xml,
				bool url, const char *reason_part)
{
	char *doc = entry_doc(key_xml, size_xml, url);

	expect_reject_str(doc, reason_part);
	free(doc);
}

/* Parses a one-entry page and checks its key (of @key_len bytes) and
 * size. */
static void expect_entry(const char *key_xml, const char *size_xml, bool url,
			 const char *key, size_t key_len, uint64_t size)
{
	char *doc = entry_doc(key_xml, size_xml, url);
	struct s3_list_page p;

	if (!parse_ok(doc, strlen(doc), &p)) {
		CHECK(p.n_entries == 1);
		if (p.n_entries == 1) {
			CHECKF(p.entries[0].key_len == key_len &&
				   !memcmp(p.entries[0].key, key, key_len),
			       "key '%s', want '%s'", p.entries[0].key, key);
			CHECKF(p.entries[0].size == size,
			       "size %" PRIu64 ", want %" PRIu64,
			       p.entries[0].size, size);
		}
		s3_list_page_fini(&p);
	}
	free(doc);
}

/* ---- ListObjectsV2 samples ---- */

static void test_adobe_v2(void)
{
	static const struct want w[] = {
	    {"key0", 434234, 1255369830,
	     "\"fba9dede5f27731c9771645a39863328\""},
	    {"key1", 434234, 1255369830,
	     "\"fba9dede5f27731c9771645a39863328\""},
	};
	struct s3_list_page p;
	size_t len;
	char *body;

	check_group("adobe-s3mock/ListBucketResultV2 (comment before root, "
		    "Owner/Checksum* skipped)");
	body = load("adobe-s3mock/ListBucketResultV2Test_testSerialization.xml",
		    &len);
	/* Its <EncodingType>url comes after the <Contents>. */
	if (body && !parse_ok(body, len, &p)) {
		/* IsTruncated is false, yet the token is passed on as sent. */
		check_page(&p, w, 2, false, "nextContinuationToken");
		s3_list_page_fini(&p);
	}
	free(body);
	check_group_end();
}

static void test_adobe_v1(void)
{
	size_t len;
	char *body;

	check_group("adobe-s3mock/ListBucketResult (v1) rejected");
	body = load("adobe-s3mock/ListBucketResultTest_testSerialization.xml",
		    &len);
	if (body)
		expect_reject(body, len, "v1");
	free(body);
	check_group_end();
}

static void test_list_sample(const char *rel, const struct want *w, size_t n,
			     bool truncated, const char *token)
{
	struct s3_list_page p;
	size_t len;
	char *body;

	check_group(rel);
	body = load(rel, &len);
	if (body && !parse_ok(body, len, &p)) {
		check_page(&p, w, n, truncated, token);
		s3_list_page_fini(&p);
	}
	free(body);
	check_group_end();
}

/* <CommonPrefixes> of a delimiter listing: decoded like keys when the page
 * is url-encoded (RGW: %20, %2B, '/' kept; AWS: '+' for space), taken as
 * sent otherwise; the root's own <Prefix> is not one of them. */
static void test_common_prefixes(void)
{
	const char *url = XML_DECL
	    "<ListBucketResult " NS "><Prefix>top/</Prefix>"
	    "<EncodingType>url</EncodingType>"
	    "<CommonPrefixes><Prefix>top/a%20b%2Bc%25d/</Prefix>"
	    "</CommonPrefixes><CommonPrefixes><Prefix>top/run+books/"
	    "</Prefix></CommonPrefixes><Contents><Key>top%2Fz.txt</Key>"
	    "<LastModified>" MTIME "</LastModified><ETag>" ETAG_X
	    "</ETag><Size>1</Size></Contents></ListBucketResult>";
	const char *raw =
	    XML_DECL "<ListBucketResult " NS "><Prefix>p</Prefix>"
		     "<CommonPrefixes><Prefix>100%/</Prefix></CommonPrefixes>"
		     "</ListBucketResult>";
	struct s3_list_page p;

	check_group("list: <CommonPrefixes>");
	if (!parse_ok(url, strlen(url), &p)) {
		CHECK(p.n_prefixes == 2 && p.n_entries == 1);
		if (p.n_prefixes == 2) {
			CHECK(!strcmp(p.prefixes[0].prefix, "top/a b+c%d/"));
			CHECK(p.prefixes[0].len == 12);
			CHECK(!strcmp(p.prefixes[1].prefix, "top/run books/"));
		}
		s3_list_page_fini(&p);
		CHECK(p.prefixes == NULL && p.n_prefixes == 0);
	}
	if (!parse_ok(raw, strlen(raw), &p)) {
		CHECK(p.n_prefixes == 1 &&
		      !strcmp(p.prefixes[0].prefix, "100%/"));
		s3_list_page_fini(&p);
	}
	expect_reject_str(XML_DECL
			  "<ListBucketResult " NS "><EncodingType>url"
			  "</EncodingType><CommonPrefixes><Prefix>%G0/"
			  "</Prefix></CommonPrefixes></ListBucketResult>",
			  "<Prefix> '%G0/' has a bad %-escape");
	expect_reject_str(XML_DECL "<ListBucketResult " NS "><CommonPrefixes>"
				   "<Prefix><x/></Prefix></CommonPrefixes>"
				   "</ListBucketResult>",
			  "unexpected element");
	check_group_end();
}

static void test_constructed_lists(void)
{
	static const struct want empty[1];
	static const struct want url[] = {
	    {"a b.txt", 1, 1705312800, ETAG},
	    {"a+b.txt", 1, 1705312800, "\"92eb5ffee6ae2fec3ad71c777531578f\""},
	    {"100%.csv", 1, 1705312800, "\"4a8a08f09d37b73795649038408b5f33\""},
	    {"ctrl\x01"
	     "char.bin",
	     1, 1705312800, "\"8277e0910d750195b448797616e091ad\""},
	    {"caf\xc3\xa9&co<>.jpg", 1, 1705312800,
	     "\"e1671797c52e15f763380b45e841ec32\""},
	    {"line\rbreak.txt", 1, 1705312800,
	     "\"8fa14cdd754f91cc6554c9e71929cce7\""},
	};
	static const struct want escaped[] = {
	    {"caf\xc3\xa9&co<>\"'.jpg", 1, 1705312800,
	     "\"e1671797c52e15f763380b45e841ec32\""},
	    {"line\rbreak.txt", 1, 1705312800,
	     "\"8fa14cdd754f91cc6554c9e71929cce7\""},
	    {"a b+c.txt", 1, 1705312800, ETAG},
	};
	static const struct want leaf[] = {
	    {"imagenet/train/n01440764/", 0, 1705312799,
	     "\"d41d8cd98f00b204e9800998ecf8427e\""},
	    {"imagenet/train/n01440764/n01440764_10026.JPEG", 13697, 1705312802,
	     "\"f1b9dede5f27731c9771645a39863328\""},
	    {"imagenet/train/n01440764/n01440764_10027.JPEG", 108410,
	     1705312803, "\"0e3b5c9d2a1f47d7a6e0c7f2b5d1e9a4\""},
	};
	static const struct want page1[] = {
	    {"imagenet/train/LICENSE.txt", 0, 1705312800,
	     "\"d41d8cd98f00b204e9800998ecf8427e\""},
	};
	static const struct want page2[] = {
	    {"imagenet/train/manifest.csv", 20971520, 1705312801,
	     "\"9b2cf535f27731c974343645a3985328-3\""},
	};

	test_list_sample("constructed/list-v2-empty.xml", empty, 0, false,
			 NULL);
	test_list_sample("constructed/list-v2-encoding-url.xml", url, 6, false,
			 NULL);
	test_list_sample("constructed/list-v2-xml-escaped-no-encoding.xml",
			 escaped, 3, false, NULL);
	test_list_sample("constructed/list-v2-leaf-dir.xml", leaf, 3, false,
			 NULL);
	/* The token holds '/' and '=': it must come back undecoded. */
	test_list_sample("constructed/list-v2-page1-truncated.xml", page1, 1,
			 true, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	test_list_sample("constructed/list-v2-page2-final.xml", page2, 1, false,
			 NULL);
}

/* ---- error documents ---- */

/* Copies the text between @open and @close in @s, trimmed and cut like
 * s3_error_parse does; false when absent. Plain string handling, so it
 * checks the parser without sharing its logic. */
static bool between(const char *s, const char *open, const char *close,
		    char *out, size_t out_size)
{
	const char *a = strstr(s, open), *b;
	size_t n;

	out[0] = '\0';
	if (!a)
		return false;
	a += strlen(open);
	b = strstr(a, close);
	if (!b)
		return false;
	while (a < b && strchr(" \t\r\n", *a))
		a++;
	while (b > a && strchr(" \t\r\n", b[-1]))
		b--;
	n = (size_t)(b - a) < out_size - 1 ? (size_t)(b - a) : out_size - 1;
	memcpy(out, a, n);
	out[n] = '\0';
	return true;
}

static void check_error_doc(const char *body, size_t len, const char *code,
			    const char *message)
{
	struct s3_error_doc d;
	int rc;

	memset(&d, 'x', sizeof(d));
	rc = s3_error_parse(body, len, &d);
	if (!code) {
		CHECKF(rc == -EPROTO, "s3_error_parse: %d, want -EPROTO", rc);
		CHECK(d.code[0] == '\0' && d.message[0] == '\0');
		return;
	}
	CHECKF(rc == 0, "s3_error_parse: %d", rc);
	CHECKF(!strcmp(d.code, code), "code '%s', want '%s'", d.code, code);
	CHECKF(!strcmp(d.message, message), "message '%s', want '%s'",
	       d.message, message);
}

static int name_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int only_ext(const struct dirent *d, const char *ext)
{
	size_t n = strlen(d->d_name), e = strlen(ext);

	return n > e && !strcmp(d->d_name + n - e, ext);
}

static int only_xml(const struct dirent *d)
{
	return only_ext(d, ".xml");
}

static int only_json(const struct dirent *d)
{
	return only_ext(d, ".json");
}

static void test_constructed_errors(void)
{
	char dir[8192], rel[8192 + 512], name[512];
	struct dirent **ents;
	int n;

	snprintf(dir, sizeof(dir), "%s/constructed/errors", s3xml_dir);
	n = scandir(dir, &ents, only_xml, name_cmp);
	check_group("constructed/errors/ (folder)");
	CHECKF(n >= 10, "%d error samples in %s", n, dir);
	check_group_end();
	for (int i = 0; i < n; i++) {
		char message[256], *dot, *end;
		size_t len;
		char *body;
		long status;

		snprintf(name, sizeof(name), "%s", ents[i]->d_name);
		snprintf(rel, sizeof(rel), "constructed/errors/%s", name);
		free(ents[i]);
		check_group(rel);
		/* Code.STATUS.xml */
		dot = strchr(name, '.');
		status = dot ? strtol(dot + 1, &end, 10) : 0;
		CHECKF(dot && status >= 400 && status <= 599 &&
			   !strcmp(end, ".xml"),
		       "name %s is not Code.STATUS.xml", name);
		if (dot)
			*dot = '\0';
		body = load(rel, &len);
		if (body) {
			CHECK(between(body, "<Message>", "</Message>", message,
				      sizeof(message)));
			check_error_doc(body, len, name, message);
			expect_reject(body, len, "<Error>");
		}
		free(body);
		check_group_end();
	}
	free(ents);
}

static void test_other_errors(void)
{
	size_t len;
	char *body;

	check_group("adobe-s3mock/ErrorResponse");
	body =
	    load("adobe-s3mock/ErrorResponseTest_testSerialization.xml", &len);
	if (body) {
		check_error_doc(body, len, "code", "message");
		expect_reject(body, len, "root");
	}
	free(body);
	check_group_end();

	check_group("smithy S3OperationNoErrorWrappingResponse (no Message)");
	body = load("smithy-s3-protocol-tests/"
		    "S3OperationNoErrorWrappingResponse.status400.xml",
		    &len);
	if (body)
		check_error_doc(body, len, "NoSuchBucket", "");
	free(body);
	check_group_end();

	check_group("smithy GetBucketLocationUnwrappedOutput (not an error, "
		    "not a list)");
	body = load("smithy-s3-protocol-tests/"
		    "GetBucketLocationUnwrappedOutput.status200.xml",
		    &len);
	if (body) {
		check_error_doc(body, len, NULL, NULL);
		expect_reject(body, len, "LocationConstraint");
	}
	free(body);
	check_group_end();
}

/* Joins the strings of the "body" array of an aws-c-s3 mock fixture with
 * newlines (the server writes them one per line). Returns a malloc'd
 * string, "" when there is no body, NULL when the JSON is not understood.
 * Only the escapes these fixtures can hold are handled. */
static char *json_body(const char *json, size_t *out_len)
{
	const char *s = strstr(json, "\"body\"");
	char *out = malloc(strlen(json) + 1);
	size_t n = 0;
	bool first = true;

	if (!out)
		return NULL;
	*out_len = 0;
	out[0] = '\0';
	if (!s)
		return out;
	s += strlen("\"body\"");
	s += strspn(s, " \t\r\n");
	if (*s++ != ':')
		goto bad;
	s += strspn(s, " \t\r\n");
	if (*s++ != '[')
		goto bad;
	for (;;) {
		s += strspn(s, " \t\r\n,");
		if (*s == ']')
			break;
		if (*s++ != '"')
			goto bad;
		if (!first)
			out[n++] = '\n';
		first = false;
		while (*s != '"') {
			if (!*s)
				goto bad;
			if (*s != '\\') {
				out[n++] = *s++;
				continue;
			}
			s++;
			switch (*s++) {
			case '"':
				out[n++] = '"';
				break;
			case '\\':
				out[n++] = '\\';
				break;
			case '/':
				out[n++] = '/';
				break;
			case 'n':
				out[n++] = '\n';
				break;
			case 'r':
				out[n++] = '\r';
				break;
			case 't':
				out[n++] = '\t';
				break;
			default:
				goto bad;
			}
		}
		s++;
	}
	out[n] = '\0';
	*out_len = n;
	return out;
bad:
	free(out);
	return NULL;
}

static void test_mock_server_dir(const char *sub)
{
	/* Spot checks written out by hand, so the extraction below is not
	 * the only oracle. */
	static const struct {
		const char *file, *code, *message;
	} known[] = {
	    {"UploadPart_throttle.json", "SlowDown", ""},
	    {"get_object_error_part.json", "AccessDenied", "Access Denied"},
	    {"CompleteMultipartUpload_async_internal_error.json",
	     "InternalError",
	     "We encountered an internal error. Please try again."},
	    {"get_object_modified_failure.json", NULL, NULL},
	    {"default.json", NULL, NULL},
	};
	char dir[8192], rel[8192 + 512];
	struct dirent **ents;
	int n;

	snprintf(dir, sizeof(dir), "%s/aws-c-s3-mock-server/%s", s3xml_dir,
		 sub);
	n = scandir(dir, &ents, only_json, name_cmp);
	snprintf(rel, sizeof(rel), "aws-c-s3-mock-server/%s/ (folder)", sub);
	check_group(rel);
	CHECKF(n > 0, "no fixtures in %s", dir);
	check_group_end();
	for (int i = 0; i < n; i++) {
		char code[64], message[256];
		size_t len, body_len;
		char *json, *body;

		snprintf(rel, sizeof(rel), "aws-c-s3-mock-server/%s/%s", sub,
			 ents[i]->d_name);
		check_group(rel);
		json = load(rel, &len);
		body = json ? json_body(json, &body_len) : NULL;
		CHECKF(!json || body, "cannot find the body array");
		if (body && strstr(body, "<Error>")) {
			between(body, "<Code>", "</Code>", code, sizeof(code));
			between(body, "<Message>", "</Message>", message,
				sizeof(message));
			check_error_doc(body, body_len, code, message);
			if (strlen(message) == sizeof(message) - 1) {
				/* get_object_long_error: cut to fit */
				CHECK(!strncmp(message, "really long error ",
					       18));
			}
		} else if (body) {
			/* "", "bad_request", "<data-to-send>"... */
			check_error_doc(body, body_len, NULL, NULL);
		}
		for (size_t k = 0; body && k < sizeof(known) / sizeof(*known);
		     k++)
			if (!strcmp(known[k].file, ents[i]->d_name))
				check_error_doc(body, body_len, known[k].code,
						known[k].message);
		free(body);
		free(json);
		free(ents[i]);
		check_group_end();
	}
	free(ents);
}

static void test_long_error_cut(void)
{
	struct s3_error_doc d;
	size_t len, body_len;
	char *json, *body;

	check_group("get_object_long_error: <Message> cut to 255 bytes");
	json = load("aws-c-s3-mock-server/GetObject/get_object_long_error.json",
		    &len);
	body = json ? json_body(json, &body_len) : NULL;
	if (body) {
		CHECK(s3_error_parse(body, body_len, &d) == 0);
		CHECK(!strcmp(d.code, "NoSuchKey"));
		CHECK(strlen(d.message) == sizeof(d.message) - 1);
		CHECK(!strncmp(d.message, "really long error really", 24));
	}
	free(body);
	free(json);
	check_group_end();
}

/* ---- hostile and odd list bodies ---- */

static void test_not_a_list(void)
{
	check_group("list: empty body, HTML, text, wrong root");
	expect_reject(NULL, 0, "not well-formed");
	expect_reject("", 0, "not well-formed");
	expect_reject_str("   \n", "not well-formed");
	expect_reject_str(XML_DECL, "not well-formed");
	expect_reject_str("<html><head><title>502 Bad Gateway</title></head>"
			  "<body><h1>502 Bad Gateway</h1></body></html>",
			  "<html>");
	expect_reject_str("<!DOCTYPE html><html><body>oops</body></html>",
			  "DOCTYPE");
	expect_reject_str("bad_request", "not well-formed");
	expect_reject_str("<ListVersionsResult " NS "></ListVersionsResult>",
			  "ListVersionsResult");
	expect_reject_str("<Error><Code>NoSuchBucket</Code></Error>",
			  "<Error>");
	expect_reject_str("<ListBucketResult></ListBucketResult>junk",
			  "not well-formed");
	/* Not UTF-8: 0xff is no character. */
	expect_reject_str("<ListBucketResult><Name>\xff</Name>"
			  "</ListBucketResult>",
			  "not well-formed");
	check_group_end();
}

static void test_truncated(void)
{
	static const char *const good_keys[] = {"a/1.bin", "a/2.bin"};
	char *doc, *inner;
	size_t end;

	check_group("list: every truncation of a page is rejected");
	if (asprintf(&inner,
		     "<Contents><Key>%s</Key><LastModified>" MTIME
		     "</LastModified><ETag>" ETAG_X "</ETag><Size>7</Size>"
		     "</Contents><Contents><Key>%s</Key><LastModified>" MTIME
		     "</LastModified><ETag>" ETAG_X "</ETag><Size>8</Size>"
		     "</Contents>",
		     good_keys[0], good_keys[1]) < 0)
		abort();
	doc = list_doc(inner, true);
	free(inner);
	end = strlen(doc);
	for (size_t n = 0; n < end; n++) {
		struct s3_list_page p;
		char err[200];
		int rc = s3_list_parse(doc, n, &p, err, sizeof(err));

		if (rc != -EPROTO || !page_is_empty(&p) || !one_line(err)) {
			CHECKF(false, "prefix of %zu bytes: rc %d (%s)", n, rc,
			       err);
			if (!rc)
				s3_list_page_fini(&p);
			break;
		}
	}
	CHECK(end > 400); /* the loop above ran over a real page */
	{
		struct s3_list_page p;

		if (!parse_ok(doc, end, &p)) {
			CHECK(p.n_entries == 2);
			s3_list_page_fini(&p);
		}
	}
	free(doc);
	check_group_end();
}

static void test_size_values(void)
{
	check_group("list: <Size> negative, overflowing, not a number");
	expect_entry_reject("k", "-1", true,
			    "<Size> of key 'k' is not a number");
	expect_entry_reject("k", "+1", true, "not a number");
	expect_entry_reject("k", "12a", true, "not a number");
	expect_entry_reject("k", "0x10", true, "not a number");
	expect_entry_reject("k", "1e3", true, "not a number");
	expect_entry_reject("k", "1 2", true, "not a number");
	expect_entry_reject("k", "", true, "not a number");
	expect_entry_reject("k", "18446744073709551616", true, "out of range");
	expect_entry_reject("k", "99999999999999999999999999999999", true,
			    "out of range");
	/* Fits uint64_t but not st_size. */
	expect_entry_reject("k", "9223372036854775808", true, "out of range");
	expect_entry("k", "9223372036854775807", true, "k", 1,
		     9223372036854775807ull);
	expect_entry("k", "0", true, "k", 1, 0);
	expect_entry("k", "007", true, "k", 1, 7);
	expect_entry("k", "\n  42\n", true, "k", 1, 42);
	check_group_end();
}

static void test_key_escapes(void)
{
	check_group("list: %-escapes, NUL, Ceph RGW encoding");
	expect_entry_reject("bad%G1", "1", true, "bad %-escape");
	expect_entry_reject("bad%4", "1", true, "bad %-escape");
	expect_entry_reject("bad%", "1", true, "bad %-escape");
	expect_entry_reject("%%", "1", true, "bad %-escape");
	/* A decoded NUL is kept: the namespace skips the key, and one
	 * hostile key must not fail the whole listing. */
	expect_entry("nul%00byte", "1", true, "nul\0byte", 8, 1);
	/* On a page without <EncodingType> (a server that ignored
	 * encoding-type=url) these are just key bytes. */
	expect_entry("bad%G1", "1", false, "bad%G1", 6, 1);
	expect_entry("nul%00byte", "1", false, "nul%00byte", 10, 1);
	/* An encoded '%' followed by "00" is not a NUL. */
	expect_entry("%2500", "1", true, "%00", 3, 1);
	/* NOTE(s3): RGW sends %20 for space and %2F for '/'. */
	expect_entry("run%20books%2Fa%2bb.txt", "1", true, "run books/a+b.txt",
		     17, 1);
	expect_entry("%E2%82%AC+%e2%82%ac", "1", true,
		     "\xe2\x82\xac \xe2\x82\xac", 7, 1);
	/* The page says whether keys are encoded, wherever it says so:
	 * <EncodingType> after the keys still decodes them; anything but
	 * "url", or saying it twice, is not a page we can read. */
	{
		const char *tail =
		    XML_DECL "<ListBucketResult " NS "><Contents><Key>a%20b"
			     "</Key><LastModified>" MTIME "</LastModified>"
			     "<ETag>" ETAG_X "</ETag><Size>1</Size></Contents>"
			     "<EncodingType>url</EncodingType>"
			     "</ListBucketResult>";
		static const struct want w[] = {
		    {"a b", 1, 1705312800, ETAG},
		};
		struct s3_list_page p;

		if (!parse_ok(tail, strlen(tail), &p)) {
			check_page(&p, w, 1, false, NULL);
			s3_list_page_fini(&p);
		}
		expect_reject_str(
		    XML_DECL
		    "<ListBucketResult " NS ">"
		    "<EncodingType>base64</EncodingType></ListBucketResult>",
		    "<EncodingType> is 'base64'");
		expect_reject_str(
		    XML_DECL
		    "<ListBucketResult " NS ">"
		    "<EncodingType>url</EncodingType>"
		    "<EncodingType>url</EncodingType></ListBucketResult>",
		    "duplicate <EncodingType>");
	}
	/* XML cannot carry NUL, even as a reference. */
	expect_entry_reject("a&#0;b", "1", false, "not well-formed");
	expect_entry_reject("", "1", true, "empty <Key>");
	/* A key is bytes: leading and trailing spaces are kept. */
	expect_entry(" k ", "1", false, " k ", 3, 1);
	check_group_end();
}

static void test_huge(void)
{
	size_t big = 70000;
	char *key = malloc(big + 1), *doc, *inner;
	struct s3_list_page p;

	check_group("list: huge elements");
	memset(key, 'a', big);
	key[big] = '\0';
	expect_entry_reject(key, "1", true, "<Key> text longer than");
	/* 3 x 1,024: the longest %-encoded key AWS can send. */
	key[3072] = '\0';
	expect_entry(key, "1", true, key, 3072, 1);
	key[3072] = 'a';
	/* A huge element we do not read is not buffered, so allowed. */
	if (asprintf(&inner,
		     "<Contents><Key>k</Key><Owner><DisplayName>%s%s%s%s"
		     "</DisplayName></Owner><LastModified>" MTIME
		     "</LastModified><ETag>" ETAG_X "</ETag><Size>1</Size>"
		     "</Contents>",
		     key, key, key, key) < 0)
		abort();
	doc = list_doc(inner, true);
	if (!parse_ok(doc, strlen(doc), &p)) {
		CHECK(p.n_entries == 1);
		s3_list_page_fini(&p);
	}
	free(doc);
	free(inner);
	/* A token is text we keep, so it is bounded too. */
	if (asprintf(&inner,
		     "<NextContinuationToken>%s</NextContinuationToken>",
		     key) < 0)
		abort();
	doc = list_doc(inner, true);
	expect_reject_str(doc, "<NextContinuationToken> text longer");
	free(doc);
	free(inner);
	free(key);
	check_group_end();
}

/* Entity tricks, all refused at the DOCTYPE. */
static const char *const dtd_bodies[] = {
    /* billion laughs */
    "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
    "<!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
    "<!ENTITY lol2 \"&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;\">"
    "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">"
    "<!ENTITY lol4 \"&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;\">"
    "<!ENTITY lol5 \"&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;\">"
    "<!ENTITY lol6 \"&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;\">"
    "<!ENTITY lol7 \"&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;\">"
    "<!ENTITY lol8 \"&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;\">"
    "<!ENTITY lol9 \"&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;\">"
    "]><ListBucketResult><Contents><Key>&lol9;</Key></Contents>"
    "</ListBucketResult>",
    /* external entity */
    "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY x SYSTEM "
    "\"file:///etc/passwd\">]><ListBucketResult><Contents><Key>&x;</Key>"
    "</Contents></ListBucketResult>",
    /* parameter entity */
    "<!DOCTYPE r [<!ENTITY % p SYSTEM \"http://127.0.0.1/x.dtd\"> %p;]>"
    "<ListBucketResult/>",
    /* external DTD, no internal subset */
    "<!DOCTYPE ListBucketResult SYSTEM \"http://127.0.0.1/x.dtd\">"
    "<ListBucketResult/>",
    /* plain internal entity */
    "<!DOCTYPE Error [<!ENTITY c \"NoSuchKey\">]><Error><Code>&c;</Code>"
    "</Error>",
};

static void test_entities(void)
{
	check_group("list and error: DOCTYPE and entity declarations refused");
	for (size_t i = 0; i < sizeof(dtd_bodies) / sizeof(*dtd_bodies); i++) {
		expect_reject_str(dtd_bodies[i], "DOCTYPE");
		check_error_doc(dtd_bodies[i], strlen(dtd_bodies[i]), NULL,
				NULL);
	}
	/* Without a DTD, an entity reference is simply undefined. */
	expect_entry_reject("&lol9;", "1", false, "not well-formed");
	check_group_end();
}

static void test_missing_fields(void)
{
	static const struct {
		const char *inner, *reason;
	} cases[] = {
	    {"<Contents><LastModified>" MTIME "</LastModified><ETag>" ETAG_X
	     "</ETag><Size>1</Size></Contents>",
	     "<Contents> #1 has no <Key>"},
	    {"<Contents/>", "has no <Key>"},
	    {"<Contents><Key>k</Key><LastModified>" MTIME
	     "</LastModified><ETag>" ETAG_X "</ETag></Contents>",
	     "key 'k' has no <Size>"},
	    {"<Contents><Key>k</Key><ETag>" ETAG_X
	     "</ETag><Size>1</Size></Contents>",
	     "has no <LastModified>"},
	    {"<Contents><Key>k</Key><LastModified>" MTIME
	     "</LastModified><Size>1</Size></Contents>",
	     "has no <ETag>"},
	    {"<Contents><Key>k</Key><LastModified>" MTIME
	     "</LastModified><ETag></ETag><Size>1</Size></Contents>",
	     "empty <ETag>"},
	    {"<Contents><Key>k</Key><Key>j</Key><LastModified>" MTIME
	     "</LastModified><ETag>" ETAG_X "</ETag><Size>1</Size>"
	     "</Contents>",
	     "duplicate <Key>"},
	    {"<Contents><Key>a<b/>c</Key><LastModified>" MTIME
	     "</LastModified><ETag>" ETAG_X "</ETag><Size>1</Size>"
	     "</Contents>",
	     "unexpected element <b>"},
	    {"<Contents><Key>k</Key><LastModified>2024-01-15"
	     "</LastModified><ETag>" ETAG_X "</ETag><Size>1</Size>"
	     "</Contents>",
	     "<LastModified> of key 'k' is not a time"},
	    {"<Contents><Key>k</Key><LastModified>2024-02-30T00:00:00Z"
	     "</LastModified><ETag>" ETAG_X "</ETag><Size>1</Size>"
	     "</Contents>",
	     "is not a time"},
	    {"<IsTruncated>true</IsTruncated>", "duplicate <IsTruncated>"},
	};
	static const char *const roots[] = {
	    "<ListBucketResult><IsTruncated>yes</IsTruncated>"
	    "</ListBucketResult>",
	    "<ListBucketResult><IsTruncated>true</IsTruncated>"
	    "</ListBucketResult>",
	    "<ListBucketResult><Marker></Marker></ListBucketResult>",
	};
	static const char *const root_reasons[] = {
	    "<IsTruncated> is 'yes'",
	    "no <NextContinuationToken>",
	    "v1",
	};

	check_group("list: <Contents> missing or bad fields");
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char *doc = list_doc(cases[i].inner, true);

		expect_reject_str(doc, cases[i].reason);
		free(doc);
	}
	for (size_t i = 0; i < sizeof(roots) / sizeof(*roots); i++)
		expect_reject_str(roots[i], root_reasons[i]);
	check_group_end();
}

static void test_nesting(void)
{
	size_t levels = 100000;
	size_t cap = levels * 7 + 256;
	char *doc = malloc(cap);
	size_t n = 0;
	struct s3_list_page p;

	check_group("list and error: deep nesting");
	n += (size_t)sprintf(doc + n, "<ListBucketResult>");
	for (size_t i = 0; i < levels; i++)
		n += (size_t)sprintf(doc + n, "<a>");
	for (size_t i = 0; i < levels; i++)
		n += (size_t)sprintf(doc + n, "</a>");
	n += (size_t)sprintf(doc + n, "</ListBucketResult>");
	expect_reject(doc, n, "nested deeper than");
	memcpy(doc, "<Error><Code>", 13);
	check_error_doc(doc, n, NULL, NULL);
	/* 16 levels, the limit, are fine. */
	n = (size_t)sprintf(doc, "<ListBucketResult>");
	for (int i = 0; i < 15; i++)
		n += (size_t)sprintf(doc + n, "<a>");
	for (int i = 0; i < 15; i++)
		n += (size_t)sprintf(doc + n, "</a>");
	n += (size_t)sprintf(doc + n, "</ListBucketResult>");
	if (!parse_ok(doc, n, &p)) {
		CHECK(p.n_entries == 0);
		s3_list_page_fini(&p);
	}
	free(doc);
	check_group_end();
}

static void test_paths(void)
{
	/* Key-like elements away from ListBucketResult/Contents/Key must
	 * not be taken for a key. */
	static const char inner[] =
	    "<Key>root-level</Key>"
	    "<CommonPrefixes><Prefix>p/</Prefix><Contents><Key>evil</Key>"
	    "<Size>9</Size></Contents></CommonPrefixes>"
	    "<Contents><Owner><Key>owner</Key><ID>1</ID></Owner>"
	    "<Key>real</Key><Foo><Size>5</Size></Foo>"
	    "<LastModified>" MTIME "</LastModified><ETag>" ETAG_X
	    "</ETag><Size>3</Size><ChecksumAlgorithm>CRC32"
	    "</ChecksumAlgorithm><RestoreStatus><IsRestoreInProgress>false"
	    "</IsRestoreInProgress></RestoreStatus></Contents>"
	    "<Wrapper><IsTruncated>true</IsTruncated></Wrapper>";
	static const struct want w[] = {{"real", 3, 1705312800, ETAG}};
	char *doc = list_doc(inner, true);
	struct s3_list_page p;

	check_group("list: elements only at their S3 path");
	if (!parse_ok(doc, strlen(doc), &p)) {
		check_page(&p, w, 1, false, NULL);
		s3_list_page_fini(&p);
	}
	free(doc);
	check_group_end();
}

static void test_lenient(void)
{
	static const char *const docs[] = {
	    /* namespace prefix instead of a default namespace */
	    "<s3:ListBucketResult xmlns:s3=\"http://s3.amazonaws.com/doc/"
	    "2006-03-01/\"><s3:IsTruncated>true</s3:IsTruncated>"
	    "<s3:NextContinuationToken>t+%2F=</s3:NextContinuationToken>"
	    "<s3:Contents><s3:Key>k</s3:Key><s3:LastModified>" MTIME
	    "</s3:LastModified><s3:ETag>" ETAG_X "</s3:ETag><s3:Size>1"
	    "</s3:Size></s3:Contents></s3:ListBucketResult>",
	    /* BOM, comments, a PI and whitespace before the root */
	    "\xef\xbb\xbf" XML_DECL "<!-- license -->\n<?pi data?>\n  "
	    "<ListBucketResult><IsTruncated> true\n</IsTruncated>"
	    "<NextContinuationToken>t+%2F=</NextContinuationToken>"
	    "<Contents><Key>k</Key><LastModified>"
	    "2024-01-15T10:00:00.123456789Z</LastModified><ETag>" ETAG
	    "</ETag><Size>1</Size></Contents>"
	    "</ListBucketResult>\n<!-- trailing -->\n",
	};
	static const struct want w[] = {{"k", 1, 1705312800, ETAG}};

	check_group("list: namespace prefixes, comments, BOM, raw token");
	for (size_t i = 0; i < sizeof(docs) / sizeof(*docs); i++) {
		struct s3_list_page p;

		if (!parse_ok(docs[i], strlen(docs[i]), &p)) {
			check_page(&p, w, 1, true, "t+%2F=");
			s3_list_page_fini(&p);
		}
	}
	check_group_end();
}

static void test_many_entries(void)
{
	size_t n = 2500, cap = n * 200 + 512, len = 0;
	char *doc = malloc(cap);
	struct s3_list_page p;

	check_group("list: 2,500 entries keep their order");
	len +=
	    (size_t)snprintf(doc + len, cap - len, "<ListBucketResult " NS ">");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(doc + len, cap - len,
					"<Contents><Key>d/%05zu</Key>"
					"<LastModified>" MTIME "</LastModified>"
					"<ETag>\"%zx\"</ETag><Size>%zu</Size>"
					"</Contents>",
					i, i, i * 3);
	len += (size_t)snprintf(doc + len, cap - len, "</ListBucketResult>");
	if (!parse_ok(doc, len, &p)) {
		size_t i;

		CHECK(p.n_entries == n);
		for (i = 0; i < p.n_entries; i++) {
			char key[32], etag[32];

			snprintf(key, sizeof(key), "d/%05zu", i);
			snprintf(etag, sizeof(etag), "\"%zx\"", i);
			if (strcmp(p.entries[i].key, key) ||
			    p.entries[i].size != i * 3 ||
			    strcmp(p.entries[i].etag, etag))
				break;
		}
		CHECKF(i == p.n_entries, "entry %zu is '%s'", i,
		       i < p.n_entries ? p.entries[i].key : "");
		s3_list_page_fini(&p);
	}
	free(doc);
	check_group_end();
}

static void test_err_buffer(void)
{
	static const char bad[] = "<ListBucketResult><Contents/>"
				  "</ListBucketResult>";
	struct s3_list_page p, zero;
	char err[8];

	check_group("list: small or missing reason buffer, page_fini");
	memset(err, 'x', sizeof(err));
	CHECK(s3_list_parse(bad, strlen(bad), &p, err, sizeof(err)) == -EPROTO);
	CHECK(memchr(err, '\0', sizeof(err)) != NULL);
	CHECK(!strncmp(err, "ListObj", 7));
	err[0] = 'x';
	CHECK(s3_list_parse(bad, strlen(bad), &p, err, 1) == -EPROTO);
	CHECK(err[0] == '\0');
	CHECK(s3_list_parse(bad, strlen(bad), &p, NULL, 0) == -EPROTO);
	CHECK(page_is_empty(&p));
	/* fini on a zeroed page, on NULL, and twice */
	memset(&zero, 0, sizeof(zero));
	s3_list_page_fini(&zero);
	s3_list_page_fini(NULL);
	CHECK(page_is_empty(&zero));
	check_group_end();
}

/* ---- hostile and odd error bodies ---- */

static void test_error_edge(void)
{
	char body[1024], want[256];
	struct s3_error_doc d;

	check_group("error: empty, HTML, truncated, wrapped, cut, controls");
	check_error_doc(NULL, 0, NULL, NULL);
	check_error_doc("", 0, NULL, NULL);
	check_error_doc("<html><body><h1>502 Bad Gateway</h1></body></html>",
			51, NULL, NULL);
	snprintf(body, sizeof(body), "<Error><Code>NoSuchKey</Code><Mess");
	check_error_doc(body, strlen(body), NULL, NULL);
	snprintf(body, sizeof(body), "precondition failed");
	check_error_doc(body, strlen(body), NULL, NULL);
	snprintf(body, sizeof(body),
		 "<ErrorResponse><Error><Code>Throttling"
		 "</Code><Message>Rate exceeded</Message></Error>"
		 "</ErrorResponse>");
	check_error_doc(body, strlen(body), "Throttling", "Rate exceeded");
	snprintf(body, sizeof(body),
		 "<ErrorResponse><Code>X</Code>"
		 "</ErrorResponse>");
	check_error_doc(body, strlen(body), NULL, NULL);
	/* Only the <Code> directly under <Error> counts. */
	snprintf(body, sizeof(body),
		 "<Error xmlns=\"urn:x\"><Details><Code>"
		 "Inner</Code></Details><x:Code xmlns:x=\"urn:x\">Outer"
		 "</x:Code></Error>");
	check_error_doc(body, strlen(body), "Outer", "");
	/* Pretty-printing trimmed; tab, LF and CR become spaces. */
	snprintf(body, sizeof(body),
		 "<Error>\n  <Code>\n    SlowDown\n  "
		 "</Code>\n  <Message>a\tb\nc&#13;d</Message></Error>");
	check_error_doc(body, strlen(body), "SlowDown", "a b c d");
	/* A code longer than 63 bytes is cut. */
	snprintf(body, sizeof(body), "<Error><Code>%070d</Code></Error>", 0);
	memset(want, '0', 63);
	want[63] = '\0';
	check_error_doc(body, strlen(body), want, "");
	/* A cut never splits a UTF-8 character: 254 bytes + a 2-byte one. */
	memset(want, 'x', 254);
	want[254] = '\0';
	snprintf(body, sizeof(body),
		 "<Error><Code>C</Code><Message>%s\xc3\xa9"
		 "</Message></Error>",
		 want);
	check_error_doc(body, strlen(body), "C", want);
	/* Comment before the root, as in adobe's samples; no Code. */
	snprintf(body, sizeof(body),
		 "<!-- c --><Error><Message>m</Message>"
		 "</Error>");
	check_error_doc(body, strlen(body), "", "m");
	memset(&d, 'x', sizeof(d));
	CHECK(s3_error_parse("<Error></Error>", 15, &d) == 0);
	CHECK(!d.code[0] && !d.message[0]);
	check_group_end();
}

/* ---- s3_parse_time and s3_form_decode ---- */

static void test_parse_time(void)
{
	static const struct {
		const char *s;
		int64_t t;
	} good[] = {
	    {"2009-10-12T17:50:30.000Z", 1255369830},
	    {"2009-10-12T17:50:30Z", 1255369830},
	    {"2009-10-12T17:50:30.9Z", 1255369830},
	    {"1970-01-01T00:00:00Z", 0},
	    {"1969-12-31T23:59:59.000Z", -1},
	    {"2000-02-29T00:00:00Z", 951782400},
	    {"2024-02-29T12:00:00.5Z", 1709208000},
	    {"2038-01-19T03:14:08Z", 2147483648LL},
	    {"9999-12-31T23:59:59Z", 253402300799LL},
	    {"2016-12-31T23:59:60Z", 1483228800},
	};
	static const char *const bad[] = {
	    "",
	    "2009-10-12",
	    "2009-10-12T17:50:30",
	    "2009-10-12T17:50:30.Z",
	    "2009-10-12T17:50:30.000",
	    "2009-10-12 17:50:30Z",
	    "2009-10-12T17:50:30.000Z ",
	    " 2009-10-12T17:50:30Z",
	    "2009-10-12T17:50:30+00:00",
	    "2009-13-01T00:00:00Z",
	    "2009-00-01T00:00:00Z",
	    "2009-10-32T00:00:00Z",
	    "2009-10-00T00:00:00Z",
	    "2023-02-29T00:00:00Z",
	    "2100-02-29T00:00:00Z",
	    "2009-10-12T24:00:00Z",
	    "2009-10-12T17:60:00Z",
	    "2009-10-12T17:50:61Z",
	    "0000-01-01T00:00:00Z",
	    "+009-10-12T17:50:30Z",
	    "2009-1-12T17:50:30Z",
	    "2009-10-12t17:50:30z",
	    "2009-10-12T17:50:30.000ZZ",
	    "20091012T175030Z",
	};
	int64_t t;
	int mismatches = 0;

	check_group("s3_parse_time");
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		t = 42;
		CHECKF(s3_parse_time(good[i].s, &t) == 0 && t == good[i].t,
		       "'%s' -> %" PRId64 ", want %" PRId64, good[i].s, t,
		       good[i].t);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		t = 42;
		CHECKF(s3_parse_time(bad[i], &t) == -EINVAL && t == 42,
		       "'%s' accepted", bad[i]);
	}
	CHECK(s3_parse_time(NULL, &t) == -EINVAL);
	/* Every day from 1900 to 2400 against glibc's timegm(). */
	for (int64_t day = -25567; day < 157000 && mismatches < 5; day++) {
		time_t when = (time_t)(day * 86400 + 45296);
		struct tm tm;
		char s[64];

		gmtime_r(&when, &tm);
		strftime(s, sizeof(s), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
		if (s3_parse_time(s, &t) || t != (int64_t)when) {
			mismatches++;
			CHECKF(false, "'%s' -> %" PRId64 ", want %" PRId64, s,
			       t, (int64_t)when);
		}
	}
	CHECK(mismatches == 0);
	check_group_end();
}

static void test_form_decode(void)
{
	static const struct {
		const char *in, *out;
		size_t out_len;
	} good[] = {
	    {"a+b", "a b", 3},
	    {"a%2Bb", "a+b", 3},
	    {"a%2bb", "a+b", 3},
	    {"100%25", "100%", 4},
	    {"run%20books%2F", "run books/", 10},
	    {"%ED%95%9C%EA%B8%80/", "\xed\x95\x9c\xea\xb8\x80/", 7},
	    {"%01%0D%7f%FF", "\x01\r\x7f\xff", 4},
	    {"", "", 0},
	    {"plain/key.txt", "plain/key.txt", 13},
	    {"a%00b", "a\0b", 3},
	};
	static const char *const bad[] = {
	    "%", "%4", "a%", "%G0", "%0G", "%%41", "% 1", "%-1", "%+1",
	};
	size_t n;
	char *s;

	check_group("s3_form_decode");
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		n = 99;
		s = s3_form_decode(good[i].in, strlen(good[i].in), &n);
		CHECKF(s && n == good[i].out_len &&
			   !memcmp(s, good[i].out, n) && s[n] == '\0',
		       "'%s' -> '%s'", good[i].in, s ? s : "(null)");
		free(s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		errno = 0;
		s = s3_form_decode(bad[i], strlen(bad[i]), &n);
		CHECKF(!s && errno == EINVAL, "'%s' accepted", bad[i]);
		free(s);
	}
	/* @len is what counts, not a NUL: a NUL is carried through, and a
	 * shorter @len stops before an escape. */
	s = s3_form_decode("a\0b", 3, &n);
	CHECK(s && n == 3 && !memcmp(s, "a\0b", 4));
	free(s);
	s = s3_form_decode("ab%41", 2, &n);
	CHECK(s && n == 2 && !strcmp(s, "ab"));
	free(s);
	s = s3_form_decode("ab%41", 4, &n);
	CHECK(!s && errno == EINVAL);
	s = s3_form_decode("x+y", 3, NULL);
	CHECK(s && !strcmp(s, "x y"));
	free(s);
	check_group_end();
}

int main(void)
{
	const char *root = getenv("HINTFS_TESTDATA");
	DIR *d;

	if (!root || !*root)
		root = HINTFS_TESTDATA_DIR;
	snprintf(s3xml_dir, sizeof(s3xml_dir), "%s/s3xml", root);
	d = opendir(s3xml_dir);
	if (!d) {
		/* The samples are part of the source tree: without them
		 * half of this test would not run, which must not pass. */
		printf("FAIL s3xml samples: %s: %s (they are in tests/data; "
		       "$HINTFS_TESTDATA names another folder)\n",
		       s3xml_dir, strerror(errno));
		return 1;
	}
	closedir(d);

	test_adobe_v2();
	test_adobe_v1();
	test_constructed_lists();
	test_constructed_errors();
	test_other_errors();
	test_mock_server_dir("GetObject");
	test_mock_server_dir("errors");
	test_long_error_cut();
	test_not_a_list();
	test_common_prefixes();
	test_truncated();
	test_size_values();
	test_key_escapes();
	test_huge();
	test_entities();
	test_missing_fields();
	test_nesting();
	test_paths();
	test_lenient();
	test_many_entries();
	test_err_buffer();
	test_error_edge();
	test_parse_time();
	test_form_decode();

	return check_done();
}
