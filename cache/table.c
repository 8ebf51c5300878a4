/*
 * cache/table.c - the in-memory table of committed entries.
 *
 * Owns the hash of entries by key (all ETags of one key share a chain, so
 * "every version of this key" is one chain walk) and the slot array that
 * turns a cache_obj.id back into its entry in O(1).
 *
 * Invariants (all under c->lock):
 * - An entry is in the table iff it is committed in the index (outside
 *   wlock; see cache_internal.h).
 * - id = (seq << 32) | slot with seq never 0: an id outlives its entry
 *   only as a miss, since a reused slot gets a new seq. seq wraps after
 *   2^32 inserts, long after any cache_obj held by a reader is stale.
 */
#include "cache/cache_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* 4,096 chains to start: the table doubles when it has more entries than
 * chains, so a chain is one entry long on average. */
#define TAB_BUCKETS_MIN 4096

int tab_init(struct tab *t)
{
	memset(t, 0, sizeof(*t));
	t->buckets = calloc(TAB_BUCKETS_MIN, sizeof(*t->buckets));
	if (!t->buckets)
		return -ENOMEM;
	t->n_buckets = TAB_BUCKETS_MIN;
	return 0;
}

void tab_fini(struct tab *t)
{
	for (uint32_t i = 0; i < t->n_slots; i++)
		free(t->slots[i]);
	free(t->slots);
	free(t->free_slots);
	free(t->buckets);
	memset(t, 0, sizeof(*t));
}

uint64_t tab_hash_key(const char *key, size_t key_len)
{
	return XXH3_64bits(key, key_len);
}

struct cache_ent *cache_ent_new(const char *key, size_t key_len,
				const char *etag, size_t etag_len)
{
	struct cache_ent *e;

	e = calloc(1, sizeof(*e) + key_len + etag_len + 2);
	if (!e)
		return NULL;
	memcpy(e->name, key, key_len);
	memcpy(e->name + key_len + 1, etag, etag_len);
	e->key_len = key_len;
	e->etag_len = etag_len;
	e->khash = tab_hash_key(key, key_len);
	atomic_init(&e->oid, CACHE_NO_ID);
	return e;
}

static bool ent_is(const struct cache_ent *e, uint64_t khash, const char *key,
		   size_t key_len)
{
	return e->khash == khash && e->key_len == key_len &&
	       memcmp(e->name, key, key_len) == 0;
}

struct cache_ent *tab_first_version(const struct tab *t, const char *key,
				    size_t key_len)
{
	uint64_t h = tab_hash_key(key, key_len);
	struct cache_ent *e;

	for (e = t->buckets[h & (t->n_buckets - 1)]; e; e = e->hnext)
		if (ent_is(e, h, key, key_len))
			return e;
	return NULL;
}

struct cache_ent *tab_find(const struct tab *t, const char *key, size_t key_len,
			   const char *etag, size_t etag_len)
{
	return tab_find_hashed(t, tab_hash_key(key, key_len), key, key_len,
			       etag, etag_len);
}

struct cache_ent *tab_find_hashed(const struct tab *t, uint64_t h,
				  const char *key, size_t key_len,
				  const char *etag, size_t etag_len)
{
	struct cache_ent *e;

	for (e = t->buckets[h & (t->n_buckets - 1)]; e; e = e->hnext)
		if (ent_is(e, h, key, key_len) && e->etag_len == etag_len &&
		    memcmp(e->name + key_len + 1, etag, etag_len) == 0)
			return e;
	return NULL;
}

struct cache_ent *tab_by_id(const struct tab *t, uint64_t id)
{
	uint32_t slot = (uint32_t)id;
	struct cache_ent *e;

	if (slot >= t->n_slots)
		return NULL;
	e = t->slots[slot];
	return e && e->id == id ? e : NULL;
}

/* Doubles the chains; on failure the table just runs with longer chains. */
static void tab_grow_buckets(struct tab *t)
{
	size_t n = t->n_buckets * 2;
	struct cache_ent **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (size_t i = 0; i < t->n_buckets; i++) {
		struct cache_ent *e = t->buckets[i], *next;

		for (; e; e = next) {
			next = e->hnext;
			e->hnext = b[e->khash & (n - 1)];
			b[e->khash & (n - 1)] = e;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->n_buckets = n;
}

/*
 * Makes sure the next @n tab_insert() calls find slots without
 * allocating, so that inserts after an LMDB commit cannot fail. 0 or
 * -ENOMEM.
 */
int tab_reserve(struct tab *t, size_t n)
{
	uint32_t cap;
	void *p;

	if (t->n_free + (size_t)(t->cap_slots - t->n_slots) >= n)
		return 0;
	if (t->cap_slots >= UINT32_MAX / 2 || n >= UINT32_MAX / 4)
		return -ENOMEM;
	cap = t->cap_slots ? t->cap_slots * 2 : 1024;
	while (cap - t->n_slots + (size_t)t->n_free < n)
		cap *= 2;
	p = realloc(t->slots, cap * sizeof(*t->slots));
	if (!p)
		return -ENOMEM;
	t->slots = p;
	p = realloc(t->free_slots, cap * sizeof(*t->free_slots));
	if (!p)
		return -ENOMEM;
	t->free_slots = p;
	t->cap_slots = cap;
	return 0;
}

/*
 * Sizes an empty table for @n entries at once: the chains an index of
 * @n records needs (rather than doubling, and rehashing every entry, 20
 * times on the way to a million) and their slots. 0 or -ENOMEM (the table
 * then grows as it goes).
 */
int tab_presize(struct tab *t, size_t n)
{
	size_t nb = t->n_buckets;
	struct cache_ent **b;

	if (t->n_ents)
		return 0;
	while (nb < n && nb < ((size_t)1 << 31))
		nb *= 2;
	if (nb != t->n_buckets) {
		b = calloc(nb, sizeof(*b));
		if (!b)
			return -ENOMEM;
		free(t->buckets);
		t->buckets = b;
		t->n_buckets = nb;
	}
	return tab_reserve(t, n);
}

/* Links @e and gives it a fresh id. tab_reserve() must have succeeded. */
void tab_insert(struct tab *t, struct cache_ent *e)
{
	uint32_t slot;
	size_t b;

	slot = t->n_free ? t->free_slots[--t->n_free] : t->n_slots++;
	if (++t->seq == 0)
		t->seq = 1;
	e->id = (uint64_t)t->seq << 32 | slot;
	t->slots[slot] = e;

	b = e->khash & (t->n_buckets - 1);
	e->hnext = t->buckets[b];
	t->buckets[b] = e;
	if (++t->n_ents > t->n_buckets)
		tab_grow_buckets(t);
}

/* Unlinks @e; its memory stays with the caller. */
void tab_remove(struct tab *t, struct cache_ent *e)
{
	struct cache_ent **pp = &t->buckets[e->khash & (t->n_buckets - 1)];
	uint32_t slot = (uint32_t)e->id;

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	e->hnext = NULL;
	t->slots[slot] = NULL;
	t->free_slots[t->n_free++] = slot;
	t->n_ents--;
}
