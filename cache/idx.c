/*
 * cache/idx.c - the LMDB index of the cache: the only code that calls LMDB.
 *
 * Owns the environment DIR/index.mdb and its three databases:
 *   objects  LMDB key -> record (below): where an object's bytes are
 *   inline   LMDB key -> the bytes of an object stored inline
 *   meta     name -> blob (listing snapshot, counters)
 * and the one function that turns LMDB's codes into errno, idx_errno().
 *
 * LMDB key of an object: S3 key, '\0', ETag. LMDB keys are at most 511
 * bytes and S3 keys up to 1,024, so a longer one (or one that starts with
 * byte 0xff, which UTF-8 never does) is stored as 0xff, the 16-byte
 * XXH3-128 of the S3 key, '\0', ETag; the S3 key itself then follows the
 * record. Either way all versions of a key share a prefix, and an ETag
 * never contains '\0', so the last '\0' separates key from ETag.
 *
 * Record, version 1, little-endian, 40 bytes (+ the key when long):
 *   0 u8 version   1 u8 flags (1 inline, 2 long key, 4 own file)
 *   2 u16 zero   4 u32 segment id (seg-<id>.dat; obj-<id>.dat with flag
 *   4, offset 0)   8 u64 size   16 u64 offset   24 u64 xxh3-64
 *   32 u64 insert time (unix s)   40 the S3 key when flag 2
 *
 * Invariant: an object's record and its inline bytes are written and
 * deleted in the same write transaction, so neither outlives the other.
 *
 * The environment runs with MDB_NOSYNC: a commit reaches the page cache,
 * which survives kill -9 of the daemon. What LMDB promises under NOSYNC
 * is less than integrity: "a system crash can corrupt the database or
 * lose the last transactions"; only if the filesystem keeps the order
 * of writes (and without WRITEMAP) is it merely the last transactions.
 * ext4 and XFS do not promise that order for overwrites of a file. And
 * LMDB has no page checksums and trusts its pages: a cut or damaged file
 * can make it SIGBUS or SIGSEGV rather than return MDB_CORRUPTED. So:
 * - cache_close() syncs, then leaves DIR/index.clean naming the file's
 *   size, ctime and inode (open.c);
 * - an index not closed that way since it changed is first walked by
 *   idx_check() in a child process, and one that kills the child or
 *   fails is removed: the cache starts empty, with one warning;
 * - idx_open() refuses a file shorter than its meta page says
 *   (idx_check_size()); blob checksums catch bytes that never reached
 *   the disk, whatever the index says.
 */
#include "cache/cache_internal.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/*
 * With MDB_NOTLS a reader slot belongs to a read transaction, not to a
 * thread, and hintfs holds one only while it copies an inline blob or
 * reads a meta blob: at most one per thread at a time. -o max_threads
 * allows 1,024 FUSE threads (fs/options.c), plus the engine, the hint
 * watcher and a verify: 2,048 slots cover them with room, for 128 KiB of
 * lock file (64 bytes a slot). Running out anyway (MDB_READERS_FULL,
 * -EAGAIN) is a cache miss served by the server, not a failed read.
 */
#define IDX_MAX_READERS 2048
#define IDX_REC_VERSION 1
#define IDX_REC_BYTES	40
#define IDX_F_INLINE	1u
#define IDX_F_LONGKEY	2u
/* Added with file_per_object: an older hintfs drops such a record as
 * one it cannot parse (a miss), never misreads it. */
#define IDX_F_OWN 4u
/* 0xff never starts a UTF-8 string: it marks a hashed (long) key. */
#define IDX_LONG_MARK	0xff
#define IDX_LONG_PREFIX (1 + 16)

struct idx {
	MDB_env *env;	 /* DIR/index.mdb */
	MDB_dbi objects; /* LMDB key -> record */
	MDB_dbi inl;	 /* LMDB key -> inline bytes */
	MDB_dbi meta;	 /* name -> blob */
};

int idx_errno(int rc)
{
	switch (rc) {
	case MDB_SUCCESS:
		return 0;
	case MDB_NOTFOUND:
		return -ENODATA;
	case MDB_KEYEXIST:
		return -EEXIST;
	case MDB_MAP_FULL:
	case MDB_TXN_FULL:
		return -ENOSPC;
	case MDB_READERS_FULL:
	case MDB_MAP_RESIZED:
		return -EAGAIN;
	case MDB_BAD_VALSIZE:
		return -ENAMETOOLONG;
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH:
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
		/* The file is damaged or not ours: cache_open() starts over. */
		return -EUCLEAN;
	default:
		/* LMDB passes system errors through as positive errno. */
		return rc > 0 ? -rc : -EIO;
	}
}

size_t idx_key(const char *key, size_t key_len, const char *etag,
	       size_t etag_len, unsigned char *buf)
{
	size_t n;

	if (key_len + 1 + etag_len <= IDX_KEY_MAX && key_len &&
	    (unsigned char)key[0] != IDX_LONG_MARK) {
		memcpy(buf, key, key_len);
		n = key_len;
	} else {
		XXH128_canonical_t h;

		XXH128_canonicalFromHash(&h, XXH3_128bits(key, key_len));
		buf[0] = IDX_LONG_MARK;
		memcpy(buf + 1, h.digest, sizeof(h.digest));
		n = IDX_LONG_PREFIX;
	}
	buf[n++] = '\0';
	memcpy(buf + n, etag, etag_len); /* etag_len <= CACHE_ETAG_MAX */
	return n + etag_len;
}

static bool idx_key_is_long(size_t key_len, size_t etag_len, const char *key)
{
	return key_len + 1 + etag_len > IDX_KEY_MAX || !key_len ||
	       (unsigned char)key[0] == IDX_LONG_MARK;
}

static void put_le32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put_le64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint32_t get_le32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

/* Parses one objects entry; false when it is not a record we wrote. */
static bool idx_decode(const MDB_val *k, const MDB_val *v, struct idx_rec *r)
{
	const unsigned char *kb = k->mv_data, *vb = v->mv_data, *sep;
	unsigned flags;

	if (v->mv_size < IDX_REC_BYTES || vb[0] != IDX_REC_VERSION)
		return false;
	flags = vb[1];
	if (flags & ~(IDX_F_INLINE | IDX_F_LONGKEY | IDX_F_OWN) ||
	    (flags & IDX_F_INLINE && flags & IDX_F_OWN))
		return false;
	sep = memrchr(kb, '\0', k->mv_size);
	if (!sep)
		return false;
	r->etag = (const char *)sep + 1;
	r->etag_len = k->mv_size - (size_t)(sep + 1 - kb);
	if (flags & IDX_F_LONGKEY) {
		if (sep - kb != IDX_LONG_PREFIX || kb[0] != IDX_LONG_MARK)
			return false;
		r->key = (const char *)vb + IDX_REC_BYTES;
		r->key_len = v->mv_size - IDX_REC_BYTES;
	} else {
		if (v->mv_size != IDX_REC_BYTES)
			return false;
		r->key = (const char *)kb;
		r->key_len = (size_t)(sep - kb);
	}
	if (r->etag_len > CACHE_ETAG_MAX || r->key_len > CACHE_KEY_MAX ||
	    idx_key_is_long(r->key_len, r->etag_len, r->key) !=
		!!(flags & IDX_F_LONGKEY))
		return false;
	r->is_inline = flags & IDX_F_INLINE;
	r->own = flags & IDX_F_OWN;
	r->seg = get_le32(vb + 4);
	r->size = get_le64(vb + 8);
	r->off = get_le64(vb + 16);
	if (r->own && (r->off || !r->seg))
		return false;
	r->sum = get_le64(vb + 24);
	r->time_s = get_le64(vb + 32);
	return true;
}

/* Encodes @r into @buf (IDX_REC_BYTES + key bytes); returns the length. */
static size_t idx_encode(const struct idx_rec *r, bool long_key,
			 unsigned char *buf)
{
	memset(buf, 0, IDX_REC_BYTES);
	buf[0] = IDX_REC_VERSION;
	buf[1] = (r->is_inline ? IDX_F_INLINE : 0) |
		 (long_key ? IDX_F_LONGKEY : 0) | (r->own ? IDX_F_OWN : 0);
	put_le32(buf + 4, r->seg);
	put_le64(buf + 8, r->size);
	put_le64(buf + 16, r->off);
	put_le64(buf + 24, r->sum);
	put_le64(buf + 32, r->time_s);
	if (!long_key)
		return IDX_REC_BYTES;
	memcpy(buf + IDX_REC_BYTES, r->key, r->key_len);
	return IDX_REC_BYTES + r->key_len;
}

/*
 * LMDB trusts its meta page: a file cut short (a power loss without
 * sync, a full disk, a copy cut off) leaves pages the meta names past
 * the end of the file, and touching them through the map is SIGBUS, not
 * an error. Checked here, before any page is read.
 */
static int idx_check_size(MDB_env *env)
{
	MDB_envinfo info;
	MDB_stat st;
	struct stat fst;
	mdb_filehandle_t fd;
	int rc;

	rc = mdb_env_info(env, &info);
	if (!rc)
		rc = mdb_env_stat(env, &st);
	if (!rc)
		rc = mdb_env_get_fd(env, &fd);
	if (rc)
		return rc;
	if (fstat(fd, &fst) < 0)
		return errno;
	if ((uint64_t)fst.st_size <
	    ((uint64_t)info.me_last_pgno + 1) * st.ms_psize)
		return MDB_CORRUPTED;
	return 0;
}

/* The checking child's exit codes. */
#define IDX_CHECK_OK  0
#define IDX_CHECK_BAD 3

/* In the child: walks every entry of database @name, touching the first
 * and last byte of each value; false when LMDB reports damage or the
 * walk cannot end (more entries than the file has room for: a loop).
 * idx_open() creates the three named databases in its first commit, so
 * one is missing only from a file that holds nothing but its meta pages
 * (@may_lack: a daemon killed before that commit). */
static bool idx_walk_db(MDB_txn *txn, const char *name, bool may_lack,
			uint64_t *budget)
{
	MDB_cursor *cur;
	MDB_dbi dbi;
	MDB_val k, v;
	int rc;

	rc = mdb_dbi_open(txn, name, 0, &dbi);
	if (rc == MDB_NOTFOUND)
		return may_lack;
	if (rc || mdb_cursor_open(txn, dbi, &cur))
		return false;
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		if (!(*budget)--)
			return false;
		if (v.mv_size) {
			const volatile unsigned char *b = v.mv_data;

			(void)b[0];
			(void)b[v.mv_size - 1];
		}
	}
	mdb_cursor_close(cur);
	return rc == MDB_NOTFOUND;
}

int idx_check(const char *path, uint64_t map_bytes)
{
	int status;
	pid_t pid;

	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		MDB_env *env;
		MDB_txn *txn;
		MDB_envinfo info;
		MDB_dbi dbi;
		struct stat st;
		uint64_t budget;
		bool ok, empty;
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

		/* Its death is the answer, not news: a sanitizer's report of
		 * it would read as the daemon's own. */
		if (null >= 0)
			dup2(null, STDERR_FILENO);
		/* NOLOCK: the lock file is not ours to touch from here. */
		if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 3) ||
		    mdb_env_set_mapsize(env, map_bytes) ||
		    mdb_env_open(env, path,
				 MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK |
				     MDB_NOTLS,
				 0600) ||
		    idx_check_size(env) || stat(path, &st) < 0 ||
		    mdb_txn_begin(env, NULL, MDB_RDONLY, &txn))
			_exit(IDX_CHECK_BAD);
		/* An entry takes more than 8 bytes of a page. */
		budget = (uint64_t)st.st_size / 8;
		empty = !mdb_env_info(env, &info) && info.me_last_pgno <= 1;
		ok = idx_walk_db(txn, NULL, true, &budget) &&
		     idx_walk_db(txn, "objects", empty, &budget) &&
		     idx_walk_db(txn, "inline", empty, &budget) &&
		     idx_walk_db(txn, "meta", empty, &budget);
		mdb_txn_abort(txn);
		mdb_env_close(env);
		if (!ok)
			_exit(IDX_CHECK_BAD);
		/*
		 * Reading a page is not writing it: the first write copies a
		 * page into a heap buffer and edits it there by its header's
		 * offsets, so a damaged header that reads as an empty page
		 * overflows that buffer. Rehearse idx_open()'s first write
		 * transaction here, and abort it (nothing reaches the file).
		 */
		if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 3) ||
		    mdb_env_set_mapsize(env, map_bytes) ||
		    mdb_env_open(env, path, MDB_NOSUBDIR | MDB_NOLOCK, 0600) ||
		    mdb_txn_begin(env, NULL, 0, &txn) ||
		    mdb_dbi_open(txn, "objects", MDB_CREATE, &dbi) ||
		    mdb_dbi_open(txn, "inline", MDB_CREATE, &dbi) ||
		    mdb_dbi_open(txn, "meta", MDB_CREATE, &dbi))
			_exit(IDX_CHECK_BAD);
		mdb_txn_abort(txn);
		_exit(IDX_CHECK_OK);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	/* Killed (SIGBUS, SIGSEGV) or refused: damaged either way. */
	if (WIFEXITED(status) && WEXITSTATUS(status) == IDX_CHECK_OK)
		return 0;
	return -EUCLEAN;
}

int idx_open(const char *path, const char *shown, uint64_t map_bytes,
	     struct idx **out, char *err, size_t err_len)
{
	struct idx *ix;
	MDB_txn *txn = NULL;
	int rc, dead;

	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	rc = mdb_env_create(&ix->env);
	if (rc)
		goto fail;
	rc = mdb_env_set_maxdbs(ix->env, 3);
	if (!rc)
		rc = mdb_env_set_mapsize(ix->env, map_bytes);
	if (!rc)
		rc = mdb_env_set_maxreaders(ix->env, IDX_MAX_READERS);
	if (rc)
		goto fail_env;
	/*
	 * NOTLS: FUSE threads begin and end a read txn within one call, and
	 * the slot belongs to the txn rather than to the thread.
	 * NOSYNC (see the top of the file). NORDAHEAD: inline reads are
	 * small and random; readahead would only evict useful pages.
	 */
	rc = mdb_env_open(ix->env, path,
			  MDB_NOSUBDIR | MDB_NOTLS | MDB_NOSYNC |
			      MDB_NOMETASYNC | MDB_NORDAHEAD,
			  0600);
	if (!rc)
		rc = idx_check_size(ix->env);
	if (rc)
		goto fail_env;
	/* A killed daemon leaves its reader slots behind; free them. */
	mdb_reader_check(ix->env, &dead);

	rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
	if (!rc)
		rc = mdb_dbi_open(txn, "objects", MDB_CREATE, &ix->objects);
	if (!rc)
		rc = mdb_dbi_open(txn, "inline", MDB_CREATE, &ix->inl);
	if (!rc)
		rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &ix->meta);
	if (rc) {
		mdb_txn_abort(txn);
		goto fail_env;
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		goto fail_env;
	*out = ix;
	return 0;

fail_env:
	mdb_env_close(ix->env);
fail:
	snprintf(err, err_len, "cache index %s: %s", shown, mdb_strerror(rc));
	free(ix);
	return idx_errno(rc);
}

void idx_close(struct idx *ix)
{
	if (!ix)
		return;
	mdb_env_close(ix->env);
	free(ix);
}

int idx_sync(struct idx *ix)
{
	return idx_errno(mdb_env_sync(ix->env, 1));
}

/* Deletes @k from objects and inline; a missing inline value is normal. */
static int idx_del_key(struct idx *ix, MDB_txn *txn, MDB_val *k)
{
	int rc = mdb_del(txn, ix->objects, k, NULL);

	if (rc && rc != MDB_NOTFOUND)
		return rc;
	rc = mdb_del(txn, ix->inl, k, NULL);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* A growing array of LMDB keys to delete after a read-only scan. */
struct idx_drop_key {
	size_t len;
	unsigned char b[IDX_KEY_MAX];
};

struct idx_drops {
	struct idx_drop_key *keys;
	size_t n, cap;
};

static int idx_drops_add(struct idx_drops *d, const MDB_val *k)
{
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		void *p = realloc(d->keys, cap * sizeof(*d->keys));

		if (!p)
			return -ENOMEM;
		d->keys = p;
		d->cap = cap;
	}
	d->keys[d->n].len = k->mv_size;
	memcpy(d->keys[d->n].b, k->mv_data, k->mv_size);
	d->n++;
	return 0;
}

int idx_count(struct idx *ix, size_t *n)
{
	MDB_txn *txn;
	MDB_stat st;
	int rc;

	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return idx_errno(rc);
	rc = mdb_stat(txn, ix->objects, &st);
	mdb_txn_abort(txn);
	if (rc)
		return idx_errno(rc);
	*n = st.ms_entries;
	return 0;
}

int idx_load(struct idx *ix, idx_load_cb cb, void *arg, size_t *dropped)
{
	struct idx_drops drops = {0};
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int rc, ret = 0;

	*dropped = 0;
	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return idx_errno(rc);
	rc = mdb_cursor_open(txn, ix->objects, &cur);
	if (rc) {
		mdb_txn_abort(txn);
		return idx_errno(rc);
	}
	while ((rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) == 0) {
		struct idx_rec r;
		int keep;

		if (k.mv_size > IDX_KEY_MAX)
			continue; /* not with LMDB's 511-byte limit */
		/* A record we cannot parse is dropped like a bad one. */
		keep = idx_decode(&k, &v, &r) ? cb(arg, &r) : 1;

		if (keep < 0) {
			ret = keep;
			break;
		}
		if (keep) {
			ret = idx_drops_add(&drops, &k);
			if (ret)
				break;
		}
	}
	if (rc && rc != MDB_NOTFOUND)
		ret = idx_errno(rc);
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);

	if (!ret && drops.n) {
		rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
		for (size_t i = 0; !rc && i < drops.n; i++) {
			k.mv_size = drops.keys[i].len;
			k.mv_data = drops.keys[i].b;
			rc = idx_del_key(ix, txn, &k);
		}
		if (rc)
			mdb_txn_abort(txn);
		else
			rc = mdb_txn_commit(txn);
		ret = idx_errno(rc);
		*dropped = drops.n;
	}
	free(drops.keys);
	return ret;
}

int idx_apply(struct idx *ix, const struct idx_rec *put, const void *data,
	      const struct cache_ent *dels)
{
	return idx_apply_many(ix, put, &data, put ? 1 : 0, dels);
}

/*
 * Deletes @dels and puts the @n records @puts (inline bytes in @datas[i])
 * in one write transaction: a batch of objects costs one commit, and is
 * all or nothing.
 */
int idx_apply_many(struct idx *ix, const struct idx_rec *puts,
		   const void *const *datas, size_t n,
		   const struct cache_ent *dels)
{
	unsigned char kb[IDX_KEY_MAX];
	MDB_txn *txn;
	MDB_val k, v;
	int rc;

	rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
	if (rc)
		return idx_errno(rc);
	for (; dels && !rc; dels = dels->hnext) {
		k.mv_data = kb;
		k.mv_size =
		    idx_key(dels->name, dels->key_len,
			    dels->name + dels->key_len + 1, dels->etag_len, kb);
		rc = idx_del_key(ix, txn, &k);
	}
	for (size_t i = 0; i < n && !rc; i++) {
		const struct idx_rec *put = &puts[i];
		unsigned char rec[IDX_REC_BYTES + CACHE_KEY_MAX];
		bool long_key =
		    idx_key_is_long(put->key_len, put->etag_len, put->key);

		k.mv_data = kb;
		k.mv_size = idx_key(put->key, put->key_len, put->etag,
				    put->etag_len, kb);
		v.mv_data = rec;
		v.mv_size = idx_encode(put, long_key, rec);
		rc = mdb_put(txn, ix->objects, &k, &v, 0);
		if (!rc && put->is_inline) {
			v.mv_data = (void *)datas[i];
			v.mv_size = put->size;
			rc = mdb_put(txn, ix->inl, &k, &v, 0);
		}
	}
	if (rc) {
		mdb_txn_abort(txn);
		return idx_errno(rc);
	}
	return idx_errno(mdb_txn_commit(txn));
}

int idx_clear(struct idx *ix)
{
	MDB_txn *txn;
	int rc;

	rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
	if (rc)
		return idx_errno(rc);
	rc = mdb_drop(txn, ix->objects, 0);
	if (!rc)
		rc = mdb_drop(txn, ix->inl, 0);
	if (rc) {
		mdb_txn_abort(txn);
		return idx_errno(rc);
	}
	return idx_errno(mdb_txn_commit(txn));
}

int idx_read_inline(struct idx *ix, const unsigned char *kb, size_t k_len,
		    idx_inline_cb cb, void *arg)
{
	MDB_txn *txn;
	MDB_val k = {.mv_size = k_len, .mv_data = (void *)kb}, v;
	int rc, ret;

	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return idx_errno(rc);
	rc = mdb_get(txn, ix->inl, &k, &v);
	/* v points into the map and is valid until the txn ends. */
	ret = rc ? idx_errno(rc) : cb(arg, v.mv_data, v.mv_size);
	mdb_txn_abort(txn);
	return ret;
}

/*
 * A meta name longer than LMDB's 511-byte key limit (a listing's name
 * holds endpoint, bucket and prefix, and a prefix may be 1,024 bytes) is
 * stored as 0xff and the 16-byte XXH3-128 of the name, as long object
 * keys are; its value then starts with the name itself, which a get
 * compares, so that two names never share a value.
 */
static bool idx_meta_long(const char *name, size_t len)
{
	return len > IDX_KEY_MAX || (unsigned char)name[0] == IDX_LONG_MARK;
}

static void idx_meta_key(const char *name, size_t len, unsigned char *kb,
			 MDB_val *k)
{
	XXH128_canonical_t h;

	if (!idx_meta_long(name, len)) {
		k->mv_data = (void *)name;
		k->mv_size = len;
		return;
	}
	XXH128_canonicalFromHash(&h, XXH3_128bits(name, len));
	kb[0] = IDX_LONG_MARK;
	memcpy(kb + 1, h.digest, sizeof(h.digest));
	k->mv_data = kb;
	k->mv_size = IDX_LONG_PREFIX;
}

/*
 * Writes (a put of @len bytes of @blob, or with @del a delete) the meta
 * record @name in a write transaction of its own.
 */
static int meta_write(struct idx *ix, const char *name, const void *blob,
		      size_t len, bool del)
{
	size_t n_len = strlen(name);
	bool lng = n_len && idx_meta_long(name, n_len);
	unsigned char kb[IDX_LONG_PREFIX];
	MDB_val k, v;
	MDB_txn *txn;
	int rc;

	if (!n_len)
		return -EINVAL;
	idx_meta_key(name, n_len, kb, &k);
	rc = mdb_txn_begin(ix->env, NULL, 0, &txn);
	if (rc)
		return idx_errno(rc);
	/* Reserve, then fill in place: a long name goes first. */
	v.mv_size = (lng ? n_len + 1 : 0) + len;
	rc = del ? mdb_del(txn, ix->meta, &k, NULL)
		 : mdb_put(txn, ix->meta, &k, &v, MDB_RESERVE);
	if (rc) {
		mdb_txn_abort(txn);
		return idx_errno(rc);
	}
	if (!del && lng)
		memcpy(v.mv_data, name, n_len + 1);
	if (!del && len)
		memcpy((char *)v.mv_data + (lng ? n_len + 1 : 0), blob, len);
	return idx_errno(mdb_txn_commit(txn));
}

int idx_meta_put(struct idx *ix, const char *name, const void *blob, size_t len)
{
	return meta_write(ix, name, blob, len, false);
}

int idx_meta_del(struct idx *ix, const char *name)
{
	return meta_write(ix, name, NULL, 0, true);
}

/* A WILLNEED call reads at most the larger of the disk's readahead window
 * and its largest request (Linux's force_page_cache_ra()); 128 KiB is the
 * default window, so a step of it is read whole on any disk. */
#define IDX_WILLNEED_STEP (128u << 10)

/*
 * NOTE(lmdb): the map is opened MDB_NORDAHEAD (the kernel is told its
 * reads are random: they are, for inline objects), so a blob read whole,
 * start to end, faulted its pages in one at a time: a warm mount of
 * 1,281,167 keys after a page-cache drop took 28,736 major faults, one per
 * page of its 118 MB listing, 5.7 s (1.8 s with the file read first).
 *
 * Its pages are asked for before the read, step by step (one WILLNEED
 * call for a listing of 88 MB left 20,281 major faults, steps 41-52), and
 * given back to the page cache after it (MADV_DONTNEED: the map is
 * read-only and shared, so they leave only this process's resident set):
 * read once at a mount, the listing need not stay in the daemon's memory.
 */
static void meta_advise(const void *p, size_t len, int advice)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t a, at = (uintptr_t)p;
	size_t step;

	if (page <= 0 || !len)
		return;
	a = at & ~((uintptr_t)page - 1);
	len += at - a;
	/* A larger blob is asked for step by step: one call would read only
	 * its first window (IDX_WILLNEED_STEP). */
	step = advice == MADV_WILLNEED ? IDX_WILLNEED_STEP : len;
	for (size_t off = 0; off < len; off += step)
		(void)madvise((void *)(a + off),
			      len - off < step ? len - off : step, advice);
}

int idx_meta_read(struct idx *ix, const char *name,
		  int (*fn)(void *arg, const void *blob, size_t len), void *arg)
{
	size_t n_len = strlen(name), skip = 0;
	unsigned char kb[IDX_LONG_PREFIX];
	MDB_val k, v;
	MDB_txn *txn;
	int rc, ret;

	if (!n_len)
		return -ENODATA;
	idx_meta_key(name, n_len, kb, &k);
	rc = mdb_txn_begin(ix->env, NULL, MDB_RDONLY, &txn);
	if (rc)
		return idx_errno(rc);
	rc = mdb_get(txn, ix->meta, &k, &v);
	if (!rc && idx_meta_long(name, n_len)) {
		skip = n_len + 1;
		if (v.mv_size < skip || memcmp(v.mv_data, name, skip))
			rc = MDB_NOTFOUND;
	}
	if (rc) {
		ret = idx_errno(rc);
	} else {
		meta_advise(v.mv_data, v.mv_size, MADV_WILLNEED);
		ret = fn(arg, (const char *)v.mv_data + skip, v.mv_size - skip);
		meta_advise(v.mv_data, v.mv_size, MADV_DONTNEED);
	}
	mdb_txn_abort(txn);
	return ret;
}

struct meta_copy {
	void *data;
	size_t len;
};

static int meta_copy(void *arg, const void *blob, size_t len)
{
	struct meta_copy *mc = arg;

	/* +1: a zero-length blob still gets a buffer to free. */
	mc->data = malloc(len + 1);
	if (!mc->data)
		return -ENOMEM;
	memcpy(mc->data, blob, len);
	mc->len = len;
	return 0;
}

int idx_meta_get(struct idx *ix, const char *name, void **out, size_t *len)
{
	struct meta_copy mc = {0};
	int rc = idx_meta_read(ix, name, meta_copy, &mc);

	if (!rc) {
		*out = mc.data;
		*len = mc.len;
	}
	return rc;
}
