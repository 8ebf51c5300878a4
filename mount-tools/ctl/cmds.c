/*
 * mount-tools/ctl/cmds.c - the hintfs-ctl commands that change something:
 * hint, warm, evict, relist, and verify (which drops bad blobs).
 *
 * Owns the sending side of the control protocol: each command sends its
 * whole text as one request to the mount's control socket (ctl_send(),
 * common/ctl_proto.h) and the daemon's answer is its verdict. Invariant:
 * nothing is sent when an argument is wrong (a path not in the mount,
 * an unreadable file), so a failed command changes nothing.
 */
#include "ctl.h"
#include "common/fileio.h"
#include "common/hint_format.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The daemon takes at most 256 MiB per control file (fs/ctl.c). */
#define CTL_TEXT_MAX (256u << 20)
/* warm polls the stats five times a second: often enough for a smooth
 * bar, rare enough to cost the daemon nothing. */
#define WARM_POLL_S 0.2

/* ---- input ----------------------------------------------------------------
 */

/* Reads FILE ("-": stdin) whole. Prints the error and returns -1. */
static int slurp(const char *path, char **out, size_t *len)
{
	bool in = !strcmp(path, "-");
	int fd = in ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	int rc;

	if (fd < 0) {
		ctl_err("'%s': %s", path, strerror(errno));
		return -1;
	}
	rc = read_fd_all(fd, CTL_TEXT_MAX, out, len);
	if (!in)
		close(fd);
	if (rc == -EFBIG)
		ctl_err("'%s': larger than the 256 MiB a control file takes",
			path);
	else if (rc)
		ctl_err("'%s': %s", path, strerror(-rc));
	return rc ? -1 : 0;
}

/* Sends request @line with the @n pieces of its payload; the daemon's
 * answer goes into @reply. Prints the error and returns -1. */
static int send_ctl(const struct ctl_mount *m, const char *line,
		    const char *const *bufs, const size_t *lens, size_t n,
		    char *reply, size_t reply_len)
{
	size_t total = 0, at = 0;
	char *payload;
	int rc;

	for (size_t i = 0; i < n; i++)
		total += lens[i];
	payload = malloc(total + 1);
	if (!payload) {
		ctl_err("out of memory");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(payload + at, bufs[i], lens[i]);
		at += lens[i];
	}
	rc = ctl_send(m, line, payload, total, reply, reply_len);
	free(payload);
	if (rc) {
		ctl_err("%.*s %s: %s", (int)strcspn(line, " "), line, m->path,
			reply);
		return -1;
	}
	return 0;
}

/*
 * Checks that PATH (relative to the mount, or absolute under it) exists
 * in the mount, and appends it, relative, as one line to @list. A path
 * outside the mount or absent prints an error and returns -1.
 */
static int add_path(const struct ctl_mount *m, const char *path, FILE *list)
{
	char full[PATH_MAX + 8], *real_mnt = NULL, *real = NULL;
	const char *rel = path;
	struct stat st;
	int rc = -1;

	if (strchr(path, '\n')) {
		ctl_err("'%s': a path with a newline cannot be listed", path);
		return -1;
	}
	if (path[0] == '/') {
		size_t n;

		/* Relative to the real mount point, so that a mount reached
		 * through a symbolic link matches what the daemon strips. */
		real_mnt = realpath(m->path, NULL);
		real = realpath(path, NULL);
		if (!real) {
			ctl_err("'%s': %s", path, strerror(errno));
			goto out;
		}
		n = real_mnt ? strlen(real_mnt) : 0;
		if (!real_mnt || strncmp(real, real_mnt, n) ||
		    (real[n] != '/' && real[n] != '\0' && n > 1)) {
			ctl_err("'%s' is not under the mount %s", path,
				m->path);
			goto out;
		}
		rel = real + n;
		while (*rel == '/')
			rel++;
		if (!*rel)
			rel = ".";
		rc = 0;
	} else {
		snprintf(full, sizeof(full), "%s/%s", m->path, path);
		if (stat(full, &st) < 0)
			ctl_err("'%s': %s in %s", path,
				errno == ENOENT ? "not there" : strerror(errno),
				m->path);
		else
			rc = 0;
	}
	if (!rc)
		fprintf(list, "%s\n", rel);
out:
	free(real_mnt);
	free(real);
	return rc;
}

/* Builds the list of lines from command-line paths, each checked. */
static int build_list(const struct ctl_mount *m, int n, char **paths,
		      char **out, size_t *len)
{
	FILE *f = open_memstream(out, len);
	int bad = 0;

	if (!f) {
		ctl_err("out of memory");
		return -1;
	}
	for (int i = 0; i < n; i++)
		bad |= add_path(m, paths[i], f) != 0;
	if (fclose(f)) {
		ctl_err("out of memory");
		return -1;
	}
	if (bad) {
		free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

/* --help (@ok: asked for, to stdout) or a bad option (to stderr). */
static int usage(const char *help, bool ok)
{
	fputs(help, ok ? stdout : stderr);
	return ok ? CTL_OK : CTL_USAGE;
}

/* ---- hint -----------------------------------------------------------------
 */

/*
 * The header the daemon reads (common/hint_format.h), written by
 * hint_format_header(). A header already in the text keeps its epoch and
 * stream unless --epoch or --stream is given, and its replace flag; a
 * stream name the daemon would not take is dropped, as the daemon drops it.
 * With no stream named, the header names none and the request asks for
 * own=parent: the daemon names the stream "ctl-<parent pid>" as its pid
 * namespace sees the parent, so the script or shell that runs hintfs-ctl
 * once per epoch (each run is a new process) queues its hints in one
 * stream, and two containers' scripts do not share one. Returns the
 * header's length or a -errno of hint_format_header().
 */
static int hint_header(const char *text, size_t len, long long *epoch,
		       const char **stream, bool *replace, char *hdr,
		       size_t hdr_len, size_t *skip)
{
	static char old_stream[HINT_STREAM_MAX + 1];
	static const char tag[] = HINT_TAG;
	const char *eol = memchr(text, '\n', len);
	size_t line = eol ? (size_t)(eol - text) : len;
	long long old_epoch = -1;
	bool old_replace = false;

	*skip = 0;
	if (line >= sizeof(tag) - 1 && !memcmp(text, tag, sizeof(tag) - 1) &&
	    (line == sizeof(tag) - 1 || text[sizeof(tag) - 1] == ' ' ||
	     text[sizeof(tag) - 1] == '\r')) {
		char old[128];
		const char *e;

		snprintf(old, sizeof(old), "%.*s", (int)line, text);
		old[strcspn(old, "\r")] = '\0';
		for (char *w = strstr(old, " replace"); w;
		     w = strstr(w + 1, " replace"))
			if (w[8] == '\0' || w[8] == ' ')
				old_replace = true;
		e = strstr(old, " epoch=");
		if (e)
			old_epoch = strtoll(e + 7, NULL, 10);
		e = strstr(old, " stream=");
		if (e && hint_stream_ok(e + 8, strcspn(e + 8, " ")))
			snprintf(old_stream, sizeof(old_stream), "%.*s",
				 (int)strcspn(e + 8, " "), e + 8);
		*skip = eol ? line + 1 : line;
	}
	if (*epoch < 0)
		*epoch = old_epoch;
	if (!*stream && old_stream[0])
		*stream = old_stream;
	*replace |= old_replace;
	return hint_format_header(hdr, hdr_len, *epoch, *stream, *replace);
}

/* The queued count of stream @name in the stats' hint.streams. */
static double stream_queued(const struct json *st, const char *name)
{
	const struct json *a = json_get(st, "hint.streams");

	for (const struct json *s = a && a->type == JSON_ARRAY ? a->child
							       : NULL;
	     s; s = s->next) {
		const char *n = json_str(s, "name");

		if (n && !strcmp(n, name))
			return json_num(s, "queued", 0);
	}
	return json_num(st, "hint.queued", 0); /* an older daemon */
}

int cmd_hint(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"replace", no_argument, NULL, 'r'},
	    {"epoch", required_argument, NULL, 'e'},
	    {"stream", required_argument, NULL, 's'},
	    {"help", no_argument, NULL, 'h'},
	    {0}};
	char hdr[HINT_HEADER_MAX + 2], x[4][32], reply[512], named[40] = "?";
	const char *stream = NULL;
	long long epoch = -1;
	bool replace = false;
	struct ctl_mount m;
	struct json *after = NULL;
	char *text;
	size_t len, skip;
	int c, rc = CTL_FAIL;

	while ((c = getopt_long(argc, argv, "re:s:h", opts, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'r':
			replace = true;
			break;
		case 'e':
			errno = 0;
			epoch = strtoll(optarg, &end, 10);
			if (errno || *end || end == optarg || epoch < 0) {
				ctl_err(
				    "hint: --epoch %s: expected a number, 0 "
				    "or more",
				    optarg);
				return CTL_USAGE;
			}
			break;
		case 's':
			if (!hint_stream_ok(optarg, strlen(optarg))) {
				ctl_err("hint: --stream %s: expected 1-32 of "
					"A-Z a-z 0-9 . _ -",
					optarg);
				return CTL_USAGE;
			}
			stream = optarg;
			break;
		case 'h':
			return usage(ctl_help_hint, true);
		default:
			return usage(ctl_help_hint, false);
		}
	}
	if (optind + 2 != argc) {
		ctl_err("hint: expected MOUNT and FILE; see hintfs-ctl hint "
			"--help");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m))
		return CTL_FAIL;
	if (slurp(argv[optind + 1], &text, &len))
		goto out_mount;
	if (hint_header(text, len, &epoch, &stream, &replace, hdr, sizeof(hdr),
			&skip) < 0) {
		ctl_err("hint: the header does not fit in %zu bytes",
			sizeof(hdr));
		goto out_text;
	}
	{
		const char *bufs[] = {hdr, text + skip};
		size_t lens[] = {strlen(hdr), len - skip};
		const char *at;

		if (send_ctl(&m, stream ? "hint" : "hint own=parent", bufs,
			     lens, 2, reply, sizeof(reply)))
			goto out_text;
		/* "stream=NAME entries=...": the name the daemon gave. */
		at = strstr(reply, "stream=");
		if (at) {
			snprintf(named, sizeof(named), "%.*s",
				 (int)strcspn(at + 7, " "), at + 7);
			stream = named;
		}
	}
	if (ctl_stats(&m, &after))
		goto out_text;
	{
		static const struct {
			const char *key, *what;
		} why[] = {
		    {"hint.last.unknown", "not in the listing"},
		    {"hint.last.too_long", "longer than 4096 bytes"},
		    {"hint.last.bad_utf8", "not UTF-8"},
		    {"hint.last.dotdot", "with a '..'"},
		    {"hint.last.outside", "outside the mount"},
		    {"hint.last.bad_range", "bad ranges"},
		};
		uint64_t entries =
		    (uint64_t)json_num(after, "hint.last.entries", 0);
		uint64_t refused = 0;
		double queued = stream_queued(after, stream);
		char reasons[256] = "";
		size_t rl = 0;

		for (size_t i = 0; i < sizeof(why) / sizeof(why[0]); i++) {
			uint64_t v = (uint64_t)json_num(after, why[i].key, 0);

			if (!v)
				continue;
			refused += v;
			rl += (size_t)snprintf(
			    reasons + rl, sizeof(reasons) - rl, "%s%s %s",
			    rl ? ", " : "", fmt_count(v, x[2], sizeof(x[2])),
			    why[i].what);
			if (rl >= sizeof(reasons))
				rl = sizeof(reasons) - 1;
		}
		printf("hint: %s entries",
		       fmt_count(entries, x[0], sizeof(x[0])));
		if (epoch >= 0)
			printf(" for epoch %lld", epoch);
		if (replace)
			printf("; replaced the hints queued before in stream "
			       "%s\n",
			       stream);
		else if (queued > 0)
			printf("; queued: %s hint(s) wait behind the one in "
			       "progress in stream %s\n",
			       fmt_count((uint64_t)queued, x[1], sizeof(x[1])),
			       stream);
		else
			printf("; in force now\n");
		/* "... refused=N (first: WHY: 'LINE')": the daemon's words. */
		const char *first = strstr(reply, " (first: ");

		if (refused && first)
			ctl_warn("hint: %s lines refused (%s); first: %.*s",
				 fmt_count(refused, x[3], sizeof(x[3])),
				 reasons, (int)strlen(first + 9) - 1,
				 first + 9);
		else if (refused)
			ctl_warn(
			    "hint: %s lines refused (%s); the daemon's log "
			    "names the first",
			    fmt_count(refused, x[3], sizeof(x[3])), reasons);
		if (!entries && refused) {
			ctl_err(
			    "hint: no line names a file in %s: are the paths "
			    "relative to the mount?",
			    m.path);
			goto out_text;
		}
	}
	rc = CTL_OK;
out_text:
	free(text);
	json_free(after);
out_mount:
	ctl_mount_fini(&m);
	return rc;
}

/* ---- warm -----------------------------------------------------------------
 */

struct warm_counts {
	double queued, done, failed, bytes;
};

static int warm_counts(const struct ctl_mount *m, struct warm_counts *w)
{
	struct json *st;

	if (ctl_stats(m, &st))
		return -1;
	if (!json_get(st, "warm")) {
		ctl_err("%s/%s/stats has no \"warm\": the daemon is older than "
			"this hintfs-ctl",
			m->path, CTL_DIR);
		json_free(st);
		return -1;
	}
	w->queued = json_num(st, "warm.queued", 0);
	w->done = json_num(st, "warm.done", 0);
	w->failed = json_num(st, "warm.failed", 0);
	w->bytes = json_num(st, "requests.bytes", 0);
	json_free(st);
	return 0;
}

/* Waits until every object queued by warm (by anyone) is done or failed,
 * showing this run's share on a bar. Returns the exit status. */
static int warm_wait(const struct ctl_mount *m, const struct warm_counts *w0)
{
	bool tty = isatty(STDERR_FILENO);
	double t0 = ctl_now();
	struct warm_counts w;
	char x[6][48];

	ctl_catch_signals();
	for (;;) {
		double total, finished;

		if (warm_counts(m, &w))
			return CTL_FAIL;
		total = w.queued - w0->queued;
		finished = (w.done - w0->done) + (w.failed - w0->failed);
		if (tty) {
			double dt = ctl_now() - t0;

			fprintf(
			    stderr,
			    "\rwarm %s %5.1f%% %s/%s objects, %s/s\033[K",
			    fmt_bar(total > 0 ? finished / total : 1, 30, x[0],
				    sizeof(x[0])),
			    total > 0 ? 100 * finished / total : 100,
			    fmt_count((uint64_t)finished, x[1], sizeof(x[1])),
			    fmt_count((uint64_t)total, x[2], sizeof(x[2])),
			    fmt_bytes(dt > 0 ? (w.bytes - w0->bytes) / dt : 0,
				      x[3], sizeof(x[3])));
		}
		if (w.done + w.failed >= w.queued)
			break;
		if (!ctl_sleep(WARM_POLL_S)) {
			if (tty)
				fputc('\n', stderr);
			ctl_err(
			    "warm: interrupted; the daemon goes on fetching "
			    "(hintfs-ctl stats shows the progress)");
			return CTL_FAIL;
		}
	}
	if (tty)
		fputc('\n', stderr);
	{
		double done = w.done - w0->done, failed = w.failed - w0->failed;
		double dt = ctl_now() - t0;

		printf("warm: %s objects in the cache, %s fetched in %s, %s "
		       "failed\n",
		       fmt_count((uint64_t)done, x[0], sizeof(x[0])),
		       fmt_bytes(w.bytes - w0->bytes, x[1], sizeof(x[1])),
		       fmt_seconds(dt, x[2], sizeof(x[2])),
		       fmt_count((uint64_t)failed, x[3], sizeof(x[3])));
		if (failed > 0) {
			ctl_err(
			    "warm: %s objects could not be fetched or cached; "
			    "the daemon's log says why",
			    fmt_count((uint64_t)failed, x[4], sizeof(x[4])));
			return CTL_FAIL;
		}
	}
	return CTL_OK;
}

int cmd_warm(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"from", required_argument, NULL, 'f'},
	    {"no-wait", no_argument, NULL, 'n'},
	    {"help", no_argument, NULL, 'h'},
	    {0}};
	const char *from = NULL;
	bool wait = true;
	struct ctl_mount m;
	struct warm_counts w0;
	char *text = NULL;
	size_t len = 0;
	int c, rc = CTL_FAIL;

	while ((c = getopt_long(argc, argv, "f:nh", opts, NULL)) != -1) {
		switch (c) {
		case 'f':
			from = optarg;
			break;
		case 'n':
			wait = false;
			break;
		case 'h':
			return usage(ctl_help_warm, true);
		default:
			return usage(ctl_help_warm, false);
		}
	}
	if (optind >= argc || (from && optind + 1 != argc) ||
	    (!from && optind + 2 > argc)) {
		ctl_err("warm: expected MOUNT and PATH... or --from FILE; see "
			"hintfs-ctl warm --help");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m))
		return CTL_FAIL;
	if (from ? slurp(from, &text, &len)
		 : build_list(&m, argc - optind - 1, argv + optind + 1, &text,
			      &len))
		goto out;
	if (warm_counts(&m, &w0))
		goto out;
	{
		const char *bufs[] = {text};
		char reply[512];

		if (send_ctl(&m, "warm", bufs, &len, 1, reply, sizeof(reply)))
			goto out;
	}
	if (!wait) {
		printf("warm: queued; hintfs-ctl stats %s shows the progress\n",
		       m.path);
		rc = CTL_OK;
		goto out;
	}
	rc = warm_wait(&m, &w0);
out:
	free(text);
	ctl_mount_fini(&m);
	return rc;
}

/* ---- evict ----------------------------------------------------------------
 */

int cmd_evict(int argc, char **argv)
{
	static const struct option opts[] = {{"all", no_argument, NULL, 'a'},
					     {"help", no_argument, NULL, 'h'},
					     {0}};
	bool all = false;
	struct ctl_mount m;
	struct json *before = NULL, *after = NULL;
	char *text = NULL, x[4][48];
	size_t len = 0;
	int c, rc = CTL_FAIL;

	while ((c = getopt_long(argc, argv, "ah", opts, NULL)) != -1) {
		switch (c) {
		case 'a':
			all = true;
			break;
		case 'h':
			return usage(ctl_help_evict, true);
		default:
			return usage(ctl_help_evict, false);
		}
	}
	if (optind >= argc || (all && optind + 1 != argc) ||
	    (!all && optind + 2 > argc)) {
		ctl_err("evict: expected MOUNT and PATH... or --all; see "
			"hintfs-ctl evict --help");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m))
		return CTL_FAIL;
	if (all) {
		text = strdup("*\n");
		len = 2;
		if (!text) {
			ctl_err("out of memory");
			goto out;
		}
	} else if (build_list(&m, argc - optind - 1, argv + optind + 1, &text,
			      &len)) {
		goto out;
	}
	if (ctl_stats(&m, &before))
		goto out;
	{
		const char *bufs[] = {text};
		char reply[512];

		if (send_ctl(&m, "evict", bufs, &len, 1, reply, sizeof(reply)))
			goto out;
	}
	if (ctl_stats(&m, &after))
		goto out;
	printf(
	    "evict: the cache holds %s objects, %s (before: %s, %s)\n",
	    fmt_count((uint64_t)json_num(after, "cache.objects", 0), x[0],
		      sizeof(x[0])),
	    fmt_bytes(json_num(after, "cache.bytes", 0), x[1], sizeof(x[1])),
	    fmt_count((uint64_t)json_num(before, "cache.objects", 0), x[2],
		      sizeof(x[2])),
	    fmt_bytes(json_num(before, "cache.bytes", 0), x[3], sizeof(x[3])));
	rc = CTL_OK;
out:
	free(text);
	json_free(before);
	json_free(after);
	ctl_mount_fini(&m);
	return rc;
}

/* ---- relist ---------------------------------------------------------------
 */

int cmd_relist(int argc, char **argv)
{
	static const struct option opts[] = {{"help", no_argument, NULL, 'h'},
					     {0}};
	struct ctl_mount m;
	struct json *st = NULL;
	double t0;
	char x[2][48];
	int c, rc = CTL_FAIL;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
		return usage(ctl_help_relist, c == 'h');
	if (optind + 1 != argc) {
		ctl_err(
		    "relist: expected one MOUNT; see hintfs-ctl relist --help");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m))
		return CTL_FAIL;
	t0 = ctl_now();
	{
		char reply[512];

		if (send_ctl(&m, "relist", NULL, NULL, 0, reply, sizeof(reply)))
			goto out;
	}
	if (ctl_stats(&m, &st))
		goto out;
	{
		const char *src = json_str(st, "source");
		double saved = json_num(st, "listing.saved_at", 0);
		time_t tt = (time_t)saved;
		char when[64] = "?";

		if (saved > 0)
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S",
				 localtime(&tt));
		printf("relist: %s listed again in %s and saved (%s); the next "
		       "mount shows it, this one keeps its snapshot\n",
		       src ? src : "the bucket",
		       fmt_seconds(ctl_now() - t0, x[0], sizeof(x[0])), when);
	}
	rc = CTL_OK;
out:
	json_free(st);
	ctl_mount_fini(&m);
	return rc;
}

/* ---- verify ---------------------------------------------------------------
 */

int cmd_verify(int argc, char **argv)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
					     {"help", no_argument, NULL, 'h'},
					     {0}};
	bool as_json = false;
	struct ctl_mount m;
	struct json *rep = NULL;
	const struct json *dropped, *k, *e;
	char *text = NULL, err[256], x[3][48];
	size_t len;
	double t0;
	int c, rc = CTL_FAIL;

	while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		if (c == 'j')
			as_json = true;
		else
			return usage(ctl_help_verify, c == 'h');
	}
	if (optind + 1 != argc) {
		ctl_err(
		    "verify: expected one MOUNT; see hintfs-ctl verify --help");
		return CTL_USAGE;
	}
	if (ctl_mount_open(argv[optind], &m))
		return CTL_FAIL;
	t0 = ctl_now();
	/* Opening the file runs the check: it may take a while. */
	c = ctl_read(&m, "verify", &text, &len);
	if (c) {
		ctl_err("%s/%s/verify: %s", m.path, CTL_DIR, strerror(-c));
		goto out;
	}
	if (json_parse(text, len, &rep, err, sizeof(err)) ||
	    rep->type != JSON_OBJECT) {
		ctl_err("%s/%s/verify is not a JSON object (%s)", m.path,
			CTL_DIR, rep ? "another value" : err);
		goto out;
	}
	if (as_json)
		fwrite(text, 1, len, stdout);
	else
		printf("verify: %s cached objects checked in %s, %s bad\n",
		       fmt_count((uint64_t)json_num(rep, "checked", 0), x[0],
				 sizeof(x[0])),
		       fmt_seconds(ctl_now() - t0, x[2], sizeof(x[2])),
		       fmt_count((uint64_t)json_num(rep, "bad", 0), x[1],
				 sizeof(x[1])));
	dropped = json_get(rep, "dropped");
	if (!as_json && dropped && dropped->type == JSON_ARRAY) {
		for (k = dropped->child; k; k = k->next)
			if (k->type == JSON_STRING)
				printf(
				    "  dropped (fetched again when read): %s\n",
				    k->str);
	}
	e = json_get(rep, "error");
	if (e && e->type == JSON_TRUE) {
		ctl_err("verify: the check stopped early; the daemon's log "
			"says why");
		goto out;
	}
	rc = json_num(rep, "bad", 0) > 0 ? CTL_FAIL : CTL_OK;
out:
	free(text);
	json_free(rep);
	ctl_mount_fini(&m);
	return rc;
}
