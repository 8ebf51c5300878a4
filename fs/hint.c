/*
 * fs/hint.c - the hint file parser (doc/design.md 2.2, format v1).
 *
 * Owns the rules that turn the text a trainer wrote into a list of object
 * ids and byte ranges of them: which lines are entries, how an entry is
 * normalized, how "PATH<TAB>OFFSET<TAB>LENGTH" is told from a key that
 * holds tabs, and what is counted instead of taken. Nothing in a hint is
 * fatal: a hint is advice, and a bad line costs only its own prefetch.
 *
 * Invariant: every id stored was returned by the resolver for a path with
 * no empty, "." or ".." component, so a hint can never name anything
 * outside the mount; every range stored lies inside its file, non-empty.
 */
#include "fs/hint.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether @len bytes of @s are well-formed UTF-8 (no overlongs, no
 * surrogates, nothing past U+10FFFF). */
static bool utf8_ok(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		size_t n;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			n = 1, cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2, cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3, cp = c & 0x07;
		} else {
			return false;
		}
		if (len - i <= n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return false;
		i += n + 1;
	}
	return true;
}

static void note_bad(struct hint_report *rep, const char *why, const char *line,
		     size_t len)
{
	size_t j;

	if (rep->first_bad[0])
		return;
	j = (size_t)snprintf(rep->first_bad, sizeof(rep->first_bad), "%s: '",
			     why);
	for (size_t i = 0; i < len && j + 6 < sizeof(rep->first_bad); i++) {
		unsigned char ch = (unsigned char)line[i];

		rep->first_bad[j++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
	}
	rep->first_bad[j++] = '\'';
	rep->first_bad[j] = '\0';
}

/* Takes "stream=NAME" at @w (NAME: 1-HINT_STREAM_MAX of [A-Za-z0-9._-],
 * up to a space or the end) into rep->stream; anything else is skipped as
 * an unknown word. */
static void parse_stream(const char *w, struct hint_report *rep)
{
	size_t n = strcspn(w, " ");

	if (!hint_stream_ok(w, n))
		return;
	memcpy(rep->stream, w, n);
	rep->stream[n] = '\0';
}

/* "#hintfs v1 epoch=N stream=NAME [replace]" on the first line names the
 * epoch and the stream, and may ask to replace the stream's queued
 * hints. */
static void parse_header(const char *line, size_t len, struct hint_report *rep)
{
	static const char tag[] = HINT_TAG;
	char buf[HINT_HEADER_MAX + 1];
	const char *e;
	char *end;
	long long v;

	if (len >= sizeof(buf) || len < sizeof(tag) - 1 ||
	    memcmp(line, tag, sizeof(tag) - 1))
		return;
	memcpy(buf, line, len);
	buf[len] = '\0';
	for (char *w = strstr(buf, " replace"); w;
	     w = strstr(w + 1, " replace"))
		if (w[8] == '\0' || w[8] == ' ')
			rep->replace = true;
	e = strstr(buf, " stream=");
	if (e)
		parse_stream(e + 8, rep);
	e = strstr(buf, " epoch=");
	if (!e)
		return;
	v = strtoll(e + 7, &end, 10);
	if (end != e + 7 && v >= 0 && (*end == '\0' || *end == ' '))
		rep->epoch = v;
}

/*
 * Normalizes one entry into @out (at least @len bytes): the mount point is
 * stripped, empty and "." components dropped. Returns the length, -1 for a
 * ".." component, -2 for an absolute path outside the mount.
 */
static long normalize(const char *p, size_t len, const char *mnt,
		      size_t mnt_len, char *out)
{
	size_t o = 0, i = 0;

	if (len && p[0] == '/') {
		if (!mnt_len || len < mnt_len || memcmp(p, mnt, mnt_len) ||
		    (len > mnt_len && p[mnt_len] != '/'))
			return -2;
		i = mnt_len;
	}
	while (i < len) {
		size_t start = i, clen;

		while (i < len && p[i] != '/')
			i++;
		clen = i - start;
		i++; /* past the '/' */
		if (clen == 0 || (clen == 1 && p[start] == '.'))
			continue;
		if (clen == 2 && p[start] == '.' && p[start + 1] == '.')
			return -1;
		if (o)
			out[o++] = '/';
		memcpy(out + o, p + start, clen);
		o += clen;
	}
	return (long)o;
}

/* The longest decimal number a range field may be: 2^64 - 1 has 20
 * digits; leading zeros past that are refused rather than skipped. */
#define RANGE_DIGITS_MAX 20

/* Reads @len bytes at @s as a decimal number in *@v: digits only (no
 * sign, no space), 1 to RANGE_DIGITS_MAX of them, below 2^64. */
static bool parse_u64(const char *s, size_t len, uint64_t *v)
{
	uint64_t x = 0;

	if (!len || len > RANGE_DIGITS_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned)(s[i] - '0');

		if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*v = x;
	return true;
}

/*
 * Splits a line with a tab as "PATH<TAB>OFFSET<TAB>LENGTH": the path's
 * length in *@plen, the range in *@off, *@rlen. Returns NULL, or why the
 * line is no range (for note_bad()).
 */
static const char *split_range(const char *line, size_t len, size_t *plen,
			       uint64_t *off, uint64_t *rlen)
{
	size_t t2 = len, t1;

	while (t2 > 0 && line[t2 - 1] != '\t')
		t2--;
	if (!t2)
		return "expected PATH<TAB>OFFSET<TAB>LENGTH";
	t2--; /* at the last tab */
	t1 = t2;
	while (t1 > 0 && line[t1 - 1] != '\t')
		t1--;
	if (!t1)
		return "expected PATH<TAB>OFFSET<TAB>LENGTH";
	t1--; /* at the tab before it */
	if (!parse_u64(line + t1 + 1, t2 - t1 - 1, off))
		return "range offset not a decimal number below 2^64";
	if (!parse_u64(line + t2 + 1, len - t2 - 1, rlen))
		return "range length not a decimal number below 2^64";
	if (*rlen == 0)
		return "range length 0";
	if (*off > UINT64_MAX - *rlen)
		return "range end past 2^64 - 1";
	*plen = t1;
	return NULL;
}

/* Counts the result @rc of the callback on entry @line (@llen bytes) in
 * @rep. */
static void count_taken(struct hint_report *rep, int rc, const char *line,
			size_t llen)
{
	if (rc == HINT_TAKEN) {
		rep->entries++;
	} else if (rc == HINT_UNKNOWN) {
		rep->unknown++;
		note_bad(rep, "not in the listing", line, llen);
	} else if (rc == HINT_RANGE_DIR) {
		rep->bad_range++;
		note_bad(rep, "a range of a directory", line, llen);
	} else if (rc == HINT_RANGE_PAST_END) {
		rep->bad_range++;
		note_bad(rep, "range offset at or past the end of the file",
			 line, llen);
	}
}

/* Counts normalize()'s refusal @nlen (-1 or -2) of @line in @rep. */
static void count_refused(struct hint_report *rep, long nlen, const char *line,
			  size_t llen)
{
	if (nlen == -1) {
		rep->dotdot++;
		note_bad(rep, "'..' in path", line, llen);
	} else {
		rep->outside++;
		note_bad(rep, "outside the mount", line, llen);
	}
}

/*
 * One line with a tab. A key may hold tabs, so the whole line is first
 * offered as a path (@whole: its normalized length, or normalize()'s
 * refusal); only when that names nothing is it read as a range, whose
 * fields must then be numbers. Returns the callback's -errno, or 0.
 */
static int tab_line(const char *line, size_t llen, long whole, const char *mnt,
		    size_t mnt_len, char *norm, hint_path_cb cb, void *arg,
		    struct hint_report *rep)
{
	uint64_t off, rlen;
	const char *why;
	size_t plen;
	long nlen;
	int rc;

	if (whole > 0) {
		rc = cb(arg, norm, (size_t)whole, 0, HINT_WHOLE);
		if (rc < 0)
			return rc;
		if (rc != HINT_UNKNOWN) {
			count_taken(rep, rc, line, llen);
			return 0;
		}
	}
	why = split_range(line, llen, &plen, &off, &rlen);
	if (why) {
		/* Not a range either: a path refused for its own reason
		 * says that reason. */
		if (whole >= 0) {
			rep->bad_range++;
			note_bad(rep, why, line, llen);
		} else {
			count_refused(rep, whole, line, llen);
		}
		return 0;
	}
	nlen = normalize(line, plen, mnt, mnt_len, norm);
	if (nlen < 0) {
		count_refused(rep, nlen, line, llen);
		return 0;
	}
	rc = cb(arg, norm, (size_t)nlen, off, rlen);
	if (rc < 0)
		return rc;
	count_taken(rep, rc, line, llen);
	return 0;
}

int hint_foreach(const char *text, size_t len, const char *mountpoint,
		 hint_path_cb cb, void *arg, struct hint_report *rep)
{
	size_t mnt_len = mountpoint ? strlen(mountpoint) : 0;
	char norm[HINT_LINE_MAX];
	size_t pos = 0;
	int rc = 0;

	memset(rep, 0, sizeof(*rep));
	rep->epoch = -1;
	while (mnt_len > 1 && mountpoint[mnt_len - 1] == '/')
		mnt_len--;

	while (pos < len && rc >= 0) {
		const char *line = text + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t llen = nl ? (size_t)(nl - line) : len - pos;
		long nlen;

		pos += llen + (nl ? 1 : 0);
		rep->lines++;
		if (llen && line[llen - 1] == '\r')
			llen--;
		if (rep->lines == 1 && llen >= 3 &&
		    !memcmp(line, "\xef\xbb\xbf", 3)) {
			line += 3; /* a BOM some editors write */
			llen -= 3;
		}
		if (llen == 0)
			continue;
		if (line[0] == '#') {
			if (rep->lines == 1)
				parse_header(line, llen, rep);
			continue;
		}
		if (llen > HINT_LINE_MAX) {
			rep->too_long++;
			note_bad(rep, "line too long", line, 40);
			continue;
		}
		if (!utf8_ok((const unsigned char *)line, llen) ||
		    memchr(line, '\0', llen)) {
			rep->bad_utf8++;
			note_bad(rep, "not UTF-8", line, llen);
			continue;
		}
		nlen = normalize(line, llen, mountpoint, mnt_len, norm);
		if (memchr(line, '\t', llen)) {
			rc = tab_line(line, llen, nlen, mountpoint, mnt_len,
				      norm, cb, arg, rep);
			continue;
		}
		if (nlen < 0) {
			count_refused(rep, nlen, line, llen);
			continue;
		}
		rc = cb(arg, norm, (size_t)nlen, 0, HINT_WHOLE);
		if (rc >= 0)
			count_taken(rep, rc, line, llen);
	}
	return rc < 0 ? rc : 0;
}

/* What hint_parse() gathers: entries, through the caller's resolver. */
struct parse_ctx {
	hint_resolve_cb resolve;
	void *arg;
	struct hint_entry *e;
	size_t n;
	size_t cap;
};

static int parse_one(void *arg, const char *path, size_t len, uint64_t off,
		     uint64_t rlen)
{
	struct parse_ctx *pc = arg;
	struct hint_target t = {.id = HINT_NO_ID, .is_dir = len == 0};

	if (len)
		pc->resolve(pc->arg, path, len, &t);
	if (t.id == HINT_NO_ID)
		return rlen != HINT_WHOLE && t.is_dir ? HINT_RANGE_DIR
						      : HINT_UNKNOWN;
	if (rlen != HINT_WHOLE) {
		if (off >= t.size)
			return HINT_RANGE_PAST_END;
		if (rlen > t.size - off)
			rlen = t.size - off; /* cut at the end, silently */
	}
	if (pc->n == pc->cap) {
		size_t ncap = pc->cap ? pc->cap * 2 : 1024;
		struct hint_entry *ne = realloc(pc->e, ncap * sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		pc->e = ne;
		pc->cap = ncap;
	}
	pc->e[pc->n++] =
	    (struct hint_entry){.id = t.id, .off = off, .len = rlen};
	return HINT_TAKEN;
}

int hint_parse(const char *text, size_t len, const char *mountpoint,
	       hint_resolve_cb resolve, void *arg, struct hint_entry **entries,
	       size_t *n, struct hint_report *rep)
{
	struct parse_ctx pc = {.resolve = resolve, .arg = arg};
	int rc = hint_foreach(text, len, mountpoint, parse_one, &pc, rep);

	if (rc) {
		free(pc.e);
		pc.e = NULL;
		pc.n = 0;
	}
	*entries = pc.e;
	*n = pc.n;
	return rc;
}
