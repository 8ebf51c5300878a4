/*
 * fs/ctl_sock.c - the control socket: where hints, warm and evict lists
 * and relists arrive (common/ctl_proto.h is the protocol, doc/design.md
 * 2.3 the contract; what each command does is fs_control() in ctl.c).
 *
 * Owns the listening socket, its thread and one thread per request being
 * carried out. The mount is read-only in the kernel, so this is the only
 * way in; <mount>/.hintfs/control links here so that a client needs only
 * the mount's path.
 *
 * Who may send: the socket's directory is made 0700 and the socket 0600,
 * and each sender's uid, read from the socket (SO_PEERCRED, which the
 * sender cannot forge), must pass fs_may_control(): the mount's owner or
 * root. The sender's pid, also from SO_PEERCRED, is in this daemon's pid
 * namespace: it names an unnamed hint's stream, unique on the node.
 *
 * Invariant: every connection accepted gets exactly one reply (or is
 * closed when its sender sent nothing within CTL_PROTO_RECV_TIMEOUT_S),
 * and fs_ctl_sock_stop() returns only when no request thread runs.
 */
#include "fs/fs_internal.h"
#include "common/ctl_client.h"
#include "common/fileio.h"
#include "common/log.h"
#include "common/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <unistd.h>

/* Requests carried out at once: a node's 16 ranks each send a hint at the
 * start of an epoch; a relist may run for minutes beside them. A sender
 * past the cap is answered EAGAIN at once rather than queued unseen. */
#define CTL_SOCK_BUSY_MAX 32
/* Arguments after the verb ("own=2 if_full=replace"); more is a mistake. */
#define CTL_SOCK_ARGS_MAX 8
/* NOTE(fuse): statfs(2)'s f_type of a FUSE file system. A payload there
 * could block its reader on another daemon (or on this one) for good. */
#define CTL_SOCK_FUSE_MAGIC 0x65735546

struct fs_ctl_sock {
	struct fs *fs;
	int lfd;	  /* the listening socket */
	int efd;	  /* eventfd: the acceptor stops */
	char *path;	  /* bound here; removed at stop */
	pthread_t thread; /* the acceptor */
	pthread_mutex_t mu;
	pthread_cond_t cv; /* busy went down */
	unsigned busy;	   /* request threads running, under mu */
};

/* One accepted connection, owned by its request thread. */
struct ctl_conn {
	struct fs_ctl_sock *cs;
	int fd;
};

/* ---- where the socket lives -------------------------------------------------
 */

/* Whether a socket answers at @path: another daemon listens there. */
static bool sock_alive(const char *path)
{
	struct sockaddr_un a;
	int fd;
	bool alive;

	if (ctl_sockaddr(path, &a))
		return false;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return true; /* cannot tell: leave it */
	alive = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ||
		errno != ECONNREFUSED;
	close(fd);
	return alive;
}

/* Removes the sockets of daemons killed before they could (kill -9), so
 * that the default directory does not fill up. */
static void sweep_stale(const char *dir)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);

		if (n < 6 || strcmp(e->d_name + n - 5, ".sock") ||
		    e->d_type != DT_SOCK)
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >=
		    (int)sizeof(path))
			continue;
		if (!sock_alive(path))
			unlink(path);
	}
	closedir(d);
}

/* Makes @dir for the sockets of user @uid, or checks the one there: a
 * directory of the user's, open to nobody else, or another local user
 * could swap the socket for one of theirs. */
static int own_dir(const char *dir, uid_t uid, char *err, size_t err_len)
{
	/* /run may be missing in a chroot: its parents are made too. */
	int rc = mkdir_p(dir, 0700);
	struct stat st;

	if (rc) {
		snprintf(err, err_len, "control socket directory '%s': %s", dir,
			 strerror(-rc));
		return rc;
	}
	if (lstat(dir, &st)) {
		snprintf(err, err_len, "control socket directory '%s': %s", dir,
			 strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077)) {
		snprintf(
		    err, err_len,
		    "control socket directory '%s' is not a directory of "
		    "uid %u closed to others (mode %04o, owner %u); remove "
		    "it or choose -o ctl_socket=PATH",
		    dir, (unsigned)uid, (unsigned)(st.st_mode & 07777),
		    (unsigned)st.st_uid);
		return -EPERM;
	}
	sweep_stale(dir);
	return 0;
}

/*
 * The default path: /run/hintfs/<pid>.sock for root, else
 * $XDG_RUNTIME_DIR/hintfs/<pid>.sock (the user's own tmpfs, made by
 * systemd-logind), else /tmp/hintfs-<uid>/<pid>.sock. Short, so that it
 * fits sun_path (108 bytes) where a long mount point would not. A second
 * fs in one process (the unit tests) gets <pid>.<n>.sock.
 */
static int default_path(uid_t uid, char **out, char *err, size_t err_len)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char dir[80];
	int rc;

	if (uid == 0)
		snprintf(dir, sizeof(dir), "/run/hintfs");
	else if (xdg && xdg[0] == '/' && strlen(xdg) < sizeof(dir) - 8)
		snprintf(dir, sizeof(dir), "%s/hintfs", xdg);
	else
		snprintf(dir, sizeof(dir), "/tmp/hintfs-%u", (unsigned)uid);
	rc = own_dir(dir, uid, err, err_len);
	if (rc)
		return rc;
	static atomic_uint made;
	unsigned k = atomic_fetch_add(&made, 1);

	if ((k ? asprintf(out, "%s/%ld.%u.sock", dir, (long)getpid(), k)
	       : asprintf(out, "%s/%ld.sock", dir, (long)getpid())) < 0)
		return -ENOMEM;
	return 0;
}

/* Binds and listens at @path, replacing a socket nobody answers on. */
static int bind_at(const char *path, char *err, size_t err_len)
{
	struct sockaddr_un a;
	struct stat st;
	int fd, rc;

	if (ctl_sockaddr(path, &a)) {
		snprintf(err, err_len,
			 "control socket '%s': longer than the %zu bytes a "
			 "socket's path may have; choose a shorter "
			 "-o ctl_socket=PATH",
			 path, sizeof(a.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, err_len,
				 "control socket '%s': something else is "
				 "there (not a socket); remove it",
				 path);
			return -EEXIST;
		}
		if (sock_alive(path)) {
			snprintf(err, err_len,
				 "control socket '%s': another daemon "
				 "listens there; choose -o ctl_socket=PATH",
				 path);
			return -EADDRINUSE;
		}
		unlink(path); /* a killed daemon's */
	}
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		rc = -errno;
		snprintf(err, err_len, "control socket: %s", strerror(-rc));
		return rc;
	}
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || chmod(path, 0600) ||
	    listen(fd, CTL_SOCK_BUSY_MAX)) {
		rc = -errno;
		snprintf(err, err_len, "control socket '%s': %s", path,
			 strerror(-rc));
		close(fd);
		return rc;
	}
	return fd;
}

/* ---- one request
 * --------------------------------------------------------------
 */

/* Sends the reply "ERRNO TEXT\n" (@rc 0 or -errno). */
static void reply(int fd, int rc, const char *text)
{
	char out[4096];
	int n = snprintf(out, sizeof(out), "%d %s\n", -rc, text);

	if (n >= (int)sizeof(out))
		n = sizeof(out) - 1;
	/* A sender that has gone loses its answer; nothing else to do. */
	if (send(fd, out, (size_t)n, MSG_NOSIGNAL) < 0)
		log_debug("control socket: reply lost: %s", strerror(errno));
}

/* Reads the payload from the descriptor @pfd that came with a request. */
static int read_payload(int pfd, char **text, size_t *len, char *msg,
			size_t msg_len)
{
	struct statfs sfs;
	struct stat st;
	size_t got = 0;
	char *buf;

	if (fstat(pfd, &st) || !S_ISREG(st.st_mode)) {
		snprintf(msg, msg_len,
			 "the payload's descriptor is not a regular file "
			 "(send a memfd)");
		return -EINVAL;
	}
	if (fstatfs(pfd, &sfs) == 0 && sfs.f_type == CTL_SOCK_FUSE_MAGIC) {
		snprintf(msg, msg_len,
			 "the payload's descriptor is on a FUSE file system "
			 "(send a memfd)");
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > CTL_PROTO_PAYLOAD_MAX) {
		snprintf(msg, msg_len, "the payload is larger than %u MiB",
			 CTL_PROTO_PAYLOAD_MAX >> 20);
		return -EFBIG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return -ENOMEM;
	/* From offset 0, whatever the sender's file position. */
	while (got < (size_t)st.st_size) {
		ssize_t r =
		    pread(pfd, buf + got, (size_t)st.st_size - got, (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int rc = -errno;

			snprintf(msg, msg_len, "reading the payload: %s",
				 strerror(-rc));
			free(buf);
			return rc;
		}
		if (r == 0)
			break; /* cut since the fstat: what is there */
		got += (size_t)r;
	}
	buf[got] = '\0';
	*text = buf;
	*len = got;
	return 0;
}

/* The descriptors that came with @mh: the first in *@pfd (-1: none); any
 * more are closed, and make the request bad. */
static int take_fds(struct msghdr *mh, int *pfd)
{
	int extra = 0;

	*pfd = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t n;
		int *fds;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		fds = (int *)(void *)CMSG_DATA(c);
		for (size_t i = 0; i < n; i++) {
			if (*pfd < 0) {
				*pfd = fds[i];
			} else {
				close(fds[i]);
				extra++;
			}
		}
	}
	return extra || (mh->msg_flags & MSG_CTRUNC) ? -EINVAL : 0;
}

/* Splits the request line @line in place into a verb and its arguments. */
static int split_line(char *line, struct fs_ctl_cmd *cmd, const char **argv)
{
	char *save = NULL;
	char *w = strtok_r(line, " ", &save);

	if (!w)
		return -EINVAL;
	cmd->verb = w;
	cmd->argc = 0;
	cmd->argv = argv;
	while ((w = strtok_r(NULL, " ", &save))) {
		if (cmd->argc == CTL_SOCK_ARGS_MAX)
			return -E2BIG;
		argv[cmd->argc++] = w;
	}
	return 0;
}

/* Receives, carries out and answers the request on @fd from @cred. */
static void serve(struct fs *fs, int fd, const struct ucred *cred)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	const char *argv[CTL_SOCK_ARGS_MAX];
	struct fs_ctl_cmd cmd = {.pid = cred->pid};
	char *msgbuf = malloc(CTL_PROTO_MSG_MAX + 1);
	char *payload = NULL, *nl;
	struct iovec iov = {msgbuf, CTL_PROTO_MSG_MAX};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = ctl.buf,
			    .msg_controllen = sizeof(ctl.buf)};
	char msg[2048] = "";
	int pfd = -1, rc;
	ssize_t n;

	if (!msgbuf) {
		reply(fd, -ENOMEM, "out of memory");
		return;
	}
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0) {
		log_debug("control socket: no request from pid %ld: %s",
			  (long)cred->pid, strerror(errno));
		free(msgbuf);
		return;
	}
	rc = take_fds(&mh, &pfd);
	if (n == 0) {
		/* Closed unasked, as a starting daemon's sock_alive() does to
		 * every socket beside its own (or an empty message: whatever
		 * descriptor came with it is not kept). */
		if (pfd >= 0)
			close(pfd);
		free(msgbuf);
		return;
	}
	if (rc || (mh.msg_flags & MSG_TRUNC)) {
		snprintf(msg, sizeof(msg),
			 "bad request: %s (at most one descriptor and %u "
			 "bytes; send a longer payload as a memfd)",
			 rc ? "descriptors" : "too long", CTL_PROTO_MSG_MAX);
		rc = -EINVAL;
		goto out;
	}
	msgbuf[n] = '\0';
	nl = memchr(msgbuf, '\n', (size_t)n);
	if (nl) {
		*nl = '\0';
		cmd.text = nl + 1;
		cmd.len = (size_t)(msgbuf + n - (nl + 1));
	} else {
		cmd.text = msgbuf + n;
		cmd.len = 0;
	}
	if (strlen(msgbuf) != (size_t)(nl ? nl - msgbuf : n)) {
		snprintf(msg, sizeof(msg), "bad request: a NUL in its line");
		rc = -EINVAL;
		goto out;
	}
	rc = split_line(msgbuf, &cmd, argv);
	if (rc) {
		snprintf(msg, sizeof(msg), "bad request: %s",
			 rc == -E2BIG ? "too many arguments" : "no command");
		goto out;
	}
	if (pfd >= 0) {
		if (cmd.len) {
			snprintf(msg, sizeof(msg),
				 "bad request: a payload both inline and as "
				 "a descriptor");
			rc = -EINVAL;
			goto out;
		}
		rc = read_payload(pfd, &payload, &cmd.len, msg, sizeof(msg));
		if (rc)
			goto out;
		cmd.text = payload;
	}
	rc = fs_control(fs, &cmd, msg, sizeof(msg));
	goto answer;
out:
	/* Refused before any command ran: fs_control() logs its own. */
	log_warn("control socket: %s (from pid %ld)",
		 msg[0] ? msg : strerror(-rc), (long)cred->pid);
answer:
	if (rc && rc != -ENOMEM && !msg[0])
		snprintf(msg, sizeof(msg), "%s", strerror(-rc));
	reply(fd, rc, rc == -ENOMEM && !msg[0] ? "out of memory" : msg);
	if (pfd >= 0)
		close(pfd);
	free(payload);
	free(msgbuf);
}

static void *conn_main(void *arg)
{
	struct ctl_conn *c = arg;
	struct fs_ctl_sock *cs = c->cs;
	struct ucred cred;
	socklen_t clen = sizeof(cred);

	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
		reply(c->fd, -errno, "cannot tell who is asking");
	} else if (!fs_may_control(cs->fs, cred.uid)) {
		char why[160], one;

		/* The request first, unread (a descriptor with it is closed
		 * by the kernel): a sender that sends, then reads, gets its
		 * answer rather than EPIPE from a socket already closed. */
		if (recv(c->fd, &one, 1, MSG_TRUNC) < 0)
			log_debug("control socket: no request from pid %ld",
				  (long)cred.pid);
		snprintf(why, sizeof(why),
			 "only the mount's owner (uid %u) and root control "
			 "this mount",
			 (unsigned)cs->fs->uid);
		reply(c->fd, -EACCES, why);
	} else {
		serve(cs->fs, c->fd, &cred);
	}
	close(c->fd);
	free(c);
	pthread_mutex_lock(&cs->mu);
	cs->busy--;
	pthread_cond_broadcast(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
	return NULL;
}

/* Hands connection @fd to a thread of its own, or answers EAGAIN. */
static void dispatch(struct fs_ctl_sock *cs, int fd)
{
	struct timeval tv = {.tv_sec = CTL_PROTO_RECV_TIMEOUT_S};
	struct ctl_conn *c;
	pthread_attr_t attr;
	pthread_t t;
	int rc;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	pthread_mutex_lock(&cs->mu);
	if (cs->busy >= CTL_SOCK_BUSY_MAX) {
		pthread_mutex_unlock(&cs->mu);
		reply(fd, -EAGAIN,
		      "the daemon is busy with other requests; "
		      "try again");
		close(fd);
		return;
	}
	cs->busy++;
	pthread_mutex_unlock(&cs->mu);
	c = malloc(sizeof(*c));
	rc = c ? 0 : ENOMEM;
	if (c) {
		c->cs = cs;
		c->fd = fd;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = proc_thread_create(&t, &attr, conn_main, c);
		pthread_attr_destroy(&attr);
	}
	if (!rc)
		return;
	reply(fd, -rc, "cannot start a thread for the request");
	close(fd);
	free(c);
	pthread_mutex_lock(&cs->mu);
	cs->busy--;
	pthread_cond_broadcast(&cs->cv);
	pthread_mutex_unlock(&cs->mu);
}

static void *accept_main(void *arg)
{
	struct fs_ctl_sock *cs = arg;
	struct pollfd p[2] = {{.fd = cs->lfd, .events = POLLIN},
			      {.fd = cs->efd, .events = POLLIN}};

	for (;;) {
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_error("control socket: poll: %s", strerror(errno));
			break;
		}
		if (p[1].revents)
			break;
		fd = accept4(cs->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != ECONNABORTED &&
			    errno != EAGAIN)
				log_warn("control socket: accept: %s",
					 strerror(errno));
			continue;
		}
		dispatch(cs, fd);
	}
	return NULL;
}

/* ---- start and stop
 * -----------------------------------------------------------
 */

int fs_ctl_sock_start(struct fs *fs, const char *path, char *err,
		      size_t err_len)
{
	struct fs_ctl_sock *cs = calloc(1, sizeof(*cs));
	int rc;

	if (!cs) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	cs->fs = fs;
	cs->lfd = cs->efd = -1;
	pthread_mutex_init(&cs->mu, NULL);
	pthread_cond_init(&cs->cv, NULL);
	fs->ctl_sock = cs;
	if (path) {
		cs->path = strdup(path);
		rc = cs->path ? 0 : -ENOMEM;
		if (rc)
			snprintf(err, err_len, "out of memory");
	} else {
		rc = default_path(geteuid(), &cs->path, err, err_len);
	}
	if (rc)
		return rc;
	fs->ctl_sock_path = strdup(cs->path);
	if (!fs->ctl_sock_path) {
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	cs->lfd = bind_at(cs->path, err, err_len);
	if (cs->lfd < 0) {
		rc = cs->lfd;
		free(cs->path);
		cs->path = NULL; /* not ours to remove */
		return rc;
	}
	cs->efd = eventfd(0, EFD_CLOEXEC);
	if (cs->efd < 0) {
		rc = -errno;
		snprintf(err, err_len, "control socket: eventfd: %s",
			 strerror(-rc));
		return rc;
	}
	rc = -proc_thread_create(&cs->thread, NULL, accept_main, cs);
	if (rc) {
		snprintf(err, err_len, "control socket: thread: %s",
			 strerror(-rc));
		close(cs->efd);
		cs->efd = -1; /* no thread to stop */
		return rc;
	}
	log_debug("control socket at %s", cs->path);
	return 0;
}

void fs_ctl_sock_stop(struct fs *fs)
{
	struct fs_ctl_sock *cs = fs ? fs->ctl_sock : NULL;
	uint64_t one = 1;

	if (!cs)
		return;
	if (cs->efd >= 0) {
		if (write(cs->efd, &one, sizeof(one)) != sizeof(one))
			log_warn("control socket: cannot stop its thread");
		else
			pthread_join(cs->thread, NULL);
		close(cs->efd);
	}
	/* Nobody can connect from here on; the requests under way end. */
	if (cs->lfd >= 0) {
		close(cs->lfd);
		unlink(cs->path);
	}
	pthread_mutex_lock(&cs->mu);
	while (cs->busy)
		pthread_cond_wait(&cs->cv, &cs->mu);
	pthread_mutex_unlock(&cs->mu);
	pthread_cond_destroy(&cs->cv);
	pthread_mutex_destroy(&cs->mu);
	free(cs->path);
	free(cs);
	fs->ctl_sock = NULL;
}
