/*
 * mount-tools/ctl/main.c - hintfs-ctl: the command line, the subcommand
 * table, the help texts, and the helpers every subcommand uses to reach a
 * mount's control directory and to format numbers for people.
 *
 * Owns the rule that hintfs-ctl touches a daemon only through the files
 * of <mount>/.hintfs/: no socket, no signal, no shared memory, so that it
 * works wherever the mount is visible (a container, another user with
 * allow_other) and needs no version handshake beyond the stats' keys.
 */
#include "ctl.h"
#include "common/ctl_client.h"
#include "common/ctl_proto.h"
#include "common/clock.h"
#include "common/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* .hintfs/stats is a few KiB; .hintfs/verify lists dropped keys, which
 * after a disaster could be many: 256 MiB bounds what we hold. */
#define CTL_READ_MAX (256u << 20)

/* ---- help ---------------------------------------------------------------- */

static const char help_main[] =
    "usage: hintfs-ctl COMMAND MOUNT [ARGS...]\n"
    "\n"
    "Controls a running hintfs mount through the files of MOUNT/.hintfs/.\n"
    "\n"
    "commands:\n"
    "  hint MOUNT FILE [--replace] [--epoch N]\n"
    "                           supply the read order of the next epoch\n"
    "  stats MOUNT [--json | --prometheus | --watch]\n"
    "                           counters: cache, reads, stalls, requests\n"
    "  warm MOUNT PATH... | --from FILE\n"
    "                           fetch files or directories into the cache\n"
    "  evict MOUNT PATH... | --all\n"
    "                           drop files or directories from the cache\n"
    "  relist MOUNT             list the bucket again for the next mount\n"
    "  verify MOUNT             check the checksum of every cached blob\n"
    "  info MOUNT               cache, listing age, credentials, version\n"
    "  help [COMMAND]           this text, or a command's\n"
    "\n"
    "options:\n"
    "  -h, --help               this text (COMMAND --help: the command's)\n"
    "  -V, --version            the version\n"
    "\n"
    "Exit status: 0 done, 1 failed or found a problem, 2 bad usage.\n"
    "See hintfs-ctl(1).\n";

const char ctl_help_hint[] =
    "usage: hintfs-ctl hint MOUNT FILE [--replace] [--epoch N] [--stream "
    "NAME]\n"
    "\n"
    "Supplies a hint: the paths the next epoch will read, in order, one per\n"
    "line (relative to MOUNT, or absolute under it; a line\n"
    "PATH<TAB>OFFSET<TAB>LENGTH names a byte range of a file). FILE '-' is\n"
    "standard input. The hint is in force when the command returns, queued\n"
    "behind the hints of its stream not yet read.\n"
    "\n"
    "  --replace      drop the stream's queued hints instead of queueing\n"
    "                 (writes \"replace\" into the '#hintfs v1' header)\n"
    "  --epoch N      name the epoch in the header (shown by stats)\n"
    "  --stream NAME  the hint stream (1-32 of A-Z a-z 0-9 . _ -; default:\n"
    "                 the header's, else ctl-<pid of hintfs-ctl's parent>)\n"
    "  -h, --help     this text\n";

const char ctl_help_stats[] =
    "usage: hintfs-ctl stats MOUNT [--json | --prometheus [--output FILE] |\n"
    "                               --watch [--interval S] [--count N]]\n"
    "\n"
    "Shows the daemon's counters (MOUNT/.hintfs/stats) as a table.\n"
    "\n"
    "  --json         the JSON object as the daemon wrote it\n"
    "  --prometheus   the text exposition format, metrics hintfs_* with a\n"
    "                 mount=\"MOUNT\" label, for node_exporter's textfile\n"
    "                 collector\n"
    "  --output FILE  with --prometheus: write FILE atomically (a temporary\n"
    "                 file renamed over it) instead of standard output; if\n"
    "                 the mount does not answer, FILE says hintfs_up 0\n"
    "  --watch        one live line: progress through the hinted epoch, hit\n"
    "                 rate, stall time, GET/s; stops on Ctrl-C\n"
    "  --interval S   seconds between --watch updates (default 1)\n"
    "  --count N      stop --watch after N updates (default: never on a\n"
    "                 terminal, 10 otherwise)\n"
    "  -h, --help     this text\n";

const char ctl_help_warm[] =
    "usage: hintfs-ctl warm MOUNT PATH... | --from FILE [--no-wait]\n"
    "\n"
    "Fetches files into the cache before a job needs them. A PATH is a file\n"
    "or a directory (everything under it; '.' is the whole mount), relative\n"
    "to MOUNT or absolute under it. Shows a progress bar until every queued\n"
    "object is fetched or failed; exits 1 if any failed.\n"
    "\n"
    "  --from FILE    read the paths from FILE, one per line ('-': stdin)\n"
    "  --no-wait      queue them and return at once\n"
    "  -h, --help     this text\n";

const char ctl_help_evict[] =
    "usage: hintfs-ctl evict MOUNT PATH... | --all\n"
    "\n"
    "Drops files, or every file under directories, from the local cache.\n"
    "The next read of them fetches them again.\n"
    "\n"
    "  --all          drop everything\n"
    "  -h, --help     this text\n";

const char ctl_help_relist[] =
    "usage: hintfs-ctl relist MOUNT\n"
    "\n"
    "Lists the bucket again and saves the listing in the cache. The running\n"
    "mount keeps its snapshot (open files and inode numbers stay valid);\n"
    "the next mount of the same bucket and prefix shows the new listing.\n"
    "\n"
    "  -h, --help     this text\n";

const char ctl_help_verify[] =
    "usage: hintfs-ctl verify MOUNT [--json]\n"
    "\n"
    "Checks the checksum of every blob in the cache; a bad blob is dropped\n"
    "(and fetched again when read). Prints how many were checked and the\n"
    "keys dropped; exits 1 if any blob was bad.\n"
    "\n"
    "  --json         the daemon's report as JSON\n"
    "  -h, --help     this text\n";

const char ctl_help_info[] =
    "usage: hintfs-ctl info MOUNT\n"
    "\n"
    "Shows what is mounted: the source, the version of the daemon, the\n"
    "cache directory, its size and capacity, the age of the listing, and\n"
    "the credentials: their provider, the access key id's last four\n"
    "characters, when they expire and how often they were refreshed.\n"
    "\n"
    "  -h, --help     this text\n";

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
} commands[] = {
    {"hint", cmd_hint, ctl_help_hint},
    {"stats", cmd_stats, ctl_help_stats},
    {"warm", cmd_warm, ctl_help_warm},
    {"evict", cmd_evict, ctl_help_evict},
    {"relist", cmd_relist, ctl_help_relist},
    {"verify", cmd_verify, ctl_help_verify},
    {"info", cmd_info, ctl_help_info},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

/* ---- messages ------------------------------------------------------------ */

void ctl_err(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("hintfs-ctl: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void ctl_warn(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("hintfs-ctl: warning: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* ---- the mount and its control files --------------------------------------
 */

int ctl_mount_open(const char *path, struct ctl_mount *m)
{
	char stats[4200];
	struct stat st;
	size_t n = strlen(path);

	m->path = NULL;
	if (!n) {
		ctl_err("the mount point is an empty string");
		return -1;
	}
	while (n > 1 && path[n - 1] == '/')
		n--;
	if (n + sizeof("/" CTL_DIR "/stats") > sizeof(stats)) {
		ctl_err("'%s': path too long", path);
		return -1;
	}
	snprintf(stats, sizeof(stats), "%.*s/%s/stats", (int)n, path, CTL_DIR);
	if (stat(stats, &st) == 0 && S_ISREG(st.st_mode)) {
		m->path = strndup(path, n);
		if (!m->path) {
			ctl_err("out of memory");
			return -1;
		}
		return 0;
	}
	if (errno == ENOTCONN)
		ctl_err("'%s': the hintfs daemon is gone (%s); unmount it with "
			"'fusermount3 -u %s' and mount again",
			path, strerror(errno), path);
	else if (stat(path, &st) < 0)
		ctl_err("'%s': %s", path, strerror(errno));
	else if (!S_ISDIR(st.st_mode))
		ctl_err("'%s' is not a directory, so not a hintfs mount", path);
	else
		ctl_err("'%s' is not a hintfs mount (no %s)", path, stats);
	return -1;
}

void ctl_mount_fini(struct ctl_mount *m)
{
	free(m->path);
	m->path = NULL;
}

void ctl_path(const struct ctl_mount *m, const char *name, char *buf,
	      size_t len)
{
	snprintf(buf, len, "%s%s%s/%s", m->path,
		 strcmp(m->path, "/") ? "/" : "", CTL_DIR, name);
}

int ctl_read(const struct ctl_mount *m, const char *name, char **out,
	     size_t *len)
{
	char path[4200];

	ctl_path(m, name, path, sizeof(path));
	return read_file_all(path, CTL_READ_MAX, out, len);
}

int ctl_stats(const struct ctl_mount *m, struct json **st)
{
	char *text, err[256];
	size_t len;
	int rc = ctl_read(m, "stats", &text, &len);

	if (rc) {
		ctl_err("%s/%s/stats: %s", m->path, CTL_DIR, strerror(-rc));
		return -1;
	}
	rc = json_parse(text, len, st, err, sizeof(err));
	free(text);
	if (rc) {
		ctl_err("%s/%s/stats is not JSON (%s): is the daemon the same "
			"version as hintfs-ctl?",
			m->path, CTL_DIR, err);
		return -1;
	}
	if ((*st)->type != JSON_OBJECT) {
		ctl_err("%s/%s/stats is not a JSON object", m->path, CTL_DIR);
		json_free(*st);
		return -1;
	}
	return 0;
}

int ctl_send(const struct ctl_mount *m, const char *line, const char *payload,
	     size_t len, char *reply, size_t reply_len)
{
	char sock[4096];
	int rc = ctl_socket_of(m->path, sock, sizeof(sock));

	if (rc == -ENOENT) {
		snprintf(reply, reply_len,
			 "%s/%s/%s: no such link (a hintfs daemon older "
			 "than its control socket?)",
			 m->path, CTL_DIR, CTL_PROTO_LINK);
		return rc;
	}
	if (rc) {
		snprintf(reply, reply_len, "%s/%s/%s: %s", m->path, CTL_DIR,
			 CTL_PROTO_LINK, strerror(-rc));
		return rc;
	}
	return ctl_request(sock, line, payload, len, reply, reply_len);
}

/* ---- formatting -----------------------------------------------------------
 */

char *fmt_count(uint64_t v, char *buf, size_t len)
{
	char digits[32];
	int n = snprintf(digits, sizeof(digits), "%llu", (unsigned long long)v);
	size_t o = 0;

	for (int i = 0; i < n && o + 2 < len; i++) {
		if (i && (n - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o < len ? o : len - 1] = '\0';
	return buf;
}

char *fmt_bytes(double v, char *buf, size_t len)
{
	static const char *const units[] = {"B",   "KiB", "MiB",
					    "GiB", "TiB", "PiB"};
	int u = 0;

	if (!(v >= 0))
		v = 0;
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f B", v);
	else
		snprintf(buf, len, "%.*f %s",
			 v < 10	   ? 2
			 : v < 100 ? 1
				   : 0,
			 v, units[u]);
	return buf;
}

char *fmt_seconds(double s, char *buf, size_t len)
{
	if (!(s >= 0))
		s = 0;
	if (s < 1)
		snprintf(buf, len, "%.0f ms", s * 1000);
	else if (s < 100)
		snprintf(buf, len, "%.*f s", s < 10 ? 2 : 1, s);
	else
		return fmt_age(s, buf, len);
	return buf;
}

char *fmt_age(double s, char *buf, size_t len)
{
	unsigned long long t = s > 0 ? (unsigned long long)(s + 0.5) : 0;

	if (t < 100)
		snprintf(buf, len, "%llu s", t);
	else if (t < 3600)
		snprintf(buf, len, "%llu min %llu s", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, len, "%llu h %llu min", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, len, "%llu d %llu h", t / 86400,
			 t % 86400 / 3600);
	return buf;
}

char *fmt_bar(double frac, int width, char *buf, size_t len)
{
	int full, o = 0;

	if (!(frac >= 0))
		frac = 0;
	if (frac > 1)
		frac = 1;
	if (width < 1 || (size_t)width + 3 > len)
		width = (int)len - 3;
	full = (int)(frac * width + 0.5);
	buf[o++] = '[';
	for (int i = 0; i < width; i++)
		buf[o++] = i < full ? '#' : '.';
	buf[o++] = ']';
	buf[o] = '\0';
	return buf;
}

double ctl_now(void)
{
	return (double)mono_ns() / 1e9;
}

volatile int ctl_interrupted;

static void on_signal(int sig)
{
	ctl_interrupted = sig;
}

void ctl_catch_signals(void)
{
	struct sigaction sa = {.sa_handler = on_signal};

	/* No SA_RESTART: a sleep or a read returns at once with EINTR. */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

bool ctl_sleep(double s)
{
	struct timespec ts = {
	    .tv_sec = (time_t)s,
	    .tv_nsec = (long)((s - (double)(time_t)s) * 1e9),
	};

	if (ctl_interrupted)
		return false;
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		if (ctl_interrupted)
			return false;
	return !ctl_interrupted;
}

bool ctl_parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 86400 || isnan(v))
		return false;
	*out = v;
	return true;
}

/* ---- main ---------------------------------------------------------------- */

static int find_command(const char *name)
{
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (!strcmp(name, commands[i].name))
			return (int)i;
	return -1;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;
	int i;

	if (!cmd) {
		fputs(help_main, stderr);
		return CTL_USAGE;
	}
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) {
		fputs(help_main, stdout);
		return CTL_OK;
	}
	if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
		printf("hintfs-ctl %s\n", HINTFS_VERSION);
		return CTL_OK;
	}
	if (!strcmp(cmd, "help")) {
		if (argc < 3) {
			fputs(help_main, stdout);
			return CTL_OK;
		}
		i = find_command(argv[2]);
		if (i < 0) {
			ctl_err("no command '%s'; see hintfs-ctl --help",
				argv[2]);
			return CTL_USAGE;
		}
		fputs(commands[i].help, stdout);
		return CTL_OK;
	}
	i = find_command(cmd);
	if (i < 0) {
		ctl_err("no command '%s'; see hintfs-ctl --help", cmd);
		return CTL_USAGE;
	}
	/* NOTE: a write to a pipe whose reader left (| head) is an error
	 * return, not a death by SIGPIPE: then every command ends cleanly. */
	signal(SIGPIPE, SIG_IGN);
	return commands[i].fn(argc - 1, argv + 1);
}
