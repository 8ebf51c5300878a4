/*
 * prefetch/engine_net.c - the network threads: each arms the parts it
 * took (signing outside mu), drives its own sources (source.h: a curl
 * multi handle each in the daemon, under a tier source with a shared cache
 * tier: tier_source.c), and handles the end of each of its attempts (retry
 * with back-off, or the part done or failed). What starts next is the
 * scheduler's, one for all of them under mu (engine_sched.c).
 *
 * Invariant: only the thread that took a part (p->net) drives the source
 * its GET runs on and touches the GET while it runs; a part's attempt
 * ends in pf_part_ended() exactly once, under mu.
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
#include <time.h>

/* Handles the end of one attempt of @p. mu held. */
void pf_part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
		   bool retryable, const struct s3_status *st)
{
	struct pf_fetch *f = p->f;

	pf->running--;
	pf->nets[p->net].running--;
	f->running--;
	if (p->over) {
		p->over = false;
		pf->over--;
	}
	if (got == (ssize_t)p->len) {
		p->state = PART_DONE;
		f->parts_done++;
		pf->st.bytes += (uint64_t)got;
		pf_limit_note_done(pf, p, pf_now(pf));
	} else {
		/* A body shorter than asked for is a truncated transfer. */
		int err = got >= 0 ? -ECONNRESET : (int)got;
		enum s3_err_kind kind = got >= 0 ? S3_ERR_NETWORK : st->kind;
		const struct retry_policy *rp = pf_retry(pf);
		uint64_t now = pf_now(pf), due;
		unsigned int seed = (unsigned int)now;

		pf_count_error(pf, kind);
		if (kind == S3_ERR_SLOWDOWN)
			pf_limit_cut(pf);
		due = now + 1000000ull * retry_delay_ms(rp, p->attempts, &seed);
		/* Given up when the retry would start past the budget, not
		 * only when this attempt ended past it. */
		if ((got >= 0 || retryable) && !f->err &&
		    !retry_give_up(rp, p->attempts,
				   (due - p->first_ns) / 1000000u)) {
			p->due_ns = due;
			p->state = PART_DELAYED;
			pf_queue_push(&pf->delayed, p, false);
			pf->st.retries++;
			return;
		}
		f->parts_failed++;
		p->state = PART_FAILED;
		pf_fetch_fail(pf, f, f->err ? f->err : err,
			      f->err ? f->kind : kind, p->attempts, st);
	}
	pf_fetch_wake(f);
	if (f->read_through)
		pf_read_through_maybe_drop(pf, f);
	else if (f->parts_done + f->parts_failed == f->n_parts)
		pf_whole_complete(pf, f);
}

/*
 * A tier source read the origin after the tier (pf_get.fresh_ns): the
 * tier attempt cost the part time, never one of its attempts, so its
 * budget counts from the origin's first, and so does the attempt's time
 * that the in-flight controller averages (an origin GET's, not the
 * tier's wait plus it). @p's thread.
 */
static void part_fresh(struct pf_part *p)
{
	if (!p->get.fresh_ns)
		return;
	p->first_ns = p->get.fresh_ns;
	p->att_ns = p->get.fresh_ns;
	p->attempts = 1;
	p->get.fresh_ns = 0;
}

/*
 * Signs the parts @net took and starts them on its sources, each attempt
 * with a deadline: what is left of its part's budget. @net's thread,
 * without mu: signing (an HMAC chain per request) is the costliest step
 * of a start, and readers, hints and the other threads must not wait
 * behind it. A part taken is running: nobody else touches its transfer,
 * and its fetch stays in the table.
 */
void pf_arm_parts(struct pf_net *net, struct pf_part *list)
{
	struct pf *pf = net->pf;
	uint64_t budget_ns = 1000000ull * (uint64_t)pf_retry(pf)->max_time_ms;

	while (list) {
		struct pf_part *p = list;
		struct pf_fetch *f = p->f;
		uint64_t now = pf_now(pf);
		struct pf_get *g = &p->get;
		long left_ms;
		int rc = p->buf ? 0 : -ENOMEM;

		list = p->next;
		p->next = NULL;
		if (!rc && !g->src) {
			/* A block's GET names its object (engine_block.c).
			 * With a tier, the tier source decides whether a GET
			 * that f->tier lets use it reads the tier first, and
			 * hedges on its reader's wait. */
			*g = (struct pf_get){.key = f->key,
					     .key_len = f->name_len,
					     .etag = f->etag,
					     .off = f->base + p->off,
					     .len = p->len,
					     .buf = p->buf,
					     .whole = f->n_parts == 1 &&
						      f->name_len == f->key_len,
					     .tier = f->tier,
					     .wait_ns = &f->wait_ns};
		}
		if (!rc) {
			/* The attempt ends with the budget, however slowly the
			 * server sends: the stall timeout alone lets a trickle
			 * (a byte a second) run for ever. */
			left_ms = p->first_ns + budget_ns > now
				      ? (long)((p->first_ns + budget_ns - now) /
					       1000000u)
				      : 0;
			/* A retry keeps what the broken attempt received,
			 * on whichever thread took it (source.h: a GET not
			 * running moves between siblings). */
			rc = pf_source_start(net->src, g, p->attempts > 1,
					     left_ms > 0 ? left_ms : 1L);
		}
		if (rc) {
			struct s3_status st = {.message =
						   "cannot start a transfer"};

			pthread_mutex_lock(&pf->mu);
			part_fresh(p);
			pf_part_ended(pf, p, rc, false, &st);
			pthread_mutex_unlock(&pf->mu);
		}
	}
}

/* Milliseconds until the earliest delayed retry, capped. mu held. */
static int poll_timeout_ms(struct pf *pf)
{
	uint64_t now = pf_now(pf), best = 1000;

	for (struct pf_part *p = pf->delayed.head; p; p = p->next) {
		uint64_t ms =
		    p->due_ns > now ? (p->due_ns - now) / 1000000u + 1 : 0;

		if (ms < best)
			best = ms;
	}
	return (int)best;
}

/*
 * One network thread's loop (@arg is its struct pf_net). Each round it
 * lets the scheduler start prefetches (one thread at a time), takes its
 * share of the queued parts, arms them, waits on its own sources and
 * ends the attempts that ended there.
 */
void *pf_net_main(void *arg)
{
	struct pf_net *net = arg;
	struct pf *pf = net->pf;
	char name[16];

	/* Named so that per-thread CPU (top -H, /proc/PID/task) tells the
	 * network threads from the FUSE workers; the first keeps the name
	 * it had when it was the only one. */
	if (net->idx)
		snprintf(name, sizeof(name), "hintfs-net%u",
			 net->idx % PF_NET_THREADS_MAX);
	else
		snprintf(name, sizeof(name), "hintfs-engine");
	pthread_setname_np(pthread_self(), name);

	bool ended = false;

	for (;;) {
		uint64_t busy0 = mono_ns(), busy, waited;
		uint64_t gen;
		struct pf_part *taken;
		struct pf_get *g;
		struct s3_status st;
		bool retryable, timed_out;
		ssize_t got;
		int timeout;
		bool held = pf_schedule_prefetch(pf), idle;

		pthread_mutex_lock(&pf->mu);
		if (pf->stop) {
			/* pf_stop() takes the transfers still running down. */
			pthread_mutex_unlock(&pf->mu);
			break;
		}
		/* Any thread may end the tick: it looks at the time, so it
		 * runs once per tick however many threads call it. */
		pf_limit_tick(pf, pf_now(pf));
		taken = pf_take_parts(pf, net);
		timeout = poll_timeout_ms(pf);
		/* Prefetch waits for memory with nothing in flight: whoever
		 * gives memory back must wake us (pf_mem_sub()). */
		idle = held && !taken && !pf->running;
		gen = pf->room_gen;
		pthread_mutex_unlock(&pf->mu);
		pf_arm_parts(net, taken);

		/* Something ended last round: start the next at once rather
		 * than after the timeout. */
		waited =
		    pf_source_run(net->src, ended ? 0 : timeout, &timed_out);
		/* Room came back during a wait that still ran out: its
		 * wake-up was lost. A wait that runs out while a commit takes
		 * its time is no loss. (Room given back in the instant
		 * between the wait's end and this look counts one that was
		 * not: rare, and never 0 where a wake-up is really lost.) */
		pthread_mutex_lock(&pf->mu);
		if (idle && timed_out && pf->room_gen != gen)
			pf->st.lost_wakeups++;
		pthread_mutex_unlock(&pf->mu);
		ended = false;
		while ((
		    g = pf_source_next_done(net->src, &got, &retryable, &st))) {
			struct pf_part *p = PF_PART_OF(g);

			pthread_mutex_lock(&pf->mu);
			part_fresh(p);
			pf_part_ended(pf, p, got, retryable, &st);
			pthread_mutex_unlock(&pf->mu);
			ended = true;
		}
		/* How long transfers waited on this thread's other work. */
		busy = mono_ns() - busy0 - waited;
		pthread_mutex_lock(&pf->mu);
		pf->st.engine_busy_ns += busy;
		if (busy > pf->st.engine_busy_max_ns)
			pf->st.engine_busy_max_ns = busy;
		pthread_mutex_unlock(&pf->mu);
	}
	return NULL;
}
