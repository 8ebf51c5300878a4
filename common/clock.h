/**
 * common/clock.h - the one monotonic clock of hintfs: durations, timeouts
 * and deadlines are measured on CLOCK_MONOTONIC, never on the wall clock
 * (which NTP may step). Any thread.
 */
#ifndef HINTFS_COMMON_CLOCK_H
#define HINTFS_COMMON_CLOCK_H

#include <stdint.h>

/** Nanoseconds on the monotonic clock, from an arbitrary origin. */
uint64_t mono_ns(void);

/** The same in milliseconds. */
uint64_t mono_ms(void);

#endif /* HINTFS_COMMON_CLOCK_H */
