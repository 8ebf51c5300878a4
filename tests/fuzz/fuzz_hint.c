/*
 * tests/fuzz/fuzz_hint.c - libFuzzer target for the hint parser
 * (fs/hint.c, doc/design.md 2.2).
 *
 * The input is a hint file. It is parsed under three mount points (none,
 * "/", "/mnt/data"), with a resolver that checks what the parser promises
 * to hand it: a normalized relative path (no empty, "." or ".."
 * component, no leading '/', no NUL, at most HINT_LINE_MAX bytes). Then
 * the report must add up: every id came from the resolver, every range
 * lies inside its file and is not empty, the counters never exceed the
 * lines, and the first refused line is one printable, NUL-terminated line
 * (it goes into a log message).
 */
#include "fs/hint.h"
#include "fuzz.h"

#include <string.h>

/* The fake listing: ids below this; about one path in 8 is unknown, one
 * in 8 a directory; a file's size is FAKE_SIZE() (0 to 64 KiB: offsets
 * past it are common in short inputs). */
#define FAKE_IDS      1000u
#define FAKE_SIZE(id) ((uint64_t)(id)*65u % 65537u)

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

static void resolve(void *arg, const char *path, size_t len,
		    struct hint_target *t)
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
	if (h % 8 == 0)
		return;
	if (h % 8 == 1) {
		t->is_dir = true;
		return;
	}
	t->id = h % FAKE_IDS;
	t->size = FAKE_SIZE(t->id);
}

static void parse_once(const char *text, size_t len, const char *mnt)
{
	struct resolver r = {0};
	struct hint_report rep;
	struct hint_entry *e = NULL;
	size_t n = 99;
	uint64_t refused;
	int rc;

	rc = hint_parse(text, len, mnt, resolve, &r, &e, &n, &rep);
	FUZZ_CHECK(rc == 0); /* only -ENOMEM may fail, and we do not run out */
	FUZZ_CHECK((n == 0) == (e == NULL));
	FUZZ_CHECK(rep.entries == n);
	for (size_t i = 0; i < n; i++) {
		uint64_t size = FAKE_SIZE(e[i].id);

		FUZZ_CHECK(e[i].id < FAKE_IDS);
		if (e[i].len == HINT_WHOLE) {
			FUZZ_CHECK(e[i].off == 0);
			continue;
		}
		FUZZ_CHECK(e[i].len > 0 && e[i].off < size &&
			   e[i].len <= size - e[i].off);
	}
	refused = rep.unknown + rep.too_long + rep.bad_utf8 + rep.dotdot +
		  rep.outside + rep.bad_range;
	/* An entry that normalizes to nothing ("./") is unknown unasked; a
	 * line with a tab may be asked twice (whole, then as a range). */
	FUZZ_CHECK(r.calls >= rep.entries &&
		   r.calls <= 2 * (rep.entries + rep.unknown + rep.bad_range));
	FUZZ_CHECK(rep.entries + refused <= rep.lines);
	FUZZ_CHECK(rep.epoch >= -1);
	FUZZ_CHECK(memchr(rep.first_bad, '\0', sizeof(rep.first_bad)));
	for (const char *p = rep.first_bad; *p; p++)
		FUZZ_CHECK((unsigned char)*p >= 0x20 && *p != 0x7f);
	/* A refused line is always reported. */
	if (refused)
		FUZZ_CHECK(rep.first_bad[0] != '\0');
	free(e);
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
