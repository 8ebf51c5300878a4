/*
 * tests/unit/test_hint.c - the hint format of doc/design.md 2.2: entries in
 * order with duplicates, comments and blank lines, the epoch header,
 * absolute paths under the mount point, and every bad line counted rather
 * than fatal. The golden files of tests/data/hints/ hold the writers and
 * the reader to one format: the reader must take from each what its .want
 * says, and hint_format_header() (hintfs-ctl's writer) must write the
 * first line of each written one.
 */
#include "common/hint_format.h"
#include "fs/hint.h"
#include "check.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HINTFS_HINTS_DIR
#define HINTFS_HINTS_DIR "tests/data/hints"
#endif

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

/* The whole of file @dir/@name, NUL-terminated, in malloc'd *@out (*@len
 * bytes without the NUL). Returns 0 or -errno. */
static int slurp(const char *dir, const char *name, char **out, size_t *len)
{
	char path[512];
	FILE *f;
	long n;
	char *buf;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f)
		return -errno;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return -EIO;
	}
	buf = malloc((size_t)n + 1);
	if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[n] = '\0';
	*out = buf;
	*len = (size_t)n;
	return 0;
}

/* The value of the first "KEY VALUE" line of @want whose key is @key, up
 * to the line's end, or NULL. */
static const char *want_get(const char *want, const char *key, size_t *len)
{
	size_t klen = strlen(key);

	for (const char *l = want; *l;
	     l += strcspn(l, "\n") + !!l[strcspn(l, "\n")])
		if (!strncmp(l, key, klen) && l[klen] == ' ') {
			*len = strcspn(l + klen + 1, "\n");
			return l + klen + 1;
		}
	return NULL;
}

static long long want_num(const char *want, const char *key, long long dflt)
{
	size_t len;
	const char *v = want_get(want, key, &len);

	return v ? strtoll(v, NULL, 10) : dflt;
}

/* What the reader passed on, one entry a line, as a .want writes them. */
struct seen {
	char *text;
	size_t len;
	FILE *f;
};

static int seen_one(void *arg, const char *path, size_t len)
{
	struct seen *s = arg;

	fprintf(s->f, "entry %.*s\n", (int)len, path);
	return 1;
}

/* The reader on golden case @name: the header, counts and entries of its
 * .want, in order. */
static void golden_read(const char *name, const char *text, size_t len,
			const char *want)
{
	char mnt[256] = "", stream[HINT_STREAM_MAX + 2] = "";
	struct seen s = {0};
	struct hint_report rep;
	const char *v;
	size_t vlen;
	char *wanted;
	size_t wn = 0;
	FILE *w;

	v = want_get(want, "mount", &vlen);
	if (v)
		snprintf(mnt, sizeof(mnt), "%.*s", (int)vlen, v);
	v = want_get(want, "stream", &vlen);
	if (v)
		snprintf(stream, sizeof(stream), "%.*s", (int)vlen, v);
	s.f = open_memstream(&s.text, &s.len);
	w = open_memstream(&wanted, &wn);
	if (!CHECK(s.f && w))
		return;
	CHECK(hint_foreach(text, len, mnt[0] ? mnt : NULL, seen_one, &s,
			   &rep) == 0);
	fclose(s.f);
	for (const char *l = want; *l;) {
		size_t n = strcspn(l, "\n");

		if (!strncmp(l, "entry ", 6))
			fprintf(w, "%.*s\n", (int)n, l);
		l += n + !!l[n];
	}
	fclose(w);
	CHECKF(!strcmp(s.text, wanted), "%s: entries\n%s\nwant\n%s", name,
	       s.text, wanted);
	CHECKF(rep.epoch == want_num(want, "epoch", -1), "%s: epoch %" PRId64,
	       name, rep.epoch);
	CHECKF(!strcmp(rep.stream, stream), "%s: stream '%s'", name,
	       rep.stream);
	CHECKF(rep.replace == (want_num(want, "replace", 0) != 0),
	       "%s: replace %d", name, rep.replace);
	CHECKF(rep.lines == (uint64_t)want_num(want, "lines", -1),
	       "%s: lines %" PRIu64, name, rep.lines);
	CHECKF(rep.too_long == (uint64_t)want_num(want, "too_long", 0) &&
		   rep.bad_utf8 == (uint64_t)want_num(want, "bad_utf8", 0) &&
		   rep.dotdot == (uint64_t)want_num(want, "dotdot", 0) &&
		   rep.outside == (uint64_t)want_num(want, "outside", 0) &&
		   rep.unknown == 0,
	       "%s: refused too_long %" PRIu64 " bad_utf8 %" PRIu64
	       " dotdot %" PRIu64 " outside %" PRIu64,
	       name, rep.too_long, rep.bad_utf8, rep.dotdot, rep.outside);
	free(s.text);
	free(wanted);
}

/* hintfs-ctl's writer on golden case @name: from the .want's epoch,
 * stream and replace it writes the .hint's first line, byte for byte. */
static void golden_write(const char *name, const char *text, const char *want)
{
	char hdr[HINT_HEADER_MAX + 2], stream[HINT_STREAM_MAX + 2] = "";
	const char *v, *eol = strchr(text, '\n');
	size_t vlen, line = eol ? (size_t)(eol - text) + 1 : strlen(text);
	int n;

	v = want_get(want, "stream", &vlen);
	if (v)
		snprintf(stream, sizeof(stream), "%.*s", (int)vlen, v);
	n = hint_format_header(hdr, sizeof(hdr), want_num(want, "epoch", -1),
			       v ? stream : NULL,
			       want_num(want, "replace", 0) != 0);
	CHECKF(n > 0 && (size_t)n == line && !memcmp(hdr, text, line),
	       "%s: wrote '%s', the golden file has '%.*s'", name,
	       n > 0 ? hdr : "", (int)line, text);
}

static int is_hint(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return n > 5 && !strcmp(d->d_name + n - 5, ".hint");
}

static void test_golden(void)
{
	const char *dir = getenv("HINTFS_HINTS");
	struct dirent **names;
	int n, written = 0;

	if (!dir || !*dir)
		dir = HINTFS_HINTS_DIR;
	n = scandir(dir, &names, is_hint, alphasort);
	/* The golden files are part of the source tree: none is a failure. */
	if (!CHECKF(n > 0, "no golden hint files in %s", dir))
		return;
	for (int i = 0; i < n; i++) {
		char *text = NULL, *want = NULL, wname[300];
		const char *name = names[i]->d_name;
		size_t len, wlen;
		size_t base = strlen(name) - 5;

		snprintf(wname, sizeof(wname), "%.*s.want", (int)base, name);
		check_group(name);
		if (CHECKF(slurp(dir, name, &text, &len) == 0 &&
			       slurp(dir, wname, &want, &wlen) == 0,
			   "%s/%s and its .want", dir, name)) {
			size_t vlen;
			const char *w = want_get(want, "written", &vlen);

			golden_read(name, text, len, want);
			if (w && vlen == 3 && !memcmp(w, "yes", 3)) {
				golden_write(name, text, want);
				written++;
			}
		}
		check_group_end();
		free(text);
		free(want);
		free(names[i]);
	}
	free(names);
	CHECKF(written > 0, "no golden hint file is written by the writers");
}

/* The writer's edges: nothing it writes is refused or cut by the reader. */
static void test_format(void)
{
	char hdr[HINT_HEADER_MAX + 2], small[20];

	CHECK(hint_format_header(hdr, sizeof(hdr), -5, NULL, false) == 11 &&
	      !strcmp(hdr, "#hintfs v1\n"));
	CHECK(hint_format_header(hdr, sizeof(hdr), 1, "a/b", false) == -EINVAL);
	CHECK(hint_format_header(hdr, sizeof(hdr), 1, "", false) == -EINVAL);
	CHECK(hint_format_header(hdr, sizeof(hdr), 1,
				 "rank-0123456789.abcdefghij_klmnop",
				 false) == -EINVAL);
	CHECK(hint_format_header(small, sizeof(small), 12345, NULL, true) ==
		  -ENOSPC &&
	      small[0] == '\0');
	CHECK(hint_format_header(hdr, sizeof(hdr), INT64_MAX,
				 "rank-0123456789.abcdefghij_klmno",
				 true) == 85);
	CHECK(strlen(hdr) - 1 <= HINT_HEADER_MAX);
	CHECK(hint_stream_ok("rank5", 5) && !hint_stream_ok("rank 5", 6) &&
	      !hint_stream_ok("r\xc3\xa9", 3));
}

int main(void)
{
	test_good();
	test_bad();
	test_large();
	test_format();
	test_golden();
	return check_done();
}
