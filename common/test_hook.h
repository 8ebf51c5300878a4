/**
 * common/test_hook.h - the environment variables only a test build reads.
 *
 * A test hook lets a test make hintfs misbehave on purpose: fail every Nth
 * cache read or write (HINTFS_FAULT_CACHE_READ, _WRITE), hold each cache
 * commit (HINTFS_FAULT_COMMIT_DELAY_MS), stop polling the hint file
 * (HINTFS_HINT_POLL_MS). They are compiled in only with the meson option
 * -Dtest_hooks=true (mount-tools/test.sh's builds). In any other build, the
 * shipped daemon and the Debian package included, test_hook_env() returns
 * NULL whatever the environment holds: nothing a user exports can make
 * hintfs fail on purpose. Every hook is read through this one function, so
 * `grep test_hook_env` lists them all.
 */
#ifndef HINTFS_COMMON_TEST_HOOK_H
#define HINTFS_COMMON_TEST_HOOK_H

#include <stdbool.h>
#include <stdlib.h>

#ifdef HINTFS_TEST_HOOKS
#define TEST_HOOKS_BUILT true
#else
#define TEST_HOOKS_BUILT false
#endif

/**
 * The value of test hook @name in the environment, or NULL when it is unset
 * or this build has no test hooks. Any thread (getenv's rules: nothing may
 * set the environment meanwhile); the string belongs to the environment.
 */
static inline const char *test_hook_env(const char *name)
{
	return TEST_HOOKS_BUILT ? getenv(name) : NULL;
}

#endif /* HINTFS_COMMON_TEST_HOOK_H */
