/*
 * tests/unit/source_fail.h - a failure wrapper over any source
 * (prefetch/source.h): each GET attempt that starts through it asks the
 * test's rule what to do, and the wrapper passes it on, delays it, fails
 * it, hangs it or cuts its body short, whatever source runs underneath
 * (the fake of fake_source.c, or curl's). The unit tests' one way to make
 * an object store misbehave: the fake itself only answers, on time.
 *
 * A wrapper covers one network thread's pair of sources, the origin and
 * its tier sibling (whose GETs end through the origin's next_done(), so
 * the pair is wrapped together); an engine with several threads gets one
 * wrapper per thread, over that thread's pair. PUTs, the clock and the
 * retry policy are the inner sources'.
 *
 * Threads: as source.h. The rule is called on the thread that starts the
 * attempt (several network threads at once with several wrappers).
 */
#ifndef HINTFS_TESTS_SOURCE_FAIL_H
#define HINTFS_TESTS_SOURCE_FAIL_H

#include "prefetch/source.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** What an attempt does. */
enum sf_act {
	SF_PASS,     /**< runs on the inner source as it would */
	SF_DELAY,    /**< starts on the inner source @delay_ms later (on
			  its clock) */
	SF_ERROR,    /**< ends with @kind, -@err, @http, @delay_ms after
			  its start (0: at once) */
	SF_HANG,     /**< never ends: only a cancel or a release does */
	SF_TRUNCATE, /**< runs on the inner source, but its connection
			  resets after @keep bytes of the range */
};

struct sf_action {
	enum sf_act act;
	uint64_t delay_ms;
	enum s3_err_kind kind;
	int err;
	long http;
	bool retryable;
	size_t keep;
};

/** Which of the pair an attempt starts on. */
enum sf_side { SF_ORIGIN, SF_TIER };

/** The test's rule: what attempt @g (its request fields) does, started on
 *  @side. */
typedef struct sf_action (*sf_rule_cb)(void *arg, enum sf_side side,
				       const struct pf_get *g);

struct source_fail;

/** Wraps @origin and its sibling @tier (NULL: none) under @rule. */
struct source_fail *source_fail_create(struct pf_source *origin,
				       struct pf_source *tier, sf_rule_cb rule,
				       void *arg);
/** Frees @sf: after the engine on it stopped. Accepts NULL. */
void source_fail_destroy(struct source_fail *sf);
/** The wrapped origin source, and its tier sibling (NULL: none). */
struct pf_source *source_fail_origin(struct source_fail *sf);
struct pf_source *source_fail_tier(struct source_fail *sf);

/*
 * A ready-made rule (its arg a struct sf_plan): on each side, the next
 * @times attempts do @act, then every attempt does @then. Any thread:
 * the wrappers of several network threads share one plan.
 */
struct sf_plan {
	pthread_mutex_t mu;
	struct {
		struct sf_action act, then;
		int times;
	} side[2];
};
void sf_plan_init(struct sf_plan *p);
void sf_plan_set(struct sf_plan *p, enum sf_side side, struct sf_action act,
		 int times, struct sf_action then);
struct sf_action sf_plan_rule(void *arg, enum sf_side side,
			      const struct pf_get *g);

/** The actions, spelled. */
static inline struct sf_action sf_pass(void)
{
	return (struct sf_action){.act = SF_PASS};
}

static inline struct sf_action sf_hang(void)
{
	return (struct sf_action){.act = SF_HANG};
}

static inline struct sf_action sf_error(enum s3_err_kind kind, int err,
					long http, uint64_t after_ms)
{
	return (struct sf_action){.act = SF_ERROR,
				  .kind = kind,
				  .err = err,
				  .http = http,
				  .delay_ms = after_ms};
}

#endif /* HINTFS_TESTS_SOURCE_FAIL_H */
