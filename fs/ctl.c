/*
 * fs/ctl.c - the control files of <mount>/.hintfs (doc/design.md 2.3; the
 * table of names and modes is ctl_files[] in fs.c). What stats and verify
 * say is rendered in fs/stats_json.c; the -o hint=FILE watcher is
 * fs/watch.c.
 *
 * Owns the state of the control files, in one of two lives:
 * - With -o open_per_file, per open: a hint written through .hintfs/hint
 *   is collected in its open file's buffer and handed to the engine at
 *   close (FLUSH), so it is in force when close() returns; stats is
 *   rendered at open and read with direct I/O.
 * - With zero-message opens (the default) the kernel sends no OPEN,
 *   FLUSH or RELEASE at all, and reads through its page cache. So each
 *   LOOKUP of a control file makes a *node*: a fresh inode number,
 *   answered with entry and attribute timeouts of 0. NOTE(fuse): the
 *   kernel drops an expired dentry at its last dput (fuse_dentry_delete),
 *   the inode goes with it, and the FORGET of that number comes right
 *   after the close(); the next open() walks the path again and LOOKUP
 *   makes a new node. A node's contents live from LOOKUP to FORGET:
 *   stats and verify are rendered at LOOKUP with their exact size in the
 *   attributes (a new inode has no stale pages), and what is written to
 *   hint, warm, evict or relist acts at fsync() (its verdict is fsync's
 *   answer: the Python helper and hintfs-ctl fsync before closing) or,
 *   for a writer that only closes, at the FORGET (logged and counted).
 *   A lookup of stats waits for written nodes to act (at most
 *   CTL_SETTLE_MS), so that "write, close, read stats" sees the write.
 * Invariant: at most CTL_NODES_MAX nodes are alive (a process that
 * never closes one cannot make them grow), each holds at most
 * CTL_HINT_MAX bytes.
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

/* Nodes alive at once: hintfs-ctl and the helper hold one each for a few
 * milliseconds, 16 ranks of a node write at once; 64 leaves room for
 * stat() calls whose FORGET has not come yet. */
#define CTL_NODES_MAX 64
/* How long a lookup of stats waits for written nodes to act: the FORGET
 * of a closed node comes once the dentry is dropped (fs_ops.c,
 * drop_ctl_dentry()), within milliseconds, but later than 200 ms on a
 * loaded machine (seen in tests with a load of 10 on 2 cores); a writer
 * that keeps its file open costs each lookup of stats this much. */
#define CTL_SETTLE_MS 1000

struct fs_file {
	uint64_t ino;  /* the control file: FS_INO_CTL_HINT ... */
	uint64_t node; /* a node's own inode number; 0 for an open file */
	char *buf;     /* hint: what was written; stats: the JSON */
	size_t len;
	size_t cap;
	bool dirty;   /* hint written since the last flush */
	bool too_big; /* a write passed CTL_HINT_MAX: act on nothing */
	bool lazy;    /* a verify node not checked yet (len: the bound) */
	pid_t pid;    /* the process that opened it: the hint stream of
			 an unnamed hint (a pid is per process, and the
			 trainer, not its DataLoader workers, writes) */
	struct fs_file *prev, *next; /* fs->ctl_open, under fs->ctl_mu */
};

/* The files that are read (their text is made at open); the others are
 * written, and act at close. */
static bool ctl_readable(uint64_t ino)
{
	return ino == FS_INO_CTL_STATS || ino == FS_INO_CTL_VERIFY;
}

static const char *ctl_name(uint64_t ino);
static int apply_warm(struct fs *fs, const char *text, size_t len);
static int apply_evict(struct fs *fs, const char *text, size_t len);
static void ctl_link(struct fs *fs, struct fs_file *f);
static void ctl_unlink(struct fs *fs, struct fs_file *f);

int fs_ctl_open(struct fs *fs, uint64_t ino, int flags, pid_t pid,
		struct fs_file **fh)
{
	bool rd = (flags & O_ACCMODE) == O_RDONLY;
	struct fs_file *f;

	if (rd != ctl_readable(ino))
		return -EACCES;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->ino = ino;
	f->pid = pid;
	if (rd) {
		f->buf = ino == FS_INO_CTL_STATS ? fs_stats_json(fs, &f->len)
						 : fs_verify_json(fs, &f->len);
		if (!f->buf) {
			free(f);
			return -ENOMEM;
		}
	}
	pthread_mutex_lock(&fs->ctl_mu);
	ctl_link(fs, f);
	pthread_mutex_unlock(&fs->ctl_mu);
	*fh = f;
	return 0;
}

ssize_t fs_ctl_read(struct fs_file *f, char *buf, size_t size, off_t off)
{
	if (!ctl_readable(f->ino))
		return -EBADF;
	if (off < 0 || (size_t)off >= f->len)
		return 0;
	if (size > f->len - (size_t)off)
		size = f->len - (size_t)off;
	memcpy(buf, f->buf + off, size);
	return (ssize_t)size;
}

ssize_t fs_ctl_write(struct fs_file *f, const char *buf, size_t size, off_t off)
{
	size_t end;

	if (off < 0 || (uint64_t)off + size > CTL_HINT_MAX) {
		/* What came before is a cut text: none of it is used. */
		f->too_big = true;
		f->dirty = true;
		return -EFBIG;
	}
	end = (size_t)off + size;
	if (end > f->cap) {
		size_t cap = f->cap ? f->cap : 65536;
		char *nb;

		while (cap < end)
			cap *= 2;
		nb = realloc(f->buf, cap);
		if (!nb)
			return -ENOMEM;
		f->buf = nb;
		f->cap = cap;
	}
	if ((size_t)off > f->len)
		memset(f->buf + f->len, '\n', (size_t)off - f->len);
	memcpy(f->buf + off, buf, size);
	if (end > f->len)
		f->len = end;
	f->dirty = true;
	return (ssize_t)size;
}

static const char *ctl_name(uint64_t ino)
{
	switch (ino) {
	case FS_INO_CTL_HINT:
		return "hint";
	case FS_INO_CTL_WARM:
		return "warm";
	case FS_INO_CTL_EVICT:
		return "evict";
	default:
		return "relist";
	}
}

/* Acts on @len bytes written to control file @kind by process @pid. */
static int ctl_act(struct fs *fs, uint64_t kind, pid_t pid, const char *text,
		   size_t len, bool too_big)
{
	int rc = 0;

	if (too_big) {
		/* All or nothing, as the -o hint= watcher reads a file. */
		log_error("%s/%s: the text written is too large (over %u MiB); "
			  "nothing of it was used",
			  FS_CTL_NAME, ctl_name(kind), CTL_HINT_MAX >> 20);
		return -EFBIG;
	}
	switch (kind) {
	case FS_INO_CTL_HINT: {
		char stream[24];

		snprintf(stream, sizeof(stream), "pid:%ld",
			 (long)(proc_tgid(pid) ?: pid));
		rc = fs_apply_hint(fs, text, len, stream, FS_CTL_NAME "/hint",
				   pid);
		break;
	}
	case FS_INO_CTL_WARM:
		rc = apply_warm(fs, text, len);
		break;
	case FS_INO_CTL_EVICT:
		rc = apply_evict(fs, text, len);
		break;
	case FS_INO_CTL_RELIST:
		rc = fs_relist(fs);
		break;
	default:
		break;
	}
	return rc;
}

int fs_ctl_flush(struct fs *fs, struct fs_file *f)
{
	int rc;

	if (!f->dirty)
		return 0;
	f->dirty = false;
	rc = ctl_act(fs, f->ino, f->pid, f->buf, f->len, f->too_big);
	/* Another close of this open file acts again only after new writes. */
	f->too_big = false;
	f->len = 0;
	return rc;
}

/* ---- nodes: zero-message opens (see the top) ------------------------------
 */

/* The node numbered @ino, or NULL. ctl_mu held. */
static struct fs_file *node_find(struct fs *fs, uint64_t ino)
{
	for (struct fs_file *f = fs->ctl_open; f; f = f->next)
		if (f->node == ino)
			return f;
	return NULL;
}

/* Unlinks @f from the list. ctl_mu held. */
static void ctl_unlink(struct fs *fs, struct fs_file *f)
{
	if (f->prev)
		f->prev->next = f->next;
	else
		fs->ctl_open = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->prev = f->next = NULL;
}

/* Links @f at the head of the list. ctl_mu held. */
static void ctl_link(struct fs *fs, struct fs_file *f)
{
	f->next = fs->ctl_open;
	if (f->next)
		f->next->prev = f;
	fs->ctl_open = f;
}

char *fs_ctl_render(struct fs *fs, uint64_t kind, size_t *len)
{
	return kind == FS_INO_CTL_STATS ? fs_stats_json(fs, len)
					: fs_verify_json(fs, len);
}

uint64_t fs_ctl_node_kind(struct fs *fs, uint64_t ino, uint64_t *len)
{
	struct fs_file *f;
	uint64_t kind = 0;

	pthread_mutex_lock(&fs->ctl_mu);
	f = node_find(fs, ino);
	if (f) {
		kind = f->ino;
		if (len)
			*len = f->len;
	}
	pthread_mutex_unlock(&fs->ctl_mu);
	return kind;
}

/* Waits, at most CTL_SETTLE_MS, until no node holds a text not acted on. */
static void ctl_settle(struct fs *fs)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += CTL_SETTLE_MS * 1000000L;
	until.tv_sec += until.tv_nsec / 1000000000L;
	until.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&fs->ctl_mu);
	while (fs->ctl_dirty &&
	       pthread_cond_timedwait(&fs->ctl_cv, &fs->ctl_mu, &until) == 0)
		;
	pthread_mutex_unlock(&fs->ctl_mu);
}

int fs_ctl_lookup(struct fs *fs, const char *name, uid_t caller, uint64_t *ino,
		  struct stat *st)
{
	uint64_t kind = fs_ctl_kind_of(name);
	struct fs_file *f;

	if (!kind)
		return -ENOENT;
	if (!fs_may_control(fs, caller))
		return -EACCES;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->ino = kind;
	if (kind == FS_INO_CTL_VERIFY) {
		f->lazy = true;
		f->len = CTL_VERIFY_SIZE;
	} else if (ctl_readable(kind)) {
		ctl_settle(fs);
		f->buf = fs_ctl_render(fs, kind, &f->len);
		if (!f->buf) {
			free(f);
			return -ENOMEM;
		}
	}
	pthread_mutex_lock(&fs->ctl_mu);
	if (fs->ctl_nodes >= CTL_NODES_MAX) {
		bool first = !fs->ctl_refused++;

		pthread_mutex_unlock(&fs->ctl_mu);
		if (first)
			log_warn("%s/%s: %d control files are open already; "
				 "refused (ENFILE) until one is closed",
				 FS_CTL_NAME, name, CTL_NODES_MAX);
		free(f->buf);
		free(f);
		return -ENFILE;
	}
	f->node = FS_INO_CTL_NODE0 + fs->ctl_next++;
	fs->ctl_nodes++;
	ctl_link(fs, f);
	pthread_mutex_unlock(&fs->ctl_mu);
	fs_ctl_stat(fs, kind, st);
	st->st_ino = f->node;
	st->st_size = (off_t)f->len;
	*ino = f->node;
	return 0;
}

/* Finds node @ino for user @caller and returns 0 with ctl_mu held, or
 * -EACCES or -ENOENT without it. */
static int node_lock(struct fs *fs, uint64_t ino, uid_t caller,
		     struct fs_file **f)
{
	if (!fs_may_control(fs, caller))
		return -EACCES;
	pthread_mutex_lock(&fs->ctl_mu);
	*f = node_find(fs, ino);
	if (!*f) {
		pthread_mutex_unlock(&fs->ctl_mu);
		return -ENOENT;
	}
	return 0;
}

ssize_t fs_ctl_node_read(struct fs *fs, uint64_t ino, uid_t caller, char *buf,
			 size_t size, off_t off)
{
	struct fs_file *f;
	ssize_t n = node_lock(fs, ino, caller, &f);
	char *text;
	size_t len;

	if (n)
		return n;
	if (f->lazy) {
		/* The check runs outside the lock (it reads the whole cache);
		 * a second reader of the node that got there first wins. */
		pthread_mutex_unlock(&fs->ctl_mu);
		text = fs_verify_json(fs, &len);
		if (!text)
			return -ENOMEM;
		n = node_lock(fs, ino, caller, &f);
		if (n) {
			free(text);
			return n;
		}
		if (f->lazy) {
			f->buf = text;
			f->len = len;
			f->lazy = false;
		} else {
			free(text);
		}
	}
	n = fs_ctl_read(f, buf, size, off);
	pthread_mutex_unlock(&fs->ctl_mu);
	return n;
}

ssize_t fs_ctl_node_write(struct fs *fs, uint64_t ino, uid_t caller, pid_t pid,
			  const char *buf, size_t size, off_t off)
{
	struct fs_file *f;
	ssize_t n = node_lock(fs, ino, caller, &f);
	bool was;

	if (n)
		return n;
	if (ctl_readable(f->ino)) {
		pthread_mutex_unlock(&fs->ctl_mu);
		return -EBADF;
	}
	/* NOTE(fuse): the WRITE comes from the writer's own context (no
	 * writeback cache), so its pid is the writing process: the stream of
	 * an unnamed hint. */
	if (!f->pid)
		f->pid = pid;
	was = f->dirty;
	n = fs_ctl_write(f, buf, size, off);
	if (f->dirty && !was)
		fs->ctl_dirty++;
	pthread_mutex_unlock(&fs->ctl_mu);
	return n;
}

/* Takes what node @f holds to act on, leaving it clean; the caller acts,
 * then calls ctl_acted() when *@act (ctl_dirty counts it until then, so
 * that a lookup of stats waits for the act's result). ctl_mu held. */
static void node_take(struct fs *fs, struct fs_file *f, char **text,
		      size_t *len, bool *act, bool *too_big)
{
	*act = f->dirty && !ctl_readable(f->ino);
	*too_big = f->too_big;
	*text = NULL;
	*len = 0;
	if (!f->dirty)
		return;
	f->dirty = false;
	if (!*act) {
		fs->ctl_dirty--;
		return;
	}
	*text = f->buf;
	*len = f->len;
	f->buf = NULL;
	f->len = f->cap = 0;
	f->too_big = false;
}

/* An act taken by node_take() is done: wakes the lookups of stats
 * waiting in ctl_settle(). */
static void ctl_acted(struct fs *fs, bool act)
{
	pthread_mutex_lock(&fs->ctl_mu);
	if (act)
		fs->ctl_dirty--;
	pthread_cond_broadcast(&fs->ctl_cv);
	pthread_mutex_unlock(&fs->ctl_mu);
}

int fs_fsync(struct fs *fs, uint64_t ino, struct fs_file *fh)
{
	struct fs_file *f;
	uint64_t kind = 0;
	pid_t pid = 0;
	bool act = false, too_big = false;
	char *text = NULL;
	size_t len = 0;
	int rc = 0;

	if (fh)
		return fs_ctl_flush(fs, fh);
	if (!fs_is_ctl_node(ino))
		return 0;
	pthread_mutex_lock(&fs->ctl_mu);
	f = node_find(fs, ino);
	if (f) {
		kind = f->ino;
		pid = f->pid;
		node_take(fs, f, &text, &len, &act, &too_big);
	}
	pthread_mutex_unlock(&fs->ctl_mu);
	if (!act)
		return 0;
	rc = ctl_act(fs, kind, pid, text, len, too_big);
	free(text);
	ctl_acted(fs, true);
	return rc;
}

void fs_forget(struct fs *fs, uint64_t ino, uint64_t n)
{
	struct fs_file *f;
	bool act = false, too_big = false;
	char *text = NULL;
	size_t len = 0;

	if (!fs_is_ctl_node(ino) || !n)
		return;
	/* NOTE(fuse): a node is answered once (one lookup), so its one
	 * FORGET is the last word about it. */
	pthread_mutex_lock(&fs->ctl_mu);
	f = node_find(fs, ino);
	if (f) {
		ctl_unlink(fs, f);
		fs->ctl_nodes--;
		node_take(fs, f, &text, &len, &act, &too_big);
	}
	pthread_mutex_unlock(&fs->ctl_mu);
	if (!f)
		return;
	if (act)
		ctl_act(fs, f->ino, f->pid, text, len, too_big);
	free(text);
	free(f->buf);
	free(f);
	ctl_acted(fs, act);
}

void fs_ctl_release(struct fs *fs, struct fs_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&fs->ctl_mu);
	ctl_unlink(fs, f);
	if (f->node) {
		fs->ctl_nodes--;
		if (f->dirty)
			fs->ctl_dirty--;
	}
	pthread_mutex_unlock(&fs->ctl_mu);
	free(f->buf);
	free(f);
}

/*
 * NOTE(fuse): the kernel sends RELEASE in the background after the last
 * close, and an unmount that comes first drops it: the files still open
 * at the end are freed here.
 */
void fs_ctl_release_all(struct fs *fs)
{
	while (fs->ctl_open)
		fs_ctl_release(fs, fs->ctl_open);
}

/* ---- hints -----------------------------------------------------------------
 */

static uint32_t resolve_cb(void *arg, const char *path, size_t len)
{
	return fs_file_id(arg, path, len);
}

int fs_apply_hint(struct fs *fs, const char *text, size_t len,
		  const char *stream, const char *from, pid_t owner)
{
	struct hint_report rep;
	uint32_t *ids;
	size_t n;
	int rc;

	rc = hint_parse(text, len, fs->mountpoint, resolve_cb, fs, &ids, &n,
			&rep);
	if (rc) {
		log_error("hint from %s: %s", from, strerror(-rc));
		return rc;
	}
	if (rep.stream[0])
		stream = rep.stream;
	else
		snprintf(rep.stream, sizeof(rep.stream), "%s", stream);
	rc = pf_hint(atomic_load(&fs->pf), stream, ids, n, rep.epoch,
		     rep.replace, owner);
	free(ids);
	if (rc == -EBUSY)
		log_error("hint from %s: refused, 16 hints are queued already "
			  "in stream %s (wait for an epoch to finish, or "
			  "replace the queue)",
			  from, stream);
	else if (rc == -ENOSPC)
		log_error("hint from %s: refused, %d other hint streams still "
			  "have hints to read, their writers running and "
			  "active in the last 10 minutes (stream %s)",
			  from, PF_STREAMS_MAX, stream);

	pthread_mutex_lock(&fs->hint_mu);
	fs->last_hint = rep;
	if (rc)
		fs->hints_rejected++;
	pthread_mutex_unlock(&fs->hint_mu);

	if (rc) {
		if (rc != -EBUSY && rc != -ENOSPC)
			log_error("hint from %s: %s", from, strerror(-rc));
		return rc;
	}
	uint64_t bad = rep.unknown + rep.too_long + rep.bad_utf8 + rep.dotdot +
		       rep.outside;
	if (bad)
		log_warn(
		    "hint from %s: %llu entries taken, %llu lines refused "
		    "(%llu not in the listing, %llu too long, %llu not UTF-8, "
		    "%llu with '..', %llu outside the mount); first: %s",
		    from, (unsigned long long)rep.entries,
		    (unsigned long long)bad, (unsigned long long)rep.unknown,
		    (unsigned long long)rep.too_long,
		    (unsigned long long)rep.bad_utf8,
		    (unsigned long long)rep.dotdot,
		    (unsigned long long)rep.outside, rep.first_bad);
	else
		log_info("hint from %s: %llu entries in stream %s%s", from,
			 (unsigned long long)rep.entries, stream,
			 rep.replace ? " (replacing its queue)" : "");
	return 0;
}

/* ---- warm and evict: lists of files and directories ------------------------
 */

/* What a warm or evict list gathers: the ids of the files it names. */
struct id_list {
	struct fs *fs;
	uint32_t *ids;
	size_t n;
	size_t cap;
	bool all; /* evict: a line "*" */
};

static int gather_cb(void *arg, const char *path, size_t len)
{
	struct id_list *l = arg;
	long got;

	if (len == 1 && path[0] == '*') {
		l->all = true;
		return 1;
	}
	got = fs_files_under(l->fs, path, len, &l->ids, &l->n, &l->cap);
	return got < 0 ? (int)got : got > 0;
}

static void log_list(const char *what, const struct hint_report *rep,
		     size_t n_files)
{
	uint64_t bad = rep->unknown + rep->too_long + rep->bad_utf8 +
		       rep->dotdot + rep->outside;

	if (bad)
		log_warn(
		    "%s: %zu file(s) from %llu entries, %llu lines refused; "
		    "first: %s",
		    what, n_files, (unsigned long long)rep->entries,
		    (unsigned long long)bad, rep->first_bad);
	else
		log_info("%s: %zu file(s) from %llu entries", what, n_files,
			 (unsigned long long)rep->entries);
}

static int apply_warm(struct fs *fs, const char *text, size_t len)
{
	struct id_list l = {.fs = fs};
	struct hint_report rep;
	int rc;

	rc = hint_foreach(text, len, fs->mountpoint, gather_cb, &l, &rep);
	if (!rc)
		rc = pf_warm(atomic_load(&fs->pf), l.ids, l.n);
	if (rc == -EBUSY)
		log_error(
		    "warm: refused, %zu objects would pass the limit of "
		    "pending ones (4 per listed object): wait for the warm "
		    "in progress",
		    l.n);
	else if (rc)
		log_error("warm: %s", strerror(-rc));
	else
		log_list("warm", &rep, l.n);
	free(l.ids);
	return rc;
}

static int apply_evict(struct fs *fs, const char *text, size_t len)
{
	struct id_list l = {.fs = fs};
	struct hint_report rep;
	char key[FS_KEY_MAX];
	int rc;

	rc = hint_foreach(text, len, fs->mountpoint, gather_cb, &l, &rep);
	if (rc) {
		log_error("evict: %s", strerror(-rc));
	} else if (l.all) {
		rc = cache_clear(fs->cache);
		log_info("evict: the whole cache%s", rc ? " failed" : "");
	} else {
		for (size_t i = 0; i < l.n; i++) {
			const struct tree_node *n =
			    tree_node(fs->tree, l.ids[i]);
			int klen = tree_path(fs->tree, l.ids[i], fs->prefix,
					     key, sizeof(key));

			if (klen >= 0)
				cache_invalidate(fs->cache, key, (size_t)klen,
						 tree_etag(fs->tree, n));
		}
		log_list("evict", &rep, l.n);
	}
	free(l.ids);
	return rc;
}
