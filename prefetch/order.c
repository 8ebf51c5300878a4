/*
 * prefetch/order.c - the hint position index (see order.h): per object,
 * where its occurrences are in the hinted order and how many are consumed;
 * per hint, the oldest unconsumed entry, the newest consumed one and the
 * prefetcher's cursor; and the queue of hints those move through.
 *
 * Invariants, per order:
 * - The occurrences of id i are pos[start[i] .. start[i+1]), ascending;
 *   the first consumed[i] of them are read, the rest are not.
 * - oldest is the first entry with read[] unset; newest is one past the
 *   newest read entry; next_pf >= oldest.
 * Opens consume in position order per object, so a reader that opens an
 * object twice consumes its first two occurrences, whichever entry it
 * "meant".
 */
#include "prefetch/order.h"

#include <stdlib.h>
#include <string.h>

struct order {
	uint32_t *ids;          /* n entries, in reading order */
	size_t n;
	int64_t epoch;
	uint32_t n_ids;         /* ids are below this */
	uint32_t *start;        /* n_ids + 1: positions of id i are */
	uint32_t *pos;          /*   pos[start[i] .. start[i+1]) */
	uint32_t *consumed;     /* n_ids: occurrences of id i opened */
	uint8_t *read;          /* n: entry opened */
	size_t oldest;          /* first unopened entry */
	size_t newest;          /* one past the newest opened entry */
	size_t next_pf;         /* next entry the prefetcher looks at */
	uint64_t spill;         /* opens of ids this hint no longer expects */
	struct order *next;     /* in a queue */
};

void order_destroy(struct order *o)
{
	while (o) {
		struct order *next = o->next;

		free(o->ids);
		free(o->start);
		free(o->pos);
		free(o->consumed);
		free(o->read);
		free(o);
		o = next;
	}
}

/* Builds the position index: a counting sort by id. */
struct order *order_create(const uint32_t *ids, size_t n, int64_t epoch,
			   uint32_t n_ids)
{
	struct order *o = calloc(1, sizeof(*o));
	uint32_t *fill = NULL;

	if (!o || n > UINT32_MAX)
		goto fail;
	o->n = n;
	o->epoch = epoch;
	o->n_ids = n_ids;
	o->ids = malloc((n ? n : 1) * sizeof(*o->ids));
	o->pos = malloc((n ? n : 1) * sizeof(*o->pos));
	o->read = calloc(n ? n : 1, 1);
	o->start = calloc((size_t)n_ids + 1, sizeof(*o->start));
	o->consumed = calloc(n_ids ? n_ids : 1, sizeof(*o->consumed));
	fill = calloc(n_ids ? n_ids : 1, sizeof(*fill));
	if (!o->ids || !o->pos || !o->read || !o->start || !o->consumed || !fill)
		goto fail;
	if (n)
		memcpy(o->ids, ids, n * sizeof(*ids));
	for (size_t i = 0; i < n; i++)
		o->start[ids[i] + 1]++;
	for (uint32_t i = 0; i < n_ids; i++)
		o->start[i + 1] += o->start[i];
	for (size_t i = 0; i < n; i++)
		o->pos[o->start[ids[i]] + fill[ids[i]]++] = (uint32_t)i;
	free(fill);
	return o;
fail:
	free(fill);
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

bool order_consume(struct order *o, uint32_t id)
{
	uint32_t k, cnt, p;

	if (id >= o->n_ids)
		return false;
	k = o->consumed[id];
	cnt = o->start[id + 1] - o->start[id];
	if (k >= cnt)
		return false;
	p = o->pos[o->start[id] + k];
	o->consumed[id] = k + 1;
	o->read[p] = 1;
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
	uint32_t k, cnt;

	if (id >= o->n_ids)
		return ORDER_NONE;
	k = o->consumed[id];
	cnt = o->start[id + 1] - o->start[id];
	return k < cnt ? o->pos[o->start[id] + k] : ORDER_NONE;
}

/* ---- the queue ------------------------------------------------------------ */

size_t order_ahead(const struct order *o, size_t window, size_t skip,
		   uint32_t *ids, size_t max)
{
	size_t end = o->oldest + window < o->n ? o->oldest + window : o->n;
	size_t got = 0;

	for (size_t at = o->oldest; at < end && got < max; at++) {
		if (o->read[at])
			continue;
		if (skip)
			skip--;
		else
			ids[got++] = o->ids[at];
	}
	return got;
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

void order_queue_note_open(struct order_queue *q, uint32_t id)
{
	struct order *o = q->head;

	if (o && !order_consume(o, id) && o->next) {
		/* Not expected any more by this hint: the reader may have moved
		 * on to the next epoch. */
		if (order_consume(o->next, id))
			o->spill++;
	}
	queue_advance(q);
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

size_t order_queue_pick(struct order_queue *q, size_t window,
			order_skip_cb skip, void *arg, uint32_t *ids,
			size_t room)
{
	size_t budget = window, got = 0;

	for (struct order *o = q->head; o && got < room; o = o->next) {
		size_t base = o == q->head ? order_base(o, window) : 0;
		size_t end;

		if (o->next_pf < base)
			o->next_pf = base;
		end = base + budget < o->n ? base + budget : o->n;
		while (o->next_pf < end && got < room) {
			size_t at = o->next_pf++;
			uint32_t id = o->ids[at];

			if (!o->read[at] && !skip(arg, id))
				ids[got++] = id;
		}
		if (o->next_pf < o->n)
			break; /* window full inside this hint */
		budget -= end - base;
		if (!budget)
			break;
	}
	return got;
}

void order_queue_stats(const struct order_queue *q,
		       struct order_queue_stats *st)
{
	*st = (struct order_queue_stats){ .epoch = -1 };
	if (!q->head)
		return;
	st->pos = q->head->oldest;
	st->len = q->head->n;
	st->epoch = q->head->epoch;
	for (const struct order *o = q->head->next; o; o = o->next)
		st->queued++;
}
