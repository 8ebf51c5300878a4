/*
 * tests/servers/origin/store.c - the catalogue of the fast origin.
 *
 * Owns the bucket list and, per bucket, the array of its objects sorted
 * by key. Everything is read and hashed before the server listens, so
 * that a GET or a listing costs the server no hashing and no directory
 * walk, and the catalogue never changes while it serves (no locks).
 * Invariant: a bucket's objects are sorted by memcmp() of their keys,
 * which is S3's order (UTF-8 bytes), and keys are unique.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* S3's longest key, in bytes: longer paths cannot be objects. */
#define STORE_KEY_MAX 1024

static int key_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	if (c)
		return c;
	return al < bl ? -1 : al > bl;
}

static int obj_cmp(const void *x, const void *y)
{
	const struct store_obj *a = x, *b = y;

	return key_cmp(a->key, a->key_len, b->key, b->key_len);
}

static int add_obj(struct store_bucket *b, size_t *cap, const char *key,
		   size_t len, const struct stat *st)
{
	struct store_obj *o;

	if (b->n_objs == *cap) {
		size_t ncap = *cap ? *cap * 2 : 256;
		void *p = realloc(b->objs, ncap * sizeof(*b->objs));

		if (!p)
			return -ENOMEM;
		b->objs = p;
		*cap = ncap;
	}
	o = &b->objs[b->n_objs];
	memset(o, 0, sizeof(*o));
	o->key = strndup(key, len);
	if (!o->key)
		return -ENOMEM;
	o->key_len = len;
	o->size = (uint64_t)st->st_size;
	o->mtime = st->st_mtime;
	b->n_objs++;
	return 0;
}

/* Adds the regular files below directory @dfd to @b; @key (@len bytes)
 * is the directory's path in the bucket, with its trailing '/'. */
static int scan_dir(struct store_bucket *b, size_t *cap, int dfd, char *key,
		    size_t len)
{
	DIR *d = fdopendir(dfd);
	struct dirent *e;
	int rc = 0;

	if (!d) {
		rc = -errno;
		close(dfd);
		return rc;
	}
	while (rc == 0 && (e = readdir(d))) {
		size_t nl = strlen(e->d_name);
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (len + nl + 1 > STORE_KEY_MAX) {
			fprintf(stderr,
				"origin: skipped %.*s%s: key too long\n",
				(int)len, key, e->d_name);
			continue;
		}
		if (fstatat(dirfd(d), e->d_name, &st, 0) < 0)
			continue; /* gone, or a dangling link */
		memcpy(key + len, e->d_name, nl);
		if (S_ISREG(st.st_mode)) {
			rc = add_obj(b, cap, key, len + nl, &st);
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_CLOEXEC);

			key[len + nl] = '/';
			rc = sub < 0 ? -errno
				     : scan_dir(b, cap, sub, key, len + nl + 1);
		}
	}
	closedir(d);
	return rc;
}

/* Hashing shared by the threads of store_hash(): each takes the next
 * object by the counter. */
struct hash_job {
	struct store *s;
	atomic_size_t next; /* over all buckets' objects, in order */
	size_t total;
	atomic_int rc;
};

static int hash_obj(const struct store_bucket *b, struct store_obj *o)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int md_len = 0;
	void *map = NULL;
	int rc = 0, fd;

	fd = openat(b->dir_fd, o->key, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (o->size > 0) {
		map = mmap(NULL, o->size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED)
			rc = -errno;
	}
	if (rc == 0 &&
	    !EVP_Digest(map ? map : "", o->size, md, &md_len, EVP_md5(), NULL))
		rc = -EIO;
	if (map && map != MAP_FAILED)
		munmap(map, o->size);
	close(fd);
	if (rc)
		return rc;
	o->etag[0] = '"';
	for (unsigned int i = 0; i < md_len && i < 16; i++) {
		o->etag[1 + 2 * i] = hex[md[i] >> 4];
		o->etag[2 + 2 * i] = hex[md[i] & 15];
	}
	o->etag[33] = '"';
	o->etag[34] = '\0';
	return 0;
}

static void *hash_thread(void *arg)
{
	struct hash_job *j = arg;

	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		size_t bi = 0;
		int rc;

		if (i >= j->total || atomic_load(&j->rc))
			return NULL;
		while (i >= j->s->buckets[bi].n_objs)
			i -= j->s->buckets[bi++].n_objs;
		rc = hash_obj(&j->s->buckets[bi], &j->s->buckets[bi].objs[i]);
		if (rc)
			atomic_store(&j->rc, rc);
	}
}

static int store_hash(struct store *s, unsigned threads)
{
	struct hash_job j = {.s = s};
	pthread_t tid[64];
	unsigned n = 0;

	for (size_t i = 0; i < s->n_buckets; i++)
		j.total += s->buckets[i].n_objs;
	if (threads > 64)
		threads = 64;
	while (n + 1 < threads &&
	       pthread_create(&tid[n], NULL, hash_thread, &j) == 0)
		n++;
	hash_thread(&j);
	while (n > 0)
		pthread_join(tid[--n], NULL);
	return atomic_load(&j.rc);
}

static int bucket_cmp(const void *x, const void *y)
{
	const struct store_bucket *a = x, *b = y;

	return strcmp(a->name, b->name);
}

int store_open(struct store *s, const char *dir, unsigned threads)
{
	char *key = NULL;
	size_t cap = 0;
	struct dirent *e;
	DIR *d;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	d = opendir(dir);
	if (!d)
		return -errno;
	key = malloc(STORE_KEY_MAX + 1);
	if (!key)
		rc = -ENOMEM;
	while (rc == 0 && (e = readdir(d))) {
		struct store_bucket *b;
		struct stat st;
		size_t ocap = 0;
		int sub;

		if (e->d_name[0] == '.' ||
		    fstatat(dirfd(d), e->d_name, &st, 0) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		if (s->n_buckets == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			void *p = realloc(s->buckets, ncap * sizeof(*b));

			if (!p) {
				rc = -ENOMEM;
				break;
			}
			s->buckets = p;
			cap = ncap;
		}
		b = &s->buckets[s->n_buckets];
		memset(b, 0, sizeof(*b));
		b->dir_fd = -1;
		s->n_buckets++;
		b->name = strdup(e->d_name);
		if (!b->name) {
			rc = -ENOMEM;
			break;
		}
		b->dir_fd = openat(dirfd(d), e->d_name,
				   O_PATH | O_DIRECTORY | O_CLOEXEC);
		sub = openat(dirfd(d), e->d_name,
			     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (b->dir_fd < 0 || sub < 0) {
			rc = -errno;
			if (sub >= 0)
				close(sub);
			break;
		}
		rc = scan_dir(b, &ocap, sub, key, 0);
		if (rc == 0 && b->n_objs)
			qsort(b->objs, b->n_objs, sizeof(*b->objs), obj_cmp);
	}
	closedir(d);
	free(key);
	if (rc == 0 && s->n_buckets)
		qsort(s->buckets, s->n_buckets, sizeof(*s->buckets),
		      bucket_cmp);
	return rc ? rc : store_hash(s, threads ? threads : 1);
}

void store_close(struct store *s)
{
	for (size_t i = 0; i < s->n_buckets; i++) {
		struct store_bucket *b = &s->buckets[i];

		for (size_t k = 0; k < b->n_objs; k++)
			free(b->objs[k].key);
		free(b->objs);
		free(b->name);
		if (b->dir_fd >= 0)
			close(b->dir_fd);
	}
	free(s->buckets);
	memset(s, 0, sizeof(*s));
}

const struct store_bucket *store_bucket(const struct store *s, const char *name,
					size_t len)
{
	for (size_t i = 0; i < s->n_buckets; i++)
		if (strlen(s->buckets[i].name) == len &&
		    !memcmp(s->buckets[i].name, name, len))
			return &s->buckets[i];
	return NULL;
}

size_t store_lower_bound(const struct store_bucket *b, const char *key,
			 size_t len)
{
	size_t lo = 0, hi = b->n_objs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct store_obj *o = &b->objs[mid];

		if (key_cmp(o->key, o->key_len, key, len) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

const struct store_obj *store_find(const struct store_bucket *b,
				   const char *key, size_t len)
{
	size_t i = store_lower_bound(b, key, len);

	if (i < b->n_objs && b->objs[i].key_len == len &&
	    !memcmp(b->objs[i].key, key, len))
		return &b->objs[i];
	return NULL;
}
