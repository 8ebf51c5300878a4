/*
 * tests/fuzz/fuzz.h - what the fuzz targets share: the libFuzzer entry
 * point's prototype and a check that stops the run on a broken invariant.
 *
 * A target does more than look for crashes: it checks, on every input, the
 * promises its module's header makes (outputs NUL-terminated, one-line
 * reasons, nothing returned on failure, round trips). A broken promise
 * aborts, which libFuzzer (or replay.c) reports like a crash, with the
 * input saved.
 */
#ifndef HINTFS_TESTS_FUZZ_H
#define HINTFS_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: invariant broken: %s\n",       \
				__FILE__, __LINE__, #cond);                    \
			abort();                                               \
		}                                                              \
	} while (0)

/* A malloc'd NUL-terminated copy of @len bytes of @p (never NULL: an
 * allocation failure is a crash worth seeing). */
static inline char *fuzz_strndup(const void *p, size_t len)
{
	char *s = malloc(len + 1);

	FUZZ_CHECK(s != NULL);
	for (size_t i = 0; i < len; i++)
		s[i] = ((const char *)p)[i];
	s[len] = '\0';
	return s;
}

#endif /* HINTFS_TESTS_FUZZ_H */
