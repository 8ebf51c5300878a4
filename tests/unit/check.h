/*
 * tests/unit/check.h - the one harness of the unit tests.
 *
 * CHECK(cond) and CHECKF(cond, fmt, ...) count one check each; a failed
 * check prints where (file:line) and why, and the run goes on, so one run
 * shows every broken expectation. check_group() and check_group_end()
 * bracket a named group of checks (a case, a sample) and print its verdict
 * on one line. check_pass(), check_fail() and check_skip() record the
 * verdict of a case that compares by its own means (a vector compared field
 * by field), or skips for the reason it prints.
 *
 * Invariant: nothing passes without having checked something. A group that
 * made no check fails, and check_done() turns a run that made no check at
 * all into a failure, as it does one with a failed check. A program that
 * has nothing to test here (no device, say) exits 77 itself, saying why.
 *
 * check_done() prints the closing line "N passed, M failed[, K skipped]"
 * and returns the exit status (0 pass, 1 fail). One thread: the counters
 * are plain ints.
 */
#ifndef HINTFS_TESTS_CHECK_H
#define HINTFS_TESTS_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int check_passed, check_failed, check_skipped;
static const char *check_group_name; /* NULL outside a group */
static int check_group_checks, check_group_failed;

__attribute__((format(printf, 3, 0))) static inline void
check_vreport(const char *verdict, const char *where, const char *fmt,
	      va_list ap)
{
	/* Failures and verdicts on stdout, in the order they happened. */
	printf("%s %s", verdict, where);
	if (fmt) {
		printf(": ");
		vprintf(fmt, ap);
	}
	printf("\n");
	fflush(stdout);
}

/* Counts one check of @ok, in the totals and in the open group. */
static inline bool check_count(bool ok)
{
	check_group_checks++;
	if (ok) {
		check_passed++;
	} else {
		check_failed++;
		check_group_failed++;
	}
	return ok;
}

/* Counts one check of @ok made at @file:@line; on failure prints @fmt.
 * Returns @ok, so that a test can stop what depends on it. */
__attribute__((format(printf, 4, 5))) static inline bool
check_at(bool ok, const char *file, int line, const char *fmt, ...)
{
	char where[256];
	va_list ap;

	if (check_count(ok))
		return true;
	if (check_group_name)
		snprintf(where, sizeof(where), "%s:%d (%s)", file, line,
			 check_group_name);
	else
		snprintf(where, sizeof(where), "%s:%d", file, line);
	va_start(ap, fmt);
	check_vreport("FAIL", where, fmt, ap);
	va_end(ap);
	return false;
}

#define CHECK(cond)	  check_at(!!(cond), __FILE__, __LINE__, "%s", #cond)
#define CHECKF(cond, ...) check_at(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Opens the group @name (a string that outlives it). */
static inline void check_group(const char *name)
{
	check_group_name = name;
	check_group_checks = 0;
	check_group_failed = 0;
}

/* Closes the open group: "ok   NAME (N checks)" or its failures; a group
 * that made no check is a failure. */
static inline void check_group_end(void)
{
	if (!check_group_checks) {
		check_failed++;
		printf("FAIL %s: no check was made\n", check_group_name);
	} else if (check_group_failed) {
		printf("FAIL %s (%d of %d checks failed)\n", check_group_name,
		       check_group_failed, check_group_checks);
	} else {
		printf("ok   %s (%d checks)\n", check_group_name,
		       check_group_checks);
	}
	fflush(stdout);
	check_group_name = NULL;
}

enum check_verdict { CHECK_PASSED, CHECK_FAILED, CHECK_SKIPPED };

/* The verdict @v of a case named @name that checked by its own means; @fmt
 * (may be NULL) says what it found. A pass or a failure counts as one
 * check; a skip is counted apart and is no check. */
__attribute__((format(printf, 3, 4))) static inline void
check_case(enum check_verdict v, const char *name, const char *fmt, ...)
{
	static const char *const word[] = {"PASS", "FAIL", "SKIP"};
	va_list ap;

	if (v == CHECK_SKIPPED)
		check_skipped++;
	else
		check_count(v == CHECK_PASSED);
	va_start(ap, fmt);
	check_vreport(word[v], name, fmt, ap);
	va_end(ap);
}

#define check_pass(name, ...) check_case(CHECK_PASSED, (name), __VA_ARGS__)
#define check_fail(name, ...) check_case(CHECK_FAILED, (name), __VA_ARGS__)
#define check_skip(name, ...) check_case(CHECK_SKIPPED, (name), __VA_ARGS__)

/* The closing line and the exit status: 1 when a check failed or when
 * none was made. */
static inline int check_done(void)
{
	printf("%d passed, %d failed", check_passed, check_failed);
	if (check_skipped)
		printf(", %d skipped", check_skipped);
	printf("\n");
	if (!check_passed && !check_failed) {
		printf("FAIL: no check was made: a test that tested nothing "
		       "does not pass\n");
		return 1;
	}
	return check_failed ? 1 : 0;
}

#endif /* HINTFS_TESTS_CHECK_H */
