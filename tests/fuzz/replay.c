/*
 * tests/fuzz/replay.c - runs a fuzz target's LLVMFuzzerTestOneInput() over
 * files, without libFuzzer: how every build (gcc, ASan or not) replays the
 * seed corpora and the inputs of past crashes as a unit test.
 *
 * Usage: replay_<target> PATH...   (a PATH may be a folder: all its files)
 * Exit 0 when every input ran (a broken invariant aborts instead), 1 on a
 * bad path or when no input was found: the seeds are in the source tree,
 * so a replay of nothing tested nothing and must not pass (check.h's rule).
 */
#include "fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

static size_t n_run;

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return 1;
	}
	do {
		if (len == cap) {
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			FUZZ_CHECK(buf != NULL);
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	LLVMFuzzerTestOneInput((const uint8_t *)buf, len);
	free(buf);
	n_run++;
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int run_path(const char *path)
{
	struct dirent **ents;
	struct stat st;
	int n, rc = 0;

	if (stat(path, &st) < 0) {
		/* A missing folder is an empty corpus, not a failure. */
		return errno == ENOENT ? 0 : 1;
	}
	if (!S_ISDIR(st.st_mode))
		return run_file(path);
	n = scandir(path, &ents, NULL, by_name);
	if (n < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		char sub[4096];

		if (ents[i]->d_name[0] != '.' &&
		    (size_t)snprintf(sub, sizeof(sub), "%s/%s", path,
				     ents[i]->d_name) < sizeof(sub))
			rc |= run_path(sub);
		free(ents[i]);
	}
	free(ents);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = 0;

	for (int i = 1; i < argc; i++)
		rc |= run_path(argv[i]);
	printf("replay: %zu inputs\n", n_run);
	if (rc)
		return 1;
	if (!n_run) {
		fprintf(stderr, "replay: no input found: nothing was tested\n");
		return 1;
	}
	return 0;
}
