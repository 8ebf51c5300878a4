/*
 * cache/put.c - writing an object: begin, write parts in order, commit
 * or abort.
 *
 * Owns struct cache_put. A put holds a capacity reservation (evict.c)
 * and either an in-memory buffer (objects up to inline_max, stored in
 * LMDB at commit), an extent of a segment, or (file_per_object) a new
 * file of its own; the last two are written in place as parts arrive.
 * A file of its own is written from offset 0 and exactly to the object's
 * size, so at commit it already holds nothing but the object (no
 * alignment padding, no trim): the kernel may read it as the object.
 *
 * Invariants:
 * - Nothing of a put is visible to lookups before cache_put_commit()
 *   returns 0; the bytes are written (to the page cache, which survives
 *   kill -9) before the index record that points to them is committed.
 *   A file of its own that is not kept is unlinked; one left by a kill
 *   has no record, and the next open removes it (blob_own_reap()).
 * - The checksum covers exactly the bytes of the object: parts must come
 *   in order and are hashed as they come, so a commit never reads the
 *   segment back (the engine writes a fetched object in one part).
 * - A failed put counts once in write_errors, whatever else it is asked.
 */
#include "cache/cache_internal.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

int cache_put_begin(struct cache *c, const char *key, size_t key_len,
		    const char *etag, uint64_t size, uint64_t next_use,
		    uint32_t id, struct cache_put **out)
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
	p->fd = -1;
	p->size = size;
	p->oid = id;
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
		if (!ret)
			XXH3_64bits_reset(p->hstate);
		if (!ret && c->file_per_object) {
			p->fd = blob_own_create(c, &p->file);
			ret = p->fd < 0 ? p->fd : 0;
		} else if (!ret) {
			ret = blob_reserve(c, size, &p->seg, &p->off);
		}
		if (ret && ret != -ENOMEM) {
			/* No room for a new segment file counts as full. */
			ret = ret == -ENOSPC || ret == -EDQUOT ? -ENOSPC : -EIO;
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
	ret = p->err ? p->err : off != p->written ? -EINVAL : 0;
	pthread_mutex_unlock(&p->lock);
	if (ret)
		return ret;

	if (p->buf) {
		memcpy(p->buf + off, data, len);
	} else {
		ret = cache_fault_hit(&p->c->fault_write);
		if (!ret)
			ret = blob_io(p->seg ? p->seg->fd : p->fd, (void *)data,
				      len, p->off + off, true);
		if (ret) {
			ret = ret == -ENOSPC || ret == -EDQUOT ? -ENOSPC : -EIO;
			if (put_fail(p, ret))
				cache_note_write_error(p->c, ret);
			return ret;
		}
	}
	pthread_mutex_lock(&p->lock);
	p->written += len;
	if (p->hstate)
		XXH3_64bits_update(p->hstate, data, len);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

/* The object's xxh3-64: inline bytes at once, a segment's as they came. */
static uint64_t put_checksum(const struct cache_put *p)
{
	return p->buf ? XXH3_64bits(p->buf, p->size)
		      : XXH3_64bits_digest(p->hstate);
}

/* Gives back the reservation and the extent of a put that is not kept. */
static void put_release(struct cache_put *p)
{
	struct cache *c = p->c;
	struct blob_seg *s = p->seg;
	bool punch = false, dead = false;

	if (p->file) {
		close(p->fd);
		p->fd = -1;
		blob_own_unlink(c, p->file);
	}
	pthread_mutex_lock(&c->lock);
	c->reserved -= p->size;
	if (s) {
		s->live_bytes -= p->size;
		s->refs++;
		punch = !(s->sealed && !s->live_bytes);
	}
	cache_assert(cache_ok(c));
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
	if (p->fd >= 0)
		close(p->fd);
	atomic_fetch_sub(&p->c->n_puts, 1);
	pthread_mutex_destroy(&p->lock);
	XXH3_freeState(p->hstate);
	free(p->buf);
	free(p);
}

/*
 * Readies the committed form of @p (checksum, entry) into *@e. Returns 0,
 * or the put's failure: a write error (counted when it happened), -EINVAL
 * (not all written: a caller bug), -ENOMEM.
 */
static int put_prepare(struct cache_put *p, struct cache_ent **e)
{
	int ret;

	*e = NULL;
	pthread_mutex_lock(&p->lock);
	ret = p->err;
	pthread_mutex_unlock(&p->lock);
	if (ret)
		return ret;
	if (p->written != p->size)
		return -EINVAL;
	*e = cache_ent_new(p->name, p->key_len, p->name + p->key_len + 1,
			   p->etag_len);
	if (!*e) {
		cache_note_write_error(p->c, -ENOMEM);
		return -ENOMEM;
	}
	(*e)->seg = p->seg;
	(*e)->file = p->file;
	(*e)->size = p->size;
	(*e)->off = p->off;
	(*e)->sum = put_checksum(p);
	atomic_init(&(*e)->oid, p->oid);
	/* Hashed from the bytes as they went to the page cache: nothing to
	 * check again this session. */
	(*e)->verified = true;
	return 0;
}

static bool put_same_name(const struct cache_put *a, const struct cache_put *b)
{
	return a->key_len == b->key_len && a->etag_len == b->etag_len &&
	       !memcmp(a->name, b->name, a->key_len + 1u + a->etag_len);
}

/*
 * Under wlock: makes the entries @es of the puts @ps (NULL: nothing to
 * publish) visible, in the index in one LMDB write transaction and then
 * in memory. Other versions of their keys leave memory onto *@victims
 * (the caller finishes dropping them), since a key has one current
 * version and old ones would only hold space. A put whose object is
 * cached already (by another put, or earlier in @ps) gets 1 in @pub[i];
 * one published gets 2. Returns 0, or the -errno of the transaction (then
 * none is published).
 */
static int put_publish(struct cache_put **ps, struct cache_ent **es, size_t n,
		       int *pub, struct cache_ent **victims)
{
	struct cache *c = ps[0]->c;
	struct idx_rec *recs = calloc(n, sizeof(*recs));
	const void **datas = calloc(n, sizeof(*datas));
	uint64_t now = (uint64_t)time(NULL);
	struct cache_ent *old;
	size_t m = 0;
	int ret;

	if (!recs || !datas) {
		free(recs);
		free(datas);
		return -ENOMEM;
	}
	pthread_mutex_lock(&c->lock);
	ret = tab_reserve(&c->tab, n);
	for (size_t i = 0; i < n && !ret; i++) {
		struct cache_put *p = ps[i];
		bool dup = false;

		pub[i] = 0;
		if (!es[i])
			continue;
		for (size_t k = 0; k < i && !dup; k++)
			dup = pub[k] && put_same_name(ps[k], p);
		if (dup || tab_find(&c->tab, p->name, p->key_len,
				    p->name + p->key_len + 1, p->etag_len)) {
			pub[i] = 1;
			continue;
		}
		while ((old = tab_first_version(&c->tab, p->name, p->key_len)))
			cache_unlink_locked(c, old, victims);
		recs[m] = (struct idx_rec){
		    .key = p->name,
		    .key_len = p->key_len,
		    .etag = p->name + p->key_len + 1,
		    .etag_len = p->etag_len,
		    .is_inline = p->buf != NULL,
		    .own = p->file != 0,
		    .seg = p->seg ? p->seg->id : p->file,
		    .size = p->size,
		    .off = p->off,
		    .sum = es[i]->sum,
		    .time_s = now,
		};
		datas[m++] = p->buf;
		pub[i] = 2;
	}
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);

	if (!ret && (m || *victims))
		ret = idx_apply_many(c->ix, recs, datas, m, *victims);
	if (!ret) {
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < n; i++) {
			if (pub[i] != 2)
				continue;
			c->reserved -= ps[i]->size;
			c->used += ps[i]->size;
			es[i]->tick = ++c->tick;
			tab_insert(&c->tab, es[i]);
		}
		cache_assert(cache_ok(c));
		pthread_mutex_unlock(&c->lock);
	}
	free(recs);
	free(datas);
	return ret;
}

/* A put that is not kept: gives back what it holds and frees it. */
static void put_drop(struct cache_put *p)
{
	put_release(p);
	put_free(p);
}

int cache_put_commit_many(struct cache_put **ps, size_t n, int *rcs)
{
	struct cache_ent **es, *victims = NULL;
	struct cache *c;
	int *pub, ret;

	if (!n)
		return 0;
	c = ps[0]->c;
	es = calloc(n, sizeof(*es));
	pub = calloc(n, sizeof(*pub));
	if (!es || !pub) {
		free(es);
		free(pub);
		for (size_t i = 0; i < n; i++) {
			rcs[i] = -ENOMEM;
			put_drop(ps[i]);
		}
		cache_note_write_error(c, -ENOMEM);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		rcs[i] = put_prepare(ps[i], &es[i]);

	pthread_mutex_lock(&c->wlock);
	ret = put_publish(ps, es, n, pub, &victims);
	pthread_mutex_unlock(&c->wlock);
	/* Old versions left memory either way; their blocks stay while the
	 * index may still refer to them. */
	if (victims)
		cache_finish_drop(c, victims, ret == 0);
	if (ret) {
		ret = ret == -ENOSPC ? -ENOSPC : -EIO;
		cache_note_write_error(c, ret);
	}
	for (size_t i = 0; i < n; i++) {
		if (!rcs[i] && ret)
			rcs[i] = ret;
		if (!rcs[i] && pub[i] == 2) {
			put_free(ps[i]);
			continue;
		}
		/* Not kept: failed, or cached already (lookups find it). */
		free(es[i]);
		put_drop(ps[i]);
	}
	free(es);
	free(pub);
	return ret;
}

int cache_put_commit(struct cache_put *p)
{
	int rc;

	cache_put_commit_many(&p, 1, &rc);
	return rc;
}

void cache_put_abort(struct cache_put *p)
{
	if (!p)
		return;
	put_release(p);
	put_free(p);
}
