/*
 * fs/fs_ops.c - the thin FUSE adapter: turns fuse_req_t into calls on the
 * fs core (fs/fs.c) and the core's results into replies.
 *
 * This is the only file that calls fuse_reply_*. Every request gets
 * exactly one reply on every path. The mount is read-only in the kernel
 * (main.c mounts with "ro"): it refuses every write-type call with EROFS
 * before a request is sent, an open for writing too, for root too, so no
 * page of a dataset file can be dirtied. The write-type requests are
 * answered EROFS here all the same, for a kernel that would send one.
 * Every request is counted by kind (fs_count_request(), stats "fuse").
 *
 * The data path (fs_data_path()). By default the first OPEN, OPENDIR and
 * FLUSH are answered ENOSYS. NOTE(fuse): the kernel then sets no_open,
 * no_opendir and no_flush for the whole connection (fs/fuse/file.c
 * fuse_file_open(), fuse_flush()): no OPEN, RELEASE, OPENDIR,
 * RELEASEDIR or FLUSH is ever sent again, files keep their pages across
 * opens (FOPEN_KEEP_CACHE is the default without OPEN) and directories
 * their listing (FOPEN_CACHE_DIR). A file in the page cache then costs
 * the daemon nothing, and one not in it a READ (plus a LOOKUP when its
 * dentry is not cached; READDIRPLUS fills them during a scan). The
 * engine follows readers from their READs (fs/follow.c); the control
 * files that are read live from LOOKUP to FORGET (fs/ctl.c). With
 * -o open_per_file (or
 * a kernel without FUSE_CAP_NO_OPEN_SUPPORT) every open sends OPEN and
 * RELEASE, as before: noflush and keep_cache for data files, direct I/O
 * and per-open state for the control files.
 */
#include "fs/fs_ops.h"
#include "fs/fs.h"
#include "fs/passthrough.h"
#include "fs/store.h"
#include "common/log.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * NOTE(fuse): the namespace is a snapshot that never changes while mounted
 * (doc/design.md 2.1), so the kernel may keep entries, attributes and absent
 * names for as long as it likes. A day is "forever" without overflowing
 * anything. A relist does not change the running mount (its listing is
 * used from the next mount on), so nothing here is ever invalidated.
 */
#define FS_TTL_S 86400.0

/* NOTE(fuse): a control file's node lives from one LOOKUP to its FORGET
 * (fs/ctl.c): a timeout of 0 makes every path walk look it up again and
 * drops the dentry, and with it the inode, at its last use. */
#define FS_CTL_TTL_S 0.0

static struct fs *req_fs(fuse_req_t req)
{
	return *(struct fs **)fuse_req_userdata(req);
}

/* The fs of @req, with the request on inode @ino counted as @kind. The
 * control directory's own traffic is left out: reading the counters does
 * not move them, so requests per file are read off stats exactly. */
static struct fs *count(fuse_req_t req, enum fs_req kind, fuse_ino_t ino)
{
	struct fs *fs = req_fs(req);

	if (ino < FS_INO_CTL_DIR)
		fs_count_request(fs, kind);
	return fs;
}

/* NOTE(fuse): the uid of the process behind @req; with allow_other it may
 * be any local user, and the fs core decides what that user may do. */
static uid_t req_uid(fuse_req_t req)
{
	return fuse_req_ctx(req)->uid;
}

static int reply_entry(fuse_req_t req, uint64_t ino, const struct stat *st)
{
	double ttl = ino >= FS_INO_CTL_NODE0 ? FS_CTL_TTL_S : FS_TTL_S;
	struct fuse_entry_param e = {
	    .ino = ino,
	    .generation = 1,
	    .attr_timeout = ttl,
	    .entry_timeout = ttl,
	};

	if (st)
		e.attr = *st;
	return fuse_reply_entry(req, &e);
}

/*
 * -o passthrough (fs/passthrough.c). NOTE(fuse): the kernel offers it
 * only with CONFIG_FUSE_PASSTHROUGH, and drops it with a writeback cache
 * (not used here). A backing file on a stacked file system (overlayfs)
 * would need max_backing_stack_depth 1, which forbids stacking anything
 * on this mount; the cache lives on a plain one, so 0 (the default).
 * Without it the mount keeps an OPEN per file, reads through READ.
 */
static void init_passthrough(struct fs *fs, struct fuse_conn_info *conn)
{
	if (!fs_passthrough_asked(fs))
		return;
#ifdef HINTFS_HAVE_PASSTHROUGH
	if (conn->capable & FUSE_CAP_PASSTHROUGH) {
		conn->want |= FUSE_CAP_PASSTHROUGH;
		conn->max_backing_stack_depth = FUSE_BACKING_STACKED_UNDER;
		return;
	}
#endif
	fs_passthrough_refuse(fs);
	log_warn("-o passthrough: the kernel has no FUSE passthrough (Linux "
		 "6.9+ with CONFIG_FUSE_PASSTHROUGH): data path 'open per "
		 "file'");
}

/*
 * NOTE(fuse): libfuse 3.14 leaves splicing replies off unless asked; with
 * it, a reply from a segment file moves pages instead of copying them
 * through a buffer (reply_ref).
 */
/*
 * READs the kernel keeps in flight at once from page-cache reads (they are
 * background requests): its default of 12 held 16 threads of random 4 KiB
 * reads to 12 GETs at once (bench.sh packed: 452 reads/s, 25.6 ms a GET;
 * curl with 16 got 583). 64 is the FUSE workers' default (-o max_threads),
 * so none waits for a thread; the kernel starts throttling readahead at
 * three quarters of it.
 */
#define FS_MAX_BACKGROUND 64

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs *fs = *(struct fs **)userdata;

	conn->max_background = FS_MAX_BACKGROUND;
	conn->congestion_threshold = FS_MAX_BACKGROUND * 3 / 4;

	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	/* NOTE(fuse): without the capability an ENOSYS from open is an
	 * error for the opener: keep the open per file. */
	if (!fs_open_per_file(fs) &&
	    (~conn->capable &
	     (FUSE_CAP_NO_OPEN_SUPPORT | FUSE_CAP_NO_OPENDIR_SUPPORT))) {
		log_warn("the kernel cannot open files without asking the "
			 "daemon (no FUSE_CAP_NO_OPEN(DIR)_SUPPORT): data path "
			 "'open per file'");
		fs_set_open_per_file(fs);
	}
	init_passthrough(fs, conn);
	/* NOTE(fuse): READDIRPLUS for every chunk of a directory, not only
	 * the first (the _AUTO heuristic): a scan (ImageFolder) then leaves
	 * a dentry and attributes for every file, and its opens send no
	 * LOOKUP. The open-per-file path keeps the kernel's default. */
	if ((!fs_open_per_file(fs) || fs_passthrough(fs)) &&
	    (conn->capable & FUSE_CAP_READDIRPLUS))
		conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
	/* NOTE(fuse): with atomic O_TRUNC the kernel leaves the truncation
	 * to OPEN and only empties its own copy of the file (fuse_setattr,
	 * ATTR_OPEN): with no OPEN sent, an open(O_TRUNC) of a dataset file
	 * would show it empty to every reader. Without it the truncation is
	 * a SETATTR, answered EROFS. */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
}

void fs_ops_set_session(struct fs *fs, struct fuse_session *se)
{
	fs_set_session(fs, se);
}

/*
 * NOTE(fuse): without FUSE_DELETE_STALE (virtiofs only) the kernel keeps a
 * dentry whose entry timeout is 0 after its last use (fuse_dentry_settime()
 * clears DCACHE_OP_DELETE), and its inode with it: the FORGET of a control
 * file's node would come only at its next lookup. Invalidating the entry
 * once the lookup is answered unhashes the dentry; the last close then
 * kills it, the inode is evicted and its FORGET comes at once. The kernel
 * takes the directory's lock for it, so it waits for the lookup to finish
 * (it was answered: nothing here waits for a worker).
 */
static void drop_ctl_dentry(struct fs *fs, const char *name)
{
	int rc;

	if (!fs_session(fs))
		return;
	rc = fuse_lowlevel_notify_inval_entry(fs_session(fs), FS_INO_CTL_DIR,
					      name, strlen(name));
	if (rc && rc != -ENOENT)
		log_debug("invalidating %s/%s: %s", FS_CTL_NAME, name,
			  strerror(-rc));
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = count(req, FS_REQ_LOOKUP, parent);
	struct stat st;
	uint64_t ino;
	int rc;

	if (parent == FS_INO_CTL_DIR && !fs_open_per_file(fs) &&
	    fs_ctl_makes_node(name)) {
		rc = fs_ctl_lookup(fs, name, req_uid(req), &ino, &st);
		if (rc == -ENOENT)
			reply_entry(req, 0, NULL);
		else if (rc)
			fuse_reply_err(req, -rc);
		else if (reply_entry(req, ino, &st) == -ENOENT)
			fs_forget(fs, ino,
				  1); /* interrupted: no FORGET comes */
		else
			drop_ctl_dentry(fs, name);
		return;
	}
	rc = fs_lookup(fs, parent, name, &ino, &st);

	if (rc == -ENOENT)
		reply_entry(req, 0, NULL); /* a cached negative entry */
	else if (rc)
		fuse_reply_err(req, -rc);
	else if (reply_entry(req, ino, &st) == 0)
		fs_store_note_lookup(fs, ino, 1); /* not req: replied */
}

/* Inodes live as long as the mount; the counts say only which inodes the
 * kernel holds, for filling its page cache (store.c). */
static void forget_one(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs *fs = count(req, FS_REQ_FORGET, ino);

	fs_store_note_forget(fs, ino, nlookup);
	fs_forget(fs, ino, nlookup);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(req, ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t n,
			    struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < n; i++)
		forget_one(req, forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct stat st;
	int rc = fs_getattr(count(req, FS_REQ_GETATTR, ino), ino, &st);

	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_attr(req, &st,
				ino >= FS_INO_CTL_NODE0 ? FS_CTL_TTL_S
							: FS_TTL_S);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	fuse_reply_err(req, -fs_access(count(req, FS_REQ_ACCESS, ino), ino,
				       mask, req_uid(req)));
}

/* What one readdir(plus) call fills: the kernel's buffer of @size bytes. */
struct dir_buf {
	fuse_req_t req;
	struct fs *fs;
	char *buf;
	size_t size;
	size_t used;
	bool plus;
};

/* Whether the kernel takes a lookup of readdirplus entry @e. */
static bool ep_ino_taken(const struct dir_buf *db, const struct fs_dirent *e,
			 const char *name)
{
	return e->ino && strcmp(name, ".") && strcmp(name, "..") &&
	       (e->ino < FS_INO_CTL_DIR || fs_open_per_file(db->fs));
}

static int fill_dirent(void *arg, const struct fs_dirent *e, off_t next_off)
{
	struct dir_buf *db = arg;
	char name[256];
	size_t need;

	/* NOTE(fuse): fuse_add_direntry wants a NUL-terminated name; tree
	 * names are at most 255 bytes. */
	memcpy(name, e->name, e->name_len);
	name[e->name_len] = '\0';
	if (db->plus) {
		struct fuse_entry_param ep = {
		    .ino = e->ino,
		    .generation = 1,
		    .attr = e->st,
		    .attr_timeout = FS_TTL_S,
		    .entry_timeout = FS_TTL_S,
		};

		/* NOTE(fuse): an entry with inode 0 gives the kernel no dentry
		 * to hold, as "." and ".." must not, nor a control file
		 * whose nodes are made by lookups only (fs/ctl.c). */
		if (!strcmp(name, ".") || !strcmp(name, "..") ||
		    (e->ino > FS_INO_CTL_DIR && !fs_open_per_file(db->fs)))
			ep = (struct fuse_entry_param){.attr = e->st};
		need = fuse_add_direntry_plus(db->req, db->buf + db->used,
					      db->size - db->used, name, &ep,
					      next_off);
	} else {
		need = fuse_add_direntry(db->req, db->buf + db->used,
					 db->size - db->used, name, &e->st,
					 next_off);
	}
	if (need > db->size - db->used)
		return 1;
	db->used += need;
	/* NOTE(fuse): the kernel takes a lookup of every readdirplus entry
	 * with an inode. Counted before the reply is sent: one that fails
	 * leaves a count too high, which store.c corrects when the kernel
	 * refuses a store to that inode. */
	if (db->plus && ep_ino_taken(db, e, name))
		fs_store_note_lookup(db->fs, e->ino, 1);
	return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       bool plus)
{
	struct dir_buf db = {
	    .req = req, .fs = req_fs(req), .size = size, .plus = plus};
	int rc;

	db.buf = malloc(size);
	if (!db.buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	rc = fs_readdir(req_fs(req), ino, off, fill_dirent, &db);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_buf(req, db.buf, db.used);
	free(db.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	count(req, FS_REQ_READDIR, ino);
	do_readdir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	count(req, FS_REQ_READDIRPLUS, ino);
	do_readdir(req, ino, size, off, true);
}

/* NOTE(fuse): ENOSYS from the first OPENDIR: no OPENDIR or RELEASEDIR
 * again, and the kernel caches listings (FOPEN_CACHE_DIR). With
 * -o open_per_file, what libfuse does without an opendir: no handle. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs *fs = count(req, FS_REQ_OPENDIR, ino);

	if (!fs_open_per_file(fs))
		fuse_reply_err(req, ENOSYS);
	else
		fuse_reply_open(req, fi);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	count(req, FS_REQ_RELEASEDIR, ino);
	fuse_reply_err(req, 0);
}

static struct fs_file *file_of(const struct fuse_file_info *fi)
{
	return (struct fs_file *)(uintptr_t)fi->fh;
}

/* The end of an open of data file @ino (per-file opens only). */
static void release_data(struct fs *fs, fuse_ino_t ino)
{
	fs_store_note_close(fs, ino);
	if (fs_passthrough(fs))
		fs_pt_release(fs, fs_passthrough(fs), ino);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = count(req, FS_REQ_OPEN, ino);
	struct fs_file *fh;
	bool direct;
	int rc;

	/* Zero-message opens (see the top): the kernel opens every file
	 * itself from now on. What an open decided is decided elsewhere:
	 * write access by the read-only superblock (EROFS), a control file's
	 * user at its LOOKUP. */
	if (!fs_open_per_file(fs)) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	rc = fs_open(fs, ino, fi->flags, req_uid(req), &fh, &direct);

	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	if (!fh)
		fs_store_note_open(fs, ino); /* before any read can come */
	fi->fh = (uintptr_t)fh;
	if (direct) {
		/* NOTE(fuse): the control files have no size in advance;
		 * direct I/O makes the kernel ask us for every read. */
		fi->direct_io = 1;
	} else {
		/* NOTE(fuse): objects never change under a mount (a changed
		 * one fails with ESTALE), so pages stay valid across opens.
		 * A close has nothing to flush here: noflush spares the
		 * round trip the kernel would make for it (only release
		 * comes, and the kernel does not wait for its answer). */
		fi->keep_cache = 1;
		fi->noflush = 1;
#ifdef HINTFS_HAVE_PASSTHROUGH
		/* NOTE(fuse): a passthrough open may carry no flag but
		 * NOFLUSH and DIRECT_IO (FOPEN_PASSTHROUGH_MASK, checked in
		 * fuse_file_passthrough_open()): with KEEP_CACHE the opener
		 * gets EIO. The kernel has no pages of its own to keep. */
		if (fs_passthrough(fs)) {
			fi->backing_id =
			    fs_pt_open(fs, fs_passthrough(fs), ino);
			if (fi->backing_id > 0)
				fi->keep_cache = 0;
		}
#endif
	}
	if (fuse_reply_open(req, fi) == -ENOENT) {
		/* The opener was interrupted: nobody will release this. */
		fs_release(fs, ino, fh);
		if (!fh)
			release_data(fs, ino);
	}
}

/*
 * A cache hit, answered from where the bytes lie: libfuse splices a
 * segment file's pages into /dev/fuse (no copy into our memory, no
 * buffer), and a small object goes out straight from LMDB's map.
 */
void fs_ref_bufvec(const struct cache_ref *ref, struct fuse_bufvec *bv)
{
	*bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(ref->len);
	if (ref->mem) {
		bv->buf[0].mem = (void *)ref->mem;
	} else {
		bv->buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
		bv->buf[0].fd = ref->fd;
		bv->buf[0].pos = (off_t)ref->fd_off;
	}
}

static ssize_t reply_ref(void *arg, const struct cache_ref *ref)
{
	struct fuse_bufvec bv;

	fs_ref_bufvec(ref, &bv);
	/* NOTE(fuse): fuse_reply_data answers the request whatever it
	 * returns (an error it meets becomes the reply), so the read is done
	 * either way. */
	fuse_reply_data(arg, &bv, 0);
	return (ssize_t)ref->len;
}

/* A reply by reference that says it was made (fs_read_cb() may answer
 * without calling it: then the caller replies). */
struct ref_reply {
	fuse_req_t req;
	bool replied;
};

static ssize_t reply_ref_once(void *arg, const struct cache_ref *ref)
{
	struct ref_reply *r = arg;

	r->replied = true;
	return reply_ref(r->req, ref);
}

/* Serves a read of a dataset file or of an open control file. */
static void read_file(fuse_req_t req, struct fs *fs, fuse_ino_t ino,
		      size_t size, off_t off, struct fs_file *fh)
{
	struct ref_reply r = {.req = req};
	char *buf;
	ssize_t n;

	if (!fh && fs_read_ref(fs, ino, NULL, size, off, reply_ref, req) >= 0)
		return;
	if (!fh && ino < FS_INO_CTL_NODE0) {
		/* A miss: the reply goes out from the fetch's buffer, with no
		 * copy into one of ours (cold_ir.py: 110 K instructions per
		 * cold 110 KB object, a fifth of the daemon's). */
		n = fs_read_cb(fs, ino, size, off, reply_ref_once, &r);
		if (r.replied)
			return;
		if (n < 0)
			fuse_reply_err(req, (int)-n);
		else
			fuse_reply_buf(req, NULL, 0);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (ino >= FS_INO_CTL_NODE0)
		n = fs_ctl_node_read(fs, ino, req_uid(req), buf, size, off);
	else
		n = fs_read(fs, ino, fh, buf, size, off);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs *fs = count(req, FS_REQ_READ, ino);

	/* Zero-message opens: the reads say where the readers are. */
	fs_follow_read(fs, ino, size, off, false);
	read_file(req, fs, ino, size, off, file_of(fi));
	fs_follow_read(fs, ino, size, off, true);
}

/* NOTE(fuse): ENOSYS from the first FLUSH: the kernel sends none again
 * (no_flush), so a close() costs no round trip. Nothing is ever written,
 * so there is nothing to flush on the open-per-file path either. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = count(req, FS_REQ_FLUSH, ino);

	fuse_reply_err(req, fs_open_per_file(fs) ? 0 : ENOSYS);
}

/* fsync(2) of a read-only descriptor is allowed, and has nothing to do. */
static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	count(req, FS_REQ_FSYNC, ino);
	fuse_reply_err(req, 0);
}

/* The only link is .hintfs/control, to the control socket. */
static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = count(req, FS_REQ_OTHER, ino);
	char buf[PATH_MAX];
	ssize_t n = fs_readlink(fs, ino, buf, sizeof(buf));

	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_readlink(req, buf);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs *fs = count(req, FS_REQ_RELEASE, ino);

	/* NOTE(fuse): the open that was answered ENOSYS may still be
	 * released; only an open that was counted is closed. */
	if (fs_open_per_file(fs)) {
		fs_release(fs, ino, file_of(fi));
		if (!file_of(fi))
			release_data(fs, ino);
	}
	fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	fs_statfs(count(req, FS_REQ_STATFS, ino), &sv);
	fuse_reply_statfs(req, &sv);
}

static void reply_xattr(fuse_req_t req, ssize_t n, char *buf, size_t size)
{
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	char *buf = size ? malloc(size) : NULL;

	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	reply_xattr(
	    req,
	    fs_getxattr(count(req, FS_REQ_XATTR, ino), ino, name, buf, size),
	    buf, size);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *buf = size ? malloc(size) : NULL;

	if (size && !buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	reply_xattr(req,
		    fs_listxattr(count(req, FS_REQ_XATTR, ino), ino, buf, size),
		    buf, size);
	free(buf);
}

/*
 * NOTE(fuse): the kernel forwards every ioctl on a file to the daemon, and
 * remembers no refusal (fs/fuse/ioctl.c: ENOSYS becomes ENOTTY, nothing
 * is cached). Python's open() with its default buffering asks isatty()
 * (ioctl TCGETS) of each file it opens, PIL's Image.open() and so
 * ImageFolder's loader included: one request per open even for a file
 * whose pages are all in the page cache. Answered here, the way a regular
 * file on a local disk answers (no ioctl is one of ours), and counted.
 */
static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd,
		     void *arg, struct fuse_file_info *fi, unsigned flags,
		     const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	count(req, FS_REQ_IOCTL, ino);
	fuse_reply_err(req, ENOTTY);
}

/* ---- every write-type request: EROFS ------------------------------------ */

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	count(req, FS_REQ_SETATTR, ino);
	fuse_reply_err(req, EROFS);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	count(req, FS_REQ_WRITE, ino);
	fuse_reply_err(req, EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
			 off_t length, struct fuse_file_info *fi)
{
	count(req, FS_REQ_OTHER, FS_INO_ROOT);
	fuse_reply_err(req, EROFS);
}

const struct fuse_lowlevel_ops fs_ll_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .access = op_access,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .opendir = op_opendir,
    .releasedir = op_releasedir,
    .open = op_open,
    .read = op_read,
    .flush = op_flush,
    .fsync = op_fsync,
    .release = op_release,
    .statfs = op_statfs,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .ioctl = op_ioctl,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .write = op_write,
    .create = op_create,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
    .fallocate = op_fallocate,
};
