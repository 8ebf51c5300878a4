/*
 * cache/check.c - the cache's invariants, as functions that return false
 * when one is broken.
 *
 * Called only inside cache_assert() (cache_internal.h), at the points
 * where the invariant must hold: after each change to what they look at,
 * under c->lock. Each walks the whole table, O(entries), so they run only
 * in builds configured with -Dinvariants=true (mount-tools/test.sh turns
 * it on with --invariants; under a sanitizer they cost too much);
 * elsewhere cache_assert() compiles to nothing
 * and these functions are never called. Reading them is also a reading
 * of what the rest of cache/ maintains: a field whose invariant is not
 * here is either checked elsewhere (blob.c's segment life) or has none
 * that can be seen under c->lock alone (a segment's refs, its tail).
 *
 * Two allocate scratch memory: tab_ok() a bitmap of the free slots, and
 * cache_ok() the segments sorted, to find an entry's one in O(log n).
 * When that allocation fails they check the rest and pass that part
 * over: an invariant check must not fail for want of memory.
 */
#include "cache/cache_internal.h"

#include <stdlib.h>
#include <string.h>

/* Up to 1,024 entries every call walks them all; in a larger table one
 * call in n / 1,024 does, so that a test filling 20,000 entries costs
 * O(n) per change on average rather than O(n^2) in all (the unit test's
 * 20,000 files took 60 s instead of 17, and passed the 300 s timeout
 * under ThreadSanitizer). A broken count stays broken: a later walk sees
 * it, a few changes after the one that broke it. */
#define CACHE_CHECK_FULL 1024

/*
 * Under c->lock (or with the table private, at load): the slot array and
 * the chains describe the same n_ents entries.
 * - every id names its own slot, with a sequence other than 0;
 * - a slot below n_slots is either an entry or on the free stack, never
 *   both, and the stack holds each free slot once;
 * - every entry is on the chain its key's hash picks, once, and no two
 *   entries share a key and an ETag.
 */
bool tab_ok(const struct tab *t)
{
	size_t on_slots = 0, on_chains = 0;
	unsigned char *seen;

	if (!t->n_buckets || (t->n_buckets & (t->n_buckets - 1)))
		return false;
	if (t->n_slots > t->cap_slots || t->n_free > t->n_slots)
		return false;
	for (uint32_t s = 0; s < t->n_slots; s++) {
		const struct cache_ent *e = t->slots[s];

		if (!e)
			continue;
		if ((uint32_t)e->id != s || !(e->id >> 32))
			return false;
		on_slots++;
	}
	if (on_slots != t->n_ents || on_slots + t->n_free != t->n_slots)
		return false;
	/* n_free + n_ents == n_slots, so a slot pushed twice leaves another
	 * one neither used nor free: mark each to find the twin. */
	seen = calloc(t->n_slots / 8 + 1, 1);
	for (uint32_t i = 0; i < t->n_free; i++) {
		uint32_t s = t->free_slots[i];

		if (s >= t->n_slots || t->slots[s] ||
		    (seen && (seen[s / 8] & (1u << (s % 8))))) {
			free(seen);
			return false;
		}
		if (seen)
			seen[s / 8] |= 1u << (s % 8);
	}
	free(seen);
	for (size_t b = 0; b < t->n_buckets; b++) {
		for (const struct cache_ent *e = t->buckets[b]; e;
		     e = e->hnext) {
			if ((e->khash & (t->n_buckets - 1)) != b ||
			    tab_by_id(t, e->id) != e)
				return false;
			/* Chains are one entry long on average; this is
			 * O(chain) per entry, not O(n). */
			for (const struct cache_ent *f = e->hnext; f;
			     f = f->hnext)
				if (f == e ||
				    (f->khash == e->khash &&
				     f->key_len == e->key_len &&
				     f->etag_len == e->etag_len &&
				     !memcmp(f->name, e->name,
					     e->key_len + 1u + e->etag_len)))
					return false;
			if (++on_chains > t->n_ents)
				return false; /* a loop, or a stray */
		}
	}
	return on_chains == t->n_ents;
}

/* Under c->lock: @e's bytes are in exactly one place, and that place is
 * well formed. */
static bool ent_place_ok(const struct cache *c, const struct cache_ent *e)
{
	if (e->seg && e->file)
		return false;
	if (!e->seg && e->off)
		return false; /* inline or own file: from offset 0 */
	if (e->seg && e->off % CACHE_ALIGN)
		return false; /* punching frees whole blocks only */
	if (e->tick > c->tick)
		return false; /* the LRU clock only moves forward */
	return true;
}

/* One segment and the bytes of the entries found in it. */
struct seg_sum {
	const struct blob_seg *s;
	uint64_t bytes;
};

static int seg_sum_cmp(const void *a, const void *b)
{
	const struct blob_seg *x = ((const struct seg_sum *)a)->s;
	const struct blob_seg *y = ((const struct seg_sum *)b)->s;

	return x < y ? -1 : x > y;
}

/*
 * Under c->lock: a segment's live_bytes is the bytes of its committed
 * entries plus its puts' reservations, so it is at least the first, and
 * the sum of the second over all segments is within c->reserved (which
 * also holds the puts that go inline or to files of their own). Every
 * entry's segment is one of c->segs: a segment leaves that list only
 * when no live byte is left in it.
 */
static bool segs_ok(const struct cache *c)
{
	struct seg_sum *sums, key;
	uint64_t live = 0, in_segs = 0;
	size_t n = 0, i = 0;
	bool ok = true;

	for (const struct blob_seg *s = c->segs; s; s = s->next)
		n++;
	sums = calloc(n ? n : 1, sizeof(*sums));
	if (!sums)
		return true; /* see the top */
	for (const struct blob_seg *s = c->segs; s; s = s->next) {
		sums[i++].s = s;
		live += s->live_bytes;
	}
	qsort(sums, n, sizeof(*sums), seg_sum_cmp);
	for (uint32_t s = 0; ok && s < c->tab.n_slots; s++) {
		const struct cache_ent *e = c->tab.slots[s];
		struct seg_sum *hit;

		if (!e || !e->seg)
			continue;
		key.s = e->seg;
		hit = bsearch(&key, sums, n, sizeof(*sums), seg_sum_cmp);
		if (!hit)
			ok = false;
		else
			hit->bytes += e->size;
		in_segs += e->size;
	}
	for (i = 0; ok && i < n; i++)
		ok = sums[i].bytes <= sums[i].s->live_bytes;
	free(sums);
	return ok && live >= in_segs && live - in_segs <= c->reserved;
}

/*
 * Under c->lock: the holds (files handed out by cache_open_file_held()).
 * - each is held at least once, and names a distinct entry id;
 * - one not gone names an entry of the table, which is marked held; one
 *   gone names none (its entry left, and ids are not reused);
 * - held_bytes is the sum of the sizes of those gone;
 * - every entry marked held has a hold.
 */
static bool holds_ok(const struct cache *c)
{
	uint64_t gone_bytes = 0;
	size_t n_live = 0, n_held = 0;

	for (const struct cache_hold *h = c->holds; h; h = h->next) {
		const struct cache_ent *e = tab_by_id(&c->tab, h->id);

		if (!h->n)
			return false;
		for (const struct cache_hold *g = h->next; g; g = g->next)
			if (g->id == h->id)
				return false;
		if (h->gone) {
			if (e)
				return false;
			gone_bytes += h->size;
		} else {
			if (!e || !e->held || e->size != h->size)
				return false;
			n_live++;
		}
	}
	for (uint32_t s = 0; s < c->tab.n_slots; s++)
		if (c->tab.slots[s] && c->tab.slots[s]->held)
			n_held++;
	return gone_bytes == c->held_bytes && n_held == n_live;
}

/*
 * Under c->lock: the checker thread's queue is a ring within its bounds,
 * and every entry marked queued (ahead) has its id in it (an id in it may
 * have left the table since: the thread passes over it). What it counts
 * as checked and unread is at most the entries marked so (cache_ok()):
 * less once it took them as read (CACHE_AHEAD_IDLE_S).
 */
static bool ahead_ok(const struct cache *c, const struct cache_ent *e)
{
	if (!e->ahead)
		return true;
	for (unsigned i = 0; i < c->ahead_n; i++)
		if (c->ahead_q[(c->ahead_head + i) % CACHE_AHEAD_QUEUE] ==
		    e->id)
			return true;
	return false;
}

/*
 * Under c->lock: the whole cache. used is the sum of the entries' sizes;
 * the table, the entries' places, the segments' accounting, the holds and
 * the checker thread's queue are as above; the capacity never passes what was
 * configured (a full disk only lowers it, cache_recheck_disk() raises it back
 * at most that far).
 */
bool cache_ok(struct cache *c)
{
	size_t every = c->tab.n_ents / CACHE_CHECK_FULL + 1;
	uint64_t used = 0, unread = 0;

	if (c->n_checks++ % every)
		return true;

	if (!tab_ok(&c->tab) || c->ahead_n > CACHE_AHEAD_QUEUE ||
	    c->ahead_head >= CACHE_AHEAD_QUEUE)
		return false;
	for (uint32_t s = 0; s < c->tab.n_slots; s++) {
		const struct cache_ent *e = c->tab.slots[s];

		if (!e)
			continue;
		if (!ent_place_ok(c, e) || !ahead_ok(c, e))
			return false;
		used += e->size;
		unread += e->ahead_unread ? e->size : 0;
	}
	return used == c->used && c->ahead_unread <= unread &&
	       c->capacity <= c->capacity_cfg && segs_ok(c) && holds_ok(c);
}
