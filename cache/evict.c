/*
 * cache/evict.c - making room: admission, and the choice of victims.
 *
 * Owns c->reserved (bytes promised to puts in progress) and the victim
 * queue. When an insert would pass the capacity, the entries whose next
 * use (as the caller's callback tells) is furthest go first (Belady),
 * the least recently used first among those no hint mentions.
 *
 * Asking the callback about every entry is O(n) (and the engine takes a
 * lock per call), too much for every insert of a cache holding millions
 * of objects. So a scan sorts all entries once into a victim queue, and
 * later inserts take their victims from its head. The order ages as the
 * reads move on, so the queue is used for at most CACHE_EVQ_PCT of the
 * capacity before a new scan, and each victim's next use is asked again,
 * fresh, just before it goes: the rule below always holds on current
 * values. Nothing is evicted ahead of need: an early eviction would
 * throw out an object the hint still wants for one it wants later.
 *
 * Invariants:
 * - An entry whose current next use is sooner than the incoming object's
 *   is never evicted for it. If the rest is not enough, nothing is
 *   evicted and the object is not admitted (-ENOSPC); such a refusal is
 *   always decided on a fresh scan.
 * - used + reserved <= capacity after each reservation, except when the
 *   capacity was lowered under it (disk full): the next one evicts.
 * - Callbacks run with only evict_lock held, which nothing a reader does
 *   needs. During a scan the names they are given stay valid because
 *   entries dropped meanwhile are parked on c->graveyard.
 */
#include "cache/cache_internal.h"
#include "common/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The queue of one scan serves evictions of up to 5% of the capacity:
 * a scan per 5% written keeps its O(n) cost small next to the writes,
 * and its order only a little behind the reads. */
#define CACHE_EVQ_PCT 5
/* A scan more within one insert means the queue misled us; a third
 * could not know more than the second. */
#define CACHE_EVICT_SCANS_MAX 2

/* Under c->lock: frees a dropped entry, or parks it during a scan. */
void cache_ent_retire(struct cache *c, struct cache_ent *e)
{
	if (c->scanning) {
		e->hnext = c->graveyard;
		c->graveyard = e;
	} else {
		free(e);
	}
}

/* Under c->lock: reserves @size if it fits. -EAGAIN: it needs room. */
static int evict_fit_locked(struct cache *c, uint64_t size)
{
	if (size > c->capacity)
		return -ENOSPC;
	if (c->used + c->reserved + size > c->capacity)
		return -EAGAIN;
	c->reserved += size;
	return 0;
}

/* Furthest next use first; then least recently used; then oldest id. */
static int evict_cmp(const void *a, const void *b)
{
	const struct evict_cand *x = a, *y = b;

	if (x->next_use != y->next_use)
		return x->next_use > y->next_use ? -1 : 1;
	if (x->tick != y->tick)
		return x->tick < y->tick ? -1 : 1;
	return (x->id > y->id) - (x->id < y->id);
}

/* Under evict_lock: replaces the victim queue with a fresh, sorted one. */
static int evict_scan(struct cache *c)
{
	struct cache_ent *grave, *next;
	struct evict_cand *cand;
	cache_next_use_cb nu;
	void *nu_arg;
	size_t n = 0;

	free(c->evq);
	c->evq = NULL;
	c->evq_n = c->evq_pos = 0;

	pthread_mutex_lock(&c->lock);
	cand = malloc((c->tab.n_ents + 1) * sizeof(*cand));
	if (!cand) {
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	for (uint32_t s = 0; s < c->tab.n_slots; s++) {
		struct cache_ent *e = c->tab.slots[s];

		if (!e)
			continue;
		cand[n].e = e;
		cand[n].id = e->id;
		cand[n].tick = e->tick;
		n++;
	}
	c->scanning = true;
	c->evq_budget = c->capacity / 100 * CACHE_EVQ_PCT;
	nu = c->next_use;
	nu_arg = c->next_use_arg;
	pthread_mutex_unlock(&c->lock);

	/* An entry's caller id, once resolved from its key, is kept: the
	 * next scan asks by id. Entries retired meanwhile wait in the
	 * graveyard, so cand[].e stays valid until the scan ends. */
	for (size_t i = 0; i < n; i++) {
		struct cache_ent *e = cand[i].e;
		uint32_t oid = atomic_load_explicit(&e->oid,
						    memory_order_relaxed);
		uint32_t was = oid;

		cand[i].next_use = nu ? nu(nu_arg, &oid, e->name, e->key_len)
				      : CACHE_NEVER;
		if (oid != was)
			atomic_store_explicit(&e->oid, oid,
					      memory_order_relaxed);
	}

	pthread_mutex_lock(&c->lock);
	c->scanning = false;
	grave = c->graveyard;
	c->graveyard = NULL;
	pthread_mutex_unlock(&c->lock);
	for (; grave; grave = next) {
		next = grave->hnext;
		free(grave);
	}
	/* From here on cand[].e may dangle; only ids are used. */
	qsort(cand, n, sizeof(*cand), evict_cmp);
	c->evq = cand;
	c->evq_n = n;
	return 0;
}

/*
 * The current next use and size of entry @id; false when it is gone.
 * The key is copied under the lock, the callback runs outside it.
 */
static bool evict_ask(struct cache *c, uint64_t id, uint64_t *next_use,
		      uint64_t *size)
{
	char key[CACHE_KEY_MAX];
	struct cache_ent *e;
	cache_next_use_cb nu;
	void *nu_arg;
	size_t key_len;
	uint32_t oid;

	pthread_mutex_lock(&c->lock);
	e = tab_by_id(&c->tab, id);
	if (e) {
		key_len = e->key_len;
		memcpy(key, e->name, key_len);
		*size = e->size;
		oid = atomic_load_explicit(&e->oid, memory_order_relaxed);
	}
	nu = c->next_use;
	nu_arg = c->next_use_arg;
	pthread_mutex_unlock(&c->lock);
	if (!e)
		return false;
	/* The scan resolved the ids of entries it saw; one put since is
	 * asked by key, and not remembered (e may be gone by now). */
	*next_use = nu ? nu(nu_arg, &oid, key, key_len) : CACHE_NEVER;
	return true;
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
	uint64_t *ids = NULL;
	size_t cap_ids = 0;
	int scans = 0, ret;

	for (;;) {
		uint64_t need, freed = 0, nu, sz;
		size_t n_ids = 0, start;

		pthread_mutex_lock(&c->lock);
		ret = evict_fit_locked(c, size);
		need = c->used + c->reserved + size - c->capacity;
		pthread_mutex_unlock(&c->lock);
		if (ret != -EAGAIN)
			break;
		if (c->evq_pos >= c->evq_n || !c->evq_budget) {
			ret = scans < CACHE_EVICT_SCANS_MAX ? evict_scan(c)
							    : -ENOSPC;
			if (ret)
				break;
			scans++;
		}

		start = c->evq_pos;
		while (freed < need && c->evq_pos < c->evq_n) {
			uint64_t id = c->evq[c->evq_pos].id;

			if (!evict_ask(c, id, &nu, &sz)) {
				c->evq_pos++; /* gone since the scan */
				continue;
			}
			if (nu < next_use)
				break; /* needed sooner: so is the rest */
			if (n_ids == cap_ids) {
				size_t cap = cap_ids ? cap_ids * 2 : 16;
				void *p = realloc(ids, cap * sizeof(*ids));

				if (!p)
					break;
				ids = p;
				cap_ids = cap;
			}
			ids[n_ids++] = id;
			freed += sz;
			c->evq_pos++;
		}
		if (freed < need) {
			/* Keep these for an object needed sooner. */
			c->evq_pos = start;
			if (scans) {
				ret = -ENOSPC;
				break;
			}
			c->evq_budget = 0; /* decide on a fresh scan */
			continue;
		}
		c->evq_budget = c->evq_budget > freed ? c->evq_budget - freed
						      : 0;
		ret = evict_drop(c, ids, n_ids, size);
		if (ret != -EAGAIN)
			break;
	}
	free(ids);
	return ret;
}

/*
 * Reserves @size bytes of capacity for an object whose next use is
 * @next_use, evicting as needed. 0, -ENOSPC (not admitted) or -ENOMEM.
 */
int evict_reserve(struct cache *c, uint64_t size, uint64_t next_use)
{
	int ret;

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
	pthread_mutex_unlock(&c->lock);
}
