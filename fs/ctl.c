/*
 * fs/ctl.c - the control files of <mount>/.hintfs (doc/design.md 2.3; the
 * table of names and modes is ctl_files[] in fs.c), and the -o hint=FILE
 * watcher.
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

/* A hint for 100 million samples at ~40 bytes a line; more is a mistake. */
#define CTL_HINT_MAX (256u << 20)
/* The hint file's directory is watched with inotify, so a replaced file is
 * in force within milliseconds (the head of an epoch waits for it). Besides,
 * the file is stat'ed twice a second: the way when inotify is not to be had,
 * and for filesystems where it sees no change made on another machine (NFS).
 * The test hook HINTFS_HINT_POLL_MS overrides it in a test build (a long
 * poll proves inotify; common/test_hook.h). */
#define CTL_WATCH_MS 500
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
/* verify checks every cached blob: a node of it checks at its first READ,
 * not at the LOOKUP that a stat() or `ls -l` makes too. Until then its
 * size is this bound (NOTE(fuse): the short READ then sets the size the
 * kernel shows, fuse_short_read()); the keys listed stop before it. */
#define CTL_VERIFY_SIZE (64u << 10)
#define CTL_VERIFY_KEYS_MAX (CTL_VERIFY_SIZE - 1024)

struct fs_file {
	uint64_t ino;    /* the control file: FS_INO_CTL_HINT ... */
	uint64_t node;   /* a node's own inode number; 0 for an open file */
	char *buf;       /* hint: what was written; stats: the JSON */
	size_t len;
	size_t cap;
	bool dirty;      /* hint written since the last flush */
	bool too_big;    /* a write passed CTL_HINT_MAX: act on nothing */
	bool lazy;       /* a verify node not checked yet (len: the bound) */
	pid_t pid;       /* the process that opened it: the hint stream of
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

static char *verify_json(struct fs *fs, size_t *len);
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
						 : verify_json(fs, &f->len);
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
			  "nothing of it was used", FS_CTL_NAME,
			  ctl_name(kind), CTL_HINT_MAX >> 20);
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

/* ---- nodes: zero-message opens (see the top) ------------------------------ */

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
					: verify_json(fs, len);
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

int fs_ctl_lookup(struct fs *fs, const char *name, uid_t caller,
		  uint64_t *ino, struct stat *st)
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
		text = verify_json(fs, &len);
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

/* ---- hints ----------------------------------------------------------------- */

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

	rc = hint_parse(text, len, fs->mountpoint, resolve_cb, fs, &ids, &n, &rep);
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
			  "replace the queue)", from, stream);
	else if (rc == -ENOSPC)
		log_error("hint from %s: refused, %d other hint streams still "
			  "have hints to read, their writers running and "
			  "active in the last 10 minutes (stream %s)", from,
			  PF_STREAMS_MAX, stream);

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
		log_warn("hint from %s: %llu entries taken, %llu lines refused "
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

/* ---- warm and evict: lists of files and directories ------------------------ */

/* What a warm or evict list gathers: the ids of the files it names. */
struct id_list {
	struct fs *fs;
	uint32_t *ids;
	size_t n;
	size_t cap;
	bool all;      /* evict: a line "*" */
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
		log_warn("%s: %zu file(s) from %llu entries, %llu lines refused; "
			 "first: %s", what, n_files,
			 (unsigned long long)rep->entries,
			 (unsigned long long)bad, rep->first_bad);
	else
		log_info("%s: %zu file(s) from %llu entries", what, n_files,
			 (unsigned long long)rep->entries);
}

static int apply_warm(struct fs *fs, const char *text, size_t len)
{
	struct id_list l = { .fs = fs };
	struct hint_report rep;
	int rc;

	rc = hint_foreach(text, len, fs->mountpoint, gather_cb, &l, &rep);
	if (!rc)
		rc = pf_warm(atomic_load(&fs->pf), l.ids, l.n);
	if (rc == -EBUSY)
		log_error("warm: refused, %zu objects would pass the limit of "
			  "pending ones (4 per listed object): wait for the warm "
			  "in progress", l.n);
	else if (rc)
		log_error("warm: %s", strerror(-rc));
	else
		log_list("warm", &rep, l.n);
	free(l.ids);
	return rc;
}

static int apply_evict(struct fs *fs, const char *text, size_t len)
{
	struct id_list l = { .fs = fs };
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
			const struct tree_node *n = tree_node(fs->tree, l.ids[i]);
			int klen = tree_path(fs->tree, l.ids[i], fs->prefix, key,
					     sizeof(key));

			if (klen >= 0)
				cache_invalidate(fs->cache, key, (size_t)klen,
						 tree_etag(fs->tree, n));
		}
		log_list("evict", &rep, l.n);
	}
	free(l.ids);
	return rc;
}

/* ---- verify ---------------------------------------------------------------- */

struct verify_ctx {
	FILE *f;
	uint64_t checked;
	uint64_t bad;
	uint64_t unlisted; /* bad ones past CTL_VERIFY_KEYS_MAX of keys */
};

static void json_strn(FILE *f, const char *s, size_t len);

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

/* Checks every cached blob now: {"dropped": [..], "dropped_unlisted": U,
 * "checked": N, "bad": M}, under CTL_VERIFY_SIZE bytes. */
static char *verify_json(struct fs *fs, size_t *len)
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

/* ---- the -o hint=FILE watcher ---------------------------------------------- */

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
		ws->last = (struct stat){ 0 };
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
			fs_apply_hint(fs, text, len, "file:", fs->hint_file,
				      0);
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
	if (fd >= 0 && inotify_add_watch(fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO |
						  IN_ATTRIB) < 0) {
		log_info("hint file '%s': cannot watch its directory (%s); "
			 "checking it every %d ms", path, strerror(errno),
			 CTL_WATCH_MS);
		close(fd);
		fd = -1;
	}
	free(dir);
	return fd;
}

/* Reads what inotify has; true when an event names the hint file. */
static bool watch_drain(int fd, const char *base)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
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
	struct watch_state ws = { 0 };
	const char *base, *env = test_hook_env("HINTFS_HINT_POLL_MS");
	int poll_ms = env && atoi(env) > 0 ? atoi(env) : CTL_WATCH_MS;
	int ifd = watch_inotify(fs->hint_file, &base);

	for (;;) {
		struct pollfd pfd[2] = {
			{ .fd = fs->watch_efd, .events = POLLIN },
			{ .fd = ifd, .events = POLLIN },
		};
		bool stop;

		pthread_mutex_lock(&fs->watch_mu);
		stop = fs->watch_stop;
		pthread_mutex_unlock(&fs->watch_mu);
		if (stop)
			break;
		watch_check(fs, &ws);
		/* A writer's close and its rename come as separate events:
		 * each is a look, and an unchanged file is not applied twice. */
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
	rc = pthread_create(&fs->watcher, NULL, watch_main, fs);
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
		U(ps.demand_fetches), U(ps.passthrough), U(ps.failed_reads),
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
		U(ps.cache_put_fail),
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
