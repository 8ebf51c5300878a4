/*
 * tests/unit/bench_mount.c - the time of a warm mount of N objects, and
 * where it goes, without a server: the fs core over the in-memory S3
 * (fake_s3.c). A cold mount lists N tiny objects (ImageNet's names, in folders
 * of 100 as `bench.sh scale` makes them, or -p K), every object is fetched into
 * the cache, and then the mount is made again, as a restarted daemon makes it:
 * from the listing saved in the cache, with an index of N entries to open.
 * Prints the seconds of each step; run under `perf record` for the
 * functions, with -w its peak memory. Not a test: `meson test --benchmark
 * bench_mount`, or build/tests/unit/bench_mount [-p K] [-F] [-w] [N
 * [CACHE_DIR]] (usage()).
 */
#include "fake_s3.h"
#include "fs_stats.h"
#include "fs/fs.h"
#include "common/clock.h"

#include <fcntl.h>
#include <getopt.h>
#include <sys/resource.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This process's CPU time so far (user + system), in seconds. */
static double cpu_secs(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

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

/* The peak resident memory of this process so far, in MB (VmHWM). */
static long peak_mb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmHWM:", 6))
			kb = strtol(line + 6, NULL, 10);
	if (f)
		fclose(f);
	return kb < 0 ? -1 : kb / 1024;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_mount [-p PER_FOLDER] [-F] [-w] [N [CACHE_DIR]]\n"
		"  -p K  K objects a folder (100; 1281 for ImageNet's layout)\n"
		"  -F    fetch no object: the warm mounts open an empty index\n"
		"  -w    warm mounts only, of CACHE_DIR made before (a fresh\n"
		"        process: its peak memory is the mount's)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned long n = 300000, per = 100;
	char tmpl[] = "/tmp/hintfs-bench-mount-XXXXXX";
	bool fetch = true, warm_only = false;
	const char *dir = NULL;
	char key[96], body[256];
	struct fs *fs;
	double secs;
	uint64_t t0;
	int opt;

	while ((opt = getopt(argc, argv, "p:Fw")) != -1) {
		switch (opt) {
		case 'p':
			per = strtoul(optarg, NULL, 10);
			break;
		case 'F':
			fetch = false;
			break;
		case 'w':
			warm_only = true;
			break;
		default:
			usage();
		}
	}
	if (optind < argc)
		n = strtoul(argv[optind++], NULL, 10);
	if (optind < argc)
		dir = argv[optind++];
	if (optind < argc || !per || (warm_only && !dir))
		usage();
	if (warm_only)
		goto warm;
	if (!dir)
		dir = mkdtemp(tmpl);
	if (!dir) {
		perror("mkdtemp");
		return 1;
	}
	memset(body, 'x', sizeof(body));
	fake_s3_reset();
	t0 = mono_ns();
	for (unsigned long i = 0; i < n; i++) {
		/* ImageNet's names: train/nXXXXXXXX/nXXXXXXXX_N.JPEG */
		snprintf(key, sizeof(key), "train/n%08lu/n%08lu_%lu.JPEG",
			 i / per, i / per, i);
		if (fake_s3_put(key, body, 37)) {
			fprintf(stderr, "bench_mount: out of memory\n");
			return 1;
		}
	}
	printf("objects %lu in folders of %lu, made in %.2f s\n", n, per,
	       (double)(mono_ns() - t0) / 1e9);

	fs = mount_fs(dir, &secs);
	printf("cold mount (listing): %.3f s\n", secs);
	if (fetch) {
		t0 = mono_ns();
		if (ctl_send(fs, "warm", ".\n", 2)) {
			fprintf(stderr, "bench_mount: warm refused\n");
			return 1;
		}
		while (fs_stat_of(fs, "cache", "objects") < (long long)n)
			usleep(100000);
		printf("every object cached in %.2f s\n",
		       (double)(mono_ns() - t0) / 1e9);
	}
	fs_destroy(fs);
warm:
	for (int round = 0; round < 3; round++) {
		double cpu = cpu_secs();

		fs = mount_fs(dir, &secs);
		printf("warm mount %d: %.3f s (CPU %.3f s), peak memory %ld "
		       "MB\n",
		       round + 1, secs, cpu_secs() - cpu, peak_mb());
		fs_destroy(fs);
	}
	if (dir == tmpl) {
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd))
			fprintf(stderr, "cannot remove %s\n", dir);
	}
	return 0;
}
