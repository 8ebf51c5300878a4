/**
 * fs/fs.h - the filesystem core: what each FUSE request means, without
 * FUSE (public header of fs; used by the FUSE adapter and the tests).
 *
 * A struct fs is created from a configuration by listing the bucket, and
 * then answers lookups, attributes, directory reads, opens and reads by
 * inode number. The namespace is a snapshot taken at mount (doc/design.md
 * 2.1), so inode numbers are stable for the life of the mount and need no
 * reference counting: forget is a no-op.
 *
 * Every function returns 0 (or a byte count) or a -errno meant for the
 * kernel, and may be called from any thread at once; none holds a lock
 * across network I/O.
 */
#ifndef HINTFS_FS_FS_H
#define HINTFS_FS_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "prefetch/prefetch.h"

/** The root's inode number, FUSE_ROOT_ID. */
#define FS_INO_ROOT 1
/** The control directory <mount>/.hintfs; far above any listed node. */
#define FS_INO_CTL_DIR (UINT64_C(1) << 48)
/** <mount>/.hintfs/stats: one JSON object of counters. */
#define FS_INO_CTL_STATS (FS_INO_CTL_DIR + 1)
/** <mount>/.hintfs/verify: reading checks every cached blob. */
#define FS_INO_CTL_VERIFY (FS_INO_CTL_DIR + 2)
/** <mount>/.hintfs/control: a symbolic link to the control socket, where
 *  hints, warm and evict lists and relists are sent (common/ctl_proto.h). */
#define FS_INO_CTL_CONTROL (FS_INO_CTL_DIR + 3)
/**
 * With zero-message opens every lookup of a control file makes a node of
 * its own, numbered from here on (fs/ctl.c): its contents live from that
 * LOOKUP to its FORGET.
 */
#define FS_INO_CTL_NODE0 (FS_INO_CTL_DIR + 4096)
/** Its name: looked up, never listed by readdir. */
#define FS_CTL_NAME ".hintfs"
/** The extended attribute holding a file's ETag (quotes removed). */
#define FS_XATTR_ETAG "user.hintfs.etag"

struct fs_config {
	struct s3_config s3;	/**< the bucket and how to reach it */
	const char *prefix;	/**< "" or a key prefix ending in '/' */
	const char *mountpoint; /**< absolute; stripped from hint entries */
	uid_t uid;		/**< owner shown for every inode, and the
				     mount's owner: with root, the only user
				     who may use the control files */
	gid_t gid;
	const char *cache_dir; /**< the cache's directory */
	uint64_t cache_size;   /**< bytes; 0: cache_size_pct of free space */
	unsigned int cache_size_pct;
	bool relist;		   /**< list again even if a listing is saved */
	const char *hint_file;	   /**< watched hint file, or NULL */
	const char *ctl_socket;	   /**< the control socket's path; NULL:
					the default (fs_ctl_sock_start()) */
	unsigned int max_inflight; /**< 0: default */
	unsigned int net_threads;  /**< 0: from the cores */
	uint32_t window;	   /**< 0: default */
	uint32_t pace_ms;	   /**< pf_config.pace_ms */
	uint64_t fetch_mem;	   /**< bytes of fetch buffers; 0: default */
	/* The shared cache tier: tier.bucket NULL for none. */
	struct s3_config tier;	 /**< the tier bucket and how to reach it */
	const char *tier_prefix; /**< "" or ending in '/' */
	unsigned int tier_hedge_ms;
	const char *tier_key; /**< -o shared_cache_key's bytes, or NULL */
	size_t tier_key_len;
	uint64_t tier_put_mem; /**< 0: default */
	/** The data path: false (the default) answers the kernel's first
	 *  OPEN and FLUSH with ENOSYS, so it sends none again (zero-message
	 *  opens); true keeps an OPEN and a RELEASE per file. */
	bool open_per_file;
	/** FUSE passthrough (fs/passthrough.c): implies open_per_file, and
	 *  the cache keeps each object in a file of its own. */
	bool passthrough;
};

struct fs;

/**
 * Lists the bucket and builds the namespace. On failure returns a -errno
 * and writes one line for the user into @err (@err_len bytes): what was
 * wrong, never a credential. Call from one thread.
 */
int fs_create(const struct fs_config *cfg, struct fs **out, char *err,
	      size_t err_len);

/** Frees @fs after every other call has returned. Accepts NULL. */
void fs_destroy(struct fs *fs);

/**
 * Makes every read waiting on the network, and every later one, fail with
 * EIO at once (pf_cancel()): the daemon is stopping, and the FUSE loop
 * joins its workers before fs_destroy(). Any thread; NULL ok.
 */
void fs_cancel(struct fs *fs);

/** Fills @st for inode @ino. -ENOENT for an unknown inode. */
int fs_getattr(struct fs *fs, uint64_t ino, struct stat *st);

/**
 * Finds @name in directory @parent; on success stores the child's inode
 * in *@ino and its attributes in @st. -ENOENT when absent, -ENOTDIR when
 * @parent is a file.
 */
int fs_lookup(struct fs *fs, uint64_t parent, const char *name, uint64_t *ino,
	      struct stat *st);

/** One entry of a directory, as fs_readdir() passes it on. */
struct fs_dirent {
	const char *name; /**< not NUL-terminated */
	size_t name_len;
	uint64_t ino;
	struct stat st; /**< full attributes (for readdirplus) */
};

/**
 * Called by fs_readdir() for each entry from offset @off on; @next_off is
 * the offset that resumes after this entry. Return non-zero to stop (the
 * reply buffer is full): that entry was not consumed.
 */
typedef int (*fs_dirent_cb)(void *arg, const struct fs_dirent *e,
			    off_t next_off);

/**
 * Lists directory @ino from offset @off (0 = start; "." and ".." come
 * first), calling @cb until it stops or the directory ends. Returns 0,
 * -ENOENT or -ENOTDIR.
 */
int fs_readdir(struct fs *fs, uint64_t ino, off_t off, fs_dirent_cb cb,
	       void *arg);

/** Per-open state of a control file; dataset files have none (NULL). */
struct fs_file;

/**
 * Opens inode @ino with open(2) @flags for the user @caller (the uid of
 * the process asking): -EROFS for any write access, -EISDIR for a
 * directory opened as a file, -EACCES for a control file opened by a user
 * other than the mount's owner and root, -ELOOP for the link to the
 * control socket, -ENOENT. On success stores the per-open state in *@fh
 * (NULL for dataset files) and sets *@direct_io for files whose size is
 * not known in advance (the control files).
 */
int fs_open(struct fs *fs, uint64_t ino, int flags, uid_t caller,
	    struct fs_file **fh, bool *direct_io);

/**
 * Reads up to @size bytes at @off of file @ino (opened as @fh) into @buf.
 * Returns the bytes read (0 at or past the end of file) or -errno: -EIO
 * when the server failed, -ESTALE when the object changed or vanished
 * since the listing, -EACCES when access was refused.
 */
ssize_t fs_read(struct fs *fs, uint64_t ino, struct fs_file *fh, char *buf,
		size_t size, off_t off);

/**
 * Serves a read of file @ino (opened as @fh) that hits the local cache by
 * reference: hands the bytes to @cb (see cache_read_ref) and returns its
 * result. -ENODATA when it cannot (a miss, a control file, any error to
 * report): the caller then calls fs_read(), which does everything else.
 * Any thread.
 */
ssize_t fs_read_ref(struct fs *fs, uint64_t ino, struct fs_file *fh,
		    size_t size, off_t off, cache_ref_cb cb, void *arg);

/**
 * fs_read() of a dataset file without a buffer: the bytes go to @cb
 * (pf_read_cb()) wherever they come from, cache or network, and its
 * result is returned; or 0 (end of file) or -errno as fs_read() gives
 * them, with @cb not called. Any thread.
 */
ssize_t fs_read_cb(struct fs *fs, uint64_t ino, size_t size, off_t off,
		   cache_ref_cb cb, void *arg);

/**
 * readlink(2) of .hintfs/control: the control socket's path into @buf
 * (NUL-terminated), its length returned; -EINVAL for anything else that
 * exists, -ENAMETOOLONG when @size is too small. Any thread.
 */
ssize_t fs_readlink(struct fs *fs, uint64_t ino, char *buf, size_t size);

/** Whether a LOOKUP of @name in the control directory makes a node of its
 *  own (fs_ctl_lookup(): stats, verify), rather than finding a fixed
 *  inode (the link to the socket). Any thread. */
bool fs_ctl_makes_node(const char *name);

struct fuse_session;
struct fs_pt;

/** Keeps the kernel session for the core's notifications and passthrough's
 *  backing files (an opaque pointer here). Once, before the first request
 *  that needs it (fs_ops_set_session()). */
void fs_set_session(struct fs *fs, struct fuse_session *se);

/** The session set by fs_set_session(), or NULL. Any thread. */
struct fuse_session *fs_session(const struct fs *fs);

/** Whether -o passthrough was asked for (and not turned off since by a
 *  kernel without it). Any thread. */
bool fs_passthrough_asked(const struct fs *fs);

/** The kernel cannot pass through: the mount reads through READ, one OPEN
 *  per file. Only from the FUSE init, before any request. */
void fs_passthrough_refuse(struct fs *fs);

/** The passthrough state when the data path is passthrough, else NULL.
 *  Any thread. */
struct fs_pt *fs_passthrough(const struct fs *fs);

/** The control socket's path (what .hintfs/control links to), owned by
 *  @fs. Any thread. */
const char *fs_ctl_socket(const struct fs *fs);

/** The last close of an open file: frees @fh (NULL is fine). */
void fs_release(struct fs *fs, uint64_t ino, struct fs_file *fh);

/**
 * access(2) for the user @caller: 0, -ENOENT, -EACCES for a control file
 * and a user other than the mount's owner and root, or -EROFS for W_OK.
 */
int fs_access(struct fs *fs, uint64_t ino, int mask, uid_t caller);

/**
 * getxattr: copies attribute @name of @ino into @buf of @size bytes.
 * With @size 0 only returns the value's length. Returns the length,
 * -ENODATA when absent, -ERANGE when @buf is too small.
 */
ssize_t fs_getxattr(struct fs *fs, uint64_t ino, const char *name, char *buf,
		    size_t size);

/** listxattr: the NUL-separated names of @ino's attributes, like getxattr. */
ssize_t fs_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size);

/** The FUSE requests counted in stats, one counter per kind (those on the
 *  control directory and its files are not counted). */
enum fs_req {
	FS_REQ_LOOKUP,
	FS_REQ_FORGET, /**< one per inode forgotten, batches included */
	FS_REQ_GETATTR,
	FS_REQ_SETATTR,
	FS_REQ_ACCESS,
	FS_REQ_OPEN,
	FS_REQ_READ,
	FS_REQ_WRITE,
	FS_REQ_FLUSH,
	FS_REQ_FSYNC,
	FS_REQ_RELEASE,
	FS_REQ_OPENDIR,
	FS_REQ_READDIR,
	FS_REQ_READDIRPLUS,
	FS_REQ_RELEASEDIR,
	FS_REQ_STATFS,
	FS_REQ_XATTR, /**< getxattr and listxattr */
	FS_REQ_IOCTL, /**< one per isatty() of an open file, among others */
	FS_REQ_OTHER, /**< every write-type request (EROFS) */
	FS_REQ_N
};

/** Counts one FUSE request of @kind (relaxed: a counter, not a fence).
 *  Any thread. */
void fs_count_request(struct fs *fs, enum fs_req kind);

/** Whether the mount keeps an OPEN and RELEASE per file (fs_config). */
bool fs_open_per_file(const struct fs *fs);

/** Falls back to an OPEN and RELEASE per file (a kernel without
 *  zero-message opens). Only from the FUSE init, before any request. */
void fs_set_open_per_file(struct fs *fs);

/** Reads control-file node @ino (fs_ctl_lookup()) for user @caller, like
 *  fs_read(): -EACCES, -ENOENT for an unknown node. Any thread. */
ssize_t fs_ctl_node_read(struct fs *fs, uint64_t ino, uid_t caller, char *buf,
			 size_t size, off_t off);

/** The data path in words, for the log, stats and hintfs-ctl info:
 *  "zero-message opens" or "open per file". Static storage. */
const char *fs_data_path(const struct fs *fs);

/**
 * Tells the engine a reader read @size bytes at @off of file @ino, when
 * the kernel sends no OPEN or RELEASE (zero-message opens): a read at 0
 * is an open (the hint's window moves on past the file) and a read that
 * reaches the end of the file its close (fs/follow.c). Call with @done
 * false before serving the read and true after. Any thread; a no-op for
 * anything but a dataset file, and with -o open_per_file.
 */
void fs_follow_read(struct fs *fs, uint64_t ino, size_t size, off_t off,
		    bool done);

/**
 * Zero-message opens: a lookup of control file @name by user @caller
 * makes a node of its own (a fresh inode number, in *@ino, with its
 * attributes in @st; the stats and verify files rendered now, their
 * exact size in @st). -ENOENT for another name, -EACCES for a user other
 * than the mount's owner and root, -ENFILE when 64 nodes are alive (a
 * process that never closes one must not make them grow without end).
 * Any thread.
 */
int fs_ctl_lookup(struct fs *fs, const char *name, uid_t caller, uint64_t *ino,
		  struct stat *st);

/** The kernel forgot @n lookups of @ino: a control-file node is gone, and
 *  freed. Any thread. */
void fs_forget(struct fs *fs, uint64_t ino, uint64_t n);

/** Fills @sv: the dataset's size, its object count, NAME_MAX. */
int fs_statfs(struct fs *fs, struct statvfs *sv);

#endif /* HINTFS_FS_FS_H */
