/*
 * tests/fuzz/fuzz_creds.c - libFuzzer target for the credential formats
 * (prefetch/s3/creds_parse.c): credential_process JSON, the JSON of instance
 * metadata and the container endpoint, STS XML, ISO 8601 times.
 *
 * The first byte picks the parser. Checks the header's promises: on
 * success both keys are non-empty NUL-terminated strings; on failure
 * nothing is returned and the reason is one non-empty line.
 */
#include "prefetch/s3/creds.h"
#include "fuzz.h"

#include <errno.h>
#include <string.h>

static void check(int rc, const struct creds_value *v, const char *err,
		  size_t cap)
{
	if (rc == 0) {
		FUZZ_CHECK(v->access_key && v->access_key[0]);
		FUZZ_CHECK(v->secret_key && v->secret_key[0]);
		FUZZ_CHECK(!v->session_token || v->session_token[0]);
		return;
	}
	FUZZ_CHECK(rc == -EINVAL || rc == -EACCES || rc == -ENOMEM);
	FUZZ_CHECK(!v->access_key && !v->secret_key && !v->session_token);
	if (rc == -ENOMEM)
		return;
	/* Written (the 0x01 fill is gone: no control character passes the
	 * loop), one non-empty line. A server's text may start with any
	 * printable byte, so the fill must not be one. */
	FUZZ_CHECK(memchr(err, '\0', cap) != NULL);
	FUZZ_CHECK(err[0] != '\0');
	for (const char *p = err; *p; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct creds_value v;
	char err[256];
	char *s;
	int rc;

	if (size < 1)
		return 0;
	memset(err, 0x01, sizeof(err));
	err[sizeof(err) - 1] = '\0';
	switch (data[0] % 4) {
	case 0:
		rc = creds_parse_process_json((const char *)data + 1, size - 1,
					      &v, err, sizeof(err));
		break;
	case 1:
		rc = creds_parse_http_json((const char *)data + 1, size - 1, &v,
					   err, sizeof(err));
		break;
	case 2:
		rc = creds_parse_sts_xml((const char *)data + 1, size - 1, &v,
					 err, sizeof(err));
		break;
	default: {
		int64_t t;

		s = fuzz_strndup(data + 1, size - 1);
		rc = creds_parse_time(s, &t);
		FUZZ_CHECK(rc == 0 || rc == -EINVAL);
		free(s);
		return 0;
	}
	}
	check(rc, &v, err, sizeof(err));
	creds_value_fini(&v);
	return 0;
}
