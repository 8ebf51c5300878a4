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

/* The keys of the daemon's stats, by the ids of fs/stats.def: K(reads_total)
 * is "reads.total", and a key that is not a row does not compile. */
enum stat_id {
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help)        \
	STAT_##id,
#include "fs/stats.def"
#undef HINTFS_STAT
	STAT_N
};

static const char *const stat_keys[STAT_N] = {
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help)        \
	[STAT_##id] = path,
#include "fs/stats.def"
#undef HINTFS_STAT
};

#define K(id) (stat_keys[STAT_##id])

static uint64_t u64(const struct json *st, const char *path)
{
	double d = json_num(st, path, 0);

	return d > 0 ? (uint64_t)d : 0;
}

static double pct(double part, double whole)
{
	return whole > 0 ? 100.0 * part / whole : 0;
}

/* ---- the table ------------------------------------------------------------
 */

/* Buffers for the numbers of one printf: each argument needs its own. */
#define NB	10
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
	char x[3][48];
	bool first = true;

	if (!f || f->type != JSON_OBJECT)
		return;
	printf("  %-9s %s:", "fuse", path ? path : "?");
	for (const struct json *c = f->child; c; c = c->next) {
		if (c->type != JSON_NUMBER || c->num <= 0)
			continue;
		printf("%s %s %s", first ? "" : ",", c->key,
		       N(0, (uint64_t)c->num));
		first = false;
	}
	printf("%s\n", first ? " no request" : "");
	if (path && !strcmp(path, "passthrough"))
		printf("  %-9s %s opens read by the kernel, %s by the daemon, "
		       "%s refused\n",
		       "", N(0, u64(st, K(passthrough_opens))),
		       N(1, u64(st, K(passthrough_read_opens))),
		       N(2, u64(st, K(passthrough_failures))));
}

static void show_table(const struct ctl_mount *m, const struct json *st)
{
	char x[NB][48];
	const char *src = json_str(st, "source"),
		   *ver = json_str(st, "version");
	double now = (double)time(NULL);

	printf("hintfs %s: %s on %s\n", ver ? ver : "?", src ? src : "?",
	       m->path);

	if (json_get(st, "listing")) {
		double saved = json_num(st, K(listing_saved_at), 0);

		printf("  %-9s %s files, %s", "listing",
		       N(0, u64(st, K(listing_files))),
		       B(1, json_num(st, K(listing_bytes), 0)));
		if (!is_true(st, "listing.from_cache"))
			printf(
			    "; listed in %s",
			    fmt_seconds(json_num(st, K(listing_ms), 0) / 1000,
					x[0], sizeof(x[0])));
		else if (saved > 0)
			printf("; from the cache, listed %s ago",
			       fmt_age(now - saved, x[0], sizeof(x[0])));
		else
			printf("; from the cache");
		printf("; %s keys skipped, %s files hidden\n",
		       N(0, u64(st, K(listing_skipped_keys))),
		       N(1, u64(st, K(listing_hidden_files))));
	}
	if (json_get(st, "cache")) {
		double cap = json_num(st, K(cache_capacity), 0);
		double bytes = json_num(st, K(cache_bytes), 0);
		const char *dir = json_str(st, "cache.dir");

		printf("  %-9s %s objects, %s of %s (%.1f%%) in %s\n", "cache",
		       N(0, u64(st, K(cache_objects))), B(1, bytes), B(2, cap),
		       pct(bytes, cap), dir ? dir : "?");
		printf("  %-9s %s hits, %s misses, %s evictions, %s corrupt, "
		       "%s write errors, %s read errors\n",
		       "", N(0, u64(st, K(cache_hits))),
		       N(1, u64(st, K(cache_misses))),
		       N(2, u64(st, K(cache_evictions))),
		       N(3, u64(st, K(cache_corrupt))),
		       N(4, u64(st, K(cache_write_errors))),
		       N(5, u64(st, K(cache_read_errors))));
	}
	if (json_get(st, "reads"))
		printf(
		    "  %-9s %s, %.1f%% from the cache; %s joined a prefetch, "
		    "%s fetched on demand, %s read through, %s failed\n",
		    "reads", N(0, u64(st, K(reads_total))),
		    pct(json_num(st, K(reads_cache_hits), 0),
			json_num(st, K(reads_total), 0)),
		    N(1, u64(st, K(reads_prefetch_joins))),
		    N(2, u64(st, K(reads_demand_fetches))),
		    N(3, u64(st, K(reads_read_through))),
		    N(4, u64(st, K(reads_failed))));
	if (json_get(st, "stalls"))
		printf("  %-9s %s reads waited on the network, %s in all\n",
		       "stalls", N(0, u64(st, K(stalls_count))),
		       fmt_seconds(json_num(st, K(stalls_seconds), 0), x[1],
				   sizeof(x[1])));
	if (json_get(st, "requests")) {
		printf("  %-9s %s GET (%s), %s LIST, %s retries; %s objects "
		       "prefetched, %s not cached\n",
		       "requests", N(0, u64(st, K(requests_get))),
		       B(1, json_num(st, K(requests_bytes), 0)),
		       N(2, u64(st, K(requests_list))),
		       N(3, u64(st, K(requests_retries))),
		       N(4, u64(st, K(requests_prefetched_objects))),
		       N(5, u64(st, K(requests_not_cached))));
		printf("  %-9s %s in flight, target %s of cap %s", "",
		       N(0, u64(st, K(requests_in_flight))),
		       N(1, u64(st, K(requests_in_flight_limit))),
		       N(5, u64(st, K(requests_in_flight_cap))));
		if (json_get(st, K(requests_latency_ms)))
			printf(" (%s GET/s, %.1f ms each)",
			       N(6, u64(st, K(requests_rate))),
			       json_num(st, K(requests_latency_ms), 0));
		if (json_get(st, K(requests_fetch_mem_limit)))
			printf(
			    "; fetch memory %s of %s (peak %s)",
			    B(2, json_num(st, K(requests_fetch_mem), 0)),
			    B(3, json_num(st, K(requests_fetch_mem_limit), 0)),
			    B(4, json_num(st, K(requests_fetch_mem_peak), 0)));
		printf("\n");
	}
	if (json_get(st, "tier")) {
		printf("  %-9s %s GET: %s hits, %s misses, %s mismatches, "
		       "%s fallbacks, %s hedged (%s over budget)\n",
		       "tier", N(0, u64(st, K(tier_gets))),
		       N(1, u64(st, K(tier_hits))),
		       N(2, u64(st, K(tier_misses))),
		       N(3, u64(st, K(tier_mismatches))),
		       N(4, u64(st, K(tier_fallbacks))),
		       N(5, u64(st, K(tier_hedged))),
		       N(6, u64(st, K(tier_hedge_denied))));
		printf("  %-9s %s PUT, %s failed, %s dropped, %s pending; "
		       "%s bypassed, breaker opened %s times\n",
		       "", N(0, u64(st, K(tier_puts))),
		       N(1, u64(st, K(tier_put_errors))),
		       N(2, u64(st, K(tier_put_dropped))),
		       N(3, u64(st, K(tier_put_pending))),
		       N(4, u64(st, K(tier_bypassed))),
		       N(5, u64(st, K(tier_breaker_opens))));
	}
	if (json_get(st, "errors"))
		printf("  %-9s %s slowdown, %s server, %s network, %s stale, "
		       "%s other\n",
		       "errors", N(0, u64(st, K(errors_slowdown))),
		       N(1, u64(st, K(errors_server))),
		       N(2, u64(st, K(errors_network))),
		       N(3, u64(st, K(errors_stale))),
		       N(4, u64(st, K(errors_other))));
	if (json_get(st, "hint")) {
		double len = json_num(st, K(hint_length), 0);
		double pos = json_num(st, K(hint_position), 0);
		double epoch = json_num(st, K(hint_epoch), -1);
		uint64_t refused = u64(st, K(hint_last_unknown)) +
				   u64(st, K(hint_last_too_long)) +
				   u64(st, "hint.last.bad_utf8") +
				   u64(st, K(hint_last_dotdot)) +
				   u64(st, K(hint_last_outside)) +
				   u64(st, K(hint_last_bad_range));

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
		       N(0, u64(st, K(hint_queued))),
		       N(1, u64(st, K(hint_received))),
		       N(2, u64(st, K(hint_rejected))));
		for (const struct json *s =
			 json_get(st, "hint.streams")
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
				       N(0, (uint64_t)spos),
				       N(1, (uint64_t)slen), pct(spos, slen));
			} else {
				printf("no hint");
			}
			printf("; %s queued; %s stalls (%.1f s)",
			       N(2, u64(s, "queued")), N(3, u64(s, "stalls")),
			       json_num(s, "stall_seconds", 0));
			if (json_num(s, "owner", 0) > 0)
				printf("; pid %.0f", json_num(s, "owner", 0));
			printf("; idle %.0f s\n",
			       json_num(s, "idle_seconds", 0));
		}
		if (u64(st, K(hint_reclaimed_exited)) ||
		    u64(st, K(hint_reclaimed_idle))) {
			const struct json *r =
			    json_get(st, "hint.reclaimed.recent");

			printf(
			    "  %-9s reclaimed: %s whose writer ended, %s idle "
			    "10 minutes; latest:",
			    "", N(0, u64(st, K(hint_reclaimed_exited))),
			    N(1, u64(st, K(hint_reclaimed_idle))));
			for (r = r ? r->child : NULL; r; r = r->next) {
				const char *name = json_str(r, "name");
				const char *why = json_str(r, "why");

				printf(" %s (%s, %s unread)", name ? name : "?",
				       why ? why : "?", N(2, u64(r, "unread")));
			}
			printf("\n");
		}
		if (refused)
			printf(
			    "  %-9s last: %s entries, %s lines refused (%s not "
			    "in the listing, %s too long, %s not UTF-8, %s "
			    "with "
			    "'..', %s outside the mount, %s bad ranges)\n",
			    "", N(0, u64(st, K(hint_last_entries))),
			    N(1, refused), N(2, u64(st, K(hint_last_unknown))),
			    N(3, u64(st, K(hint_last_too_long))),
			    N(4, u64(st, "hint.last.bad_utf8")),
			    N(5, u64(st, K(hint_last_dotdot))),
			    N(6, u64(st, K(hint_last_outside))),
			    N(7, u64(st, K(hint_last_bad_range))));
	}
	if (json_get(st, "warm"))
		printf("  %-9s %s objects asked for, %s cached, %s failed\n",
		       "warm", N(0, u64(st, K(warm_queued))),
		       N(1, u64(st, K(warm_done))),
		       N(2, u64(st, K(warm_failed))));
	show_fuse(st);
}

#undef N
#undef B

/* ---- Prometheus ------------------------------------------------------------
 */

enum metric_type { STAT_GAUGE, STAT_COUNTER };

/* One stats key (a row of fs/stats.def) as one sample. Rows of one metric
 * name are adjacent, so that its HELP and TYPE lines are written once. */
static const struct metric {
	const char *key;  /* dotted stats key */
	const char *name; /* metric name */
	enum metric_type type;
	const char *label; /* extra label, e.g. kind="get", or NULL */
	double scale;	   /* value x scale (ms -> s); 0: as written */
	const char *help;  /* the first row of a name: the metric's */
} metrics[] = {
#define HINTFS_STAT(id, path, type, fmt, val, prom, label, scale, help)        \
	[STAT_##id] = {path, prom, type, label, scale, help},
#include "fs/stats.def"
#undef HINTFS_STAT
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
	      "# TYPE hintfs_up gauge\nhintfs_up{mount=",
	      f);
	prom_label(f, mount);
	fprintf(f, "} %d\n", up);
}

static void show_prometheus(FILE *f, const struct ctl_mount *m,
			    const struct json *st)
{
	const char *said = NULL;
	const char *src = json_str(st, "source"),
		   *ver = json_str(st, "version");

	prom_up(f, m->path, 1);
	fputs("# HELP hintfs_info What is mounted, as labels.\n"
	      "# TYPE hintfs_info gauge\nhintfs_info{mount=",
	      f);
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
			fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", mt->name,
				mt->help, mt->name,
				mt->type == STAT_COUNTER ? "counter" : "gauge");
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

/* ---- the live line ----------------------------------------------------------
 */

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
	double hl = json_num(st, K(hint_length), 0),
	       hp = json_num(st, K(hint_position), 0);
	double epoch = json_num(st, K(hint_epoch), -1);
	double reads = json_num(st, K(reads_total), 0);
	double hits = json_num(st, K(reads_cache_hits), 0);
	double gets = json_num(st, K(requests_get), 0);
	double bytes = json_num(st, K(requests_bytes), 0);
	double d_reads = reads, d_hits = hits, gps = 0, bps = 0;
	int bar_w = width >= 100 ? 30 : width >= 80 ? 20 : 10;
	char head[32];

	if (prev && dt > 0) {
		d_reads = reads - json_num(prev, K(reads_total), 0);
		d_hits = hits - json_num(prev, K(reads_cache_hits), 0);
		gps = (gets - json_num(prev, K(requests_get), 0)) / dt;
		bps = (bytes - json_num(prev, K(requests_bytes), 0)) / dt;
		if (d_reads <= 0) { /* idle: show the mount's overall rate */
			d_reads = reads;
			d_hits = hits;
		}
	}
	if (hl > 0 && epoch >= 0)
		snprintf(head, sizeof(head), "epoch %.0f", epoch);
	else
		snprintf(head, sizeof(head), hl > 0 ? "hint" : "no hint");
	snprintf(out, len,
		 "%s %s %5.1f%% %s/%s | hit %5.1f%% | stalled %s | "
		 "%s GET/s %s/s | %s in flight",
		 head, fmt_bar(hl > 0 ? hp / hl : 0, bar_w, bar, sizeof(bar)),
		 pct(hp, hl), fmt_count((uint64_t)hp, a, sizeof(a)),
		 fmt_count((uint64_t)hl, b, sizeof(b)), pct(d_hits, d_reads),
		 fmt_seconds(json_num(st, K(stalls_seconds), 0), c, sizeof(c)),
		 fmt_count((uint64_t)(gps + 0.5), d, sizeof(d)),
		 fmt_bytes(bps, rate, sizeof(rate)),
		 fmt_count(u64(st, K(requests_in_flight)), e, sizeof(e)));
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

/* ---- the commands -----------------------------------------------------------
 */

int cmd_stats(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"json", no_argument, NULL, 'j'},
	    {"prometheus", no_argument, NULL, 'p'},
	    {"output", required_argument, NULL, 'o'},
	    {"watch", no_argument, NULL, 'w'},
	    {"interval", required_argument, NULL, 'i'},
	    {"count", required_argument, NULL, 'n'},
	    {"help", no_argument, NULL, 'h'},
	    {0}};
	int mode = 0, c, rc;
	const char *output = NULL;
	double interval = 1;
	long count = -1;
	struct ctl_mount m;
	struct json *st;

	while ((c = getopt_long(argc, argv, "jpo:wi:n:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
		case 'p':
		case 'w':
			if (mode && mode != c) {
				ctl_err(
				    "stats: --json, --prometheus and --watch "
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
				ctl_err(
				    "stats: --interval %s: expected seconds "
				    "such as 0.5 or 2",
				    optarg);
				return CTL_USAGE;
			}
			break;
		case 'n': {
			char *end;

			errno = 0;
			count = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || count < 1) {
				ctl_err("stats: --count %s: expected a number "
					"of updates, 1 or more",
					optarg);
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
		ctl_err(
		    "stats: expected one MOUNT; see hintfs-ctl stats --help");
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
			ctl_err("%s/%s/stats: %s", m.path, CTL_DIR,
				strerror(-rc));
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
	exp = json_num(st, K(credentials_expires), 0);
	n = json_num(st, K(credentials_refreshes), 0);
	fails = json_num(st, K(credentials_refresh_failures), 0);
	printf("%-14s %s, key ...%s", "credentials", prov ? prov : "?",
	       tail ? tail : "?");
	if (exp > 0) {
		time_t tt = (time_t)exp;
		char when[64];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z",
			 localtime(&tt));
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
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
					     {0}};
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
	cap = json_num(st, K(cache_capacity), 0);
	bytes = json_num(st, K(cache_bytes), 0);
	saved = json_num(st, K(listing_saved_at), 0);
	mounted = json_num(st, K(listing_mounted_at), 0);

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
	       pct(bytes, cap),
	       fmt_count(u64(st, K(cache_objects)), c, sizeof(c)));
	printf("%-14s %s files, %s\n", "listing",
	       fmt_count(u64(st, K(listing_files)), a, sizeof(a)),
	       fmt_bytes(json_num(st, K(listing_bytes), 0), b, sizeof(b)));
	if (saved > 0 || mounted > 0) {
		const struct json *fc = json_get(st, "listing.from_cache");
		double t = saved > 0 ? saved : mounted;
		time_t tt = (time_t)t;
		char when[64];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z",
			 localtime(&tt));
		printf("%-14s %s (listed %s)%s\n", "listing age",
		       fmt_age(now - t, a, sizeof(a)), when,
		       fc && fc->type == JSON_TRUE
			   ? "; this mount uses the "
			     "listing saved in the cache"
			   : "");
	}
	if (mounted > 0) {
		time_t tt = (time_t)mounted;
		char when[64];

		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z",
			 localtime(&tt));
		printf("%-14s %s (%s ago)\n", "mounted", when,
		       fmt_age(now - mounted, a, sizeof(a)));
	}
	print_creds(st, now);
	json_free(st);
	ctl_mount_fini(&m);
	return CTL_OK;
}
