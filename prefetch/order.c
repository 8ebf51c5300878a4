/*
 * prefetch/order.c - the hint position index (see order.h): per object,
 * where its occurrences are in the hinted order and how many are consumed;
 * per hint, the oldest unconsumed entry, the newest consumed one and the
 * prefetcher's cursor; the queue of hints those move through; and the
 * streams (one queue per writer) merged by need.
 *
 * Memory is proportional to the hint, not to the listing: the objects a
 * hint names are found through an open-addressing hash of their ids, built
 * from the hint's own entries (a one-line hint costs a few dozen bytes,
 * not three arrays of the 1.3 million listed objects). About 9 bytes per
 * entry plus 32 per distinct object.
 *
 * Invariants, per order:
 * - The occurrences of id i (slot s of the hash) are
 *   pos[slots[s].first .. slots[s].first + slots[s].count), ascending; the
 *   first slots[s].consumed of them are read, the rest are not.
 * - oldest is the first entry with read[] unset; newest is one past the
 *   newest read entry; next_pf >= oldest.
 * - lead_bytes is the cost of the entries in [counted, next_pf) with
 *   read[] unset: what the prefetcher passed and no reader has read yet,
 *   which the cache must hold until they are read.
 * Opens consume in position order per object, so a reader that opens an
 * object twice consumes its first two occurrences, whichever entry it
 * "meant".
 */
#include "prefetch/order.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* An id's entry in the hash: its occurrences and how many are read. */
struct order_slot {
	uint32_t id;	   /* ORDER_EMPTY: a free slot */
	uint32_t first;	   /* its first occurrence's index in pos */
	uint32_t count;	   /* its occurrences */
	uint32_t consumed; /* of those, opened */
};

#define ORDER_EMPTY UINT32_MAX

struct order {
	uint32_t *ids; /* n entries, in reading order */
	size_t n;
	int64_t epoch;
	uint32_t n_ids;		  /* ids are below this */
	struct order_slot *slots; /* mask + 1 of them, at most half used */
	uint32_t mask;
	uint32_t *pos;	     /* n: positions, grouped by id (see top) */
	uint8_t *read;	     /* n: entry opened */
	size_t oldest;	     /* first unopened entry */
	size_t newest;	     /* one past the newest opened entry */
	size_t next_pf;	     /* next entry the prefetcher looks at */
	size_t counted;	     /* the lead's bytes count from this entry on:
				the base of the latest pick */
	uint64_t lead_bytes; /* bytes of the entries in [counted, next_pf)
				not consumed (cost) */
	order_cost_cb cost;  /* an id's bytes; NULL: 0 (no bound) */
	void *cost_arg;
	uint64_t spill;	    /* opens in a row of ids this hint no longer
			       expects (ORDER_SPILL_SWITCH) */
	struct order *next; /* in a queue */
};

void order_destroy(struct order *o)
{
	while (o) {
		struct order *next = o->next;

		free(o->ids);
		free(o->slots);
		free(o->pos);
		free(o->read);
		free(o);
		o = next;
	}
}

/* The slot of @id in @o: its own, or the free one where it would go. */
static struct order_slot *order_slot(const struct order *o, uint32_t id)
{
	/* Fibonacci hashing: listing ids are dense, and neighbours must not
	 * pile up in neighbouring slots. */
	uint32_t i = (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & o->mask;

	while (o->slots[i].id != ORDER_EMPTY && o->slots[i].id != id)
		i = (i + 1) & o->mask;
	return &o->slots[i];
}

/* Builds the position index: a counting sort by id, through the hash. */
struct order *order_create(const uint32_t *ids, size_t n, int64_t epoch,
			   uint32_t n_ids)
{
	struct order *o = calloc(1, sizeof(*o));
	uint32_t next = 0;
	size_t cap = 16;

	if (!o || n > UINT32_MAX / 4)
		goto fail;
	/* At most half full: probes stay short. */
	while (cap < 2 * n)
		cap *= 2;
	o->n = n;
	o->epoch = epoch;
	o->n_ids = n_ids;
	o->mask = (uint32_t)(cap - 1);
	o->ids = malloc((n ? n : 1) * sizeof(*o->ids));
	o->pos = malloc((n ? n : 1) * sizeof(*o->pos));
	o->read = calloc(n ? n : 1, 1);
	o->slots = malloc(cap * sizeof(*o->slots));
	if (!o->ids || !o->pos || !o->read || !o->slots)
		goto fail;
	for (size_t i = 0; i < cap; i++)
		o->slots[i] = (struct order_slot){.id = ORDER_EMPTY};
	if (n)
		memcpy(o->ids, ids, n * sizeof(*ids));
	for (size_t i = 0; i < n; i++) {
		struct order_slot *sl = order_slot(o, ids[i]);

		sl->id = ids[i];
		sl->count++;
	}
	for (size_t i = 0; i < cap; i++) {
		o->slots[i].first = next;
		next += o->slots[i].count;
	}
	/* consumed counts the occurrences placed, then starts again at 0. */
	for (size_t i = 0; i < n; i++) {
		struct order_slot *sl = order_slot(o, ids[i]);

		o->pos[sl->first + sl->consumed++] = (uint32_t)i;
	}
	for (size_t i = 0; i < cap; i++)
		o->slots[i].consumed = 0;
	return o;
fail:
	order_destroy(o);
	return NULL;
}

size_t order_len(const struct order *o)
{
	return o->n;
}

int64_t order_epoch(const struct order *o)
{
	return o->epoch;
}

size_t order_oldest(const struct order *o)
{
	return o->oldest;
}

/* The bytes of entry @at. */
static uint64_t entry_cost(const struct order *o, size_t at)
{
	return o->cost ? o->cost(o->cost_arg, o->ids[at]) : 0;
}

/* Moves the cursor back to entry @at, keeping lead_bytes. */
static void cursor_back(struct order *o, size_t at)
{
	while (o->next_pf > at) {
		o->next_pf--;
		if (o->next_pf >= o->counted && !o->read[o->next_pf])
			o->lead_bytes -= entry_cost(o, o->next_pf);
	}
}

/* Moves where the lead's bytes count from on to @base (never back): the
 * entries the window left behind are no longer the prefetcher's. */
static void count_from(struct order *o, size_t base)
{
	for (; o->counted < base; o->counted++)
		if (o->counted < o->next_pf && !o->read[o->counted])
			o->lead_bytes -= entry_cost(o, o->counted);
}

bool order_consume(struct order *o, uint32_t id)
{
	struct order_slot *sl;
	uint32_t p;

	if (id >= o->n_ids || id == ORDER_EMPTY)
		return false;
	sl = order_slot(o, id);
	if (sl->id != id || sl->consumed >= sl->count)
		return false;
	p = o->pos[sl->first + sl->consumed++];
	o->read[p] = 1;
	if (p >= o->counted && p < o->next_pf)
		o->lead_bytes -= entry_cost(o, p);
	if (p + 1 > o->newest)
		o->newest = p + 1;
	while (o->oldest < o->n && o->read[o->oldest])
		o->oldest++;
	if (o->next_pf < o->oldest)
		o->next_pf = o->oldest;
	return true;
}

size_t order_base(const struct order *o, size_t window)
{
	size_t half = window / 2;
	size_t lag = o->newest > half ? o->newest - half : 0;

	return o->oldest > lag ? o->oldest : lag;
}

uint64_t order_next_pos(const struct order *o, uint32_t id)
{
	const struct order_slot *sl;

	if (id >= o->n_ids || id == ORDER_EMPTY)
		return ORDER_NONE;
	sl = order_slot(o, id);
	return sl->id == id && sl->consumed < sl->count
		   ? o->pos[sl->first + sl->consumed]
		   : ORDER_NONE;
}

/* ---- the queue ------------------------------------------------------------
 */

/* order_ahead(), storing the i-th id at ids[i * stride]. */
static size_t ahead_stride(const struct order *o, size_t window, size_t skip,
			   uint32_t *ids, size_t stride, size_t max)
{
	size_t end = o->oldest + window < o->n ? o->oldest + window : o->n;
	size_t got = 0;

	for (size_t at = o->oldest; at < end && got < max; at++) {
		if (o->read[at])
			continue;
		if (skip)
			skip--;
		else
			ids[stride * got++] = o->ids[at];
	}
	return got;
}

size_t order_ahead(const struct order *o, size_t window, size_t skip,
		   uint32_t *ids, size_t max)
{
	return ahead_stride(o, window, skip, ids, 1, max);
}

void order_queue_init(struct order_queue *q)
{
	q->head = NULL;
}

void order_queue_fini(struct order_queue *q)
{
	order_destroy(q->head);
	q->head = NULL;
}

/* Drops finished or abandoned hints at the head while another follows. */
static void queue_advance(struct order_queue *q)
{
	while (q->head && q->head->next &&
	       (q->head->oldest >= q->head->n ||
		q->head->spill >= ORDER_SPILL_SWITCH)) {
		struct order *o = q->head;

		q->head = o->next;
		o->next = NULL;
		order_destroy(o);
	}
}

struct order *order_queue_add(struct order_queue *q, struct order *o,
			      bool replace)
{
	struct order *old = NULL, **tail;

	if (replace) {
		old = q->head;
		q->head = NULL;
	}
	for (tail = &q->head; *tail; tail = &(*tail)->next)
		;
	*tail = o;
	queue_advance(q);
	return old;
}

bool order_queue_note_open(struct order_queue *q, uint32_t id)
{
	struct order *o = q->head;
	bool took = false;

	if (o && order_consume(o, id)) {
		/* Its readers are still in it: what spilled was not theirs. */
		o->spill = 0;
		took = true;
	} else if (o && o->next && order_consume(o->next, id)) {
		/* Not expected any more by this hint: the reader may have
		 * moved on to the next epoch. */
		o->spill++;
		took = true;
	}
	queue_advance(q);
	return took;
}

uint64_t order_queue_next_use(const struct order_queue *q, uint32_t id)
{
	uint64_t dist = 0;

	for (const struct order *o = q->head; o; o = o->next) {
		size_t base = o == q->head ? o->oldest : 0;
		uint64_t p = order_next_pos(o, id);

		if (p != ORDER_NONE)
			return dist + (p > base ? p - base : 0);
		dist += o->n - base;
	}
	return ORDER_NONE;
}

/*
 * order_queue_pick() within @max_bytes: *@bytes is the lead's bytes (over
 * every stream) and grows with each entry passed that is not read; the
 * cursor stops before an entry that would take it past @max_bytes, but
 * for the first (one entry ahead of the readers is always worth having).
 */
static size_t queue_pick(struct order_queue *q, size_t window, size_t ahead,
			 uint64_t *bytes, uint64_t max_bytes,
			 order_skip_cb skip, void *arg, uint32_t *ids,
			 size_t room)
{
	size_t budget = window, got = 0;

	for (struct order *o = q->head; o && got < room; o = o->next) {
		size_t base = o == q->head ? order_base(o, window) : 0;
		/* The readers' front: entries behind it are open already or
		 * being read by other workers (a DataLoader's batches). */
		size_t front =
		    o == q->head && o->newest > base ? o->newest : base;
		size_t end;

		*bytes -= o->lead_bytes;
		count_from(o, base);
		*bytes += o->lead_bytes;
		if (o->next_pf < base)
			o->next_pf = base;
		end = base + budget < o->n ? base + budget : o->n;
		if (ahead < end - front)
			end = front + ahead;
		while (o->next_pf < end && got < room) {
			size_t at = o->next_pf;
			uint32_t id = o->ids[at];

			if (!o->read[at]) {
				uint64_t c = entry_cost(o, at);

				if (*bytes && (*bytes >= max_bytes ||
					       c > max_bytes - *bytes))
					return got; /* the cache is full */
				*bytes += c;
				o->lead_bytes += c;
			}
			o->next_pf++;
			if (!o->read[at] && !skip(arg, id))
				ids[got++] = id;
		}
		if (o->next_pf < o->n)
			break; /* window full inside this hint */
		budget -= end - base;
		ahead -= ahead == SIZE_MAX ? 0 : end - front;
		if (!budget || !ahead)
			break;
	}
	return got;
}

size_t order_queue_pick(struct order_queue *q, size_t window, size_t ahead,
			order_skip_cb skip, void *arg, uint32_t *ids,
			size_t room)
{
	uint64_t bytes = order_queue_lead_bytes(q);

	return queue_pick(q, window, ahead, &bytes, UINT64_MAX, skip, arg, ids,
			  room);
}

uint64_t order_queue_lead_bytes(const struct order_queue *q)
{
	uint64_t n = 0;

	for (const struct order *o = q->head; o; o = o->next)
		n += o->lead_bytes;
	return n;
}

bool order_queue_requeue(struct order_queue *q, uint32_t id)
{
	for (struct order *o = q->head; o; o = o->next) {
		uint64_t p = order_next_pos(o, id);

		if (p == ORDER_NONE)
			continue;
		/* Behind the cursor and still the prefetcher's: it comes
		 * round again. Ahead of it, the cursor gets there anyway. */
		if (p >= o->counted && p < o->next_pf) {
			cursor_back(o, p);
			return true;
		}
		return false;
	}
	return false;
}

void order_queue_stats(const struct order_queue *q,
		       struct order_queue_stats *st)
{
	*st = (struct order_queue_stats){.epoch = -1};
	if (!q->head)
		return;
	st->pos = q->head->oldest;
	st->len = q->head->n;
	st->epoch = q->head->epoch;
	for (const struct order *o = q->head->next; o; o = o->next)
		st->queued++;
}

uint64_t order_queue_lead(const struct order_queue *q, size_t window)
{
	uint64_t lead = 0;

	for (const struct order *o = q->head; o; o = o->next) {
		size_t base = o == q->head ? order_base(o, window) : 0;
		size_t cur = o->next_pf > base ? o->next_pf : base;

		if (cur < o->n)
			return lead + (cur - base);
		lead += o->n > base ? o->n - base : 0;
	}
	return lead;
}

/* ---- streams ----------------------------------------------------------------
 */

void order_streams_init(struct order_streams *ss)
{
	memset(ss, 0, sizeof(*ss));
	for (int i = 0; i < ORDER_STREAMS_MAX; i++)
		order_queue_init(&ss->s[i].q);
	ss->latest = -1;
}

void order_streams_fini(struct order_streams *ss)
{
	for (int i = 0; i < ORDER_STREAMS_MAX; i++)
		order_queue_fini(&ss->s[i].q);
	order_streams_init(ss);
}

void order_streams_set_cost(struct order_streams *ss, order_cost_cb cost,
			    void *arg)
{
	ss->cost = cost;
	ss->cost_arg = arg;
}

void order_streams_set_pace(struct order_streams *ss, uint64_t horizon_ns,
			    uint32_t min)
{
	ss->pace_ns = horizon_ns;
	ss->pace_min = min;
}

/* Moves @p's ring to the slice of @now_ns, emptying the slices passed. */
static void pace_advance(const struct order_streams *ss, struct order_pace *p,
			 uint64_t now_ns)
{
	uint64_t at = now_ns / (ss->pace_ns / ORDER_PACE_BUCKETS + 1);

	if (at <= p->at)
		return;
	if (at - p->at >= ORDER_PACE_BUCKETS)
		memset(p->n, 0, sizeof(p->n));
	else
		for (uint64_t k = p->at + 1; k <= at; k++)
			p->n[k % ORDER_PACE_BUCKETS] = 0;
	p->at = at;
}

/* How far stream @st's cursor may go past its readers' front at @now_ns:
 * what they consumed over the horizon, at least pace_min. */
static size_t pace_ahead(const struct order_streams *ss,
			 struct order_stream *st, uint64_t now_ns)
{
	size_t sum = 0;

	if (!ss->pace_ns)
		return SIZE_MAX;
	pace_advance(ss, &st->pace, now_ns);
	for (int k = 0; k < ORDER_PACE_BUCKETS; k++)
		sum += st->pace.n[k];
	return sum > ss->pace_min ? sum : ss->pace_min;
}

/* Whether stream @st has nothing left to read: no hint, or only the last
 * one, read to its end. */
static bool stream_done(const struct order_stream *st)
{
	const struct order *h = st->q.head;

	return !h || (!h->next && h->oldest >= h->n);
}

void order_streams_set_alive(struct order_streams *ss, order_alive_cb alive,
			     void *arg)
{
	ss->alive = alive;
	ss->alive_arg = arg;
}

/* The entries stream @st's hints still have to read. */
static uint64_t stream_unread(const struct order_stream *st)
{
	uint64_t n = 0;

	for (const struct order *o = st->q.head; o; o = o->next)
		n += o->n - (o == st->q.head ? o->oldest : 0);
	return n;
}

/* Counts and remembers the reclaim of stream @i, whose slot is reused. */
static void stream_reclaimed(struct order_streams *ss, int i,
			     enum order_reclaim_why why)
{
	uint64_t k = ss->reclaimed_exited + ss->reclaimed_idle;
	struct order_reclaimed *r = &ss->recent[k % ORDER_RECLAIMED_RECENT];

	memcpy(r->name, ss->s[i].name, sizeof(r->name));
	r->owner = ss->s[i].owner;
	r->why = why;
	r->unread = stream_unread(&ss->s[i]);
	if (why == ORDER_RECLAIM_EXITED)
		ss->reclaimed_exited++;
	else
		ss->reclaimed_idle++;
}

int order_streams_get(struct order_streams *ss, const char *name, pid_t owner,
		      uint64_t now_ns)
{
	size_t len = strlen(name);
	/* Slots a new stream may take, best first: free, done, writer
	 * ended, idle; in each class the one idle longest. */
	int best[4] = {-1, -1, -1, -1}, slot = -1, why = 0;

	if (!len || len >= ORDER_STREAM_NAME_MAX)
		return -EINVAL;
	for (int i = 0; i < ORDER_STREAMS_MAX; i++) {
		struct order_stream *st = &ss->s[i];

		if (!order_stream_used(ss, i)) {
			if (best[0] < 0)
				best[0] = i;
		} else if (!strcmp(st->name, name)) {
			st->owner = owner;
			st->active_ns = now_ns;
			return i;
		} else if (stream_done(st)) {
			if (best[1] < 0 ||
			    st->last_hint < ss->s[best[1]].last_hint)
				best[1] = i;
		} else if (best[2] < 0 ||
			   st->active_ns < ss->s[best[2]].active_ns) {
			/* The candidate to reclaim, if a rule allows (below).
			 */
			best[2] = i;
		}
	}
	if (best[0] < 0 && best[1] < 0 && ss->alive) {
		/* Any stream of a writer that has ended, not only the one
		 * idle longest: looked for only when no slot is free. */
		int exited = -1;

		for (int i = 0; i < ORDER_STREAMS_MAX; i++) {
			const struct order_stream *st = &ss->s[i];

			if (order_stream_used(ss, i) && !stream_done(st) &&
			    st->owner > 0 &&
			    (exited < 0 ||
			     st->active_ns < ss->s[exited].active_ns) &&
			    !ss->alive(ss->alive_arg, st->owner))
				exited = i;
		}
		best[2] = exited >= 0 ? exited : best[2];
		why = exited >= 0 ? ORDER_RECLAIM_EXITED : 0;
	}
	if (best[0] < 0 && best[1] < 0 && !why && best[2] >= 0 &&
	    now_ns >= ss->s[best[2]].active_ns &&
	    now_ns - ss->s[best[2]].active_ns >= ORDER_STREAM_IDLE_NS)
		why = ORDER_RECLAIM_IDLE;
	for (int k = 0; k < 3 && slot < 0; k++)
		if (best[k] >= 0 && (k < 2 || why))
			slot = best[k];
	if (slot < 0)
		return -ENOSPC;
	if (order_stream_used(ss, slot)) {
		/* A finished stream (a process that has exited, most likely)
		 * gives its slot up: pids do not pile up. */
		if (why)
			stream_reclaimed(ss, slot, why);
		order_queue_fini(&ss->s[slot].q);
		if (ss->latest == slot)
			ss->latest = -1;
	}
	ss->s[slot] =
	    (struct order_stream){.owner = owner, .active_ns = now_ns};
	order_queue_init(&ss->s[slot].q);
	memcpy(ss->s[slot].name, name, len + 1);
	return slot;
}

struct order *order_streams_add(struct order_streams *ss, int i,
				struct order *o, bool replace)
{
	struct order_stream *st = &ss->s[i];

	st->hints++;
	st->last_hint = ++ss->hints_seen;
	ss->latest = i;
	o->cost = ss->cost;
	o->cost_arg = ss->cost_arg;
	return order_queue_add(&st->q, o, replace);
}

size_t order_streams_pace(struct order_streams *ss, int i, uint64_t now_ns)
{
	return pace_ahead(ss, &ss->s[i], now_ns);
}

int order_streams_note_open(struct order_streams *ss, uint32_t id,
			    uint64_t now_ns)
{
	uint64_t best = ORDER_NONE;
	int who = -1;

	/* Readers do not say which stream they read for: the stream that
	 * expects the object soonest, counted from its own readers, is the
	 * one whose reader has got there. */
	for (int i = 0; i < ORDER_STREAMS_MAX; i++) {
		uint64_t d;

		if (!ss->s[i].q.head)
			continue;
		d = order_queue_next_use(&ss->s[i].q, id);
		if (d < best) {
			best = d;
			who = i;
		}
	}
	if (who >= 0) {
		struct order_pace *p = &ss->s[who].pace;

		if (order_queue_note_open(&ss->s[who].q, id))
			ss->s[who].active_ns = now_ns;
		if (ss->pace_ns) {
			pace_advance(ss, p, now_ns);
			p->n[p->at % ORDER_PACE_BUCKETS]++;
		}
	}
	return who;
}

uint64_t order_streams_next_use(const struct order_streams *ss, uint32_t id)
{
	uint64_t best = ORDER_NONE;

	for (int i = 0; i < ORDER_STREAMS_MAX; i++) {
		uint64_t d;

		if (!ss->s[i].q.head)
			continue;
		d = order_queue_next_use(&ss->s[i].q, id);
		if (d < best)
			best = d;
	}
	return best;
}

size_t order_streams_pick(struct order_streams *ss, size_t window,
			  uint64_t max_bytes, uint64_t now_ns,
			  order_skip_cb skip, void *arg, uint32_t *ids,
			  size_t room)
{
	uint64_t dry = 0; /* bit i: stream i has nothing more in its window */
	uint64_t bytes = order_streams_lead_bytes(ss);
	size_t got = 0;

	while (got < room) {
		uint64_t best_lead = UINT64_MAX;
		int best = -1;

		for (unsigned int k = 0; k < ORDER_STREAMS_MAX; k++) {
			unsigned int i = (ss->rr + k) % ORDER_STREAMS_MAX;
			uint64_t lead;

			if (!ss->s[i].q.head || (dry >> i & 1))
				continue;
			lead = order_queue_lead(&ss->s[i].q, window);
			if (lead < best_lead) {
				best_lead = lead;
				best = (int)i;
			}
		}
		if (best < 0)
			break;
		if (queue_pick(&ss->s[best].q, window,
			       pace_ahead(ss, &ss->s[best], now_ns), &bytes,
			       max_bytes, skip, arg, ids + got, 1)) {
			got++;
			/* The next tie goes to the stream after it. */
			ss->rr = (unsigned int)(best + 1) % ORDER_STREAMS_MAX;
		} else {
			dry |= 1ull << best;
		}
	}
	return got;
}

uint64_t order_streams_lead_bytes(const struct order_streams *ss)
{
	uint64_t n = 0;

	for (int i = 0; i < ORDER_STREAMS_MAX; i++)
		n += order_queue_lead_bytes(&ss->s[i].q);
	return n;
}

bool order_streams_requeue(struct order_streams *ss, uint32_t id)
{
	bool moved = false;

	for (int i = 0; i < ORDER_STREAMS_MAX; i++)
		if (ss->s[i].q.head && order_queue_requeue(&ss->s[i].q, id))
			moved = true;
	return moved;
}

size_t order_streams_ahead(const struct order_streams *ss, size_t window,
			   size_t *at, uint32_t *ids, size_t max)
{
	const struct order *heads[ORDER_STREAMS_MAX];
	size_t k = 0, start = *at, end = start + max, stop = start, got = 0;
	bool more = false;

	for (int i = 0; i < ORDER_STREAMS_MAX; i++)
		if (ss->s[i].q.head)
			heads[k++] = ss->s[i].q.head;
	if (!k || !max)
		return 0;
	for (size_t j = 0; j < max; j++)
		ids[j] = ORDER_EMPTY;
	/* Merged position p is entry p / k of stream p % k. */
	for (size_t t = 0; t < k; t++) {
		size_t r0 = start > t ? (start - t + k - 1) / k : 0;
		size_t first = t + r0 * k, want, n;

		if (first >= end) {
			more = true;
			continue;
		}
		want = (end - first + k - 1) / k;
		n = ahead_stride(heads[t], window, r0, ids + (first - start), k,
				 want);
		if (n == want)
			more = true;
		else if (n && first + (n - 1) * k + 1 > stop)
			stop = first + (n - 1) * k + 1;
	}
	if (more)
		stop = end;
	for (size_t j = 0; j < stop - start; j++)
		if (ids[j] != ORDER_EMPTY)
			ids[got++] = ids[j];
	*at = stop;
	return got;
}
