/*
 * common/retry.c - the retry policy (retry.h).
 *
 * Invariant: a delay is within [1, cap_ms] ms and never below half of
 * its exponential step, so that backoff still backs off under jitter.
 */
#include "common/retry.h"

#include <stdlib.h>

void retry_policy_init(struct retry_policy *p, int max_attempts,
		       int max_time_ms)
{
	p->max_attempts =
	    max_attempts > 0 ? max_attempts : RETRY_ATTEMPTS_DEFAULT;
	p->max_time_ms = max_time_ms > 0 ? max_time_ms : RETRY_TIME_DEFAULT_MS;
	p->base_ms = RETRY_BASE_MS;
	p->cap_ms = RETRY_CAP_MS;
}

unsigned retry_delay_ms(const struct retry_policy *p, int failed,
			unsigned *seed)
{
	/* Past 2^16 the cap has long won; the shift stays defined. */
	int shift = failed < 1 ? 1 : failed > 16 ? 16 : failed;
	uint64_t c = (uint64_t)p->base_ms << shift;

	if (c > p->cap_ms)
		c = p->cap_ms;
	if (c < 2)
		c = 2;
	return (unsigned)(c / 2 + (uint64_t)rand_r(seed) % (c / 2 + 1));
}

bool retry_give_up(const struct retry_policy *p, int failed,
		   uint64_t elapsed_ms)
{
	return failed >= p->max_attempts ||
	       elapsed_ms >= (uint64_t)p->max_time_ms;
}
