/*
 * tests/unit/bench_mount.c - the time of a warm mount of N objects, and
 * where it goes, without a server: the fs core over the in-memory S3
 * (fake_s3.c). A cold mount lists N tiny objects (in folders of 100, as
 * `bench.sh scale` makes them), every object is fetched into the cache,
 * and then the mount is made again, as a restarted daemon makes it: from
 * the listing saved in the cache, with an index of N entries to open.
 * Prints the seconds of each step; run under `perf record` for the
 * functions. Not a test: `meson test --benchmark bench_mount`, or
 * build/tests/unit/bench_mount [N] [CACHE_DIR].
 */
#include "fake_s3.h"
#include "fs_stats.h"
#include "fs/fs.h"
#include "common/clock.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct fs *mount_fs(const char *dir, double *secs)
{
	struct fs_config cfg = {
	    .s3 = {.bucket = "b",
		   .endpoint = "http://127.0.0.1:9",
		   .region = "us-east-1",
		   .path_style = true,
		   .no_sign = true},
	    .prefix = "",
	    .mountpoint = "/mnt/b",
	    .uid = 1000,
	    .gid = 1000,
	    .cache_dir = dir,
	    .cache_size = 4ull << 30,
	};
	struct fs *fs = NULL;
	char err[512] = "";
	uint64_t t0 = mono_ns();

	if (fs_create(&cfg, &fs, err, sizeof(err))) {
		fprintf(stderr, "bench_mount: fs_create: %s\n", err);
		exit(1);
	}
	*secs = (double)(mono_ns() - t0) / 1e9;
	return fs;
}

int main(int argc, char **argv)
{
	unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 300000;
	char tmpl[] = "/tmp/hintfs-bench-mount-XXXXXX";
	const char *dir = argc > 2 ? argv[2] : mkdtemp(tmpl);
	char key[64], body[256];
	struct fs *fs;
	double secs;
	uint64_t t0;

	if (!dir) {
		perror("mkdtemp");
		return 1;
	}
	memset(body, 'x', sizeof(body));
	fake_s3_reset();
	t0 = mono_ns();
	for (unsigned long i = 0; i < n; i++) {
		snprintf(key, sizeof(key), "d%05lu/f%07lu.bin", i / 100, i);
		if (fake_s3_put(key, body, sizeof(body))) {
			fprintf(stderr, "bench_mount: out of memory\n");
			return 1;
		}
	}
	printf("objects %lu, made in %.2f s\n", n,
	       (double)(mono_ns() - t0) / 1e9);

	fs = mount_fs(dir, &secs);
	printf("cold mount (listing): %.3f s\n", secs);
	t0 = mono_ns();
	if (ctl_send(fs, "warm", ".\n", 2)) {
		fprintf(stderr, "bench_mount: warm refused\n");
		return 1;
	}
	while (fs_stat_of(fs, "cache", "objects") < (long long)n)
		usleep(100000);
	printf("every object cached in %.2f s\n",
	       (double)(mono_ns() - t0) / 1e9);
	fs_destroy(fs);

	for (int round = 0; round < 3; round++) {
		fs = mount_fs(dir, &secs);
		printf("warm mount %d: %.3f s\n", round + 1, secs);
		fs_destroy(fs);
	}
	if (argc <= 2) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "cannot remove %s\n", dir);
	}
	return 0;
}
