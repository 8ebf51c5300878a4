/**
 * prefetch/order.h - the hint position index: where each object falls in
 * the hinted reading order, and how far the readers have got (private to
 * prefetch: the engine and its unit test).
 *
 * An *order* is one hint: n entries (object ids, duplicates allowed) in
 * the order of reading, indexed so that an object's occurrences are found
 * in O(1). Readers do not follow it exactly (a DataLoader with W workers
 * has W batches open at once), so an open *consumes* the earliest
 * unconsumed occurrence of its object, wherever it is; the *oldest* entry
 * is the first not consumed.
 *
 * An *order queue* is the current hint followed by the queued ones: opens
 * spill into the next hint when the current one no longer expects them,
 * a finished (or abandoned) hint gives way to the next, the prefetcher
 * walks a window of entries ahead of the readers (and, with a cost per
 * object, no further than a bound in bytes: what the cache can hold until
 * they are read), and the cache's eviction asks how soon an object is
 * needed again; an object the prefetcher passed that left the cache before
 * its read moves the cursor back to it.
 *
 * The *streams* are one order queue per writer (a rank), merged by need
 * (see "streams" below).
 *
 * Nothing here locks: the caller (the engine, under its mutex) serializes
 * every call on one queue. Nothing here allocates after order_create().
 */
#ifndef HINTFS_PREFETCH_ORDER_H
#define HINTFS_PREFETCH_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/** "Not in this order": what order_next_pos() gives for an id it does
 *  not expect any more. */
#define ORDER_NONE UINT64_MAX

/**
 * Opens in a row of objects the current hint no longer expects, taken
 * from the next hint instead, after which the queue concludes the readers
 * moved on to it (the rest of the current hint is abandoned): 64 is more
 * than the batches a DataLoader holds open across an epoch's end. An open
 * the current hint expects starts the count again: its readers are still
 * in it, and the others were someone else's (another loader's reads of
 * the same files must not abandon it).
 */
#define ORDER_SPILL_SWITCH 64

struct order;

/**
 * Builds the order of @n ids (copied; each below @n_ids) for epoch @epoch
 * (-1: unnamed). Returns it (owned by the caller, or by a queue once
 * added), or NULL when out of memory or @n does not fit 32 bits.
 */
struct order *order_create(const uint32_t *ids, size_t n, int64_t epoch,
			   uint32_t n_ids);

/** Frees @o and every order chained behind it in a queue. NULL ok. */
void order_destroy(struct order *o);

/** The number of entries of @o. */
size_t order_len(const struct order *o);

/** The epoch @o was created with. */
int64_t order_epoch(const struct order *o);

/** The first entry of @o not consumed yet (order_len() once all are). */
size_t order_oldest(const struct order *o);

/**
 * Consumes the earliest unconsumed occurrence of @id in @o: that entry is
 * read. Returns false when @o holds no unconsumed occurrence of @id.
 */
bool order_consume(struct order *o, uint32_t id);

/**
 * Where a prefetch window of @window entries starts: the oldest unconsumed
 * entry, but never more than half a window behind the newest consumed
 * one, so that an entry nobody reads (a failed sample, an epoch cut
 * short) cannot stall the window.
 */
size_t order_base(const struct order *o, size_t window);

/** The position of the next unconsumed occurrence of @id, or ORDER_NONE. */
uint64_t order_next_pos(const struct order *o, uint32_t id);

/**
 * Stores in @ids up to @max ids of @o's entries not consumed yet, in
 * order, from the @skip-th of them after the oldest on, within @window
 * entries of the oldest. Returns how many: what is read next (the page
 * cache is filled with it ahead of the readers).
 */
size_t order_ahead(const struct order *o, size_t window, size_t skip,
		   uint32_t *ids, size_t max);

/** The current hint and the ones queued behind it. Caller-owned storage. */
struct order_queue {
	struct order *head; /**< the current hint; NULL when none */
};

/** Readies an empty queue. */
void order_queue_init(struct order_queue *q);

/** Frees every order of @q. */
void order_queue_fini(struct order_queue *q);

/**
 * Adds @o (now owned by @q) behind the queued orders, or, with @replace,
 * in place of all of them: those are unlinked and returned, for the
 * caller to order_destroy() outside its lock (NULL when none).
 */
struct order *order_queue_add(struct order_queue *q, struct order *o,
			      bool replace);

/**
 * A reader opened @id: consumes its occurrence in the current hint, or
 * else in the next one (a reader already in the next epoch), and drops the
 * hints that are finished or abandoned (ORDER_SPILL_SWITCH). Returns
 * whether an entry was consumed.
 */
bool order_queue_note_open(struct order_queue *q, uint32_t id);

/**
 * How soon @id is needed, in entries from the current hint's oldest one
 * (0: next), counting through the queued hints; ORDER_NONE when no hint
 * expects it any more.
 */
uint64_t order_queue_next_use(const struct order_queue *q, uint32_t id);

/** Whether the prefetcher should skip @id (already in flight, say). */
typedef bool (*order_skip_cb)(void *arg, uint32_t id);

/**
 * The bytes object @id takes in the cache: what the prefetcher's lead is
 * counted in (order_streams_pick()). The same for an id every time.
 */
typedef uint64_t (*order_cost_cb)(void *arg, uint32_t id);

/**
 * Walks the window of @window entries from the current hint's base
 * (order_base()) on into the queued hints, from where the last call left
 * off, and stores up to @room ids not consumed and not skipped by @skip
 * in @ids; never more than @ahead entries past the readers' front (the
 * newest consumed entry, or the base if that is further on; SIZE_MAX: no
 * such limit). Each entry is offered once per order: the cursor moves past
 * what it returns and what it skips. Returns how many were stored.
 */
size_t order_queue_pick(struct order_queue *q, size_t window, size_t ahead,
			order_skip_cb skip, void *arg, uint32_t *ids,
			size_t room);

/**
 * The *lead's bytes*: the cost (order_cost_cb) of the entries the
 * cursor has passed, from the window's base on, that no reader has read:
 * what the cache must hold at once for every prefetch to be read from it.
 * 0 with no cost callback.
 */
uint64_t order_queue_lead_bytes(const struct order_queue *q);

/**
 * Object @id, fetched ahead, left the cache before its read (evicted, or
 * refused): when its next unconsumed entry is behind the cursor (and not
 * behind the window's base), the cursor moves back to it, so that the
 * prefetcher offers it, and walks again what follows (what is cached or
 * in flight is passed over by the caller's skip), when the lead has room
 * for it. Returns whether the cursor moved.
 */
bool order_queue_requeue(struct order_queue *q, uint32_t id);

/** What .hintfs/stats shows of the queue. */
struct order_queue_stats {
	uint64_t pos;	 /**< oldest unconsumed entry of the current hint */
	uint64_t len;	 /**< its length; 0 with no hint */
	int64_t epoch;	 /**< its epoch, -1 if unnamed or none */
	uint32_t queued; /**< hints behind it */
};

/** Fills @st. */
void order_queue_stats(const struct order_queue *q,
		       struct order_queue_stats *st);

/**
 * How far the prefetcher's cursor is ahead of the readers: entries from
 * the current hint's base (order_base()) to the next one order_queue_pick()
 * would look at, counting through the queued hints. What the streams'
 * merge compares.
 */
uint64_t order_queue_lead(const struct order_queue *q, size_t window);

/* ---- streams ------------------------------------------------------------- */

/*
 * A *stream* is the hints of one writer (a rank: "#hintfs v1 stream=rank5",
 * or the writing process when unnamed): one order queue, with its own
 * cursor and window. The streams of a mount are merged:
 * - an open consumes the entry of the stream that needs the object soonest
 *   (order_queue_next_use(), in entries from that stream's readers), as
 *   readers do not say which stream they read for;
 * - the prefetcher takes, one id at a time, from the stream whose cursor is
 *   the fewest entries ahead of its readers (order_queue_lead(); ties go
 *   round-robin), so a fast stream cannot starve a slow one;
 * - an object's next use is the earliest over the streams.
 */

/**
 * Streams at once: a node runs 8 ranks, 16 at most, each one stream;
 * 64 leaves room for jobs that share a mount and for finished streams
 * kept for their stats. Each costs a look per open, per eviction query
 * and per pick, so the bound also bounds those.
 */
#define ORDER_STREAMS_MAX 64

/** A stream's name: "rank5" (1-32 of [A-Za-z0-9._-]) or "pid:1234". */
#define ORDER_STREAM_NAME_MAX 40

/**
 * A stream nobody has hinted or read from for 10 minutes gives its slot up
 * when a new stream needs one, whoever wrote it (a writer in another pid
 * namespace, whose end we cannot see, or a pid reused since). Not sooner:
 * a live trainer's stream pauses for its validation passes and checkpoint
 * saves, minutes at most, and must keep its place through them; and not
 * later, as a mount whose 64 slots are full refuses every new stream
 * meanwhile. Only under that pressure: a paused stream costs nothing but
 * its slot.
 */
#define ORDER_STREAM_IDLE_NS (600ull * 1000000000ull)

/** Why a stream was reclaimed (order_streams.recent). */
enum order_reclaim_why {
	ORDER_RECLAIM_EXITED = 1, /**< the process that wrote it has ended */
	ORDER_RECLAIM_IDLE,	  /**< idle past ORDER_STREAM_IDLE_NS */
};

/** Streams remembered in order_streams.recent (the stats show them). */
#define ORDER_RECLAIMED_RECENT 8

/** A reclaimed stream, for the stats. */
struct order_reclaimed {
	char name[ORDER_STREAM_NAME_MAX];
	pid_t owner; /**< its writer, 0: unknown */
	enum order_reclaim_why why;
	uint64_t unread; /**< entries its hints still had to read */
};

/** Whether process @pid (> 0, in the daemon's pid namespace) still runs. */
typedef bool (*order_alive_cb)(void *arg, pid_t pid);

/**
 * The pace of a stream's readers: the entries they consumed in each of the
 * last ORDER_PACE_BUCKETS slices of the pace horizon.
 */
#define ORDER_PACE_BUCKETS 8
struct order_pace {
	uint64_t at;			/**< the current slice (time / width) */
	uint32_t n[ORDER_PACE_BUCKETS]; /**< consumed per slice, ring */
};

/** One stream. */
struct order_stream {
	char name[ORDER_STREAM_NAME_MAX]; /**< "" when the slot is free */
	struct order_queue q;		  /**< its hints */
	uint64_t hints;			  /**< hints it received */
	uint64_t stalls;	/**< reads of objects it opened that waited */
	uint64_t stall_ns;	/**< how long they waited */
	uint64_t last_hint;	/**< order_streams.hints_seen at its last hint:
				     the slot of the stream idle longest is
				     reused first */
	struct order_pace pace; /**< how fast its readers consume */
	pid_t owner;		/**< the process that wrote its latest hint;
				     0: unknown (another pid namespace, the
				     -o hint= watcher) */
	uint64_t active_ns;	/**< its latest hint or consumed open */
};

/** The streams of one mount. Caller-owned storage; the caller locks. */
struct order_streams {
	struct order_stream s[ORDER_STREAMS_MAX];
	unsigned int rr;     /**< where the next tie-break starts */
	uint64_t hints_seen; /**< hints added, over all streams */
	int latest;	     /**< the stream of the latest hint, or -1 */
	uint64_t pace_ns;    /**< the pace horizon; 0: no pacing (see
				  order_streams_set_pace()) */
	order_cost_cb cost;  /**< the entries' bytes; NULL: none (see
				  order_streams_set_cost()) */
	void *cost_arg;
	uint32_t pace_min;    /**< entries ahead of the front at least */
	order_alive_cb alive; /**< whether a writer still runs; NULL: the
				   exit rule is off (order_streams_get()) */
	void *alive_arg;
	uint64_t reclaimed_exited; /**< streams reclaimed: writer ended */
	uint64_t reclaimed_idle;   /**< ... idle past ORDER_STREAM_IDLE_NS */
	struct order_reclaimed recent[ORDER_RECLAIMED_RECENT]; /**< the latest
				   reclaimed, a ring (newest at
				   (reclaimed_exited + reclaimed_idle - 1) %
				   ORDER_RECLAIMED_RECENT) */
};

/** Readies @ss with no stream. */
void order_streams_init(struct order_streams *ss);

/** Frees every stream's hints (and forgets the pace settings). */
void order_streams_fini(struct order_streams *ss);

/**
 * Paces the prefetch: a stream's cursor goes no further past its readers'
 * front than the entries they consumed in the last @horizon_ns, and at
 * least @min entries (still within the window). Readers that consume 250
 * entries a second then have about 250 fetched ahead, not the whole
 * window at once. @horizon_ns 0: no pacing (the default).
 */
void order_streams_set_pace(struct order_streams *ss, uint64_t horizon_ns,
			    uint32_t min);

/**
 * Counts the lead in bytes: @cost gives an id's (under the caller's lock),
 * for the hints added from now on. NULL (the default): every entry costs
 * 0 and order_streams_pick()'s byte bound never stops the cursor.
 */
void order_streams_set_cost(struct order_streams *ss, order_cost_cb cost,
			    void *arg);

/**
 * Turns on the exit rule of order_streams_get(): @alive says whether a
 * stream's writer still runs (called under the caller's lock).
 */
void order_streams_set_alive(struct order_streams *ss, order_alive_cb alive,
			     void *arg);

/**
 * The stream named @name (NUL-terminated, shorter than
 * ORDER_STREAM_NAME_MAX) for a hint written by process @owner (0:
 * unknown) at @now_ns, made when there is none. A new stream takes a free
 * slot, else the slot of a stream (its stats go with it) with nothing
 * left to read, else of one whose writer has ended (the alive callback),
 * else of one idle (no hint, no open consumed) for ORDER_STREAM_IDLE_NS;
 * in each class the one idle longest. The last two are *reclaimed*:
 * counted and remembered in @ss. Returns its index, or -ENOSPC when
 * ORDER_STREAMS_MAX streams still have entries to read, -EINVAL for a bad
 * name.
 */
int order_streams_get(struct order_streams *ss, const char *name, pid_t owner,
		      uint64_t now_ns);

/**
 * Adds @o to stream @i as order_queue_add() does (the other streams keep
 * theirs); returns what @replace unlinked, for the caller to destroy.
 */
struct order *order_streams_add(struct order_streams *ss, int i,
				struct order *o, bool replace);

/**
 * A reader opened @id at @now_ns (CLOCK_MONOTONIC): the stream that needs
 * it soonest consumes it (order_queue_note_open()), and counts it in its
 * pace. Returns that stream's index, or -1 when no stream expects @id.
 */
int order_streams_note_open(struct order_streams *ss, uint32_t id,
			    uint64_t now_ns);

/**
 * How far stream @i's prefetch may run past its readers' front at @now_ns
 * (order_streams_set_pace()), in entries; SIZE_MAX when unpaced.
 */
size_t order_streams_pace(struct order_streams *ss, int i, uint64_t now_ns);

/** The earliest order_queue_next_use() of @id over the streams. */
uint64_t order_streams_next_use(const struct order_streams *ss, uint32_t id);

/**
 * Fills @ids with up to @room ids to prefetch, one at a time from the
 * stream whose cursor is the fewest entries ahead of its readers (ties
 * round-robin), each stream within its own window of @window entries and
 * its pace at @now_ns (order_queue_pick(), order_streams_set_pace()), and
 * all of them within @max_bytes of lead (order_streams_lead_bytes(): the
 * cursors stop where the next entry would pass it, but one entry goes
 * when the lead is empty). An id two streams expect is offered by each:
 * @skip (in flight already) passes over the second. Returns how many.
 */
size_t order_streams_pick(struct order_streams *ss, size_t window,
			  uint64_t max_bytes, uint64_t now_ns,
			  order_skip_cb skip, void *arg, uint32_t *ids,
			  size_t room);

/** The lead's bytes (order_queue_lead_bytes()) over every stream. */
uint64_t order_streams_lead_bytes(const struct order_streams *ss);

/**
 * Object @id left the cache before its read: order_queue_requeue() in
 * every stream. Returns whether a cursor moved.
 */
bool order_streams_requeue(struct order_streams *ss, uint32_t id);

/**
 * The streams' unread entries within @window of their readers, merged
 * round-robin (entry k of each stream, then k + 1 ...; a stream that has
 * no more leaves a gap): stores up to @max ids from merged position *@at
 * on, and moves *@at past the positions looked at. Returns how many were
 * stored (0: nothing further).
 */
size_t order_streams_ahead(const struct order_streams *ss, size_t window,
			   size_t *at, uint32_t *ids, size_t max);

/** Whether slot @i holds a stream. */
static inline bool order_stream_used(const struct order_streams *ss, int i)
{
	return ss->s[i].name[0] != '\0';
}

#endif /* HINTFS_PREFETCH_ORDER_H */
