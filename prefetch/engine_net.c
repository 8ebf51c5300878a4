/*
 * prefetch/engine_net.c - the network thread: arms taken parts (signing
 * outside mu), drives the curl multi handle (netloop.h), and handles the
 * end of each attempt (retry with back-off, or the part done or failed).
 *
 * Invariant: only this thread touches the multi handle and a running
 * part's transfer; a part's attempt ends in part_ended() (or, on the
 * tier, tier_part_ended()) exactly once.
 */
#include "prefetch/prefetch.h"
#include "prefetch/engine_internal.h"
#include "prefetch/order.h"
#include "prefetch/s3/s3_xfer.h"
#include "cache/cache.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/proc.h"
#include "common/retry.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Handles the end of one attempt of @p. mu held. */
void part_ended(struct pf *pf, struct pf_part *p, ssize_t got,
		bool retryable, const struct s3_status *st)
{
	struct pf_fetch *f = p->f;

	tier_run_remove(pf, p);
	pf->running--;
	f->running--;
	if (p->over) {
		p->over = false;
		pf->over--;
	}
	if (got == (ssize_t)p->len) {
		p->state = PART_DONE;
		f->parts_done++;
		pf->st.bytes += (uint64_t)got;
		if (pf->limit < pf->cfg.max_inflight)
			pf->limit += 1.0 / pf->limit;
	} else {
		/* A body shorter than asked for is a truncated transfer. */
		int err = got >= 0 ? -ECONNRESET : (int)got;
		enum s3_err_kind kind = got >= 0 ? S3_ERR_NETWORK : st->kind;
		const struct retry_policy *rp = pf_retry(pf);
		uint64_t now = mono_ns(), due;
		unsigned int seed = (unsigned int)now;

		count_error(pf, kind);
		if (kind == S3_ERR_SLOWDOWN)
			cut_limit(pf);
		due = now + 1000000ull * retry_delay_ms(rp, p->attempts, &seed);
		/* Given up when the retry would start past the budget, not
		 * only when this attempt ended past it. */
		if ((got >= 0 || retryable) && !f->err &&
		    !retry_give_up(rp, p->attempts,
				   (due - p->first_ns) / 1000000u)) {
			p->due_ns = due;
			p->state = PART_DELAYED;
			queue_push(&pf->delayed, p, false);
			pf->st.retries++;
			return;
		}
		f->parts_failed++;
		p->state = PART_FAILED;
		fetch_fail(pf, f, f->err ? f->err : err, f->err ? f->kind : kind,
			   p->attempts, st);
	}
	pthread_cond_broadcast(&pf->cv);
	if (f->read_through)
		read_through_maybe_drop(pf, f);
	else if (f->parts_done + f->parts_failed == f->n_parts)
		whole_complete(pf, f);
}

/*
 * Signs the parts taken and hands them to curl, each attempt with a
 * deadline: what is left of its part's budget. Engine thread, without mu:
 * signing (an HMAC chain per request) is the costliest step of a start,
 * and readers and hints must not wait behind it. A part taken is running:
 * nobody else touches its transfer, and its fetch stays in the table.
 */
void arm_parts(struct pf *pf, struct pf_part *list)
{
	uint64_t budget_ns = 1000000ull * (uint64_t)pf_retry(pf)->max_time_ms;

	while (list) {
		struct pf_part *p = list;
		struct pf_fetch *f = p->f;
		uint64_t now = mono_ns();
		long left_ms;
		CURL *easy;
		int rc = p->buf ? 0 : -ENOMEM;

		list = p->next;
		p->next = NULL;
		/* f->tier changes only on this thread (tier_part_ended()). */
		if (!rc && !p->x && f->tier) {
			char name[TIER_NAME_MAX];
			size_t nlen = tier_name(tier_prefix(pf->tier),
						tier_origin_bucket(pf->tier),
						f->key, f->key_len, f->etag,
						name, sizeof(name));

			rc = nlen ? s3_xfer_create(tier_client(pf->tier), name,
						   nlen, NULL, 0, p->len, p->buf,
						   p, &p->x)
				  : -ENOMEM;
			if (!rc) {
				s3_xfer_whole_object(p->x);
				s3_xfer_want_meta(p->x);
			}
		} else if (!rc && !p->x) {
			rc = s3_xfer_create(pf->cfg.s3, f->key, f->key_len,
					    f->etag, p->off, p->len, p->buf, p,
					    &p->x);
			if (!rc && f->n_parts == 1)
				s3_xfer_whole_object(p->x);
		}
		/* A retry keeps what the broken attempt received. */
		if (!rc)
			rc = s3_xfer_arm(p->x, p->attempts > 1, &easy);
		if (!rc) {
			/* The attempt ends with the budget, however slowly the
			 * server sends: the stall timeout alone lets a trickle
			 * (a byte a second) run for ever. */
			left_ms = p->first_ns + budget_ns > now
					  ? (long)((p->first_ns + budget_ns - now) /
						   1000000u)
					  : 0;
			if (f->tier && left_ms > PF_TIER_TIMEOUT_MS)
				left_ms = PF_TIER_TIMEOUT_MS;
			curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS,
					 left_ms > 0 ? left_ms : 1L);
			if (curl_multi_add_handle(pf->multi, easy) != CURLM_OK)
				rc = -ENOMEM;
		}
		if (rc) {
			struct s3_status st = { .message = "cannot start a transfer" };

			pthread_mutex_lock(&pf->mu);
			if (f->tier)
				tier_part_ended(pf, p, rc, TIER_ERROR,
						TIER_CUT_NONE, &st);
			else
				part_ended(pf, p, rc, false, &st);
			pthread_mutex_unlock(&pf->mu);
		}
	}
}

/* Milliseconds until the earliest delayed retry, capped. mu held. */
static int poll_timeout_ms(struct pf *pf)
{
	uint64_t now = mono_ns(), best = 1000;

	for (struct pf_part *p = pf->delayed.head; p; p = p->next) {
		uint64_t ms = p->due_ns > now ? (p->due_ns - now) / 1000000u + 1 : 0;

		if (ms < best)
			best = ms;
	}
	return (int)best;
}

void *engine_main(void *arg)
{
	struct pf *pf = arg;

	/* Named so that per-thread CPU (top -H, /proc/PID/task) tells the
	 * network thread from the FUSE workers. */
	pthread_setname_np(pthread_self(), "hintfs-engine");

	bool ended = false;

	for (;;) {
		uint64_t busy0 = mono_ns(), busy, waited, timeouts, poll0;
		uint64_t gen;
		struct pf_part *taken;
		CURLMsg *msg;
		int left, timeout;
		bool held = schedule_prefetch(pf), idle;

		pthread_mutex_lock(&pf->mu);
		if (pf->stop) {
			/* pf_stop() takes the transfers still running down. */
			pthread_mutex_unlock(&pf->mu);
			break;
		}
		taken = take_parts(pf);
		timeout = poll_timeout_ms(pf);
		/* A hedge put a part back in a queue: start it at once. */
		if (pf->tier && tier_hedge(pf, &timeout))
			ended = true;
		/* Prefetch waits for memory with nothing in flight: whoever
		 * gives memory back must wake us (mem_sub()). */
		idle = held && !taken && !pf->running;
		gen = pf->room_gen;
		pthread_mutex_unlock(&pf->mu);
		arm_parts(pf, taken);

		/* Something ended last round: start the next at once rather
		 * than after the timeout. */
		timeouts = pf->net.timeouts;
		poll0 = mono_ns();
		waited = netloop_run(&pf->net, ended ? 0 : timeout);
		/* Room came back during a wait that still ran out: its
		 * wake-up was lost. A wait that runs out while a commit takes
		 * its time is no loss. (Room given back in the instant
		 * between the wait's end and this look counts one that was
		 * not: rare, and never 0 where a wake-up is really lost.) */
		pthread_mutex_lock(&pf->mu);
		if (idle && pf->net.timeouts != timeouts && pf->room_gen != gen)
			pf->st.lost_wakeups++;
		pthread_mutex_unlock(&pf->mu);
		ended = false;
		while ((msg = curl_multi_info_read(pf->multi, &left))) {
			struct s3_xfer *x = NULL;
			struct s3_status st;
			bool retryable;
			ssize_t got;

			if (msg->msg != CURLMSG_DONE)
				continue;
			CURL *easy = msg->easy_handle;
			CURLcode cc = msg->data.result;

			curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
			curl_multi_remove_handle(pf->multi, easy);
			got = s3_xfer_finish(x, cc, &st, &retryable);
			struct pf_part *p = s3_xfer_user(x);
			struct pf_fetch *f = p->f;

			if (f->tier) {
				/* Judged before mu: hashing the bytes may take
				 * a while, and nobody else touches a running
				 * part. */
				enum tier_verdict v = tier_check(
				    pf->tier, got, &st, s3_xfer_meta(x), f->key,
				    f->key_len, f->etag, f->size, p->buf);

				pthread_mutex_lock(&pf->mu);
				tier_part_ended(pf, p, got, v, TIER_CUT_NONE,
						&st);
			} else {
				pthread_mutex_lock(&pf->mu);
				part_ended(pf, p, got, retryable, &st);
			}
			pthread_mutex_unlock(&pf->mu);
			ended = true;
		}
		/* How long transfers waited on this thread's other work. */
		busy = mono_ns() - busy0 - waited;
		/* Every answer that came before poll0 has been judged. */
		pf->polled_ns = poll0;
		pthread_mutex_lock(&pf->mu);
		pf->st.engine_busy_ns += busy;
		if (busy > pf->st.engine_busy_max_ns)
			pf->st.engine_busy_max_ns = busy;
		pthread_mutex_unlock(&pf->mu);
	}
	return NULL;
}
