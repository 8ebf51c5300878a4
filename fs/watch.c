/*
 * fs/watch.c - the -o hint=FILE watcher: a thread that hands the hint
 * file to the engine each time it is replaced or rewritten (inotify on
 * its directory, and a stat() every CTL_WATCH_MS besides).
 *
 * Invariant: a hint file is applied once per change of its identity or
 * contents (inode, size, mtime), and one that is not a regular file is
 * never read (no FIFO can block the thread).
 */
#include "fs/fs_internal.h"
#include "fs/store.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/test_hook.h"

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

/* The hint file's directory is watched with inotify, so a replaced file is
 * in force within milliseconds (the head of an epoch waits for it). Besides,
 * the file is stat'ed twice a second: the way when inotify is not to be had,
 * and for filesystems where it sees no change made on another machine (NFS).
 * The test hook HINTFS_HINT_POLL_MS overrides it in a test build (a long
 * poll proves inotify; common/test_hook.h). */
#define CTL_WATCH_MS 500

/* ---- the -o hint=FILE watcher ----------------------------------------------
 */

/* Reads the hint file whole, if it is still a regular file: O_NONBLOCK
 * so that one swapped for a FIFO since the stat() cannot block. */
static int read_hint_file(const char *path, char **text, size_t *len)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	int rc;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		rc = -EINVAL;
	else
		rc = read_fd_all(fd, CTL_HINT_MAX, text, len);
	close(fd);
	return rc;
}

/* What the watcher remembers between looks at the hint file. */
struct watch_state {
	struct stat last;
	bool missing_said;
};

/*
 * Looks at the hint file once. A new hint is a file whose identity or
 * contents changed: another inode (written elsewhere and renamed into
 * place, the safe way), or another size or mtime (rewritten in place).
 */
static void watch_check(struct fs *fs, struct watch_state *ws)
{
	struct stat st;

	if (stat(fs->hint_file, &st) < 0) {
		if (!ws->missing_said)
			log_warn("hint file '%s': %s; waiting for it",
				 fs->hint_file, strerror(errno));
		ws->missing_said = true;
	} else if (!S_ISREG(st.st_mode)) {
		/* A FIFO's open blocks until a writer comes, and the stop
		 * would wait for it: only files are read. */
		if (!ws->missing_said)
			log_warn("hint file '%s' is not a regular file (a "
				 "FIFO?); waiting for a file there",
				 fs->hint_file);
		ws->missing_said = true;
		ws->last = (struct stat){0};
	} else if (st.st_ino != ws->last.st_ino ||
		   st.st_dev != ws->last.st_dev ||
		   st.st_size != ws->last.st_size ||
		   st.st_mtim.tv_sec != ws->last.st_mtim.tv_sec ||
		   st.st_mtim.tv_nsec != ws->last.st_mtim.tv_nsec) {
		char *text = NULL;
		size_t len = 0;
		int rc = read_hint_file(fs->hint_file, &text, &len);

		ws->missing_said = false;
		ws->last = st;
		if (rc) {
			log_warn("hint file '%s': %s", fs->hint_file,
				 strerror(-rc));
		} else {
			const struct fs_hint_req req = {
			    .text = text,
			    .len = len,
			    .stream = "file:",
			    .from = fs->hint_file,
			};
			char msg[512];

			fs_apply_hint(fs, &req, msg, sizeof(msg));
			free(text);
		}
	}
}

/*
 * An inotify watch on the hint file's directory, for the events that
 * finish a new version of it: a close after writing, a rename into place.
 * Returns the inotify fd (the file's name in *@base) or -1, with the
 * polling left to do the work.
 */
static int watch_inotify(const char *path, const char **base)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	int fd;

	*base = slash ? slash + 1 : path;
	dir = slash ? strndup(path, (size_t)(slash - path)) : strdup(".");
	if (dir && !dir[0]) {
		free(dir);
		dir = strdup("/");
	}
	fd = dir ? inotify_init1(IN_NONBLOCK | IN_CLOEXEC) : -1;
	/* Not IN_CREATE or IN_MODIFY: a file being written is not a hint
	 * yet. IN_ATTRIB: a touch asks for the same hint again. */
	if (fd >= 0 &&
	    inotify_add_watch(fd, dir,
			      IN_CLOSE_WRITE | IN_MOVED_TO | IN_ATTRIB) < 0) {
		log_info("hint file '%s': cannot watch its directory (%s); "
			 "checking it every %d ms",
			 path, strerror(errno), CTL_WATCH_MS);
		close(fd);
		fd = -1;
	}
	free(dir);
	return fd;
}

/* Reads what inotify has; true when an event names the hint file. */
static bool watch_drain(int fd, const char *base)
{
	char buf[4096]
	    __attribute__((aligned(__alignof__(struct inotify_event))));
	bool hit = false;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (char *p = buf; p < buf + n;) {
			const struct inotify_event *ev = (const void *)p;

			if (ev->len && !strcmp(ev->name, base))
				hit = true;
			if (ev->mask & IN_Q_OVERFLOW)
				hit = true;
			p += sizeof(*ev) + ev->len;
		}
	}
	return hit;
}

static void *watch_main(void *arg)
{
	struct fs *fs = arg;
	struct watch_state ws = {0};
	const char *base, *env = test_hook_env("HINTFS_HINT_POLL_MS");
	int poll_ms = env && atoi(env) > 0 ? atoi(env) : CTL_WATCH_MS;
	int ifd = watch_inotify(fs->hint_file, &base);

	for (;;) {
		struct pollfd pfd[2] = {
		    {.fd = fs->watch_efd, .events = POLLIN},
		    {.fd = ifd, .events = POLLIN},
		};
		bool stop;

		pthread_mutex_lock(&fs->watch_mu);
		stop = fs->watch_stop;
		pthread_mutex_unlock(&fs->watch_mu);
		if (stop)
			break;
		watch_check(fs, &ws);
		/* A writer's close and its rename come as separate events:
		 * each is a look, and an unchanged file is not applied twice.
		 */
		while (poll(pfd, ifd >= 0 ? 2 : 1, poll_ms) > 0 &&
		       !pfd[0].revents && !watch_drain(ifd, base))
			;
	}
	if (ifd >= 0)
		close(ifd);
	return NULL;
}

int fs_hint_watch_start(struct fs *fs)
{
	int rc;

	fs->watch_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fs->watch_efd < 0)
		return -errno;
	rc = proc_thread_create(&fs->watcher, NULL, watch_main, fs);
	if (rc) {
		close(fs->watch_efd);
		fs->watch_efd = -1;
		return -rc;
	}
	fs->watcher_started = true;
	return 0;
}

void fs_hint_watch_stop(struct fs *fs)
{
	if (!fs->watcher_started)
		return;
	pthread_mutex_lock(&fs->watch_mu);
	fs->watch_stop = true;
	pthread_mutex_unlock(&fs->watch_mu);
	if (eventfd_write(fs->watch_efd, 1) < 0)
		log_warn("hint watcher: cannot wake it: %s", strerror(errno));
	pthread_join(fs->watcher, NULL);
	close(fs->watch_efd);
	fs->watch_efd = -1;
	fs->watcher_started = false;
}
