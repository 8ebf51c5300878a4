/*
 * prefetch/engine_internal.h - what the engine's files share: the tuning
 * constants, the fetch table's types, struct pf and the functions the
 * files call across (each named pf_, tests/check_symbols.sh).
 *
 * Includers: prefetch/engine*.c, prefetch/writer.c, tests/unit/.
 *
 *   engine.c        the design (top comment), hints, lifecycle
 *   engine_sched.c  part queues and the scheduler (what starts next)
 *   engine_fetch.c  the fetch table, fetch_mem, how a fetch ends
 *   engine_net.c    the network threads: arming parts, attempts' ends
 *   engine_limit.c  how many GETs run: the in-flight controller
 *   engine_read.c   the read path (pf_read, pf_read_ref)
 *   engine_stats.c  pf_get_stats()
 *   engine_block.c  large objects cached by blocks: ids, keys, reads
 *   writer.c        the cache writer thread: completed fetches into the cache
 *
 * Every field of struct pf is under pf->mu unless its comment says
 * otherwise; see engine.c's top comment for the invariants.
 */
#ifndef HINTFS_PREFETCH_ENGINE_INTERNAL_H
#define HINTFS_PREFETCH_ENGINE_INTERNAL_H

#include "prefetch/order.h"
#include "prefetch/prefetch.h"
#include "prefetch/source.h"
#include "prefetch/tier.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * GETs in flight (engine_limit.c). max_inflight is a cap, not the
 * operating point: the engine runs as many as its readers' work needs
 * (Little's law: objects/s x seconds per GET, with room), and the cap only
 * bounds that. 2,048 by default: a node of 8 GPUs reads up to 20,000
 * objects/s, which at S3's 50 ms is 1,000 in flight and at 100 ms 2,000.
 * Memory stays bounded by fetch_mem whatever the cap (2,048 objects of
 * 110 KB are 225 MB of the 512 MiB; parts of 8 MiB stop at 64).
 */
#define PF_INFLIGHT_DEFAULT 2048
/* A cold start runs 64: 2,000 objects/s at ~30 ms each with room (the old
 * fixed operating point, so no mount starts slower than it did); idle, the
 * target decays no lower. */
#define PF_INFLIGHT_START 64
/* SlowDown cuts go no lower than 4: some progress while the server
 * recovers. */
#define PF_INFLIGHT_MIN 4
/* The controller looks once per tick: 100 ms, or one GET's latency if
 * longer (a change of the target shows in the completions only after a
 * round trip). */
#define PF_TICK_NS 100000000ull
/* The target is twice the in-flight count that carried the last tick's
 * completions: room for the readers' rate to double within one tick. */
#define PF_HEADROOM 2
/* Connections beyond the cap's: a retry opens a fresh one while the
 * broken one closes, and the LIST workers at mount share the client. */
#define PF_CONN_SLACK 16
/* One SlowDown cut per 100 ms: a burst of 503s is one signal, not many. */
#define PF_CUT_GAP_NS 100000000ull
/*
 * The latency brake, for a server that queues what it cannot serve and
 * answers no SlowDown (an RGW or a MinIO past its CPU: the RGW here stops
 * near 1,600 GETs/s and queues the rest). Each growth of the limit is
 * judged PF_BRAKE_JUDGE ticks on (a change shows in the completions one
 * round trip later, and the ticks last a round trip at least): if the
 * bytes a second rose less than 1/PF_BRAKE_GAIN while the latency rose
 * 1/PF_BRAKE_LAT or more, the extra GETs only lengthened the server's
 * queue, which every read then waits behind. The limit goes back to what
 * it was before that growth and holds PF_BRAKE_HOLD ticks; then it probes
 * again, by an eighth (ssthresh is set there).
 */
#define PF_BRAKE_JUDGE 2
#define PF_BRAKE_GAIN  16
#define PF_BRAKE_LAT   4
#define PF_BRAKE_HOLD  8
/* 4,096 hinted objects ahead: two seconds of a fast reader at 2,000
 * objects/s, so the window never runs dry between two wake-ups. */
#define PF_WINDOW_DEFAULT 4096
/*
 * Pacing (order_streams_set_pace()): within the window, a stream's
 * prefetch runs as far past its readers' front as they read in the last
 * second, and at least 256 entries. A GPU-bound job that reads 256 files
 * a second then has a second of them fetched ahead, not its whole epoch
 * at once: on 2 cores shared with the S3 server (1.2-1.5 ms of its CPU per
 * GET), fetching a 2,000-file epoch in its first two seconds delayed the
 * first batch's decoding by 1.2-1.8 s. 256 covers the first batches a
 * DataLoader asks for before any file is open (4 workers x 64) and, at
 * 20-50 ms per GET, readers of up to 5,000 files/s while the pace is
 * measured.
 */
#define PF_PACE_DEFAULT_MS 1000
#define PF_PACE_MIN	   256
/* 8 MiB parts: few enough requests for a large object, and each part
 * still long enough to amortize a round trip. */
#define PF_PART_DEFAULT (8ull << 20)
/* Objects up to 256 MiB are fetched whole (in parallel parts); larger
 * ones are not what a training sample is, and are read through. */
#define PF_OBJECT_MEM_DEFAULT (256ull << 20)
/* 512 MiB of fetch buffers at least: 4,096 objects of ~110 KB (the
 * window) with room, or 64 parts of 8 MiB (one per GET in flight). */
#define PF_FETCH_MEM_DEFAULT (512ull << 20)
/*
 * And 256 MiB per network thread: an object holds its buffer from its GET
 * to its commit, so the bytes held grow with the objects per second. On 16
 * cores (8 threads, 100 KB objects, 0 ms, doc/benchmarks.md) 512 MiB held
 * 17,800 objects/s, with readers waiting for room; 2 GiB held 23,100/s at
 * less CPU per object (0.35 ms against 0.43).
 */
#define PF_FETCH_MEM_PER_NET (256ull << 20)
/* A read-through object reads one part ahead of its reader, and keeps the
 * part before the reader's for the kernel's out-of-order reads: three
 * parts (24 MiB) per open read-through at most. */
#define PF_STREAM_AHEAD 1
/* A reader gives up after twice the budget plus 5 s: its part may queue
 * behind others for up to a budget before its own starts. */
#define PF_WAIT_SLACK_MS 5000
/* Hints queued behind the current one, per stream: an epoch's hint is
 * written once per epoch, so 16 is room for a trainer far ahead of its
 * reads; each holds about 9 bytes per entry. */
#define PF_HINTS_QUEUED_MAX 16
/* Warm-list entries pending: every object four times over (a few "warm
 * ." in a row), at least 64 Ki; 4 bytes each. */
#define PF_WARM_PER_OBJECT 4
#define PF_WARM_MIN	   65536
/* Queued parts looked at per start for one that may start (a read-through part
 * may wait for memory while the parts behind it could go). */
#define PF_SCAN_MAX 64

/*
 * The prefetch's lead in bytes (order_streams_lead_bytes(): what the
 * cursors passed that no reader has read) stays within the cache's
 * capacity, less the bytes of files held open, less an eighth: every byte
 * of the lead must be in the cache at once until read, or the objects
 * fetched last evict ones needed sooner or are refused, and their GETs
 * are lost (with a dataset twice the cache and the next epoch's hint
 * early, a lead of 4,096 entries made 1.17x the GETs of Belady's optimum).
 * The eighth is for what the engine does not count: objects open (next use
 * 0) and the sample an eviction weighs (cache/evict.c), which with 7/8 of
 * the cache named by the lead holds no other victim with probability
 * (7/8)^32 = 1.4 % a sample.
 */
#define PF_LEAD_MARGIN 8
/*
 * A bound on the lead learned from the cache (an object fetched ahead left
 * it before its read: pf_requeue()) holds until the readers have read 8
 * times the lead it cut. Lifted, the lead grows back to the capacity's
 * bound, and if what filled the cache is still there, the objects past
 * what fits are refused again, a few GETs lost (3 of 14 objects ahead, in
 * test_refused_fetched_again()): once per 8 leads read, not per lead
 * (about 20 % more GETs there when lifted after each lead).
 */
#define PF_LEAD_RELEARN 8
/*
 * Network threads at most (-o net_threads). Each drives its own sources
 * (a curl multi handle and its sockets) and costs a thread and an epoll
 * set; 64 is past any core count that one mount's scheduler under one
 * mutex would keep busy (engine.c: "Threads").
 */
#define PF_NET_THREADS_MAX 64
/* Without -o net_threads: half the cores, at most 8, at least 1. The
 * other half is the readers' (FUSE workers, the cache writer, a
 * DataLoader's decoding); 8 threads carried ~5,500 objects/s each on a
 * 16-core machine's one thread before, far past a node's 25,000. */
#define PF_NET_THREADS_AUTO_MAX 8

/* Index commits: up to 64 objects or 64 MiB per LMDB write transaction
 * (one commit per object cost more than a 110 KB object's write). */
#define PF_COMMIT_BATCH 64
#define PF_COMMIT_BYTES (64ull << 20)
struct pf_fetch;
struct pf_queue;

enum pf_part_state {
	PART_IDLE,    /* not asked for yet (streams), or released */
	PART_QUEUED,  /* in pf->demand or pf->ahead */
	PART_RUNNING, /* in the multi handle */
	PART_DELAYED, /* in pf->delayed, waiting for its retry's due time */
	PART_DONE,    /* buf holds its bytes */
	PART_FAILED,  /* ended for good without them */
};

/* One ranged GET of a fetch. */
struct pf_part {
	struct pf_fetch *f;
	uint64_t off;
	size_t len;
	char *buf;	   /* len bytes, from its first start on */
	struct pf_get get; /* its GET: the request, and the source's
			      state from its first start on */
	enum pf_part_state state;
	int attempts;
	uint32_t pins;	    /* readers waiting on or copying from buf */
	bool over;	    /* started past fetch_mem (see the top) */
	uint64_t first_ns;  /* when the first attempt started */
	uint64_t att_ns;    /* when the current attempt started */
	uint64_t due_ns;    /* when a retry may start */
	struct pf_queue *q; /* the queue it is in, or NULL */
	struct pf_part *prev, *next;
	/* The network thread that took it (index in pf->nets): only that
	 * thread arms, cancels or reads the GET of a running part. Set at
	 * each take; a retry may run on another thread (source.h). */
	uint16_t net;
};

/* The part whose GET @g is. */
#define PF_PART_OF(g)                                                          \
	((struct pf_part *)((char *)(g)-offsetof(struct pf_part, get)))

struct pf_fetch {
	uint32_t id;
	char *key; /* the cache's key: for a block, the object's name,
		      then the block's (engine_block.c) */
	size_t key_len;
	size_t name_len; /* bytes of key that name the S3 object */
	uint64_t base;	 /* where the fetch's bytes start in the object:
			    a block's offset, else 0 */
	char *etag;
	uint64_t size;
	struct pf_part *parts; /* n_parts of them */
	uint32_t n_parts;
	uint32_t parts_done;
	uint32_t parts_failed;
	uint32_t running;	  /* parts in the multi handle */
	uint64_t mem;		  /* bytes of pf->mem this fetch holds */
	int err;		  /* first fatal error, 0 if none */
	enum s3_err_kind kind;	  /* ... and its kind */
	bool read_through;	  /* not cached: parts as asked (see the top) */
	bool range;		  /* a read-through of the pages under one
				     read of a block, outside the table, in
				     pf->ranges (engine_block.c) */
	bool demand;		  /* a reader waits: parts go first */
	_Atomic uint64_t wait_ns; /* when a reader first waited on it (a
				     tier hedge's clock: its GET's wait_ns),
				     PF_GET_NO_WAIT: none yet */
	bool in_table;		  /* still in pf->by_id */
	bool tier;		  /* its part may be read from the shared cache
				     tier (pf_get.tier; engine.c: "The tier") */
	uint32_t warm_refs;	  /* warm-list entries waiting on this fetch */
	int refs;		  /* readers holding it, + 1 for the table */
	uint32_t waiters;	  /* readers waiting on @cv for its parts */
	bool cv_ready;		  /* @cv initialized (at the first wait) */
	pthread_cond_t cv;	  /* its parts' waiters: a part's end wakes only
				     the readers of its fetch (CLOCK_MONOTONIC) */
	uint32_t pos;		  /* read-through: first part of latest read */
	struct pf_fetch *rt_next, *rt_prev; /* in pf->read_throughs, or
					       pf->ranges */
};

/* Readers of one large object told apart by where they read: a DataLoader
 * worker per shard, or a few reading one zip, each keeps its read-ahead
 * while others jump around the same object. */
#define PF_BLOCK_CURSORS 4

/*
 * An object cached by blocks (engine_block.c): larger than max_object_mem,
 * its bytes are blocks of part_size, each an id of its own, a *slot*,
 * after the caller's ids: base .. base + n - 1.
 */
struct pf_blocked {
	uint32_t id;   /* the caller's id of the object */
	uint32_t base; /* its first block's slot */
	uint32_t n;    /* its blocks */
	uint64_t size; /* its size (the listing's) */
	/* Under mu, per reader of it seen lately (a cursor): where its
	 * latest read ended (0: none), and the first block its read-ahead
	 * has not asked for yet; a new reader takes the cursors in turn. */
	uint64_t end[PF_BLOCK_CURSORS];
	uint32_t next_ra[PF_BLOCK_CURSORS];
	uint8_t run[PF_BLOCK_CURSORS]; /* reads in a row on from it */
	uint8_t turn;
};

/* Blocks a sequential reader of a large object has asked ahead of its
 * read: two of 8 MiB keep a stream of 1 MiB reads fed at 20-100 ms a GET
 * (the read-through that came before read one part ahead, and kept one
 * behind). */
#define PF_BLOCK_AHEAD 2

/* A read that starts within 1 MiB of where the latest read of its
 * object ended goes on from it: the kernel's readahead sends a reader's
 * READs (128 KiB to 1 MiB each) a few at a time, and threads answer them
 * out of order. A reader is sequential once PF_SEQ_RUN of its reads began
 * exactly where it had read to: random readers land near each other now
 * and then, exactly at a cursor's end almost never. */
#define PF_SEQ_SLACK (1ull << 20)
#define PF_SEQ_RUN   2

/* A jump's range fetch reads whole pages: what the kernel's page cache
 * asks for anyway, and a 4 KiB read costs 4 KiB. */
#define PF_RANGE_ALIGN 4096ull

/* A block whose hinted ranges cover less than an eighth of it is left
 * out of the hint: fetching 8 MiB for a few pages of it would move more
 * than 8 times the bytes read (random 4 KiB records of a 1 GiB file
 * hinted block by block moved 131 times what was read); its reads fetch
 * their own pages (pf_read_range()). */
#define PF_BLOCK_SPARSE 8

/* Read-ahead slots queued for the scheduler at most (engine_block.c): a
 * few per sequential reader; the oldest go when it is full. */
#define PF_RA_MAX 64

/* A fetch that failed for good, remembered for a moment (see pf_read). */
struct pf_failure {
	uint32_t id;
	int err;
	uint64_t until_ns;
};

/* NOTE(fuse): after a read fails, the kernel's page cache reads the same
 * page again (the readahead attempt, then the read itself): a failure
 * answers every read of its object for one second instead of spending a
 * second retry budget on the same verdict. */
#define PF_FAILS	64
#define PF_FAIL_HOLD_NS 1000000000ull

/* A doubly linked FIFO of parts: O(1) to take a part out of the middle. */
struct pf_queue {
	struct pf_part *head;
	struct pf_part *tail;
};

/* Ids the prefetcher should look at next; filled under mu. */
struct pf_candidates {
	uint32_t ids[64];
	bool warm[64]; /* from the warm list, not a hint */
	size_t n;
	size_t first; /* the next one to look at */
};

/*
 * One network thread: its sources, which only it drives, and what it
 * alone reads. Fields not marked are set before the thread starts and
 * read-only after.
 */
struct pf_net {
	struct pf *pf;
	unsigned int idx;	    /* in pf->nets */
	pthread_t thread;	    /* runs pf_net_main() */
	bool started;		    /* thread created (pf_stop() joins it) */
	struct pf_source *src;	    /* the one source it drives (source.h):
				       its tier source with a tier
				       (tier_source.c), else origin */
	struct pf_source *origin;   /* its origin GETs */
	struct pf_source *tier_src; /* its tier GETs (a sibling of origin:
				       they end through origin), or NULL */
	uint32_t running;	    /* parts it runs (mu): its share */
};

struct pf {
	struct pf_config cfg;
	/* Ids, then the slots of blocks (engine_block.c); set at start. */
	uint32_t n_slots;	    /* every array by id has this many */
	struct pf_blocked *blocked; /* by id and by base, ascending */
	uint32_t n_blocked;
	uint32_t ra[PF_RA_MAX]; /* read-ahead slots to fetch, a ring */
	uint32_t ra_head, ra_n;
	pthread_t *writers;	/* n_writers cache writers (writer.c) */
	unsigned int n_writers; /* one per network thread */
	unsigned int writers_started;
	unsigned int writers_busy; /* writers in commit_batch(), under mu */
	long commit_delay_ms;	   /* the test hook's, read once at the start
				      (pf_writer_delay_ms()) */
	struct pf_net *nets;	   /* n_nets network threads (engine.c:
				      "Threads") */
	unsigned int n_nets;
	struct pf_source *src; /* nets[0]'s origin source: its clock is
				  the engine's */
	bool own_src;	       /* the sources are ours (curl), not the
				  config's */
	/* pf_schedule_prefetch() runs on one thread at a time (it owns
	 * carry); sched_want asks the one running it for another round. */
	pthread_mutex_t sched_mu;
	atomic_bool sched_want;

	pthread_mutex_t mu;
	pthread_cond_t cv;  /* a part ended, memory was given back or
			       the engine stops: waiters recheck
			       (CLOCK_MONOTONIC) */
	pthread_cond_t wcv; /* a fetch completed, or the engine stops:
			       a writer looks */
	bool stop;
	bool writer_stop;	 /* the network threads have ended: the
				    writers commit what is done, then
				    end (pf_stop()) */
	struct pf_fetch **by_id; /* n_slots entries: the fetch in flight */
	struct pf_fetch *read_throughs; /* the read-throughs in by_id */
	struct pf_fetch *ranges;	/* range fetches (readers' jumps into
					   blocks; engine_block.c) */
	struct pf_queue demand;		/* parts of fetches readers wait on */
	struct pf_queue ahead;		/* parts of prefetches, read-ahead */
	struct pf_queue delayed;	/* retries waiting for their due time */
	uint32_t running;		/* parts in the multi handle */
	uint64_t mem;			/* bytes of fetch buffers reserved */
	uint64_t mem_peak;
	uint32_t room_waiters; /* readers waiting for memory */
	uint64_t room_gen;     /* bumped whenever memory goes back or
				  the last room waiter leaves (pf_mem_sub(),
				  room_wait_end()): what wakes a held
				  prefetch; lost_wakeups looks at it */
	uint32_t over;	       /* running parts started past the bound */
	/* The in-flight controller (engine_limit.c). */
	uint32_t limit;	      /* parts that may run now: the target */
	uint32_t cap;	      /* cfg.max_inflight: the target's ceiling */
	uint32_t ssthresh;    /* past it the target grows by an eighth a
				 tick, not twice (set by SlowDown) */
	uint64_t last_cut_ns; /* last SlowDown cut of the limit */
	uint64_t tick_ns;     /* when the current tick began */
	uint32_t tick_done;   /* parts ended well in it */
	bool tick_bound;      /* a queued part waited for a slot in it */
	uint64_t lat_ns;      /* EWMA of a good attempt's time in flight,
				 0: none yet */
	uint64_t len_avg;     /* EWMA of their lengths, bytes */
	uint32_t rate;	      /* parts ended well per second, last tick */
	uint64_t tick_bytes;  /* their bytes, this tick */
	/* The brake's memory of the last PF_BRAKE_JUDGE ticks, oldest at
	 * past_i: each one's growth (the limit before it, 0: none), bytes
	 * a second and latency at its end. */
	struct pf_limit_past {
		uint32_t grew_from;
		uint64_t bps;
		uint64_t lat_ns;
	} past[PF_BRAKE_JUDGE];
	uint32_t past_i;
	uint32_t hold;		    /* ticks the brake still holds */
	uint64_t brakes;	    /* growths undone by the brake */
	struct order_streams hints; /* per stream: current first, then the
				       queue (order.h) */
	uint8_t *opened_by;	    /* n_slots: 1 + the stream whose entry the
				       last open consumed, 0: none (stalls
				       are counted to it) */
	struct pf_candidates carry; /* picked, not yet started (no room);
				       sched_mu's, not mu's */
	/* The lead's bound learned from the cache (engine_sched.c): when an
	 * object fetched ahead left it before its read, the lead's bytes then
	 * and open_bytes (what did fit) bound the two until lead_cap_left more
	 * bytes of hinted entries were read; UINT64_MAX: no such bound. */
	uint64_t lead_cap;
	uint64_t lead_cap_left;
	uint64_t open_bytes;	/* pf_slot_size() of the slots open_count has */
	struct pf_fetch **done; /* completed fetches for the writer, oldest
				   first */
	size_t n_done, cap_done;
	uint32_t *open_count; /* n_slots: readers with the object open */
	uint8_t *nocache;     /* n_slots bits: the cache refused it for
				 good (write error, bad ETag): read
				 through */
	struct pf_failure fails[PF_FAILS]; /* recent definitive failures */
	unsigned int fail_next;		   /* the slot the next failure takes */
	uint32_t *warm_ids; /* the warm list: fetch all, no window */
	size_t warm_n, warm_cap;
	size_t warm_next;   /* next entry to look at */
	struct tier *tier;  /* the shared cache tier, or NULL */
	struct pf_stats st; /* counters under mu, but for: */
	/* The read path's counters, atomic (relaxed) so that a cache hit
	 * takes no engine lock; pf_get_stats() adds them into its snapshot. */
	struct {
		_Atomic uint64_t reads, cache_hits, read_through, stalls,
		    stall_ns, failed_reads, zero_copy, wakeups;
	} rd;
};

/* The engine's clock: its origin source's (mono_ns() but on the fake of
 * the unit tests). Any thread. */
static inline uint64_t pf_now(const struct pf *pf)
{
	return pf_source_now(pf->src);
}

/* Wakes every network thread (work queued, memory back, the stop). Any
 * thread, with or without mu. */
static inline void pf_wake(struct pf *pf)
{
	for (unsigned int i = 0; i < pf->n_nets; i++)
		pf_source_wake(pf->nets[i].src);
}

/* Wakes the network threads but @net: work is left past its share. Any
 * thread. */
static inline void pf_wake_others(struct pf *pf, const struct pf_net *net)
{
	for (unsigned int i = 0; i < pf->n_nets; i++)
		if (i != net->idx)
			pf_source_wake(pf->nets[i].src);
}

/* Adds @n to a read-path counter; any thread, with or without mu. */
static inline void rd_add(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* A fetch that failed for good answers its next reads for a moment. mu held. */
void pf_note_failure(struct pf *pf, uint32_t id, int err);

/*
 * Takes @f out of the table and gives back its memory; its buffers live
 * on until the last reader's reference goes. mu held; no part of @f is
 * running.
 */
void pf_fetch_leave(struct pf *pf, struct pf_fetch *f);

/* Shared between the engine's files; each is documented at its definition.
 * All of them take mu held, but pf_net_main() and pf_fetch_whole() (see there).
 */

/* engine_sched.c: the part queues and the scheduler */
void pf_queue_push(struct pf_queue *q, struct pf_part *p, bool front);
void pf_queue_remove(struct pf_part *p);
bool pf_fetch_whole(struct pf *pf, uint32_t id, const struct pf_object *o);
bool pf_schedule_prefetch(struct pf *pf);
void pf_lead_note_read(struct pf *pf, uint32_t slot);
void pf_requeue(struct pf *pf, uint32_t slot);
void pf_part_take(struct pf *pf, struct pf_part *p, uint64_t now);
struct pf_part *pf_take_parts(struct pf *pf, struct pf_net *net);

/* engine_fetch.c: the fetch table, its memory, how a fetch ends */
void pf_fetch_free(struct pf_fetch *f);
/* Wakes the readers waiting for @f's parts (a part ended, or the stop).
 * mu held. */
void pf_fetch_wake(struct pf_fetch *f);
void pf_mem_add(struct pf *pf, struct pf_fetch *f, uint64_t n);
void pf_mem_sub(struct pf *pf, struct pf_fetch *f, uint64_t n);
struct pf_fetch *pf_fetch_create(struct pf *pf, uint32_t id,
				 const struct pf_object *o, bool demand,
				 bool read_through);
void pf_read_through_maybe_drop(struct pf *pf, struct pf_fetch *f);
struct pf_fetch *pf_range_create(struct pf *pf, uint32_t slot,
				 const struct pf_object *o, uint64_t off,
				 size_t len);
void pf_read_through_release(struct pf *pf, struct pf_part *p);
void pf_read_through_reclaim(struct pf *pf, uint64_t need);
void pf_count_error(struct pf *pf, enum s3_err_kind kind);
void pf_whole_complete(struct pf *pf, struct pf_fetch *f);
void pf_fetch_fail(struct pf *pf, struct pf_fetch *f, int err,
		   enum s3_err_kind kind, int attempts,
		   const struct s3_status *st);
const struct retry_policy *pf_retry(const struct pf *pf);

/* engine_limit.c: how many parts may run (the in-flight controller) */
void pf_limit_init(struct pf *pf, uint64_t now);
void pf_limit_note_done(struct pf *pf, const struct pf_part *p, uint64_t now);
void pf_limit_cut(struct pf *pf);
void pf_limit_tick(struct pf *pf, uint64_t now);

/* engine_net.c: the network threads */
void pf_part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
		   bool retryable, const struct s3_status *st);
void pf_arm_parts(struct pf_net *net, struct pf_part *list);
void *pf_net_main(void *arg);

/* engine_read.c: the read path */
void pf_fetch_ask(struct pf *pf, struct pf_fetch *f, uint32_t a, uint32_t b);
ssize_t pf_read_slot(struct pf *pf, uint32_t slot, void *buf, size_t len,
		     uint64_t off, cache_ref_cb cb, void *arg);
ssize_t pf_read_range(struct pf *pf, uint32_t slot, void *buf, size_t len,
		      uint64_t off, cache_ref_cb cb, void *arg);

/* engine_block.c: objects cached by blocks */
int pf_blocks_init(struct pf *pf);
struct pf_blocked *pf_blocked_of(const struct pf *pf, uint32_t id);
int pf_describe(struct pf *pf, uint32_t slot, char *keybuf, size_t cap,
		struct pf_object *o);
uint32_t pf_key_slot(struct pf *pf, const char *key, size_t key_len);
size_t pf_slots_of_range(const struct pf *pf, uint32_t id, uint64_t off,
			 uint64_t len, uint32_t *out, size_t max);
uint32_t *pf_ids_to_slots(const struct pf *pf, const uint32_t *ids, size_t n,
			  size_t *out_n);
uint32_t *pf_ranges_to_slots(struct pf *pf, const struct pf_range *r, size_t n,
			     size_t *out_n);
ssize_t pf_block_read(struct pf *pf, struct pf_blocked *b, void *buf,
		      size_t len, uint64_t off, cache_ref_cb cb, void *arg,
		      bool ref_only);
size_t pf_pick_read_ahead(struct pf *pf, uint32_t *ids, size_t room);
uint64_t pf_slot_size(void *pf, uint32_t slot);

/* The test hook's hold before each commit, in ms (0: none), with its one
 * warning (writer.c). */
long pf_writer_delay_ms(void);
/* The cache writer thread's body (writer.c); @arg is the struct pf. */
void *pf_writer_main(void *arg);

#endif /* HINTFS_PREFETCH_ENGINE_INTERNAL_H */
