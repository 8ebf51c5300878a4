/**
 * common/retry.h - the one retry policy of hintfs (doc/design.md 2.6): how
 * long to wait before the next attempt of a failed request, and when to
 * give up. The S3 client's blocking requests and the prefetch engine's
 * transfers both follow it, with the one budget of the mount (-o retries,
 * -o retry_time).
 *
 * Backoff is capped exponential with jitter: after N failed attempts the
 * wait is drawn uniformly from [c/2, c], c = min(cap, base * 2^N), so a
 * crowd of retrying readers spreads out instead of returning at once.
 * Pure functions over caller-owned values: any thread.
 */
#ifndef HINTFS_COMMON_RETRY_H
#define HINTFS_COMMON_RETRY_H

#include <stdbool.h>
#include <stdint.h>

/** The budget of one request (doc/design.md 2.6): about 10 attempts or 60 s,
 *  whichever comes first; then the read fails. */
#define RETRY_ATTEMPTS_DEFAULT 10
#define RETRY_TIME_DEFAULT_MS  60000
/** First retry after 50-100 ms (a throttling S3 prefix recovers within
 *  tens of ms), doubling, capped at 1-2 s so that a long outage is probed
 *  every couple of seconds within the 60 s budget. */
#define RETRY_BASE_MS 50
#define RETRY_CAP_MS  2000

struct retry_policy {
	int max_attempts; /**< tries per request, the first included */
	int max_time_ms;  /**< no new attempt this long after the first */
	unsigned base_ms; /**< backoff scale: the first retry waits 1-2x */
	unsigned cap_ms;  /**< no wait is longer */
};

/**
 * Fills @p with a budget of @max_attempts tries and @max_time_ms (each
 * <= 0: the default) and the standard backoff.
 */
void retry_policy_init(struct retry_policy *p, int max_attempts,
		       int max_time_ms);

/**
 * The wait in milliseconds before the next attempt, after @failed (>= 1)
 * attempts failed. @seed is the caller's rand_r() state.
 */
unsigned retry_delay_ms(const struct retry_policy *p, int failed,
			unsigned *seed);

/**
 * Whether to stop after @failed attempts failed, the first having started
 * @elapsed_ms ago: the attempts or the time are spent.
 */
bool retry_give_up(const struct retry_policy *p, int failed,
		   uint64_t elapsed_ms);

#endif /* HINTFS_COMMON_RETRY_H */
