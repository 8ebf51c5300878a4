/*
 * tests/unit/test_cache.c - the cache of doc/design.md 2.5 through its public
 * header: round trips (inline and segment), parts in any order, abort,
 * persistence, checksums catching a flipped byte, truncated and damaged
 * files, Belady and LRU eviction, the directory lock and ownership, meta
 * blobs, invalidation, many threads at once, kill -9 at random moments,
 * and a full disk (root only: a 4 MiB tmpfs). Most of them run twice: with
 * shared segments and with a file per object (file_per_object), whose own
 * tests (cache_open_file(), eviction unlinking, orphans, mixed
 * directories, 20,000 files under a 256-fd limit) come last.
 *
 * Every test works in its own mkdtemp directory under /tmp, removed at
 * the end. Object bytes are derived from the key, so a reader (or a
 * parent whose child was killed) knows what every object must contain.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cache/cache.h"
#include "check.h"
#include "common/test_hook.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KIB 1024ull
#define MIB (1024ull * 1024)

/* ---- helpers ---- */

/* The mode the shared tests run in: cache_config.file_per_object. */
static bool fpo;

static uint64_t fnv(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* The bytes object @key (of @etag) holds: a xorshift stream. */
static void fill(void *buf, size_t len, const char *key, const char *etag)
{
	uint64_t x = fnv(key, strlen(key)) ^ fnv(etag, strlen(etag)) ^ len;
	unsigned char *p = buf;

	x |= 1;
	for (size_t i = 0; i < len; i++) {
		if (i % 8 == 0) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		p[i] = (unsigned char)(x >> (8 * (i % 8)));
	}
}

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void rm_rf(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *mktmp(void)
{
	char *d = strdup("/tmp/test_cache.XXXXXX");

	if (!d || !mkdtemp(d)) {
		perror("mkdtemp");
		exit(1);
	}
	return d;
}

/* Opens the cache @cfg describes; NULL (a failed check) when it fails. */
static struct cache *open_cfg(const struct cache_config *cfg)
{
	struct cache *c = NULL;
	char err[256];
	int rc;

	rc = cache_open(cfg, &c, err, sizeof(err));
	if (rc)
		fprintf(stderr, "cache_open(%s): %d %s\n", cfg->dir, rc, err);
	CHECK(rc == 0);
	return c;
}

static struct cache *open_cache(const char *dir, uint64_t cap,
				cache_next_use_cb cb, void *arg)
{
	return open_cfg(&(struct cache_config){
	    .dir = dir,
	    .capacity = cap,
	    .next_use = cb,
	    .next_use_arg = arg,
	    .file_per_object = fpo,
	});
}

/*
 * Puts @key of @size bytes in @parts parts, in order (@seed is kept for
 * the callers' sake; the parts are no longer shuffled since a put takes
 * them in order only). Returns what cache_put_begin or cache_put_commit
 * returned.
 */
static int put_obj_id(struct cache *c, const char *key, const char *etag,
		      size_t size, uint64_t next_use, uint32_t id, int parts,
		      unsigned *seed)
{
	struct cache_put *p;
	unsigned char *buf = malloc(size ? size : 1);
	size_t part;
	int rc;

	fill(buf, size, key, etag);
	rc = cache_put_begin(c, key, strlen(key), etag, size, next_use, id, &p);
	if (rc) {
		free(buf);
		return rc;
	}
	if (parts < 1)
		parts = 1;
	if (parts > 64)
		parts = 64;
	part = (size + parts - 1) / parts;
	for (int i = 0; i < parts; i++) {
		size_t off = (size_t)i * part, n;

		if (off >= size)
			continue;
		n = size - off < part ? size - off : part;
		rc = cache_put_write(p, off, buf + off, n);
		if (rc) {
			cache_put_abort(p);
			free(buf);
			return rc;
		}
	}
	free(buf);
	return cache_put_commit(p);
}

static int put_obj(struct cache *c, const char *key, const char *etag,
		   size_t size, uint64_t next_use, int parts, unsigned *seed)
{
	return put_obj_id(c, key, etag, size, next_use, CACHE_NO_ID, parts,
			  seed);
}

/* 0 when @key is cached with exactly its bytes; else the error seen. */
static int check_obj(struct cache *c, const char *key, const char *etag,
		     size_t size)
{
	struct cache_obj o;
	unsigned char *want, *got;
	ssize_t n;
	int rc;

	rc = cache_lookup(c, key, strlen(key), etag, size, &o);
	if (rc)
		return rc;
	if (o.size != size)
		return -EFBIG;
	want = malloc(size + 1);
	got = malloc(size + 1);
	fill(want, size, key, etag);
	n = cache_read(c, &o, got, size + 1, 0);
	rc = n < 0		       ? (int)n
	     : (size_t)n != size       ? -EIO
	     : memcmp(want, got, size) ? -EBADMSG
				       : 0;
	free(want);
	free(got);
	return rc;
}

/*
 * How many files of @dir hold blobs (segments, and files of their own),
 * with the path of the last in @out ("" when none), for damaging it.
 */
static int seg_path(const char *dir, char *out, size_t len)
{
	struct dirent *d;
	DIR *dp = opendir(dir);
	int n = 0;

	out[0] = '\0';
	while (dp && (d = readdir(dp)))
		if (strncmp(d->d_name, "seg-", 4) == 0 ||
		    strncmp(d->d_name, "obj-", 4) == 0) {
			snprintf(out, len, "%s/%s", dir, d->d_name);
			n++;
		}
	if (dp)
		closedir(dp);
	return n;
}

/* Flips the bits @mask of the byte at @off of file @path, as a bad disk
 * would. True when done. */
static bool flip_byte(const char *path, off_t off, unsigned char mask)
{
	unsigned char b;
	int fd = open(path, O_RDWR);
	bool ok = fd >= 0 && pread(fd, &b, 1, off) == 1;

	b ^= mask;
	ok = ok && pwrite(fd, &b, 1, off) == 1;
	if (fd >= 0)
		close(fd);
	return ok;
}

/* ---- tests ---- */

static void test_roundtrip(void)
{
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	unsigned char want[300 * KIB], got[300 * KIB];
	struct cache_stats st;
	struct cache_obj o;
	struct cache_put *p;
	unsigned seed = 1;

	CHECK(put_obj(c, "small", "\"e1\"", 1000, CACHE_NEVER, 1, &seed) == 0);
	CHECK(put_obj(c, "big", "\"e1\"", 300 * KIB, CACHE_NEVER, 3, &seed) ==
	      0);
	CHECK(put_obj(c, "empty", "\"e1\"", 0, CACHE_NEVER, 1, &seed) == 0);
	CHECK(check_obj(c, "small", "\"e1\"", 1000) == 0);
	CHECK(check_obj(c, "big", "\"e1\"", 300 * KIB) == 0);
	CHECK(check_obj(c, "empty", "\"e1\"", 0) == 0);

	/* Another ETag is another object. */
	CHECK(cache_lookup(c, "big", 3, "\"e2\"", 300 * KIB, &o) == -ENODATA);
	CHECK(cache_lookup(c, "bi", 2, "\"e1\"", 300 * KIB, &o) == -ENODATA);
	CHECK(cache_put_begin(c, "big", 3, "\"e1\"", 300 * KIB, 0, CACHE_NO_ID,
			      &p) == -EEXIST);

	/* Ranges: inside, across the end (short), past the end. */
	fill(want, 300 * KIB, "big", "\"e1\"");
	CHECK(cache_lookup(c, "big", 3, "\"e1\"", 300 * KIB, &o) == 0);
	CHECK(cache_read(c, &o, got, 5000, 123457) == 5000);
	CHECK(memcmp(got, want + 123457, 5000) == 0);
	CHECK(cache_read(c, &o, got, 10000, 300 * KIB - 100) == 100);
	CHECK(memcmp(got, want + 300 * KIB - 100, 100) == 0);
	CHECK(cache_read(c, &o, got, 10, 300 * KIB) == 0);
	fill(want, 1000, "small", "\"e1\"");
	CHECK(cache_lookup(c, "small", 5, "\"e1\"", 1000, &o) == 0);
	CHECK(cache_read(c, &o, got, 10, 990) == 10);
	CHECK(memcmp(got, want + 990, 10) == 0);

	/* A stale id is a miss, not someone else's bytes. */
	o.id ^= 1ull << 40;
	CHECK(cache_read(c, &o, got, 10, 0) == -ENODATA);

	cache_get_stats(c, &st);
	CHECK(st.objects == 3);
	CHECK(st.bytes == 1000 + 300 * KIB);
	CHECK(st.capacity == 64 * MIB);
	CHECK(st.misses == 2);
	CHECK(st.hits >= 5);
	{
		struct cache_stats st2;

		/* Neither a hit nor a miss. */
		CHECK(cache_contains(c, "big", 3, "\"e1\"", 300 * KIB));
		CHECK(!cache_contains(c, "big", 3, "\"e2\"", 300 * KIB));
		CHECK(!cache_contains(c, "big", 3, NULL, 300 * KIB));
		cache_get_stats(c, &st2);
		CHECK(st2.hits == st.hits && st2.misses == st.misses);
	}
	CHECK(st.corrupt == 0 && st.write_errors == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static void test_parts(void)
{
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	size_t size = 3 * MIB + 12345, part = 256 * KIB;
	unsigned char *want = malloc(size), *got = malloc(size);
	struct cache_put *p, *q;
	struct cache_obj o;

	fill(want, size, "parts", "\"x\"");
	CHECK(cache_put_begin(c, "parts", 5, "\"x\"", size, 0, CACHE_NO_ID,
			      &p) == 0);
	/* A part that does not start where the last ended is refused (the
	 * checksum is taken as parts come), and costs nothing. */
	CHECK(cache_put_write(p, part, want + part, part) == -EINVAL);
	for (size_t off = 0; off < size; off += part) {
		size_t n = size - off < part ? size - off : part;

		CHECK(cache_put_write(p, off, want + off, n) == 0);
		CHECK(cache_put_write(p, 0, want, n) == -EINVAL);
	}
	CHECK(cache_put_write(p, size - 1, want, 2) == -EINVAL);
	CHECK(cache_lookup(c, "parts", 5, "\"x\"", 0, &o) == -ENODATA);
	CHECK(cache_put_commit(p) == 0);
	CHECK(check_obj(c, "parts", "\"x\"", size) == 0);

	/* Inline, in parts. */
	fill(want, 9000, "tiny", "\"x\"");
	CHECK(cache_put_begin(c, "tiny", 4, "\"x\"", 9000, 0, CACHE_NO_ID,
			      &p) == 0);
	CHECK(cache_put_write(p, 4500, want + 4500, 4500) == -EINVAL);
	CHECK(cache_put_write(p, 0, want, 4500) == 0);
	CHECK(cache_put_write(p, 4500, want + 4500, 4500) == 0);
	CHECK(cache_put_commit(p) == 0);
	CHECK(check_obj(c, "tiny", "\"x\"", 9000) == 0);

	/* A commit with a part missing caches nothing. */
	CHECK(cache_put_begin(c, "holey", 5, "\"x\"", 100 * KIB, 0, CACHE_NO_ID,
			      &q) == 0);
	CHECK(cache_put_write(q, 0, want, 50 * KIB) == 0);
	CHECK(cache_put_commit(q) == -EINVAL);
	CHECK(cache_lookup(c, "holey", 5, "\"x\"", 0, &o) == -ENODATA);
	cache_close(c);
	rm_rf(dir);
	free(dir);
	free(want);
	free(got);
}

static void test_abort(void)
{
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 1 * MIB, NULL, NULL);
	struct cache_stats st;
	struct cache_put *p, *q;
	unsigned char buf[4096] = {0};
	unsigned seed = 2;

	CHECK(cache_put_begin(c, "a", 1, "e", 1 * MIB, CACHE_NEVER, CACHE_NO_ID,
			      &p) == 0);
	CHECK(cache_put_write(p, 0, buf, sizeof(buf)) == 0);
	/* Everything is reserved: nothing else fits meanwhile. */
	CHECK(cache_put_begin(c, "b", 1, "e", 100 * KIB, CACHE_NEVER,
			      CACHE_NO_ID, &q) == -ENOSPC);
	cache_put_abort(p);
	cache_put_abort(NULL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 0 && st.bytes == 0);
	/* The whole capacity is free again. */
	CHECK(put_obj(c, "c", "e", 1 * MIB, CACHE_NEVER, 4, &seed) == 0);
	CHECK(put_obj(c, "d", "e", 2 * MIB, CACHE_NEVER, 1, &seed) == -ENOSPC);
	cache_get_stats(c, &st);
	CHECK(st.objects == 1 && st.evictions == 0);
	CHECK(check_obj(c, "c", "e", 1 * MIB) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static void test_persist(void)
{
	char *dir = mktmp(), key[64], long_key[1100];
	struct cache *c = open_cache(dir, 256 * MIB, NULL, NULL);
	struct cache_stats st;
	unsigned seed = 3;
	int bad = 0;

	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "train/class%d/img%04d.jpg", i % 3,
			 i);
		CHECK(put_obj(c, key, "\"etag\"", 500 + (size_t)i * 4099,
			      CACHE_NEVER, 1 + i % 5, &seed) == 0);
	}
	/* A key too long for an LMDB key, and one starting with 0xff. */
	memset(long_key, 'k', sizeof(long_key) - 1);
	long_key[sizeof(long_key) - 1] = '\0';
	CHECK(put_obj(c, long_key, "\"L\"", 40 * KIB, 0, 2, &seed) == 0);
	CHECK(put_obj(c, "\xff\xfe", "\"L\"", 100, 0, 1, &seed) == 0);
	CHECK(cache_meta_put(c, "listing", "snapshot", 8) == 0);
	cache_close(c);

	c = open_cache(dir, 256 * MIB, NULL, NULL);
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "train/class%d/img%04d.jpg", i % 3,
			 i);
		bad +=
		    check_obj(c, key, "\"etag\"", 500 + (size_t)i * 4099) != 0;
	}
	CHECK(bad == 0);
	CHECK(check_obj(c, long_key, "\"L\"", 40 * KIB) == 0);
	CHECK(check_obj(c, "\xff\xfe", "\"L\"", 100) == 0);
	CHECK(cache_invalidate(c, long_key, strlen(long_key), NULL) == 0);
	cache_get_stats(c, &st);
	CHECK(st.objects == 61 && st.corrupt == 0);
	cache_close(c);

	c = open_cache(dir, 256 * MIB, NULL, NULL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 61);
	CHECK(check_obj(c, long_key, "\"L\"", 40 * KIB) == -ENODATA);
	{
		void *blob = NULL;
		size_t len = 0;

		CHECK(cache_meta_get(c, "listing", &blob, &len) == 0);
		CHECK(len == 8 && blob && memcmp(blob, "snapshot", 8) == 0);
		free(blob);
	}
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static void verify_cb(void *arg, const char *key, size_t key_len, bool ok)
{
	int *counts = arg;

	(void)key;
	(void)key_len;
	counts[ok]++;
}

static void test_corrupt(void)
{
	char *dir = mktmp(), seg[512];
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	struct cache_stats st;
	struct cache_obj o;
	unsigned char buf[64];
	unsigned seed = 4;
	int counts[2] = {0, 0};

	/* Extents start at 0, then on 4 KiB: a at 0, v at 200 KiB. */
	CHECK(put_obj(c, "a", "e", 200 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "v", "e", 100 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "w", "e", 100 * KIB, 0, 1, &seed) == 0);
	cache_close(c);
	CHECK(seg_path(dir, seg, sizeof(seg)) == 1);
	CHECK(flip_byte(seg, 100, 0x40));
	CHECK(flip_byte(seg, 200 * KIB + 5, 0x01));

	c = open_cache(dir, 64 * MIB, NULL, NULL);
	CHECK(cache_lookup(c, "a", 1, "e", 200 * KIB, &o) == 0);
	/* Even a small read far from the flipped byte checks the whole. */
	CHECK(cache_read(c, &o, buf, sizeof(buf), 150 * KIB) == -ENODATA);
	CHECK(cache_lookup(c, "a", 1, "e", 200 * KIB, &o) == -ENODATA);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 1 && st.objects == 2);
	/* It is fetched again: the new copy is served. */
	CHECK(put_obj(c, "a", "e", 200 * KIB, 0, 2, &seed) == 0);
	CHECK(check_obj(c, "a", "e", 200 * KIB) == 0);

	/* verify walks everything: v is bad, a and w are fine. */
	CHECK(cache_verify(c, verify_cb, counts) == 0);
	CHECK(counts[0] == 1 && counts[1] == 2);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 2 && st.objects == 2);
	CHECK(check_obj(c, "v", "e", 100 * KIB) == -ENODATA);
	CHECK(check_obj(c, "w", "e", 100 * KIB) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static void test_truncate(void)
{
	char *dir = mktmp(), seg[512], idx[512];
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	struct cache_stats st;
	unsigned seed = 5;

	CHECK(put_obj(c, "A", "e", 100 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "B", "e", 100 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "C", "e", 100 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "D", "e", 5000, 0, 1, &seed) == 0); /* inline */
	cache_close(c);
	CHECK(seg_path(dir, seg, sizeof(seg)) == 1);
	CHECK(truncate(seg, 150000) == 0); /* cuts B, loses C */

	c = open_cache(dir, 64 * MIB, NULL, NULL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 2 && st.bytes == 100 * KIB + 5000);
	CHECK(check_obj(c, "A", "e", 100 * KIB) == 0);
	CHECK(check_obj(c, "B", "e", 100 * KIB) == -ENODATA);
	CHECK(check_obj(c, "C", "e", 100 * KIB) == -ENODATA);
	CHECK(check_obj(c, "D", "e", 5000) == 0);
	cache_close(c);

	/* A missing segment file drops its objects too. */
	CHECK(unlink(seg) == 0);
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 1);
	CHECK(check_obj(c, "D", "e", 5000) == 0);
	cache_close(c);

	/* A damaged index is an empty cache, not a failed open. */
	snprintf(idx, sizeof(idx), "%s/index.mdb", dir);
	{
		int fd = open(idx, O_WRONLY | O_TRUNC);
		char junk[8192];

		memset(junk, 0x5a, sizeof(junk));
		CHECK(fd >= 0 && write(fd, junk, sizeof(junk)) == 8192);
		close(fd);
	}
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	cache_get_stats(c, &st);
	CHECK(c && st.objects == 0);
	CHECK(put_obj(c, "E", "e", 70 * KIB, 0, 1, &seed) == 0);
	CHECK(check_obj(c, "E", "e", 70 * KIB) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/*
 * A read that fails for a reason other than a bad
 * checksum is a miss (-ENODATA, the caller asks the server), counted in
 * read_errors. EIO drops the entry (a bad sector stays bad; the refetch
 * goes elsewhere); EAGAIN (LMDB's reader slots full) keeps it.
 */
static void test_read_errors(void)
{
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	struct cache_stats st;
	struct cache_obj o;
	unsigned char buf[64];
	unsigned seed = 6;

	CHECK(put_obj(c, "seg", "e", 100 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "inl", "e", 3000, 0, 1, &seed) == 0);
	cache_close(c);

	if (!TEST_HOOKS_BUILT) {
		/* A build without test hooks (the shipped daemon's) ignores
		 * the hook: every read is served. */
		setenv("HINTFS_FAULT_CACHE_READ", "1:11", 1);
		c = open_cache(dir, 64 * MIB, NULL, NULL);
		unsetenv("HINTFS_FAULT_CACHE_READ");
		CHECK(check_obj(c, "seg", "e", 100 * KIB) == 0);
		CHECK(check_obj(c, "inl", "e", 3000) == 0);
		cache_get_stats(c, &st);
		CHECK(st.read_errors == 0 && st.objects == 2);
		cache_close(c);
		rm_rf(dir);
		free(dir);
		return;
	}

	/* Every read fails with EAGAIN: misses, entries kept. */
	setenv("HINTFS_FAULT_CACHE_READ", "1:11", 1);
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	CHECK(cache_lookup(c, "seg", 3, "e", 100 * KIB, &o) == 0);
	CHECK(cache_read(c, &o, buf, sizeof(buf), 0) == -ENODATA);
	CHECK(cache_lookup(c, "inl", 3, "e", 3000, &o) == 0);
	CHECK(cache_read(c, &o, buf, sizeof(buf), 0) == -ENODATA);
	cache_get_stats(c, &st);
	CHECK(st.read_errors == 2 && st.objects == 2 && st.corrupt == 0);
	cache_close(c);

	/* Every second read fails with EIO: that entry is dropped. */
	setenv("HINTFS_FAULT_CACHE_READ", "2", 1);
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	unsetenv("HINTFS_FAULT_CACHE_READ");
	CHECK(check_obj(c, "seg", "e", 100 * KIB) == 0);
	CHECK(check_obj(c, "inl", "e", 3000) == -ENODATA);
	CHECK(cache_lookup(c, "inl", 3, "e", 3000, &o) == -ENODATA);
	cache_get_stats(c, &st);
	CHECK(st.read_errors == 1 && st.objects == 1);
	/* Fetched again, it is served. */
	CHECK(put_obj(c, "inl", "e", 3000, 0, 1, &seed) == 0);
	CHECK(check_obj(c, "inl", "e", 3000) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/*
 * A cache records the source of its objects and refuses
 * another (two buckets whose ETags are not content hashes could otherwise
 * serve each other's bytes); an entry whose size differs from the
 * listing's is a miss and is dropped, never served.
 */
static void test_source_and_size(void)
{
	char *dir = mktmp(), err[512];
	struct cache_config cfg = {.dir = dir,
				   .capacity = 64 * MIB,
				   .source = "s3://one at http://h:1",
				   .file_per_object = fpo};
	struct cache_stats st;
	struct cache_obj o;
	struct cache *c = NULL;
	unsigned seed = 8;

	/* A cache of an older hintfs (no source recorded) is adopted. */
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	CHECK(put_obj(c, "k", "e", 1000, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "m", "e", 100 * KIB, 0, 1, &seed) == 0);
	cache_close(c);
	CHECK(cache_open(&cfg, &c, err, sizeof(err)) == 0);
	/* The same key and ETag with another size: not served, dropped. */
	CHECK(cache_lookup(c, "k", 1, "e", 1001, &o) == -ENODATA);
	CHECK(!cache_contains(c, "m", 1, "e", 100 * KIB - 1));
	CHECK(cache_lookup(c, "m", 1, "e", 100 * KIB - 1, &o) == -ENODATA);
	CHECK(cache_lookup(c, "k", 1, "e", 1000, &o) == -ENODATA);
	CHECK(!cache_contains(c, "m", 1, "e", 100 * KIB));
	cache_get_stats(c, &st);
	CHECK(st.objects == 0);
	CHECK(put_obj(c, "k", "e", 1000, 0, 1, &seed) == 0);
	cache_close(c);

	/* Another bucket (or endpoint) is refused, saying both. */
	cfg.source = "s3://two at http://h:1";
	c = NULL;
	CHECK(cache_open(&cfg, &c, err, sizeof(err)) == -EEXIST && !c);
	CHECK(strstr(err, "s3://one at http://h:1") &&
	      strstr(err, "s3://two at http://h:1") && strstr(err, dir));
	/* The first source still opens it, with its objects. */
	cfg.source = "s3://one at http://h:1";
	CHECK(cache_open(&cfg, &c, err, sizeof(err)) == 0);
	CHECK(check_obj(c, "k", "e", 1000) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/*
 * A damaged index.mdb (garbage pages, a cut file) opens
 * as a cache that serves only right bytes (most often an empty one), and
 * never crashes: whatever it keeps is checked against its checksum.
 */
static void test_damaged_index(void)
{
	static const char *const keys[] = {"i0", "i1", "i2", "s0", "s1"};
	char *dir = mktmp(), idx[512];
	unsigned seed = 9;

	snprintf(idx, sizeof(idx), "%s/index.mdb", dir);
	for (int how = 0; how < 13; how++) {
		struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
		struct stat st;
		int fd, rc;

		for (int k = 0; k < 5; k++)
			put_obj(c, keys[k], "e", k < 3 ? 3000 : 100 * KIB, 0, 1,
				&seed);
		cache_close(c);
		/* Past the coarse clock's tick: the write changes ctime,
		 * so the clean-close marker no longer matches. */
		usleep(20000);
		CHECK(stat(idx, &st) == 0);
		fd = open(idx, O_RDWR);
		CHECK(fd >= 0);
		if (how == 0) {
			CHECK(ftruncate(fd, st.st_size / 3) == 0);
		} else if (how == 1) {
			CHECK(ftruncate(fd, 8192) == 0);
		} else if (how == 12) {
			/* Every page after the meta pages reads as an empty
			 * leaf whose free space is negative: a walk finds
			 * nothing, and the first write into such a page
			 * overflows the heap copy LMDB edits it in. Header:
			 * pgno u64, pad u16, flags u16 (2: leaf), lower u16,
			 * upper u16. */
			long psz = sysconf(_SC_PAGESIZE);

			for (off_t p = 2; p * psz < st.st_size; p++) {
				unsigned char h[16] = {0};
				uint64_t pg = (uint64_t)p;

				memcpy(h, &pg, 8);
				h[10] = 2;
				h[12] = 16;
				CHECK(pwrite(fd, h, sizeof(h), p * psz) == 16);
			}
		} else {
			/* Pages after the two meta pages: zeros, 0xff, or
			 * random bytes, whole or every other 64 bytes. */
			size_t n = (size_t)st.st_size - 8192;
			unsigned char *junk = malloc(n);

			for (size_t i = 0; i < n; i++)
				junk[i] = how == 2 ? 0
					  : how == 3
					      ? 0xff
					      : (unsigned char)rand_r(&seed);
			if (how >= 8) {
				unsigned char *old = malloc(n);

				CHECK(pread(fd, old, n, 8192) == (ssize_t)n);
				for (size_t i = 0; i < n; i++)
					if ((i / 64) % 2)
						junk[i] = old[i];
				free(old);
			}
			CHECK(pwrite(fd, junk, n, 8192) == (ssize_t)n);
			free(junk);
		}
		close(fd);
		c = open_cache(dir, 64 * MIB, NULL, NULL);
		CHECK(c != NULL);
		if (!c)
			break;
		for (int k = 0; k < 5; k++) {
			rc = check_obj(c, keys[k], "e",
				       k < 3 ? 3000 : 100 * KIB);
			CHECK(rc == 0 || rc == -ENODATA);
		}
		/* It takes new objects whatever it kept. */
		cache_clear(c);
		CHECK(put_obj(c, "n", "e", 5000, 0, 1, &seed) == 0);
		CHECK(check_obj(c, "n", "e", 5000) == 0);
		cache_close(c);
		rm_rf(dir);
		mkdir(dir, 0700);
	}
	rm_rf(dir);
	free(dir);
}

/* Next uses for Belady: a small table, CACHE_NEVER when absent. */
struct nu_table {
	const char *key[8];
	uint64_t nu[8];
	atomic_int calls;
};

static uint64_t nu_lookup(void *arg, uint32_t *id, const char *key,
			  size_t key_len)
{
	struct nu_table *t = arg;

	atomic_fetch_add(&t->calls, 1);
	for (int i = 0; i < 8 && t->key[i]; i++)
		if (strlen(t->key[i]) == key_len &&
		    memcmp(t->key[i], key, key_len) == 0)
			return t->nu[i];
	return CACHE_NEVER;
}

/* What the eviction notice was told (cache_set_evicted()). */
struct told {
	uint32_t ids[8];
	int n;
};

static void note_evicted(void *arg, uint32_t id)
{
	struct told *t = arg;

	if (t->n < 8)
		t->ids[t->n] = id;
	t->n++;
}

/* Belady's victims, and the eviction notice naming each by the id it was
 * put with, once (a refusal evicts nothing and tells nothing). */
static void test_belady(void)
{
	struct nu_table t = {
	    .key = {"A", "B", "C", "D", "E"},
	    .nu = {10, 30, 20, 5, 100},
	};
	char *dir = mktmp();
	/* Three 64 KiB objects, and a bit: one eviction makes room for a
	 * fourth, even with the scan freeing down to 95%. */
	struct cache *c =
	    open_cache(dir, 3 * 64 * KIB + 16 * KIB, nu_lookup, &t);
	size_t sz = 64 * KIB;
	struct cache_stats st;
	struct told told = {.n = 0};
	unsigned seed = 6;

	cache_set_evicted(c, note_evicted, &told);
	CHECK(put_obj_id(c, "A", "e", sz, 10, 1, 1, &seed) == 0);
	CHECK(put_obj_id(c, "B", "e", sz, 30, 2, 1, &seed) == 0);
	CHECK(put_obj_id(c, "C", "e", sz, 20, 3, 1, &seed) == 0);
	CHECK(atomic_load(&t.calls) == 0); /* no scan while it fits */
	CHECK(put_obj_id(c, "D", "e", sz, 5, 4, 1, &seed) == 0);
	cache_get_stats(c, &st);
	CHECK(st.evictions == 1 && st.objects == 3);
	CHECK(told.n == 1 && told.ids[0] == 2);
	CHECK(check_obj(c, "B", "e", sz) == -ENODATA); /* furthest */
	CHECK(check_obj(c, "A", "e", sz) == 0);
	CHECK(check_obj(c, "C", "e", sz) == 0);
	CHECK(check_obj(c, "D", "e", sz) == 0);

	/* E is needed after everything cached: not admitted. */
	CHECK(put_obj(c, "E", "e", sz, 100, 1, &seed) == -ENOSPC);
	CHECK(put_obj(c, "F", "e", sz, CACHE_NEVER, 1, &seed) == -ENOSPC);
	cache_get_stats(c, &st);
	CHECK(st.evictions == 1 && st.objects == 3);
	CHECK(told.n == 1);

	/* A was read: its next use is now beyond E's. */
	t.nu[0] = 1000;
	CHECK(put_obj(c, "E", "e", sz, 100, 1, &seed) == 0);
	CHECK(check_obj(c, "A", "e", sz) == -ENODATA);
	CHECK(check_obj(c, "E", "e", sz) == 0);
	CHECK(told.n == 2 && told.ids[1] == 1);
	/* Larger than the whole capacity: never. */
	CHECK(put_obj(c, "G", "e", 1 * MIB, 0, 1, &seed) == -ENOSPC);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* Nothing leaves ahead of need: with room for three, a fourth object
 * evicts exactly one, the one never used again, not the soonest ones. */
static void test_belady_exact(void)
{
	struct nu_table t = {
	    .key = {"a", "b", "c"},
	    .nu = {1, 2, CACHE_NEVER},
	};
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 3 * 100000 + 4096, nu_lookup, &t);
	struct cache_stats st;
	unsigned seed = 10;

	CHECK(put_obj(c, "a", "e", 100000, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "b", "e", 100000, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "c", "e", 100000, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "d", "e", 100000, 0, 1, &seed) == 0);
	cache_get_stats(c, &st);
	CHECK(st.evictions == 1);
	CHECK(check_obj(c, "a", "e", 100000) == 0);
	CHECK(check_obj(c, "b", "e", 100000) == 0);
	CHECK(check_obj(c, "c", "e", 100000) == -ENODATA);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static uint64_t nu_count(void *arg, uint32_t *id, const char *key,
			 size_t key_len)
{
	atomic_int *calls = arg;

	atomic_fetch_add(calls, 1);
	return fnv(key, key_len) % 100000 + 10;
}

/* Steady eviction from a cache of 2,000 objects does not ask about all
 * 2,000 for every insert: a bounded sample per eviction. */
static void test_evict_amortized(void)
{
	atomic_int calls = 0;
	char *dir = mktmp(), key[32];
	struct cache *c = open_cache(dir, 2000 * 4 * KIB, nu_count, &calls);
	struct cache_stats st;
	unsigned seed = 11;
	int bad = 0;

	for (int i = 0; i < 2400; i++) {
		snprintf(key, sizeof(key), "n%d", i);
		/* Incoming objects are needed soonest: always admitted. */
		bad += put_obj(c, key, "e", 4 * KIB, 0, 1, &seed) != 0;
	}
	cache_get_stats(c, &st);
	CHECK(bad == 0);
	CHECK(st.evictions == 400 && st.objects == 2000);
	/* Per eviction: one sample, not the whole cache. */
	CHECK(atomic_load(&calls) < 20000);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* Begins a put of @key with its bytes (all but the last @short_by). */
static struct cache_put *begin_filled(struct cache *c, const char *key,
				      size_t size, size_t short_by)
{
	struct cache_put *p = NULL;
	unsigned char *buf = malloc(size);

	fill(buf, size, key, "e");
	if (cache_put_begin(c, key, strlen(key), "e", size, 0, CACHE_NO_ID,
			    &p) == 0)
		CHECK(cache_put_write(p, 0, buf, size - short_by) == 0);
	free(buf);
	return p;
}

/* Many puts, one index transaction: each is found, after a restart too
 * (checksums checked); a duplicate in the batch is one object; an
 * incomplete put fails alone. */
static void test_commit_many(void)
{
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 16 * MIB, NULL, NULL);
	struct cache_put *ps[5];
	struct cache_stats st;
	int rcs[5];

	ps[0] = begin_filled(c, "b0", 1000, 0);	     /* inline */
	ps[1] = begin_filled(c, "b1", 300 * KIB, 0); /* segment */
	ps[2] = begin_filled(c, "b2", 70 * KIB, 0);
	ps[3] = begin_filled(c, "b1", 300 * KIB, 0); /* same object */
	ps[4] = begin_filled(c, "b3", 5000, 10);     /* not all written */
	for (int i = 0; i < 5; i++)
		CHECK(ps[i] != NULL);
	CHECK(cache_put_commit_many(ps, 5, rcs) == 0);
	CHECK(rcs[0] == 0 && rcs[1] == 0 && rcs[2] == 0 && rcs[3] == 0);
	CHECK(rcs[4] == -EINVAL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 3);
	CHECK(st.bytes == 1000 + 370 * KIB);
	CHECK(check_obj(c, "b0", "e", 1000) == 0);
	CHECK(check_obj(c, "b1", "e", 300 * KIB) == 0);
	CHECK(check_obj(c, "b2", "e", 70 * KIB) == 0);
	CHECK(check_obj(c, "b3", "e", 5000) == -ENODATA);
	cache_close(c);

	c = open_cache(dir, 16 * MIB, NULL, NULL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 3);
	CHECK(check_obj(c, "b0", "e", 1000) == 0);
	CHECK(check_obj(c, "b1", "e", 300 * KIB) == 0);
	CHECK(check_obj(c, "b2", "e", 70 * KIB) == 0);
	CHECK(cache_put_commit_many(ps, 0, rcs) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* An eviction step asks about a bounded sample, however large the cache:
 * 100 inserts into a full cache of 20,000 objects ask the callback far
 * fewer times than there are objects (a full scan asked 20,000). */
static void test_evict_step_bounded(void)
{
	enum { N = 20000, BATCH = 64 };
	atomic_int calls = 0;
	char *dir = mktmp(), key[32];
	struct cache *c =
	    open_cache(dir, (uint64_t)N * 4 * KIB, nu_count, &calls);
	struct cache_put *ps[BATCH];
	struct cache_stats st;
	int rcs[BATCH], bad = 0;
	unsigned seed = 12;

	for (int i = 0; i < N; i += BATCH) {
		int n = 0;

		for (; n < BATCH && i + n < N; n++) {
			snprintf(key, sizeof(key), "f%d", i + n);
			ps[n] = begin_filled(c, key, 4 * KIB, 0);
		}
		CHECK(cache_put_commit_many(ps, (size_t)n, rcs) == 0);
		for (int k = 0; k < n; k++)
			bad += rcs[k] != 0;
	}
	CHECK(bad == 0);
	CHECK(atomic_load(&calls) == 0); /* it all fit */
	for (int i = 0; i < 100; i++) {
		snprintf(key, sizeof(key), "g%d", i);
		bad += put_obj(c, key, "e", 4 * KIB, 0, 1, &seed) != 0;
	}
	cache_get_stats(c, &st);
	CHECK(bad == 0);
	CHECK(st.evictions == 100 && st.objects == N);
	CHECK(atomic_load(&calls) < 100 * 64);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* The next-use callback is asked by the id an object was put with; an
 * entry of an earlier session is resolved from its key once, and asked by
 * id from then on. */
struct nu_ids {
	atomic_int resolves[2000];
	atomic_int by_id, wrong;
};

static uint64_t nu_ids(void *arg, uint32_t *id, const char *key, size_t key_len)
{
	struct nu_ids *t = arg;
	uint32_t want = key[0] == 'm' ? 1000 : 0, n = 0;

	/* The key is not NUL-terminated. */
	for (size_t i = 1; i < key_len; i++)
		n = n * 10 + (uint32_t)(key[i] - '0');
	want += n;

	if (*id == CACHE_NO_ID) {
		atomic_fetch_add(&t->resolves[want], 1);
		*id = want;
	} else {
		atomic_fetch_add(&t->by_id, 1);
		if (*id != want)
			atomic_fetch_add(&t->wrong, 1);
	}
	return want;
}

static void test_evict_ids(void)
{
	static struct nu_ids t;
	char *dir = mktmp(), key[32];
	struct cache *c = open_cache(dir, 1500 * 4 * KIB, NULL, NULL);
	unsigned seed = 5;
	int bad = 0, twice = 0, m_resolved = 0, n_resolved = 0;

	/* Static for its size; the test runs once per mode. */
	for (int i = 0; i < 2000; i++)
		atomic_store(&t.resolves[i], 0);
	atomic_store(&t.by_id, 0);
	atomic_store(&t.wrong, 0);
	for (uint32_t i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "n%u", i);
		bad += put_obj_id(c, key, "e", 4 * KIB, 0, i, 1, &seed) != 0;
	}
	cache_close(c);
	/* A new session: the entries' ids are forgotten. */
	c = open_cache(dir, 1500 * 4 * KIB, nu_ids, &t);
	for (uint32_t i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "m%u", i);
		bad += put_obj_id(c, key, "e", 4 * KIB, 0, 1000 + i, 1,
				  &seed) != 0;
	}
	CHECK(bad == 0);
	for (int i = 0; i < 2000; i++) {
		int r = atomic_load(&t.resolves[i]);

		twice += r > 1;
		if (i < 1000)
			n_resolved += r;
		else
			m_resolved += r;
	}
	CHECK(n_resolved > 0);	/* old entries were asked about */
	CHECK(twice == 0);	/* ... each resolved once at most */
	CHECK(m_resolved == 0); /* what was put with an id never is */
	CHECK(atomic_load(&t.by_id) > 0 && atomic_load(&t.wrong) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static void test_lru(void)
{
	char *dir = mktmp();
	struct cache *c = open_cache(dir, 3 * 64 * KIB + 16 * KIB, NULL, NULL);
	size_t sz = 64 * KIB;
	struct cache_obj o;
	unsigned seed = 7;

	CHECK(put_obj(c, "A", "e", sz, CACHE_NEVER, 1, &seed) == 0);
	CHECK(put_obj(c, "B", "e", sz, CACHE_NEVER, 1, &seed) == 0);
	CHECK(put_obj(c, "C", "e", 10 * KIB, CACHE_NEVER, 1, &seed) == 0);
	CHECK(put_obj(c, "D", "e", sz, CACHE_NEVER, 1, &seed) == 0);
	CHECK(cache_lookup(c, "A", 1, "e", sz, &o) == 0); /* A is used again */
	/* The prefetcher's check is not a use: B stays the oldest. */
	CHECK(cache_contains(c, "B", 1, "e", sz));
	/* Least recently used first: B; nothing more than needed. */
	CHECK(put_obj(c, "E", "e", sz, CACHE_NEVER, 1, &seed) == 0);
	CHECK(cache_lookup(c, "B", 1, "e", sz, &o) == -ENODATA);
	CHECK(check_obj(c, "C", "e", 10 * KIB) == 0); /* C used again */
	/* Now D is the least recently used: it goes, C stays. */
	CHECK(put_obj(c, "F", "e", sz, CACHE_NEVER, 1, &seed) == 0);
	CHECK(cache_lookup(c, "D", 1, "e", sz, &o) == -ENODATA);
	CHECK(check_obj(c, "A", "e", sz) == 0);
	CHECK(check_obj(c, "C", "e", 10 * KIB) == 0);
	CHECK(check_obj(c, "E", "e", sz) == 0);
	CHECK(check_obj(c, "F", "e", sz) == 0);
	cache_close(c);

	/* Across a restart the order of insertion is the LRU order. */
	c = open_cache(dir, 3 * 64 * KIB + 16 * KIB, NULL, NULL);
	CHECK(put_obj(c, "G", "e", sz, CACHE_NEVER, 1, &seed) == 0);
	CHECK(check_obj(c, "G", "e", sz) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

static void test_dir_rules(void)
{
	char *dir = mktmp(), sub[512], err[256];
	struct cache_config cfg = {.dir = dir, .capacity = MIB};
	struct cache *c = open_cache(dir, MIB, NULL, NULL), *c2 = NULL;
	struct stat st;

	CHECK(cache_open(&cfg, &c2, err, sizeof(err)) == -EBUSY);
	CHECK(c2 == NULL && strstr(err, "in use") != NULL);
	cache_close(c);
	cache_close(NULL);

	/* Created 0700 with its parents; files 0600. */
	snprintf(sub, sizeof(sub), "%s/x/y/cache", dir);
	cfg.dir = sub;
	CHECK(cache_open(&cfg, &c, err, sizeof(err)) == 0);
	cache_close(c);
	CHECK(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0700);
	snprintf(sub, sizeof(sub), "%s/x/y/cache/index.mdb", dir);
	CHECK(stat(sub, &st) == 0 && (st.st_mode & 0777) == 0600);

	cfg.capacity = 0;
	CHECK(cache_open(&cfg, &c, err, sizeof(err)) == -EINVAL);
	cfg.capacity = MIB;

	if (geteuid() == 0) {
		snprintf(sub, sizeof(sub), "%s/theirs", dir);
		CHECK(mkdir(sub, 0700) == 0 && chown(sub, 12345, 12345) == 0);
		cfg.dir = sub;
		CHECK(cache_open(&cfg, &c, err, sizeof(err)) == -EPERM);
		CHECK(strstr(err, "12345") != NULL);
	} else {
		printf("skip: -EPERM case needs root\n");
	}
	rm_rf(dir);
	free(dir);
}

/* What a cache_meta_read() reader saw, and what it answers. */
struct meta_seen {
	int calls;
	size_t len;
	char head[16];
	int answer;
};

static int meta_look(void *arg, const void *blob, size_t len)
{
	struct meta_seen *seen = arg;

	seen->calls++;
	seen->len = len;
	memcpy(seen->head, blob, len < sizeof(seen->head) ? len : 16);
	return seen->answer;
}

static void test_meta_invalidate_clear(void)
{
	char *dir = mktmp(), seg[512];
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	struct cache_stats st;
	struct cache_obj o;
	unsigned seed = 8;
	void *blob;
	size_t len;

	CHECK(cache_meta_get(c, "none", &blob, &len) == -ENODATA);
	CHECK(cache_meta_put(c, "m", "one", 3) == 0);
	CHECK(cache_meta_put(c, "m", "second", 6) == 0);
	CHECK(cache_meta_get(c, "m", &blob, &len) == 0);
	CHECK(len == 6 && memcmp(blob, "second", 6) == 0);
	free(blob);
	CHECK(cache_meta_put(c, "empty", NULL, 0) == 0);
	CHECK(cache_meta_get(c, "empty", &blob, &len) == 0 && len == 0);
	free(blob);
	{
		/* Read in place: the same bytes, the reader's answer back. */
		struct meta_seen seen = {0};

		CHECK(cache_meta_read(c, "m", meta_look, &seen) == 0);
		CHECK(seen.calls == 1 && seen.len == 6 &&
		      !memcmp(seen.head, "second", 6));
		seen.answer = -EPROTO;
		CHECK(cache_meta_read(c, "m", meta_look, &seen) == -EPROTO);
		CHECK(cache_meta_read(c, "none", meta_look, &seen) == -ENODATA);
		CHECK(seen.calls == 2);
	}
	{
		/* Names past LMDB's 511-byte keys: two
		 * that differ only at the end stay apart. */
		char a[1200], b[1200];

		memset(a, 'p', sizeof(a) - 1);
		a[sizeof(a) - 1] = '\0';
		memcpy(b, a, sizeof(a));
		b[sizeof(b) - 2] = 'q';
		CHECK(cache_meta_put(c, a, "long a", 6) == 0);
		CHECK(cache_meta_get(c, b, &blob, &len) == -ENODATA);
		CHECK(cache_meta_put(c, b, "long b!", 7) == 0);
		CHECK(cache_meta_get(c, a, &blob, &len) == 0);
		CHECK(len == 6 && memcmp(blob, "long a", 6) == 0);
		free(blob);
		CHECK(cache_meta_get(c, b, &blob, &len) == 0);
		CHECK(len == 7 && memcmp(blob, "long b!", 7) == 0);
		free(blob);
	}

	CHECK(put_obj(c, "k", "\"1\"", 50 * KIB, 0, 1, &seed) == 0);
	CHECK(cache_invalidate(c, "k", 1, "\"2\"") == -ENODATA);
	CHECK(cache_invalidate(c, "k", 1, "\"1\"") == 0);
	CHECK(cache_lookup(c, "k", 1, "\"1\"", 0, &o) == -ENODATA);
	CHECK(cache_invalidate(c, "k", 1, NULL) == -ENODATA);

	/* A new version replaces the old one. */
	CHECK(put_obj(c, "k", "\"1\"", 50 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "k", "\"2\"", 60 * KIB, 0, 1, &seed) == 0);
	CHECK(cache_lookup(c, "k", 1, "\"1\"", 0, &o) == -ENODATA);
	CHECK(check_obj(c, "k", "\"2\"", 60 * KIB) == 0);
	cache_get_stats(c, &st);
	CHECK(st.objects == 1 && st.bytes == 60 * KIB);
	CHECK(cache_invalidate(c, "k", 1, NULL) == 0);

	for (int i = 0; i < 20; i++) {
		char key[16];

		snprintf(key, sizeof(key), "c%d", i);
		CHECK(put_obj(c, key, "e", (size_t)(i + 1) * 3000, 0, 2,
			      &seed) == 0);
	}
	CHECK(cache_clear(c) == 0);
	cache_get_stats(c, &st);
	CHECK(st.objects == 0 && st.bytes == 0);
	CHECK(cache_lookup(c, "c19", 3, "e", 0, &o) == -ENODATA);
	/* Every segment was emptied, so every segment file is gone. */
	CHECK(seg_path(dir, seg, sizeof(seg)) == 0);
	CHECK(put_obj(c, "after", "e", 30 * KIB, 0, 1, &seed) == 0);
	cache_close(c);
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	cache_get_stats(c, &st);
	CHECK(st.objects == 1);
	CHECK(check_obj(c, "after", "e", 30 * KIB) == 0);
	CHECK(cache_meta_get(c, "m", &blob, &len) == 0); /* meta stays */
	free(blob);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* ---- threads ---- */

#define MT_THREADS 8
#define MT_ITERS   400
#define MT_KEYS	   120

struct mt_ctx {
	struct cache *c;
	atomic_int unexpected;
	atomic_int reads_ok;
	int id;
};

static size_t mt_size(int k)
{
	/* A mix of inline and segment objects, one of them 2 MiB. */
	return k == 7	    ? 2 * MIB
	       : k % 4 == 0 ? 700 + (size_t)k * 37
			    : 20 * KIB + (size_t)k * 1531;
}

static uint64_t mt_next_use(void *arg, uint32_t *id, const char *key,
			    size_t key_len)
{
	uint64_t h = fnv(key, key_len);

	(void)arg;
	return h % 3 == 0 ? CACHE_NEVER : h % 1000;
}

static void *mt_worker(void *arg)
{
	struct mt_ctx *x = arg;
	unsigned seed = 1000u + (unsigned)x->id;
	char key[32];

	for (int i = 0; i < MT_ITERS; i++) {
		int k = (int)(rand_r(&seed) % MT_KEYS), rc;
		size_t size = mt_size(k);

		snprintf(key, sizeof(key), "mt/%d", k);
		if (rand_r(&seed) % 50 == 0) {
			rc = cache_invalidate(x->c, key, strlen(key), NULL);
			if (rc && rc != -ENODATA)
				atomic_fetch_add(&x->unexpected, 1);
			continue;
		}
		rc = check_obj(x->c, key, "e", size);
		if (rc == 0) {
			atomic_fetch_add(&x->reads_ok, 1);
			continue;
		}
		if (rc != -ENODATA) {
			fprintf(stderr, "thread %d: %s: %d\n", x->id, key, rc);
			atomic_fetch_add(&x->unexpected, 1);
			continue;
		}
		rc = put_obj(x->c, key, "e", size,
			     mt_next_use(NULL, &(uint32_t){CACHE_NO_ID}, key,
					 strlen(key)),
			     1 + (int)(rand_r(&seed) % 4), &seed);
		if (rc && rc != -EEXIST && rc != -ENOSPC) {
			fprintf(stderr, "thread %d: put %s: %d\n", x->id, key,
				rc);
			atomic_fetch_add(&x->unexpected, 1);
		}
	}
	return NULL;
}

static void test_threads(void)
{
	char *dir = mktmp();
	/* Room for about a third of the keys: constant eviction. */
	struct cache *c = open_cache(dir, 3 * MIB, mt_next_use, NULL);
	struct mt_ctx ctx[MT_THREADS];
	pthread_t th[MT_THREADS];
	struct cache_stats st;
	int bad = 0, ok = 0;

	for (int i = 0; i < MT_THREADS; i++) {
		ctx[i] = (struct mt_ctx){.c = c, .id = i};
		CHECK(pthread_create(&th[i], NULL, mt_worker, &ctx[i]) == 0);
	}
	for (int i = 0; i < MT_THREADS; i++) {
		pthread_join(th[i], NULL);
		bad += atomic_load(&ctx[i].unexpected);
		ok += atomic_load(&ctx[i].reads_ok);
	}
	CHECK(bad == 0);
	CHECK(ok > 0);
	cache_get_stats(c, &st);
	CHECK(st.bytes <= st.capacity);
	CHECK(st.corrupt == 0 && st.write_errors == 0);
	CHECK(st.evictions > 0);
	cache_close(c);

	/* What survived reads back intact after a reopen. */
	c = open_cache(dir, 3 * MIB, mt_next_use, NULL);
	for (int k = 0; k < MT_KEYS; k++) {
		char key[32];
		int rc;

		snprintf(key, sizeof(key), "mt/%d", k);
		rc = check_obj(c, key, "e", mt_size(k));
		bad += rc != 0 && rc != -ENODATA;
	}
	CHECK(bad == 0);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* ---- kill -9 ---- */

#define CRASH_ROUNDS 6
#define CRASH_KEYS   400

static size_t crash_size(int k)
{
	return k % 3 == 0 ? 100 + (size_t)k * 41 : 17 * KIB + (size_t)k * 997;
}

/* The child: puts (and sometimes invalidates) until it is killed. */
static void crash_child(const char *dir, int round)
{
	struct cache_config cfg = {
	    .dir = dir, .capacity = 24 * MIB, .file_per_object = fpo};
	unsigned seed = (unsigned)getpid();
	struct cache *c;
	char err[256], key[32];

	if (cache_open(&cfg, &c, err, sizeof(err)))
		_exit(3);
	for (int i = 0; i < 1000000; i++) {
		int k = (int)(rand_r(&seed) % CRASH_KEYS);

		snprintf(key, sizeof(key), "crash/%d", k);
		if (i % 17 == 0)
			cache_invalidate(c, key, strlen(key), NULL);
		else
			put_obj(c, key, round % 2 ? "\"odd\"" : "\"even\"",
				crash_size(k), CACHE_NEVER,
				1 + (int)(rand_r(&seed) % 6), &seed);
	}
	cache_close(c);
	_exit(0);
}

static void test_crash(void)
{
	char *dir = mktmp();
	unsigned seed = (unsigned)time(NULL);
	int found_total = 0, bad = 0;

	for (int round = 0; round < CRASH_ROUNDS; round++) {
		struct cache_stats st;
		struct cache *c;
		int status = 0, found = 0, own = 0, files;
		char path[512];
		pid_t pid;

		fflush(NULL);
		pid = fork();
		if (pid == 0)
			crash_child(dir, round);
		CHECK(pid > 0);
		usleep(20000 + rand_r(&seed) % 300000);
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

		c = open_cache(dir, 24 * MIB, NULL, NULL);
		if (!c)
			break;
		files = seg_path(dir, path, sizeof(path));
		for (int k = 0; k < CRASH_KEYS; k++) {
			char key[32];
			int rc1, rc2;

			snprintf(key, sizeof(key), "crash/%d", k);
			rc1 = check_obj(c, key, "\"even\"", crash_size(k));
			rc2 = check_obj(c, key, "\"odd\"", crash_size(k));
			found += (rc1 == 0) + (rc2 == 0);
			own += crash_size(k) > 16 * KIB && (!rc1 || !rc2);
			bad += (rc1 != 0 && rc1 != -ENODATA) ||
			       (rc2 != 0 && rc2 != -ENODATA);
			/* One version per key, at most. */
			bad += rc1 == 0 && rc2 == 0;
		}
		cache_get_stats(c, &st);
		CHECK(st.corrupt == 0);
		CHECK(st.bytes <= 24 * MIB);
		/* A file of its own left by a put the kill cut short has no
		 * record, and the open removed it: one file per object. */
		if (fpo)
			CHECKF(files == own, "%d files, %d objects", files,
			       own);
		found_total += found;
		cache_close(c);
	}
	CHECK(bad == 0);
	CHECK(found_total > 0);
	rm_rf(dir);
	free(dir);
}

/* ---- without io_uring ---- */

/* Makes io_uring_setup fail with ENOSYS, as in containers that forbid it. */
static int deny_io_uring(void)
{
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		     offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = 4, .filter = f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* The same round trips through pread/pwrite, in a child (the filter
 * cannot be lifted). Its exit status carries the result. */
static void test_no_uring(void)
{
	char *dir = mktmp();
	int status = 0, failed_before = check_failed;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct cache *c;
		unsigned seed = 12;

		if (deny_io_uring())
			_exit(77);
		c = open_cache(dir, 64 * MIB, NULL, NULL);
		CHECK(put_obj(c, "s", "e", 3000, 0, 2, &seed) == 0);
		CHECK(put_obj(c, "m", "e", 3 * MIB + 7, 0, 5, &seed) == 0);
		CHECK(check_obj(c, "m", "e", 3 * MIB + 7) == 0);
		cache_close(c);
		c = open_cache(dir, 64 * MIB, NULL, NULL);
		CHECK(check_obj(c, "s", "e", 3000) == 0);
		CHECK(check_obj(c, "m", "e", 3 * MIB + 7) == 0);
		cache_close(c);
		_exit(check_failed > failed_before);
	}
	CHECK(pid > 0);
	waitpid(pid, &status, 0);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		printf("skip: cannot install a seccomp filter\n");
	else
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	rm_rf(dir);
	free(dir);
}

/* ---- disk full ---- */

static void test_disk_full(void)
{
	char *dir = mktmp();
	struct cache_stats st;
	struct cache *c;
	unsigned seed = 9;
	int rc = 0, n = 0;

	if (geteuid() != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=4m,mode=0700") != 0) {
		printf("skip: disk full case needs root and tmpfs\n");
		rm_rf(dir);
		free(dir);
		return;
	}
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	if (c) {
		char key[32];

		for (n = 0; n < 64; n++) {
			snprintf(key, sizeof(key), "full/%d", n);
			rc = put_obj(c, key, "e", 256 * KIB, CACHE_NEVER, 4,
				     &seed);
			if (rc)
				break;
		}
		CHECK(rc == -ENOSPC);
		CHECK(n > 4);
		cache_get_stats(c, &st);
		CHECK(st.write_errors >= 1);
		CHECK(st.capacity < 64 * MIB && st.capacity <= st.bytes);
		CHECK(check_obj(c, "full/0", "e", 256 * KIB) == 0);
		CHECK(check_obj(c, "full/1", "e", 256 * KIB) == 0);
		/* A later put makes room in what is left instead. */
		rc = put_obj(c, "later", "e", 256 * KIB, CACHE_NEVER, 1, &seed);
		CHECK(rc == 0 || rc == -ENOSPC);
		cache_get_stats(c, &st);
		CHECK(st.corrupt == 0);
		cache_close(c);
	}
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	if (c) {
		rc = check_obj(c, "full/1", "e", 256 * KIB);
		CHECK(rc == 0 || rc == -ENODATA);
		cache_close(c);
	}
	CHECK(umount2(dir, MNT_DETACH) == 0);
	rm_rf(dir);
	free(dir);
}

/* Copies what a reference names into the buffer of @arg. */
struct ref_sink {
	unsigned char *buf;
	int calls;
	bool by_fd;
};

static ssize_t ref_copy(void *arg, const struct cache_ref *ref)
{
	struct ref_sink *rs = arg;

	rs->calls++;
	rs->by_fd = !ref->mem;
	if (ref->mem)
		memcpy(rs->buf, ref->mem, ref->len);
	else if (pread(ref->fd, rs->buf, ref->len, (off_t)ref->fd_off) !=
		 (ssize_t)ref->len)
		return -EIO;
	return (ssize_t)ref->len;
}

/* Reads by reference: both kinds of blob, a miss, and a corrupted blob
 * that is verified first and never handed out. */
static void test_read_ref(void)
{
	char *dir = mktmp(), seg[512];
	struct cache *c = open_cache(dir, 64 * MIB, NULL, NULL);
	unsigned char *want = malloc(200 * KIB), *got = malloc(200 * KIB);
	struct ref_sink rs = {.buf = got};
	struct cache_stats st;
	unsigned seed = 9;

	CHECK(put_obj(c, "big", "e", 200 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "small", "e", 5000, 0, 1, &seed) == 0);
	fill(want, 200 * KIB, "big", "e");
	CHECK(cache_read_ref(c, "big", 3, "e", 200 * KIB, 64 * KIB, 100 * KIB,
			     ref_copy, &rs) == 64 * KIB);
	CHECK(rs.calls == 1 && rs.by_fd);
	CHECK(memcmp(got, want + 100 * KIB, 64 * KIB) == 0);
	/* Cut at the end of the object. */
	CHECK(cache_read_ref(c, "big", 3, "e", 200 * KIB, 64 * KIB, 190 * KIB,
			     ref_copy, &rs) == 10 * KIB);
	fill(want, 5000, "small", "e");
	CHECK(cache_read_ref(c, "small", 5, "e", 5000, 4096, 1000, ref_copy,
			     &rs) == 4000);
	CHECK(!rs.by_fd && memcmp(got, want + 1000, 4000) == 0);
	/* A miss, and another ETag: -ENODATA, no call, no miss counted. */
	rs.calls = 0;
	CHECK(cache_read_ref(c, "none", 4, "e", 10, 10, 0, ref_copy, &rs) ==
	      -ENODATA);
	CHECK(cache_read_ref(c, "big", 3, "f", 200 * KIB, 10, 0, ref_copy,
			     &rs) == -ENODATA);
	CHECK(rs.calls == 0);
	cache_get_stats(c, &st);
	CHECK(st.hits == 3 && st.misses == 0);
	cache_close(c);

	/* After a restart a flipped byte is caught before any reference. */
	CHECK(seg_path(dir, seg, sizeof(seg)) == 1);
	CHECK(flip_byte(seg, 150 * KIB, 0x10));
	c = open_cache(dir, 64 * MIB, NULL, NULL);
	CHECK(cache_read_ref(c, "big", 3, "e", 200 * KIB, 10, 0, ref_copy,
			     &rs) == -ENODATA);
	CHECK(rs.calls == 0);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 1 && st.objects == 1);
	CHECK(cache_read_ref(c, "small", 5, "e", 5000, 5000, 0, ref_copy,
			     &rs) == 5000);
	CHECK(rs.calls == 1);
	cache_close(c);
	free(want);
	free(got);
	rm_rf(dir);
	free(dir);
}

/* Waits for the checker thread to have hashed @checked entries, or to have
 * found @corrupt: a bound of @bound_ms, not a timing. */
static void wait_checked(struct cache *c, uint64_t checked, uint64_t corrupt,
			 int bound_ms, struct cache_stats *st)
{
	for (int ms = 0; ms < bound_ms; ms += 5) {
		cache_get_stats(c, st);
		if (st->checked >= checked && st->corrupt >= corrupt)
			return;
		usleep(5000);
	}
	cache_get_stats(c, st);
}

/* Readers of one unchecked entry, all at once. */
struct ahead_reader {
	struct cache *c;
	pthread_barrier_t *go;
	uint64_t off;
	ssize_t got;
	bool right;
};

static void *ahead_read(void *arg)
{
	struct ahead_reader *r = arg;
	unsigned char *want = malloc(16 * MIB), *got = malloc(128 * KIB);
	struct ref_sink rs = {.buf = got};

	fill(want, 16 * MIB, "m", "e");
	pthread_barrier_wait(r->go);
	r->got = cache_read_ref(r->c, "m", 1, "e", 16 * MIB, 128 * KIB, r->off,
				ref_copy, &rs);
	r->right = memcmp(got, want + r->off, 128 * KIB) == 0;
	free(want);
	free(got);
	return NULL;
}

/*
 * The first use of an entry in a session hashes it once: after a reopen,
 * cache_contains_ahead() has the checker thread hash a large entry before
 * any read (which then hashes nothing), leaves a small one to its read,
 * and drops a corrupted one before a read could want it; eight readers of
 * an unchecked entry at once hash it once, all getting its bytes.
 */
static void test_check_ahead(void)
{
	char *dir = mktmp(), *dir2 = mktmp(), blob[512];
	struct cache *c = open_cache(dir, 256 * MIB, NULL, NULL);
	unsigned char *want = malloc(3 * MIB), *got = malloc(3 * MIB);
	struct ref_sink rs = {.buf = got};
	struct ahead_reader r[8];
	pthread_t th[8];
	pthread_barrier_t go;
	struct cache_stats st;
	unsigned seed = 3;

	CHECK(put_obj(c, "a", "e", 3 * MIB, 0, 3, &seed) == 0);
	CHECK(put_obj(c, "s", "e", 100 * KIB, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "m", "e", 16 * MIB, 0, 4, &seed) == 0);
	cache_close(c);
	c = open_cache(dir, 256 * MIB, NULL, NULL);
	CHECK(cache_contains_ahead(c, "a", 1, "e", 3 * MIB));
	CHECK(cache_contains_ahead(c, "s", 1, "e", 100 * KIB));
	CHECK(!cache_contains_ahead(c, "a", 1, "f", 3 * MIB));
	wait_checked(c, 1, 0, 10000, &st);
	CHECK(st.checked == 1 && st.checked_ahead == 1 && st.hits == 0);
	CHECK(cache_contains_ahead(c, "a", 1, "e", 3 * MIB)); /* done: none */
	fill(want, 3 * MIB, "a", "e");
	CHECK(cache_read_ref(c, "a", 1, "e", 3 * MIB, 3 * MIB, 0, ref_copy,
			     &rs) == (ssize_t)(3 * MIB));
	CHECK(memcmp(got, want, 3 * MIB) == 0);
	CHECK(cache_read_ref(c, "s", 1, "e", 100 * KIB, 100 * KIB, 0, ref_copy,
			     &rs) == (ssize_t)(100 * KIB));
	cache_get_stats(c, &st);
	CHECKF(st.checked == 2 && st.checked_ahead == 1,
	       "checked %llu, ahead %llu", (unsigned long long)st.checked,
	       (unsigned long long)st.checked_ahead);

	CHECK(pthread_barrier_init(&go, NULL, 8) == 0);
	for (int i = 0; i < 8; i++) {
		r[i] = (struct ahead_reader){
		    .c = c, .go = &go, .off = (uint64_t)i * 2 * MIB};
		CHECK(pthread_create(&th[i], NULL, ahead_read, &r[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK(r[i].got == (ssize_t)(128 * KIB) && r[i].right);
	}
	pthread_barrier_destroy(&go);
	cache_get_stats(c, &st);
	CHECKF(st.checked == 3, "8 readers at once hashed %llu times",
	       (unsigned long long)(st.checked - 2));
	cache_close(c);

	/* A flipped byte in a large blob: the checker drops it. */
	c = open_cache(dir2, 64 * MIB, NULL, NULL);
	CHECK(put_obj(c, "a", "e", 3 * MIB, 0, 1, &seed) == 0);
	cache_close(c);
	CHECK(seg_path(dir2, blob, sizeof(blob)) == 1);
	CHECK(flip_byte(blob, 2 * MIB, 0x01));
	c = open_cache(dir2, 64 * MIB, NULL, NULL);
	CHECK(cache_contains_ahead(c, "a", 1, "e", 3 * MIB));
	wait_checked(c, 1, 1, 10000, &st);
	CHECK(st.corrupt == 1 && st.checked_ahead == 0 && st.objects == 0);
	rs.calls = 0;
	CHECK(cache_read_ref(c, "a", 1, "e", 3 * MIB, 10, 0, ref_copy, &rs) ==
	      -ENODATA);
	CHECK(rs.calls == 0);
	cache_close(c);
	free(want);
	free(got);
	rm_rf(dir);
	rm_rf(dir2);
	free(dir);
	free(dir2);
}

/*
 * Opens the cache @cfg describes with the @n objects @keys of @sizes bytes
 * (ETag "e") put, closed and reopened, so unchecked, then queues each on
 * the checker thread in that order.
 */
static struct cache *open_queued(const struct cache_config *cfg,
				 const char *const *keys, const uint64_t *sizes,
				 int n, unsigned seed)
{
	struct cache *c = open_cfg(cfg);

	for (int i = 0; i < n; i++)
		CHECK(put_obj(c, keys[i], "e", sizes[i], 0,
			      (int)(sizes[i] / (8 * MIB)) + 1, &seed) == 0);
	cache_close(c);
	c = open_cfg(cfg);
	for (int i = 0; i < n; i++)
		CHECK(cache_contains_ahead(c, keys[i], strlen(keys[i]), "e",
					   sizes[i]));
	return c;
}

/* Reads the first bytes of @key (@size bytes) by reference: true when
 * they came. */
static bool read_head(struct cache *c, const char *key, uint64_t size)
{
	unsigned char got[16];
	struct ref_sink rs = {.buf = got};

	return cache_read_ref(c, key, strlen(key), "e", size, sizeof(got), 0,
			      ref_copy, &rs) == (ssize_t)sizeof(got);
}

/*
 * The checker stays within ahead_bytes of the reads: at 4 MiB, of three
 * entries of 3 MiB queued it checks two (the second takes it past the
 * bound) and waits; a read of the first lets it check the third.
 */
static void test_check_ahead_paced(void)
{
	char *dir = mktmp();
	struct cache_config cfg = {.dir = dir,
				   .capacity = 64 * MIB,
				   .file_per_object = fpo,
				   .ahead_bytes = 4 * MIB};
	const char *const keys[] = {"a", "b", "c"};
	const uint64_t sizes[] = {3 * MIB, 3 * MIB, 3 * MIB};
	struct cache_stats st;
	struct cache *c = open_queued(&cfg, keys, sizes, 3, 5);

	wait_checked(c, 2, 0, 10000, &st);
	/* A check of 3 MiB from the page cache takes ~1 ms: 200 ms leave the
	 * thread every chance to go past the bound, were it not held. */
	usleep(200 * 1000);
	cache_get_stats(c, &st);
	CHECKF(st.checked_ahead == 2, "%llu checked ahead past 4 MiB",
	       (unsigned long long)st.checked_ahead);
	CHECK(read_head(c, "a", 3 * MIB));
	wait_checked(c, 3, 0, 10000, &st);
	CHECK(st.checked == 3 && st.checked_ahead == 3);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/*
 * A read that waits for the checker's check of its object counts as its
 * read: at a bound of 4 MiB, a 64 MiB entry checked ahead and read while
 * the checker hashes it leaves the bound free for the next entry (else the
 * checker would wait 10 s for a read that came already).
 */
static void test_check_ahead_waited(void)
{
	char *dir = mktmp();
	struct cache_config cfg = {.dir = dir,
				   .capacity = 128 * MIB,
				   .file_per_object = fpo,
				   .ahead_bytes = 4 * MIB};
	const char *const keys[] = {"m", "a"};
	const uint64_t sizes[] = {64 * MIB, 3 * MIB};
	struct cache_stats st;
	struct cache *c = open_queued(&cfg, keys, sizes, 2, 6);

	/* The thread is into its 64 MiB hash (tens of ms) by then: the read
	 * finds it running and waits for it. */
	usleep(2 * 1000);
	CHECK(read_head(c, "m", 64 * MIB));
	/* 5 s: inside the checker's 10 s wait for reads that never come. */
	wait_checked(c, 2, 0, 5000, &st);
	CHECKF(st.checked == 2, "checked %llu: the waited read was not counted",
	       (unsigned long long)st.checked);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* ---- a file per object (file_per_object) ---- */

/* Opens @dir with file_per_object @own and objects above @inline_max
 * bytes (0: the default) in files. */
static struct cache *open_mode(const char *dir, uint64_t cap, bool own,
			       size_t inline_max)
{
	return open_cfg(&(struct cache_config){
	    .dir = dir,
	    .capacity = cap,
	    .inline_max = inline_max,
	    .file_per_object = own,
	});
}

/* Files of @dir whose names start with @prefix. */
static int count_files(const char *dir, const char *prefix)
{
	struct dirent *d;
	DIR *dp = opendir(dir);
	int n = 0;

	while (dp && (d = readdir(dp)))
		n += strncmp(d->d_name, prefix, strlen(prefix)) == 0;
	if (dp)
		closedir(dp);
	return n;
}

/* The fds this process has open. */
static int count_fds(void)
{
	return count_files("/proc/self/fd", "") - 2; /* . and .. */
}

/* 0 when @fd holds exactly the bytes of @key (@etag) of @size bytes:
 * its size and every byte. */
static int check_fd(int fd, const char *key, const char *etag, size_t size)
{
	unsigned char *want = malloc(size + 1), *got = malloc(size + 1);
	struct stat st;
	int rc = 0;

	fill(want, size, key, etag);
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != size)
		rc = -EFBIG;
	else if (pread(fd, got, size + 1, 0) != (ssize_t)size)
		rc = -EIO;
	else if (memcmp(want, got, size))
		rc = -EBADMSG;
	free(want);
	free(got);
	return rc;
}

/* What cache_open_file() hands out: the object's bytes and size, an fd
 * the caller owns (read-only, close-on-exec); -ENOTSUP for inline and
 * shared objects, -ENODATA for a miss, another ETag or size. */
static void test_open_file(void)
{
	char *dir = mktmp(), *dir2 = mktmp();
	struct cache *c = open_mode(dir, 64 * MIB, true, 0);
	unsigned char *got = malloc(200 * KIB), *want = malloc(200 * KIB);
	struct ref_sink rs = {.buf = got};
	struct cache_stats st;
	unsigned seed = 31;
	int fd, fl;

	CHECK(put_obj(c, "big", "e", 200 * KIB, 0, 3, &seed) == 0);
	CHECK(put_obj(c, "odd", "e", 16 * KIB + 1, 0, 1, &seed) == 0);
	CHECK(put_obj(c, "small", "e", 5000, 0, 1, &seed) == 0);
	CHECK(count_files(dir, "obj-") == 2 && count_files(dir, "seg-") == 0);
	fd = cache_open_file(c, "big", 3, "e", 200 * KIB);
	CHECK(fd >= 0);
	CHECK(check_fd(fd, "big", "e", 200 * KIB) == 0);
	fl = fcntl(fd, F_GETFL);
	CHECK((fl & O_ACCMODE) == O_RDONLY);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	close(fd);
	/* Not a multiple of 4 KiB: no padding after the end. */
	fd = cache_open_file(c, "odd", 3, "e", 16 * KIB + 1);
	CHECK(fd >= 0 && check_fd(fd, "odd", "e", 16 * KIB + 1) == 0);
	close(fd);
	cache_get_stats(c, &st);
	CHECK(st.hits == 2);

	CHECK(cache_open_file(c, "small", 5, "e", 5000) == -ENOTSUP);
	CHECK(cache_open_file(c, "none", 4, "e", 10) == -ENODATA);
	CHECK(cache_open_file(c, "big", 3, "f", 200 * KIB) == -ENODATA);
	CHECK(cache_open_file(c, "big", 3, "e", 200 * KIB - 1) == -ENODATA);
	cache_get_stats(c, &st);
	CHECK(st.hits == 2 && st.misses == 0);

	/* The READ path serves the same files, by copy and by reference. */
	CHECK(check_obj(c, "big", "e", 200 * KIB) == 0);
	fill(want, 200 * KIB, "big", "e");
	CHECK(cache_read_ref(c, "big", 3, "e", 200 * KIB, 64 * KIB, 100 * KIB,
			     ref_copy, &rs) == 64 * KIB);
	CHECK(rs.by_fd && memcmp(got, want + 100 * KIB, 64 * KIB) == 0);
	cache_close(c);

	/* After a restart: verified at the first open, then served. */
	c = open_mode(dir, 64 * MIB, true, 0);
	fd = cache_open_file(c, "big", 3, "e", 200 * KIB);
	CHECK(fd >= 0 && check_fd(fd, "big", "e", 200 * KIB) == 0);
	close(fd);
	cache_close(c);

	/* A segment is shared: never handed out. */
	c = open_mode(dir2, 64 * MIB, false, 0);
	CHECK(put_obj(c, "big", "e", 200 * KIB, 0, 1, &seed) == 0);
	CHECK(cache_open_file(c, "big", 3, "e", 200 * KIB) == -ENOTSUP);
	CHECK(count_files(dir2, "obj-") == 0);
	cache_close(c);
	free(got);
	free(want);
	rm_rf(dir);
	rm_rf(dir2);
	free(dir);
	free(dir2);
}

/* Eviction, invalidation, a new version and an aborted put unlink the
 * file; an fd handed out before keeps reading the old bytes. */
static void test_open_file_evict(void)
{
	char *dir = mktmp();
	/* Room for two 300 KiB objects, not three. */
	struct cache *c = open_mode(dir, 700 * KIB, true, 0);
	struct cache_stats st;
	struct cache_put *p;
	unsigned char buf[4096] = {0};
	unsigned seed = 32;
	int fd, fd2;

	CHECK(put_obj(c, "a", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	fd = cache_open_file(c, "a", 1, "e", 300 * KIB);
	CHECK(fd >= 0);
	CHECK(put_obj(c, "b", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	CHECK(put_obj(c, "c", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	cache_get_stats(c, &st);
	CHECK(st.evictions == 1 && st.objects == 2);
	CHECK(cache_open_file(c, "a", 1, "e", 300 * KIB) == -ENODATA);
	CHECK(count_files(dir, "obj-") == 2);
	CHECK(check_fd(fd, "a", "e", 300 * KIB) == 0);
	close(fd);

	fd = cache_open_file(c, "b", 1, "e", 300 * KIB);
	CHECK(fd >= 0);
	CHECK(cache_invalidate(c, "b", 1, NULL) == 0);
	CHECK(count_files(dir, "obj-") == 1);
	CHECK(check_fd(fd, "b", "e", 300 * KIB) == 0);
	close(fd);

	/* A new version: the old one's file goes, the new one's stays. */
	fd = cache_open_file(c, "c", 1, "e", 300 * KIB);
	CHECK(put_obj(c, "c", "e2", 200 * KIB, CACHE_NEVER, 1, &seed) == 0);
	CHECK(count_files(dir, "obj-") == 1);
	fd2 = cache_open_file(c, "c", 1, "e2", 200 * KIB);
	CHECK(fd >= 0 && check_fd(fd, "c", "e", 300 * KIB) == 0);
	CHECK(fd2 >= 0 && check_fd(fd2, "c", "e2", 200 * KIB) == 0);
	close(fd);
	close(fd2);

	/* Neither an abort nor a put found cached already leaves a file. */
	CHECK(cache_put_begin(c, "d", 1, "e", 100 * KIB, 0, CACHE_NO_ID, &p) ==
	      0);
	CHECK(cache_put_write(p, 0, buf, sizeof(buf)) == 0);
	CHECK(count_files(dir, "obj-") == 2);
	cache_put_abort(p);
	CHECK(count_files(dir, "obj-") == 1);
	{
		struct cache_put *ps[2];
		unsigned char *b = malloc(100 * KIB);
		int rcs[2];

		fill(b, 100 * KIB, "d", "e");
		for (int i = 0; i < 2; i++) {
			CHECK(cache_put_begin(c, "d", 1, "e", 100 * KIB, 0,
					      CACHE_NO_ID, &ps[i]) == 0);
			CHECK(cache_put_write(ps[i], 0, b, 100 * KIB) == 0);
		}
		CHECK(cache_put_commit_many(ps, 2, rcs) == 0);
		free(b);
	}
	CHECK(count_files(dir, "obj-") == 2);
	CHECK(check_obj(c, "d", "e", 100 * KIB) == 0);
	CHECK(cache_clear(c) == 0);
	CHECK(count_files(dir, "obj-") == 0);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 0 && st.write_errors == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* The names of @dir's files of their own, sorted: in the order they were
 * created, since ids only grow. Returns how many (at most @max). */
static int own_files(const char *dir, char names[][32], int max)
{
	struct dirent *d;
	DIR *dp = opendir(dir);
	int n = 0;

	while (dp && (d = readdir(dp)))
		if (!strncmp(d->d_name, "obj-", 4) && n < max)
			snprintf(names[n++], 32, "%.31s", d->d_name);
	if (dp)
		closedir(dp);
	qsort(names, (size_t)n, 32,
	      (int (*)(const void *, const void *))strcmp);
	return n;
}

static const char *const damaged_keys[] = {"flip", "cut", "long", "gone",
					   "good"};

/*
 * Fills @dir with five objects in files of their own and damages four,
 * as a disk or a hand might: a flipped byte, a file cut short, a byte
 * after the end, a file gone. Opens it again.
 */
static struct cache *open_damaged(const char *dir)
{
	struct cache *c = open_mode(dir, 64 * MIB, true, 0);
	char path[600], names[8][32];
	unsigned seed = 33;

	for (int k = 0; k < 5; k++)
		CHECK(put_obj(c, damaged_keys[k], "e", 100 * KIB, 0, 1,
			      &seed) == 0);
	cache_close(c);
	CHECK(own_files(dir, names, 8) == 5);
	snprintf(path, sizeof(path), "%s/%s", dir, names[0]);
	CHECK(flip_byte(path, 99 * KIB, 0x20));
	snprintf(path, sizeof(path), "%s/%s", dir, names[1]);
	CHECK(truncate(path, 60 * KIB) == 0);
	snprintf(path, sizeof(path), "%s/%s", dir, names[2]);
	CHECK(truncate(path, 100 * KIB + 1) == 0);
	snprintf(path, sizeof(path), "%s/%s", dir, names[3]);
	CHECK(unlink(path) == 0);
	return open_mode(dir, 64 * MIB, true, 0);
}

/*
 * A file handed out with a hold (passthrough's backing
 * file) is not evicted while held, and once its entry leaves the cache
 * anyway (a new version, an invalidation) its blocks, still on disk, take
 * capacity until the release: the cache's disk stays within its capacity.
 */
static void test_open_file_held(void)
{
	char *dir = mktmp();
	/* Room for two 300 KiB objects, not three. */
	struct cache *c = open_mode(dir, 700 * KIB, true, 0);
	struct cache_stats st;
	unsigned seed = 33;
	uint64_t hold = 0;
	int fd;

	if (!c)
		goto out;
	CHECK(put_obj(c, "a", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	fd = cache_open_file_held(c, "a", 1, "e", 300 * KIB, &hold);
	CHECK(fd >= 0);
	/* a is the least recently used but held: b goes for c. */
	CHECK(put_obj(c, "b", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	CHECK(check_obj(c, "b", "e", 300 * KIB) == 0);
	CHECK(put_obj(c, "c", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	CHECK(check_obj(c, "a", "e", 300 * KIB) == 0);
	CHECK(check_obj(c, "b", "e", 300 * KIB) == -ENODATA);
	cache_get_stats(c, &st);
	CHECK(st.bytes == 600 * KIB && st.held_bytes == 0);

	/* a leaves the cache while held: its 300 KiB stay on disk and
	 * count, so d takes c's place instead of joining it. */
	CHECK(cache_invalidate(c, "a", 1, NULL) == 0);
	cache_get_stats(c, &st);
	CHECK(st.bytes == 300 * KIB && st.held_bytes == 300 * KIB);
	CHECK(put_obj(c, "d", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	cache_get_stats(c, &st);
	CHECK(st.bytes == 300 * KIB && st.held_bytes == 300 * KIB);
	CHECK(st.bytes + st.held_bytes <= 700 * KIB);
	CHECK(check_fd(fd, "a", "e", 300 * KIB) == 0);

	/* Released: the room is the cache's again. */
	close(fd);
	cache_release_file(c, hold);
	cache_get_stats(c, &st);
	CHECK(st.held_bytes == 0);
	CHECK(put_obj(c, "e", "e", 300 * KIB, CACHE_NEVER, 1, &seed) == 0);
	cache_get_stats(c, &st);
	CHECK(st.bytes == 600 * KIB && st.objects == 2);
	/* A hold released while its entry stays: the entry may go again
	 * (an invariants build checks its mark is cleared). */
	fd = cache_open_file_held(c, "d", 1, "e", 300 * KIB, &hold);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	cache_release_file(c, hold);
	cache_close(c);
out:
	rm_rf(dir);
	free(dir);
}

/*
 * Evicted files that readers hold open keep their blocks
 * (passthrough holds its backing files so); the disk fills, and the
 * capacity drops to what is cached. Once the readers close them, the disk
 * has room again: the capacity comes back to the configured size, and the
 * cache fills to it, instead of staying small for the rest of the mount.
 */
static void test_disk_full_recovers(void)
{
	enum { OBJ = 256 * KIB, MAX = 64 };
	char *dir = mktmp(), key[32];
	int fds[MAX], n, rc = 0;
	struct cache_stats st;
	struct cache *c;
	unsigned seed = 29;
	uint64_t errors;

	if (geteuid() != 0 ||
	    mount("tmpfs", dir, "tmpfs", 0, "size=5m,mode=0700") != 0) {
		printf("skip: disk full case needs root and tmpfs\n");
		rm_rf(dir);
		free(dir);
		return;
	}
	/* 3 MiB of a 5 MiB disk; every object read and held open. */
	c = open_mode(dir, 3 * MIB, true, 0);
	for (n = 0; c && n < MAX; n++) {
		snprintf(key, sizeof(key), "held/%d", n);
		rc = put_obj(c, key, "e", OBJ, CACHE_NEVER, 2, &seed);
		if (rc)
			break;
		fds[n] = cache_open_file(c, key, strlen(key), "e", OBJ);
		CHECK(fds[n] >= 0);
	}
	CHECK(rc == -ENOSPC && n > 12);
	if (c) {
		cache_get_stats(c, &st);
		CHECK(st.capacity < 3 * MIB);
	}
	/* The readers are done: their files' blocks are freed. */
	while (n > 0)
		if (fds[--n] >= 0)
			close(fds[n]);
	if (c) {
		errors = st.write_errors;
		CHECK(put_obj(c, "after", "e", OBJ, CACHE_NEVER, 2, &seed) ==
		      0);
		cache_get_stats(c, &st);
		CHECK(st.capacity == 3 * MIB);
		for (n = 0; n < 12; n++) {
			snprintf(key, sizeof(key), "again/%d", n);
			CHECK(put_obj(c, key, "e", OBJ, CACHE_NEVER, 2,
				      &seed) == 0);
		}
		cache_get_stats(c, &st);
		CHECK(st.bytes == 3 * MIB && st.write_errors == errors);
		cache_close(c);
	}
	CHECK(umount2(dir, MNT_DETACH) == 0);
	rm_rf(dir);
	free(dir);
}

/* Each damaged file is dropped at cache_open_file(), never handed out;
 * the READ path and verify drop them too. */
static void test_open_file_corrupt(void)
{
	char *dir = mktmp();
	struct cache *c = open_damaged(dir);
	struct cache_stats st;
	int fd, counts[2] = {0, 0};

	cache_get_stats(c, &st);
	/* A file gone is known at open, without a stat of every file. */
	CHECK(st.objects == 4);
	for (int k = 0; k < 4; k++)
		CHECKF(cache_open_file(c, damaged_keys[k],
				       strlen(damaged_keys[k]), "e",
				       100 * KIB) == -ENODATA,
		       "%s", damaged_keys[k]);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 3 && st.objects == 1 && st.hits == 0);
	/* Dropped files are removed with their entries. */
	CHECK(count_files(dir, "obj-") == 1);
	fd = cache_open_file(c, "good", 4, "e", 100 * KIB);
	CHECK(fd >= 0 && check_fd(fd, "good", "e", 100 * KIB) == 0);
	close(fd);
	/* Checked already, and then lengthened: the size is looked at on
	 * every open, for the kernel reads to the end. */
	{
		char names[2][32], path[600];

		CHECK(own_files(dir, names, 2) == 1);
		snprintf(path, sizeof(path), "%s/%s", dir, names[0]);
		CHECK(truncate(path, 100 * KIB + 4096) == 0);
	}
	CHECK(cache_open_file(c, "good", 4, "e", 100 * KIB) == -ENODATA);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 4 && st.objects == 0);
	cache_close(c);
	rm_rf(dir);
	CHECK(mkdir(dir, 0700) == 0);

	c = open_damaged(dir);
	for (int k = 0; k < 3; k++)
		CHECKF(check_obj(c, damaged_keys[k], "e", 100 * KIB) ==
			   -ENODATA,
		       "%s", damaged_keys[k]);
	cache_close(c);
	rm_rf(dir);
	CHECK(mkdir(dir, 0700) == 0);

	c = open_damaged(dir);
	CHECK(cache_verify(c, verify_cb, counts) == 0);
	CHECK(counts[0] == 3 && counts[1] == 1);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 3 && st.objects == 1);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* kill -9 between a file's bytes and its index record leaves a file no
 * record names: the next open removes it, and keeps the others. */
static void test_own_orphans(void)
{
	char *dir = mktmp(), path[600];
	struct cache *c = open_mode(dir, 64 * MIB, true, 0);
	struct cache_stats st;
	unsigned seed = 34;
	int status = 0, pipefd[2];
	pid_t pid;

	CHECK(put_obj(c, "kept", "e", 40 * KIB, 0, 1, &seed) == 0);
	cache_close(c);
	CHECK(pipe(pipefd) == 0);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct cache_put *p;
		unsigned char buf[40 * KIB];

		c = open_mode(dir, 64 * MIB, true, 0);
		fill(buf, sizeof(buf), "lost", "e");
		if (!c ||
		    cache_put_begin(c, "lost", 4, "e", sizeof(buf), 0,
				    CACHE_NO_ID, &p) ||
		    cache_put_write(p, 0, buf, sizeof(buf)))
			_exit(1);
		/* Written, not committed: killed here. */
		if (write(pipefd[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(1);
	}
	CHECK(pid > 0);
	close(pipefd[1]);
	{
		char x;

		CHECK(read(pipefd[0], &x, 1) == 1);
	}
	close(pipefd[0]);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status));
	CHECK(count_files(dir, "obj-") == 2);
	/* One planted by hand too (an older crash), named as ours are. */
	snprintf(path, sizeof(path), "%s/obj-7fffffff.dat", dir);
	CHECK(close(open(path, O_CREAT | O_WRONLY, 0600)) == 0);

	c = open_mode(dir, 64 * MIB, true, 0);
	CHECK(count_files(dir, "obj-") == 1);
	cache_get_stats(c, &st);
	CHECK(st.objects == 1);
	CHECK(check_obj(c, "kept", "e", 40 * KIB) == 0);
	CHECK(check_obj(c, "lost", "e", 40 * KIB) == -ENODATA);
	/* Ids go on above every file seen: nothing is overwritten. */
	CHECK(put_obj(c, "new", "e", 40 * KIB, 0, 1, &seed) == 0);
	snprintf(path, sizeof(path), "%s/obj-80000000.dat", dir);
	CHECK(access(path, F_OK) == 0);
	cache_close(c);
	rm_rf(dir);
	free(dir);
}

/* A directory written with shared segments and reopened with a file per
 * object, and the reverse, serves every object; cache_open_file() hands
 * out the files of their own only. */
static void test_mixed(void)
{
	static const size_t sizes[] = {3000, 40 * KIB, 2 * MIB + 5};
	char *dir = mktmp(), key[32];
	struct cache *c;
	unsigned seed = 35;
	int bad = 0, fd;

	for (int round = 0; round < 4; round++) {
		bool own = round % 2;

		c = open_mode(dir, 64 * MIB, own, 0);
		for (int i = 0; i < 3; i++) {
			snprintf(key, sizeof(key), "r%d/%d", round, i);
			CHECK(put_obj(c, key, "e", sizes[i], 0, 2, &seed) == 0);
		}
		cache_close(c);
		c = open_mode(dir, 64 * MIB, !own, 0);
		for (int r = 0; r <= round; r++)
			for (int i = 0; i < 3; i++) {
				snprintf(key, sizeof(key), "r%d/%d", r, i);
				bad += check_obj(c, key, "e", sizes[i]) != 0;
				fd = cache_open_file(c, key, strlen(key), "e",
						     sizes[i]);
				/* Inline, or shared: not handed out. */
				if (i == 0 || r % 2 == 0) {
					bad += fd != -ENOTSUP;
					continue;
				}
				bad += fd < 0 ||
				       check_fd(fd, key, "e", sizes[i]) != 0;
				if (fd >= 0)
					close(fd);
			}
		cache_close(c);
	}
	CHECK(bad == 0);
	CHECK(count_files(dir, "obj-") == 4 && count_files(dir, "seg-") >= 1);
	rm_rf(dir);
	free(dir);
}

/*
 * 20,000 files of their own under an fd limit of 256: put, reopened,
 * read by copy, by reference and by cache_open_file(). A cache that kept
 * an fd per file would fail at the 256th put or at the open.
 */
#define MANY_OBJS   20000
#define MANY_FDS    256
#define MANY_INLINE 512

static size_t many_size(int i)
{
	return MANY_INLINE + 1 + (size_t)(i % 7) * 300;
}

static void test_many_files(void)
{
	char *dir = mktmp(), key[32];
	struct rlimit old, low;
	struct cache_stats st;
	struct cache *c;
	unsigned seed = 36;
	int bad = 0, held[64], n_held = 0;
	unsigned char got[4096];

	CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
	low = old;
	low.rlim_cur = MANY_FDS;
	CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);

	c = open_mode(dir, 1024 * MIB, true, MANY_INLINE);
	for (int i = 0; i < MANY_OBJS && c; i++) {
		snprintf(key, sizeof(key), "many/%d", i);
		bad += put_obj(c, key, "e", many_size(i), 0, 1, &seed) != 0;
	}
	CHECK(bad == 0);
	cache_close(c);
	CHECK(count_files(dir, "obj-") == MANY_OBJS);

	c = open_mode(dir, 1024 * MIB, true, MANY_INLINE);
	cache_get_stats(c, &st);
	CHECK(st.objects == MANY_OBJS);
	for (int i = 0; i < MANY_OBJS && c; i++) {
		struct ref_sink rs = {.buf = got};
		int fd;

		snprintf(key, sizeof(key), "many/%d", i);
		if (i % 3 == 0) {
			bad += check_obj(c, key, "e", many_size(i)) != 0;
		} else if (i % 3 == 1) {
			bad += cache_read_ref(c, key, strlen(key), "e",
					      many_size(i), sizeof(got), 0,
					      ref_copy,
					      &rs) != (ssize_t)many_size(i);
		} else {
			fd = cache_open_file(c, key, strlen(key), "e",
					     many_size(i));
			bad +=
			    fd < 0 || check_fd(fd, key, "e", many_size(i)) != 0;
			/* The first 64 held to the end, as a kernel holds
			 * the backing files of open files. */
			if (fd >= 0 && n_held < 64)
				held[n_held++] = fd;
			else if (fd >= 0)
				close(fd);
		}
	}
	CHECK(bad == 0);
	cache_get_stats(c, &st);
	CHECK(st.corrupt == 0 && st.read_errors == 0);
	CHECK(count_fds() < 128);
	cache_close(c);
	/* Handed out, a file outlives the cache. */
	CHECK(n_held == 64 &&
	      check_fd(held[0], "many/2", "e", many_size(2)) == 0);
	for (int i = 0; i < n_held; i++)
		close(held[i]);
	CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
	rm_rf(dir);
	free(dir);
}

/* The tests that hold for both kinds of files. */
static void run_both(void)
{
	int fds = count_fds();

	test_roundtrip();
	test_parts();
	test_abort();
	test_persist();
	test_read_ref();
	test_check_ahead();
	test_check_ahead_paced();
	test_check_ahead_waited();
	test_read_errors();
	test_source_and_size();
	test_damaged_index();
	test_belady();
	test_belady_exact();
	test_evict_amortized();
	test_commit_many();
	test_evict_step_bounded();
	test_evict_ids();
	test_lru();
	test_dir_rules();
	test_meta_invalidate_clear();
	test_threads();
	test_crash();
	test_no_uring();
	test_disk_full();
	/* Every fd a read opened was closed. */
	CHECKF(count_fds() == fds, "%d fds, %d before", count_fds(), fds);
}

int main(void)
{
	/* Where extents sit in one segment file: shared segments only. */
	test_corrupt();
	test_truncate();
	run_both();
	fpo = true;
	run_both();
	test_open_file();
	test_open_file_evict();
	test_open_file_held();
	test_disk_full_recovers();
	test_open_file_corrupt();
	test_own_orphans();
	test_mixed();
	test_many_files();
	return check_done();
}
