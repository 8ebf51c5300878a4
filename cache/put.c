/*
 * cache/put.c - writing an object: begin, write parts, read them back,
 * commit or abort.
 *
 * Owns struct cache_put. A put holds a capacity reservation (evict.c)
 * and either an in-memory buffer (objects up to inline_max, stored in
 * LMDB at commit) or an extent of a segment, written in place as parts
 * arrive.
 *
 * Invariants:
 * - Nothing of a put is visible to lookups before cache_put_commit()
 *   returns 0; the bytes are written (to the page cache, which survives
 *   kill -9) before the index record that points to them is committed.
 * - The checksum covers exactly the bytes of the object: parts that
 *   arrive in order are hashed as they come (no second pass for the
 *   usual streamed GET); whatever came out of order is read back from
 *   the segment at commit and hashed then.
 * - A failed put counts once in write_errors, whatever else it is asked.
 */
#include "cache/cache_internal.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

/* Commit reads back out-of-order parts 1 MiB at a time. */
#define PUT_HASH_CHUNK (1u << 20)

int cache_put_begin(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size, uint64_t next_use,
		    struct cache_put **out)
{
	struct cache_put *p;
	size_t etag_len;
	bool exists;
	int ret;

	*out = NULL;
	if (!key || !key_len || key_len > CACHE_KEY_MAX || !etag)
		return -EINVAL;
	etag_len = strlen(etag);
	if (etag_len > CACHE_ETAG_MAX)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	exists = tab_find(&c->tab, key, key_len, etag, etag_len) != NULL;
	pthread_mutex_unlock(&c->lock);
	if (exists)
		return -EEXIST;

	p = calloc(1, sizeof(*p) + key_len + etag_len + 2);
	if (!p)
		return -ENOMEM;
	p->c = c;
	p->size = size;
	p->key_len = key_len;
	p->etag_len = etag_len;
	memcpy(p->name, key, key_len);
	memcpy(p->name + key_len + 1, etag, etag_len);

	ret = evict_reserve(c, size, next_use);
	if (ret) {
		free(p);
		return ret;
	}
	if (size <= c->inline_max) {
		p->buf = malloc(size ? size : 1);
		ret = p->buf ? 0 : -ENOMEM;
	} else {
		p->hstate = XXH3_createState();
		ret = p->hstate ? 0 : -ENOMEM;
		if (!ret) {
			XXH3_64bits_reset(p->hstate);
			ret = blob_reserve(c, size, &p->seg, &p->off);
		}
		if (ret && ret != -ENOMEM) {
			/* No room for a new segment file counts as full. */
			ret = ret == -ENOSPC || ret == -EDQUOT ? -ENOSPC
							       : -EIO;
			cache_note_write_error(c, ret);
		}
	}
	if (ret) {
		evict_unreserve(c, size);
		XXH3_freeState(p->hstate);
		free(p->buf);
		free(p);
		return ret;
	}
	pthread_mutex_init(&p->lock, NULL);
	atomic_fetch_add(&c->n_puts, 1);
	*out = p;
	return 0;
}

/* Records the first failure of @p; true when this one was the first. */
static bool put_fail(struct cache_put *p, int err)
{
	bool first;

	pthread_mutex_lock(&p->lock);
	first = !p->err;
	if (first)
		p->err = err;
	pthread_mutex_unlock(&p->lock);
	return first;
}

int cache_put_write(struct cache_put *p, uint64_t off, const void *data,
		    size_t len)
{
	int ret;

	if (off > p->size || len > p->size - off)
		return -EINVAL;
	if (!len)
		return 0;
	pthread_mutex_lock(&p->lock);
	ret = p->err;
	pthread_mutex_unlock(&p->lock);
	if (ret)
		return ret;

	if (p->buf) {
		memcpy(p->buf + off, data, len);
	} else {
		ret = blob_io(p->seg->fd, (void *)data, len, p->off + off,
			      true);
		if (ret) {
			ret = ret == -ENOSPC || ret == -EDQUOT ? -ENOSPC
							       : -EIO;
			if (put_fail(p, ret))
				cache_note_write_error(p->c, ret);
			return ret;
		}
	}
	pthread_mutex_lock(&p->lock);
	p->written += len;
	if (p->hstate && off == p->hashed) {
		XXH3_64bits_update(p->hstate, data, len);
		p->hashed += len;
	}
	pthread_mutex_unlock(&p->lock);
	return 0;
}

ssize_t cache_put_read(struct cache_put *p, void *buf, size_t len,
		       uint64_t off)
{
	size_t n;

	if (off >= p->size)
		return 0;
	n = p->size - off < len ? p->size - off : len;
	if (p->buf) {
		memcpy(buf, p->buf + off, n);
		return (ssize_t)n;
	}
	return blob_io(p->seg->fd, buf, n, p->off + off, false) ? -EIO
								 : (ssize_t)n;
}

/* The object's xxh3-64: hashes what the parts in order did not cover. */
static int put_checksum(struct cache_put *p, uint64_t *sum)
{
	size_t chunk;
	void *buf;
	int ret = 0;

	if (p->buf) {
		*sum = XXH3_64bits(p->buf, p->size);
		return 0;
	}
	if (p->hashed < p->size) {
		chunk = p->size - p->hashed < PUT_HASH_CHUNK
				? p->size - p->hashed
				: PUT_HASH_CHUNK;
		buf = malloc(chunk);
		if (!buf)
			return -ENOMEM;
		while (!ret && p->hashed < p->size) {
			size_t n = p->size - p->hashed < chunk
					   ? p->size - p->hashed
					   : chunk;

			ret = blob_io(p->seg->fd, buf, n, p->off + p->hashed,
				      false);
			if (!ret) {
				XXH3_64bits_update(p->hstate, buf, n);
				p->hashed += n;
			}
		}
		free(buf);
	}
	*sum = XXH3_64bits_digest(p->hstate);
	return ret;
}

/* Gives back the reservation and the extent of a put that is not kept. */
static void put_release(struct cache_put *p)
{
	struct cache *c = p->c;
	struct blob_seg *s = p->seg;
	bool punch = false, dead = false;

	pthread_mutex_lock(&c->lock);
	c->reserved -= p->size;
	if (s) {
		s->live_bytes -= p->size;
		s->refs++;
		punch = !(s->sealed && !s->live_bytes);
	}
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return;
	if (punch)
		blob_punch(s, p->off, p->size);
	pthread_mutex_lock(&c->lock);
	dead = blob_seg_unref_locked(c, s);
	pthread_mutex_unlock(&c->lock);
	if (dead)
		blob_seg_destroy(c, s);
}

static void put_free(struct cache_put *p)
{
	atomic_fetch_sub(&p->c->n_puts, 1);
	pthread_mutex_destroy(&p->lock);
	XXH3_freeState(p->hstate);
	free(p->buf);
	free(p);
}

/*
 * Under wlock: makes @e (the committed form of @p) visible in the index
 * and in memory. Other versions of the key leave memory onto *@victims
 * (the caller finishes dropping them), since a key has one current
 * version and old ones would only hold space. Returns 1 when the same
 * object was committed by another put meanwhile.
 */
static int put_publish(struct cache_put *p, struct cache_ent *e,
		       struct cache_ent **victims)
{
	struct cache *c = p->c;
	struct cache_ent *old;
	struct idx_rec rec = {
		.key = p->name,
		.key_len = p->key_len,
		.etag = p->name + p->key_len + 1,
		.etag_len = p->etag_len,
		.is_inline = p->buf != NULL,
		.seg = p->seg ? p->seg->id : 0,
		.size = p->size,
		.off = p->off,
		.sum = e->sum,
		.time_s = (uint64_t)time(NULL),
	};
	int ret;

	pthread_mutex_lock(&c->lock);
	if (tab_find(&c->tab, rec.key, rec.key_len, rec.etag, rec.etag_len)) {
		pthread_mutex_unlock(&c->lock);
		return 1;
	}
	ret = tab_reserve(&c->tab);
	while (!ret && (old = tab_first_version(&c->tab, rec.key,
						rec.key_len)))
		cache_unlink_locked(c, old, victims);
	pthread_mutex_unlock(&c->lock);
	if (ret)
		return ret;

	ret = idx_apply(c->ix, &rec, p->buf, *victims);
	if (!ret) {
		pthread_mutex_lock(&c->lock);
		c->reserved -= p->size;
		c->used += p->size;
		e->tick = ++c->tick;
		tab_insert(&c->tab, e);
		pthread_mutex_unlock(&c->lock);
	}
	return ret;
}

int cache_put_commit(struct cache_put *p)
{
	struct cache *c = p->c;
	struct cache_ent *e = NULL, *victims = NULL;
	uint64_t sum = 0;
	int ret;

	pthread_mutex_lock(&p->lock);
	ret = p->err;
	pthread_mutex_unlock(&p->lock);
	if (ret)
		goto fail; /* counted when it happened */
	if (p->written != p->size) {
		ret = -EINVAL; /* a caller bug, not a cache failure */
		goto fail;
	}
	ret = put_checksum(p, &sum);
	if (!ret) {
		e = cache_ent_new(p->name, p->key_len,
				  p->name + p->key_len + 1, p->etag_len);
		ret = e ? 0 : -ENOMEM;
	}
	if (ret) {
		cache_note_write_error(c, ret == -ENOMEM ? -ENOMEM : -EIO);
		ret = ret == -ENOMEM ? ret : -EIO;
		goto fail;
	}
	e->seg = p->seg;
	e->size = p->size;
	e->off = p->off;
	e->sum = sum;
	/* Hashed from the bytes as they went to the page cache (or read
	 * back from it): nothing to check again this session. */
	e->verified = true;

	pthread_mutex_lock(&c->wlock);
	ret = put_publish(p, e, &victims);
	pthread_mutex_unlock(&c->wlock);
	/* Old versions left memory either way; their blocks stay while the
	 * index may still refer to them. */
	if (victims)
		cache_finish_drop(c, victims, ret == 0);
	if (ret == 1) {
		ret = 0; /* already cached: lookups find it */
		goto fail;
	}
	if (ret) {
		ret = ret == -ENOSPC ? -ENOSPC : -EIO;
		cache_note_write_error(c, ret);
		goto fail;
	}
	put_free(p);
	return 0;

fail:
	free(e);
	put_release(p);
	put_free(p);
	return ret;
}

void cache_put_abort(struct cache_put *p)
{
	if (!p)
		return;
	put_release(p);
	put_free(p);
}
