/*
 * tests/unit/fake_source.h - a deterministic in-memory source for the
 * engine (prefetch/source.h) on a virtual clock, so that the engine's
 * policies are tested in milliseconds without a server or a mount.
 *
 * Every object exists and has its size from the test's describe callback;
 * its byte at offset i is fake_source_byte(key, i). A GET started at
 * virtual time t answers at t + latency: it ends only when the test moves
 * the clock past that (fake_source_advance()). Errors of the origin's
 * answers are queued (fake_source_fail()); any other misbehaviour (a
 * tier that fails, hangs or cuts its bodies short) is a failure wrapper's
 * over it (source_fail.h). The tier side is a bucket in memory:
 * its PUTs write it and its GETs read it back, metadata included. The
 * retry policy is the default budget (common/retry.h). The engine's network
 * threads run as in the daemon; fake_source_settle() waits until they have
 * nothing left to do at the current virtual time, so what a test sees next is
 * determined.
 */
#ifndef HINTFS_TESTS_FAKE_SOURCE_H
#define HINTFS_TESTS_FAKE_SOURCE_H

#include "prefetch/source.h"

#include <stdbool.h>
#include <stdint.h>

struct fake_source;

/** A source answering every GET after @latency_ms of virtual time. */
struct fake_source *fake_source_create(uint64_t latency_ms);
void fake_source_destroy(struct fake_source *fs);
/** The struct pf_source to put in pf_config.source. */
struct pf_source *fake_source_base(struct fake_source *fs);
/** Its sibling for the shared cache tier's GETs (pf_config.tier_source):
 *  same clock, its own latency and errors, ends through the origin's. */
struct pf_source *fake_source_tier(struct fake_source *fs);

/** The same with @n instances (1 to 8), one per network thread of the
 *  engine (pf_config.net_threads, sources, tier_sources): a GET ends
 *  through the instance it started on; settling waits for all of them. */
struct fake_source *fake_source_create_n(uint64_t latency_ms, unsigned n);
/** Instance @i's origin source, and its tier sibling. */
struct pf_source *fake_source_base_n(struct fake_source *fs, unsigned i);
struct pf_source *fake_source_tier_n(struct fake_source *fs, unsigned i);

/** The byte at @off of object @key. */
unsigned char fake_source_byte(const char *key, uint64_t off);

/** GETs answer after @ms from now on (UINT64_MAX: never, until cancelled). */
void fake_source_latency(struct fake_source *fs, uint64_t ms);

/** The origin serves @per_s GETs a second at most, one after another in
 *  the order they start: a GET waits for its turn, then takes the
 *  latency (a server that queues what it cannot serve and answers no
 *  SlowDown). 0: no bound (the default). */
void fake_source_capacity(struct fake_source *fs, unsigned per_s);

/** The next @times origin answers end with error kind @kind (-@err,
 *  retryable as @retryable) instead of the bytes. */
void fake_source_fail(struct fake_source *fs, enum s3_err_kind kind, int err,
		      bool retryable, int times);
void fake_source_tier_latency(struct fake_source *fs, uint64_t ms);

/*
 * The tier's bucket, one for the whole test (a second engine reads what
 * the first wrote): its GETs that end with no error queued answer what
 * the PUTs wrote, with their metadata (NoSuchKey when absent; a body
 * longer than the GET's buffer fails as BodyTooLarge). Any thread.
 */
/** Empties it, its counter and its queued failures. */
void fake_source_store_reset(void);
/** Stores @len bytes at @data as @name with no metadata, as a writer
 *  other than hintfs would. 0 or -ENOMEM. */
int fake_source_store_put(const char *name, const void *data, size_t len);
/** The next @times PUTs fail with kind @kind, -@err and HTTP status @http
 *  (0: no answer). */
void fake_source_put_fail(enum s3_err_kind kind, int err, long http, int times);
/** PUTs tried so far (failed ones included). */
unsigned fake_source_puts(void);

/** Moves the virtual clock on by @ns at once, waiting for no thread: for
 *  a test that runs no engine on @fs (a bare tier). */
void fake_source_jump(struct fake_source *fs, uint64_t ns);

/** Moves the virtual clock on by @ms, in steps that end GETs in their due
 *  order, settling after each. */
void fake_source_advance(struct fake_source *fs, uint64_t ms);

/** Waits (5 s of real time at most) until the network thread waits in
 *  the source with no GET due and no wake-up pending. Returns whether it
 *  settled. */
bool fake_source_settle(struct fake_source *fs);

/** While @on, the network thread's wake-ups wait (it sleeps in the
 *  source): a test makes several calls that the engine then sees at once.
 *  Settle first. */
void fake_source_hold(struct fake_source *fs, bool on);

/** GETs running now. */
unsigned fake_source_running(struct fake_source *fs);
/** Most GETs that ran at once. */
unsigned fake_source_running_max(struct fake_source *fs);
/** Origin starts so far (retries included), and the key and offset of
 *  the @i-th; NULL past the end. */
unsigned fake_source_starts(struct fake_source *fs);
const char *fake_source_started(struct fake_source *fs, unsigned i,
				uint64_t *off);
/** Origin starts on instance @i (its network thread). */
unsigned fake_source_starts_on(struct fake_source *fs, unsigned i);
/** Tier GETs started, and cancelled; GETs released while running (taken
 *  down). */
unsigned fake_source_tier_starts(struct fake_source *fs);
unsigned fake_source_tier_cancels(struct fake_source *fs);
unsigned fake_source_taken_down(struct fake_source *fs);

#endif /* HINTFS_TESTS_FAKE_SOURCE_H */
