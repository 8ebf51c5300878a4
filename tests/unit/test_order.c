/*
 * tests/unit/test_order.c - the hint position index (prefetch/order.c):
 * occurrences and their consumption by readers that do not follow the
 * order exactly, the window's base, next use across queued hints, and the
 * prefetcher's walk of the window. No network, no mount.
 */
#include "prefetch/order.h"
#include "check.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct order *make(const uint32_t *ids, size_t n, uint32_t n_ids)
{
	struct order *o = order_create(ids, n, 7, n_ids);

	CHECK(o != NULL);
	return o;
}

/* Opens consume the earliest unconsumed occurrence, wherever it is. */
static void test_consume(void)
{
	/* A=0 B=1 C=2 D=3 */
	const uint32_t ids[] = {0, 1, 2, 0, 3};
	struct order *o = make(ids, 5, 4);

	CHECK(order_len(o) == 5 && order_epoch(o) == 7);
	CHECK(order_oldest(o) == 0);
	CHECK(order_next_pos(o, 0) == 0 && order_next_pos(o, 3) == 4);
	CHECK(order_consume(o, 0));
	CHECK(order_oldest(o) == 1);
	CHECK(order_next_pos(o, 0) == 3); /* its second occurrence */
	CHECK(order_consume(o, 2));	  /* ahead of B: oldest stays */
	CHECK(order_oldest(o) == 1);
	CHECK(order_consume(o, 0));
	CHECK(order_next_pos(o, 0) == ORDER_NONE);
	CHECK(!order_consume(o, 0)); /* no third occurrence */
	CHECK(order_consume(o, 1));  /* B: oldest jumps past the read */
	CHECK(order_oldest(o) == 4);
	CHECK(!order_consume(o, 9)); /* an id out of range: nothing */
	CHECK(order_consume(o, 3) && order_oldest(o) == 5);
	order_destroy(o);
}

/*
 * W readers each take every W-th entry of a batch and open them in their
 * own order: the oldest unconsumed entry is always the first one no
 * reader has reached, and every entry is consumed once.
 */
static void test_w_readers(void)
{
	enum { N = 4000, W = 8, BATCH = 32 };
	uint32_t *ids = malloc(N * sizeof(*ids));
	unsigned seed = 42;
	struct order *o;
	size_t done = 0;
	int bad = 0;

	for (uint32_t i = 0; i < N; i++)
		ids[i] = (i * 7919u) %
			 N; /* a permutation: N is not a multiple of 7919 */
	o = make(ids, N, N);
	for (size_t base = 0; base < N; base += W * BATCH) {
		size_t end = base + W * BATCH < N ? base + W * BATCH : N;
		size_t span = end - base;
		uint32_t *perm = malloc(span * sizeof(*perm));

		for (size_t i = 0; i < span; i++)
			perm[i] = (uint32_t)(base + i);
		for (size_t i = span - 1; i > 0; i--) {
			size_t j = (size_t)rand_r(&seed) % (i + 1);
			uint32_t t = perm[i];

			perm[i] = perm[j];
			perm[j] = t;
		}
		for (size_t i = 0; i < span; i++) {
			bad += !order_consume(o, ids[perm[i]]);
			done++;
			/* oldest is at or past the batch start, never past its
			 * end */
			bad += order_oldest(o) < base || order_oldest(o) > end;
		}
		CHECK(order_oldest(o) == end);
		free(perm);
	}
	CHECK(bad == 0);
	CHECK(done == N && order_oldest(o) == N);
	order_destroy(o);
	free(ids);
}

/* The window's base trails the newest read by at most half a window. */
static void test_base(void)
{
	enum { N = 100 };
	uint32_t ids[N];
	struct order *o;

	for (uint32_t i = 0; i < N; i++)
		ids[i] = i;
	o = make(ids, N, N);
	CHECK(order_base(o, 20) == 0);
	/* Entries 0..9 are never read (failed samples); 10..59 are. */
	for (uint32_t i = 10; i < 60; i++)
		order_consume(o, i);
	CHECK(order_oldest(o) == 0);
	CHECK(order_base(o, 20) == 50); /* newest (60) - half (10) */
	CHECK(order_base(o, 200) == 0); /* within half a window: oldest */
	/* Once the stragglers are read, the oldest leads again. */
	for (uint32_t i = 0; i < 10; i++)
		order_consume(o, i);
	CHECK(order_oldest(o) == 60 && order_base(o, 20) == 60);
	order_destroy(o);
}

static bool skip_odd(void *arg, uint32_t id)
{
	(void)arg;
	return id % 2;
}

/* The queue: next use through queued hints, spill, picks, replace. */
static void test_queue(void)
{
	const uint32_t a[] = {0, 1, 2, 3, 4, 5};
	const uint32_t b[] = {5, 6, 0, 7};
	struct order_queue q;
	struct order_queue_stats st;
	uint32_t got[16];
	size_t n;

	order_queue_init(&q);
	CHECK(order_queue_next_use(&q, 0) == ORDER_NONE);
	order_queue_stats(&q, &st);
	CHECK(st.len == 0 && st.epoch == -1 && st.queued == 0);
	CHECK(order_queue_add(&q, make(a, 6, 8), false) == NULL);
	CHECK(order_queue_add(&q, make(b, 4, 8), false) == NULL);
	order_queue_stats(&q, &st);
	CHECK(st.len == 6 && st.pos == 0 && st.epoch == 7 && st.queued == 1);

	/* Next use: in the current hint from its oldest entry, then the
	 * queued one after the rest of the current. */
	CHECK(order_queue_next_use(&q, 3) == 3);
	CHECK(order_queue_next_use(&q, 6) == 6 + 1);
	CHECK(order_queue_next_use(&q, 9) == ORDER_NONE);
	order_queue_note_open(&q, 0);
	order_queue_note_open(&q, 1);
	CHECK(order_queue_next_use(&q, 3) == 1);
	/* 0 is consumed in the current hint: its next use is in the next. */
	CHECK(order_queue_next_use(&q, 0) == 4 + 2);

	/* Picks: the window from the base, skipping what the caller says,
	 * each entry offered once. */
	n = order_queue_pick(&q, 3, SIZE_MAX, skip_odd, NULL, got, 1);
	CHECK(n == 1 && got[0] == 2); /* room for one */
	n = order_queue_pick(&q, 3, SIZE_MAX, skip_odd, NULL, got, 16);
	CHECK(n == 1 && got[0] == 4); /* entries 2..4, 3 skipped */
	n = order_queue_pick(&q, 3, SIZE_MAX, skip_odd, NULL, got, 16);
	CHECK(n == 0); /* window full until readers move */
	order_queue_note_open(&q, 2);
	/* A wider window runs on into the queued hint. */
	n = order_queue_pick(&q, 10, SIZE_MAX, skip_odd, NULL, got, 16);
	CHECK(n == 2 && got[0] == 6 && got[1] == 0);
	n = order_queue_pick(&q, 10, SIZE_MAX, skip_odd, NULL, got, 16);
	CHECK(n == 0);

	/* A finished hint gives way to the next. */
	for (uint32_t id = 3; id <= 5; id++)
		order_queue_note_open(&q, id);
	order_queue_stats(&q, &st);
	CHECK(st.len == 4 && st.queued == 0);

	/* Replace hands back what it dropped. */
	struct order *old = order_queue_add(&q, make(a, 6, 8), true);
	CHECK(old != NULL);
	order_destroy(old);
	order_queue_stats(&q, &st);
	CHECK(st.len == 6 && st.pos == 0 && st.queued == 0);
	order_queue_fini(&q);
}

/* A reader that opens what the current hint no longer expects is in the
 * next epoch: after ORDER_SPILL_SWITCH such opens, the next hint leads. */
static void test_spill(void)
{
	uint32_t a[10], b[100];
	struct order_queue q;
	struct order_queue_stats st;

	for (uint32_t i = 0; i < 10; i++)
		a[i] = i;
	for (uint32_t i = 0; i < 100; i++)
		b[i] = 10 + i;
	order_queue_init(&q);
	order_queue_add(&q, make(a, 10, 110), false);
	order_queue_add(&q, make(b, 100, 110), false);
	/* An id the next hint expects counts once; opening it again (both
	 * hints consumed) does not. */
	for (int i = 0; i < 2 * ORDER_SPILL_SWITCH; i++)
		order_queue_note_open(&q, 10);
	order_queue_stats(&q, &st);
	CHECK(st.len == 10 && st.queued == 1);
	for (uint32_t id = 11; id < 10 + ORDER_SPILL_SWITCH - 1; id++)
		order_queue_note_open(&q, id);
	order_queue_stats(&q, &st);
	CHECK(st.len == 10 && st.queued == 1); /* one short */
	order_queue_note_open(&q, 10 + ORDER_SPILL_SWITCH - 1);
	order_queue_stats(&q, &st);
	CHECK(st.len == 100 && st.queued == 0 && st.pos == ORDER_SPILL_SWITCH);
	order_queue_fini(&q);
}

/* Another reader's opens of what the current hint has read already spill
 * into the next hint; the stream's own readers, still in the current one,
 * keep it: only ORDER_SPILL_SWITCH spills in a row abandon it. */
static void test_spill_interleaved(void)
{
	uint32_t a[200];
	struct order_queue q;
	struct order_queue_stats st;

	for (uint32_t i = 0; i < 200; i++)
		a[i] = i;
	order_queue_init(&q);
	order_queue_add(&q, make(a, 200, 200), false);
	order_queue_add(&q, make(a, 200, 200), false); /* the next epoch */
	for (uint32_t id = 0; id < 100; id++)
		CHECK(order_queue_note_open(&q, id));
	for (uint32_t k = 0; k < 80; k++) {
		CHECK(order_queue_note_open(&q, k));	   /* spills */
		CHECK(order_queue_note_open(&q, 100 + k)); /* its own */
	}
	order_queue_stats(&q, &st);
	CHECK(st.len == 200 && st.queued == 1 && st.pos == 180);
	/* Its readers pause; the other one goes on: abandoned after the
	 * switch count in a row (0..79 are read in the next hint already). */
	for (uint32_t k = 80; k < 80 + ORDER_SPILL_SWITCH - 1; k++)
		order_queue_note_open(&q, k);
	order_queue_stats(&q, &st);
	CHECK(st.len == 200 && st.queued == 1 && st.pos == 180);
	order_queue_note_open(&q, 80 + ORDER_SPILL_SWITCH - 1);
	order_queue_stats(&q, &st);
	CHECK(st.len == 200 && st.queued == 0 &&
	      st.pos == 80 + ORDER_SPILL_SWITCH);
	order_queue_fini(&q);
}

/* Bytes the allocator has handed out (0 where it cannot tell: ASan). */
static size_t heap_bytes(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* A hint costs what its entries do, not what the listing does: three
 * entries over a listing of 50 million objects take well under a
 * megabyte (three arrays of the listing's size took 600 MB), and answer
 * as any other. */
static void test_memory_follows_the_hint(void)
{
	const uint32_t n_ids = 50000000, big = n_ids - 1;
	const uint32_t ids[] = {big, 5, big};
	size_t before = heap_bytes();
	struct order *o = order_create(ids, 3, -1, n_ids);

	CHECK(o != NULL);
	if (!o)
		return;
	CHECK(heap_bytes() - before < (1u << 20));
	CHECK(order_next_pos(o, big) == 0 && order_next_pos(o, 5) == 1);
	CHECK(order_next_pos(o, 6) == ORDER_NONE);
	CHECK(order_consume(o, big) && order_next_pos(o, big) == 2);
	CHECK(!order_consume(o, 7));
	CHECK(order_consume(o, 5) && order_consume(o, big));
	CHECK(order_oldest(o) == 3);
	order_destroy(o);
}

/* What is read next: unconsumed entries from the oldest on, a window's
 * worth, from any skip. */
static void test_ahead(void)
{
	const uint32_t ids[] = {0, 1, 2, 3, 4, 5, 6, 7};
	struct order *o = make(ids, 8, 8);
	uint32_t got[8];

	CHECK(order_ahead(o, 100, 0, got, 8) == 8 && got[0] == 0 &&
	      got[7] == 7);
	CHECK(order_consume(o, 0) && order_consume(o, 2));
	/* 1, 3, 4, ... : the consumed 2 is left out, the window counts from
	 * the oldest (1) and includes consumed entries. */
	CHECK(order_ahead(o, 4, 0, got, 8) == 3);
	CHECK(got[0] == 1 && got[1] == 3 && got[2] == 4);
	CHECK(order_ahead(o, 100, 2, got, 2) == 2 && got[0] == 4 &&
	      got[1] == 5);
	CHECK(order_ahead(o, 100, 6, got, 8) == 0);
	order_destroy(o);
}

/* ---- streams ----------------------------------------------------------------
 */

/* Ids offered by a pick become "in flight": skipped when offered again,
 * as the engine skips what it fetches already. */
static bool skip_taken(void *arg, uint32_t id)
{
	uint8_t *taken = arg;
	bool was = taken[id];

	taken[id] = 1;
	return was;
}

static int add_stream(struct order_streams *ss, const char *name,
		      const uint32_t *ids, size_t n)
{
	int i = order_streams_get(ss, name, 0, 0);

	CHECK(i >= 0);
	if (i >= 0)
		CHECK(order_streams_add(ss, i, make(ids, n, 64), false) ==
		      NULL);
	return i;
}

/*
 * Two writers, each its own order: the prefetcher interleaves them while
 * both are as far ahead, then serves the one whose readers came closest;
 * opens go to the stream that needs the object soonest; an object both
 * expect is offered once.
 */
static void test_streams_merge(void)
{
	const uint32_t a[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 30};
	const uint32_t b[] = {30, 10, 11, 12, 13, 14, 15, 16, 17, 18};
	struct order_streams ss;
	uint8_t taken[64] = {0};
	uint32_t got[32];
	size_t n;
	int ia, ib;

	order_streams_init(&ss);
	CHECK(order_streams_next_use(&ss, 0) == ORDER_NONE);
	ia = add_stream(&ss, "rank0", a, 10);
	ib = add_stream(&ss, "rank1", b, 10);
	CHECK(ia != ib && order_streams_get(&ss, "rank1", 0, 0) == ib);

	/* Both 0 entries ahead: turn about, each in its own window of 4. */
	n = order_streams_pick(&ss, 4, UINT64_MAX, 0, skip_taken, taken, got,
			       32);
	CHECK(n == 8);
	CHECK(got[0] == 0 && got[1] == 30 && got[2] == 1 && got[3] == 10 &&
	      got[4] == 2 && got[5] == 11 && got[6] == 3 && got[7] == 12);
	CHECK(order_streams_pick(&ss, 4, UINT64_MAX, 0, skip_taken, taken, got,
				 32) == 0);

	/* Rank 0's reader takes four: its stream is now the one closest to
	 * its readers, and is served first (rank 1 waits, it is 4 ahead). */
	for (uint32_t id = 0; id < 4; id++)
		CHECK(order_streams_note_open(&ss, id, 0) == ia);
	n = order_streams_pick(&ss, 4, UINT64_MAX, 0, skip_taken, taken, got,
			       3);
	CHECK(n == 3 && got[0] == 4 && got[1] == 5 && got[2] == 6);
	n = order_streams_pick(&ss, 4, UINT64_MAX, 0, skip_taken, taken, got,
			       32);
	CHECK(n == 1 && got[0] == 7);

	/* 30: next in rank 1 (0 ahead), 6 ahead in rank 0: next use is the
	 * earliest, and the open is rank 1's. */
	CHECK(order_streams_next_use(&ss, 30) == 0);
	CHECK(order_streams_next_use(&ss, 8) == 4);
	CHECK(order_streams_note_open(&ss, 30, 0) == ib);
	CHECK(order_streams_next_use(&ss, 30) == 5); /* rank 0 still has it */
	CHECK(order_queue_next_use(&ss.s[ia].q, 30) == 5);
	CHECK(order_streams_note_open(&ss, 99, 0) == -1); /* nobody's */

	/* A window of 6: rank 1 (3 ahead) first, then in turn; rank 0's 30
	 * (its entry 9) was fetched for rank 1 and is not offered again. */
	n = order_streams_pick(&ss, 6, UINT64_MAX, 0, skip_taken, taken, got,
			       32);
	CHECK(n == 4);
	CHECK(got[0] == 13 && got[1] == 8 && got[2] == 14 && got[3] == 15);
	order_streams_fini(&ss);
}

/* Replace in one stream leaves the other's hints; stats per stream. */
static void test_streams_replace(void)
{
	const uint32_t a[] = {0, 1, 2, 3};
	const uint32_t b[] = {4, 5, 6};
	struct order_streams ss;
	struct order_queue_stats st;
	struct order *old;
	int ia, ib;

	order_streams_init(&ss);
	ia = add_stream(&ss, "rank0", a, 4);
	add_stream(&ss, "rank0", a, 4); /* queued behind */
	ib = add_stream(&ss, "rank1", b, 3);
	CHECK(order_streams_note_open(&ss, 4, 0) == ib);
	CHECK(ss.latest == ib && ss.s[ia].hints == 2 && ss.s[ib].hints == 1);
	old = order_streams_add(&ss, ia, make(b, 3, 64), true);
	CHECK(old != NULL);
	order_destroy(old);
	order_queue_stats(&ss.s[ia].q, &st);
	CHECK(st.len == 3 && st.pos == 0 && st.queued == 0);
	order_queue_stats(&ss.s[ib].q, &st);
	CHECK(st.len == 3 && st.pos == 1 && st.queued == 0);
	/* 5 is now in both at 1 and 0 entries ahead: rank 1's. */
	CHECK(order_streams_next_use(&ss, 5) == 0);
	CHECK(order_streams_note_open(&ss, 5, 0) == ib);
	/* 4: rank 1 consumed it; rank 0's new hint has it first. */
	CHECK(order_streams_note_open(&ss, 4, 0) == ia);
	order_streams_fini(&ss);
}

/* At most ORDER_STREAMS_MAX streams with hints to read; a finished one
 * gives its slot up; names are checked. */
static void test_streams_limit(void)
{
	struct order_streams ss;
	char name[ORDER_STREAM_NAME_MAX + 8];
	uint32_t id;
	int i;

	order_streams_init(&ss);
	CHECK(order_streams_get(&ss, "", 0, 0) == -EINVAL);
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	CHECK(order_streams_get(&ss, name, 0, 0) == -EINVAL);
	for (int k = 0; k < ORDER_STREAMS_MAX; k++) {
		snprintf(name, sizeof(name), "pid:%d", 1000 + k);
		id = (uint32_t)k;
		add_stream(&ss, name, &id, 1);
	}
	CHECK(order_streams_get(&ss, "rank0", 0, 0) == -ENOSPC);
	CHECK(order_streams_get(&ss, "pid:1007", 0, 0) ==
	      7); /* an old one: fine */
	/* pid 1005's reader reads its one entry: done, its slot is free. */
	CHECK(order_streams_note_open(&ss, 5, 0) == 5);
	i = order_streams_get(&ss, "rank0", 0, 0);
	CHECK(i == 5 && ss.s[5].hints == 0 && !ss.s[5].q.head);
	CHECK(!strcmp(ss.s[5].name, "rank0"));
	/* A stream with no hint is as good as free. */
	CHECK(order_streams_get(&ss, "rank1", 0, 0) == 5);
	id = 99;
	add_stream(&ss, "rank1", &id, 1);
	CHECK(order_streams_get(&ss, "rank2", 0, 0) == -ENOSPC);
	order_streams_fini(&ss);
}

/* The fake process table of test_streams_reclaim: the two pids of @arg
 * have ended. */
static bool fake_alive(void *arg, pid_t pid)
{
	const pid_t *dead = arg;

	return pid != dead[0] && pid != dead[1];
}

/* With every slot taken by streams that still have entries to read, a new
 * stream takes the slot of one whose writer ended (idle longest first),
 * else of one idle for ORDER_STREAM_IDLE_NS; each counted and remembered.
 * A writer we cannot see (pid 0) is never taken for ended. */
static void test_streams_reclaim(void)
{
	const uint64_t ms = 1000000ull, idle = ORDER_STREAM_IDLE_NS;
	struct order_streams ss;
	pid_t dead[2] = {-1, -1};
	char name[ORDER_STREAM_NAME_MAX];
	uint32_t ids[2];
	int i;

	order_streams_init(&ss);
	order_streams_set_alive(&ss, fake_alive, dead);
	for (int k = 0; k < ORDER_STREAMS_MAX; k++) {
		snprintf(name, sizeof(name), "s%d", k);
		ids[0] = (uint32_t)(2 * k);
		ids[1] = (uint32_t)(2 * k + 1);
		/* Stream 0's writer is in another pid namespace. */
		i = order_streams_get(&ss, name, k ? 1000 + k : 0,
				      (uint64_t)k * ms);
		CHECK(i == k);
		CHECK(order_streams_add(&ss, i, make(ids, 2, 128), false) ==
		      NULL);
	}
	CHECK(order_streams_get(&ss, "new", 5000, 100 * ms) == -ENOSPC);
	CHECK(ss.reclaimed_exited == 0 && ss.reclaimed_idle == 0);
	/* The writers of s10 and s20 end: s20, idle longer, goes first. */
	dead[0] = 1010;
	dead[1] = 1020;
	CHECK(order_streams_note_open(&ss, 2 * 10, 50 * ms) == 10);
	CHECK(order_streams_note_open(&ss, 2 * 20, 30 * ms) == 20);
	i = order_streams_get(&ss, "new", 5000, 100 * ms);
	CHECK(i == 20 && !strcmp(ss.s[20].name, "new") && !ss.s[20].q.head);
	CHECK(ss.s[20].owner == 5000 && ss.reclaimed_exited == 1);
	CHECK(order_streams_add(&ss, i, make(ids, 2, 128), false) == NULL);
	CHECK(!strcmp(ss.recent[0].name, "s20") && ss.recent[0].owner == 1020);
	CHECK(ss.recent[0].why == ORDER_RECLAIM_EXITED &&
	      ss.recent[0].unread == 1);
	dead[0] = dead[1] = -1;
	/* Ten minutes on, every stream is idle: the idlest goes, pid 0's
	 * included (only the idle rule applies to it); one its readers
	 * read from lately stays. */
	CHECK(order_streams_note_open(&ss, 1, idle) == 0);
	i = order_streams_get(&ss, "new2", 5001, idle + 2 * ms);
	CHECK(i == 1 && ss.reclaimed_idle == 1); /* s0 read at idle */
	CHECK(order_streams_add(&ss, i, make(ids, 2, 128), false) == NULL);
	CHECK(!strcmp(ss.recent[1].name, "s1") &&
	      ss.recent[1].why == ORDER_RECLAIM_IDLE);
	/* Not yet idle enough: s2 was hinted at 2 ms. */
	CHECK(order_streams_get(&ss, "new3", 5002, idle + ms) == -ENOSPC);
	CHECK(order_streams_get(&ss, "new3", 5002, idle + 2 * ms) == 2);
	/* A writer hinting again keeps its stream, under its new pid. */
	CHECK(order_streams_get(&ss, "new3", 5003, idle + 3 * ms) == 2);
	CHECK(ss.s[2].owner == 5003 && ss.reclaimed_idle == 2);
	order_streams_fini(&ss);
}

/* What the page cache is filled with: each stream's unread entries in
 * turn, resumable. */
static void test_streams_ahead(void)
{
	const uint32_t a[] = {0, 1, 2, 3, 4, 5};
	const uint32_t b[] = {10, 11};
	struct order_streams ss;
	uint32_t got[16];
	size_t at = 0;

	order_streams_init(&ss);
	CHECK(order_streams_ahead(&ss, 100, &at, got, 16) == 0);
	add_stream(&ss, "rank0", a, 6);
	add_stream(&ss, "rank1", b, 2);
	CHECK(order_streams_note_open(&ss, 0, 0) == 0);
	CHECK(order_streams_ahead(&ss, 100, &at, got, 3) == 3);
	CHECK(got[0] == 1 && got[1] == 10 && got[2] == 2 && at == 3);
	/* Rank 1 runs out: gaps are left out, the rest is rank 0's. */
	CHECK(order_streams_ahead(&ss, 100, &at, got, 16) == 4);
	CHECK(got[0] == 11 && got[1] == 3 && got[2] == 4 && got[3] == 5);
	CHECK(order_streams_ahead(&ss, 100, &at, got, 16) == 0);
	/* Each within its window: 2 entries of each. */
	at = 0;
	CHECK(order_streams_ahead(&ss, 2, &at, got, 16) == 4);
	order_streams_fini(&ss);
}

/*
 * Paced streams: the prefetch runs as far past the readers' front as they
 * read over the horizon (at least the minimum, within the window), on into
 * the queued hint; readers that stop leave only the minimum.
 */
static void test_streams_pace(void)
{
	const uint64_t sec = 1000000000ull;
	uint32_t a[40], b[20], got[64];
	uint8_t taken[64] = {0};
	struct order_streams ss;
	size_t n;
	int i;

	for (uint32_t k = 0; k < 40; k++)
		a[k] = k;
	for (uint32_t k = 0; k < 20; k++)
		b[k] = 40 + k;
	order_streams_init(&ss);
	order_streams_set_pace(&ss, sec, 4);
	i = add_stream(&ss, "r", a, 40);
	CHECK(i >= 0 &&
	      order_streams_add(&ss, i, make(b, 20, 64), false) == NULL);

	/* Before any open: the minimum, not the window of 32. */
	n = order_streams_pick(&ss, 32, UINT64_MAX, 10 * sec, skip_taken, taken,
			       got, 64);
	CHECK(n == 4 && got[0] == 0 && got[3] == 3);

	/* Ten read within the horizon: ten past the front (entry 10). */
	for (uint32_t id = 0; id < 10; id++)
		CHECK(order_streams_note_open(&ss, id,
					      10 * sec + id * sec / 20) == i);
	n = order_streams_pick(&ss, 32, UINT64_MAX, 10 * sec + sec / 2,
			       skip_taken, taken, got, 64);
	CHECK(n == 10 && got[0] == 10 && got[9] == 19); /* 4-9 opened */

	/* They stop; two seconds on, one more open: the pace has decayed to
	 * the minimum, and the cursor (at 20) is past front + 4 already. */
	CHECK(order_streams_note_open(&ss, 10, 12 * sec) == i);
	CHECK(order_streams_pick(&ss, 32, UINT64_MAX, 12 * sec, skip_taken,
				 taken, got, 64) == 0);

	/* Twenty more in a fifth of a second: 21 past the front (31), nine
	 * of them in this hint and twelve in the queued one. */
	for (uint32_t id = 11; id <= 30; id++)
		CHECK(order_streams_note_open(&ss, id,
					      12 * sec + id * sec / 100) == i);
	n = order_streams_pick(&ss, 32, UINT64_MAX, 12 * sec + sec / 2,
			       skip_taken, taken, got, 64);
	CHECK(n == 21 && got[0] == 31 && got[8] == 39 && got[9] == 40 &&
	      got[20] == 51);
	order_streams_fini(&ss);
}

/* Object i costs 10 * (i + 1) bytes. */
static uint64_t cost_tenfold(void *arg, uint32_t id)
{
	(void)arg;
	return 10ull * (id + 1);
}

static bool skip_none(void *arg, uint32_t id)
{
	(void)arg;
	(void)id;
	return false;
}

/*
 * The lead in bytes: the cursor stops before the entry that would pass the
 * bound (but takes one when the lead is empty); a read frees its bytes and
 * the cursor goes on; an object that left the cache before its read moves
 * the cursor back to it, and only to an entry the cursor passed.
 */
static void test_streams_lead_bytes(void)
{
	const uint32_t a[] = {0, 1, 2, 3, 4, 5, 6, 7};
	struct order_streams ss;
	uint32_t got[16];
	size_t n;
	int i;

	order_streams_init(&ss);
	order_streams_set_cost(&ss, cost_tenfold, NULL);
	i = order_streams_get(&ss, "rank0", 0, 0);
	CHECK(i >= 0);
	CHECK(order_streams_add(&ss, i, make(a, 8, 8), false) == NULL);
	/* 10 + 20 + 30 = 60 fit in 70, 40 more would not. */
	n = order_streams_pick(&ss, 100, 70, 0, skip_none, NULL, got, 16);
	CHECK(n == 3 && got[0] == 0 && got[2] == 2);
	CHECK(order_streams_lead_bytes(&ss) == 60);
	/* A bound below the first entry still lets one go. */
	order_streams_fini(&ss);
	order_streams_set_cost(&ss, cost_tenfold, NULL);
	i = order_streams_get(&ss, "rank0", 0, 0);
	order_streams_add(&ss, i, make(a, 8, 8), false);
	n = order_streams_pick(&ss, 100, 5, 0, skip_none, NULL, got, 16);
	CHECK(n == 1 && got[0] == 0);
	n = order_streams_pick(&ss, 100, 5, 0, skip_none, NULL, got, 16);
	CHECK(n == 0);
	/* Read: its bytes leave the lead, the cursor goes on. */
	order_streams_note_open(&ss, 0, 0);
	CHECK(order_streams_lead_bytes(&ss) == 0);
	n = order_streams_pick(&ss, 100, 90, 0, skip_none, NULL, got, 16);
	CHECK(n == 3 && got[0] == 1 && got[2] == 3); /* 20 + 30 + 40 */
	CHECK(order_streams_lead_bytes(&ss) == 20 + 30 + 40);
	/* 2 left the cache: the cursor goes back to it, 3 comes again. */
	CHECK(order_streams_requeue(&ss, 2));
	CHECK(order_streams_lead_bytes(&ss) == 20);
	/* Not passed yet (5), or not in the hint (9): nothing moves. */
	CHECK(!order_streams_requeue(&ss, 5));
	CHECK(!order_streams_requeue(&ss, 9));
	n = order_streams_pick(&ss, 100, 100, 0, skip_none, NULL, got, 16);
	CHECK(n == 2 && got[0] == 2 && got[1] == 3);
	/* A read behind the cursor frees its bytes, not one ahead of it. */
	order_streams_note_open(&ss, 6, 0);
	CHECK(order_streams_lead_bytes(&ss) == 20 + 30 + 40);
	order_streams_note_open(&ss, 2, 0);
	CHECK(order_streams_lead_bytes(&ss) == 20 + 40);
	order_streams_fini(&ss);
}

int main(void)
{
	test_memory_follows_the_hint();
	test_spill();
	test_spill_interleaved();
	test_ahead();
	test_consume();
	test_w_readers();
	test_base();
	test_queue();
	test_streams_merge();
	test_streams_replace();
	test_streams_limit();
	test_streams_reclaim();
	test_streams_ahead();
	test_streams_pace();
	test_streams_lead_bytes();
	return check_done();
}
