/*
 * cache/evict.c - making room: admission, and the choice of victims.
 *
 * Owns c->reserved (bytes promised to puts in progress). When an insert
 * would pass the capacity, the entries whose next use (as the caller's
 * callback tells) is furthest go first (Belady), the least recently used
 * first among those no hint mentions.
 *
 * Asking the callback about every entry is O(n) (and the engine takes a
 * lock per call): a cache of a million objects cannot be sorted for an
 * insert, nor every few percent of one (such a scan stalled the writer
 * for tens of milliseconds). So each step of an eviction asks about a
 * random sample of CACHE_EVICT_SAMPLE entries and takes the best victim
 * among them: the cost of a step does not depend on the cache's size. A
 * cache of up to CACHE_EVICT_SAMPLE entries is examined whole, so there
 * the choice is exact; in a larger one it is the furthest of a sample,
 * which the victims of a steady state (objects read in this epoch, needed
 * only in the next) dominate. Next uses are asked fresh, just before an
 * entry goes. Nothing is evicted ahead of need: victims are chosen until
 * they free enough, then dropped together.
 *
 * Invariants:
 * - An entry whose current next use is sooner than the incoming object's
 *   is never evicted for it. If the victims found are not enough, nothing
 *   is evicted and the object is not admitted (-ENOSPC); in a cache
 *   examined whole that refusal is exact, in a larger one it is decided
 *   on CACHE_EVICT_TRIES samples.
 * - Files held open (cache_open_file_held()) are never victims: evicting
 *   one frees no block. Those whose entries left anyway count in
 *   held_bytes, which takes capacity as used does.
 * - used + reserved + held_bytes <= capacity after each reservation, except
 * when the capacity was lowered under it (disk full): the next one evicts. A
 *   lowered capacity is raised again, at a reservation, when the disk
 *   has room (cache_recheck_disk()).
 * - Callbacks run with only evict_lock held, which nothing a reader does
 *   needs; names are copied under the lock, so an entry dropped
 *   meanwhile is only a candidate that is gone when asked to leave.
 */
#include "cache/cache_internal.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* 32 entries asked per step: 32 callbacks (about 3 us each, a lock of
 * the engine) whatever the cache holds; enough that the furthest of them
 * is among the furthest 10% with probability 1 - 0.9^32 = 97%. */
#define CACHE_EVICT_SAMPLE 32
/* Samples without a victim before an insert is refused in a cache too
 * large to examine whole. */
#define CACHE_EVICT_TRIES 4
/* Slots probed per sample entry before a sparse table gives up. */
#define CACHE_EVICT_PROBES 8

/* An entry as a sample saw it; the key copied under the lock. */
struct evict_cand {
	uint64_t id;   /* to find it again under the lock */
	uint64_t tick; /* LRU order among equal next uses */
	uint64_t size;
	uint64_t next_use; /* asked outside the lock */
	uint32_t oid;	   /* the caller's id, or CACHE_NO_ID */
	uint16_t key_len;
	char key[CACHE_KEY_MAX];
};

/* Under c->lock: reserves @size if it fits. -EAGAIN: it needs room. */
static int evict_fit_locked(struct cache *c, uint64_t size)
{
	if (size > c->capacity)
		return -ENOSPC;
	if (c->used + c->reserved + c->held_bytes + size > c->capacity)
		return -EAGAIN;
	c->reserved += size;
	cache_assert(cache_ok(c));
	return 0;
}

/* xorshift64: the sample's slots. Under evict_lock. */
static uint64_t evict_rand(struct cache *c)
{
	uint64_t x = c->ev_rng ? c->ev_rng : 0x9e3779b97f4a7c15ull;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return c->ev_rng = x;
}

static bool evict_chosen(const uint64_t *ids, size_t n, uint64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Under c->lock: copies @e into @cand. */
static void evict_take(struct evict_cand *cand, const struct cache_ent *e)
{
	cand->id = e->id;
	cand->tick = e->tick;
	cand->size = e->size;
	cand->oid = atomic_load_explicit(&e->oid, memory_order_relaxed);
	cand->key_len = e->key_len;
	memcpy(cand->key, e->name, e->key_len);
}

/*
 * Under evict_lock: fills c->ev_cand with up to CACHE_EVICT_SAMPLE
 * entries not in @skip (@n_skip ids), with their current next uses.
 * *@whole says whether they are every entry of the cache. Returns how
 * many.
 */
static size_t evict_sample(struct cache *c, const uint64_t *skip, size_t n_skip,
			   bool *whole)
{
	struct evict_cand *cand = c->ev_cand;
	cache_next_use_cb nu;
	void *nu_arg;
	size_t n = 0;

	pthread_mutex_lock(&c->lock);
	*whole = c->tab.n_ents <= CACHE_EVICT_SAMPLE;
	if (*whole) {
		for (uint32_t s = 0; s < c->tab.n_slots; s++) {
			const struct cache_ent *e = c->tab.slots[s];

			if (e && !e->held && !evict_chosen(skip, n_skip, e->id))
				evict_take(&cand[n++], e);
		}
	} else {
		for (size_t probes = 0;
		     n < CACHE_EVICT_SAMPLE &&
		     probes < CACHE_EVICT_SAMPLE * CACHE_EVICT_PROBES;
		     probes++) {
			const struct cache_ent *e =
			    c->tab.slots[evict_rand(c) % c->tab.n_slots];
			bool dup = false;

			if (!e || e->held || evict_chosen(skip, n_skip, e->id))
				continue;
			for (size_t k = 0; k < n && !dup; k++)
				dup = cand[k].id == e->id;
			if (!dup)
				evict_take(&cand[n++], e);
		}
	}
	nu = c->next_use;
	nu_arg = c->next_use_arg;
	pthread_mutex_unlock(&c->lock);

	for (size_t i = 0; i < n; i++) {
		uint32_t was = cand[i].oid;

		cand[i].next_use =
		    nu ? nu(nu_arg, &cand[i].oid, cand[i].key, cand[i].key_len)
		       : CACHE_NEVER;
		if (cand[i].oid == was)
			continue;
		/* Resolved from its key: the next sample asks by id. */
		pthread_mutex_lock(&c->lock);
		struct cache_ent *e = tab_by_id(&c->tab, cand[i].id);

		if (e)
			atomic_store_explicit(&e->oid, cand[i].oid,
					      memory_order_relaxed);
		pthread_mutex_unlock(&c->lock);
	}
	return n;
}

/*
 * Tells the eviction callback (cache_set_evicted()) that the objects of
 * @oids (@n, the victims' caller's ids) left. Under evict_lock only.
 */
static void evict_tell(struct cache *c, const uint32_t *oids, size_t n)
{
	cache_evicted_cb cb;
	void *arg;

	pthread_mutex_lock(&c->lock);
	cb = c->evicted;
	arg = c->evicted_arg;
	pthread_mutex_unlock(&c->lock);
	for (size_t i = 0; cb && i < n; i++)
		if (oids[i] != CACHE_NO_ID)
			cb(arg, oids[i]);
}

/*
 * Drops the entries @ids that still exist and reserves @size: 0, or
 * -EAGAIN when others took the room meanwhile.
 */
static int evict_drop(struct cache *c, const uint64_t *ids, size_t n,
		      uint64_t size)
{
	struct cache_ent *victims = NULL, *e;
	int ret, rc = 0;

	pthread_mutex_lock(&c->wlock);
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++) {
		e = tab_by_id(&c->tab, ids[i]);
		if (e) {
			cache_unlink_locked(c, e, &victims);
			c->evictions++;
		}
	}
	ret = evict_fit_locked(c, size);
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
	if (victims) {
		rc = idx_apply(c->ix, NULL, NULL, victims);
		if (rc)
			log_warn("cache: cannot delete evicted objects from "
				 "the index: %s",
				 strerror(-rc));
	}
	pthread_mutex_unlock(&c->wlock);
	/* The blocks of victims still in the index must stay readable. */
	if (victims)
		cache_finish_drop(c, victims, rc == 0);
	return ret;
}

/* Under evict_lock: evicts until @size fits, or refuses it. */
static int evict_make_room(struct cache *c, uint64_t size, uint64_t next_use)
{
	uint64_t *ids = NULL, freed = 0;
	uint32_t *oids = NULL; /* the victims' caller's ids, beside ids */
	size_t n_ids = 0, cap_ids = 0;
	int tries = 0, ret;

	if (!c->ev_cand) {
		c->ev_cand = malloc(CACHE_EVICT_SAMPLE * sizeof(*c->ev_cand));
		if (!c->ev_cand)
			return -ENOMEM;
	}
	for (;;) {
		struct evict_cand *cand = c->ev_cand, *best = NULL;
		uint64_t need;
		size_t n;
		bool whole;

		pthread_mutex_lock(&c->lock);
		ret = evict_fit_locked(c, size);
		need =
		    c->used + c->reserved + c->held_bytes + size - c->capacity;
		pthread_mutex_unlock(&c->lock);
		if (ret != -EAGAIN)
			break;
		if (freed >= need) {
			ret = evict_drop(c, ids, n_ids, size);
			evict_tell(c, oids, n_ids);
			if (ret != -EAGAIN)
				break;
			/* Others took the room meanwhile: choose again. */
			n_ids = 0;
			freed = 0;
			continue;
		}

		n = evict_sample(c, ids, n_ids, &whole);
		for (size_t i = 0; i < n; i++) {
			if (cand[i].next_use < next_use)
				continue; /* needed sooner: never for this one
					   */
			if (!best || cand[i].next_use > best->next_use ||
			    (cand[i].next_use == best->next_use &&
			     cand[i].tick < best->tick))
				best = &cand[i];
		}
		if (!best) {
			if (whole || ++tries >= CACHE_EVICT_TRIES) {
				/* Keep them all for objects needed sooner. */
				ret = -ENOSPC;
				break;
			}
			continue;
		}
		if (n_ids == cap_ids) {
			size_t cap = cap_ids ? cap_ids * 2 : 16;
			void *p = realloc(ids, cap * sizeof(*ids));
			void *q = p ? realloc(oids, cap * sizeof(*oids)) : NULL;

			if (p)
				ids = p;
			if (!q) {
				ret = -ENOMEM;
				break;
			}
			oids = q;
			cap_ids = cap;
		}
		oids[n_ids] = best->oid;
		ids[n_ids++] = best->id;
		freed += best->size;
	}
	free(ids);
	free(oids);
	return ret;
}

/*
 * Reserves @size bytes of capacity for an object whose next use is
 * @next_use, evicting as needed. 0, -ENOSPC (not admitted) or -ENOMEM.
 */
int evict_reserve(struct cache *c, uint64_t size, uint64_t next_use)
{
	int ret;

	cache_recheck_disk(c);
	pthread_mutex_lock(&c->lock);
	ret = evict_fit_locked(c, size);
	pthread_mutex_unlock(&c->lock);
	if (ret != -EAGAIN)
		return ret;

	pthread_mutex_lock(&c->evict_lock);
	ret = evict_make_room(c, size, next_use);
	pthread_mutex_unlock(&c->evict_lock);
	return ret;
}

/* Returns a reservation that will not be used. */
void evict_unreserve(struct cache *c, uint64_t size)
{
	pthread_mutex_lock(&c->lock);
	c->reserved -= size;
	cache_assert(cache_ok(c));
	pthread_mutex_unlock(&c->lock);
}
