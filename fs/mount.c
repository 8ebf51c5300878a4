/*
 * fs/mount.c - the mount's wiring: fs_create() opens the cache, builds the
 * namespace (from the listing saved in the cache, or from ListObjectsV2),
 * starts the prefetch engine and the hint watcher; fs_destroy() takes them
 * down in reverse; fs_relist() lists again for the next mount. Also the
 * callbacks through which the engine asks the namespace what an object
 * is.
 *
 * Start-up order matters: the cache opens first (it holds the listing
 * snapshot), then the namespace is built, then the engine starts and
 * registers itself as the cache's next-use callback (by object id); until
 * then the cache treats every object as unhinted.
 */
#include "fs/fs_internal.h"
#include "fs/passthrough.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/log.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

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
			 "255 bytes), the first: '%s'",
			 fs->source, (unsigned long long)sk->bad_path,
			 sk->first_bad);
	if (sk->shadowed)
		log_info(
		    "%s: %llu file(s) hidden by a directory of the same name",
		    fs->source, (unsigned long long)sk->shadowed);
	if (sk->reserved)
		log_warn(
		    "%s: %llu key(s) under '%s' hidden: that name is hintfs's "
		    "control directory",
		    fs->source, (unsigned long long)sk->reserved, FS_CTL_NAME);
}

/*
 * Builds the namespace: from the snapshot saved in the cache when there is
 * one (and no relist was asked), else from ListObjectsV2, saving it.
 */
static int build_namespace(struct fs *fs, const struct fs_config *cfg,
			   char *err, size_t err_len)
{
	struct list_ctx lc = {.prefix = cfg->prefix,
			      .prefix_len = strlen(cfg->prefix)};
	struct s3_status st = {0};
	const char *name = fs->listing_name;
	uint64_t t0 = mono_ms();
	int64_t saved_at;
	char why[512];
	uint64_t count;
	int rc;

	if (!cfg->relist) {
		lc.b = tree_builder_create(FS_CTL_NAME);
		if (!lc.b) {
			rc = -ENOMEM;
			goto out;
		}
		rc = listing_load(fs->cache, name, lc.b, list_cb, &lc, &count,
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
			log_warn(
			    "%s: the listing saved in the cache is damaged; "
			    "listing again",
			    fs->source);
		else if (rc != -ENODATA)
			log_warn(
			    "%s: cannot read the saved listing (%s); listing "
			    "again",
			    fs->source, strerror(-rc));
	}

	lc.b = tree_builder_create(FS_CTL_NAME);
	lc.snap = listing_buf_create(fs->cache, name);
	if (!lc.b || !lc.snap) {
		rc = -ENOMEM;
		goto out;
	}
	rc = s3_list(fs->s3, cfg->prefix, list_cb, &lc, &st);
	if (rc) {
		if (rc == -ENOMEM || rc == -EFBIG) {
			snprintf(err, err_len,
				 "cannot hold the listing of %s: %s",
				 fs->source, strerror(-rc));
		} else {
			s3_status_describe(&st, rc, why, sizeof(why));
			snprintf(err, err_len, "cannot list %s at %s: %s",
				 fs->source, cfg->s3.endpoint, why);
		}
		goto out;
	}
	rc = listing_save(lc.snap);
	if (rc)
		log_warn("%s: cannot save the listing in the cache (%s); the "
			 "next mount lists again",
			 fs->source, strerror(-rc));
	atomic_store(&fs->listing_saved_at, (int64_t)time(NULL));
build:
	rc = tree_build(lc.b, fs->mount_time, &fs->tree);
	lc.b = NULL;
	if (rc) {
		snprintf(err, err_len, "cannot build the namespace: %s",
			 strerror(-rc));
		goto out;
	}
	fs->list_ms = mono_ms() - t0;
	if (lc.foreign)
		log_warn(
		    "%s: the server listed %llu key(s) outside the prefix; "
		    "ignored",
		    fs->source, (unsigned long long)lc.foreign);
	log_skips(fs);
out:
	tree_builder_destroy(lc.b);
	listing_buf_destroy(lc.snap);
#ifdef __GLIBC__
	/* The builder's and the listing's memory, freed, stays in the malloc
	 * arenas of the listing workers' threads: after a cold mount of
	 * 1,281,167 keys, 190 MB anonymous resident without this, 175 with. */
	malloc_trim(0);
#endif
	return rc;
}

int fs_relist(struct fs *fs)
{
	struct list_ctx lc = {.prefix = fs->prefix,
			      .prefix_len = strlen(fs->prefix)};
	struct s3_status st = {0};
	char why[512];
	int rc;

	pthread_mutex_lock(&fs->relist_mu);
	lc.snap = listing_buf_create(fs->cache, fs->listing_name);
	rc = lc.snap ? s3_list(fs->s3, fs->prefix, list_cb, &lc, &st) : -ENOMEM;
	if (!rc)
		rc = listing_save(lc.snap);
	if (rc) {
		s3_status_describe(&st, rc, why, sizeof(why));
		log_error("relist of %s: %s", fs->source,
			  st.kind != S3_ERR_NONE ? why : strerror(-rc));
	} else {
		atomic_store(&fs->listing_saved_at, (int64_t)time(NULL));
		log_info("relist of %s: %llu objects saved; used from the next "
			 "mount",
			 fs->source,
			 (unsigned long long)listing_buf_count(lc.snap));
	}
	listing_buf_destroy(lc.snap);
	pthread_mutex_unlock(&fs->relist_mu);
	return rc;
}

/* ---- what the engine and the cache ask of the namespace ----------------- */

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

static uint64_t size_cb(void *arg, uint32_t id)
{
	struct fs *fs = arg;
	const struct tree_node *n = tree_node(fs->tree, id);

	return n && !n->is_dir ? n->size : 0;
}

/* The object of file @ino (its key in @key), or -ENODATA when @ino is
 * not a file of the listing. */
static int describe_ino(struct fs *fs, uint64_t ino, char key[FS_KEY_MAX],
			struct pf_object *o)
{
	if (ino < 1 || ino - 1 >= tree_count(fs->tree) ||
	    describe_cb(fs, (uint32_t)(ino - 1), key, FS_KEY_MAX, o))
		return -ENODATA;
	return 0;
}

ssize_t fs_cached_ref(struct fs *fs, uint64_t ino, cache_ref_cb cb, void *arg)
{
	char key[FS_KEY_MAX];
	struct pf_object o;

	if (describe_ino(fs, ino, key, &o))
		return -ENODATA;
	return cache_read_ref(fs->cache, o.key, o.key_len, o.etag, o.size,
			      (size_t)o.size, 0, cb, arg);
}

int fs_cached_file(struct fs *fs, uint64_t ino, uint64_t *hold)
{
	char key[FS_KEY_MAX];
	struct pf_object o;

	if (describe_ino(fs, ino, key, &o))
		return -ENODATA;
	return cache_open_file_held(fs->cache, o.key, o.key_len, o.etag, o.size,
				    hold);
}

void fs_cached_file_release(struct fs *fs, uint64_t hold)
{
	cache_release_file(fs->cache, hold);
}

static uint32_t key_id_cb(void *arg, const char *key, size_t key_len)
{
	struct fs *fs = arg;
	size_t plen = strlen(fs->prefix);

	if (key_len < plen || memcmp(key, fs->prefix, plen))
		return HINT_NO_ID;
	return fs_file_id(fs, key + plen, key_len - plen);
}

/* ---- create / destroy ------------------------------------------------------
 */

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

int fs_create(const struct fs_config *cfg, struct fs **out, char *err,
	      size_t err_len)
{
	size_t plen = strlen(cfg->prefix);
	struct cache_config cc = {0};
	struct pf_config pc = {0};
	char *source = NULL;
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
	pthread_mutex_init(&fs->ctl_mu, NULL);
	fs->open_per_file = cfg->open_per_file || cfg->passthrough;
	fs->follow = fs_follow_create(NULL);
	fs->watch_efd = -1;
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
		     plen ? "/" : "", (int)(plen ? plen - 1 : 0),
		     cfg->prefix) < 0) {
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

	if (cfg->tier.bucket) {
		rc = s3_client_create(&cfg->tier, &fs->tier_s3, why,
				      sizeof(why));
		if (rc) {
			snprintf(err, err_len, "shared cache: %s", why);
			goto fail;
		}
	}

	rc = mkdir_p(cfg->cache_dir, 0700);
	if (rc) {
		snprintf(err, err_len, "cache directory '%s': %s",
			 cfg->cache_dir, strerror(-rc));
		goto fail;
	}
	cc.dir = cfg->cache_dir;
	cc.capacity = cache_capacity(cfg);
	/* NOTE(s3): a bucket is named by endpoint and name; the prefix is
	 * not part of it (cached keys are whole keys). */
	if (asprintf(&source, "s3://%s at %s", cfg->s3.bucket,
		     cfg->s3.endpoint) < 0) {
		rc = -ENOMEM;
		goto fail;
	}
	cc.source = source;
	/* Passthrough hands the kernel an object's own file. */
	cc.file_per_object = cfg->passthrough;
	rc = cache_open(&cc, &fs->cache, why, sizeof(why));
	free(source);
	if (rc) {
		snprintf(err, err_len, "%s", why);
		goto fail;
	}

	rc = build_namespace(fs, cfg, err, err_len);
	if (rc)
		goto fail;
#ifdef HINTFS_HAVE_PASSTHROUGH
	/* Until the kernel's INIT says otherwise (fs_ops.c). */
	if (cfg->passthrough) {
		fs->pt = fs_pt_create(tree_count(fs->tree));
		if (!fs->pt) {
			rc = -ENOMEM;
			goto fail;
		}
		fs->passthrough = true;
	}
#endif

	pc.s3 = fs->s3;
	pc.make_source = pf_source_curl_make;
	pc.cache = fs->cache;
	pc.describe = describe_cb;
	pc.key_id = key_id_cb;
	pc.size = size_cb;
	pc.arg = fs;
	pc.n_ids = tree_count(fs->tree);
	pc.max_inflight = cfg->max_inflight;
	pc.net_threads = cfg->net_threads;
	pc.window_objects = cfg->window;
	pc.pace_ms = cfg->pace_ms;
	pc.fetch_mem = cfg->fetch_mem;
	pc.tier_s3 = fs->tier_s3;
	pc.tier_prefix = cfg->tier_prefix;
	pc.origin_bucket = cfg->s3.bucket;
	pc.tier_hedge_ms = cfg->tier_hedge_ms;
	pc.tier_key = cfg->tier_key;
	pc.tier_key_len = cfg->tier_key_len;
	pc.tier_put_mem = cfg->tier_put_mem;
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
	rc = fs_ctl_sock_start(fs, cfg->ctl_socket, err, err_len);
	if (rc)
		goto fail;
	*out = fs;
	return 0;
fail:
	fs_destroy(fs);
	return rc;
}

void fs_cancel(struct fs *fs)
{
	if (fs)
		pf_cancel(atomic_load(&fs->pf));
}

void fs_destroy(struct fs *fs)
{
	if (!fs)
		return;
	fs_ctl_sock_stop(fs);
	fs_hint_watch_stop(fs);
	pf_stop(atomic_load(&fs->pf));
	cache_close(fs->cache);
	tree_destroy(fs->tree);
	fs_pt_destroy(fs->pt);
	s3_client_destroy(fs->s3);
	s3_client_destroy(fs->tier_s3);
	pthread_mutex_destroy(&fs->hint_mu);
	pthread_mutex_destroy(&fs->relist_mu);
	pthread_mutex_destroy(&fs->watch_mu);
	fs_ctl_release_all(fs);
	pthread_mutex_destroy(&fs->ctl_mu);
	fs_follow_destroy(fs->follow);
	free(fs->prefix);
	free(fs->source);
	free(fs->mountpoint);
	free(fs->cache_dir);
	free(fs->hint_file);
	free(fs->ctl_sock_path);
	free(fs->listing_name);
	free(fs);
}
