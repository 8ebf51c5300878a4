/*
 * prefetch/engine.c - the prefetch engine: network threads driving many
 * GETs on their sources (source.h: a curl multi handle each in the
 * daemon, a fake on a virtual clock in tests/unit/test_engine.c), fed by
 * hints and by readers' misses. This
 * file holds the design (below), the hints and the engine's lifecycle;
 * the jobs live apart (engine_internal.h lists them): the scheduler
 * (engine_sched.c), the fetch table (engine_fetch.c), the network threads
 * (engine_net.c), the read path (engine_read.c) and the stats
 * (engine_stats.c); the shared cache tier is a source of its own under
 * the engine (tier_source.c).
 *
 * How it works. A *fetch* brings one object into memory as one or more
 * ranged GETs (*parts*), each with its own buffer, allocated when the part
 * starts. There are two kinds:
 * - a *whole* fetch (the object fits the cache) gets every part; once all
 *   have arrived the cache writer thread writes the object into the cache
 *   (many objects per index transaction) and drops the fetch: the network
 *   thread does no disk work. Readers that miss the cache join it (never a
 * second GET), or start one whose parts covering their read go first, and wait
 * only for those parts.
 * - a *read-through* (the cache cannot take the object: larger than the
 *   cache, an ETag the index cannot hold, a put that failed for good)
 *   gets only the parts readers ask for, plus one part of read-ahead;
 *   parts behind the reader are released. It is never cached, and it
 *   leaves the table when the last reader closes the object.
 * An object larger than the fetch memory allows (max_object_mem) is
 * neither: its blocks are objects of the engine's own (engine_block.c),
 * each fetched whole and cached.
 * Between misses the engine walks the current hint from the oldest entry
 * no reader has opened yet, up to a window of entries ahead, and no further
 * than the cache holds (PF_LEAD_MARGIN; an object passed that left the
 * cache before its read is offered again, engine_sched.c), and fetches
 * what is not cached; a queued hint follows on directly, so epoch N+1
 * starts downloading while epoch N finishes. Each hint stream (a rank, or
 * a writing process) has its own hints, cursor and window; the streams
 * are merged by need (order.h): the next id comes from the stream whose
 * cursor is the fewest entries ahead of its readers.
 *
 * Limits. At most max_inflight GETs run (fewer after SlowDown): parts of
 * fetches a reader waits on (demand) start first, prefetches take what is
 * left. The memory of fetch buffers is bounded by fetch_mem: a whole fetch
 * reserves its object's size when created, a read-through each part when it
 * starts. Prefetch stops at the bound; a demand fetch waits for room
 * (fetches that complete give theirs back, streams' unpinned parts are
 * released on demand). A read-through part a reader waits on may pass the bound
 * when every byte under it is pinned by readers, one such part at a time,
 * so readers never wait on each other in a circle.
 *
 * Time. Each attempt of a part runs with a deadline taken from what is
 * left of the part's retry budget (as well as the stall timeout), so the
 * budget bounds the whole transfer, however slowly a server trickles. A
 * reader waits at most twice the budget plus PF_WAIT_SLACK_MS (queueing
 * behind other parts included), then fails with EIO. pf_cancel() ends
 * every wait at once.
 *
 * Readers do not follow the hint exactly (a DataLoader with W workers has
 * W batches open at once): which entries they have consumed, where the
 * window starts, and how soon an object is needed again is the hint
 * position index of prefetch/order.c; the engine feeds it opens and hints
 * and asks it for the next ids to fetch.
 *
 * The tier. With a shared cache tier (-o shared_cache, tier.h), each
 * network thread drives a tier source (tier_source.c) over its origin
 * source and its tier sibling, and the engine sees nothing else: it marks
 * a whole fetch of an object that fits in one part, and whose ETag (or
 * the cluster key) can prove a copy (f->tier, pf_get.tier), and says
 * since when a reader waits on it (pf_get.wait_ns). The tier source reads
 * the tier first: one attempt, no If-Match (the tier object is named by
 * the origin ETag), its answer judged by tier_check() before any reader
 * sees a byte. Whether it tries the tier is decided when its GET starts
 * (the breaker, tier_use()). A hit completes the fetch as an origin GET
 * would; a miss, a mismatch, an error or a timeout turns the same GET
 * into an origin GET at once, with the whole retry budget (the tier costs
 * time, never a read: pf_get.fresh_ns), so the part counts once in the
 * limits; after a miss or a mismatch the tier source queues the PUT of
 * the origin's bytes to the tier, sent in the background. A tier GET
 * whose reader has itself waited past the hedge (tier_hedge_ns()) is
 * cancelled and the origin read instead, within the hedge budget
 * (tier_hedge_take()); while the breaker is open, or the tier hung
 * (tier_hung()), every tier GET is cancelled, prefetches included, so
 * that the hint keeps its lead. Read-throughs never use the tier. Hints drive
 * prefetches from the tier exactly as from the origin.
 *
 * Threads. The network path runs on N threads (-o net_threads; struct
 * pf_net), each with its own sources (a curl multi handle for the origin
 * and its sibling for the tier, under its tier source): what scales with
 * objects/s (signing, curl's work, judging a tier answer) runs on them in
 * parallel, outside mu. The scheduling stays one: under mu, each thread takes
 * its share of the queued parts (pf_take_parts(): the limit over N, demand
 * first) and owns them until their attempt ends (p->net): only it arms, cancels
 * or reads their GETs. Prefetch picks run on one thread at a time
 * (sched_mu), the in-flight controller's tick once per tick whichever
 * thread sees it due, and a hedge a thread's tier source grants to
 * another's tier GET is carried out by that thread (cut_hedge). Wake-ups go to
 * every thread. Blocks and a jump's pages take no path of their own
 * (engine_block.c): a block a reader's read-ahead asks for waits in a ring
 * (pf->ra) for the prefetch picks, on whichever thread runs them, and becomes a
 * whole fetch in the table like a hinted one; the one GET of a jump's pages
 * (pf_read_range()) is out of the table, in pf->ranges, but its one part
 * waits in the demand queue like any reader's, so the thread that takes
 * it owns its GET until the attempt ends, a retry may run on another,
 * and whoever drops the last hold on it under mu (its reader, or the
 * thread that ended its last attempt) frees it.
 *
 * Locking. One mutex (mu) guards the fetch table, the part queues, the
 * hints, the memory count and the counters but those of the read path
 * (atomic: a cache hit takes no engine lock). Requests are signed outside
 * it (pf_arm_parts()). Invariant: nobody calls the cache while holding mu,
 * because the cache calls back into pf_next_use() by object id, which
 * takes mu. A whole fetch leaves the table only after its object is
 * committed to the cache, so a reader that finds no fetch for a missing
 * object and then misses the cache again knows no GET is under way. A part
 * buffer is freed only with no reader pinning it and no transfer writing
 * into it.
 */
#include "prefetch/prefetch.h"
#include "prefetch/engine_internal.h"
#include "prefetch/order.h"
#include "cache/cache.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/retry.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

_Static_assert(PF_STREAMS_MAX == ORDER_STREAMS_MAX &&
		   PF_STREAM_NAME_MAX == ORDER_STREAM_NAME_MAX,
	       "pf_stats.streams mirrors order_streams");
_Static_assert(PF_RECLAIMED_RECENT == ORDER_RECLAIMED_RECENT,
	       "pf_stats.reclaimed mirrors order_streams.recent");
_Static_assert(ORDER_STREAMS_MAX < 256,
	       "opened_by holds 1 + a stream in a byte");

/* ---- hints ----------------------------------------------------------------
 */

void pf_note_open(struct pf *pf, uint32_t id)
{
	int who;

	if (id >= pf->n_slots)
		return;
	pthread_mutex_lock(&pf->mu);
	if (!pf->open_count[id]++)
		pf->open_bytes += pf_slot_size(pf, id);
	who = order_streams_note_open(&pf->hints, id, pf_now(pf));
	if (who >= 0) {
		pf->opened_by[id] = (uint8_t)(who + 1);
		pf_lead_note_read(pf, id);
	}
	pthread_mutex_unlock(&pf->mu);
	/* A window moved only if a stream expected this open. */
	if (who >= 0)
		pf_wake(pf);
}

void pf_note_close(struct pf *pf, uint32_t id)
{
	bool wake = false;

	if (id >= pf->n_slots)
		return;
	pthread_mutex_lock(&pf->mu);
	if (pf->open_count[id] && !--pf->open_count[id]) {
		pf->open_bytes -= pf_slot_size(pf, id);
		/* Its room in the cache may be what a bound lead waits for. */
		wake = pf->lead_cap != UINT64_MAX;
		if (pf->by_id[id])
			pf_read_through_maybe_drop(pf, pf->by_id[id]);
	}
	pthread_mutex_unlock(&pf->mu);
	if (wake)
		pf_source_wake(pf->src);
}

/*
 * Whether the process that wrote a stream's hint still runs (order.h's
 * exit rule). NOTE(fuse): the pid is the one the kernel put in the request,
 * translated into our pid namespace; EPERM is a process of another user,
 * alive. A zombie counts as alive until its parent reaps it.
 */
static bool writer_alive(void *arg, pid_t pid)
{
	(void)arg;
	return kill(pid, 0) == 0 || errno != ESRCH;
}

/* pf_hint() of slots: objects, and blocks of large ones (engine_block.c). */
static int hint_slots(struct pf *pf, const char *stream, const uint32_t *ids,
		      size_t n, int64_t epoch, enum pf_replace replace,
		      pid_t owner)
{
	struct order *h = order_create(ids, n, epoch, pf->n_slots);
	struct order_queue_stats os;
	struct order *old;
	int i;

	if (!h)
		return -ENOMEM;
	/* The writer's process: a hint written by a thread that then ends
	 * must not look like a process that has ended (proc_tgid()). */
	if (owner > 0)
		owner = proc_tgid(owner) ?: owner;
	pthread_mutex_lock(&pf->mu);
	pf->st.hints_total++;
	if (!n && replace != PF_REPLACE) {
		/* Nothing to follow: queueing it would only stall the next. */
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return 0;
	}
	i = order_streams_get(&pf->hints, stream, owner, pf_now(pf));
	if (i < 0) {
		/* PF_STREAMS_MAX streams with hints still to read. */
		pf->st.hints_refused++;
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return i;
	}
	order_queue_stats(&pf->hints.s[i].q, &os);
	if (replace == PF_REPLACE_IF_FULL)
		replace = os.len && os.queued >= PF_HINTS_QUEUED_MAX
			      ? PF_REPLACE
			      : PF_QUEUE;
	if (replace == PF_QUEUE && os.len && os.queued >= PF_HINTS_QUEUED_MAX) {
		/* Each queued hint holds its entries: a writer that never
		 * waits for an epoch to pass must not fill the memory. */
		pf->st.hints_refused++;
		pthread_mutex_unlock(&pf->mu);
		order_destroy(h);
		return -EBUSY;
	}
	old = order_streams_add(&pf->hints, i, h, replace == PF_REPLACE);
	pthread_mutex_unlock(&pf->mu);
	order_destroy(old);
	pf_wake(pf);
	return 0;
}

int pf_hint(struct pf *pf, const char *stream, const uint32_t *ids, size_t n,
	    int64_t epoch, enum pf_replace replace, pid_t owner)
{
	uint32_t *slots;
	size_t k;
	int rc;

	if (!pf->n_blocked)
		return hint_slots(pf, stream, ids, n, epoch, replace, owner);
	/* A large object named whole is each of its blocks, in order. */
	slots = pf_ids_to_slots(pf, ids, n, &k);
	if (!slots)
		return -ENOMEM;
	rc = hint_slots(pf, stream, slots, k, epoch, replace, owner);
	free(slots);
	return rc;
}

int pf_hint_ranges(struct pf *pf, const char *stream, const struct pf_range *r,
		   size_t n, int64_t epoch, enum pf_replace replace,
		   pid_t owner)
{
	uint32_t *slots;
	size_t k;
	int rc;

	slots = pf_ranges_to_slots(pf, r, n, &k);
	if (!slots)
		return -ENOMEM;
	rc = hint_slots(pf, stream, slots, k, epoch, replace, owner);
	free(slots);
	return rc;
}

uint64_t pf_next_use(struct pf *pf, uint32_t id)
{
	uint64_t best;

	if (id >= pf->n_slots)
		return UINT64_MAX;
	pthread_mutex_lock(&pf->mu);
	/* Open right now: its reads may not have reached us yet (the open
	 * consumed its hint entry already), so it is needed at once. */
	best = pf->open_count[id] ? 0 : order_streams_next_use(&pf->hints, id);
	pthread_mutex_unlock(&pf->mu);
	return best;
}

/*
 * The cache's eviction callback, registered by pf_start(): the cache hands
 * back the id it was given with the object; an entry of an earlier session
 * comes without one, and is resolved from its key once (the cache keeps
 * the id).
 */
static uint64_t cache_next_use(void *arg, uint32_t *id, const char *key,
			       size_t key_len)
{
	struct pf *pf = arg;

	if (*id == CACHE_NO_ID)
		*id = pf_key_slot(pf, key, key_len);
	return pf_next_use(pf, *id);
}

/*
 * The cache's eviction notice, registered by pf_start(): an object fetched
 * ahead and not read yet is fetched ahead again (pf_requeue()).
 */
static void cache_evicted(void *arg, uint32_t id)
{
	struct pf *pf = arg;

	if (id >= pf->n_slots)
		return;
	pthread_mutex_lock(&pf->mu);
	pf_requeue(pf, id);
	pthread_mutex_unlock(&pf->mu);
	pf_source_wake(pf->src);
}

size_t pf_hint_ahead(struct pf *pf, size_t *at, uint32_t *ids, size_t max)
{
	size_t n;

	pthread_mutex_lock(&pf->mu);
	n = order_streams_ahead(&pf->hints, pf->cfg.window_objects, at, ids,
				max);
	pthread_mutex_unlock(&pf->mu);
	/* Blocks are the engine's: the caller knows objects only. */
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= pf->cfg.n_ids)
			ids[i] = PF_NO_ID;
	return n;
}

/* ---- lifecycle
 * ---------------------------------------------------------------- */

/* Copies the bytes @ref names into the buffer @arg (tier_load()). */
static ssize_t copy_ref(void *arg, const struct cache_ref *ref)
{
	if (ref->mem) {
		memcpy(arg, ref->mem, ref->len);
		return (ssize_t)ref->len;
	}
	for (size_t done = 0; done < ref->len;) {
		ssize_t n = pread(ref->fd, (char *)arg + done, ref->len - done,
				  (off_t)(ref->fd_off + done));

		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		done += (size_t)n;
	}
	return (ssize_t)ref->len;
}

/* A PUT owed to the tier whose bytes did not fit its queue: read back from
 * the local cache (tier_config.load). A PUT worker, without mu. */
static int tier_load(void *arg, const char *key, size_t key_len,
		     const char *etag, uint64_t size, void *buf)
{
	struct pf *pf = arg;
	ssize_t got = cache_read_ref(pf->cfg.cache, key, key_len, etag, size,
				     size, 0, copy_ref, buf);

	return got == (ssize_t)size ? 0 : -ENODATA;
}

/*
 * The connections the curl source may hold for @sides clients of
 * @cfg->max_inflight transfers each, with room for the LIST workers and
 * a retry's fresh connection. Each is a socket: the soft limit of open
 * files (often 1,024) is raised by as many, toward the hard one; where
 * the hard one leaves no room, the cap comes down to what fits, with a
 * warning, rather than GETs failing to connect.
 */
static long pf_fd_room(struct pf_config *cfg, unsigned int sides)
{
	long want = (long)cfg->max_inflight * sides + PF_CONN_SLACK;
	struct rlimit rl;
	rlim_t need;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return want;
	need = rl.rlim_cur + (rlim_t)want;
	if (rl.rlim_max != RLIM_INFINITY && need > rl.rlim_max)
		need = rl.rlim_max;
	if (need > rl.rlim_cur) {
		rl.rlim_cur = need;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	/* Half of what is open-able for sockets: the cache's segments,
	 * FUSE and the control socket need the rest. */
	if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)want > rl.rlim_cur / 2) {
		rlim_t room = rl.rlim_cur / 2 > PF_CONN_SLACK
				  ? rl.rlim_cur / 2 - PF_CONN_SLACK
				  : 0;
		unsigned int cap = (unsigned int)(room / sides);

		if (cap < PF_INFLIGHT_MIN)
			cap = PF_INFLIGHT_MIN;
		if (cap < cfg->max_inflight) {
			log_warn("max_inflight %u needs more open files than "
				 "the limit of %llu allows (ulimit -n): %u",
				 cfg->max_inflight,
				 (unsigned long long)rl.rlim_cur, cap);
			cfg->max_inflight = cap;
			want = (long)cap * sides + PF_CONN_SLACK;
		}
	}
	return want;
}

/*
 * How many network threads: the configured number, or half the cores
 * (PF_NET_THREADS_AUTO_MAX at most, 1 at least); one on a test's single
 * source.
 */
static unsigned int nets_count(const struct pf_config *cfg)
{
	long cores;

	if (cfg->source && !cfg->sources)
		return 1;
	if (cfg->net_threads)
		return cfg->net_threads < PF_NET_THREADS_MAX
			   ? cfg->net_threads
			   : PF_NET_THREADS_MAX;
	cores = sysconf(_SC_NPROCESSORS_ONLN);
	if (cores / 2 < 1)
		return 1;
	return cores / 2 < PF_NET_THREADS_AUTO_MAX ? (unsigned int)cores / 2
						   : PF_NET_THREADS_AUTO_MAX;
}

/*
 * Creates the network threads' sources (not the threads): a test's, or
 * make_source's per thread (the daemon's: a curl multi handle), with the
 * tier's client on a sibling of each. The connections are split between the
 * threads: each runs at most its share of the in-flight limit
 * (pf_take_parts()).
 */
static int nets_create(struct pf *pf)
{
	const struct pf_config *cfg = &pf->cfg;
	unsigned int n = nets_count(cfg);
	long conns;
	int rc;

	pf->nets = calloc(n, sizeof(*pf->nets));
	if (!pf->nets)
		return -ENOMEM;
	pf->n_nets = n;
	for (unsigned int i = 0; i < n; i++) {
		pf->nets[i].pf = pf;
		pf->nets[i].idx = i;
	}
	if (cfg->source || cfg->sources) {
		/* A test's sources: a tier's GETs on their siblings. */
		for (unsigned int i = 0; i < n; i++) {
			struct pf_net *net = &pf->nets[i];

			net->origin =
			    cfg->sources ? cfg->sources[i] : cfg->source;
			net->src = net->origin;
			net->tier_src = cfg->tier_sources ? cfg->tier_sources[i]
							  : cfg->tier_source;
		}
		pf->src = pf->nets[0].src;
		return 0;
	}
	if (!cfg->make_source || !cfg->s3)
		return -EINVAL;
	/* One connection per transfer, kept alive between requests: to the
	 * tier as well as to the origin when there is one (a fetch moves
	 * from one to the other, so both sides may have the cap in use). */
	conns = pf_fd_room(&pf->cfg, cfg->tier_s3 ? 2 : 1);
	conns = (conns + n - 1) / n + PF_CONN_SLACK;
	pf->own_src = true;
	for (unsigned int i = 0; i < n; i++) {
		struct pf_net *net = &pf->nets[i];

		rc = cfg->make_source(cfg->s3, NULL, conns, &net->origin);
		net->src = net->origin;
		if (!rc && cfg->tier_s3)
			rc = cfg->make_source(cfg->tier_s3, net->origin, conns,
					      &net->tier_src);
		if (rc)
			return rc;
	}
	pf->src = pf->nets[0].src;
	return 0;
}

/*
 * Puts each network thread's sources under a tier source (tier_source.c):
 * from now on the thread drives that one alone, and the tier's routing,
 * proof, hedge and breaker are the tier source's.
 */
static int tier_sources(struct pf *pf)
{
	struct pf_source **origins, **tiers, **out;
	int rc = -ENOMEM;

	origins = calloc(pf->n_nets, sizeof(*origins));
	tiers = calloc(pf->n_nets, sizeof(*tiers));
	out = calloc(pf->n_nets, sizeof(*out));
	if (origins && tiers && out) {
		for (unsigned int i = 0; i < pf->n_nets; i++) {
			origins[i] = pf->nets[i].origin;
			tiers[i] = pf->nets[i].tier_src;
		}
		rc = tier_source_create(pf->tier, pf->n_nets, origins, tiers,
					out);
	}
	for (unsigned int i = 0; !rc && i < pf->n_nets; i++)
		pf->nets[i].src = out[i];
	free(origins);
	free(tiers);
	free(out);
	return rc;
}

/* Joins the network threads started (the stop is set). */
static void nets_join(struct pf *pf)
{
	pthread_mutex_lock(&pf->mu);
	pf->stop = true;
	pthread_mutex_unlock(&pf->mu);
	for (unsigned int i = 0; i < pf->n_nets; i++) {
		if (!pf->nets[i].started)
			continue;
		pf_source_wake(pf->nets[i].src);
		pthread_join(pf->nets[i].thread, NULL);
		pf->nets[i].started = false;
	}
}

/* Frees the network threads' sources (ours only) and their table; every
 * GET released first. Accepts none created. */
static void nets_destroy(struct pf *pf)
{
	for (unsigned int i = 0; pf->nets && i < pf->n_nets; i++) {
		struct pf_net *net = &pf->nets[i];

		/* The tier source's own (it owns neither of its two). */
		if (net->src != net->origin)
			pf_source_destroy(net->src);
		if (!pf->own_src)
			continue;
		pf_source_destroy(net->tier_src);
		pf_source_destroy(net->origin);
	}
	free(pf->nets);
	pf->nets = NULL;
	pf->n_nets = 0;
	pf->src = NULL;
}

/*
 * Starts the cache writers: one per network thread. A writer spends about
 * two thirds of a network thread's CPU on an object (110 KB objects on the
 * fast origin: 96-166 us against 148-198 us, this 2-core machine), most
 * of it the kernel's copy into the cache file and the checksum, which run
 * in parallel; only the index commit is one at a time (LMDB's writer
 * lock), and it is one per batch. So one writer per network thread keeps
 * the commits ahead of the objects that the network threads complete,
 * where one writer alone would cap a node near 10,000 objects/s.
 */
static int start_writers(struct pf *pf)
{
	pf->n_writers = pf->n_nets ? pf->n_nets : 1;
	pf->commit_delay_ms = pf_writer_delay_ms();
	pf->writers = calloc(pf->n_writers, sizeof(*pf->writers));
	if (!pf->writers)
		return -ENOMEM;
	for (; pf->writers_started < pf->n_writers; pf->writers_started++) {
		int rc = -proc_thread_create(&pf->writers[pf->writers_started],
					     NULL, pf_writer_main, pf);

		if (rc)
			return rc;
	}
	return 0;
}

/* Ends the cache writers once they have committed every completed
 * fetch. */
static void stop_writers(struct pf *pf)
{
	pthread_mutex_lock(&pf->mu);
	pf->writer_stop = true;
	pthread_cond_broadcast(&pf->wcv);
	pthread_mutex_unlock(&pf->mu);
	for (unsigned int i = 0; i < pf->writers_started; i++)
		pthread_join(pf->writers[i], NULL);
	pf->writers_started = 0;
	free(pf->writers);
	pf->writers = NULL;
}

int pf_start(const struct pf_config *cfg, struct pf **out)
{
	struct pf *pf = calloc(1, sizeof(*pf));
	pthread_condattr_t ca;
	int rc;

	if (!pf)
		return -ENOMEM;
	pf->cfg = *cfg;
	if (!pf->cfg.max_inflight)
		pf->cfg.max_inflight = PF_INFLIGHT_DEFAULT;
	if (!pf->cfg.window_objects)
		pf->cfg.window_objects = PF_WINDOW_DEFAULT;
	if (!pf->cfg.pace_ms)
		pf->cfg.pace_ms = PF_PACE_DEFAULT_MS;
	if (!pf->cfg.part_size)
		pf->cfg.part_size = PF_PART_DEFAULT;
	if (!pf->cfg.fetch_mem) {
		pf->cfg.fetch_mem = PF_FETCH_MEM_PER_NET * nets_count(cfg);
		if (pf->cfg.fetch_mem < PF_FETCH_MEM_DEFAULT)
			pf->cfg.fetch_mem = PF_FETCH_MEM_DEFAULT;
	}
	/* Room for a part a reader waits on and one of read-ahead. */
	if (pf->cfg.fetch_mem < 2 * pf->cfg.part_size)
		pf->cfg.fetch_mem = 2 * pf->cfg.part_size;
	if (!pf->cfg.max_object_mem)
		pf->cfg.max_object_mem = PF_OBJECT_MEM_DEFAULT;
	/* Two whole objects fit at once: a larger one is cached by blocks
	 * (engine_block.c). */
	if (pf->cfg.max_object_mem > pf->cfg.fetch_mem / 2)
		pf->cfg.max_object_mem = pf->cfg.fetch_mem / 2;
	pthread_mutex_init(&pf->mu, NULL);
	pthread_mutex_init(&pf->sched_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&pf->cv, &ca);
	pthread_cond_init(&pf->wcv, NULL);
	pthread_condattr_destroy(&ca);
	order_streams_init(&pf->hints);
	order_streams_set_alive(&pf->hints, writer_alive, NULL);
	order_streams_set_cost(&pf->hints, pf_slot_size, pf);
	pf->lead_cap = UINT64_MAX;
	if (pf->cfg.pace_ms != PF_PACE_OFF)
		order_streams_set_pace(&pf->hints,
				       (uint64_t)pf->cfg.pace_ms * 1000000u,
				       PF_PACE_MIN);
	rc = pf_blocks_init(pf);
	if (rc)
		goto fail;
	pf->by_id = calloc(pf->n_slots ? pf->n_slots : 1, sizeof(*pf->by_id));
	pf->open_count =
	    calloc(pf->n_slots ? pf->n_slots : 1, sizeof(*pf->open_count));
	pf->opened_by = calloc(pf->n_slots ? pf->n_slots : 1, 1);
	pf->nocache = calloc(pf->n_slots / 8 + 1, 1);
	if (!pf->by_id || !pf->open_count || !pf->opened_by || !pf->nocache) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = nets_create(pf);
	if (rc)
		goto fail;
	pf_limit_init(pf, pf_now(pf));
	if (pf->nets[0].tier_src) {
		/* Its PUTs and clock on the first thread's tier source (any
		 * thread may PUT through one, source.h). */
		struct tier_config tc = {
		    .src = pf->nets[0].tier_src,
		    .origin_bucket =
			cfg->origin_bucket ? cfg->origin_bucket : "",
		    .prefix = cfg->tier_prefix ? cfg->tier_prefix : "",
		    .hedge_ms = cfg->tier_hedge_ms,
		    .put_mem = cfg->tier_put_mem,
		    .mac_key = (const unsigned char *)cfg->tier_key,
		    .mac_key_len = cfg->tier_key_len,
		    .load = tier_load,
		    .load_arg = pf,
		};

		rc = tier_start(&tc, &pf->tier);
		if (rc)
			goto fail;
		rc = tier_sources(pf);
		if (rc)
			goto fail;
	}
	rc = start_writers(pf);
	if (rc)
		goto fail;
	for (unsigned int i = 0; i < pf->n_nets; i++) {
		rc = -proc_thread_create(&pf->nets[i].thread, NULL, pf_net_main,
					 &pf->nets[i]);
		if (rc)
			goto fail;
		pf->nets[i].started = true;
	}
	cache_set_next_use(pf->cfg.cache, cache_next_use, pf);
	cache_set_evicted(pf->cfg.cache, cache_evicted, pf);
	*out = pf;
	return 0;
fail:
	if (pf->nets)
		nets_join(pf);
	stop_writers(pf);
	tier_stop(pf->tier);
	order_streams_fini(&pf->hints);
	nets_destroy(pf);
	free(pf->by_id);
	free(pf->open_count);
	free(pf->opened_by);
	free(pf->nocache);
	free(pf->blocked);
	pthread_cond_destroy(&pf->wcv);
	pthread_cond_destroy(&pf->cv);
	pthread_mutex_destroy(&pf->sched_mu);
	pthread_mutex_destroy(&pf->mu);
	free(pf);
	return rc;
}

void pf_cancel(struct pf *pf)
{
	if (!pf)
		return;
	pthread_mutex_lock(&pf->mu);
	pf->stop = true;
	pthread_cond_broadcast(&pf->cv);
	/* Readers waiting for parts wait on their fetch, which is in the
	 * table while any part is not done: one pass at the stop. */
	for (uint32_t i = 0; i < pf->n_slots; i++)
		if (pf->by_id[i])
			pf_fetch_wake(pf->by_id[i]);
	for (struct pf_fetch *f = pf->ranges; f; f = f->rt_next)
		pf_fetch_wake(f);
	pthread_cond_broadcast(&pf->wcv);
	pthread_mutex_unlock(&pf->mu);
	pf_wake(pf);
}

void pf_stop(struct pf *pf)
{
	if (!pf)
		return;
	cache_set_next_use(pf->cfg.cache, NULL, NULL);
	cache_set_evicted(pf->cfg.cache, NULL, NULL);
	pf_cancel(pf);
	nets_join(pf);
	/* The network threads complete no more fetches: the writers commit
	 * those done (disk writes, never the network), then end. */
	stop_writers(pf);

	/* No reader is left (the session loop has ended): free every fetch,
	 * which takes down what is still in flight (pf_get_release(): a
	 * PUT a GET still owed the tier is forgotten). */
	for (uint32_t i = 0; i < pf->n_slots; i++) {
		struct pf_fetch *f = pf->by_id[i];

		if (f)
			pf_fetch_free(f);
	}
	while (pf->ranges) {
		struct pf_fetch *f = pf->ranges;

		pf->ranges = f->rt_next;
		pf_fetch_free(f);
	}
	/* Its PUTs under way end (within the tier client's budget); the
	 * queued ones are dropped. */
	tier_stop(pf->tier);
	order_streams_fini(&pf->hints);
	free(pf->done);
	free(pf->warm_ids);
	free(pf->open_count);
	free(pf->opened_by);
	free(pf->nocache);
	free(pf->by_id);
	free(pf->blocked);
	nets_destroy(pf);
	pthread_cond_destroy(&pf->wcv);
	pthread_cond_destroy(&pf->cv);
	pthread_mutex_destroy(&pf->sched_mu);
	pthread_mutex_destroy(&pf->mu);
	free(pf);
}
