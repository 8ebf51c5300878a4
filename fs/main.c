/*
 * fs/main.c - the hintfs daemon: options, listing, mount, session loop.
 *
 * Everything that can fail for a reason the user must fix (options,
 * credentials, bucket, endpoint, mount point) is checked before the mount
 * and before the daemon detaches, so that it reaches the user as one line
 * on stderr and a non-zero exit status.
 */
#include "fs/fs.h"
#include "fs/fs_ops.h"
#include "fs/options.h"
#include "fs/store.h"
#include "common/log.h"
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_log.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*
 * NOTE(fuse): when the session ends (unmount, SIGTERM), libfuse's loop
 * joins its workers before returning, and a worker blocked in a read on a
 * server that never answers would hold the daemon forever. This thread
 * sees the session end (libfuse has no callback for it) and abandons
 * those reads at once. 100 ms: a stop is quick, the thread costs nothing.
 */
#define EXIT_WATCH_NS 100000000L

struct exit_watch {
	struct fuse_session *se;
	struct fs *fs;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool done; /* the loop returned: stop watching */
};

static void *exit_watch_main(void *arg)
{
	struct exit_watch *w = arg;
	struct timespec ts;

	pthread_mutex_lock(&w->mu);
	while (!w->done && !fuse_session_exited(w->se)) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += EXIT_WATCH_NS;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&w->cv, &w->mu, &ts);
	}
	pthread_mutex_unlock(&w->mu);
	fs_cancel(w->fs);
	return NULL;
}

/* Runs the session loop with the exit watcher beside it. */
static int session_loop(struct fuse_session *se, struct fs *fs,
			struct fuse_loop_config *loop_cfg)
{
	struct exit_watch w = {.se = se, .fs = fs};
	pthread_condattr_t ca;
	pthread_t th;
	bool watching;
	int rc;

	pthread_mutex_init(&w.mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w.cv, &ca);
	pthread_condattr_destroy(&ca);
	watching = !proc_thread_create(&th, NULL, exit_watch_main, &w);
	if (!watching)
		log_warn("no stop watcher: a read blocked on the server may "
			 "delay the exit");
	rc = fuse_session_loop_mt(se, loop_cfg);
	if (watching) {
		pthread_mutex_lock(&w.mu);
		w.done = true;
		pthread_cond_signal(&w.cv);
		pthread_mutex_unlock(&w.mu);
		pthread_join(th, NULL);
	}
	pthread_cond_destroy(&w.cv);
	pthread_mutex_destroy(&w.mu);
	return rc;
}

static int check_mountpoint(const char *path, char *err, size_t err_len)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		snprintf(err, err_len, "mount point '%s': %s", path,
			 strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, err_len, "mount point '%s' is not a directory",
			 path);
		return -ENOTDIR;
	}
	return 0;
}

/*
 * Detaching (no -f: mount(8), fstab, a plain shell).
 *
 * NOTE(fuse): fuse_daemonize() forks after the mount, but by then
 * fs_create() has started threads (the prefetch engine, the hint watcher)
 * and opened LMDB, none of which survives a fork: the child would serve
 * reads that never complete. So the daemon forks before fs_create(): the
 * child does all the work while the parent waits on a pipe, then exits 0
 * once the child says the file system is mounted, or with the child's
 * status when it dies first. The child's stderr stays the caller's until
 * then, so a failed mount reaches mount(8) or the shell as one line and a
 * non-zero exit status.
 */
static int detach_begin(int *ready_fd)
{
	int p[2], status = 0;
	pid_t pid;
	char c;
	ssize_t n;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (pid == 0) {
		close(p[0]);
		*ready_fd = p[1];
		return 0;
	}
	close(p[1]);
	do
		n = read(p[0], &c, 1);
	while (n < 0 && errno == EINTR);
	if (n == 1)
		_exit(0);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	_exit(WIFEXITED(status) && WEXITSTATUS(status) ? WEXITSTATUS(status)
						       : 1);
}

/* The child is mounted and serving: leave the caller's session and
 * terminal, log to syslog, and let the parent exit 0. */
static void detach_end(int ready_fd)
{
	int fd;

	log_use_syslog("hintfs");
	if (setsid() < 0)
		log_warn("setsid: %s", strerror(errno));
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (write(ready_fd, "", 1) != 1)
		log_warn("cannot tell the parent process the mount is up: %s",
			 strerror(errno));
	close(ready_fd);
}

/*
 * Makes *@path absolute against the current directory: the daemon moves
 * to "/" once mounted (as fuse_daemonize() does, with or without -f), and
 * the hint watcher opens its file long after. Returns 0 or -ENOMEM.
 */
static int make_absolute(char **path)
{
	char *cwd, *abs;

	if (!*path || (*path)[0] == '/')
		return 0;
	cwd = getcwd(NULL, 0);
	if (!cwd)
		return -errno;
	if (asprintf(&abs, "%s/%s", cwd, *path) < 0) {
		free(cwd);
		return -ENOMEM;
	}
	free(cwd);
	free(*path);
	*path = abs;
	return 0;
}

/* fsname=s3://bucket/prefix, with fuse_opt's escapes for ',' and '\'. */
static int add_fsname(struct fuse_args *args, const char *source)
{
	size_t n = strlen(source);
	char *opt = malloc(2 * n + sizeof("fsname=,subtype=hintfs"));
	char *p;
	int rc;

	if (!opt)
		return -1;
	p = stpcpy(opt, "fsname=");
	for (const char *s = source; *s; s++) {
		if (*s == ',' || *s == '\\')
			*p++ = '\\';
		*p++ = *s;
	}
	strcpy(p, ",subtype=hintfs");
	rc = fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, opt);
	free(opt);
	return rc ? -1 : 0;
}

/*
 * NOTE(fuse): a read-only superblock ("ro", MS_RDONLY). With zero-message
 * opens the kernel opens files without asking (no OPEN to answer EROFS),
 * and on a writable superblock an open for writing succeeds: a shared
 * writable mmap then dirties the page cache every reader shares, and a
 * write() sits in the up-to-date page during its round trip even though
 * the WRITE fails. On a read-only superblock the kernel refuses every open
 * for writing, truncate, mmap for writing and every other write-type call
 * with EROFS before any request, for root too; and it stops the atime
 * GETATTR it sends after a READ. Added last, so that an "rw" among the
 * user's options cannot undo it. The control directory is written through
 * a socket instead (fs/ctl_sock.c).
 *
 * With zero-message opens under allow_other (@check_modes),
 * default_permissions makes the kernel check the modes too (0444 data, 0400
 * control files of the mount's owner): no OPEN comes to check them. Without
 * allow_other only the owner uses the mount.
 */
static int add_kernel_flags(struct fuse_args *args, bool check_modes)
{
	bool other = false;

	for (int i = 0; i < args->argc; i++)
		if (strstr(args->argv[i], "allow_other"))
			other = true;
	if (other && check_modes &&
	    fuse_opt_add_arg(args, "-odefault_permissions"))
		return -1;
	return fuse_opt_add_arg(args, "-oro") ? -1 : 0;
}

/* Set once libfuse has reported an error itself, so we add no second line. */
static bool fuse_said_error;

/*
 * NOTE(fuse): libfuse prints its own messages ("fuse: unknown option"),
 * sometimes in several calls per line. Gather the pieces up to the newline
 * and send whole lines through our log: one format, one line each.
 */
/* The format attribute: @fmt is libfuse's printf format (clang's
 * -Wformat-nonliteral asks where it comes from). */
__attribute__((format(printf, 2, 0))) static void
fuse_log_cb(enum fuse_log_level level, const char *fmt, va_list ap)
{
	static __thread char line[1024];
	static __thread size_t len;
	int n;

	n = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
	if (n < 0)
		return;
	len += (size_t)n;
	if (len >= sizeof(line))
		len = sizeof(line) - 1;
	if (len == 0 || (line[len - 1] != '\n' && len < sizeof(line) - 1))
		return;
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	line[len] = '\0';
	len = 0;
	if (level <= FUSE_LOG_ERR) {
		fuse_said_error = true;
		log_error("%s", line);
	} else if (level <= FUSE_LOG_INFO) {
		log_info("%s", line);
	} else {
		log_debug("%s", line);
	}
}

/* With -d, one line at mount: which provider, which key (its last four
 * characters), until when (a mount that works says nothing otherwise). */
static void log_creds(struct creds *c)
{
	struct creds_info ci;
	char when[32] = "never (fixed keys)";

	creds_get_info(c, &ci);
	if (ci.expires) {
		time_t t = (time_t)ci.expires;
		struct tm tm;

		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	}
	log_debug("credentials from %s (key ...%s, expire %s)", ci.provider,
		  ci.key_tail, when);
}

static int run(struct hintfs_opts *o)
{
	struct fs_config cfg = {
	    .s3 =
		{
		    .bucket = o->bucket,
		    .endpoint = o->endpoint,
		    .region = o->region,
		    .path_style = o->path_style,
		    .no_sign = o->no_sign,
		    .insecure = o->insecure,
		    .ca_file = o->ca_file,
		    .access_key = o->access_key,
		    .secret_key = o->secret_key,
		    .session_token = o->session_token,
		    .max_attempts = o->retries,
		    .retry_time_ms = o->retry_time_s * 1000,
		    .stall_timeout_s = o->stall_timeout_s,
		    .list_workers = o->list_workers,
		},
	    .prefix = o->prefix,
	    .uid = getuid(),
	    .gid = getgid(),
	    .cache_dir = o->cache_dir,
	    .cache_size = o->cache_size,
	    .cache_size_pct = o->cache_size_pct,
	    .relist = o->relist,
	    .hint_file = o->hint_file,
	    .ctl_socket = o->ctl_socket,
	    .max_inflight = o->max_inflight,
	    .net_threads = o->net_threads,
	    .window = o->window,
	    .pace_ms = o->pace_ms,
	    .fetch_mem = o->fetch_mem,
	    .tier =
		{
		    .bucket = o->tier_bucket,
		    .endpoint = o->tier_endpoint,
		    .region = o->tier_region,
		    .path_style = o->tier_path_style,
		    .no_sign = o->no_sign && !o->tier_profile,
		    .insecure = o->insecure,
		    .ca_file = o->ca_file,
		    .access_key = o->access_key,
		    .secret_key = o->secret_key,
		    .session_token = o->session_token,
		    /* A tier that fails costs the reader time: two
		     * attempts within 5 s, then the origin serves and
		     * the PUT is dropped. */
		    .max_attempts = 2,
		    .retry_time_ms = 5000,
		    .stall_timeout_s = 2,
		},
	    .tier_prefix = o->tier_prefix,
	    .tier_hedge_ms = o->tier_hedge_ms,
	    .tier_key = o->tier_key,
	    .tier_key_len = o->tier_key_len,
	    .tier_put_mem = o->tier_put_mem,
	};
	char *mnt_abs = NULL;
	int ready_fd = -1;
	struct fuse_loop_config *loop_cfg = NULL;
	struct fuse_session *se = NULL;
	struct fs *fs = NULL;
	struct creds *creds = NULL, *tier_creds = NULL;
	char err[1024];
	int rc;

	rc = check_mountpoint(o->mountpoint, err, sizeof(err));
	if (rc)
		goto fail_msg;
	mnt_abs = realpath(o->mountpoint, NULL);
	if (!mnt_abs) {
		rc = -errno;
		snprintf(err, sizeof(err), "mount point '%s': %s",
			 o->mountpoint, strerror(errno));
		goto fail_msg;
	}
	cfg.mountpoint = mnt_abs;
	rc = make_absolute(&o->cache_dir);
	if (!rc)
		rc = make_absolute(&o->hint_file);
	if (rc) {
		log_error("cannot make the cache and hint paths absolute: %s",
			  strerror(-rc));
		goto out;
	}
	cfg.cache_dir = o->cache_dir;
	cfg.hint_file = o->hint_file;
#ifndef HINTFS_HAVE_PASSTHROUGH
	if (o->passthrough) {
		log_warn("-o passthrough: this build has no FUSE passthrough "
			 "(libfuse 3.17 has it: meson -Dlibfuse=bundled); "
			 "ignored");
		o->passthrough = 0;
	}
#endif
	/* Passthrough answers each OPEN with the object's cache file. */
	if (o->passthrough)
		o->open_per_file = 1;
	cfg.open_per_file = o->open_per_file;
	cfg.passthrough = o->passthrough;
	if (add_fsname(&o->fuse_args, o->source) ||
	    add_kernel_flags(&o->fuse_args, !o->open_per_file)) {
		rc = -ENOMEM;
		goto out;
	}
	/* The session first: it checks libfuse's options, and a typo there
	 * should fail before a listing of millions of keys, not after. */
	se =
	    fuse_session_new(&o->fuse_args, &fs_ll_ops, sizeof(fs_ll_ops), &fs);
	if (!se) {
		if (!fuse_said_error)
			log_error("cannot start a FUSE session; see --help");
		rc = -EINVAL;
		goto out;
	}
	if (!o->foreground) {
		rc = detach_begin(&ready_fd);
		if (rc) {
			log_error("cannot fork: %s", strerror(-rc));
			goto out_session;
		}
	}
	/* After the fork: the refresh thread must run in the daemon. */
	if (!o->no_sign) {
		rc = creds_start(o->creds_chain, o->n_creds_chain, &creds, err,
				 sizeof(err));
		o->n_creds_chain = 0; /* creds_start() took them all */
		if (rc) {
			log_error("%s; for a public bucket use -o no_sign",
				  err);
			goto out_session;
		}
		cfg.s3.creds = creds;
		cfg.s3.access_key = cfg.s3.secret_key = NULL;
		cfg.s3.session_token = NULL;
	}
	/* The tier signs with the origin's credentials unless it has its
	 * own profile. */
	if (o->n_tier_chain) {
		rc = creds_start(o->tier_chain, o->n_tier_chain, &tier_creds,
				 err, sizeof(err));
		o->n_tier_chain = 0;
		if (rc) {
			log_error("shared cache: %s", err);
			goto out_session;
		}
		cfg.tier.creds = tier_creds;
	} else if (o->tier_bucket) {
		cfg.tier.creds = creds;
	}
	if (cfg.tier.creds) {
		cfg.tier.access_key = cfg.tier.secret_key = NULL;
		cfg.tier.session_token = NULL;
	}
	rc = fs_create(&cfg, &fs, err, sizeof(err));
	if (rc) {
		log_error("%s", err);
		goto out_session;
	}
	if (fuse_set_signal_handlers(se)) {
		rc = -EIO;
		goto out_session;
	}
	if (fuse_session_mount(se, o->mountpoint)) {
		log_error("cannot mount at '%s' (is /dev/fuse there and "
			  "fusermount3 installed?)",
			  o->mountpoint);
		rc = -EIO;
		goto out_signals;
	}
	/* With -f this only moves to "/"; without, detach_begin() forked. */
	if (fuse_daemonize(1)) {
		rc = -EIO;
		goto out_unmount;
	}
	/* Detached, the line goes to syslog: mount(8) stays quiet when it
	 * worked, as for other file systems. */
	if (ready_fd >= 0)
		detach_end(ready_fd);
	log_info("mounted %s at %s (data path: %s)", o->source, o->mountpoint,
		 fs_data_path(fs));
	if (o->shared_cache)
		log_info("shared cache %s at %s", o->shared_cache,
			 o->tier_endpoint);
	if (creds)
		log_creds(creds);

	loop_cfg = fuse_loop_cfg_create();
	if (!loop_cfg) {
		rc = -ENOMEM;
		goto out_unmount;
	}
	fs_ops_set_session(fs, se);
	/*
	 * NOTE(fuse): a store waits on the lock of every page it fills, and
	 * the kernel locks a page before it sends the READ for it. With an
	 * OPEN per file the store pushes only files nobody has open, so it
	 * never meets a READ (store.c). With zero-message opens no request
	 * says a file is not being read: a push could wait on a READ that a
	 * stopping (or killed) daemon never answers, in D state for good.
	 * So the store runs on the open-per-file path only.
	 */
	if (!o->open_per_file && o->store_ahead) {
		if (o->store_ahead_str)
			log_warn("-o store_ahead: only with -o open_per_file; "
				 "with zero-message opens a file in the page "
				 "cache costs nothing already");
		o->store_ahead = 0;
	}
	/* Passthrough reads go to the cache file's pages, never to the
	 * pages a store fills. */
	if (o->passthrough && o->store_ahead) {
		if (o->store_ahead_str)
			log_warn("-o store_ahead: not with -o passthrough, "
				 "where the kernel reads cached files itself");
		o->store_ahead = 0;
	}
	rc = fs_store_start(fs, se, o->store_ahead);
	if (rc)
		log_warn("cannot fill the page cache ahead of opens: %s",
			 strerror(-rc));
	fuse_loop_cfg_set_max_threads(loop_cfg, o->max_threads);
	fuse_loop_cfg_set_idle_threads(loop_cfg, o->max_threads / 4 + 1);
	fuse_loop_cfg_set_clone_fd(loop_cfg, 1);
	rc = session_loop(se, fs, loop_cfg);
	/* NOTE(fuse): after SIGINT/SIGTERM/SIGHUP the loop returns the
	 * signal's number. Being told to stop is a clean stop (systemd marks
	 * a unit that exits non-zero on SIGTERM as failed). */
	if (rc == SIGINT || rc == SIGTERM || rc == SIGHUP)
		rc = 0;
	rc = rc ? -EIO : 0;
	fuse_loop_cfg_destroy(loop_cfg);
	fs_store_stop(fs);

out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out:
	fs_destroy(fs);
	creds_stop(tier_creds);
	creds_stop(creds);
	free(mnt_abs);
	return rc;
fail_msg:
	log_error("%s", err);
	free(mnt_abs);
	return rc;
}

/*
 * Keeps the credentials out of core files: the daemon is made undumpable
 * before it reads an option, a variable or a file that could hold one.
 * Marking only our own secret allocations MADV_DONTDUMP would leave copies
 * we cannot reach: the environment block (AWS_SECRET_ACCESS_KEY), libcurl's
 * receive buffer with an STS or container answer after TLS decryption, its
 * copy of the x-amz-security-token and Authorization headers, OpenSSL's
 * HMAC state. PR_SET_DUMPABLE 0 covers them all; its price (doc/operations.md,
 * "Security"): a crash leaves no core unless root sets fs.suid_dumpable=2
 * (the core is then root's, and holds the secrets), gdb -p needs root, and
 * /proc/PID/environ, fd/ and mem become root's. A credential_process child
 * is dumpable again after its exec.
 */
static int keep_secrets_out_of_cores(void)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		int e = errno;

		log_error("cannot keep credentials out of core dumps: "
			  "prctl(PR_SET_DUMPABLE): %s",
			  strerror(e));
		return -e;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct hintfs_opts o;
	char err[1024];
	int rc;

	if (keep_secrets_out_of_cores())
		return 1;
	fuse_set_log_func(fuse_log_cb);
	rc = opts_parse(argc, argv, &o, err, sizeof(err));
	if (rc) {
		log_error("%s", err);
	} else if (o.help) {
		opts_usage(stdout, argv[0]);
	} else if (o.version) {
		printf("hintfs %s (libfuse %s%s)\n", HINTFS_VERSION,
		       fuse_pkgversion(),
#ifdef HINTFS_HAVE_PASSTHROUGH
		       ", passthrough"
#else
		       ""
#endif
		);
	} else {
		if (o.debug)
			log_set_level(LOG_LVL_DEBUG);
		rc = run(&o);
	}
	opts_fini(&o);
	return rc ? 1 : 0;
}
