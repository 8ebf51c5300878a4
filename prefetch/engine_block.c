/*
 * prefetch/engine_block.c - objects cached by blocks: a shard, a zip or an
 * LMDB file larger than max_object_mem is not fetched whole (it would not
 * fit the fetch memory) nor read through uncached (every epoch would pay
 * the origin again): its bytes are blocks of part_size, and each block is
 * an object of the engine's own, a *slot*. Slots follow the caller's ids
 * (pf_config.n_ids .. n_slots - 1), so that everything the engine does to
 * an object it does to a block: fetched whole as one GET (a Range of the
 * object with If-Match: a changed object reads ESTALE), committed to the
 * cache by the writer (kill -9 loses no committed block), evicted by its
 * own next use in the hints, found again after a remount. This file
 * gives the slots their numbers, names and keys, turns byte ranges of
 * hints into slots, and maps a read of the object onto its blocks.
 *
 * A block's cache key is the object's key, a 0xff byte, then
 * "B<block size>:<index>". 0xff is never in a UTF-8 key, so no object of
 * the bucket can have a block's name, and the block size in the name
 * keeps a block of one size from being read as another.
 *
 * Readers. A read of the object reads its blocks; a reader that reads on
 * from where its latest read of the object ended asks the next
 * PF_BLOCK_AHEAD blocks ahead (a sequential reader keeps its speed with
 * no hint), readers told apart by where they read (PF_BLOCK_CURSORS),
 * so that one jumping around does not stop another's read-ahead; a read
 * that jumps into a block not cached, not coming and named by no hint
 * fetches the pages under it alone (pf_read_range()). Each block a read enters
 * consumes a hint entry of that block, as an open consumes one of a file
 * (order.h).
 *
 * Invariant: the slots of blocked object i are blocked[i].base ..
 * blocked[i].base + n - 1, ascending in i, all below n_slots; a slot's
 * block size is part_size but for each object's last one.
 */
#include "prefetch/engine_internal.h"
#include "prefetch/order.h"
#include "cache/cache.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest block suffix: 0xff, 'B', 20 digits, ':', 10 digits. */
#define BLOCK_SUFFIX_MAX 34

int pf_blocks_init(struct pf *pf)
{
	uint64_t bs = pf->cfg.part_size;
	uint64_t slots = pf->cfg.n_ids;
	uint32_t cap = 0;

	pf->n_slots = pf->cfg.n_ids;
	if (!pf->cfg.size)
		return 0;
	for (uint32_t id = 0; id < pf->cfg.n_ids; id++) {
		uint64_t size = pf->cfg.size(pf->cfg.arg, id);
		uint64_t n = (size + bs - 1) / bs;
		struct pf_blocked *b;

		if (size <= pf->cfg.max_object_mem)
			continue;
		/* Slots are 32-bit ids, and PF_NO_ID is not one. */
		if (slots + n >= PF_NO_ID) {
			log_warn("too many blocks of large objects: those "
				 "from id %" PRIu32 " on are read through",
				 id);
			break;
		}
		if (pf->n_blocked == cap) {
			cap = cap ? 2 * cap : 64;
			b = realloc(pf->blocked, cap * sizeof(*b));
			if (!b)
				return -ENOMEM;
			pf->blocked = b;
		}
		b = &pf->blocked[pf->n_blocked++];
		*b = (struct pf_blocked){.id = id,
					 .base = (uint32_t)slots,
					 .n = (uint32_t)n,
					 .size = size};
		slots += n;
	}
	pf->n_slots = (uint32_t)slots;
	return 0;
}

struct pf_blocked *pf_blocked_of(const struct pf *pf, uint32_t id)
{
	uint32_t lo = 0, hi = pf->n_blocked;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (pf->blocked[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < pf->n_blocked && pf->blocked[lo].id == id ? &pf->blocked[lo]
							      : NULL;
}

/* The blocked object slot @slot (>= n_ids) is a block of. */
static const struct pf_blocked *owner_of(const struct pf *pf, uint32_t slot)
{
	uint32_t lo = 0, hi = pf->n_blocked;

	/* The last one whose base is at or below @slot. */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (pf->blocked[mid].base <= slot)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? &pf->blocked[lo - 1] : NULL;
}

/* The bytes of block slot @slot: part_size, or less for an object's last. */
static uint64_t block_size(const struct pf *pf, uint32_t slot)
{
	const struct pf_blocked *b = owner_of(pf, slot);
	uint64_t bs = pf->cfg.part_size, at;

	if (!b)
		return bs;
	at = (uint64_t)(slot - b->base) * bs;
	return b->size - at < bs ? b->size - at : bs;
}

/*
 * The bytes slot @slot takes in the cache, what the prefetch's lead is
 * counted in (an order_cost_cb on @arg, the struct pf): a block's, or an
 * object's listed size; 0 for one not cached whole (read through). Any
 * thread, mu held or not: the size callback is lock-free, and the describe
 * callback, asked without one (a unit test's engine), is thread-safe.
 */
uint64_t pf_slot_size(void *arg, uint32_t slot)
{
	struct pf *pf = arg;
	struct pf_object o;
	char key[4096];
	uint64_t size;

	if (slot >= pf->cfg.n_ids)
		return slot < pf->n_slots ? block_size(pf, slot) : 0;
	if (pf->cfg.size)
		size = pf->cfg.size(pf->cfg.arg, slot);
	else
		size = pf->cfg.describe(pf->cfg.arg, slot, key, sizeof(key), &o)
			   ? 0
			   : o.size;
	return size <= pf->cfg.max_object_mem ? size : 0;
}

int pf_describe(struct pf *pf, uint32_t slot, char *keybuf, size_t cap,
		struct pf_object *o)
{
	const struct pf_blocked *b;
	uint64_t bs = pf->cfg.part_size, idx;
	int rc, k;

	if (slot < pf->cfg.n_ids) {
		rc = pf->cfg.describe(pf->cfg.arg, slot, keybuf, cap, o);
		if (!rc) {
			o->base = 0;
			o->name_len = o->key_len;
		}
		return rc;
	}
	if (slot >= pf->n_slots || !(b = owner_of(pf, slot)))
		return -ENOENT;
	if (cap < BLOCK_SUFFIX_MAX + 1)
		return -ENAMETOOLONG;
	rc = pf->cfg.describe(pf->cfg.arg, b->id, keybuf,
			      cap - BLOCK_SUFFIX_MAX, o);
	if (rc)
		return rc;
	idx = slot - b->base;
	/* The listing is the mount's snapshot: the size it gave at start. */
	if (idx * bs >= o->size)
		return -ENOENT;
	k = snprintf(keybuf + o->key_len, BLOCK_SUFFIX_MAX + 1,
		     "\xff"
		     "B%" PRIu64 ":%" PRIu64,
		     bs, idx);
	o->name_len = o->key_len;
	o->key = keybuf;
	o->key_len += (size_t)k;
	o->base = idx * bs;
	o->size = o->size - o->base < bs ? o->size - o->base : bs;
	return 0;
}

uint32_t pf_key_slot(struct pf *pf, const char *key, size_t key_len)
{
	const char *ff = memrchr(key, 0xff, key_len);
	char tail[BLOCK_SUFFIX_MAX + 1];
	unsigned long long bs, idx;
	const struct pf_blocked *b;
	uint32_t id;
	int used = 0;

	if (!ff)
		return pf->cfg.key_id(pf->cfg.arg, key, key_len);
	if ((size_t)(key + key_len - ff) > BLOCK_SUFFIX_MAX)
		return PF_NO_ID;
	memcpy(tail, ff + 1, (size_t)(key + key_len - ff - 1));
	tail[key + key_len - ff - 1] = '\0';
	/* A block of another size, or a name we did not write: no slot
	 * (it is evicted first, as an entry no hint names). */
	if (sscanf(tail, "B%llu:%llu%n", &bs, &idx, &used) != 2 ||
	    (size_t)used != strlen(tail) || bs != pf->cfg.part_size)
		return PF_NO_ID;
	id = pf->cfg.key_id(pf->cfg.arg, key, (size_t)(ff - key));
	b = id == PF_NO_ID ? NULL : pf_blocked_of(pf, id);
	return b && idx < b->n ? b->base + (uint32_t)idx : PF_NO_ID;
}

size_t pf_slots_of_range(const struct pf *pf, uint32_t id, uint64_t off,
			 uint64_t len, uint32_t *out, size_t max)
{
	const struct pf_blocked *b = pf_blocked_of(pf, id);
	uint64_t bs = pf->cfg.part_size, first, last;
	size_t n = 0;

	if (id >= pf->cfg.n_ids)
		return 0;
	if (!b) {
		if (max)
			out[n++] = id;
		return n;
	}
	first = off / bs;
	last = len == PF_RANGE_WHOLE || off + len < off ? b->n - 1
							: (off + len - 1) / bs;
	if (first >= b->n || !len)
		return 0;
	if (last >= b->n)
		last = b->n - 1;
	for (uint64_t k = first; k <= last && n < max; k++)
		out[n++] = b->base + (uint32_t)k;
	return n;
}

/* A block's hinted bytes, summed over a hint's ranges. */
struct cover {
	uint32_t slot;
	uint64_t bytes;
};

static int cover_cmp(const void *a, const void *b)
{
	const struct cover *x = a, *y = b;

	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

/* Appends what [off, off + len) of @b covers of each of its blocks. */
static struct cover *cover_add(const struct pf *pf, const struct pf_blocked *b,
			       uint64_t off, uint64_t len, struct cover *cv,
			       size_t *n, size_t *cap)
{
	uint64_t bs = pf->cfg.part_size;
	uint64_t end =
	    len == PF_RANGE_WHOLE || off + len < off || off + len > b->size
		? b->size
		: off + len;

	for (uint64_t at = off; at < end;) {
		uint64_t k = at / bs,
			 stop = (k + 1) * bs < end ? (k + 1) * bs : end;

		if (*n == *cap) {
			struct cover *nc;

			*cap = *cap ? 2 * *cap : 256;
			nc = realloc(cv, *cap * sizeof(*nc));
			if (!nc) {
				free(cv);
				return NULL;
			}
			cv = nc;
		}
		cv[(*n)++] = (struct cover){b->base + (uint32_t)k, stop - at};
		at = stop;
	}
	return cv;
}

/* The bytes of slot @slot in the sorted, summed @cv (@n of them). */
static uint64_t cover_of(const struct cover *cv, size_t n, uint32_t slot)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (cv[mid].slot < slot)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && cv[lo].slot == slot ? cv[lo].bytes : 0;
}

/*
 * The slots of @n whole objects, in order (a malloc'd array, *@out_n
 * long; NULL: no memory): an object's id, or each block of a large one
 * (pf_hint(), pf_warm()).
 */
uint32_t *pf_ids_to_slots(const struct pf *pf, const uint32_t *ids, size_t n,
			  size_t *out_n)
{
	size_t cap = n ? n : 1, k = 0;
	uint32_t *s;

	for (size_t i = 0; i < n; i++) {
		const struct pf_blocked *b = pf_blocked_of(pf, ids[i]);

		cap += b ? b->n : 0;
	}
	s = malloc(cap * sizeof(*s));
	for (size_t i = 0; s && i < n; i++)
		k += pf_slots_of_range(pf, ids[i], 0, PF_RANGE_WHOLE, s + k,
				       cap - k);
	*out_n = k;
	return s;
}

/*
 * The slots of @n hint entries with ranges (pf_hint_ranges()), in order
 * (a malloc'd array, *@out_n long; NULL: no memory): an object's id, or
 * the blocks a range of a large object covers. A slot that repeats the
 * one before it is one entry (members of a zip in one block, ranges of an
 * object fetched whole), and a block the hint's ranges cover less than
 * 1/PF_BLOCK_SPARSE of is left out (sparse: its reads fetch their pages).
 */
uint32_t *pf_ranges_to_slots(struct pf *pf, const struct pf_range *r, size_t n,
			     size_t *out_n)
{
	size_t cap = n ? n : 1, k = 0, ncv = 0, cvcap = 0, m = 0, w = 0;
	uint32_t *s = malloc(cap * sizeof(*s));
	struct cover *cv = NULL;

	for (size_t i = 0; s && i < n; i++) {
		const struct pf_blocked *b = pf_blocked_of(pf, r[i].id);
		size_t want = b ? b->n : 1;

		if (k + want > cap) {
			uint32_t *ns;

			while (k + want > cap)
				cap *= 2;
			ns = realloc(s, cap * sizeof(*s));
			if (!ns)
				goto oom;
			s = ns;
		}
		k += pf_slots_of_range(pf, r[i].id, r[i].off, r[i].len, s + k,
				       want);
		if (b && !(cv = cover_add(pf, b, r[i].off, r[i].len, cv, &ncv,
					  &cvcap)))
			goto oom;
	}
	if (!s)
		return NULL;
	if (ncv) {
		/* Sum each block's cover: sorted, then runs added up. */
		qsort(cv, ncv, sizeof(*cv), cover_cmp);
		for (size_t i = 0; i < ncv; i++) {
			if (m && cv[m - 1].slot == cv[i].slot)
				cv[m - 1].bytes += cv[i].bytes;
			else
				cv[m++] = cv[i];
		}
	}
	/* In place: the write index never passes the read one. */
	for (size_t i = 0; i < k; i++) {
		uint32_t v = s[i];

		if (v >= pf->cfg.n_ids &&
		    cover_of(cv, m, v) * PF_BLOCK_SPARSE < block_size(pf, v))
			continue;
		if (!w || s[w - 1] != v)
			s[w++] = v;
	}
	*out_n = w;
	free(cv);
	return s;
oom:
	free(cv);
	free(s);
	return NULL;
}

/* Whether a read at @off goes on from one that ended at @end. */
static bool near(uint64_t end, uint64_t off)
{
	return end && off + PF_SEQ_SLACK >= end && off <= end + PF_SEQ_SLACK;
}

/*
 * A read of [off, off + len) of @b: consumes a hint entry of each block it
 * enters (order_streams_note_open()), and for a sequential reader (one
 * that went on exactly from where its cursor ended PF_SEQ_RUN times, its
 * other reads near it: PF_SEQ_SLACK), or one that starts at 0, queues the
 * blocks ahead of it, unless a hint led it there (the hint fetches what
 * it will read). Readers are told apart by cursor (PF_BLOCK_CURSORS): one
 * that jumps takes a cursor of its own, so that a random reader of the object
 * does not stop a sequential one's read-ahead. Returns whether the read is a
 * jump (not sequential, not at 0). mu held.
 */
static bool note_read(struct pf *pf, struct pf_blocked *b, uint64_t off,
		      size_t len)
{
	uint64_t bs = pf->cfg.part_size;
	uint32_t first = (uint32_t)(off / bs);
	uint32_t last = (uint32_t)((off + len - 1) / bs);
	bool moved = false, on = false, seq;
	unsigned c;

	for (c = 0; c < PF_BLOCK_CURSORS && !on; c++)
		on = near(b->end[c], off);
	if (on) {
		c--;
		/* Only blocks past the cursor's are entered anew (a READ
		 * answered late lies behind it). */
		if (first <= (b->end[c] - 1) / bs)
			first = (uint32_t)((b->end[c] - 1) / bs) + 1;
		/* The run counts reads that start where the cursor ended:
		 * most of a sequential reader's, almost none of a random
		 * one's (4 pages in 256 Ki of a 1 GiB object). */
		if (off == b->end[c] && b->run[c] < PF_SEQ_RUN)
			b->run[c]++;
		if (off + len > b->end[c])
			b->end[c] = off + len;
	} else {
		c = b->turn++ % PF_BLOCK_CURSORS;
		b->end[c] = off + len;
		b->next_ra[c] = last + 1;
		b->run[c] = 0;
	}
	for (uint32_t k = first; k <= last; k++) {
		uint32_t slot = b->base + k;
		int who = order_streams_note_open(&pf->hints, slot, pf_now(pf));

		if (who >= 0) {
			pf->opened_by[slot] = (uint8_t)(who + 1);
			moved = true;
		}
	}
	seq = (on && b->run[c] >= PF_SEQ_RUN) || !off;
	/* A reader the hint leads (its block came from a hint entry) has
	 * the hint's blocks fetched for it, and no others: the blocks it
	 * leaves out are not to be read (a zip's members elsewhere). */
	if (seq && !pf->opened_by[b->base + last]) {
		uint32_t to = last + 1 + PF_BLOCK_AHEAD;

		if (b->next_ra[c] < last + 1)
			b->next_ra[c] = last + 1;
		for (; b->next_ra[c] < to && b->next_ra[c] < b->n;
		     b->next_ra[c]++) {
			if (pf->ra_n == PF_RA_MAX) {
				pf->ra_head = (pf->ra_head + 1) % PF_RA_MAX;
				pf->ra_n--;
			}
			pf->ra[(pf->ra_head + pf->ra_n++) % PF_RA_MAX] =
			    b->base + b->next_ra[c];
			moved = true;
		}
	}
	if (moved)
		pf_wake(pf);
	return !seq;
}

size_t pf_pick_read_ahead(struct pf *pf, uint32_t *ids, size_t room)
{
	size_t n = 0;

	while (pf->ra_n && n < room) {
		uint32_t slot = pf->ra[pf->ra_head];

		pf->ra_head = (pf->ra_head + 1) % PF_RA_MAX;
		pf->ra_n--;
		if (!pf->by_id[slot])
			ids[n++] = slot;
	}
	return n;
}

ssize_t pf_block_read(struct pf *pf, struct pf_blocked *b, void *buf,
		      size_t len, uint64_t off, cache_ref_cb cb, void *arg,
		      bool ref_only)
{
	uint64_t bs = pf->cfg.part_size, size = b->size;
	uint32_t first, last;
	char key[4096];
	struct pf_object o;
	char *tmp = NULL;
	size_t done = 0;
	bool jump;
	ssize_t n;

	if (off >= size)
		return ref_only ? -ENODATA : 0;
	if (len > size - off)
		len = (size_t)(size - off);
	if (!len)
		return 0;
	first = (uint32_t)(off / bs);
	last = (uint32_t)((off + len - 1) / bs);
	if (ref_only) {
		/* From the cache alone, in one piece: a read across two
		 * blocks goes the copying way (pf_read_cb()). */
		if (first != last ||
		    pf_describe(pf, b->base + first, key, sizeof(key), &o))
			return -ENODATA;
		n = cache_read_ref(pf->cfg.cache, o.key, o.key_len, o.etag,
				   o.size, len, off - o.base, cb, arg);
		if (n == -ENODATA)
			return n;
		pthread_mutex_lock(&pf->mu);
		note_read(pf, b, off, len);
		pthread_mutex_unlock(&pf->mu);
		rd_add(&pf->rd.reads, 1);
		rd_add(n >= 0 ? &pf->rd.cache_hits : &pf->rd.failed_reads, 1);
		if (n >= 0)
			rd_add(&pf->rd.zero_copy, 1);
		return n;
	}
	pthread_mutex_lock(&pf->mu);
	jump = note_read(pf, b, off, len);
	pthread_mutex_unlock(&pf->mu);
	if (first == last) {
		uint64_t boff = off - (uint64_t)first * bs;

		/* A jump fetches the pages it reads, unless its block is
		 * cached, coming, or hinted (pf_read_range()). */
		n = jump ? pf_read_range(pf, b->base + first, buf, len, boff,
					 cb, arg)
			 : -EAGAIN;
		return n != -EAGAIN ? n
				    : pf_read_slot(pf, b->base + first, buf,
						   len, boff, cb, arg);
	}
	/* Across blocks: each block's bytes into the buffer (a temporary
	 * one for @cb), then one answer. */
	if (cb && !(tmp = malloc(len)))
		return -ENOMEM;
	for (uint32_t k = first; k <= last; k++) {
		uint64_t at = off + done, boff = at - (uint64_t)k * bs;
		size_t want =
		    (size_t)(bs - boff < len - done ? bs - boff : len - done);

		n = pf_read_slot(pf, b->base + k,
				 (char *)(tmp ? tmp : buf) + done, want, boff,
				 NULL, NULL);
		if (n != (ssize_t)want) {
			free(tmp);
			return n < 0 ? n : -EIO;
		}
		done += want;
	}
	if (tmp) {
		struct cache_ref ref = {.fd = -1, .mem = tmp, .len = len};

		n = cb(arg, &ref);
		free(tmp);
		return n;
	}
	return (ssize_t)len;
}

int pf_evict(struct pf *pf, uint32_t id)
{
	const struct pf_blocked *b = pf_blocked_of(pf, id);
	uint32_t from = b ? b->base : id, n = b ? b->n : 1;
	struct pf_object o;
	char key[4096];

	if (id >= pf->cfg.n_ids)
		return -ENOENT;
	for (uint32_t s = from; s < from + n; s++)
		if (!pf_describe(pf, s, key, sizeof(key), &o))
			cache_invalidate(pf->cfg.cache, o.key, o.key_len,
					 o.etag);
	return 0;
}
