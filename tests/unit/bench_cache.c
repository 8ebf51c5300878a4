/*
 * tests/unit/bench_cache.c - what a file per object (file_per_object)
 * costs against shared segments, at scale: N objects of SIZE bytes are
 * put (in commits of 64, as the engine's writer makes them), the cache is
 * closed, and a fresh process opens it and reads. For each mode it prints
 * the put rate (and that of the last tenth, which would fall if a put did
 * work that grows with the cache), the close, the disk used per object
 * (blocks of the blob files and of the directory, the index apart), the
 * time and the memory of cache_open(), and the cost of a read: by copy
 * (cache_read() of the whole object), by reference (cache_read_ref()
 * with a callback that takes nothing: the lookup and, for a file of its
 * own, the open and close of its fd) and, for files of their own,
 * cache_open_file() and a close; last, puts into the full cache, each of
 * which evicts one object.
 *
 * Not a test (timings): `meson test -C build --benchmark bench_cache`, or
 * build/tests/unit/bench_cache [N [SIZE [INLINE_MAX [DIR [MODE]]]]] (MODE:
 * shared, own, or both, the default); the directories it makes under
 * DIR (default /tmp) are removed at the end.
 * Run it under `nice`: it writes N * SIZE bytes twice.
 */
#include "cache/cache.h"
#include "common/clock.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The engine's writer commits up to 64 objects at once. */
#define BENCH_BATCH 64
/* Reads timed per kind: enough for a stable mean, few enough that the
 * bench is not mostly reading. */
#define BENCH_READS 100000

static unsigned long n_objs = 100000;
static size_t obj_bytes = 20000, inline_max = 16384;

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static double since(uint64_t t0)
{
	return (double)(mono_ns() - t0) / 1e9;
}

/* A line of /proc/self/status in KiB (VmRSS, RssAnon, ...). */
static long status_kib(const char *field)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, strlen(field)) &&
		    line[strlen(field)] == ':')
			v = atol(line + strlen(field) + 1);
	if (f)
		fclose(f);
	return v;
}

/* Opens @dir; @full: with room for exactly the N objects, so that each
 * further put evicts one. */
static struct cache *bench_open(const char *dir, bool own, bool full)
{
	struct cache_config cfg = {
	    .dir = dir,
	    .capacity = full ? (uint64_t)n_objs * obj_bytes
			     : (uint64_t)n_objs * obj_bytes * 2 + (1ull << 30),
	    .inline_max = inline_max,
	    .file_per_object = own,
	};
	struct cache *c = NULL;
	char err[512];

	if (cache_open(&cfg, &c, err, sizeof(err))) {
		fprintf(stderr, "bench_cache: %s\n", err);
		exit(1);
	}
	return c;
}

static void key_of(unsigned long i, char *key, size_t len)
{
	snprintf(key, len, "train/d%05lu/img%08lu.jpg", i / 1000, i);
}

/* Puts every object; prints the rates. */
static void bench_put(const char *dir, bool own)
{
	struct cache_put *ps[BENCH_BATCH];
	int rcs[BENCH_BATCH];
	unsigned char *body = malloc(obj_bytes);
	struct cache *c = bench_open(dir, own, false);
	uint64_t t0 = mono_ns(), t_tail = 0;
	double cpu0 = cpu_s(), secs;
	size_t n = 0;
	char key[64];

	for (size_t i = 0; i < obj_bytes; i++)
		body[i] = (unsigned char)(i * 131 + 7);
	for (unsigned long i = 0; i < n_objs; i++) {
		int rc;

		if (i == n_objs - n_objs / 10)
			t_tail = mono_ns();
		key_of(i, key, sizeof(key));
		memcpy(body, &i, sizeof(i)); /* no two alike */
		rc = cache_put_begin(c, key, strlen(key), "\"e\"", obj_bytes,
				     CACHE_NEVER, CACHE_NO_ID, &ps[n]);
		if (!rc)
			rc = cache_put_write(ps[n], 0, body, obj_bytes);
		if (rc) {
			fprintf(stderr, "bench_cache: put %lu: %s\n", i,
				strerror(-rc));
			exit(1);
		}
		if (++n == BENCH_BATCH || i + 1 == n_objs) {
			if (cache_put_commit_many(ps, n, rcs)) {
				fprintf(stderr, "bench_cache: commit failed\n");
				exit(1);
			}
			n = 0;
		}
	}
	secs = since(t0);
	printf("  put: %.0f objects/s (last tenth %.0f/s), %.1f us CPU "
	       "each\n",
	       n_objs / secs, (n_objs / 10) / since(t_tail),
	       (cpu_s() - cpu0) * 1e6 / n_objs);
	t0 = mono_ns();
	cache_close(c);
	printf("  close (data to disk): %.2f s\n", since(t0));
	free(body);
}

static uint64_t du_blob, du_dir, du_index;
static unsigned long n_files;

static int du_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	const char *name = path + ftw->base;
	uint64_t bytes = (uint64_t)st->st_blocks * 512;

	if (flag == FTW_D)
		du_dir += bytes;
	else if (!strncmp(name, "seg-", 4) || !strncmp(name, "obj-", 4)) {
		du_blob += bytes;
		n_files++;
	} else if (!strncmp(name, "index.mdb", 9))
		du_index += bytes;
	return 0;
}

static void bench_du(const char *dir)
{
	du_blob = du_dir = du_index = 0;
	n_files = 0;
	nftw(dir, du_one, 16, FTW_PHYS);
	printf("  disk: %.0f bytes of blob files per object (%lu files; "
	       "%.3f x the object), %.1f of directory, %.0f of index\n",
	       (double)du_blob / n_objs, n_files,
	       (double)du_blob / n_objs / obj_bytes, (double)du_dir / n_objs,
	       (double)du_index / n_objs);
}

static ssize_t take_nothing(void *arg, const struct cache_ref *ref)
{
	(void)arg;
	return (ssize_t)ref->len;
}

/*
 * Puts a tenth more objects into the full cache @c: each evicts one (a
 * hole punched, or a file unlinked) and writes one, as a cache smaller
 * than its dataset does at every miss.
 */
static void bench_churn(struct cache *c, unsigned char *body)
{
	unsigned long n = n_objs / 10 ? n_objs / 10 : 1;
	struct cache_stats st0, st;
	uint64_t t0 = mono_ns();
	double cpu0 = cpu_s();
	char key[64];

	cache_get_stats(c, &st0);
	for (unsigned long i = n_objs; i < n_objs + n; i++) {
		struct cache_put *p;

		key_of(i, key, sizeof(key));
		memcpy(body, &i, sizeof(i));
		if (cache_put_begin(c, key, strlen(key), "\"e\"", obj_bytes,
				    CACHE_NEVER, CACHE_NO_ID, &p) ||
		    cache_put_write(p, 0, body, obj_bytes) ||
		    cache_put_commit(p)) {
			fprintf(stderr, "bench_cache: churn put %lu failed\n",
				i);
			exit(1);
		}
	}
	cache_get_stats(c, &st);
	printf("  put into a full cache (one eviction each): %.0f "
	       "objects/s, %.1f us CPU each (%llu evicted)\n",
	       n / since(t0), (cpu_s() - cpu0) * 1e6 / n,
	       (unsigned long long)(st.evictions - st0.evictions));
}

/* In a fresh process (argv: --open DIR OWN): the open and the reads. */
static int bench_reopen(const char *dir, bool own)
{
	long rss0 = status_kib("VmRSS"), anon0 = status_kib("RssAnon");
	unsigned long reads = n_objs < BENCH_READS ? n_objs : BENCH_READS;
	unsigned char *buf = malloc(obj_bytes);
	unsigned seed = 1;
	struct cache_stats st;
	struct cache *c;
	uint64_t t0 = mono_ns();
	double cpu0 = cpu_s(), secs;
	char key[64];

	c = bench_open(dir, own, true);
	secs = since(t0);
	cache_get_stats(c, &st);
	printf("  cache_open: %.2f s (%.2f s CPU) for %llu objects; RSS +%ld "
	       "MiB (anonymous +%ld MiB)\n",
	       secs, cpu_s() - cpu0, (unsigned long long)st.objects,
	       (status_kib("VmRSS") - rss0) / 1024,
	       (status_kib("RssAnon") - anon0) / 1024);

	/* The same keys twice: the first read of each is checked. */
	for (int pass = 0; pass < 2; pass++) {
		seed = 1;
		t0 = mono_ns();
		for (unsigned long r = 0; r < reads; r++) {
			struct cache_obj o;

			key_of((unsigned long)rand_r(&seed) % n_objs, key,
			       sizeof(key));
			if (cache_lookup(c, key, strlen(key), "\"e\"",
					 obj_bytes, &o) ||
			    cache_read(c, &o, buf, obj_bytes, 0) !=
				(ssize_t)obj_bytes) {
				fprintf(stderr, "bench_cache: read %s failed\n",
					key);
				return 1;
			}
		}
		printf("  cache_read, whole object, %s: %.2f us\n",
		       pass ? "checked already" : "first (with the checksum)",
		       since(t0) * 1e6 / reads);
	}
	seed = 1;
	t0 = mono_ns();
	for (unsigned long r = 0; r < reads; r++) {
		key_of((unsigned long)rand_r(&seed) % n_objs, key, sizeof(key));
		if (cache_read_ref(c, key, strlen(key), "\"e\"", obj_bytes,
				   obj_bytes, 0, take_nothing,
				   NULL) != (ssize_t)obj_bytes) {
			fprintf(stderr, "bench_cache: ref %s failed\n", key);
			return 1;
		}
	}
	printf("  cache_read_ref, nothing taken: %.2f us\n",
	       since(t0) * 1e6 / reads);
	if (own) {
		seed = 1;
		t0 = mono_ns();
		for (unsigned long r = 0; r < reads; r++) {
			int fd;

			key_of((unsigned long)rand_r(&seed) % n_objs, key,
			       sizeof(key));
			fd = cache_open_file(c, key, strlen(key), "\"e\"",
					     obj_bytes);
			if (fd < 0) {
				fprintf(stderr, "bench_cache: open %s: %s\n",
					key, strerror(-fd));
				return 1;
			}
			close(fd);
		}
		printf("  cache_open_file + close: %.2f us\n",
		       since(t0) * 1e6 / reads);
	}
	bench_churn(c, buf);
	cache_close(c);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	const char *base, *mode;
	char dir[512];

	if (argc == 7 && !strcmp(argv[1], "--open")) {
		n_objs = strtoul(argv[4], NULL, 10);
		obj_bytes = strtoul(argv[5], NULL, 10);
		inline_max = strtoul(argv[6], NULL, 10);
		return bench_reopen(argv[2], argv[3][0] == '1');
	}
	if (argc > 1)
		n_objs = strtoul(argv[1], NULL, 10);
	if (argc > 2)
		obj_bytes = strtoul(argv[2], NULL, 10);
	if (argc > 3)
		inline_max = strtoul(argv[3], NULL, 10);
	base = argc > 4 ? argv[4] : "/tmp";
	mode = argc > 5 ? argv[5] : "both";
	if (!n_objs || obj_bytes <= inline_max) {
		fprintf(stderr, "usage: bench_cache [N [SIZE [INLINE_MAX "
				"[DIR]]]] with SIZE > INLINE_MAX\n");
		return 2;
	}
	printf("%lu objects of %zu bytes, inline_max %zu\n", n_objs, obj_bytes,
	       inline_max);
	for (int own = 0; own < 2; own++) {
		char a_n[32], a_s[32], a_i[32], cmd[600];
		int status = 0;
		pid_t pid;

		if (strcmp(mode, "both") &&
		    strcmp(mode, own ? "own" : "shared"))
			continue;
		snprintf(dir, sizeof(dir), "%s/hintfs-bench-cache-XXXXXX",
			 base);
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
		printf("%s:\n", own ? "a file per object" : "shared segments");
		bench_put(dir, own);
		bench_du(dir);
		snprintf(a_n, sizeof(a_n), "%lu", n_objs);
		snprintf(a_s, sizeof(a_s), "%zu", obj_bytes);
		snprintf(a_i, sizeof(a_i), "%zu", inline_max);
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "--open", dir,
			      own ? "1" : "0", a_n, a_s, a_i, (char *)NULL);
			_exit(127);
		}
		waitpid(pid, &status, 0);
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "cannot remove %s\n", dir);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			return 1;
	}
	return 0;
}
