/*
 * fs/stats_json.c - the JSON that the control files stats and verify
 * show (doc/design.md 2.3): the counters of every layer in one document,
 * and the verdict of a check of every cached blob.
 *
 * Invariant: every string is written escaped (json_strn()), keys of any
 * bytes included, and no secret is ever written (the credentials show
 * only their provider and the key's last four characters).
 */
#include "fs/fs_internal.h"
#include "fs/passthrough.h"
#include "fs/store.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- stats ------------------------------------------------------------------
 */

/* Appends a JSON string (quotes and escapes) for @len bytes of @s. Bytes
 * that are not UTF-8 (keys may hold any) are written as \u00XX. */
static void json_strn(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x80)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_str(FILE *f, const char *s)
{
	json_strn(f, s, strlen(s));
}

/* The keys of "fuse" in stats, in enum fs_req's order. */
static const char *const fuse_req_names[FS_REQ_N] = {
    [FS_REQ_LOOKUP] = "lookup",
    [FS_REQ_FORGET] = "forget",
    [FS_REQ_GETATTR] = "getattr",
    [FS_REQ_SETATTR] = "setattr",
    [FS_REQ_ACCESS] = "access",
    [FS_REQ_OPEN] = "open",
    [FS_REQ_READ] = "read",
    [FS_REQ_WRITE] = "write",
    [FS_REQ_FLUSH] = "flush",
    [FS_REQ_FSYNC] = "fsync",
    [FS_REQ_RELEASE] = "release",
    [FS_REQ_OPENDIR] = "opendir",
    [FS_REQ_READDIR] = "readdir",
    [FS_REQ_READDIRPLUS] = "readdirplus",
    [FS_REQ_RELEASEDIR] = "releasedir",
    [FS_REQ_STATFS] = "statfs",
    [FS_REQ_XATTR] = "xattr",
    [FS_REQ_IOCTL] = "ioctl",
    [FS_REQ_OTHER] = "other",
};

/* Everything the numbers of fs/stats.def are read from: one snapshot,
 * taken before any is written. */
struct stats_src {
	struct fs *fs;
	struct pf_stats ps;
	struct cache_stats cs;
	struct hint_report hr;
	struct creds_info ci;
	bool creds; /* signed requests: "credentials" is not null */
	const struct tree_skips *sk;
	uint64_t files, bytes, rejected, lists, gets, connects;
	uint64_t store_objects, store_bytes, store_refused;
	struct fs_pt_stats pt;
	uint64_t tier_gets, tier_puts, tier_connects;
};

/* How a row's number is written. */
enum stat_fmt {
	STAT_U,	 /* a whole number */
	STAT_I,	 /* a whole number that may be negative (-1: none) */
	STAT_F6, /* seconds to the microsecond */
	STAT_F3, /* milliseconds to the microsecond */
	STAT_G,	 /* a ratio */
};

struct stat_num {
	unsigned long long u;
	long long i;
	double d;
};

static const struct {
	const char *path;
	enum stat_fmt fmt;
} stat_rows[] = {
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help)        \
	{path, fmt},
#include "fs/stats.def"
#undef HINTFS_STAT
};

#define N_STAT_ROWS (sizeof(stat_rows) / sizeof(stat_rows[0]))

/* Each row's value: its column "val" read from @s, converted only as its
 * format says (a double never turns into an unsigned). */
static void stat_values(struct stats_src *s, struct stat_num *v)
{
	size_t i = 0;

#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help)        \
	v[i].u = (fmt) == STAT_U ? (unsigned long long)(val) : 0;              \
	v[i].i = (fmt) == STAT_I ? (long long)(val) : 0;                       \
	v[i].d = (fmt) >= STAT_F6 ? (double)(val) : 0;                         \
	i++;
#include "fs/stats.def"
#undef HINTFS_STAT
}

/* Whether the row at @path is in this snapshot: the tier's with a tier,
 * the credentials' with signed requests. */
static bool stat_present(const struct stats_src *s, const char *path)
{
	if (!strncmp(path, "tier.", 5))
		return s->ps.tier;
	if (!strncmp(path, "credentials.", 12))
		return s->creds;
	return true;
}

/* What an object holds besides the table's numbers (strings, flags,
 * arrays), written as its last members. */
static void stats_extras(FILE *f, const struct stats_src *s, const char *path)
{
	const struct pf_stats *ps = &s->ps;

	if (!strcmp(path, "listing")) {
		fprintf(f, ", \"from_cache\": %s",
			s->fs->listed_from_cache ? "true" : "false");
	} else if (!strcmp(path, "cache")) {
		fprintf(f, ", \"dir\": ");
		json_str(f, s->fs->cache_dir);
	} else if (!strcmp(path, "hint.last")) {
		fprintf(f, ", \"stream\": ");
		json_str(f, s->hr.stream);
	} else if (!strcmp(path, "hint.reclaimed")) {
		fprintf(f, ", \"recent\": [");
		for (uint32_t i = 0; i < ps->n_reclaimed; i++) {
			const struct pf_reclaimed *r = &ps->reclaimed[i];

			fprintf(f, "%s{\"name\": ", i ? ", " : "");
			json_str(f, r->name);
			fprintf(f,
				", \"owner\": %ld, \"why\": \"%s\", "
				"\"unread\": %llu}",
				(long)r->owner, r->exited ? "exited" : "idle",
				(unsigned long long)r->unread);
		}
		fprintf(f, "]");
	} else if (!strcmp(path, "hint")) {
		fprintf(f, ",\n    \"streams\": [");
		for (uint32_t i = 0; i < ps->n_streams; i++) {
			const struct pf_stream_stats *st = &ps->streams[i];

			fprintf(f, "%s\n      {\"name\": ", i ? "," : "");
			json_str(f, st->name);
			fprintf(f,
				", \"position\": %llu, \"length\": %llu, "
				"\"epoch\": %lld, \"queued\": %u, "
				"\"received\": %llu, \"stalls\": %llu, "
				"\"stall_seconds\": %.6f, \"pace\": %llu, "
				"\"owner\": %ld, \"idle_seconds\": %.3f}",
				(unsigned long long)st->pos,
				(unsigned long long)st->len,
				(long long)st->epoch, st->queued,
				(unsigned long long)st->hints,
				(unsigned long long)st->stalls,
				(double)st->stall_ns / 1e9,
				(unsigned long long)st->pace, (long)st->owner,
				(double)st->idle_ns / 1e9);
		}
		fprintf(f, "]");
	} else if (!strcmp(path, "tier")) {
		fprintf(f, ", \"breaker_open\": %s",
			ps->tier_st.breaker_open ? "true" : "false");
	} else if (!strcmp(path, "credentials")) {
		fprintf(f, ", \"provider\": ");
		json_str(f, s->ci.provider);
		fprintf(f, ", \"key_id_tail\": ");
		json_str(f, s->ci.key_tail);
	}
}

/* The length of the object path that holds dotted @path ("hint.last" of
 * "hint.last.epoch"), 0 for the top. */
static size_t stat_parent_len(const char *path)
{
	const char *dot = strrchr(path, '.');

	return dot ? (size_t)(dot - path) : 0;
}

/*
 * Writes the rows of fs/stats.def as nested objects, in the table's order:
 * objects are opened and closed as the rows' paths go in and out of them
 * (the rows of one object are adjacent), each closed after its extras.
 */
static void stats_rows_json(FILE *f, struct stats_src *s)
{
	struct stat_num v[N_STAT_ROWS];
	char open[64] = "";	 /* the object path written into now */
	bool first[8] = {false}; /* per depth: no member yet */
	int depth = 0;

	stat_values(s, v);
	for (size_t r = 0; r <= N_STAT_ROWS; r++) {
		const char *path = r < N_STAT_ROWS ? stat_rows[r].path : "";
		size_t plen = stat_parent_len(path);

		if (r < N_STAT_ROWS && !stat_present(s, path))
			continue;
		/* Close what this row is not in. */
		while (depth &&
		       !(strlen(open) <= plen &&
			 !strncmp(open, path, strlen(open)) &&
			 (path[strlen(open)] == '.' || strlen(open) == plen))) {
			char *dot = strrchr(open, '.');

			stats_extras(f, s, open);
			fputc('}', f);
			if (dot)
				*dot = '\0';
			else
				open[0] = '\0';
			depth--;
		}
		if (r == N_STAT_ROWS)
			break;
		/* Open what it is in, one component at a time. */
		while (strlen(open) < plen) {
			size_t at = strlen(open) + (open[0] ? 1 : 0);
			size_t end = at + strcspn(path + at, ".");

			if (end > plen)
				end = plen;
			fprintf(f, "%s\"%.*s\": {",
				!depth	       ? ",\n  "
				: first[depth] ? ""
					       : ", ",
				(int)(end - at), path + at);
			first[depth] = false;
			snprintf(open, sizeof(open), "%.*s", (int)end, path);
			first[++depth] = true;
		}
		fprintf(f, "%s\"%s\": ", first[depth] ? "" : ", ",
			path + (plen ? plen + 1 : 0));
		first[depth] = false;
		switch (stat_rows[r].fmt) {
		case STAT_U:
			fprintf(f, "%llu", v[r].u);
			break;
		case STAT_I:
			fprintf(f, "%lld", v[r].i);
			break;
		case STAT_F6:
			fprintf(f, "%.6f", v[r].d);
			break;
		case STAT_F3:
			fprintf(f, "%.3f", v[r].d);
			break;
		case STAT_G:
			fprintf(f, "%g", v[r].d);
			break;
		}
	}
}

char *fs_stats_json(struct fs *fs, size_t *len)
{
	struct stats_src *s = calloc(1, sizeof(*s));
	struct creds *c = s3_client_creds(fs->s3);
	char *out = NULL;
	FILE *f;

	if (!s)
		return NULL;
	s->fs = fs;
	s->sk = tree_skips(fs->tree);
	pf_get_stats(atomic_load(&fs->pf), &s->ps);
	cache_get_stats(fs->cache, &s->cs);
	s3_client_counts(fs->s3, &s->lists, &s->gets);
	s->connects = s3_client_connects(fs->s3);
	tree_totals(fs->tree, &s->files, &s->bytes);
	fs_store_stats(fs, &s->store_objects, &s->store_bytes,
		       &s->store_refused);
	fs_pt_get_stats(fs->pt, &s->pt);
	pthread_mutex_lock(&fs->hint_mu);
	s->hr = fs->last_hint;
	s->rejected = fs->hints_rejected;
	pthread_mutex_unlock(&fs->hint_mu);
	if (s->ps.tier) {
		uint64_t lists;

		s3_client_counts(fs->tier_s3, &lists, &s->tier_gets);
		s->tier_puts = s3_client_puts(fs->tier_s3);
		s->tier_connects = s3_client_connects(fs->tier_s3);
	}
	if (c) {
		creds_get_info(c, &s->ci);
		s->creds = true;
	}

	f = open_memstream(&out, len);
	if (!f) {
		free(s);
		return NULL;
	}
	fprintf(f, "{\n  \"version\": \"%s\",\n  \"source\": ", HINTFS_VERSION);
	json_str(f, fs->source);
	fprintf(f, ",\n  \"data_path\": ");
	json_str(f, fs_data_path(fs));
	fprintf(f, ",\n  \"fuse\": {");
	for (int k = 0; k < FS_REQ_N; k++)
		fprintf(f, "%s\"%s\": %llu", k ? ", " : "", fuse_req_names[k],
			(unsigned long long)atomic_load_explicit(
			    &fs->fuse_req[k], memory_order_relaxed));
	fprintf(f, "}");
	stats_rows_json(f, s);
	if (!s->creds)
		fprintf(f, ",\n  \"credentials\": null");
	fprintf(f, "\n}\n");
	free(s);
	if (fclose(f)) {
		free(out);
		return NULL;
	}
	return out;
}

/* ---- verify ----------------------------------------------------------------
 */

struct verify_ctx {
	FILE *f;
	uint64_t checked;
	uint64_t bad;
	uint64_t unlisted; /* bad ones past CTL_VERIFY_KEYS_MAX of keys */
};

static void verify_cb(void *arg, const char *key, size_t key_len, bool ok)
{
	struct verify_ctx *v = arg;

	v->checked++;
	if (ok)
		return;
	if (ftell(v->f) + 6 * (long)key_len + 4 > (long)CTL_VERIFY_KEYS_MAX) {
		v->bad++;
		v->unlisted++;
		return;
	}
	fputs(v->bad++ ? ", " : "", v->f);
	json_strn(v->f, key, key_len);
}

/* Checks every cached blob now (fs_internal.h): {"dropped": [..],
 * "dropped_unlisted": U, "checked": N, "bad": M}, under CTL_VERIFY_SIZE bytes.
 */
char *fs_verify_json(struct fs *fs, size_t *len)
{
	struct verify_ctx v = {0};
	char *out = NULL;
	int rc;

	v.f = open_memstream(&out, len);
	if (!v.f)
		return NULL;
	fputs("{\"dropped\": [", v.f);
	rc = cache_verify(fs->cache, verify_cb, &v);
	fprintf(v.f,
		"], \"dropped_unlisted\": %llu, \"checked\": %llu, "
		"\"bad\": %llu, \"error\": %s}\n",
		(unsigned long long)v.unlisted, (unsigned long long)v.checked,
		(unsigned long long)v.bad, rc ? "true" : "false");
	if (v.bad)
		log_warn("verify: %llu of %llu cached objects were corrupt and "
			 "were dropped",
			 (unsigned long long)v.bad,
			 (unsigned long long)v.checked);
	if (fclose(v.f)) {
		free(out);
		return NULL;
	}
	return out;
}
