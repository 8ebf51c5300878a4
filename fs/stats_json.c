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


/* ---- stats ------------------------------------------------------------------ */

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

/* "credentials": the provider, the key's last four characters, the
 * expiry and the refreshes; never a secret. null with -o no_sign. */
static void fs_creds_json(FILE *f, struct creds *c)
{
	struct creds_info ci;

	if (!c) {
		fprintf(f, "  \"credentials\": null\n");
		return;
	}
	creds_get_info(c, &ci);
	fprintf(f, "  \"credentials\": {\"provider\": ");
	json_str(f, ci.provider);
	fprintf(f, ", \"key_id_tail\": ");
	json_str(f, ci.key_tail);
	fprintf(f, ", \"expires\": %lld, \"refreshes\": %llu, "
		"\"refresh_failures\": %llu, \"last_refresh\": %lld}\n",
		(long long)ci.expires, (unsigned long long)ci.refreshes,
		(unsigned long long)ci.refresh_failures,
		(long long)ci.last_refresh);
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
	[FS_REQ_OTHER] = "other",
};

char *fs_stats_json(struct fs *fs, size_t *len)
{
	struct hint_report hr;
	struct cache_stats cs;
	struct pf_stats ps;
	uint64_t files, bytes, rejected, lists, gets;
	uint64_t st_objects, st_bytes, st_failed;
	const struct tree_skips *sk = tree_skips(fs->tree);
	char *out = NULL;
	FILE *f;

	pf_get_stats(atomic_load(&fs->pf), &ps);
	cache_get_stats(fs->cache, &cs);
	s3_client_counts(fs->s3, &lists, &gets);
	tree_totals(fs->tree, &files, &bytes);
	pthread_mutex_lock(&fs->hint_mu);
	hr = fs->last_hint;
	rejected = fs->hints_rejected;
	pthread_mutex_unlock(&fs->hint_mu);

	f = open_memstream(&out, len);
	if (!f)
		return NULL;
#define U(x) ((unsigned long long)(x))
	fprintf(f, "{\n  \"version\": \"%s\",\n  \"source\": ", HINTFS_VERSION);
	json_str(f, fs->source);
	fprintf(f, ",\n  \"data_path\": ");
	json_str(f, fs_data_path(fs));
	fprintf(f, ",\n  \"fuse\": {");
	for (int k = 0; k < FS_REQ_N; k++)
		fprintf(f, "%s\"%s\": %llu", k ? ", " : "", fuse_req_names[k],
			U(atomic_load_explicit(&fs->fuse_req[k],
					       memory_order_relaxed)));
	fprintf(f, "}");
	fprintf(f, ",\n  \"listing\": {\"files\": %llu, \"bytes\": %llu, "
		"\"skipped_keys\": %llu, \"hidden_files\": %llu, "
		"\"from_cache\": %s, \"ms\": %llu, \"mounted_at\": %lld, "
		"\"saved_at\": %lld},\n",
		U(files), U(bytes), U(sk->bad_path + sk->reserved),
		U(sk->shadowed), fs->listed_from_cache ? "true" : "false",
		U(fs->list_ms), (long long)fs->mount_time,
		(long long)atomic_load(&fs->listing_saved_at));
	fprintf(f, "  \"cache\": {\"dir\": ");
	json_str(f, fs->cache_dir);
	fprintf(f, ", \"objects\": %llu, \"bytes\": %llu, \"capacity\": %llu, "
		"\"hits\": %llu, \"misses\": %llu, \"evictions\": %llu, "
		"\"corrupt\": %llu, \"write_errors\": %llu, "
		"\"read_errors\": %llu},\n",
		U(cs.objects), U(cs.bytes), U(cs.capacity), U(cs.hits),
		U(cs.misses), U(cs.evictions), U(cs.corrupt), U(cs.write_errors),
		U(cs.read_errors));
	fprintf(f, "  \"reads\": {\"total\": %llu, \"cache_hits\": %llu, "
		"\"prefetch_joins\": %llu, \"demand_fetches\": %llu, "
		"\"read_through\": %llu, \"failed\": %llu, "
		"\"zero_copy\": %llu},\n",
		U(ps.reads), U(ps.cache_hits), U(ps.prefetch_joins),
		U(ps.demand_fetches), U(ps.read_through), U(ps.failed_reads),
		U(ps.reads_zero_copy));
	fprintf(f, "  \"stalls\": {\"count\": %llu, \"seconds\": %.6f},\n",
		U(ps.stalls), (double)ps.stall_ns / 1e9);
	fs_store_stats(fs, &st_objects, &st_bytes, &st_failed);
	fprintf(f, "  \"store_ahead\": {\"objects\": %llu, \"bytes\": %llu, "
		"\"refused\": %llu},\n",
		U(st_objects), U(st_bytes), U(st_failed));
	fprintf(f, "  \"requests\": {\"get\": %llu, \"list\": %llu, "
		"\"bytes\": %llu, \"retries\": %llu, \"prefetched_objects\": %llu, "
		"\"in_flight\": %u, \"in_flight_limit\": %u, "
		"\"in_flight_peak\": %u, "
		"\"not_cached\": %llu, \"fetch_mem\": %llu, "
		"\"fetch_mem_peak\": %llu, \"fetch_mem_limit\": %llu, "
		"\"connects\": %llu},\n",
		U(gets), U(lists), U(ps.bytes), U(ps.retries), U(ps.prefetched),
		ps.inflight, ps.inflight_limit, ps.inflight_peak,
		U(ps.not_cached),
		U(ps.fetch_mem), U(ps.fetch_mem_peak), U(ps.fetch_mem_limit),
		U(s3_client_connects(fs->s3)));
	fprintf(f, "  \"engine\": {\"busy_seconds\": %.6f, "
		"\"busy_max_ms\": %.3f, \"commit_seconds\": %.6f, "
		"\"commit_batches\": %llu, \"commit_objects\": %llu, "
		"\"lost_wakeups\": %llu},\n",
		(double)ps.engine_busy_ns / 1e9,
		(double)ps.engine_busy_max_ns / 1e6,
		(double)ps.commit_ns / 1e9, U(ps.commit_batches),
		U(ps.commit_objects), U(ps.lost_wakeups));
	fprintf(f, "  \"errors\": {\"slowdown\": %llu, \"server\": %llu, "
		"\"network\": %llu, \"stale\": %llu, \"other\": %llu},\n",
		U(ps.err_slowdown), U(ps.err_server), U(ps.err_network),
		U(ps.err_stale), U(ps.err_other));
	fprintf(f, "  \"hint\": {\"position\": %llu, \"length\": %llu, "
		"\"epoch\": %lld, \"queued\": %u, \"received\": %llu, "
		"\"rejected\": %llu, \"refused_queue_full\": %llu, "
		"\"last\": {\"entries\": %llu, "
		"\"unknown\": %llu, \"too_long\": %llu, \"bad_utf8\": %llu, "
		"\"dotdot\": %llu, \"outside\": %llu, \"epoch\": %lld, "
		"\"stream\": ",
		U(ps.hint_pos), U(ps.hint_len), (long long)ps.hint_epoch,
		ps.hints_queued, U(ps.hints_total), U(rejected),
		U(ps.hints_refused), U(hr.entries),
		U(hr.unknown), U(hr.too_long), U(hr.bad_utf8), U(hr.dotdot),
		U(hr.outside), (long long)hr.epoch);
	json_str(f, hr.stream);
	fprintf(f, "},\n    \"streams\": [");
	for (uint32_t i = 0; i < ps.n_streams; i++) {
		const struct pf_stream_stats *s = &ps.streams[i];

		fprintf(f, "%s\n      {\"name\": ", i ? "," : "");
		json_str(f, s->name);
		fprintf(f, ", \"position\": %llu, \"length\": %llu, "
			"\"epoch\": %lld, \"queued\": %u, \"received\": %llu, "
			"\"stalls\": %llu, \"stall_seconds\": %.6f, "
			"\"pace\": %llu, \"owner\": %ld, "
			"\"idle_seconds\": %.3f}",
			U(s->pos), U(s->len), (long long)s->epoch, s->queued,
			U(s->hints), U(s->stalls), (double)s->stall_ns / 1e9,
			U(s->pace), (long)s->owner, (double)s->idle_ns / 1e9);
	}
	fprintf(f, "],\n    \"reclaimed\": {\"exited\": %llu, \"idle\": %llu, "
		"\"recent\": [", U(ps.reclaimed_exited), U(ps.reclaimed_idle));
	for (uint32_t i = 0; i < ps.n_reclaimed; i++) {
		const struct pf_reclaimed *r = &ps.reclaimed[i];

		fprintf(f, "%s{\"name\": ", i ? ", " : "");
		json_str(f, r->name);
		fprintf(f, ", \"owner\": %ld, \"why\": \"%s\", "
			"\"unread\": %llu}", (long)r->owner,
			r->exited ? "exited" : "idle", U(r->unread));
	}
	fprintf(f, "]}},\n");
	fprintf(f, "  \"warm\": {\"queued\": %llu, \"done\": %llu, "
		"\"failed\": %llu, \"refused\": %llu},\n", U(ps.warm_queued),
		U(ps.warm_done), U(ps.warm_failed), U(ps.warm_refused));
	if (ps.tier) {
		uint64_t tl, tg;

		s3_client_counts(fs->tier_s3, &tl, &tg);
		fprintf(f, "  \"tier\": {\"gets\": %llu, \"hits\": %llu, "
			"\"misses\": %llu, \"mismatches\": %llu, "
			"\"unbound\": %llu, \"fallbacks\": %llu, "
			"\"hedged\": %llu, \"hedge_denied\": %llu, "
			"\"hedge_budget_pct\": %g, \"bypassed\": %llu, "
			"\"reader_stalls\": %llu, \"breaker_opens\": %llu, "
			"\"breaker_open\": %s, \"puts\": %llu, "
			"\"put_errors\": %llu, \"put_dropped\": %llu, "
			"\"put_pending\": %llu, \"requests\": {\"get\": %llu, "
			"\"put\": %llu, \"connects\": %llu}},\n",
			U(ps.tier_st.gets), U(ps.tier_st.hits),
			U(ps.tier_st.misses), U(ps.tier_st.mismatches),
			U(ps.tier_st.unbound), U(ps.tier_st.fallbacks),
			U(ps.tier_st.hedged), U(ps.tier_st.hedge_denied),
			ps.tier_st.hedge_budget_pct,
			U(ps.tier_st.bypassed), U(ps.tier_st.reader_stalls),
			U(ps.tier_st.breaker_opens),
			ps.tier_st.breaker_open ? "true" : "false",
			U(ps.tier_st.puts), U(ps.tier_st.put_errors),
			U(ps.tier_st.put_dropped), U(ps.tier_st.put_pending),
			U(tg), U(s3_client_puts(fs->tier_s3)),
			U(s3_client_connects(fs->tier_s3)));
	}
	fs_creds_json(f, s3_client_creds(fs->s3));
	fprintf(f, "}\n");
#undef U
	if (fclose(f)) {
		free(out);
		return NULL;
	}
	return out;
}

/* ---- verify ---------------------------------------------------------------- */

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

/* Checks every cached blob now (fs_internal.h): {"dropped": [..], "dropped_unlisted": U,
 * "checked": N, "bad": M}, under CTL_VERIFY_SIZE bytes. */
char *fs_verify_json(struct fs *fs, size_t *len)
{
	struct verify_ctx v = { 0 };
	char *out = NULL;
	int rc;

	v.f = open_memstream(&out, len);
	if (!v.f)
		return NULL;
	fputs("{\"dropped\": [", v.f);
	rc = cache_verify(fs->cache, verify_cb, &v);
	fprintf(v.f, "], \"dropped_unlisted\": %llu, \"checked\": %llu, "
		"\"bad\": %llu, \"error\": %s}\n",
		(unsigned long long)v.unlisted, (unsigned long long)v.checked,
		(unsigned long long)v.bad, rc ? "true" : "false");
	if (v.bad)
		log_warn("verify: %llu of %llu cached objects were corrupt and "
			 "were dropped", (unsigned long long)v.bad,
			 (unsigned long long)v.checked);
	if (fclose(v.f)) {
		free(out);
		return NULL;
	}
	return out;
}
