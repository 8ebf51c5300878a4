/*
 * fs/fs.c - the filesystem core: inode numbers, attributes, directory
 * listing and reads, on top of the tree (fs/tree.c), the prefetch engine
 * and the cache.
 *
 * Owns the mapping between inode numbers and tree nodes: node index i is
 * inode i + 1 and object id i for the engine; the control directory and its
 * files sit at FS_INO_CTL_*, far above any node. The tree is immutable
 * after fs_create(), so nothing here takes a lock on the read path.
 *
 * Start-up order matters: the cache opens first (it holds the listing
 * snapshot), then the namespace is built, then the engine starts; the
 * cache's eviction callback finds no engine until then and treats every
 * object as unhinted.
 */
#include "fs/fs_internal.h"
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


/* The context of one listing: the builder and what the prefix strips. */
struct list_ctx {
	struct tree_builder *b;
	struct listing_buf *snap; /* recording for the cache, or NULL */
	const char *prefix;
	size_t prefix_len;
	uint64_t foreign; /* keys outside the prefix: a confused server */
};

static int list_cb(void *arg, const struct s3_object *o)
{
	struct list_ctx *lc = arg;
	int rc;

	if (o->key_len < lc->prefix_len ||
	    memcmp(o->key, lc->prefix, lc->prefix_len)) {
		lc->foreign++;
		return 0;
	}
	if (lc->snap) {
		rc = listing_buf_add(lc->snap, o);
		if (rc)
			return rc;
	}
	if (!lc->b)
		return 0; /* a relist only records */
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

static uint64_t ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* Signed: the nanoseconds alone may go backwards across a second. */
	int64_t ms = (int64_t)(t1.tv_sec - t0->tv_sec) * 1000 +
		     ((int64_t)t1.tv_nsec - (int64_t)t0->tv_nsec) / 1000000;

	return ms > 0 ? (uint64_t)ms : 0;
}

/*
 * Builds the namespace: from the snapshot saved in the cache when there is
 * one (and no relist was asked), else from ListObjectsV2, saving it.
 */
static int build_namespace(struct fs *fs, const struct fs_config *cfg,
			   char *err, size_t err_len)
{
	struct list_ctx lc = { .prefix = cfg->prefix,
			       .prefix_len = strlen(cfg->prefix) };
	struct s3_status st = { 0 };
	const char *name = fs->listing_name;
	struct timespec t0;
	int64_t saved_at;
	char why[512];
	uint64_t count;
	int rc;

	clock_gettime(CLOCK_MONOTONIC, &t0);

	if (!cfg->relist) {
		lc.b = tree_builder_create(FS_CTL_NAME);
		if (!lc.b) {
			rc = -ENOMEM;
			goto out;
		}
		rc = listing_load(fs->cache, name, list_cb, &lc, &count,
				  &saved_at);
		if (!rc) {
			fs->listed_from_cache = true;
			atomic_store(&fs->listing_saved_at, saved_at);
			goto build;
		}
		tree_builder_destroy(lc.b);
		lc.b = NULL;
		lc.foreign = 0;
		if (rc == -EPROTO)
			log_warn("%s: the listing saved in the cache is damaged; "
				 "listing again", fs->source);
		else if (rc != -ENODATA)
			log_warn("%s: cannot read the saved listing (%s); listing "
				 "again", fs->source, strerror(-rc));
	}

	lc.b = tree_builder_create(FS_CTL_NAME);
	lc.snap = listing_buf_create();
	if (!lc.b || !lc.snap) {
		rc = -ENOMEM;
		goto out;
	}
	rc = s3_list(fs->s3, cfg->prefix, list_cb, &lc, &st);
	if (rc) {
		if (rc == -ENOMEM || rc == -EFBIG) {
			snprintf(err, err_len, "cannot hold the listing of %s: %s",
				 fs->source, strerror(-rc));
		} else {
			s3_status_describe(&st, rc, why, sizeof(why));
			snprintf(err, err_len, "cannot list %s at %s: %s",
				 fs->source, cfg->s3.endpoint, why);
		}
		goto out;
	}
	rc = listing_save(fs->cache, name, lc.snap);
	if (rc)
		log_warn("%s: cannot save the listing in the cache (%s); the "
			 "next mount lists again", fs->source, strerror(-rc));
	atomic_store(&fs->listing_saved_at, (int64_t)time(NULL));
build:
	rc = tree_build(lc.b, fs->mount_time, &fs->tree);
	lc.b = NULL;
	if (rc) {
		snprintf(err, err_len, "cannot build the namespace: %s",
			 strerror(-rc));
		goto out;
	}
	fs->list_ms = ms_since(&t0);
	if (lc.foreign)
		log_warn("%s: the server listed %llu key(s) outside the prefix; "
			 "ignored", fs->source, (unsigned long long)lc.foreign);
	log_skips(fs);
out:
	tree_builder_destroy(lc.b);
	listing_buf_destroy(lc.snap);
	return rc;
}

int fs_relist(struct fs *fs)
{
	struct list_ctx lc = { .prefix = fs->prefix,
			       .prefix_len = strlen(fs->prefix) };
	struct s3_status st = { 0 };
	char why[512];
	int rc;

	pthread_mutex_lock(&fs->relist_mu);
	lc.snap = listing_buf_create();
	rc = lc.snap ? s3_list(fs->s3, fs->prefix, list_cb, &lc, &st) : -ENOMEM;
	if (!rc)
		rc = listing_save(fs->cache, fs->listing_name, lc.snap);
	if (rc) {
		s3_status_describe(&st, rc, why, sizeof(why));
		log_error("relist of %s: %s", fs->source,
			  st.http || st.code[0] ? why : strerror(-rc));
	} else {
		atomic_store(&fs->listing_saved_at, (int64_t)time(NULL));
		log_info("relist of %s: %llu objects saved; used from the next "
			 "mount", fs->source,
			 (unsigned long long)listing_buf_count(lc.snap));
	}
	listing_buf_destroy(lc.snap);
	pthread_mutex_unlock(&fs->relist_mu);
	return rc;
}

/* ---- what the engine and the cache ask of the namespace ----------------- */

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

static int describe_cb(void *arg, uint32_t id, char *keybuf, size_t cap,
		       struct pf_object *o)
{
	struct fs *fs = arg;
	const struct tree_node *n = tree_node(fs->tree, id);
	int klen;

	if (!n || n->is_dir)
		return -ENOENT;
	klen = tree_path(fs->tree, id, fs->prefix, keybuf, cap);
	if (klen < 0)
		return klen;
	o->key = keybuf;
	o->key_len = (size_t)klen;
	o->etag = tree_etag(fs->tree, n);
	o->size = n->size;
	return 0;
}

uint32_t fs_file_id(const struct fs *fs, const char *path, size_t len)
{
	uint32_t idx = len ? fs_walk(fs, path, len) : 0;

	if (!idx || tree_node(fs->tree, idx)->is_dir)
		return HINT_NO_ID;
	return idx;
}

static uint32_t key_id_cb(void *arg, const char *key, size_t key_len)
{
	struct fs *fs = arg;
	size_t plen = strlen(fs->prefix);

	if (key_len < plen || memcmp(key, fs->prefix, plen))
		return HINT_NO_ID;
	return fs_file_id(fs, key + plen, key_len - plen);
}

static uint64_t next_use_cb(void *arg, const char *key, size_t key_len)
{
	struct fs *fs = arg;
	struct pf *pf = atomic_load(&fs->pf);

	return pf ? pf_next_use(pf, key, key_len) : CACHE_NEVER;
}

/* ---- create / destroy ------------------------------------------------------ */

/* The capacity: as given, or a share of the free space of the cache's disk. */
static uint64_t cache_capacity(const struct fs_config *cfg)
{
	struct statvfs sv;

	if (cfg->cache_size)
		return cfg->cache_size;
	if (statvfs(cfg->cache_dir, &sv) < 0)
		return 1ull << 30;
	return (uint64_t)sv.f_bavail * sv.f_frsize / 100 * cfg->cache_size_pct;
}

/* mkdir -p with mode 0700 for what it creates. */
static int make_dirs(const char *path)
{
	char *p = strdup(path);
	int rc = 0;

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; ; s++) {
		if (*s != '/' && *s != '\0')
			continue;
		char c = *s;

		*s = '\0';
		if (mkdir(p, 0700) < 0 && errno != EEXIST) {
			rc = -errno;
			break;
		}
		*s = c;
		if (!c)
			break;
	}
	free(p);
	return rc;
}

int fs_create(const struct fs_config *cfg, struct fs **out, char *err,
	      size_t err_len)
{
	size_t plen = strlen(cfg->prefix);
	struct cache_config cc = { 0 };
	struct pf_config pc = { 0 };
	struct fs *fs;
	char why[512];
	struct pf *pf;
	int rc;

	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	pthread_mutex_init(&fs->hint_mu, NULL);
	pthread_mutex_init(&fs->relist_mu, NULL);
	pthread_mutex_init(&fs->watch_mu, NULL);
	pthread_cond_init(&fs->watch_cv, NULL);
	fs->last_hint.epoch = -1;
	fs->uid = cfg->uid;
	fs->gid = cfg->gid;
	fs->mount_time = (int64_t)time(NULL);
	fs->prefix = strdup(cfg->prefix);
	fs->mountpoint = strdup(cfg->mountpoint ? cfg->mountpoint : "");
	fs->cache_dir = strdup(cfg->cache_dir);
	fs->hint_file = cfg->hint_file ? strdup(cfg->hint_file) : NULL;
	if (!fs->prefix || !fs->mountpoint || !fs->cache_dir ||
	    (cfg->hint_file && !fs->hint_file) ||
	    asprintf(&fs->source, "s3://%s%s%.*s", cfg->s3.bucket,
		     plen ? "/" : "", (int)(plen ? plen - 1 : 0), cfg->prefix) < 0) {
		fs->source = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	/* NOTE(s3): the same bucket name at another endpoint is another
	 * bucket; the snapshot's name says which. */
	if (asprintf(&fs->listing_name, "listing\n%s\n%s\n%s", cfg->s3.endpoint,
		     cfg->s3.bucket, cfg->prefix) < 0) {
		fs->listing_name = NULL;
		rc = -ENOMEM;
		goto fail;
	}
	rc = s3_client_create(&cfg->s3, &fs->s3, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "%s", why);
		goto fail;
	}

	rc = make_dirs(cfg->cache_dir);
	if (rc) {
		snprintf(err, err_len, "cache directory '%s': %s", cfg->cache_dir,
			 strerror(-rc));
		goto fail;
	}
	cc.dir = cfg->cache_dir;
	cc.capacity = cache_capacity(cfg);
	cc.next_use = next_use_cb;
	cc.next_use_arg = fs;
	rc = cache_open(&cc, &fs->cache, why, sizeof(why));
	if (rc) {
		snprintf(err, err_len, "%s", why);
		goto fail;
	}

	rc = build_namespace(fs, cfg, err, err_len);
	if (rc)
		goto fail;

	pc.s3 = fs->s3;
	pc.cache = fs->cache;
	pc.describe = describe_cb;
	pc.key_id = key_id_cb;
	pc.arg = fs;
	pc.n_ids = tree_count(fs->tree);
	pc.max_inflight = cfg->max_inflight;
	pc.window_objects = cfg->window;
	pc.max_attempts = cfg->s3.max_attempts;
	pc.retry_time_ms = cfg->s3.retry_time_ms;
	rc = pf_start(&pc, &pf);
	if (rc) {
		snprintf(err, err_len, "cannot start the prefetch engine: %s",
			 strerror(-rc));
		goto fail;
	}
	atomic_store(&fs->pf, pf);
	if (fs->hint_file) {
		rc = fs_hint_watch_start(fs);
		if (rc) {
			snprintf(err, err_len, "cannot watch the hint file: %s",
				 strerror(-rc));
			goto fail;
		}
	}
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
	fs_hint_watch_stop(fs);
	pf_stop(atomic_load(&fs->pf));
	cache_close(fs->cache);
	tree_destroy(fs->tree);
	s3_client_destroy(fs->s3);
	pthread_mutex_destroy(&fs->hint_mu);
	pthread_mutex_destroy(&fs->relist_mu);
	pthread_mutex_destroy(&fs->watch_mu);
	pthread_cond_destroy(&fs->watch_cv);
	free(fs->prefix);
	free(fs->source);
	free(fs->mountpoint);
	free(fs->cache_dir);
	free(fs->hint_file);
	free(fs->listing_name);
	free(fs);
}

/* The node of inode @ino, or NULL (the control directory has none). */
static const struct tree_node *node_of(struct fs *fs, uint64_t ino)
{
	if (ino == 0 || ino > tree_count(fs->tree))
		return NULL;
	return tree_node(fs->tree, (uint32_t)(ino - 1));
}

/* The control directory's files, in readdir order (DESIGN.md 2.3). */
static const struct {
	const char *name;
	uint64_t ino;
	mode_t mode;
} ctl_files[] = {
	{ "hint", FS_INO_CTL_HINT, S_IFREG | 0200 },     /* write-only */
	{ "stats", FS_INO_CTL_STATS, S_IFREG | 0444 },   /* read-only */
	{ "warm", FS_INO_CTL_WARM, S_IFREG | 0200 },
	{ "evict", FS_INO_CTL_EVICT, S_IFREG | 0200 },
	{ "relist", FS_INO_CTL_RELIST, S_IFREG | 0200 },
	{ "verify", FS_INO_CTL_VERIFY, S_IFREG | 0444 },
};
#define N_CTL_FILES (sizeof(ctl_files) / sizeof(ctl_files[0]))

static bool is_ctl_file(uint64_t ino)
{
	return ino > FS_INO_CTL_DIR && ino <= FS_INO_CTL_DIR + N_CTL_FILES;
}

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
		/* Size 0: their contents are made at open (direct I/O). */
		st->st_mode = ctl_files[ino - FS_INO_CTL_DIR - 1].mode;
		st->st_nlink = 1;
		st->st_mtim.tv_sec = time(NULL);
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

int fs_getattr(struct fs *fs, uint64_t ino, struct stat *st)
{
	const struct tree_node *n = node_of(fs, ino);

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

int fs_open(struct fs *fs, uint64_t ino, int flags, struct fs_file **fh,
	    bool *direct_io)
{
	const struct tree_node *n = node_of(fs, ino);

	*fh = NULL;
	*direct_io = false;
	if (is_ctl_file(ino)) {
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

ssize_t fs_read(struct fs *fs, uint64_t ino, struct fs_file *fh, char *buf,
		size_t size, off_t off)
{
	const struct tree_node *n = node_of(fs, ino);

	if (fh)
		return fs_ctl_read(fh, buf, size, off);
	if (!n)
		return -ENOENT;
	if (n->is_dir)
		return -EISDIR;
	if (off < 0)
		return -EINVAL;
	return pf_read(atomic_load(&fs->pf), (uint32_t)(ino - 1), buf, size,
		       (uint64_t)off);
}

ssize_t fs_write(struct fs *fs, uint64_t ino, struct fs_file *fh,
		 const char *buf, size_t size, off_t off)
{
	if (!fh)
		return -EROFS;
	return fs_ctl_write(fh, buf, size, off);
}

int fs_flush(struct fs *fs, uint64_t ino, struct fs_file *fh)
{
	return fh ? fs_ctl_flush(fs, fh) : 0;
}

void fs_release(struct fs *fs, uint64_t ino, struct fs_file *fh)
{
	const struct tree_node *n = node_of(fs, ino);

	if (fh)
		fs_ctl_release(fh);
	else if (n && !n->is_dir)
		pf_note_close(atomic_load(&fs->pf), (uint32_t)(ino - 1));
}

/* Whether @ino is a control file that takes writes. */
static bool ctl_writable(uint64_t ino)
{
	return is_ctl_file(ino) && (ctl_files[ino - FS_INO_CTL_DIR - 1].mode & 0200);
}

int fs_access(struct fs *fs, uint64_t ino, int mask)
{
	struct stat st;
	int rc = fs_getattr(fs, ino, &st);

	if (!rc && (mask & W_OK) && !ctl_writable(ino))
		rc = -EROFS;
	return rc;
}

int fs_truncate(struct fs *fs, uint64_t ino, uint64_t size, struct stat *st)
{
	if (!ctl_writable(ino))
		return -EROFS;
	/* A shell's '>' truncates before writing: a control file's text is
	 * taken whole from each open, so there is nothing to cut. */
	return fs_getattr(fs, ino, st);
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

	if (!n && ino != FS_INO_CTL_DIR && !is_ctl_file(ino))
		return -ENOENT;
	if (!n || n->is_dir || strcmp(name, FS_XATTR_ETAG))
		return -ENODATA;
	len = etag_value(tree_etag(fs->tree, n), &val);
	return copy_attr(val, len, buf, size);
}

ssize_t fs_listxattr(struct fs *fs, uint64_t ino, char *buf, size_t size)
{
	const struct tree_node *n = node_of(fs, ino);

	if (!n && ino != FS_INO_CTL_DIR && !is_ctl_file(ino))
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
