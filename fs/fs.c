/*
 * fs/fs.c - the filesystem core: inode numbers, attributes, directory
 * listing and reads, on top of the tree (fs/tree.c) and the S3 client.
 *
 * Owns the mapping between inode numbers and tree nodes: node index i is
 * inode i + 1, and the control directory sits at FS_INO_CTL_DIR, far above
 * any node. The tree is immutable after fs_create(), so nothing here takes
 * a lock; reads go straight to the S3 client, which runs concurrent calls
 * on separate connections.
 */
#include "fs/fs.h"
#include "fs/tree.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* S3 keys are at most 1,024 bytes and so is a prefix: with room. */
#define FS_KEY_MAX 4096
/* Advertised I/O size: readers (Python's io, PIL) size their reads on it,
 * and one 128 KiB read covers a typical ~110 KB training sample. */
#define FS_BLKSIZE 131072

struct fs {
	struct s3_client *s3;
	struct tree *tree;
	char *prefix;      /* "" or ends in '/' */
	char *source;      /* "s3://bucket/prefix", for messages */
	uid_t uid;
	gid_t gid;
	int64_t mount_time;
};

/* The context of one listing: the builder and what the prefix strips. */
struct list_ctx {
	struct tree_builder *b;
	const char *prefix;
	size_t prefix_len;
	uint64_t foreign; /* keys outside the prefix: a confused server */
};

static int list_cb(void *arg, const struct s3_object *o)
{
	struct list_ctx *lc = arg;

	if (o->key_len < lc->prefix_len ||
	    memcmp(o->key, lc->prefix, lc->prefix_len)) {
		lc->foreign++;
		return 0;
	}
	return tree_builder_add(lc->b, o->key + lc->prefix_len,
				o->key_len - lc->prefix_len, o->size, o->mtime,
				o->etag);
}

static void log_skips(const struct fs *fs)
{
	const struct tree_skips *sk = tree_skips(fs->tree);

	if (sk->bad_path)
		log_warn("%s: skipped %llu key(s) that cannot be paths "
			 "(empty, '.' or '..' component, NUL, or a name over "
			 "255 bytes), the first: '%s'", fs->source,
			 (unsigned long long)sk->bad_path, sk->first_bad);
	if (sk->shadowed)
		log_info("%s: %llu file(s) hidden by a directory of the same name",
			 fs->source, (unsigned long long)sk->shadowed);
	if (sk->reserved)
		log_warn("%s: %llu key(s) under '%s' hidden: that name is hintfs's "
			 "control directory", fs->source,
			 (unsigned long long)sk->reserved, FS_CTL_NAME);
}

int fs_create(const struct fs_config *cfg, struct fs **out, char *err,
	      size_t err_len)
{
	struct list_ctx lc = { .prefix = cfg->prefix,
			       .prefix_len = strlen(cfg->prefix) };
	struct s3_status st = { 0 };
	struct fs *fs;
	char why[512];
	int rc;

	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->uid = cfg->uid;
	fs->gid = cfg->gid;
	fs->mount_time = (int64_t)time(NULL);
	fs->prefix = strdup(cfg->prefix);
	if (!fs->prefix || asprintf(&fs->source, "s3://%s%s%.*s", cfg->s3.bucket,
				    cfg->prefix[0] ? "/" : "",
				    (int)(lc.prefix_len ? lc.prefix_len - 1 : 0),
				    cfg->prefix) < 0) {
		fs->source = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	rc = s3_client_create(&cfg->s3, &fs->s3, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "%s", why);
		goto fail;
	}
	lc.b = tree_builder_create(FS_CTL_NAME);
	if (!lc.b) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = s3_list(fs->s3, cfg->prefix, list_cb, &lc, &st);
	if (rc) {
		tree_builder_destroy(lc.b);
		if (rc == -ENOMEM || rc == -EFBIG) {
			snprintf(err, err_len, "cannot hold the listing of %s: %s",
				 fs->source, strerror(-rc));
		} else {
			s3_status_describe(&st, rc, why, sizeof(why));
			snprintf(err, err_len, "cannot list %s at %s: %s",
				 fs->source, cfg->s3.endpoint, why);
		}
		goto fail;
	}
	rc = tree_build(lc.b, fs->mount_time, &fs->tree);
	if (rc) {
		snprintf(err, err_len, "cannot build the namespace: %s",
			 strerror(-rc));
		goto fail;
	}
	if (lc.foreign)
		log_warn("%s: the server listed %llu key(s) outside the prefix; "
			 "ignored", fs->source, (unsigned long long)lc.foreign);
	log_skips(fs);
	*out = fs;
	return 0;
fail:
	fs_destroy(fs);
	return rc;
}

void fs_destroy(struct fs *fs)
{
	if (!fs)
		return;
	tree_destroy(fs->tree);
	s3_client_destroy(fs->s3);
	free(fs->prefix);
	free(fs->source);
	free(fs);
}

/* The node of inode @ino, or NULL (the control directory has none). */
static const struct tree_node *node_of(struct fs *fs, uint64_t ino)
{
	if (ino == 0 || ino > tree_count(fs->tree))
		return NULL;
	return tree_node(fs->tree, (uint32_t)(ino - 1));
}

static void fill_stat(struct fs *fs, uint64_t ino, const struct tree_node *n,
		      struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_blksize = FS_BLKSIZE;
	if (!n || n->is_dir) {
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

int fs_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct tree_node *n = node_of(fs, ino);

	if (!n && ino != FS_INO_CTL_DIR)
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

	if (parent == FS_INO_CTL_DIR)
		return -ENOENT; /* its files come with the hint and stats */
	if (!p)
		return -ENOENT;
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
	uint32_t n_children = 0;
	struct fs_dirent e;

	if (!d && ino != FS_INO_CTL_DIR)
		return -ENOENT;
	if (d && !d->is_dir)
		return -ENOTDIR;
	if (d)
		n_children = d->n_children;

	/* Offsets: 0 ".", 1 "..", 2 + i the i-th child. */
	for (; off >= 0 && (uint64_t)off < 2 + (uint64_t)n_children; off++) {
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

int fs_open(struct fs *fs, uint64_t ino, int flags)
{
	const struct tree_node *n = node_of(fs, ino);

	if (!n && ino != FS_INO_CTL_DIR)
		return -ENOENT;
	if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)))
		return -EROFS;
	if (!n || n->is_dir)
		return -EISDIR;
	return 0;
}

ssize_t fs_read(struct fs *fs, uint64_t ino, char *buf, size_t size, off_t off)
{
	const struct tree_node *n = node_of(fs, ino);
	struct s3_status st;
	char key[FS_KEY_MAX];
	ssize_t got;
	int klen;

	if (!n)
		return -ENOENT;
	if (n->is_dir)
		return -EISDIR;
	if (off < 0)
		return -EINVAL;
	if ((uint64_t)off >= n->size)
		return 0;
	if (size > n->size - (uint64_t)off)
		size = (size_t)(n->size - (uint64_t)off);

	klen = tree_path(fs->tree, (uint32_t)(ino - 1), fs->prefix, key, sizeof(key));
	if (klen < 0)
		return -EIO;
	got = s3_get_range(fs->s3, key, (size_t)klen, tree_etag(fs->tree, n),
			   (uint64_t)off, size, buf, &st);
	if (got == (ssize_t)size)
		return got;
	if (got >= 0) {
		log_error("read '%s': the server sent %zd of %zu bytes at offset "
			  "%lld", key, got, size, (long long)off);
		return -EIO;
	}

	char why[512];

	s3_status_describe(&st, (int)got, why, sizeof(why));
	log_error("read '%s' at offset %lld: %s", key, (long long)off, why);
	switch (got) {
	case -ESTALE: /* changed or deleted since the listing */
	case -EACCES:
	case -ENOMEM:
		return got;
	default:
		return -EIO;
	}
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

	if (!n && ino != FS_INO_CTL_DIR)
		return -ENOENT;
	if (!n || n->is_dir || strcmp(name, FS_XATTR_ETAG))
		return -ENODATA;
	len = etag_value(tree_etag(fs->tree, n), &val);
	return copy_attr(val, len, buf, size);
}

ssize_t fs_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	const struct tree_node *n = node_of(fs, ino);

	if (!n && ino != FS_INO_CTL_DIR)
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
