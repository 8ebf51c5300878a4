/*
 * tests/fuzz/fuzz_hint.c - libFuzzer target for the hint parser
 * (fs/hint.c, doc/design.md 2.2).
 *
 * The input is a hint file. It is parsed under three mount points (none,
 * "/", "/mnt/data"), with a resolver that checks what the parser promises
 * to hand it: a normalized relative path (no empty, "." or ".."
 * component, no leading '/', no NUL, at most HINT_LINE_MAX bytes). Then
 * the report must add up: every id came from the resolver, the counters
 * never exceed the lines, and the first refused line is one printable,
 * NUL-terminated line (it goes into a log message).
 */
#include "fs/hint.h"
#include "fuzz.h"

#include <string.h>

/* The fake listing: ids below this; about one path in 8 is unknown. */
#define FAKE_IDS 1000u

struct resolver {
	size_t calls;
};

static uint32_t fnv1a(const char *s, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static uint32_t resolve(void *arg, const char *path, size_t len)
{
	struct resolver *r = arg;
	uint32_t h = fnv1a(path, len);
	size_t start = 0;

	r->calls++;
	FUZZ_CHECK(len > 0 && len <= HINT_LINE_MAX);
	FUZZ_CHECK(path[0] != '/');
	FUZZ_CHECK(memchr(path, '\0', len) == NULL);
	for (size_t i = 0; i <= len; i++) {
		if (i < len && path[i] != '/')
			continue;
		size_t clen = i - start;

		FUZZ_CHECK(clen > 0);
		FUZZ_CHECK(!(clen == 1 && path[start] == '.'));
		FUZZ_CHECK(!(clen == 2 && path[start] == '.' &&
			     path[start + 1] == '.'));
		start = i + 1;
	}
	return h % 8 == 0 ? HINT_NO_ID : h % FAKE_IDS;
}

static void parse_once(const char *text, size_t len, const char *mnt)
{
	struct resolver r = {0};
	struct hint_report rep;
	uint32_t *ids = NULL;
	size_t n = 99;
	int rc;

	rc = hint_parse(text, len, mnt, resolve, &r, &ids, &n, &rep);
	FUZZ_CHECK(rc == 0); /* only -ENOMEM may fail, and we do not run out */
	FUZZ_CHECK((n == 0) == (ids == NULL));
	FUZZ_CHECK(rep.entries == n);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(ids[i] < FAKE_IDS);
	/* An entry that normalizes to nothing ("./") is unknown unasked. */
	FUZZ_CHECK(r.calls >= rep.entries &&
		   r.calls <= rep.entries + rep.unknown);
	FUZZ_CHECK(rep.entries + rep.unknown + rep.too_long + rep.bad_utf8 +
		       rep.dotdot + rep.outside <=
		   rep.lines);
	FUZZ_CHECK(rep.epoch >= -1);
	FUZZ_CHECK(memchr(rep.first_bad, '\0', sizeof(rep.first_bad)));
	for (const char *p = rep.first_bad; *p; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
	/* A refused line is always reported. */
	if (rep.unknown + rep.too_long + rep.bad_utf8 + rep.dotdot +
	    rep.outside)
		FUZZ_CHECK(rep.first_bad[0] != '\0');
	free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Not NUL-terminated, as the daemon's buffer is not: ASan sees any
	 * read past the end. */
	char *text = malloc(size ? size : 1);

	FUZZ_CHECK(text != NULL);
	memcpy(text, data, size);
	parse_once(text, size, NULL);
	parse_once(text, size, "/");
	parse_once(text, size, "/mnt/data");
	free(text);
	return 0;
}
