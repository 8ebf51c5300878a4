/*
 * mount-tools/ctl/stats.c - `hintfs-ctl stats` and `hintfs-ctl info`: the
 * daemon's counters (.hintfs/stats) as a table, as JSON, as Prometheus
 * text, and as a live line.
 *
 * Owns the mapping from the stats keys to what people and monitoring see.
 * Invariant: a key the daemon does not write (an older or newer daemon) is
 * left out of every output, never shown as a made-up zero, so one
 * hintfs-ctl works across versions.
 */
#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

static uint64_t u64(const struct json *st, const char *path)
{
	double d = json_num(st, path, 0);

	return d > 0 ? (uint64_t)d : 0;
}

static double pct(double part, double whole)
{
	return whole > 0 ? 100.0 * part / whole : 0;
}

/* ---- the table ------------------------------------------------------------ */

/* Buffers for the numbers of one printf: each argument needs its own. */
#define NB 10
#define N(i, v) fmt_count((v), x[i], sizeof(x[i]))
#define B(i, v) fmt_bytes((v), x[i], sizeof(x[i]))

static bool is_true(const struct json *st, const char *key)
{
	const struct json *v = json_get(st, key);

	return v && v->type == JSON_TRUE;
}

/* "fuse": the data path and the requests the kernel sent, by kind (those
 * it never sent left out), so requests per file are read off here. */
static void show_fuse(const struct json *st)
{
	const struct json *f = json_get(st, "fuse");
	const char *path = json_str(st, "data_path");
	char x[48];
	bool first = true;

	if (!f || f->type != JSON_OBJECT)
		return;
	printf("  %-9s %s:", "fuse", path ? path : "?");
	for (const struct json *c = f->child; c; c = c->next) {
		if (c->type != JSON_NUMBER || c->num <= 0)
			continue;
		printf("%s %s %s", first ? "" : ",", c->key,
		       fmt_count((uint64_t)c->num, x, sizeof(x)));
		first = false;
	}
	printf("%s\n", first ? " no request" : "");
}

static void show_table(const struct ctl_mount *m, const struct json *st)
{
	char x[NB][48];
	const char *src = json_str(st, "source"), *ver = json_str(st, "version");
	double now = (double)time(NULL);

	printf("hintfs %s: %s on %s\n", ver ? ver : "?", src ? src : "?", m->path);

	if (json_get(st, "listing")) {
		double saved = json_num(st, "listing.saved_at", 0);

		printf("  %-9s %s files, %s", "listing",
		       N(0, u64(st, "listing.files")),
		       B(1, json_num(st, "listing.bytes", 0)));
		if (!is_true(st, "listing.from_cache"))
			printf("; listed in %s",
			       fmt_seconds(json_num(st, "listing.ms", 0) / 1000,
					   x[0], sizeof(x[0])));
		else if (saved > 0)
			printf("; from the cache, listed %s ago",
			       fmt_age(now - saved, x[0], sizeof(x[0])));
		else
			printf("; from the cache");
		printf("; %s keys skipped, %s files hidden\n",
		       N(0, u64(st, "listing.skipped_keys")),
		       N(1, u64(st, "listing.hidden_files")));
	}
	if (json_get(st, "cache")) {
		double cap = json_num(st, "cache.capacity", 0);
		double bytes = json_num(st, "cache.bytes", 0);
		const char *dir = json_str(st, "cache.dir");

		printf("  %-9s %s objects, %s of %s (%.1f%%) in %s\n", "cache",
		       N(0, u64(st, "cache.objects")), B(1, bytes), B(2, cap),
		       pct(bytes, cap), dir ? dir : "?");
		printf("  %-9s %s hits, %s misses, %s evictions, %s corrupt, "
		       "%s write errors, %s read errors\n", "",
		       N(0, u64(st, "cache.hits")), N(1, u64(st, "cache.misses")),
		       N(2, u64(st, "cache.evictions")),
		       N(3, u64(st, "cache.corrupt")),
		       N(4, u64(st, "cache.write_errors")),
		       N(5, u64(st, "cache.read_errors")));
	}
	if (json_get(st, "reads"))
		printf("  %-9s %s, %.1f%% from the cache; %s joined a prefetch, "
		       "%s fetched on demand, %s read through, %s failed\n",
		       "reads", N(0, u64(st, "reads.total")),
		       pct(json_num(st, "reads.cache_hits", 0),
			   json_num(st, "reads.total", 0)),
		       N(1, u64(st, "reads.prefetch_joins")),
		       N(2, u64(st, "reads.demand_fetches")),
		       N(3, u64(st, "reads.read_through")),
		       N(4, u64(st, "reads.failed")));
	if (json_get(st, "stalls"))
		printf("  %-9s %s reads waited on the network, %s in all\n",
		       "stalls", N(0, u64(st, "stalls.count")),
		       fmt_seconds(json_num(st, "stalls.seconds", 0), x[1],
				   sizeof(x[1])));
	if (json_get(st, "requests")) {
		printf("  %-9s %s GET (%s), %s LIST, %s retries; %s objects "
		       "prefetched, %s not cached\n", "requests",
		       N(0, u64(st, "requests.get")),
		       B(1, json_num(st, "requests.bytes", 0)),
		       N(2, u64(st, "requests.list")),
		       N(3, u64(st, "requests.retries")),
		       N(4, u64(st, "requests.prefetched_objects")),
		       N(5, u64(st, "requests.not_cached")));
		printf("  %-9s %s in flight of at most %s", "",
		       N(0, u64(st, "requests.in_flight")),
		       N(1, u64(st, "requests.in_flight_limit")));
		if (json_get(st, "requests.fetch_mem_limit"))
			printf("; fetch memory %s of %s (peak %s)",
			       B(2, json_num(st, "requests.fetch_mem", 0)),
			       B(3, json_num(st, "requests.fetch_mem_limit", 0)),
			       B(4, json_num(st, "requests.fetch_mem_peak", 0)));
		printf("\n");
	}
	if (json_get(st, "tier")) {
		printf("  %-9s %s GET: %s hits, %s misses, %s mismatches, "
		       "%s fallbacks, %s hedged (%s over budget)\n", "tier",
		       N(0, u64(st, "tier.gets")), N(1, u64(st, "tier.hits")),
		       N(2, u64(st, "tier.misses")),
		       N(3, u64(st, "tier.mismatches")),
		       N(4, u64(st, "tier.fallbacks")),
		       N(5, u64(st, "tier.hedged")),
		       N(6, u64(st, "tier.hedge_denied")));
		printf("  %-9s %s PUT, %s failed, %s dropped, %s pending; "
		       "%s bypassed, breaker opened %s times\n", "",
		       N(0, u64(st, "tier.puts")),
		       N(1, u64(st, "tier.put_errors")),
		       N(2, u64(st, "tier.put_dropped")),
		       N(3, u64(st, "tier.put_pending")),
		       N(4, u64(st, "tier.bypassed")),
		       N(5, u64(st, "tier.breaker_opens")));
	}
	if (json_get(st, "errors"))
		printf("  %-9s %s slowdown, %s server, %s network, %s stale, "
		       "%s other\n", "errors",
		       N(0, u64(st, "errors.slowdown")),
		       N(1, u64(st, "errors.server")),
		       N(2, u64(st, "errors.network")),
		       N(3, u64(st, "errors.stale")),
		       N(4, u64(st, "errors.other")));
	if (json_get(st, "hint")) {
		double len = json_num(st, "hint.length", 0);
		double pos = json_num(st, "hint.position", 0);
		double epoch = json_num(st, "hint.epoch", -1);
		uint64_t refused = u64(st, "hint.last.unknown") +
				   u64(st, "hint.last.too_long") +
				   u64(st, "hint.last.bad_utf8") +
				   u64(st, "hint.last.dotdot") +
				   u64(st, "hint.last.outside");

		printf("  %-9s ", "hint");
		if (len > 0) {
			if (epoch >= 0)
				printf("epoch %.0f: ", epoch);
			printf("%s of %s read %s %.1f%%", N(0, (uint64_t)pos),
			       N(1, (uint64_t)len),
			       fmt_bar(pos / len, 20, x[2], sizeof(x[2])),
			       pct(pos, len));
		} else {
			printf("none in progress");
		}
		printf("; %s queued; %s received, %s rejected\n",
		       N(0, u64(st, "hint.queued")), N(1, u64(st, "hint.received")),
		       N(2, u64(st, "hint.rejected")));
		for (const struct json *s = json_get(st, "hint.streams")
						    ? json_get(st, "hint.streams")->child
						    : NULL;
		     s; s = s->next) {
			const char *name = json_str(s, "name");
			double slen = json_num(s, "length", 0);
			double spos = json_num(s, "position", 0);
			double sep = json_num(s, "epoch", -1);

			printf("  %-9s %-12s ", "", name ? name : "?");
			if (slen > 0) {
				if (sep >= 0)
					printf("epoch %.0f: ", sep);
				printf("%s of %s read %.1f%%",
				       N(0, (uint64_t)spos), N(1, (uint64_t)slen),
				       pct(spos, slen));
			} else {
				printf("no hint");
			}
			printf("; %s queued; %s stalls (%.1f s)",
			       N(2, u64(s, "queued")), N(3, u64(s, "stalls")),
			       json_num(s, "stall_seconds", 0));
			if (json_num(s, "owner", 0) > 0)
				printf("; pid %.0f", json_num(s, "owner", 0));
			printf("; idle %.0f s\n", json_num(s, "idle_seconds", 0));
		}
		if (u64(st, "hint.reclaimed.exited") ||
		    u64(st, "hint.reclaimed.idle")) {
			const struct json *r = json_get(st, "hint.reclaimed.recent");

			printf("  %-9s reclaimed: %s whose writer ended, %s idle "
			       "10 minutes; latest:", "",
			       N(0, u64(st, "hint.reclaimed.exited")),
			       N(1, u64(st, "hint.reclaimed.idle")));
			for (r = r ? r->child : NULL; r; r = r->next) {
				const char *name = json_str(r, "name");
				const char *why = json_str(r, "why");

				printf(" %s (%s, %s unread)", name ? name : "?",
				       why ? why : "?", N(2, u64(r, "unread")));
			}
			printf("\n");
		}
		if (refused)
			printf("  %-9s last: %s entries, %s lines refused (%s not "
			       "in the listing, %s too long, %s not UTF-8, %s with "
			       "'..', %s outside the mount)\n", "",
			       N(0, u64(st, "hint.last.entries")), N(1, refused),
			       N(2, u64(st, "hint.last.unknown")),
			       N(3, u64(st, "hint.last.too_long")),
			       N(4, u64(st, "hint.last.bad_utf8")),
			       N(5, u64(st, "hint.last.dotdot")),
			       N(6, u64(st, "hint.last.outside")));
	}
	if (json_get(st, "warm"))
		printf("  %-9s %s objects asked for, %s cached, %s failed\n", "warm",
		       N(0, u64(st, "warm.queued")), N(1, u64(st, "warm.done")),
		       N(2, u64(st, "warm.failed")));
	show_fuse(st);
}

#undef N
#undef B

/* ---- Prometheus ------------------------------------------------------------ */

enum metric_type { GAUGE, COUNTER };

/* One stats key as one sample. Rows of one metric name are adjacent, so
 * that its HELP and TYPE lines are written once. */
static const struct metric {
	const char *key;    /* dotted stats key */
	const char *name;   /* metric name */
	enum metric_type type;
	const char *label;  /* extra label, e.g. kind="get", or NULL */
	double scale;       /* value x scale (ms -> s); 0: as written */
	const char *help;
} metrics[] = {
	{ "listing.files", "hintfs_listing_files", GAUGE, NULL, 0,
	  "Files in the listing the mount shows." },
	{ "listing.bytes", "hintfs_listing_bytes", GAUGE, NULL, 0,
	  "Bytes of the files in the listing." },
	{ "listing.skipped_keys", "hintfs_listing_skipped_keys", GAUGE, NULL, 0,
	  "Keys left out of the listing because they cannot be paths." },
	{ "listing.hidden_files", "hintfs_listing_hidden_files", GAUGE, NULL, 0,
	  "Files hidden by a directory of the same name." },
	{ "listing.ms", "hintfs_listing_duration_seconds", GAUGE, NULL, 0.001,
	  "Time the listing at mount took." },
	{ "listing.mounted_at", "hintfs_mounted_timestamp_seconds", GAUGE, NULL, 0,
	  "When the file system was mounted (Unix time)." },
	{ "listing.saved_at", "hintfs_listing_saved_timestamp_seconds", GAUGE,
	  NULL, 0, "When the saved listing was taken (Unix time)." },
	{ "cache.objects", "hintfs_cache_objects", GAUGE, NULL, 0,
	  "Objects in the local cache." },
	{ "cache.bytes", "hintfs_cache_bytes", GAUGE, NULL, 0,
	  "Bytes in the local cache." },
	{ "cache.capacity", "hintfs_cache_capacity_bytes", GAUGE, NULL, 0,
	  "Capacity of the local cache." },
	{ "cache.hits", "hintfs_cache_hits_total", COUNTER, NULL, 0,
	  "Lookups the local cache answered." },
	{ "cache.misses", "hintfs_cache_misses_total", COUNTER, NULL, 0,
	  "Lookups the local cache did not answer." },
	{ "cache.evictions", "hintfs_cache_evictions_total", COUNTER, NULL, 0,
	  "Objects evicted from the local cache." },
	{ "cache.corrupt", "hintfs_cache_corrupt_total", COUNTER, NULL, 0,
	  "Cached blobs found corrupt and dropped." },
	{ "cache.write_errors", "hintfs_cache_write_errors_total", COUNTER, NULL,
	  0, "Failed writes into the local cache." },
	{ "cache.read_errors", "hintfs_cache_read_errors_total", COUNTER, NULL,
	  0, "Failed reads of the local cache, served by the server." },
	{ "reads.total", "hintfs_reads_total", COUNTER, NULL, 0,
	  "Reads of dataset files." },
	{ "reads.cache_hits", "hintfs_read_cache_hits_total", COUNTER, NULL, 0,
	  "Reads served from the local cache." },
	{ "reads.prefetch_joins", "hintfs_read_prefetch_joins_total", COUNTER,
	  NULL, 0, "Reads that waited for a prefetch already in flight." },
	{ "reads.demand_fetches", "hintfs_read_demand_fetches_total", COUNTER,
	  NULL, 0, "Reads that started a fetch of their own." },
	{ "reads.read_through", "hintfs_read_through_total", COUNTER, NULL, 0,
	  "Reads served from the server without caching." },
	{ "reads.failed", "hintfs_read_failures_total", COUNTER, NULL, 0,
	  "Reads that returned an error." },
	{ "stalls.count", "hintfs_stalls_total", COUNTER, NULL, 0,
	  "Reads that had to wait on the network." },
	{ "stalls.seconds", "hintfs_stall_seconds_total", COUNTER, NULL, 0,
	  "Time reads spent waiting on the network." },
	{ "requests.get", "hintfs_s3_requests_total", COUNTER, "kind=\"get\"", 0,
	  "Requests sent to the S3 server." },
	{ "requests.list", "hintfs_s3_requests_total", COUNTER, "kind=\"list\"",
	  0, NULL },
	{ "requests.bytes", "hintfs_s3_received_bytes_total", COUNTER, NULL, 0,
	  "Object bytes received from the S3 server." },
	{ "requests.retries", "hintfs_s3_retries_total", COUNTER, NULL, 0,
	  "Requests retried." },
	{ "requests.prefetched_objects", "hintfs_prefetched_objects_total",
	  COUNTER, NULL, 0, "Objects fetched ahead of their read." },
	{ "requests.in_flight", "hintfs_s3_requests_in_flight", GAUGE, NULL, 0,
	  "Requests in flight now." },
	{ "requests.in_flight_limit", "hintfs_s3_requests_in_flight_limit", GAUGE,
	  NULL, 0, "Most requests allowed in flight at once." },
	{ "requests.not_cached", "hintfs_objects_not_cached_total", COUNTER, NULL,
	  0, "Fetched objects that could not be stored in the cache." },
	{ "requests.fetch_mem", "hintfs_fetch_memory_bytes", GAUGE, NULL, 0,
	  "Memory held by objects in flight now." },
	{ "requests.fetch_mem_peak", "hintfs_fetch_memory_peak_bytes", GAUGE,
	  NULL, 0, "The most memory held by objects in flight at once." },
	{ "requests.fetch_mem_limit", "hintfs_fetch_memory_limit_bytes", GAUGE,
	  NULL, 0, "The bound on memory held by objects in flight." },
	{ "errors.slowdown", "hintfs_s3_errors_total", COUNTER,
	  "kind=\"slowdown\"", 0, "Errors from the S3 server, by kind." },
	{ "errors.server", "hintfs_s3_errors_total", COUNTER, "kind=\"server\"",
	  0, NULL },
	{ "errors.network", "hintfs_s3_errors_total", COUNTER, "kind=\"network\"",
	  0, NULL },
	{ "errors.stale", "hintfs_s3_errors_total", COUNTER, "kind=\"stale\"", 0,
	  NULL },
	{ "errors.other", "hintfs_s3_errors_total", COUNTER, "kind=\"other\"", 0,
	  NULL },
	{ "hint.position", "hintfs_hint_position", GAUGE, NULL, 0,
	  "Entries of the hint in progress already read." },
	{ "hint.length", "hintfs_hint_length", GAUGE, NULL, 0,
	  "Entries in the hint in progress." },
	{ "hint.epoch", "hintfs_hint_epoch", GAUGE, NULL, 0,
	  "Epoch named by the hint in progress (-1: none)." },
	{ "hint.queued", "hintfs_hints_queued", GAUGE, NULL, 0,
	  "Hints queued behind the one in progress." },
	{ "hint.received", "hintfs_hints_received_total", COUNTER, NULL, 0,
	  "Hints received." },
	{ "hint.rejected", "hintfs_hints_rejected_total", COUNTER, NULL, 0,
	  "Hints rejected as a whole." },
	{ "hint.last.entries", "hintfs_last_hint_entries", GAUGE, NULL, 0,
	  "Entries taken from the last hint." },
	{ "hint.last.unknown", "hintfs_last_hint_refused_lines", GAUGE,
	  "reason=\"unknown\"", 0, "Lines of the last hint refused, by reason." },
	{ "hint.last.too_long", "hintfs_last_hint_refused_lines", GAUGE,
	  "reason=\"too_long\"", 0, NULL },
	{ "hint.last.bad_utf8", "hintfs_last_hint_refused_lines", GAUGE,
	  "reason=\"bad_utf8\"", 0, NULL },
	{ "hint.last.dotdot", "hintfs_last_hint_refused_lines", GAUGE,
	  "reason=\"dotdot\"", 0, NULL },
	{ "hint.last.outside", "hintfs_last_hint_refused_lines", GAUGE,
	  "reason=\"outside\"", 0, NULL },
	{ "warm.queued", "hintfs_warm_objects_total", COUNTER, "state=\"queued\"",
	  0, "Objects asked for by warm, and what became of them." },
	{ "warm.done", "hintfs_warm_objects_total", COUNTER, "state=\"done\"", 0,
	  NULL },
	{ "warm.failed", "hintfs_warm_objects_total", COUNTER, "state=\"failed\"",
	  0, NULL },
};

/* A label value in the exposition format: \, " and newline escaped. */
static void prom_label(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

static void prom_up(FILE *f, const char *mount, int up)
{
	fputs("# HELP hintfs_up Whether the mount answered (1) or not (0).\n"
	      "# TYPE hintfs_up gauge\nhintfs_up{mount=", f);
	prom_label(f, mount);
	fprintf(f, "} %d\n", up);
}

static void show_prometheus(FILE *f, const struct ctl_mount *m,
			    const struct json *st)
{
	const char *said = NULL;
	const char *src = json_str(st, "source"), *ver = json_str(st, "version");

	prom_up(f, m->path, 1);
	fputs("# HELP hintfs_info What is mounted, as labels.\n"
	      "# TYPE hintfs_info gauge\nhintfs_info{mount=", f);
	prom_label(f, m->path);
	fputs(",source=", f);
	prom_label(f, src ? src : "");
	fputs(",version=", f);
	prom_label(f, ver ? ver : "");
	fputs("} 1\n", f);

	for (size_t i = 0; i < sizeof(metrics) / sizeof(metrics[0]); i++) {
		const struct metric *mt = &metrics[i];
		const struct json *v = json_get(st, mt->key);

		if (!v || v->type != JSON_NUMBER)
			continue;
		if (!said || strcmp(said, mt->name)) {
			const char *help = mt->help;

			/* A later row of the same name has no help. */
			for (size_t j = i; !help && j > 0; j--)
				if (!strcmp(metrics[j - 1].name, mt->name))
					help = metrics[j - 1].help;
			fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", mt->name,
				help ? help : "", mt->name,
				mt->type == COUNTER ? "counter" : "gauge");
			said = mt->name;
		}
		fprintf(f, "%s{mount=", mt->name);
		prom_label(f, m->path);
		if (mt->label)
			fprintf(f, ",%s", mt->label);
		if (mt->scale)
			fprintf(f, "} %.9g\n", v->num * mt->scale);
		else
			fprintf(f, "} %s\n", v->str);
	}
}

/* Writes the exposition to @path atomically: node_exporter must never
 * read half a file. On a mount that did not answer, says hintfs_up 0. */
static int write_prometheus(const char *path, const struct ctl_mount *m,
			    const char *mount_arg, const struct json *st)
{
	char tmp[4200];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >=
	    (int)sizeof(tmp)) {
		ctl_err("'%s': path too long", path);
		return CTL_FAIL;
	}
	f = fopen(tmp, "w");
	if (!f) {
		ctl_err("'%s': %s", tmp, strerror(errno));
		return CTL_FAIL;
	}
	if (st)
		show_prometheus(f, m, st);
	else
		prom_up(f, mount_arg, 0);
	if (fflush(f) || fsync(fileno(f)) || ferror(f)) {
		ctl_err("'%s': %s", tmp, strerror(errno));
		fclose(f);
		unlink(tmp);
		return CTL_FAIL;
	}
	fclose(f);
	if (rename(tmp, path) < 0) {
		ctl_err("rename to '%s': %s", path, strerror(errno));
		unlink(tmp);
		return CTL_FAIL;
	}
	return st ? CTL_OK : CTL_FAIL;
}

/* ---- the live line ---------------------------------------------------------- */

static int term_width(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 40)
		return ws.ws_col;
	return 100;
}

/* One line of --watch from two snapshots @dt seconds apart (@prev may be
 * NULL: rates over the whole mount are unknown, shown as zero). */
static void watch_line(char *out, size_t len, const struct json *st,
		       const struct json *prev, double dt, int width)
{
	char bar[128], rate[32], a[32], b[32], c[32], d[32], e[32];
	double hl = json_num(st, "hint.length", 0), hp = json_num(st, "hint.position", 0);
	double epoch = json_num(st, "hint.epoch", -1);
	double reads = json_num(st, "reads.total", 0);
	double hits = json_num(st, "reads.cache_hits", 0);
	double gets = json_num(st, "requests.get", 0);
	double bytes = json_num(st, "requests.bytes", 0);
	double d_reads = reads, d_hits = hits, gps = 0, bps = 0;
	int bar_w = width >= 100 ? 30 : width >= 80 ? 20 : 10;
	char head[32];

	if (prev && dt > 0) {
		d_reads = reads - json_num(prev, "reads.total", 0);
		d_hits = hits - json_num(prev, "reads.cache_hits", 0);
		gps = (gets - json_num(prev, "requests.get", 0)) / dt;
		bps = (bytes - json_num(prev, "requests.bytes", 0)) / dt;
		if (d_reads <= 0) { /* idle: show the mount's overall rate */
			d_reads = reads;
			d_hits = hits;
		}
	}
	if (hl > 0 && epoch >= 0)
		snprintf(head, sizeof(head), "epoch %.0f", epoch);
	else
		snprintf(head, sizeof(head), hl > 0 ? "hint" : "no hint");
	snprintf(out, len, "%s %s %5.1f%% %s/%s | hit %5.1f%% | stalled %s | "
		 "%s GET/s %s/s | %s in flight", head,
		 fmt_bar(hl > 0 ? hp / hl : 0, bar_w, bar, sizeof(bar)),
		 pct(hp, hl), fmt_count((uint64_t)hp, a, sizeof(a)),
		 fmt_count((uint64_t)hl, b, sizeof(b)), pct(d_hits, d_reads),
		 fmt_seconds(json_num(st, "stalls.seconds", 0), c, sizeof(c)),
		 fmt_count((uint64_t)(gps + 0.5), d, sizeof(d)),
		 fmt_bytes(bps, rate, sizeof(rate)),
		 fmt_count(u64(st, "requests.in_flight"), e, sizeof(e)));
	if ((int)strlen(out) >= width)
		out[width - 1] = '\0';
}

static int watch(const struct ctl_mount *m, double interval, long count)
{
	bool tty = isatty(STDOUT_FILENO);
	struct json *prev = NULL;
	double t_prev = 0;
	long n = 0;
	int rc = CTL_OK;

	if (count < 0)
		count = tty ? 0 : 10;
	ctl_catch_signals();
	for (;;) {
		struct json *st;
		char line[1024];
		double t = ctl_now();

		if (ctl_stats(m, &st)) {
			rc = CTL_FAIL;
			break;
		}
		watch_line(line, sizeof(line), st, prev, t - t_prev,
			   tty ? term_width() : 1000);
		if (tty)
			printf("\r%s\033[K", line);
		else
			printf("%s\n", line);
		fflush(stdout);
		json_free(prev);
		prev = st;
		t_prev = t;
		if (count && ++n >= count)
			break;
		if (!ctl_sleep(interval))
			break;
	}
	if (tty)
		putchar('\n');
	json_free(prev);
	return rc;
}

/* ---- the commands ----------------------------------------------------------- */

int cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },
		{ "output", required_argument, NULL, 'o' },
		{ "watch", no_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	int mode = 0, c, rc;
	const char *output = NULL;
	double interval = 1;
	long count = -1;
	struct ctl_mount m;
	struct json *st;

	while ((c = getopt_long(argc, argv, "jpo:wi:n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j': case 'p': case 'w':
			if (mode && mode != c) {
				ctl_err("stats: --json, --prometheus and --watch "
					"exclude each other");
				return CTL_USAGE;
			}
			mode = c;
			break;
		case 'o':
			output = optarg;
			break;
		case 'i':
			if (!ctl_parse_seconds(optarg, &interval)) {
				ctl_err("stats: --interval %s: expected seconds "
					"such as 0.5 or 2", optarg);
				return CTL_USAGE;
			}
			break;
		case 'n': {
			char *end;

			errno = 0;
			count = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || count < 1) {
				ctl_err("stats: --count %s: expected a number "
					"of updates, 1 or more", optarg);
				return CTL_USAGE;
			}
			break;
		}
		case 'h':
			fputs(ctl_help_stats, stdout);
			return CTL_OK;
		default:
			fputs(ctl_help_stats, stderr);
			return CTL_USAGE;
		}
	}
	if (optind + 1 != argc) {
		ctl_err("stats: expected one MOUNT; see hintfs-ctl stats --help");
		return CTL_USAGE;
	}
	if (output && mode != 'p') {
		ctl_err("stats: --output goes with --prometheus");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m)) {
		if (output)
			write_prometheus(output, NULL, argv[optind], NULL);
		return CTL_FAIL;
	}
	if (mode == 'w') {
		rc = watch(&m, interval, count);
		ctl_mount_fini(&m);
		return rc;
	}
	if (mode == 'j') {
		char *text, err[256];
		size_t len;

		/* As the daemon wrote it, but checked: a script reading
		 * this must be able to trust that it parses. */
		rc = ctl_read(&m, "stats", &text, &len);
		if (rc) {
			ctl_err("%s/%s/stats: %s", m.path, CTL_DIR, strerror(-rc));
			ctl_mount_fini(&m);
			return CTL_FAIL;
		}
		rc = json_parse(text, len, &st, err, sizeof(err));
		if (rc)
			ctl_err("%s/%s/stats is not valid JSON (%s)", m.path,
				CTL_DIR, err);
		else
			fwrite(text, 1, len, stdout);
		json_free(st);
		free(text);
		ctl_mount_fini(&m);
		return rc ? CTL_FAIL : CTL_OK;
	}
	if (ctl_stats(&m, &st)) {
		if (output)
			write_prometheus(output, NULL, m.path, NULL);
		ctl_mount_fini(&m);
		return CTL_FAIL;
	}
	rc = CTL_OK;
	if (mode == 'p' && output)
		rc = write_prometheus(output, &m, m.path, st);
	else if (mode == 'p')
		show_prometheus(stdout, &m, st);
	else
		show_table(&m, st);
	json_free(st);
	ctl_mount_fini(&m);
	if (fflush(stdout) || ferror(stdout))
		rc = CTL_FAIL;
	return rc;
}

/* The credentials line: provider, the key id's last four characters and
 * the expiry; the daemon never puts more of a key in its stats. */
static void print_creds(const struct json *st, double now)
{
	const struct json *c = json_get(st, "credentials");
	const char *prov, *tail;
	double exp, n, fails;
	char a[64];

	if (!c || c->type == JSON_NULL) {
		if (c)
			printf("%-14s none (anonymous requests, -o no_sign)\n",
			       "credentials");
		return;
	}
	prov = json_str(st, "credentials.provider");
	tail = json_str(st, "credentials.key_id_tail");
	exp = json_num(st, "credentials.expires", 0);
	n = json_num(st, "credentials.refreshes", 0);
	fails = json_num(st, "credentials.refresh_failures", 0);
	printf("%-14s %s, key ...%s", "credentials", prov ? prov : "?",
	       tail ? tail : "?");
	if (exp > 0) {
		time_t tt = (time_t)exp;
		char when[64];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", localtime(&tt));
		if (exp > now)
			printf(", expires %s (in %s)", when,
			       fmt_age(exp - now, a, sizeof(a)));
		else
			printf(", EXPIRED at %s", when);
	} else {
		printf(", no expiry");
	}
	printf("; refreshed %.0f times, %.0f failures\n", n, fails);
}

int cmd_info(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	char a[64], b[64], c[64];
	struct ctl_mount m;
	struct json *st;
	double now = (double)time(NULL), cap, bytes, saved, mounted;
	const char *s;
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o == 'h') {
			fputs(ctl_help_info, stdout);
			return CTL_OK;
		}
		fputs(ctl_help_info, stderr);
		return CTL_USAGE;
	}
	if (optind + 1 != argc) {
		ctl_err("info: expected one MOUNT; see hintfs-ctl info --help");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m))
		return CTL_FAIL;
	if (ctl_stats(&m, &st)) {
		ctl_mount_fini(&m);
		return CTL_FAIL;
	}
	cap = json_num(st, "cache.capacity", 0);
	bytes = json_num(st, "cache.bytes", 0);
	saved = json_num(st, "listing.saved_at", 0);
	mounted = json_num(st, "listing.mounted_at", 0);

	printf("%-14s %s\n", "mount", m.path);
	s = json_str(st, "source");
	printf("%-14s %s\n", "source", s ? s : "?");
	s = json_str(st, "version");
	printf("%-14s hintfs %s (hintfs-ctl %s)\n", "version", s ? s : "?",
	       HINTFS_VERSION);
	s = json_str(st, "data_path");
	printf("%-14s %s\n", "data path", s ? s : "?");
	s = json_str(st, "cache.dir");
	printf("%-14s %s\n", "cache dir", s ? s : "?");
	printf("%-14s %s of %s (%.1f%%), %s objects\n", "cache size",
	       fmt_bytes(bytes, a, sizeof(a)), fmt_bytes(cap, b, sizeof(b)),
	       pct(bytes, cap), fmt_count(u64(st, "cache.objects"), c, sizeof(c)));
	printf("%-14s %s files, %s\n", "listing",
	       fmt_count(u64(st, "listing.files"), a, sizeof(a)),
	       fmt_bytes(json_num(st, "listing.bytes", 0), b, sizeof(b)));
	if (saved > 0 || mounted > 0) {
		const struct json *fc = json_get(st, "listing.from_cache");
		double t = saved > 0 ? saved : mounted;
		time_t tt = (time_t)t;
		char when[64];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", localtime(&tt));
		printf("%-14s %s (listed %s)%s\n", "listing age",
		       fmt_age(now - t, a, sizeof(a)), when,
		       fc && fc->type == JSON_TRUE ? "; this mount uses the "
		       "listing saved in the cache" : "");
	}
	if (mounted > 0) {
		time_t tt = (time_t)mounted;
		char when[64];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", localtime(&tt));
		printf("%-14s %s (%s ago)\n", "mounted", when,
		       fmt_age(now - mounted, a, sizeof(a)));
	}
	print_creds(st, now);
	json_free(st);
	ctl_mount_fini(&m);
	return CTL_OK;
}
