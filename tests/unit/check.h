/*
 * tests/unit/check.h - the few macros the unit tests share.
 *
 * CHECK records a failure and goes on, so one run shows every broken
 * expectation; check_done() prints the closing line "N passed, M failed"
 * and turns it into the exit status (0 pass, 1 fail).
 */
#ifndef HINTFS_TESTS_CHECK_H
#define HINTFS_TESTS_CHECK_H

#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (cond) {                                                  \
			check_passed++;                                      \
		} else {                                                     \
			check_failed++;                                      \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__,        \
				__LINE__, #cond);                            \
		}                                                            \
	} while (0)

static inline int check_done(void)
{
	printf("%d passed, %d failed\n", check_passed, check_failed);
	return check_failed ? 1 : 0;
}

#endif /* HINTFS_TESTS_CHECK_H */
