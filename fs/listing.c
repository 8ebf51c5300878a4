/*
 * fs/listing.c - the listing snapshot kept in the cache, so that a remount
 * of the same bucket and prefix needs no ListObjectsV2 at all.
 *
 * Format (host byte order: the cache never leaves its machine):
 *     "HFSLIST2" u64 count, i64 saved_at, then per object
 *     u32 key_len, u16 etag_len, u64 size, i64 mtime, key, etag.
 * Invariant: a snapshot is written whole, in one cache_meta_put() (one
 * LMDB transaction), and only after a listing finished without error; a
 * reader still checks every length against the end, so a damaged one is
 * refused (-EPROTO), never half-used.
 */
#include "fs/fs_internal.h"
#include "common/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LISTING_MAGIC "HFSLIST2"
#define LISTING_HDR   (8 + 8 + 8)
#define LISTING_REC   (4 + 2 + 8 + 8)

struct listing_buf {
	struct buf b; /* header, then the records */
	uint64_t count;
};

struct listing_buf *listing_buf_create(void)
{
	struct listing_buf *lb = calloc(1, sizeof(*lb));

	if (!lb)
		return NULL;
	/* 1 MiB first: about 10,000 records before the first doubling. */
	if (buf_reserve(&lb->b, 1 << 20)) {
		free(lb);
		return NULL;
	}
	memset(lb->b.data, 0, LISTING_HDR);
	memcpy(lb->b.data, LISTING_MAGIC, 8);
	lb->b.len = LISTING_HDR;
	return lb;
}

void listing_buf_destroy(struct listing_buf *lb)
{
	if (!lb)
		return;
	buf_fini(&lb->b);
	free(lb);
}

uint64_t listing_buf_count(const struct listing_buf *lb)
{
	return lb->count;
}

static void put(char **p, const void *v, size_t n)
{
	memcpy(*p, v, n);
	*p += n;
}

int listing_buf_add(struct listing_buf *lb, const struct s3_object *o)
{
	size_t elen = strlen(o->etag);
	size_t need = LISTING_REC + o->key_len + elen;
	uint32_t klen32 = (uint32_t)o->key_len;
	uint16_t elen16 = (uint16_t)elen;
	char *p;

	if (o->key_len > UINT32_MAX || elen > UINT16_MAX)
		return -EINVAL;
	if (buf_reserve(&lb->b, need))
		return -ENOMEM;
	p = lb->b.data + lb->b.len;
	put(&p, &klen32, 4);
	put(&p, &elen16, 2);
	put(&p, &o->size, 8);
	put(&p, &o->mtime, 8);
	put(&p, o->key, o->key_len);
	put(&p, o->etag, elen);
	lb->b.len += need;
	lb->count++;
	return 0;
}

int listing_save(struct cache *cache, const char *name,
		 const struct listing_buf *lb)
{
	int64_t now = (int64_t)time(NULL);

	memcpy(lb->b.data + 8, &lb->count, 8);
	memcpy(lb->b.data + 16, &now, 8);
	return cache_meta_put(cache, name, lb->b.data, lb->b.len);
}

struct listing_read {
	struct tree_builder *b;
	s3_list_cb cb;
	void *arg;
	uint64_t count;
	int64_t saved_at;
};

/* Walks a snapshot in place (cache_meta_read()), each record checked
 * against the end before its fields are read. */
static int listing_walk(void *arg, const void *blob, size_t len)
{
	struct listing_read *lr = arg;
	const char *d = blob;
	char etag[UINT16_MAX + 1];
	size_t off = LISTING_HDR;
	uint64_t n, i;
	int rc;

	if (len < LISTING_HDR || memcmp(d, LISTING_MAGIC, 8))
		return -EPROTO;
	memcpy(&n, d + 8, 8);
	memcpy(&lr->saved_at, d + 16, 8);
	/* The names are within the records' bytes: keys and ETags. */
	if (lr->b && n <= (len - LISTING_HDR) / LISTING_REC) {
		rc = tree_builder_reserve(
		    lr->b, n, len - LISTING_HDR - n * LISTING_REC + n);
		if (rc)
			return rc;
	}
	for (i = 0; i < n; i++) {
		struct s3_object o;
		uint32_t klen;
		uint16_t elen;

		if (len - off < LISTING_REC)
			return -EPROTO;
		memcpy(&klen, d + off, 4);
		memcpy(&elen, d + off + 4, 2);
		memcpy(&o.size, d + off + 6, 8);
		memcpy(&o.mtime, d + off + 14, 8);
		off += LISTING_REC;
		if (len - off < (size_t)klen + elen)
			return -EPROTO;
		o.key = d + off;
		o.key_len = klen;
		memcpy(etag, d + off + klen, elen);
		etag[elen] = '\0';
		o.etag = etag;
		off += (size_t)klen + elen;
		rc = lr->cb(lr->arg, &o);
		if (rc)
			return rc;
	}
	if (off != len)
		return -EPROTO;
	lr->count = n;
	return 0;
}

int listing_load(struct cache *cache, const char *name, struct tree_builder *b,
		 s3_list_cb cb, void *arg, uint64_t *count, int64_t *saved_at)
{
	struct listing_read lr = {.b = b, .cb = cb, .arg = arg};
	int rc = cache_meta_read(cache, name, listing_walk, &lr);

	if (!rc) {
		*count = lr.count;
		*saved_at = lr.saved_at;
	}
	return rc;
}
