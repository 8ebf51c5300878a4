/*
 * prefetch/writer.c - the cache writers: the threads (one per network
 * thread, engine.c) that write completed whole fetches into the cache, so
 * that the network threads never wait on the disk (blob writes, index
 * commits, hole punching, eviction). Each takes its own batches off
 * pf->done under mu and commits them on its own; the cache serializes
 * their index commits.
 *
 * Invariant: a fetch leaves the table only after its object is committed
 * (or will not be), so a reader that finds no fetch and misses the cache
 * knows no GET is under way; until then readers are served from the
 * fetch's buffers. Blob bytes are written before the index transaction
 * that points to them (cache_put_commit_many()), as kill -9 requires.
 */
#include "prefetch/engine_internal.h"
#include "cache/cache.h"
#include "common/clock.h"

#include "common/log.h"
#include "common/test_hook.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Writes the completed whole fetches @fs into the cache, their index
 * entries in one transaction, and takes them out of the table. Writer
 * thread, without mu (the cache calls pf_next_use()).
 */
static void commit_batch(struct pf *pf, struct pf_fetch **fs, size_t n)
{
	struct cache_put *puts[PF_COMMIT_BATCH];
	int rc[PF_COMMIT_BATCH], rcs[PF_COMMIT_BATCH];
	size_t which[PF_COMMIT_BATCH], m = 0;
	uint64_t t0 = mono_ns();

	/* Parts are done and never written again: no lock needed. */
	for (size_t i = 0; i < n; i++) {
		struct pf_fetch *f = fs[i];
		struct cache_put *put;

		rc[i] = 0;
		if (f->kind == S3_ERR_STALE)
			cache_invalidate(pf->cfg.cache, f->key, f->key_len,
					 NULL);
		if (f->err)
			continue;
		rc[i] = cache_put_begin(pf->cfg.cache, f->key, f->key_len,
					f->etag, f->size,
					pf_next_use(pf, f->id), f->id, &put);
		for (uint32_t k = 0; !rc[i] && k < f->n_parts; k++)
			rc[i] =
			    cache_put_write(put, f->parts[k].off,
					    f->parts[k].buf, f->parts[k].len);
		if (rc[i] && put)
			cache_put_abort(put);
		else if (!rc[i]) {
			puts[m] = put;
			which[m++] = i;
		}
	}
	cache_put_commit_many(puts, m, rcs);
	for (size_t k = 0; k < m; k++)
		rc[which[k]] = rcs[k];

	pthread_mutex_lock(&pf->mu);
	for (size_t i = 0; i < n; i++) {
		struct pf_fetch *f = fs[i];
		bool ok = !f->err && (!rc[i] || rc[i] == -EEXIST), refused;
		uint32_t id;

		if (f->err && f->demand) {
			/* Only a verdict a reader waited for; a prefetch that
			 * failed leaves the next reader a full budget. */
			pf_note_failure(pf, f->id, f->err);
		}
		if (!f->err && !ok) {
			pf->st.not_cached++;
			/* A write error or an entry the index refuses, not a
			 * refusal by next use (-ENOSPC) or a lack of memory:
			 * readers read the object through from now on
			 * rather than fetch it whole again and again. */
			if (rc[i] == -EIO || rc[i] == -EINVAL)
				pf->nocache[f->id / 8] |=
				    (uint8_t)(1u << (f->id % 8));
		}
		if (ok)
			pf->st.warm_done += f->warm_refs;
		else
			pf->st.warm_failed += f->warm_refs;
		refused = !f->err && rc[i] == -ENOSPC;
		id = f->id;
		/* Committed (or not to be): readers find it in the cache
		 * from now on, so it may leave the table. */
		pf_fetch_leave(pf, f);
		/* Refused by next use: fetched again ahead of its read once
		 * the lead has room (out of the table first, or the
		 * prefetcher would pass it over as in flight). */
		if (refused)
			pf_requeue(pf, id);
	}
	pf->st.commit_ns += mono_ns() - t0;
	pf->st.commit_batches += m ? 1 : 0;
	pf->st.commit_objects += m;
	pthread_mutex_unlock(&pf->mu);
}

/*
 * A cache writer: takes completed fetches off the network threads, in
 * batches of up to PF_COMMIT_BATCH objects or PF_COMMIT_BYTES, oldest
 * first. A batch is what completed while the writers were busy, so under
 * load one index commit serves many objects, and idle it costs no wait.
 */
/*
 * The test hook (common/test_hook.h: a test build's only): with
 * HINTFS_FAULT_COMMIT_DELAY_MS=N in the environment, each writer waits N
 * ms before each batch, as a slow disk would; the fetches' memory comes
 * back that much later, off the network threads.
 */
long pf_writer_delay_ms(void)
{
	const char *v = test_hook_env("HINTFS_FAULT_COMMIT_DELAY_MS");
	long ms = v ? strtol(v, NULL, 10) : 0;

	if (ms <= 0 || ms > 60000)
		return 0;
	log_warn("cache writer: HINTFS_FAULT_COMMIT_DELAY_MS=%ld: each "
		 "commit waits %ld ms (a test hook)",
		 ms, ms);
	return ms;
}

void *pf_writer_main(void *arg)
{
	struct pf *pf = arg;
	struct pf_fetch *batch[PF_COMMIT_BATCH];
	long delay_ms = pf->commit_delay_ms;

	/* Named so that top -H tells the writers from the FUSE workers. */
	pthread_setname_np(pthread_self(), "hintfs-writer");

	pthread_mutex_lock(&pf->mu);
	for (;;) {
		uint64_t bytes = 0;
		size_t n = 0;

		/* At the stop, what completed is committed first: bytes
		 * fetched before a clean unmount are in the next mount's
		 * cache (disk writes only, bounded by the engine's memory). */
		while (!pf->writer_stop && !pf->n_done)
			pthread_cond_wait(&pf->wcv, &pf->mu);
		if (!pf->n_done)
			break;
		while (n < pf->n_done && n < PF_COMMIT_BATCH &&
		       (!n || bytes + pf->done[n]->size <= PF_COMMIT_BYTES)) {
			bytes += pf->done[n]->size;
			batch[n] = pf->done[n];
			n++;
		}
		pf->n_done -= n;
		memmove(pf->done, pf->done + n, pf->n_done * sizeof(*pf->done));
		if (++pf->writers_busy > pf->st.writers_busy_peak)
			pf->st.writers_busy_peak = pf->writers_busy;
		pthread_mutex_unlock(&pf->mu);
		if (delay_ms)
			nanosleep(&(struct timespec){.tv_sec = delay_ms / 1000,
						     .tv_nsec = delay_ms %
								1000 * 1000000},
				  NULL);
		commit_batch(pf, batch, n);
		pthread_mutex_lock(&pf->mu);
		pf->writers_busy--;
	}
	pthread_mutex_unlock(&pf->mu);
	return NULL;
}
