/*
 * fs/ctl.c - the control directory <mount>/.hintfs and the commands of
 * the control socket (doc/design.md 2.3; the table of names and modes is
 * ctl_files[] in fs.c, the socket itself fs/ctl_sock.c). What stats and
 * verify say is rendered in fs/stats_json.c; the -o hint=FILE watcher is
 * fs/watch.c.
 *
 * The mount is read-only in the kernel, so the control files are read,
 * never written: hints, warm and evict lists and relists come through
 * the socket (fs_control()), with the sender's identity from the socket.
 * The files readable are stats and verify, in one of two lives:
 * - With -o open_per_file, per open: rendered at OPEN, read with direct
 *   I/O, freed at RELEASE.
 * - With zero-message opens (the default) the kernel sends no OPEN or
 *   RELEASE and reads through its page cache. So each LOOKUP of a control
 *   file makes a *node*: a fresh node id, answered with entry and
 *   attribute timeouts of 0. NOTE(fuse): the kernel drops an expired
 *   dentry at its last dput (fuse_dentry_delete), the inode goes with it,
 *   and the FORGET of that id comes right after the close(); the next
 *   open() walks the path again and LOOKUP makes a new node. A node's
 *   text is rendered at LOOKUP with its exact size in the attributes (a
 *   new inode has no stale pages) and lives until its FORGET. Every node
 *   of one file shows the file's own inode number (st_ino), as a local
 *   file does, so a tool that compares stat() of the path with fstat() of
 *   what it opened (cp) sees one file.
 * Invariant: at most CTL_NODES_MAX nodes are alive (a process that
 * never closes one cannot make them grow).
 */
#include "fs/fs_internal.h"
#include "common/log.h"
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Nodes alive at once: hintfs-ctl and the helper hold one each for a few
 * milliseconds, 16 ranks of a node read stats at once; 64 leaves room for
 * stat() calls whose FORGET has not come yet. */
#define CTL_NODES_MAX 64

struct fs_file {
	uint64_t ino;  /* the control file: FS_INO_CTL_STATS, _VERIFY */
	uint64_t node; /* a node's own id; 0 for an open file */
	char *buf;     /* the rendered text */
	size_t len;
	bool lazy; /* a verify node not checked yet (len: the bound) */
	struct fs_file *prev, *next; /* fs->ctl_open, under fs->ctl_mu */
};

static void ctl_link(struct fs *fs, struct fs_file *f);
static void ctl_unlink(struct fs *fs, struct fs_file *f);

int fs_ctl_open(struct fs *fs, uint64_t ino, int flags, struct fs_file **fh)
{
	struct fs_file *f;

	/* NOTE(fuse): the read-only superblock refuses an open for writing
	 * before it gets here; this holds for a kernel that would not. */
	if ((flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->ino = ino;
	f->buf = fs_ctl_render(fs, ino, &f->len);
	if (!f->buf) {
		free(f);
		return -ENOMEM;
	}
	pthread_mutex_lock(&fs->ctl_mu);
	ctl_link(fs, f);
	pthread_mutex_unlock(&fs->ctl_mu);
	*fh = f;
	return 0;
}

ssize_t fs_ctl_read(struct fs_file *f, char *buf, size_t size, off_t off)
{
	if (off < 0 || (size_t)off >= f->len)
		return 0;
	if (size > f->len - (size_t)off)
		size = f->len - (size_t)off;
	memcpy(buf, f->buf + off, size);
	return (ssize_t)size;
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

int fs_ctl_lookup(struct fs *fs, const char *name, uid_t caller, uint64_t *ino,
		  struct stat *st)
{
	uint64_t kind = fs_ctl_kind_of(name);
	struct fs_file *f;

	if (!kind || !fs_ctl_readable(kind))
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
	} else {
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
	/* The file's own st_ino (fs_ctl_stat()), not the node's id. */
	fs_ctl_stat(fs, kind, st);
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

void fs_forget(struct fs *fs, uint64_t ino, uint64_t n)
{
	struct fs_file *f;

	if (!fs_is_ctl_node(ino) || !n)
		return;
	/* NOTE(fuse): a node is answered once (one lookup), so its one
	 * FORGET is the last word about it. */
	pthread_mutex_lock(&fs->ctl_mu);
	f = node_find(fs, ino);
	if (f) {
		ctl_unlink(fs, f);
		fs->ctl_nodes--;
	}
	pthread_mutex_unlock(&fs->ctl_mu);
	if (!f)
		return;
	free(f->buf);
	free(f);
}

void fs_ctl_release(struct fs *fs, struct fs_file *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&fs->ctl_mu);
	ctl_unlink(fs, f);
	if (f->node)
		fs->ctl_nodes--;
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

static void resolve_cb(void *arg, const char *path, size_t len,
		       struct hint_target *t)
{
	struct fs *fs = arg;
	uint32_t idx = fs_walk(fs, path, len);
	const struct tree_node *node;

	if (!idx)
		return;
	node = tree_node(fs->tree, idx);
	if (node->is_dir) {
		t->is_dir = true;
		return;
	}
	t->id = idx;
	t->size = node->size;
}

/* The lines of @rep that were refused. */
static uint64_t refused(const struct hint_report *rep)
{
	return rep->unknown + rep->too_long + rep->bad_utf8 + rep->dotdot +
	       rep->outside + rep->bad_range;
}

/* The parser keeps its own type, free of the engine's headers; the engine
 * takes the same bytes as struct pf_range. */
_Static_assert(
    sizeof(struct hint_entry) == sizeof(struct pf_range) &&
	offsetof(struct hint_entry, id) == offsetof(struct pf_range, id) &&
	offsetof(struct hint_entry, off) == offsetof(struct pf_range, off) &&
	offsetof(struct hint_entry, len) == offsetof(struct pf_range, len),
    "struct hint_entry and struct pf_range differ");
_Static_assert(HINT_WHOLE == PF_RANGE_WHOLE && HINT_NO_ID == PF_NO_ID,
	       "fs/hint.h and prefetch/prefetch.h differ");

/* The @n entries at @e as the engine's ranges, in place. Each is copied
 * out and back through memcpy(), which gives the heap memory the type
 * pf_range: the engine then reads pf_range objects, not hint_entry ones
 * through another type (the optimizer drops the copies). */
static const struct pf_range *as_ranges(struct hint_entry *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct pf_range r = {
		    .id = e[i].id, .off = e[i].off, .len = e[i].len};

		memcpy(&e[i], &r, sizeof(r));
	}
	return (const struct pf_range *)(void *)e;
}

int fs_apply_hint(struct fs *fs, const struct fs_hint_req *req, char *msg,
		  size_t msg_len)
{
	struct hint_report rep;
	const char *stream = req->stream;
	struct hint_entry *entries;
	size_t n;
	int rc;

	rc = hint_parse(req->text, req->len, fs->mountpoint, resolve_cb, fs,
			&entries, &n, &rep);
	if (rc) {
		snprintf(msg, msg_len, "hint from %s: %s", req->from,
			 strerror(-rc));
		log_error("%s", msg);
		return rc;
	}
	if (rep.stream[0])
		stream = rep.stream;
	else
		snprintf(rep.stream, sizeof(rep.stream), "%s", stream);
	/* if_full: the epochs queued were read from the page cache,
	 * unseen; this one takes their place (ctl_proto.h). */
	rc = pf_hint_ranges(atomic_load(&fs->pf), stream, as_ranges(entries, n),
			    n, rep.epoch,
			    rep.replace		   ? PF_REPLACE
			    : req->if_full_replace ? PF_REPLACE_IF_FULL
						   : PF_QUEUE,
			    req->owner);
	free(entries);
	if (rc == -EBUSY)
		snprintf(msg, msg_len,
			 "hint from %s: refused, 16 hints are queued already "
			 "in stream %s (wait for an epoch to finish, or "
			 "replace the queue)",
			 req->from, stream);
	else if (rc == -ENOSPC)
		snprintf(msg, msg_len,
			 "hint from %s: refused, %d other hint streams still "
			 "have hints to read, their writers running and "
			 "active in the last 10 minutes (stream %s)",
			 req->from, PF_STREAMS_MAX, stream);
	else if (rc)
		snprintf(msg, msg_len, "hint from %s: %s", req->from,
			 strerror(-rc));
	else if (refused(&rep))
		snprintf(msg, msg_len,
			 "stream=%s entries=%llu refused=%llu (first: %s)",
			 stream, (unsigned long long)rep.entries,
			 (unsigned long long)refused(&rep), rep.first_bad);
	else
		snprintf(msg, msg_len, "stream=%s entries=%llu refused=0",
			 stream, (unsigned long long)rep.entries);

	pthread_mutex_lock(&fs->hint_mu);
	fs->last_hint = rep;
	if (rc)
		fs->hints_rejected++;
	pthread_mutex_unlock(&fs->hint_mu);

	if (rc) {
		log_error("%s", msg);
		return rc;
	}
	if (refused(&rep))
		log_warn(
		    "hint from %s: %llu entries taken, %llu lines refused "
		    "(%llu not in the listing, %llu too long, %llu not UTF-8, "
		    "%llu with '..', %llu outside the mount, %llu bad "
		    "ranges); first: %s",
		    req->from, (unsigned long long)rep.entries,
		    (unsigned long long)refused(&rep),
		    (unsigned long long)rep.unknown,
		    (unsigned long long)rep.too_long,
		    (unsigned long long)rep.bad_utf8,
		    (unsigned long long)rep.dotdot,
		    (unsigned long long)rep.outside,
		    (unsigned long long)rep.bad_range, rep.first_bad);
	else
		log_info("hint from %s: %llu entries in stream %s%s", req->from,
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

/* A range line names its file: warm fetches and evict drops whole
 * objects. It is refused as a hint's would be (a directory, an offset at
 * or past the end), so one file of ranges serves both. */
static int gather_cb(void *arg, const char *path, size_t len, uint64_t off,
		     uint64_t rlen)
{
	struct id_list *l = arg;
	long got;

	if (len == 1 && path[0] == '*' && rlen == HINT_WHOLE) {
		l->all = true;
		return HINT_TAKEN;
	}
	if (rlen != HINT_WHOLE) {
		struct hint_target t = {.id = HINT_NO_ID, .is_dir = len == 0};

		if (len)
			resolve_cb(l->fs, path, len, &t);
		if (t.is_dir)
			return HINT_RANGE_DIR;
		if (t.id == HINT_NO_ID)
			return HINT_UNKNOWN;
		if (off >= t.size)
			return HINT_RANGE_PAST_END;
	}
	got = fs_files_under(l->fs, path, len, &l->ids, &l->n, &l->cap);
	return got < 0 ? (int)got : got > 0 ? HINT_TAKEN : HINT_UNKNOWN;
}

/* Says what a warm or evict list @what did into @msg, and logs it. */
static void say_list(const char *what, const struct hint_report *rep,
		     size_t n_files, char *msg, size_t msg_len)
{
	if (refused(rep))
		snprintf(msg, msg_len,
			 "files=%zu entries=%llu refused=%llu (first: %s)",
			 n_files, (unsigned long long)rep->entries,
			 (unsigned long long)refused(rep), rep->first_bad);
	else
		snprintf(msg, msg_len, "files=%zu entries=%llu refused=0",
			 n_files, (unsigned long long)rep->entries);
	if (refused(rep))
		log_warn("%s: %zu file(s) from %llu entries, %llu lines "
			 "refused; first: %s",
			 what, n_files, (unsigned long long)rep->entries,
			 (unsigned long long)refused(rep), rep->first_bad);
	else
		log_info("%s: %zu file(s) from %llu entries", what, n_files,
			 (unsigned long long)rep->entries);
}

static int apply_warm(struct fs *fs, const char *text, size_t len, char *msg,
		      size_t msg_len)
{
	struct id_list l = {.fs = fs};
	struct hint_report rep;
	int rc;

	rc = hint_foreach(text, len, fs->mountpoint, gather_cb, &l, &rep);
	if (!rc)
		rc = pf_warm(atomic_load(&fs->pf), l.ids, l.n);
	if (rc == -EBUSY)
		snprintf(msg, msg_len,
			 "warm: refused, %zu objects would pass the limit of "
			 "pending ones (4 per listed object): wait for the "
			 "warm in progress",
			 l.n);
	else if (rc)
		snprintf(msg, msg_len, "warm: %s", strerror(-rc));
	else
		say_list("warm", &rep, l.n, msg, msg_len);
	if (rc)
		log_error("%s", msg);
	free(l.ids);
	return rc;
}

static int apply_evict(struct fs *fs, const char *text, size_t len, char *msg,
		       size_t msg_len)
{
	struct id_list l = {.fs = fs};
	struct hint_report rep;
	int rc;

	rc = hint_foreach(text, len, fs->mountpoint, gather_cb, &l, &rep);
	if (rc) {
		snprintf(msg, msg_len, "evict: %s", strerror(-rc));
		log_error("%s", msg);
	} else if (l.all) {
		rc = cache_clear(fs->cache);
		snprintf(msg, msg_len, "%s",
			 rc ? "evict: clearing the cache failed" : "all");
		log_info("evict: the whole cache%s", rc ? " failed" : "");
	} else {
		/* The engine knows which objects it caches by blocks. */
		for (size_t i = 0; i < l.n; i++)
			pf_evict(atomic_load(&fs->pf), l.ids[i]);
		say_list("evict", &rep, l.n, msg, msg_len);
	}
	free(l.ids);
	return rc;
}

/* ---- the socket's commands --------------------------------------------------
 */

/* Parses the arguments of a hint request into @req. */
static int hint_args(const struct fs_ctl_cmd *cmd, struct fs_hint_req *req,
		     char *msg, size_t msg_len)
{
	for (size_t i = 0; i < cmd->argc; i++) {
		const char *a = cmd->argv[i];
		char *end;

		if (!strcmp(a, "own=parent")) {
			req->own = FS_OWN_PARENT;
		} else if (!strncmp(a, "own=", 4)) {
			unsigned long k;

			errno = 0;
			k = strtoul(a + 4, &end, 10);
			if (errno || *end || end == a + 4 || k < 1 ||
			    k > 999999) {
				snprintf(msg, msg_len,
					 "hint: %s: expected own=1..999999", a);
				return -EINVAL;
			}
			req->own = (unsigned)k;
		} else if (!strcmp(a, "if_full=replace")) {
			req->if_full_replace = true;
		} else {
			snprintf(msg, msg_len, "hint: unknown argument '%.64s'",
				 a);
			return -EINVAL;
		}
	}
	return 0;
}

int fs_control(struct fs *fs, const struct fs_ctl_cmd *cmd, char *msg,
	       size_t msg_len)
{
	const char *verb = cmd->verb;
	int rc;

	msg[0] = '\0';
	if (strcmp(verb, "hint") && cmd->argc) {
		snprintf(msg, msg_len, "%s: takes no argument", verb);
		return -EINVAL;
	}
	if (!strcmp(verb, "hint")) {
		struct fs_hint_req req = {
		    .text = cmd->text,
		    .len = cmd->len,
		    .stream = NULL,
		    .from = "the control socket",
		    .owner = cmd->pid,
		};
		char stream[HINT_STREAM_MAX + 1];

		rc = hint_args(cmd, &req, msg, msg_len);
		if (rc)
			return rc;
		/* The pid is the sender's as this daemon's pid namespace
		 * sees it (SO_PEERCRED): unique on the node, where two
		 * containers may each have a pid 7. own=parent (hintfs-ctl)
		 * names the script that runs it once per epoch, which owns
		 * the stream: its end lets the stream be reclaimed. */
		if (req.own == FS_OWN_PARENT) {
			req.owner = proc_ppid(cmd->pid);
			if (!req.owner) {
				snprintf(msg, msg_len,
					 "hint: own=parent: the sender's "
					 "parent is unknown");
				return -ESRCH;
			}
			snprintf(stream, sizeof(stream), "ctl-%ld",
				 (long)req.owner);
		} else if (req.own <= 1) {
			snprintf(stream, sizeof(stream), "pid:%ld",
				 (long)cmd->pid);
		} else {
			snprintf(stream, sizeof(stream), "pid%ld.%u",
				 (long)cmd->pid, req.own);
		}
		req.stream = stream;
		return fs_apply_hint(fs, &req, msg, msg_len);
	}
	if (!strcmp(verb, "warm"))
		return apply_warm(fs, cmd->text, cmd->len, msg, msg_len);
	if (!strcmp(verb, "evict"))
		return apply_evict(fs, cmd->text, cmd->len, msg, msg_len);
	if (!strcmp(verb, "relist")) {
		rc = fs_relist(fs);
		snprintf(msg, msg_len, "%s",
			 rc ? "relist failed (see the daemon's log)" : "ok");
		return rc;
	}
	if (!strcmp(verb, "ping")) {
		snprintf(msg, msg_len, "hintfs %s", HINTFS_VERSION);
		return 0;
	}
	snprintf(msg, msg_len,
		 "unknown command '%.32s' (hint, warm, evict, relist, ping)",
		 verb);
	return -EINVAL;
}
