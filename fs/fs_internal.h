/**
 * fs/fs_internal.h - the struct fs shared by the files of the fs core. The
 * FUSE adapter (fs_ops.c) and main.c use the core's face, fs/fs.h, never
 * its fields. tests/check_includes.py holds the list below to the truth.
 *
 * Includers: fs/fs.c, fs/mount.c, fs/ctl.c, fs/ctl_sock.c, fs/watch.c,
 * fs/stats_json.c, fs/listing.c, fs/follow.c, fs/passthrough.c, fs/store.c,
 * tests/unit/.
 */
#ifndef HINTFS_FS_FS_INTERNAL_H
#define HINTFS_FS_FS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "fs/fs.h"
#include "fs/hint.h"
#include "fs/tree.h"
#include "cache/cache.h"
#include "common/ctl_proto.h"

/* S3 keys are at most 1,024 bytes and so is a prefix: with room. */
#define FS_KEY_MAX 4096

struct fs_store;
struct fuse_session;

struct fs {
	struct s3_client *s3;
	struct s3_client *tier_s3; /* the shared cache tier's, or NULL */
	struct cache *cache;
	struct pf *_Atomic pf; /* set once started; the cache's eviction
				  callback may run before */
	struct tree *tree;
	char *prefix;	  /* "" or ends in '/' */
	char *source;	  /* "s3://bucket/prefix", for messages */
	char *mountpoint; /* for absolute hint entries */
	char *cache_dir;
	uid_t uid;
	gid_t gid;
	int64_t mount_time;
	bool listed_from_cache; /* the listing came from the cache */
	uint64_t list_ms;	/* how long getting the listing took */
	char *listing_name;	/* the snapshot's name in the cache */
	_Atomic int64_t listing_saved_at; /* when the snapshot was taken */
	pthread_mutex_t relist_mu;	  /* one relist at a time */
	struct fs_store *_Atomic store; /* -o store_ahead (store.c), or NULL */

	/* Hints: the last one's report, for stats. */
	pthread_mutex_t hint_mu;
	struct hint_report last_hint;
	uint64_t hints_rejected; /* hints the engine could not take */

	/* Control files open now (ctl.c): with -o open_per_file one per
	 * open, else one node per lookup, alive until its forget. */
	pthread_mutex_t ctl_mu;
	struct fs_file *ctl_open;
	uint32_t ctl_nodes;	      /* nodes alive */
	uint64_t ctl_next;	      /* the next node's id */
	uint64_t ctl_refused;	      /* lookups refused at the cap */
	struct fs_ctl_sock *ctl_sock; /* the control socket (ctl_sock.c) */
	char *ctl_sock_path;	      /* where it listens: .hintfs/control */

	bool open_per_file;	 /* fs_config.open_per_file */
	struct fs_pt *pt;	 /* -o passthrough's state (passthrough.c) */
	bool passthrough;	 /* asked for; cleared by an INIT without it */
	struct fuse_session *se; /* for notifications (fs_ops_set_session()) */
	_Atomic uint64_t fuse_req[FS_REQ_N]; /* requests by kind */
	struct fs_follow *follow; /* readers of large files (follow.c) */

	/* The -o hint=FILE watcher. */
	char *hint_file;
	pthread_t watcher;
	bool watcher_started;
	pthread_mutex_t watch_mu;
	bool watch_stop;
	int watch_efd; /* eventfd that wakes the watcher to stop */
};

/** Walks @path (@len bytes, relative, '/'-separated) from the root;
 *  returns the node index or 0 when absent. */
uint32_t fs_walk(const struct fs *fs, const char *path, size_t len);

/** The object id (node index) of the file at @path, or HINT_NO_ID for a
 *  directory or an absent path. */
uint32_t fs_file_id(const struct fs *fs, const char *path, size_t len);

/** Hands the whole of file @ino, when it is in the local cache, to @cb by
 *  reference (cache_read_ref), without counting a read: for filling the
 *  kernel's page cache ahead (store.c). -ENODATA when not cached. */
ssize_t fs_cached_ref(struct fs *fs, uint64_t ino, cache_ref_cb cb, void *arg);

/** Opens the cache file that holds exactly the object of file @ino, for
 *  passthrough (cache_open_file_held()): an fd the caller closes, or
 *  -ENODATA (not cached), -ENOTSUP (not in a file of its own), -errno.
 *  On success *@hold goes to fs_cached_file_release() once nothing reads
 *  the file any more (its backing id closed). */
int fs_cached_file(struct fs *fs, uint64_t ino, uint64_t *hold);
void fs_cached_file_release(struct fs *fs, uint64_t hold);

/** own=parent: the stream of the sender's parent, "ctl-<ppid>". */
#define FS_OWN_PARENT UINT32_MAX

/** A hint to hand to the engine (fs_apply_hint()). */
struct fs_hint_req {
	const char *text; /**< the hint, in hint syntax (doc/design.md 2.2) */
	size_t len;
	const char *stream; /**< the stream unless the header names one */
	const char *from;   /**< names the source in log lines */
	pid_t owner;	    /**< the process that sent it, whose end lets the
				 stream be reclaimed (pf_hint()); 0: unknown */
	unsigned own;	    /**< the sender's stream number (ctl_proto.h own=),
				 or FS_OWN_PARENT */
	bool if_full_replace; /**< a full queue is replaced, not refused */
};

/** Parses @req's text as a hint and hands it to the engine. Says what was
 *  done, or why not, in @msg (the reason is logged too). Returns 0 or
 *  -errno: -EBUSY a full queue, -ENOSPC no stream free, -ENOMEM. Any
 *  thread. */
int fs_apply_hint(struct fs *fs, const struct fs_hint_req *req, char *msg,
		  size_t msg_len);

/** A request of the control socket, parsed (ctl_sock.c). */
struct fs_ctl_cmd {
	const char *verb;	 /**< hint, warm, evict, relist, ping */
	const char *const *argv; /**< its arguments, "key=value" */
	size_t argc;
	const char *text; /**< the payload */
	size_t len;
	pid_t pid; /**< the sender, in this daemon's pid namespace */
};

/**
 * Carries out @cmd for a sender the caller has let in (fs_may_control()).
 * Writes the reply's text into @msg: what was done, or the one-line reason
 * it was not (also logged). Returns 0 or -errno (-EINVAL: an unknown verb
 * or argument). Any thread.
 */
int fs_control(struct fs *fs, const struct fs_ctl_cmd *cmd, char *msg,
	       size_t msg_len);

/**
 * Binds the control socket at @path (created 0600 in a directory made
 * 0700 if missing; a stale socket of a killed daemon is replaced) and
 * starts its thread. Returns 0 or -errno with the reason in @err. At
 * mount, before any request.
 */
int fs_ctl_sock_start(struct fs *fs, const char *path, char *err,
		      size_t err_len);

/** Stops the control socket's thread, waits for the requests being
 *  carried out and removes the socket. NULL-safe; at unmount. */
void fs_ctl_sock_stop(struct fs *fs);

/** Starts / stops the -o hint=FILE watcher thread. */
int fs_hint_watch_start(struct fs *fs);
void fs_hint_watch_stop(struct fs *fs);

/** Lists the bucket again and saves the listing for the next mount (the
 *  running mount keeps its snapshot). Returns 0 or -errno (logged). */
int fs_relist(struct fs *fs);

/** The ids of every file at or under @path (@len bytes; 0 = the root),
 *  appended to *@ids (realloc'd; *@n, *@cap). Returns the count added
 *  (0: not in the listing) or -ENOMEM. */
long fs_files_under(const struct fs *fs, const char *path, size_t len,
		    uint32_t **ids, size_t *n, size_t *cap);

/** Renders the stats JSON into a malloc'd string; its length in *@len. */
char *fs_stats_json(struct fs *fs, size_t *len);

/* verify checks every cached blob: a node of it checks at its first READ,
 * not at the LOOKUP that a stat() or `ls -l` makes too. Until then its
 * size is this bound (NOTE(fuse): the short READ then sets the size the
 * kernel shows, fuse_short_read()); the keys listed stop before it. */
#define CTL_VERIFY_SIZE	    (64u << 10)
#define CTL_VERIFY_KEYS_MAX (CTL_VERIFY_SIZE - 1024)

/** Checks every cached blob now and renders the verdict as JSON into a
 *  malloc'd string (NULL: no memory); its length in *@len. Drops what is
 *  corrupt. Any thread (stats_json.c). */
char *fs_verify_json(struct fs *fs, size_t *len);

/* A hint for 100 million samples at ~40 bytes a line; more is a mistake. */
#define CTL_HINT_MAX CTL_PROTO_PAYLOAD_MAX

/* Readers followed from their reads (follow.c). */
struct fs_follow;

/** The table of readers part-way through a file, on @clock_ns (NULL:
 *  mono_ns(); a test's virtual clock otherwise). NULL when out of
 *  memory. */
struct fs_follow *fs_follow_create(uint64_t (*clock_ns)(void));
void fs_follow_destroy(struct fs_follow *fl);

/** The control file named @name (FS_INO_CTL_STATS ...), or 0 (fs.c). */
uint64_t fs_ctl_kind_of(const char *name);

/** Whether control file @kind is a file read for its text (stats,
 *  verify), not the link to the socket (fs.c). */
bool fs_ctl_readable(uint64_t kind);

/** Whether @ino is a control-file node (FS_INO_CTL_NODE0 on). */
static inline bool fs_is_ctl_node(uint64_t ino)
{
	return ino >= FS_INO_CTL_NODE0;
}

/** The control file (FS_INO_CTL_STATS ...) node @ino is a copy of, and its
 *  length in *@len; 0 when no such node is alive. */
uint64_t fs_ctl_node_kind(struct fs *fs, uint64_t ino, uint64_t *len);

/** Fills the attributes of control file @kind (fs.c). */
void fs_ctl_stat(struct fs *fs, uint64_t kind, struct stat *st);

/** Whether @caller may use the control files (fs.c). */
bool fs_may_control(const struct fs *fs, uid_t caller);

/** Renders the text of readable control file @kind (stats, verify) into a
 *  malloc'd string; NULL when out of memory. */
char *fs_ctl_render(struct fs *fs, uint64_t kind, size_t *len);

/* Control files with -o open_per_file (ctl.c): rendered at open;
 * -EROFS for an open that is not read-only. */
int fs_ctl_open(struct fs *fs, uint64_t ino, int flags, struct fs_file **fh);
ssize_t fs_ctl_read(struct fs_file *fh, char *buf, size_t size, off_t off);
void fs_ctl_release(struct fs *fs, struct fs_file *fh);
/** Frees the control files still open (at fs_destroy()). */
void fs_ctl_release_all(struct fs *fs);

/* The listing snapshot (listing.c). */
struct listing_buf;

/**
 * An empty snapshot being recorded, to be saved in @cache under @name: it
 * is written to the cache chunk by chunk as it grows (so it never sits
 * whole in memory), and is used from the next mount once listing_save()
 * returned 0. NULL when out of memory.
 */
struct listing_buf *listing_buf_create(struct cache *cache, const char *name);

/** Frees @lb; what it wrote is dropped unless it was saved. Accepts NULL. */
void listing_buf_destroy(struct listing_buf *lb);

/** How many objects @lb holds. */
uint64_t listing_buf_count(const struct listing_buf *lb);

/**
 * Records one listed object. Returns 0 or -ENOMEM (-EINVAL for a key or
 * ETag too long to record). A failed write to the cache is kept for
 * listing_save(): the listing goes on.
 */
int listing_buf_add(struct listing_buf *lb, const struct s3_object *o);

/**
 * Makes the snapshot the one the next mount uses, stamped with the time,
 * after the listing finished without error. Returns 0 or the -errno of
 * the first write that failed (the snapshot in use is then unchanged).
 */
int listing_save(struct listing_buf *lb);

/**
 * Loads the snapshot saved under @name and calls @cb for each object, as
 * s3_list() would, after making room in @b (or NULL) for all of them.
 * -ENODATA when none is saved, -EPROTO when it is damaged (the caller
 * lists again). Reads the snapshot in place: no copy of it is made.
 */
int listing_load(struct cache *cache, const char *name, struct tree_builder *b,
		 s3_list_cb cb, void *arg, uint64_t *count, int64_t *saved_at);

#endif /* HINTFS_FS_FS_INTERNAL_H */
