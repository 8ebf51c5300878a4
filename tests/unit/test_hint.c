/*
 * tests/unit/test_hint.c - the hint format of doc/design.md 2.2: entries in
 * order with duplicates, comments and blank lines, the epoch header,
 * absolute paths under the mount point, and every bad line counted rather
 * than fatal.
 */
#include "fs/hint.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static const char *const files[] = {
    "cat/1.jpg", "cat/2.jpg", "dog/1.jpg", "a b/c+d.jpg", "café/é.jpg",
};

static uint32_t resolve(void *arg, const char *path, size_t len)
{
	int *calls = arg;

	(*calls)++;
	for (uint32_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (strlen(files[i]) == len && !memcmp(files[i], path, len))
			return i;
	return HINT_NO_ID;
}

static void test_good(void)
{
	static const char text[] =
	    "#hintfs v1 epoch=3\n"
	    "cat/2.jpg\n"
	    "\n"
	    "# a comment\n"
	    "dog/1.jpg\r\n"	    /* CRLF */
	    "/mnt/data/cat/1.jpg\n" /* absolute under the mount */
	    "./a b/c+d.jpg\n"	    /* "." and spaces */
	    "cat//2.jpg\n"	    /* empty component, duplicate */
	    "café/é.jpg";	    /* no final newline */
	struct hint_report rep;
	uint32_t *ids;
	size_t n;
	int calls = 0;

	CHECK(hint_parse(text, strlen(text), "/mnt/data/", resolve, &calls,
			 &ids, &n, &rep) == 0);
	CHECK(n == 6 && rep.entries == 6);
	static const uint32_t want[] = {1, 2, 0, 3, 1, 4};
	for (size_t i = 0; i < 6 && i < n; i++)
		CHECK(ids[i] == want[i]);
	CHECK(rep.epoch == 3 && !rep.replace);
	CHECK(rep.unknown == 0 && rep.bad_utf8 == 0 && rep.dotdot == 0);
	CHECK(rep.first_bad[0] == '\0');
	free(ids);
}

static void test_bad(void)
{
	char *text = malloc(8192);
	struct hint_report rep;
	uint32_t *ids;
	size_t n, len = 0;
	int calls = 0;

	if (!text) {
		CHECK(text != NULL);
		return;
	}
	len +=
	    (size_t)sprintf(text + len, "epoch=1 not a header\n"); /* unknown */
	len += (size_t)sprintf(text + len, "cat/1.jpg\n");
	len += (size_t)sprintf(text + len, "../etc/passwd\n");	  /* dotdot */
	len += (size_t)sprintf(text + len, "cat/../cat/1.jpg\n"); /* dotdot */
	len +=
	    (size_t)sprintf(text + len, "/elsewhere/cat/1.jpg\n"); /* outside */
	len += (size_t)sprintf(text + len, "/mnt/database/x\n");   /* outside */
	len += (size_t)sprintf(text + len, "bad\xff\xfe utf8\n"); /* bad_utf8 */
	len += (size_t)sprintf(text + len, "over\xc0\xaflong\n"); /* bad_utf8 */
	len += (size_t)sprintf(text + len,
			       "surr\xed\xa0\x80gate\n"); /* bad_utf8 */
	memset(text + len, 'x', 5000);			  /* too long */
	len += 5000;
	text[len++] = '\n';
	len += (size_t)sprintf(text + len, "nul");
	text[len++] = '\0';
	len += (size_t)sprintf(text + len, "byte\n"); /* bad_utf8 */
	len +=
	    (size_t)sprintf(text + len, "/mnt/data\n"); /* the root: unknown */
	len += (size_t)sprintf(text + len, "dog/1.jpg\n");

	CHECK(hint_parse(text, len, "/mnt/data", resolve, &calls, &ids, &n,
			 &rep) == 0);
	CHECK(n == 2 && ids && ids[0] == 0 && ids[1] == 2);
	CHECK(rep.entries == 2);
	CHECK(rep.unknown == 2);
	CHECK(rep.dotdot == 2);
	CHECK(rep.outside == 2);
	CHECK(rep.bad_utf8 == 4);
	CHECK(rep.too_long == 1);
	CHECK(rep.epoch == -1);
	CHECK(strstr(rep.first_bad, "not in the listing") != NULL);
	free(ids);

	/* The header may ask to replace the queue. */
	CHECK(hint_parse("#hintfs v1 replace epoch=7\ncat/1.jpg\n", 37, NULL,
			 resolve, &calls, &ids, &n, &rep) == 0);
	CHECK(rep.replace && rep.epoch == 7 && n == 1);
	free(ids);
	CHECK(hint_parse("#hintfs v1 replacement\n", 23, NULL, resolve, &calls,
			 &ids, &n, &rep) == 0);
	CHECK(!rep.replace && n == 0);

	/*
	 * A stream name (hintfs-run, HintedSampler): the longest header they
	 * write (84 bytes: a 19-digit epoch, a 32-character stream, replace)
	 * keeps all three.
	 */
	static const char streamed[] =
	    "#hintfs v1 epoch=9223372036854775807 "
	    "stream=rank-0123456789.abcdefghij_klmno replace\ncat/1.jpg\n";
	CHECK(hint_parse(streamed, strlen(streamed), NULL, resolve, &calls,
			 &ids, &n, &rep) == 0);
	CHECK(rep.replace && rep.epoch == INT64_MAX && n == 1);
	CHECK(!strcmp(rep.stream, "rank-0123456789.abcdefghij_klmno"));
	free(ids);
	/* No name, a bad name or a long one: no stream (the writer's). */
	static const char *const nameless[] = {
	    "#hintfs v1 epoch=1\n",
	    "#hintfs v1 stream=\n",
	    "#hintfs v1 stream=a/b\n",
	    "#hintfs v1 stream=r\xc3\xa9\n",
	    "#hintfs v1 stream=rank-0123456789.abcdefghij_klmnop\n",
	    "#hintfs v2 stream=rank1\n",
	};
	for (size_t k = 0; k < sizeof(nameless) / sizeof(*nameless); k++) {
		CHECK(hint_parse(nameless[k], strlen(nameless[k]), NULL,
				 resolve, &calls, &ids, &n, &rep) == 0);
		CHECK(rep.stream[0] == '\0');
		free(ids);
	}
	CHECK(hint_parse("#hintfs v1 replace stream=rank7 epoch=2\n", 40, NULL,
			 resolve, &calls, &ids, &n, &rep) == 0);
	CHECK(!strcmp(rep.stream, "rank7") && rep.epoch == 2 && rep.replace);
	free(ids);

	/* Nothing at all: no ids, no error. */
	CHECK(hint_parse("", 0, NULL, resolve, &calls, &ids, &n, &rep) == 0);
	CHECK(n == 0 && ids == NULL && rep.lines == 0);
	/* Without a mount point every absolute path is outside. */
	CHECK(hint_parse("/cat/1.jpg\n", 11, NULL, resolve, &calls, &ids, &n,
			 &rep) == 0);
	CHECK(n == 0 && rep.outside == 1);
	free(text);
}

/* A large hint keeps its order and length. */
static void test_large(void)
{
	size_t cap = 200000 * 12, len = 0;
	char *text = malloc(cap);
	struct hint_report rep;
	uint32_t *ids;
	size_t n;
	int calls = 0, wrong = 0;

	if (!text) {
		CHECK(text != NULL);
		return;
	}
	for (int i = 0; i < 200000; i++)
		len += (size_t)sprintf(text + len, "%s\n", files[i % 5]);
	CHECK(hint_parse(text, len, NULL, resolve, &calls, &ids, &n, &rep) ==
	      0);
	CHECK(n == 200000);
	for (size_t i = 0; i < n; i++)
		wrong += ids[i] != i % 5;
	CHECK(wrong == 0);
	free(ids);
	free(text);
}

int main(void)
{
	test_good();
	test_bad();
	test_large();
	return check_done();
}
