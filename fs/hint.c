/*
 * fs/hint.c - the hint file parser (doc/design.md 2.2, format v1).
 *
 * Owns the rules that turn the text a trainer wrote into a list of object
 * ids: which lines are entries, how an entry is normalized, and what is
 * counted instead of taken. Nothing in a hint is fatal: a hint is advice,
 * and a bad line costs only its own prefetch.
 *
 * Invariant: every id stored was returned by the resolver for a path with
 * no empty, "." or ".." component, so a hint can never name anything
 * outside the mount.
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
		if (nlen == -1) {
			rep->dotdot++;
			note_bad(rep, "'..' in path", line, llen);
			continue;
		}
		if (nlen == -2) {
			rep->outside++;
			note_bad(rep, "outside the mount", line, llen);
			continue;
		}
		rc = cb(arg, norm, (size_t)nlen);
		if (rc == 0) {
			rep->unknown++;
			note_bad(rep, "not in the listing", line, llen);
		} else if (rc > 0) {
			rep->entries++;
		}
	}
	return rc < 0 ? rc : 0;
}

/* What hint_parse() gathers: ids, through the caller's resolver. */
struct parse_ctx {
	hint_resolve_cb resolve;
	void *arg;
	uint32_t *ids;
	size_t n;
	size_t cap;
};

static int parse_one(void *arg, const char *path, size_t len)
{
	struct parse_ctx *pc = arg;
	uint32_t id = len ? pc->resolve(pc->arg, path, len) : HINT_NO_ID;

	if (id == HINT_NO_ID)
		return 0;
	if (pc->n == pc->cap) {
		size_t ncap = pc->cap ? pc->cap * 2 : 1024;
		uint32_t *nids = realloc(pc->ids, ncap * sizeof(*nids));

		if (!nids)
			return -ENOMEM;
		pc->ids = nids;
		pc->cap = ncap;
	}
	pc->ids[pc->n++] = id;
	return 1;
}

int hint_parse(const char *text, size_t len, const char *mountpoint,
	       hint_resolve_cb resolve, void *arg, uint32_t **ids, size_t *n,
	       struct hint_report *rep)
{
	struct parse_ctx pc = {.resolve = resolve, .arg = arg};
	int rc = hint_foreach(text, len, mountpoint, parse_one, &pc, rep);

	if (rc) {
		free(pc.ids);
		pc.ids = NULL;
		pc.n = 0;
	}
	*ids = pc.ids;
	*n = pc.n;
	return rc;
}
