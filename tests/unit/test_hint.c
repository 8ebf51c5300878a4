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
    "cat/1.jpg",  "cat/2.jpg", "dog/1.jpg", "a b/c+d.jpg",
    "café/é.jpg", "tab\tkey",  "odd\t1\t2", "data/a.zip",
};

/* Each file's size: id * 1000 + 500 bytes. */
#define FILE_SIZE(id) ((uint64_t)(id)*1000 + 500)

static void resolve(void *arg, const char *path, size_t len,
		    struct hint_target *t)
{
	int *calls = arg;

	(*calls)++;
	for (uint32_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		size_t flen = strlen(files[i]);

		if (flen == len && !memcmp(files[i], path, len)) {
			t->id = i;
			t->size = FILE_SIZE(i);
			return;
		}
		if (flen > len && !memcmp(files[i], path, len) &&
		    files[i][len] == '/')
			t->is_dir = true;
	}
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
	struct hint_entry *ids;
	size_t n;
	int calls = 0;

	CHECK(hint_parse(text, strlen(text), "/mnt/data/", resolve, &calls,
			 &ids, &n, &rep) == 0);
	CHECK(n == 6 && rep.entries == 6);
	static const uint32_t want[] = {1, 2, 0, 3, 1, 4};
	for (size_t i = 0; i < 6 && i < n; i++)
		CHECK(ids[i].id == want[i] && ids[i].off == 0 &&
		      ids[i].len == HINT_WHOLE);
	CHECK(rep.epoch == 3 && !rep.replace);
	CHECK(rep.unknown == 0 && rep.bad_utf8 == 0 && rep.dotdot == 0);
	CHECK(rep.first_bad[0] == '\0');
	free(ids);
}

static void test_bad(void)
{
	char *text = malloc(8192);
	struct hint_report rep;
	struct hint_entry *ids;
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
	CHECK(n == 2 && ids && ids[0].id == 0 && ids[1].id == 2);
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
	struct hint_entry *ids;
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
		wrong += ids[i].id != i % 5;
	CHECK(wrong == 0);
	free(ids);
	free(text);
}

/*
 * Range lines: taken, cut at the file's end, refused for each reason with
 * the rest of the hint still taken; a key that holds tabs is a path.
 */
static void test_ranges(void)
{
	static const char text[] =
	    "#hintfs v1 epoch=1\n"
	    "data/a.zip\t1000\t2000\n"		    /* 7500 bytes */
	    "data/a.zip\t7000\t9999\n"		    /* cut: 500 */
	    "/mnt/data/data/a.zip\t0\t1\n"	    /* absolute */
	    "cat/1.jpg\n"			    /* a whole file */
	    "tab\tkey\n"			    /* a key with a tab */
	    "odd\t1\t2\n"			    /* a key like a range */
	    "tab\tkey\t3\t4\n"			    /* a range of it */
	    "data/a.zip\t7499\t1\r\n"		    /* the last byte, CRLF */
	    "data/a.zip\t0\t18446744073709551615\n" /* all of it */
	    "data/a.zip\t0\t0\n"		    /* length 0 */
	    "data/a.zip\t7500\t1\n"		    /* at the end */
	    "data/a.zip\t99999\t1\n"		    /* past the end */
	    "data/a.zip\tx\t1\n"		    /* not numbers... */
	    "data/a.zip\t-1\t1\n"
	    "data/a.zip\t+1\t1\n"
	    "data/a.zip\t 1\t1\n"
	    "data/a.zip\t1\t1 \n"
	    "data/a.zip\t1\t\n"
	    "data/a.zip\t\t1\n"
	    "data/a.zip\t1\n"			     /* one number */
	    "data/a.zip\t18446744073709551616\t1\n"  /* 2^64 */
	    "data/a.zip\t18446744073709551615\t1\n"  /* end past 2^64 */
	    "data/a.zip\t000000000000000000001\t1\n" /* 21 digits */
	    "data\t0\t10\n"			     /* a directory */
	    "/mnt/data\t0\t10\n"		     /* the root */
	    "no/such.zip\t0\t10\n"		     /* unknown */
	    "../data/a.zip\t0\t10\n"		     /* dotdot */
	    "../x\ty\n"				     /* dotdot, no range */
	    "/elsewhere/a.zip\t0\t10\n"		     /* outside */
	    "dog/1.jpg\n";
	static const struct hint_entry want[] = {
	    {7, 1000, 2000},	{7, 7000, 500},	    {7, 0, 1},
	    {0, 0, HINT_WHOLE}, {5, 0, HINT_WHOLE}, {6, 0, HINT_WHOLE},
	    {5, 3, 4},		{7, 7499, 1},	    {7, 0, HINT_WHOLE},
	    {2, 0, HINT_WHOLE},
	};
	struct hint_report rep;
	struct hint_entry *e;
	size_t n;
	int calls = 0;

	CHECK(hint_parse(text, strlen(text), "/mnt/data", resolve, &calls, &e,
			 &n, &rep) == 0);
	CHECKF(n == sizeof(want) / sizeof(want[0]) && rep.entries == n,
	       "%zu entries", n);
	for (size_t i = 0; i < n && i < sizeof(want) / sizeof(want[0]); i++)
		CHECKF(e[i].id == want[i].id && e[i].off == want[i].off &&
			   e[i].len == want[i].len,
		       "entry %zu: %u %" PRIu64 " %" PRIu64, i, e[i].id,
		       e[i].off, e[i].len);
	CHECKF(rep.bad_range == 16, "bad_range %" PRIu64, rep.bad_range);
	CHECK(rep.unknown == 1 && rep.dotdot == 2 && rep.outside == 1);
	CHECKF(!strcmp(rep.first_bad, "range length 0: 'data/a.zip?0?0'"),
	       "first_bad '%s'", rep.first_bad);
	free(e);

	/* Each reason, named. */
	static const struct {
		const char *line, *why;
	} bad[] = {
	    {"data/a.zip\t7500\t1\n",
	     "range offset at or past the end of the file"},
	    {"data\t0\t1\n", "a range of a directory"},
	    {"data/a.zip\tx\t1\n",
	     "range offset not a decimal number below 2^64"},
	    {"data/a.zip\t1\t1x\n",
	     "range length not a decimal number below 2^64"},
	    {"data/a.zip\t1\n", "expected PATH<TAB>OFFSET<TAB>LENGTH"},
	    {"data/a.zip\t18446744073709551615\t1\n",
	     "range end past 2^64 - 1"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(hint_parse(bad[i].line, strlen(bad[i].line), NULL,
				 resolve, &calls, &e, &n, &rep) == 0);
		CHECKF(
		    n == 0 && rep.bad_range == 1 &&
			!strncmp(rep.first_bad, bad[i].why, strlen(bad[i].why)),
		    "'%s': %s", bad[i].why, rep.first_bad);
		free(e);
	}
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

/* The listing the reader is given on a golden case: the .want's "file
 * SIZE PATH" lines, or, with none, every path without a tab, of any size,
 * given an id when first met. A path above a file is a directory. */
#define GOLDEN_FILES_MAX 64

struct listing {
	bool given;
	size_t n;
	char *path[GOLDEN_FILES_MAX];
	uint64_t size[GOLDEN_FILES_MAX];
};

static void listing_add(struct listing *l, const char *path, size_t len,
			uint64_t size)
{
	if (!CHECKF(l->n < GOLDEN_FILES_MAX, "more than %d files",
		    GOLDEN_FILES_MAX))
		return;
	l->path[l->n] = strndup(path, len);
	l->size[l->n++] = size;
}

static void golden_resolve(void *arg, const char *path, size_t len,
			   struct hint_target *t)
{
	struct listing *l = arg;

	for (size_t i = 0; i < l->n; i++) {
		size_t flen = strlen(l->path[i]);

		if (flen == len && !memcmp(l->path[i], path, len)) {
			t->id = (uint32_t)i;
			t->size = l->size[i];
			return;
		}
		if (flen > len && !memcmp(l->path[i], path, len) &&
		    l->path[i][len] == '/')
			t->is_dir = true;
	}
	if (!l->given && !t->is_dir && !memchr(path, '\t', len)) {
		listing_add(l, path, len, UINT64_MAX - 1);
		t->id = (uint32_t)(l->n - 1);
		t->size = UINT64_MAX - 1;
	}
}

/* The reader on golden case @name: the header, counts and entries of its
 * .want, in order. When @rewrite, the case has no mount point and no
 * refusal: the C writer, given what the reader took, writes the .hint
 * again byte for byte. */
static void golden_read(const char *name, const char *text, size_t len,
			const char *want, bool rewrite)
{
	char mnt[256] = "", stream[HINT_STREAM_MAX + 2] = "";
	struct listing l = {0};
	struct hint_report rep;
	struct hint_entry *e = NULL;
	char *seen, *wanted, *again;
	size_t n = 0, sn = 0, wn = 0, an = 0;
	const char *v;
	size_t vlen;
	FILE *s, *w, *a;

	v = want_get(want, "mount", &vlen);
	if (v)
		snprintf(mnt, sizeof(mnt), "%.*s", (int)vlen, v);
	v = want_get(want, "stream", &vlen);
	if (v)
		snprintf(stream, sizeof(stream), "%.*s", (int)vlen, v);
	s = open_memstream(&seen, &sn);
	w = open_memstream(&wanted, &wn);
	a = open_memstream(&again, &an);
	if (!CHECK(s && w && a))
		return;
	for (const char *ln = want; *ln;) {
		size_t k = strcspn(ln, "\n");
		char *end;

		if (!strncmp(ln, "entry ", 6) || !strncmp(ln, "range ", 6)) {
			fwrite(ln, 1, k, w);
			fputc('\n', w);
		}
		if (!strncmp(ln, "file ", 5)) {
			uint64_t size = strtoull(ln + 5, &end, 10);

			l.given = true;
			listing_add(&l, end + 1, k - (size_t)(end + 1 - ln),
				    size);
		}
		ln += k + !!ln[k];
	}
	CHECK(hint_parse(text, len, mnt[0] ? mnt : NULL, golden_resolve, &l, &e,
			 &n, &rep) == 0);
	for (size_t i = 0; i < n; i++) {
		const char *path = l.path[e[i].id];
		char line[HINT_LINE_MAX + 64];
		int k;

		if (e[i].len == HINT_WHOLE)
			fprintf(s, "entry %s\n", path);
		else
			fprintf(s, "range %" PRIu64 " %" PRIu64 " %s\n",
				e[i].off, e[i].len, path);
		k = hint_format_entry(line, sizeof(line), path, strlen(path),
				      e[i].off, e[i].len);
		CHECKF(k > 0, "%s: hint_format_entry() of '%s': %d", name, path,
		       k);
		if (k > 0)
			fputs(line, a);
	}
	fclose(s);
	fclose(w);
	fclose(a);
	CHECKF(!strcmp(seen, wanted), "%s: entries\n%s\nwant\n%s", name, seen,
	       wanted);
	if (rewrite) {
		const char *body = memchr(text, '\n', len);
		size_t blen = body ? len - (size_t)(body + 1 - text) : 0;

		CHECKF(body && blen == an && !memcmp(body + 1, again, an),
		       "%s: the C writer wrote\n%s\nthe golden file has\n%.*s",
		       name, again, (int)blen, body ? body + 1 : "");
	}
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
		   rep.unknown == (uint64_t)want_num(want, "unknown", 0) &&
		   rep.bad_range == (uint64_t)want_num(want, "bad_range", 0),
	       "%s: refused too_long %" PRIu64 " bad_utf8 %" PRIu64
	       " dotdot %" PRIu64 " outside %" PRIu64 " unknown %" PRIu64
	       " bad_range %" PRIu64,
	       name, rep.too_long, rep.bad_utf8, rep.dotdot, rep.outside,
	       rep.unknown, rep.bad_range);
	v = want_get(want, "first_bad", &vlen);
	if (v)
		CHECKF(strlen(rep.first_bad) == vlen &&
			   !memcmp(rep.first_bad, v, vlen),
		       "%s: first_bad \"%s\"", name, rep.first_bad);
	for (size_t i = 0; i < l.n; i++)
		free(l.path[i]);
	free(e);
	free(seen);
	free(wanted);
	free(again);
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

/* The keys of a .want that count refused lines. */
static const char *const refusals[] = {
    "too_long", "bad_utf8", "dotdot", "outside", "unknown", "bad_range",
};

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
			bool yes = w && vlen == 3 && !memcmp(w, "yes", 3);
			bool clean = !want_get(want, "mount", &vlen);

			for (size_t k = 0;
			     k < sizeof(refusals) / sizeof(refusals[0]); k++)
				clean &= want_num(want, refusals[k], 0) == 0;
			golden_read(name, text, len, want, yes && clean);
			if (yes) {
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

	/* Entries: a path, a range; never a line the reader would misread
	 * or refuse. */
	char line[64];

	CHECK(hint_format_entry(line, sizeof(line), "a b/c.zip", 9, 0,
				HINT_WHOLE) == 10 &&
	      !strcmp(line, "a b/c.zip\n"));
	CHECK(hint_format_entry(line, sizeof(line), "a.zip", 5, 1048576,
				112640) == 21 &&
	      !strcmp(line, "a.zip\t1048576\t112640\n"));
	CHECK(hint_format_entry(line, sizeof(line), "a", 1, UINT64_MAX - 1, 1) >
	      0);
	CHECK(hint_format_entry(line, sizeof(line), "a", 1, 0, 0) == -EINVAL);
	CHECK(hint_format_entry(line, sizeof(line), "a", 1, UINT64_MAX, 1) ==
	      -EINVAL);
	CHECK(hint_format_entry(line, sizeof(line), "a\nb", 3, 0, HINT_WHOLE) ==
	      -EINVAL);
	CHECK(hint_format_entry(line, sizeof(line), "", 0, 0, HINT_WHOLE) ==
	      -EINVAL);
	CHECK(hint_format_entry(small, sizeof(small), "a.zip", 5, 1048576,
				11264000) == -ENOSPC &&
	      small[0] == '\0');
}

int main(void)
{
	test_good();
	test_bad();
	test_large();
	test_ranges();
	test_format();
	test_golden();
	return check_done();
}
