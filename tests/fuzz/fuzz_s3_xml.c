/*
 * tests/fuzz/fuzz_s3_xml.c - libFuzzer target for the S3 XML parsers
 * (prefetch/s3/s3_xml.c): ListObjectsV2 pages, with and without
 * encoding-type=url, error documents, the time and form decoders.
 *
 * Checks the header's promises on every input: a page is filled whole or
 * left empty with a one-line reason; every entry has a NUL-terminated key
 * of key_len bytes and an ETag; error fields are NUL-terminated and free
 * of control characters (they end up in log lines).
 */
#include "prefetch/s3/s3_xml.h"
#include "fuzz.h"

#include <errno.h>
#include <string.h>

static void check_one_line(const char *s, size_t cap)
{
	FUZZ_CHECK(memchr(s, '\0', cap) != NULL);
	FUZZ_CHECK(strchr(s, '\n') == NULL && strchr(s, '\r') == NULL);
}

static void list_once(const char *body, size_t len)
{
	/* Keys are decoded only on a page that says <EncodingType>url. */
	bool url = memmem(body, len, "EncodingType", 12) != NULL;
	struct s3_list_page page;
	char err[256];
	int rc;

	memset(&page, 0xa5, sizeof(page)); /* the parser must set it all */
	memset(err, 'x', sizeof(err));
	err[sizeof(err) - 1] = '\0';
	rc = s3_list_parse(body, len, &page, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EPROTO || rc == -ENOMEM);
	if (rc) {
		FUZZ_CHECK(page.entries == NULL && page.n_entries == 0);
		FUZZ_CHECK(page.next_token == NULL && !page.truncated);
		check_one_line(err, sizeof(err));
		FUZZ_CHECK(err[0] != '\0' && err[0] != 'x');
		return;
	}
	FUZZ_CHECK((page.n_entries == 0) == (page.entries == NULL) ||
		   page.n_entries == 0);
	for (size_t i = 0; i < page.n_entries; i++) {
		const struct s3_list_entry *e = &page.entries[i];

		FUZZ_CHECK(e->key != NULL && e->etag != NULL);
		FUZZ_CHECK(e->key[e->key_len] == '\0');
		/* Without url encoding a key comes from XML text: no NUL. */
		if (!url)
			FUZZ_CHECK(strlen(e->key) == e->key_len);
		(void)strlen(e->etag);
	}
	if (page.next_token)
		(void)strlen(page.next_token);
	s3_list_page_fini(&page);
	FUZZ_CHECK(page.entries == NULL && page.n_entries == 0);
	s3_list_page_fini(&page); /* a zeroed page is accepted */
}

static void error_once(const char *body, size_t len)
{
	struct s3_error_doc doc;
	int rc;

	memset(&doc, 0xa5, sizeof(doc));
	rc = s3_error_parse(body, len, &doc);
	FUZZ_CHECK(rc == 0 || rc == -EPROTO || rc == -ENOMEM);
	check_one_line(doc.code, sizeof(doc.code));
	check_one_line(doc.message, sizeof(doc.message));
	if (rc) {
		FUZZ_CHECK(doc.code[0] == '\0' && doc.message[0] == '\0');
		return;
	}
	for (const char *p = doc.code; *p; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
	for (const char *p = doc.message; *p; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
}

static void decoders(const char *body, size_t len)
{
	size_t n = len < 64 ? len : 64, out_len = 0;
	char *s = fuzz_strndup(body, n), *d;
	int64_t t;

	if (s3_parse_time(s, &t) == 0)
		FUZZ_CHECK(t > -62167219200LL - 86400 &&
			   t < 253402300800LL + 86400);
	free(s);
	d = s3_form_decode(body, len, &out_len);
	if (d) {
		FUZZ_CHECK(out_len <= len);
		FUZZ_CHECK(d[out_len] == '\0');
		free(d);
	} else {
		FUZZ_CHECK(errno == EINVAL || errno == ENOMEM);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* An exact-size copy: no terminator for the parser to lean on. */
	char *body = malloc(size ? size : 1);

	FUZZ_CHECK(body != NULL);
	memcpy(body, data, size);
	list_once(body, size);
	error_once(body, size);
	decoders(body, size);
	free(body);
	return 0;
}
