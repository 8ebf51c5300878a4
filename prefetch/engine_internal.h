/*
 * prefetch/engine_internal.h - what the engine's files share (private to
 * prefetch/engine.c and prefetch/writer.c): the fetch table's types and
 * struct pf.
 *
 *   engine.c  the network thread, fetches and parts, the read path
 *   writer.c  the cache writer thread: completed fetches into the cache
 *
 * Every field of struct pf is under pf->mu unless its comment says
 * otherwise; see engine.c's top comment for the invariants.
 */
#ifndef HINTFS_PREFETCH_ENGINE_INTERNAL_H
#define HINTFS_PREFETCH_ENGINE_INTERNAL_H

#include "prefetch/netloop.h"
#include "prefetch/order.h"
#include "prefetch/prefetch.h"
#include "prefetch/s3/s3_xfer.h"
#include "prefetch/tier.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

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
	char *buf;              /* len bytes, from its first start on */
	struct s3_xfer *x;      /* created with buf */
	enum pf_part_state state;
	int attempts;
	uint32_t pins;          /* readers waiting on or copying from buf */
	bool over;              /* started past fetch_mem (see the top) */
	uint64_t first_ns;      /* when the first attempt started */
	uint64_t due_ns;        /* when a retry may start */
	struct pf_queue *q;     /* the queue it is in, or NULL */
	struct pf_part *prev, *next;
	/* Running on the shared cache tier: in pf->tier_run since start_ns.
	 * hedge_denied: the budget refused its hedge, its reader waits. */
	bool on_tier;
	bool hedge_denied;
	uint64_t start_ns;
	struct pf_part *tprev, *tnext;
};

struct pf_fetch {
	uint32_t id;
	char *key;
	size_t key_len;
	char *etag;
	uint64_t size;
	struct pf_part *parts;  /* n_parts of them */
	uint32_t n_parts;
	uint32_t parts_done;
	uint32_t parts_failed;
	uint32_t running;       /* parts in the multi handle */
	uint64_t mem;           /* bytes of pf->mem this fetch holds */
	int err;                /* first fatal error, 0 if none */
	enum s3_err_kind kind;  /* ... and its kind */
	bool stream;            /* not cached: parts as asked (see the top) */
	bool demand;            /* a reader waits: parts go first */
	uint64_t wait_ns;       /* when a reader first waited on it (a tier
				   hedge's clock), 0: none yet */
	bool in_table;          /* still in pf->by_id */
	bool tier;              /* its part is read from the shared cache
				   tier (engine.c: "The tier") */
	bool tier_put;          /* the tier missed it: once fetched whole
				   from the origin, the writer PUTs it */
	uint32_t warm_refs;     /* warm-list entries waiting on this fetch */
	int refs;               /* readers holding it, + 1 for the table */
	uint32_t pos;           /* stream: first part of the latest read */
	struct pf_fetch *snext, *sprev; /* stream: in pf->streams */
};

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
#define PF_FAILS 64
#define PF_FAIL_HOLD_NS 1000000000ull

/* A doubly linked FIFO of parts: O(1) to take a part out of the middle. */
struct pf_queue {
	struct pf_part *head;
	struct pf_part *tail;
};

/* Ids the prefetcher should look at next; filled under mu. */
struct pf_candidates {
	uint32_t ids[64];
	bool warm[64];  /* from the warm list, not a hint */
	size_t n;
	size_t first;   /* the next one to look at */
};

struct pf {
	struct pf_config cfg;
	pthread_t thread;          /* the network thread (engine_main) */
	pthread_t writer;          /* the cache writer (writer_main) */
	bool writer_started;
	CURLM *multi;
	struct netloop net;        /* drives multi; netloop_wake() wakes the
				      network thread */

	pthread_mutex_t mu;
	pthread_cond_t cv;         /* a part ended, memory was given back or
				      the engine stops: waiters recheck
				      (CLOCK_MONOTONIC) */
	pthread_cond_t wcv;        /* a fetch completed, or the engine stops:
				      the writer looks */
	bool stop;
	bool writer_stop;          /* the network thread has ended: the
				      writer commits what is done, then
				      ends (pf_stop()) */
	struct pf_fetch **by_id;   /* n_ids entries: the fetch in flight */
	struct pf_fetch *streams;  /* the streams in by_id */
	struct pf_queue demand;    /* parts of fetches readers wait on */
	struct pf_queue ahead;     /* parts of prefetches, read-ahead */
	struct pf_queue delayed;   /* retries waiting for their due time */
	uint32_t running;          /* parts in the multi handle */
	uint64_t mem;              /* bytes of fetch buffers reserved */
	uint64_t mem_peak;
	uint32_t room_waiters;     /* readers waiting for memory */
	uint64_t room_gen;         /* bumped whenever memory goes back or
				      the last room waiter leaves (mem_sub(),
				      room_wait_end()): what wakes a held
				      prefetch; lost_wakeups looks at it */
	uint32_t over;             /* running parts started past the bound */
	double limit;              /* current in-flight limit (AIMD) */
	uint64_t last_cut_ns;      /* last SlowDown cut of the limit */
	struct order_streams hints;/* per stream: current first, then the
				      queue (order.h) */
	uint8_t *opened_by;        /* n_ids: 1 + the stream whose entry the
				      last open consumed, 0: none (stalls
				      are counted to it) */
	struct pf_candidates carry;/* picked, not yet started (no room) */
	struct pf_fetch **done;    /* completed fetches for the writer, oldest
				      first */
	size_t n_done, cap_done;
	uint32_t *open_count;      /* n_ids: readers with the object open */
	uint8_t *nocache;          /* n_ids bits: the cache refused it for
				      good (write error, bad ETag): stream */
	struct pf_failure fails[PF_FAILS];  /* recent definitive failures */
	unsigned int fail_next;    /* the slot the next failure takes */
	uint32_t *warm_ids;        /* the warm list: fetch all, no window */
	size_t warm_n, warm_cap;
	size_t warm_next;          /* next entry to look at */
	struct tier *tier;         /* the shared cache tier, or NULL */
	struct pf_part *tier_run;  /* parts running on the tier, oldest
				      first (by tnext): what the hedge
				      looks at */
	struct pf_part *tier_run_tail;
	uint64_t polled_ns;        /* engine thread: when the latest poll
				      whose answers were all judged began
				      (tier_hung()) */
	struct pf_stats st;        /* counters under mu, but for: */
	/* The read path's counters, atomic (relaxed) so that a cache hit
	 * takes no engine lock; pf_get_stats() adds them into its snapshot. */
	struct {
		_Atomic uint64_t reads, cache_hits, passthrough, stalls,
		    stall_ns, failed_reads, zero_copy;
	} rd;
};

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

/* The cache writer thread's body (writer.c); @arg is the struct pf. */
void *pf_writer_main(void *arg);

#endif /* HINTFS_PREFETCH_ENGINE_INTERNAL_H */
