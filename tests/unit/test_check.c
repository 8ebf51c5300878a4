/*
 * tests/unit/test_check.c - the harness itself (check.h): what passes and
 * what does not.
 *
 * Owns no production code. Run with one argument, it plays one kind of
 * test program and returns check_done()'s verdict; tests/unit/meson.build
 * runs each and expects "pass" to pass and every other to fail, so a
 * harness in which a program that checked nothing passed fails the suite.
 *
 *   pass         one check that holds, in a group
 *   none         no check at all
 *   empty-group  a group that made no check (and a check that holds)
 *   fail         a check that fails (and one that holds)
 *   case-fail    a case's own verdict, check_fail() (and a check_pass())
 *   skip-only    cases skipped, no check made
 *
 * Exit 0 pass, 1 fail, 2 a wrong argument.
 */
#include "check.h"

#include <string.h>

int main(int argc, char **argv)
{
	const char *what = argc == 2 ? argv[1] : "";

	if (!strcmp(what, "pass")) {
		check_group("pass");
		CHECK(1 + 1 == 2);
		check_group_end();
	} else if (!strcmp(what, "none")) {
		/* nothing */
	} else if (!strcmp(what, "empty-group")) {
		CHECK(1);
		check_group("empty");
		check_group_end();
	} else if (!strcmp(what, "fail")) {
		CHECK(1);
		CHECKF(1 + 1 == 3, "1 + 1 is %d", 1 + 1);
	} else if (!strcmp(what, "case-fail")) {
		check_pass("a", NULL);
		check_fail("b", "differs");
	} else if (!strcmp(what, "skip-only")) {
		check_skip("a", "no reason to run");
	} else {
		fprintf(stderr, "usage: test_check pass|none|empty-group|"
				"fail|case-fail|skip-only\n");
		return 2;
	}
	return check_done();
}
