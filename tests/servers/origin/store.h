/*
 * tests/servers/origin/store.h - the fast origin's catalogue: the
 * buckets and objects of one directory, read once at start-up.
 * Private to the origin. Immutable once store_open() returns, so any
 * thread may read it without a lock.
 */
#ifndef ORIGIN_STORE_H
#define ORIGIN_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* "\"" + 32 hex digits + "\"" + NUL. */
#define STORE_ETAG_SIZE 35

struct store_obj {
	char *key; /* the path relative to the bucket's directory */
	size_t key_len;
	uint64_t size;
	time_t mtime;
	char etag[STORE_ETAG_SIZE]; /* quoted MD5 hex of the content */
};

struct store_bucket {
	char *name;
	int dir_fd;		/* the bucket's directory, opened O_PATH */
	struct store_obj *objs; /* sorted by key, bytewise (S3's order) */
	size_t n_objs;
};

struct store {
	struct store_bucket *buckets;
	size_t n_buckets;
};

/**
 * Reads @dir: each subdirectory is a bucket, each regular file below it
 * (symbolic links followed) an object named by its relative path. Hashes
 * every object with MD5 on @threads threads (the ETags). Returns 0 or
 * -errno (the caller calls store_close() either way).
 */
int store_open(struct store *s, const char *dir, unsigned threads);

/** Frees what store_open() allocated and closes its descriptors. */
void store_close(struct store *s);

/** The bucket named @name (@len bytes), or NULL. */
const struct store_bucket *store_bucket(const struct store *s, const char *name,
					size_t len);

/**
 * The index of the first object of @b whose key is >= @key (@len bytes),
 * or b->n_objs if there is none.
 */
size_t store_lower_bound(const struct store_bucket *b, const char *key,
			 size_t len);

/** The object @key (@len bytes) of @b, or NULL. */
const struct store_obj *store_find(const struct store_bucket *b,
				   const char *key, size_t len);

#endif /* ORIGIN_STORE_H */
