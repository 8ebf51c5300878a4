/*
 * fs/fs.c - the filesystem core: inode numbers, attributes, directory
 * listing and reads, on top of the tree (fs/tree.c), the prefetch engine
 * and the cache. The mount's wiring (create, destroy, relist) is
 * fs/mount.c.
 *
 * Owns the mapping between inode numbers and tree nodes: node index i is
 * inode i + 1 and object id i for the engine; the control directory and its
 * files sit at FS_INO_CTL_*, far above any node. The tree is immutable
 * after fs_create(), so nothing here takes a lock on the read path.
 */
#include "fs/fs_internal.h"
#include "fs/passthrough.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

/* Advertised I/O size: readers (Python's io, PIL) size their reads on it,
 * and one 128 KiB read covers a typical ~110 KB training sample. */
#define FS_BLKSIZE 131072

/* ---- paths of the namespace ------------------------------------------ */

uint32_t fs_walk(const struct fs *fs, const char *path, size_t len)
{
	uint32_t cur = 0;
	size_t i = 0;

	while (i < len) {
		const char *c = path + i;
		const char *slash = memchr(c, '/', len - i);
		size_t clen = slash ? (size_t)(slash - c) : len - i;

		cur = tree_lookup(fs->tree, cur, c, clen);
		if (!cur)
			return 0;
		i += clen + 1;
	}
	return cur;
}

static int push_id(uint32_t **ids, size_t *n, size_t *cap, uint32_t id)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 1024;
		uint32_t *ni = realloc(*ids, ncap * sizeof(*ni));

		if (!ni)
			return -ENOMEM;
		*ids = ni;
		*cap = ncap;
	}
	(*ids)[(*n)++] = id;
	return 0;
}

long fs_files_under(const struct fs *fs, const char *path, size_t len,
		    uint32_t **ids, size_t *n, size_t *cap)
{
	uint32_t top = len ? fs_walk(fs, path, len) : 0;
	uint32_t *stack = NULL;
	size_t depth = 0, stack_cap = 0, start = *n;
	long rc = 0;

	if (len && !top)
		return 0;
	if (!tree_node(fs->tree, top)->is_dir)
		return push_id(ids, n, cap, top) ? -ENOMEM : 1;
	/* Depth first over directories; files are appended in name order
	 * within each directory. */
	if (push_id(&stack, &depth, &stack_cap, top))
		return -ENOMEM;
	while (depth && !rc) {
		const struct tree_node *d = tree_node(fs->tree, stack[--depth]);

		for (uint32_t i = 0; i < d->n_children && !rc; i++) {
			uint32_t c = d->first_child + i;

			if (tree_node(fs->tree, c)->is_dir)
				rc = push_id(&stack, &depth, &stack_cap, c);
			else
				rc = push_id(ids, n, cap, c);
		}
	}
	free(stack);
	return rc ? rc : (long)(*n - start);
}

uint32_t fs_file_id(const struct fs *fs, const char *path, size_t len)
{
	uint32_t idx = len ? fs_walk(fs, path, len) : 0;

	if (!idx || tree_node(fs->tree, idx)->is_dir)
		return HINT_NO_ID;
	return idx;
}

/* The node of inode @ino, or NULL (the control directory has none). */
static const struct tree_node *node_of(struct fs *fs, uint64_t ino)
{
	if (ino == 0 || ino > tree_count(fs->tree))
		return NULL;
	return tree_node(fs->tree, (uint32_t)(ino - 1));
}

/* The control directory's files, in readdir order (doc/design.md 2.3). */
static const struct {
	const char *name;
	uint64_t ino;
	mode_t mode;
} ctl_files[] = {
    {"stats", FS_INO_CTL_STATS, S_IFREG | 0400},
    {"verify", FS_INO_CTL_VERIFY, S_IFREG | 0400},
    {CTL_PROTO_LINK, FS_INO_CTL_CONTROL, S_IFLNK | 0777},
};
#define N_CTL_FILES (sizeof(ctl_files) / sizeof(ctl_files[0]))

static bool is_ctl_file(uint64_t ino)
{
	return ino > FS_INO_CTL_DIR && ino <= FS_INO_CTL_DIR + N_CTL_FILES;
}

/* The control file @ino is (a node made by a lookup counts as the file
 * it was looked up as), or 0 for any other inode. */
static uint64_t ctl_kind(struct fs *fs, uint64_t ino)
{
	if (is_ctl_file(ino))
		return ino;
	return fs_is_ctl_node(ino) ? fs_ctl_node_kind(fs, ino, NULL) : 0;
}

bool fs_ctl_readable(uint64_t kind)
{
	return kind == FS_INO_CTL_STATS || kind == FS_INO_CTL_VERIFY;
}

uint64_t fs_ctl_kind_of(const char *name)
{
	for (size_t i = 0; i < N_CTL_FILES; i++)
		if (!strcmp(name, ctl_files[i].name))
			return ctl_files[i].ino;
	return 0;
}

/*
 * Whether @caller may use the control files and the control socket: the
 * mount's owner and root only. NOTE(fuse): with -o open_per_file hintfs
 * mounts without default_permissions, so the modes shown decide nothing
 * under allow_other: this check is the only one (at OPEN). With
 * zero-message opens under allow_other the kernel checks the modes too
 * (main.c), and this check is made at the control file's LOOKUP and READ.
 * The socket checks its sender (ctl_sock.c). Stats is refused too: it
 * names the cache directory and the bucket, and verify or relist cost a
 * hash of the cache or a listing.
 */
bool fs_may_control(const struct fs *fs, uid_t caller)
{
	return caller == 0 || caller == fs->uid;
}
#define may_control fs_may_control

/* Attributes of inode @ino (node @n, NULL for the control inodes). */
static void fill_stat(struct fs *fs, uint64_t ino, const struct tree_node *n,
		      struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = FS_BLKSIZE;
	if (is_ctl_file(ino)) {
		/* Size 0: their contents are made at open (direct I/O); the
		 * link's is its target's length, as lstat() shows it. */
		st->st_mode = ctl_files[ino - FS_INO_CTL_DIR - 1].mode;
		st->st_nlink = 1;
		st->st_mtim.tv_sec = time(NULL);
		if (ino == FS_INO_CTL_CONTROL && fs->ctl_sock_path)
			st->st_size = (off_t)strlen(fs->ctl_sock_path);
	} else if (!n || n->is_dir) {
		/* Read-only: nobody may create entries, everyone may list. */
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		st->st_mtim.tv_sec = n ? n->mtime : fs->mount_time;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)n->size;
		st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
		st->st_mtim.tv_sec = n->mtime;
	}
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

void fs_ctl_stat(struct fs *fs, uint64_t kind, struct stat *st)
{
	fill_stat(fs, kind, NULL, st);
}

int fs_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct tree_node *n = node_of(fs, ino);
	uint64_t kind, len;

	if (fs_is_ctl_node(ino)) {
		/* A node is its control file (its inode number too: one
		 * file to stat() and fstat()), with the length of its text,
		 * rendered at lookup. */
		kind = fs_ctl_node_kind(fs, ino, &len);
		if (!kind)
			return -ENOENT;
		fill_stat(fs, kind, NULL, st);
		st->st_size = (off_t)len;
		return 0;
	}
	if (!n && ino != FS_INO_CTL_DIR && !is_ctl_file(ino))
		return -ENOENT;
	fill_stat(fs, ino, n, st);
	return 0;
}

int fs_lookup(struct fs *fs, uint64_t parent, const char *name, uint64_t *ino,
	      struct stat *st)
{
	const struct tree_node *p = node_of(fs, parent);
	size_t len = strlen(name);
	uint32_t idx;

	if (parent == FS_INO_CTL_DIR) {
		for (size_t i = 0; i < N_CTL_FILES; i++) {
			if (!strcmp(name, ctl_files[i].name)) {
				*ino = ctl_files[i].ino;
				fill_stat(fs, *ino, NULL, st);
				return 0;
			}
		}
		return -ENOENT;
	}
	if (!p)
		return is_ctl_file(parent) ? -ENOTDIR : -ENOENT;
	if (!p->is_dir)
		return -ENOTDIR;
	if (parent == FS_INO_ROOT && !strcmp(name, FS_CTL_NAME)) {
		*ino = FS_INO_CTL_DIR;
		fill_stat(fs, *ino, NULL, st);
		return 0;
	}
	idx = tree_lookup(fs->tree, (uint32_t)(parent - 1), name, len);
	if (!idx)
		return -ENOENT;
	*ino = (uint64_t)idx + 1;
	fill_stat(fs, *ino, tree_node(fs->tree, idx), st);
	return 0;
}

int fs_readdir(struct fs *fs, uint64_t ino, off_t off, fs_dirent_cb cb,
	       void *arg)
{
	const struct tree_node *d = node_of(fs, ino);
	uint64_t n_children = N_CTL_FILES;
	struct fs_dirent e;

	if (!d && ino != FS_INO_CTL_DIR)
		return is_ctl_file(ino) ? -ENOTDIR : -ENOENT;
	if (d && !d->is_dir)
		return -ENOTDIR;
	if (d)
		n_children = d->n_children;

	/* Offsets: 0 ".", 1 "..", 2 + i the i-th child. */
	for (; off >= 0 && (uint64_t)off < 2 + n_children; off++) {
		if (off < 2) {
			uint64_t pino = ino;

			if (off == 1 && d && ino != FS_INO_ROOT)
				pino = (uint64_t)d->parent + 1;
			else if (off == 1 && !d)
				pino = FS_INO_ROOT;
			e.name = off == 0 ? "." : "..";
			e.name_len = (size_t)off + 1;
			e.ino = pino;
			fill_stat(fs, pino, node_of(fs, pino), &e.st);
		} else if (!d) {
			e.name = ctl_files[off - 2].name;
			e.name_len = strlen(e.name);
			e.ino = ctl_files[off - 2].ino;
			fill_stat(fs, e.ino, NULL, &e.st);
		} else {
			uint32_t idx = d->first_child + (uint32_t)(off - 2);
			const struct tree_node *c = tree_node(fs->tree, idx);

			e.name = tree_name(fs->tree, c);
			e.name_len = c->name_len;
			e.ino = (uint64_t)idx + 1;
			fill_stat(fs, e.ino, c, &e.st);
		}
		if (cb(arg, &e, off + 1))
			break;
	}
	return 0;
}

int fs_open(struct fs *fs, uint64_t ino, int flags, uid_t caller,
	    struct fs_file **fh, bool *direct_io)
{
	const struct tree_node *n = node_of(fs, ino);

	*fh = NULL;
	*direct_io = false;
	if (is_ctl_file(ino)) {
		if (!fs_ctl_readable(ino))
			return -ELOOP; /* the link: O_NOFOLLOW's answer */
		if (!may_control(fs, caller))
			return -EACCES;
		*direct_io = true;
		return fs_ctl_open(fs, ino, flags, fh);
	}
	if (!n && ino != FS_INO_CTL_DIR)
		return -ENOENT;
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)))
		return -EROFS;
	if (!n || n->is_dir)
		return -EISDIR;
	/* The reader has moved on to this object: the window follows. */
	pf_note_open(atomic_load(&fs->pf), (uint32_t)(ino - 1));
	return 0;
}

/*
 * The errno the kernel sees for a read that failed in the engine, chosen
 * here and nowhere else (doc/design.md 2.6): a changed or deleted object is
 * ESTALE, refused access EACCES, no memory ENOMEM; any other failure
 * (server errors, resets, timeouts after the retries) is EIO, which is
 * what a reader of a file expects of a failed device.
 */
static ssize_t read_errno(ssize_t err)
{
	switch (err) {
	case -ESTALE:
	case -EACCES:
	case -ENOMEM:
		return err;
	default:
		return -EIO;
	}
}

/* Whether file @ino may be read at @off: 0, or the -errno to answer. */
static int data_read_ok(struct fs *fs, uint64_t ino, off_t off)
{
	const struct tree_node *n = node_of(fs, ino);

	if (!n)
		return -ENOENT;
	if (n->is_dir)
		return -EISDIR;
	return off < 0 ? -EINVAL : 0;
}

ssize_t fs_read(struct fs *fs, uint64_t ino, struct fs_file *fh, char *buf,
		size_t size, off_t off)
{
	ssize_t got;

	if (fh)
		return fs_ctl_read(fh, buf, size, off);
	got = data_read_ok(fs, ino, off);
	if (got)
		return got;
	got = pf_read(atomic_load(&fs->pf), (uint32_t)(ino - 1), buf, size,
		      (uint64_t)off);
	return got < 0 ? read_errno(got) : got;
}

ssize_t fs_read_cb(struct fs *fs, uint64_t ino, size_t size, off_t off,
		   cache_ref_cb cb, void *arg)
{
	ssize_t got = data_read_ok(fs, ino, off);

	if (got)
		return got;
	got = pf_read_cb(atomic_load(&fs->pf), (uint32_t)(ino - 1), size,
			 (uint64_t)off, cb, arg);
	return got < 0 ? read_errno(got) : got;
}

ssize_t fs_read_ref(struct fs *fs, uint64_t ino, struct fs_file *fh,
		    size_t size, off_t off, cache_ref_cb cb, void *arg)
{
	const struct tree_node *n = node_of(fs, ino);

	if (fh || !n || n->is_dir || off < 0)
		return -ENODATA;
	return pf_read_ref(atomic_load(&fs->pf), (uint32_t)(ino - 1), size,
			   (uint64_t)off, cb, arg);
}

bool fs_ctl_makes_node(const char *name)
{
	return fs_ctl_readable(fs_ctl_kind_of(name));
}

void fs_set_session(struct fs *fs, struct fuse_session *se)
{
	fs->se = se;
}

struct fuse_session *fs_session(const struct fs *fs)
{
	return fs->se;
}

bool fs_passthrough_asked(const struct fs *fs)
{
	return fs->pt != NULL;
}

void fs_passthrough_refuse(struct fs *fs)
{
	fs->passthrough = false;
}

struct fs_pt *fs_passthrough(const struct fs *fs)
{
	return fs->passthrough ? fs->pt : NULL;
}

const char *fs_ctl_socket(const struct fs *fs)
{
	return fs->ctl_sock_path;
}

ssize_t fs_readlink(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	size_t len;

	if (ino != FS_INO_CTL_CONTROL)
		return ctl_kind(fs, ino) || node_of(fs, ino) ? -EINVAL
							     : -ENOENT;
	len = strlen(fs->ctl_sock_path);
	if (len >= size)
		return -ENAMETOOLONG;
	memcpy(buf, fs->ctl_sock_path, len + 1);
	return (ssize_t)len;
}

void fs_count_request(struct fs *fs, enum fs_req kind)
{
	atomic_fetch_add_explicit(&fs->fuse_req[kind], 1, memory_order_relaxed);
}

bool fs_open_per_file(const struct fs *fs)
{
	return fs->open_per_file;
}

void fs_set_open_per_file(struct fs *fs)
{
	fs->open_per_file = true;
}

const char *fs_data_path(const struct fs *fs)
{
	if (fs->passthrough)
		return fs_pt_refused(fs->pt) ? "open per file (passthrough "
					       "refused)"
					     : "passthrough";
	return fs->open_per_file ? "open per file" : "zero-message opens";
}

void fs_release(struct fs *fs, uint64_t ino, struct fs_file *fh)
{
	const struct tree_node *n = node_of(fs, ino);

	if (fh)
		fs_ctl_release(fs, fh);
	else if (n && !n->is_dir)
		pf_note_close(atomic_load(&fs->pf), (uint32_t)(ino - 1));
}

int fs_access(struct fs *fs, uint64_t ino, int mask, uid_t caller)
{
	uint64_t kind = ctl_kind(fs, ino);
	struct stat st;
	int rc = fs_getattr(fs, ino, &st);

	if (!rc && kind && mask != F_OK && !may_control(fs, caller))
		rc = -EACCES;
	else if (!rc && (mask & W_OK))
		rc = -EROFS;
	return rc;
}

/* The ETag of a file without S3's quotes, as users compare it to md5. */
static size_t etag_value(const char *etag, const char **start)
{
	size_t len = strlen(etag);

	if (len >= 2 && etag[0] == '"' && etag[len - 1] == '"') {
		*start = etag + 1;
		return len - 2;
	}
	*start = etag;
	return len;
}

static ssize_t copy_attr(const char *val, size_t len, char *buf, size_t size)
{
	if (size == 0)
		return (ssize_t)len;
	if (size < len)
		return -ERANGE;
	memcpy(buf, val, len);
	return (ssize_t)len;
}

ssize_t fs_getxattr(struct fs *fs, uint64_t ino, const char *name, char *buf,
		    size_t size)
{
	const struct tree_node *n = node_of(fs, ino);
	const char *val;
	size_t len;

	if (!n && ino != FS_INO_CTL_DIR && !ctl_kind(fs, ino))
		return -ENOENT;
	if (!n || n->is_dir || strcmp(name, FS_XATTR_ETAG))
		return -ENODATA;
	len = etag_value(tree_etag(fs->tree, n), &val);
	return copy_attr(val, len, buf, size);
}

ssize_t fs_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	const struct tree_node *n = node_of(fs, ino);

	if (!n && ino != FS_INO_CTL_DIR && !ctl_kind(fs, ino))
		return -ENOENT;
	if (!n || n->is_dir)
		return 0;
	return copy_attr(FS_XATTR_ETAG, sizeof(FS_XATTR_ETAG), buf, size);
}

int fs_statfs(struct fs *fs, struct statvfs *sv)
{
	uint64_t files, bytes;

	tree_totals(fs->tree, &files, &bytes);
	memset(sv, 0, sizeof(*sv));
	sv->f_bsize = 4096;
	sv->f_frsize = 4096;
	sv->f_blocks = (fsblkcnt_t)((bytes + 4095) / 4096);
	sv->f_files = tree_count(fs->tree);
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY;
	return 0;
}
