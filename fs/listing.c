/*
 * fs/listing.c - the listing snapshot kept in the cache, so that a remount
 * of the same bucket and prefix needs no ListObjectsV2 at all.
 *
 * Format (host byte order: the cache never leaves its machine): records
 *     u32 key_len, u16 etag_len, u64 size, i64 mtime, key, etag
 * in chunks of about LISTING_CHUNK bytes, each saved under the snapshot's
 * name + "#" + slot + index as it fills, and, once the listing is done,
 * a manifest under the name itself:
 *     "HFSLIST3" u64 count, i64 saved_at, u64 bytes (of the chunks),
 *     u32 chunks, u32 slot ('a' or 'b').
 * A snapshot of HFSLIST2 (header and records in one blob, as saved before
 * chunks) is still read.
 *
 * Invariants: a manifest is written only after a listing finished without
 * error and all its chunks were saved, in the slot the current manifest
 * does not name, so the snapshot in use never changes under its reader
 * and a listing that fails or is cut short (a crash) leaves it whole; the
 * old slot's chunks are dropped once the new manifest is in. A reader
 * checks every length against its chunk's end and the counts against the
 * manifest, so a damaged snapshot is refused (-EPROTO), never half-used.
 */
#include "fs/fs_internal.h"
#include "common/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LISTING_MAGIC_V2 "HFSLIST2"
#define LISTING_HDR_V2	 (8 + 8 + 8)
#define LISTING_MAGIC	 "HFSLIST3"
#define LISTING_HDR	 (8 + 8 + 8 + 8 + 4 + 4)
#define LISTING_REC	 (4 + 2 + 8 + 8)

/*
 * 4 MiB: LMDB holds a write's pages in memory until it commits, so one
 * blob of a whole listing (118 MB for 1,281,167 keys) was held twice, its
 * recording and LMDB's copy, at the top of a cold mount's memory (373 MB
 * with them). A chunk is about 45,000 of ImageNet's keys.
 */
#define LISTING_CHUNK (4u << 20)

/* A saved listing's manifest. */
struct listing_manifest {
	uint64_t count;
	int64_t saved_at;
	uint64_t bytes;
	uint32_t chunks;
	uint32_t slot;
};

struct listing_buf {
	struct cache *cache;
	char *name;
	struct buf b;	 /* the chunk being filled */
	uint64_t count;	 /* records, all chunks */
	uint64_t bytes;	 /* bytes of the chunks saved */
	uint32_t chunks; /* chunks saved */
	uint32_t slot;	 /* 'a' or 'b': the one no manifest names */
	struct listing_manifest old;
	bool have_old;
	bool saved;
	int err; /* the first failed chunk write; the snapshot is lost */
};

/* The name of chunk @i of @slot of the snapshot @name. */
static int chunk_name(const char *name, uint32_t slot, uint32_t i, char **out)
{
	return asprintf(out, "%s#%c%u", name, (char)slot, i) < 0 ? -ENOMEM : 0;
}

static int manifest_parse(const void *blob, size_t len,
			  struct listing_manifest *m)
{
	const char *d = blob;

	if (len != LISTING_HDR || memcmp(d, LISTING_MAGIC, 8))
		return -EPROTO;
	memcpy(&m->count, d + 8, 8);
	memcpy(&m->saved_at, d + 16, 8);
	memcpy(&m->bytes, d + 24, 8);
	memcpy(&m->chunks, d + 32, 4);
	memcpy(&m->slot, d + 36, 4);
	return m->slot == 'a' || m->slot == 'b' ? 0 : -EPROTO;
}

static int manifest_look(void *arg, const void *blob, size_t len)
{
	return manifest_parse(blob, len, arg);
}

/* Drops the chunks of @slot from @from on, as far as they go. */
static void drop_chunks(struct cache *cache, const char *name, uint32_t slot,
			uint32_t from)
{
	for (uint32_t i = from;; i++) {
		char *cn;

		if (chunk_name(name, slot, i, &cn))
			return;
		int rc = cache_meta_del(cache, cn);

		free(cn);
		if (rc)
			return; /* -ENODATA: the end */
	}
}

struct listing_buf *listing_buf_create(struct cache *cache, const char *name)
{
	struct listing_buf *lb = calloc(1, sizeof(*lb));

	if (!lb)
		return NULL;
	lb->cache = cache;
	lb->name = strdup(name);
	/* The whole chunk at once: it is filled to about its size. */
	if (!lb->name || buf_reserve(&lb->b, LISTING_CHUNK + (64u << 10))) {
		listing_buf_destroy(lb);
		return NULL;
	}
	lb->have_old = !cache_meta_read(cache, name, manifest_look, &lb->old);
	lb->slot = lb->have_old && lb->old.slot == 'a' ? 'b' : 'a';
	return lb;
}

void listing_buf_destroy(struct listing_buf *lb)
{
	if (!lb)
		return;
	/* Not saved: what was written of it is garbage. */
	if (!lb->saved && lb->name)
		drop_chunks(lb->cache, lb->name, lb->slot, 0);
	buf_fini(&lb->b);
	free(lb->name);
	free(lb);
}

uint64_t listing_buf_count(const struct listing_buf *lb)
{
	return lb->count;
}

/* Saves the chunk being filled, if anything is in it. */
static int flush_chunk(struct listing_buf *lb)
{
	char *cn;
	int rc;

	if (lb->err || !lb->b.len)
		return lb->err;
	rc = chunk_name(lb->name, lb->slot, lb->chunks, &cn);
	if (!rc) {
		rc = cache_meta_put(lb->cache, cn, lb->b.data, lb->b.len);
		free(cn);
	}
	if (rc) {
		lb->err = rc;
		return rc;
	}
	lb->bytes += lb->b.len;
	lb->chunks++;
	lb->b.len = 0;
	return 0;
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
	/* A failed chunk write loses the snapshot, not the listing: the
	 * mount goes on, and listing_save() says why. */
	if (lb->b.len >= LISTING_CHUNK)
		(void)flush_chunk(lb);
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

int listing_save(struct listing_buf *lb)
{
	char m[LISTING_HDR];
	int64_t now = (int64_t)time(NULL);
	int rc = flush_chunk(lb);

	if (rc)
		return rc;
	/* Chunks of this slot past this listing's: a listing cut short. */
	drop_chunks(lb->cache, lb->name, lb->slot, lb->chunks);
	memcpy(m, LISTING_MAGIC, 8);
	memcpy(m + 8, &lb->count, 8);
	memcpy(m + 16, &now, 8);
	memcpy(m + 24, &lb->bytes, 8);
	memcpy(m + 32, &lb->chunks, 4);
	memcpy(m + 36, &lb->slot, 4);
	rc = cache_meta_put(lb->cache, lb->name, m, sizeof(m));
	if (rc)
		return rc;
	lb->saved = true;
	if (lb->have_old && lb->old.slot != lb->slot)
		drop_chunks(lb->cache, lb->name, lb->old.slot, 0);
	return 0;
}

struct listing_read {
	s3_list_cb cb;
	void *arg;
	uint64_t count; /* records read */
};

/* Walks records in place (cache_meta_read()), each checked against the
 * end before its fields are read; stops after @max of them. */
static int walk_records(struct listing_read *lr, const char *d, size_t len,
			uint64_t max)
{
	char etag[UINT16_MAX + 1];
	size_t off = 0;
	int rc;

	while (off < len) {
		struct s3_object o;
		uint32_t klen;
		uint16_t elen;

		if (len - off < LISTING_REC || lr->count == max)
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
		lr->count++;
	}
	return 0;
}

struct chunk_walk {
	struct listing_read *lr;
	uint64_t max;
};

static int chunk_walk(void *arg, const void *blob, size_t len)
{
	struct chunk_walk *cw = arg;

	return walk_records(cw->lr, blob, len, cw->max);
}

/* Makes room in @b (or NULL) for @n records in @bytes of them: their
 * names are within the records' keys and ETags. */
static int reserve_names(struct tree_builder *b, uint64_t n, uint64_t bytes)
{
	if (!b || n > bytes / LISTING_REC)
		return 0;
	return tree_builder_reserve(b, n, bytes - n * LISTING_REC + n);
}

/* What the snapshot's name holds: a manifest, or a whole HFSLIST2 blob,
 * walked there and then (its records are in it). */
struct head_read {
	struct listing_read *lr;
	struct tree_builder *b;
	struct listing_manifest m;
	bool v2;
};

static int head_walk(void *arg, const void *blob, size_t len)
{
	struct head_read *hr = arg;
	const char *d = blob;
	uint64_t n;
	int rc;

	if (len >= LISTING_HDR_V2 && !memcmp(d, LISTING_MAGIC_V2, 8)) {
		hr->v2 = true;
		memcpy(&n, d + 8, 8);
		memcpy(&hr->m.saved_at, d + 16, 8);
		hr->m.count = n;
		rc = reserve_names(hr->b, n, len - LISTING_HDR_V2);
		return rc ? rc
			  : walk_records(hr->lr, d + LISTING_HDR_V2,
					 len - LISTING_HDR_V2, n);
	}
	return manifest_parse(blob, len, &hr->m);
}

int listing_load(struct cache *cache, const char *name, struct tree_builder *b,
		 s3_list_cb cb, void *arg, uint64_t *count, int64_t *saved_at)
{
	struct listing_read lr = {.cb = cb, .arg = arg};
	struct head_read hr = {.lr = &lr, .b = b};
	struct chunk_walk cw = {.lr = &lr};
	int rc = cache_meta_read(cache, name, head_walk, &hr);

	if (rc || hr.v2)
		goto out;
	rc = reserve_names(b, hr.m.count, hr.m.bytes);
	cw.max = hr.m.count;
	for (uint32_t i = 0; i < hr.m.chunks && !rc; i++) {
		char *cn;

		rc = chunk_name(name, hr.m.slot, i, &cn);
		if (rc)
			break;
		rc = cache_meta_read(cache, cn, chunk_walk, &cw);
		free(cn);
		if (rc == -ENODATA)
			rc = -EPROTO; /* a chunk the manifest names is gone */
	}
out:
	if (!rc && lr.count != hr.m.count)
		rc = -EPROTO;
	if (!rc) {
		*count = lr.count;
		*saved_at = hr.m.saved_at;
	}
	return rc;
}
